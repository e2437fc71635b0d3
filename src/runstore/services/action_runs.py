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

import json
import re
from enum import StrEnum
from typing import NewType, Protocol, TypeAlias, runtime_checkable

import attrs
from returns.result import Failure, Result, Success

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
    check_json,
    check_text,
    dump_json,
    load_json,
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

GENERATED_ACTION_RUN_ID = re.compile(r"act_[0-9]+")
"""Ids of this form are generated from the action-run sequence; callers may not choose them."""


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


_STATUS_VALUES = frozenset(s.value for s in ActionRunStatus)


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


# -- validation and the at-rest form, shared by every layer -----------------------------------


def check_new_action_run(new: NewActionRun) -> InvalidInput | None:
    """Return why ``new`` cannot be queued, or None (no storage is consulted)."""
    if not isinstance(new, NewActionRun):
        return InvalidInput("new", f"must be a NewActionRun, got {type(new).__name__}")
    problem = (
        check_text(new.project_id, "project_id")
        or check_text(new.execution_id, "execution_id")
        or check_text(new.action_id, "action_id")
        or (None if new.id is None else check_text(new.id, "id"))
        or check_json(new.input, "input")
    )
    if problem is not None:
        return problem
    if new.id is not None and GENERATED_ACTION_RUN_ID.fullmatch(new.id):
        return InvalidInput("id", "ids of the form act_<digits> are reserved for generated ids")
    return None


def check_run_failure(
    failure: object, field: str, *, phase: ActionRunPhase | None
) -> Result[ActionRunFailure, InvalidInput]:
    """Check ``failure`` and return it with its phase filled in.

    ``phase`` is the phase the failure is recorded in; for writeback and effects a failure
    naming another phase is ``InvalidInput``.
    """
    if not isinstance(failure, ActionRunFailure):
        return Failure(
            InvalidInput(field, f"must be an ActionRunFailure, got {type(failure).__name__}")
        )
    problem = check_text(failure.name, f"{field}.name") or check_json(
        failure.details, f"{field}.details"
    )
    if problem is None and not isinstance(failure.message, str):
        problem = InvalidInput(f"{field}.message", "must be text")
    if problem is None:
        problem = check_json(failure.message, f"{field}.message")
    if problem is not None:
        return Failure(problem)
    given = failure.phase
    if given is not None:
        try:
            given = ActionRunPhase(given)
        except ValueError:
            return Failure(InvalidInput(f"{field}.phase", f"{given!r} is not a phase"))
    if phase in (ActionRunPhase.WRITEBACK, ActionRunPhase.EFFECTS) and given not in (None, phase):
        return Failure(
            InvalidInput(f"{field}.phase", f"a {phase} failure cannot name phase {given}")
        )
    filled = given if given is not None else phase
    if filled == failure.phase:
        return Success(failure)
    return Success(attrs.evolve(failure, phase=filled))


def check_outcome(
    outcome: object, phase: ActionRunPhase
) -> Result[PhaseSucceeded | PhaseFailed, InvalidInput]:
    """Check a writeback or effects outcome; return it with the failure's phase filled."""
    if isinstance(outcome, PhaseSucceeded):
        if phase is ActionRunPhase.EFFECTS and outcome.result is not None:
            return Failure(InvalidInput("outcome.result", "the effects phase has no result"))
        problem = check_json(outcome.result, "outcome.result")
        return Failure(problem) if problem is not None else Success(outcome)
    if isinstance(outcome, PhaseFailed):
        return check_run_failure(outcome.failure, "outcome.failure", phase=phase).map(PhaseFailed)
    return Failure(
        InvalidInput(
            "outcome", f"must be PhaseSucceeded or PhaseFailed, got {type(outcome).__name__}"
        )
    )


