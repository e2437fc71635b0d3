"""Graph checkpoints: the saved states of a graph runtime's threads, with their pending writes.

What a graph runtime such as LangGraph keeps between its super-steps (its
``BaseCheckpointSaver`` interface, langgraph-checkpoint 4.3.2): per thread and per checkpoint
namespace (``""`` for the root graph, ``"child:1"`` and so on for subgraphs) a chain of
checkpoints, each naming its parent; per checkpoint the version of every channel; the value of
each channel once per version (a checkpoint that leaves a channel unchanged stores no new
value for it); and the *pending writes* of the checkpoint's tasks.

runstore never interprets the runtime's values: every channel value, write value and the
checkpoint's own serialized state is a :class:`ChannelValue`, a type name and opaque bytes, as
the runtime's serializer produced them (LangGraph's ``serde.dumps_typed``). Metadata is a JSON
object (it is filtered on). Channel versions are the runtime's own (``str``, ``int`` or
``float``) and come back with their type.

Graph checkpoints belong to an agent thread (:class:`~runstore.services.ThreadStore`): the
first :meth:`GraphCheckpointStore.put` on a thread id that does not exist creates it, open,
in the project the caller names, in the same unit of work; deleting the agent thread deletes
its graph checkpoints. :meth:`GraphCheckpointStore.delete_thread` deletes only the graph rows:
the thread, its messages and its runs stay, since another host may converse in it.

**Order** is by ``checkpoint_id``, compared as text by code point, newest (greatest) first:
the runtime's ids increase (LangGraph's are uuid6, "unique and monotonically increasing, so
can be used for sorting"). This is the one documented exception to runstore's rule of
ordering by sequence numbers: the ids are the runtime's and its contract orders by them.

Ids (threads, checkpoints, tasks, runs) are text of 1 to :data:`MAX_ID_CHARS` characters;
namespaces, channels, task paths and value types are text too (see the limits below). A
thread id follows the agents service's rule for ids (NUL allowed); any other text with NUL,
and any text with a lone surrogate, is refused with ``InvalidInput``. Times at rest are
epoch ms.

Every method returns a ``Result`` whose failure is one :data:`GraphError`. The checks of a
write happen in this order, identically in every layer: the arguments (``InvalidInput`` /
``InvalidQuery``), then existence (``NotFound``), then the rules of stored state
(``Conflict``). A failed write changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Protocol, TypeAlias, runtime_checkable

import attrs
from returns.result import Result

from runstore.services._primitives import JsonValue
from runstore.services.agents import InvalidQuery
from runstore.services.errors import (
    Busy,
    Conflict,
    InvalidInput,
    NotFound,
    StorageFailure,
)

__all__ = [
    "MAX_ID_CHARS",
    "MAX_METADATA_BYTES",
    "MAX_NAME_CHARS",
    "MAX_PATH_CHARS",
    "MAX_TS_CHARS",
    "MAX_TYPE_CHARS",
    "MAX_VALUE_BYTES",
    "MAX_VERSION_CHARS",
    "ChannelBlob",
    "ChannelValue",
    "ChannelVersion",
    "GraphCheckpoint",
    "GraphCheckpointStore",
    "GraphError",
    "GraphWrite",
    "NewGraphCheckpoint",
    "PendingWrite",
    "PruneStrategy",
]

MAX_ID_CHARS = 256
"""Longest id of a thread, checkpoint, task, run or project (characters), as the agents
service's ids (:data:`runstore.services.agents.MAX_ID_CHARS`)."""

MAX_NAME_CHARS = 1_024
"""Longest channel name (characters)."""

MAX_PATH_CHARS = 4_096
"""Longest checkpoint namespace or task path (characters): a subgraph nested a few levels
deep has a namespace of a few hundred characters (``"node:<uuid>|child:<uuid>"``)."""

MAX_TYPE_CHARS = 256
"""Longest type name of a :class:`ChannelValue` (characters)."""

