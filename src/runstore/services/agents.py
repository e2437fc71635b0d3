"""Agent state: threads, their runs, their messages and their context checkpoints.

What an agent runtime keeps between turns (seed 002). ``AgentStorage`` bundles four stores:

- ``threads`` (:class:`ThreadStore`): a conversation of one project, with its title, JSON
  metadata, status, the run currently active on it, and counters kept in the same unit of
  work as the messages (``head_seq``, ``message_count``, ``last_message_at_ms``).
- ``runs`` (:class:`AgentRunStore`): one turn of work on a thread. At most one run per thread
  is ``running`` at a time (single flight); a run may belong to an execution of the ledger of
  the same project.
- ``messages`` (:class:`MessageStore`): the transcript. Each message gets the next sequence
  number of its thread from the thread's counter row: dense (1, 2, 3, ...) and never reused,
  even after deletes. Order is by sequence number, never by time.
- ``checkpoints`` (:class:`CheckpointStore`): compaction summaries, created by
  compare-and-swap against the thread's head and latest checkpoint. The transcript itself is
  never rewritten.

Ids of threads, runs and checkpoints are chosen by the caller (any non-empty text up to
:data:`MAX_ID_CHARS` characters), so a write whose outcome is unknown can be repeated safely.
Times at rest are integer epoch milliseconds UTC; ``at`` arguments take an aware ``datetime``
or epoch milliseconds (``None`` reads the :class:`~runstore.services.Clock`).

Text must be storable exactly: every string (ids, roles, titles, JSON content) is refused
with ``InvalidInput`` if it holds a lone surrogate (``"\\ud800"``), which UTF-8 cannot carry;
NUL characters, emoji and right-to-left text round-trip unchanged. JSON values are checked
for exact round trip (``str`` keys, ``list`` not ``tuple``, finite floats, nesting at most
:data:`MAX_JSON_DEPTH`). Costs are ``decimal.Decimal`` and come back digit for digit.

Every method returns a ``Result`` whose failure is one :data:`AgentError`. The checks of a
write happen in this order, identically in every layer: the arguments (``InvalidInput`` /
``InvalidQuery``), then existence (``NotFound``), then the rules of stored state
(``Conflict``, ``IllegalTransition``, ``ActiveRunExists``). A failed write changes nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from typing import Any, NewType, Protocol, TypeAlias, runtime_checkable

import attrs
from returns.result import Failure, Result, Success

from runstore.services.clock import Clock
from runstore.services.errors import (
    Busy,
    Conflict,
    IllegalTransition,
    InvalidInput,
    NotFound,
    StorageFailure,
)
from runstore.services.executions import ExecutionFinished, ProjectMismatch
from runstore.services.pagination import MAX_PAGE_SIZE, Page

__all__ = [
    "MAX_CONTENT_BYTES",
    "MAX_ID_CHARS",
    "MAX_JSON_DEPTH",
    "MAX_ROLE_CHARS",
    "ActiveRunExists",
    "AgentError",
    "AgentRun",
    "AgentRunFailure",
    "AgentRunId",
    "AgentRunStatus",
    "AgentRunStore",
    "AgentStorage",
    "CheckpointId",
    "CheckpointStore",
    "ContextCheckpoint",
    "InvalidQuery",
    "JsonValue",
    "Message",
    "MessageStore",
    "NewMessage",
    "Role",
    "Thread",
    "ThreadId",
    "ThreadStatus",
    "ThreadStore",
    "TokenUsage",
]

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
"""A JSON document as Python values: ``dict`` with ``str`` keys, ``list``, ``str``, ``int``,
finite ``float``, ``bool`` and ``None``."""

ThreadId = NewType("ThreadId", str)
"""Identifies one thread (chosen by the caller, unique across projects)."""

AgentRunId = NewType("AgentRunId", str)
"""Identifies one agent run (chosen by the caller, unique across threads)."""

CheckpointId = NewType("CheckpointId", str)
"""Identifies one context checkpoint (chosen by the caller, unique across threads)."""

MAX_ID_CHARS = 256
"""Longest id of a thread, run, checkpoint, project or execution (characters)."""

MAX_ROLE_CHARS = 64
"""Longest role name (characters)."""

MAX_TITLE_CHARS = 4_096
"""Longest thread title (characters)."""

MAX_CONTENT_BYTES = 64 * 1024 * 1024
"""Largest encoded JSON content of one message, metadata object or failure (UTF-8 bytes)."""

MAX_JSON_DEPTH = 200
"""Deepest nesting of lists and objects a JSON value may have (deeper ones could not be read
back by every JSON decoder, so they are refused at write)."""

MAX_INT = 2**63 - 1
"""Largest token count, sequence number or time SQLite stores as an integer."""

MAX_EPOCH_MS = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z in epoch milliseconds: the latest time ``at`` may name."""


