"""The live test-run layer: ``SqliteDataStore`` and ``SqliteDataReader`` (schema: migration 0002).

Write path. Every ``DataStore`` method is one unit of work (``SqliteDatabase.transact``):
input is validated and normalized first (``runstore.services._testruns_rules``), so bad
input writes nothing; then a handful of set-based statements and ``executemany`` batches
run, with no per-row commit. Row ids of items and errors are assigned in Python from
``max(id) + 1`` read under the write lock (``BEGIN IMMEDIATE`` holds it for the whole unit),
so children can refer to their parents without a round trip per row; run ids come from
``AUTOINCREMENT`` and are never reused, even after pruning.

Id caches. ``files`` ids and module ids are cached in ``TxDict`` mirrors of the database
(test ids are looked up per batch: one indexed probe each): an entry added by a unit that rolls back
(a savepoint the caller recovers from, a fault, a full disk) disappears with the rows it
named, so a later write re-creates the row instead of pointing at one that is gone (the bug
seed 000 fixed with ``withPersistSavepoint``; here it cannot happen). Each unit first compares
``PRAGMA data_version`` with the value it saw last and drops every cache when another
connection committed in between (another process may have pruned rows).

Reads run in ``SqliteDatabase.read`` (one snapshot). The hot queries (latest run, failures,
history, flaky tests, classification) reach test items only through indexes keyed by run or
test (``EXPLAIN QUERY PLAN`` shows SEARCH, never SCAN, on ``test_cases``), and read no payload.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, TypeVar

import apsw
import attrs
from returns.result import Failure, Result, Success

from runstore.exceptions import TransactionMisuse
from runstore.layers._layer import Container, Layer, merge
from runstore.layers._sqlite_database import SqliteDatabase
from runstore.layers._sqlite_errors import from_apsw
from runstore.layers._unit_of_work import TxDict
from runstore.services._testruns_rules import (
    OUTCOME_ORDER,
    RUNS_CURSOR,
    SUBTEST_WORDS,
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
    coverage_percent,
    decode_lines,
    decode_selection,
    encode_lines,
    encode_selection,
    failure_record,
    flaky_entry,
    new_signatures,
    normalize_message,
    plan_prune,
    prepare_collection_errors,
    prepare_coverage,
    prepare_results,
    prepare_run_start,
    prepare_selection,
    previous_window,
    rank_matches,
    run_is_partial,
    sort_failures,
    sort_flaky,
    streak_of,
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
    Phase,
    PhaseResult,
    PruneRunsResult,
    RunComparison,
    RunId,
    RunRetentionPolicy,
    RunStart,
    RunStatus,
    RunSummary,
    Selection,
    StackFrame,
    TestClassification,
    TestDetail,
    TestRecord,
    TestResult,
)

__all__ = ["SqliteDataReader", "SqliteDataStore", "sqlite_test_runs"]

T = TypeVar("T")
Row = tuple[Any, ...]

_OUTCOME = {o.value: o for o in Outcome}
_PHASE = {p.value: p for p in Phase}
_STATUS = {s.value: s for s in RunStatus}
_EXECUTED_SQL = "('passed', 'failed', 'xpassed', 'error')"
_FAILING_SQL = "('failed', 'error')"

_RUN_COLUMNS = (
    "id, project, invocation_id, status, started_at_ms, finished_at_ms, python_version,"
    " pytest_version, platform, git_commit, git_branch, command_line, host, pid,"
    " n_passed, n_failed, n_skipped, n_xfailed, n_xpassed, n_error, n_collection_errors,"
    " git_dirty, selection, n_subtests_passed, n_subtests_failed, n_subtests_skipped"
)
_SUBTEST_COLUMNS = {
    "passed": "n_subtests_passed",
    "failed": "n_subtests_failed",
    "skipped": "n_subtests_skipped",
}
_HISTORY_COLUMNS = (
    "h.seq, h.run_id, h.outcome, h.git_commit, h.git_dirty, h.rerun_failures, h.message,"
    " h.streak, h.streak_since, h.streak_message"
)
"""The columns of a history row that make its ``WindowEntry`` (:func:`_entry`), seq first."""

_HEADS_OF_RUN = (
    "SELECT e.signature, e.exception_type, e.message, e.signature_frame"
    " FROM test_cases c CROSS JOIN test_errors e ON e.case_id = c.id AND e.attempt = 0"
    "  AND e.ordinal = 0 AND e.depth = 0 AND e.subtest IS NULL"
    f" WHERE c.run_id = ?1 AND c.outcome IN {_FAILING_SQL}"
    " UNION ALL"
    " SELECT e.signature, e.exception_type, e.message, e.signature_frame"
    " FROM collection_errors ce CROSS JOIN test_errors e ON e.collection_error_id = ce.id"
    "  AND e.depth = 0"
    " WHERE ce.run_id = ?1"
)
"""The first error of every failing item and collection error of run ``?1``."""
_COUNT_COLUMNS = tuple(f"n_{o.value}" for o in OUTCOME_ORDER)
_BULK_LOOKUP = 256
"""Batches of at least this many items look test ids up by reading the project's range."""


def _summary(row: Row) -> RunSummary:
    return RunSummary(
        id=RunId(row[0]),
        project=row[1],
        invocation_id=row[2],
        status=_STATUS[row[3]],
        started_at_ms=row[4],
        finished_at_ms=row[5],
        counts={o.value: n for o, n in zip(OUTCOME_ORDER, row[14:20], strict=True)},
        collection_errors=row[20],
        environment=Environment(
            python_version=row[6],
            pytest_version=row[7],
            platform=row[8],
            git_commit=row[9],
            git_branch=row[10],
            command_line=tuple(json.loads(row[11])),
            host=row[12],
            pid=row[13],
            git_dirty=None if row[21] is None else bool(row[21]),
        ),
        selection=decode_selection(row[22]),
        subtests={"passed": row[23], "failed": row[24], "skipped": row[25]},
    )


def _entry(row: Sequence[Any]) -> WindowEntry:
    """The ``WindowEntry`` of a history row read with ``_HISTORY_COLUMNS`` (after its seq)."""
    return WindowEntry(
        run_id=row[0],
        outcome=_OUTCOME[row[1]],
        git_commit=row[2],
        git_dirty=None if row[3] is None else bool(row[3]),
        rerun_failures=row[4],
        message=row[5],
        streak=row[6],
        streak_since=row[7],
        streak_message=row[8],
    )


def _newest_first(entries: list[tuple[int, WindowEntry]]) -> list[WindowEntry]:
    """History entries ``(seq, entry)`` newest first (by seq, which never repeats per test)."""
    entries.sort(key=lambda e: e[0], reverse=True)
    return [e for _, e in entries]


def _run_new_signatures(db: SqliteDatabase, run_id: int, project: str) -> frozenset[str]:
    """The failure signatures new in run ``run_id`` now (:func:`new_signatures` over the
    rows: the project's signature table and the running runs with a lower id)."""
    signatures = {r[0] for r in db.execute(_HEADS_OF_RUN, (run_id,))}
    if not signatures:
        return frozenset()
    first_seen: dict[str, int | None] = {}
    for signature in sorted(signatures):
        row = db.one(
            "SELECT first_seen_run_id FROM failure_signatures"
            " WHERE project = ? AND signature = ?",
            (project, signature),
        )
        if row is not None:
            first_seen[signature] = row[0]
    earlier_running: set[str] = set()
    for (other,) in db.execute(
        "SELECT id FROM test_runs WHERE project = ? AND status = 'running' AND id < ?",
        (project, run_id),
    ):
        earlier_running.update(r[0] for r in db.execute(_HEADS_OF_RUN, (other,)))
    return new_signatures(signatures, first_seen, earlier_running, run_id)


