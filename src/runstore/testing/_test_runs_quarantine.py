"""The quarantine part of the test-run contract: ``mark_quarantined``, ``quarantined``,
``record_fix_check`` and ``fix_checks``, on any ``DataStore`` / ``DataReader`` layer.

:class:`QuarantineContract` is mixed into ``TestRunsReaderContract`` (so every layer that
runs that contract runs these tests): example tests of each documented failure, and two
properties that drive a layer with drawn calls, valid and not, beside a plain model of
what the store must then answer.
"""

from __future__ import annotations

from contextlib import ExitStack
from datetime import UTC, datetime
from typing import Any, ClassVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from returns.result import Failure, Result, Success

from runstore.layers import Layer, build, merge
from runstore.services.clock import Clock, FixedClock
from runstore.services.errors import IllegalTransition, InvalidInput, NotFound
from runstore.services.test_runs import (
    DataReader,
    DataStore,
    FixCheck,
    FixCheckResult,
    Outcome,
    Phase,
    PhaseResult,
    QuarantinedItem,
    RunId,
    RunRetentionPolicy,
    RunStart,
    RunStatus,
    TestResult,
)
from runstore.testing._shared import LayerFactory

__all__ = ["QuarantineContract", "fix_check_results"]

_T0_MS = 1_700_000_000_000
_NODEIDS = ("t.py::a", "t.py::b", "t.py::c[x]")


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _ok(result: Result[Any, Any]) -> Any:
    assert isinstance(result, Success), f"expected Success, got {result!r}"
    return result.unwrap()


def _item(nodeid: str, outcome: Outcome = Outcome.FAILED) -> TestResult:
    return TestResult(nodeid, "t.py", nodeid.partition("::")[2],
                      (PhaseResult(Phase.CALL, outcome, 1.0),))


def _run(store: DataStore, at_ms: int = _T0_MS, project: str = "alpha",
         nodeids: tuple[str, ...] = _NODEIDS) -> RunId:
    run: RunId = _ok(store.begin_run(RunStart(project, f"inv-{at_ms}", _utc(at_ms))))
    _ok(store.record_results(run, [_item(n) for n in nodeids]))
    return run


def fix_check_results(
    projects: tuple[str, ...] = ("alpha", "beta"), nodeids: tuple[str, ...] = _NODEIDS
) -> st.SearchStrategy[FixCheckResult]:
    """Fix-check results, valid (counts that add up, released only when all passed) and
    not (counts over ``executions``, a release with a failure, counts below their floor)."""

    def build_result(project: str, nodeid: str, executions: int, passed: int, failed: int,
                     released: bool) -> FixCheckResult:
        return FixCheckResult(project, nodeid, None, executions, passed, failed, released)

    return st.builds(
        build_result, st.sampled_from(projects), st.sampled_from(nodeids),
        st.integers(0, 4), st.integers(-1, 4), st.integers(-1, 4), st.booleans(),
    )


def _valid(result: FixCheckResult) -> bool:
    """Whether ``record_fix_check`` accepts ``result`` (it names no run)."""
    return (result.executions >= 1 and result.passed >= 0 and result.failed >= 0
            and result.passed + result.failed <= result.executions
            and (not result.released or result.passed == result.executions))


