"""The in-memory test-run layer: ``InMemoryDataStore`` and ``InMemoryDataReader``.

Both services share one :class:`TestRunsMemoryState`, whose every table is a ``TxDict``
mirror of the container's :class:`InMemoryDatabase`, so a unit of work that fails changes
nothing, exactly like a rolled-back SQLite transaction. Values stored in the mirrors are
immutable and replaced whole, so undoing a write restores them exactly.

The in-memory layer is the reference the contract suite compares the live layer with; it
follows the same documented rules, through the same helpers (``runstore.services._testruns_rules``):

- Run ids start at 1 and grow by 1 per created run; like SQLite's AUTOINCREMENT an id is
  never handed out again, even after its run was pruned (a ``begin_run`` that fails uses no
  id).
- History entries are ordered by a sequence number taken once per finished run (finish
  order); "previous" entries of run ``r`` are those of runs with a lower id or of pruned runs.
- ``files`` are the paths ever written (module paths, frame paths, coverage paths) until
  ``prune_runs`` removes those nothing stored refers to any more.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from datetime import datetime
from typing import TypeVar

import attrs
from returns.result import Failure, Result, Success

from runstore.layers._layer import Container, Layer, merge
from runstore.layers._memory_database import InMemoryDatabase
from runstore.layers._unit_of_work import TxDict
from runstore.services._testruns_rules import (
    EXECUTED_OUTCOMES,
    RUNS_CURSOR,
    CaseHistory,
    PreparedCase,
    PreparedCollectionError,
    PreparedError,
    PruneRun,
    Streak,
    WindowEntry,
    check_finish,
    check_time,
    classify,
    compare_runs,
    counts_of,
    coverage_percent,
    failure_record,
    flaky_entry,
    new_signatures,
    plan_prune,
    prepare_collection_errors,
    prepare_coverage,
    prepare_results,
    prepare_run_start,
    prepare_selection,
    previous_window,
    rank_matches,
    rerun_failures,
    run_is_partial,
    sort_failures,
    sort_flaky,
    streak_of,
    subtest_counts,
    test_detail,
    valid_fragment,
    valid_limit,
    valid_outcomes,
    valid_policy,
    valid_project,
    valid_run_id,
    valid_status,
)
from runstore.services.clock import Clock
from runstore.services.errors import IllegalTransition, NotFound
from runstore.services.pagination import Page
from runstore.services.testruns import (
    DEFAULT_HISTORY_WINDOW,
    FAILING_OUTCOMES,
    CollectionError,
    CoverageReport,
    CoverageTrendPoint,
    DataReader,
    DataReaderError,
    DataStore,
    DataStoreError,
    Environment,
    FailureRecord,
    FileCoverage,
    FlakyTest,
    HistoryEntry,
    Outcome,
    PruneRunsResult,
    RunComparison,
    RunId,
    RunRetentionPolicy,
    RunStart,
    RunStatus,
    RunSummary,
    Selection,
    TestClassification,
    TestDetail,
    TestRecord,
    TestResult,
)

__all__ = [
    "InMemoryDataReader",
    "InMemoryDataStore",
    "TestRunsMemoryState",
    "in_memory_test_runs",
]

T = TypeVar("T")


@attrs.frozen
class _Run:
    id: int
    project: str
    invocation_id: str
    status: RunStatus
    started_at_ms: int
    finished_at_ms: int | None
    last_write_at_ms: int
    environment: Environment
    selection: Selection
    new_signatures: frozenset[str] | None = None
    """The signatures new in the run, frozen when it ended (None while running)."""


@attrs.frozen
class _History:
    seq: int
    run_id: int | None
    outcome: Outcome
    duration_ms: float
    recorded_at_ms: int
    message: str | None = None
    git_commit: str | None = None
    git_dirty: bool | None = None
    rerun_failures: int = 0
    streak: int | None = None
    streak_since: int | None = None
    streak_message: str | None = None

    def entry(self) -> WindowEntry:
        """This row as the rules see it."""
        return WindowEntry(
            self.run_id,
            self.outcome,
            self.git_commit,
            self.git_dirty,
            self.rerun_failures,
            self.message,
            self.streak,
            self.streak_since,
            self.streak_message,
        )


@attrs.frozen
class _Signature:
    exception_type: str
    message: str
    frame: str
    count: int
    first_seen_run_id: int | None
    last_seen_run_id: int | None
    first_seen_at_ms: int
    last_seen_at_ms: int


class TestRunsMemoryState:
    """Every test-run table of one in-memory store, as ``TxDict`` mirrors of ``db``."""

    __test__ = False

    def __init__(self, db: InMemoryDatabase) -> None:
        self.db = db
        self.counters: TxDict[str, int] = db.mirror()
        self.runs: TxDict[int, _Run] = db.mirror()
        self.cases: TxDict[int, TxDict[str, PreparedCase]] = db.mirror()
        self.collection: TxDict[int, TxDict[str, PreparedCollectionError]] = db.mirror()
        self.modules: TxDict[int, frozenset[str]] = db.mirror()
        self.coverage: TxDict[int, tuple[FileCoverage, ...]] = db.mirror()
        self.files: TxDict[str, None] = db.mirror()
        self.history: TxDict[tuple[str, str], tuple[_History, ...]] = db.mirror()
        self.signatures: TxDict[tuple[str, str], _Signature] = db.mirror()

    def cases_of(self, run_id: int) -> TxDict[str, PreparedCase]:
        """The items of a run (created empty on first use)."""
        table = self.cases.get(run_id)
        if table is None:
            table = self.db.mirror()
            self.cases[run_id] = table
        return table

    def collection_of(self, run_id: int) -> TxDict[str, PreparedCollectionError]:
        """The collection errors of a run (created empty on first use)."""
        table = self.collection.get(run_id)
        if table is None:
            table = self.db.mirror()
            self.collection[run_id] = table
        return table

    def summary(self, run: _Run) -> RunSummary:
        """The run's summary, counts computed from its stored items."""
        cases = self.cases.get(run.id)
        collection = self.collection.get(run.id)
        return RunSummary(
            id=RunId(run.id),
            project=run.project,
            invocation_id=run.invocation_id,
            status=run.status,
            started_at_ms=run.started_at_ms,
            finished_at_ms=run.finished_at_ms,
            counts=counts_of(c.outcome for c in cases.values()) if cases else counts_of(()),
            collection_errors=len(collection) if collection else 0,
            environment=run.environment,
            selection=run.selection,
            subtests=subtest_counts(
                t.outcome for c in (cases.values() if cases else ()) for t in c.subtests
            ),
        )

    def heads(self, run_id: int) -> Iterator[PreparedError]:
        """The first error of every failing item and collection error of a run."""
        cases = self.cases.get(run_id)
        for case in cases.values() if cases else ():
            if case.outcome in FAILING_OUTCOMES and case.errors:
                yield case.errors[0]
        collection = self.collection.get(run_id)
        for item in collection.values() if collection else ():
            yield item.error

    def new_signatures(self, run: _Run) -> frozenset[str]:
        """The failure signatures new in ``run`` now (:func:`new_signatures` over the
        signature table and the running runs of the project with a lower id)."""
        signatures = {h.signature for h in self.heads(run.id)}
        if not signatures:
            return frozenset()
        first_seen = {
            sig: known.first_seen_run_id
            for sig in signatures
            if (known := self.signatures.get((run.project, sig))) is not None
        }
        earlier_running = {
            h.signature
            for other in self.runs.values()
            if other.project == run.project
            and other.status == RunStatus.RUNNING
            and other.id < run.id
            for h in self.heads(other.id)
        }
        return new_signatures(signatures, first_seen, earlier_running, run.id)

    def previous(self, project: str, nodeid: str, run_id: int) -> tuple[WindowEntry, ...]:
        """The previous window entries of item ``nodeid`` of run ``run_id``."""
        entries = self.history.get((project, nodeid), ())
        return previous_window((e.entry() for e in entries), run_id)

    def remember_paths(self, paths: Iterator[str]) -> None:
        """Record file paths as the live layer's ``files`` rows would be."""
        files = self.files
        for path in paths:
            if path not in files:
                files[path] = None