MAX_VERSION_CHARS = 256
"""Longest text version of a channel (characters; LangGraph's are 49)."""

MAX_TS_CHARS = 64
"""Longest checkpoint time stamp text (characters; an ISO 8601 time is 32 at most)."""

MAX_VALUE_BYTES = 64 * 1024 * 1024
"""Largest bytes of one :class:`ChannelValue` (as the agents service's largest content)."""

MAX_METADATA_BYTES = 64 * 1024 * 1024
"""Largest metadata object once encoded as JSON (UTF-8 bytes)."""

ChannelVersion: TypeAlias = str | int | float
"""A channel version as the runtime gives it: text, an integer or a finite float (``bool`` is
refused). It is stored as its JSON text (``1``, ``1.5``, ``"0001.7"``) and comes back with
its type: ``1`` and ``1.0`` and ``"1"`` are three different versions."""


class PruneStrategy(StrEnum):
    """How :meth:`GraphCheckpointStore.prune` thins a thread: ``keep_latest`` keeps the newest
    checkpoint of each namespace (with its pending writes), ``delete`` removes them all."""

    KEEP_LATEST = "keep_latest"
    DELETE = "delete"


GraphError: TypeAlias = NotFound | Conflict | InvalidInput | InvalidQuery | Busy | StorageFailure
"""Every failure a graph checkpoint store returns (the same union for every method)."""


# -- records ---------------------------------------------------------------------------------


@attrs.frozen
class ChannelValue:
    """A value as the runtime serialized it: its ``type`` name (1 to :data:`MAX_TYPE_CHARS`
    characters, e.g. ``"msgpack"``, or LangGraph's ``"empty"`` for a channel without a
    value) and ``value``, at most :data:`MAX_VALUE_BYTES` bytes, kept and returned byte for
    byte. runstore gives neither any meaning."""

    type: str
    value: bytes


@attrs.frozen
class ChannelBlob:
    """The value of ``channel`` at ``version``, written by a :meth:`GraphCheckpointStore.put`.

    Values are stored once per thread, namespace, channel and version and shared by every
    checkpoint of the namespace that names that version (LangGraph's ``new_versions``: a
    checkpoint stores values only for the channels that changed)."""

    channel: str
    version: ChannelVersion
    value: ChannelValue


@attrs.frozen
class GraphWrite:
    """One pending write to store with :meth:`GraphCheckpointStore.put_writes`: its index
    ``idx`` within the task's writes, the ``channel`` it writes and its ``value``.

    A negative ``idx`` marks a write to a special channel (LangGraph's ``WRITES_IDX_MAP``:
    ``__error__`` -1, ``__scheduled__`` -2, ``__interrupt__`` -3, ``__resume__`` -4), which
    replaces a stored one; any other index is the write's position in the task's writes,
    and the first write stored under it wins."""

    idx: int
    channel: str
    value: ChannelValue


@attrs.frozen
class PendingWrite:
    """A stored pending write of a checkpoint: the task (``task_id``, ``task_path``) that made
    it, its ``idx``, the ``channel`` it writes and its ``value``."""

    task_id: str
    task_path: str
    idx: int
    channel: str
    value: ChannelValue


