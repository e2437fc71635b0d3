"""Sessions on PostgreSQL: ``PostgresSessionRepository``.

A small adapter. The repository is the SQLite layer's storage and query hooks
(``_sessions_sqlite``) over the shared flow (``_sessions_shared``), their statements run
through the test-run layer's SQLite-to-PostgreSQL translation (``_postgres_test_runs``), so
both backends run the same statements and the same rules and give the same records. Three
statements are SQLite's own (the recursive path walk reads ``json_extract`` and ``json_type``
of a compaction's body, and they take named parameters); they run as the PostgreSQL forms
below, which read the body as ``json`` (``jsonb`` refuses ``\\u0000``, and ``json`` will
not turn it into text, so the JSON escapes of NUL and U+FDD0 first become the layer's escapes
of those characters: ``_BODY_JSON``) and take each step of a walk as a ``LATERAL``
primary-key lookup (``LIMIT 1`` keeps it one: planned as a join, a step may scan the whole
session, which makes a walk quadratic). What else differs is how a unit of work keeps its
facts true until it commits, since PostgreSQL runs writers at once where SQLite's ``BEGIN
IMMEDIATE`` runs them one by one.

Isolation, per unit of work. Every write (``create``, ``fork``, ``delete``, appends, leaf
moves, ``atomic``) is one ``READ COMMITTED`` transaction of the shared
:class:`PostgresDatabase` (a SAVEPOINT inside another unit) that, before it looks a session
id up, takes the transaction-level advisory lock of that id
(``pg_advisory_xact_lock(SESSIONS_LOCK, hashtext(id))``): writers of one session run one at
a time, so each reads the entry counter, leaf and summary the previous one committed and no
two hand out one ``seq``; two creates of one id meet ``AlreadyExists``, not a unique
violation; writers of different sessions go on together. Reads run ``REPEATABLE READ READ
ONLY`` (one snapshot) and take no lock.

Caches. The key, head and summary mirrors stand within one unit only (there is no
``PRAGMA data_version`` to tell that another client wrote): each unit starts with them empty.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from returns.result import Result

from runstore.layers._layer import Container, Layer
from runstore.layers._postgres_database import PostgresDatabase, Row
from runstore.layers._postgres_ledger import _LedgerDialect
from runstore.layers._postgres_search import search_entries
from runstore.layers._postgres_test_runs import _as_sqlite
from runstore.layers._sessions_shared import BoundSession
from runstore.layers._sessions_sqlite import (
    _ANCESTOR_SQL,
    _COPY_SQL,
    _PATH_SQL,
    _STATE_COLUMNS,
    SqliteSessionRepository,
    _storable,
)
from runstore.layers._tags import SESSION_REPOSITORY
from runstore.services._search_rules import EntryRow, SearchQuery
from runstore.services.clock import Clock
from runstore.services.errors import Busy, StorageFailure
from runstore.services.sessions import SessionId, SessionRepository, SessionStorage

__all__ = ["SESSIONS_LOCK", "PostgresSessionRepository", "postgres_sessions"]

T = TypeVar("T")
E = TypeVar("E")

SESSIONS_LOCK = 0x72756E73
"""The first key of every session's advisory lock (the bytes of ``runs``, an int4); the
second is ``hashtext`` of the session id."""

_LOCK_SESSION = "SELECT pg_advisory_xact_lock(?, hashtext(?))"

# A stored body as ``json`` whose strings read as the layer stores text, so that an id read
# from it equals the stored id: a JSON escape of NUL (which ``json`` refuses to turn into
# text) becomes the layer's escape of NUL, U+FDD0 '0', and one of U+FDD0 becomes U+FDD0
# U+FDD0, as each U+FDD0 the body holds itself already is at rest. An escape is a ``\u``
# after an even run of backslashes (after an odd one the ``u`` is plain text). Bodies
# without ``\u`` (nearly all: runstore's JSON escapes control characters only) are read as
# they are.
_BODY_JSON = (
    "(CASE WHEN strpos(c.body, '\\u') = 0 THEN c.body ELSE"
    r" regexp_replace(regexp_replace(c.body, '(?<!\\)((?:\\\\)*)\\u0000',"
    r" '\1' || U&'\FDD0' || '0', 'g'), '(?<!\\)((?:\\\\)*)\\u[Ff][Dd][Dd]0',"
    r" '\1' || U&'\FDD0\FDD0', 'g') END)::json"
)

# The steps of walk_step, as in the SQLite form: ``pending`` is the first kept entry looked
# for, ``done`` marks the entry the walk stops at (never when walk is 0: the whole path to
# the root). A compaction's body is read only at a compaction.
_FIRST_KEPT = (
    f"(SELECT ({_BODY_JSON} ->> 'firstKeptEntryId') COLLATE \"C\" FROM session_bodies AS c"
    " WHERE c.session_key = %(key)s AND c.seq = e.seq)"
)
_RETAINS_TAIL = (
    f"coalesce((SELECT json_typeof({_BODY_JSON} -> 'retainedTail') = 'array'"
    " FROM session_bodies AS c WHERE c.session_key = %(key)s AND c.seq = e.seq), false)"
)
_CONTEXT_TYPES = "('message', 'custom_message', 'branch_summary', 'compaction')"

_POSTGRES_PATH = f"""
WITH RECURSIVE up(id, parent_id, seq, type, timestamp_ms, pending, done) AS (
    SELECT e.id, e.parent_id, e.seq, e.type, e.timestamp_ms,
           CASE WHEN e.type = 'compaction' THEN {_FIRST_KEPT} END,
           %(walk)s <> 0 AND e.type = 'compaction' AND {_RETAINS_TAIL}
      FROM session_entries AS e WHERE e.session_key = %(key)s AND e.id = %(start)s
    UNION ALL
    SELECT e.id, e.parent_id, e.seq, e.type, e.timestamp_ms,
           CASE WHEN e.type = 'compaction' THEN {_FIRST_KEPT} ELSE up.pending END,
           %(walk)s <> 0 AND (e.id IS NOT DISTINCT FROM up.pending
                              OR (e.type = 'compaction' AND {_RETAINS_TAIL}))
      FROM up CROSS JOIN LATERAL (SELECT * FROM session_entries AS s
           WHERE s.session_key = %(key)s AND s.id = up.parent_id LIMIT 1) AS e
     WHERE NOT up.done
)
SELECT up.id, up.parent_id, up.seq, up.type, up.timestamp_ms, b.body
  FROM up LEFT JOIN session_bodies AS b
    ON b.session_key = %(key)s AND b.seq = up.seq
   AND (%(all_bodies)s <> 0 OR up.type IN {_CONTEXT_TYPES})
 ORDER BY up.seq
