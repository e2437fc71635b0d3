"""The execution ledger's rules core: executions and action runs, for every backend.

Pure functions only; nothing here reads or writes storage. A layer method reads::

    validate (check_*) -> unit of work -> load facts (backend) -> decide (decide_*)
                       -> apply (backend) -> row to record (*_record)

- **Validators** (``check_*``) take a method's raw arguments and return a checked request,
  with JSON already encoded as its stored text, or ``InvalidInput`` naming the field path.
- **Decisions** (``decide_*``) take what the backend loaded inside the unit of work and say
  what to do, or which failure to return: the state machine of executions with its leases and
  fencing tokens, the idempotent create, cancellation; for action runs the fence
  (:func:`decide_fence`, then :func:`decide_run`), the idempotent queue, the lifecycle with
  its repeated phase outcomes and the retry policy.
- **The at-rest form**: :class:`ExecutionRow` and :class:`ActionRunRow` name the stored
  columns in the order the live layer selects them (the in-memory layer keeps rows of the
  same shape), and :func:`execution_record` / :func:`action_run_record` turn any such row,
  a fetched tuple included, into the record a caller gets.

The rules themselves are documented on the Protocols (:class:`ExecutionStorage`,
:class:`ActionRunStorage`); this module is where they are written, once.
"""

from __future__ import annotations

import json
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
from runstore.services.errors import (
    Conflict,
    IllegalTransition,
    InvalidInput,
    NotFound,
    StorageFailure,
    StorageFailureKind,
)
from runstore.services.ledger import (
    DEFAULT_MAX_ATTEMPTS,
    MAX_ATTEMPTS,
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
    ExecutionMismatch,
    ExecutionStatus,
    Fence,
    JsonValue,
    NewActionRun,
    NewExecution,
    PhaseFailed,
    PhaseOutcome,
    PhaseRecord,
    PhaseStatus,
    PhaseSucceeded,
    ProjectMismatch,
    RetryRefused,
    StaleFencingToken,
)
from runstore.services.pagination import CursorCodec, Page, check_limit, page_of

