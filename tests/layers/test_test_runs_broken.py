"""Testing the tester: deliberately broken layers must fail the DataStore/DataReader contract.

Each broken layer wraps a correct in-memory layer and breaks one documented rule the way real
implementations have: committing half a batch on Failure, counting the input instead of the
stored rows, never trimming history, losing the coverage of a pruned run's invocation. The
state machine of ``runstore.testing`` must catch each of them (and say where).

The searches are steered: the machine gets extra rules that make whole runs, coverage and
hard pruning likely (``_biased``) and its pools are narrowed, so each broken layer is caught
within seconds; the control test drives a correct wrapper through the same steered machine.
Each breakage is also wrapped around the PostgreSQL layer, and fails there the program that
caught it on memory; the correct wrapper around it passes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Generator, Iterable, Sequence
from datetime import datetime
from typing import Any

import attrs
import pytest
from hypothesis import Phase as HypothesisPhase
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.database import InMemoryExampleDatabase
from hypothesis.stateful import rule, run_state_machine_as_test
from returns.result import Failure, Result, Success

from runstore.layers import Container, Layer, build, in_memory, merge
from runstore.services.clock import Clock, FixedClock
from runstore.services.errors import InvalidInput
from runstore.services.pagination import MAX_PAGE_SIZE, Page
from runstore.services.search import FailureHit, TestHit
from runstore.services.test_runs import (
    DEFAULT_FLAKY_POLICY,
    DEFAULT_HISTORY_WINDOW,
    DEFAULT_TESTS_FOR_RUNS,
    FAILING_OUTCOMES,
    Classification,
    CollectionError,
    CoverageReport,
    CoverageTrendPoint,
    DataReader,
    DataReaderError,
    DataStore,
    DataStoreError,
    Environment,
    Evidence,
    EvidenceRule,
    FailureRecord,
    FailureSignature,
    FileCoverage,
    FixCheck,
    FixCheckResult,
    FlakyPolicy,
    FlakyTest,
    HistoryEntry,
    Outcome,
    PruneRunsResult,
    QuarantinedItem,
    RunComparison,
    RunId,
    RunRetentionPolicy,
    RunStart,
    RunStatus,
    RunSummary,
    Selection,
    TestCell,
    TestClassification,
    TestDetail,
    TestLines,
    TestRecord,
    TestResult,
    TestsFor,
)
from runstore.testing import (
    LayerFactory,
    TestRunsMachine,
    file_coverages,
    item_results,
    test_runs_state_machine,
    utc,
)
from runstore.testing._test_runs_contract import T0_MS
from runstore.testing._test_runs_policy import FlakyPolicyContract
from runstore.testing._test_runs_prune import PruneProgressContract

# -- delegation --------------------------------------------------------------------------------


class PassThrough:
    """A DataStore and DataReader that forwards every call to a correct layer."""

    def __init__(self, store: DataStore, reader: DataReader, clock: Clock) -> None:
        self.inner_store = store
        self.inner_reader = reader
        self.clock = clock

    # DataStore
    def begin_run(self, start: RunStart) -> Result[RunId, DataStoreError]:
        return self.inner_store.begin_run(start)

    def record_results(
        self, run_id: RunId, results: Sequence[TestResult]
    ) -> Result[int, DataStoreError]:
        return self.inner_store.record_results(run_id, results)

    def record_collection_errors(
        self, run_id: RunId, errors: Sequence[CollectionError]
    ) -> Result[int, DataStoreError]:
        return self.inner_store.record_collection_errors(run_id, errors)

    def finish_run(
        self, run_id: RunId, status: RunStatus, finished_at: datetime
    ) -> Result[RunSummary, DataStoreError]:
        return self.inner_store.finish_run(run_id, status, finished_at)

    def record_selection(
        self, run_id: RunId, selection: Selection
    ) -> Result[RunSummary, DataStoreError]:
        return self.inner_store.record_selection(run_id, selection)

    def abort_stale_runs(
        self, project: str, *, older_than: datetime
    ) -> Result[tuple[RunId, ...], DataStoreError]:
        return self.inner_store.abort_stale_runs(project, older_than=older_than)

    def write_coverage(
        self, run_id: RunId, files: Sequence[FileCoverage]
    ) -> Result[int, DataStoreError]:
        return self.inner_store.write_coverage(run_id, files)

    def prune_runs(
        self, policy: RunRetentionPolicy, *, progress: Callable[[int, int], None] | None = None
    ) -> Result[PruneRunsResult, DataStoreError]:
        return self.inner_store.prune_runs(policy, progress=progress)

    def plan_prune(self, policy: RunRetentionPolicy) -> Result[PruneRunsResult, DataStoreError]:
        return self.inner_store.plan_prune(policy)

    # DataReader
    def latest_run(self, project: str) -> Result[RunSummary, DataReaderError]:
        return self.inner_reader.latest_run(project)

    def get_run(self, run_id: RunId) -> Result[RunSummary, DataReaderError]:
        return self.inner_reader.get_run(run_id)

    def list_runs(
        self,
        project: str | None,
        *,
        status: RunStatus | None = None,
        limit: int = 20,
        cursor: str | None = None,
        session_id: str | None = None,
    ) -> Result[Page[RunSummary], DataReaderError]:
        return self.inner_reader.list_runs(project, status=status, limit=limit, cursor=cursor,
                                           session_id=session_id)

    def test_detail(self, run_id: RunId, nodeid: str) -> Result[TestDetail, DataReaderError]:
        return self.inner_reader.test_detail(run_id, nodeid)

    def projects(self) -> Result[tuple[str, ...], DataReaderError]:
        return self.inner_reader.projects()

    def tests(
        self, run_id: RunId, *, outcomes: frozenset[Outcome] | None = None
    ) -> Result[tuple[TestRecord, ...], DataReaderError]:
        return self.inner_reader.tests(run_id, outcomes=outcomes)

    def failures(self, run_id: RunId) -> Result[tuple[FailureRecord, ...], DataReaderError]:
        return self.inner_reader.failures(run_id)

    def classify(
        self, run_id: RunId, *, policy: FlakyPolicy = DEFAULT_FLAKY_POLICY
    ) -> Result[tuple[TestClassification, ...], DataReaderError]:
        return self.inner_reader.classify(run_id, policy=policy)

    def classify_unstable(
        self, run_id: RunId, *, policy: FlakyPolicy = DEFAULT_FLAKY_POLICY
    ) -> Result[tuple[TestClassification, ...], DataReaderError]:
        return self.inner_reader.classify_unstable(run_id, policy=policy)

    def flaky_tests(
        self, project: str, *, policy: FlakyPolicy = DEFAULT_FLAKY_POLICY
    ) -> Result[tuple[FlakyTest, ...], DataReaderError]:
        return self.inner_reader.flaky_tests(project, policy=policy)

    def history(
        self, project: str, nodeid: str
    ) -> Result[tuple[HistoryEntry, ...], DataReaderError]:
        return self.inner_reader.history(project, nodeid)

    def find_tests(
        self, project: str, fragment: str, *, limit: int = 20
    ) -> Result[tuple[str, ...], DataReaderError]:
        return self.inner_reader.find_tests(project, fragment, limit=limit)

    def slowest(
        self, run_id: RunId, *, limit: int = 10
    ) -> Result[tuple[TestRecord, ...], DataReaderError]:
        return self.inner_reader.slowest(run_id, limit=limit)

    def coverage(self, run_id: RunId) -> Result[CoverageReport, DataReaderError]:
        return self.inner_reader.coverage(run_id)

    def coverage_trend(
        self, project: str, *, limit: int = 50
    ) -> Result[tuple[CoverageTrendPoint, ...], DataReaderError]:
        return self.inner_reader.coverage_trend(project, limit=limit)

    def compare(self, run_a: RunId, run_b: RunId) -> Result[RunComparison, DataReaderError]:
        return self.inner_reader.compare(run_a, run_b)

    def search_failures(
        self, text: str, *, project: str | None = None, limit: int = 20,
        cursor: str | None = None,
    ) -> Result[Page[FailureHit], DataReaderError]:
        return self.inner_reader.search_failures(
            text, project=project, limit=limit, cursor=cursor
        )

    def search_tests(
        self, text: str, *, project: str | None = None, limit: int = 20,
        cursor: str | None = None,
    ) -> Result[Page[TestHit], DataReaderError]:
        return self.inner_reader.search_tests(text, project=project, limit=limit, cursor=cursor)

    def write_test_coverage(
        self, run_id: RunId, tests: Sequence[TestLines]
    ) -> Result[int, DataStoreError]:
        return self.inner_store.write_test_coverage(run_id, tests)

    def tests_for(
        self, project: str, path: str, *, line: int | None = None,
        runs: int = DEFAULT_TESTS_FOR_RUNS, limit: int = 100,
    ) -> Result[TestsFor, DataReaderError]:
        return self.inner_reader.tests_for(project, path, line=line, runs=runs, limit=limit)

    def mark_quarantined(
        self, run_id: RunId, items: Sequence[QuarantinedItem]
    ) -> Result[int, DataStoreError]:
        return self.inner_store.mark_quarantined(run_id, items)

    def record_fix_check(self, result: FixCheckResult) -> Result[FixCheck, DataStoreError]:
        return self.inner_store.record_fix_check(result)

    def quarantined(self, run_id: RunId) -> Result[tuple[QuarantinedItem, ...], DataReaderError]:
        return self.inner_reader.quarantined(run_id)

    def fix_checks(
        self, project: str, nodeid: str | None = None, *, limit: int = 20
    ) -> Result[tuple[FixCheck, ...], DataReaderError]:
        return self.inner_reader.fix_checks(project, nodeid, limit=limit)

    def known_tests(
        self, project: str, nodeids: Iterable[str]
    ) -> Result[frozenset[str], DataReaderError]:
        return self.inner_reader.known_tests(project, nodeids)

    def run_cells(
        self, run_ids: Iterable[RunId], *, nodeids: Iterable[str] | None = None,
        outcomes: frozenset[Outcome] | None = None,
    ) -> Result[tuple[TestCell, ...], DataReaderError]:
        return self.inner_reader.run_cells(run_ids, nodeids=nodeids, outcomes=outcomes)

    def failure_signatures(
        self, project: str, *, limit: int = 20, cursor: str | None = None
    ) -> Result[Page[FailureSignature], DataReaderError]:
        return self.inner_reader.failure_signatures(project, limit=limit, cursor=cursor)


def broken(kind: type[PassThrough], inner: LayerFactory = in_memory) -> LayerFactory:
    """A layer factory providing ``kind`` wrapped around a fresh layer of ``inner`` (the
    in-memory one by default; each PostgreSQL one on a database of its own)."""

    def factory() -> Layer:
        def make(c: Container) -> Generator[PassThrough, None, None]:
            clock = c.get(Clock)
            inner_layer = merge(inner(), Layer.value(Clock, clock))
            with build(inner_layer) as built:
                yield kind(
                    built.get(DataStore),
                    built.get(DataReader),
                    clock,
                )

        def store(c: Container) -> DataStore:
            return c.get(PassThrough)

        def reader(c: Container) -> DataReader:
            return c.get(PassThrough)

        return merge(
            Layer.service(PassThrough, make, requires=(Clock,)),
            Layer.service(DataStore, store, requires=(PassThrough,)),
            Layer.service(DataReader, reader, requires=(PassThrough,)),
        )

    return factory


# -- the broken layers ---------------------------------------------------------------------------


class HalfBatchOnFailure(PassThrough):
    """Stores a batch item by item and stops at the first bad item, keeping the ones before."""

    def record_results(
        self, run_id: RunId, results: Sequence[TestResult]
    ) -> Result[int, DataStoreError]:
        whole = self.inner_store.record_results(run_id, results)
        if isinstance(whole, Failure) and isinstance(whole.failure(), InvalidInput):
            for item in results:  # keep the good items before the bad one
                if isinstance(self.inner_store.record_results(run_id, [item]), Failure):
                    break
        return whole


class CountsTrustInput(PassThrough):
    """Counts outcomes as batches arrive instead of from the stored rows, so a re-recorded
    item (a rerun) is counted twice."""

    def __init__(self, store: DataStore, reader: DataReader, clock: Clock) -> None:
        super().__init__(store, reader, clock)
        self.counts: dict[int, Counter[str]] = {}

    def record_results(
        self, run_id: RunId, results: Sequence[TestResult]
    ) -> Result[int, DataStoreError]:
        stored = self.inner_store.record_results(run_id, results)
        if isinstance(stored, Success):
            self.counts.setdefault(run_id, Counter()).update(r.outcome.value for r in results)
        return stored

    def _fix(self, summary: RunSummary) -> RunSummary:
        seen = self.counts.get(summary.id, Counter())
        return attrs.evolve(summary, counts={o.value: seen[o.value] for o in Outcome})

    def get_run(self, run_id: RunId) -> Result[RunSummary, DataReaderError]:
        return self.inner_reader.get_run(run_id).map(self._fix)

    def latest_run(self, project: str) -> Result[RunSummary, DataReaderError]:
        return self.inner_reader.latest_run(project).map(self._fix)

    def finish_run(
        self, run_id: RunId, status: RunStatus, finished_at: datetime
    ) -> Result[RunSummary, DataStoreError]:
        return self.inner_store.finish_run(run_id, status, finished_at).map(self._fix)

    def list_runs(
        self,
        project: str | None,
        *,
        status: RunStatus | None = None,
        limit: int = 20,
        cursor: str | None = None,
        session_id: str | None = None,
    ) -> Result[Page[RunSummary], DataReaderError]:
        return self.inner_reader.list_runs(
            project, status=status, limit=limit, cursor=cursor, session_id=session_id
        ).map(
            lambda page: attrs.evolve(page, items=tuple(self._fix(s) for s in page.items))
        )


class UntrimmedHistory(PassThrough):
    """Keeps every executed outcome of a test in its history instead of the newest window."""

    def __init__(self, store: DataStore, reader: DataReader, clock: Clock) -> None:
        super().__init__(store, reader, clock)
        self.full: dict[tuple[str, str], list[HistoryEntry]] = {}

    def finish_run(
        self, run_id: RunId, status: RunStatus, finished_at: datetime
    ) -> Result[RunSummary, DataStoreError]:
        finished = self.inner_store.finish_run(run_id, status, finished_at)
        if isinstance(finished, Success):
            project = finished.unwrap().project
            for test in self.inner_reader.tests(run_id).value_or(()):
                window = self.inner_reader.history(project, test.nodeid).value_or(())
                if window and window[0].run_id == run_id:
                    self.full.setdefault((project, test.nodeid), []).insert(0, window[0])
        return finished

    def prune_runs(
        self, policy: RunRetentionPolicy, *, progress: Callable[[int, int], None] | None = None
    ) -> Result[PruneRunsResult, DataStoreError]:
        pruned = self.inner_store.prune_runs(policy, progress=progress)
        for entries in self.full.values():
            for i, entry in enumerate(entries):
                if entry.run_id is not None and isinstance(
                    self.inner_reader.get_run(entry.run_id), Failure
                ):
                    entries[i] = attrs.evolve(entry, run_id=None)
        return pruned

    def history(
        self, project: str, nodeid: str
    ) -> Result[tuple[HistoryEntry, ...], DataReaderError]:
        if (project, nodeid) in self.full:
            return Success(tuple(self.full[(project, nodeid)]))
        return self.inner_reader.history(project, nodeid)


class CoverageDiesWithItsRun(PassThrough):
    """Prunes without moving a doomed run's coverage to a surviving run of its invocation."""

    def prune_runs(
        self, policy: RunRetentionPolicy, *, progress: Callable[[int, int], None] | None = None
    ) -> Result[PruneRunsResult, DataStoreError]:
        runs = self.inner_reader.list_runs(None, limit=MAX_PAGE_SIZE)
        if isinstance(runs, Success) and policy.keep_runs >= 1:
            by_project: dict[str, list[RunSummary]] = {}
            for summary in runs.unwrap().items:
                by_project.setdefault(summary.project, []).append(summary)
            for summaries in by_project.values():
                ordered = sorted(summaries, key=lambda s: (s.started_at_ms, s.id), reverse=True)
                for doomed in ordered[policy.keep_runs :]:
                    if doomed.status != RunStatus.RUNNING:
                        self.inner_store.write_coverage(doomed.id, ())
        return self.inner_store.prune_runs(policy, progress=progress)


