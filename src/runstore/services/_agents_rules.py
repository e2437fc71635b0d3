"""The rules of the agent stores, written once for every layer (not part of the public API).

Every layer method reads the same way::

    check_<request>(...)            -> the checked request, or InvalidInput / InvalidQuery
    unit of work (the layer's)      -> load facts: rows as plain values (ThreadRow, RunRow, ...)
    decide_<operation>(facts, req)  -> what to write, or NotFound / Conflict / ...
    apply (the layer's)             -> the rows and counters written
    <thing>_record(row)             -> the record returned

so a layer keeps only how it stores rows and finds them. The checks of a write run in the
order :mod:`runstore.services.agents` documents: arguments, then existence, then the rules of
stored state. Validators follow the one style of :mod:`runstore.services._primitives`:
``Result[T, InvalidInput]`` naming the field path (``messages[3].content``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Generic, TypeVar

import attrs
from returns.result import Failure, Result, Success

from runstore.services._ledger_rules import damaged
from runstore.services._primitives import (
    MAX_INT64,
    JsonValue,
    check_int,
    check_optional,
    check_text,
    decode_json,
    describe,
    encode_json,
    first_failure,
    member_of,
    to_epoch_ms,
    within,
)
from runstore.services.agents import (
    MAX_CONTENT_BYTES,
    MAX_ID_CHARS,
    MAX_JSON_DEPTH,
    MAX_ROLE_CHARS,
    MAX_TITLE_CHARS,
    ActiveRunExists,
    AgentError,
    AgentRun,
    AgentRunFailure,
    AgentRunId,
    AgentRunStatus,
    AgentRunStore,
    CheckpointId,
    CheckpointStore,
    ContextCheckpoint,
    InvalidQuery,
    Message,
    MessageStore,
    NewMessage,
    Thread,
    ThreadId,
    ThreadStatus,
    ThreadStore,
    TokenUsage,
)
from runstore.services.clock import Clock
from runstore.services.errors import (
    Conflict,
    IllegalTransition,
    InvalidInput,
    NotFound,
    StorageFailure,
)
from runstore.services.ledger import (
    MAX_LEASE_MS,
    ExecutionFinished,
    ExecutionId,
    ExecutionStorage,
    ProjectMismatch,
    StaleFencingToken,
)
from runstore.services.pagination import MAX_PAGE_SIZE, CursorCodec, Page, page_of

T = TypeVar("T")
E = TypeVar("E", bound=StrEnum)

MESSAGE_CURSOR = CursorCodec("agent_messages", arity=2)
"""The cursor of a message page: ``(seq, direction)``, direction 0 forward, 1 newest first."""

_FORWARD, _BACKWARD = 0, 1

# -- primitives as the agent stores apply them ---------------------------------------------------


def check_id(value: object, field: str) -> Result[str, InvalidInput]:
    """Check an id: non-empty text up to :data:`MAX_ID_CHARS` characters, NUL allowed."""
    return check_text(value, field, max_chars=MAX_ID_CHARS, allow_nul=True)


def check_title(value: object, field: str = "title") -> Result[str, InvalidInput]:
    """Check a thread title: text up to :data:`MAX_TITLE_CHARS` characters, empty allowed."""
    return check_text(value, field, max_chars=MAX_TITLE_CHARS, allow_empty=True, allow_nul=True)


def encode_content(value: object, field: str) -> Result[str, InvalidInput]:
    """Encode a JSON value the agent stores keep: nesting up to :data:`MAX_JSON_DEPTH` levels
    and at most :data:`MAX_CONTENT_BYTES` UTF-8 bytes once encoded."""
    return encode_json(value, field, max_depth=MAX_JSON_DEPTH, max_bytes=MAX_CONTENT_BYTES)


def encode_object(value: object, field: str) -> Result[str, InvalidInput]:
    """Encode a JSON object (a ``Mapping`` with text keys); ``None`` is the empty object."""
    if value is None:
        return Success("{}")
    if not isinstance(value, Mapping):
        return Failure(InvalidInput(field, f"must be a JSON object, got {type(value).__name__}"))
    return encode_content(dict(value), field)


def canonical_json(text: str) -> str:
    """Stored JSON text with sorted keys, to compare two objects regardless of key order."""
    return json.dumps(json.loads(text), sort_keys=True, ensure_ascii=False)


def resolve_at(value: object, clock: Clock, field: str = "at") -> Result[int, InvalidInput]:
    """Return ``value`` as epoch ms: an aware ``datetime``, an ``int`` of ms, or ``None`` (the
    clock's now). ``InvalidInput(field)`` as :func:`~runstore.services._primitives.to_epoch_ms`."""
    return Success(clock.now_ms()) if value is None else to_epoch_ms(value, field)


def check_usage(value: object, field: str = "usage") -> Result[TokenUsage, InvalidInput]:
    """Check a :class:`TokenUsage` (``None`` is all zeros): counts in ``0..2**63-1``."""
    if value is None:
        return Success(TokenUsage())
    if not isinstance(value, TokenUsage):
        return Failure(InvalidInput(field, f"must be TokenUsage, got {type(value).__name__}"))
    for name in ("input", "output", "cache_read", "cache_write"):
        count = getattr(value, name)
        if type(count) is int and 0 <= count <= MAX_INT64:
            continue  # the common case, without building a Result per field
        checked = check_int(count, f"{field}.{name}", minimum=0)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
    return Success(value)


def encode_cost(value: object, field: str = "cost") -> Result[str | None, InvalidInput]:
    """Return the exact decimal text of a cost (``str(Decimal)``), or ``None`` for no cost.

    An ``int`` is taken as a whole ``Decimal``. A ``float`` is refused (it is already
    inexact), as are negative, NaN and infinite values and texts over 100 characters.
    """
    if value is None:
        return Success(None)
    if isinstance(value, bool | float):
        return Failure(InvalidInput(field, "must be a decimal.Decimal (a float is inexact)"))
    if isinstance(value, int):
        value = Decimal(value)
    if not isinstance(value, Decimal):
        return Failure(
            InvalidInput(field, f"must be a decimal.Decimal, got {type(value).__name__}")
        )
    if not value.is_finite():
        return Failure(InvalidInput(field, f"must be finite, got {value}"))
    if value.is_signed() and not value.is_zero():
        return Failure(InvalidInput(field, f"must not be negative, got {value}"))
    text = str(value)
    if len(text) > 100:
        return Failure(InvalidInput(field, "has more than 100 characters as text"))
    return Success(text)


def decode_cost(text: str | None) -> Decimal | None:
    """Turn stored cost text back into the same ``Decimal`` (same digits, same exponent)."""
    return None if text is None else Decimal(text)


def check_thread_status(value: object) -> Result[ThreadStatus, InvalidInput]:
    """Return ``value`` as a :class:`ThreadStatus` or ``InvalidInput("status")``."""
    status = member_of(ThreadStatus, value)
    if status is not None:
        return Success(status)
    return Failure(InvalidInput("status", f"unknown thread status {describe(value)}"))


def check_failure(
    status: object, failure: object
) -> Result[tuple[AgentRunStatus, str | None], InvalidInput]:
    """Check a final run ``status`` with its ``failure``; return the status and the failure as
    JSON text (``None`` when absent). ``failed`` needs a failure, ``succeeded`` refuses one."""
    if not isinstance(status, AgentRunStatus):
        member = member_of(AgentRunStatus, status)
        if member is None:
            return Failure(InvalidInput("status", f"unknown run status {describe(status)}"))
        status = member
    if not status.is_finished:
        return Failure(InvalidInput("status", f"a run finishes with a final status, not {status}"))
    if failure is None:
        if status is AgentRunStatus.FAILED:
            return Failure(InvalidInput("failure", "a failed run needs an AgentRunFailure"))
        return Success((status, None))
    if status is AgentRunStatus.SUCCEEDED:
        return Failure(InvalidInput("failure", "a succeeded run carries no failure"))
    if not isinstance(failure, AgentRunFailure):
        return Failure(
            InvalidInput("failure", f"must be AgentRunFailure, got {type(failure).__name__}")
        )
    checks = first_failure(
        check_id(failure.kind, "failure.kind"),
        check_text(
            failure.message,
            "failure.message",
            max_chars=MAX_TITLE_CHARS * 16,
            allow_empty=True,
            allow_nul=True,
        ),
    )
    encoded = checks.bind(
        lambda _: encode_content(
            {"kind": failure.kind, "message": failure.message, "details": failure.details},
            "failure",
        )
    )
    return encoded.map(lambda text: (status, text))


def decode_failure(text: str | None) -> AgentRunFailure | None:
    """Turn stored failure JSON back into an :class:`AgentRunFailure`."""
    if text is None:
        return None
    data = decode_json(text)
    assert isinstance(data, dict)
    kind, message = data["kind"], data["message"]
    assert isinstance(kind, str)
    assert isinstance(message, str)
    return AgentRunFailure(kind=kind, message=message, details=data["details"])


def _combine(
    make: Callable[..., T], *checks: Result[object, InvalidInput]
) -> Result[T, InvalidInput]:
    """``make(*values)`` of the checked values, or the first failure among ``checks`` (in
    argument order: the order a caller sees errors in), as
    :func:`~runstore.services._primitives.first_failure` finds it."""
    # ``type() is`` rather than isinstance: Result's metaclass is ABCMeta, whose isinstance
    # costs a call per check on the append hot path; Failure is final, so this is exact.
    for check in checks:
        if type(check) is Failure:
            return Failure(check.failure())
    return Success(make(*[check.unwrap() for check in checks]))


# -- facts: the rows every layer keeps, as plain values -----------------------------------------


@attrs.frozen
class ThreadRow:
    """A thread as stored: :class:`Thread` with its metadata still JSON text."""

    id: str
    project_id: str
    seq: int
    agent_id: str | None
    owner_id: str | None
    title: str
    metadata_json: str
    status: ThreadStatus
    active_run_id: str | None
    head_seq: int
    message_count: int
    last_message_at_ms: int | None
    checkpoint_count: int
    created_at_ms: int
    updated_at_ms: int


@attrs.frozen
class RunRow:
    """A run as stored: :class:`AgentRun` (same fields, same order) with its failure still
    JSON text."""

    id: str
    thread_id: str
    project_id: str
    execution_id: str | None
    seq: int
    status: AgentRunStatus
    owner: str | None
    lease_expires_at_ms: int | None
    fencing_token: int
    attempts: int
    failure_json: str | None
    queued_at_ms: int
    started_at_ms: int | None
    finished_at_ms: int | None


def thread_record(row: ThreadRow) -> Thread:
    """The :class:`Thread` a stored row stands for."""
    metadata = decode_json(row.metadata_json)
    assert isinstance(metadata, dict)
    return Thread(
        id=ThreadId(row.id),
        project_id=row.project_id,
        seq=row.seq,
        agent_id=row.agent_id,
        owner_id=row.owner_id,
        title=row.title,
        metadata=metadata,
        status=row.status,
        active_run_id=None if row.active_run_id is None else AgentRunId(row.active_run_id),
        head_seq=row.head_seq,
        message_count=row.message_count,
        last_message_at_ms=row.last_message_at_ms,
        checkpoint_count=row.checkpoint_count,
        created_at_ms=row.created_at_ms,
        updated_at_ms=row.updated_at_ms,
    )


def run_record(row: RunRow) -> AgentRun:
    """The :class:`AgentRun` a stored row stands for."""
    return AgentRun(
        id=AgentRunId(row.id),
        thread_id=ThreadId(row.thread_id),
        project_id=row.project_id,
        execution_id=row.execution_id,
        seq=row.seq,
        status=row.status,
        owner=row.owner,
        lease_expires_at_ms=row.lease_expires_at_ms,
        fencing_token=row.fencing_token,
        attempts=row.attempts,
        failure=decode_failure(row.failure_json),
        queued_at_ms=row.queued_at_ms,
        started_at_ms=row.started_at_ms,
        finished_at_ms=row.finished_at_ms,
    )


NO_USAGE = TokenUsage()
"""The usage of a message that cost no tokens (one shared value)."""


def message_record(
    thread_id: ThreadId,
    seq: int,
    role: str,
    content_json: str,
    run_id: str | None,
    usage: TokenUsage,
    cost_text: str | None,
    created_at_ms: int,
    client_id: str | None = None,
    metadata_json: str | None = None,
) -> Message:
    """The :class:`Message` a stored message stands for (the hot path of every listing);
    ``metadata_json`` None is the empty object.

    Raises:
        DamagedMessage: the stored content or metadata is not JSON text (a damaged row).
    """
    try:
        metadata = {} if metadata_json is None else decode_json(metadata_json)
        content = decode_json(content_json)
    except ValueError as exc:
        raise DamagedMessage(f"message {thread_id}#{seq} is not JSON text: {exc}") from exc
    if not isinstance(metadata, dict):
        raise DamagedMessage(f"message {thread_id}#{seq} has metadata that is not an object")
    # Built positionally, in Message's field order: measurably cheaper than keywords.
    return Message(
        thread_id,
        seq,
        role,
        content,
        None if run_id is None else AgentRunId(run_id),
        usage,
        None if cost_text is None else Decimal(cost_text),
        created_at_ms,
        client_id,
        metadata,
    )


def require_thread(row: T | None, thread_id: str) -> Result[T, AgentError]:
    """Return the thread's facts, or ``NotFound("thread", thread_id)`` when it has none."""
    return Failure(NotFound("thread", thread_id)) if row is None else Success(row)


def require_run(row: RunRow | None, run_id: str) -> Result[RunRow, AgentError]:
    """Return the run's row, or ``NotFound("agent_run", run_id)``."""
    return Failure(NotFound("agent_run", run_id)) if row is None else Success(row)


def check_run_in_thread(
    row: RunRow | None, run_id: str, thread_id: str
) -> Result[RunRow, AgentError]:
    """Return the run's row when it belongs to ``thread_id``: ``NotFound("agent_run")`` when
    there is none, ``Conflict`` (``expected`` this thread, ``actual`` the run's) otherwise."""
    if row is None:
        return Failure(NotFound("agent_run", run_id))
    if row.thread_id != thread_id:
        return Failure(
            Conflict(
                "agent_run",
                run_id,
                "run belongs to another thread",
                expected=thread_id,
                actual=row.thread_id,
            )
        )
    return Success(row)


Counter = Callable[[str], int]
"""A backend's counters: ``counter(name)`` takes the next value of counter ``name`` (from 1,
dense, never reused, given back only when the unit of work rolls back)."""

THREAD_SEQ = "thread_seq"
"""The counter of :attr:`Thread.seq`."""

RUN_SEQ = "run_seq"
"""The counter of :attr:`AgentRun.seq`."""

FENCING_TOKEN = "fencing_token"
"""The counter of agent-run fencing tokens (one for the whole database)."""

COUNTERS = (THREAD_SEQ, RUN_SEQ, FENCING_TOKEN)
"""Every counter of the agent stores."""


@attrs.frozen
class Decided(Generic[T]):
    """A decision: the ``row`` that answers the request, and whether the layer must ``write``
    it (False for a retry that the stored row already answers)."""

    row: T
    write: bool


def write_decided(
    decided: Result[Decided[T], AgentError], write: Callable[[T], object]
) -> Result[T, AgentError]:
    """Apply a decision: call ``write(row)`` when it says so (the layer's storage), and return
    the row that answers the request; a ``Failure`` passes through and nothing is written."""
    if isinstance(decided, Failure):
        return Failure(decided.failure())
    outcome = decided.unwrap()
    if outcome.write:
        write(outcome.row)
    return Success(outcome.row)


# -- threads ------------------------------------------------------------------------------------


@attrs.frozen
class ThreadCreate:
    """A checked :meth:`ThreadStore.create`."""

    thread_id: str
    project_id: str
    title: str
    metadata_json: str
    agent_id: str | None
    owner_id: str | None
    at_ms: int


def check_thread_create(
    thread_id: object,
    project_id: object,
    title: object,
    metadata: object,
    agent_id: object,
    owner_id: object,
    at: object,
    clock: Clock,
) -> Result[ThreadCreate, InvalidInput]:
    """Check the arguments of :meth:`ThreadStore.create`, in that order."""
    return _combine(
        ThreadCreate,
        check_id(thread_id, "thread_id"),
        check_id(project_id, "project_id"),
        check_title(title),
        encode_object(metadata, "metadata"),
        check_optional(agent_id, "agent_id", check_id),
        check_optional(owner_id, "owner_id", check_id),
        resolve_at(at, clock),
    )


def decide_thread_create(
    existing: ThreadRow | None, request: ThreadCreate, counter: Counter
) -> Result[Decided[ThreadRow], AgentError]:
    """A new open, empty thread (its ``seq`` the next of :data:`THREAD_SEQ`); the stored one
    when the same create is repeated (metadata compared regardless of key order);
    ``Conflict`` when the id exists with other values."""
    if existing is not None:
        if (
            existing.project_id == request.project_id
            and existing.title == request.title
            and existing.agent_id == request.agent_id
            and existing.owner_id == request.owner_id
            and canonical_json(existing.metadata_json) == canonical_json(request.metadata_json)
        ):
            return Success(Decided(existing, write=False))
        return Failure(Conflict("thread", request.thread_id, "thread exists with other values"))
    row = ThreadRow(
        id=request.thread_id,
        project_id=request.project_id,
        seq=counter(THREAD_SEQ),
        agent_id=request.agent_id,
        owner_id=request.owner_id,
        title=request.title,
        metadata_json=request.metadata_json,
        status=ThreadStatus.OPEN,
        active_run_id=None,
        head_seq=0,
        message_count=0,
        last_message_at_ms=None,
        checkpoint_count=0,
        created_at_ms=request.at_ms,
        updated_at_ms=request.at_ms,
    )
    return Success(Decided(row, write=True))


@attrs.frozen
class ThreadUpdate:
    """A checked :meth:`ThreadStore.update` (``None``: keep the stored value)."""

    thread_id: str
    title: str | None
    metadata_json: str | None
    status: ThreadStatus | None
    at_ms: int


def check_thread_update(
    thread_id: object, title: object, metadata: object, status: object, at: object, clock: Clock
) -> Result[ThreadUpdate, InvalidInput]:
    """Check the arguments of :meth:`ThreadStore.update`, in that order."""
    return _combine(
        ThreadUpdate,
        check_id(thread_id, "thread_id"),
        check_optional(title, "title", check_title),
        check_optional(metadata, "metadata", encode_object),
        Success(None) if status is None else check_thread_status(status),
        resolve_at(at, clock),
    )


def decide_thread_update(
    row: ThreadRow | None, request: ThreadUpdate
) -> Result[Decided[ThreadRow], AgentError]:
    """The changed thread row (always written: ``updated_at_ms`` moves); ``NotFound``;
    ``Conflict("active run")`` when archiving a thread whose run is still running."""
    if row is None:
        return Failure(NotFound("thread", request.thread_id))
    if request.status is ThreadStatus.ARCHIVED and row.active_run_id is not None:
        return Failure(
            Conflict("thread", request.thread_id, "active run", actual=row.active_run_id)
        )
    changed = attrs.evolve(
        row,
        title=row.title if request.title is None else request.title,
        metadata_json=row.metadata_json if request.metadata_json is None else request.metadata_json,
        status=row.status if request.status is None else request.status,
        updated_at_ms=request.at_ms,
    )
    return Success(Decided(changed, write=True))


# -- listings of threads and runs -------------------------------------------------------------

THREAD_CURSOR = CursorCodec("agent_threads")
"""The cursor of a thread page: the ``seq`` of its last thread."""

RUN_CURSOR = CursorCodec("agent_runs")
"""The cursor of a run page: the ``seq`` of its last run."""


def _check_limit(limit: object) -> Result[int, InvalidQuery]:
    if isinstance(limit, bool) or not isinstance(limit, int):
        return Failure(InvalidQuery("limit", f"must be an integer, got {type(limit).__name__}"))
    if limit < 1:
        return Failure(InvalidQuery("limit", f"must be at least 1, got {limit}"))
    if limit > MAX_PAGE_SIZE:
        return Failure(InvalidQuery("limit", f"must be at most {MAX_PAGE_SIZE}, got {limit}"))
    return Success(int(limit))


def _check_after(codec: CursorCodec, cursor: object) -> Result[int, InvalidQuery]:
    """The ``seq`` a listing continues after (0 from the start)."""
    decoded = codec.decode(cursor)
    if isinstance(decoded, Failure):
        return Failure(InvalidQuery("cursor", decoded.failure().reason))
    keys = decoded.unwrap()
    if keys is None:
        return Success(0)
    if keys[0] < 0:
        return Failure(InvalidQuery("cursor", f"not a cursor of this listing ({codec.kind})"))
    return Success(keys[0])


def _check_enum(kind: type[E], value: object) -> Result[E | None, InvalidQuery]:
    if value is None:
        return Success(value)
    member = member_of(kind, value)
    if member is not None:
        return Success(member)
    return Failure(InvalidQuery("status", f"unknown status {describe(value)}"))


@attrs.frozen
class ThreadListing:
    """A checked :meth:`ThreadStore.list`: threads of the project with ``seq > after_seq``
    and the filters given, ``limit`` of them (a backend fetches ``limit + 1``)."""

    project_id: str
    agent_id: str | None
    status: ThreadStatus | None
    owner_id: str | None
    limit: int
    after_seq: int

    def admits(self, row: ThreadRow) -> bool:
        """Whether ``row`` belongs to the listing (the in-memory layer's filter)."""
        return (
            row.project_id == self.project_id
            and row.seq > self.after_seq
            and (self.agent_id is None or row.agent_id == self.agent_id)
            and (self.status is None or row.status is self.status)
            and (self.owner_id is None or row.owner_id == self.owner_id)
        )


def check_thread_listing(
    project_id: object,
    agent_id: object,
    status: object,
    owner_id: object,
    limit: object,
    cursor: object,
) -> Result[ThreadListing, AgentError]:
    """Check the arguments of :meth:`ThreadStore.list`: the query (``limit``, ``status``,
    ``cursor``: ``InvalidQuery``), then the ids (``InvalidInput``)."""
    query = (
        _check_limit(limit),
        _check_enum(ThreadStatus, status),
        _check_after(THREAD_CURSOR, cursor),
    )
    ids = (
        check_id(project_id, "project_id"),
        check_optional(agent_id, "agent_id", check_id),
        check_optional(owner_id, "owner_id", check_id),
    )
    for checked in (*query, *ids):
        if isinstance(checked, Failure):
            return Failure(checked.failure())
    return Success(
        ThreadListing(
            ids[0].unwrap(),
            ids[1].unwrap(),  # type: ignore[arg-type]
            query[1].unwrap(),
            ids[2].unwrap(),  # type: ignore[arg-type]
            query[0].unwrap(),
            query[2].unwrap(),
        )
    )


def thread_page(rows: Sequence[ThreadRow], limit: int) -> Page[Thread]:
    """The page of threads fetched as ``limit + 1`` rows in ``seq`` order."""
    page = page_of(rows, limit, lambda row: THREAD_CURSOR.encode(row.seq))
    return Page(tuple(map(thread_record, page.items)), page.has_more, page.next_cursor)


@attrs.frozen
class RunListing:
    """A checked :meth:`AgentRunStore.list`: runs of the thread with ``seq > after_seq``, in
    ``status`` when given, ``limit`` of them (a backend fetches ``limit + 1``)."""

    thread_id: str
    status: AgentRunStatus | None
    limit: int
    after_seq: int

    def admits(self, row: RunRow) -> bool:
        """Whether ``row`` belongs to the listing (the in-memory layer's filter)."""
        return (
            row.thread_id == self.thread_id
            and row.seq > self.after_seq
            and (self.status is None or row.status is self.status)
        )


def check_run_listing(
    thread_id: object, status: object, limit: object, cursor: object
) -> Result[RunListing, AgentError]:
    """Check the arguments of :meth:`AgentRunStore.list`: the query, then the thread id."""
    checks = (
        _check_limit(limit),
        _check_enum(AgentRunStatus, status),
        _check_after(RUN_CURSOR, cursor),
        check_id(thread_id, "thread_id"),
    )
    for checked in checks:
        if isinstance(checked, Failure):
            return Failure(checked.failure())
    return Success(
        RunListing(
            checks[3].unwrap(),
            checks[1].unwrap(),
            checks[0].unwrap(),
            checks[2].unwrap(),
        )
    )


def run_page(rows: Sequence[RunRow], limit: int) -> Page[AgentRun]:
    """The page of runs fetched as ``limit + 1`` rows in ``seq`` order."""
    page = page_of(rows, limit, lambda row: RUN_CURSOR.encode(row.seq))
    return Page(tuple(map(run_record, page.items)), page.has_more, page.next_cursor)


def check_run_ids(run_ids: object) -> Result[tuple[str, ...], AgentError]:
    """Check the argument of :meth:`AgentRunStore.get_many`: a sequence of at most
    :data:`MAX_PAGE_SIZE` ids (``InvalidQuery``), each valid (``InvalidInput("run_ids[i]")``);
    return them once each, in the order given."""
    if isinstance(run_ids, str | bytes) or not isinstance(run_ids, Sequence):
        return Failure(InvalidQuery("run_ids", "must be a sequence of run ids, not one"))
    if len(run_ids) > MAX_PAGE_SIZE:
        return Failure(InvalidQuery("run_ids", f"at most {MAX_PAGE_SIZE} ids, got {len(run_ids)}"))
    for index, run_id in enumerate(run_ids):
        checked = check_id(run_id, f"run_ids[{index}]")
        if isinstance(checked, Failure):
            return Failure(checked.failure())
    return Success(tuple(dict.fromkeys(run_ids)))


def runs_in_order(ids: Sequence[str], rows: Sequence[RunRow]) -> tuple[AgentRun, ...]:
    """The records of the found ``rows``, in the order of ``ids``."""
    by_id = {row.id: row for row in rows}
    return tuple(run_record(by_id[run_id]) for run_id in ids if run_id in by_id)


# -- runs ---------------------------------------------------------------------------------------


def check_lease(lease_ms: object) -> Result[int, InvalidInput]:
    """Check a lease: an int of ms in ``1..MAX_LEASE_MS`` (the ledger's limits)."""
    return check_int(lease_ms, "lease_ms", minimum=1, maximum=MAX_LEASE_MS)


def check_token(token: object) -> Result[int, InvalidInput]:
    """Check a fencing token: an int >= 0."""
    return check_int(token, "fencing_token", minimum=0, maximum=None)


@attrs.frozen
class RunQueue:
    """A checked :meth:`AgentRunStore.queue`, or a :meth:`AgentRunStore.start` (then with the
    ``owner`` and ``lease_ms`` of the claim); ``now_ms`` is the clock's time leases count
    from."""

    run_id: str
    thread_id: str
    execution_id: str | None
    at_ms: int
    owner: str | None
    lease_ms: int
    now_ms: int


def check_run_queue(
    run_id: object, thread_id: object, execution_id: object, at: object, clock: Clock
) -> Result[RunQueue, InvalidInput]:
    """Check the arguments of :meth:`AgentRunStore.queue`, in that order."""
    return _combine(
        lambda run, thread, execution, at_ms: RunQueue(
            run, thread, execution, at_ms, None, 0, clock.now_ms()
        ),
        check_id(run_id, "run_id"),
        check_id(thread_id, "thread_id"),
        check_optional(execution_id, "execution_id", check_id),
        resolve_at(at, clock),
    )


def check_run_start(
    run_id: object,
    thread_id: object,
    owner: object,
    lease_ms: object,
    execution_id: object,
    at: object,
    clock: Clock,
) -> Result[RunQueue, InvalidInput]:
    """Check the arguments of :meth:`AgentRunStore.start`, in that order."""
    return _combine(
        lambda run, thread, worker, lease, execution, at_ms: RunQueue(
            run, thread, execution, at_ms, worker, lease, clock.now_ms()
        ),
        check_id(run_id, "run_id"),
        check_id(thread_id, "thread_id"),
        check_id(owner, "owner"),
        check_lease(lease_ms),
        check_optional(execution_id, "execution_id", check_id),
        resolve_at(at, clock),
    )


@attrs.frozen
class RunClaim:
    """A checked :meth:`AgentRunStore.claim` or :meth:`AgentRunStore.reclaim`."""

    run_id: str
    owner: str
    lease_ms: int
    now_ms: int


def check_run_claim(
    run_id: object, owner: object, lease_ms: object, clock: Clock
) -> Result[RunClaim, InvalidInput]:
    """Check the arguments of :meth:`AgentRunStore.claim` (and ``reclaim``), in that order."""
    return _combine(
        lambda run, worker, lease: RunClaim(run, worker, lease, clock.now_ms()),
        check_id(run_id, "run_id"),
        check_id(owner, "owner"),
        check_lease(lease_ms),
    )


@attrs.frozen
class RunRenew:
    """A checked :meth:`AgentRunStore.renew`."""

    run_id: str
    fencing_token: int
    lease_ms: int
    now_ms: int


def check_run_renew(
    run_id: object, fencing_token: object, lease_ms: object, clock: Clock
) -> Result[RunRenew, InvalidInput]:
    """Check the arguments of :meth:`AgentRunStore.renew`, in that order."""
    return _combine(
        lambda run, token, lease: RunRenew(run, token, lease, clock.now_ms()),
        check_id(run_id, "run_id"),
        check_token(fencing_token),
        check_lease(lease_ms),
    )


def check_execution(
    ledger: ExecutionStorage, execution_id: str, project_id: str
) -> Result[None, AgentError]:
    """Check that the execution may own a run of ``project_id``: it exists
    (``NotFound("execution")``), is of that project (``ProjectMismatch``) and is not finished
    (``ExecutionFinished``). Read through ``ledger`` in the caller's unit of work."""
    found = ledger.get(ExecutionId(execution_id))
    if isinstance(found, Failure):
        error = found.failure()
        if isinstance(error, StaleFencingToken):  # pragma: no cover - get never returns it
            raise TypeError(f"ExecutionStorage.get returned {error!r}")
        return Failure(error)
    execution = found.unwrap()
    if execution.project_id != project_id:
        return Failure(ProjectMismatch("execution", execution_id, project_id, execution.project_id))
    if execution.status.is_finished:
        return Failure(ExecutionFinished(execution_id, str(execution.status)))
    return Success(None)


def _claimed(row: RunRow, owner: str, lease_ms: int, now_ms: int, counter: Counter) -> RunRow:
    """``row`` claimed by ``owner``: running under a lease until ``now_ms + lease_ms``, a fresh
    fencing token, one more attempt; ``started_at_ms`` keeps the first claim."""
    return attrs.evolve(
        row,
        status=AgentRunStatus.RUNNING,
        owner=owner,
        lease_expires_at_ms=now_ms + lease_ms,
        fencing_token=counter(FENCING_TOKEN),
        attempts=row.attempts + 1,
        started_at_ms=now_ms if row.started_at_ms is None else row.started_at_ms,
    )


def _slot_free(thread: ThreadRow, run_id: str) -> Result[None, AgentError]:
    """The single-flight rule: ``ActiveRunExists`` while another run of the thread runs."""
    active = thread.active_run_id
    if active is not None and active != run_id:
        return Failure(ActiveRunExists(thread.id, active))
    return Success(None)


def decide_run_queue(
    thread: ThreadRow | None,
    existing: RunRow | None,
    request: RunQueue,
    ledger: ExecutionStorage,
    counter: Counter,
) -> Result[Decided[RunRow], AgentError]:
    """The new run (queued, or running for a ``start``), or the stored one for a repeated
    request; the failures of :meth:`AgentRunStore.queue` / ``start`` in their order, a
    ``start`` ending with the single-flight rule. The execution is read from ``ledger``
    only when it is reached; ``counter`` is called only for a new run."""
    if thread is None:
        return Failure(NotFound("thread", request.thread_id))
    if existing is not None:
        if (
            existing.thread_id == request.thread_id
            and existing.execution_id == request.execution_id
            and (request.owner is None or existing.owner == request.owner)
        ):
            return Success(Decided(existing, write=False))
        reason = "run exists with another thread, execution or owner"
        return Failure(Conflict("agent_run", request.run_id, reason))
    if thread.status is ThreadStatus.ARCHIVED:
        return Failure(Conflict("thread", request.thread_id, "thread is archived"))
    if request.execution_id is not None:
        checked = check_execution(ledger, request.execution_id, thread.project_id)
        if isinstance(checked, Failure):
            return checked
    if request.owner is not None:
        free = _slot_free(thread, request.run_id)
        if isinstance(free, Failure):
            return Failure(free.failure())
    row = RunRow(
        id=request.run_id,
        thread_id=request.thread_id,
        project_id=thread.project_id,
        execution_id=request.execution_id,
        seq=counter(RUN_SEQ),
        status=AgentRunStatus.QUEUED,
        owner=None,
        lease_expires_at_ms=None,
        fencing_token=0,
        attempts=0,
        failure_json=None,
        queued_at_ms=request.at_ms,
        started_at_ms=None,
        finished_at_ms=None,
    )
    if request.owner is not None:
        row = _claimed(row, request.owner, request.lease_ms, request.now_ms, counter)
        row = attrs.evolve(row, started_at_ms=request.at_ms)
    return Success(Decided(row, write=True))


def decide_run_claim(
    row: RunRow | None,
    thread: ThreadRow | None,
    request: RunClaim,
    ledger: ExecutionStorage,
    counter: Counter,
) -> Result[Decided[RunRow], AgentError]:
    """The claimed run, or the stored one when its holder repeats the claim under a live
    lease; the failures of :meth:`AgentRunStore.claim` in its order. ``thread`` is the run's
    thread (None only when ``row`` is)."""
    if row is None or thread is None:
        return Failure(NotFound("agent_run", request.run_id))
    if (
        row.status is AgentRunStatus.RUNNING
        and row.owner == request.owner
        and not _expired(row, request.now_ms)
    ):
        return Success(Decided(row, write=False))
    if row.status is not AgentRunStatus.QUEUED:
        return Failure(
            IllegalTransition("agent_run", request.run_id, str(row.status), "running")
        )
    if thread.status is ThreadStatus.ARCHIVED:
        return Failure(Conflict("thread", thread.id, "thread is archived"))
    if row.execution_id is not None:
        checked = check_execution(ledger, row.execution_id, row.project_id)
        if isinstance(checked, Failure):
            return checked
    free = _slot_free(thread, row.id)
    if isinstance(free, Failure):
        return Failure(free.failure())
    claimed = _claimed(row, request.owner, request.lease_ms, request.now_ms, counter)
    return Success(Decided(claimed, write=True))


def _expired(row: RunRow, now_ms: int) -> bool:
    """Whether the lease of a running run has expired (expiry <= now, as the ledger's; a run
    without an expiry, one written before leases, counts as expired)."""
    return row.lease_expires_at_ms is None or row.lease_expires_at_ms <= now_ms


def held(row: RunRow | None, run_id: str, token: int) -> Result[RunRow, AgentError]:
    """The fencing rule: the run's row when ``token`` is its latest; ``NotFound("agent_run")``
    when there is no run, ``StaleFencingToken(run_id, token, current, entity="agent run")``
    otherwise."""
    if row is None:
        return Failure(NotFound("agent_run", run_id))
    if token != row.fencing_token:
        return Failure(StaleFencingToken(run_id, token, row.fencing_token, entity="agent run"))
    return Success(row)


def _not_running(row: RunRow, reason: str) -> Failure[AgentError]:
    return Failure(
        Conflict("agent_run", row.id, reason, expected="running", actual=str(row.status))
    )


def decide_run_renew(row: RunRow | None, request: RunRenew) -> Result[Decided[RunRow], AgentError]:
    """The run with its lease until ``now + lease_ms``; the failures of
    :meth:`AgentRunStore.renew` in its order."""
    found = held(row, request.run_id, request.fencing_token)
    if isinstance(found, Failure):
        return Failure(found.failure())
    current = found.unwrap()
    if current.status is not AgentRunStatus.RUNNING:
        return _not_running(current, "only a running run has a lease")
    renewed = attrs.evolve(current, lease_expires_at_ms=request.now_ms + request.lease_ms)
    return Success(Decided(renewed, write=True))


def decide_run_reclaim(
    row: RunRow | None, request: RunClaim, counter: Counter
) -> Result[Decided[RunRow], AgentError]:
    """The run taken over by ``request.owner`` with a fresh token; the failures of
    :meth:`AgentRunStore.reclaim` in its order."""
    if row is None:
        return Failure(NotFound("agent_run", request.run_id))
    if row.status is not AgentRunStatus.RUNNING:
        return _not_running(row, "only a running run can be reclaimed")
    if not _expired(row, request.now_ms):
        return Failure(
            Conflict(
                "agent_run",
                row.id,
                "lease is still held",
                expected=str(row.lease_expires_at_ms),
                actual=str(request.now_ms),
            )
        )
    reclaimed = _claimed(row, request.owner, request.lease_ms, request.now_ms, counter)
    return Success(Decided(reclaimed, write=True))


@attrs.frozen
class RunFinish:
    """A checked :meth:`AgentRunStore.finish` (``fencing_token`` None: a ``cancel``)."""

    run_id: str
    fencing_token: int | None
    status: AgentRunStatus
    failure_json: str | None
    at_ms: int


def check_run_finish(
    run_id: object, fencing_token: object, status: object, failure: object, at: object, clock: Clock
) -> Result[RunFinish, InvalidInput]:
    """Check the arguments of :meth:`AgentRunStore.finish`, in that order."""
    return _combine(
        lambda checked_id, token, final, at_ms: RunFinish(
            checked_id, token, final[0], final[1], at_ms
        ),
        check_id(run_id, "run_id"),
        check_token(fencing_token),
        check_failure(status, failure),
        resolve_at(at, clock),
    )


def check_run_cancel(
    run_id: object, failure: object, at: object, clock: Clock
) -> Result[RunFinish, InvalidInput]:
    """Check the arguments of :meth:`AgentRunStore.cancel`, in that order."""
    return _combine(
        lambda checked_id, final, at_ms: RunFinish(checked_id, None, final[0], final[1], at_ms),
        check_id(run_id, "run_id"),
        check_failure(AgentRunStatus.CANCELLED, failure),
        resolve_at(at, clock),
    )


def decide_run_finish(
    row: RunRow | None, request: RunFinish
) -> Result[Decided[RunRow], AgentError]:
    """The finished row; the stored one when the same finish (or cancel) is repeated; the
    failures of :meth:`AgentRunStore.finish` (with a token) or ``cancel`` (without one) in
    their order."""
    if row is None:
        return Failure(NotFound("agent_run", request.run_id))
    if request.fencing_token is not None:
        found = held(row, request.run_id, request.fencing_token)
        if isinstance(found, Failure):
            return Failure(found.failure())
    replay = row.status is request.status and row.failure_json == request.failure_json
    if row.status.is_finished and replay:
        return Success(Decided(row, write=False))
    if row.status.is_finished or (
        row.status is AgentRunStatus.QUEUED and request.fencing_token is not None
    ):
        return Failure(
            IllegalTransition("agent_run", request.run_id, str(row.status), str(request.status))
        )
    finished = attrs.evolve(
        row,
        status=request.status,
        failure_json=request.failure_json,
        lease_expires_at_ms=None,
        finished_at_ms=request.at_ms,
    )
    return Success(Decided(finished, write=True))


# -- messages -----------------------------------------------------------------------------------


@attrs.frozen
class MessageDraft:
    """A checked :class:`NewMessage`: JSON and cost encoded, time resolved."""

    role: str
    run_id: str | None
    content_json: str
    usage: TokenUsage
    cost_text: str | None
    at_ms: int
    fencing_token: int | None = None
    client_id: str | None = None
    metadata_json: str | None = None
    """None for the empty object (stored as NULL)."""

    def same_message(self, other: MessageDraft) -> bool:
        """Whether ``other`` asks for the same message (what a repeated client id must
        match): role, run, usage, cost, and content and metadata as JSON values regardless
        of key order. Time, token and client id are not part of it.

        Raises:
            DamagedMessage: the stored side's JSON text is not JSON (a damaged row).
        """
        try:
            return (
                self.role == other.role
                and self.run_id == other.run_id
                and self.usage == other.usage
                and self.cost_text == other.cost_text
                and canonical_json(self.content_json) == canonical_json(other.content_json)
                and canonical_json(self.metadata_json or "{}")
                == canonical_json(other.metadata_json or "{}")
            )
        except ValueError as exc:
            raise DamagedMessage(f"a stored message is not JSON text: {exc}") from exc

    def record(self, thread_id: ThreadId, seq: int) -> Message:
        """The :class:`Message` this draft is, stored as ``seq`` of ``thread_id``."""
        return message_record(
            thread_id,
            seq,
            self.role,
            self.content_json,
            self.run_id,
            self.usage,
            self.cost_text,
            self.at_ms,
            self.client_id,
            self.metadata_json,
        )


def _check_message_token(message: NewMessage) -> Result[int | None, InvalidInput]:
    """A message's fencing token: required with a run, refused without one."""
    token = message.fencing_token
    if message.run_id is None:
        if token is None:
            return Success(None)
        return Failure(InvalidInput("fencing_token", "a token is given only with its run_id"))
    if token is None:
        return Failure(InvalidInput("fencing_token", "a message of a run carries its token"))
    return check_token(token)


def _encode_metadata(value: object) -> Result[str | None, InvalidInput]:
    """A message's metadata as JSON object text, None when there is none (or it is empty)."""
    if value is None or (isinstance(value, Mapping) and not value):
        return Success(None)
    return encode_object(value, "metadata")


def check_message(message: NewMessage, clock: Clock) -> Result[MessageDraft, InvalidInput]:
    """Check one :class:`NewMessage` (fields ``role``, ``run_id``, ``content``, ``usage``,
    ``cost``, ``at``, ``fencing_token``, ``client_id``, ``metadata``, in that order)."""
    return _combine(
        MessageDraft,
        check_text(message.role, "role", max_chars=MAX_ROLE_CHARS, allow_nul=True),
        check_optional(message.run_id, "run_id", check_id),
        encode_content(message.content, "content"),
        check_usage(message.usage),
        encode_cost(message.cost),
        resolve_at(message.at, clock),
        _check_message_token(message),
        check_optional(message.client_id, "client_id", check_id),
        _encode_metadata(message.metadata),
    )


def check_messages(
    messages: object, clock: Clock
) -> Result[tuple[MessageDraft, ...], InvalidInput]:
    """Check every message of an append; the field names carry the index (``messages[3].role``)
    when more than one is given."""
    # list and tuple first: the common case, without the slower ABC check.
    if not isinstance(messages, list | tuple) and (
        not isinstance(messages, Sequence) or isinstance(messages, NewMessage)
    ):
        return Failure(InvalidInput("messages", "must be a sequence of NewMessage"))
    many = len(messages) > 1
    drafts: list[MessageDraft] = []
    for index, message in enumerate(messages):
        if not isinstance(message, NewMessage):
            field = f"messages[{index}].message" if many else "message"
            return Failure(InvalidInput(field, "must be a NewMessage"))
        checked = check_message(message, clock)
        if many:
            checked = within(f"messages[{index}]", checked)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        drafts.append(checked.unwrap())
    return Success(tuple(drafts))


@attrs.frozen
class Append:
    """A checked :meth:`MessageStore.append_many`; ``now_ms`` is the thread's new
    ``updated_at_ms``."""

    thread_id: str
    drafts: tuple[MessageDraft, ...]
    now_ms: int


def check_append(thread_id: object, messages: object, clock: Clock) -> Result[Append, InvalidInput]:
    """Check the arguments of :meth:`MessageStore.append_many`: the thread id, then the
    messages."""
    checked_id = check_id(thread_id, "thread_id")
    if isinstance(checked_id, Failure):
        return Failure(checked_id.failure())
    drafts = check_messages(messages, clock)
    if isinstance(drafts, Failure):
        return Failure(drafts.failure())
    return Success(Append(checked_id.unwrap(), drafts.unwrap(), clock.now_ms()))


def message_run_ids(drafts: Sequence[MessageDraft]) -> tuple[str, ...]:
    """The distinct runs the drafts name, in order of first mention."""
    return tuple(dict.fromkeys(d.run_id for d in drafts if d.run_id is not None))


@attrs.frozen
class ThreadHead:
    """What an append needs to know of its thread: its status and counter."""

    status: ThreadStatus
    head_seq: int


def client_ids(drafts: Sequence[MessageDraft]) -> tuple[str, ...]:
    """The distinct client ids the drafts carry, in order of first mention."""
    return tuple(dict.fromkeys(d.client_id for d in drafts if d.client_id is not None))


Known = Mapping[str, tuple[int, MessageDraft]]
"""The stored messages of a thread by client id: ``client_id -> (seq, message)``, for the
ids of one append (:func:`client_ids`)."""


def fresh_drafts(drafts: Sequence[MessageDraft], known: Known) -> tuple[MessageDraft, ...]:
    """The drafts an append stores: those whose client id is neither stored nor used earlier
    in the batch (a repeat, or a conflict that :func:`decide_append` refuses)."""
    seen: set[str] = set(known)
    fresh: list[MessageDraft] = []
    for draft in drafts:
        if draft.client_id is not None:
            if draft.client_id in seen:
                continue
            seen.add(draft.client_id)
        fresh.append(draft)
    return tuple(fresh)


@attrs.frozen
class AppendPlan:
    """What an append stores and answers: the ``new`` drafts with their sequence numbers (the
    next after the thread's counter, in order) and the ``messages`` the call returns, one per
    draft (a repeated client id answers with the stored message)."""

    new: tuple[tuple[int, MessageDraft], ...]
    messages: tuple[Message, ...]

    @property
    def head_seq(self) -> int | None:
        """The thread's counter after the append (None when nothing new is stored)."""
        return self.new[-1][0] if self.new else None


def decide_append(
    head: ThreadHead | None,
    runs: Mapping[str, RunRow | None],
    request: Append,
    known: Known | None = None,
) -> Result[AppendPlan, AgentError]:
    """Plan an append: sequence numbers for the drafts that are new, after the thread's
    counter (never a number handed out before), and the stored message for each repeated
    client id. ``runs`` holds the row of every run in :func:`message_run_ids` (None when
    missing), ``known`` the thread's stored messages of the batch's :func:`client_ids`.

    Failures, in order: ``NotFound("thread")``; ``Conflict("thread is archived")``;
    ``NotFound("agent_run")`` or ``Conflict`` (a run of another thread); then, message by
    message, ``StaleFencingToken`` and ``Conflict("run is not running")``; then
    ``Conflict("client id used for another message")``.
    """
    if head is None:
        return Failure(NotFound("thread", request.thread_id))
    drafts = request.drafts
    if not drafts:
        return Success(AppendPlan((), ()))
    if head.status is ThreadStatus.ARCHIVED:
        return Failure(Conflict("thread", request.thread_id, "thread is archived"))
    for run_id, row in runs.items():
        checked = check_run_in_thread(row, run_id, request.thread_id)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
    for draft in drafts:
        if draft.run_id is not None:
            writer = running_holder(runs[draft.run_id], draft.run_id, draft.fencing_token or 0)
            if isinstance(writer, Failure):
                return Failure(writer.failure())
    thread_id = ThreadId(request.thread_id)
    stored: dict[str, tuple[int, MessageDraft]] = dict(known or {})
    new: list[tuple[int, MessageDraft]] = []
    messages: list[Message] = []
    for draft in drafts:
        if draft.client_id is not None and draft.client_id in stored:
            seq, before = stored[draft.client_id]
            if not before.same_message(draft):
                return Failure(
                    Conflict(
                        "message",
                        draft.client_id,
                        "client id used for another message",
                        actual=str(seq),
                    )
                )
            messages.append(before.record(thread_id, seq))
            continue
        seq = head.head_seq + len(new) + 1
        new.append((seq, draft))
        if draft.client_id is not None:
            stored[draft.client_id] = (seq, draft)
        messages.append(draft.record(thread_id, seq))
    return Success(AppendPlan(tuple(new), tuple(messages)))


def running_holder(row: RunRow | None, run_id: str, token: int) -> Result[RunRow, AgentError]:
    """The rule of every write on a run's behalf: :func:`held` (``NotFound``,
    ``StaleFencingToken``), then ``Conflict("run is not running")`` unless it runs."""
    found = held(row, run_id, token)
    if isinstance(found, Failure):
        return found
    current = found.unwrap()
    if current.status is not AgentRunStatus.RUNNING:
        return _not_running(current, "run is not running")
    return found


def check_message_ref(thread_id: object, seq: object) -> Result[int, AgentError]:
    """Check the arguments of :meth:`MessageStore.get`: ``InvalidInput`` (thread id), then
    ``InvalidQuery("seq")`` unless ``seq`` is an ``int`` of at least 1; return the seq."""
    checked_id = check_id(thread_id, "thread_id")
    if isinstance(checked_id, Failure):
        return Failure(checked_id.failure())
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        return Failure(
            InvalidQuery("seq", f"must be an integer of at least 1, got {describe(seq)}")
        )
    return Success(int(seq))


@attrs.frozen
class ListQuery:
    """A checked :meth:`MessageStore.list` query, its cursor resolved into a bound."""

    after_seq: int | None
    before_seq: int | None
    roles: frozenset[str] | None
    limit: int

    @property
    def forward(self) -> bool:
        """Whether the page is the first ``limit`` after ``after_seq`` (else the newest)."""
        return self.after_seq is not None


def _query_int(field: str, value: object) -> Result[int | None, InvalidQuery]:
    if value is None:
        return Success(None)
    if isinstance(value, bool) or not isinstance(value, int):
        return Failure(InvalidQuery(field, f"must be an integer, got {type(value).__name__}"))
    if value < 0:
        return Failure(InvalidQuery(field, f"must not be negative, got {value}"))
    return Success(min(int(value), MAX_INT64))


def _query_roles(roles: object) -> Result[frozenset[str] | None, InvalidQuery]:
    if roles is None:
        return Success(None)
    if isinstance(roles, str | bytes) or not isinstance(roles, Collection):
        return Failure(InvalidQuery("roles", "must be a collection of role names, not one"))
    for role in roles:
        checked = check_text(role, "roles", max_chars=MAX_ROLE_CHARS, allow_nul=True)
        if isinstance(checked, Failure):
            return Failure(InvalidQuery("roles", checked.failure().reason))
    return Success(frozenset(str(role) for role in roles))


def _query_cursor(
    cursor: object, after_seq: int | None, before_seq: int | None
) -> Result[tuple[int | None, int | None], InvalidQuery]:
    """The bounds once ``cursor`` is applied: a forward cursor sets ``after_seq``, a newest-first
    one ``before_seq``; a cursor cannot be combined with the bound it sets, nor a newest-first
    one with ``after_seq`` (that would turn the paging direction)."""
    decoded = MESSAGE_CURSOR.decode(cursor)
    if isinstance(decoded, Failure):
        return Failure(InvalidQuery("cursor", decoded.failure().reason))
    keys = decoded.unwrap()
    if keys is None:
        return Success((after_seq, before_seq))
    seq, direction = keys
    if seq < 0 or direction not in (_FORWARD, _BACKWARD):
        return Failure(InvalidQuery("cursor", "not a cursor of this listing (agent_messages)"))
    if after_seq is not None:
        return Failure(InvalidQuery("cursor", "pass a cursor or after_seq, not both"))
    if direction == _FORWARD:
        return Success((seq, before_seq))
    if before_seq is not None:
        return Failure(InvalidQuery("cursor", "pass a cursor or before_seq, not both"))
    return Success((None, seq))


def check_list_query(
    after_seq: object, before_seq: object, roles: object, limit: object, cursor: object = None
) -> Result[ListQuery, InvalidQuery]:
    """Check the query arguments of :meth:`MessageStore.list` (see there for the rules), in
    the order ``limit``, ``after_seq``, ``before_seq``, ``roles``, ``cursor``."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        return Failure(InvalidQuery("limit", f"must be an integer, got {type(limit).__name__}"))
    if limit < 1:
        return Failure(InvalidQuery("limit", f"must be at least 1, got {limit}"))
    if limit > MAX_PAGE_SIZE:
        return Failure(InvalidQuery("limit", f"must be at most {MAX_PAGE_SIZE}, got {limit}"))
    after = _query_int("after_seq", after_seq)
    before = _query_int("before_seq", before_seq)
    role_set = _query_roles(roles)
    for checked in (after, before, role_set):
        if isinstance(checked, Failure):
            return Failure(checked.failure())
    bounds = _query_cursor(cursor, after.unwrap(), before.unwrap())
    return bounds.map(lambda b: ListQuery(b[0], b[1], role_set.unwrap(), int(limit)))


def check_list(
    thread_id: object,
    after_seq: object,
    before_seq: object,
    roles: object,
    limit: object,
    cursor: object,
) -> Result[ListQuery, AgentError]:
    """Check the arguments of :meth:`MessageStore.list`: the query first (``InvalidQuery``),
    then the thread id (``InvalidInput``)."""
    query: Result[ListQuery, AgentError] = check_list_query(
        after_seq, before_seq, roles, limit, cursor
    )
    checked_id = check_id(thread_id, "thread_id")
    if isinstance(query, Success) and isinstance(checked_id, Failure):
        return Failure(checked_id.failure())
    return query


def message_page(items: Sequence[Message], has_more: bool, query: ListQuery) -> Page[Message]:
    """The page of ``items`` (ascending seq); when ``has_more``, its cursor continues in the
    query's direction from the page's far end."""
    if not has_more:
        return Page(items=tuple(items), has_more=False)
    if query.forward:
        cursor = MESSAGE_CURSOR.encode(items[-1].seq, _FORWARD)
    else:
        cursor = MESSAGE_CURSOR.encode(items[0].seq, _BACKWARD)
    return Page(items=tuple(items), has_more=True, next_cursor=cursor)


def check_thread_id(thread_id: object) -> Result[str, InvalidInput]:
    """Check the one argument of :meth:`MessageStore.pop` and :meth:`MessageStore.clear`."""
    return check_id(thread_id, "thread_id")


def check_delete_by_run(thread_id: object, run_id: object) -> Result[None, InvalidInput]:
    """Check the arguments of :meth:`MessageStore.delete_by_run`, in that order."""
    return first_failure(check_id(thread_id, "thread_id"), check_id(run_id, "run_id"))


# -- removing the newest messages: pop and clear --------------------------------------------------


@attrs.frozen
class Transcript:
    """What a :meth:`MessageStore.pop` or :meth:`MessageStore.clear` is decided on, read in
    its unit of work: the thread, the lowest and highest stored sequence numbers (None with no
    message) and the ``through_seq`` of the thread's latest checkpoint (None without one)."""

    thread: ThreadRow | None
    lowest_seq: int | None
    newest_seq: int | None
    summarised_through: int | None


def decide_removal(
    facts: Transcript, thread_id: str, *, whole: bool
) -> Result[int | None, AgentError]:
    """Decide a pop (``whole`` False: the newest message) or a clear (``whole``: every
    message): the lowest sequence number to remove (the newest one for a pop), or None when
    the thread has no message (nothing is written).

    The rules, in this order:

    - ``NotFound("thread")``.
    - ``Conflict("thread is archived")``: an archived thread is read-only until reopened, as
      for appends.
    - ``Conflict("active run")`` (``actual`` the run) while a run of the thread is running:
      the transcript under a running run is that run's to write, under its fencing token, and
      an unfenced removal would race the worker's appends (finish, cancel or reclaim the run
      first; :meth:`MessageStore.delete_by_run` removes a run's own messages).
    - ``Conflict("message is summarised by a checkpoint")`` (``expected`` ``"> N"``, the
      latest checkpoint's ``through_seq``, ``actual`` the seq) when a message to remove is at
      or below the latest checkpoint's ``through_seq``: its content lives on in the summary,
      so removing it would not forget it. The kept context after it (the messages after
      ``through_seq``) can be popped and cleared; checkpoints are never removed.
    """
    thread = facts.thread
    if thread is None:
        return Failure(NotFound("thread", thread_id))
    if thread.status is ThreadStatus.ARCHIVED:
        return Failure(Conflict("thread", thread_id, "thread is archived"))
    if thread.active_run_id is not None:
        return Failure(Conflict("thread", thread_id, "active run", actual=thread.active_run_id))
    first = facts.lowest_seq if whole else facts.newest_seq
    if first is None:
        return Success(None)
    through = facts.summarised_through
    if through is not None and first <= through:
        return Failure(
            Conflict(
                "thread",
                thread_id,
                "message is summarised by a checkpoint",
                expected=f"> {through}",
                actual=str(first),
            )
        )
    return Success(first)


class DamagedMessage(ValueError):
    """A stored message body or metadata that is not JSON text (only a hand-made or damaged
    row can be: writes store checked JSON); the layers return it as :func:`damaged_message`."""


def damaged_message(operation: str, error: DamagedMessage) -> StorageFailure:
    """``StorageFailure(kind=corrupt)`` for a message the layer could not read (the ledger's
    ``SQLITE_CORRUPT`` code on every backend, table ``agent_message_bodies``)."""
    return damaged(operation, error, "agent_message_bodies")


class AppendsOne:
    """:meth:`MessageStore.append` as every layer has it: :meth:`append_many` of one message."""

    def append_many(
        self, thread_id: str, messages: Sequence[NewMessage]
    ) -> Result[tuple[Message, ...], AgentError]:
        """Append messages (the layer's)."""
        raise NotImplementedError

    def append(
        self,
        thread_id: str,
        *,
        role: str,
        content: JsonValue,
        run_id: str | None = None,
        fencing_token: int | None = None,
        usage: TokenUsage | None = None,
        cost: Decimal | None = None,
        at: datetime | int | None = None,
        client_id: str | None = None,
        metadata: Mapping[str, JsonValue] | None = None,
    ) -> Result[Message, AgentError]:
        """Append one message (see ``MessageStore.append_many``)."""
        usage = TokenUsage() if usage is None else usage
        message = NewMessage(
            role, content, run_id, usage, cost, at, fencing_token, client_id, metadata
        )
        return self.append_many(thread_id, (message,)).map(lambda stored: stored[0])


# -- checkpoints --------------------------------------------------------------------------------


@attrs.frozen
class CheckpointDraft:
    """A checked :meth:`CheckpointStore.create` request."""

    checkpoint_id: str
    thread_id: str
    run_id: str
    fencing_token: int
    expected_latest_id: str | None
    summary: str
    through_seq: int
    observed_head_seq: int
    at_ms: int
    reason: str = "manual"
    format_version: int = 1
    tokens_before: int | None = None
    tokens_after: int | None = None
    summary_model: str | None = None

    def checkpoint(self, number: int) -> ContextCheckpoint:
        """The checkpoint this request creates as the thread's ``number``-th."""
        return ContextCheckpoint(
            id=CheckpointId(self.checkpoint_id),
            thread_id=ThreadId(self.thread_id),
            run_id=AgentRunId(self.run_id),
            number=number,
            previous_id=(
                None if self.expected_latest_id is None else CheckpointId(self.expected_latest_id)
            ),
            summary=self.summary,
            through_seq=self.through_seq,
            observed_head_seq=self.observed_head_seq,
            created_at_ms=self.at_ms,
            reason=self.reason,
            format_version=self.format_version,
            tokens_before=self.tokens_before,
            tokens_after=self.tokens_after,
            summary_model=self.summary_model,
        )

    def repeats(self, stored: ContextCheckpoint) -> bool:
        """Whether ``stored`` is what this request creates (all but number and time)."""
        mine = self.checkpoint(stored.number)
        return attrs.evolve(mine, created_at_ms=stored.created_at_ms) == stored


def _check_count(value: object, field: str) -> Result[int | None, InvalidInput]:
    """An optional count of tokens: None, or an int >= 0."""
    return Success(None) if value is None else check_int(value, field, minimum=0)


def check_checkpoint(
    checkpoint_id: object,
    thread_id: object,
    run_id: object,
    fencing_token: object,
    summary: object,
    through_seq: object,
    observed_head_seq: object,
    expected_latest_id: object,
    at: object,
    clock: Clock,
    reason: object = "manual",
    format_version: object = 1,
    tokens_before: object = None,
    tokens_after: object = None,
    summary_model: object = None,
) -> Result[CheckpointDraft, InvalidInput]:
    """Check the arguments of :meth:`CheckpointStore.create` (see there for the rules): the
    ids, the token, the summary, the sequence numbers, ``at``, the details (reason, format
    version, token estimates, summary model), then ``through_seq < observed_head_seq``."""
    ids = (
        check_id(checkpoint_id, "checkpoint_id"),
        check_id(thread_id, "thread_id"),
        check_id(run_id, "run_id"),
    )
    token = check_token(fencing_token)
    expected = check_optional(expected_latest_id, "expected_latest_id", check_id)
    text = check_text(summary, "summary", max_chars=MAX_CONTENT_BYTES // 4, allow_nul=True)
    through = check_int(through_seq, "through_seq", minimum=1)
    head = check_int(observed_head_seq, "observed_head_seq", minimum=1)
    failed = first_failure(*ids, token, expected, text, through, head)
    if isinstance(failed, Failure):
        return Failure(failed.failure())
    details = (
        resolve_at(at, clock),
        check_id(reason, "reason"),
        check_int(format_version, "format_version", minimum=1),
        _check_count(tokens_before, "tokens_before"),
        _check_count(tokens_after, "tokens_after"),
        check_optional(summary_model, "summary_model", check_id),
    )
    for checked in details:
        if isinstance(checked, Failure):
            return Failure(checked.failure())
    if through.unwrap() >= head.unwrap():  # each argument first, then how they relate
        return Failure(
            InvalidInput(
                "through_seq",
                "must be below observed_head_seq: a checkpoint keeps the message that"
                " triggered it (seed 002)",
            )
        )
    return Success(
        CheckpointDraft(
            ids[0].unwrap(),
            ids[1].unwrap(),
            ids[2].unwrap(),
            token.unwrap(),
            expected.unwrap(),  # type: ignore[arg-type]
            text.unwrap(),
            through.unwrap(),
            head.unwrap(),
            *(checked.unwrap() for checked in details),  # type: ignore[arg-type]
        )
    )


@attrs.frozen
class CheckpointFacts:
    """What a checkpoint create is decided on, read in its unit of work: the thread, the run,
    the checkpoint that run already created, whether the id is taken, the thread's latest
    checkpoint, and the first stored message after ``through_seq`` as ``(seq, role)`` (each
    None when there is none)."""

    thread: ThreadRow | None
    run: RunRow | None
    mine: ContextCheckpoint | None
    id_taken: bool
    latest: ContextCheckpoint | None
    first_kept: tuple[int, str] | None = None


def _current(
    thread: ThreadRow, latest: ContextCheckpoint | None, expected_id: str | None, head: int
) -> Result[None, AgentError]:
    """The compare-and-swap: the latest checkpoint is ``expected_id`` and the head is
    ``head``, else ``Conflict("latest checkpoint changed")`` / ``Conflict("head moved")``."""
    latest_id = None if latest is None else latest.id
    if latest_id != expected_id:
        return Failure(
            Conflict(
                "thread",
                thread.id,
                "latest checkpoint changed",
                expected=expected_id or "",
                actual=latest_id or "",
            )
        )
    if thread.head_seq != head:
        return Failure(
            Conflict(
                "thread", thread.id, "head moved", expected=str(head), actual=str(thread.head_seq)
            )
        )
    return Success(None)


def decide_checkpoint(
    facts: CheckpointFacts, draft: CheckpointDraft
) -> Result[Decided[ContextCheckpoint], AgentError]:
    """Decide a checkpoint create by compare-and-swap against the thread's head and latest
    checkpoint (the rules of seed 002): the new checkpoint (number ``checkpoint_count +
    1``), or the stored one when the run repeats its create while the thread still stands
    where it did; the failures of :meth:`CheckpointStore.create` in its order."""
    thread = facts.thread
    if thread is None:
        return Failure(NotFound("thread", draft.thread_id))
    run = check_run_in_thread(facts.run, draft.run_id, draft.thread_id).bind(
        lambda row: held(row, draft.run_id, draft.fencing_token)
    )
    if isinstance(run, Failure):
        return Failure(run.failure())
    stored = facts.mine
    if stored is not None:
        if not draft.repeats(stored):
            return Failure(
                Conflict(
                    "checkpoint",
                    draft.checkpoint_id,
                    "run already created a different checkpoint",
                    actual=stored.id,
                )
            )
        # A replay re-checks the head and the latest, as seed 002 does: the caller may rely
        # on its checkpoint only while nothing moved since.
        replayed = _current(thread, facts.latest, stored.id, stored.observed_head_seq)
        return replayed.map(lambda _: Decided(stored, write=False))
    if run.unwrap().status is not AgentRunStatus.RUNNING:
        return _not_running(run.unwrap(), "run is not running")
    if facts.id_taken:
        return Failure(Conflict("checkpoint", draft.checkpoint_id, "checkpoint id taken"))
    latest = facts.latest
    current = _current(thread, latest, draft.expected_latest_id, draft.observed_head_seq)
    if isinstance(current, Failure):
        return Failure(current.failure())
    if latest is not None and draft.through_seq <= latest.through_seq:
        return Failure(
            Conflict(
                "thread",
                draft.thread_id,
                "checkpoint does not advance",
                expected=f"> {latest.through_seq}",
                actual=str(draft.through_seq),
            )
        )
    kept = facts.first_kept
    if kept != (draft.through_seq + 1, "user"):
        return Failure(
            Conflict(
                "thread",
                draft.thread_id,
                "first kept message is not a user message at through_seq + 1",
                expected=f"user at {draft.through_seq + 1}",
                actual="none" if kept is None else f"{kept[1]} at {kept[0]}",
            )
        )
    return Success(Decided(draft.checkpoint(thread.checkpoint_count + 1), write=True))


TS = TypeVar("TS", bound=ThreadStore)
RS = TypeVar("RS", bound=AgentRunStore)
MS = TypeVar("MS", bound=MessageStore)
CS = TypeVar("CS", bound=CheckpointStore)


class AgentStores(Generic[TS, RS, MS, CS]):
    """The four stores of one :class:`AgentStorage`, as every layer bundles them."""

    def __init__(self, threads: TS, runs: RS, messages: MS, checkpoints: CS) -> None:
        self._threads = threads
        self._runs = runs
        self._messages = messages
        self._checkpoints = checkpoints

    @property
    def threads(self) -> TS:
        """The thread store."""
        return self._threads

    @property
    def runs(self) -> RS:
        """The run store."""
        return self._runs

    @property
    def messages(self) -> MS:
        """The message store."""
        return self._messages

    @property
    def checkpoints(self) -> CS:
        """The checkpoint store."""
        return self._checkpoints


__all__ = [
    "COUNTERS",
    "FENCING_TOKEN",
    "MESSAGE_CURSOR",
    "NO_USAGE",
    "RUN_CURSOR",
    "RUN_SEQ",
    "THREAD_CURSOR",
    "THREAD_SEQ",
    "AgentStores",
    "Append",
    "AppendPlan",
    "AppendsOne",
    "CheckpointDraft",
    "CheckpointFacts",
    "Counter",
    "DamagedMessage",
    "Decided",
    "JsonValue",
    "Known",
    "ListQuery",
    "MessageDraft",
    "RunClaim",
    "RunFinish",
    "RunListing",
    "RunQueue",
    "RunRenew",
    "RunRow",
    "ThreadCreate",
    "ThreadHead",
    "ThreadListing",
    "ThreadRow",
    "ThreadUpdate",
    "Transcript",
    "canonical_json",
    "check_append",
    "check_checkpoint",
    "check_delete_by_run",
    "check_execution",
    "check_failure",
    "check_id",
    "check_lease",
    "check_list",
    "check_list_query",
    "check_message",
    "check_message_ref",
    "check_messages",
    "check_run_cancel",
    "check_run_claim",
    "check_run_finish",
    "check_run_ids",
    "check_run_in_thread",
    "check_run_listing",
    "check_run_queue",
    "check_run_renew",
    "check_run_start",
    "check_thread_create",
    "check_thread_id",
    "check_thread_listing",
    "check_thread_status",
    "check_thread_update",
    "check_title",
    "check_token",
    "check_usage",
    "client_ids",
    "damaged_message",
    "decide_append",
    "decide_checkpoint",
    "decide_removal",
    "decide_run_claim",
    "decide_run_finish",
    "decide_run_queue",
    "decide_run_reclaim",
    "decide_run_renew",
    "decide_thread_create",
    "decide_thread_update",
    "decode_cost",
    "decode_failure",
    "encode_content",
    "encode_cost",
    "encode_object",
    "fresh_drafts",
    "held",
    "message_page",
    "message_record",
    "message_run_ids",
    "require_run",
    "require_thread",
    "resolve_at",
    "run_page",
    "running_holder",
    "runs_in_order",
    "thread_page",
    "write_decided",
]
