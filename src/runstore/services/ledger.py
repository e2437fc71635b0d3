"""The execution ledger: executions, their one state machine, and workers' leases.

An *execution* is one unit of work a host application runs (an agent turn, a job, a build):
it belongs to a project, carries a name, JSON input and output, a structured failure,
optional parent execution and JSON metadata, and moves through one state machine::

    queued ──claim──▶ running ──finish──▶ succeeded | failed | cancelled
       │                 │
       └──cancel──▶ cancelled ◀──cancel──┘

Any other move is ``IllegalTransition(from, to)``; a finished execution (succeeded, failed,
cancelled) never changes again. Times at rest are integer epoch milliseconds UTC and come from
the :class:`~runstore.services.Clock` service.

Workers take queued executions with ``claim``: it moves the oldest claimable execution of a
project to ``running`` under a lease (``lease_ms``) and hands out a *fencing token*, a number
that only ever grows across the whole database. ``finish`` and ``renew`` carry that token;
when the lease has expired and another worker claimed the execution again, it holds a larger
token and the first worker's calls return ``StaleFencingToken`` (Kleppmann's fencing tokens,
"How to do distributed locking", 2016). A lease that expired but was not re-claimed does not
invalidate its token.

JSON values (``JsonValue``) are ``None``, ``bool``, ``int``, finite ``float``, ``str``,
``list`` and ``dict`` with ``str`` keys, nested at most :data:`MAX_JSON_DEPTH` deep, with no
lone surrogate in any string. They are stored as JSON text and read back equal, with the
same key order and the same types (``1`` stays an ``int``, ``1.0`` a ``float``). Anything
else is refused as ``InvalidInput`` before anything is written.

Action runs: the steps an execution performs, each with its own phases and failures.

An *action run* belongs to exactly one execution of the same project and follows one
lifecycle::

    queue ─▶ start ─▶ [record_writeback] ─▶ [record_effects] ─▶ finish(succeeded|failed|cancelled)
      │                                                           ▲
      └──────────────── finish(cancelled) ────────────────────────┘
    failed ─▶ requeue ─▶ queued (every phase field reset, attempt + 1)

The writeback and effects phases are optional and entered in that order, at most once each,
while the run is running. A run's *state* is its ``phase`` while it is unfinished
(``queued``, ``running``, ``writeback``, ``effects``) and its final ``status`` after; any call
the lifecycle does not allow is ``IllegalTransition(state, target)`` where ``target`` is
``running`` (start), ``writeback``, ``effects``, the final status (finish) or ``queued``
(requeue).

**Fencing.** Only the worker that holds the execution's claim may write its action runs:
every write (``queue``, ``start``, ``record_writeback``, ``record_effects``, ``finish``,
``requeue``) carries a :class:`Fence`, the execution's id and the fencing token ``claim``
handed out (``Execution.fence``). The execution *authorises* the write when, read in the
same unit of work, it exists, is in the run's project, is ``running`` and the fence's token
is its current one; and the run must be one of that execution's runs. Seed 002 checks the
named execution before an action run is written (``assertActionRunExecution``); runstore
adds the claim's token, so a worker whose lease expired and whose execution another worker
claimed again is refused (Kleppmann's fencing tokens, as executions use them). Refusals, in
this order, after ``InvalidInput``:

1. ``NotFound("execution", id)``; ``ProjectMismatch`` (``queue`` into another project's
   execution); ``ExecutionFinished`` (it is final); ``Conflict(expected "running", actual
   "queued")`` (nobody holds it yet); ``StaleFencingToken`` (it was claimed again).
2. Writes on a stored run: ``NotFound("action_run", id)``; ``ExecutionMismatch`` (the run
   belongs to another execution than the fence names).
3. ``queue``: the idempotency key, then the run id (``Conflict``); the others: a repeated
   phase outcome (no refusal), the lifecycle (``IllegalTransition``), then the retry policy
   (``RetryRefused``).

The fence is checked first, so a worker that lost its claim learns that whatever it asked.
Nothing is written on any refusal. Runs left unfinished when their execution ends stay as
they are (read them with ``get`` and ``list``); the schema refuses any write to an action
run whose execution is not running, too.

**Idempotency.** ``queue`` with an ``idempotency_key`` already used in the same execution
returns the stored run when the request is the same (equal :meth:`NewActionRun.digest`),
whatever its state now, and is ``Conflict`` otherwise, as ``ExecutionStorage.create`` does
per project. Recording the same writeback or effects outcome again (equal content, object
key order aside) returns the stored run unchanged, so a worker may repeat a call whose
commit it did not see; another outcome for a phase already recorded stays
``IllegalTransition``.

**Retry policy.** A run may be queued again only when it failed, its final failure says
``retryable=True`` and it has not used its ``max_attempts`` (set on :class:`NewActionRun`,
default :data:`DEFAULT_MAX_ATTEMPTS`); otherwise ``RetryRefused`` names which.

A failure (:class:`ActionRunFailure`: name, message, phase, JSON details, an optional
machine-readable ``code`` and the ``retryable`` flag) is stored as one JSON object per phase
(writeback, effects, final) and read back equal, Unicode and nested details included; a
stored writeback or effects failure that names another phase is a damaged row and reads as
``StorageFailure(kind=corrupt)``, as seed 002 checks a phase failure's phase when it parses
one. The shape follows seed 002, which moved from three columns per phase to one
structured value per phase.
"""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum
from typing import NewType, Protocol, TypeAlias, runtime_checkable