class Role(StrEnum):
    """The usual message roles. Hosts may use their own role names as well (any text up to
    :data:`MAX_ROLE_CHARS` characters); a role is stored and returned as plain text."""

    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"
    SYSTEM = "system"


class ThreadStatus(StrEnum):
    """``open`` threads take runs and messages; ``archived`` ones are read-only until reopened."""

    OPEN = "open"
    ARCHIVED = "archived"


class AgentRunStatus(StrEnum):
    """``running`` until finished; the others are final."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_finished(self) -> bool:
        """Whether the status is final."""
        return self is not AgentRunStatus.RUNNING


# -- error values ----------------------------------------------------------------------------


@attrs.frozen
class ActiveRunExists:
    """Thread ``thread_id`` already has ``active_run_id`` running; a second one was refused."""

    thread_id: str
    active_run_id: str

    def __str__(self) -> str:
        return f"thread {self.thread_id!r} already has run {self.active_run_id!r} running"


@attrs.frozen
class InvalidQuery:
    """Query argument ``field`` was rejected for ``reason`` (a limit below 1, a negative
    cursor, ...). Listing methods return it instead of an empty page."""

    field: str
    reason: str

    def __str__(self) -> str:
        return f"invalid query {self.field}: {self.reason}"


AgentError: TypeAlias = (
    NotFound
    | Conflict
    | IllegalTransition
    | InvalidInput
    | InvalidQuery
    | ActiveRunExists
    | ProjectMismatch
    | ExecutionFinished
    | Busy
    | StorageFailure
)
"""Every failure an agent store returns (the same union for every method)."""


# -- records ---------------------------------------------------------------------------------


@attrs.frozen
class Thread:
    """One conversation.

    ``head_seq`` is the last sequence number handed out (it never goes down, deletes leave
    it); ``message_count`` counts the messages stored now; ``last_message_at_ms`` is the time
    of the stored message with the highest sequence number (``None`` with no messages);
    ``active_run_id`` is the run now ``running`` on it, if any; ``checkpoint_count`` counts
    its context checkpoints. ``updated_at_ms`` moves with every change of title, metadata,
    status or messages. Times are epoch ms.
    """

    id: ThreadId
    project_id: str
    title: str
    metadata: dict[str, JsonValue]
    status: ThreadStatus
    active_run_id: AgentRunId | None
    head_seq: int
    message_count: int
    last_message_at_ms: int | None
    checkpoint_count: int
    created_at_ms: int
    updated_at_ms: int


@attrs.frozen
class AgentRunFailure:
    """Why a run failed or was cancelled: a short machine-readable ``kind`` (e.g.
    ``"timeout"``), a human ``message`` and optional JSON ``details``."""

    kind: str
    message: str
    details: JsonValue = None


@attrs.frozen
class AgentRun:
    """One run on a thread; ``execution_id`` names the ledger execution it belongs to, if any.

    ``failure`` is set for ``failed`` runs (always) and ``cancelled`` ones (when given).
    Times are epoch ms; ``finished_at_ms`` is ``None`` while running.
    """

    id: AgentRunId
    thread_id: ThreadId
    project_id: str
    execution_id: str | None
    status: AgentRunStatus
    failure: AgentRunFailure | None
    started_at_ms: int
    finished_at_ms: int | None


@attrs.frozen
class TokenUsage:
    """Tokens a message cost, as non-negative integers."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0


@attrs.frozen
class NewMessage:
    """A message to append: its ``role``, JSON ``content``, the run that produced it, its token
    usage and exact ``cost`` (a ``Decimal`` in the host's currency unit, or ``None``), and
    ``at`` (aware datetime or epoch ms; ``None`` reads the clock)."""

    role: str
    content: JsonValue
    run_id: str | None = None
    usage: TokenUsage = TokenUsage()
    cost: Decimal | None = None
    at: datetime | int | None = None


