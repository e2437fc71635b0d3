"""The live test-run layer: ``SqliteDataStore`` and ``SqliteDataReader`` (schema: migration 0002).

Write path. Every ``DataStore`` method is one unit of work (``SqliteDatabase.transact``):
input is validated and normalized first (``runstore.services._test_runs_rules``, through the
skeleton of ``_test_runs_shared``), so bad input writes nothing;
then a handful of set-based statements and ``executemany`` batches run, with no per-row
commit. Row ids of items and errors are assigned in Python from ``max(id) + 1`` read under
the write lock (``BEGIN IMMEDIATE`` holds it for the whole unit), so children can refer to
their parents without a round trip per row; run ids come from ``AUTOINCREMENT`` and are never
reused, even after pruning.

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import apsw
import attrs
from returns.result import Failure, Result, Success

from runstore.exceptions import TransactionMisuse
from runstore.layers._layer import Container, Layer, merge
from runstore.layers._search_sqlite import search_failures, search_tests
from runstore.layers._sqlite_database import SqliteDatabase
from runstore.layers._sqlite_errors import from_apsw
from runstore.layers._test_runs_shared import DataReaderBase, DataStoreBase, _TestRuns
from runstore.layers._unit_of_work import TxDict
from runstore.services._search_rules import FailureRow, SearchQuery, TestRow
from runstore.services._signature_rules import SignatureListing, SignatureRow, seen_order
from runstore.services._test_runs_rules import (
    OUTCOME_ORDER,
    SUBTEST_WORDS,
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
    decode_lines,
    decode_selection,
    encode_lines,
    encode_selection,
    history_entry,
    streak_at,
    tally_signatures,
    test_detail,
    test_record,
)
from runstore.services.clock import Clock
from runstore.services.test_runs import (
    FAILING_OUTCOMES,
    HISTORY_DEPTH,
    AttemptSource,
    ChangedFile,
    DataReader,
    DataStore,
    DataStoreError,
    Environment,
    FileCoverage,
    FixCheck,
    FixCheckResult,
    HistoryEntry,
    Outcome,
    Phase,
    PhaseResult,
    QuarantinedItem,
    RunId,
    RunStatus,
    RunSummary,
    Selection,
    StackFrame,
    TestCell,
    TestDetail,
    TestRecord,
)

__all__ = ["SqliteDataReader", "SqliteDataStore", "sqlite_test_runs"]

Row = tuple[Any, ...]

_OUTCOME = {o.value: o for o in Outcome}
_PRUNE_BATCH_RUNS = 16
"""Runs deleted per batch of a prune, between two progress reports: a run of 500 items
with its cascaded rows takes about 15 ms to delete (``benchmarks/test_runs_prune.py``), so
a big prune reports about four times a second."""
_PHASE = {p.value: p for p in Phase}
_STATUS = {s.value: s for s in RunStatus}
_EXECUTED_SQL = "('passed', 'failed', 'xpassed', 'error')"
_FAILING_SQL = "('failed', 'error')"
_EARLIER_PASSES_SQL = (
    "CASE WHEN c.attempts > 0 THEN (SELECT count(*) FROM test_attempts a"
    " WHERE a.case_id = c.id AND a.outcome IN ('passed', 'xpassed')) ELSE 0 END"
)
"""The passing earlier attempts of the item ``c`` (``HistoryEntry.earlier_passes``)."""

_RUN_COLUMNS = (
    "id, project, invocation_id, status, started_at_ms, finished_at_ms, python_version,"
    " pytest_version, platform, git_commit, git_branch, command_line, host, pid,"
    " n_passed, n_failed, n_skipped, n_xfailed, n_xpassed, n_error, n_collection_errors,"
    " git_dirty, selection, n_subtests_passed, n_subtests_failed, n_subtests_skipped,"
    " session_id, git_changed_truncated"
)
_SUBTEST_COLUMNS = {
    "passed": "n_subtests_passed",
    "failed": "n_subtests_failed",
    "skipped": "n_subtests_skipped",
}
_HISTORY_COLUMNS = (
    "h.seq, h.run_id, h.outcome, h.git_commit, h.git_dirty, h.rerun_failures, h.message,"
    " h.streak, h.streak_since, h.streak_message, h.run_executed, h.run_failing,"
    " h.fingerprint, h.earlier_passes"
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
_ADD_SIGNATURE_TESTS = (
    "INSERT INTO failure_signature_tests (project, signature, nodeid)"
    " SELECT DISTINCT ?2, h.signature, h.nodeid FROM ("
    "  SELECT e.signature AS signature, t.nodeid AS nodeid"
    "  FROM test_cases c CROSS JOIN test_errors e ON e.case_id = c.id AND e.attempt = 0"
    "   AND e.ordinal = 0 AND e.depth = 0 AND e.subtest IS NULL"
    "  CROSS JOIN tests t ON t.id = c.test_id"
    f"  WHERE c.run_id = ?1 AND c.outcome IN {_FAILING_SQL}"
    "  UNION ALL"
    "  SELECT e.signature, ce.nodeid"
    "  FROM collection_errors ce CROSS JOIN test_errors e ON e.collection_error_id = ce.id"
    "   AND e.depth = 0"
    "  WHERE ce.run_id = ?1) h"
    " WHERE true ON CONFLICT (project, signature, nodeid) DO NOTHING RETURNING signature"
)
"""Add the (signature, node id) pairs of run ``?1`` (project ``?2``) that
``failure_signature_tests`` lacks, returning the signature of each one added."""
_MAX_SEQ = 2**63 - 1
_UNSETTLED_SQL = (
    f" AND (c.outcome IN {_FAILING_SQL} OR c.attempts > 0 OR EXISTS (SELECT 1"
    " FROM test_history u WHERE u.test_id = c.test_id AND (u.run_id IS NULL OR u.run_id < ?1)"
    f" AND (u.outcome IN {_FAILING_SQL} OR u.rerun_failures > 0)))"
)
"""The items of run ``?1`` whose verdict may be other than stable (``_unsettled_items``)."""
_EARLIER_SQL = "(w.run_id IS NULL OR w.run_id < ?1)"
_DEPTH_SQL = (
    "coalesce((SELECT w.seq FROM test_history w WHERE w.test_id = {test} AND {earlier}"
    " ORDER BY w.seq DESC LIMIT 1 OFFSET ?2), 0)"
)
"""The seq of a test's ``?2 + 1``-th newest history entry that passes ``earlier`` (0 when it
has fewer): the history joins read from it on, so a window of 10 reads 10 rows of the 50
kept (one seek on the primary key ``(test_id, seq)``)."""
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
            # The files themselves are read by ``_Facts._with_changed_files``.
            git_changed_files=None if row[27] is None else (),
            git_changed_files_truncated=bool(row[27]),
        ),
        selection=decode_selection(row[22]),
        subtests={"passed": row[23], "failed": row[24], "skipped": row[25]},
        session_id=row[26],
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
        run_executed=row[9],
        run_failing=row[10],
        fingerprint=row[11],
        earlier_passes=row[12],
    )


def _newest_first(entries: list[tuple[int, WindowEntry]]) -> list[WindowEntry]:
    """History entries ``(seq, entry)`` newest first (by seq, which never repeats per test)."""
    entries.sort(key=lambda e: e[0], reverse=True)
    return [e for _, e in entries]


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


_RUN_FACTS = (
    "SELECT id, project, invocation_id, status, selection, git_commit, git_dirty, new_signatures"
    " FROM test_runs WHERE id = ?"
)


class _Facts(_TestRuns):
    """The facts both SQLite services read."""

    _db: SqliteDatabase

    def _run(self, run_id: int) -> RunFacts | None:
        row = self._db.one(_RUN_FACTS, (run_id,))
        if row is None:
            return None
        frozen = row[7]
        return RunFacts(
            row[0],
            row[1],
            row[2],
            _STATUS[row[3]],
            decode_selection(row[4]),
            row[5],
            None if row[6] is None else bool(row[6]),
            None if frozen is None else frozenset(json.loads(frozen)),
        )

    def _summary(self, run_id: int) -> RunSummary:
        row = self._db.one(f"SELECT {_RUN_COLUMNS} FROM test_runs WHERE id = ?", (run_id,))
        assert row is not None
        return self._with_changed_files([_summary(row)])[0]

    def _with_changed_files(self, summaries: list[RunSummary]) -> list[RunSummary]:
        """``summaries`` with the changed files of each run that stored them (one statement
        over ``test_run_changed_files``' primary key for all of them)."""
        ids = [s.id for s in summaries if s.environment.git_changed_files is not None]
        if not ids:
            return summaries
        found: dict[int, list[ChangedFile]] = {}
        for run_id, path, status in self._db.execute(
            "SELECT run_id, path, status FROM test_run_changed_files"
            " WHERE run_id IN (SELECT value FROM json_each(?)) ORDER BY run_id, ordinal",
            (json.dumps(ids),),
        ):
            found.setdefault(run_id, []).append(ChangedFile(path, status))
        return [
            s if s.environment.git_changed_files is None else attrs.evolve(
                s, environment=attrs.evolve(
                    s.environment, git_changed_files=tuple(found.get(s.id, ()))
                )
            )
            for s in summaries
        ]

    def _run_signatures(self, run_id: int) -> set[str]:
        return {r[0] for r in self._db.execute(_HEADS_OF_RUN, (run_id,))}

    def _first_seen(self, project: str, signatures: set[str]) -> dict[str, int | None]:
        first_seen: dict[str, int | None] = {}
        for signature in sorted(signatures):
            row = self._db.one(
                "SELECT first_seen_run_id FROM failure_signatures"
                " WHERE project = ? AND signature = ?",
                (project, signature),
            )
            if row is not None:
                first_seen[signature] = row[0]
        return first_seen

    def _running_before(self, project: str, run_id: int) -> Iterable[int]:
        return [
            r[0]
            for r in self._db.execute(
                "SELECT id FROM test_runs WHERE project = ? AND status = 'running' AND id < ?",
                (project, run_id),
            )
        ]


class SqliteDataStore(_Facts, DataStoreBase):
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
        much larger than the batch, a small one probes the batch's ids in one statement. New
        tests get ids from ``max(id) + 1`` (the unit holds the write lock).
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
            found.update(
                db.execute(
                    "SELECT nodeid, id FROM tests"
                    " WHERE project = ? AND nodeid IN (SELECT value FROM json_each(?))",
                    (project, json.dumps(nodeids, ensure_ascii=False)),
                )
            )
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

    # -- hooks of DataStoreBase ------------------------------------------------------------------

    def _insert_run(self, run: PreparedRun, now_ms: int) -> int:
        env = run.environment
        run_id: int = self._db.scalar(
            "INSERT INTO test_runs (project, invocation_id, status, started_at_ms,"
            " last_write_at_ms, python_version, pytest_version, platform, git_commit,"
            " git_branch, command_line, host, pid, git_dirty, selection, session_id,"
            " git_changed_truncated)"
            " VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (
                run.project,
                run.invocation_id,
                run.started_at_ms,
                now_ms,
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
                run.session_id,
                None if env.git_changed_files is None else int(env.git_changed_files_truncated),
            ),
        )
        if env.git_changed_files:
            self._db.executemany(
                "INSERT INTO test_run_changed_files (run_id, ordinal, path, status)"
                " VALUES (?, ?, ?, ?)",
                [(run_id, i, f.path, f.status) for i, f in enumerate(env.git_changed_files)],
            )
        return run_id

    def _store_cases(self, run: RunFacts, cases: Sequence[PreparedCase], now_ms: int) -> None:
        self._sync()
        db = self._db
        run_id, project = run.id, run.project
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
                    (
                        setup.outcome,
                        setup.duration_ms,
                        setup.skip_reason,
                        call.outcome,
                        call.duration_ms,
                        call.skip_reason,
                        teardown.outcome,
                        teardown.duration_ms,
                        teardown.skip_reason,
                    )
                    if call.phase is Phase.CALL
                    else _phase_columns(phases)
                )
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
                    case.fingerprint,
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
                        attempt.source.value,
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
                " teardown_reason, attempts, fingerprint)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                " teardown_outcome, teardown_ms, teardown_reason, source)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                now_ms,
                run_id,
            ),
        )

    def _store_collection_errors(
        self, run: RunFacts, items: Sequence[PreparedCollectionError], now_ms: int
    ) -> None:
        self._sync()
        db = self._db
        run_id = run.id
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
            (len(items) - replaced, now_ms, run_id),
        )

    def _store_selection(self, run_id: int, selection: Selection, now_ms: int) -> None:
        self._db.execute(
            "UPDATE test_runs SET selection = ?, last_write_at_ms = ? WHERE id = ?",
            (encode_selection(selection), now_ms, run_id),
        )

    def _end_run(
        self, run_id: int, status: RunStatus, finished_ms: int, now_ms: int, new: frozenset[str]
    ) -> None:
        self._db.execute(
            "UPDATE test_runs SET status = ?, finished_at_ms = ?, last_write_at_ms = ?,"
            " new_signatures = ? WHERE id = ?",
            (status.value, finished_ms, now_ms, json.dumps(sorted(new)), run_id),
        )

    def _record_history(self, run: RunFacts, finished_ms: int) -> None:
        db = self._db
        run_id = run.id
        if db.one("SELECT 1 FROM test_cases WHERE run_id = ? LIMIT 1", (run_id,)) is None:
            return
        seq = db.scalar(
            "UPDATE test_run_sequences SET value = value + 1 WHERE name = 'history' RETURNING value"
        )
        db.execute(
            "INSERT INTO test_history (test_id, seq, run_id, outcome, duration_ms,"
            " recorded_at_ms, message, git_commit, git_dirty, rerun_failures,"
            " run_executed, run_failing, fingerprint, earlier_passes)"
            " SELECT c.test_id, ?1, ?2, c.outcome, c.duration_ms, ?3,"
            f" CASE WHEN c.outcome IN {_FAILING_SQL} THEN (SELECT e.message FROM test_errors e"
            "  WHERE e.case_id = c.id AND e.attempt = 0 AND e.ordinal = 0 AND e.depth = 0"
            "  AND e.subtest IS NULL) END,"
            " r.git_commit, r.git_dirty,"
            " CASE WHEN c.attempts > 0 THEN (SELECT count(*) FROM test_attempts a"
            f"  WHERE a.case_id = c.id AND a.outcome IN {_FAILING_SQL}) ELSE 0 END,"
            " r.n_passed + r.n_failed + r.n_xpassed + r.n_error, r.n_failed + r.n_error,"
            f" c.fingerprint, {_EARLIER_PASSES_SQL}"
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
            (run_id, HISTORY_DEPTH),
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
            streak = streak_at(run_id, message, _newest_first(previous.get(test_id, [])))
            updates.append((streak.length, streak.since, streak.message, test_id, seq))
        if updates:
            db.executemany(
                "UPDATE test_history SET streak = ?, streak_since = ?, streak_message = ?"
                " WHERE test_id = ? AND seq = ?",
                updates,
            )

    def _record_signatures(self, run: RunFacts, finished_ms: int) -> None:
        """Upsert the run's signatures (one more run each, a fresh place: ``seen_order``),
        then its (signature, node id) pairs, adding the new ones to ``n_tests``."""
        db = self._db
        tally = tally_signatures(db.execute(_HEADS_OF_RUN, (run.id,)))
        if not tally:
            return
        last = db.scalar(
            "UPDATE test_run_sequences SET value = value + ? WHERE name = 'signature'"
            " RETURNING value",
            (len(tally),),
        )
        places = seen_order(tally, int(last) - len(tally))
        db.executemany(
            "INSERT INTO failure_signatures (project, signature, exception_type, message,"
            " frame, count, first_seen_run_id, last_seen_run_id, first_seen_at_ms,"
            " last_seen_at_ms, n_runs, n_tests, seen_seq)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, 0, ?)"
            " ON CONFLICT (project, signature) DO UPDATE"
            " SET count = failure_signatures.count + excluded.count,"
            # A NULL first run (pruned) stays NULL: it was lower than any run recording now
            # (PostgreSQL's LEAST would skip the NULL). Its time goes with the run.
            " first_seen_at_ms = CASE WHEN excluded.first_seen_run_id"
            "  < failure_signatures.first_seen_run_id THEN excluded.first_seen_at_ms"
            "  ELSE failure_signatures.first_seen_at_ms END,"
            " first_seen_run_id = CASE WHEN excluded.first_seen_run_id"
            "  < failure_signatures.first_seen_run_id THEN excluded.first_seen_run_id"
            "  ELSE failure_signatures.first_seen_run_id END,"
            " last_seen_run_id = excluded.last_seen_run_id,"
            " last_seen_at_ms = excluded.last_seen_at_ms,"
            " n_runs = failure_signatures.n_runs + 1,"
            " seen_seq = excluded.seen_seq",
            [
                (run.project, signature, *seen, run.id, run.id, finished_ms, finished_ms,
                 places[signature])
                for signature, seen in tally.items()
            ],
        )
        added = Counter(
            row[0] for row in db.execute(_ADD_SIGNATURE_TESTS, (run.id, run.project))
        )
        if added:
            db.executemany(
                "UPDATE failure_signatures SET n_tests = n_tests + ?"
                " WHERE project = ? AND signature = ?",
                [(n, run.project, signature) for signature, n in sorted(added.items())],
            )

    def _stale(self, project: str, cutoff_ms: int) -> Iterable[int]:
        return [
            row[0]
            for row in self._db.execute(
                "SELECT id FROM test_runs"
                " WHERE project = ? AND status = 'running' AND last_write_at_ms < ?",
                (project, cutoff_ms),
            )
        ]

    def _abort(self, frozen: Sequence[tuple[int, frozenset[str]]]) -> None:
        self._db.executemany(
            "UPDATE test_runs SET status = 'aborted', finished_at_ms = last_write_at_ms,"
            " new_signatures = ? WHERE id = ?",
            [(json.dumps(sorted(new)), run_id) for run_id, new in frozen],
        )

    def _store_coverage(self, run_id: int, files: Sequence[FileCoverage], now_ms: int) -> None:
        db = self._db
        self._sync()
        file_ids = self._file_ids(f.path for f in files)
        db.execute("DELETE FROM file_coverage WHERE run_id = ?", (run_id,))
        if files:
            db.executemany(
                "INSERT INTO file_coverage (run_id, file_id, statements, missing_statements,"
                " branches, partial_branches, missing_branches, missing_lines)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        run_id,
                        file_ids[f.path],
                        f.statements,
                        f.missing_statements,
                        f.branches,
                        f.partial_branches,
                        f.missing_branches,
                        encode_lines(f.missing_lines),
                    )
                    for f in files
                ],
            )
        db.execute("UPDATE test_runs SET last_write_at_ms = ? WHERE id = ?", (now_ms, run_id))

    def _prune_facts(self) -> tuple[Iterable[PruneRun], Iterable[int]]:
        db = self._db
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
        return runs, covered

    def _prune(self, plan: PrunePlan, removed: Callable[[int], None]) -> int:
        """Move coverage, delete the doomed runs (the schema cascades the rest, history and
        signatures keep a NULL run) :data:`_PRUNE_BATCH_RUNS` at a time, telling ``removed``
        after each batch, then remove every ``files`` row (and ``tests`` row) nothing refers
        to. Compacting the file is :meth:`compact`."""
        db = self._db
        self._sync()
        for source, target in plan.moves:
            db.execute("UPDATE file_coverage SET run_id = ? WHERE run_id = ?", (target, source))
        doomed = plan.doomed
        for start in range(0, len(doomed), _PRUNE_BATCH_RUNS):
            batch = doomed[start : start + _PRUNE_BATCH_RUNS]
            db.executemany("DELETE FROM test_runs WHERE id = ?", [(i,) for i in batch])
            removed(start + len(batch))
        gone_files = {
            r[0]
            for r in db.execute(
                "DELETE FROM files"
                " WHERE NOT EXISTS (SELECT 1 FROM test_modules m WHERE m.file_id = files.id)"
                " AND NOT EXISTS (SELECT 1 FROM stack_frames s WHERE s.file_id = files.id)"
                " AND NOT EXISTS (SELECT 1 FROM file_coverage c WHERE c.file_id = files.id)"
                " AND NOT EXISTS (SELECT 1 FROM test_coverage p WHERE p.file_id = files.id)"
                " RETURNING id"
            )
        }
        db.execute(
            "DELETE FROM tests"
            " WHERE NOT EXISTS (SELECT 1 FROM test_cases c WHERE c.test_id = tests.id)"
            " AND NOT EXISTS (SELECT 1 FROM test_history h WHERE h.test_id = tests.id)"
            " AND NOT EXISTS (SELECT 1 FROM test_coverage p WHERE p.test_id = tests.id)"
        )
        self._forget(set(plan.doomed), gone_files)
        return len(gone_files)

    def _orphans_after(self, plan: PrunePlan) -> int:
        """The ``files`` rows no surviving module, frame or coverage row (coverage moved as
        :meth:`_prune` moves it) would refer to, counted in one query."""
        doomed = set(plan.doomed)
        coverage_gone = doomed - {source for source, _ in plan.moves}
        orphans = self._db.scalar(
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
            "   AND c.run_id NOT IN (SELECT value FROM json_each(?2)))"
            " AND NOT EXISTS (SELECT 1 FROM test_coverage p WHERE p.file_id = f.id"
            "   AND p.run_id NOT IN (SELECT value FROM json_each(?1)))",
            (json.dumps(sorted(doomed)), json.dumps(sorted(coverage_gone))),
        )
        return int(orphans or 0)

    def _forget(self, runs: set[int], files: set[int]) -> None:
        """Drop cache entries naming deleted rows (journalled like every mirror change)."""
        if files:
            for path in [p for p, i in self._files.items() if i in files]:
                del self._files[path]
        if runs:
            for module in [k for k in self._modules if k[0] in runs]:
                del self._modules[module]

    def _store_test_coverage(
        self, run: RunFacts, coverage: PreparedTestCoverage, now_ms: int
    ) -> None:
        """Replace the run's marker row (cascading its old rows), then insert one row per
        (file, test) with the lines as ranges."""
        db = self._db
        self._sync()
        rows = coverage.rows
        file_ids = self._file_ids(coverage.paths())
        test_ids = self._test_ids(run.project, coverage.nodeids())[0] if rows else {}
        db.execute("DELETE FROM test_coverage_runs WHERE run_id = ?", (run.id,))
        db.execute(
            "INSERT INTO test_coverage_runs (run_id, n_rows) VALUES (?, ?)", (run.id, len(rows))
        )
        if rows:
            db.executemany(
                "INSERT INTO test_coverage (run_id, file_id, test_id, lines) VALUES (?, ?, ?, ?)",
                [
                    (run.id, file_ids[r.path], test_ids[r.nodeid], encode_lines(r.lines))
                    for r in rows
                ],
            )
        db.execute("UPDATE test_runs SET last_write_at_ms = ? WHERE id = ?", (now_ms, run.id))

    # -- quarantine and fix checks ---------------------------------------------------------

    def _recorded_nodeids(self, run: RunFacts, nodeids: Sequence[str]) -> frozenset[str]:
        return frozenset(
            nodeid for (nodeid,) in self._db.execute(
                "SELECT t.nodeid FROM test_cases c JOIN tests t ON t.id = c.test_id"
                " WHERE c.run_id = ? AND t.nodeid IN (SELECT value FROM json_each(?))",
                (run.id, json.dumps(list(nodeids))),
            )
        )

    def _store_quarantined(
        self, run: RunFacts, items: tuple[QuarantinedItem, ...], now_ms: int
    ) -> None:
        db = self._db
        db.execute("DELETE FROM test_quarantined WHERE run_id = ?", (run.id,))
        if items:
            db.executemany(
                "INSERT INTO test_quarantined (run_id, test_id, entry)"
                " SELECT c.run_id, c.test_id, ? FROM test_cases c"
                " JOIN tests t ON t.id = c.test_id WHERE c.run_id = ? AND t.nodeid = ?",
                [(item.entry, run.id, item.nodeid) for item in items],
            )
        db.execute("UPDATE test_runs SET last_write_at_ms = ? WHERE id = ?", (now_ms, run.id))

    def _store_fix_check(self, result: FixCheckResult, now_ms: int) -> None:
        self._db.execute(
            "INSERT INTO fix_checks (id, project, nodeid, run_id, executions, passed, failed,"
            " released, checked_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (self._next_id("fix_checks"), result.project, result.nodeid, result.run_id,
             result.executions, result.passed, result.failed, int(result.released), now_ms),
        )

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