import attrs
from returns.result import Result

from runstore.services._primitives import MAX_JSON_DEPTH, JsonValue
from runstore.services.errors import (
    Busy,
    Conflict,
    IllegalTransition,
    InvalidInput,
    NotFound,
    StorageFailure,
)
from runstore.services.pagination import Page

__all__ = [
    "DEFAULT_LIMIT",
    "DEFAULT_MAX_ATTEMPTS",
    "MAX_ATTEMPTS",
    "MAX_JSON_DEPTH",
    "MAX_LEASE_MS",
    "MAX_TEXT_CHARS",
    "ActionRun",
    "ActionRunError",
    "ActionRunFailure",
    "ActionRunId",
    "ActionRunPhase",
    "ActionRunStatus",
    "ActionRunStorage",
    "Execution",
    "ExecutionError",
    "ExecutionFailure",
    "ExecutionFinished",
    "ExecutionId",
    "ExecutionMismatch",
    "ExecutionStatus",
    "ExecutionStorage",
    "Fence",
    "JsonValue",
    "NewActionRun",
    "NewExecution",
    "PhaseFailed",
    "PhaseOutcome",
    "PhaseRecord",
    "PhaseStatus",
    "PhaseSucceeded",
    "ProjectMismatch",
    "RetryRefused",
    "StaleFencingToken",
]

ExecutionId = NewType("ExecutionId", str)
"""Identifies one execution across the whole database (caller-supplied or ``exe_<n>``)."""

DEFAULT_LIMIT = 100
"""Rows per page when a listing is called without ``limit``."""

MAX_TEXT_CHARS = 256
"""Longest identifier-like text (ids, project ids, names, owners, keys), in characters."""

MAX_LEASE_MS = 86_400_000
"""Longest lease ``claim`` and ``renew`` grant: one day, in ms."""

DEFAULT_MAX_ATTEMPTS = 3
"""Attempts an action run gets unless its :class:`NewActionRun` says otherwise (the first
and two requeues): the default of the AWS SDKs' "standard" retry mode."""

MAX_ATTEMPTS = 100
"""Largest ``max_attempts`` an action run may ask for."""