class QuarantineContract:
    """Example tests and properties of the quarantine methods; the ``store``, ``reader``,
    ``clock`` and ``layer_factory`` fixtures come from the contract class it is mixed into."""

    __test__: ClassVar[bool] = False

    def test_quarantined_items_are_stored_by_node_id_and_replaced(
        self, store: DataStore, reader: DataReader
    ) -> None:
        run = _run(store)
        assert reader.quarantined(run) == Success(())
        marks = [QuarantinedItem("t.py::c[x]", "t.py::c*"), QuarantinedItem("t.py::a", "t.py::a")]
        assert store.mark_quarantined(run, marks) == Success(2)
        assert reader.quarantined(run) == Success((marks[1], marks[0]))
        assert store.mark_quarantined(run, marks[:1]) == Success(1)
        assert reader.quarantined(run) == Success((marks[0],))
        assert store.mark_quarantined(run, []) == Success(0)
        assert reader.quarantined(run) == Success(())

    def test_quarantine_refusals_write_nothing(self, store: DataStore, reader: DataReader) -> None:
        run = _run(store)
        kept = [QuarantinedItem("t.py::a", "t.py::a")]
        _ok(store.mark_quarantined(run, kept))
        assert store.mark_quarantined(RunId(run + 100), kept) == Failure(
            NotFound("run", str(run + 100)))
        assert store.mark_quarantined(run, [QuarantinedItem("t.py::b", "x"),
                                            QuarantinedItem("t.py::nope", "x")]) == Failure(
            NotFound("test", "t.py::nope"))
        twice = store.mark_quarantined(run, [QuarantinedItem("t.py::b", "x")] * 2)
        assert twice == Failure(InvalidInput("items[1].nodeid", "'t.py::b' is given twice"))
        for bad, field in (([QuarantinedItem("", "x")], "items[0].nodeid"),
                           ([QuarantinedItem("t.py::b", "")], "items[0].entry"),
                           ([QuarantinedItem("t.py::b", "a\x00b")], "items[0].entry"),
                           (["t.py::b"], "items[0]"), ("t.py::b", "items")):
            refused = store.mark_quarantined(run, bad)  # type: ignore[arg-type]
            assert isinstance(refused, Failure), bad
            assert isinstance(refused.failure(), InvalidInput), refused
            assert refused.failure().field == field
        assert reader.quarantined(run) == Success(tuple(kept))
        _ok(store.finish_run(run, RunStatus.FAILED, _utc(_T0_MS + 5)))
        assert store.mark_quarantined(run, []) == Failure(
            IllegalTransition("run", str(run), "failed", "running"))
        assert reader.quarantined(run) == Success(tuple(kept))
        assert reader.quarantined(RunId(run + 100)) == Failure(NotFound("run", str(run + 100)))

    def test_quarantined_items_go_with_their_run(
        self, store: DataStore, reader: DataReader
    ) -> None:
        old = _run(store)
        _ok(store.mark_quarantined(old, [QuarantinedItem("t.py::a", "t.py::a")]))
        _ok(store.finish_run(old, RunStatus.FAILED, _utc(_T0_MS + 5)))
        new = _run(store, _T0_MS + 10)
        _ok(store.finish_run(new, RunStatus.FAILED, _utc(_T0_MS + 15)))
        assert _ok(store.prune_runs(RunRetentionPolicy(1))).pruned_runs == 1
        assert reader.quarantined(old) == Failure(NotFound("run", str(old)))
        assert reader.quarantined(new) == Success(())

    def test_fix_checks_are_listed_newest_first_and_outlive_their_run(
        self, store: DataStore, reader: DataReader, clock: FixedClock
    ) -> None:
        run = _run(store)
        first = FixCheckResult("alpha", "t.py::a", run, 3, 2, 1, False)
        second = FixCheckResult("alpha", "t.py::a", run, 3, 3, 0, True)
        other = FixCheckResult("alpha", "t.py::b", None, 1, 0, 0, False)  # skipped once
        at = clock.now_ms()
        assert store.record_fix_check(first) == Success(FixCheck(first, at))
        clock.advance(7)
        assert store.record_fix_check(second) == Success(FixCheck(second, at + 7))
        _ok(store.record_fix_check(other))
        assert reader.fix_checks("alpha", "t.py::a") == Success(
            (FixCheck(second, at + 7), FixCheck(first, at)))
        assert [c.result for c in _ok(reader.fix_checks("alpha"))] == [other, second, first]
        assert [c.result for c in _ok(reader.fix_checks("alpha", limit=1))] == [other]
        assert reader.fix_checks("beta") == Success(())
        _ok(store.finish_run(run, RunStatus.PASSED, _utc(_T0_MS + 5)))
        later = _run(store, _T0_MS + 10)
        _ok(store.finish_run(later, RunStatus.PASSED, _utc(_T0_MS + 15)))
        _ok(store.prune_runs(RunRetentionPolicy(1)))
        kept = _ok(reader.fix_checks("alpha", "t.py::a"))
        assert [c.result.run_id for c in kept] == [None, None]
        assert [c.result.passed for c in kept] == [3, 2]

    def test_fix_check_refusals_write_nothing(self, store: DataStore, reader: DataReader) -> None:
        run = _run(store, project="beta")
        good = FixCheckResult("alpha", "t.py::a", None, 3, 3, 0, True)
        cases: list[tuple[Any, Any]] = [
            (FixCheckResult("alpha", "t.py::a", RunId(run + 9), 1, 1, 0, False),
             NotFound("run", str(run + 9))),
            (FixCheckResult("alpha", "t.py::a", run, 1, 1, 0, False), "result.run_id"),
            (FixCheckResult("", "t.py::a", None, 1, 1, 0, False), "result.project"),
            (FixCheckResult("alpha", "a\x00", None, 1, 1, 0, False), "result.nodeid"),
            (FixCheckResult("alpha", "t.py::a", None, 0, 0, 0, False), "result.executions"),
            (FixCheckResult("alpha", "t.py::a", None, 2, 2, 1, False), "result.failed"),
            (FixCheckResult("alpha", "t.py::a", None, 2, -1, 0, False), "result.passed"),
            (FixCheckResult("alpha", "t.py::a", None, 3, 2, 1, True), "result.released"),
            (FixCheckResult("alpha", "t.py::a", None, 1, 1, 0, 1),  # type: ignore[arg-type]
             "result.released"),
            (FixCheckResult("alpha", "t.py::a", None, True, 1, 0, False), "result.executions"),
            ("not a result", "result"),
        ]
        for given_result, expected in cases:
            refused = store.record_fix_check(given_result)
            assert isinstance(refused, Failure), given_result
            if isinstance(expected, str):
                assert isinstance(refused.failure(), InvalidInput), refused
                assert refused.failure().field == expected, refused
            else:
                assert refused.failure() == expected
        assert reader.fix_checks("alpha") == Success(())
        assert reader.fix_checks("beta") == Success(())
        _ok(store.record_fix_check(good))
        for bad_limit in (0, -1, True):
            assert isinstance(reader.fix_checks("alpha", limit=bad_limit), Failure)
        assert isinstance(reader.fix_checks("alpha", "a\ud800"), Failure)
        assert isinstance(reader.fix_checks(7), Failure)  # type: ignore[arg-type]

    @settings(
        max_examples=25,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture,
                               HealthCheck.differing_executors],
    )
    @given(calls=st.lists(fix_check_results(), max_size=12),
           nodeid=st.one_of(st.none(), st.sampled_from(_NODEIDS)),
           limit=st.integers(1, 5))
    def test_fix_checks_match_the_model(
        self, layer_factory: LayerFactory, calls: list[FixCheckResult], nodeid: str | None,
        limit: int,
    ) -> None:
        with ExitStack() as stack:
            clock = FixedClock(_T0_MS)
            c = stack.enter_context(build(merge(layer_factory(), Layer.value(Clock, clock))))
            store, reader = c.get(DataStore), c.get(DataReader)
            model: list[FixCheck] = []
            for call in calls:
                clock.advance(1)
                answer = store.record_fix_check(call)
                assert isinstance(answer, Success) == _valid(call), (call, answer)
                if _valid(call):
                    assert answer == Success(FixCheck(call, clock.now_ms()))
                    model.append(FixCheck(call, clock.now_ms()))
            for project in ("alpha", "beta"):
                expected = [m for m in reversed(model) if m.result.project == project
                            and (nodeid is None or m.result.nodeid == nodeid)][:limit]
                assert reader.fix_checks(project, nodeid, limit=limit) == Success(tuple(expected))

    @settings(
        max_examples=25,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture,
                               HealthCheck.differing_executors],
    )
    @given(batches=st.lists(
        st.lists(st.tuples(st.sampled_from((*_NODEIDS, "t.py::gone", "")),
                           st.sampled_from(("t.py::*", "t.py::a", ""))), max_size=4),
        max_size=5))
    def test_quarantined_matches_the_model(
        self, layer_factory: LayerFactory, batches: list[list[tuple[str, str]]]
    ) -> None:
        with ExitStack() as stack:
            c = stack.enter_context(
                build(merge(layer_factory(), Layer.value(Clock, FixedClock(_T0_MS)))))
            store, reader = c.get(DataStore), c.get(DataReader)
            run = _run(store)
            model: tuple[QuarantinedItem, ...] = ()
            for batch in batches:
                items = [QuarantinedItem(n, e) for n, e in batch]
                nodeids = [n for n, _ in batch]
                accepted = (all(n and e for n, e in batch) and len(set(nodeids)) == len(nodeids)
                            and all(n in _NODEIDS for n in nodeids))
                answer = store.mark_quarantined(run, items)
                assert isinstance(answer, Success) == accepted, (batch, answer)
                if accepted:
                    model = tuple(sorted(items, key=lambda i: i.nodeid))
                assert reader.quarantined(run) == Success(model)