class SqliteDataReader(_Facts, DataReaderBase):
    """``DataReader`` on SQLite; every method reads one snapshot (``SqliteDatabase.read``)."""

    def __init__(self, db: SqliteDatabase) -> None:
        self._db = db

    def _latest(self, project: str) -> RunSummary | None:
        row = self._db.one(
            f"SELECT {_RUN_COLUMNS} FROM test_runs WHERE project = ?"
            " ORDER BY started_at_ms DESC, id DESC LIMIT 1",
            (project,),
        )
        return None if row is None else self._with_changed_files([_summary(row)])[0]

    def _runs(self, listing: RunListing) -> Sequence[RunSummary]:
        where: list[str] = []
        params: list[Any] = []
        if listing.project is not None:
            where.append("project = ?")
            params.append(listing.project)
        if listing.status is not None:
            where.append("status = ?")
            params.append(listing.status.value)
        if listing.session_id is not None:
            where.append("session_id = ?")
            params.append(listing.session_id)
        if listing.after is not None:
            where.append("(started_at_ms, id) < (?, ?)")
            params.extend(listing.after)
        sql = f"SELECT {_RUN_COLUMNS} FROM test_runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY started_at_ms DESC, id DESC LIMIT ?"
        rows = self._db.execute(sql, (*params, listing.limit + 1))
        return self._with_changed_files([_summary(r) for r in rows])

    def _projects(self) -> Iterable[str]:
        return [r[0] for r in self._db.execute("SELECT DISTINCT project FROM test_runs")]

    def _records(
        self, run_id: int, where: str = "", params: Sequence[Any] = ()
    ) -> list[TestRecord]:
        rows = self._db.execute(
            "SELECT t.nodeid, f.path, c.name, c.parametrize_id, c.line, c.markers, c.outcome,"
            " c.duration_ms, c.setup_outcome, c.setup_ms, c.setup_reason, c.call_outcome,"
            " c.call_ms, c.call_reason, c.teardown_outcome, c.teardown_ms, c.teardown_reason,"
            " c.attempts, c.fingerprint"
            " FROM test_cases c JOIN tests t ON t.id = c.test_id"
            " JOIN test_modules m ON m.id = c.module_id JOIN files f ON f.id = m.file_id"
            " WHERE c.run_id = ?" + where,
            (run_id, *params),
        )
        records: list[TestRecord] = []
        for row in rows:
            phases = _phases_of(row[8:17])
            records.append(
                test_record(
                    run_id,
                    row[0],
                    row[1],
                    row[2],
                    row[3],
                    row[4],
                    tuple(json.loads(row[5])) if row[5] is not None else (),
                    _OUTCOME[row[6]],
                    row[7],
                    phases,
                    row[17],
                    row[18],
                )
            )
        return records

    def _tests(self, run_id: int, outcomes: frozenset[Outcome] | None) -> Iterable[TestRecord]:
        if outcomes is None:
            return self._records(run_id)
        if not outcomes:
            return []
        marks = ", ".join("?" for _ in outcomes)
        return self._records(
            run_id, f" AND c.outcome IN ({marks})", sorted(o.value for o in outcomes)
        )

    def _cells(
        self,
        run_ids: Sequence[int],
        nodeids: Sequence[str] | None,
        outcomes: frozenset[Outcome] | None,
    ) -> Iterable[TestCell]:
        """One statement: the items of the runs (the ``(run_id, test_id)`` unique index, or
        the partial index of failing items when only failing outcomes are asked) and their
        node ids by key; with ``nodeids``, each run's tests by ``(project, nodeid)`` and their
        items by ``(run_id, test_id)`` instead, so the cost follows the tests asked for, not
        the size of the runs. A failing item's first error's signature by
        ``test_errors_by_case``."""
        columns = (
            "SELECT c.run_id, t.nodeid, c.outcome, c.duration_ms, c.attempts,"
            f" CASE WHEN c.outcome IN {_FAILING_SQL} THEN (SELECT e.signature FROM test_errors e"
            "  WHERE e.case_id = c.id AND e.attempt = 0 AND e.ordinal = 0 AND e.subtest IS NULL"
            "  ORDER BY e.depth LIMIT 1) END"
        )
        params: list[Any] = []
        if nodeids is None:
            sql = (f"{columns} FROM test_cases c JOIN tests t ON t.id = c.test_id"
                   " WHERE c.run_id IN (SELECT value FROM json_each(?))")
        else:
            sql = (f"{columns} FROM test_runs r CROSS JOIN tests t ON t.project = r.project"
                   "  AND t.nodeid IN (SELECT value FROM json_each(?))"
                   " CROSS JOIN test_cases c ON c.run_id = r.id AND c.test_id = t.id"
                   " WHERE r.id IN (SELECT value FROM json_each(?))")
            params.append(json.dumps(list(nodeids)))
        params.append(json.dumps(list(run_ids)))
        if outcomes is not None:
            if not outcomes:
                return ()
            if outcomes <= FAILING_OUTCOMES:  # the partial index's own condition
                sql += f" AND c.outcome IN {_FAILING_SQL}"
            sql += " AND c.outcome IN (SELECT value FROM json_each(?))"
            params.append(json.dumps(sorted(o.value for o in outcomes)))
        return [
            TestCell(RunId(run_id), nodeid, _OUTCOME[outcome], duration, attempts, signature or "")
            for run_id, nodeid, outcome, duration, attempts, signature
            in self._db.execute(sql, params)
        ]

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

    def _detail(self, run_id: int, nodeid: str) -> TestDetail | None:
        """The item's row, its output row, subtest and attempt rows, and every error chain
        of its final result and its attempts with frames."""
        db = self._db
        row = db.one(
            "SELECT c.id FROM test_cases c JOIN tests t ON t.id = c.test_id"
            " WHERE c.run_id = ? AND t.nodeid = ?",
            (run_id, nodeid),
        )
        if row is None:
            return None
        case_id = row[0]
        (record,) = self._records(run_id, " AND c.id = ?", (case_id,))
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
            "SELECT id, attempt, subtest, ordinal FROM test_errors WHERE case_id = ? AND depth = 0",
            (case_id,),
        )
        owners.sort(key=lambda r: (r[1], r[3]))
        item_errors = [heads[i] for i, attempt, sub, _ in owners if attempt == 0 and sub is None]
        subtest_errors = {
            sub: heads[i] for i, attempt, sub, _ in owners if attempt == 0 and sub is not None
        }
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
        attempt_rows = db.execute(
            "SELECT ordinal, outcome, duration_ms, setup_outcome, setup_ms, setup_reason,"
            " call_outcome, call_ms, call_reason, teardown_outcome, teardown_ms,"
            " teardown_reason, source FROM test_attempts WHERE case_id = ? ORDER BY ordinal",
            (case_id,),
        )
        attempts = [
            (_phases_of(r[3:12]), _OUTCOME[r[1]], r[2], attempt_errors.get(r[0], ()))
            for r in attempt_rows
        ]
        sources = [AttemptSource(r[12]) for r in attempt_rows]
        texts = (
            ("", False, "", False, "", False)
            if output is None
            else (
                output[0],
                bool(output[1]),
                output[2],
                bool(output[3]),
                output[4],
                bool(output[5]),
            )
        )
        return test_detail(record, item_errors, texts, subtests, attempts, sources)

    def _failing(self, run: RunFacts) -> Sequence[FailingItem]:
        db = self._db
        cases = db.execute(
            "SELECT c.id, t.nodeid, c.outcome, c.setup_outcome, c.setup_ms, c.setup_reason,"
            " c.call_outcome, c.call_ms, c.call_reason, c.teardown_outcome, c.teardown_ms,"
            " c.teardown_reason FROM test_cases c JOIN tests t ON t.id = c.test_id"
            f" WHERE c.run_id = ? AND c.outcome IN {_FAILING_SQL}",
            (run.id,),
        )
        heads = self._heads(
            "FROM test_cases o CROSS JOIN test_errors e ON e.case_id = o.id AND e.attempt = 0"
            " AND e.ordinal = 0 AND e.subtest IS NULL",
            f"WHERE o.run_id = ? AND o.outcome IN {_FAILING_SQL}",
            (run.id,),
        )
        previous: dict[int, list[tuple[int, WindowEntry]]] = {}
        for row in db.execute(
            f"SELECT c.id, {_HISTORY_COLUMNS} FROM test_cases c"
            " JOIN test_history h ON h.test_id = c.test_id"
            "  AND (h.run_id IS NULL OR h.run_id < ?1)"
            f" WHERE c.run_id = ?1 AND c.outcome IN {_FAILING_SQL}",
            (run.id,),
        ):
            previous.setdefault(row[0], []).append((row[1], _entry(row[2:])))
        return [
            FailingItem(
                row[1],
                _OUTCOME[row[2]],
                _phases_of(row[3:12]),
                heads.get(row[0]),
                _newest_first(previous.get(row[0], [])),
            )
            for row in cases
        ]

    def _collection_heads(self, run_id: int) -> Iterable[tuple[str, PreparedError | None]]:
        collection = self._db.execute(
            "SELECT id, nodeid FROM collection_errors WHERE run_id = ?", (run_id,)
        )
        if not collection:
            return []
        heads = self._heads(
            "FROM collection_errors o CROSS JOIN test_errors e ON e.collection_error_id = o.id",
            "WHERE o.run_id = ?",
            (run_id,),
        )
        return [(nodeid, heads.get(collection_id)) for collection_id, nodeid in collection]

    def _alive(self, run_ids: set[int]) -> set[int]:
        return {
            r[0]
            for r in self._db.execute(
                "SELECT id FROM test_runs WHERE id IN (SELECT value FROM json_each(?))",
                (json.dumps(sorted(run_ids)),),
            )
        }

    def _now_items(
        self, run: RunFacts, depth: int = HISTORY_DEPTH, only: str = ""
    ) -> Iterable[ItemNow]:
        """Every item of ``run`` with the newest ``depth`` history entries of earlier (or
        pruned) runs (``only``: a further condition on the item ``c``): the join reads the
        test's rows from the ``depth``-th newest such entry on (``_DEPTH_SQL``)."""
        rows = self._db.execute(
            "SELECT t.nodeid, c.outcome, CASE WHEN c.attempts > 0 THEN"
            " (SELECT count(*) FROM test_attempts a WHERE a.case_id = c.id"
            f"  AND a.outcome IN {_FAILING_SQL}) ELSE 0 END, c.fingerprint, {_HISTORY_COLUMNS},"
            f" {_EARLIER_PASSES_SQL}"
            " FROM test_cases c JOIN tests t ON t.id = c.test_id"
            " LEFT JOIN test_history h ON h.test_id = c.test_id"
            "  AND (h.run_id IS NULL OR h.run_id < ?1)"
            f"  AND h.seq >= {_DEPTH_SQL.format(test='c.test_id', earlier=_EARLIER_SQL)}"
            " WHERE c.run_id = ?1" + only,
            (run.id, max(depth, 1) - 1),
        )
        grouped: dict[str, tuple[str, int, str | None, list[tuple[int, WindowEntry]]]] = {}
        passes: dict[str, int] = {}  # the item's passing earlier attempts, the last column
        for row in rows:
            item = grouped.get(row[0])
            if item is None:
                item = grouped[row[0]] = (row[1], row[2], row[3], [])
                passes[row[0]] = row[-1]
            if row[4] is not None:
                item[3].append((row[4], _entry(row[5:])))
        return [
            ItemNow(nodeid, _OUTCOME[outcome], reruns, _newest_first(entries), fingerprint,
                    passes[nodeid])
            for nodeid, (outcome, reruns, fingerprint, entries) in grouped.items()
        ]

    def _unsettled_items(self, run: RunFacts, depth: int = HISTORY_DEPTH) -> Iterable[ItemNow]:
        """The items that fail now, had failed attempts now, or have a failing or
        rerun-failed history entry of an earlier (or pruned) run: one probe of the history
        key per item, then the history of those items alone."""
        return self._now_items(run, depth, _UNSETTLED_SQL)

    def _histories(
        self, project: str, depth: int = HISTORY_DEPTH
    ) -> Iterable[tuple[str, Sequence[WindowEntry]]]:
        rows = self._db.execute(
            f"SELECT t.nodeid, {_HISTORY_COLUMNS}"
            " FROM tests t CROSS JOIN test_history h ON h.test_id = t.id"
            f"  AND h.seq >= {_DEPTH_SQL.format(test='t.id', earlier='1 = 1')}"
            " WHERE t.project = ?1",
            (project, max(depth, 1) - 1),
        )
        grouped: dict[str, list[tuple[int, WindowEntry]]] = {}
        for row in rows:
            grouped.setdefault(row[0], []).append((row[1], _entry(row[2:])))
        return [(nodeid, _newest_first(entries)) for nodeid, entries in grouped.items()]

    def _history(self, project: str, nodeid: str) -> tuple[HistoryEntry, ...]:
        rows = self._db.execute(
            "SELECT h.run_id, h.outcome, h.duration_ms, h.recorded_at_ms, h.message,"
            " h.git_commit, h.git_dirty, h.rerun_failures, h.run_executed, h.run_failing,"
            " h.fingerprint, h.earlier_passes"
            " FROM tests t JOIN test_history h ON h.test_id = t.id"
            " WHERE t.project = ? AND t.nodeid = ? ORDER BY h.seq DESC",
            (project, nodeid),
        )
        return tuple(
            history_entry(
                r[0],
                _OUTCOME[r[1]],
                r[2],
                r[3],
                r[4],
                r[5],
                None if r[6] is None else bool(r[6]),
                r[7],
                r[8],
                r[9],
                r[10],
                r[11],
            )
            for r in rows
        )

    def _nodeids(self, project: str) -> Iterable[str]:
        rows = self._db.execute("SELECT nodeid FROM tests WHERE project = ?", (project,))
        return [r[0] for r in rows]

    def _slowest(self, run_id: int, count: int) -> Sequence[TestRecord]:
        return self._records(run_id, " ORDER BY c.duration_ms DESC, t.nodeid LIMIT ?", (count,))

    def _coverage_source(self, run: RunFacts) -> int | None:
        row = self._db.one(
            "SELECT CASE WHEN EXISTS (SELECT 1 FROM file_coverage WHERE run_id = ?1) THEN ?1"
            " ELSE (SELECT r.id FROM test_runs r WHERE r.invocation_id = ?2"
            "  AND EXISTS (SELECT 1 FROM file_coverage c WHERE c.run_id = r.id)"
            "  ORDER BY r.id LIMIT 1) END",
            (run.id, run.invocation_id),
        )
        return None if row is None else row[0]

    def _coverage_files(self, source: int) -> Iterable[FileCoverage]:
        rows = self._db.execute(
            "SELECT f.path, c.statements, c.missing_statements, c.branches,"
            " c.partial_branches, c.missing_branches, c.missing_lines"
            " FROM file_coverage c JOIN files f ON f.id = c.file_id WHERE c.run_id = ?",
            (source,),
        )
        return [FileCoverage(r[0], r[1], r[2], r[3], r[4], r[5], decode_lines(r[6])) for r in rows]

    def _coverage_points(self, project: str, count: int) -> Sequence[tuple[int, int, int]]:
        rows = self._db.execute(
            "SELECT id, started_at_ms, source FROM ("
            " SELECT r.id, r.started_at_ms, CASE"
            "  WHEN EXISTS (SELECT 1 FROM file_coverage c WHERE c.run_id = r.id) THEN r.id"
            "  ELSE (SELECT s.id FROM test_runs s WHERE s.invocation_id = r.invocation_id"
            "   AND EXISTS (SELECT 1 FROM file_coverage c WHERE c.run_id = s.id)"
            "   ORDER BY s.id LIMIT 1) END AS source"
            " FROM test_runs r WHERE r.project = ?)"
            " WHERE source IS NOT NULL ORDER BY started_at_ms DESC, id DESC LIMIT ?",
            (project, count),
        )
        return [(r[0], r[1], r[2]) for r in rows]

    def _coverage_totals(self, source: int) -> tuple[int, int, int, int]:
        row = self._db.one(
            "SELECT sum(statements), sum(missing_statements), sum(branches),"
            " sum(missing_branches) FROM file_coverage WHERE run_id = ?",
            (source,),
        )
        assert row is not None
        return row[0], row[1], row[2], row[3]

    def _outcomes(self, run_id: int) -> Mapping[str, Outcome]:
        return {
            nodeid: _OUTCOME[outcome]
            for nodeid, outcome in self._db.execute(
                "SELECT t.nodeid, c.outcome FROM test_cases c"
                " JOIN tests t ON t.id = c.test_id WHERE c.run_id = ?",
                (run_id,),
            )
        }

    def _test_coverage_runs(self, project: str, count: int) -> Sequence[int]:
        return [
            row[0]
            for row in self._db.execute(
                "SELECT r.id FROM test_runs r CROSS JOIN test_coverage_runs m ON m.run_id = r.id"
                " WHERE r.project = ? ORDER BY r.started_at_ms DESC, r.id DESC LIMIT ?",
                (project, count),
            )
        ]

    def _test_coverage_rows(
        self, run_ids: Sequence[int], path: str
    ) -> Iterable[tuple[int, str, Sequence[int] | None]]:
        """The rows of the file (a key range per run), then where those tests ran in the
        runs: their items not skipped (the ``(run_id, test_id)`` unique index) and their
        rows of other files (the ``test_id`` index, which holds the key's columns)."""
        file_id = self._db.scalar("SELECT id FROM files WHERE path = ?", (path,))
        if file_id is None:
            return ()
        return [
            (run_id, nodeid, None if lines is None else decode_lines(lines))
            for run_id, nodeid, lines in self._db.execute(
                "WITH hit AS (SELECT c.run_id, c.test_id, c.lines FROM test_coverage c"
                "   WHERE c.run_id IN (SELECT value FROM json_each(?1)) AND c.file_id = ?2),"
                " ran AS (SELECT k.run_id, k.test_id FROM test_cases k"
                "   WHERE k.run_id IN (SELECT value FROM json_each(?1))"
                "   AND k.test_id IN (SELECT test_id FROM hit) AND k.outcome <> 'skipped'"
                "   UNION SELECT w.id, h.test_id FROM (SELECT DISTINCT test_id FROM hit) h,"
                "   (SELECT m.run_id AS id FROM test_coverage_runs m"
                "   WHERE m.run_id IN (SELECT value FROM json_each(?1))) w"
                "   WHERE EXISTS (SELECT 1 FROM test_coverage o WHERE o.test_id = h.test_id"
                "   AND o.run_id = w.id AND o.file_id <> ?2))"
                " SELECT h.run_id, t.nodeid, h.lines FROM hit h JOIN tests t ON t.id = h.test_id"
                " UNION ALL SELECT r.run_id, t.nodeid, NULL FROM ran r CROSS"
                " JOIN tests t ON t.id = r.test_id",
                (json.dumps(list(run_ids)), file_id),
            )
        ]


    # -- search (runstore.services.search) ---------------------------------------------------

    def _search_failures(
        self, query: SearchQuery, project: str | None, start: tuple[int, ...] | None, count: int
    ) -> Sequence[FailureRow]:
        return search_failures(self._db, query, project, start, count)

    def _search_tests(
        self, query: SearchQuery, project: str | None, start: tuple[int, ...] | None, count: int
    ) -> Sequence[TestRow]:
        return search_tests(self._db, query, project, start, count)

    # -- failure signatures across runs ------------------------------------------------------

    def _signatures(self, listing: SignatureListing) -> Sequence[SignatureRow]:
        before = _MAX_SEQ if listing.before is None else listing.before
        return [
            SignatureRow(*row)
            for row in self._db.execute(
                "SELECT signature, exception_type, message, frame, first_seen_run_id,"
                " first_seen_at_ms, last_seen_run_id, last_seen_at_ms, n_runs, n_tests, count,"
                " seen_seq FROM failure_signatures WHERE project = ? AND seen_seq < ?"
                " ORDER BY seen_seq DESC LIMIT ?",
                (listing.project, before, listing.limit + 1),
            )
        ]

    # -- quarantine and fix checks ---------------------------------------------------------

    def _quarantined(self, run_id: int) -> Sequence[QuarantinedItem]:
        return [
            QuarantinedItem(nodeid, entry)
            for nodeid, entry in self._db.execute(
                "SELECT t.nodeid, q.entry FROM test_quarantined q JOIN tests t"
                " ON t.id = q.test_id WHERE q.run_id = ? ORDER BY t.nodeid",
                (run_id,),
            )
        ]

    def _known_nodeids(self, project: str, nodeids: Sequence[str]) -> frozenset[str]:
        if not nodeids:
            return frozenset()
        # json.dumps escapes a lone surrogate; such a node id is never stored, so not found.
        rows = self._db.execute(
            "SELECT nodeid FROM tests WHERE project = ?"
            " AND nodeid IN (SELECT value FROM json_each(?))",
            (project, json.dumps(list(nodeids))),
        )
        return frozenset(r[0] for r in rows)

    def _fix_checks(self, project: str, nodeid: str | None, limit: int) -> Sequence[FixCheck]:
        return [
            FixCheck(
                FixCheckResult(row[0], row[1], None if row[2] is None else RunId(row[2]),
                               row[3], row[4], row[5], bool(row[6])),
                row[7],
            )
            for row in self._db.execute(
                "SELECT project, nodeid, run_id, executions, passed, failed, released,"
                " checked_at_ms FROM fix_checks WHERE project = ?"
                + ("" if nodeid is None else " AND nodeid = ?")
                + " ORDER BY id DESC LIMIT ?",
                (project, limit) if nodeid is None else (project, nodeid, limit),
            )
        ]


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