class ExecutionStatus(StrEnum):
    """Where an execution stands; ``succeeded``, ``failed`` and ``cancelled`` are final."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_finished(self) -> bool:
        """Whether the status is final (succeeded, failed or cancelled)."""
        return self in _FINISHED

    def can_move_to(self, target: ExecutionStatus) -> bool:
        """Whether the state machine allows a move from this status to ``target``."""
        return target in _MOVES.get(self, frozenset())


_FINISHED = frozenset(
    {ExecutionStatus.SUCCEEDED, ExecutionStatus.FAILED, ExecutionStatus.CANCELLED}
)
_MOVES: dict[ExecutionStatus, frozenset[ExecutionStatus]] = {
    ExecutionStatus.QUEUED: frozenset({ExecutionStatus.RUNNING, ExecutionStatus.CANCELLED}),
    ExecutionStatus.RUNNING: _FINISHED,
}


@attrs.frozen
class ExecutionFailure:
    """Why an execution failed or was cancelled: an error ``name`` (non-empty, e.g. the
    exception type), a human ``message`` and JSON ``details`` (stack, codes, anything)."""

    name: str
    message: str
    details: JsonValue = None


@attrs.frozen
class NewExecution:
    """A request to create an execution.

    - ``project_id``, ``name``: non-empty text of at most :data:`MAX_TEXT_CHARS` characters.
    - ``input``: any JSON value; ``metadata``: a JSON object.
    - ``id``: the caller's id, or None to generate ``exe_<seq>`` (ids of that form are
      reserved for generation).
    - ``idempotency_key``: makes ``create`` idempotent per project (see ``create``).
    - ``parent_id``: an existing execution of the same project.
    """

    project_id: str
    name: str
    input: JsonValue = None
    id: ExecutionId | None = None
    idempotency_key: str | None = None
    parent_id: ExecutionId | None = None
    metadata: dict[str, JsonValue] = attrs.field(factory=dict)

    def digest(self) -> str:
        """Return the sha256 (hex) that decides whether two requests are "the same".

        Covers ``id`` (when given), ``name``, ``input``, ``parent_id`` and ``metadata``, with
        object keys sorted (key order does not make two requests differ). ``project_id`` and
        ``idempotency_key`` select the stored request and are not part of it.
        """
        canonical = json.dumps(
            [self.id, self.name, self.parent_id, self.input, dict(self.metadata)],
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=True,
            allow_nan=False,
        )
        return hashlib.sha256(canonical.encode("ascii")).hexdigest()


@attrs.frozen
class Execution:
    """One stored execution.

    - ``seq``: its position in the database-wide creation order (dense, never reused).
    - ``created_at_ms`` / ``updated_at_ms``: when it was created / last changed (epoch ms).
    - ``started_at_ms``: its first claim; ``finished_at_ms``: when it reached a final status.
    - ``lease_owner``, ``lease_expires_at_ms``: the worker holding it and until when (ms);
      the expiry is None unless it is running.
    - ``fencing_token``: the token of its latest claim (0 if never claimed);
      ``attempts``: how many times it was claimed.
    """

    id: ExecutionId
    project_id: str
    status: ExecutionStatus
    seq: int
    name: str
    input: JsonValue
    output: JsonValue
    failure: ExecutionFailure | None
    parent_id: ExecutionId | None
    metadata: dict[str, JsonValue]
    idempotency_key: str | None
    created_at_ms: int
    updated_at_ms: int
    started_at_ms: int | None
    finished_at_ms: int | None
    lease_owner: str | None
    lease_expires_at_ms: int | None
    fencing_token: int
    attempts: int

    @property
    def fence(self) -> Fence:
        """The :class:`Fence` of this execution's latest claim (what action-run writes carry)."""
        return Fence(self.id, self.fencing_token)


@attrs.frozen
class Fence:
    """Who may write an execution's action runs: the execution ``execution_id`` and the
    ``fencing_token`` its claim handed out (``claimed.fence``)."""

    execution_id: ExecutionId
    fencing_token: int


@attrs.frozen
class StaleFencingToken:
    """``execution_id`` was claimed again since ``presented`` was handed out; ``current`` is
    the token of its latest claim. Nothing was written.

    ``entity`` names what was claimed: ``"execution"`` (the ledger) or ``"agent run"`` (the
    agents service, whose ``execution_id`` is then the run's id); the message names it.
    """

    execution_id: str
    presented: int
    current: int
    entity: str = attrs.field(default="execution", kw_only=True)

    def __str__(self) -> str:
        return (
            f"{self.entity} {self.execution_id!r}: fencing token {self.presented} is stale "
            f"(current {self.current})"
        )


