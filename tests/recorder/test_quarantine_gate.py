"""The session's quarantine gate (``runstore.recorder._quarantine``): when it masks the exit
status, over every combination of failing, flipped and quarantined tests."""

from __future__ import annotations

from datetime import date
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runstore.quarantine import Quarantine, QuarantineEntry
from runstore.recorder._quarantine import QuarantineGate
from runstore.services.test_runs import Outcome, Phase, PhaseResult, TestResult

NODEIDS = ("t.py::a", "t.py::b", "t.py::c", "u.py::d")
TODAY = date(2027, 1, 15)


def _result(nodeid: str, outcome: Outcome, attempts: tuple[Outcome, ...] = (), *,
            teardown: Outcome = Outcome.PASSED) -> TestResult:
    def one(o: Outcome) -> TestResult:
        return TestResult(nodeid, nodeid.partition("::")[0], nodeid.partition("::")[2],
                          (PhaseResult(Phase.CALL, o, 1.0),))
    return TestResult(nodeid, nodeid.partition("::")[0], nodeid.partition("::")[2],
                      (PhaseResult(Phase.CALL, outcome, 1.0),
                       PhaseResult(Phase.TEARDOWN, teardown, 1.0)),
                      attempts=tuple(one(a) for a in attempts))


def _feed(gate: QuarantineGate, result: TestResult) -> int:
    """Hand ``gate`` the reports of ``result`` as pytest logs them, then the item; the
    failures pytest counts of them (a failed earlier attempt is logged as ``rerun``)."""
    for _ in result.attempts:
        gate.report(SimpleNamespace(nodeid=result.nodeid, outcome="rerun", when="call"))
    failed = [p for p in result.phases if p.outcome in (Outcome.FAILED, Outcome.ERROR)]
    for phase in result.phases:
        outcome = "failed" if phase in failed else "passed"
        gate.report(SimpleNamespace(nodeid=result.nodeid, outcome=outcome,
                                    when=phase.phase.value))
    gate.item(result)
    return len(failed)


ENTRIES = (
    QuarantineEntry("a", "r", date(2027, 2, 1), nodeid="t.py::a"),
    QuarantineEntry("b", "r", date(2027, 2, 1), pattern="t.py::[bc]"),
    QuarantineEntry("c", "r", date(2027, 1, 14), pattern="u.py::*"),  # expired yesterday
)


@given(
    outcomes=st.lists(st.sampled_from([Outcome.PASSED, Outcome.FAILED, Outcome.ERROR,
                                       Outcome.SKIPPED]), min_size=4, max_size=4),
    failed_attempt=st.lists(st.booleans(), min_size=4, max_size=4),
    torn=st.lists(st.booleans(), min_size=4, max_size=4),
    bumped=st.integers(0, 2),
    flipped=st.sets(st.sampled_from(NODEIDS)),
    entries=st.sets(st.sampled_from(range(len(ENTRIES)))),
    exitstatus=st.sampled_from(list(pytest.ExitCode)),
    collection_errors=st.booleans(),
    interrupted=st.booleans(),
)
def test_the_exit_status_is_masked_exactly_when_every_failure_is_quarantined(
    outcomes: list[Outcome], failed_attempt: list[bool], torn: list[bool], bumped: int,
    flipped: set[str], entries: set[int], exitstatus: pytest.ExitCode,
    collection_errors: bool, interrupted: bool,
) -> None:
    quarantine = Quarantine("q.toml", tuple(ENTRIES[i] for i in sorted(entries)))
    gate = QuarantineGate(quarantine, day=TODAY)
    failing, teardowns, testsfailed = set(), set(), bumped  # a plugin may add to the count
    for nodeid, outcome, attempt, tear in zip(NODEIDS, outcomes, failed_attempt, torn,
                                              strict=True):
        testsfailed += _feed(gate, _result(
            nodeid, outcome, (Outcome.FAILED,) if attempt else (),
            teardown=Outcome.FAILED if tear else Outcome.PASSED))
        if outcome in (Outcome.FAILED, Outcome.ERROR) or tear:  # a passed rerun does not fail
            failing.add(nodeid)
        if tear:
            teardowns.add(nodeid)
    covered = {n for n in NODEIDS if any(e.matches(n) and e.is_active(TODAY)
                                         for e in quarantine.entries)}
    decided = gate.decide(int(exitstatus), flipped, testsfailed=testsfailed,
                          collection_errors=collection_errors, interrupted=interrupted)
    masks = (exitstatus == pytest.ExitCode.TESTS_FAILED and bool(failing | flipped)
             and (failing | flipped) <= covered and not teardowns and not bumped
             and not collection_errors and not interrupted)
    assert decided == (0 if masks else int(exitstatus))
    assert gate.masked == masks
    assert [m.nodeid for m in gate.marks()] == sorted(covered)
    if 2 in entries:  # the expired pattern is reported for the test it would have covered
        assert any("u.py::* (owner c) expired after 2027-01-14" in line
                   for line in gate.lines())


