"""The live sessions layer: sessions as trees of entries in SQLite (migration 0005).

The flow and the rules are :class:`~runstore.layers._sessions_shared.SessionLayer`'s; this
module is the storage and the queries. Every write is one unit of work on the container's
:class:`SqliteDatabase`. Three caches spare the hot paths a read: the key of a session, its
head (entry counter and active leaf) and its summary. They are
:class:`~runstore.layers.TxDict` mirrors, written with the rows while an append runs, so
whatever a failed unit wrote to them is undone with its rows (seed 004 restored such caches
by hand after a failed append). When another connection commits (``PRAGMA data_version``
moves), they are dropped before the next use.

Path walks are recursive queries over the primary key ``(session_key, id)`` of the
``session_entries`` table that take the steps of
:func:`~runstore.services._sessions_rules.walk_step` (reading a compaction's
``firstKeptEntryId`` and ``retainedTail`` from its body), so that ``build_context`` reads
only the path from the leaf back to where seed 004's walk stops, however long the session
is; the table keeps per entry the model and thinking level at that entry. Entries and
bodies are immutable in the database too (triggers of migration 0009).
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import attrs
from returns.result import Result

from runstore.layers._layer import Layer
from runstore.layers._search_sqlite import search_entries
from runstore.layers._sessions_shared import BoundSession, SessionLayer
from runstore.layers._sqlite_database import Row, SqliteDatabase
from runstore.layers._tags import SESSION_REPOSITORY
from runstore.layers._unit_of_work import TxDict
from runstore.services._search_rules import EntryRow, SearchQuery
from runstore.services._sessions_rules import (
    FRESH_HEAD,
    AppendPlan,
    Head,
    ListingKey,
    Node,
    SessionFields,
    ValidBatch,
    batch_references,
    empty_summary,
    entry_from_row,
    payload_from_body,
    session_record,
    state_columns,
    state_from_columns,
    summary_columns,
    summary_from_row,
)
from runstore.services.clock import Clock
from runstore.services.errors import Busy, StorageFailure
from runstore.services.sessions import (
    Entry,
    EntryState,
    SessionId,
    SessionRecord,
    SessionRepository,
    SessionStorage,
    SessionSummary,
)

__all__ = ["SqliteSessionRepository", "SqliteSessionStorage", "sqlite_sessions"]

T = TypeVar("T")
E = TypeVar("E")

# Entry types whose payload build_context reads; other bodies on the path are not loaded.
_CONTEXT_TYPES = ("message", "custom_message", "branch_summary", "compaction")

_ENTRY_COLUMNS = "e.id, e.parent_id, e.seq, e.type, e.timestamp_ms, b.body"

_STATE_COLUMNS = "model_provider, model_id, thinking_level"

# The steps of walk_step: ``pending`` is the first kept entry looked for, ``done`` marks the
# entry the walk stops at (never when :walk is 0: the whole path to the root). A compaction's
# body is read only at a compaction.
_FIRST_KEPT = (
    "(SELECT json_extract(c.body, '$.firstKeptEntryId') FROM session_bodies AS c"
    " WHERE c.session_key = :key AND c.seq = e.seq)"
)
_RETAINS_TAIL = (
    "(SELECT json_type(c.body, '$.retainedTail') FROM session_bodies AS c"
    " WHERE c.session_key = :key AND c.seq = e.seq) IS 'array'"
)

_PATH_SQL = f"""
WITH RECURSIVE up(id, parent_id, seq, type, timestamp_ms, pending, done) AS (
    SELECT e.id, e.parent_id, e.seq, e.type, e.timestamp_ms,
           CASE WHEN e.type = 'compaction' THEN {_FIRST_KEPT} END,
           :walk AND e.type = 'compaction' AND {_RETAINS_TAIL}
      FROM session_entries AS e WHERE e.session_key = :key AND e.id = :start
    UNION ALL
    SELECT e.id, e.parent_id, e.seq, e.type, e.timestamp_ms,
           CASE WHEN e.type = 'compaction' THEN {_FIRST_KEPT} ELSE up.pending END,
           :walk AND (e.id IS up.pending OR (e.type = 'compaction' AND {_RETAINS_TAIL}))
      FROM up JOIN session_entries AS e ON e.session_key = :key AND e.id = up.parent_id
     WHERE NOT up.done
)
SELECT up.id, up.parent_id, up.seq, up.type, up.timestamp_ms, b.body
  FROM up LEFT JOIN session_bodies AS b
    ON b.session_key = :key AND b.seq = up.seq AND (:all_bodies OR up.type IN {{types}})
 ORDER BY up.seq