@attrs.frozen
class ProjectMismatch:
    """``entity`` ``key`` belongs to project ``actual``, not to ``expected`` (the caller's)."""

    entity: str
    key: str
    expected: str
    actual: str

    def __str__(self) -> str:
        return (
            f"{self.entity} {self.key!r} belongs to project {self.actual!r}, not {self.expected!r}"
        )


@attrs.frozen
class ExecutionFinished:
    """Execution ``execution_id`` is already ``status`` (final) and takes no new work."""

    execution_id: str
    status: str

    def __str__(self) -> str:
        return f"execution {self.execution_id!r} is already {self.status}"


@attrs.frozen
class ExecutionMismatch:
    """Action run ``run_id`` belongs to execution ``actual``, not to ``presented`` (the one
    the caller's fence names). Nothing was written."""

    run_id: str
    presented: str
    actual: str

    def __str__(self) -> str:
        return (
            f"action run {self.run_id!r} belongs to execution {self.actual!r}, "
            f"not {self.presented!r}"
        )


@attrs.frozen
class RetryRefused:
    """Failed action run ``run_id`` may not be queued again: ``reason`` is
    ``"not_retryable"`` (its final failure says ``retryable=False``) or
    ``"attempts_exhausted"`` (``attempt`` reached ``max_attempts``). Nothing was written."""

    run_id: str
    reason: str
    attempt: int
    max_attempts: int

    def __str__(self) -> str:
        return (
            f"action run {self.run_id!r} may not be retried: {self.reason} "
            f"(attempt {self.attempt} of {self.max_attempts})"
        )


ExecutionError: TypeAlias = (
    NotFound
    | Conflict
    | IllegalTransition
    | InvalidInput
    | StaleFencingToken
    | ProjectMismatch
    | Busy
    | StorageFailure
)
"""Every failure an :class:`ExecutionStorage` method returns."""