class CleanBreakIsFlaky(PassThrough):
    """Calls flaky whatever mixes failing and passing outcomes (the old flip rule), so a
    test that broke once (``F P``) or was fixed once (``P F``) is called flaky."""

    def classify(
        self, run_id: RunId, *, policy: FlakyPolicy = DEFAULT_FLAKY_POLICY
    ) -> Result[tuple[TestClassification, ...], DataReaderError]:
        def mixed(item: TestClassification) -> TestClassification:
            failing = {o in FAILING_OUTCOMES for o in item.window}
            if failing == {True, False}:
                return attrs.evolve(item, classification=Classification.FLAKY,
                                    because=Evidence(EvidenceRule.OSCILLATION, (), "mixed"))
            return item

        return self.inner_reader.classify(run_id, policy=policy).map(
            lambda items: tuple(map(mixed, items))
        )


class ProgressOfEveryRun(PassThrough):
    """Reports a prune's progress out of every run stored, not out of the runs it removes."""

    def prune_runs(
        self, policy: RunRetentionPolicy, *, progress: Callable[[int, int], None] | None = None
    ) -> Result[PruneRunsResult, DataStoreError]:
        stored = self.inner_reader.list_runs(None, limit=MAX_PAGE_SIZE)
        every = len(stored.unwrap().items) if isinstance(stored, Success) else 0
        pruned = self.inner_store.prune_runs(policy)
        if progress is not None and isinstance(pruned, Success):
            progress(pruned.unwrap().pruned_runs, every)
        return pruned


