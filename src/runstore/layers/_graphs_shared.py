"""The method skeleton every graph checkpoint backend shares; each backend adds its storage.

Every method of :class:`~runstore.services.graphs.GraphCheckpointStore` reads the same in
every backend::

    validate (rules) -> unit of work -> load facts (backend) -> decide (rules)
                     -> apply (backend) -> row to record (rules)

so it is written here once, over :mod:`runstore.services._graphs_rules`, and a backend (in
memory, SQLite, PostgreSQL) implements only the abstract hooks: how it finds, stores and
deletes rows. A hook runs inside the method's unit of work. Agent threads are found by the
backend (:meth:`GraphStoreBase._thread`) and created through the container's
:class:`~runstore.services.AgentStorage`, in the same unit of work, so the rules of a thread
live in the agents domain alone.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol, TypeVar

from returns.result import Failure, Result, Success

from runstore.layers._agents_shared import _Units
from runstore.services import _graphs_rules as rules
from runstore.services._primitives import JsonValue, and_then, decode_json
from runstore.services.agents import AgentStorage, InvalidQuery
from runstore.services.clock import Clock
from runstore.services.errors import (
    Busy,
    Conflict,
    InvalidInput,
    NotFound,
    StorageFailure,
)
from runstore.services.graphs import (
    ChannelValue,
    GraphCheckpoint,
    GraphError,
    GraphWrite,
    NewGraphCheckpoint,
    PendingWrite,
    PruneStrategy,
)

__all__ = ["GraphStoreBase", "Place", "StoredCheckpoint"]

Place = tuple[int, str, str]
"""A checkpoint's thread key, namespace and id: where its pending writes are stored, whether
the checkpoint is stored yet or not."""

T = TypeVar("T")
E = TypeVar("E")


class StoredCheckpoint(Protocol):
    """What :meth:`GraphStoreBase._rows` returns per checkpoint."""

    @property
    def thread_key(self) -> int: ...
    @property
    def thread_id(self) -> str: ...
    @property
    def checkpoint_ns(self) -> str: ...
    @property
    def row(self) -> rules.CheckpointRow: ...


_GRAPH_ERRORS = (NotFound, Conflict, InvalidInput, InvalidQuery, Busy, StorageFailure)


def _as_graph_error(error: object) -> GraphError:
    """An agent store's failure where a graph write needed a thread: the same value (the
    agents' union beyond the graph one cannot come from creating a thread)."""
    assert isinstance(error, _GRAPH_ERRORS), error
    return error