@runtime_checkable
class ExecutionStorage(Protocol):
    """The durable ledger of executions.

    Live: :class:`runstore.layers.SqliteExecutionStorage`; in memory:
    :class:`runstore.layers.InMemoryExecutionStorage`. Every write is one unit of work; called
    inside another unit of work of the same database (another service's ``transact``), a
    method joins it and sees its uncommitted rows.
    """

    def create(self, new: NewExecution) -> Result[Execution, ExecutionError]:
        """Create a queued execution, or return the one an earlier identical request made.

        With an ``idempotency_key`` already used in the project: the same request (equal
        :meth:`NewExecution.digest`) returns the stored execution, whatever its status now;
        a different one is ``Conflict``. Failures: ``InvalidInput`` (bad text, non-JSON
        values, a reserved ``exe_<n>`` id), ``Conflict`` (the id exists, or the key was used
        for another request), ``NotFound`` (no parent), ``ProjectMismatch`` (the parent is
        in another project).
        """
        ...

    def get(self, execution_id: ExecutionId) -> Result[Execution, ExecutionError]:
        """Return the execution ``execution_id``; ``NotFound("execution", id)`` if none."""
        ...

    def list(
        self,
        project_id: str,
        *,
        status: ExecutionStatus | None = None,
        limit: int = DEFAULT_LIMIT,
        cursor: str | None = None,
    ) -> Result[Page[Execution], ExecutionError]:
        """List the project's executions, oldest first (ascending ``seq``), optionally of one
        ``status``, following the pagination contract of :mod:`runstore.services.pagination`.

        ``InvalidInput`` for a bad ``limit``, ``cursor`` or ``status``. An unknown project is
        an empty page.
        """
        ...

    def claim(
        self, project_id: str, owner: str, lease_ms: int
    ) -> Result[Execution | None, ExecutionError]:
        """Take the oldest claimable execution of the project for ``owner`` for ``lease_ms``.

        Claimable: ``queued``, or ``running`` with a lease that has expired (expiry <= now).
        The execution becomes (or stays) ``running`` with ``lease_owner=owner``,
        ``lease_expires_at_ms = now + lease_ms``, a fresh fencing token larger than every one
        handed out before, and ``attempts + 1``; ``started_at_ms`` keeps its first claim.
        Returns ``Success(None)`` when nothing is claimable. Atomic: concurrent claimers
        (threads or processes) never get the same claim. ``InvalidInput`` for bad text or
        ``lease_ms`` outside ``1..MAX_LEASE_MS``.
        """
        ...

    def renew(
        self, execution_id: ExecutionId, fencing_token: int, lease_ms: int
    ) -> Result[Execution, ExecutionError]:
        """Extend the lease of a running execution to ``now + lease_ms``.

        Failures, in this order: ``InvalidInput`` (bad id, token or ``lease_ms``);
        ``NotFound``; ``Conflict`` (expected ``running``, actual its status) unless it is
        running; ``StaleFencingToken`` when ``fencing_token`` is not its latest. A lease that
        expired but was not claimed again can still be renewed.
        """
        ...

    def finish(
        self,
        execution_id: ExecutionId,
        fencing_token: int,
        status: ExecutionStatus,
        *,
        output: JsonValue = None,
        failure: ExecutionFailure | None = None,
    ) -> Result[Execution, ExecutionError]:
        """Move a running execution to the final ``status``, as the worker holding the claim.

        ``succeeded`` takes no ``failure``; ``failed`` requires one; ``cancelled`` may carry
        one. ``output`` is stored for any status. The lease expiry is cleared.
        Failures, checked in this order: ``InvalidInput`` (a status that is not final,
        a failure that does not fit it, non-JSON output), ``NotFound``,
        ``IllegalTransition(current, status)`` unless it is running, ``StaleFencingToken``.
        """
        ...

    def cancel(
        self, execution_id: ExecutionId, failure: ExecutionFailure | None = None
    ) -> Result[Execution, ExecutionError]:
        """Cancel a queued or running execution (an operator's call: no fencing token).

        A worker that still holds the claim then gets ``IllegalTransition`` from ``finish``.
        Failures: ``InvalidInput``, ``NotFound``,
        ``IllegalTransition(current, "cancelled")`` when it is already finished.
        """
        ...


ActionRunId = NewType("ActionRunId", str)
"""Identifies one action run across the whole database (caller-supplied or ``act_<n>``)."""


class ActionRunStatus(StrEnum):
    """The outcome-level status of a run; ``succeeded``, ``failed``, ``cancelled`` are final."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_finished(self) -> bool:
        """Whether the status is final."""
        return self in _ACTION_RUN_FINISHED


_ACTION_RUN_FINISHED = frozenset(
    {ActionRunStatus.SUCCEEDED, ActionRunStatus.FAILED, ActionRunStatus.CANCELLED}
)


class ActionRunPhase(StrEnum):
    """Where in its lifecycle a run is (``finished`` once it has a final status)."""

    QUEUED = "queued"
    RUNNING = "running"
    WRITEBACK = "writeback"
    EFFECTS = "effects"
    FINISHED = "finished"


class PhaseStatus(StrEnum):
    """How an optional phase (writeback, effects) ended."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"


@attrs.frozen
class ActionRunFailure:
    """A structured failure: ``name`` (non-empty), ``message``, the ``phase`` it happened in,
    JSON ``details``, an optional machine-readable ``code`` (identifier text, e.g.
    ``"http_504"``) and whether the step may be tried again (``retryable``).

    ``phase`` None means "the phase it is recorded in": the writeback or effects phase for
    those phases' failures, the run's phase at ``finish`` for the final failure. Stored
    failures always carry their phase. ``requeue`` looks at the final failure's
    ``retryable``; failures stored before it existed read as ``code=None, retryable=False``.
    """

    name: str
    message: str
    phase: ActionRunPhase | None = None
    details: JsonValue = None
    code: str | None = None
    retryable: bool = False