@attrs.frozen
class Message:
    """One stored message; ``seq`` is its dense per-thread sequence number (from 1)."""

    thread_id: ThreadId
    seq: int
    role: str
    content: JsonValue
    run_id: AgentRunId | None
    usage: TokenUsage
    cost: Decimal | None
    created_at_ms: int


@attrs.frozen
class ContextCheckpoint:
    """A compaction summary of a thread's messages up to and including ``through_seq``.

    ``number`` counts the thread's checkpoints from 1; ``previous_id`` is the checkpoint that
    was the latest when this one was created; ``observed_head_seq`` is the thread's head the
    creating run saw. ``created_at_ms`` is epoch ms.
    """

    id: CheckpointId
    thread_id: ThreadId
    run_id: AgentRunId
    number: int
    previous_id: CheckpointId | None
    summary: str
    through_seq: int
    observed_head_seq: int
    created_at_ms: int


# -- the Protocols ---------------------------------------------------------------------------


@runtime_checkable
class ThreadStore(Protocol):
    """Create, read, change and delete threads."""

    def create(
        self,
        thread_id: str,
        *,
        project_id: str,
        title: str = "",
        metadata: Mapping[str, JsonValue] | None = None,
        at: datetime | int | None = None,
    ) -> Result[Thread, AgentError]:
        """Create an open thread with no messages.

        Repeating the same create (same project, title and metadata) returns the stored
        thread unchanged, so a retry is safe. Creating an id that was deleted starts a new,
        empty thread: only ``create`` ever makes a thread; no other write brings one back.

        Failures: ``InvalidInput`` (an empty or over-long id, a lone surrogate, metadata that
        is not a JSON object, a naive ``at``); ``Conflict`` when the id exists with other
        values.
        """
        ...

    def get(self, thread_id: str) -> Result[Thread, AgentError]:
        """Return the thread. Failures: ``InvalidInput`` (bad id), ``NotFound``."""
        ...

    def update(
        self,
        thread_id: str,
        *,
        title: str | None = None,
        metadata: Mapping[str, JsonValue] | None = None,
        status: ThreadStatus | None = None,
        at: datetime | int | None = None,
    ) -> Result[Thread, AgentError]:
        """Change the title, replace the metadata and/or move the status (``None`` keeps it).

        Failures: ``InvalidInput``; ``NotFound``; ``Conflict`` (reason ``"active run"``) when
        archiving a thread whose run is still running.
        """
        ...

    def delete(self, thread_id: str) -> Result[None, AgentError]:
        """Delete the thread and every row that belongs to it: runs, messages, checkpoints.

        A later write naming it returns ``NotFound``. Failures: ``InvalidInput``,
        ``NotFound``.
        """
        ...


@runtime_checkable
class AgentRunStore(Protocol):
    """Start, finish and read the runs of threads."""

    def start(
        self,
        run_id: str,
        *,
        thread_id: str,
        execution_id: str | None = None,
        at: datetime | int | None = None,
    ) -> Result[AgentRun, AgentError]:
        """Start ``run_id`` on an open thread as its one active run.

        When ``execution_id`` is given, the execution is read from the ledger in the same
        unit of work: it must exist, belong to the thread's project, and not be finished.
        Repeating a start with the same thread and execution returns the stored run (in
        whatever status it has reached), so a retry is safe.

        Failures, in this order: ``InvalidInput``; ``NotFound`` (the thread);
        ``Conflict`` when ``run_id`` exists with another thread or execution, or the thread
        is archived; ``NotFound("execution", id)``; ``ProjectMismatch`` when the execution
        is of another project (``expected`` the thread's project, ``actual`` the
        execution's); ``ExecutionFinished`` when it is final; ``ActiveRunExists`` when
        another run of the thread is running (of N concurrent starts exactly one succeeds).
        The same error values as action runs use for their execution check.
        """
        ...

    def finish(
        self,
        run_id: str,
        *,
        status: AgentRunStatus,
        failure: AgentRunFailure | None = None,
        at: datetime | int | None = None,
    ) -> Result[AgentRun, AgentError]:
        """Move a running run to a final ``status``; the thread's active run is cleared.

        ``failed`` needs a ``failure``, ``succeeded`` refuses one, ``cancelled`` may carry
        one. Finishing again with the same status and failure returns the stored run.

        Failures: ``InvalidInput`` (status ``running``, failure missing or not allowed);
        ``NotFound``; ``IllegalTransition`` when the run already finished otherwise.
        """
        ...

    def get(self, run_id: str) -> Result[AgentRun, AgentError]:
        """Return the run. Failures: ``InvalidInput`` (bad id), ``NotFound``."""
        ...


