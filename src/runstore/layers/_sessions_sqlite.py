"""The live sessions layer: sessions as trees of entries in SQLite (migration 0005).

Every write is one unit of work on the container's :class:`SqliteDatabase`. Three caches
spare the hot paths a read: the key of a session, its head (entry counter and active leaf)
and its summary. They are :class:`~runstore.layers.TxDict` mirrors, written entry by entry
while an append runs, so whatever a failed unit wrote to them is undone with its rows (seed
004 restored such caches by hand after a failed append). When another connection commits
(``PRAGMA data_version`` moves), they are dropped before the next use.

Path walks are recursive queries over the primary key ``(session_key, id)`` of the
``session_entries`` table, which keeps per entry the context state at that entry, so that
``build_context`` reads only the path from the leaf up to its newest compaction's first
kept entry, however long the session is.
"""

from __future__ import annotations

import builtins
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any, TypeVar

import attrs
from returns.result import Failure, Result, Success

from runstore.layers._layer import Layer
from runstore.layers._sqlite_database import Row, SqliteDatabase
from runstore.layers._unit_of_work import TxDict
from runstore.services.clock import Clock
from runstore.services.errors import Busy, Conflict, InvalidInput, NotFound, StorageFailure
from runstore.services.pagination import Page, check_limit
from runstore.services.sessions import (
    BadReference,
    DuplicateEntry,
    Entry,
    EntryId,
    EntryState,
    ModelRef,
    NewEntry,
    NewSession,
    SessionContext,
    SessionError,
    SessionId,
    SessionRecord,
    SessionRepository,
    SessionStorage,
    SessionSummary,
    SummaryBuilder,
    ValidEntry,
    assemble_context,
    decode_session_cursor,
    empty_summary,
    encode_session_cursor,
    make_entry,
    new_session_fields,
    next_state,
    payload_from_body,
    validate_entry,
    validate_json_object,
    validate_session_id,
)

__all__ = ["SqliteSessionRepository", "SqliteSessionStorage", "sqlite_sessions"]

T = TypeVar("T")
E = TypeVar("E")

# Entry types whose payload build_context reads; other bodies on the path are not loaded.
_CONTEXT_TYPES = ("message", "custom_message", "branch_summary", "compaction")

_ENTRY_COLUMNS = "e.id, e.parent_id, e.seq, e.type, e.timestamp_ms, b.body"

_PATH_SQL = """
WITH RECURSIVE up(id, parent_id, seq, type, timestamp_ms) AS (
    SELECT id, parent_id, seq, type, timestamp_ms
      FROM session_entries WHERE session_key = :key AND id = :start
    UNION ALL
    SELECT e.id, e.parent_id, e.seq, e.type, e.timestamp_ms
      FROM up JOIN session_entries AS e ON e.session_key = :key AND e.id = up.parent_id
     WHERE up.id IS NOT :stop
)
SELECT up.id, up.parent_id, up.seq, up.type, up.timestamp_ms, b.body
  FROM up LEFT JOIN session_bodies AS b
    ON b.session_key = :key AND b.seq = up.seq AND (:all_bodies OR up.type IN {types})
 ORDER BY up.seq
""".format(types="(" + ", ".join(f"'{t}'" for t in _CONTEXT_TYPES) + ")")

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

_SUMMARY_COLUMNS = (
    "m.name, m.message_count, m.cached_tokens, m.uncached_tokens, m.total_tokens, m.cost, "
    "m.model_provider, m.model_id, m.thinking_level"
)


@attrs.frozen
class _Head:
    next_seq: int
    leaf_id: str | None


def _state(row: Sequence[Any]) -> EntryState:
    """EntryState from (model_provider, model_id, thinking_level, anchor_id)."""
    provider, model_id, thinking, anchor = row
    model = ModelRef(provider, model_id) if provider is not None else None
    return EntryState(model, thinking, anchor)


