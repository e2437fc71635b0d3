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
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable
from enum import StrEnum
from typing import NewType, Protocol, TypeAlias, TypeVar, runtime_checkable

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
from runstore.services.pagination import Page, check_limit

T = TypeVar("T")

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_JSON_DEPTH",
    "MAX_LEASE_MS",
    "MAX_TEXT_CHARS",
    "Execution",
    "ExecutionError",
    "ExecutionFailure",
    "ExecutionFinished",
    "ExecutionId",
    "ExecutionStatus",
    "ExecutionStorage",
    "JsonValue",
    "NewExecution",
    "ProjectMismatch",
    "StaleFencingToken",
]

ExecutionId = NewType("ExecutionId", str)
"""Identifies one execution across the whole database (caller-supplied or ``exe_<n>``)."""

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
"""A JSON value as Python holds it (see the module docstring for what is accepted)."""

DEFAULT_LIMIT = 100
"""Rows per page when a listing is called without ``limit``."""

MAX_JSON_DEPTH = 64
"""Deepest nesting of lists and objects a stored JSON value may have."""

MAX_TEXT_CHARS = 256
"""Longest identifier-like text (ids, project ids, names, owners, keys), in characters."""

MAX_LEASE_MS = 86_400_000
"""Longest lease ``claim`` and ``renew`` grant: one day, in ms."""

GENERATED_EXECUTION_ID = re.compile(r"exe_[0-9]+")
"""Ids of this form are generated from the execution sequence; callers may not choose them."""


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
_STATUS_VALUES = frozenset(s.value for s in ExecutionStatus)
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