class NewNotFrozen(PassThrough):
    """Answers "new" afresh on every read: new while no finished run with a lower id has
    the signature, so a lower-id run that ends later turns an earlier answer around."""

    def failures(self, run_id: RunId) -> Result[tuple[FailureRecord, ...], DataReaderError]:
        found = self.inner_reader.failures(run_id)
        summary = self.inner_reader.get_run(run_id)
        if isinstance(found, Failure) or isinstance(summary, Failure):
            return found
        project = summary.unwrap().project
        earlier: set[str] = set()
        for other in self.inner_reader.list_runs(project, limit=MAX_PAGE_SIZE).unwrap().items:
            if other.id < run_id and other.status in (RunStatus.PASSED, RunStatus.FAILED):
                earlier.update(f.signature for f in self.inner_reader.failures(other.id).unwrap())
        return Success(tuple(
            attrs.evolve(f, is_new=bool(f.signature) and f.signature not in earlier)
            for f in found.unwrap()
        ))


# -- the tests -------------------------------------------------------------------------------------


def _biased(machine: type[TestRunsMachine], **narrow: Any) -> type[TestRunsMachine]:
    """The bound machine with whole runs (begin, record, finish) far more likely and its pools
    narrowed by ``narrow`` (``projects``, ``invocations``, ``max_nodeids``), so deep histories
    and retention come within a short search."""

    class Biased(machine):  # type: ignore[valid-type,misc]
        @rule(data=st.data())
        def whole_run_again(self, data: st.DataObject) -> None:
            self.whole_run(**data.draw(self.whole_run_arguments(), label="whole_run"))

        @rule(data=st.data())
        def whole_run_once_more(self, data: st.DataObject) -> None:
            self.whole_run(**data.draw(self.whole_run_arguments(), label="whole_run"))

        @rule(data=st.data(), poison=st.sampled_from(["nan", "no phases", "empty nodeid"]))
        def poisoned_batch_into_a_running_run(self, data: st.DataObject, poison: str) -> None:
            running = [
                r for r in self.runs
                if self.model_reader.get_run(r).map(lambda s: s.status) == Success(
                    RunStatus.RUNNING
                )
            ]
            if running:
                self.record_batch(running[-1], data, poison)

        @rule(files=file_coverages())
        def coverage_of_the_newest_run(self, files: tuple[FileCoverage, ...]) -> None:
            if self.runs:
                run = self.runs[-1]
                self._same(
                    "write_coverage",
                    self.store.write_coverage(self._sut_id(run), files),
                    self.model_store.write_coverage(run, files),
                )

        @rule(keep=st.integers(1, 2))
        def prune_hard(self, keep: int) -> None:
            self.prune_runs(keep, None)

        @rule(data=st.data(), files=file_coverages().filter(bool))
        def covered_run_then_newer_runs_then_prune(
            self, data: st.DataObject, files: tuple[FileCoverage, ...]
        ) -> None:
            self.whole_run(**data.draw(self.whole_run_arguments(), label="whole_run"))
            self.coverage_of_the_newest_run(files)
            for _ in range(2):
                self.whole_run(**data.draw(self.whole_run_arguments(), label="whole_run"))
            self.prune_hard(1)

    for name, value in narrow.items():
        setattr(Biased, name, value)
    return Biased