@runtime_checkable
class MessageStore(Protocol):
    """Append, page through and prune the transcript of a thread."""

    def append(
        self,
        thread_id: str,
        *,
        role: str,
        content: JsonValue,
        run_id: str | None = None,
        usage: TokenUsage | None = None,
        cost: Decimal | None = None,
        at: datetime | int | None = None,
    ) -> Result[Message, AgentError]:
        """Append one message as the thread's next sequence number; see :meth:`append_many`."""
        ...

    def append_many(
        self, thread_id: str, messages: Sequence[NewMessage]
    ) -> Result[tuple[Message, ...], AgentError]:
        """Append ``messages`` in order, in one unit of work, with consecutive sequence numbers.

        The thread's ``head_seq``, ``message_count``, ``last_message_at_ms`` and
        ``updated_at_ms`` move in the same unit: either every message and the counters are
        stored, or nothing is. An empty sequence returns ``()`` after checking the thread.

        Failures: ``InvalidInput`` (role empty or longer than :data:`MAX_ROLE_CHARS`, content
        that is not exact JSON or larger than :data:`MAX_CONTENT_BYTES` once encoded, a lone
        surrogate anywhere, negative or non-integer token counts, a cost that is a float,
        negative or not finite, a naive ``at``); ``NotFound`` (the thread, or a run);
        ``Conflict`` when the thread is archived or a run belongs to another thread
        (``expected`` this thread, ``actual`` the run's).
        """
        ...

    def get(self, thread_id: str, seq: int) -> Result[Message, AgentError]:
        """Return message ``seq`` of the thread.

        Failures: ``InvalidInput`` (bad id), ``InvalidQuery`` (``seq`` below 1),
        ``NotFound("thread", ...)`` or ``NotFound("message", "<thread>#<seq>")``.
        """
        ...

    def list(
        self,
        thread_id: str,
        *,
        after_seq: int | None = None,
        before_seq: int | None = None,
        roles: Collection[str] | None = None,
        limit: int = 50,
    ) -> Result[Page[Message], AgentError]:
        """Return one page of the thread's messages in ascending ``seq`` order.

        Only messages with ``after_seq < seq < before_seq`` (each bound when given) and, when
        ``roles`` is given, a role among them are considered. With ``after_seq`` the page
        holds the *first* ``limit`` of them (forward paging: start with ``after_seq=0``);
        without it, the *newest* ``limit`` (still ascending; page back with ``before_seq``).
        ``has_more`` is True exactly when more considered messages lie beyond the page in
        its direction, and then ``next_cursor`` is the decimal text of the sequence number to
        pass back as ``after_seq`` (forward) or ``before_seq`` (newest first). Only the
        bodies of returned messages are read.

        Failures: ``InvalidQuery`` (``limit`` below 1 or above
        :data:`~runstore.services.pagination.MAX_PAGE_SIZE`, a negative ``after_seq`` or
        ``before_seq``, ``roles`` empty or given as one string, a role that is not valid
        text); ``InvalidInput`` (bad thread id); ``NotFound`` (thread).
        """
        ...

    def delete_by_run(self, thread_id: str, run_id: str) -> Result[int, AgentError]:
        """Delete every message of ``run_id`` in the thread; return how many were deleted.

        The counters are recomputed in the same unit of work; ``head_seq`` stays, so deleted
        sequence numbers are never handed out again.

        Failures: ``InvalidInput``; ``NotFound`` (thread or run); ``Conflict`` when the run
        belongs to another thread.
        """
        ...


