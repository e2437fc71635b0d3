"""The cells part of the test-run contract: ``DataReader.run_cells``, the compact items of
many runs (of all or of given tests) a history matrix of tests by runs draws in one read.

:class:`CellsContract` is mixed into ``TestRunsReaderContract`` and uses its ``reader`` and
``layer_factory`` fixtures, so every layer that runs the contract runs these. Its property
records a few runs of drawn items (outcomes, earlier attempts, errors of a few signatures)
in two projects, then asks for the cells of a drawn list of run ids (stored ones, repeats,
ids no run has) with a drawn node id filter and outcome filter, and checks them against
what ``tests`` and ``failures`` of each run answer: the cells are exactly those records'
fields, in run id then node id order.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any, ClassVar

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from returns.result import Failure

from runstore.services.errors import InvalidInput
from runstore.services.test_runs import (
    FAILING_OUTCOMES,
    MAX_CELL_RUNS,
    DataReader,
    DataStore,
    ErrorInfo,
    Outcome,
    Phase,
    PhaseResult,
    RunId,
    RunStart,
    RunStatus,
    TestCell,
    TestResult,
)
from runstore.testing._shared import LayerFactory
from runstore.testing._test_runs_policy import _T0_MS, _ok, _open, _utc

__all__ = ["CellsContract", "cell_items"]

_NODEIDS = ("t.py::a", "t.py::b", "t.py::c[1]", "u/t.py::C::d", "t.py::é")
_MESSAGES = ("assert 1 == 2", "boom", "KeyError: 'x'")
_ITEM_OUTCOMES = (Outcome.PASSED, Outcome.FAILED, Outcome.ERROR, Outcome.SKIPPED)


def cell_items() -> st.SearchStrategy[list[TestResult]]:
    """The items of one run: distinct node ids, each of an outcome with 0-2 failed earlier
    attempts, a failing one with one of a few error messages (a few signatures)."""

    @st.composite
    def draw(data: st.DrawFn) -> list[TestResult]:
        nodeids = data(st.lists(st.sampled_from(_NODEIDS), unique=True, max_size=4))
        items = []
        for nodeid in nodeids:
            item = _item(
                nodeid,
                data(st.sampled_from(_ITEM_OUTCOMES)),
                data(st.sampled_from([0.0, 1.5, 250.0])),
                data(st.sampled_from(_MESSAGES)),
            )
            earlier = _item(nodeid, Outcome.FAILED, 1.0, "flaky timeout")
            items.append(attrs.evolve(item, attempts=(earlier,) * data(st.integers(0, 2))))
        return items

    return draw()


def _item(nodeid: str, outcome: Outcome, ms: float, message: str) -> TestResult:
    """An item of ``outcome`` (``error``: a failed setup) taking ``ms``; a failing one with
    one error of ``message``."""
    phase = Phase.SETUP if outcome is Outcome.ERROR else Phase.CALL
    ran = Outcome.FAILED if outcome is Outcome.ERROR else outcome
    errors = (
        (ErrorInfo(phase, "AssertionError", message, f"E   {message}"),)
        if outcome in FAILING_OUTCOMES else ()
    )
    return TestResult(nodeid, nodeid.split("::")[0], nodeid.split("::", 1)[1],
                      (PhaseResult(phase, ran, ms),), errors=errors)


_EXAMPLES = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors],
)


def _expected(reader: DataReader, run_id: RunId, only: frozenset[Outcome] | None) -> list[
    TestCell
]:
    """The cells of one stored run as ``tests`` and ``failures`` describe its items."""
    signatures = {f.nodeid: f.signature for f in _ok(reader.failures(run_id))
                  if f.phase is not Phase.COLLECT}
    return [
        TestCell(run_id, t.nodeid, t.outcome, t.duration_ms, t.attempts,
                 signatures.get(t.nodeid, "") if t.outcome in FAILING_OUTCOMES else "")
        for t in _ok(reader.tests(run_id))
        if only is None or t.outcome in only
    ]


class CellsContract:
    """``run_cells`` against ``tests`` and ``failures``; the ``reader`` and ``layer_factory``
    fixtures come from the contract class it is mixed into."""

    __test__: ClassVar[bool] = False

    @_EXAMPLES
    @given(
        runs=st.lists(st.tuples(st.sampled_from(["alpha", "beta"]), cell_items(), st.booleans()),
                      min_size=1, max_size=4),
        picks=st.lists(st.integers(0, 5), max_size=7),
        tests=st.none() | st.lists(
            st.sampled_from([*_NODEIDS, "t.py::\ud800", "t.py::\x00", "t.py::z"]), max_size=6
        ),
        only=st.none() | st.frozensets(st.sampled_from(list(Outcome))),
    )
    def test_run_cells_are_the_items_tests_and_failures_describe(
        self,
        layer_factory: LayerFactory,
        runs: list[tuple[str, list[TestResult], bool]],
        picks: list[int],
        tests: list[str] | None,
        only: frozenset[Outcome] | None,
    ) -> None:
        """Each asked run's cells are its ``tests`` records' fields (a failing one's
        signature its ``failures`` record's), only ``nodeids`` and ``outcomes`` when given,
        by run id then node id; repeated ids count once, an id no run has gives nothing, a
        node id no write could store matches nothing, a running run's items are cells
        too."""
        with ExitStack() as stack:
            c = _open(stack, layer_factory)
            store, reader = c.get(DataStore), c.get(DataReader)
            ids: list[RunId] = []
            for at, (project, items, finish) in enumerate(runs):
                run: RunId = _ok(store.begin_run(RunStart(project, f"inv-{at}",
                                                          _utc(_T0_MS + at))))
                _ok(store.record_results(run, items))
                if finish:
                    failing = any(i.outcome in FAILING_OUTCOMES for i in items)
                    _ok(store.finish_run(run, RunStatus.FAILED if failing else RunStatus.PASSED,
                                         _utc(_T0_MS + at + 1)))
                ids.append(run)
            unknown = RunId(max(ids) + 1_000)
            asked = [ids[p] if p < len(ids) else unknown for p in picks]
            expected = [
                cell for run_id in sorted(set(asked) - {unknown})
                for cell in _expected(reader, run_id, only)
                if tests is None or cell.nodeid in tests
            ]
            assert list(_ok(reader.run_cells(asked, nodeids=tests, outcomes=only))) == expected
            assert list(_ok(reader.run_cells(
                iter(asked), nodeids=None if tests is None else iter(tests), outcomes=only
            ))) == expected

    @pytest.mark.parametrize(
        ("run_ids", "nodeids", "outcomes", "field"),
        [("12", None, None, "run_ids"), (7, None, None, "run_ids"),
         (None, None, None, "run_ids"), ([1, "2"], None, None, "run_ids[1]"),
         ([True], None, None, "run_ids[0]"), ([1.0], None, None, "run_ids[0]"),
         ([2**63], None, None, "run_ids[0]"), (range(1, MAX_CELL_RUNS + 2), None, None, "run_ids"),
         ([1], "t.py::a", None, "nodeids"), ([1], 5, None, "nodeids"),
         ([1], ["t.py::a", 3], None, "nodeids[1]"),
         ([1], None, {"nope"}, "outcomes"), ([1], None, ["failed"], "outcomes"),
         ("1", 5, {"nope"}, "run_ids"), ([1], 5, {"nope"}, "nodeids")],
    )
    def test_run_cells_refuses_what_names_no_runs(
        self, reader: DataReader, run_ids: Any, nodeids: Any, outcomes: Any, field: str
    ) -> None:
        result = reader.run_cells(run_ids, nodeids=nodeids, outcomes=outcomes)
        assert isinstance(result, Failure), result
        error = result.failure()
        assert isinstance(error, InvalidInput), error
        assert error.field == field, error

    def test_run_cells_of_many_runs_and_none(self, reader: DataReader) -> None:
        """As many run ids as allowed are one read; no run id (or only unknown ones) is no
        cell."""
        many = [RunId(i) for i in range(1, MAX_CELL_RUNS + 1)]
        assert _ok(reader.run_cells(many)) == ()
        assert _ok(reader.run_cells([])) == ()
        assert _ok(reader.run_cells([RunId(1)], outcomes=frozenset())) == ()
        assert _ok(reader.run_cells([RunId(1)], nodeids=[])) == ()