def _not_found_run(run_id: int) -> Failure[NotFound]:
    return Failure(NotFound("run", str(run_id)))


class InMemoryDataStore:
    """``DataStore`` kept in memory (see the module docstring); identical Results to
    ``SqliteDataStore`` for identical calls."""

    def __init__(self, state: TestRunsMemoryState, clock: Clock) -> None:
        self._state = state
        self._db = state.db
        self._clock = clock

    def begin_run(self, start: RunStart) -> Result[RunId, DataStoreError]:
        """See ``DataStore.begin_run``."""
        prepared = prepare_run_start(start)
        if isinstance(prepared, Failure):
            return prepared
        run = prepared.unwrap()
        state = self._state

        def write() -> Result[RunId, DataStoreError]:
            run_id = state.counters.get("run", 0) + 1
            state.counters["run"] = run_id
            state.runs[run_id] = _Run(
                id=run_id,
                project=run.project,
                invocation_id=run.invocation_id,
                status=RunStatus.RUNNING,
                started_at_ms=run.started_at_ms,
                finished_at_ms=None,
                last_write_at_ms=self._clock.now_ms(),
                environment=run.environment,
                selection=run.selection,
            )
            return Success(RunId(run_id))

        return self._db.transact("begin_run", write)

    def _running(self, run_id: int) -> Result[_Run, DataStoreError]:
        run = self._state.runs.get(run_id)
        if run is None:
            return _not_found_run(run_id)
        if run.status != RunStatus.RUNNING:
            return Failure(
                IllegalTransition("run", str(run_id), run.status.value, RunStatus.RUNNING.value)
            )
        return Success(run)

    def _touch(self, run: _Run) -> None:
        self._state.runs[run.id] = attrs.evolve(run, last_write_at_ms=self._clock.now_ms())

    def _add_modules(self, run_id: int, paths: Sequence[str]) -> None:
        state = self._state
        known = state.modules.get(run_id, frozenset())
        if not known.issuperset(paths):
            state.modules[run_id] = known.union(paths)

    def record_results(
        self, run_id: RunId, results: Sequence[TestResult]
    ) -> Result[int, DataStoreError]:
        """See ``DataStore.record_results``."""
        checked = valid_run_id(run_id)
        if isinstance(checked, Failure):
            return checked
        prepared = prepare_results(results)
        if isinstance(prepared, Failure):
            return prepared
        cases = prepared.unwrap()
        rid = checked.unwrap()
        state = self._state

        def write() -> Result[int, DataStoreError]:
            running = self._running(rid)
            if isinstance(running, Failure):
                return running
            table = state.cases_of(rid)
            for case in cases:
                table[case.nodeid] = case
                state.remember_paths(case.paths())
            self._add_modules(rid, [c.module_path for c in cases])
            self._touch(running.unwrap())
            return Success(len(cases))

        return self._db.transact("record_results", write)

    def record_collection_errors(
        self, run_id: RunId, errors: Sequence[CollectionError]
    ) -> Result[int, DataStoreError]:
        """See ``DataStore.record_collection_errors``."""
        checked = valid_run_id(run_id)
        if isinstance(checked, Failure):
            return checked
        prepared = prepare_collection_errors(errors)
        if isinstance(prepared, Failure):
            return prepared
        items = prepared.unwrap()
        rid = checked.unwrap()
        state = self._state

        def write() -> Result[int, DataStoreError]:
            running = self._running(rid)
            if isinstance(running, Failure):
                return running
            table = state.collection_of(rid)
            for item in items:
                table[item.nodeid] = item
                state.remember_paths(item.paths())
            self._add_modules(rid, [i.module_path for i in items])
            self._touch(running.unwrap())
            return Success(len(items))

        return self._db.transact("record_collection_errors", write)

    def finish_run(
        self, run_id: RunId, status: RunStatus, finished_at: datetime
    ) -> Result[RunSummary, DataStoreError]:
        """See ``DataStore.finish_run``."""
        arguments = check_finish(run_id, status, finished_at)
        if isinstance(arguments, Failure):
            return arguments
        rid, final, finished_ms = arguments.unwrap()
        state = self._state

        def write() -> Result[RunSummary, DataStoreError]:
            run = state.runs.get(rid)
            if run is None:
                return _not_found_run(rid)
            if run.status != RunStatus.RUNNING or final == RunStatus.RUNNING:
                return Failure(
                    IllegalTransition("run", str(rid), run.status.value, final.value)
                )
            done = attrs.evolve(
                run,
                status=final,
                finished_at_ms=finished_ms,
                last_write_at_ms=self._clock.now_ms(),
                new_signatures=state.new_signatures(run),
            )
            state.runs[rid] = done
            if final in (RunStatus.PASSED, RunStatus.FAILED):
                self._record_history(done)
                self._record_signatures(done)
            return Success(state.summary(done))

        return self._db.transact("finish_run", write)

    def _record_history(self, run: _Run) -> None:
        state = self._state
        cases = state.cases.get(run.id)
        if not cases:
            return
        seq = state.counters.get("history", 0) + 1
        state.counters["history"] = seq
        finished = run.finished_at_ms if run.finished_at_ms is not None else 0
        env = run.environment
        for case in cases.values():
            if case.outcome not in EXECUTED_OUTCOMES:
                continue
            key = (run.project, case.nodeid)
            failing = case.outcome in FAILING_OUTCOMES
            message = case.errors[0].message if failing and case.errors else None
            streak: Streak | None = None
            if failing:
                now = WindowEntry(run.id, case.outcome, message=message)
                streak = streak_of(now, state.previous(run.project, case.nodeid, run.id))
            entry = _History(
                seq,
                run.id,
                case.outcome,
                case.duration_ms,
                finished,
                message=message,
                git_commit=env.git_commit,
                git_dirty=env.git_dirty,
                rerun_failures=rerun_failures(a.outcome for a in case.attempts),
                streak=None if streak is None else streak.length,
                streak_since=None if streak is None else streak.since,
                streak_message=None if streak is None else streak.message,
            )
            state.history[key] = (entry, *state.history.get(key, ()))[:DEFAULT_HISTORY_WINDOW]

    def _record_signatures(self, run: _Run) -> None:
        state = self._state
        counted: dict[str, tuple[PreparedError, int]] = {}
        for head in state.heads(run.id):
            seen = counted.get(head.signature)
            counted[head.signature] = (head, 1 if seen is None else seen[1] + 1)
        at = run.finished_at_ms if run.finished_at_ms is not None else 0
        for signature, (head, count) in counted.items():
            key = (run.project, signature)
            old = state.signatures.get(key)
            if old is None:
                state.signatures[key] = _Signature(
                    exception_type=head.exception_type,
                    message=head.normalized_message,
                    frame=head.signature_frame,
                    count=count,
                    first_seen_run_id=run.id,
                    last_seen_run_id=run.id,
                    first_seen_at_ms=at,
                    last_seen_at_ms=at,
                )
            else:
                first = old.first_seen_run_id
                state.signatures[key] = attrs.evolve(
                    old,
                    count=old.count + count,
                    first_seen_run_id=None if first is None else min(first, run.id),
                    last_seen_run_id=run.id,
                    last_seen_at_ms=at,
                )

    def record_selection(
        self, run_id: RunId, selection: Selection
    ) -> Result[RunSummary, DataStoreError]:
        """See ``DataStore.record_selection``."""
        checked = valid_run_id(run_id)
        if isinstance(checked, Failure):
            return checked
        prepared = prepare_selection(selection)
        if isinstance(prepared, Failure):
            return prepared
        rid, chosen = checked.unwrap(), prepared.unwrap()
        state = self._state

        def write() -> Result[RunSummary, DataStoreError]:
            running = self._running(rid)
            if isinstance(running, Failure):
                return running
            run = attrs.evolve(
                running.unwrap(), selection=chosen, last_write_at_ms=self._clock.now_ms()
            )
            state.runs[rid] = run
            return Success(state.summary(run))

        return self._db.transact("record_selection", write)

    def abort_stale_runs(
        self, project: str, *, older_than: datetime
    ) -> Result[tuple[RunId, ...], DataStoreError]:
        """See ``DataStore.abort_stale_runs``; an aborted run's ``finished_at_ms`` is its
        last write (ms), and its new failure signatures are frozen as ``finish_run`` freezes
        them (judged while every run of the batch is still running)."""
        checked = valid_project(project)
        if isinstance(checked, Failure):
            return checked
        cutoff = check_time(older_than, "older_than")
        if isinstance(cutoff, Failure):
            return cutoff
        name, limit = checked.unwrap(), cutoff.unwrap()
        state = self._state

        def write() -> Result[tuple[RunId, ...], DataStoreError]:
            stale = sorted(
                run.id
                for run in state.runs.values()
                if run.project == name
                and run.status == RunStatus.RUNNING
                and run.last_write_at_ms < limit
            )
            frozen = {i: state.new_signatures(state.runs[i]) for i in stale}
            for run_id in stale:
                run = state.runs[run_id]
                state.runs[run_id] = attrs.evolve(
                    run,
                    status=RunStatus.ABORTED,
                    finished_at_ms=run.last_write_at_ms,
                    new_signatures=frozen[run_id],
                )
            return Success(tuple(RunId(i) for i in stale))

        return self._db.transact("abort_stale_runs", write)

    def write_coverage(
        self, run_id: RunId, files: Sequence[FileCoverage]
    ) -> Result[int, DataStoreError]:
        """See ``DataStore.write_coverage``; ``missing_lines`` are stored sorted and unique."""
        checked = valid_run_id(run_id)
        if isinstance(checked, Failure):
            return checked
        prepared = prepare_coverage(files)
        if isinstance(prepared, Failure):
            return prepared
        rows = prepared.unwrap().files
        rid = checked.unwrap()
        state = self._state

        def write() -> Result[int, DataStoreError]:
            run = state.runs.get(rid)
            if run is None:
                return _not_found_run(rid)
            if rows:
                state.coverage[rid] = rows
            else:
                state.coverage.pop(rid, None)
            state.remember_paths(iter([f.path for f in rows]))
            self._touch(run)
            return Success(len(rows))

        return self._db.transact("write_coverage", write)

    def prune_runs(self, policy: RunRetentionPolicy) -> Result[PruneRunsResult, DataStoreError]:
        """See ``DataStore.prune_runs``; the rules are :func:`plan_prune`'s. Files nothing
        refers to are removed on every call, also when no run was pruned."""
        checked = valid_policy(policy)
        if isinstance(checked, Failure):
            return checked
        state = self._state

        def write() -> Result[PruneRunsResult, DataStoreError]:
            plan = plan_prune(
                (
                    PruneRun(r.id, r.project, r.invocation_id, r.status, r.started_at_ms)
                    for r in state.runs.values()
                ),
                (run_id for run_id, rows in state.coverage.items() if rows),
                checked.unwrap(),
                self._clock.now_ms(),
            )
            for source, target in plan.moves:
                state.coverage[target] = state.coverage.pop(source)
            doomed = set(plan.doomed)
            for run_id in plan.doomed:
                del state.runs[run_id]
                for table in (state.cases, state.collection, state.modules, state.coverage):
                    table.pop(run_id, None)
            if doomed:
                for key, entries in list(state.history.items()):
                    if any(e.run_id in doomed for e in entries):
                        state.history[key] = tuple(
                            attrs.evolve(e, run_id=None) if e.run_id in doomed else e
                            for e in entries
                        )
                for key, sig in list(state.signatures.items()):
                    first = None if sig.first_seen_run_id in doomed else sig.first_seen_run_id
                    last = None if sig.last_seen_run_id in doomed else sig.last_seen_run_id
                    if (first, last) != (sig.first_seen_run_id, sig.last_seen_run_id):
                        state.signatures[key] = attrs.evolve(
                            sig, first_seen_run_id=first, last_seen_run_id=last
                        )
            referenced = self._referenced_paths()
            orphans = [path for path in state.files if path not in referenced]
            for path in orphans:
                del state.files[path]
            return Success(PruneRunsResult(len(plan.doomed), len(orphans)))

        return self._db.transact("prune_runs", write)

    def plan_prune(self, policy: RunRetentionPolicy) -> Result[PruneRunsResult, DataStoreError]:
        """See ``DataStore.plan_prune``: :func:`plan_prune`'s decision, and the files no
        surviving run (coverage moved as ``prune_runs`` moves it) would refer to."""
        checked = valid_policy(policy)
        if isinstance(checked, Failure):
            return checked
        state = self._state

        def read() -> Result[PruneRunsResult, DataStoreError]:
            plan = plan_prune(
                (
                    PruneRun(r.id, r.project, r.invocation_id, r.status, r.started_at_ms)
                    for r in state.runs.values()
                ),
                (run_id for run_id, rows in state.coverage.items() if rows),
                checked.unwrap(),
                self._clock.now_ms(),
            )
            doomed = set(plan.doomed)
            kept_coverage = {source for source, _ in plan.moves}
            referenced = self._referenced_paths(doomed, doomed - kept_coverage)
            orphans = sum(1 for path in state.files if path not in referenced)
            return Success(PruneRunsResult(len(plan.doomed), orphans))

        return self._db.read("plan_prune", read)

    def _referenced_paths(
        self,
        without: AbstractSet[int] = frozenset(),
        without_coverage: AbstractSet[int] = frozenset(),
    ) -> set[str]:
        """Paths referred to by runs not in ``without`` (coverage rows: runs not in
        ``without_coverage``)."""
        state = self._state
        referenced: set[str] = set()
        for run_id, modules in state.modules.items():
            if run_id not in without:
                referenced.update(modules)
        for run_id, table in state.cases.items():
            if run_id not in without:
                for case in table.values():
                    referenced.update(case.paths())
        for run_id, errors in state.collection.items():
            if run_id not in without:
                for item in errors.values():
                    referenced.update(item.paths())
        for run_id, rows in state.coverage.items():
            if run_id not in without_coverage:
                referenced.update(f.path for f in rows)
        return referenced

    def compact(self) -> Result[None, DataStoreError]:
        """Nothing to compact in memory; always ``Success(None)`` (see ``SqliteDataStore``)."""
        return Success(None)