def _deep_history(machine: type[TestRunsMachine]) -> type[TestRunsMachine]:
    """Whole runs that always add to history: executed items, passed or failed runs."""

    class DeepHistory(machine):  # type: ignore[valid-type,misc]
        @rule(data=st.data())
        def history_run(self, data: st.DataObject) -> None:
            self.whole_run(**data.draw(self.whole_run_arguments(), label="whole_run"))

        @rule(data=st.data())
        def fill_the_window(self, data: st.DataObject) -> None:
            for _ in range(DEFAULT_HISTORY_WINDOW + 1):
                self.whole_run(**data.draw(self.whole_run_arguments(), label="whole_run"))

        def whole_run_arguments(self) -> st.SearchStrategy[dict[str, Any]]:
            executed = item_results(
                st.sampled_from(self.nodeids),
                st.sampled_from([Outcome.PASSED, Outcome.FAILED, Outcome.ERROR]),
                attempts=False,
            )
            return st.fixed_dictionaries(
                {
                    "project": st.just(self.projects[0]),
                    "invocation": st.sampled_from(self.invocations),
                    "offset": st.just(0),
                    "batch": st.lists(executed, min_size=1, max_size=2),
                    "status": st.sampled_from([RunStatus.PASSED, RunStatus.FAILED]),
                }
            )

    return DeepHistory