@runtime_checkable
class CheckpointStore(Protocol):
    """Create context checkpoints by compare-and-swap and read the latest one."""

    def create(
        self,
        checkpoint_id: str,
        *,
        thread_id: str,
        run_id: str,
        summary: str,
        through_seq: int,
        observed_head_seq: int,
        expected_latest_id: str | None,
        at: datetime | int | None = None,
    ) -> Result[ContextCheckpoint, AgentError]:
        """Store a summary of the thread through ``through_seq``, if nothing moved meanwhile.

        The caller read the thread at ``observed_head_seq`` with ``expected_latest_id`` as its
        latest checkpoint (``None``: none yet). The run must belong to the thread and be
        running. A run creates at most one checkpoint: the same create repeated by the same
        run returns the stored record, even after the thread moved on.

        Failures, in this order: ``InvalidInput`` (empty summary, ``through_seq`` below 1 or
        above ``observed_head_seq``, bad ids, lone surrogates); ``NotFound`` (thread or
        run); ``Conflict`` with reason ``"run belongs to another thread"``, ``"run already
        created a different checkpoint"`` (``actual`` the stored id), ``"run is not
        running"``, ``"checkpoint id taken"``, ``"latest checkpoint changed"``
        (``expected``/``actual`` the ids, ``""`` for none), ``"head moved"``
        (``expected``/``actual`` the head seqs) or ``"checkpoint does not advance"``
        (``through_seq`` not above the latest checkpoint's).
        """
        ...

    def latest(self, thread_id: str) -> Result[ContextCheckpoint | None, AgentError]:
        """Return the thread's newest checkpoint, or ``None`` when it has none.

        Failures: ``InvalidInput`` (bad id), ``NotFound`` (thread).
        """
        ...


@runtime_checkable
class AgentStorage(Protocol):
    """The four agent stores, sharing one unit of work."""

    @property
    def threads(self) -> ThreadStore:
        """The thread store."""
        ...

    @property
    def runs(self) -> AgentRunStore:
        """The run store."""
        ...

    @property
    def messages(self) -> MessageStore:
        """The message store."""
        ...

    @property
    def checkpoints(self) -> CheckpointStore:
        """The checkpoint store."""
        ...


# -- argument checks shared by every layer (pure functions; not part of the public API) ------

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)


def _storable(field: str, text: str) -> InvalidInput | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return InvalidInput(field, f"contains a lone surrogate at index {exc.start}")
    return None


def check_text(
    field: str, value: object, *, max_chars: int, allow_empty: bool = False
) -> Result[str, InvalidInput]:
    """Return ``value`` as plain ``str`` if it is text of at most ``max_chars`` characters,
    non-empty unless ``allow_empty``, and storable as UTF-8; else ``InvalidInput(field)``."""
    if not isinstance(value, str):
        return Failure(InvalidInput(field, f"must be text, got {type(value).__name__}"))
    if not value and not allow_empty:
        return Failure(InvalidInput(field, "must not be empty"))
    if len(value) > max_chars:
        return Failure(InvalidInput(field, f"longer than {max_chars} characters"))
    problem = _storable(field, value)
    return Failure(problem) if problem else Success(str(value))


def check_id(field: str, value: object) -> Result[str, InvalidInput]:
    """Check an id (non-empty text up to :data:`MAX_ID_CHARS` characters)."""
    return check_text(field, value, max_chars=MAX_ID_CHARS)