class InMemoryDataReader:
    """``DataReader`` over a :class:`TestRunsMemoryState`; identical Results to
    ``SqliteDataReader`` for identical calls."""

    def __init__(self, state: TestRunsMemoryState) -> None:
        self._state = state
        self._db = state.db

    def _read(self, operation: str, fn: Callable[[], Result[T, DataReaderError]]) -> Result[
        T, DataReaderError
    ]:
        return self._db.read(operation, fn)

    def _run(self, run_id: object) -> Result[_Run, DataReaderError]:
        checked = valid_run_id(run_id)
        if isinstance(checked, Failure):
            return checked
        run = self._state.runs.get(checked.unwrap())
        if run is None:
            return _not_found_run(checked.unwrap())
        return Success(run)

    def latest_run(self, project: str) -> Result[RunSummary, DataReaderError]:
        """See ``DataReader.latest_run``; ``NotFound("project", project)`` without runs."""
        checked = valid_project(project)
        if isinstance(checked, Failure):
            return checked
        name = checked.unwrap()
        state = self._state

        def read() -> Result[RunSummary, DataReaderError]:
            runs = [r for r in state.runs.values() if r.project == name]
            if not runs:
                return Failure(NotFound("project", name))
            newest = max(runs, key=lambda r: (r.started_at_ms, r.id))
            return Success(state.summary(newest))

        return self._read("latest_run", read)

    def get_run(self, run_id: RunId) -> Result[RunSummary, DataReaderError]:
        """See ``DataReader.get_run``."""
        return self._read("get_run", lambda: self._run(run_id).map(self._state.summary))

    def list_runs(
        self,
        project: str | None,
        *,
        status: RunStatus | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> Result[Page[RunSummary], DataReaderError]:
        """See ``DataReader.list_runs``: newest first by (start, id); keyset cursor."""
        name: str | None = None
        if project is not None:
            checked = valid_project(project)
            if isinstance(checked, Failure):
                return checked
            name = checked.unwrap()
        wanted = valid_status(status)
        if isinstance(wanted, Failure):
            return wanted
        only = wanted.unwrap()
        size = valid_limit(limit)
        if isinstance(size, Failure):
            return size
        after = RUNS_CURSOR.decode(cursor)
        if isinstance(after, Failure):
            return after
        position, count = after.unwrap(), size.unwrap()
        state = self._state

        def read() -> Result[Page[RunSummary], DataReaderError]:
            runs = sorted(
                (
                    r
                    for r in state.runs.values()
                    if (name is None or r.project == name) and (only is None or r.status == only)
                ),
                key=lambda r: (r.started_at_ms, r.id),
                reverse=True,
            )
            if position is not None:
                runs = [r for r in runs if (r.started_at_ms, r.id) < position]
            page = runs[: count + 1]
            more = len(page) > count
            items = tuple(state.summary(r) for r in page[:count])
            last = page[count - 1] if more else None
            return Success(
                Page(
                    items,
                    more,
                    None if last is None else RUNS_CURSOR.encode(last.started_at_ms, last.id),
                )
            )

        return self._read("list_runs", read)

    def projects(self) -> Result[tuple[str, ...], DataReaderError]:
        """See ``DataReader.projects``."""
        return self._read(
            "projects",
            lambda: Success(tuple(sorted({r.project for r in self._state.runs.values()}))),
        )

    def _record(self, run_id: int, case: PreparedCase) -> TestRecord:
        return TestRecord(
            run_id=RunId(run_id),
            nodeid=case.nodeid,
            module_path=case.module_path,
            name=case.name,
            parametrize_id=case.parametrize_id,
            line=case.line,
            markers=case.markers,
            outcome=case.outcome,
            duration_ms=case.duration_ms,
            phases=case.phases,
            attempts=len(case.attempts),
            skip_reason=case.skip_reason,
        )

    def test_detail(self, run_id: RunId, nodeid: str) -> Result[TestDetail, DataReaderError]:
        """See ``DataReader.test_detail``."""
        node = valid_project(nodeid, "nodeid")
        if isinstance(node, Failure):
            return node
        wanted = node.unwrap()

        def read() -> Result[TestDetail, DataReaderError]:
            found = self._run(run_id)
            if isinstance(found, Failure):
                return found
            rid = found.unwrap().id
            table = self._state.cases.get(rid)
            case = None if table is None else table.get(wanted)
            if case is None:
                return Failure(NotFound("test", wanted))
            return Success(
                test_detail(
                    self._record(rid, case),
                    case.errors,
                    (case.stdout, case.stdout_truncated, case.stderr, case.stderr_truncated,
                     case.log, case.log_truncated),
                    [(t.description, t.outcome, t.duration_ms, t.error) for t in case.subtests],
                    [(a.phases, a.outcome, a.duration_ms, a.errors) for a in case.attempts],
                )
            )

        return self._read("test_detail", read)

    def _cases(self, run_id: int) -> list[PreparedCase]:
        table = self._state.cases.get(run_id)
        return sorted(table.values(), key=lambda c: c.nodeid) if table else []

    def tests(
        self, run_id: RunId, *, outcomes: frozenset[Outcome] | None = None
    ) -> Result[tuple[TestRecord, ...], DataReaderError]:
        """See ``DataReader.tests``."""
        wanted = valid_outcomes(outcomes)
        if isinstance(wanted, Failure):
            return wanted
        only = wanted.unwrap()

        def read() -> Result[tuple[TestRecord, ...], DataReaderError]:
            found = self._run(run_id)
            if isinstance(found, Failure):
                return found
            rid = found.unwrap().id
            return Success(
                tuple(
                    self._record(rid, c)
                    for c in self._cases(rid)
                    if only is None or c.outcome in only
                )
            )

        return self._read("tests", read)

    def failures(self, run_id: RunId) -> Result[tuple[FailureRecord, ...], DataReaderError]:
        """See ``DataReader.failures``: ``is_new`` from the signatures frozen when the run
        ended (computed afresh while it runs); streaks from the history entries of runs
        with a lower id."""
        state = self._state

        def read() -> Result[tuple[FailureRecord, ...], DataReaderError]:
            found = self._run(run_id)
            if isinstance(found, Failure):
                return found
            run = found.unwrap()
            new = run.new_signatures
            if new is None:
                new = state.new_signatures(run)
            records: list[tuple[int, FailureRecord]] = []
            for case in self._cases(run.id):
                if case.outcome in FAILING_OUTCOMES:
                    head = case.errors[0] if case.errors else None
                    now = WindowEntry(
                        run.id, case.outcome, message=None if head is None else head.message
                    )
                    streak = streak_of(now, state.previous(run.project, case.nodeid, run.id))
                    if streak.since is not None and streak.since not in state.runs:
                        streak = attrs.evolve(streak, since=None)
                    records.append(
                        (1, failure_record(case.nodeid, case.outcome, case.phases, head, new,
                                           streak))
                    )
            collection = state.collection.get(run.id)
            for item in collection.values() if collection else ():
                alone = Streak(1, run.id, item.error.message)
                records.append(
                    (0, failure_record(item.nodeid, Outcome.ERROR, (), item.error, new, alone))
                )
            return Success(sort_failures(records))

        return self._read("failures", read)

    def classify(self, run_id: RunId) -> Result[tuple[TestClassification, ...], DataReaderError]:
        """See ``DataReader.classify``."""
        state = self._state

        def read() -> Result[tuple[TestClassification, ...], DataReaderError]:
            found = self._run(run_id)
            if isinstance(found, Failure):
                return found
            run = found.unwrap()
            env = run.environment
            return Success(
                tuple(
                    classify(
                        run.id,
                        CaseHistory(
                            case.nodeid,
                            WindowEntry(
                                run.id,
                                case.outcome,
                                git_commit=env.git_commit,
                                git_dirty=env.git_dirty,
                                rerun_failures=rerun_failures(a.outcome for a in case.attempts),
                            ),
                            state.previous(run.project, case.nodeid, run.id),
                        ),
                    )
                    for case in self._cases(run.id)
                )
            )

        return self._read("classify", read)

    def flaky_tests(self, project: str) -> Result[tuple[FlakyTest, ...], DataReaderError]:
        """See ``DataReader.flaky_tests``."""
        checked = valid_project(project)
        if isinstance(checked, Failure):
            return checked
        name = checked.unwrap()
        state = self._state

        def read() -> Result[tuple[FlakyTest, ...], DataReaderError]:
            found: list[FlakyTest] = []
            for (owner, nodeid), entries in state.history.items():
                if owner != name:
                    continue
                flaky = flaky_entry(nodeid, [e.entry() for e in entries])
                if flaky is not None:
                    found.append(flaky)
            return Success(sort_flaky(found))

        return self._read("flaky_tests", read)

    def history(
        self, project: str, nodeid: str
    ) -> Result[tuple[HistoryEntry, ...], DataReaderError]:
        """See ``DataReader.history``."""
        checked = valid_project(project)
        if isinstance(checked, Failure):
            return checked
        node = valid_project(nodeid, "nodeid")
        if isinstance(node, Failure):
            return node
        key = (checked.unwrap(), node.unwrap())
        state = self._state

        def read() -> Result[tuple[HistoryEntry, ...], DataReaderError]:
            entries = state.history.get(key, ())
            if not entries:
                return Failure(NotFound("test", key[1]))
            return Success(
                tuple(
                    HistoryEntry(
                        run_id=None if e.run_id is None else RunId(e.run_id),
                        outcome=e.outcome,
                        duration_ms=e.duration_ms,
                        recorded_at_ms=e.recorded_at_ms,
                        message=e.message,
                        git_commit=e.git_commit,
                        git_dirty=e.git_dirty,
                        rerun_failures=e.rerun_failures,
                    )
                    for e in entries
                )
            )

        return self._read("history", read)

    def find_tests(
        self, project: str, fragment: str, *, limit: int = 20
    ) -> Result[tuple[str, ...], DataReaderError]:
        """See ``DataReader.find_tests``: searched among node ids with a stored item or a
        history entry in ``project``; plain substring match (no wildcards)."""
        checked = valid_project(project)
        if isinstance(checked, Failure):
            return checked
        piece = valid_fragment(fragment)
        if isinstance(piece, Failure):
            return piece
        size = valid_limit(limit)
        if isinstance(size, Failure):
            return size
        name, text, count = checked.unwrap(), piece.unwrap(), size.unwrap()
        state = self._state

        def read() -> Result[tuple[str, ...], DataReaderError]:
            known: set[str] = {n for (owner, n) in state.history if owner == name}
            for run in state.runs.values():
                if run.project == name:
                    table = state.cases.get(run.id)
                    if table:
                        known.update(table)
            return Success(rank_matches(known, text, count))

        return self._read("find_tests", read)

    def slowest(
        self, run_id: RunId, *, limit: int = 10
    ) -> Result[tuple[TestRecord, ...], DataReaderError]:
        """See ``DataReader.slowest``."""
        size = valid_limit(limit)
        if isinstance(size, Failure):
            return size
        count = size.unwrap()

        def read() -> Result[tuple[TestRecord, ...], DataReaderError]:
            found = self._run(run_id)
            if isinstance(found, Failure):
                return found
            rid = found.unwrap().id
            ordered = sorted(self._cases(rid), key=lambda c: (-c.duration_ms, c.nodeid))
            return Success(tuple(self._record(rid, c) for c in ordered[:count]))

        return self._read("slowest", read)

    def _coverage_source(self, run: _Run) -> int | None:
        state = self._state
        if state.coverage.get(run.id):
            return run.id
        siblings = sorted(
            r.id
            for r in state.runs.values()
            if r.invocation_id == run.invocation_id and state.coverage.get(r.id)
        )
        return siblings[0] if siblings else None

    def coverage(self, run_id: RunId) -> Result[CoverageReport, DataReaderError]:
        """See ``DataReader.coverage``."""

        def read() -> Result[CoverageReport, DataReaderError]:
            found = self._run(run_id)
            if isinstance(found, Failure):
                return found
            run = found.unwrap()
            source = self._coverage_source(run)
            if source is None:
                return Failure(NotFound("coverage", str(run.id)))
            return Success(
                CoverageReport(RunId(run.id), RunId(source), self._state.coverage[source])
            )

        return self._read("coverage", read)

    def coverage_trend(
        self, project: str, *, limit: int = 50
    ) -> Result[tuple[CoverageTrendPoint, ...], DataReaderError]:
        """See ``DataReader.coverage_trend``: a run counts when it or a sibling run of its
        invocation has coverage (what ``coverage(run)`` would show)."""
        checked = valid_project(project)
        if isinstance(checked, Failure):
            return checked
        size = valid_limit(limit)
        if isinstance(size, Failure):
            return size
        name, count = checked.unwrap(), size.unwrap()
        state = self._state

        def read() -> Result[tuple[CoverageTrendPoint, ...], DataReaderError]:
            runs = sorted(
                (r for r in state.runs.values() if r.project == name),
                key=lambda r: (r.started_at_ms, r.id),
                reverse=True,
            )
            points: list[CoverageTrendPoint] = []
            for run in runs:
                source = self._coverage_source(run)
                if source is None:
                    continue
                files = state.coverage[source]
                percent = coverage_percent(
                    sum(f.statements for f in files),
                    sum(f.missing_statements for f in files),
                    sum(f.branches for f in files),
                    sum(f.missing_branches for f in files),
                )
                points.append(CoverageTrendPoint(RunId(run.id), run.started_at_ms, percent))
                if len(points) == count:
                    break
            return Success(tuple(reversed(points)))

        return self._read("coverage_trend", read)

    def compare(self, run_a: RunId, run_b: RunId) -> Result[RunComparison, DataReaderError]:
        """See ``DataReader.compare``; the sets are defined by :func:`compare_runs`."""
        state = self._state

        def read() -> Result[RunComparison, DataReaderError]:
            first = self._run(run_a)
            if isinstance(first, Failure):
                return first
            second = self._run(run_b)
            if isinstance(second, Failure):
                return second
            later = second.unwrap()
            a, b = first.unwrap().id, later.id
            table_a, table_b = state.cases.get(a), state.cases.get(b)
            outcomes_a = {n: c.outcome for n, c in table_a.items()} if table_a else {}
            outcomes_b = {n: c.outcome for n, c in table_b.items()} if table_b else {}
            partial = run_is_partial(later.status, later.selection)
            return Success(compare_runs(RunId(a), RunId(b), outcomes_a, outcomes_b, partial))

        return self._read("compare", read)


def in_memory_test_runs() -> Layer:
    """The in-memory test-run services: ``DataStore`` and ``DataReader`` sharing one
    :class:`TestRunsMemoryState` (requires :class:`InMemoryDatabase` and a ``Clock``)."""

    def store(c: Container) -> DataStore:
        return InMemoryDataStore(c.get(TestRunsMemoryState), c.get(Clock))

    def reader(c: Container) -> DataReader:
        return InMemoryDataReader(c.get(TestRunsMemoryState))

    return merge(
        Layer.service(
            TestRunsMemoryState,
            lambda c: TestRunsMemoryState(c.get(InMemoryDatabase)),
            requires=(InMemoryDatabase,),
        ),
        Layer.service(DataStore, store, requires=(TestRunsMemoryState, Clock)),
        Layer.service(DataReader, reader, requires=(TestRunsMemoryState,)),
    )


def _check_protocols(state: TestRunsMemoryState, clock: Clock) -> tuple[DataStore, DataReader]:
    """Static check that both classes satisfy their Protocols (mypy reads this)."""
    return InMemoryDataStore(state, clock), InMemoryDataReader(state)