@attrs.frozen
class PhaseSucceeded:
    """The phase succeeded; writeback may carry a JSON ``result`` (effects carry none)."""

    result: JsonValue = None


@attrs.frozen
class PhaseFailed:
    """The phase failed with ``failure``."""

    failure: ActionRunFailure


PhaseOutcome: TypeAlias = PhaseSucceeded | PhaseFailed
"""What ``record_writeback`` and ``record_effects`` take."""


@attrs.frozen
class PhaseRecord:
    """A recorded optional phase: its ``status``, when it completed (epoch ms), the writeback
    ``result`` (None for effects and for failures) and the ``failure`` when it failed."""

    status: PhaseStatus
    completed_at_ms: int
    result: JsonValue
    failure: ActionRunFailure | None


@attrs.frozen
class NewActionRun:
    """A request to queue an action run of ``action_id`` in ``execution_id``.

    - ``id``: the caller's id, or None to generate ``act_<seq>`` (ids of that form are
      reserved); ``input``: any JSON value.
    - ``idempotency_key``: makes ``queue`` idempotent per execution (see ``queue``).
    - ``max_attempts``: the retry policy, ``1..MAX_ATTEMPTS`` attempts in all (the first
      included); ``requeue`` is refused once ``attempt`` reaches it.
    """

    project_id: str
    execution_id: ExecutionId
    action_id: str
    input: JsonValue = None
    id: ActionRunId | None = None
    idempotency_key: str | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS

    def digest(self) -> str:
        """Return the sha256 (hex) that decides whether two ``queue`` requests are "the same".

        Covers ``id`` (when given), ``action_id``, ``input`` and ``max_attempts``, with object
        keys sorted. ``project_id``, ``execution_id`` and ``idempotency_key`` select the
        stored request and are not part of it.
        """
        canonical = json.dumps(
            [self.id, self.action_id, self.input, self.max_attempts],
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=True,
            allow_nan=False,
        )
        return hashlib.sha256(canonical.encode("ascii")).hexdigest()


@attrs.frozen
class ActionRun:
    """One stored action run.

    ``seq`` is its position in the database-wide queue order (dense, never reused);
    ``attempt`` starts at 1 and grows with each ``requeue``, up to ``max_attempts``; times
    are epoch ms (``started_at_ms``/``finished_at_ms`` None until then);
    ``writeback``/``effects`` are None until recorded; ``failure`` is the final failure
    (failed or cancelled runs); ``idempotency_key`` is the key it was queued with.
    """

    id: ActionRunId
    project_id: str
    execution_id: ExecutionId
    action_id: str
    status: ActionRunStatus
    phase: ActionRunPhase
    seq: int
    input: JsonValue
    attempt: int
    queued_at_ms: int
    started_at_ms: int | None
    finished_at_ms: int | None
    writeback: PhaseRecord | None
    effects: PhaseRecord | None
    failure: ActionRunFailure | None
    idempotency_key: str | None
    max_attempts: int

    @property
    def state(self) -> str:
        """The phase while unfinished, else the final status (what ``IllegalTransition`` names)."""
        return str(self.status) if self.status.is_finished else str(self.phase)


ActionRunError: TypeAlias = (
    NotFound
    | Conflict
    | IllegalTransition
    | InvalidInput
    | ProjectMismatch
    | ExecutionFinished
    | StaleFencingToken
    | ExecutionMismatch
    | RetryRefused
    | Busy
    | StorageFailure
)
"""Every failure an :class:`ActionRunStorage` method returns."""


