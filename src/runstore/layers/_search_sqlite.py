"""The search queries of the SQLite layers: FTS5 over the indexes of migration 0012.

Each query matches the FTS5 table with :func:`~runstore.services._search_rules.fts5_match`
(user text never reaches ``MATCH`` unquoted), joins the indexed rows by rowid, keeps the
documents the rules name (failing items and collectors; tests with an item or a history
entry), scores them with ``-bm25()`` and continues after the cursor position in the order
score desc, newest desc, row id asc, fetching ``count`` rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from runstore.services._search_rules import (
    EntryRow,
    FailureRow,
    SearchQuery,
    TestRow,
    float_of_key,
    fts5_match,
)

__all__ = [
    "ENTRY_KEY_FACTOR",
    "entry_rows",
    "failure_rows",
    "search_entries",
    "search_failures",
    "search_tests",
    "test_rows",
]

ENTRY_KEY_FACTOR = 4_294_967_296
"""An entry's index rowid is ``session_key * 2**32 + seq`` (migration 0012)."""


class _Executes(Protocol):
    def execute(self, sql: str, params: Sequence[Any] = ...) -> Sequence[Sequence[Any]]: ...


_FAILURES = """
SELECT score, run_id, id, project, nodeid, collected, ordinal, exception_type, message FROM (
    SELECT -bm25(search_failures) AS score, e.id AS id, r.id AS run_id, r.project AS project,
           coalesce(t.nodeid, ce.nodeid) AS nodeid, e.case_id IS NULL AS collected,
           e.ordinal AS ordinal, e.exception_type AS exception_type, e.message AS message
    FROM search_failures
    JOIN test_errors AS e ON e.id = search_failures.rowid
    LEFT JOIN test_cases AS c ON c.id = e.case_id
    LEFT JOIN tests AS t ON t.id = c.test_id
    LEFT JOIN collection_errors AS ce ON ce.id = e.collection_error_id
    JOIN test_runs AS r ON r.id = coalesce(c.run_id, ce.run_id)
    WHERE search_failures MATCH ?1
      AND (c.outcome IN ('failed', 'error') OR e.collection_error_id IS NOT NULL)
      AND (?2 IS NULL OR r.project = ?2)
)
WHERE ?3 IS NULL OR score < ?3 OR (score = ?3 AND (run_id < ?4 OR (run_id = ?4 AND id > ?5)))
ORDER BY score DESC, run_id DESC, id
LIMIT ?6
"""

_TESTS = """
SELECT score, id, project, nodeid FROM (
    SELECT -bm25(search_tests) AS score, t.id AS id, t.project AS project, t.nodeid AS nodeid
    FROM search_tests JOIN tests AS t ON t.id = search_tests.rowid
    WHERE search_tests MATCH ?1 AND (?2 IS NULL OR t.project = ?2)
      AND (EXISTS (SELECT 1 FROM test_cases AS c WHERE c.test_id = t.id)
           OR EXISTS (SELECT 1 FROM test_history AS h WHERE h.test_id = t.id))
)
WHERE ?3 IS NULL OR score < ?3 OR (score = ?3 AND id > ?4)
ORDER BY score DESC, id
LIMIT ?5
"""

_ENTRIES = """
SELECT score, session_key, id, seq, entry_id, type, timestamp_ms, body FROM (
    SELECT -bm25(search_entries) AS score, s.key AS session_key, s.id AS id, b.seq AS seq,
           b.entry_id AS entry_id, e.type AS type, e.timestamp_ms AS timestamp_ms,
           b.body AS body
    FROM search_entries
    JOIN session_bodies AS b
      ON b.session_key = search_entries.rowid / 4294967296
     AND b.seq = search_entries.rowid % 4294967296
    JOIN sessions AS s ON s.key = b.session_key
    JOIN session_entries AS e ON e.session_key = b.session_key AND e.id = b.entry_id
    WHERE search_entries MATCH ?1 AND (?2 IS NULL OR s.cwd = ?2)
)
WHERE ?3 IS NULL OR score < ?3
   OR (score = ?3 AND (session_key < ?4 OR (session_key = ?4 AND seq < ?5)))
ORDER BY score DESC, session_key DESC, seq DESC
LIMIT ?6
"""


def _start(start: tuple[int, ...] | None, arity: int) -> list[Any]:
    if start is None:
        return [None] * arity
    return [float_of_key(start[0]), *start[1:]]


def failure_rows(rows: Iterable[Sequence[Any]]) -> list[FailureRow]:
    """The failure rows of a query's rows (score, run id, id, project, node id, collected,
    ordinal, exception type, message), on either backend."""
    return [
        FailureRow(float(r[0]), r[1], r[2], r[3], r[4], bool(r[5]), r[6], r[7], r[8])
        for r in rows
    ]


def test_rows(rows: Iterable[Sequence[Any]]) -> list[TestRow]:
    """The test rows of a query's rows (score, id, project, node id)."""
    return [TestRow(float(r[0]), r[1], r[2], r[3]) for r in rows]


def entry_rows(rows: Iterable[Sequence[Any]]) -> list[EntryRow]:
    """The entry rows of a query's rows (score, session key, session id, seq, entry id,
    type, timestamp, body)."""
    from runstore.services._sessions_rules import payload_from_body

    return [
        EntryRow(float(r[0]), r[1], r[2], r[3], r[4], r[5], r[6], payload_from_body(r[7]))
        for r in rows
    ]


def search_failures(
    db: _Executes,
    query: SearchQuery,
    project: str | None,
    start: tuple[int, ...] | None,
    count: int,
) -> list[FailureRow]:
    """The failure rows of one page (see the module doc)."""
    params = (fts5_match(query), project, *_start(start, 3), count)
    return failure_rows(db.execute(_FAILURES, params))


def search_tests(
    db: _Executes,
    query: SearchQuery,
    project: str | None,
    start: tuple[int, ...] | None,
    count: int,
) -> list[TestRow]:
    """The test rows of one page (see the module doc)."""
    return test_rows(db.execute(_TESTS, (fts5_match(query), project, *_start(start, 2), count)))


def search_entries(
    db: _Executes,
    query: SearchQuery,
    cwd: str | None,
    start: tuple[int, ...] | None,
    count: int,
) -> list[EntryRow]:
    """The session entry rows of one page (see the module doc)."""
    return entry_rows(db.execute(_ENTRIES, (fts5_match(query), cwd, *_start(start, 3), count)))