__all__ = [
    "ACTION_RUN_COLUMNS",
    "ACTION_RUN_CURSOR",
    "EXECUTION_COLUMNS",
    "EXECUTION_CURSOR",
    "SQLITE_CORRUPT",
    "ActionRunDraft",
    "ActionRunRow",
    "Claim",
    "CreateFacts",
    "DamagedRecord",
    "ExecutionDraft",
    "ExecutionRow",
    "Finish",
    "Listing",
    "PhaseWrite",
    "Renew",
    "RunCall",
    "RunFinish",
    "action_run_page",
    "action_run_record",
    "check_action_run_listing",
    "check_cancel",
    "check_claim",
    "check_execution_id",
    "check_execution_listing",
    "check_failure",
    "check_fence",
    "check_finish",
    "check_id",
    "check_new_action_run",
    "check_new_execution",
    "check_outcome",
    "check_phase",
    "check_renew",
    "check_run_call",
    "check_run_finish",
    "check_run_id",
    "damaged",
    "decide_cancel",
    "decide_create",
    "decide_fence",
    "decide_held",
    "decide_new_run",
    "decide_phase",
    "decide_requeue",
    "decide_run",
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
_WRITEBACK = ActionRunPhase.WRITEBACK
_EFFECTS = ActionRunPhase.EFFECTS


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


# -- action runs: the fence ------------------------------------------------------------------


def check_fence(fence: object) -> Result[Fence, InvalidInput]:
    """Check the ``fence`` argument of an action-run write: a :class:`Fence` whose
    ``execution_id`` is an id and whose ``fencing_token`` is an int ``>= 0``."""
    if not isinstance(fence, Fence):
        return Failure(InvalidInput("fence", f"must be a Fence, got {type(fence).__name__}"))
    checked = first_failure(
        check_id(fence.execution_id, "fence.execution_id"),
        check_int(fence.fencing_token, "fence.fencing_token", minimum=0, maximum=None),
    )
    return checked.map(lambda _: fence)


def decide_fence(
    fence: Fence, project_id: str | None, execution: Result[Execution, ExecutionError]
) -> Result[None, ActionRunError]:
    """Decide whether the execution authorises an action-run write presenting ``fence``.

    ``execution`` is what ``ExecutionStorage.get(fence.execution_id)`` returned in the write's
    unit of work; ``project_id`` is the run's project when it is not yet stored (``queue``),
    else None (a stored run's project is its execution's, by the schema). In order: the
    lookup's failure (``NotFound``, ``Busy``, ...); ``ProjectMismatch``; ``ExecutionFinished``
    (final); ``Conflict`` (still queued: nobody holds it); ``StaleFencingToken`` (claimed again
    since the fence's token was handed out).
    """
    if isinstance(execution, Failure):
        error: ActionRunError = execution.failure()
        return Failure(error)
    found = execution.unwrap()
    key = fence.execution_id
    if project_id is not None and found.project_id != project_id:
        return Failure(ProjectMismatch("execution", key, project_id, found.project_id))
    if found.status.is_finished:
        return Failure(ExecutionFinished(key, found.status.value))
    if found.status is not ExecutionStatus.RUNNING:
        return Failure(
            Conflict(
                "execution",
                key,
                "only a running execution takes action-run writes",
                expected=_RUNNING,
                actual=found.status.value,
            )
        )
    if fence.fencing_token != found.fencing_token:
        return Failure(StaleFencingToken(key, fence.fencing_token, found.fencing_token))
    return Success(None)


# -- action runs: the at-rest form ----------------------------------------------------------


SQLITE_CORRUPT = 11
"""The result code a damaged row is reported with (SQLite's ``SQLITE_CORRUPT``, on every
backend, so that both layers give the same ``StorageFailure``)."""


class DamagedRecord(ValueError):
    """A stored row breaks a rule the write side keeps (a backend bug or a hand-made row);
    the layers turn it into ``StorageFailure(kind=corrupt)`` with :func:`damaged`."""


def damaged(operation: str, error: ValueError, table: str = "action_runs") -> StorageFailure:
    """The failure a method returns when it read a damaged row of ``table``."""
    return StorageFailure(operation, StorageFailureKind.CORRUPT, SQLITE_CORRUPT, str(error), table)


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
    idempotency_key: str | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    request_digest: str | None = None

    def requeued(self, now_ms: int) -> ActionRunRow:
        """This failed run queued again at ``now_ms``: every phase field, time and failure
        reset, ``attempt + 1`` (what ``requeue`` stores)."""
        queued = ActionRunStatus.QUEUED.value
        return ActionRunRow(
            *self[:4],
            queued,
            queued,
            self.seq,
            self.input,
            self.attempt + 1,
            now_ms,
            idempotency_key=self.idempotency_key,
            max_attempts=self.max_attempts,
            request_digest=self.request_digest,
        )


ACTION_RUN_COLUMNS = ActionRunRow._fields
"""The columns of an action run, in :class:`ActionRunRow` order."""


def action_run_record(row: Sequence[Any]) -> ActionRun:
    """Return the :class:`ActionRun` an at-rest row holds (:data:`ACTION_RUN_COLUMNS`).

    Raises:
        DamagedRecord: a stored writeback or effects failure names another phase.
    """
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
        None if row[12] is None else _phase_record(row[0], _WRITEBACK, row[12:16]),
        None if row[16] is None else _phase_record(row[0], _EFFECTS, (*row[16:18], None, row[18])),
        None if row[19] is None else _load_run_failure(row[19]),
        row[20],
        row[21],
    )


