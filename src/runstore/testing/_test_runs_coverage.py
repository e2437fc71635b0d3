"""The per-test coverage part of the test-run contract: ``write_test_coverage`` and
``tests_for``, on any ``DataStore`` / ``DataReader`` layer.

:class:`TestCoverageContract` is mixed into ``TestRunsReaderContract`` (so every layer that
runs that contract runs these tests); :func:`lines_per_test` draws valid rows, and
:func:`reference_tests_for` is the rule of ``DataReader.tests_for`` written out plainly over
the rows given to the store, which the property compares every layer's answer with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from returns.result import Failure, Result, Success

from runstore.layers import Layer, build, merge
from runstore.services.clock import Clock, FixedClock
from runstore.services.errors import InvalidInput, NotFound
from runstore.services.test_runs import (
    CoveringTest,
    DataReader,
    DataStore,
    Outcome,
    Phase,
    PhaseResult,
    RunId,
    RunRetentionPolicy,
    RunStart,
    RunStatus,
    TestLines,
    TestResult,
)
from runstore.testing._shared import LayerFactory

__all__ = ["COVERED_PATHS", "TestCoverageContract", "lines_per_test", "reference_tests_for"]

COVERED_PATHS = ("src/app/a.py", "src/ü x.py")
"""The file paths :func:`lines_per_test` draws from."""

_T0_MS = 1_700_000_000_000
_NODEIDS = ("t::a", "t::b", "t::c")
_ITEM_OUTCOMES = (Outcome.PASSED, Outcome.FAILED, Outcome.SKIPPED)


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def lines_per_test(
    nodeids: st.SearchStrategy[str], paths: Sequence[str] = COVERED_PATHS
) -> st.SearchStrategy[tuple[TestLines, ...]]:
    """Valid ``write_test_coverage`` rows: distinct (node id, path) pairs, each with a few
    line numbers (unsorted, with repeats: the store sorts them)."""
    row = st.builds(
        TestLines,
        nodeids,
        st.sampled_from(list(paths)),
        st.lists(st.integers(1, 12), min_size=1, max_size=6).map(tuple),
    )
    return st.lists(row, max_size=8, unique_by=lambda r: (r.nodeid, r.path)).map(tuple)


def reference_tests_for(
    runs: Sequence[tuple[RunId, int, Sequence[TestLines]]],
    path: str,
    line: int | None,
    window: int,
    limit: int,
    *,
    ran: Mapping[RunId, AbstractSet[str]] | None = None,
) -> tuple[tuple[RunId, ...], tuple[CoveringTest, ...], bool]:
    """``tests_for``'s answer (runs read, tests, has_more) from what was written: ``runs``
    are ``(run id, start ms, rows)`` of the measured runs of one project, ``ran`` the node
    ids each run recorded as items not skipped. A test is judged by the newest run in which
    it ran (an item not skipped, or rows of any file): listed when that run's rows of
    ``path`` hold ``line``, not listed when it has none."""
    newest = sorted(runs, key=lambda r: (r[1], r[0]), reverse=True)[:window]
    judged: dict[str, tuple[int, RunId, tuple[int, ...]] | None] = {}
    for order, (run_id, _, rows) in enumerate(newest):
        for row in rows:
            if row.path == path and row.nodeid not in judged:
                judged[row.nodeid] = (order, run_id, tuple(sorted(set(row.lines))))
        for nodeid in {row.nodeid for row in rows} | set((ran or {}).get(run_id, ())):
            judged.setdefault(nodeid, None)  # ran here without executing the file
    hits = sorted(
        (order, nodeid, run_id, lines)
        for nodeid, found in judged.items()
        if found is not None
        for order, run_id, lines in (found,)
        if line is None or line in lines
    )
    tests = tuple(CoveringTest(n, r, lines) for _, n, r, lines in hits[:limit])
    return tuple(r[0] for r in newest), tests, len(hits) > limit


def _ok(result: Result[Any, Any]) -> Any:
    assert isinstance(result, Success), f"expected Success, got {result!r}"
    return result.unwrap()


def _begin(store: DataStore, at_ms: int = _T0_MS, project: str = "alpha") -> RunId:
    run: RunId = _ok(store.begin_run(RunStart(project, f"inv-{at_ms}", _utc(at_ms))))
    return run


class TestCoverageContract:
    """Example tests and a property of ``write_test_coverage`` and ``tests_for``; the
    ``store``, ``reader`` and ``layer_factory`` fixtures come from the contract class it is
    mixed into."""

    __test__: ClassVar[bool] = False

    def test_tests_for_without_per_test_coverage_is_not_found(
        self, store: DataStore, reader: DataReader
    ) -> None:
        assert reader.tests_for("alpha", "src/a.py") == Failure(
            NotFound("test_coverage", "alpha")
        )
        _ok(store.write_coverage(_begin(store), ()))  # per-file coverage is not per test
        assert isinstance(reader.tests_for("alpha", "src/a.py"), Failure)
        run = _begin(store, _T0_MS + 1)
        assert _ok(store.write_test_coverage(run, ())) == 0  # measured, nothing executed
        answer = _ok(reader.tests_for("alpha", "src/a.py"))
        assert (answer.runs, answer.tests, answer.has_more) == ((run,), (), False)
        assert isinstance(reader.tests_for("beta", "src/a.py"), Failure)

    def test_each_test_is_judged_by_its_newest_run(
        self, store: DataStore, reader: DataReader
    ) -> None:
        old, new = _begin(store), _begin(store, _T0_MS + 10)
        _ok(store.write_test_coverage(old, [
            TestLines("t.py::a", "src/a.py", (5, 3, 4, 4)),
            TestLines("t.py::b", "src/a.py", (9,)),
            TestLines("t.py::b", "src/b.py", (1,)),
        ]))
        _ok(store.write_test_coverage(new, [TestLines("t.py::a", "src/a.py", (7,))]))
        whole = _ok(reader.tests_for("alpha", "src/a.py"))
        assert whole.runs == (new, old)
        assert whole.tests == (CoveringTest("t.py::a", new, (7,)),
                               CoveringTest("t.py::b", old, (9,)))
        # run `new` shows that t.py::a no longer executes line 4: run `old` does not count
        assert _ok(reader.tests_for("alpha", "src/a.py", line=4)).tests == ()
        assert _ok(reader.tests_for("alpha", "src/a.py", line=9)).tests == (
            CoveringTest("t.py::b", old, (9,)),)
        only_new = _ok(reader.tests_for("alpha", "src/a.py", runs=1))
        assert (only_new.runs, [t.nodeid for t in only_new.tests]) == ((new,), ["t.py::a"])
        first = _ok(reader.tests_for("alpha", "src/a.py", limit=1))
        assert ([t.nodeid for t in first.tests], first.has_more) == (["t.py::a"], True)
        assert _ok(reader.tests_for("alpha", "src/nowhere.py")).tests == ()

    def test_a_newer_run_where_a_test_ran_without_the_file_overrules_older_rows(
        self, store: DataStore, reader: DataReader
    ) -> None:
        old, new = _begin(store), _begin(store, _T0_MS + 10)
        _ok(store.write_test_coverage(old, [
            TestLines(f"t.py::{name}", "src/a.py", (2,)) for name in "abcd"]))
        # a ran (passed) and c executed another file: neither executes src/a.py any more;
        # b was skipped (it ran no code) and d was not run: their old rows still count
        _ok(store.record_results(new, [_item("t.py::a"), _item("t.py::b", Outcome.SKIPPED)]))
        _ok(store.write_test_coverage(new, [TestLines("t.py::c", "src/b.py", (1,))]))
        assert _ok(reader.tests_for("alpha", "src/a.py")).tests == (
            CoveringTest("t.py::b", old, (2,)), CoveringTest("t.py::d", old, (2,)))
        assert [t.nodeid for t in _ok(reader.tests_for("alpha", "src/a.py", runs=1)).tests
                ] == []
        assert _ok(reader.tests_for("alpha", "src/b.py")).tests == (
            CoveringTest("t.py::c", new, (1,)),)

    def test_write_test_coverage_replaces_and_refuses_bad_rows_writing_nothing(
        self, store: DataStore, reader: DataReader
    ) -> None:
        run = _begin(store)
        _ok(store.write_test_coverage(run, [TestLines("t.py::a", "src/a.py", (1, 2))]))
        before = reader.tests_for("alpha", "src/a.py")
        good = TestLines("t.py::z", "src/a.py", (1,))
        for bad in (
            [good, TestLines("t.py::a", "src/a.py", ())],
            [good, TestLines("t.py::a", "src/a.py", (0,))],
            [good, TestLines("t.py::a", "src/a.py", (True,))],
            [good, TestLines("t.py::a", "src/a.py", (1.0,))],  # type: ignore[arg-type]
            [good, TestLines("", "src/a.py", (1,))],
            [good, TestLines("t.py::a", "", (1,))],
            [good, TestLines("t.py::a", "src/\x00.py", (1,))],
            [good, TestLines("t.py::\ud800", "src/a.py", (1,))],
            [good, good],
            [good, "t.py::a"],
        ):
            refused = store.write_test_coverage(run, bad)  # type: ignore[arg-type]
            assert isinstance(refused, Failure), bad
            assert isinstance(refused.failure(), InvalidInput)
            assert refused.failure().field.startswith("tests[1]"), refused
            assert reader.tests_for("alpha", "src/a.py") == before
        assert isinstance(store.write_test_coverage(RunId(987_654_321), [good]), Failure)
        assert _ok(store.write_test_coverage(run, [TestLines("t.py::b", "src/b.py", (3,))])) == 1
        assert _ok(reader.tests_for("alpha", "src/a.py")).tests == ()
        assert _ok(reader.tests_for("alpha", "src/b.py")).tests == (
            CoveringTest("t.py::b", run, (3,)),)

    @pytest.mark.parametrize(
        ("arguments", "field"),
        [
            ({"path": ""}, "path"),
            ({"line": 0}, "line"),
            ({"line": True}, "line"),
            ({"runs": 0}, "runs"),
            ({"runs": 1_001}, "runs"),
            ({"limit": 0}, "limit"),
        ],
    )
    def test_tests_for_refuses_bad_arguments(
        self, store: DataStore, reader: DataReader, arguments: dict[str, Any], field: str
    ) -> None:
        _ok(store.write_test_coverage(_begin(store), ()))
        call: dict[str, Any] = {"path": "src/a.py", **arguments}
        path = call.pop("path")
        refused = reader.tests_for("alpha", path, **call)
        assert isinstance(refused, Failure)
        assert isinstance(refused.failure(), InvalidInput)
        assert refused.failure().field == field

    def test_pruning_a_run_removes_its_per_test_coverage(
        self, store: DataStore, reader: DataReader
    ) -> None:
        old = _begin(store)
        _ok(store.write_test_coverage(old, [TestLines("t.py::gone", "src/only_old.py", (1,))]))
        _ok(store.finish_run(old, RunStatus.PASSED, _utc(_T0_MS + 1)))
        new = _begin(store, _T0_MS + 10)
        _ok(store.write_test_coverage(new, [TestLines("t.py::a", "src/a.py", (1,))]))
        _ok(store.finish_run(new, RunStatus.PASSED, _utc(_T0_MS + 11)))
        policy = RunRetentionPolicy(1)
        planned = _ok(store.plan_prune(policy))
        assert _ok(store.prune_runs(policy)) == planned
        assert planned.pruned_runs == 1
        assert planned.pruned_files == 1  # src/only_old.py: nothing else refers to it
        gone = _ok(reader.tests_for("alpha", "src/only_old.py"))
        assert (gone.runs, gone.tests) == ((new,), ())
        # the node id that only per-test coverage referred to may be written again
        again = _begin(store, _T0_MS + 20)
        _ok(store.write_test_coverage(again, [TestLines("t.py::gone", "src/a.py", (2,))]))
        assert [t.nodeid for t in _ok(reader.tests_for("alpha", "src/a.py")).tests] == [
            "t.py::gone", "t.py::a"]

    def test_per_test_coverage_keeps_the_files_and_tests_it_names_through_pruning(
        self, store: DataStore, reader: DataReader
    ) -> None:
        run = _begin(store)
        _ok(store.write_test_coverage(run, [TestLines("t.py::only_here", "src/x.py", (4,))]))
        assert _ok(store.prune_runs(RunRetentionPolicy(5))).pruned_files == 0
        assert _ok(reader.tests_for("alpha", "src/x.py")).tests == (
            CoveringTest("t.py::only_here", run, (4,)),)

    @settings(
        max_examples=20,
        deadline=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.differing_executors,
        ],
    )
    @given(
        runs=st.lists(
            st.tuples(
                st.integers(0, 3),
                lines_per_test(st.sampled_from(_NODEIDS)),
                st.dictionaries(st.sampled_from(_NODEIDS), st.sampled_from(_ITEM_OUTCOMES)),
            ),
            min_size=1,
            max_size=5,
        ),
        path=st.sampled_from(COVERED_PATHS),
        line=st.one_of(st.none(), st.integers(1, 12)),
        window=st.integers(1, 4),
        limit=st.integers(1, 3),
    )
    def test_tests_for_matches_the_reference(
        self,
        layer_factory: LayerFactory,
        runs: list[tuple[int, tuple[TestLines, ...], dict[str, Outcome]]],
        path: str,
        line: int | None,
        window: int,
        limit: int,
    ) -> None:
        with ExitStack() as stack:
            layer: Layer = merge(layer_factory(), Layer.value(Clock, FixedClock(_T0_MS)))
            c = stack.enter_context(build(layer))
            store, reader = c.get(DataStore), c.get(DataReader)
            written = []
            ran: dict[RunId, set[str]] = {}
            for offset, rows, items in runs:  # start times tie often: the higher id is newer
                run = _begin(store, _T0_MS + offset)
                _ok(store.record_results(run, [_item(n, o) for n, o in items.items()]))
                assert _ok(store.write_test_coverage(run, rows)) == len(rows)
                written.append((run, _T0_MS + offset, rows))
                ran[run] = {n for n, o in items.items() if o is not Outcome.SKIPPED}
            answer = _ok(reader.tests_for("alpha", path, line=line, runs=window, limit=limit))
            expected = reference_tests_for(written, path, line, window, limit, ran=ran)
            assert (answer.runs, answer.tests, answer.has_more) == expected
            assert (answer.project, answer.path, answer.line) == ("alpha", path, line)


def _item(nodeid: str, outcome: Outcome = Outcome.PASSED) -> TestResult:
    return TestResult(nodeid, nodeid.partition("::")[0], nodeid.partition("::")[2],
                      (PhaseResult(Phase.CALL, outcome, 1.0),))
