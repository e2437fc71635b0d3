"""The method skeleton every test-run backend shares; each backend adds its storage strategy.

Each public method of :class:`DataStore` and :class:`DataReader` reads the same in every
backend::

    validate (rules) -> unit of work -> load facts (backend) -> decide (rules)
                     -> apply (backend) -> row to record (rules)

so the skeleton is written here once, over the rules of
:mod:`runstore.services._test_runs_rules`, and a backend (in memory, SQLite, a later one) only
implements the abstract hooks: how it finds rows (the facts) and how it writes them. A hook
runs inside the method's unit of work; a hook that writes gets the time of the write
(``now_ms``, read once per method from the clock), so every backend asks the clock as often.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from operator import attrgetter
from typing import Protocol, TypeVar

from returns.result import Failure, Result, Success

from runstore.layers._progress import UnitProgress
from runstore.services._primitives import and_then, check_callable
from runstore.services._quarantine_rules import (
    check_fix_check,
    check_fix_checks,
    decide_fix_check,
    decide_quarantined,
    prepare_quarantined,
)
from runstore.services._search_rules import (
    FAILURE_CURSOR,
    TEST_CURSOR,
    FailureRow,
    SearchQuery,
    TestRow,
    check_search_request,
    failure_hit,
    hits_page,
    test_hit,
)
from runstore.services._signature_rules import (
    SignatureListing,
    SignatureRow,
    check_signature_listing,
    signature_page,
)
from runstore.services._test_runs_rules import (
    HISTORY_STATUSES,
    FailingItem,
    ItemNow,
    PreparedCase,
    PreparedCollectionError,
    PreparedCoverage,
    PreparedError,
    PreparedRun,
    PreparedTestCoverage,
    PrunePlan,
    PruneRun,
    RunFacts,
    RunListing,
    TestsForQuery,
    WindowEntry,
    check_abort,
    check_batch,
    check_cells,
    check_finish,
    check_flaky_policy,
    check_known,
    check_lookup,
    check_run_listing,
    check_search,
    check_tests_for,
    classify_run,
    compare_facts,
    coverage_report,
    coverage_trend,
    decide_exists,
    decide_failures,
    decide_finish,
    decide_history,
    decide_running,
    decide_tests_for,
    failing_streaks,
    flaky_of,
    new_signatures,
    plan_prune,
    prepare_collection_errors,
    prepare_coverage,
    prepare_results,
    prepare_run_start,
    prepare_selection,
    prepare_test_coverage,
    rank_matches,
    run_page,
    run_share,
    valid_limit,
    valid_outcomes,
    valid_policy,
    valid_project,
    valid_run_id,
)
from runstore.services.clock import Clock
from runstore.services.errors import Busy, InvalidInput, NotFound, StorageFailure
from runstore.services.pagination import Page
from runstore.services.search import FailureHit, TestHit
from runstore.services.test_runs import (
    DEFAULT_FIX_CHECKS,
    DEFAULT_FLAKY_POLICY,
    DEFAULT_TESTS_FOR_RUNS,
    HISTORY_DEPTH,
    Classification,
    CollectionError,
    CoverageReport,
    CoverageTrendPoint,
    DataReaderError,
    DataStoreError,
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

__all__ = ["DataReaderBase", "DataStoreBase"]

T = TypeVar("T")
U = TypeVar("U")
E = TypeVar("E")
Items = TypeVar("Items")


class _Units(Protocol):
    """The unit-of-work side of ``SqliteDatabase`` and ``InMemoryDatabase``."""

    def transact(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]: ...

    def read(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]: ...


class _TestRuns(ABC):
    """The facts both services of a backend read: runs, summaries, failure signatures."""

    _db: _Units

    @abstractmethod
    def _run(self, run_id: int) -> RunFacts | None:
        """The stored run ``run_id`` (any int), None when there is none."""

    @abstractmethod
    def _summary(self, run_id: int) -> RunSummary:
        """The summary of the stored run ``run_id``, counts included."""

    @abstractmethod
    def _run_signatures(self, run_id: int) -> set[str]:
        """The signatures of the first errors of the run's failing items and collection
        errors."""

    @abstractmethod
    def _first_seen(self, project: str, signatures: set[str]) -> dict[str, int | None]:
        """The first run (None once pruned) of each of ``signatures`` the project's
        signature table holds."""

    @abstractmethod
    def _running_before(self, project: str, run_id: int) -> Iterable[int]:
        """The ``running`` runs of ``project`` with an id below ``run_id``."""

    def _new_signatures(self, run_id: int, project: str) -> frozenset[str]:
        """The failure signatures new in run ``run_id`` now (:func:`new_signatures` over the
        signature table and the running runs of the project with a lower id)."""
        signatures = self._run_signatures(run_id)
        if not signatures:
            return frozenset()
        earlier_running: set[str] = set()
        for other in self._running_before(project, run_id):
            earlier_running |= self._run_signatures(other)
        first_seen = self._first_seen(project, signatures)
        return new_signatures(signatures, first_seen, earlier_running, run_id)


class DataStoreBase(_TestRuns):
    """:class:`DataStore` on a backend's hooks (see the module docstring)."""

    _clock: Clock

    # -- hooks: storage strategy -------------------------------------------------------------

    @abstractmethod
    def _insert_run(self, run: PreparedRun, now_ms: int) -> int:
        """Store a new ``running`` run; return its id (never one handed out before)."""

    @abstractmethod
    def _store_cases(self, run: RunFacts, cases: Sequence[PreparedCase], now_ms: int) -> None:
        """Store the items of a batch in the running ``run``, replacing those of the same
        node ids, with the counts of its summary and its last write."""

    @abstractmethod
    def _store_collection_errors(
        self, run: RunFacts, items: Sequence[PreparedCollectionError], now_ms: int
    ) -> None:
        """Store collection errors in the running ``run`` as :meth:`_store_cases` stores
        items."""

    @abstractmethod
    def _store_selection(self, run_id: int, selection: Selection, now_ms: int) -> None:
        """Replace the selection of the running run ``run_id``."""

    @abstractmethod
    def _end_run(
        self, run_id: int, status: RunStatus, finished_ms: int, now_ms: int, new: frozenset[str]
    ) -> None:
        """Store the final ``status`` of a run, its end, its last write and its frozen new
        signatures ``new``."""

    @abstractmethod
    def _record_history(self, run: RunFacts, finished_ms: int) -> None:
        """Add the history entries of the finished ``run`` (one per executed item, failing
        ones with the streak :func:`streak_at` gives, and the run's executed and failing
        item counts), each test's history trimmed to ``HISTORY_DEPTH``."""

    @abstractmethod
    def _record_signatures(self, run: RunFacts, finished_ms: int) -> None:
        """Add the finished ``run``'s failure signatures (:func:`tally_signatures`) to the
        project's signature table."""

    @abstractmethod
    def _stale(self, project: str, cutoff_ms: int) -> Iterable[int]:
        """The ``running`` runs of ``project`` last written before ``cutoff_ms``."""

    @abstractmethod
    def _abort(self, frozen: Sequence[tuple[int, frozenset[str]]]) -> None:
        """Store each ``(run id, new signatures)`` run as ``aborted``, ended at its last write."""

    @abstractmethod
    def _store_coverage(self, run_id: int, files: Sequence[FileCoverage], now_ms: int) -> None:
        """Replace the coverage of the run ``run_id`` with ``files``."""

    @abstractmethod
    def _prune_facts(self) -> tuple[Iterable[PruneRun], Iterable[int]]:
        """Every stored run as :func:`plan_prune` needs it, and the runs with coverage."""

    @abstractmethod
    def _prune(self, plan: PrunePlan, removed: Callable[[int], None]) -> int:
        """Move the coverage and delete the runs ``plan`` names, then every file path nothing
        refers to any more; return how many paths went. ``removed(done)`` is called as the
        runs go, with how many of ``plan.doomed`` are deleted so far (as often as the
        backend can tell: per run or per batch of runs)."""

    @abstractmethod
    def _orphans_after(self, plan: PrunePlan) -> int:
        """How many file paths :meth:`_prune` of ``plan`` would remove (changing nothing)."""

    # -- the methods of DataStore ------------------------------------------------------------

    def begin_run(self, start: RunStart) -> Result[RunId, DataStoreError]:
        """See ``DataStore.begin_run``."""
        return and_then(
            prepare_run_start(start),
            lambda run: self._db.transact(
                "begin_run", lambda: Success(RunId(self._insert_run(run, self._clock.now_ms())))
            ),
        )

    def record_results(
        self, run_id: RunId, results: Sequence[TestResult]
    ) -> Result[int, DataStoreError]:
        """See ``DataStore.record_results``."""
        return self._record(
            "record_results", check_batch(run_id, results, prepare_results), self._store_cases
        )

    def record_collection_errors(
        self, run_id: RunId, errors: Sequence[CollectionError]
    ) -> Result[int, DataStoreError]:
        """See ``DataStore.record_collection_errors``."""
        return self._record(
            "record_collection_errors",
            check_batch(run_id, errors, prepare_collection_errors),
            self._store_collection_errors,
        )

    def _record(
        self,
        operation: str,
        checked: Result[tuple[RunId, tuple[Items, ...]], InvalidInput],
        store: Callable[[RunFacts, tuple[Items, ...], int], None],
    ) -> Result[int, DataStoreError]:
        """Store a checked batch in a running run, in one unit; return its size."""

        def unit(run_id: int, items: tuple[Items, ...]) -> Result[int, DataStoreError]:
            running = decide_running(run_id, self._run(run_id))
            if isinstance(running, Failure):
                return Failure(running.failure())
            store(running.unwrap(), items, self._clock.now_ms())
            return Success(len(items))

        return and_then(checked, lambda batch: self._db.transact(operation, lambda: unit(*batch)))

    def finish_run(
        self, run_id: RunId, status: RunStatus, finished_at: datetime
    ) -> Result[RunSummary, DataStoreError]:
        """See ``DataStore.finish_run``: the run's new failure signatures are frozen, then a
        ``passed`` or ``failed`` run enters history and the signature table."""
        return and_then(
            check_finish(run_id, status, finished_at),
            lambda args: self._db.transact("finish_run", lambda: self._finish(*args)),
        )

    def _finish(
        self, run_id: int, final: RunStatus, finished_ms: int
    ) -> Result[RunSummary, DataStoreError]:
        decided = decide_finish(run_id, self._run(run_id), final)
        if isinstance(decided, Failure):
            return Failure(decided.failure())
        run = decided.unwrap()
        new = self._new_signatures(run_id, run.project)
        self._end_run(run_id, final, finished_ms, self._clock.now_ms(), new)
        if final in HISTORY_STATUSES:
            self._record_history(run, finished_ms)
            self._record_signatures(run, finished_ms)
        return Success(self._summary(run_id))

    def record_selection(
        self, run_id: RunId, selection: Selection
    ) -> Result[RunSummary, DataStoreError]:
        """See ``DataStore.record_selection``."""

        def unit(run_id: int, chosen: Selection) -> Result[RunSummary, DataStoreError]:
            running = decide_running(run_id, self._run(run_id))
            if isinstance(running, Failure):
                return Failure(running.failure())
            self._store_selection(run_id, chosen, self._clock.now_ms())
            return Success(self._summary(run_id))

        return and_then(
            check_batch(run_id, selection, prepare_selection),
            lambda args: self._db.transact("record_selection", lambda: unit(*args)),
        )

    def abort_stale_runs(
        self, project: str, *, older_than: datetime
    ) -> Result[tuple[RunId, ...], DataStoreError]:
        """See ``DataStore.abort_stale_runs``; an aborted run's ``finished_at_ms`` is its
        last write (ms), and its new failure signatures are frozen as ``finish_run`` freezes
        them (judged while every run of the batch is still running)."""

        def unit(name: str, cutoff: int) -> Result[tuple[RunId, ...], DataStoreError]:
            stale = sorted(self._stale(name, cutoff))
            self._abort([(i, self._new_signatures(i, name)) for i in stale])
            return Success(tuple(RunId(i) for i in stale))

        return and_then(
            check_abort(project, older_than),
            lambda args: self._db.transact("abort_stale_runs", lambda: unit(*args)),
        )

    def write_coverage(
        self, run_id: RunId, files: Sequence[FileCoverage]
    ) -> Result[int, DataStoreError]:
        """See ``DataStore.write_coverage``; ``missing_lines`` are stored sorted and unique."""

        def unit(run_id: int, coverage: PreparedCoverage) -> Result[int, DataStoreError]:
            found = decide_exists(run_id, self._run(run_id))
            if isinstance(found, Failure):
                return Failure(found.failure())
            self._store_coverage(run_id, coverage.files, self._clock.now_ms())
            return Success(len(coverage.files))

        return and_then(
            check_batch(run_id, files, prepare_coverage),
            lambda args: self._db.transact("write_coverage", lambda: unit(*args)),
        )

    def _plan(self, policy: RunRetentionPolicy) -> PrunePlan:
        runs, covered = self._prune_facts()
        return plan_prune(runs, covered, policy, self._clock.now_ms())

    def prune_runs(
        self,
        policy: RunRetentionPolicy,
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> Result[PruneRunsResult, DataStoreError]:
        """See ``DataStore.prune_runs``; the rules are :func:`plan_prune`'s. Files nothing
        refers to are removed on every call, also when no run was pruned."""
        told = UnitProgress(progress)

        def unit(policy: RunRetentionPolicy) -> Result[PruneRunsResult, DataStoreError]:
            plan = self._plan(policy)
            told.planned(len(plan.doomed))
            return Success(PruneRunsResult(len(plan.doomed), self._prune(plan, told.reached)))

        return and_then(
            check_callable(progress, "progress"),
            lambda _: and_then(
                valid_policy(policy),
                lambda p: self._db.transact("prune_runs", lambda: unit(p)).map(told.committed),
            ),
        )

    def plan_prune(self, policy: RunRetentionPolicy) -> Result[PruneRunsResult, DataStoreError]:
        """See ``DataStore.plan_prune``: :func:`plan_prune`'s decision, and the files no
        surviving run (coverage moved as ``prune_runs`` moves it) would refer to. One read."""

        def unit(policy: RunRetentionPolicy) -> Result[PruneRunsResult, DataStoreError]:
            plan = self._plan(policy)
            return Success(PruneRunsResult(len(plan.doomed), self._orphans_after(plan)))

        return and_then(
            valid_policy(policy), lambda p: self._db.read("plan_prune", lambda: unit(p))
        )

    # -- per-test coverage -------------------------------------------------------------------

    @abstractmethod
    def _store_test_coverage(
        self, run: RunFacts, coverage: PreparedTestCoverage, now_ms: int
    ) -> None:
        """Replace the per-test coverage of the stored ``run`` with ``coverage`` and mark
        the run as measured per test (also when ``coverage`` has no rows)."""

    def write_test_coverage(
        self, run_id: RunId, tests: Sequence[TestLines]
    ) -> Result[int, DataStoreError]:
        """See ``DataStore.write_test_coverage``: checked by :func:`prepare_test_coverage`,
        then stored in one unit; returns the number of ``(test, file)`` rows."""

        def unit(run_id: int, coverage: PreparedTestCoverage) -> Result[int, DataStoreError]:
            found = decide_exists(run_id, self._run(run_id))
            if isinstance(found, Failure):
                return Failure(found.failure())
            self._store_test_coverage(found.unwrap(), coverage, self._clock.now_ms())
            return Success(len(coverage.rows))

        return and_then(
            check_batch(run_id, tests, prepare_test_coverage),
            lambda args: self._db.transact("write_test_coverage", lambda: unit(*args)),
        )


    # -- quarantine and fix checks -----------------------------------------------------------

    @abstractmethod
    def _recorded_nodeids(self, run: RunFacts, nodeids: Sequence[str]) -> frozenset[str]:
        """Those of ``nodeids`` the stored ``run`` has an item of."""

    @abstractmethod
    def _store_quarantined(
        self, run: RunFacts, items: tuple[QuarantinedItem, ...], now_ms: int
    ) -> None:
        """Replace the quarantined items of the running ``run`` with ``items`` (each an item
        of the run)."""

    @abstractmethod
    def _store_fix_check(self, result: FixCheckResult, now_ms: int) -> None:
        """Append one checked fix check, stamped ``now_ms``."""

    def mark_quarantined(
        self, run_id: RunId, items: Sequence[QuarantinedItem]
    ) -> Result[int, DataStoreError]:
        """See ``DataStore.mark_quarantined``: checked by :func:`prepare_quarantined`, then
        the running run and its items decided on (:func:`decide_quarantined`) and stored,
        in one unit."""

        def unit(
            run_id: int, prepared: tuple[QuarantinedItem, ...]
        ) -> Result[int, DataStoreError]:
            running = decide_running(run_id, self._run(run_id))
            if isinstance(running, Failure):
                return Failure(running.failure())
            run = running.unwrap()
            recorded = self._recorded_nodeids(run, [i.nodeid for i in prepared])
            decided = decide_quarantined(prepared, recorded)
            if isinstance(decided, Failure):
                return Failure(decided.failure())
            self._store_quarantined(run, decided.unwrap(), self._clock.now_ms())
            return Success(len(prepared))

        return and_then(
            check_batch(run_id, items, prepare_quarantined),
            lambda args: self._db.transact("mark_quarantined", lambda: unit(*args)),
        )

    def record_fix_check(self, result: FixCheckResult) -> Result[FixCheck, DataStoreError]:
        """See ``DataStore.record_fix_check``: :func:`check_fix_check`, then its run decided
        on (:func:`decide_fix_check`) and the check stored, in one unit."""

        def unit(checked: FixCheckResult) -> Result[FixCheck, DataStoreError]:
            run = None if checked.run_id is None else self._run(checked.run_id)
            decided = decide_fix_check(checked, run)
            if isinstance(decided, Failure):
                return Failure(decided.failure())
            now_ms = self._clock.now_ms()
            self._store_fix_check(decided.unwrap(), now_ms)
            return Success(FixCheck(decided.unwrap(), now_ms))

        return and_then(
            check_fix_check(result),
            lambda checked: self._db.transact("record_fix_check", lambda: unit(checked)),
        )

class DataReaderBase(_TestRuns):
    """:class:`DataReader` on a backend's hooks (see the module docstring); every method
    checks its arguments, then reads in one read unit (one snapshot)."""

    # -- hooks: query strategy ---------------------------------------------------------------

    @abstractmethod
    def _latest(self, project: str) -> RunSummary | None:
        """The newest run of ``project`` by (start, id), None without runs."""

    @abstractmethod
    def _runs(self, listing: RunListing) -> Sequence[RunSummary]:
        """The runs ``listing`` names, newest first by (start, id), ``limit + 1`` at most."""

    @abstractmethod
    def _projects(self) -> Iterable[str]:
        """Every project with a stored run (each once)."""

    @abstractmethod
    def _detail(self, run_id: int, nodeid: str) -> TestDetail | None:
        """Everything stored about item ``nodeid`` of a stored run, None without it."""

    @abstractmethod
    def _tests(self, run_id: int, outcomes: frozenset[Outcome] | None) -> Iterable[TestRecord]:
        """The items of a stored run (only those with ``outcomes`` when given)."""

    @abstractmethod
    def _cells(
        self,
        run_ids: Sequence[int],
        nodeids: Sequence[str] | None,
        outcomes: frozenset[Outcome] | None,
    ) -> Iterable[TestCell]:
        """The items of those of ``run_ids`` that are stored runs (only those of ``nodeids``
        and with ``outcomes`` when given) as ``TestCell``s, in any order."""

    @abstractmethod
    def _failing(self, run: RunFacts) -> Sequence[FailingItem]:
        """The failing items of a stored run, each with its history entries of runs with a
        lower id (or pruned), newest first."""

    @abstractmethod
    def _collection_heads(self, run_id: int) -> Iterable[tuple[str, PreparedError | None]]:
        """Each collection error of a stored run: ``(node id, first error)``."""

    @abstractmethod
    def _alive(self, run_ids: set[int]) -> set[int]:
        """Which of ``run_ids`` are stored runs (not pruned)."""

    @abstractmethod
    def _now_items(self, run: RunFacts, depth: int = HISTORY_DEPTH) -> Iterable[ItemNow]:
        """Every item of a stored run, each with its history entries of runs with a lower id
        (or pruned), newest first: at least the newest ``depth`` of them (a backend may
        return more; the rules cut the window)."""

    @abstractmethod
    def _histories(
        self, project: str, depth: int = HISTORY_DEPTH
    ) -> Iterable[tuple[str, Sequence[WindowEntry]]]:
        """Each test of ``project`` with history: its node id and entries newest first, at
        least the newest ``depth`` of them."""

    @abstractmethod
    def _history(self, project: str, nodeid: str) -> tuple[HistoryEntry, ...]:
        """The history entries of one test, newest first (empty when it has none)."""

    @abstractmethod
    def _nodeids(self, project: str) -> Iterable[str]:
        """The node ids with a stored item, a history entry or per-test coverage in
        ``project``."""

    @abstractmethod
    def _slowest(self, run_id: int, count: int) -> Sequence[TestRecord]:
        """The ``count`` slowest items of a stored run, slowest first, ties by node id."""

    @abstractmethod
    def _coverage_source(self, run: RunFacts) -> int | None:
        """The run whose coverage ``coverage(run)`` reads: the run itself when it has
        coverage, else the lowest-id run of its invocation that has; None when none has."""

    @abstractmethod
    def _coverage_files(self, source: int) -> Iterable[FileCoverage]:
        """The coverage rows of the run ``source``."""

    @abstractmethod
    def _coverage_points(self, project: str, count: int) -> Sequence[tuple[int, int, int]]:
        """The newest ``count`` runs of ``project`` with a coverage source, newest first by
        (start, id): ``(run id, started_at_ms, source run)``."""

    @abstractmethod
    def _coverage_totals(self, source: int) -> tuple[int, int, int, int]:
        """Totals of the run ``source``'s coverage: statements, missing statements, branches,
        missing branches."""

    @abstractmethod
    def _outcomes(self, run_id: int) -> Mapping[str, Outcome]:
        """Each item of a stored run: node id -> outcome."""

    # -- the methods of DataReader -----------------------------------------------------------

    def _read(
        self,
        operation: str,
        checked: Result[T, InvalidInput],
        fn: Callable[[T], Result[U, DataReaderError]],
    ) -> Result[U, DataReaderError]:
        """Run ``fn`` over the checked arguments in one read unit named ``operation``."""
        return and_then(checked, lambda args: self._db.read(operation, lambda: fn(args)))

    def _on_run(
        self,
        operation: str,
        run_id: object,
        checked: Result[T, InvalidInput],
        fn: Callable[[RunFacts, T], Result[U, DataReaderError]],
    ) -> Result[U, DataReaderError]:
        """Run ``fn`` over the stored run ``run_id`` (``NotFound`` without it) and the other
        checked arguments (checked first) in one read unit named ``operation``."""

        def read(args: tuple[T, RunId]) -> Result[U, DataReaderError]:
            found = decide_exists(args[1], self._run(args[1]))
            if isinstance(found, Failure):
                return Failure(found.failure())
            return fn(found.unwrap(), args[0])

        both = checked.bind(lambda other: valid_run_id(run_id).map(lambda rid: (other, rid)))
        return self._read(operation, both, read)

    def latest_run(self, project: str) -> Result[RunSummary, DataReaderError]:
        """See ``DataReader.latest_run``; ``NotFound("project", project)`` without runs."""

        def latest(name: str) -> Result[RunSummary, DataReaderError]:
            newest = self._latest(name)
            return Failure(NotFound("project", name)) if newest is None else Success(newest)

        return self._read("latest_run", valid_project(project), latest)

    def get_run(self, run_id: RunId) -> Result[RunSummary, DataReaderError]:
        """See ``DataReader.get_run``."""
        return self._on_run(
            "get_run", run_id, _NOTHING, lambda run, _: Success(self._summary(run.id))
        )

    def list_runs(
        self,
        project: str | None,
        *,
        status: RunStatus | None = None,
        limit: int = 20,
        cursor: str | None = None,
        session_id: str | None = None,
    ) -> Result[Page[RunSummary], DataReaderError]:
        """See ``DataReader.list_runs``: newest first by (start, id); keyset cursor."""
        return self._read(
            "list_runs",
            check_run_listing(project, status, limit, cursor, session_id),
            lambda listing: Success(run_page(self._runs(listing), listing.limit)),
        )

    def projects(self) -> Result[tuple[str, ...], DataReaderError]:
        """See ``DataReader.projects``."""
        return self._read("projects", _NOTHING, lambda _: Success(tuple(sorted(self._projects()))))

    def test_detail(self, run_id: RunId, nodeid: str) -> Result[TestDetail, DataReaderError]:
        """See ``DataReader.test_detail`` (the node id is checked before the run id)."""

        def detail(run: RunFacts, wanted: str) -> Result[TestDetail, DataReaderError]:
            found = self._detail(run.id, wanted)
            return Failure(NotFound("test", wanted)) if found is None else Success(found)

        return self._on_run("test_detail", run_id, valid_project(nodeid, "nodeid"), detail)

    def tests(
        self, run_id: RunId, *, outcomes: frozenset[Outcome] | None = None
    ) -> Result[tuple[TestRecord, ...], DataReaderError]:
        """See ``DataReader.tests``."""

        def tests(
            run: RunFacts, only: frozenset[Outcome] | None
        ) -> Result[tuple[TestRecord, ...], DataReaderError]:
            return Success(tuple(sorted(self._tests(run.id, only), key=lambda r: r.nodeid)))

        return self._on_run("tests", run_id, valid_outcomes(outcomes), tests)

    def run_cells(
        self,
        run_ids: Iterable[RunId],
        *,
        nodeids: Iterable[str] | None = None,
        outcomes: frozenset[Outcome] | None = None,
    ) -> Result[tuple[TestCell, ...], DataReaderError]:
        """See ``DataReader.run_cells``: :func:`check_cells`, then one read of the cells,
        sorted by (run id, node id) here so that every backend orders node ids alike."""
        return self._read(
            "run_cells",
            check_cells(run_ids, nodeids, outcomes),
            lambda args: Success(tuple(sorted(
                self._cells(*args) if args[0] and args[1] != () else (), key=_CELL_ORDER
            ))),
        )

    def failures(self, run_id: RunId) -> Result[tuple[FailureRecord, ...], DataReaderError]:
        """See ``DataReader.failures``: ``is_new`` from the signatures frozen when the run
        ended (computed afresh while it runs); streaks from the history entries of runs
        with a lower id."""

        def failures(run: RunFacts, _: None) -> Result[tuple[FailureRecord, ...], DataReaderError]:
            new = run.new_signatures
            if new is None:
                new = self._new_signatures(run.id, run.project)
            items = self._failing(run)
            streaks = failing_streaks(run.id, items)
            since = {s.since for s in streaks if s.since is not None and s.since != run.id}
            alive = self._alive(since) if since else set()
            collection = self._collection_heads(run.id)
            return Success(decide_failures(run.id, items, streaks, alive, collection, new))

        return self._on_run("failures", run_id, _NOTHING, failures)

    def classify(
        self, run_id: RunId, *, policy: FlakyPolicy = DEFAULT_FLAKY_POLICY
    ) -> Result[tuple[TestClassification, ...], DataReaderError]:
        """See ``DataReader.classify``: each item now (with the run's commit, its failed
        rerun attempts and the run's executed and failing counts) against the history
        entries of runs with a lower id (:func:`classify_run` under ``policy``, checked
        first)."""
        return self._on_run(
            "classify",
            run_id,
            check_flaky_policy(policy),
            lambda run, chosen: Success(
                classify_run(
                    run, self._now_items(run, chosen.window - 1), chosen, self._share(run)
                )
            ),
        )

    def _share(self, run: RunFacts) -> tuple[int, int]:
        """The run's executed and failing item counts now (:func:`run_share`)."""
        return run_share(self._summary(run.id).counts)

    def _unsettled_items(self, run: RunFacts, depth: int = HISTORY_DEPTH) -> Iterable[ItemNow]:
        """The items ``classify_unstable`` judges: at least every item that fails now, had
        failed attempts now, or has a failing or rerun-failed history entry (every item, by
        default; a backend may read fewer). No policy makes any other item unstable: every
        flaky rule rests on a failing entry or a failed attempt. ``depth`` as
        :meth:`_now_items`."""
        return self._now_items(run, depth)

    def classify_unstable(
        self, run_id: RunId, *, policy: FlakyPolicy = DEFAULT_FLAKY_POLICY
    ) -> Result[tuple[TestClassification, ...], DataReaderError]:
        """See ``DataReader.classify_unstable``: :func:`classify_run` under ``policy`` over
        the unsettled items (:meth:`_unsettled_items`), the stable verdicts left out."""
        return self._on_run(
            "classify_unstable",
            run_id,
            check_flaky_policy(policy),
            lambda run, chosen: Success(tuple(
                c for c in classify_run(
                    run, self._unsettled_items(run, chosen.window - 1), chosen,
                    self._share(run),
                )
                if c.classification is not Classification.STABLE
            )),
        )

    def flaky_tests(
        self, project: str, *, policy: FlakyPolicy = DEFAULT_FLAKY_POLICY
    ) -> Result[tuple[FlakyTest, ...], DataReaderError]:
        """See ``DataReader.flaky_tests``: the newest window of each test's history, judged
        by :func:`flaky_entry` under ``policy`` (checked after the project)."""
        checked = valid_project(project).bind(
            lambda name: check_flaky_policy(policy).map(lambda chosen: (name, chosen))
        )
        return self._read(
            "flaky_tests",
            checked,
            lambda args: Success(
                flaky_of(self._histories(args[0], args[1].window), args[1])
            ),
        )

    def history(
        self, project: str, nodeid: str
    ) -> Result[tuple[HistoryEntry, ...], DataReaderError]:
        """See ``DataReader.history``."""
        checked = check_lookup(project, nodeid)
        return self._read(
            "history", checked, lambda key: decide_history(key[1], self._history(*key))
        )

    def find_tests(
        self, project: str, fragment: str, *, limit: int = 20
    ) -> Result[tuple[str, ...], DataReaderError]:
        """See ``DataReader.find_tests``: searched among node ids with a stored item or a
        history entry in ``project``; plain substring match (no wildcards)."""
        return self._read(
            "find_tests",
            check_search(project, fragment, limit),
            lambda args: Success(rank_matches(set(self._nodeids(args[0])), args[1], args[2])),
        )

    def slowest(
        self, run_id: RunId, *, limit: int = 10
    ) -> Result[tuple[TestRecord, ...], DataReaderError]:
        """See ``DataReader.slowest`` (the limit is checked before the run id)."""
        return self._on_run(
            "slowest",
            run_id,
            valid_limit(limit),
            lambda run, count: Success(tuple(self._slowest(run.id, count))),
        )

    def coverage(self, run_id: RunId) -> Result[CoverageReport, DataReaderError]:
        """See ``DataReader.coverage``."""

        def coverage(run: RunFacts, _: None) -> Result[CoverageReport, DataReaderError]:
            source = self._coverage_source(run)
            if source is None:
                return Failure(NotFound("coverage", str(run.id)))
            return Success(coverage_report(run.id, source, self._coverage_files(source)))

        return self._on_run("coverage", run_id, _NOTHING, coverage)

    def coverage_trend(
        self, project: str, *, limit: int = 50
    ) -> Result[tuple[CoverageTrendPoint, ...], DataReaderError]:
        """See ``DataReader.coverage_trend``: a run counts when it or a sibling run of its
        invocation has coverage (what ``coverage(run)`` would show)."""

        def trend(args: tuple[str, int]) -> Result[tuple[CoverageTrendPoint, ...], DataReaderError]:
            points = self._coverage_points(*args)
            totals = {source: self._coverage_totals(source) for source in {p[2] for p in points}}
            return Success(coverage_trend(points, totals))

        checked = valid_project(project).bind(
            lambda name: valid_limit(limit).map(lambda n: (name, n))
        )
        return self._read("coverage_trend", checked, trend)

    def compare(self, run_a: RunId, run_b: RunId) -> Result[RunComparison, DataReaderError]:
        """See ``DataReader.compare``; the sets are defined by :func:`compare_facts`."""

        def compare(ids: tuple[RunId, RunId]) -> Result[RunComparison, DataReaderError]:
            first = decide_exists(ids[0], self._run(ids[0]))
            if isinstance(first, Failure):
                return Failure(first.failure())
            second = decide_exists(ids[1], self._run(ids[1]))
            if isinstance(second, Failure):
                return Failure(second.failure())
            a, b = first.unwrap(), second.unwrap()
            return Success(compare_facts(a, b, self._outcomes(a.id), self._outcomes(b.id)))

        checked = valid_run_id(run_a, "run_a").bind(
            lambda a: valid_run_id(run_b, "run_b").map(lambda b: (a, b))
        )
        return self._read("compare", checked, compare)

    # -- per-test coverage -------------------------------------------------------------------

    @abstractmethod
    def _test_coverage_runs(self, project: str, count: int) -> Sequence[int]:
        """The newest ``count`` runs of ``project`` (by start, then id) measured per test,
        newest first."""

    @abstractmethod
    def _test_coverage_rows(
        self, run_ids: Sequence[int], path: str
    ) -> Iterable[tuple[int, str, Sequence[int] | None]]:
        """Each ``(run id, node id, lines)`` of the runs ``run_ids`` for the file ``path``
        (lines sorted), and ``(run id, node id, None)`` where a test with lines of the file
        in one of the runs ran in another of them (recorded there as an item not skipped,
        or with lines of another file); any order, repeats allowed."""

    def tests_for(
        self,
        project: str,
        path: str,
        *,
        line: int | None = None,
        runs: int = DEFAULT_TESTS_FOR_RUNS,
        limit: int = 100,
    ) -> Result[TestsFor, DataReaderError]:
        """See ``DataReader.tests_for``: the runs, then their rows of the file, in one read;
        the answer is :func:`decide_tests_for`'s."""

        def read(query: TestsForQuery) -> Result[TestsFor, DataReaderError]:
            run_ids = self._test_coverage_runs(query.project, query.runs)
            rows = self._test_coverage_rows(run_ids, query.path) if run_ids else ()
            decided = decide_tests_for(query, run_ids, rows)
            return Failure(decided.failure()) if isinstance(decided, Failure) else decided

        return self._read(
            "tests_for", check_tests_for(project, path, line, runs, limit), read
        )


    # -- search (runstore.services.search) ---------------------------------------------------

    @abstractmethod
    def _search_failures(
        self, query: SearchQuery, project: str | None, start: tuple[int, ...] | None, count: int
    ) -> Sequence[FailureRow]:
        """The first ``count`` failure documents (of ``project`` when given) matching
        ``query`` after the cursor position ``start``, in the listing's order."""

    @abstractmethod
    def _search_tests(
        self, query: SearchQuery, project: str | None, start: tuple[int, ...] | None, count: int
    ) -> Sequence[TestRow]:
        """The first ``count`` test documents (of ``project`` when given) matching
        ``query`` after the cursor position ``start``, in the listing's order."""

    def search_failures(
        self,
        text: str,
        *,
        project: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> Result[Page[FailureHit], DataReaderError]:
        """See ``DataReader.search_failures``: check, find ``limit + 1`` rows in one read,
        make the hits (rules)."""

        def read(
            args: tuple[SearchQuery, tuple[int, ...] | None],
        ) -> Result[Page[FailureHit], DataReaderError]:
            query, start = args
            rows = self._search_failures(query, project, start, limit + 1)
            return Success(
                hits_page(rows, limit, FAILURE_CURSOR, FailureRow.position, failure_hit, query)
            )

        checked = check_search_request(text, limit, cursor, FAILURE_CURSOR, project=project)
        return self._read("search_failures", checked, read)

    def search_tests(
        self,
        text: str,
        *,
        project: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> Result[Page[TestHit], DataReaderError]:
        """See ``DataReader.search_tests``: check, find ``limit + 1`` rows in one read, make
        the hits (rules)."""

        def read(
            args: tuple[SearchQuery, tuple[int, ...] | None],
        ) -> Result[Page[TestHit], DataReaderError]:
            query, start = args
            rows = self._search_tests(query, project, start, limit + 1)
            return Success(hits_page(rows, limit, TEST_CURSOR, TestRow.position, test_hit, query))

        checked = check_search_request(text, limit, cursor, TEST_CURSOR, project=project)
        return self._read("search_tests", checked, read)

    # -- failure signatures across runs (runstore.services._signature_rules) ---------------

    @abstractmethod
    def _signatures(self, listing: SignatureListing) -> Sequence[SignatureRow]:
        """The first ``listing.limit + 1`` signatures of ``listing.project`` placed before
        ``listing.before`` (all when None), newest place (``seen_seq``) first."""

    def failure_signatures(
        self, project: str, *, limit: int = 20, cursor: str | None = None
    ) -> Result[Page[FailureSignature], DataReaderError]:
        """See ``DataReader.failure_signatures``: check, read ``limit + 1`` rows in one read,
        make the page (:func:`signature_page`)."""
        return self._read(
            "failure_signatures",
            check_signature_listing(project, limit, cursor),
            lambda listing: Success(signature_page(self._signatures(listing), listing.limit)),
        )


    # -- quarantine and fix checks -----------------------------------------------------------

    @abstractmethod
    def _quarantined(self, run_id: int) -> Sequence[QuarantinedItem]:
        """The quarantined items of the stored run ``run_id``, by node id."""

    @abstractmethod
    def _fix_checks(self, project: str, nodeid: str | None, limit: int) -> Sequence[FixCheck]:
        """The newest ``limit`` fix checks of ``project`` (of ``nodeid`` when given), newest
        first."""

    @abstractmethod
    def _known_nodeids(self, project: str, nodeids: Sequence[str]) -> frozenset[str]:
        """Those of ``nodeids`` with a record in ``project`` (as ``_nodeids`` lists them)."""

    def known_tests(
        self, project: str, nodeids: Iterable[str]
    ) -> Result[frozenset[str], DataReaderError]:
        """See ``DataReader.known_tests``: :func:`check_known`, then one read."""
        return self._read(
            "known_tests", check_known(project, nodeids),
            lambda args: Success(self._known_nodeids(*args)),
        )

    def quarantined(self, run_id: RunId) -> Result[tuple[QuarantinedItem, ...], DataReaderError]:
        """See ``DataReader.quarantined``: one read of the stored run's rows."""
        return self._on_run(
            "quarantined", run_id, _NOTHING,
            lambda run, _: Success(tuple(self._quarantined(run.id))),
        )

    def fix_checks(
        self, project: str, nodeid: str | None = None, *, limit: int = DEFAULT_FIX_CHECKS
    ) -> Result[tuple[FixCheck, ...], DataReaderError]:
        """See ``DataReader.fix_checks``: :func:`check_fix_checks`, then one read."""
        return self._read(
            "fix_checks", check_fix_checks(project, nodeid, limit),
            lambda args: Success(tuple(self._fix_checks(*args))),
        )

_CELL_ORDER = attrgetter("run_id", "nodeid")
"""The order of ``run_cells`` (an ``attrgetter``: the sort key of 1,000s of cells, made in C)."""

_NOTHING: Result[None, InvalidInput] = Success(None)
"""The checked arguments of a method that takes none but a run id."""