@attrs.frozen
class NewGraphCheckpoint:
    """A checkpoint to store with :meth:`GraphCheckpointStore.put`.

    - ``checkpoint_id``: the runtime's id (1 to :data:`MAX_ID_CHARS` characters; ids of a
      namespace increase with time, see the module's note on order).
    - ``parent_checkpoint_id``: the checkpoint it follows (None for the first).
    - ``format_version``: the runtime's format number of the checkpoint (LangGraph's
      ``Checkpoint.v``), an integer >= 0.
    - ``ts``: the runtime's time stamp text as given (LangGraph's ISO 8601 ``Checkpoint.ts``),
      at most :data:`MAX_TS_CHARS` characters, possibly empty; never parsed.
    - ``state``: the rest of the checkpoint, serialized by the runtime (LangGraph's
      ``versions_seen``, ``updated_channels``, ``pending_sends``).
    - ``metadata``: a JSON object (LangGraph's ``CheckpointMetadata``, config keys merged in);
      a text ``metadata["run_id"]`` is the run :meth:`GraphCheckpointStore.delete_for_runs`
      finds it by. At most :data:`MAX_METADATA_BYTES` as JSON.
    - ``channel_versions``: the version of every channel at this checkpoint.
    - ``blobs``: the new channel values it brings (one per channel and version at most).
    """

    checkpoint_id: str
    parent_checkpoint_id: str | None
    format_version: int
    ts: str
    state: ChannelValue
    metadata: Mapping[str, JsonValue]
    channel_versions: Mapping[str, ChannelVersion]
    blobs: Sequence[ChannelBlob] = ()


@attrs.frozen
class GraphCheckpoint:
    """One stored checkpoint, whole.

    The fields of :class:`NewGraphCheckpoint` as stored, plus:

    - ``thread_id`` and ``checkpoint_ns`` it belongs to;
    - ``run_id``: ``metadata["run_id"]`` when that is text, else None;
    - ``channel_values``: for each channel of ``channel_versions`` whose value at that
      version is stored, that value (a channel whose value is missing is left out; a value
      of type ``"empty"`` is returned as stored: the runtime knows what it means);
    - ``pending_writes``: its pending writes, ordered by ``(task_path, task_id, idx)``
      (LangGraph's ``writes_sort_key``: the order a super-step applies its tasks' writes);
    - ``created_at_ms``: when it was first put (epoch ms; a put of the same id again keeps
      it, a copy keeps the source's).
    """

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    run_id: str | None
    format_version: int
    ts: str
    state: ChannelValue
    metadata: dict[str, JsonValue]
    channel_versions: dict[str, ChannelVersion]
    channel_values: dict[str, ChannelValue]
    pending_writes: tuple[PendingWrite, ...]
    created_at_ms: int


# -- the Protocol ----------------------------------------------------------------------------


