"""A LangGraph checkpoint saver backed by runstore's graph checkpoint store.

``RunstoreSaver`` is a ``langgraph.checkpoint.base.BaseCheckpointSaver`` (langgraph-checkpoint
4.3.2) over :class:`~runstore.services.graphs.GraphCheckpointStore`: swap it in for
LangGraph's ``SqliteSaver``/``AsyncSqliteSaver`` in one line and the graph's state lives in a
migrated runstore database (SQLite or PostgreSQL) beside the agent threads it belongs to::

    with RunstoreSaver.from_path("runstore.db") as checkpointer:          # sync graphs
        graph = builder.compile(checkpointer=checkpointer)

    async with RunstoreSaver.from_path("runstore.db") as checkpointer:    # async graphs
        graph = builder.compile(checkpointer=checkpointer)

Every method of the interface is implemented, the extended ones too (``delete_for_runs``,
``copy_thread``, ``prune`` and their async twins), with LangGraph's meaning, checked by
LangGraph's own conformance suite (``langgraph-checkpoint-conformance`` 0.0.2). The async
methods await the :mod:`runstore.aio` runner of the database, so they never block the event
loop (SQLite runs on its writer thread); the sync methods run the same calls on the same
runner from any thread, so a graph may be invoked with ``invoke`` and ``ainvoke`` alike and
both see one database (an SQLite ``:memory:`` one too).

What is stored (research of the interface: the ``langgraph-checkpoint`` sources):

- a checkpoint's ``v``, ``id``, ``ts`` and ``channel_versions`` as columns; its other keys
  (``versions_seen``, ``updated_channels``, ``pending_sends``) as one value of the saver's
  ``serde``;
- a channel's value once per version, only for the channels of ``new_versions`` (LangGraph's
  ``InMemorySaver`` and ``PostgresSaver`` do the same): a checkpoint that leaves a channel
  unchanged shares the stored value; a channel of ``new_versions`` without a value is stored
  as type ``"empty"`` and left out of ``channel_values`` again;
- metadata as a JSON object: ``get_serializable_checkpoint_metadata(config, metadata)``
  (config keys merged in, NUL removed from strings, the legacy ``writes`` key dropped, as
  ``PostgresSaver`` stores it), then through ``json.dumps``/``json.loads`` as ``SqliteSaver``
  writes it (tuples become lists, lone surrogates are dropped);
- pending writes with their task path, at index ``WRITES_IDX_MAP[channel]`` for the special
  channels (a later write replaces) and at their position otherwise (the first wins), and
  returned in ``writes_sort_key`` order.

Failures of the store are raised, since LangGraph's callers expect exceptions: bad input
(an id longer than 256 characters, a NaN in metadata, a ``list`` filter that is not JSON,
a negative limit) as
:class:`InvalidCheckpointInput`, a ``ValueError``; a database that stayed busy as
:class:`CheckpointStoreBusy`, a ``TimeoutError``; anything else (a thread of the same id in
another project, an archived thread, a storage failure) as :class:`CheckpointStoreError`.
Each carries the store's typed error as ``error``. A value the saver's ``serde`` cannot
serialize, and metadata ``json.dumps`` cannot write (a ``TypeError``), raise what they raise
before anything is stored, as in LangGraph's savers. A saver whose block has ended (or that
was closed) raises :class:`~runstore.exceptions.ContainerClosed`.

LangGraph sends a task's pending writes while the put of their checkpoint may still be
queued (``pregel/_loop.py`` submits both in the background; at an interrupt under durability
``"exit"`` the writes come first). The store takes writes for a checkpoint it does not hold
yet and they are that checkpoint's once it is put, so the saver holds nothing in memory and
concurrent writes of a super-step's tasks are independent calls.

This module imports LangGraph; nothing else in runstore does. Imported without it, it raises
:class:`~runstore.exceptions.MissingExtra` naming the ``langgraph`` extra.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

from returns.result import Failure, Result, Success

from runstore.adapters._loop import LoopThread
from runstore.aio._runner import Access
from runstore.exceptions import ContainerClosed, MissingExtra
from runstore.layers import GRAPH_CHECKPOINTS
from runstore.services.agents import InvalidQuery
from runstore.services.errors import Busy, InvalidInput
from runstore.services.graphs import (
    ChannelBlob,
    ChannelValue,
    GraphCheckpoint,
    GraphCheckpointStore,
    GraphError,
    GraphWrite,
    NewGraphCheckpoint,
)

if TYPE_CHECKING:
    from runstore.aio import AsyncContainer, AsyncLayer
    from runstore.layers import ConnectionSettings

LANGGRAPH_EXTRA: Final = (
    "runstore.adapters.langgraph needs the langgraph extra: pip install 'runstore[langgraph]'"
)
"""Why the module cannot be imported while LangGraph (or its langchain-core) is missing."""

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        get_checkpoint_id,
        get_serializable_checkpoint_metadata,
        writes_sort_key,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
except ModuleNotFoundError as missing:
    if (missing.name or "").split(".")[0] not in {"langgraph", "langchain_core"}:
        raise
    raise MissingExtra(f"{LANGGRAPH_EXTRA} (no module named {missing.name!r})") from missing

__all__ = [
    "DEFAULT_PROJECT",
    "CheckpointStoreBusy",
    "CheckpointStoreError",
    "InvalidCheckpointInput",
    "RunstoreSaver",
    "SaverScope",
]

T = TypeVar("T")

DEFAULT_PROJECT: Final = "langgraph"
"""The project of the agent threads a saver creates unless told another."""

EMPTY: Final = "empty"
"""The value type of a channel that has a version but no value (LangGraph's savers' name)."""

STATE_KEYS: Final = ("versions_seen", "updated_channels", "pending_sends")
"""The keys of a ``Checkpoint`` stored together as one serialized value."""

LOOP_THREAD: Final = "runstore-langgraph-sync"
"""The name of the thread a saver's sync methods run their calls on."""