def _phase_record(run_id: str, phase: ActionRunPhase, columns: Sequence[Any]) -> PhaseRecord:
    """The phase record of stored ``(status, completed_at_ms, result, failure)``; the failure
    must name ``phase``, as the write side stores it."""
    status, completed_at_ms, result, failure_text = columns
    failure = _load_run_failure(failure_text)
    if failure is not None and failure.phase is not phase:
        raise DamagedRecord(
            f"action run {run_id!r}: its {phase} failure names phase {failure.phase}"
        )
    return PhaseRecord(
        status=PhaseStatus(status),
        completed_at_ms=completed_at_ms,
        result=None if result is None else decode_json(result),
        failure=failure,
    )


def _dump_run_failure(failure: ActionRunFailure) -> str:
    """The stored JSON object of a checked failure (its parts were encoded before)."""
    return encode_json(
        {
            "name": failure.name,
            "message": failure.message,
            "phase": None if failure.phase is None else str(failure.phase),
            "details": failure.details,
            "code": failure.code,
            "retryable": failure.retryable,
        },
        "failure",
    ).unwrap()


def _load_run_failure(text: str | None) -> ActionRunFailure | None:
    """The stored failure; ``code`` and ``retryable`` default for failures stored before
    they existed (migration 0007)."""
    if text is None:
        return None
    data: Any = decode_json(text)
    phase = data["phase"]
    return ActionRunFailure(
        name=data["name"],
        message=data["message"],
        phase=None if phase is None else ActionRunPhase(phase),
        details=data["details"],
        code=data.get("code"),
        retryable=data.get("retryable", False),
    )


def state_of(status: str, phase: str) -> str:
    """Return a run's state: its final ``status`` once finished, else its ``phase``."""
    return status if status in _RUN_FINISHED else phase


# -- action runs: validators ----------------------------------------------------------------


@attrs.frozen
class ActionRunDraft:
    """A checked ``queue`` call: the :class:`NewActionRun` with its input encoded and its
    request digest, and the checked fence."""

    new: NewActionRun
    input_json: str
    digest: str
    fence: Fence

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
            idempotency_key=new.idempotency_key,
            max_attempts=new.max_attempts,
            request_digest=self.digest,
        )


def check_new_action_run(new: object, fence: object) -> Result[ActionRunDraft, InvalidInput]:
    """Check a :meth:`ActionRunStorage.queue` request (no storage is consulted).

    In order: the type, ``project_id``, ``execution_id``, ``action_id``, ``id``,
    ``idempotency_key`` (ids), ``input`` (JSON), ``max_attempts`` (``1..MAX_ATTEMPTS``), the
    reserved ``act_<n>`` ids, then the fence (see :func:`check_fence`), which must name
    ``new.execution_id``.
    """
    if not isinstance(new, NewActionRun):
        return Failure(InvalidInput("new", f"must be a NewActionRun, got {type(new).__name__}"))
    ids = _ids(
        (new.project_id, "project_id"),
        (new.execution_id, "execution_id"),
        (new.action_id, "action_id"),
        (new.id, "id"),
        (new.idempotency_key, "idempotency_key"),
    )
    if isinstance(ids, Failure):
        return Failure(ids.failure())
    input_json = encode_json(new.input, "input")
    if isinstance(input_json, Failure):
        return Failure(input_json.failure())
    attempts = check_int(new.max_attempts, "max_attempts", minimum=1, maximum=MAX_ATTEMPTS)
    if isinstance(attempts, Failure):
        return Failure(attempts.failure())
    if new.id is not None and GENERATED_ACTION_RUN_ID.fullmatch(new.id):
        return Failure(
            InvalidInput("id", "ids of the form act_<digits> are reserved for generated ids")
        )
    checked = check_fence(fence)
    if isinstance(checked, Failure):
        return Failure(checked.failure())
    if checked.unwrap().execution_id != new.execution_id:
        return Failure(
            InvalidInput(
                "fence.execution_id",
                f"names execution {checked.unwrap().execution_id!r}, "
                f"the run {new.execution_id!r}",
            )
        )
    return Success(ActionRunDraft(new, input_json.unwrap(), new.digest(), checked.unwrap()))