class GraphStoreBase(ABC):
    """:class:`~runstore.services.graphs.GraphCheckpointStore` on a backend's hooks."""

    _db: _Units
    _clock: Clock
    _agents: AgentStorage

    # -- hooks -----------------------------------------------------------------------------

    @abstractmethod
    def _thread(self, thread_id: str) -> rules.GraphThread | None:
        """The agent thread ``thread_id``, None when there is none."""

    def _lock(self, thread_ids: Sequence[str]) -> None:
        """Keep the graph rows of ``thread_ids`` (sorted, once each) to this write unit until
        it ends (a backend whose writers run at once takes locks; SQLite's and memory's units
        already run one at a time)."""
        del thread_ids

    @abstractmethod
    def _find(self, thread_key: int, checkpoint_ns: str, checkpoint_id: str) -> int | None:
        """The row key of a stored checkpoint, None when there is none."""

    @abstractmethod
    def _insert(
        self, thread: rules.GraphThread, checkpoint_ns: str, row: rules.CheckpointRow
    ) -> int:
        """Store a new checkpoint and its channel versions; return its row key."""

    @abstractmethod
    def _replace(self, key: int, row: rules.CheckpointRow) -> None:
        """Store ``row`` over checkpoint ``key`` (channel versions replaced), keeping its
        ``created_at_ms`` and pending writes."""

    @abstractmethod
    def _store_blobs(
        self, thread_key: int, checkpoint_ns: str, blobs: Sequence[rules.Blob]
    ) -> None:
        """Store values, each replacing one stored under its channel and version."""

    @abstractmethod
    def _store_writes(self, at: Place, writes: Sequence[PendingWrite], *, replace: bool) -> None:
        """Store pending writes of the checkpoint ``at`` names (stored or not yet) in order,
        each replacing the one stored under its (task, idx) when ``replace``, else only when
        that key holds none."""

    @abstractmethod
    def _candidates(
        self, query: rules.ListQuery, thread_key: int | None, limit: int | None
    ) -> list[tuple[rules.Head, str]]:
        """The checkpoints ``query`` selects by thread (``thread_key``; None: every thread),
        namespace, id and ``before`` (not by its filter), with their metadata text, in
        :func:`rules.newest_first` order, at most ``limit`` (None: all)."""

    @abstractmethod
    def _rows(self, keys: Sequence[int]) -> Mapping[int, StoredCheckpoint]:
        """The stored checkpoints of row keys ``keys``."""

    @abstractmethod
    def _writes(self, keys: Sequence[int]) -> Mapping[int, Sequence[PendingWrite]]:
        """The pending writes of the stored checkpoints ``keys``: those stored under their
        thread, namespace and id (absent: none)."""

    @abstractmethod
    def _values(self, keys: Sequence[int]) -> Mapping[int, Mapping[tuple[str, str], ChannelValue]]:
        """For each checkpoint of ``keys``, the values its channel versions name that are
        stored, by ``(channel, version text)`` (absent: none)."""

    @abstractmethod
    def _thread_blobs(self, thread_key: int) -> Sequence[tuple[str, rules.Blob]]:
        """Every value stored for the thread, with its namespace."""

    @abstractmethod
    def _thread_heads(self, thread_keys: Sequence[int]) -> list[rules.Head]:
        """Every checkpoint of the threads ``thread_keys``."""

    @abstractmethod
    def _run_heads(self, run_ids: Sequence[str]) -> list[tuple[rules.Head, int]]:
        """Every checkpoint whose run is one of ``run_ids``, with its thread key."""

    @abstractmethod
    def _delete(self, keys: Sequence[int]) -> None:
        """Delete checkpoints ``keys`` with their channel versions and pending writes."""

    @abstractmethod
    def _delete_writes(self, thread_keys: Sequence[int]) -> None:
        """Delete every pending write of the threads, those of checkpoints not stored too."""

    @abstractmethod
    def _count_values(self) -> int:
        """How many channel values are stored, in every thread (for tests of collection)."""

    @abstractmethod
    def _collect(self, thread_keys: Sequence[int]) -> None:
        """Delete the values of the threads that no checkpoint of their namespace names."""

    # -- shared steps ----------------------------------------------------------------------

    def stored_values(self) -> Result[int, GraphError]:
        """How many channel values the store holds, in every live thread (rows). Not part of
        the Protocol: a value no checkpoint names is invisible through it, so the contract
        counts with this that prunes, deletes and copies collect them."""
        return self._db.read("count graph values", lambda: Success(self._count_values()))

    def _writable(
        self, thread_id: str, project_id: str | None, at_ms: int
    ) -> Result[rules.GraphThread, GraphError]:
        """The thread graph rows may be written to (:func:`rules.decide_thread`), created in
        ``project_id`` through the agent threads when missing (when a project is given)."""
        decided = rules.decide_thread(self._thread(thread_id), thread_id, project_id)
        if isinstance(decided, Failure):
            return Failure(decided.failure())
        thread = decided.unwrap()
        if thread is not None:
            return Success(thread)
        assert project_id is not None  # decide_thread refused a missing thread otherwise
        created = self._agents.threads.create(thread_id, project_id=project_id, at=at_ms)
        if isinstance(created, Failure):
            return Failure(_as_graph_error(created.failure()))
        made = self._thread(thread_id)
        assert made is not None, thread_id
        return Success(made)

    def _load(self, heads: Sequence[rules.Head]) -> tuple[GraphCheckpoint, ...]:
        """The records of ``heads``, in their order."""
        if not heads:
            return ()
        keys = [h.key for h in heads]
        rows, writes, values = self._rows(keys), self._writes(keys), self._values(keys)
        return tuple(
            rules.checkpoint_record(
                rows[k].thread_id,
                rows[k].checkpoint_ns,
                rows[k].row,
                values.get(k, {}),
                writes.get(k, ()),
            )
            for k in keys
        )

    def _select(self, query: rules.ListQuery) -> Result[tuple[GraphCheckpoint, ...], GraphError]:
        """The checkpoints a checked list (or get) query selects, in order."""
        thread_key: int | None = None
        if query.thread_id is not None:
            thread = self._thread(query.thread_id)
            if thread is None:
                return Success(())
            thread_key = thread.key
        if query.filter is None:
            chosen = [h for h, _ in self._candidates(query, thread_key, query.limit)]
        else:
            chosen = []
            for head, metadata in self._candidates(query, thread_key, None):
                if query.limit is not None and len(chosen) >= query.limit:
                    break
                decoded = decode_json(metadata)
                assert isinstance(decoded, dict)
                if rules.metadata_matches(decoded, query.filter):
                    chosen.append(head)
        return Success(self._load(chosen))

    def _drop(self, heads: Sequence[rules.Head], thread_keys: Sequence[int]) -> int:
        """Delete checkpoints, then the values of ``thread_keys`` no checkpoint names."""
        keys = sorted(h.key for h in heads)
        if keys:
            self._delete(keys)
            self._collect(sorted(set(thread_keys)))
        return len(keys)

    # -- the Protocol ----------------------------------------------------------------------

    def put(
        self,
        thread_id: str,
        checkpoint: NewGraphCheckpoint,
        *,
        project_id: str,
        checkpoint_ns: str = "",
        at: datetime | int | None = None,
    ) -> Result[None, GraphError]:
        """Store a checkpoint with its versions and values (see ``GraphCheckpointStore.put``)."""
        checked = rules.check_put(thread_id, checkpoint, project_id, checkpoint_ns, at, self._clock)
        return and_then(
            checked,
            lambda draft: self._db.transact("put graph checkpoint", lambda: self._put(draft)),
        )

    def _put(self, draft: rules.CheckpointDraft) -> Result[None, GraphError]:
        self._lock((draft.thread_id,))
        found = self._writable(draft.thread_id, draft.project_id, draft.row.created_at_ms)
        if isinstance(found, Failure):
            return Failure(found.failure())
        thread, ns = found.unwrap(), draft.checkpoint_ns
        thread_key = thread.key
        key = self._find(thread_key, ns, draft.row.checkpoint_id)
        if key is None:
            self._insert(thread, ns, draft.row)
        else:
            self._replace(key, draft.row)
        if draft.blobs:
            self._store_blobs(thread_key, ns, draft.blobs)
        return Success(None)

    def put_writes(
        self,
        thread_id: str,
        writes: Sequence[GraphWrite],
        *,
        checkpoint_id: str,
        task_id: str,
        task_path: str = "",
        checkpoint_ns: str = "",
        project_id: str | None = None,
    ) -> Result[None, GraphError]:
        """Store a task's pending writes (see ``GraphCheckpointStore.put_writes``)."""
        checked = rules.check_put_writes(
            thread_id, writes, checkpoint_id, task_id, task_path, checkpoint_ns, project_id
        )
        return and_then(
            checked,
            lambda draft: self._db.transact("put graph writes", lambda: self._put_writes(draft)),
        )

    def _put_writes(self, draft: rules.WriteDraft) -> Result[None, GraphError]:
        self._lock((draft.thread_id,))
        found = self._writable(draft.thread_id, draft.project_id, self._clock.now_ms())
        if isinstance(found, Failure):
            return Failure(found.failure())
        thread_key, ns, checkpoint_id = found.unwrap().key, draft.checkpoint_ns, draft.checkpoint_id
        for group, replace in zip(rules.split_writes(draft.writes), (True, False), strict=True):
            if group:
                pending = [
                    PendingWrite(draft.task_id, draft.task_path, w.idx, w.channel, w.value)
                    for w in group
                ]
                self._store_writes((thread_key, ns, checkpoint_id), pending, replace=replace)
        return Success(None)

    def get(
        self,
        thread_id: str,
        *,
        checkpoint_ns: str = "",
        checkpoint_id: str | None = None,
    ) -> Result[GraphCheckpoint | None, GraphError]:
        """Return one checkpoint or the newest (see ``GraphCheckpointStore.get``)."""
        checked = rules.check_get(thread_id, checkpoint_ns, checkpoint_id)
        return and_then(
            checked,
            lambda query: self._db.read(
                "get graph checkpoint",
                lambda: self._select(query).map(lambda found: found[0] if found else None),
            ),
        )

    def list(
        self,
        thread_id: str | None,
        *,
        checkpoint_ns: str | None = None,
        checkpoint_id: str | None = None,
        filter: Mapping[str, JsonValue] | None = None,  # the Protocol's name
        before: str | None = None,
        limit: int | None = None,
    ) -> Result[tuple[GraphCheckpoint, ...], GraphError]:
        """Return the matching checkpoints, newest first (see ``GraphCheckpointStore.list``)."""
        checked = rules.check_list(thread_id, checkpoint_ns, checkpoint_id, filter, before, limit)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        query = checked.unwrap()
        return self._db.read("list graph checkpoints", lambda: self._select(query))

    def delete_thread(self, thread_id: str) -> Result[int, GraphError]:
        """Delete a thread's graph rows (see ``GraphCheckpointStore.delete_thread``)."""
        return and_then(
            rules.check_thread_id(thread_id),
            lambda tid: self._db.transact(
                "delete graph thread", lambda: Success(self._prune((tid,), PruneStrategy.DELETE))
            ),
        )

    def delete_for_runs(self, run_ids: Sequence[str]) -> Result[int, GraphError]:
        """Delete the checkpoints of runs (see ``GraphCheckpointStore.delete_for_runs``)."""
        return and_then(
            rules.check_run_ids(run_ids),
            lambda ids: self._db.transact(
                "delete graph checkpoints of runs", lambda: Success(self._delete_runs(ids))
            ),
        )

    def _delete_runs(self, run_ids: Sequence[str]) -> int:
        if not run_ids:
            return 0
        found = self._run_heads(run_ids)
        self._lock(sorted({h.thread_id for h, _ in found}))
        found = self._run_heads(run_ids)  # again, under the locks
        return self._drop([h for h, _ in found], [k for _, k in found])

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> Result[int, GraphError]:
        """Copy a thread's checkpoints (see ``GraphCheckpointStore.copy_thread``)."""
        return and_then(
            rules.check_copy(source_thread_id, target_thread_id),
            lambda ids: self._db.transact("copy graph thread", lambda: self._copy(*ids)),
        )

    def _copy(self, source_id: str, target_id: str) -> Result[int, GraphError]:
        self._lock(sorted((source_id, target_id)))
        source = self._thread(source_id)
        heads = [] if source is None else self._thread_heads([source.key])
        if source is None or not heads:
            return Success(0)
        decided = rules.decide_copy_target(source, self._thread(target_id), target_id)
        if isinstance(decided, Failure):
            return Failure(decided.failure())
        target = self._writable(target_id, source.project_id, self._clock.now_ms())
        if isinstance(target, Failure):
            return Failure(target.failure())
        target_thread = target.unwrap()
        target_key = target_thread.key
        keys = sorted(h.key for h in heads)
        rows, writes = self._rows(keys), self._writes(keys)
        replaced = False
        for key in keys:
            stored = rows[key]
            ns, row = stored.checkpoint_ns, stored.row
            existing = self._find(target_key, ns, row.checkpoint_id)
            if existing is not None:
                self._delete([existing])
                replaced = True
            self._insert(target_thread, ns, row)
            if writes.get(key):
                self._store_writes((target_key, ns, row.checkpoint_id), writes[key], replace=True)
        by_ns: dict[str, list[rules.Blob]] = {}
        for ns, blob in self._thread_blobs(source.key):
            by_ns.setdefault(ns, []).append(blob)
        for ns, blobs in by_ns.items():
            self._store_blobs(target_key, ns, blobs)
        if replaced:  # the values only the replaced checkpoints named
            self._collect([target_key])
        return Success(len(keys))

    def prune(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: PruneStrategy | str = PruneStrategy.KEEP_LATEST,
    ) -> Result[int, GraphError]:
        """Thin threads' checkpoints (see ``GraphCheckpointStore.prune``)."""
        return and_then(
            rules.check_prune(thread_ids, strategy),
            lambda checked: self._db.transact(
                "prune graph threads", lambda: Success(self._prune(*checked))
            ),
        )

    def _prune(self, thread_ids: Sequence[str], strategy: PruneStrategy) -> int:
        if not thread_ids:
            return 0
        self._lock(sorted(thread_ids))
        threads = [t for tid in thread_ids if (t := self._thread(tid)) is not None]
        thread_keys = [t.key for t in threads]
        if not thread_keys:
            return 0
        heads = self._thread_heads(thread_keys)
        doomed = set(rules.plan_prune(heads, strategy))
        if strategy is PruneStrategy.DELETE:  # writes of checkpoints never put go too
            self._delete_writes(sorted(thread_keys))
        return self._drop([h for h in heads if h.key in doomed], thread_keys)