def _overlapping_runs(machine: type[TestRunsMachine]) -> type[TestRunsMachine]:
    """Runs that overlap: two begun, both given the same failure, the later one ended
    first, then the earlier one."""

    class Overlapping(machine):  # type: ignore[valid-type,misc]
        @rule(data=st.data())
        def two_runs_end_out_of_order(self, data: st.DataObject) -> None:
            failing = item_results(st.just(self.nodeids[0]), st.just(Outcome.FAILED),
                                   attempts=False)
            item = data.draw(failing, label="item")
            started = []
            for _ in range(2):
                before = len(self.runs)
                self.begin_run(self.projects[0], self.invocations[0], 0, Environment())
                if len(self.runs) > before:
                    started.append(self.runs[-1])
            for run in reversed(started):
                self._same(
                    "record_results",
                    self.store.record_results(self._sut_id(run), [item]),
                    self.model_store.record_results(run, [item]),
                )
                finished = utc(self.clock.now)
                self._same(
                    "finish_run",
                    self.store.finish_run(self._sut_id(run), RunStatus.FAILED, finished),
                    self.model_store.finish_run(run, RunStatus.FAILED, finished),
                )
                self._freeze(run)

    return Overlapping


SEARCH = settings(
    max_examples=300,
    stateful_step_count=60,
    deadline=None,
    database=None,
    derandomize=True,
    phases=[HypothesisPhase.generate],  # stop at the first failure; no shrinking needed
    report_multiple_bugs=False,
)