class CheckpointStoreError(Exception):
    """The store refused or failed a saver call; ``error`` is its typed error value
    (a :data:`~runstore.services.graphs.GraphError`). The failed store call wrote nothing."""

    def __init__(self, error: GraphError) -> None:
        self.error = error
        super().__init__(str(error))


class InvalidCheckpointInput(CheckpointStoreError, ValueError):
    """The store refused an argument (``InvalidInput`` or ``InvalidQuery``): an id that is
    not text of 1 to 256 characters, metadata or a ``list`` filter that is not JSON (a value
    ``json.dumps`` cannot write in a filter too: ``InvalidInput("filter", ...)``), a negative
    ``limit``, an unknown prune strategy, ``copy_thread`` of a thread onto itself."""


class CheckpointStoreBusy(CheckpointStoreError, TimeoutError):
    """Another connection held the database's write lock for the whole retry budget
    (``Busy``); nothing was written and the call may be repeated."""


def _raised(error: GraphError) -> CheckpointStoreError:
    """The exception a saver raises for the store's ``error``."""
    if isinstance(error, InvalidInput | InvalidQuery):
        return InvalidCheckpointInput(error)
    if isinstance(error, Busy):
        return CheckpointStoreBusy(error)
    return CheckpointStoreError(error)


def _unwrap(result: Result[T, GraphError]) -> T:
    """The value of ``result``, or its failure raised (see :func:`_raised`)."""
    match result:
        case Success(value):
            return cast(T, value)
        case Failure(error):
            raise _raised(error)
    raise AssertionError("a Result is a Success or a Failure")  # pragma: no cover


# -- mapping LangGraph's values onto the store's records ---------------------------------------


def _configurable(config: RunnableConfig) -> dict[str, Any]:
    configurable: dict[str, Any] = config["configurable"]
    return configurable


def _thread_of(config: RunnableConfig) -> str:
    """The thread id of ``config``, as text (LangGraph's savers take any value and ``str`` it)."""
    return str(_configurable(config)["thread_id"])


def _namespace_of(config: RunnableConfig) -> str:
    return str(_configurable(config).get("checkpoint_ns") or "")


def _config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def _json(value: object) -> Any:
    """``value`` as JSON gives it back, as ``SqliteSaver`` stores metadata: tuples become
    lists, lone surrogates are dropped; a value JSON cannot hold raises ``TypeError``."""
    text = json.dumps(value, ensure_ascii=False).encode("utf-8", "ignore")
    return json.loads(text)


def _json_filter(filter: dict[str, Any]) -> Any:
    """``filter`` as :func:`_json` gives it back; one JSON cannot hold (an unserializable
    value, a cycle, nesting past Python's recursion limit) raises
    :class:`InvalidCheckpointInput` carrying ``InvalidInput("filter", ...)``."""
    try:
        return _json(filter)
    except (TypeError, ValueError, RecursionError) as error:
        raise InvalidCheckpointInput(InvalidInput("filter", f"must be JSON: {error}")) from None