"""

_POSTGRES_ANCESTOR = """
WITH RECURSIVE up(id, parent_id) AS (
    SELECT id, parent_id FROM session_entries WHERE session_key = %(key)s AND id = %(start)s
    UNION ALL
    SELECT e.id, e.parent_id
      FROM up CROSS JOIN LATERAL (SELECT * FROM session_entries AS s
           WHERE s.session_key = %(key)s AND s.id = up.parent_id LIMIT 1) AS e
     WHERE up.id <> %(target)s
)
SELECT count(*) FROM up WHERE id = %(target)s
"""

_POSTGRES_COPY = f"""
WITH RECURSIVE up(id, parent_id) AS (
    SELECT id, parent_id FROM session_entries WHERE session_key = %(key)s AND id = %(start)s
    UNION ALL
    SELECT e.id, e.parent_id
      FROM up CROSS JOIN LATERAL (SELECT * FROM session_entries AS s
           WHERE s.session_key = %(key)s AND s.id = up.parent_id LIMIT 1) AS e
)
SELECT e.id, e.parent_id, e.type, e.timestamp_ms, {_STATE_COLUMNS}, b.body
  FROM up JOIN session_entries AS e ON e.session_key = %(key)s AND e.id = up.id
  JOIN session_bodies AS b ON b.session_key = %(key)s AND b.seq = e.seq
 ORDER BY e.seq
"""

_POSTGRES_FORMS = {
    _PATH_SQL: _POSTGRES_PATH,
    _ANCESTOR_SQL: _POSTGRES_ANCESTOR,
    _COPY_SQL: _POSTGRES_COPY,
}
"""The SQLite layer's statements with named parameters, and their PostgreSQL forms."""


class _SessionsDialect(_LedgerDialect):
    """The SQLite statements of the sessions hooks, run on PostgreSQL in plain units of work
    (sessions take advisory locks per session id, not the test runs' lock)."""

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[Row]:
        if isinstance(params, Mapping):
            return self._pg.execute(_POSTGRES_FORMS[sql], params)
        return super().execute(sql, params)


class PostgresSessionRepository(SqliteSessionRepository):
    """:class:`~runstore.services.SessionRepository` on a :class:`PostgresDatabase` (see the
    module docstring for the locks of each unit of work)."""

    def __init__(self, db: PostgresDatabase, clock: Clock) -> None:
        self._dialect = _SessionsDialect(db)
        self._postgres = db
        self._writing = 0
        super().__init__(_as_sqlite(self._dialect), clock)

    def _sync(self) -> None:
        """Start every unit with empty caches (see the module docstring)."""
        for cache in (self._keys, self._heads, self._summaries):
            if cache:
                cache.clear()

    def _transact(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        def writing() -> Result[T, E]:
            self._writing += 1
            try:
                return fn()
            finally:
                self._writing -= 1

        return super()._transact(operation, writing)

    def _find(self, session_id: str) -> int | None:
        if self._writing and _storable(session_id):
            self._dialect.execute(_LOCK_SESSION, (SESSIONS_LOCK, session_id))
        return super()._find(session_id)

    def _search_entries(
        self, query: SearchQuery, cwd: str | None, start: tuple[int, ...] | None, count: int
    ) -> list[EntryRow]:
        return search_entries(self._postgres, query, cwd, start, count)


PostgresSessionStorage = BoundSession
"""The :class:`~runstore.services.SessionStorage` of one session on PostgreSQL."""


def postgres_sessions() -> Layer:
    """A layer providing :class:`~runstore.services.SessionRepository` on the container's
    :class:`PostgresDatabase` (requires it and a ``Clock``)."""

    def scoped(c: Container) -> Iterator[PostgresSessionRepository]:
        repository = PostgresSessionRepository(c.get(PostgresDatabase), c.get(Clock))
        yield repository
        repository.close()  # later calls: StorageFailure(kind=closed)

    return Layer.service(SESSION_REPOSITORY, scoped, requires=(PostgresDatabase, Clock))


_check_repository: Callable[[PostgresDatabase, Clock], SessionRepository] = (
    PostgresSessionRepository
)
_check_storage: Callable[[PostgresSessionRepository, SessionId], SessionStorage] = BoundSession