@attrs.frozen
class RunCall:
    """A checked call on a stored run (``start``, ``requeue``): its id and fence."""

    run_id: str
    fence: Fence


def check_run_call(run_id: object, fence: object) -> Result[RunCall, InvalidInput]:
    """Check ``start`` and ``requeue``: the run id, then the fence."""
    checked_id, checked = check_run_id(run_id), check_fence(fence)
    return first_failure(checked_id, checked).map(
        lambda _: RunCall(checked_id.unwrap(), checked.unwrap())
    )


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
        _ids((failure.code, f"{field}.code")),
    )
    if isinstance(checked, Failure):
        return Failure(checked.failure())
    if not isinstance(failure.retryable, bool):
        return Failure(
            InvalidInput(
                f"{field}.retryable", f"must be a bool, got {type(failure.retryable).__name__}"
            )
        )
    given = failure.phase
    if given is not None:
        given = _RUN_PHASE.get(given) if isinstance(given, str) else None
        if given is None:
            return Failure(
                InvalidInput(f"{field}.phase", f"{describe(failure.phase)} is not a phase")
            )
    if phase in (_WRITEBACK, _EFFECTS) and given not in (None, phase):
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
        if phase is _EFFECTS and outcome.result is not None:
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
    fence: Fence
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
        if self.phase is _WRITEBACK:
            changes["writeback_result"] = self.result_json
        return changes

    def repeats(self, row: ActionRunRow) -> bool:
        """Whether ``row`` already holds this phase with the same content: the same status,
        result and failure, object keys in any order (types count: ``1``, ``1.0`` and
        ``true`` differ)."""
        if self.phase is _WRITEBACK:
            stored = (row.writeback_status, row.writeback_result, row.writeback_failure)
        else:
            stored = (row.effects_status, None, row.effects_failure)
        if stored[0] is None or stored[0] != self.status:
            return False
        return _same_json(stored[1], self.result_json) and _same_json(
            _refreshed(stored[2]), self.failure_json
        )


def _refreshed(failure_json: str | None) -> str | None:
    """A stored failure in today's form (``code`` and ``retryable`` of older rows filled)."""
    failure = _load_run_failure(failure_json)
    return None if failure is None else _dump_run_failure(failure)


def _same_json(stored: str | None, given: str | None) -> bool:
    if stored is None or given is None:
        return stored is given
    return _canonical(decode_json(stored)) == _canonical(decode_json(given))


def _canonical(value: JsonValue) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def check_phase(
    run_id: object, fence: object, outcome: PhaseOutcome, phase: ActionRunPhase
) -> Result[PhaseWrite, InvalidInput]:
    """Check ``record_writeback`` (``phase`` writeback) or ``record_effects``: the run id and
    the fence, then the outcome (see :func:`check_outcome`)."""
    call = check_run_call(run_id, fence)
    if isinstance(call, Failure):
        return Failure(call.failure())
    checked = _check_outcome(outcome, phase)
    if isinstance(checked, Failure):
        return Failure(checked.failure())
    done, result_json = checked.unwrap()
    run, checked_fence = call.unwrap().run_id, call.unwrap().fence
    if isinstance(done, PhaseFailed):
        failed = PhaseStatus.FAILED.value
        failure_json = _dump_run_failure(done.failure)
        return Success(PhaseWrite(run, checked_fence, phase, failed, None, failure_json))
    result = None if phase is _EFFECTS else result_json
    succeeded = PhaseStatus.SUCCEEDED.value
    return Success(PhaseWrite(run, checked_fence, phase, succeeded, result, None))


@attrs.frozen
class RunFinish:
    """A checked ``ActionRunStorage.finish`` call (the failure's phase may still be unset:
    :func:`final_failure_json` fills it from the run's phase)."""

    run_id: str
    fence: Fence
    target: ActionRunStatus
    failure: ActionRunFailure | None


