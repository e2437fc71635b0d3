"""The contract of ``DataStore.prune_runs(policy, progress=...)``'s progress reports: how far
a prune got, in runs, for a progress bar.

A mixin the store contract of :mod:`runstore.testing._test_runs_contract` inherits
(:class:`PruneProgressContract`); it uses that module's fixtures (``store``, ``reader``,
``layer_factory``), so every layer the contract runs on runs it too. Its property: over
generated stores and retention policies, the calls are ``(done, total)`` with ``total`` the
runs pruned and ``done`` never decreasing, the last call is ``(total, total)``, and the
prune does the same with a callback as without one.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any, NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runstore.services.errors import InvalidInput
from runstore.services.pagination import MAX_PAGE_SIZE
from runstore.services.test_runs import (
    DataReader,
    DataStore,
    Outcome,
    Phase,
    PhaseResult,
    RunRetentionPolicy,
    RunStart,
    RunStatus,
    TestResult,
)
from runstore.testing._shared import LayerFactory
from runstore.testing._test_runs_links import _EXAMPLES, _fresh, _ok, _refused, _utc

__all__ = ["PruneProgressContract", "check_progress_calls", "prunable_runs"]

_T0_MS = 1_764_500_000_000
_HOUR_MS = 3_600_000
_NODEIDS = ("tests/test_a.py::test_one", "tests/test_a.py::test_two", "tests/test_b.py::test_ü")
_FINISHED = (RunStatus.PASSED, RunStatus.FAILED, RunStatus.INTERRUPTED, RunStatus.ABORTED)


class PrunableRun(NamedTuple):
    """One generated run: its project, how many hours before the clock it started, its
    final status (None: still running) and the outcome of each of its items."""

    project: str
    hours_ago: int
    status: RunStatus | None
    items: tuple[Outcome, ...]


def prunable_runs() -> st.SearchStrategy[list[PrunableRun]]:
    """Zero to twelve runs of two projects over three days (ties in start time included),
    some still running, each with up to three items passing or failing."""
    run = st.builds(
        PrunableRun,
        project=st.sampled_from(["alpha", "beta"]),
        hours_ago=st.integers(0, 72),
        status=st.none() | st.sampled_from(_FINISHED),
        items=st.lists(st.sampled_from([Outcome.PASSED, Outcome.FAILED]), max_size=3).map(tuple),
    )
    return st.lists(run, max_size=12)


def _policies() -> st.SearchStrategy[RunRetentionPolicy]:
    return st.builds(
        RunRetentionPolicy,
        keep_runs=st.integers(1, 5),
        max_age_days=st.sampled_from([None, None, 0.5, 1.0, 2]),
    )


def _seed(store: DataStore, runs: list[PrunableRun]) -> None:
    for n, drawn in enumerate(runs):
        started = _T0_MS - drawn.hours_ago * _HOUR_MS
        run = _ok(store.begin_run(RunStart(drawn.project, f"inv-{n}", _utc(started))))
        items = [
            TestResult(nodeid, nodeid.partition("::")[0], nodeid.rpartition("::")[2],
                       (PhaseResult(Phase.CALL, outcome, 1.0),))
            for nodeid, outcome in zip(_NODEIDS, drawn.items, strict=False)
        ]
        if items:
            _ok(store.record_results(run, items))
        if drawn.status is not None:
            _ok(store.finish_run(run, drawn.status, _utc(started + 1)))


def _shown(reader: DataReader) -> Any:
    """What the reader shows of every run, without run ids (two stores may number apart)."""
    runs = _ok(reader.list_runs(None, limit=MAX_PAGE_SIZE)).items
    return [
        (s.project, s.invocation_id, s.status, s.started_at_ms, s.counts,
         [(t.nodeid, t.outcome) for t in _ok(reader.tests(s.id))])
        for s in runs
    ]


def check_progress_calls(calls: list[tuple[int, int]], pruned: int) -> None:
    """Assert ``calls`` are what ``prune_runs`` may make for a prune of ``pruned`` runs:
    at least one; each ``(done, total)`` with ``total == pruned`` and ``0 <= done <=
    total``; ``done`` never decreasing; only the last one ``(pruned, pruned)``."""
    assert calls, f"a prune of {pruned} runs reported no progress"
    assert calls[-1] == (pruned, pruned), f"the last call was {calls[-1]}, not {(pruned,) * 2}"
    assert all(total == pruned for _, total in calls), f"totals other than {pruned}: {calls}"
    dones = [done for done, _ in calls]
    assert dones == sorted(dones), f"done went back: {calls}"
    assert all(0 <= done < pruned for done in dones[:-1]), f"done out of range: {calls}"


class PruneProgressContract:
    """``prune_runs(policy, progress=...)`` reports how many runs are removed (mixed into
    ``TestRunsStoreContract``)."""

    @_EXAMPLES
    @given(runs=prunable_runs(), policy=_policies())
    def test_prune_progress_counts_the_pruned_runs_and_changes_nothing_else(
        self, layer_factory: LayerFactory, runs: list[PrunableRun], policy: RunRetentionPolicy
    ) -> None:
        with ExitStack() as stack:
            told_store, told_reader = _fresh(stack, layer_factory)
            quiet_store, quiet_reader = _fresh(stack, layer_factory)
            _seed(told_store, runs)
            _seed(quiet_store, runs)
            calls: list[tuple[int, int]] = []
            told = told_store.prune_runs(policy, progress=lambda d, t: calls.append((d, t)))
            quiet = quiet_store.prune_runs(policy)
            assert told == quiet
            check_progress_calls(calls, _ok(told).pruned_runs)
            assert _shown(told_reader) == _shown(quiet_reader)

    @pytest.mark.parametrize("policy", [RunRetentionPolicy(0), RunRetentionPolicy(1, -1.0)])
    def test_a_refused_prune_reports_no_progress(
        self, store: DataStore, reader: DataReader, policy: RunRetentionPolicy
    ) -> None:
        _seed(store, [PrunableRun("alpha", 2, RunStatus.PASSED, ()),
                      PrunableRun("alpha", 1, RunStatus.PASSED, ())])
        calls: list[tuple[int, int]] = []
        _refused(store.prune_runs(policy, progress=lambda d, t: calls.append((d, t))), "policy")
        assert calls == []
        assert len(_shown(reader)) == 2

    @pytest.mark.parametrize("bad", [7, "progress", [print]])
    def test_prune_refuses_a_progress_that_is_not_callable(
        self, store: DataStore, reader: DataReader, bad: object
    ) -> None:
        _seed(store, [PrunableRun("alpha", 2, RunStatus.PASSED, ()),
                      PrunableRun("alpha", 1, RunStatus.PASSED, ())])
        refused = _refused(store.prune_runs(RunRetentionPolicy(1), progress=bad), "progress")  # type: ignore[arg-type]
        assert isinstance(refused, InvalidInput)
        assert len(_shown(reader)) == 2