def _typed(serde: SerializerProtocol, value: object) -> ChannelValue:
    kind, data = serde.dumps_typed(value)
    return ChannelValue(kind, bytes(data))


def _untyped(serde: SerializerProtocol, value: ChannelValue) -> Any:
    return serde.loads_typed((value.type, value.value))


def _new_checkpoint(
    serde: SerializerProtocol,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
) -> NewGraphCheckpoint:
    """The store's record of ``checkpoint`` put under ``config`` (whose ``checkpoint_id``, if
    any, is the parent), with values for the channels of ``new_versions`` only."""
    values = checkpoint["channel_values"]
    raw = cast(dict[str, Any], checkpoint)
    return NewGraphCheckpoint(
        checkpoint_id=checkpoint["id"],
        parent_checkpoint_id=get_checkpoint_id(config),
        format_version=checkpoint["v"],
        ts=checkpoint["ts"],
        state=_typed(serde, {key: raw[key] for key in STATE_KEYS if key in raw}),
        metadata=_json(get_serializable_checkpoint_metadata(config, metadata)),
        channel_versions=dict(checkpoint["channel_versions"]),
        blobs=tuple(
            ChannelBlob(
                channel,
                version,
                _typed(serde, values[channel]) if channel in values else ChannelValue(EMPTY, b""),
            )
            for channel, version in new_versions.items()
        ),
    )


def _tuple(serde: SerializerProtocol, stored: GraphCheckpoint) -> CheckpointTuple:
    """The ``CheckpointTuple`` of a stored checkpoint: values rebuilt at its versions,
    pending writes in ``writes_sort_key`` order."""
    checkpoint = cast(
        Checkpoint,
        {
            "v": stored.format_version,
            "id": stored.checkpoint_id,
            "ts": stored.ts,
            "channel_values": {
                channel: _untyped(serde, value)
                for channel, value in stored.channel_values.items()
                if value.type != EMPTY
            },
            "channel_versions": dict(stored.channel_versions),
            **_untyped(serde, stored.state),
        },
    )
    writes = sorted(
        stored.pending_writes, key=lambda w: writes_sort_key(w.task_path, w.task_id, w.idx)
    )
    parent = stored.parent_checkpoint_id
    return CheckpointTuple(
        config=_config(stored.thread_id, stored.checkpoint_ns, stored.checkpoint_id),
        checkpoint=checkpoint,
        metadata=cast(CheckpointMetadata, stored.metadata),
        parent_config=(
            None if parent is None else _config(stored.thread_id, stored.checkpoint_ns, parent)
        ),
        pending_writes=[(w.task_id, w.channel, _untyped(serde, w.value)) for w in writes],
    )


def _writes(serde: SerializerProtocol, writes: Sequence[tuple[str, Any]]) -> tuple[GraphWrite, ...]:
    """The store's records of a task's ``writes``: a special channel at its
    ``WRITES_IDX_MAP`` index, any other at its position."""
    return tuple(
        GraphWrite(WRITES_IDX_MAP.get(channel, index), channel, _typed(serde, value))
        for index, (channel, value) in enumerate(writes)
    )


def next_version(current: str | int | float | None) -> str:
    """The version after ``current``: ``f"{n:032}.{random():016}"`` with ``n`` one more than
    the integer part of ``current`` (0 for None), as LangGraph's ``InMemorySaver``,
    ``SqliteSaver`` and ``PostgresSaver`` make them; text order is version order."""
    if current is None:
        number = 0
    elif isinstance(current, str):
        number = int(current.split(".", 1)[0])
    else:
        number = int(current)
    return f"{number + 1:032}.{random.random():016}"


# -- writes that arrive before their checkpoint -------------------------------------------------


# -- where the calls run -------------------------------------------------------------------------