def _phase_columns(phases: Sequence[PhaseResult]) -> list[Any]:
    """Nine columns: (outcome, ms, reason) for setup, call and teardown (NULL when absent)."""
    columns: list[Any] = [None] * 9
    for phase in phases:
        at = 0 if phase.phase is Phase.SETUP else 3 if phase.phase is Phase.CALL else 6
        columns[at] = phase.outcome.value
        columns[at + 1] = phase.duration_ms
        columns[at + 2] = phase.skip_reason
    return columns


def _phases_of(columns: Sequence[Any]) -> tuple[PhaseResult, ...]:
    """The inverse of :func:`_phase_columns` (nine columns starting at index 0)."""
    phases: list[PhaseResult] = []
    for at, kind in ((0, Phase.SETUP), (3, Phase.CALL), (6, Phase.TEARDOWN)):
        outcome = columns[at]
        if outcome is not None:
            phases.append(PhaseResult(kind, _OUTCOME[outcome], columns[at + 1], columns[at + 2]))
    return tuple(phases)


def _not_found_run(run_id: int) -> Failure[NotFound]:
    return Failure(NotFound("run", str(run_id)))


class SqliteDataStore:
    """``DataStore`` on SQLite (see the module docstring for the write path and caches)."""

    def __init__(self, db: SqliteDatabase, clock: Clock) -> None:
        self._db = db
        self._clock = clock
        self._files: TxDict[str, int] = db.mirror()
        self._modules: TxDict[tuple[int, int], int] = db.mirror()
        self._seen: TxDict[str, int] = db.mirror()

    # -- caches ----------------------------------------------------------------------------------

    def _sync(self) -> None:
        """Drop every cache when another connection committed since this one last looked."""
        version = int(self._db.scalar("PRAGMA data_version"))
        seen = self._seen.get("data_version")
        if seen == version:
            return
        if seen is not None:
            if self._files:
                self._files.clear()
            if self._modules:
                self._modules.clear()
        self._seen["data_version"] = version

    def _many(self, sql: str, rows: Iterable[Sequence[Any]]) -> list[Row]:
        """``executemany`` keeping the rows it returns (RETURNING / SELECT), in input order."""
        return self._db.connection.executemany(sql, rows).fetchall()

    def _file_ids(self, paths: Iterable[str]) -> dict[str, int]:
        cache = self._files
        wanted = set(paths)
        found = {p: cache[p] for p in wanted if p in cache}
        missing = sorted(wanted - found.keys())
        if missing:
            looked = self._many(
                "SELECT ?1, (SELECT id FROM files WHERE path = ?1)", [(p,) for p in missing]
            )
            new = [p for p, i in looked if i is None]
            found.update((p, i) for p, i in looked if i is not None)
            if new:
                ids = self._many(
                    "INSERT INTO files (path) VALUES (?) RETURNING id", [(p,) for p in new]
                )
                found.update((p, row[0]) for p, row in zip(new, ids, strict=True))
            for p in missing:
                cache[p] = found[p]
        return found

    def _test_ids(self, project: str, nodeids: Sequence[str]) -> tuple[dict[str, int], bool]:
        """Ids of ``nodeids`` in ``project``, creating the new ones; and whether any existed.

        Looked up, not cached (a mirror of every test would cost more to keep than it saves):
        a large batch reads the project's ids in one indexed range when the project is not
        much larger than the batch, a small one probes each id. New tests get ids from
        ``max(id) + 1`` (the unit holds the write lock).
        """
        db = self._db
        found: dict[str, int] = {}
        if len(nodeids) >= _BULK_LOOKUP:
            known = db.scalar("SELECT count(*) FROM tests WHERE project = ?", (project,))
            bulk = known <= 4 * len(nodeids)
        else:
            bulk = False
        if bulk:
            wanted = set(nodeids)
            for nodeid, test_id in db.execute(
                "SELECT nodeid, id FROM tests WHERE project = ?", (project,)
            ):
                if nodeid in wanted:
                    found[nodeid] = test_id
        else:
            for nodeid, test_id in self._many(
                "SELECT ?2, (SELECT id FROM tests WHERE project = ?1 AND nodeid = ?2)",
                [(project, n) for n in nodeids],
            ):
                if test_id is not None:
                    found[nodeid] = test_id
        existed = bool(found)
        new = [n for n in nodeids if n not in found]
        if new:
            first = self._next_id("tests")
            rows = [(first + k, project, n) for k, n in enumerate(new)]
            db.executemany("INSERT INTO tests (id, project, nodeid) VALUES (?, ?, ?)", rows)
            found.update((n, i) for i, _, n in rows)
        return found, existed

    def _module_ids(self, run_id: int, file_ids: Iterable[int]) -> dict[int, int]:
        cache = self._modules
        wanted = set(file_ids)
        found = {f: cache[(run_id, f)] for f in wanted if (run_id, f) in cache}
        missing = sorted(wanted - found.keys())
        if missing:
            looked = self._many(
                "SELECT ?2, (SELECT id FROM test_modules WHERE run_id = ?1 AND file_id = ?2)",
                [(run_id, f) for f in missing],
            )
            new = [f for f, i in looked if i is None]
            found.update((f, i) for f, i in looked if i is not None)
            if new:
                ids = self._many(
                    "INSERT INTO test_modules (run_id, file_id) VALUES (?, ?) RETURNING id",
                    [(run_id, f) for f in new],
                )
                found.update((f, row[0]) for f, row in zip(new, ids, strict=True))
            for f in missing:
                cache[(run_id, f)] = found[f]
        return found

    def _next_id(self, table: str) -> int:
        return int(self._db.scalar(f"SELECT coalesce(max(id), 0) + 1 FROM {table}"))

    # -- shared steps ----------------------------------------------------------------------------

    def _running(self, run_id: int) -> Result[str, DataStoreError]:
        """The project of a running run; ``NotFound`` or ``IllegalTransition`` otherwise."""
        row = self._db.one("SELECT status, project FROM test_runs WHERE id = ?", (run_id,))
        if row is None:
            return _not_found_run(run_id)
        if row[0] != RunStatus.RUNNING.value:
            return Failure(IllegalTransition("run", str(run_id), row[0], RunStatus.RUNNING.value))
        return Success(row[1])

    def _error_rows(
        self,
        owner: tuple[int | None, int | None],
        attempt: int,
        subtest: int | None,
        ordinal: int,
        error: PreparedError,
        next_id: int,
        file_ids: dict[str, int],
        errors: list[tuple[Any, ...]],
        frames: list[tuple[Any, ...]],
    ) -> int:
        """Append the rows of one error chain (deepest cause first, so every cause exists
        before the error naming it) and its frames; return the next free error id."""
        chain = error.chain()
        ids = range(next_id, next_id + len(chain))
        case_id, collection_id = owner
        for depth in range(len(chain) - 1, -1, -1):
            link = chain[depth]
            error_id = ids[depth]
            head = depth == 0
            errors.append(
                (
                    error_id,
                    case_id,
                    collection_id,
                    attempt,
                    subtest,
                    ordinal,
                    depth,
                    ids[depth + 1] if depth + 1 < len(chain) else None,
                    link.phase.value,
                    link.exception_type,
                    link.message,
                    int(link.message_truncated),
                    link.text,
                    int(link.text_truncated),
                    link.signature if head else None,
                    link.signature_frame if head else None,
                )
            )
            for position, frame in enumerate(link.frames):
                frames.append(
                    (
                        error_id,
                        position,
                        file_ids[frame.path],
                        frame.line,
                        frame.function,
                        int(frame.is_project),
                    )
                )
        return next_id + len(chain)

    def _insert_errors(self, errors: list[tuple[Any, ...]], frames: list[tuple[Any, ...]]) -> None:
        if errors:
            self._db.executemany(
                "INSERT INTO test_errors (id, case_id, collection_error_id, attempt, subtest,"
                " ordinal, depth, cause_error_id, phase, exception_type, message,"
                " message_truncated, text, text_truncated, signature, signature_frame)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                errors,
            )
        if frames:
            self._db.executemany(
                "INSERT INTO stack_frames (error_id, ordinal, file_id, line, function, is_project)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                frames,
            )

    def _read_summary(self, run_id: int) -> RunSummary:
        row = self._db.one(f"SELECT {_RUN_COLUMNS} FROM test_runs WHERE id = ?", (run_id,))
        assert row is not None
        return _summary(row)

    # -- DataStore -------------------------------------------------------------------------------

    def begin_run(self, start: RunStart) -> Result[RunId, DataStoreError]:
        """See ``DataStore.begin_run``."""
        prepared = prepare_run_start(start)
        if isinstance(prepared, Failure):
            return prepared
        run = prepared.unwrap()
        env = run.environment

        def write() -> Result[RunId, DataStoreError]:
            run_id = self._db.scalar(
                "INSERT INTO test_runs (project, invocation_id, status, started_at_ms,"
                " last_write_at_ms, python_version, pytest_version, platform, git_commit,"
                " git_branch, command_line, host, pid, git_dirty, selection)"
                " VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (
                    run.project,
                    run.invocation_id,
                    run.started_at_ms,
                    self._clock.now_ms(),
                    env.python_version,
                    env.pytest_version,
                    env.platform,
                    env.git_commit,
                    env.git_branch,
                    json.dumps(env.command_line, ensure_ascii=False),
                    env.host,
                    env.pid,
                    None if env.git_dirty is None else int(env.git_dirty),
                    encode_selection(run.selection),
                ),
            )
            return Success(RunId(run_id))

        return self._db.transact("begin_run", write)

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

        def write() -> Result[int, DataStoreError]:
            running = self._running(rid)
            if isinstance(running, Failure):
                return running
            self._sync()
            self._store_cases(rid, running.unwrap(), cases)
            return Success(len(cases))

        return self._db.transact("record_results", write)

    def _store_cases(self, run_id: int, project: str, cases: Sequence[PreparedCase]) -> None:
        db = self._db
        modules = {c.module_path for c in cases}
        paths = set(modules)
        for case in cases:
            if case.errors or case.attempts or case.subtests:
                paths.update(case.paths())
        file_ids = self._file_ids(paths)
        module_ids = self._module_ids(run_id, {file_ids[m] for m in modules})
        test_ids, existed = self._test_ids(project, [c.nodeid for c in cases])
        delta: Counter[str] = Counter()
        if existed and db.one("SELECT 1 FROM test_cases WHERE run_id = ? LIMIT 1", (run_id,)):
            # A rerun of items already stored in this run: replace them (their rows cascade).
            if db.scalar(
                "SELECT n_subtests_passed + n_subtests_failed + n_subtests_skipped"
                " FROM test_runs WHERE id = ?",
                (run_id,),
            ):
                for outcome, count in db.execute(
                    "SELECT s.outcome, count(*) FROM test_cases c"
                    " JOIN test_subtests s ON s.case_id = c.id WHERE c.run_id = ?"
                    " AND c.test_id IN (SELECT value FROM json_each(?)) GROUP BY s.outcome",
                    (run_id, json.dumps([test_ids[c.nodeid] for c in cases])),
                ):
                    delta[_SUBTEST_COLUMNS[SUBTEST_WORDS[_OUTCOME[outcome]]]] -= count
            for (outcome,) in self._many(
                "DELETE FROM test_cases WHERE run_id = ? AND test_id = ? RETURNING outcome",
                [(run_id, test_ids[c.nodeid]) for c in cases],
            ):
                delta[outcome] -= 1
        case_id = self._next_id("test_cases") if cases else 0
        error_id = self._next_id("test_errors")
        case_rows: list[tuple[Any, ...]] = []
        outputs: list[tuple[Any, ...]] = []
        attempts: list[tuple[Any, ...]] = []
        subtests: list[tuple[Any, ...]] = []
        errors: list[tuple[Any, ...]] = []
        frames: list[tuple[Any, ...]] = []
        tally: Counter[Outcome] = Counter()
        module_of = {m: module_ids[file_ids[m]] for m in modules}
        for case in cases:
            outcome = case.outcome
            phases = case.phases
            markers = case.markers
            if len(phases) == 3:
                setup, call, teardown = phases
                columns: Sequence[Any] = (
                    setup.outcome,
                    setup.duration_ms,
                    setup.skip_reason,
                    call.outcome,
                    call.duration_ms,
                    call.skip_reason,
                    teardown.outcome,
                    teardown.duration_ms,
                    teardown.skip_reason,
                ) if call.phase is Phase.CALL else _phase_columns(phases)
            else:
                columns = _phase_columns(phases)
            case_rows.append(
                (
                    case_id,
                    run_id,
                    test_ids[case.nodeid],
                    module_of[case.module_path],
                    outcome,
                    case.duration_ms,
                    case.name,
                    case.parametrize_id,
                    case.line,
                    json.dumps(markers, ensure_ascii=False) if markers else None,
                    *columns,
                    len(case.attempts),
                )
            )
            tally[outcome] += 1
            if case.stdout or case.stderr or case.log:
                outputs.append(
                    (
                        case_id,
                        case.stdout,
                        int(case.stdout_truncated),
                        case.stderr,
                        int(case.stderr_truncated),
                        case.log,
                        int(case.log_truncated),
                    )
                )
            for number, attempt in enumerate(case.attempts, start=1):
                attempts.append(
                    (
                        case_id,
                        number,
                        attempt.outcome.value,
                        attempt.duration_ms,
                        *_phase_columns(attempt.phases),
                    )
                )
            for position, subtest in enumerate(case.subtests):
                subtests.append(
                    (
                        case_id,
                        position,
                        subtest.description,
                        subtest.outcome.value,
                        subtest.duration_ms,
                    )
                )
                delta[_SUBTEST_COLUMNS[SUBTEST_WORDS[subtest.outcome]]] += 1
            if case.errors or case.attempts or case.subtests:
                for attempt_no, subtest_no, ordinal, error in case.owned_errors():
                    error_id = self._error_rows(
                        (case_id, None),
                        attempt_no,
                        subtest_no,
                        ordinal,
                        error,
                        error_id,
                        file_ids,
                        errors,
                        frames,
                    )
            case_id += 1
        for outcome, count in tally.items():
            delta[outcome.value] += count
        if case_rows:
            db.executemany(
                "INSERT INTO test_cases (id, run_id, test_id, module_id, outcome, duration_ms,"
                " name, parametrize_id, line, markers, setup_outcome, setup_ms, setup_reason,"
                " call_outcome, call_ms, call_reason, teardown_outcome, teardown_ms,"
                " teardown_reason, attempts)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                case_rows,
            )
        if outputs:
            db.executemany(
                "INSERT INTO test_output (case_id, stdout, stdout_truncated, stderr,"
                " stderr_truncated, log, log_truncated) VALUES (?, ?, ?, ?, ?, ?, ?)",
                outputs,
            )
        if attempts:
            db.executemany(
                "INSERT INTO test_attempts (case_id, ordinal, outcome, duration_ms,"
                " setup_outcome, setup_ms, setup_reason, call_outcome, call_ms, call_reason,"
                " teardown_outcome, teardown_ms, teardown_reason)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                attempts,
            )
        if subtests:
            db.executemany(
                "INSERT INTO test_subtests (case_id, ordinal, description, outcome, duration_ms)"
                " VALUES (?, ?, ?, ?, ?)",
                subtests,
            )
        self._insert_errors(errors, frames)
        columns = (*_COUNT_COLUMNS, *_SUBTEST_COLUMNS.values())
        db.execute(
            "UPDATE test_runs SET "
            + ", ".join(f"{column} = {column} + ?" for column in columns)
            + ", last_write_at_ms = ? WHERE id = ?",
            (
                *(delta[o.value] for o in OUTCOME_ORDER),
                *(delta[c] for c in _SUBTEST_COLUMNS.values()),
                self._clock.now_ms(),
                run_id,
            ),
        )

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

        def write() -> Result[int, DataStoreError]:
            running = self._running(rid)
            if isinstance(running, Failure):
                return running
            self._sync()
            self._store_collection_errors(rid, items)
            return Success(len(items))

        return self._db.transact("record_collection_errors", write)

    def _store_collection_errors(
        self, run_id: int, items: Sequence[PreparedCollectionError]
    ) -> None:
        db = self._db
        replaced = 0
        if items:
            file_ids = self._file_ids(path for item in items for path in item.paths())
            module_ids = self._module_ids(run_id, {file_ids[i.module_path] for i in items})
            replaced = len(
                self._many(
                    "DELETE FROM collection_errors WHERE run_id = ? AND nodeid = ? RETURNING id",
                    [(run_id, i.nodeid) for i in items],
                )
            )
            next_id = self._next_id("collection_errors")
            error_id = self._next_id("test_errors")
            rows: list[tuple[Any, ...]] = []
            errors: list[tuple[Any, ...]] = []
            frames: list[tuple[Any, ...]] = []
            for item in items:
                rows.append((next_id, run_id, module_ids[file_ids[item.module_path]], item.nodeid))
                error_id = self._error_rows(
                    (None, next_id), 0, None, 0, item.error, error_id, file_ids, errors, frames
                )
                next_id += 1
            db.executemany(
                "INSERT INTO collection_errors (id, run_id, module_id, nodeid) VALUES (?, ?, ?, ?)",
                rows,
            )
            self._insert_errors(errors, frames)
        db.execute(
            "UPDATE test_runs SET n_collection_errors = n_collection_errors + ?,"
            " last_write_at_ms = ? WHERE id = ?",
            (len(items) - replaced, self._clock.now_ms(), run_id),
        )

    def finish_run(
        self, run_id: RunId, status: RunStatus, finished_at: datetime
    ) -> Result[RunSummary, DataStoreError]:
        """See ``DataStore.finish_run``: the run's new failure signatures are frozen into
        ``test_runs.new_signatures``; history gets one entry per executed item (a sequence
        number per finished run orders them; failing entries get their streak) and is
        trimmed in one statement."""
        arguments = check_finish(run_id, status, finished_at)
        if isinstance(arguments, Failure):
            return arguments
        rid, final, finished_ms = arguments.unwrap()
        db = self._db

        def write() -> Result[RunSummary, DataStoreError]:
            row = db.one("SELECT status, project FROM test_runs WHERE id = ?", (rid,))
            if row is None:
                return _not_found_run(rid)
            if row[0] != RunStatus.RUNNING.value or final == RunStatus.RUNNING:
                return Failure(IllegalTransition("run", str(rid), row[0], final.value))
            project = row[1]
            frozen = sorted(_run_new_signatures(db, rid, project))
            db.execute(
                "UPDATE test_runs SET status = ?, finished_at_ms = ?, last_write_at_ms = ?,"
                " new_signatures = ? WHERE id = ?",
                (final.value, finished_ms, self._clock.now_ms(), json.dumps(frozen), rid),
            )
            if final in (RunStatus.PASSED, RunStatus.FAILED):
                self._record_history(rid, finished_ms)
                self._record_signatures(rid, project, finished_ms)
            return Success(self._read_summary(rid))

        return self._db.transact("finish_run", write)

    def _record_history(self, run_id: int, finished_ms: int) -> None:
        db = self._db
        if db.one("SELECT 1 FROM test_cases WHERE run_id = ? LIMIT 1", (run_id,)) is None:
            return
        seq = db.scalar(
            "UPDATE test_run_sequences SET value = value + 1 WHERE name = 'history'"
            " RETURNING value"
        )
        db.execute(
            "INSERT INTO test_history (test_id, seq, run_id, outcome, duration_ms,"
            " recorded_at_ms, message, git_commit, git_dirty, rerun_failures)"
            " SELECT c.test_id, ?1, ?2, c.outcome, c.duration_ms, ?3,"
            f" CASE WHEN c.outcome IN {_FAILING_SQL} THEN (SELECT e.message FROM test_errors e"
            "  WHERE e.case_id = c.id AND e.attempt = 0 AND e.ordinal = 0 AND e.depth = 0"
            "  AND e.subtest IS NULL) END,"
            " r.git_commit, r.git_dirty,"
            " CASE WHEN c.attempts > 0 THEN (SELECT count(*) FROM test_attempts a"
            f"  WHERE a.case_id = c.id AND a.outcome IN {_FAILING_SQL}) ELSE 0 END"
            " FROM test_runs r CROSS JOIN test_cases c ON c.run_id = r.id"
            f" WHERE r.id = ?2 AND c.outcome IN {_EXECUTED_SQL}",
            (seq, run_id, finished_ms),
        )
        self._record_streaks(run_id, seq)
        # One set-based trim: keep the newest window of every test this run touched.
        db.execute(
            "DELETE FROM test_history WHERE (test_id, seq) IN ("
            " SELECT test_id, seq FROM ("
            "  SELECT h.test_id, h.seq, row_number() OVER ("
            "   PARTITION BY h.test_id ORDER BY h.seq DESC) AS newest"
            "  FROM test_history h"
            "  WHERE h.test_id IN (SELECT test_id FROM test_history WHERE run_id = ?))"
            " WHERE newest > ?)",
            (run_id, DEFAULT_HISTORY_WINDOW),
        )

    def _record_streaks(self, run_id: int, seq: int) -> None:
        """Store on each failing history row of the run the streak it ends
        (:func:`streak_of` over the previous entries of runs with a lower id)."""
        db = self._db
        previous: dict[int, list[tuple[int, WindowEntry]]] = {}
        own: dict[int, str | None] = {}
        for row in db.execute(
            f"SELECT h.test_id, {_HISTORY_COLUMNS} FROM test_history n"
            " JOIN test_history h ON h.test_id = n.test_id"
            "  AND (h.run_id IS NULL OR h.run_id < ?1 OR h.seq = n.seq)"
            f" WHERE n.run_id = ?1 AND n.seq = ?2 AND n.outcome IN {_FAILING_SQL}",
            (run_id, seq),
        ):
            if row[1] == seq:
                own[row[0]] = row[7]
            else:
                previous.setdefault(row[0], []).append((row[1], _entry(row[2:])))
        updates = []
        for test_id, message in own.items():
            entries = _newest_first(previous.get(test_id, []))
            now = WindowEntry(run_id, Outcome.FAILED, message=message)
            streak = streak_of(now, previous_window(entries, run_id))
            updates.append((streak.length, streak.since, streak.message, test_id, seq))
        if updates:
            db.executemany(
                "UPDATE test_history SET streak = ?, streak_since = ?, streak_message = ?"
                " WHERE test_id = ? AND seq = ?",
                updates,
            )

    def _record_signatures(self, run_id: int, project: str, finished_ms: int) -> None:
        db = self._db
        heads = db.execute(_HEADS_OF_RUN, (run_id,))
        counted: dict[str, list[Any]] = {}
        for signature, exception_type, message, frame in heads:
            entry = counted.get(signature)
            if entry is None:
                counted[signature] = [exception_type, normalize_message(message), frame, 1]
            else:
                entry[3] += 1
        if counted:
            db.executemany(
                "INSERT INTO failure_signatures (project, signature, exception_type, message,"
                " frame, count, first_seen_run_id, last_seen_run_id, first_seen_at_ms,"
                " last_seen_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (project, signature) DO UPDATE SET count = count + excluded.count,"
                " first_seen_run_id = min(first_seen_run_id, excluded.first_seen_run_id),"
                " last_seen_run_id = excluded.last_seen_run_id,"
                " last_seen_at_ms = excluded.last_seen_at_ms",
                [
                    (project, sig, etype, msg, frame, n, run_id, run_id, finished_ms, finished_ms)
                    for sig, (etype, msg, frame, n) in counted.items()
                ],
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
        rid, chosen = checked.unwrap(), encode_selection(prepared.unwrap())

        def write() -> Result[RunSummary, DataStoreError]:
            running = self._running(rid)
            if isinstance(running, Failure):
                return running
            self._db.execute(
                "UPDATE test_runs SET selection = ?, last_write_at_ms = ? WHERE id = ?",
                (chosen, self._clock.now_ms(), rid),
            )
            return Success(self._read_summary(rid))

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
        db = self._db

        def write() -> Result[tuple[RunId, ...], DataStoreError]:
            ids = sorted(
                row[0]
                for row in db.execute(
                    "SELECT id FROM test_runs"
                    " WHERE project = ? AND status = 'running' AND last_write_at_ms < ?",
                    (name, limit),
                )
            )
            frozen = [(json.dumps(sorted(_run_new_signatures(db, i, name))), i) for i in ids]
            db.executemany(
                "UPDATE test_runs SET status = 'aborted', finished_at_ms = last_write_at_ms,"
                " new_signatures = ? WHERE id = ?",
                frozen,
            )
            return Success(tuple(RunId(i) for i in ids))

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
        db = self._db

        def write() -> Result[int, DataStoreError]:
            if db.one("SELECT 1 FROM test_runs WHERE id = ?", (rid,)) is None:
                return _not_found_run(rid)
            self._sync()
            file_ids = self._file_ids(f.path for f in rows)
            db.execute("DELETE FROM file_coverage WHERE run_id = ?", (rid,))
            if rows:
                db.executemany(
                    "INSERT INTO file_coverage (run_id, file_id, statements, missing_statements,"
                    " branches, partial_branches, missing_branches, missing_lines)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        (
                            rid,
                            file_ids[f.path],
                            f.statements,
                            f.missing_statements,
                            f.branches,
                            f.partial_branches,
                            f.missing_branches,
                            encode_lines(f.missing_lines),
                        )
                        for f in rows
                    ],
                )
            db.execute(
                "UPDATE test_runs SET last_write_at_ms = ? WHERE id = ?",
                (self._clock.now_ms(), rid),
            )
            return Success(len(rows))

        return self._db.transact("write_coverage", write)

    def prune_runs(self, policy: RunRetentionPolicy) -> Result[PruneRunsResult, DataStoreError]:
        """See ``DataStore.prune_runs``; the rules are ``plan_prune``'s. In one unit: move
        coverage, delete the doomed runs (the schema cascades the rest, history and
        signatures keep a NULL run), then remove every ``files`` row (and ``tests`` row)
        nothing refers to, on every call. Compacting the file is :meth:`compact`."""
        checked = valid_policy(policy)
        if isinstance(checked, Failure):
            return checked
        db = self._db

        def write() -> Result[PruneRunsResult, DataStoreError]:
            self._sync()
            runs = [
                PruneRun(r[0], r[1], r[2], _STATUS[r[3]], r[4])
                for r in db.execute(
                    "SELECT id, project, invocation_id, status, started_at_ms FROM test_runs"
                )
            ]
            covered = [
                r[0]
                for r in db.execute(
                    "SELECT r.id FROM test_runs r"
                    " WHERE EXISTS (SELECT 1 FROM file_coverage c WHERE c.run_id = r.id)"
                )
            ]
            plan = plan_prune(runs, covered, checked.unwrap(), self._clock.now_ms())
            for source, target in plan.moves:
                db.execute(
                    "UPDATE file_coverage SET run_id = ? WHERE run_id = ?", (target, source)
                )
            if plan.doomed:
                db.executemany("DELETE FROM test_runs WHERE id = ?", [(i,) for i in plan.doomed])
            gone_files = {
                r[0]
                for r in db.execute(
                    "DELETE FROM files"
                    " WHERE NOT EXISTS (SELECT 1 FROM test_modules m WHERE m.file_id = files.id)"
                    " AND NOT EXISTS (SELECT 1 FROM stack_frames s WHERE s.file_id = files.id)"
                    " AND NOT EXISTS (SELECT 1 FROM file_coverage c WHERE c.file_id = files.id)"
                    " RETURNING id"
                )
            }
            db.execute(
                "DELETE FROM tests"
                " WHERE NOT EXISTS (SELECT 1 FROM test_cases c WHERE c.test_id = tests.id)"
                " AND NOT EXISTS (SELECT 1 FROM test_history h WHERE h.test_id = tests.id)"
            )
            self._forget(set(plan.doomed), gone_files)
            return Success(PruneRunsResult(len(plan.doomed), len(gone_files)))

        return self._db.transact("prune_runs", write)

    def plan_prune(self, policy: RunRetentionPolicy) -> Result[PruneRunsResult, DataStoreError]:
        """See ``DataStore.plan_prune``: ``plan_prune``'s decision, and a count of the
        ``files`` rows no surviving module, frame or coverage row (coverage moved as
        ``prune_runs`` moves it) would refer to. One consistent read, no write lock."""
        checked = valid_policy(policy)
        if isinstance(checked, Failure):
            return checked
        db = self._db

        def read() -> Result[PruneRunsResult, DataStoreError]:
            runs = [
                PruneRun(r[0], r[1], r[2], _STATUS[r[3]], r[4])
                for r in db.execute(
                    "SELECT id, project, invocation_id, status, started_at_ms FROM test_runs"
                )
            ]
            covered = [
                r[0]
                for r in db.execute(
                    "SELECT r.id FROM test_runs r"
                    " WHERE EXISTS (SELECT 1 FROM file_coverage c WHERE c.run_id = r.id)"
                )
            ]
            plan = plan_prune(runs, covered, checked.unwrap(), self._clock.now_ms())
            doomed = set(plan.doomed)
            coverage_gone = doomed - {source for source, _ in plan.moves}
            orphans = db.scalar(
                "SELECT count(*) FROM files f"
                " WHERE NOT EXISTS (SELECT 1 FROM test_modules m WHERE m.file_id = f.id"
                "   AND m.run_id NOT IN (SELECT value FROM json_each(?1)))"
                " AND NOT EXISTS (SELECT 1 FROM stack_frames s"
                "   JOIN test_errors e ON e.id = s.error_id"
                "   LEFT JOIN test_cases tc ON tc.id = e.case_id"
                "   LEFT JOIN collection_errors ce ON ce.id = e.collection_error_id"
                "   WHERE s.file_id = f.id"
                "   AND coalesce(tc.run_id, ce.run_id) NOT IN (SELECT value FROM json_each(?1)))"
                " AND NOT EXISTS (SELECT 1 FROM file_coverage c WHERE c.file_id = f.id"
                "   AND c.run_id NOT IN (SELECT value FROM json_each(?2)))",
                (json.dumps(sorted(doomed)), json.dumps(sorted(coverage_gone))),
            )
            return Success(PruneRunsResult(len(plan.doomed), int(orphans or 0)))

        return db.read("plan_prune", read)

    def _forget(self, runs: set[int], files: set[int]) -> None:
        """Drop cache entries naming deleted rows (journalled like every mirror change)."""
        if files:
            for path in [p for p, i in self._files.items() if i in files]:
                del self._files[path]
        if runs:
            for module in [k for k in self._modules if k[0] in runs]:
                del self._modules[module]

    def compact(self, *, full: bool = False) -> Result[None, DataStoreError]:
        """Give pages freed by pruning back to the file system, outside any transaction.

        ``PRAGMA incremental_vacuum`` (the database uses ``auto_vacuum=INCREMENTAL``); with
        ``full`` a ``VACUUM``, which rewrites the whole file (slow; needs free disk space
        about the size of the database). Returns ``Busy`` when another connection holds a
        lock, ``StorageFailure`` for other engine errors.

        Raises :class:`~runstore.exceptions.TransactionMisuse` inside a unit of work.
        """
        if self._db.in_unit:
            raise TransactionMisuse("compact() cannot run inside a unit of work")
        try:
            statement = "VACUUM" if full else "PRAGMA incremental_vacuum"
            self._db.connection.execute(statement).fetchall()
        except apsw.Error as exc:
            return Failure(from_apsw(exc, operation="compact"))
        return Success(None)


