"""The attempts part of the test-run contract: earlier attempts with their source (a rerun
plugin's ``rerun`` or runstore's own ``repeat``), the passing earlier attempts a history
entry keeps (``HistoryEntry.earlier_passes``), the verdict they lead to
(``flipped_in_run``), and ``DataReader.known_tests``, which early flake detection asks.

:class:`AttemptsContract` is mixed into ``TestRunsReaderContract`` and uses its ``store``,
``reader`` and ``layer_factory`` fixtures, so every layer that runs the contract runs these.
Its property draws the earlier attempts of an item (outcome and source each) and its final
outcome, and checks what every reader method gives back against what was written.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any, ClassVar

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from returns.result import Failure

from runstore.services.errors import InvalidInput, NotFound
from runstore.services.test_runs import (
    FAILING_OUTCOMES,
    FLAKY_RULES,
    AttemptSource,
    Classification,
    DataReader,
    DataStore,
    EvidenceRule,
    FlakyPolicy,
    Outcome,
    Phase,
    PhaseResult,
    RunId,
    RunStart,
    TestResult,
)
from runstore.testing._shared import LayerFactory
from runstore.testing._test_runs_policy import _T0_MS, _ok, _open, _run, _utc

__all__ = ["AttemptsContract", "attempt_lists"]

_PASSING = frozenset({Outcome.PASSED, Outcome.XPASSED})
_CALL_OUTCOMES = (Outcome.PASSED, Outcome.FAILED, Outcome.XPASSED, Outcome.SKIPPED)
_NODEIDS = ("t.py::a", "t.py::b", "t.py::c[1]", "u/t.py::C::d", "t.py::é", "t.py::f")


def _item(nodeid: str, outcome: Outcome, source: AttemptSource = AttemptSource.RERUN,
          ms: float = 1.0) -> TestResult:
    return TestResult(nodeid, "t.py", nodeid.split("::")[-1],
                      (PhaseResult(Phase.CALL, outcome, ms),), source=source)


def attempt_lists(max_size: int = 4) -> st.SearchStrategy[list[tuple[Outcome, AttemptSource]]]:
    """Earlier attempts of one item, oldest first: a call outcome and a source each."""
    return st.lists(
        st.tuples(st.sampled_from(_CALL_OUTCOMES), st.sampled_from(list(AttemptSource))),
        max_size=max_size,
    )


_EXAMPLES = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors],
)


class AttemptsContract:
    """Attempt sources and passing earlier attempts; the ``store``, ``reader`` and
    ``layer_factory`` fixtures come from the contract class it is mixed into."""

    __test__: ClassVar[bool] = False

    @_EXAMPLES
    @given(earlier=attempt_lists(), final=st.sampled_from(_CALL_OUTCOMES))
    def test_each_attempt_keeps_its_outcome_and_source(
        self,
        layer_factory: LayerFactory,
        earlier: list[tuple[Outcome, AttemptSource]],
        final: Outcome,
    ) -> None:
        attempts = tuple(_item("t.py::x", o, s, ms=2.0 + n) for n, (o, s) in enumerate(earlier))
        item = attrs.evolve(_item("t.py::x", final), attempts=attempts)
        with ExitStack() as stack:
            c = _open(stack, layer_factory)
            store, reader = c.get(DataStore), c.get(DataReader)
            run = _run(store, 0, [item])
            detail = _ok(reader.test_detail(run, "t.py::x"))
            assert detail.test.source is None
            assert detail.test.attempts == len(earlier)
            assert [(a.outcome, a.source, a.duration_ms) for a in detail.attempts] == [
                (o, s, 2.0 + n) for n, (o, s) in enumerate(earlier)
            ]
            if final is Outcome.SKIPPED:  # not executed: history keeps nothing
                assert reader.history("alpha", "t.py::x") == Failure(NotFound("test", "t.py::x"))
                return
            (entry,) = _ok(reader.history("alpha", "t.py::x"))
            assert entry.earlier_passes == sum(1 for o, _ in earlier if o in _PASSING)
            assert entry.rerun_failures == sum(1 for o, _ in earlier if o in FAILING_OUTCOMES)

    def test_an_attempt_source_that_is_not_one_is_invalid_and_writes_nothing(
        self, store: DataStore, reader: DataReader
    ) -> None:
        bad: Any = "retry"
        attempt = attrs.evolve(_item("t.py::x", Outcome.FAILED), source=bad)
        item = attrs.evolve(_item("t.py::x", Outcome.PASSED), attempts=(attempt,))
        run: RunId = _ok(store.begin_run(RunStart("alpha", "inv", _utc(_T0_MS))))
        result = store.record_results(run, [item])
        assert isinstance(result, Failure), result
        error = result.failure()
        assert isinstance(error, InvalidInput), error
        assert error.field == "results[0].attempts[0].source", error
        assert _ok(reader.tests(run)) == ()

    def test_a_failure_after_a_passing_repeat_is_flaky_flipped_in_run(
        self, store: DataStore, reader: DataReader
    ) -> None:
        passed = _item("t.py::x", Outcome.PASSED, AttemptSource.REPEAT)
        flipped = attrs.evolve(_item("t.py::x", Outcome.FAILED), attempts=(passed, passed))
        steady = attrs.evolve(_item("t.py::y", Outcome.FAILED),
                              attempts=(_item("t.py::y", Outcome.FAILED, AttemptSource.REPEAT),))
        run = _run(store, 0, [flipped, steady])
        verdicts = {c.nodeid: c for c in _ok(reader.classify(run))}
        x, y = verdicts["t.py::x"], verdicts["t.py::y"]
        assert (x.classification, x.because.rule, x.because.run_ids) == (
            Classification.FLAKY, EvidenceRule.FLIPPED_IN_RUN, (run,))
        assert x.because.summary == (
            f"failed after passing 2 earlier attempts in the same run (run {run})")
        assert (y.classification, y.because.rule) == (
            Classification.NEW_FAILURE, EvidenceRule.FIRST_FAILURE)
        (flaky,) = _ok(reader.flaky_tests("alpha"))
        assert (flaky.nodeid, flaky.because.rule) == ("t.py::x", EvidenceRule.FLIPPED_IN_RUN)
        unstable = {c.nodeid: c for c in _ok(reader.classify_unstable(run))}
        assert unstable["t.py::x"].because.rule is EvidenceRule.FLIPPED_IN_RUN
        off = FlakyPolicy(evidence=frozenset(FLAKY_RULES) - {EvidenceRule.FLIPPED_IN_RUN})
        (left,) = [c for c in _ok(reader.classify(run, policy=off)) if c.nodeid == "t.py::x"]
        assert (left.classification, left.because.rule) == (
            Classification.NEW_FAILURE, EvidenceRule.FIRST_FAILURE)

    @_EXAMPLES
    @given(
        recorded=st.sets(st.sampled_from(_NODEIDS), max_size=5),
        elsewhere=st.sets(st.sampled_from(_NODEIDS), max_size=3),
        asked=st.lists(st.sampled_from([*_NODEIDS, "t.py::\ud800", "t.py::\x00"]), max_size=8),
        skipped=st.booleans(),
    )
    def test_known_tests_are_the_asked_node_ids_the_project_recorded(
        self,
        layer_factory: LayerFactory,
        recorded: set[str],
        elsewhere: set[str],
        asked: list[str],
        skipped: bool,
    ) -> None:
        """A node id is known once the project stored an item of it, skipped or not; one
        only another project recorded is not; nor one that no write could store."""
        outcome = Outcome.SKIPPED if skipped else Outcome.PASSED
        with ExitStack() as stack:
            c = _open(stack, layer_factory)
            store, reader = c.get(DataStore), c.get(DataReader)
            if recorded:
                _run(store, 0, [_item(n, outcome) for n in sorted(recorded)])
            other: RunId = _ok(store.begin_run(RunStart("beta", "inv-b", _utc(_T0_MS))))
            _ok(store.record_results(other, [_item(n, Outcome.FAILED) for n in elsewhere]))
            assert _ok(reader.known_tests("alpha", asked)) == recorded.intersection(asked)
            assert _ok(reader.known_tests("alpha", iter(asked))) == recorded.intersection(asked)
            assert _ok(reader.known_tests("beta", asked)) == elsewhere.intersection(asked)
            assert _ok(reader.known_tests("gamma", asked)) == frozenset()

    @pytest.mark.parametrize(
        ("project", "nodeids", "field"),
        [("a\ud800", ["t.py::a"], "project"), (7, [], "project"), ("alpha", "t.py::a", "nodeids"),
         ("alpha", ["t.py::a", 3], "nodeids[1]"), ("alpha", None, "nodeids")],
    )
    def test_known_tests_refuses_what_names_no_node_ids(
        self, reader: DataReader, project: Any, nodeids: Any, field: str
    ) -> None:
        result = reader.known_tests(project, nodeids)
        assert isinstance(result, Failure), result
        error = result.failure()
        assert isinstance(error, InvalidInput), error
        assert error.field == field, error
