"""The session's quarantine gate (``runstore.recorder._quarantine``): when it masks the exit
status, over every combination of failing, flipped and quarantined tests."""

from __future__ import annotations

from datetime import date

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runstore.quarantine import Quarantine, QuarantineEntry
from runstore.recorder._quarantine import QuarantineGate
from runstore.services.test_runs import Outcome, Phase, PhaseResult, TestResult

NODEIDS = ("t.py::a", "t.py::b", "t.py::c", "u.py::d")
TODAY = date(2027, 1, 15)


def _result(nodeid: str, outcome: Outcome, attempts: tuple[Outcome, ...] = ()) -> TestResult:
    def one(o: Outcome) -> TestResult:
        return TestResult(nodeid, nodeid.partition("::")[0], nodeid.partition("::")[2],
                          (PhaseResult(Phase.CALL, o, 1.0),))
    return TestResult(nodeid, nodeid.partition("::")[0], nodeid.partition("::")[2],
                      (PhaseResult(Phase.CALL, outcome, 1.0),),
                      attempts=tuple(one(a) for a in attempts))


ENTRIES = (
    QuarantineEntry("a", "r", date(2027, 2, 1), nodeid="t.py::a"),
    QuarantineEntry("b", "r", date(2027, 2, 1), pattern="t.py::[bc]"),
    QuarantineEntry("c", "r", date(2027, 1, 14), pattern="u.py::*"),  # expired yesterday
)


@given(
    outcomes=st.lists(st.sampled_from([Outcome.PASSED, Outcome.FAILED, Outcome.ERROR,
                                       Outcome.SKIPPED]), min_size=4, max_size=4),
    failed_attempt=st.lists(st.booleans(), min_size=4, max_size=4),
    flipped=st.sets(st.sampled_from(NODEIDS)),
    entries=st.sets(st.sampled_from(range(len(ENTRIES)))),
    exitstatus=st.sampled_from(list(pytest.ExitCode)),
    collection_errors=st.booleans(),
    interrupted=st.booleans(),
)
def test_the_exit_status_is_masked_exactly_when_every_failure_is_quarantined(
    outcomes: list[Outcome], failed_attempt: list[bool], flipped: set[str], entries: set[int],
    exitstatus: pytest.ExitCode, collection_errors: bool, interrupted: bool,
) -> None:
    quarantine = Quarantine("q.toml", tuple(ENTRIES[i] for i in sorted(entries)))
    gate = QuarantineGate(quarantine, day=TODAY)
    failing = set()
    for nodeid, outcome, attempt in zip(NODEIDS, outcomes, failed_attempt, strict=True):
        gate.item(_result(nodeid, outcome, (Outcome.FAILED,) if attempt else ()))
        if outcome in (Outcome.FAILED, Outcome.ERROR) or attempt:
            failing.add(nodeid)
    covered = {n for n in NODEIDS if any(e.matches(n) and e.is_active(TODAY)
                                         for e in quarantine.entries)}
    decided = gate.decide(int(exitstatus), flipped, collection_errors=collection_errors,
                          interrupted=interrupted)
    masks = (exitstatus == pytest.ExitCode.TESTS_FAILED and bool(failing | flipped)
             and (failing | flipped) <= covered and not collection_errors and not interrupted)
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
    assert gate.decide(1, (), collection_errors=False, interrupted=False) == 1
    assert gate.lines() == ["runstore: quarantine not applied: q.toml: not TOML: x"]