CASES = [
    (HalfBatchOnFailure, {}, ("tests(", "counts=")),
    (CountsTrustInput, {}, ("counts",)),
    (
        CoverageDiesWithItsRun,
        {"projects": ("alpha",), "invocations": ("inv-1",)},
        ("coverage", "pruned_files"),
    ),
    (CleanBreakIsFlaky, {"projects": ("alpha",), "max_nodeids": 1}, ("classify(",)),
    (NewNotFrozen, {"projects": ("alpha",), "max_nodeids": 1}, ("is_new", "failures(")),
]
"""Each broken layer, the narrowed pools its search needs, and a word its report holds."""


def _caught(
    kind: type[PassThrough],
    narrow: dict[str, Any],
    symptoms: tuple[str, ...],
    search: settings,
    inner: LayerFactory = in_memory,
) -> None:
    """The steered ``search`` over ``kind`` wrapped around ``inner`` fails with a symptom."""
    machine = _biased(test_runs_state_machine(broken(kind, inner)), **narrow)
    if kind is CleanBreakIsFlaky:
        machine = _deep_history(machine)
    if kind is NewNotFrozen:
        machine = _overlapping_runs(machine)
    with pytest.raises(AssertionError) as caught:
        run_state_machine_as_test(machine, settings=search)
    message = str(caught.value)
    assert any(s in message for s in symptoms), message[:2_000]


