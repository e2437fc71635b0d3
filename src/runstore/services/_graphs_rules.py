"""The rules of the graph checkpoint stores, shared by every layer (pure: no I/O).

Validators turn a call's arguments into drafts (or the ``InvalidInput`` / ``InvalidQuery``
naming the first bad field), the codecs give the text a value is stored as, and the
decisions (:func:`decide_thread`, :func:`split_writes`, :func:`plan_prune`,
:func:`metadata_matches`) judge the facts a unit of work loaded. A layer only stores rows and
finds them; every answer is made here, so the in-memory layer and the live ones agree by
construction. See :mod:`runstore.services.graphs` for the contract.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence

import attrs
from returns.result import Failure, Result, Success

from runstore.services._agents_rules import check_id as check_thread_text
from runstore.services._agents_rules import resolve_at
from runstore.services._primitives import (
    JsonValue,
    check_int,
    check_text,
    decode_json,
    encode_json,
    member_of,
    type_problem,
    within,
)
from runstore.services.agents import InvalidQuery
from runstore.services.clock import Clock
from runstore.services.errors import Conflict, InvalidInput, NotFound
from runstore.services.graphs import (
    MAX_ID_CHARS,
    MAX_METADATA_BYTES,
    MAX_NAME_CHARS,
    MAX_PATH_CHARS,
    MAX_TS_CHARS,
    MAX_TYPE_CHARS,
    MAX_VALUE_BYTES,
    MAX_VERSION_CHARS,
    ChannelBlob,
    ChannelValue,
    ChannelVersion,
    GraphCheckpoint,
    GraphError,
    GraphWrite,
    NewGraphCheckpoint,
    PendingWrite,
    PruneStrategy,
)

__all__ = [
    "MAX_JSON_DEPTH",
    "Blob",
    "CheckpointDraft",
    "CheckpointRow",
    "GraphThread",
    "Head",
    "ListQuery",
    "WriteDraft",
    "WriteRow",
    "check_copy",
    "check_get",
    "check_list",
    "check_prune",
    "check_put",
    "check_put_writes",
    "check_run_ids",
    "check_thread_id",
    "checkpoint_key_text",
    "checkpoint_record",
    "decide_copy_target",
    "decide_thread",
    "decode_version",
    "encode_version",
    "json_equal",
    "metadata_matches",
    "newest_first",
    "plan_prune",
    "split_writes",
]

MAX_JSON_DEPTH = 200
"""Deepest nesting of the metadata object (as the agents service's JSON values)."""


# -- text and values -----------------------------------------------------------------------


def check_thread_id(value: object, field: str = "thread_id") -> Result[str, InvalidInput]:
    """A thread id, by the agents service's rule for ids (the thread is an agent thread)."""
    return check_thread_text(value, field)


def _id(value: object, field: str) -> Result[str, InvalidInput]:
    return check_text(value, field, max_chars=MAX_ID_CHARS)


def _ns(value: object, field: str = "checkpoint_ns") -> Result[str, InvalidInput]:
    return check_text(value, field, max_chars=MAX_PATH_CHARS, allow_empty=True)


def _channel(value: object, field: str) -> Result[str, InvalidInput]:
    return check_text(value, field, max_chars=MAX_NAME_CHARS)


def encode_version(value: object, field: str) -> Result[str, InvalidInput]:
    """A channel version as its stored text: the canonical JSON scalar (``1``, ``1.5``,
    ``"0001.7"``), which keeps its type. ``InvalidInput(field)`` for a ``bool``, NaN or an
    infinity, any other type, text with NUL or a lone surrogate, or more than
    :data:`MAX_VERSION_CHARS` characters of JSON."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return Failure(
            InvalidInput(field, f"must be text, an int or a float, got {type(value).__name__}")
        )
    if isinstance(value, str):
        checked = check_text(value, field, max_chars=MAX_VERSION_CHARS, allow_empty=True)
        if isinstance(checked, Failure):
            return checked
        text = json.dumps(checked.unwrap(), ensure_ascii=False)
    elif isinstance(value, float):
        if not math.isfinite(value):
            return Failure(InvalidInput(field, "must be a finite float"))
        text = repr(float(value))
    else:
        if value.bit_length() > 4 * MAX_VERSION_CHARS:
            return Failure(InvalidInput(field, "is longer than a version may be"))
        text = str(int(value))
    if len(text) > MAX_VERSION_CHARS + 2:
        return Failure(InvalidInput(field, f"is longer than {MAX_VERSION_CHARS} characters"))
    return Success(text)


def decode_version(text: str) -> ChannelVersion:
    """The version whose stored text :func:`encode_version` made."""
    value = decode_json(text)
    assert isinstance(value, str | int | float), text
    return value


def check_value(value: object, field: str) -> Result[ChannelValue, InvalidInput]:
    """A :class:`ChannelValue`: a type name of 1 to :data:`MAX_TYPE_CHARS` characters and at
    most :data:`MAX_VALUE_BYTES` bytes (a ``bytes`` subclass comes back as plain bytes)."""
    problem = type_problem(value, field, ChannelValue)
    if problem is not None:
        return Failure(problem)
    assert isinstance(value, ChannelValue)
    kind = check_text(value.type, f"{field}.type", max_chars=MAX_TYPE_CHARS)
    if isinstance(kind, Failure):
        return Failure(kind.failure())
    data = value.value
    if not isinstance(data, bytes):
        return Failure(InvalidInput(f"{field}.value", f"must be bytes, got {type(data).__name__}"))
    if len(data) > MAX_VALUE_BYTES:
        return Failure(
            InvalidInput(f"{field}.value", f"is {len(data)} bytes, more than {MAX_VALUE_BYTES}")
        )
    if type(data) is bytes and type(value.type) is str:
        return Success(value)
    return Success(ChannelValue(kind.unwrap(), bytes(data)))


def _metadata(value: object, field: str) -> Result[str, InvalidInput]:
    if not isinstance(value, Mapping):
        return Failure(InvalidInput(field, f"must be a JSON object, got {type(value).__name__}"))
    return encode_json(dict(value), field, max_depth=MAX_JSON_DEPTH, max_bytes=MAX_METADATA_BYTES)


def _sequence(value: object, field: str, what: str) -> Result[Sequence[object], InvalidInput]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        return Failure(InvalidInput(field, f"must be a sequence of {what}"))
    return Success(value)


# -- put -------------------------------------------------------------------------------------


@attrs.frozen
class Blob:
    """A channel value as stored: its channel, version text and value."""

    channel: str
    version: str
    value: ChannelValue


@attrs.frozen
class CheckpointRow:
    """A stored checkpoint, as every layer keeps it: the fields of
    :class:`NewGraphCheckpoint` checked (metadata as its JSON text, channel versions as
    ``(channel, version text)`` pairs in the order given), its ``run_id`` and
    ``created_at_ms`` (epoch ms)."""

    checkpoint_id: str
    parent_checkpoint_id: str | None
    run_id: str | None
    format_version: int
    ts: str
    state: ChannelValue
    metadata: str
    versions: tuple[tuple[str, str], ...]
    created_at_ms: int


@attrs.frozen
class CheckpointDraft:
    """A checked :meth:`GraphCheckpointStore.put`: the thread, its project (for a thread to
    create), the namespace, the row to store and the new values."""

    thread_id: str
    project_id: str
    checkpoint_ns: str
    row: CheckpointRow
    blobs: tuple[Blob, ...]


def _versions(value: object, field: str) -> Result[tuple[tuple[str, str], ...], InvalidInput]:
    if not isinstance(value, Mapping):
        return Failure(InvalidInput(field, f"must be a mapping, got {type(value).__name__}"))
    rows: list[tuple[str, str]] = []
    for channel, version in value.items():
        name = _channel(channel, f"{field} key")
        if isinstance(name, Failure):
            return Failure(name.failure())
        text = encode_version(version, f"{field}[{json.dumps(name.unwrap())}]")
        if isinstance(text, Failure):
            return Failure(text.failure())
        rows.append((name.unwrap(), text.unwrap()))
    return Success(tuple(rows))


def _blobs(value: object, field: str) -> Result[tuple[Blob, ...], InvalidInput]:
    items = _sequence(value, field, "ChannelBlob")
    if isinstance(items, Failure):
        return Failure(items.failure())
    blobs: dict[tuple[str, str], Blob] = {}
    for index, item in enumerate(items.unwrap()):
        where = f"{field}[{index}]"
        problem = type_problem(item, where, ChannelBlob)
        if problem is not None:
            return Failure(problem)
        assert isinstance(item, ChannelBlob)
        channel = _channel(item.channel, f"{where}.channel")
        if isinstance(channel, Failure):
            return Failure(channel.failure())
        version = encode_version(item.version, f"{where}.version")
        if isinstance(version, Failure):
            return Failure(version.failure())
        stored = check_value(item.value, f"{where}.value")
        if isinstance(stored, Failure):
            return Failure(stored.failure())
        key = (channel.unwrap(), version.unwrap())
        if key in blobs:
            return Failure(InvalidInput(where, "a second value of one channel and version"))
        blobs[key] = Blob(key[0], key[1], stored.unwrap())
    return Success(tuple(blobs.values()))


def check_put(
    thread_id: object,
    checkpoint: object,
    project_id: object,
    checkpoint_ns: object,
    at: object,
    clock: Clock,
) -> Result[CheckpointDraft, InvalidInput]:
    """Check the arguments of :meth:`GraphCheckpointStore.put`, in their order."""
    thread = check_thread_id(thread_id)
    if isinstance(thread, Failure):
        return Failure(thread.failure())
    problem = type_problem(checkpoint, "checkpoint", NewGraphCheckpoint)
    if problem is not None:
        return Failure(problem)
    assert isinstance(checkpoint, NewGraphCheckpoint)
    project = check_thread_text(project_id, "project_id")
    ns = _ns(checkpoint_ns)
    checkpoint_id = _id(checkpoint.checkpoint_id, "checkpoint.checkpoint_id")
    parent: Result[str | None, InvalidInput] = (
        Success(None)
        if checkpoint.parent_checkpoint_id is None
        else _id(checkpoint.parent_checkpoint_id, "checkpoint.parent_checkpoint_id")
    )
    fmt = check_int(checkpoint.format_version, "checkpoint.format_version", minimum=0)
    ts = check_text(checkpoint.ts, "checkpoint.ts", max_chars=MAX_TS_CHARS, allow_empty=True)
    state = within("checkpoint", check_value(checkpoint.state, "state"))
    for checked in (project, ns, checkpoint_id, parent, fmt, ts, state):
        if isinstance(checked, Failure):
            return Failure(checked.failure())
    metadata = _metadata(checkpoint.metadata, "checkpoint.metadata")
    if isinstance(metadata, Failure):
        return Failure(metadata.failure())
    versions = _versions(checkpoint.channel_versions, "checkpoint.channel_versions")
    if isinstance(versions, Failure):
        return Failure(versions.failure())
    blobs = _blobs(checkpoint.blobs, "checkpoint.blobs")
    if isinstance(blobs, Failure):
        return Failure(blobs.failure())
    at_ms = resolve_at(at, clock)
    if isinstance(at_ms, Failure):
        return Failure(at_ms.failure())
    run_id = checkpoint.metadata.get("run_id")
    row = CheckpointRow(
        checkpoint_id.unwrap(),
        parent.unwrap(),
        run_id if isinstance(run_id, str) else None,
        fmt.unwrap(),
        ts.unwrap(),
        state.unwrap(),
        metadata.unwrap(),
        versions.unwrap(),
        at_ms.unwrap(),
    )
    return Success(
        CheckpointDraft(thread.unwrap(), project.unwrap(), ns.unwrap(), row, blobs.unwrap())
    )


# -- threads ---------------------------------------------------------------------------------


@attrs.frozen
class GraphThread:
    """The facts of an agent thread a graph write is decided on: its ``id``, the integer
    ``key`` its graph rows carry (unique for the thread's lifetime: a thread deleted and made
    again has another), its project and whether it is archived."""

    id: str
    key: int
    project_id: str
    archived: bool


def decide_thread(
    thread: GraphThread | None, thread_id: str, project_id: str | None
) -> Result[GraphThread | None, GraphError]:
    """Whether graph rows may be written to the thread: the thread (None: it must be created,
    which only a ``project_id`` allows, else ``NotFound("thread")``), or the ``Conflict`` of
    a thread of another project (when ``project_id`` is given) or an archived one."""
    if thread is None:
        if project_id is None:
            return Failure(NotFound("thread", thread_id))
        return Success(None)
    if project_id is not None and thread.project_id != project_id:
        return Failure(
            Conflict(
                "thread",
                thread_id,
                "thread belongs to another project",
                expected=project_id,
                actual=thread.project_id,
            )
        )
    if thread.archived:
        return Failure(Conflict("thread", thread_id, "thread is archived"))
    return Success(thread)


def decide_copy_target(
    source: GraphThread, target: GraphThread | None, target_id: str
) -> Result[GraphThread | None, GraphError]:
    """Whether checkpoints of ``source`` may be copied to the target thread (see
    :meth:`GraphCheckpointStore.copy_thread`): as :func:`decide_thread` with the source's
    project."""
    return decide_thread(target, target_id, source.project_id)


# -- pending writes --------------------------------------------------------------------------


@attrs.frozen
class WriteRow:
    """A checked :class:`GraphWrite`."""

    idx: int
    channel: str
    value: ChannelValue


@attrs.frozen
class WriteDraft:
    """A checked :meth:`GraphCheckpointStore.put_writes`."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    task_id: str
    task_path: str
    writes: tuple[WriteRow, ...]
    project_id: str | None = None


def check_put_writes(
    thread_id: object,
    writes: object,
    checkpoint_id: object,
    task_id: object,
    task_path: object,
    checkpoint_ns: object,
    project_id: object = None,
) -> Result[WriteDraft, InvalidInput]:
    """Check the arguments of :meth:`GraphCheckpointStore.put_writes`, in their order."""
    thread = check_thread_id(thread_id)
    if isinstance(thread, Failure):
        return Failure(thread.failure())
    items = _sequence(writes, "writes", "GraphWrite")
    if isinstance(items, Failure):
        return Failure(items.failure())
    rows: list[WriteRow] = []
    for index, item in enumerate(items.unwrap()):
        where = f"writes[{index}]"
        problem = type_problem(item, where, GraphWrite)
        if problem is not None:
            return Failure(problem)
        assert isinstance(item, GraphWrite)
        idx = check_int(item.idx, f"{where}.idx")
        channel = _channel(item.channel, f"{where}.channel")
        value = check_value(item.value, f"{where}.value")
        for checked in (idx, channel, value):
            if isinstance(checked, Failure):
                return Failure(checked.failure())
        rows.append(WriteRow(idx.unwrap(), channel.unwrap(), value.unwrap()))
    checkpoint = _id(checkpoint_id, "checkpoint_id")
    task = _id(task_id, "task_id")
    path = check_text(task_path, "task_path", max_chars=MAX_PATH_CHARS, allow_empty=True)
    ns = _ns(checkpoint_ns)
    for checked in (checkpoint, task, path, ns):
        if isinstance(checked, Failure):
            return Failure(checked.failure())
    project: str | None = None
    if project_id is not None:
        checked_project = check_thread_text(project_id, "project_id")
        if isinstance(checked_project, Failure):
            return Failure(checked_project.failure())
        project = checked_project.unwrap()
    return Success(
        WriteDraft(
            thread.unwrap(),
            ns.unwrap(),
            checkpoint.unwrap(),
            task.unwrap(),
            path.unwrap(),
            tuple(rows),
            project,
        )
    )


def split_writes(writes: Sequence[WriteRow]) -> tuple[tuple[WriteRow, ...], tuple[WriteRow, ...]]:
    """The writes that replace a stored one under their key (a negative ``idx``: LangGraph's
    special channels, ``WRITES_IDX_MAP``) and those stored only when their key holds none
    (first wins), each in the order given (later ones of a group apply after earlier ones).

    Source: langgraph-checkpoint 4.3.2, ``InMemorySaver.put_writes`` (a write whose index is
    not negative is skipped when its key is stored)."""
    return (
        tuple(w for w in writes if w.idx < 0),
        tuple(w for w in writes if w.idx >= 0),
    )


def checkpoint_key_text(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> str:
    """The key of a ``NotFound("graph checkpoint", ...)``: ``<thread>/<ns>/<checkpoint>``."""
    return f"{thread_id}/{checkpoint_ns}/{checkpoint_id}"


# -- reads -----------------------------------------------------------------------------------


@attrs.frozen
class ListQuery:
    """A checked :meth:`GraphCheckpointStore.list` (or ``get``: ``limit`` 1, no filter).

    ``filter`` holds ``(key, value)`` pairs (None: no filter)."""

    thread_id: str | None
    checkpoint_ns: str | None
    checkpoint_id: str | None
    filter: tuple[tuple[str, JsonValue], ...] | None
    before: str | None
    limit: int | None


def check_get(
    thread_id: object, checkpoint_ns: object, checkpoint_id: object
) -> Result[ListQuery, InvalidInput]:
    """Check the arguments of :meth:`GraphCheckpointStore.get`: the query of its checkpoint."""
    thread = check_thread_id(thread_id)
    ns = _ns(checkpoint_ns)
    checkpoint: Result[str | None, InvalidInput] = (
        Success(None) if checkpoint_id is None else _id(checkpoint_id, "checkpoint_id")
    )
    for checked in (thread, ns, checkpoint):
        if isinstance(checked, Failure):
            return Failure(checked.failure())
    return Success(ListQuery(thread.unwrap(), ns.unwrap(), checkpoint.unwrap(), None, None, 1))


def check_list(
    thread_id: object,
    checkpoint_ns: object,
    checkpoint_id: object,
    filter: object,  # the Protocol's name
    before: object,
    limit: object,
) -> Result[ListQuery, InvalidInput | InvalidQuery]:
    """Check the arguments of :meth:`GraphCheckpointStore.list`, in their order."""
    thread: Result[str | None, InvalidInput] = (
        Success(None) if thread_id is None else check_thread_id(thread_id)
    )
    ns: Result[str | None, InvalidInput] = (
        Success(None) if checkpoint_ns is None else _ns(checkpoint_ns)
    )
    checkpoint: Result[str | None, InvalidInput] = (
        Success(None) if checkpoint_id is None else _id(checkpoint_id, "checkpoint_id")
    )
    for checked in (thread, ns, checkpoint):
        if isinstance(checked, Failure):
            return Failure(checked.failure())
    pairs: tuple[tuple[str, JsonValue], ...] | None = None
    if filter is not None:
        encoded = _metadata(filter, "filter")
        if isinstance(encoded, Failure):
            return Failure(encoded.failure())
        assert isinstance(filter, Mapping)
        pairs = tuple(filter.items())
    below: Result[str | None, InvalidInput] = (
        Success(None) if before is None else _id(before, "before")
    )
    if isinstance(below, Failure):
        return Failure(below.failure())
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        return Failure(InvalidQuery("limit", "must be None or an int >= 0"))
    return Success(
        ListQuery(
            thread.unwrap(),
            ns.unwrap(),
            checkpoint.unwrap(),
            pairs,
            below.unwrap(),
            None if limit is None else int(limit),
        )
    )


def json_equal(a: JsonValue, b: JsonValue) -> bool:
    """Whether two JSON values are equal as JSON values: numbers by value (``1`` equals
    ``1.0``), a ``bool`` equal only to a ``bool``, objects by their keys regardless of order,
    lists in order, ``None`` only to ``None``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if a is None or b is None:
        return a is b
    return type(a) is type(b) and a == b


def metadata_matches(
    metadata: Mapping[str, JsonValue], pairs: Iterable[tuple[str, JsonValue]] | None
) -> bool:
    """Whether a checkpoint's metadata passes a list filter: for each ``(key, value)``, the
    metadata's top-level value under ``key`` equals ``value`` (:func:`json_equal`); a
    ``None`` value also matches a missing key (as LangGraph's ``InMemorySaver`` and
    ``SqliteSaver``: ``metadata.get(key) == value``, ``json_extract(...) IS ?``)."""
    if pairs is None:
        return True
    return all(json_equal(metadata.get(key), value) for key, value in pairs)


@attrs.frozen
class Head:
    """What orders and selects a stored checkpoint: its row key, thread, namespace and id."""

    key: int
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str


def newest_first(heads: Iterable[Head]) -> list[Head]:
    """``heads`` in the order of every listing: descending ``checkpoint_id``, then ascending
    thread id, then namespace (text compared by code point)."""
    ordered = sorted(heads, key=lambda h: (h.thread_id, h.checkpoint_ns))
    ordered.sort(key=lambda h: h.checkpoint_id, reverse=True)
    return ordered


def checkpoint_record(
    thread_id: str,
    checkpoint_ns: str,
    row: CheckpointRow,
    values: Mapping[tuple[str, str], ChannelValue],
    writes: Iterable[PendingWrite],
) -> GraphCheckpoint:
    """The :class:`GraphCheckpoint` of a stored row, from the values stored under its
    namespace (``(channel, version text) -> value``) and its pending writes, ordered by
    ``(task_path, task_id, idx)``."""
    metadata = decode_json(row.metadata)
    assert isinstance(metadata, dict)
    return GraphCheckpoint(
        thread_id=thread_id,
        checkpoint_ns=checkpoint_ns,
        checkpoint_id=row.checkpoint_id,
        parent_checkpoint_id=row.parent_checkpoint_id,
        run_id=row.run_id,
        format_version=row.format_version,
        ts=row.ts,
        state=row.state,
        metadata=metadata,
        channel_versions={channel: decode_version(text) for channel, text in row.versions},
        channel_values={
            channel: values[(channel, text)]
            for channel, text in row.versions
            if (channel, text) in values
        },
        pending_writes=tuple(sorted(writes, key=lambda w: (w.task_path, w.task_id, w.idx))),
        created_at_ms=row.created_at_ms,
    )


# -- deletes, copies and prunes --------------------------------------------------------------


def check_run_ids(run_ids: object) -> Result[tuple[str, ...], InvalidInput]:
    """Check the argument of :meth:`GraphCheckpointStore.delete_for_runs`: a sequence of run
    ids (``InvalidInput("run_ids[i]")`` for a bad one); returned once each, in order."""
    items = _sequence(run_ids, "run_ids", "run ids, not one")
    if isinstance(items, Failure):
        return Failure(items.failure())
    for index, run_id in enumerate(items.unwrap()):
        checked = _id(run_id, f"run_ids[{index}]")
        if isinstance(checked, Failure):
            return Failure(checked.failure())
    return Success(tuple(dict.fromkeys(str(r) for r in items.unwrap())))


def check_copy(source: object, target: object) -> Result[tuple[str, str], InvalidInput]:
    """Check the arguments of :meth:`GraphCheckpointStore.copy_thread`, in their order."""
    src = check_thread_id(source, "source_thread_id")
    if isinstance(src, Failure):
        return Failure(src.failure())
    dst = check_thread_id(target, "target_thread_id")
    if isinstance(dst, Failure):
        return Failure(dst.failure())
    if src.unwrap() == dst.unwrap():
        return Failure(InvalidInput("target_thread_id", "is the source thread"))
    return Success((src.unwrap(), dst.unwrap()))


def check_prune(
    thread_ids: object, strategy: object
) -> Result[tuple[tuple[str, ...], PruneStrategy], InvalidInput]:
    """Check the arguments of :meth:`GraphCheckpointStore.prune`, in their order; the ids
    once each, in order."""
    items = _sequence(thread_ids, "thread_ids", "thread ids, not one")
    if isinstance(items, Failure):
        return Failure(items.failure())
    for index, thread_id in enumerate(items.unwrap()):
        checked = check_thread_id(thread_id, f"thread_ids[{index}]")
        if isinstance(checked, Failure):
            return Failure(checked.failure())
    chosen = member_of(PruneStrategy, strategy)
    if chosen is None:
        return Failure(InvalidInput("strategy", "must be 'keep_latest' or 'delete'"))
    return Success((tuple(dict.fromkeys(str(t) for t in items.unwrap())), chosen))


def plan_prune(heads: Iterable[Head], strategy: PruneStrategy) -> tuple[int, ...]:
    """The row keys of the checkpoints a prune deletes among ``heads`` (one thread's or
    several's): all of them for ``delete``; for ``keep_latest`` all but the greatest
    ``checkpoint_id`` of each thread and namespace. Ascending keys."""
    every = list(heads)
    if strategy is PruneStrategy.DELETE:
        return tuple(sorted(h.key for h in every))
    newest: dict[tuple[str, str], Head] = {}
    for head in every:
        place = (head.thread_id, head.checkpoint_ns)
        kept = newest.get(place)
        if kept is None or head.checkpoint_id > kept.checkpoint_id:
            newest[place] = head
    kept_keys = {h.key for h in newest.values()}
    return tuple(sorted(h.key for h in every if h.key not in kept_keys))
