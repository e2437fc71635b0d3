"""The in-memory sessions layer: every session, entry and summary in transactional mirrors.

All data lives in :class:`~runstore.layers.TxDict` mirrors of one
:class:`~runstore.layers.InMemoryDatabase`, so a write that fails half way (a refused entry
in the middle of a batch, an exception) leaves every mirror exactly as it was, as a
rolled-back SQLite transaction would. It is the model the contract suite compares the live
layer with. The flow and the rules are :class:`~runstore.layers._sessions_shared.SessionLayer`'s;
this module is only the storage: dicts, keyed by session id.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple, TypeVar

import attrs
from returns.result import Result

from runstore.layers._layer import Layer
from runstore.layers._memory_database import InMemoryDatabase
from runstore.layers._sessions_shared import BoundSession, SessionLayer
from runstore.layers._tags import SESSION_REPOSITORY
from runstore.layers._unit_of_work import TxDict
from runstore.services._search_rules import (
    EntryRow,
    SearchQuery,
    after,
    bm25_scores,
    document_tokens,
    entry_sort_key,
    entry_text,
    entry_type_of,
    matches,
)
from runstore.services._sessions_rules import (
    AppendPlan,
    Head,
    ListingKey,
    Node,
    SessionFields,
    ValidBatch,
    empty_summary,
    entry_record,
    walk_path,
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

__all__ = ["InMemorySessionRepository", "InMemorySessionStorage", "in_memory_sessions"]

T = TypeVar("T")
E = TypeVar("E")


class _Row(NamedTuple):
    key: int
    cwd: str
    parent_session: str | None
    metadata: str
    created_ms: int


@attrs.frozen
class _Stored:
    entry: Entry
    state: EntryState


class InMemorySessionRepository(SessionLayer[str]):
    """:class:`~runstore.services.SessionRepository` kept in memory (see the module doc)."""

    def __init__(self, db: InMemoryDatabase, clock: Clock) -> None:
        self._db = db
        self._clock = clock
        self._last_key: TxDict[str, int] = db.mirror()
        self._rows: TxDict[str, _Row] = db.mirror()
        self._heads: TxDict[str, Head] = db.mirror()
        self._order: TxDict[int, str] = db.mirror()
        self._summaries: TxDict[str, SessionSummary] = db.mirror()
        self._entries: TxDict[tuple[str, str], _Stored] = db.mirror()
        self._by_seq: TxDict[tuple[str, int], str] = db.mirror()
        self._children_of: TxDict[tuple[str, str | None], tuple[str, ...]] = db.mirror()

    def _transact(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        return self._db.transact(operation, fn)

    def _read(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        return self._db.read(operation, fn)

    # -- sessions --------------------------------------------------------------------------------

    def _find(self, session_id: str) -> str | None:
        return session_id if session_id in self._rows else None

    def _head(self, ref: str) -> Head:
        return self._heads[ref]

    def _summary(self, ref: str) -> SessionSummary:
        return self._summaries[ref]

    def _session_row(self, ref: str) -> tuple[str, str | None, str, int]:
        row = self._rows[ref]
        return row.cwd, row.parent_session, row.metadata, row.created_ms

    def _insert_session(self, fields: SessionFields) -> str:
        key = (self._last_key.get("sessions") or 0) + 1
        self._last_key["sessions"] = key
        session_id = fields.id
        self._rows[session_id] = _Row(
            key, fields.cwd, fields.parent_session, fields.metadata, fields.created_ms
        )
        self._heads[session_id] = Head(1, None)
        self._order[key] = session_id
        self._summaries[session_id] = empty_summary()
        return session_id

    def _delete_session(self, session_id: str, ref: str) -> None:
        for seq in range(1, self._heads[ref].next_seq):
            entry_id = self._by_seq.pop((ref, seq))
            stored = self._entries.pop((ref, entry_id))
            self._children_of.pop((ref, stored.entry.parent_id), None)
        del self._order[self._rows[ref].key]
        del self._rows[ref], self._heads[ref], self._summaries[ref]

    def _store_head(self, ref: str, head: Head) -> None:
        self._heads[ref] = head

    def _store_summary(
        self, ref: str, summary: SessionSummary, label_changes: Mapping[str, str | None]
    ) -> None:
        del label_changes  # the summary holds the labels
        self._summaries[ref] = summary

    def _listing(
        self, cwd: str | None, after: ListingKey | None, count: int
    ) -> builtins.list[tuple[ListingKey, SessionRecord]]:
        keys: builtins.list[tuple[ListingKey, str]] = []
        for session_id in self._order.values():
            row = self._rows[session_id]
            listing_key = (row.created_ms, row.key)
            if (after is None or listing_key < after) and (cwd is None or row.cwd == cwd):
                keys.append((listing_key, session_id))
        keys.sort(reverse=True)
        return [(key, self._record(sid, sid)) for key, sid in keys[:count]]

    def _search_entries(
        self, query: SearchQuery, cwd: str | None, start: tuple[int, ...] | None, count: int
    ) -> builtins.list[EntryRow]:
        """Every entry of every session, scored by BM25 over all of them."""
        found = [
            (self._rows[ref], ref, stored.entry)
            for (ref, _), stored in self._entries.items()
        ]
        texts = [entry_text(entry.payload) for _, _, entry in found]
        rows = [
            EntryRow(
                score, row.key, ref, entry.seq, entry.id, entry_type_of(entry),
                entry.timestamp_ms, entry.payload,
            )
            for (row, ref, entry), text, score
            in zip(found, texts, bm25_scores(query, texts), strict=True)
            if (cwd is None or row.cwd == cwd) and matches(query, document_tokens(text))
        ]
        return after(rows, EntryRow.position, start, entry_sort_key)[:count]

    # -- entries ---------------------------------------------------------------------------------

    def _put(self, ref: str, stored: _Stored) -> None:
        entry = stored.entry
        self._entries[(ref, entry.id)] = stored
        self._by_seq[(ref, entry.seq)] = entry.id
        siblings = self._children_of.get((ref, entry.parent_id), ())
        self._children_of[(ref, entry.parent_id)] = (*siblings, entry.id)

    def _has_entry(self, ref: str, entry_id: str) -> bool:
        return (ref, entry_id) in self._entries

    def _tree(self, ref: str, batch: ValidBatch) -> _Tree:
        del batch  # every entry is at hand
        return _Tree(self._entries, ref)

    def _insert_entries(self, ref: str, plan: AppendPlan) -> None:
        for planned in plan.entries:
            self._put(ref, _Stored(entry_record(planned), planned.state))

    def _copy_path(self, source: str, target: str, ref: str) -> builtins.list[tuple[str, Any]]:
        copied: builtins.list[tuple[str, Any]] = []
        path = self._walk(source, target, to_root=True)
        for seq, entry in enumerate(path, start=1):
            state = self._entries[(source, entry.id)].state
            self._put(ref, _Stored(attrs.evolve(entry, seq=seq), state))
            copied.append((entry.type, entry.payload))
        return copied

    def _walk(self, ref: str, entry_id: str, *, to_root: bool) -> builtins.list[Entry]:
        entries = self._entries

        def lookup(wanted: str) -> Entry | None:
            stored = entries.get((ref, wanted))
            return None if stored is None else stored.entry

        return walk_path(entry_id, lookup, to_root=to_root) or []

    def _entry(self, ref: str, entry_id: str) -> Entry | None:
        stored = self._entries.get((ref, entry_id))
        return None if stored is None else stored.entry

    def _children(self, ref: str, entry_id: str | None) -> tuple[Entry, ...]:
        ids = self._children_of.get((ref, entry_id), ())
        return tuple(self._entries[(ref, child)].entry for child in ids)

    def _path(self, ref: str, entry_id: str, *, to_root: bool) -> tuple[Entry, ...] | None:
        if (ref, entry_id) not in self._entries:
            return None
        return tuple(self._walk(ref, entry_id, to_root=to_root))

    def _entry_range(self, ref: str, after_seq: int, stop: int) -> tuple[Entry, ...]:
        entries, by_seq = self._entries, self._by_seq
        return tuple(
            entries[(ref, by_seq[(ref, seq)])].entry for seq in range(after_seq + 1, stop + 1)
        )

    def _context_path(
        self, ref: str, target: str
    ) -> tuple[EntryState, builtins.list[Entry]] | None:
        stored = self._entries.get((ref, target))
        if stored is None:
            return None
        return stored.state, self._walk(ref, target, to_root=False)


@attrs.frozen
class _Tree:
    """The stored entries of one in-memory session, as :func:`decide_append` asks."""

    _entries: Mapping[tuple[str, str], _Stored]
    _ref: str

    def node(self, entry_id: str) -> Node | None:
        stored = self._entries.get((self._ref, entry_id))
        return None if stored is None else Node(stored.entry.parent_id, stored.state)

    def reaches(self, start: str, candidate: str) -> bool:
        current: str | None = start
        while current is not None:
            if current == candidate:
                return True
            current = self._entries[(self._ref, current)].entry.parent_id
        return False


InMemorySessionStorage = BoundSession
"""The :class:`~runstore.services.SessionStorage` of one in-memory session."""


def in_memory_sessions() -> Layer:
    """A layer providing :class:`~runstore.services.SessionRepository` in memory."""

    def scoped(c: Any) -> Iterator[InMemorySessionRepository]:
        repository = InMemorySessionRepository(c.get(InMemoryDatabase), c.get(Clock))
        yield repository
        repository.close()  # later calls: StorageFailure(kind=closed), as on SQLite

    return Layer.service(SESSION_REPOSITORY, scoped, requires=(InMemoryDatabase, Clock))


_check_repository: Callable[[InMemoryDatabase, Clock], SessionRepository] = (
    InMemorySessionRepository
)
_check_storage: Callable[[InMemorySessionRepository, SessionId], SessionStorage] = BoundSession