@runtime_checkable
class ActionRunStorage(Protocol):
    """The durable record of action runs.

    Live: :class:`runstore.layers.SqliteActionRunStorage`; in memory:
    :class:`runstore.layers.InMemoryActionRunStorage`. Each write is one unit of work and
    carries the :class:`Fence` of the execution's current claim; the refusals every write
    shares (the fence, then the run) and their order are in the module docstring, as
    "the fence's failures" below. ``InvalidInput`` (checked first, nothing consulted) also
    covers a fence that is not a :class:`Fence` with an id and a token ``>= 0``.
    """

    def queue(self, new: NewActionRun, fence: Fence) -> Result[ActionRun, ActionRunError]:
        """Queue a new run (status and phase ``queued``, attempt 1) at the clock's now.

        ``InvalidInput`` (bad text, non-JSON input, a reserved ``act_<n>`` id,
        ``max_attempts`` outside ``1..MAX_ATTEMPTS``, a fence naming another execution than
        ``new``); the fence's failures (``ProjectMismatch`` when ``new.project_id`` is not the
        execution's); then, with an ``idempotency_key`` already used in the execution, the
        stored run for the same request (equal :meth:`NewActionRun.digest`) or ``Conflict``;
        ``Conflict`` when the run id exists.
        """
        ...

    def requeue(self, run_id: ActionRunId, fence: Fence) -> Result[ActionRun, ActionRunError]:
        """Queue a failed run again: phase fields, times and failures reset, ``attempt + 1``.

        The fence's failures; ``IllegalTransition(state, "queued")`` unless it failed;
        ``RetryRefused("not_retryable")`` when its final failure is not ``retryable``;
        ``RetryRefused("attempts_exhausted")`` when ``attempt == max_attempts``.
        """
        ...

    def start(self, run_id: ActionRunId, fence: Fence) -> Result[ActionRun, ActionRunError]:
        """Move a queued run to running (``started_at_ms`` = now).

        The fence's failures; ``IllegalTransition(state, "running")`` unless it is queued.
        """
        ...

    def record_writeback(
        self, run_id: ActionRunId, fence: Fence, outcome: PhaseOutcome
    ) -> Result[ActionRun, ActionRunError]:
        """Record the writeback phase of a running run that has not entered a later phase.

        The same outcome again (already recorded, equal content) returns the stored run
        unchanged. ``InvalidInput`` (non-JSON result or details, a failure naming another
        phase); the fence's failures; ``IllegalTransition(state, "writeback")`` unless the
        phase is ``running`` or it is such a repeat.
        """
        ...

    def record_effects(
        self, run_id: ActionRunId, fence: Fence, outcome: PhaseOutcome
    ) -> Result[ActionRun, ActionRunError]:
        """Record the effects phase of a running run (after writeback, if any).

        The same outcome again returns the stored run unchanged. ``InvalidInput`` (a result,
        non-JSON details, a failure naming another phase); the fence's failures;
        ``IllegalTransition(state, "effects")`` unless the phase is ``running`` or
        ``writeback`` or it is such a repeat.
        """
        ...

    def finish(
        self,
        run_id: ActionRunId,
        fence: Fence,
        status: ActionRunStatus,
        failure: ActionRunFailure | None = None,
    ) -> Result[ActionRun, ActionRunError]:
        """Give a running run its final ``status`` (phase ``finished``, ``finished_at_ms`` = now).

        A queued run may only be ``cancelled``. ``succeeded`` takes no failure, ``failed``
        requires one, ``cancelled`` may carry one; a failure without a phase gets the run's
        phase. ``InvalidInput``; the fence's failures; ``IllegalTransition(state, status)``.
        """
        ...

    def get(self, run_id: ActionRunId) -> Result[ActionRun, ActionRunError]:
        """Return the run ``run_id``; ``NotFound("action_run", id)`` if none;
        ``StorageFailure(kind=corrupt)`` for a stored phase failure naming another phase."""
        ...

    def list(
        self,
        project_id: str,
        *,
        execution_id: ExecutionId | None = None,
        status: ActionRunStatus | None = None,
        limit: int = DEFAULT_LIMIT,
        cursor: str | None = None,
    ) -> Result[Page[ActionRun], ActionRunError]:
        """List the project's runs in queue order (ascending ``seq``), optionally of one
        execution and/or one ``status``, following :mod:`runstore.services.pagination`.

        ``InvalidInput`` for a bad ``limit``, ``cursor``, ``status`` or ``execution_id``.
        """
        ...
