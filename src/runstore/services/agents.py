"""Agent state: threads, their runs, their messages and their context checkpoints.

What an agent runtime keeps between turns (seed 002). ``AgentStorage`` bundles four stores:

- ``threads`` (:class:`ThreadStore`): a conversation of one project, with its title, JSON
  metadata, status, the run currently active on it, and counters kept in the same unit of
  work as the messages (``head_seq``, ``message_count``, ``last_message_at_ms``).
- ``runs`` (:class:`AgentRunStore`): one turn of work on a thread. A run is ``queued``, then
  claimed by a worker under a lease, ``running``, then final. At most one run per thread is
  ``running`` at a time (single flight); a run may belong to an execution of the ledger of
  the same project.
- ``messages`` (:class:`MessageStore`): the transcript. Each message gets the next sequence
  number of its thread from the thread's counter row: dense (1, 2, 3, ...) and never reused,
  even after deletes. Order is by sequence number, never by time.
- ``checkpoints`` (:class:`CheckpointStore`): compaction summaries, created by
  compare-and-swap against the thread's head and latest checkpoint. The transcript itself is
  never rewritten.

Workers and fencing (as the ledger's executions, :mod:`runstore.services.ledger`): ``claim``
(or ``start``) moves a run to ``running`` for an ``owner`` under a lease of ``lease_ms``
milliseconds, measured on the :class:`~runstore.services.Clock`, and hands out a *fencing
token*: a number larger than every agent-run token handed out before in the database.
``renew`` extends the lease; once it has expired, ``reclaim`` gives the run to another
worker with a new token, so a crashed worker does not hold its thread's single-flight slot
forever. Every write made on behalf of a run (appending its messages, creating its
checkpoint, finishing it) carries the token; an older one is ``StaleFencingToken`` and
nothing is written (Kleppmann, "How to do distributed locking", 2016). A lease that expired
but was not reclaimed does not invalidate its token.

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
(``StaleFencingToken``, ``Conflict``, ``IllegalTransition``, ``ActiveRunExists``). A failed
write changes nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import NewType, Protocol, TypeAlias, runtime_checkable

import attrs
from returns.result import Result

from runstore.services._primitives import JsonValue
from runstore.services.errors import (
    Busy,
    Conflict,
    IllegalTransition,
    InvalidInput,
    NotFound,
    StorageFailure,
)
from runstore.services.ledger import (
    ExecutionFinished,
    ProjectMismatch,
    StaleFencingToken,
)
from runstore.services.pagination import Page

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
    """``queued`` until claimed, ``running`` until finished; the others are final::

        queued ──claim──▶ running ──finish──▶ succeeded | failed | cancelled
           │                 │  ▲
           │                 └──┘ renew, reclaim (after the lease expired)
           └──────cancel──────▶ cancelled ◀──cancel── running
    """

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_finished(self) -> bool:
        """Whether the status is final."""
        return self is not AgentRunStatus.RUNNING and self is not AgentRunStatus.QUEUED


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
    | StaleFencingToken
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
    status or messages. Times are epoch ms. ``seq`` is its place in the database's creation
    order of threads (from 1, never reused, the order of :meth:`ThreadStore.list`);
    ``agent_id`` names the agent that converses in it and ``owner_id`` whom it belongs to
    (both the host's ids, or None), given at create.
    """

    id: ThreadId
    project_id: str
    seq: int
    agent_id: str | None
    owner_id: str | None
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

    - ``seq``: its place in the database's creation order of runs (from 1, never reused; the
      order of :meth:`AgentRunStore.list`).
    - ``owner``: the worker of its latest claim (None while it was never claimed);
      ``lease_expires_at_ms``: until when that worker holds it (None unless running);
      ``fencing_token``: the token of its latest claim (0 while never claimed);
      ``attempts``: how many times it was claimed (``start``, ``claim`` and ``reclaim``).
    - ``failure`` is set for ``failed`` runs (always) and ``cancelled`` ones (when given).
    - Times are epoch ms: ``queued_at_ms`` when it was queued (or started), ``started_at_ms``
      its first claim (None while queued), ``finished_at_ms`` None until it is final.
    """

    id: AgentRunId
    thread_id: ThreadId
    project_id: str
    execution_id: str | None
    seq: int
    status: AgentRunStatus
    owner: str | None
    lease_expires_at_ms: int | None
    fencing_token: int
    attempts: int
    failure: AgentRunFailure | None
    queued_at_ms: int
    started_at_ms: int | None
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
    """A message to append: its ``role``, JSON ``content``, the run that produced it with that
    run's ``fencing_token`` (required with a ``run_id``, refused without one), its token
    usage and exact ``cost`` (a ``Decimal`` in the host's currency unit, or ``None``), ``at``
    (aware datetime or epoch ms; ``None`` reads the clock), the caller's ``client_id`` (an
    id unique in the thread that makes the append safe to repeat, see
    :meth:`MessageStore.append_many`) and JSON ``metadata`` (an object; ``None`` is ``{}``)."""

    role: str
    content: JsonValue
    run_id: str | None = None
    usage: TokenUsage = TokenUsage()
    cost: Decimal | None = None
    at: datetime | int | None = None
    fencing_token: int | None = None
    client_id: str | None = None
    metadata: Mapping[str, JsonValue] | None = None


@attrs.frozen
class Message:
    """One stored message; ``seq`` is its dense per-thread sequence number (from 1),
    ``client_id`` the caller's id of it (or None), ``metadata`` its JSON object (``{}``
    when none was given)."""

    thread_id: ThreadId
    seq: int
    role: str
    content: JsonValue
    run_id: AgentRunId | None
    usage: TokenUsage
    cost: Decimal | None
    created_at_ms: int
    client_id: str | None = None
    metadata: dict[str, JsonValue] = attrs.field(factory=dict)


@attrs.frozen
class ContextCheckpoint:
    """A compaction summary of a thread's messages up to and including ``through_seq``.

    ``number`` counts the thread's checkpoints from 1; ``previous_id`` is the checkpoint that
    was the latest when this one was created; ``observed_head_seq`` is the thread's head the
    creating run saw (above ``through_seq``: the message that triggered the compaction is
    kept). ``created_at_ms`` is epoch ms. The details of seed 002: ``reason`` (why it was
    made, the host's word, e.g. ``"threshold"``), ``format_version`` of the summary (from
    1), the estimated input tokens of the context ``tokens_before`` and ``tokens_after`` it
    (None when not estimated) and the ``summary_model`` that wrote it.
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
    reason: str
    format_version: int
    tokens_before: int | None
    tokens_after: int | None
    summary_model: str | None


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
        agent_id: str | None = None,
        owner_id: str | None = None,
        at: datetime | int | None = None,
    ) -> Result[Thread, AgentError]:
        """Create an open thread with no messages, of ``agent_id`` and ``owner_id`` if given.

        Repeating the same create (same project, title, metadata, agent and owner) returns
        the stored thread unchanged, so a retry is safe. Creating an id that was deleted
        starts a new, empty thread: only ``create`` ever makes a thread; no other write
        brings one back.

        Failures: ``InvalidInput`` (an empty or over-long id, a lone surrogate, metadata that
        is not a JSON object, a naive ``at``); ``Conflict`` when the id exists with other
        values.
        """
        ...

    def list(
        self,
        project_id: str,
        *,
        agent_id: str | None = None,
        status: ThreadStatus | None = None,
        owner_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Result[Page[Thread], AgentError]:
        """Return one page of the project's threads, oldest first (ascending ``seq``).

        Only threads of ``agent_id``, in ``status`` and of ``owner_id`` are listed (each
        filter when given). Paging follows :mod:`runstore.services.pagination`: at most
        ``limit`` threads, ``has_more`` and an opaque ``next_cursor`` (kind
        ``agent_threads``) to pass back with the same filters. An unknown project is an
        empty page.

        Failures: ``InvalidQuery`` (``limit`` outside 1..1000, a cursor this listing did not
        produce, an unknown ``status``); ``InvalidInput`` (a project, agent or owner id that
        is not valid text).
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
    """Queue, claim, lease, finish and read the runs of threads.

    The fenced methods (``renew``, ``finish``, and the writes of the other stores made on a
    run's behalf) check, in this order: the arguments (``InvalidInput``), the run
    (``NotFound``), then the token: one that is not the run's latest is
    ``StaleFencingToken(run_id, presented, current, entity="agent run")`` (the ledger's error
    value, its ``execution_id`` naming the run), and then the run's status.
    """

    def queue(
        self,
        run_id: str,
        *,
        thread_id: str,
        execution_id: str | None = None,
        at: datetime | int | None = None,
    ) -> Result[AgentRun, AgentError]:
        """Queue ``run_id`` on an open thread for a worker to :meth:`claim`.

        A thread may have any number of queued runs. When ``execution_id`` is given, the
        execution is read from the ledger in the same unit of work: it must exist, belong to
        the thread's project, and not be finished. Repeating a queue with the same thread and
        execution returns the stored run (in whatever status it has reached).

        Failures, in this order: ``InvalidInput``; ``NotFound`` (the thread); ``Conflict``
        when ``run_id`` exists with another thread or execution (or, for :meth:`start`,
        another owner), or the thread is archived; ``NotFound("execution", id)``;
        ``ProjectMismatch`` (``expected`` the thread's project, ``actual`` the execution's);
        ``ExecutionFinished``.
        """
        ...

    def start(
        self,
        run_id: str,
        *,
        thread_id: str,
        owner: str,
        lease_ms: int,
        execution_id: str | None = None,
        at: datetime | int | None = None,
    ) -> Result[AgentRun, AgentError]:
        """Queue ``run_id`` and claim it for ``owner`` in one unit of work (see :meth:`queue`
        and :meth:`claim`): the thread's one running run, with a fresh fencing token.

        Repeating a start with the same thread, execution and owner returns the stored run
        (in whatever status it has reached, with its token), so a retry is safe.

        Failures: those of :meth:`queue` (``lease_ms`` outside 1..``MAX_LEASE_MS`` of the
        ledger, or an invalid ``owner``, is ``InvalidInput``), then ``ActiveRunExists`` when
        another run of the thread is running (of N concurrent starts exactly one succeeds).
        """
        ...

    def claim(
        self, run_id: str, *, owner: str, lease_ms: int
    ) -> Result[AgentRun, AgentError]:
        """Move the queued run to ``running`` for ``owner`` until ``now + lease_ms`` (ms).

        The run gets a fencing token larger than every one handed out before and one more
        attempt; it takes its thread's single-flight slot. Claiming again, by the same owner,
        a run that owner holds under a live lease returns it unchanged (a retry).

        Failures, in this order: ``InvalidInput`` (bad id or owner, ``lease_ms`` outside
        1..``MAX_LEASE_MS``); ``NotFound``; ``IllegalTransition(status, "running")`` unless it
        is queued; ``Conflict`` when the thread is archived; ``ExecutionFinished`` when its
        execution finished meanwhile; ``ActiveRunExists`` when another run of the thread is
        running (reclaim that one once its lease expired, then finish or cancel it).
        """
        ...

    def renew(
        self, run_id: str, *, fencing_token: int, lease_ms: int
    ) -> Result[AgentRun, AgentError]:
        """Extend the lease of a running run to ``now + lease_ms`` (ms) for its holder.

        A lease that expired but was not reclaimed can still be renewed. Failures, in this
        order: ``InvalidInput``; ``NotFound``; ``StaleFencingToken``; ``Conflict`` (reason
        ``"only a running run has a lease"``, ``actual`` its status) unless it is running.
        """
        ...

    def reclaim(
        self, run_id: str, *, owner: str, lease_ms: int
    ) -> Result[AgentRun, AgentError]:
        """Take over a running run whose lease expired (expiry <= now) for ``owner``.

        The run stays ``running`` and keeps its thread's slot, with ``owner``, a lease until
        ``now + lease_ms``, a fresh fencing token (so every write of the previous holder is
        refused from now on) and one more attempt. The new holder then goes on with the run
        or finishes it.

        Failures, in this order: ``InvalidInput``; ``NotFound``; ``Conflict`` with reason
        ``"only a running run can be reclaimed"`` (``actual`` its status) or ``"lease is
        still held"`` (``expected`` the expiry, ``actual`` now, as epoch-ms text).
        """
        ...

    def finish(
        self,
        run_id: str,
        *,
        fencing_token: int,
        status: AgentRunStatus,
        failure: AgentRunFailure | None = None,
        at: datetime | int | None = None,
    ) -> Result[AgentRun, AgentError]:
        """Move a running run to a final ``status`` as its holder; the thread's active run is
        cleared and so is the lease expiry.

        ``failed`` needs a ``failure``, ``succeeded`` refuses one, ``cancelled`` may carry
        one. Finishing again with the same token, status and failure returns the stored run.

        Failures, in this order: ``InvalidInput`` (status ``queued`` or ``running``, failure
        missing or not allowed, a token that is not an int >= 0); ``NotFound``;
        ``StaleFencingToken``; ``IllegalTransition(status, target)`` when the run is queued
        or already finished otherwise.
        """
        ...

    def cancel(
        self,
        run_id: str,
        *,
        failure: AgentRunFailure | None = None,
        at: datetime | int | None = None,
    ) -> Result[AgentRun, AgentError]:
        """Cancel a queued or running run (an operator's call: no fencing token).

        A worker that still holds it then gets ``IllegalTransition`` from :meth:`finish`.
        Cancelling again with the same failure returns the stored run. Failures:
        ``InvalidInput``; ``NotFound``; ``IllegalTransition(status, "cancelled")`` when it
        finished otherwise.
        """
        ...

    def get(self, run_id: str) -> Result[AgentRun, AgentError]:
        """Return the run. Failures: ``InvalidInput`` (bad id), ``NotFound``."""
        ...

    def get_many(self, run_ids: Sequence[str]) -> Result[tuple[AgentRun, ...], AgentError]:
        """Return the runs of ``run_ids`` that exist, in the order given, each once.

        Failures: ``InvalidQuery("run_ids")`` for more than 1000 ids or a single string;
        ``InvalidInput`` (``run_ids[i]``) for an id that is not valid text.
        """
        ...

    def list(
        self,
        thread_id: str,
        *,
        status: AgentRunStatus | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Result[Page[AgentRun], AgentError]:
        """Return one page of the thread's runs, oldest first (ascending ``seq``), only those
        in ``status`` when given; paging as :meth:`ThreadStore.list` (cursor kind
        ``agent_runs``).

        Failures: ``InvalidQuery`` (limit, cursor, status); ``InvalidInput`` (thread id);
        ``NotFound`` (thread).
        """
        ...


@runtime_checkable
class MessageStore(Protocol):
    """Append, page through and prune the transcript of a thread.

    A stored message that cannot be read back (a body that is not JSON text: a damaged or
    hand-made row) is ``StorageFailure`` with kind ``corrupt`` from every method that reads
    it (``get``, ``list``, ``pop``, an append repeating its client id), never an
    exception."""

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
        """Append one message as the thread's next sequence number; see :meth:`append_many`."""
        ...

    def append_many(
        self, thread_id: str, messages: Sequence[NewMessage]
    ) -> Result[tuple[Message, ...], AgentError]:
        """Append ``messages`` in order, in one unit of work, with consecutive sequence numbers.

        The thread's ``head_seq``, ``message_count``, ``last_message_at_ms`` and
        ``updated_at_ms`` move in the same unit: either every message and the counters are
        stored, or nothing is. An empty sequence returns ``()`` after checking the thread.

        A message with a ``client_id`` is stored once per thread: appending the same id again
        with the same message (role, content, run, metadata, usage and cost; JSON compared
        regardless of key order) returns the stored message, with its sequence number and
        time, and stores nothing, so a retry after a commit whose outcome was unknown is safe.
        The same id with another message is a ``Conflict``. Within one batch the second use
        of an id is a repeat of the first.

        Failures: ``InvalidInput`` (role empty or longer than :data:`MAX_ROLE_CHARS`, content
        that is not exact JSON or larger than :data:`MAX_CONTENT_BYTES` once encoded, a lone
        surrogate anywhere, negative or non-integer token counts, a cost that is a float,
        negative or not finite, a naive ``at``, a ``run_id`` without its ``fencing_token`` or
        a token without a run); ``NotFound`` (the thread, or a run); ``Conflict`` when the
        thread is archived or a run belongs to another thread (``expected`` this thread,
        ``actual`` the run's); ``StaleFencingToken`` when a message's token is not its run's
        latest; ``Conflict`` (reason ``"run is not running"``) when its run is queued or
        final; ``Conflict`` (entity ``"message"``, key the client id, reason ``"client id
        used for another message"``, ``actual`` the stored seq) for a reused client id.
        ``InvalidInput`` also covers a client id that is not valid id text and metadata that
        is not a JSON object.
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
        cursor: str | None = None,
    ) -> Result[Page[Message], AgentError]:
        """Return one page of the thread's messages in ascending ``seq`` order.

        Only messages with ``after_seq < seq < before_seq`` (each bound when given) and, when
        ``roles`` is given, a role among them are considered (so an empty ``roles`` is an
        empty page, as in seed 002). With ``after_seq`` the page
        holds the *first* ``limit`` of them (forward paging: start with ``after_seq=0``);
        without it, the *newest* ``limit`` (still ascending; paging goes back in time).
        ``has_more`` is True exactly when more considered messages lie beyond the page in
        its direction, and then ``next_cursor`` is set: an opaque text (the one cursor format
        of :class:`~runstore.services.pagination.CursorCodec`, kind ``agent_messages``) to
        pass back as ``cursor`` with the same ``roles`` and ``limit`` and without the bound it
        replaces (``after_seq`` forward; ``after_seq`` and ``before_seq`` newest first); a
        forward cursor keeps a given ``before_seq``. Only the bodies of returned messages are
        read.

        Failures: ``InvalidQuery`` (``limit`` below 1 or above
        :data:`~runstore.services.pagination.MAX_PAGE_SIZE`, a negative ``after_seq`` or
        ``before_seq``, ``roles`` given as one string, a role that is not valid
        text, a ``cursor`` this listing did not produce or one given with the bound it
        replaces); ``InvalidInput`` (bad thread id); ``NotFound`` (thread).
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

    def pop(self, thread_id: str) -> Result[Message | None, AgentError]:
        """Remove the thread's newest stored message and return it as it was stored; ``None``
        (nothing written) when the thread has no message.

        The counters move in the same unit of work (``message_count`` one less,
        ``last_message_at_ms`` the time of the newest message left, ``updated_at_ms`` now);
        ``head_seq`` stays, so the number is never handed out again, and the message's
        client id is free again. This is the Agents SDK's ``Session.pop_item``.

        Failures, in this order: ``InvalidInput`` (bad id); ``NotFound`` (thread);
        ``Conflict`` with reason ``"thread is archived"``, ``"active run"`` (``actual`` the
        running run: the transcript under a running run is its worker's, written with its
        fencing token; finish, cancel or reclaim it first) or ``"message is summarised by a
        checkpoint"`` (the newest message is at or below the latest checkpoint's
        ``through_seq``: ``expected`` ``"> through_seq"``, ``actual`` its seq); the rules
        are :func:`runstore.services._agents_rules.decide_removal`'s.
        ``StorageFailure`` (kind ``corrupt``) when the stored message is not JSON text.
        """
        ...

    def clear(self, thread_id: str) -> Result[int, AgentError]:
        """Remove every message of the thread; return how many were removed (0 writes
        nothing).

        The thread stays, with its title, metadata, runs and checkpoints; ``message_count``
        becomes 0, ``last_message_at_ms`` ``None`` and ``updated_at_ms`` now, in the same
        unit of work. ``head_seq`` stays, so the next append continues after the last
        number ever handed out (use :meth:`ThreadStore.delete` and ``create`` to start again
        from 1). This is the Agents SDK's ``Session.clear_session``.

        Failures, in this order: ``InvalidInput``; ``NotFound`` (thread); ``Conflict`` with
        reason ``"thread is archived"``, ``"active run"`` or ``"message is summarised by a
        checkpoint"`` (the lowest stored message is at or below the latest checkpoint's
        ``through_seq``; ``actual`` its seq), as :meth:`pop`.
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
        fencing_token: int,
        summary: str,
        through_seq: int,
        observed_head_seq: int,
        expected_latest_id: str | None,
        at: datetime | int | None = None,
        reason: str = "manual",
        format_version: int = 1,
        tokens_before: int | None = None,
        tokens_after: int | None = None,
        summary_model: str | None = None,
    ) -> Result[ContextCheckpoint, AgentError]:
        """Store a summary of the thread through ``through_seq``, if nothing moved meanwhile.

        The caller read the thread at ``observed_head_seq`` with ``expected_latest_id`` as its
        latest checkpoint (``None``: none yet). The run must belong to the thread and be
        running, and ``fencing_token`` must be its latest. The boundary follows seed 002:
        the message that triggered the compaction is kept (``through_seq <
        observed_head_seq``), and the first kept message, the first stored after
        ``through_seq``, is a ``user`` message at ``through_seq + 1``, so the kept context
        starts with a turn of the user. ``reason``, ``format_version``, ``tokens_before`` /
        ``tokens_after`` (estimated input tokens, >= 0) and ``summary_model`` are stored
        with it. A run creates at most one checkpoint: the same create repeated by the same
        run returns the stored record while the thread's head and latest checkpoint are
        still those it created it at (a replay re-checks both, as seed 002 does).

        Failures, in this order: ``InvalidInput`` (empty summary, ``through_seq`` below 1 or
        not below ``observed_head_seq``, bad ids or details, lone surrogates, a token that
        is not an int >= 0); ``NotFound`` (thread or run); ``Conflict`` (reason ``"run
        belongs to another thread"``); ``StaleFencingToken``; ``Conflict`` with reason
        ``"run already created a different checkpoint"`` (``actual`` the stored id), ``"run
        is not running"``, ``"checkpoint id taken"``, ``"latest checkpoint changed"``
        (``expected``/``actual`` the ids, ``""`` for none), ``"head moved"``
        (``expected``/``actual`` the head seqs; for a replay too), ``"checkpoint does not
        advance"`` (``through_seq`` not above the latest checkpoint's) or ``"first kept
        message is not a user message at through_seq + 1"`` (``expected`` ``"user at N"``,
        ``actual`` ``"<role> at <seq>"`` or ``"none"``).
        """
        ...

    def latest(self, thread_id: str) -> Result[ContextCheckpoint | None, AgentError]:
        """Return the thread's newest checkpoint, or ``None`` when it has none.

        Failures: ``InvalidInput`` (bad id), ``NotFound`` (thread).
        """
        ...

    def for_run(self, run_id: str) -> Result[ContextCheckpoint | None, AgentError]:
        """Return the checkpoint run ``run_id`` created (a run creates at most one), or
        ``None`` when it created none.

        Failures: ``InvalidInput`` (bad id), ``NotFound("agent_run")``.
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
