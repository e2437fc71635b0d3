"""The execution ledger's rules core: executions and action runs, for every backend.

Pure functions only; nothing here reads or writes storage. A layer method reads::

    validate (check_*) -> unit of work -> load facts (backend) -> decide (decide_*)
                       -> apply (backend) -> row to record (*_record)

- **Validators** (``check_*``) take a method's raw arguments and return a checked request,
  with JSON already encoded as its stored text, or ``InvalidInput`` naming the field path.
- **Decisions** (``decide_*``) take what the backend loaded inside the unit of work and say
  what to do, or which failure to return: the state machine of executions with its leases and
  fencing tokens, the idempotent create, the action-run lifecycle, cancellation.
- **The at-rest form**: :class:`ExecutionRow` and :class:`ActionRunRow` name the stored
  columns in the order the live layer selects them (the in-memory layer keeps rows of the
  same shape), and :func:`execution_record` / :func:`action_run_record` turn any such row,
  a fetched tuple included, into the record a caller gets.

The rules themselves are documented on the Protocols (:class:`ExecutionStorage`,
:class:`ActionRunStorage`); this module is where they are written, once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import attrs
from returns.result import Failure, Result, Success

from runstore.services._primitives import (
    check_int,
    check_text,
    decode_json,
    describe,
    encode_json,
    first_failure,
    text_problem,
)
from runstore.services.errors import Conflict, IllegalTransition, InvalidInput, NotFound
from runstore.services.ledger import (
    MAX_LEASE_MS,
    MAX_TEXT_CHARS,
    ActionRun,
    ActionRunError,
    ActionRunFailure,
    ActionRunPhase,
    ActionRunStatus,
    Execution,
    ExecutionError,
    ExecutionFailure,
    ExecutionFinished,
    ExecutionStatus,
    NewActionRun,
    NewExecution,
    PhaseFailed,
    PhaseOutcome,
    PhaseRecord,
    PhaseStatus,
    PhaseSucceeded,
    ProjectMismatch,
    StaleFencingToken,
)
from runstore.services.pagination import CursorCodec, Page, check_limit, page_of

__all__ = [
    "ACTION_RUN_COLUMNS",
    "ACTION_RUN_CURSOR",
    "EXECUTION_COLUMNS",
    "EXECUTION_CURSOR",
    "ActionRunDraft",
    "ActionRunRow",
    "Claim",
    "CreateFacts",
    "ExecutionDraft",
    "ExecutionRow",
    "Finish",
    "Listing",
    "PhaseWrite",
    "Renew",
    "RunFinish",
    "action_run_page",
    "action_run_record",
    "check_action_run_listing",
    "check_cancel",
    "check_claim",
    "check_execution_id",
    "check_execution_listing",
    "check_failure",
    "check_finish",
    "check_id",
    "check_new_action_run",
    "check_new_execution",
    "check_outcome",
    "check_phase",
    "check_renew",
    "check_run_finish",
    "check_run_id",
    "decide_cancel",
    "decide_create",
    "decide_held",
    "decide_new_run",
    "decide_queue",
    "decide_step",
    "execution_page",
    "execution_record",
    "final_failure_json",
    "is_claimable",
    "oldest",
    "state_of",
]

EXECUTION_CURSOR = CursorCodec("executions")
"""The cursor of ``ExecutionStorage.list``: the ``seq`` of the last execution of a page."""

ACTION_RUN_CURSOR = CursorCodec("action_runs")
"""The cursor of ``ActionRunStorage.list``: the ``seq`` of the last run of a page."""

GENERATED_EXECUTION_ID = re.compile(r"exe_[0-9]+")
"""Ids of this form are generated from the execution sequence; callers may not choose them."""

GENERATED_ACTION_RUN_ID = re.compile(r"act_[0-9]+")
"""Ids of this form are generated from the action-run sequence; callers may not choose them."""

_RUNNING = ExecutionStatus.RUNNING.value
_QUEUED = ExecutionStatus.QUEUED.value  # also the action runs' queued status and phase
_EXECUTION_STATUS = {status.value: status for status in ExecutionStatus}
_RUN_STATUS = {status.value: status for status in ActionRunStatus}
_RUN_PHASE = {phase.value: phase for phase in ActionRunPhase}
_RUN_FINISHED = frozenset(s.value for s in ActionRunStatus if s.is_finished)


# -- text, numbers and JSON as the ledger accepts them -------------------------------------------


def check_id(value: object, field: str) -> Result[str, InvalidInput]:
    """Check identifier-like text: 1..:data:`MAX_TEXT_CHARS` characters, no NUL, no lone
    surrogate (ids, project ids, names, owners, idempotency keys)."""
    return check_text(value, field, max_chars=MAX_TEXT_CHARS)


def _check_message(value: object, field: str) -> Result[str, InvalidInput]:
    """Check free text (a failure's message): any length, empty and NUL allowed."""
    return check_text(value, field, max_chars=None, allow_empty=True, allow_nul=True)


def check_execution_id(value: object) -> Result[str, InvalidInput]:
    """Check the ``execution_id`` argument of a method."""
    return check_id(value, "execution_id")


def check_run_id(value: object) -> Result[str, InvalidInput]:
    """Check the ``run_id`` argument of an action-run method."""
    return check_id(value, "run_id")


def _check_lease(lease_ms: object) -> Result[int, InvalidInput]:
    return check_int(lease_ms, "lease_ms", minimum=1, maximum=MAX_LEASE_MS)


def _check_token(token: object) -> Result[int, InvalidInput]:
    return check_int(token, "fencing_token", minimum=0, maximum=None)


def _ids(*pairs: tuple[object, str]) -> Result[None, InvalidInput]:
    """Check ``(value, field)`` pairs as ids, in order; a ``None`` value is skipped."""
    for value, field in pairs:
        if value is not None:
            problem = text_problem(value, field, max_chars=MAX_TEXT_CHARS)
            if problem is not None:
                return Failure(problem)
    return Success(None)


# -- listings -----------------------------------------------------------------------------------


@attrs.frozen
class Listing:
    """A checked ``list`` call: rows of ``project_id`` (and ``execution_id``), of ``status``
    when given, with ``seq > after_seq``, at most ``limit`` per page."""

    project_id: str
    status: str | None
    limit: int
    after_seq: int
    execution_id: str | None = None


def _check_listing(
    project_id: object,
    status: object,
    statuses: dict[str, Any],
    noun: str,
    limit: object,
    cursor: object,
    codec: CursorCodec,
) -> Result[Listing, InvalidInput]:
    if status is not None and not (isinstance(status, str) and status in statuses):
        return Failure(InvalidInput("status", f"{describe(status)} is not an {noun} status"))
    project = check_id(project_id, "project_id")
    if isinstance(project, Failure):
        return Failure(project.failure())
    size = check_limit(limit)  # type: ignore[arg-type]  # refuses what is not an int
    if isinstance(size, Failure):
        return Failure(size.failure())
    after = codec.decode(cursor)
    if isinstance(after, Failure):
        return Failure(after.failure())
    keys = after.unwrap()
    return Success(
        Listing(
            project.unwrap(),
            None if status is None else str(status),
            size.unwrap(),
            0 if keys is None else keys[0],
        )
    )


def check_execution_listing(
    project_id: object, status: object, limit: object, cursor: object
) -> Result[Listing, InvalidInput]:
    """Check ``ExecutionStorage.list``: ``status`` first, then project, ``limit``, ``cursor``."""
    return _check_listing(
        project_id, status, _EXECUTION_STATUS, "execution", limit, cursor, EXECUTION_CURSOR
    )


def check_action_run_listing(
    project_id: object, execution_id: object, status: object, limit: object, cursor: object
) -> Result[Listing, InvalidInput]:
    """Check ``ActionRunStorage.list``: ``execution_id`` first, then as executions do."""
    if execution_id is not None:
        checked = check_execution_id(execution_id)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
    listing = _check_listing(
        project_id, status, _RUN_STATUS, "action run", limit, cursor, ACTION_RUN_CURSOR
    )
    if execution_id is None:
        return listing
    return listing.map(lambda found: attrs.evolve(found, execution_id=str(execution_id)))


def execution_page(rows: Sequence[Sequence[Any]], limit: int) -> Page[Execution]:
    """The page of the first ``limit`` of ``rows`` (fetched as ``limit + 1`` at-rest rows)."""
    return page_of(
        [execution_record(row) for row in rows], limit, lambda e: EXECUTION_CURSOR.encode(e.seq)
    )


def action_run_page(rows: Sequence[Sequence[Any]], limit: int) -> Page[ActionRun]:
    """The page of the first ``limit`` of ``rows`` (fetched as ``limit + 1`` at-rest rows)."""
    return page_of(
        [action_run_record(row) for row in rows], limit, lambda r: ACTION_RUN_CURSOR.encode(r.seq)
    )


# -- executions: the at-rest form -----------------------------------------------------------


class ExecutionRow(NamedTuple):
    """One execution at rest (JSON as text); the fields are the live layer's columns in the
    order it selects them, ``request_digest`` last (selected only to decide a create)."""

    id: str
    project_id: str
    status: str
    seq: int
    name: str
    input: str
    output: str
    failure: str | None
    parent_id: str | None
    metadata: str
    idempotency_key: str | None
    created_at_ms: int
    updated_at_ms: int
    started_at_ms: int | None
    finished_at_ms: int | None
    lease_owner: str | None
    lease_expires_at_ms: int | None
    fencing_token: int
    attempts: int
    request_digest: str


EXECUTION_COLUMNS = ExecutionRow._fields[:-1]
"""The columns a read selects, in :class:`ExecutionRow` order (the digest left out)."""


def execution_record(row: Sequence[Any]) -> Execution:
    """Return the :class:`Execution` an at-rest row holds (:data:`EXECUTION_COLUMNS` first)."""
    return Execution(
        row[0],
        row[1],
        _EXECUTION_STATUS[row[2]],
        row[3],
        row[4],
        decode_json(row[5]),
        decode_json(row[6]),
        _load_failure(row[7]),
        row[8],
        decode_json(row[9]),  # type: ignore[arg-type]  # stored from a checked dict
        row[10],
        row[11],
        row[12],
        row[13],
        row[14],
        row[15],
        row[16],
        row[17],
        row[18],
    )


def check_failure(failure: object, field: str) -> Result[str | None, InvalidInput]:
    """Check an optional :class:`ExecutionFailure`; return its stored JSON (None for none)."""
    if failure is None:
        return Success(None)
    if not isinstance(failure, ExecutionFailure):
        return Failure(
            InvalidInput(field, f"must be an ExecutionFailure, got {type(failure).__name__}")
        )
    checked = first_failure(
        check_id(failure.name, f"{field}.name"),
        _check_message(failure.message, f"{field}.message"),
        encode_json(failure.details, f"{field}.details"),
    )
    return checked.bind(
        lambda _: encode_json(
            {"name": failure.name, "message": failure.message, "details": failure.details}, field
        )
    )


def _load_failure(text: str | None) -> ExecutionFailure | None:
    if text is None:
        return None
    data: Any = decode_json(text)
    return ExecutionFailure(name=data["name"], message=data["message"], details=data["details"])


# -- executions: validators ---------------------------------------------------------------------


@attrs.frozen
class ExecutionDraft:
    """A checked :class:`NewExecution` with its JSON encoded and its request digest."""

    new: NewExecution
    input_json: str
    metadata_json: str
    digest: str

    def row(self, seq: int, now_ms: int) -> ExecutionRow:
        """The row of the queued execution this draft creates as number ``seq`` at ``now_ms``."""
        new = self.new
        return ExecutionRow(
            new.id if new.id is not None else f"exe_{seq}",
            new.project_id,
            _QUEUED,
            seq,
            new.name,
            self.input_json,
            "null",  # output
            None,  # failure
            new.parent_id,
            self.metadata_json,
            new.idempotency_key,
            now_ms,  # created_at_ms
            now_ms,  # updated_at_ms
            None,  # started_at_ms
            None,  # finished_at_ms
            None,  # lease_owner
            None,  # lease_expires_at_ms
            0,  # fencing_token
            0,  # attempts
            self.digest,
        )


def check_new_execution(new: object) -> Result[ExecutionDraft, InvalidInput]:
    """Check a :meth:`ExecutionStorage.create` request (no storage is consulted).

    In order: the type, ``project_id``, ``name``, ``id``, ``idempotency_key``, ``parent_id``
    (ids), ``input`` (JSON), ``metadata`` (a JSON object), then the reserved ``exe_<n>`` ids.
    """
    if not isinstance(new, NewExecution):
        return Failure(InvalidInput("new", f"must be a NewExecution, got {type(new).__name__}"))
    ids = _ids(
        (new.project_id, "project_id"),
        (new.name, "name"),
        (new.id, "id"),
        (new.idempotency_key, "idempotency_key"),
        (new.parent_id, "parent_id"),
    )
    if isinstance(ids, Failure):
        return Failure(ids.failure())
    input_json = encode_json(new.input, "input")
    if isinstance(input_json, Failure):
        return Failure(input_json.failure())
    if not isinstance(new.metadata, dict):
        return Failure(
            InvalidInput("metadata", f"must be a dict, got {type(new.metadata).__name__}")
        )
    metadata_json = encode_json(new.metadata, "metadata")
    if isinstance(metadata_json, Failure):
        return Failure(metadata_json.failure())
    if new.id is not None and GENERATED_EXECUTION_ID.fullmatch(new.id):
        return Failure(
            InvalidInput("id", "ids of the form exe_<digits> are reserved for generated ids")
        )
    return Success(ExecutionDraft(new, input_json.unwrap(), metadata_json.unwrap(), new.digest()))


@attrs.frozen
class Claim:
    """A checked :meth:`ExecutionStorage.claim` call."""

    project_id: str
    owner: str
    lease_ms: int


def check_claim(project_id: object, owner: object, lease_ms: object) -> Result[Claim, InvalidInput]:
    """Check ``claim``: ``project_id``, ``owner`` (ids), then ``lease_ms`` (1..MAX_LEASE_MS)."""
    project, worker, lease = (
        check_id(project_id, "project_id"),
        check_id(owner, "owner"),
        _check_lease(lease_ms),
    )
    return first_failure(project, worker, lease).map(
        lambda _: Claim(project.unwrap(), worker.unwrap(), lease.unwrap())
    )


@attrs.frozen
class Renew:
    """A checked :meth:`ExecutionStorage.renew` call."""

    execution_id: str
    fencing_token: int
    lease_ms: int


def check_renew(
    execution_id: object, fencing_token: object, lease_ms: object
) -> Result[Renew, InvalidInput]:
    """Check ``renew``: the id, the token (an int >= 0), then ``lease_ms``."""
    checked_id, token, lease = (
        check_execution_id(execution_id),
        _check_token(fencing_token),
        _check_lease(lease_ms),
    )
    return first_failure(checked_id, token, lease).map(
        lambda _: Renew(checked_id.unwrap(), token.unwrap(), lease.unwrap())
    )


@attrs.frozen
class Finish:
    """A checked :meth:`ExecutionStorage.finish` call, output and failure as stored JSON."""

    execution_id: str
    fencing_token: int
    target: ExecutionStatus
    output_json: str
    failure_json: str | None


def check_finish(
    execution_id: object,
    fencing_token: object,
    status: object,
    output: object,
    failure: object,
) -> Result[Finish, InvalidInput]:
    """Check ``finish``: the id and token, then ``status`` (a final one), ``output`` (JSON),
    ``failure``, and whether the failure fits the status (``failed`` needs one, ``succeeded``
    takes none)."""
    checked_id, token = check_execution_id(execution_id), _check_token(fencing_token)
    ids = first_failure(checked_id, token)
    if isinstance(ids, Failure):
        return Failure(ids.failure())
    target = _EXECUTION_STATUS.get(status) if isinstance(status, str) else None
    if target is None:
        return Failure(InvalidInput("status", f"{describe(status)} is not an execution status"))
    if not target.is_finished:
        return Failure(InvalidInput("status", f"{target} is not a final status"))
    output_json = encode_json(output, "output")
    if isinstance(output_json, Failure):
        return Failure(output_json.failure())
    failure_json = check_failure(failure, "failure")
    if isinstance(failure_json, Failure):
        return Failure(failure_json.failure())
    if target is ExecutionStatus.SUCCEEDED and failure is not None:
        return Failure(InvalidInput("failure", "a succeeded execution carries no failure"))
    if target is ExecutionStatus.FAILED and failure is None:
        return Failure(InvalidInput("failure", "a failed execution needs a failure"))
    return Success(
        Finish(
            checked_id.unwrap(),
            token.unwrap(),
            target,
            output_json.unwrap(),
            failure_json.unwrap(),
        )
    )


def check_cancel(
    execution_id: object, failure: object
) -> Result[tuple[str, str | None], InvalidInput]:
    """Check ``cancel``: the id, then the optional failure; return ``(id, failure JSON)``."""
    checked = check_execution_id(execution_id)
    if isinstance(checked, Failure):
        return Failure(checked.failure())
    return check_failure(failure, "failure").map(lambda stored: (checked.unwrap(), stored))


# -- executions: decisions ----------------------------------------------------------------------


@attrs.frozen
class CreateFacts:
    """What a create must know, loaded in its unit of work (only what the request names).

    - ``keyed``: the execution the request's idempotency key already names, with the digest of
      the request that made it; None when the key is unused (or not given).
    - ``id_taken``: whether an execution has the requested id.
    - ``parent_project``: the project of the requested parent; None when there is no such
      execution (or no parent was requested).
    """

    keyed: tuple[Execution, str] | None = None
    id_taken: bool = False
    parent_project: str | None = None


def decide_create(
    draft: ExecutionDraft, facts: CreateFacts
) -> Result[Execution | None, ExecutionError]:
    """Decide a create: ``Success(execution)`` replays an earlier identical request (return it
    as it is now), ``Success(None)`` means insert ``draft.row(...)``.

    In order: a used idempotency key with the same digest replays, with another digest is
    ``Conflict``; a taken id is ``Conflict``; a missing parent is ``NotFound``; a parent of
    another project is ``ProjectMismatch``.
    """
    new = draft.new
    if facts.keyed is not None:
        existing, digest = facts.keyed
        if digest == draft.digest:
            return Success(existing)
        return Failure(
            Conflict(
                "execution",
                existing.id,
                f"idempotency key {new.idempotency_key!r} was used for a different request",
            )
        )
    if new.id is not None and facts.id_taken:
        return Failure(Conflict("execution", new.id, "an execution with this id exists"))
    if new.parent_id is not None:
        if facts.parent_project is None:
            return Failure(NotFound("execution", new.parent_id))
        if facts.parent_project != new.project_id:
            return Failure(
                ProjectMismatch("execution", new.parent_id, new.project_id, facts.parent_project)
            )
    return Success(None)


def is_claimable(status: str, lease_expires_at_ms: int | None, now_ms: int) -> bool:
    """Whether ``claim`` may take an execution: queued, or running with an expired lease
    (expiry <= now). The live layer says the same in SQL."""
    if status == _QUEUED:
        return True
    return status == _RUNNING and lease_expires_at_ms is not None and lease_expires_at_ms <= now_ms


def oldest(candidates: Iterable[tuple[int, str]]) -> str | None:
    """The id of the claimable execution ``claim`` takes among ``(seq, id)`` candidates: the
    oldest (smallest ``seq``), or None when there is none."""
    best = min(candidates, default=None)
    return None if best is None else best[1]


def decide_held(
    execution_id: str,
    state: tuple[str, int] | None,
    token: int,
    target: ExecutionStatus | None,
) -> Result[None, NotFound | IllegalTransition | Conflict | StaleFencingToken]:
    """Decide whether the worker presenting ``token`` may act on the execution.

    ``state`` is the stored ``(status, fencing_token)``, None when there is no such
    execution; ``target`` is the final status of ``finish``, or None for ``renew``. In
    order: ``NotFound``; ``IllegalTransition(status, target)`` (finish) or ``Conflict``
    (renew) unless it is running; ``StaleFencingToken`` unless ``token`` is the latest.
    """
    if state is None:
        return Failure(NotFound("execution", execution_id))
    status, current = state
    if status != _RUNNING:
        if target is None:
            return Failure(
                Conflict(
                    "execution",
                    execution_id,
                    "only a running execution has a lease",
                    expected=_RUNNING,
                    actual=str(status),
                )
            )
        return Failure(IllegalTransition("execution", execution_id, str(status), target.value))
    if token != current:
        return Failure(StaleFencingToken(execution_id, token, current))
    return Success(None)


def decide_cancel(
    execution_id: str, status: str | None
) -> Result[None, NotFound | IllegalTransition]:
    """Decide a cancel of the execution whose stored status is ``status`` (None: no such
    execution): ``NotFound``, ``IllegalTransition(status, "cancelled")`` once it is final."""
    if status is None:
        return Failure(NotFound("execution", execution_id))
    cancelled = ExecutionStatus.CANCELLED
    if not _EXECUTION_STATUS[status].can_move_to(cancelled):
        return Failure(IllegalTransition("execution", execution_id, status, cancelled.value))
    return Success(None)


# -- action runs: the at-rest form ----------------------------------------------------------


class ActionRunRow(NamedTuple):
    """One action run at rest (JSON as text); the fields are the live layer's columns in the
    order it selects them."""

    id: str
    project_id: str
    execution_id: str
    action_id: str
    status: str
    phase: str
    seq: int
    input: str
    attempt: int
    queued_at_ms: int
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    writeback_status: str | None = None
    writeback_completed_at_ms: int | None = None
    writeback_result: str | None = None
    writeback_failure: str | None = None
    effects_status: str | None = None
    effects_completed_at_ms: int | None = None
    effects_failure: str | None = None
    failure: str | None = None

    def requeued(self, now_ms: int) -> ActionRunRow:
        """This failed run queued again at ``now_ms``: every phase field, time and failure
        reset, ``attempt + 1`` (what ``requeue`` stores)."""
        queued = ActionRunStatus.QUEUED.value
        return ActionRunRow(
            *self[:4], queued, queued, self.seq, self.input, self.attempt + 1, now_ms
        )


ACTION_RUN_COLUMNS = ActionRunRow._fields
"""The columns of an action run, in :class:`ActionRunRow` order."""


def action_run_record(row: Sequence[Any]) -> ActionRun:
    """Return the :class:`ActionRun` an at-rest row holds (:data:`ACTION_RUN_COLUMNS`)."""
    return ActionRun(
        row[0],
        row[1],
        row[2],
        row[3],
        _RUN_STATUS[row[4]],
        _RUN_PHASE[row[5]],
        row[6],
        decode_json(row[7]),
        row[8],
        row[9],
        row[10],
        row[11],
        None if row[12] is None else _phase_record(row[12], row[13], row[14], row[15]),
        None if row[16] is None else _phase_record(row[16], row[17], None, row[18]),
        None if row[19] is None else _load_run_failure(row[19]),
    )


def _phase_record(
    status: str, completed_at_ms: int, result: str | None, failure: str | None
) -> PhaseRecord:
    return PhaseRecord(
        status=PhaseStatus(status),
        completed_at_ms=completed_at_ms,
        result=None if result is None else decode_json(result),
        failure=_load_run_failure(failure),
    )


def _dump_run_failure(failure: ActionRunFailure) -> str:
    """The stored JSON object of a checked failure (its parts were encoded before)."""
    return encode_json(
        {
            "name": failure.name,
            "message": failure.message,
            "phase": None if failure.phase is None else str(failure.phase),
            "details": failure.details,
        },
        "failure",
    ).unwrap()


def _load_run_failure(text: str | None) -> ActionRunFailure | None:
    if text is None:
        return None
    data: Any = decode_json(text)
    phase = data["phase"]
    return ActionRunFailure(
        name=data["name"],
        message=data["message"],
        phase=None if phase is None else ActionRunPhase(phase),
        details=data["details"],
    )


def state_of(status: str, phase: str) -> str:
    """Return a run's state: its final ``status`` once finished, else its ``phase``."""
    return status if status in _RUN_FINISHED else phase


# -- action runs: validators ----------------------------------------------------------------


@attrs.frozen
class ActionRunDraft:
    """A checked :class:`NewActionRun` with its input encoded."""

    new: NewActionRun
    input_json: str

    def row(self, seq: int, now_ms: int) -> ActionRunRow:
        """The row of the queued run this draft makes as number ``seq`` at ``now_ms``."""
        new = self.new
        return ActionRunRow(
            new.id if new.id is not None else f"act_{seq}",
            new.project_id,
            new.execution_id,
            new.action_id,
            _QUEUED,  # status
            _QUEUED,  # phase
            seq,
            self.input_json,
            1,  # attempt
            now_ms,  # queued_at_ms
        )


def check_new_action_run(new: object) -> Result[ActionRunDraft, InvalidInput]:
    """Check a :meth:`ActionRunStorage.queue` request (no storage is consulted).

    In order: the type, ``project_id``, ``execution_id``, ``action_id``, ``id`` (ids),
    ``input`` (JSON), then the reserved ``act_<n>`` ids.
    """
    if not isinstance(new, NewActionRun):
        return Failure(InvalidInput("new", f"must be a NewActionRun, got {type(new).__name__}"))
    ids = _ids(
        (new.project_id, "project_id"),
        (new.execution_id, "execution_id"),
        (new.action_id, "action_id"),
        (new.id, "id"),
    )
    if isinstance(ids, Failure):
        return Failure(ids.failure())
    input_json = encode_json(new.input, "input")
    if isinstance(input_json, Failure):
        return Failure(input_json.failure())
    if new.id is not None and GENERATED_ACTION_RUN_ID.fullmatch(new.id):
        return Failure(
            InvalidInput("id", "ids of the form act_<digits> are reserved for generated ids")
        )
    return Success(ActionRunDraft(new, input_json.unwrap()))


def _check_run_failure(
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
    checked = first_failure(
        check_id(failure.name, f"{field}.name"),
        encode_json(failure.details, f"{field}.details"),
        _check_message(failure.message, f"{field}.message"),
    )
    if isinstance(checked, Failure):
        return Failure(checked.failure())
    given = failure.phase
    if given is not None:
        given = _RUN_PHASE.get(given) if isinstance(given, str) else None
        if given is None:
            return Failure(
                InvalidInput(f"{field}.phase", f"{describe(failure.phase)} is not a phase")
            )
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
    return _check_outcome(outcome, phase).map(lambda checked: checked[0])


def _check_outcome(
    outcome: object, phase: ActionRunPhase
) -> Result[tuple[PhaseSucceeded | PhaseFailed, str | None], InvalidInput]:
    """:func:`check_outcome`, with the stored JSON of a success's result (None for a failure)."""
    if isinstance(outcome, PhaseSucceeded):
        if phase is ActionRunPhase.EFFECTS and outcome.result is not None:
            return Failure(InvalidInput("outcome.result", "the effects phase has no result"))
        return encode_json(outcome.result, "outcome.result").map(lambda text: (outcome, text))
    if isinstance(outcome, PhaseFailed):
        return _check_run_failure(outcome.failure, "outcome.failure", phase=phase).map(
            lambda failure: (PhaseFailed(failure), None)
        )
    return Failure(
        InvalidInput(
            "outcome", f"must be PhaseSucceeded or PhaseFailed, got {type(outcome).__name__}"
        )
    )


@attrs.frozen
class PhaseWrite:
    """A checked ``record_writeback`` / ``record_effects`` call in its stored form: the phase
    ``status`` (``succeeded`` or ``failed``) with the writeback ``result_json`` (None for a
    failure and for effects) and the ``failure_json`` (None for a success)."""

    run_id: str
    phase: ActionRunPhase
    status: str
    result_json: str | None
    failure_json: str | None

    def columns(self, now_ms: int) -> dict[str, Any]:
        """The at-rest columns this write sets when the phase completes at ``now_ms``."""
        name = self.phase.value
        changes: dict[str, Any] = {
            "phase": name,
            f"{name}_status": self.status,
            f"{name}_completed_at_ms": now_ms,
            f"{name}_failure": self.failure_json,
        }
        if self.phase is ActionRunPhase.WRITEBACK:
            changes["writeback_result"] = self.result_json
        return changes


def check_phase(
    run_id: object, outcome: PhaseOutcome, phase: ActionRunPhase
) -> Result[PhaseWrite, InvalidInput]:
    """Check ``record_writeback`` (``phase`` writeback) or ``record_effects``: the run id, then
    the outcome (see :func:`check_outcome`)."""
    checked_id = check_run_id(run_id)
    if isinstance(checked_id, Failure):
        return Failure(checked_id.failure())
    checked = _check_outcome(outcome, phase)
    if isinstance(checked, Failure):
        return Failure(checked.failure())
    done, result_json = checked.unwrap()
    if isinstance(done, PhaseFailed):
        return Success(
            PhaseWrite(
                checked_id.unwrap(),
                phase,
                PhaseStatus.FAILED.value,
                None,
                _dump_run_failure(done.failure),
            )
        )
    result = None if phase is ActionRunPhase.EFFECTS else result_json
    return Success(
        PhaseWrite(checked_id.unwrap(), phase, PhaseStatus.SUCCEEDED.value, result, None)
    )


@attrs.frozen
class RunFinish:
    """A checked ``ActionRunStorage.finish`` call (the failure's phase may still be unset:
    :func:`final_failure_json` fills it from the run's phase)."""

    run_id: str
    target: ActionRunStatus
    failure: ActionRunFailure | None


def check_run_finish(
    run_id: object, status: object, failure: object
) -> Result[RunFinish, InvalidInput]:
    """Check ``finish``: the run id, ``status`` (a final one), whether the failure fits it
    (``failed`` needs one, ``succeeded`` takes none), then the failure itself."""
    checked_id = check_run_id(run_id)
    if isinstance(checked_id, Failure):
        return Failure(checked_id.failure())
    target = _RUN_STATUS.get(status) if isinstance(status, str) else None
    if target is None:
        return Failure(InvalidInput("status", f"{describe(status)} is not an action run status"))
    if not target.is_finished:
        return Failure(InvalidInput("status", f"{target} is not a final status"))
    if target is ActionRunStatus.SUCCEEDED and failure is not None:
        return Failure(InvalidInput("failure", "a succeeded run carries no failure"))
    if target is ActionRunStatus.FAILED and failure is None:
        return Failure(InvalidInput("failure", "a failed run needs a failure"))
    if failure is None:
        return Success(RunFinish(checked_id.unwrap(), target, None))
    return _check_run_failure(failure, "failure", phase=None).map(
        lambda checked: RunFinish(checked_id.unwrap(), target, checked)
    )


def final_failure_json(failure: ActionRunFailure | None, phase: str) -> str | None:
    """The stored final failure of a finish from phase ``phase``: the failure with ``phase``
    filled in when it names none (None for no failure)."""
    if failure is None:
        return None
    if failure.phase is None:
        failure = attrs.evolve(failure, phase=_RUN_PHASE[phase])
    return _dump_run_failure(failure)


# -- action runs: decisions -----------------------------------------------------------------


def decide_queue(
    project_id: str, execution_id: str, execution: Result[Execution, ExecutionError]
) -> Result[None, ActionRunError]:
    """Decide whether a run of ``project_id`` may be queued (or requeued) in the execution.

    ``execution`` is what ``ExecutionStorage.get(execution_id)`` returned in the same unit of
    work. In order: the lookup's failure (``NotFound``, ``Busy``, ...); ``ProjectMismatch``;
    ``ExecutionFinished`` (it is final).
    """
    if isinstance(execution, Failure):
        error: ExecutionError = execution.failure()
        if isinstance(error, StaleFencingToken):  # pragma: no cover - get never returns it
            raise TypeError("ExecutionStorage.get returned StaleFencingToken")
        return Failure(error)
    found = execution.unwrap()
    if found.project_id != project_id:
        return Failure(ProjectMismatch("execution", execution_id, project_id, found.project_id))
    if found.status.is_finished:
        return Failure(ExecutionFinished(execution_id, found.status.value))
    return Success(None)


def decide_new_run(run_id: str | None, taken: bool) -> Result[None, Conflict]:
    """Decide whether a queued run may take the requested ``run_id`` (None: a generated one);
    ``taken`` is whether a run has it already (``Conflict``)."""
    if run_id is not None and taken:
        return Failure(Conflict("action_run", run_id, "an action run with this id exists"))
    return Success(None)


def decide_step(
    run_id: str, state: tuple[str, str] | None, step: str
) -> Result[tuple[str, str], NotFound | IllegalTransition]:
    """Decide whether the run with stored ``(status, phase)`` may take ``step``; return that
    state when it may.

    ``step`` is ``running`` (start), ``writeback``, ``effects``, ``queued`` (requeue) or a
    final status (finish). ``state`` None means there is no such run (``NotFound``); a step
    the lifecycle does not allow is ``IllegalTransition(state, step)``.
    """
    if state is None:
        return Failure(NotFound("action_run", run_id))
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
        return Success(state)
    return Failure(IllegalTransition("action_run", run_id, state_of(status, phase), step))