class _Calls:
    """How a saver reaches its store: ``run`` from sync code, ``arun`` from a coroutine.

    Both go through the :class:`runstore.aio.AsyncContainer`'s runner (``arun`` awaits it on
    the caller's loop, ``run`` on the saver's own loop thread), so they share one database,
    its writer and its order, whichever thread calls.
    """

    def __init__(self, container: AsyncContainer) -> None:
        self._container = container
        self._loop = LoopThread(LOOP_THREAD)
        self._closed = False

    def run(self, access: Access, fn: Callable[[GraphCheckpointStore], T]) -> T:
        self._check_open()
        return self._loop.run(self._through_runner(access, fn))

    async def arun(self, access: Access, fn: Callable[[GraphCheckpointStore], T]) -> T:
        self._check_open()
        return await self._through_runner(access, fn)

    def _check_open(self) -> None:
        if self._closed:
            raise ContainerClosed("this RunstoreSaver is closed")

    def _through_runner(
        self, access: Access, fn: Callable[[GraphCheckpointStore], T]
    ) -> Coroutine[Any, Any, T]:
        return self._container.runner.call(access, lambda c: fn(c.get(GRAPH_CHECKPOINTS)))

    def use(self, loop: LoopThread) -> None:
        """Run the sync calls on ``loop`` (stopped by :meth:`close`) instead of a new one."""
        self._loop.stop()
        self._loop = loop

    def run_coroutine(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop thread of the sync calls."""
        return self._loop.run(coroutine)

    def close(self) -> None:
        self._closed = True
        self._loop.stop()


_NOT_A_CONTAINER: Final = (
    "RunstoreSaver takes a runstore.aio.AsyncContainer, not {}: a sync container's store"
    " belongs to the thread that built it, and LangGraph's invoke calls the saver from its own"
    " worker threads; pass the container of `async with aio.build(...) as container`, or open"
    " a saver with `RunstoreSaver.from_path(path)` or `RunstoreSaver.from_layer(layer)`"
)
"""The ``TypeError`` message for a saver's ``source`` that is not an ``AsyncContainer``."""


# -- the saver -----------------------------------------------------------------------------------


class RunstoreSaver(BaseCheckpointSaver[str]):
    """LangGraph's ``BaseCheckpointSaver`` on runstore's graph checkpoint store.

    Made from a host's :class:`runstore.aio.AsyncContainer` (``RunstoreSaver(container)``:
    async methods await its runner without blocking the loop, sync methods run on the same
    runner from any thread), or by :meth:`from_path` and :meth:`from_layer`, which open a
    database for the saver and close it with the ``with`` or ``async with`` block. A sync
    container's store is refused: it belongs to the thread that built the container, and
    LangGraph's ``invoke`` calls ``put`` and ``put_writes`` from its own worker threads.

    ``project_id`` is the project of the agent threads the saver creates (a LangGraph thread
    is a runstore agent thread; ``delete_thread`` removes its graph checkpoints, not the
    thread). ``serde`` serializes channel values and writes (LangGraph's
    ``JsonPlusSerializer`` unless given).

    ``get_next_version`` makes LangGraph's text versions (see :func:`next_version`).
    The methods raise the exceptions in the module's docstring for the store's failures.

    Raises ``TypeError`` for a ``source`` that is not an ``AsyncContainer`` (a sync or an
    async graph checkpoint store among them; the message says what to pass instead) and
    ``KeyError`` for a container whose layer provides no graph checkpoint store (every
    runstore layer provides one).
    """

    def __init__(
        self,
        source: AsyncContainer,
        *,
        project_id: str = DEFAULT_PROJECT,
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(serde=serde)
        from runstore import aio

        if not isinstance(source, aio.AsyncContainer):
            raise TypeError(_NOT_A_CONTAINER.format(type(source).__name__))
        if aio.GRAPH_CHECKPOINTS not in source:
            raise KeyError(f"{source!r} provides no graph checkpoint store")
        self._calls = _Calls(source)
        self.project_id = project_id

    @classmethod
    def from_path(
        cls,
        path: str,
        *,
        project_id: str = DEFAULT_PROJECT,
        settings: ConnectionSettings | None = None,
        serde: SerializerProtocol | None = None,
    ) -> SaverScope:
        """A saver on the SQLite database at ``path`` (created and migrated when missing,
        ``":memory:"`` for one that lives as long as the block), for ``with`` or
        ``async with``: ``with RunstoreSaver.from_path("runstore.db") as checkpointer:``.

        ``settings`` are the connection's (:class:`~runstore.layers.ConnectionSettings`:
        ``synchronous``, busy timeout, ...). Opening failures raise as
        :func:`runstore.aio.build` raises them
        (:class:`~runstore.exceptions.DatabaseOpenError`).
        """
        from runstore import aio

        return cls.from_layer(aio.sqlite(path, settings), project_id=project_id, serde=serde)

    @classmethod
    def from_layer(
        cls,
        layer: AsyncLayer,
        *,
        project_id: str = DEFAULT_PROJECT,
        serde: SerializerProtocol | None = None,
    ) -> SaverScope:
        """A saver on the database of the async ``layer`` (``aio.postgres(dsn)``,
        ``aio.sqlite(path)``, ``aio.in_memory()``), opened by the ``with`` or ``async with``
        block and closed when it ends."""
        return SaverScope(cls, layer, project_id, serde)

    def close(self) -> None:
        """End the saver: stop the thread its sync methods run their calls on (started on
        their first use); every method then raises
        :class:`~runstore.exceptions.ContainerClosed`. Idempotent. A container given to the
        saver stays open: it is its opener's to close (a :meth:`from_path` or
        :meth:`from_layer` block closes both)."""
        self._calls.close()

    # -- sync methods ----------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``, else the newest of its
        thread and namespace), or None when there is none."""
        stored = _unwrap(self._calls.run("read", self._get(config)))
        return None if stored is None else _tuple(self.serde, stored)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """The checkpoints that match, newest first: of ``config``'s thread (every thread for
        None), of its namespace when it names one, only its ``checkpoint_id`` when given,
        whose metadata has each top-level key of ``filter`` equal to its value, with ids
        below ``before``'s, at most ``limit`` of them."""
        found = _unwrap(self._calls.run("read", self._list(config, filter, before, limit)))
        for stored in found:
            yield _tuple(self.serde, stored)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store ``checkpoint`` with ``metadata`` and the values of ``new_versions``' channels
        under ``config``'s thread and namespace (its ``checkpoint_id`` is the parent); return
        the config of the stored checkpoint. A thread not seen before becomes an agent thread
        of the saver's project."""
        _unwrap(self._calls.run("write", self._put(config, checkpoint, metadata, new_versions)))
        return _config(_thread_of(config), _namespace_of(config), checkpoint["id"])

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store task ``task_id``'s pending ``writes`` (channel, value) against the checkpoint
        ``config`` names, stored or not yet (they are its writes once it is put). A thread
        not seen before becomes an agent thread of the saver's project."""
        _unwrap(self._calls.run("write", self._put_writes(config, writes, task_id, task_path)))

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and pending write of the thread, in every namespace."""
        _unwrap(self._calls.run("write", lambda s: s.delete_thread(str(thread_id))))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints whose ``metadata["run_id"]`` is one of ``run_ids``, with
        their writes, across every thread and namespace."""
        _unwrap(self._calls.run("write", lambda s: s.delete_for_runs(run_ids)))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint of the source thread, every namespace, with metadata, values
        and writes, to the target thread (a source without checkpoints copies nothing)."""
        _unwrap(self._calls.run("write", self._copy(source_thread_id, target_thread_id)))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Keep only the newest checkpoint of each namespace of ``thread_ids`` (with its
        writes), or delete them all with ``strategy="delete"``. Note: LangGraph's beta delta
        channels cannot be rebuilt past the kept checkpoint."""
        _unwrap(self._calls.run("write", lambda s: s.prune(thread_ids, strategy=strategy)))

    def get_next_version(self, current: str | None, channel: None) -> str:
        """The version after ``current`` (:func:`next_version`)."""
        return next_version(current)

    # -- async methods: the same calls, awaited ---------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """:meth:`get_tuple`, awaited."""
        stored = _unwrap(await self._calls.arun("read", self._get(config)))
        return None if stored is None else _tuple(self.serde, stored)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """:meth:`list`, awaited."""
        found = _unwrap(await self._calls.arun("read", self._list(config, filter, before, limit)))
        for stored in found:
            yield _tuple(self.serde, stored)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """:meth:`put`, awaited."""
        put = self._put(config, checkpoint, metadata, new_versions)
        _unwrap(await self._calls.arun("write", put))
        return _config(_thread_of(config), _namespace_of(config), checkpoint["id"])

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """:meth:`put_writes`, awaited."""
        put = self._put_writes(config, writes, task_id, task_path)
        _unwrap(await self._calls.arun("write", put))

    async def adelete_thread(self, thread_id: str) -> None:
        """:meth:`delete_thread`, awaited."""
        _unwrap(await self._calls.arun("write", lambda s: s.delete_thread(str(thread_id))))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """:meth:`delete_for_runs`, awaited."""
        _unwrap(await self._calls.arun("write", lambda s: s.delete_for_runs(run_ids)))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """:meth:`copy_thread`, awaited."""
        _unwrap(await self._calls.arun("write", self._copy(source_thread_id, target_thread_id)))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """:meth:`prune`, awaited."""
        _unwrap(await self._calls.arun("write", lambda s: s.prune(thread_ids, strategy=strategy)))

    # -- one store call per method, shared by both kinds ------------------------------------

    def _get(
        self, config: RunnableConfig
    ) -> Callable[[GraphCheckpointStore], Result[GraphCheckpoint | None, GraphError]]:
        thread_id, checkpoint_ns = _thread_of(config), _namespace_of(config)
        checkpoint_id = get_checkpoint_id(config)
        return lambda s: s.get(thread_id, checkpoint_ns=checkpoint_ns, checkpoint_id=checkpoint_id)

    def _list(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Callable[[GraphCheckpointStore], Result[tuple[GraphCheckpoint, ...], GraphError]]:
        thread_id = checkpoint_ns = checkpoint_id = None
        if config is not None:
            thread_id = _thread_of(config)
            namespace = _configurable(config).get("checkpoint_ns")
            checkpoint_ns = None if namespace is None else str(namespace)
            checkpoint_id = get_checkpoint_id(config)
        before_id = None if before is None else get_checkpoint_id(before)
        wanted = None if filter is None else _json_filter(filter)
        return lambda s: s.list(
            thread_id,
            checkpoint_ns=checkpoint_ns,
            checkpoint_id=checkpoint_id,
            filter=wanted,
            before=before_id,
            limit=limit,
        )

    def _put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Callable[[GraphCheckpointStore], Result[None, GraphError]]:
        record = _new_checkpoint(self.serde, config, checkpoint, metadata, new_versions)
        thread_id, checkpoint_ns = _thread_of(config), _namespace_of(config)
        project_id = self.project_id
        return lambda s: s.put(
            thread_id, record, project_id=project_id, checkpoint_ns=checkpoint_ns
        )

    def _put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Callable[[GraphCheckpointStore], Result[None, GraphError]]:
        records = _writes(self.serde, writes)
        checkpoint_id = str(_configurable(config)["checkpoint_id"])
        thread_id, checkpoint_ns = _thread_of(config), _namespace_of(config)
        project_id = self.project_id
        return lambda s: s.put_writes(
            thread_id,
            records,
            checkpoint_id=checkpoint_id,
            task_id=task_id,
            task_path=task_path,
            checkpoint_ns=checkpoint_ns,
            project_id=project_id,
        )

    def _copy(
        self, source_thread_id: str, target_thread_id: str
    ) -> Callable[[GraphCheckpointStore], Result[int, GraphError]]:
        source, target = str(source_thread_id), str(target_thread_id)
        return lambda s: s.copy_thread(source, target)


class SaverScope(AbstractAsyncContextManager[RunstoreSaver]):
    """Opens an async layer for a :class:`RunstoreSaver` in a ``with`` or an ``async with``
    block and closes it when the block ends (made by :meth:`RunstoreSaver.from_path` and
    :meth:`RunstoreSaver.from_layer`).

    ``async with`` opens the database on the running loop; ``with`` opens it on the saver's
    own loop thread, which its sync methods use. One scope opens one saver at a time.
    """

    def __init__(
        self,
        saver: type[RunstoreSaver],
        layer: AsyncLayer,
        project_id: str,
        serde: SerializerProtocol | None,
    ) -> None:
        self._saver_type = saver
        self._layer = layer
        self._project_id = project_id
        self._serde = serde
        self._opened: AbstractAsyncContextManager[AsyncContainer] | None = None
        self._saver: RunstoreSaver | None = None

    async def __aenter__(self) -> RunstoreSaver:
        from runstore import aio

        if self._opened is not None:
            raise RuntimeError("this saver scope is already open")
        opened = aio.build(self._layer)
        container = await opened.__aenter__()
        self._opened = opened
        try:
            saver = self._saver_type(container, project_id=self._project_id, serde=self._serde)
        except BaseException as error:
            await self._close(type(error), error, error.__traceback__)
            raise
        self._saver = saver
        return saver

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        saver = self._saver
        try:
            await self._close(kind, error, trace)  # while the sync calls' loop still runs
        finally:
            if saver is not None:
                saver.close()

    def __enter__(self) -> RunstoreSaver:
        loop = LoopThread(LOOP_THREAD)
        try:
            saver = loop.run(self.__aenter__())
        except BaseException:
            loop.stop()
            raise
        saver._calls.use(loop)  # its sync calls run on the loop the database was opened on
        return saver

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        saver = self._saver
        if saver is None:
            return
        try:
            saver._calls.run_coroutine(self._close(kind, error, trace))
        finally:
            saver.close()

    async def _close(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        opened = self._opened
        self._opened = self._saver = None
        if opened is not None:
            await opened.__aexit__(kind, error, trace)