def _json_problem(value: object) -> str | None:
    """Why ``value`` would not survive a JSON round trip exactly (None when it would)."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if item is None or kind is bool or kind is int or kind is str:
            continue
        if kind is float:
            if not math.isfinite(item):  # type: ignore[arg-type]
                return f"float {item!r} has no JSON form"
            continue
        if kind is list or kind is dict:
            if depth >= MAX_JSON_DEPTH:
                return f"nested deeper than {MAX_JSON_DEPTH} levels"
            if kind is dict:
                for key, child in item.items():  # type: ignore[attr-defined]
                    if type(key) is not str:
                        return f"object key {key!r} is not text"
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in item)  # type: ignore[attr-defined]
            continue
        return f"{kind.__name__} is not a JSON type (use dict, list, str, int, float, bool, None)"
    return None


def encode_json(field: str, value: object) -> Result[str, InvalidInput]:
    """Encode ``value`` as compact JSON text that decodes back to an equal value of the same
    types, or return ``InvalidInput(field)`` saying why it cannot."""
    problem = _json_problem(value)
    if problem:
        return Failure(InvalidInput(field, problem))
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    stored = _storable(field, text)
    if stored:
        return Failure(InvalidInput(field, "contains a lone surrogate"))
    if len(text) > MAX_CONTENT_BYTES // 4 and len(text.encode("utf-8")) > MAX_CONTENT_BYTES:
        return Failure(InvalidInput(field, f"larger than {MAX_CONTENT_BYTES} bytes as UTF-8"))
    return Success(text)


_SCAN_JSON: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def decode_json(text: str) -> JsonValue:
    """Decode JSON text written by :func:`encode_json` (compact, one value, nothing around it).

    Calls the decoder's scanner directly: ``json.loads`` would also match whitespace around
    the value with a regular expression, which costs as much again for small documents.
    """
    value: JsonValue = _SCAN_JSON(text, 0)[0]
    return value


def encode_object(field: str, value: object) -> Result[str, InvalidInput]:
    """Encode a JSON object (a ``Mapping`` with text keys); ``None`` is the empty object."""
    if value is None:
        return Success("{}")
    if not isinstance(value, Mapping):
        return Failure(InvalidInput(field, f"must be a JSON object, got {type(value).__name__}"))
    return encode_json(field, dict(value))


def check_count(field: str, value: object, *, minimum: int = 0) -> Result[int, InvalidInput]:
    """Return ``value`` if it is an ``int`` (not ``bool``) in ``minimum..2**63-1``."""
    if isinstance(value, bool) or not isinstance(value, int):
        return Failure(InvalidInput(field, f"must be an integer, got {type(value).__name__}"))
    if value < minimum or value > MAX_INT:
        return Failure(InvalidInput(field, f"must be between {minimum} and {MAX_INT}, got {value}"))
    return Success(int(value))


def check_usage(value: object) -> Result[TokenUsage, InvalidInput]:
    """Check a :class:`TokenUsage` (``None`` is all zeros)."""
    if value is None:
        return Success(TokenUsage())
    if not isinstance(value, TokenUsage):
        return Failure(InvalidInput("usage", f"must be TokenUsage, got {type(value).__name__}"))
    for name in ("input", "output", "cache_read", "cache_write"):
        count = getattr(value, name)
        if type(count) is int and 0 <= count <= MAX_INT:
            continue  # the common case, without building a Result per field
        checked = check_count(f"usage.{name}", count)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
    return Success(value)


def encode_cost(value: object) -> Result[str | None, InvalidInput]:
    """Return the exact decimal text of a cost (``str(Decimal)``), or ``None`` for no cost.

    An ``int`` is taken as a whole ``Decimal``. A ``float`` is refused (it is already
    inexact), as are negative, NaN and infinite values.
    """
    if value is None:
        return Success(None)
    if isinstance(value, (bool, float)):
        return Failure(InvalidInput("cost", "must be a decimal.Decimal (a float is inexact)"))
    if isinstance(value, int):
        value = Decimal(value)
    if not isinstance(value, Decimal):
        return Failure(
            InvalidInput("cost", f"must be a decimal.Decimal, got {type(value).__name__}")
        )
    if not value.is_finite():
        return Failure(InvalidInput("cost", f"must be finite, got {value}"))
    if value.is_signed() and not value.is_zero():
        return Failure(InvalidInput("cost", f"must not be negative, got {value}"))
    text = str(value)
    if len(text) > 100:
        return Failure(InvalidInput("cost", "has more than 100 characters as text"))
    return Success(text)


def decode_cost(text: str | None) -> Decimal | None:
    """Turn stored cost text back into the same ``Decimal`` (same digits, same exponent)."""
    return None if text is None else Decimal(text)


def to_epoch_ms(field: str, at: object, clock: Clock) -> Result[int, InvalidInput]:
    """Return ``at`` as epoch ms: an aware ``datetime``, an ``int`` of ms, or ``None`` (now).

    A naive ``datetime``, a ``bool``, a negative value or one past year 9999 is
    ``InvalidInput(field)``.
    """
    if at is None:
        return Success(clock.now_ms())
    if isinstance(at, datetime):
        if at.tzinfo is None or at.utcoffset() is None:
            return Failure(InvalidInput(field, "naive datetime: pass an aware one (e.g. UTC)"))
        ms = (at - _EPOCH) // _ONE_MS
    elif isinstance(at, int) and not isinstance(at, bool):
        ms = int(at)
    else:
        return Failure(
            InvalidInput(field, f"must be an aware datetime or epoch ms, got {type(at).__name__}")
        )
    if ms < 0 or ms > MAX_EPOCH_MS:
        return Failure(InvalidInput(field, f"epoch ms {ms} is outside 1970..9999"))
    return Success(ms)


def check_failure(
    status: object, failure: object
) -> Result[tuple[AgentRunStatus, str | None], InvalidInput]:
    """Check a final run ``status`` with its ``failure``; return the status and the failure as
    JSON text (``None`` when absent)."""
    if not isinstance(status, AgentRunStatus):
        try:
            status = AgentRunStatus(str(status))
        except ValueError:
            return Failure(InvalidInput("status", f"unknown run status {status!r}"))
    if status is AgentRunStatus.RUNNING:
        return Failure(InvalidInput("status", "a run finishes with a final status, not running"))
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
    kind = check_text("failure.kind", failure.kind, max_chars=MAX_ID_CHARS)
    if isinstance(kind, Failure):
        return Failure(kind.failure())
    message = check_text(
        "failure.message", failure.message, max_chars=MAX_TITLE_CHARS * 16, allow_empty=True
    )
    if isinstance(message, Failure):
        return Failure(message.failure())
    encoded = encode_json(
        "failure", {"kind": failure.kind, "message": failure.message, "details": failure.details}
    )
    if isinstance(encoded, Failure):
        return Failure(encoded.failure())
    return Success((status, encoded.unwrap()))


def decode_failure(text: str | None) -> AgentRunFailure | None:
    """Turn stored failure JSON back into an :class:`AgentRunFailure`."""
    if text is None:
        return None
    data = json.loads(text)
    return AgentRunFailure(kind=data["kind"], message=data["message"], details=data["details"])


def check_thread_status(value: object) -> Result[ThreadStatus, InvalidInput]:
    """Return ``value`` as a :class:`ThreadStatus` or ``InvalidInput("status")``."""
    if isinstance(value, ThreadStatus):
        return Success(value)
    try:
        return Success(ThreadStatus(str(value)))
    except ValueError:
        return Failure(InvalidInput("status", f"unknown thread status {value!r}"))


@attrs.frozen
class MessageDraft:
    """A checked :class:`NewMessage`: JSON and cost encoded, time resolved (for layers)."""

    role: str
    content_json: str
    run_id: str | None
    usage: TokenUsage
    cost_text: str | None
    at_ms: int


def check_messages(
    messages: object, clock: Clock
) -> Result[tuple[MessageDraft, ...], InvalidInput]:
    """Check every message of an append; the field names carry the index (``messages[3].role``)
    when more than one is given."""
    # list and tuple first: the common case, without the slower ABC check.
    if isinstance(messages, list | tuple) or (
        isinstance(messages, Sequence) and not isinstance(messages, NewMessage)
    ):
        batch: Sequence[object] = messages
    else:
        return Failure(InvalidInput("messages", "must be a sequence of NewMessage"))
    drafts: list[MessageDraft] = []
    many = len(batch) > 1
    for index, message in enumerate(batch):
        prefix = f"messages[{index}]." if many else ""
        if not isinstance(message, NewMessage):
            return Failure(InvalidInput(f"{prefix}message", "must be a NewMessage"))
        checked = _check_message(message, clock)
        if isinstance(checked, Failure):
            error = checked.failure()
            return Failure(InvalidInput(prefix + error.field, error.reason))
        drafts.append(checked.unwrap())
    return Success(tuple(drafts))


def _check_message(message: NewMessage, clock: Clock) -> Result[MessageDraft, InvalidInput]:
    role = check_text("role", message.role, max_chars=MAX_ROLE_CHARS)
    if isinstance(role, Failure):
        return Failure(role.failure())
    run_id: str | None = None
    if message.run_id is not None:
        checked_run = check_id("run_id", message.run_id)
        if isinstance(checked_run, Failure):
            return Failure(checked_run.failure())
        run_id = checked_run.unwrap()
    content = encode_json("content", message.content)
    if isinstance(content, Failure):
        return Failure(content.failure())
    usage = check_usage(message.usage)
    if isinstance(usage, Failure):
        return Failure(usage.failure())
    cost = encode_cost(message.cost)
    if isinstance(cost, Failure):
        return Failure(cost.failure())
    at_ms = to_epoch_ms("at", message.at, clock)
    if isinstance(at_ms, Failure):
        return Failure(at_ms.failure())
    return Success(
        MessageDraft(
            role=role.unwrap(),
            content_json=content.unwrap(),
            run_id=run_id,
            usage=usage.unwrap(),
            cost_text=cost.unwrap(),
            at_ms=at_ms.unwrap(),
        )
    )


@attrs.frozen
class ListQuery:
    """A checked :meth:`MessageStore.list` query (for layers)."""

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
    return Success(min(int(value), MAX_INT))


def check_seq(value: object) -> Result[int, InvalidQuery]:
    """Return ``value`` if it is a sequence number (an ``int`` of at least 1), else
    ``InvalidQuery("seq")``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return Failure(InvalidQuery("seq", f"must be an integer of at least 1, got {value!r}"))
    return Success(int(value))