@runtime_checkable
class GraphCheckpointStore(Protocol):
    """Store, read, list, copy and delete the graph checkpoints of agent threads.

    One call is one unit of work. The methods map one to one onto LangGraph's
    ``BaseCheckpointSaver`` (``put``, ``put_writes``, ``get_tuple``, ``list``,
    ``delete_thread``, ``delete_for_runs``, ``copy_thread``, ``prune``).
    """

    def put(
        self,
        thread_id: str,
        checkpoint: NewGraphCheckpoint,
        *,
        project_id: str,
        checkpoint_ns: str = "",
        at: datetime | int | None = None,
    ) -> Result[None, GraphError]:
        """Store ``checkpoint`` in namespace ``checkpoint_ns`` of the thread, in one unit of
        work with its channel versions and new values.

        A thread id that names no agent thread creates one in ``project_id`` (open, title
        ``""``, metadata ``{}``, at ``at``). Each blob is stored under (namespace, channel,
        version), replacing a value stored under the same three (the runtime never gives one
        version two values). Putting an id the namespace already holds replaces that
        checkpoint's parent, format, time stamp, state, metadata and channel versions, and
        keeps its pending writes and ``created_at_ms`` (LangGraph's savers replace it). ``at``
        (aware datetime or epoch ms; None reads the clock) is the ``created_at_ms`` of a new
        checkpoint.

        Failures, in this order: ``InvalidInput`` (an id, namespace, channel, type, version
        or time stamp that is not valid text or too long, a ``bool``, NaN or infinite
        version, a ``format_version`` that is not an int >= 0, metadata that is not an exact
        JSON object or larger than :data:`MAX_METADATA_BYTES`, a value that is not ``bytes``
        or larger than :data:`MAX_VALUE_BYTES`, two blobs of one channel and version, a naive
        ``at``); ``Conflict`` (entity ``"thread"``) when the thread belongs to another
        project (reason ``"thread belongs to another project"``, ``expected`` the given
        project, ``actual`` the thread's) or is archived (reason ``"thread is archived"``).
        """
        ...

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
        """Store the pending ``writes`` of task ``task_id`` (at ``task_path``) against
        checkpoint ``checkpoint_id`` of namespace ``checkpoint_ns``, in one unit of work.

        The checkpoint need not be stored yet: a graph runtime sends a task's writes while
        the put of their checkpoint may still be on its way (LangGraph's ``pregel/_loop.py``
        submits both in the background), so writes are stored under the thread, namespace
        and checkpoint id, and are that checkpoint's ``pending_writes`` once it is put (as
        LangGraph's own savers store them: rows keyed by thread, namespace, checkpoint, task
        and index). They are deleted with their checkpoint (:meth:`prune`,
        :meth:`delete_for_runs`), with every graph row of their thread
        (:meth:`delete_thread`, ``prune(strategy="delete")``, those of checkpoints never put
        included) and with the agent thread; :meth:`copy_thread` copies those of the
        checkpoints it copies. A thread that does not exist is created in ``project_id``
        when one is given (as :meth:`put` does; a thread of another project is the same
        ``Conflict`` as there), else it is ``NotFound("thread", id)``.

        A write is keyed by (task, ``idx``), in the order given: one with a negative ``idx``
        replaces the write stored under its key, any other is stored only when its key holds
        none (first wins), so repeating a call changes nothing (LangGraph's ``InMemorySaver``
        and ``SqliteSaver``: ``INSERT OR REPLACE`` for the special channels of
        ``WRITES_IDX_MAP``, ``INSERT OR IGNORE`` for the others). An empty ``writes`` stores
        nothing after the checks.

        Failures, in this order: ``InvalidInput`` (bad ids, task path, channels, types,
        values as for :meth:`put`, an ``idx`` that is not an int, ``writes`` given as
        something other than a sequence of :class:`GraphWrite`, a ``project_id`` that is not
        valid text); ``NotFound("thread", id)`` without a ``project_id``; ``Conflict``
        (entity ``"thread"``, reason ``"thread belongs to another project"`` or ``"thread is
        archived"``).
        """
        ...

    def get(
        self,
        thread_id: str,
        *,
        checkpoint_ns: str = "",
        checkpoint_id: str | None = None,
    ) -> Result[GraphCheckpoint | None, GraphError]:
        """Return checkpoint ``checkpoint_id`` of the namespace, or its newest (greatest id)
        when ``checkpoint_id`` is None; ``None`` when there is none (an unknown thread
        included, as LangGraph's ``get_tuple``).

        Failures: ``InvalidInput`` (a thread id, namespace or checkpoint id that is not valid
        text).
        """
        ...

    def list(
        self,
        thread_id: str | None,
        *,
        checkpoint_ns: str | None = None,
        checkpoint_id: str | None = None,
        filter: Mapping[str, JsonValue] | None = None,  # LangGraph's name
        before: str | None = None,
        limit: int | None = None,
    ) -> Result[tuple[GraphCheckpoint, ...], GraphError]:
        """Return the checkpoints that match, newest first (descending ``checkpoint_id``, ties
        across threads and namespaces by ascending thread id, then namespace).

        ``thread_id`` None lists every thread's; ``checkpoint_ns`` None every namespace's;
        ``checkpoint_id`` only that id; ``before`` only ids below it (text order); ``filter``
        only checkpoints whose metadata has, for each key of it, a top-level value equal to
        the filter's, as JSON values: numbers by value (``1`` equals ``1.0``), a ``bool`` is
        no number, objects regardless of key order, lists in order; a ``None`` filter value
        also matches a key the metadata lacks (as LangGraph's ``InMemorySaver`` and
        ``SqliteSaver`` do). The filter is one rule in every layer, applied to the metadata
        of the candidate checkpoints (a filter reads the metadata of every checkpoint the
        other arguments select). ``limit`` caps the count (None: all; 0: none).

        Failures: ``InvalidInput`` (ids, namespace or ``before`` that are not valid text, a
        ``filter`` that is not a JSON object); ``InvalidQuery("limit")`` for a limit that is
        not an int >= 0.
        """
        ...

    def delete_thread(self, thread_id: str) -> Result[int, GraphError]:
        """Delete every graph checkpoint of the thread (every namespace), every pending write
        (those sent for a checkpoint never put included) and channel value; return how many
        checkpoints were deleted (0 for a thread with none, or no such thread). The agent
        thread itself stays.

        Failures: ``InvalidInput`` (a thread id that is not valid text).
        """
        ...

    def delete_for_runs(self, run_ids: Sequence[str]) -> Result[int, GraphError]:
        """Delete, across every thread and namespace, the checkpoints whose ``run_id`` is one
        of ``run_ids``, with their pending writes and the channel values no remaining
        checkpoint names; return how many checkpoints were deleted. Pending writes stored
        for a checkpoint id no checkpoint holds (not put yet) stay. Delete the runs of
        threads at rest (see :meth:`prune`: a graph still advancing a namespace can lose a
        value its next put names).

        Failures: ``InvalidInput`` (``run_ids`` given as one string or not a sequence, a run
        id that is not valid id text, naming the index: ``run_ids[2]``).
        """
        ...

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> Result[int, GraphError]:
        """Copy every graph checkpoint of the source thread, in every namespace, with its
        metadata, channel values, pending writes and ``created_at_ms``, to the target thread;
        return how many checkpoints were copied. The source is unchanged.

        The result is as if each source checkpoint were put on the target with its writes: a
        target checkpoint with the same namespace and id is replaced (its pending writes by
        the source's), the target's others stay, so a repeated copy changes nothing. A target
        that names no agent thread is created in the source thread's project. A source with
        no graph checkpoints (or no such thread) copies nothing and creates nothing: 0.

        Failures, in this order: ``InvalidInput`` (ids that are not valid text, or the same
        id twice); ``Conflict`` (entity ``"thread"``, key the target) when the target
        belongs to another project than the source (``expected`` the source's project,
        ``actual`` the target's) or is archived.
        """
        ...

    def prune(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: PruneStrategy | str = PruneStrategy.KEEP_LATEST,
    ) -> Result[int, GraphError]:
        """Thin the graph checkpoints of ``thread_ids`` by ``strategy`` in one unit of work;
        return how many checkpoints were deleted.

        ``keep_latest`` keeps the newest checkpoint (greatest id) of every namespace of each
        thread, with its pending writes and the channel values it names, and deletes the
        others; ``delete`` deletes them all, as :meth:`delete_thread`. Channel values no
        remaining checkpoint names are deleted. Unknown threads and an empty ``thread_ids``
        change nothing. Note: ``keep_latest`` keeps no ancestors, so a runtime that rebuilds a
        channel from the writes of earlier checkpoints (LangGraph's beta delta channels)
        cannot rebuild it further back than the kept checkpoint. Pending writes stored for a
        checkpoint id no checkpoint holds (not put yet) stay under ``keep_latest``.

        Prune threads at rest. A put carries values only for the channels that changed since
        its parent (LangGraph's ``new_versions``) and names the others' versions, so deleting
        a namespace's checkpoints while a graph is still advancing it can delete a value that
        the graph's next put names without sending again; that checkpoint then comes back
        without the channel in ``channel_values``. This is so in any serial order of the
        calls, not a race a lock could close.

        Failures: ``InvalidInput`` (``thread_ids`` given as one string, an id that is not
        valid text, naming its index; a ``strategy`` that is not one of
        :class:`PruneStrategy`).
        """
        ...