class SqliteDataReader:
    """``DataReader`` on SQLite; every method reads one snapshot (``SqliteDatabase.read``)."""

    def __init__(self, db: SqliteDatabase) -> None:
        self._db = db

    def _read(self, operation: str, fn: Callable[[], Result[T, DataReaderError]]) -> Result[
        T, DataReaderError
    ]:
        return self._db.read(operation, fn)

    def _run_row(self, run_id: object, columns: str) -> Result[Row, DataReaderError]:
        checked = valid_run_id(run_id)
        if isinstance(checked, Failure):
            return checked
        rid = checked.unwrap()
        row = self._db.one(f"SELECT {columns} FROM test_runs WHERE id = ?", (rid,))
        if row is None:
            return _not_found_run(rid)
        return Success(row)

    def latest_run(self, project: str) -> Result[RunSummary, DataReaderError]:
        """See ``DataReader.latest_run``; ``NotFound("project", project)`` without runs."""
        checked = valid_project(project)
        if isinstance(checked, Failure):
            return checked
        name = checked.unwrap()

        def read() -> Result[RunSummary, DataReaderError]:
            row = self._db.one(
                f"SELECT {_RUN_COLUMNS} FROM test_runs WHERE project = ?"
                " ORDER BY started_at_ms DESC, id DESC LIMIT 1",
                (name,),
            )
            if row is None:
                return Failure(NotFound("project", name))
            return Success(_summary(row))

        return self._read("latest_run", read)

    def get_run(self, run_id: RunId) -> Result[RunSummary, DataReaderError]:
        """See ``DataReader.get_run``."""
        return self._read("get_run", lambda: self._run_row(run_id, _RUN_COLUMNS).map(_summary))

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

        def read() -> Result[Page[RunSummary], DataReaderError]:
            where: list[str] = []
            params: list[Any] = []
            if name is not None:
                where.append("project = ?")
                params.append(name)
            if only is not None:
                where.append("status = ?")
                params.append(only.value)
            if position is not None:
                where.append("(started_at_ms, id) < (?, ?)")
                params.extend(position)
            sql = f"SELECT {_RUN_COLUMNS} FROM test_runs"
            if where:
                sql += " WHERE " + " AND ".join(where)
            sql += " ORDER BY started_at_ms DESC, id DESC LIMIT ?"
            rows = self._db.execute(sql, (*params, count + 1))
            more = len(rows) > count
            items = tuple(_summary(r) for r in rows[:count])
            last = items[-1] if more else None
            after = None if last is None else RUNS_CURSOR.encode(last.started_at_ms, last.id)
            return Success(Page(items, more, after))

        return self._read("list_runs", read)

    def projects(self) -> Result[tuple[str, ...], DataReaderError]:
        """See ``DataReader.projects``."""
        def read() -> Result[tuple[str, ...], DataReaderError]:
            rows = self._db.execute("SELECT DISTINCT project FROM test_runs")
            return Success(tuple(sorted(r[0] for r in rows)))

        return self._read("projects", read)

    def _records(
        self, run_id: int, where: str = "", params: Sequence[Any] = ()
    ) -> list[TestRecord]:
        rows = self._db.execute(
            "SELECT t.nodeid, f.path, c.name, c.parametrize_id, c.line, c.markers, c.outcome,"
            " c.duration_ms, c.setup_outcome, c.setup_ms, c.setup_reason, c.call_outcome,"
            " c.call_ms, c.call_reason, c.teardown_outcome, c.teardown_ms, c.teardown_reason,"
            " c.attempts"
            " FROM test_cases c JOIN tests t ON t.id = c.test_id"
            " JOIN test_modules m ON m.id = c.module_id JOIN files f ON f.id = m.file_id"
            " WHERE c.run_id = ?" + where,
            (run_id, *params),
        )
        records: list[TestRecord] = []
        rid = RunId(run_id)
        for row in rows:
            phases = _phases_of(row[8:17])
            records.append(
                TestRecord(
                    run_id=rid,
                    nodeid=row[0],
                    module_path=row[1],
                    name=row[2],
                    parametrize_id=row[3],
                    line=row[4],
                    markers=tuple(json.loads(row[5])) if row[5] is not None else (),
                    outcome=_OUTCOME[row[6]],
                    duration_ms=row[7],
                    phases=phases,
                    attempts=row[17],
                    skip_reason=next(
                        (p.skip_reason for p in phases if p.skip_reason is not None), None
                    ),
                )
            )
        return records

    def tests(
        self, run_id: RunId, *, outcomes: frozenset[Outcome] | None = None
    ) -> Result[tuple[TestRecord, ...], DataReaderError]:
        """See ``DataReader.tests``."""
        wanted = valid_outcomes(outcomes)
        if isinstance(wanted, Failure):
            return wanted
        only = wanted.unwrap()

        def read() -> Result[tuple[TestRecord, ...], DataReaderError]:
            found = self._run_row(run_id, "id")
            if isinstance(found, Failure):
                return found
            rid = found.unwrap()[0]
            if only is None:
                records = self._records(rid)
            elif not only:
                records = []
            else:
                marks = ", ".join("?" for _ in only)
                records = self._records(
                    rid, f" AND c.outcome IN ({marks})", sorted(o.value for o in only)
                )
            records.sort(key=lambda r: r.nodeid)
            return Success(tuple(records))

        return self._read("tests", read)

    def _heads(self, source: str, where: str, params: Sequence[Any]) -> dict[int, PreparedError]:
        """First-error chains keyed by owner. ``source`` is the FROM clause naming the owner
        ``o`` (its id is the key) and its errors ``e``; ``where`` filters it."""
        db = self._db
        rows = db.execute(
            "SELECT o.id, e.id, e.depth, e.phase, e.exception_type, e.message,"
            f" e.message_truncated, e.text, e.text_truncated, e.signature {source} {where}",
            params,
        )
        if not rows:
            return {}
        frames: dict[int, list[StackFrame]] = {}
        for error_id, path, line, function, is_project in db.execute(
            "SELECT s.error_id, f.path, s.line, s.function, s.is_project"
            f" {source} JOIN stack_frames s ON s.error_id = e.id"
            f" JOIN files f ON f.id = s.file_id {where} ORDER BY s.error_id, s.ordinal",
            params,
        ):
            frames.setdefault(error_id, []).append(
                StackFrame(path, line, function, bool(is_project))
            )
        chains: dict[int, list[tuple[int, PreparedError]]] = {}
        for owner, error_id, depth, phase, etype, message, m_cut, text, t_cut, signature in rows:
            chains.setdefault(owner, []).append(
                (
                    depth,
                    PreparedError(
                        phase=_PHASE[phase],
                        exception_type=etype,
                        message=message,
                        message_truncated=bool(m_cut),
                        text=text,
                        text_truncated=bool(t_cut),
                        frames=tuple(frames.get(error_id, ())),
                        signature=signature or "",
                    ),
                )
            )
        heads: dict[int, PreparedError] = {}
        for owner, links in chains.items():
            links.sort(key=lambda dl: dl[0])
            head = links[0][1]
            heads[owner] = attrs.evolve(head, causes=tuple(link for _, link in links[1:]))
        return heads

    def test_detail(self, run_id: RunId, nodeid: str) -> Result[TestDetail, DataReaderError]:
        """See ``DataReader.test_detail``: the item's row, its output row, subtest and
        attempt rows, and every error chain of its final result and its attempts with
        frames."""
        node = valid_project(nodeid, "nodeid")
        if isinstance(node, Failure):
            return node
        wanted = node.unwrap()
        db = self._db

        def read() -> Result[TestDetail, DataReaderError]:
            found = self._run_row(run_id, "id")
            if isinstance(found, Failure):
                return found
            rid = found.unwrap()[0]
            row = db.one(
                "SELECT c.id FROM test_cases c JOIN tests t ON t.id = c.test_id"
                " WHERE c.run_id = ? AND t.nodeid = ?",
                (rid, wanted),
            )
            if row is None:
                return Failure(NotFound("test", wanted))
            case_id = row[0]
            (record,) = self._records(rid, " AND c.id = ?", (case_id,))
            output = db.one(
                "SELECT stdout, stdout_truncated, stderr, stderr_truncated, log, log_truncated"
                " FROM test_output WHERE case_id = ?",
                (case_id,),
            )
            heads = self._heads(
                "FROM test_errors o CROSS JOIN test_errors e ON e.case_id = o.case_id"
                " AND e.attempt = o.attempt AND e.ordinal = o.ordinal AND e.subtest IS o.subtest",
                "WHERE o.case_id = ? AND o.depth = 0",
                (case_id,),
            )
            owners = db.execute(
                "SELECT id, attempt, subtest, ordinal FROM test_errors"
                " WHERE case_id = ? AND depth = 0",
                (case_id,),
            )
            owners.sort(key=lambda r: (r[1], r[3]))
            item_errors = [heads[i] for i, attempt, sub, _ in owners
                           if attempt == 0 and sub is None]
            subtest_errors = {sub: heads[i] for i, attempt, sub, _ in owners
                              if attempt == 0 and sub is not None}
            attempt_errors: dict[int, list[PreparedError]] = {}
            for i, attempt, _, _ in owners:
                if attempt > 0:
                    attempt_errors.setdefault(attempt, []).append(heads[i])
            subtests = [
                (description, _OUTCOME[outcome], ms, subtest_errors.get(ordinal))
                for ordinal, description, outcome, ms in db.execute(
                    "SELECT ordinal, description, outcome, duration_ms FROM test_subtests"
                    " WHERE case_id = ? ORDER BY ordinal",
                    (case_id,),
                )
            ]
            attempts = [
                (_phases_of(r[3:12]), _OUTCOME[r[1]], r[2], attempt_errors.get(r[0], ()))
                for r in db.execute(
                    "SELECT ordinal, outcome, duration_ms, setup_outcome, setup_ms, setup_reason,"
                    " call_outcome, call_ms, call_reason, teardown_outcome, teardown_ms,"
                    " teardown_reason FROM test_attempts WHERE case_id = ? ORDER BY ordinal",
                    (case_id,),
                )
            ]
            texts = (
                ("", False, "", False, "", False)
                if output is None
                else (output[0], bool(output[1]), output[2], bool(output[3]), output[4],
                      bool(output[5]))
            )
            return Success(test_detail(record, item_errors, texts, subtests, attempts))

        return self._read("test_detail", read)

    def failures(self, run_id: RunId) -> Result[tuple[FailureRecord, ...], DataReaderError]:
        """See ``DataReader.failures``: ``is_new`` from the signatures frozen when the run
        ended (computed afresh while it runs); streaks from the history rows of runs with a
        lower id."""
        db = self._db

        def read() -> Result[tuple[FailureRecord, ...], DataReaderError]:
            found = self._run_row(run_id, "id, project, new_signatures")
            if isinstance(found, Failure):
                return found
            rid, project, frozen = found.unwrap()
            cases = db.execute(
                "SELECT c.id, t.nodeid, c.outcome, c.setup_outcome, c.setup_ms, c.setup_reason,"
                " c.call_outcome, c.call_ms, c.call_reason, c.teardown_outcome, c.teardown_ms,"
                " c.teardown_reason FROM test_cases c JOIN tests t ON t.id = c.test_id"
                f" WHERE c.run_id = ? AND c.outcome IN {_FAILING_SQL}",
                (rid,),
            )
            case_heads = self._heads(
                "FROM test_cases o CROSS JOIN test_errors e ON e.case_id = o.id AND e.attempt = 0"
                " AND e.ordinal = 0 AND e.subtest IS NULL",
                f"WHERE o.run_id = ? AND o.outcome IN {_FAILING_SQL}",
                (rid,),
            )
            collection = db.execute(
                "SELECT id, nodeid FROM collection_errors WHERE run_id = ?", (rid,)
            )
            collection_heads = self._heads(
                "FROM collection_errors o"
                " CROSS JOIN test_errors e ON e.collection_error_id = o.id",
                "WHERE o.run_id = ?",
                (rid,),
            )
            new = (
                _run_new_signatures(db, rid, project)
                if frozen is None
                else frozenset(json.loads(frozen))
            )
            previous: dict[int, list[tuple[int, WindowEntry]]] = {}
            for row in db.execute(
                f"SELECT c.id, {_HISTORY_COLUMNS} FROM test_cases c"
                " JOIN test_history h ON h.test_id = c.test_id"
                "  AND (h.run_id IS NULL OR h.run_id < ?1)"
                f" WHERE c.run_id = ?1 AND c.outcome IN {_FAILING_SQL}",
                (rid,),
            ):
                previous.setdefault(row[0], []).append((row[1], _entry(row[2:])))
            streaks: dict[int, Streak] = {}
            for row in cases:
                head = case_heads.get(row[0])
                message = None if head is None else head.message
                now = WindowEntry(rid, _OUTCOME[row[2]], message=message)
                entries = _newest_first(previous.get(row[0], []))
                streaks[row[0]] = streak_of(now, previous_window(entries, rid))
            alive = self._alive({s.since for s in streaks.values()} - {rid, None})
            records: list[tuple[int, FailureRecord]] = []
            for row in cases:
                streak = streaks[row[0]]
                if streak.since is not None and streak.since != rid and streak.since not in alive:
                    streak = attrs.evolve(streak, since=None)
                head = case_heads.get(row[0])
                records.append(
                    (
                        1,
                        failure_record(
                            row[1], _OUTCOME[row[2]], _phases_of(row[3:12]), head, new, streak
                        ),
                    )
                )
            for collection_id, nodeid in collection:
                head = collection_heads.get(collection_id)
                alone = Streak(1, rid, "" if head is None else head.message)
                records.append((0, failure_record(nodeid, Outcome.ERROR, (), head, new, alone)))
            return Success(sort_failures(records))

        return self._read("failures", read)

    def _alive(self, run_ids: Iterable[int | None]) -> set[int]:
        """Which of ``run_ids`` are stored runs (not pruned)."""
        wanted = sorted(i for i in run_ids if i is not None)
        if not wanted:
            return set()
        return {
            r[0]
            for r in self._db.execute(
                "SELECT id FROM test_runs WHERE id IN (SELECT value FROM json_each(?))",
                (json.dumps(wanted),),
            )
        }

    def classify(self, run_id: RunId) -> Result[tuple[TestClassification, ...], DataReaderError]:
        """See ``DataReader.classify``: each item now (with the run's commit and its failed
        rerun attempts) and the history rows of runs with a lower id, judged by
        :func:`classify`."""

        def read() -> Result[tuple[TestClassification, ...], DataReaderError]:
            found = self._run_row(run_id, "id, git_commit, git_dirty")
            if isinstance(found, Failure):
                return found
            rid, commit, dirty = found.unwrap()
            rows = self._db.execute(
                "SELECT t.nodeid, c.outcome, CASE WHEN c.attempts > 0 THEN"
                " (SELECT count(*) FROM test_attempts a WHERE a.case_id = c.id"
                f"  AND a.outcome IN {_FAILING_SQL}) ELSE 0 END, {_HISTORY_COLUMNS}"
                " FROM test_cases c JOIN tests t ON t.id = c.test_id"
                " LEFT JOIN test_history h ON h.test_id = c.test_id"
                "  AND (h.run_id IS NULL OR h.run_id < ?1)"
                " WHERE c.run_id = ?1",
                (rid,),
            )
            grouped: dict[str, tuple[WindowEntry, list[tuple[int, WindowEntry]]]] = {}
            for row in rows:
                nodeid = row[0]
                item = grouped.get(nodeid)
                if item is None:
                    now = WindowEntry(
                        rid,
                        _OUTCOME[row[1]],
                        git_commit=commit,
                        git_dirty=None if dirty is None else bool(dirty),
                        rerun_failures=row[2],
                    )
                    item = (now, [])
                    grouped[nodeid] = item
                if row[3] is not None:
                    item[1].append((row[3], _entry(row[4:])))
            return Success(
                tuple(
                    classify(
                        rid,
                        CaseHistory(
                            nodeid,
                            grouped[nodeid][0],
                            previous_window(_newest_first(grouped[nodeid][1]), rid),
                        ),
                    )
                    for nodeid in sorted(grouped)
                )
            )

        return self._read("classify", read)

    def flaky_tests(self, project: str) -> Result[tuple[FlakyTest, ...], DataReaderError]:
        """See ``DataReader.flaky_tests``: every history row of the project's tests, the
        newest window of each judged by :func:`flaky_entry`."""
        checked = valid_project(project)
        if isinstance(checked, Failure):
            return checked
        name = checked.unwrap()

        def read() -> Result[tuple[FlakyTest, ...], DataReaderError]:
            rows = self._db.execute(
                f"SELECT t.nodeid, {_HISTORY_COLUMNS}"
                " FROM tests t CROSS JOIN test_history h ON h.test_id = t.id WHERE t.project = ?",
                (name,),
            )
            grouped: dict[str, list[tuple[int, WindowEntry]]] = {}
            for row in rows:
                grouped.setdefault(row[0], []).append((row[1], _entry(row[2:])))
            found: list[FlakyTest] = []
            for nodeid, entries in grouped.items():
                flaky = flaky_entry(nodeid, _newest_first(entries))
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
        name, test = checked.unwrap(), node.unwrap()

        def read() -> Result[tuple[HistoryEntry, ...], DataReaderError]:
            rows = self._db.execute(
                "SELECT h.run_id, h.outcome, h.duration_ms, h.recorded_at_ms, h.message,"
                " h.git_commit, h.git_dirty, h.rerun_failures"
                " FROM tests t JOIN test_history h ON h.test_id = t.id"
                " WHERE t.project = ? AND t.nodeid = ? ORDER BY h.seq DESC",
                (name, test),
            )
            if not rows:
                return Failure(NotFound("test", test))
            return Success(
                tuple(
                    HistoryEntry(
                        run_id=None if r[0] is None else RunId(r[0]),
                        outcome=_OUTCOME[r[1]],
                        duration_ms=r[2],
                        recorded_at_ms=r[3],
                        message=r[4],
                        git_commit=r[5],
                        git_dirty=None if r[6] is None else bool(r[6]),
                        rerun_failures=r[7],
                    )
                    for r in rows
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

        def read() -> Result[tuple[str, ...], DataReaderError]:
            rows = self._db.execute("SELECT nodeid FROM tests WHERE project = ?", (name,))
            return Success(rank_matches([r[0] for r in rows], text, count))

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
            found = self._run_row(run_id, "id")
            if isinstance(found, Failure):
                return found
            rid = found.unwrap()[0]
            records = self._records(rid, " ORDER BY c.duration_ms DESC, t.nodeid LIMIT ?", (count,))
            return Success(tuple(records))

        return self._read("slowest", read)

    def _coverage_source(self, run_id: int, invocation_id: str) -> int | None:
        row = self._db.one(
            "SELECT CASE WHEN EXISTS (SELECT 1 FROM file_coverage WHERE run_id = ?1) THEN ?1"
            " ELSE (SELECT r.id FROM test_runs r WHERE r.invocation_id = ?2"
            "  AND EXISTS (SELECT 1 FROM file_coverage c WHERE c.run_id = r.id)"
            "  ORDER BY r.id LIMIT 1) END",
            (run_id, invocation_id),
        )
        return None if row is None else row[0]

    def coverage(self, run_id: RunId) -> Result[CoverageReport, DataReaderError]:
        """See ``DataReader.coverage``."""

        def read() -> Result[CoverageReport, DataReaderError]:
            found = self._run_row(run_id, "id, invocation_id")
            if isinstance(found, Failure):
                return found
            rid, invocation = found.unwrap()
            source = self._coverage_source(rid, invocation)
            if source is None:
                return Failure(NotFound("coverage", str(rid)))
            rows = self._db.execute(
                "SELECT f.path, c.statements, c.missing_statements, c.branches,"
                " c.partial_branches, c.missing_branches, c.missing_lines"
                " FROM file_coverage c JOIN files f ON f.id = c.file_id WHERE c.run_id = ?",
                (source,),
            )
            files = sorted(
                (
                    FileCoverage(r[0], r[1], r[2], r[3], r[4], r[5], decode_lines(r[6]))
                    for r in rows
                ),
                key=lambda f: f.path,
            )
            return Success(CoverageReport(RunId(rid), RunId(source), tuple(files)))

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
        db = self._db

        def read() -> Result[tuple[CoverageTrendPoint, ...], DataReaderError]:
            points = db.execute(
                "SELECT id, started_at_ms, source FROM ("
                " SELECT r.id, r.started_at_ms, CASE"
                "  WHEN EXISTS (SELECT 1 FROM file_coverage c WHERE c.run_id = r.id) THEN r.id"
                "  ELSE (SELECT s.id FROM test_runs s WHERE s.invocation_id = r.invocation_id"
                "   AND EXISTS (SELECT 1 FROM file_coverage c WHERE c.run_id = s.id)"
                "   ORDER BY s.id LIMIT 1) END AS source"
                " FROM test_runs r WHERE r.project = ?)"
                " WHERE source IS NOT NULL ORDER BY started_at_ms DESC, id DESC LIMIT ?",
                (name, count),
            )
            totals: dict[int, float] = {}
            for source in {p[2] for p in points}:
                row = db.one(
                    "SELECT sum(statements), sum(missing_statements), sum(branches),"
                    " sum(missing_branches) FROM file_coverage WHERE run_id = ?",
                    (source,),
                )
                assert row is not None
                totals[source] = coverage_percent(row[0], row[1], row[2], row[3])
            return Success(
                tuple(
                    CoverageTrendPoint(RunId(p[0]), p[1], totals[p[2]]) for p in reversed(points)
                )
            )

        return self._read("coverage_trend", read)

    def compare(self, run_a: RunId, run_b: RunId) -> Result[RunComparison, DataReaderError]:
        """See ``DataReader.compare``; the sets are defined by ``compare_runs``, ``b``'s
        status and selection say whether it was partial (:func:`run_is_partial`)."""
        db = self._db

        def outcomes(run_id: int) -> dict[str, Outcome]:
            return {
                nodeid: _OUTCOME[outcome]
                for nodeid, outcome in db.execute(
                    "SELECT t.nodeid, c.outcome FROM test_cases c"
                    " JOIN tests t ON t.id = c.test_id WHERE c.run_id = ?",
                    (run_id,),
                )
            }

        def read() -> Result[RunComparison, DataReaderError]:
            first = self._run_row(run_a, "id")
            if isinstance(first, Failure):
                return first
            second = self._run_row(run_b, "id, status, selection")
            if isinstance(second, Failure):
                return second
            a = first.unwrap()[0]
            b, status, selection = second.unwrap()
            partial = run_is_partial(_STATUS[status], decode_selection(selection))
            return Success(compare_runs(RunId(a), RunId(b), outcomes(a), outcomes(b), partial))

        return self._read("compare", read)


def sqlite_test_runs() -> Layer:
    """The live test-run services: ``DataStore`` and ``DataReader`` on the container's
    :class:`SqliteDatabase` (requires it and a ``Clock``)."""

    def store(c: Container) -> DataStore:
        return SqliteDataStore(c.get(SqliteDatabase), c.get(Clock))

    def reader(c: Container) -> DataReader:
        return SqliteDataReader(c.get(SqliteDatabase))

    return merge(
        Layer.service(DataStore, store, requires=(SqliteDatabase, Clock)),
        Layer.service(DataReader, reader, requires=(SqliteDatabase,)),
    )


def _check_protocols(db: SqliteDatabase, clock: Clock) -> tuple[DataStore, DataReader]:
    """Static check that both classes satisfy their Protocols (mypy reads this)."""
    return SqliteDataStore(db, clock), SqliteDataReader(db)

