"""The in-memory sessions layer: every session, entry and summary in transactional mirrors.

All data lives in :class:`~runstore.layers.TxDict` mirrors of one
:class:`~runstore.layers.InMemoryDatabase`, so a write that fails half way (a refused entry
in the middle of a batch, an exception) leaves every mirror exactly as it was, as a
rolled-back SQLite transaction would. It is the model the contract suite compares the live
layer with.
"""

from __future__ import annotations

import builtins
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import attrs
from returns.result import Failure, Result, Success

from runstore.layers._layer import Layer
from runstore.layers._memory_database import InMemoryDatabase
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

__all__ = ["InMemorySessionRepository", "InMemorySessionStorage", "in_memory_sessions"]

T = TypeVar("T")
E = TypeVar("E")


@attrs.frozen(kw_only=True)
class _Row:
    key: int
    cwd: str
    parent_session: str | None
    metadata: Mapping[str, Any] = attrs.field(hash=False)
    created_ms: int
    leaf_id: str | None
    next_seq: int


@attrs.frozen
class _Stored:
    entry: Entry
    state: EntryState


class InMemorySessionRepository:
    """:class:`~runstore.services.SessionRepository` kept in memory (see the module doc)."""

    def __init__(self, db: InMemoryDatabase, clock: Clock) -> None:
        self._db = db
        self._clock = clock
        self._last_key: TxDict[str, int] = db.mirror()
        self._rows: TxDict[str, _Row] = db.mirror()
        self._order: TxDict[int, str] = db.mirror()
        self._summaries: TxDict[str, SessionSummary] = db.mirror()
        self._entries: TxDict[tuple[str, str], _Stored] = db.mirror()
        self._by_seq: TxDict[tuple[str, int], str] = db.mirror()
        self._children: TxDict[tuple[str, str | None], tuple[str, ...]] = db.mirror()

    # -- repository ------------------------------------------------------------------------------

    def create(self, new: NewSession) -> Result[SessionRecord, SessionError]:
        fields = new_session_fields(new, self._clock.now_ms(), str(uuid.uuid4()))
        if isinstance(fields, InvalidInput):
            return Failure(fields)
        session_id, cwd, parent, metadata, created = fields

        def unit() -> Result[SessionRecord, SessionError]:
            if session_id in self._rows:
                return Failure(Conflict("session", session_id, "a session with this id exists"))
            self._insert_session(session_id, cwd, parent, json.loads(metadata), created)
            return Success(self._record(session_id))

        return self._db.transact("create session", unit)

    def _insert_session(
        self,
        session_id: str,
        cwd: str,
        parent: str | None,
        metadata: Mapping[str, Any],
        created: int,
    ) -> None:
        key = (self._last_key.get("sessions") or 0) + 1
        self._last_key["sessions"] = key
        self._rows[session_id] = _Row(
            key=key,
            cwd=cwd,
            parent_session=parent,
            metadata=metadata,
            created_ms=created,
            leaf_id=None,
            next_seq=1,
        )
        self._order[key] = session_id
        self._summaries[session_id] = empty_summary()

    def _record(self, session_id: str) -> SessionRecord:
        row = self._rows[session_id]
        return SessionRecord(
            id=SessionId(session_id),
            cwd=row.cwd,
            parent_session=row.parent_session,
            metadata=row.metadata,
            created_ms=row.created_ms,
            leaf_id=None if row.leaf_id is None else EntryId(row.leaf_id),
            summary=self._summaries[session_id],
        )

    def get(self, session_id: str) -> Result[SessionRecord, SessionError]:
        if session_id not in self._rows:
            return Failure(NotFound("session", str(session_id)))
        return Success(self._record(session_id))

    def list(
        self, cwd: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> Result[Page[SessionRecord], SessionError]:
        checked = check_limit(limit)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        before = decode_session_cursor(cursor)
        if isinstance(before, InvalidInput):
            return Failure(before)
        keys = sorted((k for k in self._order if before is None or k < before), reverse=True)
        found: builtins.list[tuple[int, str]] = []
        for key in keys:
            session_id = self._order[key]
            if cwd is None or self._rows[session_id].cwd == cwd:
                found.append((key, session_id))
                if len(found) > limit:
                    break
        has_more = len(found) > limit
        page = found[:limit]
        return Success(
            Page(
                items=tuple(self._record(sid) for _, sid in page),
                has_more=has_more,
                next_cursor=encode_session_cursor(page[-1][0]) if has_more else None,
            )
        )

    def open(self, session_id: str) -> Result[SessionStorage, SessionError]:
        if session_id not in self._rows:
            return Failure(NotFound("session", str(session_id)))
        return Success(InMemorySessionStorage(self, SessionId(session_id)))

    def delete(self, session_id: str) -> Result[int, SessionError]:
        def unit() -> Result[int, SessionError]:
            row = self._rows.get(session_id)
            if row is None:
                return Failure(NotFound("session", str(session_id)))
            count = row.next_seq - 1
            for seq in range(1, row.next_seq):
                entry_id = self._by_seq.pop((session_id, seq))
                stored = self._entries.pop((session_id, entry_id))
                self._children.pop((session_id, stored.entry.parent_id), None)
            del self._rows[session_id]
            del self._order[row.key]
            del self._summaries[session_id]
            return Success(count)

        return self._db.transact("delete session", unit)

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
            row = self._rows.get(source)
            if row is None:
                return Failure(NotFound("session", str(source)))
            target = row.leaf_id if at_entry is None else at_entry
            if target is not None and (source, target) not in self._entries:
                return Failure(NotFound("entry", str(target)))
            if new_id in self._rows:
                return Failure(Conflict("session", new_id, "a session with this id exists"))
            meta = row.metadata if metadata_text is None else json.loads(metadata_text)
            self._insert_session(new_id, row.cwd, source, meta, self._clock.now_ms())
            path = self._path(source, target, stop_at_anchor=False) if target is not None else []
            summary = SummaryBuilder(empty_summary())
            for seq, stored in enumerate(path, start=1):
                old = stored.entry
                copy = make_entry(
                    old.type, old.id, old.parent_id, seq, old.timestamp_ms, old.payload
                )
                self._put(new_id, _Stored(copy, stored.state))
                summary.add(old.type, old.payload)
            self._summaries[new_id] = summary.build()
            self._rows[new_id] = attrs.evolve(
                self._rows[new_id], leaf_id=target, next_seq=len(path) + 1
            )
            return Success(self._record(new_id))

        return self._db.transact("fork session", unit)

    def atomic(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        return self._db.transact(operation, fn)

    # -- one session -----------------------------------------------------------------------------

    def _put(self, session_id: str, stored: _Stored) -> None:
        entry = stored.entry
        self._entries[(session_id, entry.id)] = stored
        self._by_seq[(session_id, entry.seq)] = entry.id
        siblings = self._children.get((session_id, entry.parent_id), ())
        self._children[(session_id, entry.parent_id)] = (*siblings, entry.id)

    def append_many(
        self, session_id: str, entries: Sequence[NewEntry], *, batch: bool
    ) -> Result[tuple[Entry, ...], SessionError]:
        if isinstance(entries, str | bytes) or not isinstance(entries, Sequence):
            return Failure(InvalidInput("entries", "must be a sequence of NewEntry"))

        def unit() -> Result[tuple[Entry, ...], SessionError]:
            row = self._rows.get(session_id)
            if row is None:
                return Failure(NotFound("session", str(session_id)))
            summary = SummaryBuilder(self._summaries[session_id])
            appended: builtins.list[Entry] = []
            next_seq = row.next_seq
            for position, new in enumerate(entries):
                valid = (
                    validate_entry(new)
                    if type(new) is NewEntry
                    else InvalidInput("entry", "must be a NewEntry")
                )
                if isinstance(valid, InvalidInput):
                    return Failure(_in_batch(valid, position) if batch else valid)
                if (session_id, valid.id) in self._entries:
                    return Failure(DuplicateEntry(session_id, valid.id, position))
                parent_state: EntryState | None = None
                if valid.parent_id is not None:
                    parent = self._entries.get((session_id, valid.parent_id))
                    if parent is None:
                        return Failure(
                            BadReference(
                                session_id, valid.id, "parentId", valid.parent_id, position
                            )
                        )
                    parent_state = parent.state
                if valid.type == "compaction":
                    first_kept = valid.payload["firstKeptEntryId"]
                    if not self._is_ancestor(session_id, first_kept, valid.parent_id):
                        return Failure(
                            BadReference(
                                session_id, valid.id, "firstKeptEntryId", first_kept, position
                            )
                        )
                payload = payload_from_body(valid.body)
                entry = make_entry(
                    valid.type, valid.id, valid.parent_id, next_seq, valid.timestamp_ms, payload
                )
                self._put(session_id, _Stored(entry, next_state(parent_state, valid.type, payload)))
                summary.add(valid.type, payload)
                next_seq += 1
                appended.append(entry)
            if appended:
                self._summaries[session_id] = summary.build()
                self._rows[session_id] = attrs.evolve(
                    self._rows[session_id], leaf_id=appended[-1].id, next_seq=next_seq
                )
            return Success(tuple(appended))

        return self._db.transact("append entries", unit)

    def _is_ancestor(self, session_id: str, candidate: str, start: str | None) -> bool:
        current = start
        while current is not None:
            if current == candidate:
                return True
            current = self._entries[(session_id, current)].entry.parent_id
        return False

    def set_leaf(
        self, session_id: str, entry_id: str | None
    ) -> Result[EntryId | None, SessionError]:
        def unit() -> Result[EntryId | None, SessionError]:
            row = self._rows.get(session_id)
            if row is None:
                return Failure(NotFound("session", str(session_id)))
            if entry_id is not None and (session_id, entry_id) not in self._entries:
                return Failure(NotFound("entry", str(entry_id)))
            self._rows[session_id] = attrs.evolve(row, leaf_id=entry_id)
            return Success(None if entry_id is None else EntryId(entry_id))

        return self._db.transact("move leaf", unit)

    def _path(
        self, session_id: str, entry_id: str, *, stop_at_anchor: bool
    ) -> builtins.list[_Stored]:
        stored = self._entries[(session_id, entry_id)]
        stop = stored.state.anchor_id if stop_at_anchor else None
        path = [stored]
        while stored.entry.id != stop and stored.entry.parent_id is not None:
            stored = self._entries[(session_id, stored.entry.parent_id)]
            path.append(stored)
        path.reverse()
        return path

    def entry(self, session_id: str, entry_id: str) -> Result[Entry, SessionError]:
        if session_id not in self._rows:
            return Failure(NotFound("session", str(session_id)))
        stored = self._entries.get((session_id, entry_id))
        if stored is None:
            return Failure(NotFound("entry", str(entry_id)))
        return Success(stored.entry)

    def children(
        self, session_id: str, entry_id: str | None
    ) -> Result[tuple[Entry, ...], SessionError]:
        if session_id not in self._rows:
            return Failure(NotFound("session", str(session_id)))
        if entry_id is not None and (session_id, entry_id) not in self._entries:
            return Failure(NotFound("entry", str(entry_id)))
        ids = self._children.get((session_id, entry_id), ()) or ()
        return Success(tuple(self._entries[(session_id, child)].entry for child in ids))

    def path(
        self, session_id: str, entry_id: str, *, stop_at_anchor: bool
    ) -> Result[tuple[Entry, ...], SessionError]:
        if session_id not in self._rows:
            return Failure(NotFound("session", str(session_id)))
        if (session_id, entry_id) not in self._entries:
            return Failure(NotFound("entry", str(entry_id)))
        return Success(
            tuple(s.entry for s in self._path(session_id, entry_id, stop_at_anchor=stop_at_anchor))
        )

    def entries(
        self, session_id: str, after_seq: int, limit: int
    ) -> Result[Page[Entry], SessionError]:
        checked = check_limit(limit)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        if isinstance(after_seq, bool) or not isinstance(after_seq, int) or after_seq < 0:
            return Failure(InvalidInput("after_seq", f"must be an integer >= 0, got {after_seq!r}"))
        row = self._rows.get(session_id)
        if row is None:
            return Failure(NotFound("session", str(session_id)))
        last = row.next_seq - 1
        stop = min(last, after_seq + limit)
        items = tuple(
            self._entries[(session_id, self._by_seq[(session_id, seq)])].entry
            for seq in range(after_seq + 1, stop + 1)
        )
        has_more = stop < last
        return Success(
            Page(items=items, has_more=has_more, next_cursor=str(stop) if has_more else None)
        )

    def build_context(
        self, session_id: str, leaf: str | None
    ) -> Result[SessionContext, SessionError]:
        row = self._rows.get(session_id)
        if row is None:
            return Failure(NotFound("session", str(session_id)))
        target = row.leaf_id if leaf is None else leaf
        if target is None:
            return Success(assemble_context(None, (), EntryState(None, "off", None)))
        stored = self._entries.get((session_id, target))
        if stored is None:
            return Failure(NotFound("entry", str(target)))
        path = self._path(session_id, target, stop_at_anchor=True)
        return Success(assemble_context(EntryId(target), [s.entry for s in path], stored.state))

    def record(self, session_id: str) -> Result[SessionRecord, SessionError]:
        return self.get(session_id)


def _in_batch(refused: InvalidInput, position: int) -> InvalidInput:
    """The refusal of the entry at ``position`` of a batch, its field named ``entries[i].``."""
    field = (
        f"entries[{position}]"
        if refused.field == "entry"
        else f"entries[{position}].{refused.field}"
    )
    return InvalidInput(field, refused.reason)


@attrs.frozen
class InMemorySessionStorage:
    """:class:`~runstore.services.SessionStorage` of one in-memory session."""

    _repo: InMemorySessionRepository
    _session_id: SessionId

    @property
    def session_id(self) -> SessionId:
        return self._session_id

    def info(self) -> Result[SessionRecord, SessionError]:
        return self._repo.get(self._session_id)

    def summary(self) -> Result[SessionSummary, SessionError]:
        return self._repo.get(self._session_id).map(lambda record: record.summary)

    def leaf(self) -> Result[EntryId | None, SessionError]:
        return self._repo.get(self._session_id).map(lambda record: record.leaf_id)

    def append(self, entry: NewEntry) -> Result[Entry, SessionError]:
        return self._repo.append_many(self._session_id, [entry], batch=False).map(
            lambda got: got[0]
        )

    def append_many(self, entries: Sequence[NewEntry]) -> Result[int, SessionError]:
        return self._repo.append_many(self._session_id, entries, batch=True).map(len)

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


def in_memory_sessions() -> Layer:
    """A layer providing :class:`~runstore.services.SessionRepository` in memory."""
    return Layer.service(
        SessionRepository,  # type: ignore[type-abstract]
        lambda c: InMemorySessionRepository(c.get(InMemoryDatabase), c.get(Clock)),
        requires=(InMemoryDatabase, Clock),
    )


_check_repository: Callable[[InMemoryDatabase, Clock], SessionRepository] = (
    InMemorySessionRepository
)
_check_storage: Callable[[InMemorySessionRepository, SessionId], SessionStorage] = (
    InMemorySessionStorage
)
