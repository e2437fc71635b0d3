"""Action runs: the steps an execution performs, each with its own phases and failures.

An *action run* belongs to exactly one execution of the same project (checked against the
:class:`~runstore.services.executions.ExecutionStorage` in the same unit of work when it is
queued or re-queued) and follows one lifecycle::

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

A failure (:class:`ActionRunFailure`: name, message, phase, JSON details) is stored as one
JSON object per phase (writeback, effects, final) and read back equal, Unicode and nested
details included. The shape follows seed 002, which moved from three columns per phase to
one structured value per phase.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NewType, Protocol, TypeAlias, runtime_checkable

import attrs
from returns.result import Result

from runstore.services.errors import (
    Busy,
    Conflict,
    IllegalTransition,
    InvalidInput,
    NotFound,
    StorageFailure,
)
from runstore.services.executions import (
    DEFAULT_LIMIT,
    ExecutionFinished,
    ExecutionId,
    JsonValue,
    ProjectMismatch,
)
from runstore.services.pagination import Page

__all__ = [
    "ActionRun",
    "ActionRunError",
    "ActionRunFailure",
    "ActionRunId",
    "ActionRunPhase",
    "ActionRunStatus",
    "ActionRunStorage",
    "NewActionRun",
    "PhaseFailed",
    "PhaseOutcome",
    "PhaseRecord",
    "PhaseStatus",
    "PhaseSucceeded",
]

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
        return self in _FINISHED


_FINISHED = frozenset(
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
    """A structured failure: ``name`` (non-empty), ``message``, the ``phase`` it happened in
    and JSON ``details``.

    ``phase`` None means "the phase it is recorded in": the writeback or effects phase for
    those phases' failures, the run's phase at ``finish`` for the final failure. Stored
    failures always carry their phase.
    """

    name: str
    message: str
    phase: ActionRunPhase | None = None
    details: JsonValue = None


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

    ``id`` None generates ``act_<seq>`` (ids of that form are reserved); ``input`` is any
    JSON value.
    """

    project_id: str
    execution_id: ExecutionId
    action_id: str
    input: JsonValue = None
    id: ActionRunId | None = None


@attrs.frozen
class ActionRun:
    """One stored action run.

    ``seq`` is its position in the database-wide queue order (dense, never reused);
    ``attempt`` starts at 1 and grows with each ``requeue``; times are epoch ms
    (``started_at_ms``/``finished_at_ms`` None until then); ``writeback``/``effects`` are
    None until recorded; ``failure`` is the final failure (failed or cancelled runs).
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
    | Busy
    | StorageFailure
)
"""Every failure an :class:`ActionRunStorage` method returns."""


@runtime_checkable
class ActionRunStorage(Protocol):
    """The durable record of action runs.

    Live: :class:`runstore.layers.SqliteActionRunStorage`; in memory:
    :class:`runstore.layers.InMemoryActionRunStorage`. Each write is one unit of work.
    """

    def queue(self, new: NewActionRun) -> Result[ActionRun, ActionRunError]:
        """Queue a new run (status and phase ``queued``, attempt 1) at the clock's now.

        Checked in the same unit of work, in this order: ``InvalidInput`` (bad text, non-JSON
        input, a reserved ``act_<n>`` id); ``NotFound("execution", id)``; ``ProjectMismatch``
        (the execution is in another project); ``ExecutionFinished`` (it is final);
        ``Conflict`` (the run id exists).
        """
        ...

    def requeue(self, run_id: ActionRunId) -> Result[ActionRun, ActionRunError]:
        """Queue a failed run again: phase fields, times and failures reset, ``attempt + 1``.

        ``NotFound``; ``IllegalTransition(state, "queued")`` unless it failed;
        ``ExecutionFinished`` when its execution is final.
        """
        ...

    def start(self, run_id: ActionRunId) -> Result[ActionRun, ActionRunError]:
        """Move a queued run to running (``started_at_ms`` = now).

        ``NotFound``; ``IllegalTransition(state, "running")`` unless it is queued.
        """
        ...

    def record_writeback(
        self, run_id: ActionRunId, outcome: PhaseOutcome
    ) -> Result[ActionRun, ActionRunError]:
        """Record the writeback phase of a running run that has not entered a later phase.

        ``InvalidInput`` (non-JSON result or details, a failure naming another phase);
        ``NotFound``; ``IllegalTransition(state, "writeback")`` unless the phase is
        ``running``.
        """
        ...

    def record_effects(
        self, run_id: ActionRunId, outcome: PhaseOutcome
    ) -> Result[ActionRun, ActionRunError]:
        """Record the effects phase of a running run (after writeback, if any).

        ``InvalidInput`` (a result, non-JSON details, a failure naming another phase);
        ``NotFound``; ``IllegalTransition(state, "effects")`` unless the phase is
        ``running`` or ``writeback``.
        """
        ...

    def finish(
        self,
        run_id: ActionRunId,
        status: ActionRunStatus,
        failure: ActionRunFailure | None = None,
    ) -> Result[ActionRun, ActionRunError]:
        """Give a running run its final ``status`` (phase ``finished``, ``finished_at_ms`` = now).

        A queued run may only be ``cancelled``. ``succeeded`` takes no failure, ``failed``
        requires one, ``cancelled`` may carry one; a failure without a phase gets the run's
        phase. ``InvalidInput``; ``NotFound``; ``IllegalTransition(state, status)``.
        """
        ...

    def get(self, run_id: ActionRunId) -> Result[ActionRun, ActionRunError]:
        """Return the run ``run_id``; ``NotFound("action_run", id)`` if none."""
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