def check_run_finish(
    run_id: object, fence: object, status: object, failure: object
) -> Result[RunFinish, InvalidInput]:
    """Check ``finish``: the run id and the fence, ``status`` (a final one), whether the
    failure fits it (``failed`` needs one, ``succeeded`` takes none), then the failure."""
    call = check_run_call(run_id, fence)
    if isinstance(call, Failure):
        return Failure(call.failure())
    run, checked_fence = call.unwrap().run_id, call.unwrap().fence
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
        return Success(RunFinish(run, checked_fence, target, None))
    return _check_run_failure(failure, "failure", phase=None).map(
        lambda checked: RunFinish(run, checked_fence, target, checked)
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


def decide_new_run(
    draft: ActionRunDraft, keyed: ActionRunRow | None, id_taken: bool
) -> Result[ActionRun | None, Conflict]:
    """Decide a queue the fence allowed: ``Success(run)`` replays an earlier identical
    request (return it as it is now), ``Success(None)`` means insert ``draft.row(...)``.

    ``keyed`` is the run the request's idempotency key already names in the execution (None
    when unused or not given); ``id_taken`` whether a run has the requested id. In order: a
    used key with the same digest replays, with another is ``Conflict``; a taken id is
    ``Conflict``.
    """
    new = draft.new
    if keyed is not None:
        if keyed.request_digest == draft.digest:
            return Success(action_run_record(keyed))
        return Failure(
            Conflict(
                "action_run",
                keyed.id,
                f"idempotency key {new.idempotency_key!r} was used for a different request",
            )
        )
    if new.id is not None and id_taken:
        return Failure(Conflict("action_run", new.id, "an action run with this id exists"))
    return Success(None)


def decide_run(
    run_id: str, row: ActionRunRow | None, fence: Fence
) -> Result[ActionRunRow, NotFound | ExecutionMismatch]:
    """Decide whether the stored run ``row`` (None: no such run) is one of the fence's
    execution's runs: ``NotFound``, ``ExecutionMismatch``; return the row when it is."""
    if row is None:
        return Failure(NotFound("action_run", run_id))
    if row.execution_id != fence.execution_id:
        return Failure(ExecutionMismatch(run_id, fence.execution_id, row.execution_id))
    return Success(row)


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


def decide_phase(
    write: PhaseWrite, row: ActionRunRow
) -> Result[ActionRun | None, NotFound | IllegalTransition]:
    """Decide a writeback or effects write on the stored run ``row`` (of the fence's
    execution): ``Success(run)`` when ``row`` already holds the same outcome (a repeat,
    nothing to write), ``Success(None)`` to store it, else the lifecycle's refusal."""
    if write.repeats(row):
        return Success(action_run_record(row))
    return decide_step(write.run_id, (row.status, row.phase), write.phase.value).map(
        lambda _: None
    )


def decide_requeue(
    run_id: str, row: ActionRunRow
) -> Result[None, NotFound | IllegalTransition | RetryRefused]:
    """Decide a requeue of the stored run ``row``: ``IllegalTransition`` unless it failed,
    then ``RetryRefused("not_retryable")`` unless its final failure is retryable, then
    ``RetryRefused("attempts_exhausted")`` once ``attempt`` reached ``max_attempts``."""
    stepped = decide_step(run_id, (row.status, row.phase), _QUEUED)
    if isinstance(stepped, Failure):
        return Failure(stepped.failure())
    failure = _load_run_failure(row.failure)
    if failure is None or not failure.retryable:
        return Failure(RetryRefused(run_id, "not_retryable", row.attempt, row.max_attempts))
    if row.attempt >= row.max_attempts:
        return Failure(RetryRefused(run_id, "attempts_exhausted", row.attempt, row.max_attempts))
    return Success(None)