def test_an_unreadable_file_quarantines_nothing() -> None:
    from runstore.quarantine import QuarantineFileError

    gate = QuarantineGate(None, QuarantineFileError("q.toml", "syntax", "not TOML: x"))
    gate.item(_result("t.py::a", Outcome.FAILED))
    assert gate.decide(1, (), testsfailed=1, collection_errors=False, interrupted=False) == 1
    assert gate.lines() == ["runstore: quarantine not applied: q.toml: not TOML: x"]


def _quarantined_gate() -> QuarantineGate:
    return QuarantineGate(Quarantine("q.toml", ENTRIES), day=TODAY)


def _decided(gate: QuarantineGate, testsfailed: int) -> tuple[int, list[str]]:
    """The exit status of a "tests failed" session, and the lines."""
    status = gate.decide(1, (), testsfailed=testsfailed, collection_errors=False,
                         interrupted=False)
    return status, gate.lines()


def test_a_failure_pytest_counted_beyond_the_test_reports_is_never_masked() -> None:
    gate = _quarantined_gate()
    testsfailed = _feed(gate, _result("t.py::a", Outcome.FAILED)) + 1  # --cov-fail-under
    assert _decided(gate, testsfailed) == (1, [
        "runstore: 1 quarantined failure (t.py::a) by t.py::a (owner a, until 2027-02-01): "
        "the session still fails: pytest counted 2 failures where the test reports have 1 "
        "(a plugin failed the session, such as pytest-cov's --cov-fail-under)"])


def test_a_failed_teardown_of_a_quarantined_test_is_never_masked() -> None:
    gate = _quarantined_gate()
    testsfailed = _feed(gate, _result("t.py::a", Outcome.PASSED, teardown=Outcome.FAILED))
    assert _decided(gate, testsfailed) == (1, [
        "runstore: 1 quarantined failure (t.py::a) by t.py::a (owner a, until 2027-02-01): "
        "the session still fails: the teardown of t.py::a failed, which is never masked (it "
        "may be a module- or session-scoped fixture's)"])


def test_a_test_that_passed_on_a_rerun_does_not_fail() -> None:
    gate = _quarantined_gate()
    testsfailed = _feed(gate, _result("t.py::a", Outcome.FAILED))
    testsfailed += _feed(gate, _result("u.py::e", Outcome.PASSED, (Outcome.FAILED,)))
    assert _decided(gate, testsfailed)[0] == 0
    assert gate.unmasked == set()


def test_a_rerun_takes_back_its_failed_subtests_as_pytest_rerunfailures_does() -> None:
    gate = _quarantined_gate()
    subtest = SimpleNamespace(nodeid="t.py::a", outcome="failed", when="call",
                              context=SimpleNamespace(msg="m", kwargs={}))
    gate.report(subtest)
    gate.report(SimpleNamespace(nodeid="t.py::a", outcome="rerun", when="call"))
    assert gate.reported == 0
    gate.report(subtest)
    testsfailed = _feed(gate, _result("t.py::a", Outcome.FAILED)) + 1  # the subtest's
    assert gate.reported == testsfailed == 2
    assert _decided(gate, testsfailed)[0] == 0


def test_another_exit_status_is_named_as_never_masked() -> None:
    gate = _quarantined_gate()
    testsfailed = _feed(gate, _result("t.py::a", Outcome.FAILED))
    assert gate.decide(3, (), testsfailed=testsfailed, collection_errors=False,
                       interrupted=False) == 3
    assert gate.lines()[0].endswith(
        "the session still fails: exit status 3 is never masked (only 1, tests failed)")
