"""The one flow of every sessions layer; each backend supplies only storage and queries.

:class:`SessionLayer` implements :class:`~runstore.services.SessionRepository` (and, through
:class:`BoundSession`, :class:`~runstore.services.SessionStorage`) once. Each method reads::

    validate (rules) -> unit of work -> load facts (backend) -> decide (rules)
                     -> apply (backend) -> row to record (rules)

where the rules are those of :mod:`runstore.services._sessions_rules` and a backend (the
in-memory and the SQLite layers) implements the abstract storage methods below, each a plain
read or write of its own store, called inside the unit of work the flow opened. ``R`` is the
backend's reference to a stored session (an in-memory id, an SQLite key).
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import attrs
from returns.result import Failure, Result, Success

from runstore.services._primitives import type_refusal
from runstore.services._search_rules import (
    ENTRY_CURSOR,
    EntryRow,
    SearchQuery,
    check_search_request,
    entry_hit,
    hits_page,
)
from runstore.services._sessions_rules import (
    AppendPlan,
    Head,
    ListingKey,
    SessionFields,
    TreeFacts,
    ValidBatch,
    assemble_context,
    check_entries_page,
    check_fork,
    check_listing,
    decide_append,
    decide_create,
    decide_fork,
    decide_leaf,
    entries_page,
    entries_window,
    entry_record,
    fold_entries,
    listing_page,
    new_session_fields,
    no_entry,
    no_session,
    session_record,
    validate_batch,
)
from runstore.services.clock import Clock
from runstore.services.errors import Busy, StorageFailure, StorageFailureKind
from runstore.services.pagination import Page
from runstore.services.search import EntryHit
from runstore.services.sessions import (
    ROOT_STATE,
    BranchMove,
    Entry,
    EntryId,
    EntryState,
    NewEntry,
    NewSession,
    SessionContext,
    SessionError,
    SessionId,
    SessionRecord,
    SessionStorage,
    SessionSummary,
)

__all__ = ["BoundSession", "SessionLayer"]

R = TypeVar("R")
T = TypeVar("T")
E = TypeVar("E")


class SessionLayer(ABC, Generic[R]):
    """:class:`~runstore.services.SessionRepository` over a backend (see the module doc).

    Once :meth:`close` ran (its container closed), every unit returns ``StorageFailure`` of
    kind ``closed`` instead of reaching the store.
    """

    _clock: Clock
    _closed: bool = False

    def close(self) -> None:
        """Refuse every later call with ``StorageFailure(kind=closed)`` (idempotent)."""
        self._closed = True

    def _refused(self, operation: str) -> StorageFailure:
        return StorageFailure(
            operation, StorageFailureKind.CLOSED, 0, "the session store was closed", "sessions"
        )

    def _write(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        """``fn`` as a write unit of the backend, unless the layer was closed."""
        if self._closed:
            return Failure(self._refused(operation))
        return self._transact(operation, fn)

    def _query(
        self, operation: str, fn: Callable[[], Result[T, SessionError]]
    ) -> Result[T, SessionError]:
        """``fn`` as a read unit of the backend, unless the layer was closed."""
        if self._closed:
            return Failure(self._refused(operation))
        return self._read(operation, fn)

    # -- what a backend provides: units of work ---------------------------------------------------

    @abstractmethod
    def _transact(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        """Run ``fn`` as a write unit of work named ``operation``."""

    @abstractmethod
    def _read(
        self, operation: str, fn: Callable[[], Result[T, SessionError]]
    ) -> Result[T, SessionError]:
        """Run ``fn`` as a read unit named ``operation``."""

    # -- what a backend provides: storage (called inside a unit) ----------------------------------

    @abstractmethod
    def _search_entries(
        self, query: SearchQuery, cwd: str | None, start: tuple[int, ...] | None, count: int
    ) -> Sequence[EntryRow]:
        """The first ``count`` entries (of sessions of ``cwd`` when given) matching ``query``
        after the cursor position ``start``, in the listing's order."""

    @abstractmethod
    def _find(self, session_id: str) -> R | None:
        """The stored session ``session_id`` (any object: an id no store holds is None)."""

    @abstractmethod
    def _head(self, ref: R) -> Head:
        """The entry counter and active leaf of a stored session."""

    @abstractmethod
    def _summary(self, ref: R) -> SessionSummary:
        """The materialized summary of a stored session."""

    @abstractmethod
    def _session_row(self, ref: R) -> tuple[str, str | None, str, int]:
        """(cwd, parent session, metadata JSON text, created ms) of a stored session."""

    @abstractmethod
    def _insert_session(self, fields: SessionFields) -> R:
        """Store a new session without entries (head :data:`FRESH_HEAD`, empty summary)."""

    @abstractmethod
    def _delete_session(self, session_id: str, ref: R) -> None:
        """Delete the stored session ``session_id`` and every row of it."""

    @abstractmethod
    def _has_entry(self, ref: R, entry_id: str) -> bool:
        """Whether the session holds ``entry_id`` (any object)."""

    @abstractmethod
    def _tree(self, ref: R, batch: ValidBatch) -> TreeFacts:
        """The stored entries :func:`decide_append` asks about for ``batch``."""

    @abstractmethod
    def _insert_entries(self, ref: R, plan: AppendPlan) -> None:
        """Store the entries of an accepted append (the head and summary follow)."""

    @abstractmethod
    def _copy_path(self, source: R, target: str, ref: R) -> Sequence[tuple[str, Any]]:
        """Copy the path from the root to ``target`` of ``source`` into the new session
        ``ref`` (numbered 1..n, states kept); return the (type, payload) of each copy."""

    @abstractmethod
    def _store_head(self, ref: R, head: Head) -> None:
        """Store a session's entry counter and active leaf."""

    @abstractmethod
    def _store_summary(
        self, ref: R, summary: SessionSummary, label_changes: Mapping[str, str | None]
    ) -> None:
        """Store a session's summary; ``label_changes`` are its labels that changed."""

    @abstractmethod
    def _listing(
        self, cwd: str | None, after: ListingKey | None, count: int
    ) -> Sequence[tuple[ListingKey, SessionRecord]]:
        """Up to ``count`` sessions in descending :data:`ListingKey` order (created ms, then
        store key), with keys below ``after`` (None: all), only those of ``cwd`` when given:
        (key, record) pairs."""

    @abstractmethod
    def _entry(self, ref: R, entry_id: str) -> Entry | None:
        """One stored entry, or None."""

    @abstractmethod
    def _children(self, ref: R, entry_id: str | None) -> tuple[Entry, ...]:
        """The children of an entry (of the roots for None), in ``seq`` order."""

    @abstractmethod
    def _path(self, ref: R, entry_id: str, *, to_root: bool) -> tuple[Entry, ...] | None:
        """The path from the root (or from where :func:`walk_step` stops, unless
        ``to_root``) to ``entry_id``; None when the session has no such entry."""

    @abstractmethod
    def _entry_range(self, ref: R, after_seq: int, stop: int) -> tuple[Entry, ...]:
        """The entries with ``after_seq < seq <= stop``, in ``seq`` order."""

    @abstractmethod
    def _context_path(self, ref: R, target: str) -> tuple[EntryState, Sequence[Entry]] | None:
        """The state at ``target`` and the path to it from where :func:`walk_step` stops,
        with the payloads :func:`assemble_context` reads; None when the session has no such
        entry."""

    # -- the repository ---------------------------------------------------------------------------

    def _record(self, session_id: str, ref: R) -> SessionRecord:
        cwd, parent, metadata, created = self._session_row(ref)
        return session_record(
            session_id, cwd, parent, metadata, created, self._head(ref), self._summary(ref)
        )

    def _record_of(self, session_id: str) -> Result[SessionRecord, SessionError]:
        ref = self._find(session_id)
        if ref is None:
            return Failure(no_session(session_id))
        return Success(self._record(session_id, ref))

    def create(self, new: NewSession) -> Result[SessionRecord, SessionError]:
        if (refused := type_refusal(NewSession, new=new)) is not None:
            return refused
        checked = new_session_fields(new, self._clock.now_ms(), str(uuid.uuid4()))
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        fields = checked.unwrap()

        def unit() -> Result[SessionRecord, SessionError]:
            decided = decide_create(fields, self._find(fields.id) is not None)
            return decided.map(lambda _: self._record(fields.id, self._insert_session(fields)))

        return self._write("create session", unit)

    def get(self, session_id: str) -> Result[SessionRecord, SessionError]:
        if (refused := type_refusal(str, session_id=session_id)) is not None:
            return refused
        return self._query("get session", lambda: self._record_of(session_id))

    def list(
        self, cwd: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> Result[Page[SessionRecord], SessionError]:
        if (refused := type_refusal((str, None), cwd=cwd)) is not None:
            return refused
        checked = check_listing(limit, cursor)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        after = checked.unwrap()
        return self._query(
            "list sessions",
            lambda: Success(listing_page(self._listing(cwd, after, limit + 1), limit)),
        )

    def search(
        self,
        text: str,
        *,
        cwd: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> Result[Page[EntryHit], SessionError]:
        """See ``SessionRepository.search``: check, find ``limit + 1`` rows in one read, make
        the hits (rules)."""
        checked = check_search_request(text, limit, cursor, ENTRY_CURSOR, cwd=cwd)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        query, start = checked.unwrap()
        return self._query(
            "search sessions",
            lambda: Success(
                hits_page(
                    self._search_entries(query, cwd, start, limit + 1),
                    limit, ENTRY_CURSOR, EntryRow.position, entry_hit, query,
                )
            ),
        )

    def open(self, session_id: str) -> Result[SessionStorage, SessionError]:
        if (refused := type_refusal(str, session_id=session_id)) is not None:
            return refused
        def read() -> Result[SessionStorage, SessionError]:
            if self._find(session_id) is None:
                return Failure(no_session(session_id))
            return Success(BoundSession(self, SessionId(session_id)))

        return self._query("open session", read)

    def delete(self, session_id: str) -> Result[int, SessionError]:
        if (refused := type_refusal(str, session_id=session_id)) is not None:
            return refused
        def unit() -> Result[int, SessionError]:
            ref = self._find(session_id)
            if ref is None:
                return Failure(no_session(session_id))
            count = self._head(ref).entry_count
            self._delete_session(session_id, ref)
            return Success(count)

        return self._write("delete session", unit)

    def fork(
        self,
        source: str,
        *,
        at_entry: str | None = None,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        cwd: str | None = None,
    ) -> Result[SessionRecord, SessionError]:
        if (refused := type_refusal(str, source=source)) is not None:
            return refused
        if (refused := type_refusal((str, None), at_entry=at_entry)) is not None:
            return refused
        checked = check_fork(metadata, session_id, str(uuid.uuid4()), cwd)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        metadata_text, new_id, new_cwd = checked.unwrap()

        def unit() -> Result[SessionRecord, SessionError]:
            source_ref = self._find(source)
            if source_ref is None:
                return Failure(no_session(source))
            decided = decide_fork(
                self._head(source_ref),
                at_entry,
                lambda entry_id: self._has_entry(source_ref, entry_id),
                new_id,
                lambda taken: self._find(taken) is not None,
            )
            if isinstance(decided, Failure):
                return Failure(decided.failure())
            target = decided.unwrap()
            source_cwd, _, source_metadata, _ = self._session_row(source_ref)
            ref = self._insert_session(
                SessionFields(
                    new_id,
                    source_cwd if new_cwd is None else new_cwd,
                    source,
                    source_metadata if metadata_text is None else metadata_text,
                    self._clock.now_ms(),
                )
            )
            if target is not None:
                copied = self._copy_path(source_ref, target, ref)
                summary = fold_entries(copied)
                self._store_head(ref, Head(len(copied) + 1, target))
                self._store_summary(ref, summary, dict(summary.labels))
            return Success(self._record(new_id, ref))

        return self._write("fork session", unit)

    def atomic(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        return self._write(operation, fn)

    # -- one session ------------------------------------------------------------------------------

    def append_many(
        self,
        session_id: str,
        entries: Sequence[NewEntry],
        *,
        batch: bool,
        strict_compactions: bool = True,
    ) -> Result[AppendPlan, SessionError]:
        """Append ``entries`` to ``session_id``; return what was appended."""
        checked = validate_batch(entries, batch=batch)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        valid = checked.unwrap()

        def unit() -> Result[AppendPlan, SessionError]:
            ref = self._find(session_id)
            if ref is None:
                return Failure(no_session(session_id))
            return self._apply(session_id, ref, valid, strict_compactions)

        return self._write("append entries", unit)

    def _apply(
        self, session_id: str, ref: R, valid: ValidBatch, strict_compactions: bool
    ) -> Result[AppendPlan, SessionError]:
        """Decide and store a checked batch, inside the caller's unit of work."""
        decided = decide_append(
            session_id,
            self._head(ref),
            self._summary(ref),
            valid,
            self._tree(ref, valid),
            strict_compactions=strict_compactions,
        )
        if isinstance(decided, Failure):
            return decided
        plan = decided.unwrap()
        if plan.entries:
            # The caches are written with the rows; a unit that fails after this point
            # (a statement below, a later call in the same unit, COMMIT) undoes both.
            self._insert_entries(ref, plan)
            self._store_head(ref, plan.head)
            self._store_summary(ref, plan.summary, plan.label_changes)
        return Success(plan)

    def move_to(
        self, session_id: str, entry_id: str | None, summary: BranchMove | None
    ) -> Result[AppendPlan, SessionError]:
        """Append the leaf move (and branch summary) :func:`decide_leaf` plans."""

        def unit() -> Result[AppendPlan, SessionError]:
            ref = self._find(session_id)
            if ref is None:
                return Failure(no_session(session_id))
            decided = decide_leaf(
                self._head(ref),
                entry_id,
                lambda wanted: self._has_entry(ref, wanted),
                self._clock.now_ms(),
                summary,
            )
            if isinstance(decided, Failure):
                return Failure(decided.failure())
            checked = validate_batch(decided.unwrap(), batch=False)
            if isinstance(checked, Failure):
                return Failure(checked.failure())
            valid = checked.unwrap()
            if valid.refused is not None:
                field = valid.refused.field.removeprefix("payload.")
                return Failure(attrs.evolve(valid.refused, field=f"summary.{field}"))
            return self._apply(session_id, ref, valid, True)

        return self._write("move leaf", unit)

    def _in_session(
        self, operation: str, session_id: str, fn: Callable[[R], Result[T, SessionError]]
    ) -> Result[T, SessionError]:
        """Read ``fn(ref)`` of a stored session, or ``NotFound("session")``."""

        def read() -> Result[T, SessionError]:
            ref = self._find(session_id)
            if ref is None:
                return Failure(no_session(session_id))
            return fn(ref)

        return self._query(operation, read)

    def entry(self, session_id: str, entry_id: str) -> Result[Entry, SessionError]:
        def read(ref: R) -> Result[Entry, SessionError]:
            found = self._entry(ref, entry_id)
            return Failure(no_entry(entry_id)) if found is None else Success(found)

        return self._in_session("read entry", session_id, read)

    def children(
        self, session_id: str, entry_id: str | None
    ) -> Result[tuple[Entry, ...], SessionError]:
        def read(ref: R) -> Result[tuple[Entry, ...], SessionError]:
            if entry_id is not None and not self._has_entry(ref, entry_id):
                return Failure(no_entry(entry_id))
            return Success(self._children(ref, entry_id))

        return self._in_session("read children", session_id, read)

    def path(
        self, session_id: str, entry_id: str, *, to_root: bool
    ) -> Result[tuple[Entry, ...], SessionError]:
        def read(ref: R) -> Result[tuple[Entry, ...], SessionError]:
            found = self._path(ref, entry_id, to_root=to_root)
            return Failure(no_entry(entry_id)) if found is None else Success(found)

        return self._in_session("read path", session_id, read)

    def entries(
        self, session_id: str, after_seq: int, limit: int
    ) -> Result[Page[Entry], SessionError]:
        checked = check_entries_page(after_seq, limit)
        if isinstance(checked, Failure):
            return Failure(checked.failure())

        def read(ref: R) -> Result[Page[Entry], SessionError]:
            stop, has_more = entries_window(self._head(ref), after_seq, limit)
            return Success(entries_page(self._entry_range(ref, after_seq, stop), stop, has_more))

        return self._in_session("read entries", session_id, read)

    def build_context(
        self, session_id: str, leaf: str | None
    ) -> Result[SessionContext, SessionError]:
        def read(ref: R) -> Result[SessionContext, SessionError]:
            target = self._head(ref).leaf_id if leaf is None else leaf
            if target is None:
                return Success(assemble_context(None, (), ROOT_STATE))
            found = self._context_path(ref, target)
            if found is None:
                return Failure(no_entry(target))
            state, path = found
            return Success(assemble_context(EntryId(target), path, state))

        return self._in_session("build context", session_id, read)

    def record(self, session_id: str) -> Result[SessionRecord, SessionError]:
        """The record of ``session_id`` (for :class:`BoundSession`)."""
        return self.get(session_id)


@attrs.frozen
class BoundSession:
    """:class:`~runstore.services.SessionStorage` of one session of a :class:`SessionLayer`."""

    _layer: SessionLayer[Any]
    _session_id: SessionId

    @property
    def session_id(self) -> SessionId:
        return self._session_id

    def info(self) -> Result[SessionRecord, SessionError]:
        return self._layer.record(self._session_id)

    def summary(self) -> Result[SessionSummary, SessionError]:
        return self._layer.record(self._session_id).map(lambda record: record.summary)

    def leaf(self) -> Result[EntryId | None, SessionError]:
        return self._layer.record(self._session_id).map(lambda record: record.leaf_id)

    def append(self, entry: NewEntry) -> Result[Entry, SessionError]:
        return self._layer.append_many(self._session_id, [entry], batch=False).map(
            lambda plan: entry_record(plan.entries[0])
        )

    def append_many(
        self, entries: Sequence[NewEntry], *, strict_compactions: bool = True
    ) -> Result[int, SessionError]:
        if (refused := type_refusal(bool, strict_compactions=strict_compactions)) is not None:
            return refused
        return self._layer.append_many(
            self._session_id, entries, batch=True, strict_compactions=strict_compactions
        ).map(lambda plan: len(plan.entries))

    def set_leaf(self, entry_id: str | None) -> Result[EntryId | None, SessionError]:
        if (refused := type_refusal((str, None), entry_id=entry_id)) is not None:
            return refused
        return self._layer.move_to(self._session_id, entry_id, None).map(
            lambda _: None if entry_id is None else EntryId(entry_id)
        )

    def move_to(
        self, entry_id: str | None, summary: BranchMove | None = None
    ) -> Result[Entry | None, SessionError]:
        if (refused := type_refusal((str, None), entry_id=entry_id)) is not None:
            return refused
        if (refused := type_refusal((BranchMove, None), summary=summary)) is not None:
            return refused
        return self._layer.move_to(self._session_id, entry_id, summary).map(
            lambda plan: entry_record(plan.entries[1]) if len(plan.entries) > 1 else None
        )

    def entry(self, entry_id: str) -> Result[Entry, SessionError]:
        if (refused := type_refusal(str, entry_id=entry_id)) is not None:
            return refused
        return self._layer.entry(self._session_id, entry_id)

    def children(self, entry_id: str | None) -> Result[tuple[Entry, ...], SessionError]:
        if (refused := type_refusal((str, None), entry_id=entry_id)) is not None:
            return refused
        return self._layer.children(self._session_id, entry_id)

    def path_to_root(self, entry_id: str) -> Result[tuple[Entry, ...], SessionError]:
        if (refused := type_refusal(str, entry_id=entry_id)) is not None:
            return refused
        return self._layer.path(self._session_id, entry_id, to_root=True)

    def path_to_root_or_compaction(self, entry_id: str) -> Result[tuple[Entry, ...], SessionError]:
        if (refused := type_refusal(str, entry_id=entry_id)) is not None:
            return refused
        return self._layer.path(self._session_id, entry_id, to_root=False)

    def entries(self, after_seq: int = 0, limit: int = 100) -> Result[Page[Entry], SessionError]:
        return self._layer.entries(self._session_id, after_seq, limit)

    def build_context(self, leaf: str | None = None) -> Result[SessionContext, SessionError]:
        if (refused := type_refusal((str, None), leaf=leaf)) is not None:
            return refused
        return self._layer.build_context(self._session_id, leaf)


_check_storage: Callable[[SessionLayer[Any], SessionId], SessionStorage] = BoundSession
