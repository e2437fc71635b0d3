"""The live graph checkpoint store in SQLite (migration 0018).

Every write is one unit of work on the container's :class:`SqliteDatabase` (``BEGIN
IMMEDIATE``), so a checkpoint, its channel versions and its new values commit together, with
the agent thread a first put creates. The latest read is one probe of the unique index
``(thread_key, checkpoint_ns, checkpoint_id)`` backwards; a listing selects row keys and
metadata first, applies the metadata filter of the rules, and then reads the payload
(state, values, pending writes) of exactly the checkpoints it returns, a statement each
for all of them. The layer keeps no cache: another process may write at any moment. The
method skeleton is :mod:`._graphs_shared`'s.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from runstore.layers._graphs_shared import GraphStoreBase, Place
from runstore.layers._layer import Container, Layer
from runstore.layers._sqlite_database import SqliteDatabase
from runstore.layers._tags import AGENT_STORAGE, CLOCK, GRAPH_CHECKPOINTS
from runstore.services import _graphs_rules as rules
from runstore.services.agents import AgentStorage
from runstore.services.clock import Clock
from runstore.services.graphs import ChannelValue, GraphCheckpointStore, PendingWrite

__all__ = ["SqliteGraphCheckpointStore", "sqlite_graphs"]

Row = tuple[Any, ...]


@attrs.frozen
class _Stored:
    """One stored checkpoint (a :class:`~runstore.layers._graphs_shared.StoredCheckpoint`)."""

    thread_key: int
    thread_id: str
    checkpoint_ns: str
    row: rules.CheckpointRow


_IN_KEYS = "IN (SELECT value FROM json_each(?))"

_THREAD = "SELECT id, key, project_id, status FROM agent_threads WHERE id = ?"
_FIND = (
    "SELECT key FROM graph_checkpoints"
    " WHERE thread_key = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
)
_INSERT = (
    "INSERT INTO graph_checkpoints (thread_key, checkpoint_ns, checkpoint_id,"
    " parent_checkpoint_id, run_id, format_version, ts, state_type, state, metadata,"
    " created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING key"
)
_UPDATE = (
    "UPDATE graph_checkpoints SET parent_checkpoint_id = ?, run_id = ?, format_version = ?,"
    " ts = ?, state_type = ?, state = ?, metadata = ? WHERE key = ?"
)
_DROP_VERSIONS = "DELETE FROM graph_channel_versions WHERE checkpoint_key = ?"
_INSERT_VERSION = (
    "INSERT INTO graph_channel_versions (checkpoint_key, channel, version) VALUES (?, ?, ?)"
)
_UPSERT_BLOB = (
    "INSERT INTO graph_blobs (thread_key, checkpoint_ns, channel, version, value_type, value)"
    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (thread_key, checkpoint_ns, channel, version)"
    " DO UPDATE SET value_type = excluded.value_type, value = excluded.value"
)
_INSERT_WRITE = (
    "INSERT INTO graph_writes (thread_key, checkpoint_ns, checkpoint_id, task_id, idx,"
    " task_path, channel, value_type, value) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (thread_key, checkpoint_ns, checkpoint_id, task_id, idx)"
)
_REPLACE_WRITE = (
    _INSERT_WRITE + " DO UPDATE SET task_path = excluded.task_path, channel = excluded.channel,"
    " value_type = excluded.value_type, value = excluded.value"
)
_KEEP_WRITE = _INSERT_WRITE + " DO NOTHING"
_HEADS = (
    "SELECT c.key, t.id, c.checkpoint_ns, c.checkpoint_id, c.metadata FROM graph_checkpoints c"
    " JOIN agent_threads t ON t.key = c.thread_key"
)
_ROWS = (
    "SELECT c.key, c.thread_key, t.id, c.checkpoint_ns, c.checkpoint_id,"
    " c.parent_checkpoint_id, c.run_id, c.format_version, c.ts, c.state_type, c.state,"
    " c.metadata, c.created_at_ms FROM graph_checkpoints c"
    f" JOIN agent_threads t ON t.key = c.thread_key WHERE c.key {_IN_KEYS}"
)
_VERSIONS = (
    "SELECT checkpoint_key, channel, version FROM graph_channel_versions"
    f" WHERE checkpoint_key {_IN_KEYS}"
)
_WRITES = (  # CROSS JOIN: from the checkpoints (their key), then their writes (a probe each)
    "SELECT c.key, w.task_id, w.task_path, w.idx, w.channel, w.value_type, w.value"
    " FROM graph_checkpoints c CROSS JOIN graph_writes w ON w.thread_key = c.thread_key"
    " AND w.checkpoint_ns = c.checkpoint_ns AND w.checkpoint_id = c.checkpoint_id"
    f" WHERE c.key {_IN_KEYS}"
)
_VALUES = (
    "SELECT v.checkpoint_key, v.channel, v.version, b.value_type, b.value"
    " FROM graph_channel_versions v JOIN graph_checkpoints c ON c.key = v.checkpoint_key"
    " JOIN graph_blobs b ON b.thread_key = c.thread_key AND b.checkpoint_ns = c.checkpoint_ns"
    f" AND b.channel = v.channel AND b.version = v.version WHERE v.checkpoint_key {_IN_KEYS}"
)
_THREAD_BLOBS = (
    "SELECT checkpoint_ns, channel, version, value_type, value FROM graph_blobs"
    " WHERE thread_key = ?"
)
_THREAD_HEADS = (  # CROSS JOIN: from the threads' checkpoints (their index), then threads
    "SELECT c.key, t.id, c.checkpoint_ns, c.checkpoint_id FROM graph_checkpoints c"
    f" CROSS JOIN agent_threads t ON t.key = c.thread_key WHERE c.thread_key {_IN_KEYS}"
)
_RUN_HEADS = (  # CROSS JOIN: from the checkpoints of the runs (their index), then threads
    "SELECT c.key, t.id, c.checkpoint_ns, c.checkpoint_id, c.thread_key"
    " FROM graph_checkpoints c CROSS JOIN agent_threads t ON t.key = c.thread_key"
    f" WHERE c.run_id {_IN_KEYS} AND c.run_id IS NOT NULL"  # the partial index's term
)
_DELETE = f"DELETE FROM graph_checkpoints WHERE key {_IN_KEYS}"
_DELETE_WRITES = (  # before their checkpoints: found through them
    "DELETE FROM graph_writes WHERE (thread_key, checkpoint_ns, checkpoint_id) IN ("
    "SELECT thread_key, checkpoint_ns, checkpoint_id FROM graph_checkpoints"
    f" WHERE key {_IN_KEYS})"
)
_DELETE_THREAD_WRITES = f"DELETE FROM graph_writes WHERE thread_key {_IN_KEYS}"
_COUNT_VALUES = "SELECT count(*) FROM graph_blobs"
_COLLECT = (  # one thread at a time: a probe of the primary key's first column each
    "DELETE FROM graph_blobs WHERE thread_key = ? AND NOT EXISTS ("
    "SELECT 1 FROM graph_channel_versions v JOIN graph_checkpoints c"
    " ON c.key = v.checkpoint_key WHERE v.channel = graph_blobs.channel"
    " AND v.version = graph_blobs.version AND c.thread_key = graph_blobs.thread_key"
    " AND c.checkpoint_ns = graph_blobs.checkpoint_ns)"
)


def _keys(values: Sequence[object]) -> str:
    """The JSON array ``json_each`` reads a list of keys or ids from."""
    return json.dumps(list(values), ensure_ascii=False)


def candidates_sql(query: rules.ListQuery, thread_key: int | None, limit: int | None) -> str:
    """The statement of a listing's candidates (parameters as :func:`candidates_params`):
    ordered newest first without re-sorting (the columns fixed by the query are left out of
    the ORDER BY, so the latest read walks the unique index backwards)."""
    where = []
    if thread_key is not None:
        where.append("c.thread_key = ?")
    if query.checkpoint_ns is not None:
        where.append("c.checkpoint_ns = ?")
    if query.checkpoint_id is not None:
        where.append("c.checkpoint_id = ?")
    if query.before is not None:
        where.append("c.checkpoint_id < ?")
    order = ["c.checkpoint_id DESC"]
    if thread_key is None:
        order.append("t.id")
    if query.checkpoint_ns is None:
        order.append("c.checkpoint_ns")
    sql = _HEADS + (" WHERE " + " AND ".join(where) if where else "")
    sql += " ORDER BY " + ", ".join(order)
    return sql + ("" if limit is None else " LIMIT ?")


def candidates_params(
    query: rules.ListQuery, thread_key: int | None, limit: int | None
) -> tuple[int | str, ...]:
    """The parameters of :func:`candidates_sql`, in its order."""
    given = (thread_key, query.checkpoint_ns, query.checkpoint_id, query.before, limit)
    return tuple(value for value in given if value is not None)


def _head(row: Row) -> rules.Head:
    return rules.Head(row[0], row[1], row[2], row[3])


class SqliteGraphCheckpointStore(GraphStoreBase):
    """Graph checkpoints in SQLite; see :class:`~runstore.services.GraphCheckpointStore`.

    ``agents`` must be the ``AgentStorage`` of the same database: a first put creates its
    thread through it, inside the put's unit of work.
    """

    def __init__(self, db: SqliteDatabase, clock: Clock, agents: AgentStorage) -> None:
        self._db = db
        self._sql = db
        self._clock = clock
        self._agents = agents

    def _thread(self, thread_id: str) -> rules.GraphThread | None:
        row = self._sql.one(_THREAD, (thread_id,))
        if row is None:
            return None
        return rules.GraphThread(row[0], row[1], row[2], row[3] == "archived")

    def _find(self, thread_key: int, checkpoint_ns: str, checkpoint_id: str) -> int | None:
        key: int | None = self._sql.scalar(_FIND, (thread_key, checkpoint_ns, checkpoint_id))
        return key

    def _insert(
        self, thread: rules.GraphThread, checkpoint_ns: str, row: rules.CheckpointRow
    ) -> int:
        key: int = self._sql.scalar(
            _INSERT,
            (
                thread.key,
                checkpoint_ns,
                row.checkpoint_id,
                row.parent_checkpoint_id,
                row.run_id,
                row.format_version,
                row.ts,
                row.state.type,
                row.state.value,
                row.metadata,
                row.created_at_ms,
            ),
        )
        self._store_versions(key, row)
        return key

    def _store_versions(self, key: int, row: rules.CheckpointRow) -> None:
        if row.versions:
            self._sql.executemany(_INSERT_VERSION, [(key, c, v) for c, v in row.versions])

    def _replace(self, key: int, row: rules.CheckpointRow) -> None:
        self._sql.execute(
            _UPDATE,
            (
                row.parent_checkpoint_id,
                row.run_id,
                row.format_version,
                row.ts,
                row.state.type,
                row.state.value,
                row.metadata,
                key,
            ),
        )
        self._sql.execute(_DROP_VERSIONS, (key,))
        self._store_versions(key, row)

    def _store_blobs(
        self, thread_key: int, checkpoint_ns: str, blobs: Sequence[rules.Blob]
    ) -> None:
        self._sql.executemany(
            _UPSERT_BLOB,
            [
                (thread_key, checkpoint_ns, b.channel, b.version, b.value.type, b.value.value)
                for b in blobs
            ],
        )

    def _store_writes(self, at: Place, writes: Sequence[PendingWrite], *, replace: bool) -> None:
        self._sql.executemany(
            _REPLACE_WRITE if replace else _KEEP_WRITE,
            [
                (*at, w.task_id, w.idx, w.task_path, w.channel, w.value.type, w.value.value)
                for w in writes
            ],
        )

    def _candidates(
        self, query: rules.ListQuery, thread_key: int | None, limit: int | None
    ) -> list[tuple[rules.Head, str]]:
        rows = self._sql.execute(
            candidates_sql(query, thread_key, limit), candidates_params(query, thread_key, limit)
        )
        return [(_head(row), row[4]) for row in rows]

    def _rows(self, keys: Sequence[int]) -> Mapping[int, _Stored]:
        versions: dict[int, list[tuple[str, str]]] = {}
        for key, channel, version in self._sql.execute(_VERSIONS, (_keys(keys),)):
            versions.setdefault(key, []).append((channel, version))
        return {
            row[0]: _Stored(
                row[1],
                row[2],
                row[3],
                rules.CheckpointRow(
                    row[4],
                    row[5],
                    row[6],
                    row[7],
                    row[8],
                    ChannelValue(row[9], row[10]),
                    row[11],
                    tuple(versions.get(row[0], ())),
                    row[12],
                ),
            )
            for row in self._sql.execute(_ROWS, (_keys(keys),))
        }

    def _writes(self, keys: Sequence[int]) -> Mapping[int, Sequence[PendingWrite]]:
        writes: dict[int, list[PendingWrite]] = {}
        for row in self._sql.execute(_WRITES, (_keys(keys),)):
            write = PendingWrite(row[1], row[2], row[3], row[4], ChannelValue(row[5], row[6]))
            writes.setdefault(row[0], []).append(write)
        return writes

    def _values(self, keys: Sequence[int]) -> Mapping[int, Mapping[tuple[str, str], ChannelValue]]:
        values: dict[int, dict[tuple[str, str], ChannelValue]] = {}
        for key, channel, version, kind, value in self._sql.execute(_VALUES, (_keys(keys),)):
            values.setdefault(key, {})[(channel, version)] = ChannelValue(kind, value)
        return values

    def _thread_blobs(self, thread_key: int) -> Sequence[tuple[str, rules.Blob]]:
        return [
            (row[0], rules.Blob(row[1], row[2], ChannelValue(row[3], row[4])))
            for row in self._sql.execute(_THREAD_BLOBS, (thread_key,))
        ]

    def _thread_heads(self, thread_keys: Sequence[int]) -> list[rules.Head]:
        return [_head(row) for row in self._sql.execute(_THREAD_HEADS, (_keys(thread_keys),))]

    def _run_heads(self, run_ids: Sequence[str]) -> list[tuple[rules.Head, int]]:
        rows = self._sql.execute(_RUN_HEADS, (_keys(run_ids),))
        return [(_head(row), row[4]) for row in rows]

    def _delete(self, keys: Sequence[int]) -> None:
        self._sql.execute(_DELETE_WRITES, (_keys(keys),))
        self._sql.execute(_DELETE, (_keys(keys),))

    def _delete_writes(self, thread_keys: Sequence[int]) -> None:
        self._sql.execute(_DELETE_THREAD_WRITES, (_keys(thread_keys),))

    def _count_values(self) -> int:
        count: int = self._sql.scalar(_COUNT_VALUES, ())
        return count

    def _collect(self, thread_keys: Sequence[int]) -> None:
        self._sql.executemany(_COLLECT, [(key,) for key in thread_keys])


def _typed(db: SqliteDatabase, clock: Clock, agents: AgentStorage) -> GraphCheckpointStore:
    """Checked by mypy: the SQLite layer satisfies the Protocol."""
    return SqliteGraphCheckpointStore(db, clock, agents)


def sqlite_graphs() -> Layer:
    """A layer providing :class:`~runstore.services.GraphCheckpointStore` on the container's
    :class:`SqliteDatabase`; requires it, a ``Clock`` and the ``AgentStorage`` of the same
    database (a first put creates its thread through it)."""

    def factory(c: Container) -> GraphCheckpointStore:
        return _typed(c.get(SqliteDatabase), c.get(CLOCK), c.get(AGENT_STORAGE))

    return Layer.service(
        GRAPH_CHECKPOINTS, factory, requires=(SqliteDatabase, CLOCK, AGENT_STORAGE)
    )