@attrs.frozen
class StaleFencingToken:
    """``execution_id`` was claimed again since ``presented`` was handed out; ``current`` is
    the token of its latest claim. Nothing was written."""

    execution_id: str
    presented: int
    current: int

    def __str__(self) -> str:
        return (
            f"execution {self.execution_id!r}: fencing token {self.presented} is stale "
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


# -- validation and the at-rest JSON form, shared by every layer -------------------------------


def check_text(
    value: object, field: str, *, max_chars: int = MAX_TEXT_CHARS
) -> InvalidInput | None:
    """Return why ``value`` is not acceptable identifier-like text, or None.

    Accepted: a ``str`` of 1..``max_chars`` characters, encodable as UTF-8 (no lone
    surrogates) and without NUL characters.
    """
    if not isinstance(value, str):
        return InvalidInput(field, f"must be text, got {type(value).__name__}")
    if not value:
        return InvalidInput(field, "must not be empty")
    if len(value) > max_chars:
        return InvalidInput(field, f"must be at most {max_chars} characters, got {len(value)}")
    if "\x00" in value:
        return InvalidInput(field, "must not contain NUL characters")
    return _check_encodable(value, field)


def _check_encodable(value: str, field: str) -> InvalidInput | None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return InvalidInput(field, f"is not valid Unicode text ({exc.reason} at {exc.start})")
    return None


def check_json(value: object, field: str) -> InvalidInput | None:
    """Return why ``value`` is not a storable :data:`JsonValue`, or None."""
    stack: list[tuple[object, int, str]] = [(value, 0, field)]
    while stack:
        item, depth, where = stack.pop()
        kind = type(item)
        if item is None or kind is bool or kind is int:
            continue
        if kind is float and isinstance(item, float):
            if not math.isfinite(item):
                return InvalidInput(where, f"{item!r} is not a JSON number")
            continue
        if kind is str and isinstance(item, str):
            problem = _check_encodable(item, where)
            if problem is not None:
                return problem
            continue
        if depth >= MAX_JSON_DEPTH:
            return InvalidInput(where, f"nests deeper than {MAX_JSON_DEPTH} levels")
        if kind is list and isinstance(item, list):
            for index, child in enumerate(item):
                stack.append((child, depth + 1, _path(where, depth, index)))
            continue
        if kind is dict and isinstance(item, dict):
            for key, child in item.items():
                if type(key) is not str:
                    return InvalidInput(where, f"object key {key!r} is not text")
                problem = _check_encodable(key, where)
                if problem is not None:
                    return problem
                stack.append((child, depth + 1, _path(where, depth, key)))
            continue
        return InvalidInput(where, f"{kind.__name__} is not a JSON value")
    return None


def _path(where: str, depth: int, step: object) -> str:
    """Name a nested value for error messages, eliding the path below eight levels."""
    if depth < 8:
        return f"{where}[{step!r}]"
    return where if where.endswith("[...]") else f"{where}[...]"


def dump_json(value: JsonValue) -> str:
    """Return the stored text of a value that passed :func:`check_json` (key order kept)."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def load_json(text: str) -> JsonValue:
    """Return the value stored as ``text`` by :func:`dump_json`."""
    loaded: JsonValue = json.loads(text)
    return loaded


def check_failure(failure: ExecutionFailure | None, field: str) -> InvalidInput | None:
    """Return why ``failure`` cannot be stored, or None."""
    if failure is None:
        return None
    if not isinstance(failure, ExecutionFailure):
        return InvalidInput(field, f"must be an ExecutionFailure, got {type(failure).__name__}")
    return (
        check_text(failure.name, f"{field}.name")
        or _check_message(failure.message, f"{field}.message")
        or check_json(failure.details, f"{field}.details")
    )


def _check_message(value: object, field: str) -> InvalidInput | None:
    if not isinstance(value, str):
        return InvalidInput(field, f"must be text, got {type(value).__name__}")
    return _check_encodable(value, field)


def dump_failure(failure: ExecutionFailure | None) -> str | None:
    """Return the stored JSON object of ``failure`` (None for no failure)."""
    if failure is None:
        return None
    return dump_json({"name": failure.name, "message": failure.message, "details": failure.details})


def load_failure(text: str | None) -> ExecutionFailure | None:
    """Return the failure stored by :func:`dump_failure`."""
    if text is None:
        return None
    data = json.loads(text)
    return ExecutionFailure(name=data["name"], message=data["message"], details=data["details"])


def check_new_execution(new: NewExecution) -> InvalidInput | None:
    """Return why ``new`` cannot be created, or None (no storage is consulted)."""
    if not isinstance(new, NewExecution):
        return InvalidInput("new", f"must be a NewExecution, got {type(new).__name__}")
    problem = (
        check_text(new.project_id, "project_id")
        or check_text(new.name, "name")
        or (None if new.id is None else check_text(new.id, "id"))
        or (
            None
            if new.idempotency_key is None
            else check_text(new.idempotency_key, "idempotency_key")
        )
        or (None if new.parent_id is None else check_text(new.parent_id, "parent_id"))
        or check_json(new.input, "input")
    )
    if problem is not None:
        return problem
    if not isinstance(new.metadata, dict):
        return InvalidInput("metadata", f"must be a dict, got {type(new.metadata).__name__}")
    problem = check_json(new.metadata, "metadata")
    if problem is not None:
        return problem
    if new.id is not None and GENERATED_EXECUTION_ID.fullmatch(new.id):
        return InvalidInput("id", "ids of the form exe_<digits> are reserved for generated ids")
    return None


def check_lease(lease_ms: object) -> InvalidInput | None:
    """Return why ``lease_ms`` is not a lease length in ``1..MAX_LEASE_MS`` ms, or None."""
    if isinstance(lease_ms, bool) or not isinstance(lease_ms, int):
        return InvalidInput("lease_ms", f"must be an integer, got {type(lease_ms).__name__}")
    if not 1 <= lease_ms <= MAX_LEASE_MS:
        return InvalidInput("lease_ms", f"must be in 1..{MAX_LEASE_MS}, got {lease_ms}")
    return None


def check_token(token: object) -> InvalidInput | None:
    """Return why ``token`` is not a fencing token (a non-negative int), or None."""
    if isinstance(token, bool) or not isinstance(token, int) or token < 0:
        return InvalidInput("fencing_token", f"must be a non-negative integer, got {token!r}")
    return None


def check_finish(
    status: object, output: object, failure: ExecutionFailure | None
) -> Result[ExecutionStatus, InvalidInput]:
    """Check the arguments of ``finish``; return the final status they name."""
    try:
        target = ExecutionStatus(str(status)) if isinstance(status, str) else None
    except ValueError:
        target = None
    if target is None:
        return Failure(InvalidInput("status", f"{status!r} is not an execution status"))
    if not target.is_finished:
        return Failure(InvalidInput("status", f"{target} is not a final status"))
    problem = check_json(output, "output") or check_failure(failure, "failure")
    if problem is not None:
        return Failure(problem)
    if target is ExecutionStatus.SUCCEEDED and failure is not None:
        return Failure(InvalidInput("failure", "a succeeded execution carries no failure"))
    if target is ExecutionStatus.FAILED and failure is None:
        return Failure(InvalidInput("failure", "a failed execution needs a failure"))
    return Success(target)


def parse_status(status: object) -> Result[ExecutionStatus | None, InvalidInput]:
    """Return the status filter of ``list`` (None for all), or ``InvalidInput``."""
    if status is None:
        return Success(None)
    if isinstance(status, str) and status in _STATUS_VALUES:
        return Success(ExecutionStatus(status))
    return Failure(InvalidInput("status", f"{status!r} is not an execution status"))


def encode_cursor(kind: str, seq: int) -> str:
    """Return the opaque cursor that continues a listing of ``kind`` after ``seq``."""
    return f"{kind}{seq}"


_CURSOR = re.compile(r"([a-z])([0-9]{1,18})")


def decode_cursor(kind: str, cursor: str | None) -> Result[int, InvalidInput]:
    """Return the ``seq`` a cursor of ``kind`` continues after (0 for None), or ``InvalidInput``."""
    if cursor is None:
        return Success(0)
    match = _CURSOR.fullmatch(cursor) if isinstance(cursor, str) else None
    if match is None or match.group(1) != kind:
        return Failure(InvalidInput("cursor", f"{cursor!r} is not a cursor of this listing"))
    return Success(int(match.group(2)))


def check_listing(
    project_id: object, limit: object, cursor: object, kind: str
) -> Result[tuple[int, int], InvalidInput]:
    """Check a listing's project, ``limit`` and ``cursor``; return ``(limit, after_seq)``.

    The status filter is checked before this by the caller's own parser.
    """
    problem = check_text(project_id, "project_id")
    if problem is not None:
        return Failure(problem)
    checked = check_limit(limit)  # type: ignore[arg-type]
    if isinstance(checked, Failure):
        return Failure(checked.failure())
    after = decode_cursor(kind, cursor)  # type: ignore[arg-type]
    if isinstance(after, Failure):
        return Failure(after.failure())
    return Success((checked.unwrap(), after.unwrap()))


def make_page(items: list[T], limit: int, kind: str, seq_of: Callable[[T], int]) -> Page[T]:
    """Return the page of at most ``limit`` of ``items`` (fetched as ``limit + 1`` rows)."""
    if len(items) > limit:
        kept = items[:limit]
        return Page(tuple(kept), True, encode_cursor(kind, seq_of(kept[-1])))
    return Page(tuple(items), False, None)


def check_held(
    execution_id: str,
    state: tuple[str, int] | None,
    token: int,
    target: ExecutionStatus | None,
) -> NotFound | IllegalTransition | Conflict | StaleFencingToken | None:
    """Return why a worker presenting ``token`` may not act on the execution, or None.

    ``state`` is the stored ``(status, fencing_token)``, None when there is no such
    execution; ``target`` is the final status of ``finish``, or None for ``renew``. In
    order: ``NotFound``; ``IllegalTransition(status, target)`` (finish) or ``Conflict``
    (renew) unless it is running; ``StaleFencingToken`` unless ``token`` is the latest.
    """
    if state is None:
        return NotFound("execution", execution_id)
    status, current = state
    if status != ExecutionStatus.RUNNING.value:
        if target is None:
            return Conflict(
                "execution",
                execution_id,
                "only a running execution has a lease",
                expected=ExecutionStatus.RUNNING.value,
                actual=str(status),
            )
        return IllegalTransition("execution", execution_id, str(status), target.value)
    if token != current:
        return StaleFencingToken(execution_id, token, current)
    return None
