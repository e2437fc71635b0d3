"""The search queries of the PostgreSQL layers: the ``text[]`` indexes of migration 0012.

The same queries as :mod:`runstore.layers._search_sqlite`. The terms are array parameters
(:func:`~runstore.services._search_rules.postgres_terms`: user text never reaches a query
parser): the exact ones are matched by the GIN index (``tokens @> exact``), each prefix one
by a token that ``starts_with`` it. A query of prefix terms only reads every index row. The
score is ``1 / (1 + number of distinct tokens)``: shorter documents first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from runstore.layers._search_sqlite import entry_rows, failure_rows, test_rows
from runstore.services._search_rules import (
    EntryRow,
    FailureRow,
    SearchQuery,
    TestRow,
    float_of_key,
    postgres_terms,
)

__all__ = ["search_entries", "search_failures", "search_tests"]


class _Executes(Protocol):
    def execute(self, sql: str, params: Any = ...) -> Sequence[Sequence[Any]]: ...


_FAILURES = """
SELECT score, run_id, id, project, nodeid, collected, ordinal, exception_type, message FROM (
    SELECT 1.0::float8 / (1 + cardinality(x.tokens)) AS score, e.id AS id, r.id AS run_id,
           r.project AS project, coalesce(t.nodeid, ce.nodeid) AS nodeid,
           e.case_id IS NULL AS collected, e.ordinal AS ordinal,
           e.exception_type AS exception_type, e.message AS message
    FROM search_failures AS x
    JOIN test_errors AS e ON e.id = x.error_id
    LEFT JOIN test_cases AS c ON c.id = e.case_id
    LEFT JOIN tests AS t ON t.id = c.test_id
    LEFT JOIN collection_errors AS ce ON ce.id = e.collection_error_id
    JOIN test_runs AS r ON r.id = coalesce(c.run_id, ce.run_id)
    WHERE x.tokens @> %(exact)s::text[]
      AND NOT EXISTS (SELECT 1 FROM unnest(%(prefixes)s::text[]) AS p (v)
                      WHERE NOT EXISTS (SELECT 1 FROM unnest(x.tokens) AS t (v)
                                        WHERE starts_with(t.v, p.v)))
      AND (c.outcome IN ('failed', 'error') OR e.collection_error_id IS NOT NULL)
      AND (%(scope)s::text IS NULL OR r.project = %(scope)s::text)
) AS found
WHERE %(score)s::float8 IS NULL OR score < %(score)s::float8
   OR (score = %(score)s::float8
       AND (run_id < %(a)s::bigint OR (run_id = %(a)s::bigint AND id > %(b)s::bigint)))
ORDER BY score DESC, run_id DESC, id
LIMIT %(count)s
"""

_TESTS = """
SELECT score, id, project, nodeid FROM (
    SELECT 1.0::float8 / (1 + cardinality(x.tokens)) AS score, t.id AS id,
           t.project AS project, t.nodeid AS nodeid
    FROM search_tests AS x
    JOIN tests AS t ON t.id = x.test_id
    WHERE x.tokens @> %(exact)s::text[]
      AND NOT EXISTS (SELECT 1 FROM unnest(%(prefixes)s::text[]) AS p (v)
                      WHERE NOT EXISTS (SELECT 1 FROM unnest(x.tokens) AS t (v)
                                        WHERE starts_with(t.v, p.v)))
      AND (%(scope)s::text IS NULL OR t.project = %(scope)s::text)
      AND (EXISTS (SELECT 1 FROM test_cases AS c WHERE c.test_id = t.id)
           OR EXISTS (SELECT 1 FROM test_history AS h WHERE h.test_id = t.id))
) AS found
WHERE %(score)s::float8 IS NULL OR score < %(score)s::float8
   OR (score = %(score)s::float8 AND id > %(a)s::bigint)
ORDER BY score DESC, id
LIMIT %(count)s
"""

_ENTRIES = """
SELECT score, session_key, id, seq, entry_id, type, timestamp_ms, body FROM (
    SELECT 1.0::float8 / (1 + cardinality(x.tokens)) AS score, s.key AS session_key,
           s.id AS id, b.seq AS seq, b.entry_id AS entry_id, e.type AS type,
           e.timestamp_ms AS timestamp_ms, b.body AS body
    FROM search_entries AS x
    JOIN session_bodies AS b ON b.session_key = x.session_key AND b.seq = x.seq
    JOIN sessions AS s ON s.key = b.session_key
    JOIN session_entries AS e ON e.session_key = b.session_key AND e.id = b.entry_id
    WHERE x.tokens @> %(exact)s::text[]
      AND NOT EXISTS (SELECT 1 FROM unnest(%(prefixes)s::text[]) AS p (v)
                      WHERE NOT EXISTS (SELECT 1 FROM unnest(x.tokens) AS t (v)
                                        WHERE starts_with(t.v, p.v)))
      AND (%(scope)s::text IS NULL OR s.cwd = %(scope)s::text)
) AS found
WHERE %(score)s::float8 IS NULL OR score < %(score)s::float8
   OR (score = %(score)s::float8
       AND (session_key < %(a)s::bigint OR (session_key = %(a)s::bigint AND seq < %(b)s::bigint)))
ORDER BY score DESC, session_key DESC, seq DESC
LIMIT %(count)s
"""


def _params(
    query: SearchQuery, scope: str | None, start: tuple[int, ...] | None, count: int
) -> dict[str, Any]:
    keys: list[Any] = [None, None, None] if start is None else [float_of_key(start[0]), *start[1:]]
    keys += [None] * (3 - len(keys))
    exact, prefixes = postgres_terms(query)
    return {
        "exact": exact, "prefixes": prefixes, "scope": scope,
        "score": keys[0], "a": keys[1], "b": keys[2], "count": count,
    }


def search_failures(
    db: _Executes,
    query: SearchQuery,
    project: str | None,
    start: tuple[int, ...] | None,
    count: int,
) -> list[FailureRow]:
    """The failure rows of one page (see the module doc)."""
    return failure_rows(db.execute(_FAILURES, _params(query, project, start, count)))


def search_tests(
    db: _Executes,
    query: SearchQuery,
    project: str | None,
    start: tuple[int, ...] | None,
    count: int,
) -> list[TestRow]:
    """The test rows of one page (see the module doc)."""
    return test_rows(db.execute(_TESTS, _params(query, project, start, count)))


def search_entries(
    db: _Executes,
    query: SearchQuery,
    cwd: str | None,
    start: tuple[int, ...] | None,
    count: int,
) -> list[EntryRow]:
    """The session entry rows of one page (see the module doc)."""
    return entry_rows(db.execute(_ENTRIES, _params(query, cwd, start, count)))