def check_list_query(
    after_seq: object, before_seq: object, roles: object, limit: object
) -> Result[ListQuery, InvalidQuery]:
    """Check the arguments of :meth:`MessageStore.list` (see there for the rules)."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        return Failure(InvalidQuery("limit", f"must be an integer, got {type(limit).__name__}"))
    if limit < 1:
        return Failure(InvalidQuery("limit", f"must be at least 1, got {limit}"))
    if limit > MAX_PAGE_SIZE:
        return Failure(InvalidQuery("limit", f"must be at most {MAX_PAGE_SIZE}, got {limit}"))
    after = _query_int("after_seq", after_seq)
    if isinstance(after, Failure):
        return Failure(after.failure())
    before = _query_int("before_seq", before_seq)
    if isinstance(before, Failure):
        return Failure(before.failure())
    role_set: frozenset[str] | None = None
    if roles is not None:
        if isinstance(roles, str | bytes) or not isinstance(roles, Collection):
            return Failure(InvalidQuery("roles", "must be a collection of role names, not one"))
        if not roles:
            return Failure(InvalidQuery("roles", "must not be empty (pass None for every role)"))
        for role in roles:
            checked = check_text("roles", role, max_chars=MAX_ROLE_CHARS)
            if isinstance(checked, Failure):
                return Failure(InvalidQuery("roles", checked.failure().reason))
        role_set = frozenset(str(role) for role in roles)
    return Success(ListQuery(after.unwrap(), before.unwrap(), role_set, int(limit)))


@attrs.frozen
class CheckpointDraft:
    """A checked :meth:`CheckpointStore.create` request (for layers)."""

    checkpoint_id: str
    thread_id: str
    run_id: str
    summary: str
    through_seq: int
    observed_head_seq: int
    expected_latest_id: str | None
    at_ms: int


def check_checkpoint(
    checkpoint_id: object,
    thread_id: object,
    run_id: object,
    summary: object,
    through_seq: object,
    observed_head_seq: object,
    expected_latest_id: object,
    at: object,
    clock: Clock,
) -> Result[CheckpointDraft, InvalidInput]:
    """Check the arguments of :meth:`CheckpointStore.create` (see there for the rules)."""
    ids: list[str] = []
    for field, value in (
        ("checkpoint_id", checkpoint_id),
        ("thread_id", thread_id),
        ("run_id", run_id),
    ):
        checked = check_id(field, value)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        ids.append(checked.unwrap())
    expected: str | None = None
    if expected_latest_id is not None:
        checked_expected = check_id("expected_latest_id", expected_latest_id)
        if isinstance(checked_expected, Failure):
            return Failure(checked_expected.failure())
        expected = checked_expected.unwrap()
    text = check_text("summary", summary, max_chars=MAX_CONTENT_BYTES // 4)
    if isinstance(text, Failure):
        return Failure(text.failure())
    through = check_count("through_seq", through_seq, minimum=1)
    if isinstance(through, Failure):
        return Failure(through.failure())
    head = check_count("observed_head_seq", observed_head_seq, minimum=1)
    if isinstance(head, Failure):
        return Failure(head.failure())
    if through.unwrap() > head.unwrap():
        return Failure(
            InvalidInput("through_seq", "cannot summarize past the observed head sequence")
        )
    at_ms = to_epoch_ms("at", at, clock)
    if isinstance(at_ms, Failure):
        return Failure(at_ms.failure())
    return Success(
        CheckpointDraft(
            checkpoint_id=ids[0],
            thread_id=ids[1],
            run_id=ids[2],
            summary=text.unwrap(),
            through_seq=through.unwrap(),
            observed_head_seq=head.unwrap(),
            expected_latest_id=expected,
            at_ms=at_ms.unwrap(),
        )
    )