def _summary_from(
    row: Sequence[Any], entry_count: int, labels: Mapping[str, str]
) -> SessionSummary:
    name, messages, cached, uncached, total, cost, provider, model_id, thinking = row
    return SessionSummary(
        name=name,
        entry_count=entry_count,
        message_count=messages,
        cached_tokens=cached,
        uncached_tokens=uncached,
        total_tokens=total,
        cost=Decimal(cost),
        model=ModelRef(provider, model_id) if provider is not None else None,
        thinking_level=thinking,
        labels=dict(labels),
    )


def _in_batch(refused: InvalidInput, position: int) -> InvalidInput:
    """The refusal of the entry at ``position`` of a batch, its field named ``entries[i].``."""
    field = (
        f"entries[{position}]"
        if refused.field == "entry"
        else f"entries[{position}].{refused.field}"
    )
    return InvalidInput(field, refused.reason)


def _entry_from(row: Row) -> Entry:
    entry_id, parent_id, seq, entry_type, timestamp_ms, body = row
    payload = payload_from_body(body) if body is not None else {}
    return make_entry(entry_type, entry_id, parent_id, seq, timestamp_ms, payload)



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

class SqliteSessionRepository:
    """:class:`~runstore.services.SessionRepository` on SQLite (see the module doc)."""

    def __init__(self, db: SqliteDatabase, clock: Clock) -> None:
        self._db = db
        self._clock = clock
        self._keys: TxDict[str, int] = self._new_cache()
        self._heads: TxDict[int, _Head] = self._new_cache()
        self._summaries: TxDict[int, SessionSummary] = self._new_cache()
        self._seen: TxDict[str, int] = db.mirror()

    def _new_cache(self) -> Any:
        """A mirror for cached rows (a test overrides this to break the layer on purpose)."""
        return self._db.mirror()

    # -- caches ----------------------------------------------------------------------------------

    def _sync(self) -> None:
        """Drop the caches when another connection committed since they were filled."""
        version = self._db.scalar("PRAGMA data_version")
        if self._seen.get("data_version") != version:
            self._keys.clear()
            self._heads.clear()
            self._summaries.clear()
            self._seen["data_version"] = version

    def _key(self, session_id: str) -> int | None:
        if not _storable(session_id):
            return None
        key = self._keys.get(session_id)
        if key is None:
            key = self._db.scalar("SELECT key FROM sessions WHERE id = ?", (session_id,))
            if key is not None:
                self._keys[session_id] = key
        return key

    def _head(self, key: int) -> _Head:
        head = self._heads.get(key)
        if head is None:
            row = self._db.one("SELECT next_entry_seq, leaf_id FROM sessions WHERE key = ?", (key,))
            assert row is not None, "a session key without its row"
            head = _Head(row[0], row[1])
            self._heads[key] = head
        return head

    def _summary(self, key: int) -> SessionSummary:
        summary = self._summaries.get(key)
        if summary is None:
            row = self._db.one(
                f"SELECT {_SUMMARY_COLUMNS} FROM session_summaries AS m WHERE m.session_key = ?",
                (key,),
            )
            assert row is not None, "a session without its summary row"
            labels: dict[str, str] = dict(
                self._db.execute(
                    "SELECT target_id, label FROM session_labels WHERE session_key = ?", (key,)
                )
            )
            summary = _summary_from(row, self._head(key).next_seq - 1, labels)
            self._summaries[key] = summary
        return summary

    def _read(
        self, operation: str, fn: Callable[[], Result[T, SessionError]]
    ) -> Result[T, SessionError]:
        def synced() -> Result[T, SessionError]:
            self._sync()
            return fn()

        return self._db.read(operation, synced)

    def _write(
        self, operation: str, fn: Callable[[], Result[T, SessionError]]
    ) -> Result[T, SessionError]:
        def synced() -> Result[T, SessionError]:
            self._sync()
            return fn()

        return self._db.transact(operation, synced)

    # -- repository ------------------------------------------------------------------------------

    def create(self, new: NewSession) -> Result[SessionRecord, SessionError]:
        fields = new_session_fields(new, self._clock.now_ms(), str(uuid.uuid4()))
        if isinstance(fields, InvalidInput):
            return Failure(fields)
        session_id, cwd, parent, metadata, created = fields

        def unit() -> Result[SessionRecord, SessionError]:
            if self._key(session_id) is not None:
                return Failure(Conflict("session", session_id, "a session with this id exists"))
            self._insert_session(session_id, cwd, parent, metadata, created)
            return self._record(session_id)

        return self._write("create session", unit)

    def _insert_session(
        self, session_id: str, cwd: str, parent: str | None, metadata: str, created: int
    ) -> int:
        key: int = self._db.scalar(
            "UPDATE session_counters SET value = value + 1 WHERE name = 'sessions' RETURNING value"
        )
        self._db.execute(
            "INSERT INTO sessions (id, key, cwd, parent_session, metadata, created_ms)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (session_id, key, cwd, parent, metadata, created),
        )
        self._db.execute("INSERT INTO session_summaries (session_key) VALUES (?)", (key,))
        self._keys[session_id] = key
        self._heads[key] = _Head(1, None)
        self._summaries[key] = empty_summary()
        return key

    def _record(self, session_id: str) -> Result[SessionRecord, SessionError]:
        key = self._key(session_id)
        if key is None:
            return Failure(NotFound("session", str(session_id)))
        row = self._db.one(
            "SELECT cwd, parent_session, metadata, created_ms FROM sessions WHERE key = ?", (key,)
        )
        assert row is not None
        cwd, parent, metadata, created = row
        head = self._head(key)
        return Success(
            SessionRecord(
                id=SessionId(session_id),
                cwd=cwd,
                parent_session=parent,
                metadata=json.loads(metadata),
                created_ms=created,
                leaf_id=None if head.leaf_id is None else EntryId(head.leaf_id),
                summary=self._summary(key),
            )
        )

    def get(self, session_id: str) -> Result[SessionRecord, SessionError]:
        return self._read("get session", lambda: self._record(session_id))

    def list(
        self, cwd: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> Result[Page[SessionRecord], SessionError]:
        checked = check_limit(limit)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        before = decode_session_cursor(cursor)
        if isinstance(before, InvalidInput):
            return Failure(before)

        def read() -> Result[Page[SessionRecord], SessionError]:
            where = ["s.key < ?"]
            params: builtins.list[Any] = [before if before is not None else 2**62]
            if cwd is not None:
                where.append("s.cwd = ?")
                params.append(cwd)
            params.append(limit + 1)
            rows = self._db.execute(
                "SELECT s.key, s.id, s.cwd, s.parent_session, s.metadata, s.created_ms, s.leaf_id,"
                f" s.next_entry_seq, {_SUMMARY_COLUMNS}"
                " FROM sessions AS s JOIN session_summaries AS m ON m.session_key = s.key"
                f" WHERE {' AND '.join(where)} ORDER BY s.key DESC LIMIT ?",
                params,
            )
            has_more = len(rows) > limit
            rows = rows[:limit]
            labels: dict[int, dict[str, str]] = {}
            if rows:
                for key, target, label in self._db.execute(
                    "SELECT session_key, target_id, label FROM session_labels"
                    " WHERE session_key IN (SELECT value FROM json_each(?))",
                    (json.dumps([r[0] for r in rows]),),
                ):
                    labels.setdefault(key, {})[target] = label
            items = tuple(
                SessionRecord(
                    id=SessionId(r[1]),
                    cwd=r[2],
                    parent_session=r[3],
                    metadata=json.loads(r[4]),
                    created_ms=r[5],
                    leaf_id=None if r[6] is None else EntryId(r[6]),
                    summary=_summary_from(r[8:], r[7] - 1, labels.get(r[0], {})),
                )
                for r in rows
            )
            return Success(
                Page(
                    items=items,
                    has_more=has_more,
                    next_cursor=encode_session_cursor(rows[-1][0]) if has_more else None,
                )
            )

        return self._read("list sessions", read)

    def open(self, session_id: str) -> Result[SessionStorage, SessionError]:
        def read() -> Result[SessionStorage, SessionError]:
            if self._key(session_id) is None:
                return Failure(NotFound("session", str(session_id)))
            return Success(SqliteSessionStorage(self, SessionId(session_id)))

        return self._read("open session", read)

    def delete(self, session_id: str) -> Result[int, SessionError]:
        def unit() -> Result[int, SessionError]:
            key = self._key(session_id)
            if key is None:
                return Failure(NotFound("session", str(session_id)))
            count = self._head(key).next_seq - 1
            self._db.execute("DELETE FROM sessions WHERE key = ?", (key,))
            del self._keys[session_id]
            self._heads.pop(key, None)
            self._summaries.pop(key, None)
            return Success(count)

        return self._write("delete session", unit)

    def fork(
        self,
        source: str,
        *,
        at_entry: str | None = None,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Result[SessionRecord, SessionError]:
        metadata_text: str | None = None
        if metadata is not None:
            checked = validate_json_object(metadata, "metadata")
            if isinstance(checked, InvalidInput):
                return Failure(checked)
            metadata_text = checked
        new_id = validate_session_id(session_id if session_id is not None else str(uuid.uuid4()))
        if isinstance(new_id, InvalidInput):
            return Failure(new_id)

        def unit() -> Result[SessionRecord, SessionError]:
            source_key = self._key(source)
            if source_key is None:
                return Failure(NotFound("session", str(source)))
            target = self._head(source_key).leaf_id if at_entry is None else at_entry
            if target is not None and not self._exists(source_key, target):
                return Failure(NotFound("entry", str(target)))
            if self._key(new_id) is not None:
                return Failure(Conflict("session", new_id, "a session with this id exists"))
            row = self._db.one("SELECT cwd, metadata FROM sessions WHERE key = ?", (source_key,))
            assert row is not None
            key = self._insert_session(
                new_id,
                row[0],
                source,
                row[1] if metadata_text is None else metadata_text,
                self._clock.now_ms(),
            )
            if target is None:
                return self._record(new_id)
            path = self._db.execute(
                "WITH RECURSIVE up(id, parent_id) AS ("
                " SELECT id, parent_id FROM session_entries"
                " WHERE session_key = :key AND id = :start"
                " UNION ALL SELECT e.id, e.parent_id FROM up JOIN session_entries AS e"
                " ON e.session_key = :key AND e.id = up.parent_id)"
                " SELECT e.id, e.parent_id, e.type, e.timestamp_ms, e.model_provider, e.model_id,"
                " e.thinking_level, e.anchor_id, b.body"
                " FROM up JOIN session_entries AS e ON e.session_key = :key AND e.id = up.id"
                " JOIN session_bodies AS b ON b.session_key = :key AND b.seq = e.seq"
                " ORDER BY e.seq",
                {"key": source_key, "start": target},
            )
            builder = SummaryBuilder(empty_summary())
            entry_rows: builtins.list[tuple[Any, ...]] = []
            body_rows: builtins.list[tuple[Any, ...]] = []
            for seq, (
                eid,
                parent,
                etype,
                ts,
                provider,
                model_id,
                thinking,
                anchor,
                body,
            ) in enumerate(path, start=1):
                entry_rows.append(
                    (key, eid, seq, parent, etype, ts, provider, model_id, thinking, anchor)
                )
                body_rows.append((key, seq, eid, body))
                builder.add(etype, payload_from_body(body))
            summary = builder.build()
            self._insert_rows(entry_rows, body_rows)
            self._store_head(key, _Head(len(path) + 1, target))
            self._store_summary(key, summary, dict(summary.labels))
            return self._record(new_id)

        return self._write("fork session", unit)

    def atomic(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        return self._db.transact(operation, fn)

    # -- writes of one session -------------------------------------------------------------------

    def _exists(self, key: int, entry_id: str) -> bool:
        if not _storable(entry_id):
            return False
        return (
            self._db.one(
                "SELECT 1 FROM session_entries WHERE session_key = ? AND id = ?", (key, entry_id)
            )
            is not None
        )

    def _insert_rows(
        self, entry_rows: Sequence[tuple[Any, ...]], body_rows: Sequence[tuple[Any, ...]]
    ) -> None:
        self._db.executemany(
            "INSERT INTO session_entries (session_key, id, seq, parent_id, type, timestamp_ms,"
            " model_provider, model_id, thinking_level, anchor_id) VALUES (?,?,?,?,?,?,?,?,?,?)",
            entry_rows,
        )
        self._db.executemany(
            "INSERT INTO session_bodies (session_key, seq, entry_id, body) VALUES (?, ?, ?, ?)",
            body_rows,
        )

    def _store_head(self, key: int, head: _Head) -> None:
        self._db.execute(
            "UPDATE sessions SET next_entry_seq = ?, leaf_id = ? WHERE key = ?",
            (head.next_seq, head.leaf_id, key),
        )
        self._heads[key] = head

    def _store_summary(
        self, key: int, summary: SessionSummary, label_changes: Mapping[str, str | None]
    ) -> None:
        model = summary.model
        self._db.execute(
            "UPDATE session_summaries SET name = ?, message_count = ?, cached_tokens = ?,"
            " uncached_tokens = ?, total_tokens = ?, cost = ?, model_provider = ?, model_id = ?,"
            " thinking_level = ? WHERE session_key = ?",
            (
                summary.name,
                summary.message_count,
                summary.cached_tokens,
                summary.uncached_tokens,
                summary.total_tokens,
                str(summary.cost),
                None if model is None else model.provider,
                None if model is None else model.model_id,
                summary.thinking_level,
                key,
            ),
        )
        for target, label in label_changes.items():
            if label is None:
                self._db.execute(
                    "DELETE FROM session_labels WHERE session_key = ? AND target_id = ?",
                    (key, target),
                )
            else:
                self._db.execute(
                    "INSERT INTO session_labels (session_key, target_id, label) VALUES (?, ?, ?)"
                    " ON CONFLICT (session_key, target_id) DO UPDATE SET label = excluded.label",
                    (key, target, label),
                )
        self._summaries[key] = summary

    def append_many(
        self, session_id: str, entries: Sequence[NewEntry], *, batch: bool
    ) -> Result[tuple[int, tuple[ValidEntry, ...]], SessionError]:
        """Append ``entries``; return the seq of the first and the entries as validated."""
        if isinstance(entries, str | bytes) or not isinstance(entries, Sequence):
            return Failure(InvalidInput("entries", "must be a sequence of NewEntry"))

        def unit() -> Result[tuple[int, tuple[ValidEntry, ...]], SessionError]:
            key = self._key(session_id)
            if key is None:
                return Failure(NotFound("session", str(session_id)))
            # The entries' own checks first, up to the first refused one; the tree checks
            # of the entries before it still come first, as if checked one by one.
            valid: builtins.list[ValidEntry] = []
            refused: InvalidInput | None = None
            append = valid.append
            for position, new in enumerate(entries):
                checked = (
                    validate_entry(new)
                    if type(new) is NewEntry
                    else InvalidInput("entry", "must be a NewEntry")
                )
                if type(checked) is InvalidInput:
                    refused = _in_batch(checked, position) if batch else checked
                    break
                append(checked)  # type: ignore[arg-type]
            first_seq = self._head(key).next_seq
            outcome = self._append_valid(session_id, key, valid)
            if isinstance(outcome, Failure):
                return outcome
            if refused is not None:
                return Failure(refused)
            return Success((first_seq, tuple(valid)))

        return self._write("append entries", unit)

    def _append_valid(
        self, session_id: str, key: int, valid: Sequence[ValidEntry]
    ) -> Result[None, SessionError]:
        if not valid:
            return Success(None)
        wanted = {v.id for v in valid}
        wanted.update(v.parent_id for v in valid if v.parent_id is not None)
        known: dict[str, tuple[str | None, EntryState]] = {
            row[0]: (row[1], _state(row[2:]))
            for row in self._db.execute(
                "SELECT id, parent_id, model_provider, model_id, thinking_level, anchor_id"
                " FROM session_entries"
                " WHERE session_key = ? AND id IN (SELECT value FROM json_each(?))",
                (key, json.dumps(sorted(wanted))),
            )
        }
        local: dict[str, tuple[str | None, EntryState]] = {}
        head = self._head(key)
        summary = SummaryBuilder(self._summary(key))
        next_seq = head.next_seq
        entry_rows: builtins.list[tuple[Any, ...]] = []
        body_rows: builtins.list[tuple[Any, ...]] = []
        label_changes: dict[str, str | None] = {}
        state_columns: dict[int, tuple[Any, ...]] = {}  # by id(): states live in local
        add = summary.add
        for position, v in enumerate(valid):
            entry_id, parent_id, entry_type, timestamp_ms, payload, body = v
            if entry_id in local or entry_id in known:
                return Failure(DuplicateEntry(session_id, entry_id, position))
            parent_state: EntryState | None = None
            if parent_id is not None:
                parent = local.get(parent_id) or known.get(parent_id)
                if parent is None:
                    return Failure(
                        BadReference(session_id, entry_id, "parentId", parent_id, position)
                    )
                parent_state = parent[1]
            if entry_type == "compaction":
                first_kept = payload["firstKeptEntryId"]
                if not self._is_ancestor(key, local, first_kept, parent_id):
                    return Failure(
                        BadReference(session_id, entry_id, "firstKeptEntryId", first_kept, position)
                    )
            elif entry_type == "label":
                label = payload.get("label")
                label_changes[payload["targetId"]] = (
                    label if isinstance(label, str) and label else None
                )
            state = next_state(parent_state, entry_type, payload)
            local[entry_id] = (parent_id, state)
            columns = state_columns.get(id(state))
            if columns is None:
                model = state.model
                columns = state_columns[id(state)] = (
                    None if model is None else model.provider,
                    None if model is None else model.model_id,
                    state.thinking_level,
                    state.anchor_id,
                )
            entry_rows.append(
                (key, entry_id, next_seq, parent_id, entry_type, timestamp_ms, *columns)
            )
            body_rows.append((key, next_seq, entry_id, body))
            next_seq += 1
            add(entry_type, payload)
        # The caches are written with the rows; a unit that fails after this point (a
        # statement below, a later call in the same unit, COMMIT) undoes both.
        self._insert_rows(entry_rows, body_rows)
        self._store_head(key, _Head(next_seq, valid[-1].id))
        self._store_summary(key, summary.build(), label_changes)
        return Success(None)

    def _is_ancestor(
        self,
        key: int,
        local: Mapping[str, tuple[str | None, EntryState]],
        candidate: str,
        start: str | None,
    ) -> bool:
        current = start
        while current is not None and current in local:
            if current == candidate:
                return True
            current = local[current][0]
        if current is None:
            return False
        found: int = self._db.scalar(
            _ANCESTOR_SQL, {"key": key, "start": current, "target": candidate}
        )
        return found > 0

    def set_leaf(
        self, session_id: str, entry_id: str | None
    ) -> Result[EntryId | None, SessionError]:
        def unit() -> Result[EntryId | None, SessionError]:
            key = self._key(session_id)
            if key is None:
                return Failure(NotFound("session", str(session_id)))
            if entry_id is not None and not self._exists(key, entry_id):
                return Failure(NotFound("entry", str(entry_id)))
            self._store_head(key, _Head(self._head(key).next_seq, entry_id))
            return Success(None if entry_id is None else EntryId(entry_id))

        return self._write("move leaf", unit)

    # -- reads of one session --------------------------------------------------------------------

    def record(self, session_id: str) -> Result[SessionRecord, SessionError]:
        return self._read("get session", lambda: self._record(session_id))

    def entry(self, session_id: str, entry_id: str) -> Result[Entry, SessionError]:
        def read() -> Result[Entry, SessionError]:
            key = self._key(session_id)
            if key is None:
                return Failure(NotFound("session", str(session_id)))
            if not _storable(entry_id):
                return Failure(NotFound("entry", str(entry_id)))
            row = self._db.one(
                f"SELECT {_ENTRY_COLUMNS} FROM session_entries AS e JOIN session_bodies AS b"
                " ON b.session_key = e.session_key AND b.seq = e.seq"
                " WHERE e.session_key = ? AND e.id = ?",
                (key, entry_id),
            )
            if row is None:
                return Failure(NotFound("entry", str(entry_id)))
            return Success(_entry_from(row))

        return self._read("read entry", read)

    def children(
        self, session_id: str, entry_id: str | None
    ) -> Result[tuple[Entry, ...], SessionError]:
        def read() -> Result[tuple[Entry, ...], SessionError]:
            key = self._key(session_id)
            if key is None:
                return Failure(NotFound("session", str(session_id)))
            if entry_id is not None and not self._exists(key, entry_id):
                return Failure(NotFound("entry", str(entry_id)))
            rows = self._db.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM session_entries AS e JOIN session_bodies AS b"
                " ON b.session_key = e.session_key AND b.seq = e.seq"
                " WHERE e.session_key = ? AND e.parent_id IS ? ORDER BY e.seq",
                (key, entry_id),
            )
            return Success(tuple(_entry_from(r) for r in rows))

        return self._read("read children", read)

    def _path_rows(
        self, key: int, entry_id: str, *, stop_at_anchor: bool, all_bodies: bool
    ) -> builtins.list[Row] | None:
        if not _storable(entry_id):
            return None
        stop = None
        if stop_at_anchor:
            anchor = self._db.one(
                "SELECT anchor_id FROM session_entries WHERE session_key = ? AND id = ?",
                (key, entry_id),
            )
            if anchor is None:
                return None
            stop = anchor[0]
        rows = self._db.execute(
            _PATH_SQL, {"key": key, "start": entry_id, "stop": stop, "all_bodies": int(all_bodies)}
        )
        return rows or None

    def path(
        self, session_id: str, entry_id: str, *, stop_at_anchor: bool
    ) -> Result[tuple[Entry, ...], SessionError]:
        def read() -> Result[tuple[Entry, ...], SessionError]:
            key = self._key(session_id)
            if key is None:
                return Failure(NotFound("session", str(session_id)))
            rows = self._path_rows(key, entry_id, stop_at_anchor=stop_at_anchor, all_bodies=True)
            if rows is None:
                return Failure(NotFound("entry", str(entry_id)))
            return Success(tuple(_entry_from(r) for r in rows))

        return self._read("read path", read)

    def entries(
        self, session_id: str, after_seq: int, limit: int
    ) -> Result[Page[Entry], SessionError]:
        checked = check_limit(limit)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        if isinstance(after_seq, bool) or not isinstance(after_seq, int) or after_seq < 0:
            return Failure(InvalidInput("after_seq", f"must be an integer >= 0, got {after_seq!r}"))

        def read() -> Result[Page[Entry], SessionError]:
            key = self._key(session_id)
            if key is None:
                return Failure(NotFound("session", str(session_id)))
            last = self._head(key).next_seq - 1
            stop = min(last, after_seq + limit)
            rows = self._db.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM session_bodies AS b JOIN session_entries AS e"
                " ON e.session_key = b.session_key AND e.id = b.entry_id"
                " WHERE b.session_key = ? AND b.seq > ? AND b.seq <= ? ORDER BY b.seq",
                (key, after_seq, stop),
            )
            has_more = stop < last
            return Success(
                Page(
                    items=tuple(_entry_from(r) for r in rows),
                    has_more=has_more,
                    next_cursor=str(stop) if has_more else None,
                )
            )

        return self._read("read entries", read)

    def build_context(
        self, session_id: str, leaf: str | None
    ) -> Result[SessionContext, SessionError]:
        def read() -> Result[SessionContext, SessionError]:
            key = self._key(session_id)
            if key is None:
                return Failure(NotFound("session", str(session_id)))
            target = self._head(key).leaf_id if leaf is None else leaf
            if target is None:
                return Success(assemble_context(None, (), EntryState(None, "off", None)))
            if not _storable(target):
                return Failure(NotFound("entry", str(target)))
            row = self._db.one(
                "SELECT model_provider, model_id, thinking_level, anchor_id FROM session_entries"
                " WHERE session_key = ? AND id = ?",
                (key, target),
            )
            if row is None:
                return Failure(NotFound("entry", str(target)))
            state = _state(row)
            rows = self._db.execute(
                _PATH_SQL, {"key": key, "start": target, "stop": state.anchor_id, "all_bodies": 0}
            )
            return Success(assemble_context(EntryId(target), [_entry_from(r) for r in rows], state))

        return self._read("build context", read)


@attrs.frozen
class SqliteSessionStorage:
    """:class:`~runstore.services.SessionStorage` of one session in SQLite."""

    _repo: SqliteSessionRepository
    _session_id: SessionId

    @property
    def session_id(self) -> SessionId:
        return self._session_id

    def info(self) -> Result[SessionRecord, SessionError]:
        return self._repo.record(self._session_id)

    def summary(self) -> Result[SessionSummary, SessionError]:
        return self._repo.record(self._session_id).map(lambda record: record.summary)

    def leaf(self) -> Result[EntryId | None, SessionError]:
        return self._repo.record(self._session_id).map(lambda record: record.leaf_id)

    def append(self, entry: NewEntry) -> Result[Entry, SessionError]:
        def stored(appended: tuple[int, tuple[ValidEntry, ...]]) -> Entry:
            seq, (v,) = appended
            return make_entry(
                v.type, v.id, v.parent_id, seq, v.timestamp_ms, payload_from_body(v.body)
            )

        return self._repo.append_many(self._session_id, [entry], batch=False).map(stored)

    def append_many(self, entries: Sequence[NewEntry]) -> Result[int, SessionError]:
        return self._repo.append_many(self._session_id, entries, batch=True).map(
            lambda appended: len(appended[1])
        )

    def set_leaf(self, entry_id: str | None) -> Result[EntryId | None, SessionError]:
        return self._repo.set_leaf(self._session_id, entry_id)

    def entry(self, entry_id: str) -> Result[Entry, SessionError]:
        return self._repo.entry(self._session_id, entry_id)

    def children(self, entry_id: str | None) -> Result[tuple[Entry, ...], SessionError]:
        return self._repo.children(self._session_id, entry_id)

    def path_to_root(self, entry_id: str) -> Result[tuple[Entry, ...], SessionError]:
        return self._repo.path(self._session_id, entry_id, stop_at_anchor=False)

    def path_to_root_or_compaction(self, entry_id: str) -> Result[tuple[Entry, ...], SessionError]:
        return self._repo.path(self._session_id, entry_id, stop_at_anchor=True)

    def entries(self, after_seq: int = 0, limit: int = 100) -> Result[Page[Entry], SessionError]:
        return self._repo.entries(self._session_id, after_seq, limit)

    def build_context(self, leaf: str | None = None) -> Result[SessionContext, SessionError]:
        return self._repo.build_context(self._session_id, leaf)


def sqlite_sessions() -> Layer:
    """A layer providing :class:`~runstore.services.SessionRepository` on the container's
    :class:`SqliteDatabase`."""
    return Layer.service(
        SessionRepository,  # type: ignore[type-abstract]
        lambda c: SqliteSessionRepository(c.get(SqliteDatabase), c.get(Clock)),
        requires=(SqliteDatabase, Clock),
    )


_check_repository: Callable[[SqliteDatabase, Clock], SessionRepository] = SqliteSessionRepository
_check_storage: Callable[[SqliteSessionRepository, SessionId], SessionStorage] = (
    SqliteSessionStorage
)