""".replace("{types}", "(" + ", ".join(f"'{t}'" for t in _CONTEXT_TYPES) + ")")

_ANCESTOR_SQL = """
WITH RECURSIVE up(id, parent_id) AS (
    SELECT id, parent_id FROM session_entries WHERE session_key = :key AND id = :start
    UNION ALL
    SELECT e.id, e.parent_id
      FROM up JOIN session_entries AS e ON e.session_key = :key AND e.id = up.parent_id
     WHERE up.id <> :target
)
SELECT count(*) FROM up WHERE id = :target
"""

_COPY_SQL = f"""
WITH RECURSIVE up(id, parent_id) AS (
    SELECT id, parent_id FROM session_entries WHERE session_key = :key AND id = :start
    UNION ALL
    SELECT e.id, e.parent_id
      FROM up JOIN session_entries AS e ON e.session_key = :key AND e.id = up.parent_id
)
SELECT e.id, e.parent_id, e.type, e.timestamp_ms, {_STATE_COLUMNS}, b.body
  FROM up JOIN session_entries AS e ON e.session_key = :key AND e.id = up.id
  JOIN session_bodies AS b ON b.session_key = :key AND b.seq = e.seq
 ORDER BY e.seq
"""

_SUMMARY_COLUMNS = (
    "m.name, m.message_count, m.cached_tokens, m.uncached_tokens, m.total_tokens, m.cost, "
    "m.model_provider, m.model_id, m.thinking_level"
)

_INSERT_ENTRY = (
    "INSERT INTO session_entries (session_key, id, seq, parent_id, type, timestamp_ms,"
    f" {_STATE_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)"
)

_INSERT_BODY = "INSERT INTO session_bodies (session_key, seq, entry_id, body) VALUES (?, ?, ?, ?)"


def _storable(identifier: object) -> bool:
    """Whether ``identifier`` could name a stored row: a ``str`` UTF-8 can encode.

    Ids are validated when rows are created, so one that fails this names nothing: lookups
    answer ``NotFound`` (as the in-memory layer does) instead of letting the driver raise.
    """
    if not isinstance(identifier, str):
        return False
    try:
        identifier.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class SqliteSessionRepository(SessionLayer[int]):
    """:class:`~runstore.services.SessionRepository` on SQLite (see the module doc)."""

    def __init__(self, db: SqliteDatabase, clock: Clock) -> None:
        self._db = db
        self._clock = clock
        self._keys: TxDict[str, int] = db.mirror()
        self._heads: TxDict[int, Head] = db.mirror()
        self._summaries: TxDict[int, SessionSummary] = db.mirror()
        self._seen: TxDict[str, int] = db.mirror()

    # -- units of work and caches ----------------------------------------------------------------

    def _sync(self) -> None:
        """Drop the caches when another connection committed since they were filled."""
        version = self._db.scalar("PRAGMA data_version")
        if self._seen.get("data_version") != version:
            self._keys.clear()
            self._heads.clear()
            self._summaries.clear()
            self._seen["data_version"] = version

    def _synced(self, fn: Callable[[], Result[T, E]]) -> Callable[[], Result[T, E]]:
        """``fn``, run after the caches are checked against other connections' commits."""

        def synced() -> Result[T, E]:
            self._sync()
            return fn()

        return synced

    def _transact(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        return self._db.transact(operation, self._synced(fn))

    def _read(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        return self._db.read(operation, self._synced(fn))

    # -- sessions --------------------------------------------------------------------------------

    def _find(self, session_id: str) -> int | None:
        if not _storable(session_id):
            return None
        key = self._keys.get(session_id)
        if key is None:
            key = self._db.scalar("SELECT key FROM sessions WHERE id = ?", (session_id,))
            if key is not None:
                self._keys[session_id] = key
        return key

    def _head(self, ref: int) -> Head:
        head = self._heads.get(ref)
        if head is None:
            row = self._db.one("SELECT next_entry_seq, leaf_id FROM sessions WHERE key = ?", (ref,))
            assert row is not None, "a session key without its row"
            head = self._heads[ref] = Head(row[0], row[1])
        return head

    def _summary(self, ref: int) -> SessionSummary:
        summary = self._summaries.get(ref)
        if summary is None:
            row = self._db.one(
                f"SELECT {_SUMMARY_COLUMNS} FROM session_summaries AS m WHERE m.session_key = ?",
                (ref,),
            )
            assert row is not None, "a session without its summary row"
            labels: dict[str, str] = dict(
                self._db.execute(
                    "SELECT target_id, label FROM session_labels WHERE session_key = ?", (ref,)
                )
            )
            summary = self._summaries[ref] = summary_from_row(
                row, self._head(ref).entry_count, labels
            )
        return summary

    def _session_row(self, ref: int) -> tuple[str, str | None, str, int]:
        row = self._db.one(
            "SELECT cwd, parent_session, metadata, created_ms FROM sessions WHERE key = ?", (ref,)
        )
        assert row is not None, "a session key without its row"
        return row[0], row[1], row[2], row[3]

    def _insert_session(self, fields: SessionFields) -> int:
        key: int = self._db.scalar(
            "UPDATE session_counters SET value = value + 1 WHERE name = 'sessions' RETURNING value"
        )
        self._db.execute(
            "INSERT INTO sessions (id, key, cwd, parent_session, metadata, created_ms)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (fields.id, key, *fields[1:]),
        )
        self._db.execute("INSERT INTO session_summaries (session_key) VALUES (?)", (key,))
        self._keys[fields.id] = key
        self._heads[key] = FRESH_HEAD
        self._summaries[key] = empty_summary()
        return key

    def _delete_session(self, session_id: str, ref: int) -> None:
        self._db.execute("DELETE FROM sessions WHERE key = ?", (ref,))
        del self._keys[session_id]
        self._heads.pop(ref, None)
        self._summaries.pop(ref, None)

    def _store_head(self, ref: int, head: Head) -> None:
        self._db.execute(
            "UPDATE sessions SET next_entry_seq = ?, leaf_id = ? WHERE key = ?", (*head, ref)
        )
        self._heads[ref] = head

    def _store_summary(
        self, ref: int, summary: SessionSummary, label_changes: Mapping[str, str | None]
    ) -> None:
        self._db.execute(
            "UPDATE session_summaries SET name = ?, message_count = ?, cached_tokens = ?,"
            " uncached_tokens = ?, total_tokens = ?, cost = ?, model_provider = ?, model_id = ?,"
            " thinking_level = ? WHERE session_key = ?",
            (*summary_columns(summary), ref),
        )
        for target, label in label_changes.items():
            if label is None:
                self._db.execute(
                    "DELETE FROM session_labels WHERE session_key = ? AND target_id = ?",
                    (ref, target),
                )
            else:
                self._db.execute(
                    "INSERT INTO session_labels (session_key, target_id, label) VALUES (?, ?, ?)"
                    " ON CONFLICT (session_key, target_id) DO UPDATE SET label = excluded.label",
                    (ref, target, label),
                )
        self._summaries[ref] = summary

    def _listing(
        self, cwd: str | None, after: ListingKey | None, count: int
    ) -> builtins.list[tuple[ListingKey, SessionRecord]]:
        where = ["(s.created_ms, s.key) < (?, ?)"]
        params: builtins.list[Any] = list(after) if after is not None else [2**62, 2**62]
        if cwd is not None:
            where.append("s.cwd = ?")
            params.append(cwd)
        rows = self._db.execute(
            "SELECT s.key, s.id, s.cwd, s.parent_session, s.metadata, s.created_ms,"
            f" s.next_entry_seq, s.leaf_id, {_SUMMARY_COLUMNS}"
            " FROM sessions AS s JOIN session_summaries AS m ON m.session_key = s.key"
            f" WHERE {' AND '.join(where)} ORDER BY s.created_ms DESC, s.key DESC LIMIT ?",
            (*params, count),
        )
        labels: dict[int, dict[str, str]] = {}
        if rows:
            for key, target, label in self._db.execute(
                "SELECT session_key, target_id, label FROM session_labels"
                " WHERE session_key IN (SELECT value FROM json_each(?))",
                (json.dumps([r[0] for r in rows]),),
            ):
                labels.setdefault(key, {})[target] = label
        found: builtins.list[tuple[ListingKey, SessionRecord]] = []
        for key, session_id, cwd_, parent, metadata, created, next_seq, leaf, *summary in rows:
            head = Head(next_seq, leaf)
            summarized = summary_from_row(summary, head.entry_count, labels.get(key, {}))
            record = session_record(session_id, cwd_, parent, metadata, created, head, summarized)
            found.append(((created, key), record))
        return found

    def _search_entries(
        self, query: SearchQuery, cwd: str | None, start: tuple[int, ...] | None, count: int
    ) -> builtins.list[EntryRow]:
        return search_entries(self._db, query, cwd, start, count)

    # -- entries ---------------------------------------------------------------------------------

    def _has_entry(self, ref: int, entry_id: str) -> bool:
        if not _storable(entry_id):
            return False
        return (
            self._db.one(
                "SELECT 1 FROM session_entries WHERE session_key = ? AND id = ?", (ref, entry_id)
            )
            is not None
        )

    def _tree(self, ref: int, batch: ValidBatch) -> _Tree:
        known: dict[str, Node] = {}
        if batch.entries and self._head(ref).entry_count:  # a session without entries: none
            wanted = batch_references(batch)
            known = {
                row[0]: Node(row[1], state_from_columns(row[2:]))
                for row in self._db.execute(
                    f"SELECT id, parent_id, {_STATE_COLUMNS} FROM session_entries"
                    " WHERE session_key = ? AND id IN (SELECT value FROM json_each(?))",
                    (ref, json.dumps(sorted(wanted))),
                )
            }
        return _Tree(self._db, ref, known)

    def _insert_entries(self, ref: int, plan: AppendPlan) -> None:
        entry_rows: builtins.list[tuple[Any, ...]] = []
        body_rows: builtins.list[tuple[Any, ...]] = []
        columns_of: dict[int, tuple[Any, ...]] = {}  # by id(): the plan holds each state
        for (entry_id, parent_id, entry_type, timestamp_ms, _, body), seq, state in plan.entries:
            columns = columns_of.get(id(state))
            if columns is None:
                columns = columns_of[id(state)] = state_columns(state)
            entry_rows.append((ref, entry_id, seq, parent_id, entry_type, timestamp_ms, *columns))
            body_rows.append((ref, seq, entry_id, body))
        self._insert_rows(entry_rows, body_rows)

    def _insert_rows(
        self, entry_rows: builtins.list[tuple[Any, ...]], body_rows: builtins.list[tuple[Any, ...]]
    ) -> None:
        self._db.executemany(_INSERT_ENTRY, entry_rows)
        self._db.executemany(_INSERT_BODY, body_rows)

    def _copy_path(self, source: int, target: str, ref: int) -> builtins.list[tuple[str, Any]]:
        entry_rows: builtins.list[tuple[Any, ...]] = []
        body_rows: builtins.list[tuple[Any, ...]] = []
        copied: builtins.list[tuple[str, Any]] = []
        path = self._db.execute(_COPY_SQL, {"key": source, "start": target})
        for seq, (entry_id, parent, entry_type, stamp, *state, body) in enumerate(path, start=1):
            entry_rows.append((ref, entry_id, seq, parent, entry_type, stamp, *state))
            body_rows.append((ref, seq, entry_id, body))
            copied.append((entry_type, payload_from_body(body)))
        self._insert_rows(entry_rows, body_rows)
        return copied

    def _entry(self, ref: int, entry_id: str) -> Entry | None:
        if not _storable(entry_id):
            return None
        row = self._db.one(
            f"SELECT {_ENTRY_COLUMNS} FROM session_entries AS e JOIN session_bodies AS b"
            " ON b.session_key = e.session_key AND b.seq = e.seq"
            " WHERE e.session_key = ? AND e.id = ?",
            (ref, entry_id),
        )
        return None if row is None else entry_from_row(row)

    def _children(self, ref: int, entry_id: str | None) -> tuple[Entry, ...]:
        rows = self._db.execute(
            f"SELECT {_ENTRY_COLUMNS} FROM session_entries AS e JOIN session_bodies AS b"
            " ON b.session_key = e.session_key AND b.seq = e.seq"
            " WHERE e.session_key = ? AND e.parent_id IS ? ORDER BY e.seq",
            (ref, entry_id),
        )
        return tuple(entry_from_row(r) for r in rows)

    def _state_at(self, ref: int, entry_id: str) -> EntryState | None:
        if not _storable(entry_id):
            return None
        row = self._db.one(
            f"SELECT {_STATE_COLUMNS} FROM session_entries WHERE session_key = ? AND id = ?",
            (ref, entry_id),
        )
        return None if row is None else state_from_columns(row)

    def _path_rows(self, ref: int, start: str, *, to_root: bool, all_bodies: bool) -> list[Row]:
        return self._db.execute(
            _PATH_SQL,
            {"key": ref, "start": start, "walk": int(not to_root), "all_bodies": int(all_bodies)},
        )

    def _path(self, ref: int, entry_id: str, *, to_root: bool) -> tuple[Entry, ...] | None:
        if not _storable(entry_id):
            return None
        rows = self._path_rows(ref, entry_id, to_root=to_root, all_bodies=True)
        return tuple(entry_from_row(r) for r in rows) if rows else None

    def _entry_range(self, ref: int, after_seq: int, stop: int) -> tuple[Entry, ...]:
        rows = self._db.execute(
            f"SELECT {_ENTRY_COLUMNS} FROM session_bodies AS b JOIN session_entries AS e"
            " ON e.session_key = b.session_key AND e.id = b.entry_id"
            " WHERE b.session_key = ? AND b.seq > ? AND b.seq <= ? ORDER BY b.seq",
            (ref, after_seq, stop),
        )
        return tuple(entry_from_row(r) for r in rows)

    def _context_path(
        self, ref: int, target: str
    ) -> tuple[EntryState, builtins.list[Entry]] | None:
        state = self._state_at(ref, target)
        if state is None:
            return None
        rows = self._path_rows(ref, target, to_root=False, all_bodies=False)
        return state, [entry_from_row(r) for r in rows]


@attrs.frozen
class _Tree:
    """The entries of one SQLite session :func:`decide_append` asks about: those the batch
    names, loaded in one query, and ancestor walks as recursive queries."""

    _db: SqliteDatabase
    _ref: int
    _known: Mapping[str, Node]

    def node(self, entry_id: str) -> Node | None:
        return self._known.get(entry_id)

    def reaches(self, start: str, candidate: str) -> bool:
        found: int = self._db.scalar(
            _ANCESTOR_SQL, {"key": self._ref, "start": start, "target": candidate}
        )
        return found > 0


SqliteSessionStorage = BoundSession
"""The :class:`~runstore.services.SessionStorage` of one session in SQLite."""


def sqlite_sessions() -> Layer:
    """A layer providing :class:`~runstore.services.SessionRepository` on the container's
    :class:`SqliteDatabase`."""

    def scoped(c: Any) -> Iterator[SqliteSessionRepository]:
        repository = SqliteSessionRepository(c.get(SqliteDatabase), c.get(Clock))
        yield repository
        repository.close()  # later calls: StorageFailure(kind=closed), not apsw's error

    return Layer.service(SESSION_REPOSITORY, scoped, requires=(SqliteDatabase, Clock))


_check_repository: Callable[[SqliteDatabase, Clock], SessionRepository] = SqliteSessionRepository
_check_storage: Callable[[SqliteSessionRepository, SessionId], SessionStorage] = BoundSession