@pytest.mark.parametrize(("kind", "narrow", "symptoms"), CASES)
def test_the_contract_catches_a_broken_layer(
    kind: type[PassThrough], narrow: dict[str, Any], symptoms: tuple[str, ...]
) -> None:
    _caught(kind, narrow, symptoms, SEARCH)


@pytest.mark.parametrize(("kind", "narrow", "symptoms"), CASES)
def test_the_contract_catches_a_broken_postgres_layer(
    postgres_layers: LayerFactory,
    kind: type[PassThrough],
    narrow: dict[str, Any],
    symptoms: tuple[str, ...],
) -> None:
    """The same breakage wrapped around the PostgreSQL layer fails the program that caught
    it on memory. The search runs on memory (seconds; on PostgreSQL, each example on a
    database of its own, it took minutes) and keeps the failing program; only that program
    is run on PostgreSQL (hypothesis' reuse phase replays it, step for step)."""
    found = InMemoryExampleDatabase()
    _caught(kind, narrow, symptoms, settings(SEARCH, database=found))
    replay = settings(SEARCH, database=found, phases=[HypothesisPhase.reuse])
    _caught(kind, narrow, symptoms, replay, postgres_layers)


@pytest.mark.parametrize("inner", ["memory", "postgres"])
def test_the_contract_catches_a_layer_that_keeps_all_history(
    request: pytest.FixtureRequest, inner: str
) -> None:
    """A layer that never trims history is caught by the policy contract's deep-history
    case, which records ``HISTORY_DEPTH + 1`` runs of one test. A steered state machine
    would need more than ``HISTORY_DEPTH`` finished runs of one test in one program, which
    its search does not reach in reasonable time."""
    factory = in_memory if inner == "memory" else request.getfixturevalue("postgres_layers")
    contract = FlakyPolicyContract()
    layer = merge(broken(UntrimmedHistory, factory)(), Layer.value(Clock, FixedClock(T0_MS)))
    with build(layer) as container, pytest.raises(AssertionError):
        contract.test_a_wider_window_reaches_older_evidence_in_the_deeper_history(
            container.get(DataStore), container.get(DataReader)
        )


@pytest.mark.parametrize("inner", ["memory", "postgres"])
def test_the_contract_catches_a_layer_whose_prune_progress_counts_every_run(
    request: pytest.FixtureRequest, inner: str
) -> None:
    """A prune's progress counted out of the stored runs, not the pruned ones, fails the
    prune-progress case (a steered state machine catches it as well, but this case names the
    rule)."""
    factory = in_memory if inner == "memory" else request.getfixturevalue("postgres_layers")
    contract = PruneProgressContract()
    with pytest.raises(AssertionError, match=r"totals other than|the last call was"):
        contract.test_prune_progress_counts_the_pruned_runs_and_changes_nothing_else(
            broken(ProgressOfEveryRun, factory)
        )


def test_a_correct_wrapper_passes() -> None:
    """The delegating base itself, driven by the same biased machine, is correct: the
    failures above come from the breakage, not from the wrapping or the bias."""
    _passes(in_memory)


def test_a_correct_wrapper_passes_on_postgres(postgres_layers: LayerFactory) -> None:
    """The delegating base around the PostgreSQL layer passes the same steered machine."""
    _passes(postgres_layers)


def _passes(inner: LayerFactory) -> None:
    machine = _deep_history(_biased(test_runs_state_machine(broken(PassThrough, inner))))
    run_state_machine_as_test(
        machine,
        settings=settings(max_examples=4, stateful_step_count=20, deadline=None, database=None),
    )


_: Callable[[], Layer] = broken(PassThrough)