def check_finish_args(
    status: object, failure: ActionRunFailure | None
) -> Result[tuple[ActionRunStatus, ActionRunFailure | None], InvalidInput]:
    """Check the arguments of ``finish`` that need no stored state.

    Returns the final status and the failure (its phase still None when not given; fill it
    with :func:`with_phase` from the run's phase).
    """
    if not isinstance(status, str) or status not in _STATUS_VALUES:
        return Failure(InvalidInput("status", f"{status!r} is not an action run status"))
    target = ActionRunStatus(status)
    if not target.is_finished:
        return Failure(InvalidInput("status", f"{target} is not a final status"))
    if target is ActionRunStatus.SUCCEEDED and failure is not None:
        return Failure(InvalidInput("failure", "a succeeded run carries no failure"))
    if target is ActionRunStatus.FAILED and failure is None:
        return Failure(InvalidInput("failure", "a failed run needs a failure"))
    if failure is None:
        return Success((target, None))
    return check_run_failure(failure, "failure", phase=None).map(lambda f: (target, f))


def with_phase(failure: ActionRunFailure | None, phase: str) -> ActionRunFailure | None:
    """Return ``failure`` with ``phase`` filled in when it names none."""
    if failure is None or failure.phase is not None:
        return failure
    return attrs.evolve(failure, phase=ActionRunPhase(phase))


def parse_run_status(status: object) -> Result[ActionRunStatus | None, InvalidInput]:
    """Return the status filter of ``list`` (None for all), or ``InvalidInput``."""
    if status is None:
        return Success(None)
    if isinstance(status, str) and status in _STATUS_VALUES:
        return Success(ActionRunStatus(status))
    return Failure(InvalidInput("status", f"{status!r} is not an action run status"))


def dump_run_failure(failure: ActionRunFailure | None) -> str | None:
    """Return the stored JSON object of a checked failure (phase filled), or None."""
    if failure is None:
        return None
    return dump_json(
        {
            "name": failure.name,
            "message": failure.message,
            "phase": None if failure.phase is None else str(failure.phase),
            "details": failure.details,
        }
    )


def load_run_failure(text: str | None) -> ActionRunFailure | None:
    """Return the failure stored by :func:`dump_run_failure`."""
    if text is None:
        return None
    data = json.loads(text)
    phase = data["phase"]
    return ActionRunFailure(
        name=data["name"],
        message=data["message"],
        phase=None if phase is None else ActionRunPhase(phase),
        details=data["details"],
    )


def phase_record(
    status: str | None, completed_at_ms: int | None, result: str | None, failure: str | None
) -> PhaseRecord | None:
    """Return the phase record stored in four columns (None when the phase was not entered)."""
    if status is None or completed_at_ms is None:
        return None
    return PhaseRecord(
        status=PhaseStatus(status),
        completed_at_ms=completed_at_ms,
        result=None if result is None else load_json(result),
        failure=load_run_failure(failure),
    )


_FINISHED_VALUES = frozenset(s.value for s in _FINISHED)


def state_of(status: str, phase: str) -> str:
    """Return a run's state: its final ``status`` once finished, else its ``phase``."""
    return status if status in _FINISHED_VALUES else phase


def check_step(
    run_id: str, state: tuple[str, str] | None, step: str
) -> NotFound | IllegalTransition | None:
    """Return why the run with stored ``(status, phase)`` may not take ``step``, or None.

    ``step`` is ``running`` (start), ``writeback``, ``effects``, ``queued`` (requeue) or a
    final status (finish). ``state`` None means there is no such run (``NotFound``).
    """
    if state is None:
        return NotFound("action_run", run_id)
    status, phase = state
    if step == "running":
        allowed = status == "queued"
    elif step == "writeback":
        allowed = status == "running" and phase == "running"
    elif step == "effects":
        allowed = status == "running" and phase in ("running", "writeback")
    elif step == "queued":
        allowed = status == "failed"
    else:
        allowed = status == "running" or (status == "queued" and step == "cancelled")
    if allowed:
        return None
    return IllegalTransition("action_run", run_id, state_of(status, phase), step)
