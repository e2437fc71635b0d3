"""The in-memory graph checkpoint store: the reference the contract suite compares every layer
with.

All state lives in :class:`~runstore.layers.TxDict` mirrors of the container's
:class:`InMemoryDatabase`, and every write runs as one of its units of work, so a write that
fails leaves every mirror as it was. Agent threads are the container's in-memory
:class:`~runstore.services.AgentStorage`'s; graph rows carry the thread's ``seq`` (never
reused), so the rows of a thread that was deleted (and perhaps made again) are never seen
through the new one, and the cross-thread reads drop them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs
from returns.result import Success

from runstore.layers._graphs_shared import GraphStoreBase, Place
from runstore.layers._layer import Container, Layer
from runstore.layers._memory_database import InMemoryDatabase
from runstore.layers._tags import AGENT_STORAGE, CLOCK, GRAPH_CHECKPOINTS
from runstore.layers._unit_of_work import TxDict
from runstore.services import _graphs_rules as rules
from runstore.services.agents import AgentStorage, ThreadStatus
from runstore.services.clock import Clock
from runstore.services.graphs import ChannelValue, GraphCheckpointStore, PendingWrite

__all__ = ["InMemoryGraphCheckpointStore", "in_memory_graphs"]


@attrs.frozen
class _Stored:
    """One checkpoint in memory (a :class:`~runstore.layers._graphs_shared.StoredCheckpoint`)."""

    thread_key: int
    thread_id: str
    checkpoint_ns: str
    row: rules.CheckpointRow


class InMemoryGraphCheckpointStore(GraphStoreBase):
    """Graph checkpoints in memory; see :class:`~runstore.services.GraphCheckpointStore`."""

    def __init__(self, db: InMemoryDatabase, clock: Clock, agents: AgentStorage) -> None:
        self._db = db
        self._clock = clock
        self._agents = agents
        self._checkpoints: TxDict[int, _Stored] = db.mirror()
        self._index: TxDict[tuple[int, str, str], int] = db.mirror()
        self._blobs: TxDict[tuple[int, str, str, str], ChannelValue] = db.mirror()
        # by (thread key, namespace, checkpoint id): writes may come before their checkpoint
        self._pending: TxDict[Place, tuple[PendingWrite, ...]] = db.mirror()
        self._keys: TxDict[str, int] = db.mirror()

    # -- threads -------------------------------------------------------------------------

    def _thread(self, thread_id: str) -> rules.GraphThread | None:
        found = self._agents.threads.get(thread_id)
        if not isinstance(found, Success):
            return None
        thread = found.unwrap()
        return rules.GraphThread(
            thread.id, thread.seq, thread.project_id, thread.status is ThreadStatus.ARCHIVED
        )

    def _purge(self) -> None:
        """Drop the rows of threads deleted since (their key is no live thread's)."""
        alive: dict[int, bool] = {}
        for key, stored in list(self._checkpoints.items()):
            live = alive.get(stored.thread_key)
            if live is None:
                thread = self._thread(stored.thread_id)
                live = alive[stored.thread_key] = (
                    thread is not None and thread.key == stored.thread_key
                )
            if not live:
                self._delete([key])
        for blob in [b for b in self._blobs if alive.get(b[0]) is False]:
            del self._blobs[blob]
        for place in [p for p in self._pending if alive.get(p[0]) is False]:
            del self._pending[place]

    # -- writes --------------------------------------------------------------------------

    def _find(self, thread_key: int, checkpoint_ns: str, checkpoint_id: str) -> int | None:
        return self._index.get((thread_key, checkpoint_ns, checkpoint_id))

    def _insert(
        self, thread: rules.GraphThread, checkpoint_ns: str, row: rules.CheckpointRow
    ) -> int:
        key = self._keys.get("checkpoint", 0) + 1
        self._keys["checkpoint"] = key
        self._checkpoints[key] = _Stored(thread.key, thread.id, checkpoint_ns, row)
        self._index[(thread.key, checkpoint_ns, row.checkpoint_id)] = key
        return key

    def _replace(self, key: int, row: rules.CheckpointRow) -> None:
        stored = self._checkpoints[key]
        self._checkpoints[key] = attrs.evolve(
            stored, row=attrs.evolve(row, created_at_ms=stored.row.created_at_ms)
        )

    def _store_blobs(
        self, thread_key: int, checkpoint_ns: str, blobs: Sequence[rules.Blob]
    ) -> None:
        for blob in blobs:
            self._blobs[(thread_key, checkpoint_ns, blob.channel, blob.version)] = blob.value

    def _store_writes(self, at: Place, writes: Sequence[PendingWrite], *, replace: bool) -> None:
        stored = {(w.task_id, w.idx): w for w in self._pending.get(at, ())}
        for write in writes:
            place = (write.task_id, write.idx)
            if replace or place not in stored:
                stored[place] = write
        self._pending[at] = tuple(stored.values())

    def _delete(self, keys: Sequence[int]) -> None:
        for key in keys:
            stored = self._checkpoints.pop(key)
            place = (stored.thread_key, stored.checkpoint_ns, stored.row.checkpoint_id)
            del self._index[place]
            self._pending.pop(place, None)

    def _delete_writes(self, thread_keys: Sequence[int]) -> None:
        threads = set(thread_keys)
        for place in [p for p in self._pending if p[0] in threads]:
            del self._pending[place]

    def _count_values(self) -> int:
        live = {k for k in {b[0] for b in self._blobs} if self._live(k)}
        return sum(1 for b in self._blobs if b[0] in live)

    def _live(self, thread_key: int) -> bool:
        """Whether ``thread_key`` is a live thread's (its rows are visible)."""
        return any(
            s.thread_key == thread_key
            and (t := self._thread(s.thread_id)) is not None
            and t.key == thread_key
            for s in self._checkpoints.values()
        )

    def _collect(self, thread_keys: Sequence[int]) -> None:
        threads = set(thread_keys)
        named = {
            (s.thread_key, s.checkpoint_ns, channel, version)
            for s in self._checkpoints.values()
            if s.thread_key in threads
            for channel, version in s.row.versions
        }
        for blob in [b for b in self._blobs if b[0] in threads and b not in named]:
            del self._blobs[blob]

    # -- reads ---------------------------------------------------------------------------

    def _head(self, key: int, stored: _Stored) -> rules.Head:
        return rules.Head(key, stored.thread_id, stored.checkpoint_ns, stored.row.checkpoint_id)

    def _candidates(
        self, query: rules.ListQuery, thread_key: int | None, limit: int | None
    ) -> list[tuple[rules.Head, str]]:
        if thread_key is None:
            self._purge()
        found = {
            key: stored
            for key, stored in self._checkpoints.items()
            if (thread_key is None or stored.thread_key == thread_key)
            and (query.checkpoint_ns is None or stored.checkpoint_ns == query.checkpoint_ns)
            and (query.checkpoint_id is None or stored.row.checkpoint_id == query.checkpoint_id)
            and (query.before is None or stored.row.checkpoint_id < query.before)
        }
        heads = rules.newest_first(self._head(key, stored) for key, stored in found.items())
        return [(h, found[h.key].row.metadata) for h in heads[:limit]]

    def _rows(self, keys: Sequence[int]) -> Mapping[int, _Stored]:
        return {key: self._checkpoints[key] for key in keys}

    def _writes(self, keys: Sequence[int]) -> Mapping[int, Sequence[PendingWrite]]:
        found = {}
        for key in keys:
            stored = self._checkpoints[key]
            place = (stored.thread_key, stored.checkpoint_ns, stored.row.checkpoint_id)
            if place in self._pending:
                found[key] = self._pending[place]
        return found

    def _values(self, keys: Sequence[int]) -> Mapping[int, Mapping[tuple[str, str], ChannelValue]]:
        values: dict[int, dict[tuple[str, str], ChannelValue]] = {}
        for key in keys:
            stored = self._checkpoints[key]
            place = (stored.thread_key, stored.checkpoint_ns)
            values[key] = {
                (channel, version): value
                for channel, version in stored.row.versions
                if (value := self._blobs.get((*place, channel, version))) is not None
            }
        return values

    def _thread_blobs(self, thread_key: int) -> Sequence[tuple[str, rules.Blob]]:
        return [
            (ns, rules.Blob(channel, version, value))
            for (key, ns, channel, version), value in self._blobs.items()
            if key == thread_key
        ]

    def _thread_heads(self, thread_keys: Sequence[int]) -> list[rules.Head]:
        threads = set(thread_keys)
        return [
            self._head(key, stored)
            for key, stored in self._checkpoints.items()
            if stored.thread_key in threads
        ]

    def _run_heads(self, run_ids: Sequence[str]) -> list[tuple[rules.Head, int]]:
        self._purge()
        runs = set(run_ids)
        return [
            (self._head(key, stored), stored.thread_key)
            for key, stored in self._checkpoints.items()
            if stored.row.run_id in runs
        ]


def _typed(db: InMemoryDatabase, clock: Clock, agents: AgentStorage) -> GraphCheckpointStore:
    """Checked by mypy: the in-memory layer satisfies the Protocol."""
    return InMemoryGraphCheckpointStore(db, clock, agents)


def in_memory_graphs() -> Layer:
    """A layer providing :class:`~runstore.services.GraphCheckpointStore` in memory; requires
    the container's ``InMemoryDatabase``, a ``Clock`` and its in-memory ``AgentStorage``."""

    def factory(c: Container) -> GraphCheckpointStore:
        return _typed(c.get(InMemoryDatabase), c.get(CLOCK), c.get(AGENT_STORAGE))

    return Layer.service(
        GRAPH_CHECKPOINTS, factory, requires=(InMemoryDatabase, CLOCK, AGENT_STORAGE)
    )
