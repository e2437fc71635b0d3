"""The in-memory test-run layer: ``InMemoryDataStore`` and ``InMemoryDataReader``.

Both services share one :class:`TestRunsMemoryState`, whose every table is a ``TxDict``
mirror of the container's :class:`InMemoryDatabase`, so a unit of work that fails changes
nothing, exactly like a rolled-back SQLite transaction. Values stored in the mirrors are
immutable and replaced whole, so undoing a write restores them exactly.

The in-memory layer is the reference the contract suite compares the live layer with; it
follows the same documented rules, through the same skeleton (``_test_runs_shared``) over the
same rules (``runstore.services._test_runs_rules``):

- Run ids start at 1 and grow by 1 per created run; like SQLite's AUTOINCREMENT an id is
  never handed out again, even after its run was pruned (a ``begin_run`` that fails uses no
  id).
- History entries are ordered by a sequence number taken once per finished run (finish
  order); "previous" entries of run ``r`` are those of runs with a lower id or of pruned runs.
- ``files`` are the paths ever written (module paths, frame paths, coverage paths) until
  ``prune_runs`` removes those nothing stored refers to any more.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from types import MappingProxyType
from typing import Any, TypeVar

import attrs
from returns.result import Result, Success

from runstore.layers._layer import Container, Layer, merge
from runstore.layers._memory_database import InMemoryDatabase
from runstore.layers._test_runs_shared import DataReaderBase, DataStoreBase, _TestRuns
from runstore.layers._unit_of_work import TxDict
from runstore.services._search_rules import (
    FailureRow,
    SearchQuery,
    TestRow,
    after,
    bm25_scores,
    document_tokens,
    failure_text,
    matches,
    memory_key,
)
from runstore.services._signature_rules import SignatureListing, SignatureRow, seen_order
from runstore.services._test_runs_rules import (
    EXECUTED_OUTCOMES,
    FailingItem,
    ItemNow,
    PreparedCase,
    PreparedCollectionError,
    PreparedError,
    PreparedRun,
    PreparedTestCoverage,
    PrunePlan,
    PruneRun,
    RunFacts,
    RunListing,
    WindowEntry,
    counts_of,
    earlier_passes,
    history_entry,
    rerun_failures,
    run_share,
    streak_at,
    subtest_counts,
    tally_signatures,
    test_detail,
    test_record,
)
from runstore.services.clock import Clock
from runstore.services.test_runs import (
    FAILING_OUTCOMES,
    HISTORY_DEPTH,
    DataReader,
    DataStore,
    DataStoreError,
    Environment,
    FileCoverage,
    FixCheck,
    FixCheckResult,
    HistoryEntry,
    Outcome,
    QuarantinedItem,
    RunId,
    RunStatus,
    RunSummary,
    Selection,
    TestCell,
    TestDetail,
    TestRecord,
)

__all__ = [
    "InMemoryDataReader",
    "InMemoryDataStore",
    "TestRunsMemoryState",
    "in_memory_test_runs",
]

_Item = TypeVar("_Item", PreparedCase, PreparedCollectionError)


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
    session_id: str | None = None

    def facts(self) -> RunFacts:
        """This run as the rules see it."""
        env = self.environment
        return RunFacts(
            self.id,
            self.project,
            self.invocation_id,
            self.status,
            self.selection,
            env.git_commit,
            env.git_dirty,
            self.new_signatures,
        )


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
    run_executed: int | None = None
    run_failing: int | None = None
    fingerprint: str | None = None
    earlier_passes: int = 0

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
            run_executed=self.run_executed,
            run_failing=self.run_failing,
            fingerprint=self.fingerprint,
            earlier_passes=self.earlier_passes,
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
    runs: int = 0
    """Passed and failed runs that recorded it."""
    tests: frozenset[str] = frozenset()
    """The node ids it affected (the live layer's ``failure_signature_tests`` rows)."""
    seq: int = 0
    """Its place in the listing (the live layer's ``seen_seq``)."""


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
        # Per-test coverage of each measured run: path -> ((node id, lines), ...).
        self.test_coverage: TxDict[int, Mapping[str, tuple[tuple[str, tuple[int, ...]], ...]]] = (
            db.mirror()
        )
        # (project, node id) of every test per-test coverage named, kept as the live layer
        # keeps its ``tests`` rows: until pruning finds nothing referring to one.
        self.coverage_tests: TxDict[tuple[str, str], None] = db.mirror()
        # The quarantined items of each run (mark_quarantined), by node id.
        self.quarantined: TxDict[int, tuple[QuarantinedItem, ...]] = db.mirror()
        # Every fix check by its id (ascending: the order they were stored).
        self.fix_checks: TxDict[int, FixCheck] = db.mirror()

    def table_of(self, tables: TxDict[int, TxDict[str, _Item]], run_id: int) -> TxDict[str, _Item]:
        """The items (or collection errors) of a run in ``tables`` (created empty on first
        use)."""
        table = tables.get(run_id)
        if table is None:
            table = self.db.mirror()
            tables[run_id] = table
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
            session_id=run.session_id,
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

    def entries(self, project: str, nodeid: str) -> Iterator[WindowEntry]:
        """The history entries of a test as the rules see them, newest first."""
        return (e.entry() for e in self.history.get((project, nodeid), ()))

    def cases_by_node(self, run_id: int) -> list[PreparedCase]:
        """The items of a run, by node id."""
        table = self.cases.get(run_id)
        return sorted(table.values(), key=lambda c: c.nodeid) if table else []

    def remember_paths(self, paths: Iterable[str]) -> None:
        """Record file paths as the live layer's ``files`` rows would be."""
        files = self.files
        for path in paths:
            if path not in files:
                files[path] = None

    def coverage_source(self, run_id: int, invocation_id: str) -> int | None:
        """The run whose coverage ``coverage(run_id)`` reads (see ``DataReader.coverage``)."""
        if self.coverage.get(run_id):
            return run_id
        siblings = sorted(
            r.id
            for r in self.runs.values()
            if r.invocation_id == invocation_id and self.coverage.get(r.id)
        )
        return siblings[0] if siblings else None


class _Facts(_TestRuns):
    """The facts both in-memory services read from their :class:`TestRunsMemoryState`."""

    _state: TestRunsMemoryState

    def _run(self, run_id: int) -> RunFacts | None:
        run = self._state.runs.get(run_id)
        return None if run is None else run.facts()

    def _summary(self, run_id: int) -> RunSummary:
        return self._state.summary(self._state.runs[run_id])

    def _run_signatures(self, run_id: int) -> set[str]:
        return {h.signature for h in self._state.heads(run_id)}

    def _first_seen(self, project: str, signatures: set[str]) -> dict[str, int | None]:
        table = self._state.signatures
        return {
            signature: known.first_seen_run_id
            for signature in signatures
            if (known := table.get((project, signature))) is not None
        }

    def _running_before(self, project: str, run_id: int) -> Iterable[int]:
        return [
            r.id
            for r in self._state.runs.values()
            if r.project == project and r.status is RunStatus.RUNNING and r.id < run_id
        ]


class InMemoryDataStore(_Facts, DataStoreBase):
    """``DataStore`` kept in memory (see the module docstring); identical Results to
    ``SqliteDataStore`` for identical calls."""

    def __init__(self, state: TestRunsMemoryState, clock: Clock) -> None:
        self._state = state
        self._db = state.db
        self._clock = clock

    def _touch(self, run_id: int, now_ms: int, **changes: Any) -> None:
        runs = self._state.runs
        runs[run_id] = attrs.evolve(runs[run_id], last_write_at_ms=now_ms, **changes)

    def _insert_run(self, run: PreparedRun, now_ms: int) -> int:
        state = self._state
        run_id = state.counters.get("run", 0) + 1
        state.counters["run"] = run_id
        state.runs[run_id] = _Run(
            id=run_id,
            project=run.project,
            invocation_id=run.invocation_id,
            status=RunStatus.RUNNING,
            started_at_ms=run.started_at_ms,
            finished_at_ms=None,
            last_write_at_ms=now_ms,
            environment=run.environment,
            selection=run.selection,
            session_id=run.session_id,
        )
        return run_id

    def _store_cases(self, run: RunFacts, cases: Sequence[PreparedCase], now_ms: int) -> None:
        self._store(run.id, self._state.cases, cases, now_ms)

    def _store_collection_errors(
        self, run: RunFacts, items: Sequence[PreparedCollectionError], now_ms: int
    ) -> None:
        self._store(run.id, self._state.collection, items, now_ms)

    def _store(
        self,
        run_id: int,
        tables: TxDict[int, TxDict[str, _Item]],
        items: Sequence[_Item],
        now_ms: int,
    ) -> None:
        """Store items or collection errors by node id, with their paths and modules."""
        state = self._state
        table = state.table_of(tables, run_id)
        for item in items:
            table[item.nodeid] = item
            state.remember_paths(item.paths())
        known = state.modules.get(run_id, frozenset())
        modules = [i.module_path for i in items]
        if not known.issuperset(modules):
            state.modules[run_id] = known.union(modules)
        self._touch(run_id, now_ms)

    def _store_selection(self, run_id: int, selection: Selection, now_ms: int) -> None:
        self._touch(run_id, now_ms, selection=selection)

    def _end_run(
        self, run_id: int, status: RunStatus, finished_ms: int, now_ms: int, new: frozenset[str]
    ) -> None:
        self._touch(run_id, now_ms, status=status, finished_at_ms=finished_ms, new_signatures=new)

    def _record_history(self, run: RunFacts, finished_ms: int) -> None:
        state = self._state
        cases = state.cases.get(run.id)
        if not cases:
            return
        seq = state.counters.get("history", 0) + 1
        state.counters["history"] = seq
        executed, failed = run_share(counts_of(c.outcome for c in cases.values()))
        for case in cases.values():
            if case.outcome not in EXECUTED_OUTCOMES:
                continue
            key = (run.project, case.nodeid)
            failing = case.outcome in FAILING_OUTCOMES
            message = case.errors[0].message if failing and case.errors else None
            streak = streak_at(run.id, message, state.entries(*key)) if failing else None
            entry = _History(
                seq,
                run.id,
                case.outcome,
                case.duration_ms,
                finished_ms,
                message=message,
                git_commit=run.git_commit,
                git_dirty=run.git_dirty,
                rerun_failures=rerun_failures(a.outcome for a in case.attempts),
                streak=None if streak is None else streak.length,
                streak_since=None if streak is None else streak.since,
                streak_message=None if streak is None else streak.message,
                run_executed=executed,
                run_failing=failed,
                fingerprint=case.fingerprint,
                earlier_passes=earlier_passes(a.outcome for a in case.attempts),
            )
            state.history[key] = (entry, *state.history.get(key, ()))[:HISTORY_DEPTH]

    def _record_signatures(self, run: RunFacts, finished_ms: int) -> None:
        state = self._state
        heads = state.heads(run.id)
        tally = tally_signatures(
            (h.signature, h.exception_type, h.message, h.signature_frame) for h in heads
        )
        if not tally:
            return
        places = seen_order(tally, state.counters.get("signature", 0))
        state.counters["signature"] = max(places.values())
        hit = self._signature_hits(run.id)
        for signature, seen in tally.items():
            key = (run.project, signature)
            old = state.signatures.get(key)
            tests = frozenset(n for s, n in hit if s == signature)
            if old is None:
                state.signatures[key] = _Signature(
                    exception_type=seen.exception_type,
                    message=seen.message,
                    frame=seen.frame,
                    count=seen.occurrences,
                    first_seen_run_id=run.id,
                    last_seen_run_id=run.id,
                    first_seen_at_ms=finished_ms,
                    last_seen_at_ms=finished_ms,
                    runs=1,
                    tests=tests,
                    seq=places[signature],
                )
            else:
                first = old.first_seen_run_id
                earlier = first is not None and run.id < first
                state.signatures[key] = attrs.evolve(
                    old,
                    count=old.count + seen.occurrences,
                    first_seen_run_id=run.id if earlier else first,
                    first_seen_at_ms=finished_ms if earlier else old.first_seen_at_ms,
                    last_seen_run_id=run.id,
                    last_seen_at_ms=finished_ms,
                    runs=old.runs + 1,
                    tests=old.tests | tests,
                    seq=places[signature],
                )

    def _signature_hits(self, run_id: int) -> list[tuple[str, str]]:
        """``(signature, node id)`` of the first error of every failing item and collection
        error of a run (what :meth:`TestRunsMemoryState.heads` yields, with node ids)."""
        state = self._state
        cases = state.cases.get(run_id)
        hits = [
            (case.errors[0].signature, case.nodeid)
            for case in (cases.values() if cases else ())
            if case.outcome in FAILING_OUTCOMES and case.errors
        ]
        collection = state.collection.get(run_id)
        if collection:
            hits.extend((item.error.signature, item.nodeid) for item in collection.values())
        return hits

    def _stale(self, project: str, cutoff_ms: int) -> Iterable[int]:
        return [
            run.id
            for run in self._state.runs.values()
            if run.project == project
            and run.status is RunStatus.RUNNING
            and run.last_write_at_ms < cutoff_ms
        ]

    def _abort(self, frozen: Sequence[tuple[int, frozenset[str]]]) -> None:
        runs = self._state.runs
        for run_id, new in frozen:
            run = runs[run_id]
            runs[run_id] = attrs.evolve(
                run,
                status=RunStatus.ABORTED,
                finished_at_ms=run.last_write_at_ms,
                new_signatures=new,
            )

    def _store_coverage(self, run_id: int, files: Sequence[FileCoverage], now_ms: int) -> None:
        state = self._state
        if files:
            state.coverage[run_id] = tuple(files)
        else:
            state.coverage.pop(run_id, None)
        state.remember_paths(f.path for f in files)
        self._touch(run_id, now_ms)

    def _prune_facts(self) -> tuple[Iterable[PruneRun], Iterable[int]]:
        state = self._state
        runs = (
            PruneRun(r.id, r.project, r.invocation_id, r.status, r.started_at_ms)
            for r in state.runs.values()
        )
        return runs, (run_id for run_id, rows in state.coverage.items() if rows)

    def _prune(self, plan: PrunePlan, removed: Callable[[int], None]) -> int:
        state = self._state
        for source, target in plan.moves:
            state.coverage[target] = state.coverage.pop(source)
        doomed = set(plan.doomed)
        for done, run_id in enumerate(plan.doomed, start=1):
            del state.runs[run_id]
            for table in (state.cases, state.collection, state.modules, state.coverage):
                table.pop(run_id, None)
            state.test_coverage.pop(run_id, None)
            state.quarantined.pop(run_id, None)
            removed(done)
        for check_id, check in list(state.fix_checks.items()):
            if check.result.run_id in doomed:  # the evidence outlives its run
                state.fix_checks[check_id] = attrs.evolve(
                    check, result=attrs.evolve(check.result, run_id=None))
        if doomed:
            for key, entries in list(state.history.items()):
                if any(e.run_id in doomed for e in entries):
                    state.history[key] = tuple(
                        attrs.evolve(e, run_id=None) if e.run_id in doomed else e for e in entries
                    )
            for key, sig in list(state.signatures.items()):
                first = None if sig.first_seen_run_id in doomed else sig.first_seen_run_id
                last = None if sig.last_seen_run_id in doomed else sig.last_seen_run_id
                if (first, last) != (sig.first_seen_run_id, sig.last_seen_run_id):
                    state.signatures[key] = attrs.evolve(
                        sig, first_seen_run_id=first, last_seen_run_id=last
                    )
        self._forget_coverage_tests()
        referenced = self._referenced_paths()
        orphans = [path for path in state.files if path not in referenced]
        for path in orphans:
            del state.files[path]
        return len(orphans)

    def _forget_coverage_tests(self) -> None:
        """Drop the tests only per-test coverage named once no stored item, history entry
        or per-test coverage row refers to them (the live layer's ``tests`` collection)."""
        state = self._state
        if not state.coverage_tests:
            return
        kept: set[tuple[str, str]] = set(state.history)
        for run_id, run in state.runs.items():
            kept.update((run.project, nodeid) for nodeid in state.cases.get(run_id, {}))
            for rows in state.test_coverage.get(run_id, {}).values():
                kept.update((run.project, nodeid) for nodeid, _ in rows)
        for key in [k for k in state.coverage_tests if k not in kept]:
            del state.coverage_tests[key]

    def _orphans_after(self, plan: PrunePlan) -> int:
        doomed = set(plan.doomed)
        kept_coverage = {source for source, _ in plan.moves}
        referenced = self._referenced_paths(doomed, doomed - kept_coverage)
        return sum(1 for path in self._state.files if path not in referenced)

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
        for run_id, by_path in state.test_coverage.items():
            if run_id not in without:
                referenced.update(by_path)
        return referenced

    def _store_test_coverage(
        self, run: RunFacts, coverage: PreparedTestCoverage, now_ms: int
    ) -> None:
        by_path: dict[str, list[tuple[str, tuple[int, ...]]]] = {}
        for row in coverage.rows:
            by_path.setdefault(row.path, []).append((row.nodeid, row.lines))
        state = self._state
        state.test_coverage[run.id] = MappingProxyType(
            {path: tuple(rows) for path, rows in by_path.items()}
        )
        state.remember_paths(by_path)
        for nodeid in coverage.nodeids():
            state.coverage_tests[(run.project, nodeid)] = None
        self._touch(run.id, now_ms)

    # -- quarantine and fix checks ---------------------------------------------------------

    def _recorded_nodeids(self, run: RunFacts, nodeids: Sequence[str]) -> frozenset[str]:
        cases = self._state.cases.get(run.id)
        return frozenset(n for n in nodeids if cases is not None and n in cases)

    def _store_quarantined(
        self, run: RunFacts, items: tuple[QuarantinedItem, ...], now_ms: int
    ) -> None:
        if items:
            self._state.quarantined[run.id] = items
        else:
            self._state.quarantined.pop(run.id, None)
        self._touch(run.id, now_ms)

    def _store_fix_check(self, result: FixCheckResult, now_ms: int) -> None:
        state = self._state
        check_id = state.counters.get("fix_check", 0) + 1
        state.counters["fix_check"] = check_id
        state.fix_checks[check_id] = FixCheck(result, now_ms)

    def compact(self) -> Result[None, DataStoreError]:
        """Nothing to compact in memory; always ``Success(None)`` (see ``SqliteDataStore``)."""
        return Success(None)


class InMemoryDataReader(_Facts, DataReaderBase):
    """``DataReader`` over a :class:`TestRunsMemoryState`; identical Results to
    ``SqliteDataReader`` for identical calls."""

    def __init__(self, state: TestRunsMemoryState) -> None:
        self._state = state
        self._db = state.db

    def _latest(self, project: str) -> RunSummary | None:
        runs = [r for r in self._state.runs.values() if r.project == project]
        if not runs:
            return None
        return self._state.summary(max(runs, key=lambda r: (r.started_at_ms, r.id)))

    def _runs(self, listing: RunListing) -> Sequence[RunSummary]:
        project, status, after = listing.project, listing.status, listing.after
        session = listing.session_id
        runs = sorted(
            (
                r
                for r in self._state.runs.values()
                if (project is None or r.project == project)
                and (status is None or r.status == status)
                and (session is None or r.session_id == session)
                and (after is None or (r.started_at_ms, r.id) < after)
            ),
            key=lambda r: (r.started_at_ms, r.id),
            reverse=True,
        )
        return [self._state.summary(r) for r in runs[: listing.limit + 1]]

    def _projects(self) -> Iterable[str]:
        return {r.project for r in self._state.runs.values()}

    def _record(self, run_id: int, case: PreparedCase) -> TestRecord:
        return test_record(
            run_id,
            case.nodeid,
            case.module_path,
            case.name,
            case.parametrize_id,
            case.line,
            case.markers,
            case.outcome,
            case.duration_ms,
            case.phases,
            len(case.attempts),
            case.fingerprint,
        )

    def _detail(self, run_id: int, nodeid: str) -> TestDetail | None:
        table = self._state.cases.get(run_id)
        case = None if table is None else table.get(nodeid)
        if case is None:
            return None
        return test_detail(
            self._record(run_id, case),
            case.errors,
            (
                case.stdout,
                case.stdout_truncated,
                case.stderr,
                case.stderr_truncated,
                case.log,
                case.log_truncated,
            ),
            [(t.description, t.outcome, t.duration_ms, t.error) for t in case.subtests],
            [(a.phases, a.outcome, a.duration_ms, a.errors) for a in case.attempts],
            [a.source for a in case.attempts],
        )

    def _tests(self, run_id: int, outcomes: frozenset[Outcome] | None) -> Iterable[TestRecord]:
        return [
            self._record(run_id, c)
            for c in self._state.cases_by_node(run_id)
            if outcomes is None or c.outcome in outcomes
        ]

    def _cells(
        self,
        run_ids: Sequence[int],
        nodeids: Sequence[str] | None,
        outcomes: frozenset[Outcome] | None,
    ) -> Iterable[TestCell]:
        cases = self._state.cases
        wanted = None if nodeids is None else frozenset(nodeids)
        return [
            TestCell(
                RunId(run_id), c.nodeid, c.outcome, c.duration_ms, len(c.attempts),
                c.errors[0].signature if c.errors and c.outcome in FAILING_OUTCOMES else "",
            )
            for run_id in run_ids
            for c in cases.get(run_id, {}).values()
            if (outcomes is None or c.outcome in outcomes)
            and (wanted is None or c.nodeid in wanted)
        ]

    def _failing(self, run: RunFacts) -> Sequence[FailingItem]:
        state = self._state
        return [
            FailingItem(
                case.nodeid,
                case.outcome,
                case.phases,
                case.errors[0] if case.errors else None,
                list(state.entries(run.project, case.nodeid)),
            )
            for case in state.cases_by_node(run.id)
            if case.outcome in FAILING_OUTCOMES
        ]

    def _collection_heads(self, run_id: int) -> Iterable[tuple[str, PreparedError | None]]:
        collection = self._state.collection.get(run_id)
        return [(i.nodeid, i.error) for i in collection.values()] if collection else []

    def _alive(self, run_ids: set[int]) -> set[int]:
        return {i for i in run_ids if i in self._state.runs}

    def _now_items(self, run: RunFacts, depth: int = HISTORY_DEPTH) -> Iterable[ItemNow]:
        state = self._state
        return [
            ItemNow(
                case.nodeid,
                case.outcome,
                rerun_failures(a.outcome for a in case.attempts),
                list(state.entries(run.project, case.nodeid)),
                fingerprint=case.fingerprint,
                earlier_passes=earlier_passes(a.outcome for a in case.attempts),
            )
            for case in state.cases_by_node(run.id)
        ]

    def _histories(
        self, project: str, depth: int = HISTORY_DEPTH
    ) -> Iterable[tuple[str, Sequence[WindowEntry]]]:
        return [
            (nodeid, [e.entry() for e in entries[:depth]])
            for (owner, nodeid), entries in self._state.history.items()
            if owner == project
        ]

    def _history(self, project: str, nodeid: str) -> tuple[HistoryEntry, ...]:
        return tuple(
            history_entry(
                e.run_id,
                e.outcome,
                e.duration_ms,
                e.recorded_at_ms,
                e.message,
                e.git_commit,
                e.git_dirty,
                e.rerun_failures,
                e.run_executed,
                e.run_failing,
                e.fingerprint,
                e.earlier_passes,
            )
            for e in self._state.history.get((project, nodeid), ())
        )

    def _nodeids(self, project: str) -> Iterable[str]:
        state = self._state
        known: set[str] = {n for (owner, n) in state.history if owner == project}
        for run in state.runs.values():
            if run.project == project:
                table = state.cases.get(run.id)
                if table:
                    known.update(table)
        known.update(n for (owner, n) in state.coverage_tests if owner == project)
        return known

    def _slowest(self, run_id: int, count: int) -> Sequence[TestRecord]:
        cases = self._state.cases_by_node(run_id)
        ordered = sorted(cases, key=lambda c: (-c.duration_ms, c.nodeid))
        return [self._record(run_id, c) for c in ordered[:count]]

    def _coverage_source(self, run: RunFacts) -> int | None:
        return self._state.coverage_source(run.id, run.invocation_id)

    def _coverage_files(self, source: int) -> Iterable[FileCoverage]:
        return self._state.coverage[source]

    def _coverage_points(self, project: str, count: int) -> Sequence[tuple[int, int, int]]:
        state = self._state
        runs = sorted(
            (r for r in state.runs.values() if r.project == project),
            key=lambda r: (r.started_at_ms, r.id),
            reverse=True,
        )
        points: list[tuple[int, int, int]] = []
        for run in runs:
            source = state.coverage_source(run.id, run.invocation_id)
            if source is not None:
                points.append((run.id, run.started_at_ms, source))
                if len(points) == count:
                    break
        return points

    def _coverage_totals(self, source: int) -> tuple[int, int, int, int]:
        files = self._state.coverage[source]
        return (
            sum(f.statements for f in files),
            sum(f.missing_statements for f in files),
            sum(f.branches for f in files),
            sum(f.missing_branches for f in files),
        )

    def _outcomes(self, run_id: int) -> Mapping[str, Outcome]:
        table = self._state.cases.get(run_id)
        return {n: c.outcome for n, c in table.items()} if table else {}

    def _test_coverage_runs(self, project: str, count: int) -> Sequence[int]:
        state = self._state
        measured = sorted(
            (
                r
                for r in state.runs.values()
                if r.project == project and r.id in state.test_coverage
            ),
            key=lambda r: (r.started_at_ms, r.id),
            reverse=True,
        )
        return [r.id for r in measured[:count]]

    def _test_coverage_rows(
        self, run_ids: Sequence[int], path: str
    ) -> Iterable[tuple[int, str, Sequence[int] | None]]:
        state = self._state
        rows: list[tuple[int, str, Sequence[int] | None]] = [
            (run_id, nodeid, lines)
            for run_id in run_ids
            for nodeid, lines in state.test_coverage[run_id].get(path, ())
        ]
        hit = {nodeid for _, nodeid, _ in rows}
        for run_id in run_ids:
            cases = state.cases.get(run_id)
            ran = {n for n, case in (cases or {}).items() if case.outcome is not Outcome.SKIPPED}
            for other, tests in state.test_coverage[run_id].items():
                if other != path:
                    ran.update(nodeid for nodeid, _ in tests)
            rows.extend((run_id, nodeid, None) for nodeid in sorted(ran & hit))
        return rows


    # -- search (runstore.services.search) ---------------------------------------------------

    def _search_failures(
        self, query: SearchQuery, project: str | None, start: tuple[int, ...] | None, count: int
    ) -> Sequence[FailureRow]:
        """Every failing item's errors and every collection error, scored by BM25 over all
        of them; the row id is a hash of (node id, collector or not, ordinal) in the run."""
        state = self._state
        found: list[tuple[int, str, str, bool, int, PreparedError]] = []
        for run in state.runs.values():
            for case in state.cases_by_node(run.id):
                if case.outcome in FAILING_OUTCOMES:
                    found.extend(
                        (run.id, run.project, case.nodeid, False, i, e)
                        for i, e in enumerate(case.errors)
                    )
            collection = state.collection.get(run.id)
            for item in collection.values() if collection else ():
                found.append((run.id, run.project, item.nodeid, True, 0, item.error))
        texts = [failure_text(f[5].exception_type, f[5].message) for f in found]
        scores = bm25_scores(query, texts)
        rows = [
            FailureRow(
                score, run_id, memory_key(nodeid, str(collected), str(ordinal)), name, nodeid,
                collected, ordinal, error.exception_type, error.message,
            )
            for (run_id, name, nodeid, collected, ordinal, error), text, score
            in zip(found, texts, scores, strict=True)
            if (project is None or name == project) and matches(query, document_tokens(text))
        ]
        return after(rows, FailureRow.position, start)[:count]

    def _search_tests(
        self, query: SearchQuery, project: str | None, start: tuple[int, ...] | None, count: int
    ) -> Sequence[TestRow]:
        """The node ids with a stored item or a history entry, per project, scored by BM25
        over all of them; the row id is a hash of (project, node id)."""
        found = sorted(
            (name, nodeid)
            for name in self._projects_known()
            for nodeid in self._nodeids(name)
        )
        scores = bm25_scores(query, [nodeid for _, nodeid in found])
        rows = [
            TestRow(score, memory_key(name, nodeid), name, nodeid)
            for (name, nodeid), score in zip(found, scores, strict=True)
            if (project is None or name == project) and matches(query, document_tokens(nodeid))
        ]
        return after(rows, TestRow.position, start)[:count]

    def _projects_known(self) -> set[str]:
        state = self._state
        return {r.project for r in state.runs.values()} | {p for p, _ in state.history}

    # -- failure signatures across runs ------------------------------------------------------

    def _signatures(self, listing: SignatureListing) -> Sequence[SignatureRow]:
        before = listing.before
        rows = sorted(
            (
                SignatureRow(
                    signature, sig.exception_type, sig.message, sig.frame,
                    sig.first_seen_run_id, sig.first_seen_at_ms, sig.last_seen_run_id,
                    sig.last_seen_at_ms, sig.runs, len(sig.tests), sig.count, sig.seq,
                )
                for (project, signature), sig in self._state.signatures.items()
                if project == listing.project and (before is None or sig.seq < before)
            ),
            key=lambda row: row.seq,
            reverse=True,
        )
        return rows[: listing.limit + 1]

    # -- quarantine and fix checks ---------------------------------------------------------

    def _quarantined(self, run_id: int) -> Sequence[QuarantinedItem]:
        return self._state.quarantined.get(run_id, ())

    def _known_nodeids(self, project: str, nodeids: Sequence[str]) -> frozenset[str]:
        return frozenset(nodeids).intersection(self._nodeids(project))

    def _fix_checks(self, project: str, nodeid: str | None, limit: int) -> Sequence[FixCheck]:
        checks = self._state.fix_checks
        found = [checks[k] for k in sorted(checks, reverse=True)
                 if checks[k].result.project == project
                 and (nodeid is None or checks[k].result.nodeid == nodeid)]
        return found[:limit]


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
