"""The contract every execution-ledger layer must meet, shipped for third parties.

- **Strategies** (:func:`ledger_json_values`, :func:`ledger_identifiers`,
  :func:`execution_failures`, :func:`action_run_failures`, :func:`phase_outcomes`,
  :func:`non_json_values`) for the values the ledger stores, including any Unicode and deep
  nesting, and for the values it must refuse.
- **The state machine** (:class:`LedgerMachine`, bound to a layer by
  :func:`ledger_state_machine`): a hypothesis ``RuleBasedStateMachine`` that makes the same
  calls on the layer under test and on the in-memory layer (the model) and compares the whole
  ``Result`` of every call. Action-run writes carry fences that are mostly current and now
  and then stale (the lease expired and another worker claimed the execution again), made
  up or another execution's; queue requests and phase outcomes are sent again, as they are
  (with object keys reordered) or changed, and failed runs are requeued against their retry
  policy. It also checks, whatever the model says, that fencing tokens only grow, that a
  finished execution never changes again and that no run goes past its ``max_attempts``.
- **The contract class** (:class:`LedgerContract`): pytest example tests of the
  documented semantics plus the state machine. Subclass it and say how to make the layer::

      class TestSqliteLedger(LedgerContract):
          def make_layer(self) -> Layer:
              return sqlite(":memory:")

  or override the ``layer_factory`` fixture when the factory needs other fixtures
  (``tmp_path`` for a file). The factory is called once per test and once per hypothesis
  example and must return a layer providing ``ExecutionStorage`` and ``ActionRunStorage`` on
  a fresh, empty store; the contract puts its own ``FixedClock`` on top.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any, ClassVar

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from returns.result import Failure, Result, Success

from runstore.layers import (
    CLOCK,
    Container,
    InMemoryDatabase,
    Layer,
    build,
    in_memory_ledger,
    merge,
)
from runstore.services.clock import FixedClock
from runstore.services.errors import Conflict, IllegalTransition, InvalidInput, NotFound
from runstore.services.ledger import (
    DEFAULT_MAX_ATTEMPTS,
    MAX_ATTEMPTS,
    MAX_JSON_DEPTH,
    MAX_LEASE_MS,
    ActionRun,
    ActionRunFailure,
    ActionRunId,
    ActionRunPhase,
    ActionRunStatus,
    ActionRunStorage,
    Execution,
    ExecutionFailure,
    ExecutionFinished,
    ExecutionId,
    ExecutionMismatch,
    ExecutionStatus,
    ExecutionStorage,
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
from runstore.services.pagination import MAX_PAGE_SIZE, Page
from runstore.testing._shared import LayerFactory

__all__ = [
    "LedgerContract",
    "LedgerContractViolation",
    "LedgerMachine",
    "action_run_failures",
    "execution_failures",
    "ledger_identifiers",
    "ledger_json_values",
    "ledger_model_layer",
    "ledger_state_machine",
    "non_json_values",
    "phase_outcomes",
]


T0_MS = 1_700_000_000_000
"""Where the contract's clock starts (epoch ms)."""


class LedgerContractViolation(AssertionError):
    """The layer under test disagreed with the model or broke an invariant of the ledger."""


# -- strategies --------------------------------------------------------------------------------


def ledger_identifiers(*, max_size: int = 24) -> st.SearchStrategy[str]:
    """Non-empty text any ledger must accept as an id, project, name or key (any Unicode but
    surrogates and NUL)."""
    return st.text(
        st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
        min_size=1,
        max_size=max_size,
    )


def ledger_json_values(*, max_leaves: int = 12) -> st.SearchStrategy[JsonValue]:
    """JSON values as the ledger stores them: any Unicode text, big integers, finite floats,
    nested lists and objects."""
    scalars: st.SearchStrategy[JsonValue] = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=12),
    )
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(st.text(max_size=8), children, max_size=4),
        ),
        max_leaves=max_leaves,
    )


def non_json_values() -> st.SearchStrategy[Any]:
    """Values a ledger must refuse as ``InvalidInput``: lone surrogates, NaN and infinities,
    tuples, sets, bytes, non-text keys, nesting deeper than ``MAX_JSON_DEPTH``."""
    deep: Any = 0
    for _ in range(MAX_JSON_DEPTH + 1):
        deep = [deep]
    return st.one_of(
        st.sampled_from(["\ud800", "ok\udfff", float("nan"), float("inf"), -float("inf")]),
        st.sampled_from([(1, 2), {1, 2}, b"bytes", {1: "int key"}, {"k": "\udc80"}, deep]),
        st.sampled_from([{"\ud83d": 1}, [1, [2, [float("nan")]]], object()]),
    )


def execution_failures() -> st.SearchStrategy[ExecutionFailure]:
    """Structured execution failures with any Unicode and nested JSON details."""
    return st.builds(
        ExecutionFailure,
        name=ledger_identifiers(max_size=16),
        message=st.text(max_size=40),
        details=ledger_json_values(max_leaves=6),
    )


def action_run_failures(
    phase: st.SearchStrategy[ActionRunPhase | None] | None = None,
) -> st.SearchStrategy[ActionRunFailure]:
    """Structured action-run failures; ``phase`` defaults to None or any phase; ``code`` is
    None or an identifier, ``retryable`` either."""
    return st.builds(
        ActionRunFailure,
        name=ledger_identifiers(max_size=16),
        message=st.text(max_size=40),
        phase=phase if phase is not None else st.none() | st.sampled_from(list(ActionRunPhase)),
        details=ledger_json_values(max_leaves=6),
        code=st.none() | ledger_identifiers(max_size=12),
        retryable=st.booleans(),
    )


def phase_outcomes(phase: ActionRunPhase) -> st.SearchStrategy[PhaseOutcome]:
    """Valid outcomes for the writeback or the effects phase."""
    failed = st.builds(PhaseFailed, action_run_failures(st.sampled_from([None, phase])))
    if phase is ActionRunPhase.EFFECTS:
        return st.one_of(st.just(PhaseSucceeded()), failed)
    return st.one_of(st.builds(PhaseSucceeded, ledger_json_values(max_leaves=6)), failed)


# -- the state machine -------------------------------------------------------------------------


def ledger_model_layer() -> Layer:
    """The reference implementation: the in-memory ledger alone."""
    return merge(
        Layer.service(InMemoryDatabase, lambda _c: InMemoryDatabase()), in_memory_ledger()
    )


PROJECTS = ("p1", "p2")
CALLER_EXECUTION_IDS = ("e-a", "e-b", "e-c")
CALLER_RUN_IDS = ("r-a", "r-b")
KEYS = ("k1", "k2")
RUN_KEYS = ("rk1", "rk2")


@attrs.frozen
class _Services:
    executions: ExecutionStorage
    action_runs: ActionRunStorage


def _services(container: Container) -> _Services:
    return _Services(container.get(ExecutionStorage), container.get(ActionRunStorage))


class LedgerMachine(RuleBasedStateMachine):
    """Drives a layer under test beside the in-memory model; see the module docstring.

    Bind it to a layer with :func:`ledger_state_machine`.
    """

    layer_factory: ClassVar[LayerFactory]
    model_factory: ClassVar[LayerFactory] = ledger_model_layer

    def __init__(self) -> None:
        super().__init__()
        self.clock = FixedClock(T0_MS)
        self._stack = ExitStack()
        clock = Layer.value(CLOCK, self.clock)
        model = self._stack.enter_context(build(merge(type(self).model_factory(), clock)))
        subject = self._stack.enter_context(build(merge(type(self).layer_factory(), clock)))
        self.model = _services(model)
        self.subject = _services(subject)
        self.execution_ids: list[str] = []
        self.run_ids: list[str] = []
        self.requests: list[NewExecution] = []
        self.tokens: dict[str, int] = {}
        self.running_tokens: dict[str, int] = {}
        self.highest_token = 0
        self.finished: dict[str, Execution] = {}
        self.cursors: list[str] = []
        self.run_cursors: list[str] = []
        self.stale_tokens: dict[str, list[int]] = {}
        self.queued: list[NewActionRun] = []
        self.outcomes: dict[tuple[str, ActionRunPhase], PhaseOutcome] = {}

    def teardown(self) -> None:
        self._stack.close()

    # -- comparison ----------------------------------------------------------------------------

    def same(
        self, call: str, model: Result[Any, Any], subject: Result[Any, Any]
    ) -> Result[Any, Any]:
        """Require equal Results from the model and the subject; return the subject's."""
        if model != subject:
            raise LedgerContractViolation(f"{call}:\n  model:   {model!r}\n  subject: {subject!r}")
        return subject

    def _note_execution(self, result: Result[Any, Any]) -> None:
        if isinstance(result, Success) and isinstance(result.unwrap(), Execution):
            execution: Execution = result.unwrap()
            if execution.id not in self.execution_ids:
                self.execution_ids.append(execution.id)
            if execution.status.is_finished:
                self.finished.setdefault(execution.id, execution)
                self.running_tokens.pop(execution.id, None)

    def _note_run(self, result: Result[Any, Any]) -> None:
        if isinstance(result, Success) and isinstance(result.unwrap(), ActionRun):
            run: ActionRun = result.unwrap()
            if run.id not in self.run_ids:
                self.run_ids.append(run.id)

    def _execution_id(self, data: st.DataObject) -> ExecutionId:
        """A known execution nine times in ten, else one that does not exist."""
        if self.execution_ids and data.draw(st.integers(0, 9)) > 0:
            return ExecutionId(data.draw(st.sampled_from(self.execution_ids)))
        return ExecutionId(data.draw(st.sampled_from(["missing", "exe_999"])))

    def _run_id(self, data: st.DataObject, *states: str) -> ActionRunId:
        """Mostly a run in one of ``states`` whose execution is running (so the write can
        succeed), else a known action run nine times in ten, else one that does not exist."""
        if states and not self._wild(data):
            fitting = []
            for run_id in self.run_ids:
                run = self.model.action_runs.get(ActionRunId(run_id)).unwrap()
                if run.state in states and run.execution_id in self.running_tokens:
                    fitting.append(run_id)
            if fitting:
                return ActionRunId(data.draw(st.sampled_from(fitting)))
        if self.run_ids and data.draw(st.integers(0, 9)) > 0:
            return ActionRunId(data.draw(st.sampled_from(self.run_ids)))
        return ActionRunId("no-such-run")

    def _wild(self, data: st.DataObject) -> bool:
        """Whether to send arguments that do not fit together (one call in five)."""
        return data.draw(st.integers(0, 4)) == 0

    def _fence(self, data: st.DataObject, execution_id: str) -> Fence:
        """The execution's current fence, mostly; one call in five a stale token (from before
        its latest claim), a token that was never handed out, or another execution's fence."""
        latest = self.tokens.get(execution_id, 0)
        if not self._wild(data):
            return Fence(ExecutionId(execution_id), latest)
        choice = data.draw(st.integers(0, 2))
        if choice == 0 and self.stale_tokens.get(execution_id):
            stale = data.draw(st.sampled_from(self.stale_tokens[execution_id]))
            return Fence(ExecutionId(execution_id), stale)
        if choice == 1 or not self.tokens:
            return Fence(ExecutionId(execution_id), latest + 1)
        other = data.draw(st.sampled_from(sorted(self.tokens)))
        return Fence(ExecutionId(other), self.tokens[other])

    def _run_fence(self, data: st.DataObject, run_id: str) -> Fence:
        """A fence for a write on ``run_id``, around the fence of the run's own execution."""
        stored = self.model.action_runs.get(ActionRunId(run_id))
        if isinstance(stored, Success):
            return self._fence(data, stored.unwrap().execution_id)
        return self._fence(data, data.draw(st.sampled_from(self.execution_ids or ["missing"])))

    @initialize()
    def seed_one_running_execution_per_project(self) -> None:
        for project in PROJECTS:
            new = NewExecution(project_id=project, name="seed")
            got = self.same(
                f"create({new!r})",
                self.model.executions.create(new),
                self.subject.executions.create(new),
            )
            self._note_execution(got)
            self._claim(project, "w0", 1_000)
            execution_id = got.unwrap().id
            run = NewActionRun(project_id=project, execution_id=execution_id, action_id="seed")
            fence = Fence(execution_id, self.tokens[execution_id])
            self._note_run(
                self.same(
                    f"queue({run!r}, {fence!r})",
                    self.model.action_runs.queue(run, fence),
                    self.subject.action_runs.queue(run, fence),
                )
            )

    # -- executions ----------------------------------------------------------------------------

    @rule(
        data=st.data(),
        project=st.sampled_from(PROJECTS),
        name=st.sampled_from(["build", "deploy", "ünïcødé ✓"]),
        input=ledger_json_values(max_leaves=4),
        caller_id=st.none() | st.sampled_from(CALLER_EXECUTION_IDS),
        key=st.none() | st.sampled_from(KEYS),
        with_parent=st.booleans(),
        metadata=st.dictionaries(
            st.sampled_from(["a", "b"]), ledger_json_values(max_leaves=2), max_size=2
        ),
    )
    def create(
        self,
        data: st.DataObject,
        project: str,
        name: str,
        input: JsonValue,
        caller_id: str | None,
        key: str | None,
        with_parent: bool,
        metadata: dict[str, JsonValue],
    ) -> None:
        parent = self._execution_id(data) if with_parent else None
        new = NewExecution(
            project_id=project,
            name=name,
            input=input,
            id=None if caller_id is None else ExecutionId(caller_id),
            idempotency_key=key,
            parent_id=parent,
            metadata=metadata,
        )
        self.requests.append(new)
        got = self.same(
            f"create({new!r})",
            self.model.executions.create(new),
            self.subject.executions.create(new),
        )
        self._note_execution(got)

    @rule(data=st.data(), change_input=st.booleans())
    def create_again(self, data: st.DataObject, change_input: bool) -> None:
        """Resend an earlier request (an idempotent replay, or a conflict when changed)."""
        if not self.requests:
            return
        new = data.draw(st.sampled_from(self.requests))
        if change_input:
            new = attrs.evolve(new, input=["changed", new.input])
        got = self.same(
            f"create({new!r})",
            self.model.executions.create(new),
            self.subject.executions.create(new),
        )
        self._note_execution(got)

    @rule(
        project=st.sampled_from(PROJECTS),
        owner=st.sampled_from(["w1", "w2"]),
        lease_ms=st.sampled_from([1, 50, 1_000, 1_000, 1_000, 0, MAX_LEASE_MS + 1]),
    )
    def claim(self, project: str, owner: str, lease_ms: int) -> None:
        self._claim(project, owner, lease_ms)

    def _claim(self, project: str, owner: str, lease_ms: int) -> None:
        got = self.same(
            f"claim({project!r}, {owner!r}, {lease_ms})",
            self.model.executions.claim(project, owner, lease_ms),
            self.subject.executions.claim(project, owner, lease_ms),
        )
        if isinstance(got, Success) and got.unwrap() is not None:
            execution: Execution = got.unwrap()
            if execution.fencing_token <= self.highest_token:
                raise LedgerContractViolation(
                    f"claim handed out token {execution.fencing_token} after {self.highest_token}"
                )
            self.highest_token = execution.fencing_token
            if execution.id in self.tokens:
                self.stale_tokens.setdefault(execution.id, []).append(self.tokens[execution.id])
            self.tokens[execution.id] = execution.fencing_token
            self.running_tokens[execution.id] = execution.fencing_token

    @rule(ms=st.sampled_from([0, 1, 10, 100, 2_000]))
    def advance_clock(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule(data=st.data(), owner=st.sampled_from(["w1", "w2"]))
    def claim_again_after_the_lease(self, data: st.DataObject, owner: str) -> None:
        """Let a running execution's lease expire and claim its project until another worker
        holds it (its earlier fence goes stale) or nothing is claimable."""
        if not self.running_tokens:
            return
        execution_id = data.draw(st.sampled_from(sorted(self.running_tokens)))
        before = self.running_tokens[execution_id]
        project = self.model.executions.get(ExecutionId(execution_id)).unwrap().project_id
        self.clock.advance(MAX_LEASE_MS)
        for _ in range(4):
            self._claim(project, owner, 1_000)
            if self.tokens[execution_id] != before:
                return

    def _claimed_id(self, data: st.DataObject) -> ExecutionId:
        """Mostly an execution some claim returned, so finish and renew can succeed."""
        if self.running_tokens and not self._wild(data):
            return ExecutionId(data.draw(st.sampled_from(sorted(self.running_tokens))))
        return self._execution_id(data)

    def _token(self, data: st.DataObject, execution_id: str) -> int:
        """The latest token handed out for the execution, mostly; else a stale or wrong one."""
        latest = self.tokens.get(execution_id, 0)
        if not self._wild(data):
            return latest
        return data.draw(st.sampled_from([max(latest - 1, 0), latest + 1, 0]))

    @rule(
        data=st.data(),
        status=st.sampled_from(list(ExecutionStatus)),
        output=ledger_json_values(max_leaves=3),
        failure=st.none() | execution_failures(),
    )
    def finish(
        self,
        data: st.DataObject,
        status: ExecutionStatus,
        output: JsonValue,
        failure: ExecutionFailure | None,
    ) -> None:
        execution_id = self._claimed_id(data)
        token = self._token(data, execution_id)
        if not self._wild(data):
            status = data.draw(st.sampled_from(sorted(s for s in ExecutionStatus if s.is_finished)))
            if status is ExecutionStatus.SUCCEEDED:
                failure = None
            elif status is ExecutionStatus.FAILED and failure is None:
                failure = ExecutionFailure("Error", "failed")
        got = self.same(
            f"finish({execution_id!r}, {token}, {status}, {output!r}, {failure!r})",
            self.model.executions.finish(
                execution_id, token, status, output=output, failure=failure
            ),
            self.subject.executions.finish(
                execution_id, token, status, output=output, failure=failure
            ),
        )
        self._note_execution(got)

    @rule(data=st.data(), lease_ms=st.sampled_from([10, 1_000]))
    def renew(self, data: st.DataObject, lease_ms: int) -> None:
        execution_id = self._claimed_id(data)
        token = self._token(data, execution_id)
        self.same(
            f"renew({execution_id!r}, {token}, {lease_ms})",
            self.model.executions.renew(execution_id, token, lease_ms),
            self.subject.executions.renew(execution_id, token, lease_ms),
        )

    @rule(data=st.data(), failure=st.none() | execution_failures())
    def cancel(self, data: st.DataObject, failure: ExecutionFailure | None) -> None:
        execution_id = self._execution_id(data)
        got = self.same(
            f"cancel({execution_id!r})",
            self.model.executions.cancel(execution_id, failure),
            self.subject.executions.cancel(execution_id, failure),
        )
        self._note_execution(got)

    @rule(data=st.data())
    def get_execution(self, data: st.DataObject) -> None:
        execution_id = self._execution_id(data)
        self.same(
            f"get({execution_id!r})",
            self.model.executions.get(execution_id),
            self.subject.executions.get(execution_id),
        )

    def _cursor(self, data: st.DataObject, seen: list[str]) -> str | None:
        """None or a cursor a recent page returned; one call in five a foreign or bad one."""
        if self._wild(data):
            return data.draw(st.sampled_from(["bogus", "a1", "e1", "e"]))
        return data.draw(st.sampled_from([None, *seen[-3:]]))

    def _limit(self, data: st.DataObject) -> int:
        if self._wild(data):
            return data.draw(st.sampled_from([0, -1, MAX_PAGE_SIZE + 1]))
        return data.draw(st.sampled_from([1, 2, 3, 100]))

    @rule(
        data=st.data(),
        project=st.sampled_from([*PROJECTS, "p-empty"]),
        status=st.none() | st.sampled_from(list(ExecutionStatus)),
    )
    def list_executions(
        self, data: st.DataObject, project: str, status: ExecutionStatus | None
    ) -> None:
        limit = self._limit(data)
        cursor = self._cursor(data, self.cursors)
        got = self.same(
            f"list({project!r}, status={status}, limit={limit}, cursor={cursor!r})",
            self.model.executions.list(project, status=status, limit=limit, cursor=cursor),
            self.subject.executions.list(project, status=status, limit=limit, cursor=cursor),
        )
        if isinstance(got, Success) and got.unwrap().next_cursor is not None:
            self.cursors.append(got.unwrap().next_cursor)

    @rule(bad=non_json_values(), where=st.sampled_from(["input", "metadata", "output"]))
    def refuse_non_json(self, bad: Any, where: str) -> None:
        if where == "output":
            execution_id = ExecutionId(self.execution_ids[0] if self.execution_ids else "missing")
            self.same(
                "finish(non-JSON output)",
                self.model.executions.finish(
                    execution_id, 1, ExecutionStatus.SUCCEEDED, output=bad
                ),
                self.subject.executions.finish(
                    execution_id, 1, ExecutionStatus.SUCCEEDED, output=bad
                ),
            )
            return
        if where == "input":
            new = NewExecution(project_id="p1", name="bad", input=bad)
        else:
            new = NewExecution(project_id="p1", name="bad", metadata={"k": bad})
        self.same(
            f"create({where}=non-JSON)",
            self.model.executions.create(new),
            self.subject.executions.create(new),
        )

    # -- action runs ---------------------------------------------------------------------------

    @rule(
        data=st.data(),
        project=st.sampled_from(PROJECTS),
        action=st.sampled_from(["fetch", "write"]),
        input=ledger_json_values(max_leaves=3),
        caller_id=st.none() | st.sampled_from(CALLER_RUN_IDS),
        key=st.none() | st.sampled_from(RUN_KEYS),
        max_attempts=st.sampled_from([1, 2, DEFAULT_MAX_ATTEMPTS, 0]),
    )
    def queue(
        self,
        data: st.DataObject,
        project: str,
        action: str,
        input: JsonValue,
        caller_id: str | None,
        key: str | None,
        max_attempts: int,
    ) -> None:
        execution_id = self._claimed_id(data)
        own = self.model.executions.get(execution_id)
        if isinstance(own, Success) and not self._wild(data):
            project = own.unwrap().project_id
        new = NewActionRun(
            project_id=project,
            execution_id=execution_id,
            action_id=action,
            input=input,
            id=None if caller_id is None else ActionRunId(caller_id),
            idempotency_key=key,
            max_attempts=max_attempts,
        )
        self.queued.append(new)
        self._queue(new, self._fence(data, execution_id))

    def _queue(self, new: NewActionRun, fence: Fence) -> None:
        got = self.same(
            f"queue({new!r}, {fence!r})",
            self.model.action_runs.queue(new, fence),
            self.subject.action_runs.queue(new, fence),
        )
        self._note_run(got)

    @rule(data=st.data(), change=st.sampled_from(["none", "none", "input", "action"]))
    def queue_again(self, data: st.DataObject, change: str) -> None:
        """Resend an earlier queue request (a replay when it has a key, else a new run or a
        taken id), or a changed one (a conflict when the key was used)."""
        if not self.queued:
            return
        new = data.draw(st.sampled_from(self.queued))
        if change == "input":
            new = attrs.evolve(new, input=["changed", new.input])
        elif change == "action":
            new = attrs.evolve(new, action_id="other")
        self._queue(new, self._fence(data, new.execution_id))

    @rule(data=st.data())
    def requeue(self, data: st.DataObject) -> None:
        run_id = self._run_id(data, "failed")
        fence = self._run_fence(data, run_id)
        self.same(
            f"requeue({run_id!r}, {fence!r})",
            self.model.action_runs.requeue(run_id, fence),
            self.subject.action_runs.requeue(run_id, fence),
        )

    @rule(data=st.data(), retryable=st.booleans(), tries=st.integers(1, 3))
    def fail_and_requeue(self, data: st.DataObject, retryable: bool, tries: int) -> None:
        """Start and fail a run, then requeue it, ``tries`` times (the retry policy: refused
        once the failure is not retryable or the attempts are used up)."""
        run_id = self._run_id(data, "queued", "running", "writeback", "effects")
        fence = self._run_fence(data, run_id)
        model, subject = self.model.action_runs, self.subject.action_runs
        failure = ActionRunFailure("Flaky", "try again", code="flaky", retryable=retryable)
        for _ in range(tries):
            started = model.start(run_id, fence), subject.start(run_id, fence)
            self.same(f"start({run_id!r}, {fence!r})", *started)
            self.same(
                f"finish_run({run_id!r}, failed)",
                model.finish(run_id, fence, ActionRunStatus.FAILED, failure),
                subject.finish(run_id, fence, ActionRunStatus.FAILED, failure),
            )
            self.same(
                f"requeue({run_id!r}, {fence!r})",
                model.requeue(run_id, fence),
                subject.requeue(run_id, fence),
            )

    @rule(data=st.data())
    def start(self, data: st.DataObject) -> None:
        run_id = self._run_id(data, "queued")
        fence = self._run_fence(data, run_id)
        self.same(
            f"start({run_id!r}, {fence!r})",
            self.model.action_runs.start(run_id, fence),
            self.subject.action_runs.start(run_id, fence),
        )

    def _record(
        self, run_id: ActionRunId, fence: Fence, phase: ActionRunPhase, outcome: PhaseOutcome
    ) -> None:
        model, subject = self.model.action_runs, self.subject.action_runs
        if phase is ActionRunPhase.WRITEBACK:
            expected = model.record_writeback(run_id, fence, outcome)
            got = subject.record_writeback(run_id, fence, outcome)
        else:
            expected = model.record_effects(run_id, fence, outcome)
            got = subject.record_effects(run_id, fence, outcome)
        self.same(f"record_{phase}({run_id!r}, {fence!r}, {outcome!r})", expected, got)
        if isinstance(got, Success):
            self.outcomes[(run_id, phase)] = outcome

    @rule(data=st.data(), outcome=phase_outcomes(ActionRunPhase.WRITEBACK))
    def record_writeback(self, data: st.DataObject, outcome: PhaseOutcome) -> None:
        run_id = self._run_id(data, "running")
        self._record(run_id, self._run_fence(data, run_id), ActionRunPhase.WRITEBACK, outcome)

    @rule(data=st.data(), outcome=phase_outcomes(ActionRunPhase.EFFECTS))
    def record_effects(self, data: st.DataObject, outcome: PhaseOutcome) -> None:
        run_id = self._run_id(data, "running", "writeback")
        self._record(run_id, self._run_fence(data, run_id), ActionRunPhase.EFFECTS, outcome)

    @rule(data=st.data(), change=st.booleans())
    def record_again(self, data: st.DataObject, change: bool) -> None:
        """Repeat a recorded phase outcome, its objects' keys reversed (a no-op returning the
        stored run), or send another outcome for it (refused)."""
        if not self.outcomes:
            return
        run_id, phase = data.draw(st.sampled_from(sorted(self.outcomes)))
        outcome = self.outcomes[(run_id, phase)]
        if change:
            outcome = (
                PhaseFailed(ActionRunFailure("Changed", "another outcome"))
                if isinstance(outcome, PhaseSucceeded)
                else PhaseSucceeded()
            )
        elif isinstance(outcome, PhaseSucceeded):
            outcome = PhaseSucceeded(_reversed_keys(outcome.result))
        self._record(ActionRunId(run_id), self._run_fence(data, run_id), phase, outcome)

    @rule(
        data=st.data(),
        status=st.sampled_from(list(ActionRunStatus)),
        failure=st.none() | action_run_failures(),
    )
    def finish_run(
        self, data: st.DataObject, status: ActionRunStatus, failure: ActionRunFailure | None
    ) -> None:
        run_id = self._run_id(data, "queued", "running", "writeback", "effects")
        fence = self._run_fence(data, run_id)
        if not self._wild(data):
            status = data.draw(st.sampled_from(sorted(s for s in ActionRunStatus if s.is_finished)))
            if status is ActionRunStatus.SUCCEEDED:
                failure = None
            elif status is ActionRunStatus.FAILED and failure is None:
                failure = ActionRunFailure("Error", "failed", retryable=True)
        self.same(
            f"finish_run({run_id!r}, {fence!r}, {status}, {failure!r})",
            self.model.action_runs.finish(run_id, fence, status, failure),
            self.subject.action_runs.finish(run_id, fence, status, failure),
        )

    @rule(data=st.data())
    def get_run(self, data: st.DataObject) -> None:
        run_id = self._run_id(data)
        self.same(
            f"get_run({run_id!r})",
            self.model.action_runs.get(run_id),
            self.subject.action_runs.get(run_id),
        )

    @rule(
        data=st.data(),
        project=st.sampled_from(PROJECTS),
        by_execution=st.booleans(),
        status=st.none() | st.sampled_from(list(ActionRunStatus)),
    )
    def list_runs(
        self,
        data: st.DataObject,
        project: str,
        by_execution: bool,
        status: ActionRunStatus | None,
    ) -> None:
        execution_id = self._execution_id(data) if by_execution else None
        limit = self._limit(data)
        cursor = self._cursor(data, self.run_cursors)
        got = self.same(
            f"list_runs({project!r}, {execution_id!r}, {status}, {limit}, {cursor!r})",
            self.model.action_runs.list(
                project, execution_id=execution_id, status=status, limit=limit, cursor=cursor
            ),
            self.subject.action_runs.list(
                project, execution_id=execution_id, status=status, limit=limit, cursor=cursor
            ),
        )
        if isinstance(got, Success) and got.unwrap().next_cursor is not None:
            self.run_cursors.append(got.unwrap().next_cursor)

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def runs_stay_within_their_attempts(self) -> None:
        for run_id in self.run_ids:
            got = self.subject.action_runs.get(ActionRunId(run_id))
            if isinstance(got, Success) and got.unwrap().attempt > got.unwrap().max_attempts:
                raise LedgerContractViolation(f"action run {run_id!r} went past its attempts")

    @invariant()
    def finished_executions_never_change(self) -> None:
        for execution_id, snapshot in self.finished.items():
            now = self.subject.executions.get(ExecutionId(execution_id))
            if now != Success(snapshot):
                raise LedgerContractViolation(
                    f"finished execution {execution_id!r} changed:\n"
                    f"  was: {snapshot!r}\n  now: {now!r}"
                )


def ledger_state_machine(
    layer_factory: LayerFactory, model_factory: LayerFactory = ledger_model_layer
) -> type[LedgerMachine]:
    """Return an :class:`LedgerMachine` subclass bound to ``layer_factory``.

    Run it with ``hypothesis.stateful.run_state_machine_as_test(machine, settings=...)``; a
    disagreement raises :class:`LedgerContractViolation`.
    """

    class BoundLedgerMachine(LedgerMachine):
        pass

    BoundLedgerMachine.layer_factory = staticmethod(layer_factory)
    BoundLedgerMachine.model_factory = staticmethod(model_factory)
    return BoundLedgerMachine


# -- the contract class ------------------------------------------------------------------------


@attrs.frozen
class Ledger:
    """The services under test, the container they came from and the clock they read."""

    executions: ExecutionStorage
    action_runs: ActionRunStorage
    container: Container
    clock: FixedClock


class LedgerContract:
    """What every execution-ledger layer must do; subclass and define :meth:`make_layer`."""

    state_machine_settings: ClassVar[settings] = settings(
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
    )

    def make_layer(self) -> Layer:
        """Return a fresh layer providing the two services (override this, or the fixture)."""
        raise NotImplementedError("subclass LedgerContract and define make_layer")

    @pytest.fixture
    def layer_factory(self) -> LayerFactory:
        """The factory under test (``make_layer`` unless a subclass overrides this fixture)."""
        return self.make_layer

    @pytest.fixture
    def ledger(self, layer_factory: LayerFactory) -> Iterator[Ledger]:
        """The built layer under test with the contract's clock (starting at ``T0_MS``)."""
        clock = FixedClock(T0_MS)
        with build(merge(layer_factory(), Layer.value(CLOCK, clock))) as container:
            services = _services(container)
            yield Ledger(services.executions, services.action_runs, container, clock)

    # -- the model -----------------------------------------------------------------------------

    def test_state_machine_agrees_with_the_model(self, layer_factory: LayerFactory) -> None:
        run_state_machine_as_test(
            ledger_state_machine(layer_factory), settings=self.state_machine_settings
        )

    # -- create and get ------------------------------------------------------------------------

    def test_get_of_a_missing_execution_is_not_found(self, ledger: Ledger) -> None:
        assert ledger.executions.get(ExecutionId("nope")) == Failure(NotFound("execution", "nope"))

    def test_create_starts_queued_with_a_generated_id(self, ledger: Ledger) -> None:
        got = ledger.executions.create(NewExecution("p", "build", input={"x": 1}))
        execution = got.unwrap()
        assert execution.id == "exe_1"
        assert execution.status is ExecutionStatus.QUEUED
        assert execution.created_at_ms == execution.updated_at_ms == T0_MS
        assert (execution.fencing_token, execution.attempts, execution.lease_expires_at_ms) == (
            0,
            0,
            None,
        )
        assert ledger.executions.get(execution.id) == got

    def test_same_key_and_request_returns_the_stored_execution(self, ledger: Ledger) -> None:
        new = NewExecution("p", "build", input={"a": 1, "b": [1.0]}, idempotency_key="k")
        first = ledger.executions.create(new)
        ledger.clock.advance(5)
        reordered = attrs.evolve(new, input={"b": [1.0], "a": 1})
        assert ledger.executions.create(new) == first
        assert ledger.executions.create(reordered) == first
        assert ledger.executions.list("p").unwrap().items == (first.unwrap(),)

    def test_same_key_with_another_request_is_a_conflict(self, ledger: Ledger) -> None:
        new = NewExecution("p", "build", input={"a": 1}, idempotency_key="k")
        first = ledger.executions.create(new).unwrap()
        for changed in (
            attrs.evolve(new, input={"a": 1.0}),
            attrs.evolve(new, input={"a": True}),
            attrs.evolve(new, name="deploy"),
            attrs.evolve(new, metadata={"m": 1}),
        ):
            conflict = ledger.executions.create(changed).failure()
            assert isinstance(conflict, Conflict)
            assert conflict.key == first.id
        other_project = attrs.evolve(new, project_id="q")
        assert ledger.executions.create(other_project).unwrap().project_id == "q"

    def test_a_taken_or_reserved_id_is_refused(self, ledger: Ledger) -> None:
        ledger.executions.create(NewExecution("p", "build", id=ExecutionId("mine"))).unwrap()
        again = ledger.executions.create(NewExecution("p", "build", id=ExecutionId("mine")))
        assert isinstance(again.failure(), Conflict)
        reserved = ledger.executions.create(NewExecution("p", "build", id=ExecutionId("exe_7")))
        assert isinstance(reserved.failure(), InvalidInput)

    def test_parent_must_exist_in_the_same_project(self, ledger: Ledger) -> None:
        parent = ledger.executions.create(NewExecution("p", "parent")).unwrap()
        child = ledger.executions.create(NewExecution("p", "child", parent_id=parent.id))
        assert child.unwrap().parent_id == parent.id
        missing = ledger.executions.create(NewExecution("p", "c", parent_id=ExecutionId("gone")))
        assert missing == Failure(NotFound("execution", "gone"))
        foreign = ledger.executions.create(NewExecution("q", "c", parent_id=parent.id))
        assert foreign == Failure(ProjectMismatch("execution", parent.id, "q", "p"))

    @pytest.mark.parametrize(
        "new",
        [
            NewExecution("", "build"),
            NewExecution("p", ""),
            NewExecution("p\x00", "build"),
            NewExecution("p", "b" * 257),
            NewExecution("p", "build", idempotency_key="\ud800"),
            NewExecution("p", "build", metadata=[1]),  # type: ignore[arg-type]
        ],
    )
    def test_bad_requests_are_invalid_and_write_nothing(
        self, ledger: Ledger, new: NewExecution
    ) -> None:
        assert isinstance(ledger.executions.create(new).failure(), InvalidInput)
        assert ledger.executions.create(NewExecution("p", "ok")).unwrap().seq == 1

    @given(bad=non_json_values())
    @settings(
        max_examples=15,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.differing_executors,
        ],
    )
    def test_non_json_values_are_refused(self, layer_factory: LayerFactory, bad: Any) -> None:
        with build(merge(layer_factory(), Layer.value(CLOCK, FixedClock(T0_MS)))) as container:
            executions = _services(container).executions
            assert isinstance(
                executions.create(NewExecution("p", "b", input=bad)).failure(), InvalidInput
            )
            assert isinstance(
                executions.create(NewExecution("p", "b", metadata={"k": bad})).failure(),
                InvalidInput,
            )
            assert executions.list("p").unwrap().items == ()

    @given(
        value=ledger_json_values(),
        failure=execution_failures(),
        metadata=st.dictionaries(st.text(), ledger_json_values(max_leaves=4)),
    )
    @settings(
        max_examples=25,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.differing_executors,
        ],
    )
    def test_json_values_round_trip_exactly(
        self,
        layer_factory: LayerFactory,
        value: JsonValue,
        failure: ExecutionFailure,
        metadata: dict[str, JsonValue],
    ) -> None:
        with build(merge(layer_factory(), Layer.value(CLOCK, FixedClock(T0_MS)))) as container:
            executions = _services(container).executions
            created = executions.create(
                NewExecution("p", "b", input=value, metadata=metadata)
            ).unwrap()
            assert _exact(created.input) == _exact(value)
            assert list(created.metadata) == list(metadata)
            assert _exact(created.metadata) == _exact(metadata)
            token = executions.claim("p", "w", 1_000).unwrap()
            assert token is not None
            done = executions.finish(
                created.id,
                token.fencing_token,
                ExecutionStatus.FAILED,
                output=value,
                failure=failure,
            ).unwrap()
            stored = executions.get(created.id).unwrap()
            assert stored == done
            assert _exact(stored.output) == _exact(value)
            assert stored.failure == failure
            assert _exact(stored.failure.details if stored.failure else None) == _exact(
                failure.details
            )

    # -- the state machine of an execution -----------------------------------------------------

    def _running(self, ledger: Ledger, project: str = "p") -> Execution:
        ledger.executions.create(NewExecution(project, "job")).unwrap()
        claimed = ledger.executions.claim(project, "w", 1_000).unwrap()
        assert claimed is not None
        return claimed

    @pytest.mark.parametrize(
        "final", [ExecutionStatus.SUCCEEDED, ExecutionStatus.FAILED, ExecutionStatus.CANCELLED]
    )
    def test_finished_executions_are_immutable(
        self, ledger: Ledger, final: ExecutionStatus
    ) -> None:
        running = self._running(ledger)
        failure = None if final is ExecutionStatus.SUCCEEDED else ExecutionFailure("E", "m")
        done = ledger.executions.finish(
            running.id, running.fencing_token, final, failure=failure
        ).unwrap()
        assert done.finished_at_ms == T0_MS
        assert done.lease_expires_at_ms is None
        for target in (
            ExecutionStatus.SUCCEEDED,
            ExecutionStatus.FAILED,
            ExecutionStatus.CANCELLED,
        ):
            again = ledger.executions.finish(
                running.id,
                running.fencing_token,
                target,
                failure=None if target is ExecutionStatus.SUCCEEDED else ExecutionFailure("E", "m"),
            )
            assert again == Failure(
                IllegalTransition("execution", running.id, final.value, target.value)
            )
        assert ledger.executions.cancel(running.id) == Failure(
            IllegalTransition("execution", running.id, final.value, "cancelled")
        )
        assert isinstance(
            ledger.executions.renew(running.id, running.fencing_token, 10).failure(), Conflict
        )
        ledger.clock.advance(10_000)
        assert ledger.executions.claim("p", "w2", 10) == Success(None)
        assert ledger.executions.get(running.id) == Success(done)

    def test_finish_of_a_queued_execution_is_illegal(self, ledger: Ledger) -> None:
        queued = ledger.executions.create(NewExecution("p", "job")).unwrap()
        got = ledger.executions.finish(queued.id, 0, ExecutionStatus.SUCCEEDED)
        assert got == Failure(IllegalTransition("execution", queued.id, "queued", "succeeded"))

    def test_cancel_moves_queued_and_running_executions(self, ledger: Ledger) -> None:
        queued = ledger.executions.create(NewExecution("p", "a")).unwrap()
        cancelled = ledger.executions.cancel(
            queued.id, ExecutionFailure("Stop", "by hand")
        ).unwrap()
        assert cancelled.status is ExecutionStatus.CANCELLED
        assert cancelled.failure == ExecutionFailure("Stop", "by hand")
        running = self._running(ledger)
        assert ledger.executions.cancel(running.id).unwrap().status is ExecutionStatus.CANCELLED
        late = ledger.executions.finish(
            running.id, running.fencing_token, ExecutionStatus.SUCCEEDED
        )
        assert late == Failure(IllegalTransition("execution", running.id, "cancelled", "succeeded"))

    def test_finish_arguments_must_fit_the_status(self, ledger: Ledger) -> None:
        running = self._running(ledger)
        token = running.fencing_token
        for status, failure in (
            (ExecutionStatus.RUNNING, None),
            ("nonsense", None),
            (ExecutionStatus.SUCCEEDED, ExecutionFailure("E", "m")),
            (ExecutionStatus.FAILED, None),
            (ExecutionStatus.FAILED, ExecutionFailure("", "m")),
        ):
            got = ledger.executions.finish(running.id, token, status, failure=failure)  # type: ignore[arg-type]
            assert isinstance(got.failure(), InvalidInput), (status, failure, got)
        assert ledger.executions.get(running.id).unwrap() == running

    # -- claims, leases and fencing tokens -----------------------------------------------------

    def test_claim_takes_the_oldest_queued_execution_of_the_project(self, ledger: Ledger) -> None:
        assert ledger.executions.claim("p", "w", 100) == Success(None)
        first = ledger.executions.create(NewExecution("p", "1")).unwrap()
        ledger.executions.create(NewExecution("q", "other")).unwrap()
        second = ledger.executions.create(NewExecution("p", "2")).unwrap()
        ledger.clock.advance(7)
        got = ledger.executions.claim("p", "w", 100).unwrap()
        assert got is not None
        assert (got.id, got.status, got.lease_owner) == (first.id, ExecutionStatus.RUNNING, "w")
        assert (got.started_at_ms, got.lease_expires_at_ms, got.attempts) == (
            T0_MS + 7,
            T0_MS + 107,
            1,
        )
        nxt = ledger.executions.claim("p", "w", 100).unwrap()
        assert nxt is not None
        assert nxt.id == second.id
        assert nxt.fencing_token > got.fencing_token
        assert ledger.executions.claim("p", "w", 100) == Success(None)

    @pytest.mark.parametrize("lease_ms", [0, -1, MAX_LEASE_MS + 1, True, 1.5])
    def test_bad_leases_are_invalid(self, ledger: Ledger, lease_ms: Any) -> None:
        ledger.executions.create(NewExecution("p", "1")).unwrap()
        assert isinstance(ledger.executions.claim("p", "w", lease_ms).failure(), InvalidInput)
        assert ledger.executions.list("p", status=ExecutionStatus.QUEUED).unwrap().items[0].seq == 1

    def test_an_expired_lease_is_claimed_again_and_the_old_token_goes_stale(
        self, ledger: Ledger
    ) -> None:
        first = self._running(ledger)
        ledger.clock.advance(999)
        assert ledger.executions.claim("p", "w2", 100) == Success(None)
        ledger.clock.advance(1)
        again = ledger.executions.claim("p", "w2", 100).unwrap()
        assert again is not None
        assert again.id == first.id
        assert again.lease_owner == "w2"
        assert again.attempts == 2
        assert again.fencing_token > first.fencing_token
        assert again.started_at_ms == first.started_at_ms
        stale = StaleFencingToken(first.id, first.fencing_token, again.fencing_token)
        assert ledger.executions.finish(
            first.id, first.fencing_token, ExecutionStatus.SUCCEEDED
        ) == Failure(stale)
        assert ledger.executions.renew(first.id, first.fencing_token, 100) == Failure(stale)
        done = ledger.executions.finish(
            first.id, again.fencing_token, ExecutionStatus.SUCCEEDED, output=1
        )
        assert done.unwrap().output == 1

    def test_renew_extends_the_lease(self, ledger: Ledger) -> None:
        running = self._running(ledger)
        ledger.clock.advance(900)
        renewed = ledger.executions.renew(running.id, running.fencing_token, 1_000).unwrap()
        assert renewed.lease_expires_at_ms == T0_MS + 1_900
        ledger.clock.advance(500)
        assert ledger.executions.claim("p", "w2", 100) == Success(None)

    def test_an_expired_but_unclaimed_lease_keeps_its_token(self, ledger: Ledger) -> None:
        running = self._running(ledger)
        ledger.clock.advance(5_000)
        done = ledger.executions.finish(
            running.id, running.fencing_token, ExecutionStatus.SUCCEEDED
        )
        assert done.unwrap().status is ExecutionStatus.SUCCEEDED

    # -- listing -------------------------------------------------------------------------------

    def test_pages_walk_every_execution_once_in_creation_order(self, ledger: Ledger) -> None:
        made = [
            ledger.executions.create(NewExecution("p" if i % 3 else "q", str(i))).unwrap()
            for i in range(10)
        ]
        expected = [e for e in made if e.project_id == "p"]
        for limit in (1, 2, 3, 6, 7):
            seen: list[Execution] = []
            cursor: str | None = None
            while True:
                page = ledger.executions.list("p", limit=limit, cursor=cursor).unwrap()
                assert len(page.items) <= limit
                seen += page.items
                assert page.has_more == (page.next_cursor is not None)
                if not page.has_more:
                    break
                cursor = page.next_cursor
            assert seen == expected
        only = ledger.executions.list("p", status=ExecutionStatus.RUNNING).unwrap()
        assert only == Page((), False, None)

    @pytest.mark.parametrize("limit", [0, -1, MAX_PAGE_SIZE + 1, True])
    def test_bad_limits_are_invalid(self, ledger: Ledger, limit: int) -> None:
        assert isinstance(ledger.executions.list("p", limit=limit).failure(), InvalidInput)
        assert isinstance(ledger.action_runs.list("p", limit=limit).failure(), InvalidInput)

    @pytest.mark.parametrize("cursor", ["", "x", "e", "e-1", "a5", "e1.5", "e" + "9" * 19])
    def test_bad_cursors_are_invalid(self, ledger: Ledger, cursor: str) -> None:
        assert isinstance(ledger.executions.list("p", cursor=cursor).failure(), InvalidInput)

    def test_bad_status_filters_are_invalid(self, ledger: Ledger) -> None:
        assert isinstance(ledger.executions.list("p", status="nope").failure(), InvalidInput)  # type: ignore[arg-type]
        assert isinstance(ledger.action_runs.list("p", status="nope").failure(), InvalidInput)  # type: ignore[arg-type]

    # -- action runs ---------------------------------------------------------------------------

    def _execution(self, ledger: Ledger, project: str = "p") -> Execution:
        """A fresh execution of ``project``, claimed (running) by worker ``w``."""
        made = ledger.executions.create(NewExecution(project, "job")).unwrap()
        claimed = ledger.executions.claim(project, "w", 1_000).unwrap()
        assert claimed is not None
        assert claimed.id == made.id
        return claimed

    def _writes(
        self, ledger: Ledger, run: ActionRun, fence: Fence
    ) -> dict[str, Result[ActionRun, Any]]:
        """Every action-run write on ``run`` presenting ``fence`` (and a queue beside it)."""
        runs = ledger.action_runs
        new = NewActionRun(run.project_id, fence.execution_id, "other")
        return {
            "queue": runs.queue(new, fence),
            "start": runs.start(run.id, fence),
            "record_writeback": runs.record_writeback(run.id, fence, PhaseSucceeded()),
            "record_effects": runs.record_effects(run.id, fence, PhaseSucceeded()),
            "finish": runs.finish(run.id, fence, ActionRunStatus.CANCELLED),
            "requeue": runs.requeue(run.id, fence),
        }

    def test_queue_checks_the_execution(self, ledger: Ledger) -> None:
        mine = self._execution(ledger)
        gone = Fence(ExecutionId("gone"), mine.fencing_token)
        assert ledger.action_runs.queue(NewActionRun("p", gone.execution_id, "a"), gone) == (
            Failure(NotFound("execution", "gone"))
        )
        assert ledger.action_runs.queue(NewActionRun("q", mine.id, "a"), mine.fence) == Failure(
            ProjectMismatch("execution", mine.id, "q", "p")
        )
        ledger.executions.cancel(mine.id).unwrap()
        assert ledger.action_runs.queue(NewActionRun("p", mine.id, "a"), mine.fence) == Failure(
            ExecutionFinished(mine.id, "cancelled")
        )
        assert ledger.action_runs.list("p").unwrap().items == ()
        assert ledger.action_runs.list("q").unwrap().items == ()

    def test_a_stale_worker_is_refused_every_action_run_write(self, ledger: Ledger) -> None:
        """Worker ``w`` lost its lease and ``w2`` claimed the execution again: every write
        presenting ``w``'s fence is ``StaleFencingToken`` and changes nothing."""
        mine = self._execution(ledger)
        run = ledger.action_runs.queue(NewActionRun("p", mine.id, "a"), mine.fence).unwrap()
        started = ledger.action_runs.start(run.id, mine.fence).unwrap()
        ledger.clock.advance(1_000)
        again = ledger.executions.claim("p", "w2", 1_000).unwrap()
        assert again is not None
        assert again.id == mine.id
        stale = Failure(StaleFencingToken(mine.id, mine.fencing_token, again.fencing_token))
        assert self._writes(ledger, started, mine.fence) == dict.fromkeys(
            ("queue", "start", "record_writeback", "record_effects", "finish", "requeue"), stale
        )
        assert ledger.action_runs.list("p").unwrap().items == (started,)
        done = ledger.action_runs.finish(run.id, again.fence, ActionRunStatus.SUCCEEDED)
        assert done.unwrap().status is ActionRunStatus.SUCCEEDED

    def test_an_execution_that_is_not_running_takes_no_action_run_writes(
        self, ledger: Ledger
    ) -> None:
        mine = self._execution(ledger)
        run = ledger.action_runs.queue(NewActionRun("p", mine.id, "a"), mine.fence).unwrap()
        queued = ledger.executions.create(NewExecution("p", "later")).unwrap()
        waiting = Failure(
            Conflict(
                "execution",
                queued.id,
                "only a running execution takes action-run writes",
                expected="running",
                actual="queued",
            )
        )
        assert ledger.action_runs.queue(NewActionRun("p", queued.id, "a"), queued.fence) == (
            waiting
        )
        ledger.executions.finish(mine.id, mine.fencing_token, ExecutionStatus.SUCCEEDED).unwrap()
        finished = Failure(ExecutionFinished(mine.id, "succeeded"))
        assert self._writes(ledger, run, mine.fence) == dict.fromkeys(
            ("queue", "start", "record_writeback", "record_effects", "finish", "requeue"),
            finished,
        )
        assert ledger.action_runs.list("p").unwrap().items == (run,)

    def test_the_fence_must_name_the_runs_execution(self, ledger: Ledger) -> None:
        one = self._execution(ledger)
        two = self._execution(ledger)
        run = ledger.action_runs.queue(NewActionRun("p", one.id, "a"), one.fence).unwrap()
        mismatch = Failure(ExecutionMismatch(run.id, two.id, one.id))
        writes = self._writes(ledger, run, two.fence)
        assert writes.pop("queue").unwrap().execution_id == two.id
        assert writes == dict.fromkeys(writes, mismatch)
        crossed = ledger.action_runs.queue(NewActionRun("p", one.id, "a"), two.fence)
        assert isinstance(crossed.failure(), InvalidInput)
        assert ledger.action_runs.get(run.id) == Success(run)

    @pytest.mark.parametrize(
        "fence",
        [
            None,
            ("e", 1),
            Fence(ExecutionId(""), 1),
            Fence(ExecutionId("e"), -1),
            Fence(ExecutionId("e"), True),
            Fence(ExecutionId("e"), 1.0),  # type: ignore[arg-type]
        ],
    )
    def test_bad_fences_are_invalid(self, ledger: Ledger, fence: Any) -> None:
        mine = self._execution(ledger)
        run = ledger.action_runs.queue(NewActionRun("p", mine.id, "a"), mine.fence).unwrap()
        new = NewActionRun("p", mine.id, "b")
        assert isinstance(ledger.action_runs.queue(new, fence).failure(), InvalidInput)
        assert isinstance(ledger.action_runs.start(run.id, fence).failure(), InvalidInput)
        assert ledger.action_runs.list("p").unwrap().items == (run,)

    def test_queue_with_a_used_key_replays_or_conflicts(self, ledger: Ledger) -> None:
        mine, other = self._execution(ledger), self._execution(ledger)
        new = NewActionRun("p", mine.id, "a", input={"x": 1, "y": [1.0]}, idempotency_key="k")
        first = ledger.action_runs.queue(new, mine.fence).unwrap()
        assert first.idempotency_key == "k"
        ledger.clock.advance(5)
        reordered = attrs.evolve(new, input={"y": [1.0], "x": 1})
        assert ledger.action_runs.queue(reordered, mine.fence) == Success(first)
        started = ledger.action_runs.start(first.id, mine.fence).unwrap()
        assert ledger.action_runs.queue(new, mine.fence) == Success(started)
        for changed in (
            attrs.evolve(new, input={"x": 1.0, "y": [1.0]}),
            attrs.evolve(new, action_id="b"),
            attrs.evolve(new, max_attempts=1),
            attrs.evolve(new, id=ActionRunId("mine")),
        ):
            assert ledger.action_runs.queue(changed, mine.fence) == Failure(
                Conflict(
                    "action_run",
                    first.id,
                    "idempotency key 'k' was used for a different request",
                )
            )
        elsewhere = attrs.evolve(new, execution_id=other.id)
        assert ledger.action_runs.queue(elsewhere, other.fence).unwrap().id != first.id
        assert len(ledger.action_runs.list("p").unwrap().items) == 2

    def test_the_same_phase_outcome_again_returns_the_stored_run(self, ledger: Ledger) -> None:
        mine = self._execution(ledger)
        runs, fence = ledger.action_runs, mine.fence
        run = runs.queue(NewActionRun("p", mine.id, "a"), fence).unwrap()
        runs.start(run.id, fence).unwrap()
        wrote = runs.record_writeback(run.id, fence, PhaseSucceeded({"a": 1, "b": [2]})).unwrap()
        ledger.clock.advance(1)
        again = PhaseSucceeded({"b": [2], "a": 1})
        assert runs.record_writeback(run.id, fence, again) == Success(wrote)
        effects = PhaseFailed(ActionRunFailure("Timeout", "504", code="http_504", retryable=True))
        affected = runs.record_effects(run.id, fence, effects).unwrap()
        ledger.clock.advance(1)
        assert runs.record_writeback(run.id, fence, again) == Success(affected)
        assert runs.record_effects(run.id, fence, effects) == Success(affected)
        for other in (PhaseSucceeded({"a": 1.0, "b": [2]}), PhaseSucceeded()):
            assert runs.record_writeback(run.id, fence, other) == Failure(
                IllegalTransition("action_run", run.id, "effects", "writeback")
            )
        assert runs.record_effects(run.id, fence, PhaseSucceeded()) == Failure(
            IllegalTransition("action_run", run.id, "effects", "effects")
        )
        done = runs.finish(run.id, fence, ActionRunStatus.SUCCEEDED).unwrap()
        assert runs.record_effects(run.id, fence, effects) == Success(done)
        assert runs.get(run.id) == Success(done)

    def test_requeue_follows_the_retry_policy(self, ledger: Ledger) -> None:
        mine = self._execution(ledger)
        runs, fence = ledger.action_runs, mine.fence

        def fail(run: ActionRun, retryable: bool) -> ActionRun:
            runs.start(run.id, fence).unwrap()
            failure = ActionRunFailure("E", "m", code="e", retryable=retryable)
            return runs.finish(run.id, fence, ActionRunStatus.FAILED, failure).unwrap()

        run = runs.queue(NewActionRun("p", mine.id, "a", max_attempts=2), fence).unwrap()
        assert run.max_attempts == 2
        failed = fail(run, retryable=False)
        assert failed.failure is not None
        assert (failed.failure.code, failed.failure.retryable) == ("e", False)
        assert runs.requeue(run.id, fence) == Failure(
            RetryRefused(run.id, "not_retryable", 1, 2)
        )
        other = runs.queue(NewActionRun("p", mine.id, "b", max_attempts=2), fence).unwrap()
        fail(other, retryable=True)
        second = runs.requeue(other.id, fence).unwrap()
        assert (second.attempt, second.status) == (2, ActionRunStatus.QUEUED)
        last = fail(second, retryable=True)
        assert runs.requeue(other.id, fence) == Failure(
            RetryRefused(other.id, "attempts_exhausted", 2, 2)
        )
        assert runs.get(other.id) == Success(last)
        default = runs.queue(NewActionRun("p", mine.id, "c"), fence).unwrap()
        assert default.max_attempts == DEFAULT_MAX_ATTEMPTS

    @pytest.mark.parametrize("max_attempts", [0, -1, MAX_ATTEMPTS + 1, True, 1.5])
    def test_bad_retry_policies_are_invalid(self, ledger: Ledger, max_attempts: Any) -> None:
        mine = self._execution(ledger)
        new = NewActionRun("p", mine.id, "a", max_attempts=max_attempts)
        assert isinstance(ledger.action_runs.queue(new, mine.fence).failure(), InvalidInput)
        assert ledger.action_runs.list("p").unwrap().items == ()

    def test_a_taken_or_reserved_run_id_is_refused(self, ledger: Ledger) -> None:
        execution = self._execution(ledger)
        fence = execution.fence
        ledger.action_runs.queue(
            NewActionRun("p", execution.id, "a", id=ActionRunId("r")), fence
        ).unwrap()
        again = ledger.action_runs.queue(
            NewActionRun("p", execution.id, "a", id=ActionRunId("r")), fence
        )
        assert again.failure() == Conflict("action_run", "r", "an action run with this id exists")
        reserved = ledger.action_runs.queue(
            NewActionRun("p", execution.id, "a", id=ActionRunId("act_3")), fence
        )
        assert isinstance(reserved.failure(), InvalidInput)

    def test_the_whole_lifecycle(self, ledger: Ledger) -> None:
        execution = self._execution(ledger)
        runs, fence = ledger.action_runs, execution.fence
        queued = runs.queue(
            NewActionRun("p", execution.id, "write", input={"n": "ü"}), fence
        ).unwrap()
        assert (queued.id, queued.status, queued.phase, queued.attempt) == (
            "act_1",
            "queued",
            "queued",
            1,
        )
        ledger.clock.advance(1)
        started = runs.start(queued.id, fence).unwrap()
        assert (started.status, started.phase, started.started_at_ms) == (
            "running",
            "running",
            T0_MS + 1,
        )
        ledger.clock.advance(1)
        wrote = runs.record_writeback(queued.id, fence, PhaseSucceeded({"rows": [1, 2]})).unwrap()
        assert wrote.phase is ActionRunPhase.WRITEBACK
        assert wrote.writeback == PhaseRecord(
            PhaseStatus.SUCCEEDED, T0_MS + 2, {"rows": [1, 2]}, None
        )
        ledger.clock.advance(1)
        effects_failure = ActionRunFailure("Timeout", "webhook 504", details={"tries": 3})
        affected = runs.record_effects(queued.id, fence, PhaseFailed(effects_failure)).unwrap()
        assert affected.effects == PhaseRecord(
            PhaseStatus.FAILED,
            T0_MS + 3,
            None,
            attrs.evolve(effects_failure, phase=ActionRunPhase.EFFECTS),
        )
        ledger.clock.advance(1)
        final = ActionRunFailure("Effects", "failed", retryable=True)
        done = runs.finish(queued.id, fence, ActionRunStatus.FAILED, final).unwrap()
        assert (done.status, done.phase, done.finished_at_ms) == ("failed", "finished", T0_MS + 4)
        assert done.failure == attrs.evolve(final, phase=ActionRunPhase.EFFECTS)
        assert runs.get(queued.id) == Success(done)
        ledger.clock.advance(1)
        again = runs.requeue(queued.id, fence).unwrap()
        assert again == attrs.evolve(queued, attempt=2, queued_at_ms=T0_MS + 5)

    def test_phases_are_optional_and_ordered(self, ledger: Ledger) -> None:
        execution = self._execution(ledger)
        runs, fence = ledger.action_runs, execution.fence
        run = runs.queue(NewActionRun("p", execution.id, "a"), fence).unwrap()

        def illegal(state: str, step: str) -> Failure[IllegalTransition]:
            return Failure(IllegalTransition("action_run", run.id, state, step))

        assert runs.record_writeback(run.id, fence, PhaseSucceeded()) == illegal(
            "queued", "writeback"
        )
        assert runs.record_effects(run.id, fence, PhaseSucceeded()) == illegal(
            "queued", "effects"
        )
        assert runs.finish(run.id, fence, ActionRunStatus.SUCCEEDED) == illegal(
            "queued", "succeeded"
        )
        runs.start(run.id, fence).unwrap()
        assert runs.start(run.id, fence) == illegal("running", "running")
        runs.record_effects(run.id, fence, PhaseSucceeded()).unwrap()
        assert runs.record_writeback(run.id, fence, PhaseSucceeded()) == illegal(
            "effects", "writeback"
        )
        runs.finish(run.id, fence, ActionRunStatus.SUCCEEDED).unwrap()
        assert runs.requeue(run.id, fence) == illegal("succeeded", "queued")
        assert runs.finish(run.id, fence, ActionRunStatus.CANCELLED) == illegal(
            "succeeded", "cancelled"
        )
        assert runs.start(run.id, fence) == illegal("succeeded", "running")

    def test_a_queued_run_may_be_cancelled(self, ledger: Ledger) -> None:
        execution = self._execution(ledger)
        fence = execution.fence
        run = ledger.action_runs.queue(NewActionRun("p", execution.id, "a"), fence).unwrap()
        done = ledger.action_runs.finish(
            run.id, fence, ActionRunStatus.CANCELLED, ActionRunFailure("Stop", "")
        ).unwrap()
        assert done.failure == ActionRunFailure("Stop", "", ActionRunPhase.QUEUED)

    def test_phase_failures_must_name_their_own_phase(self, ledger: Ledger) -> None:
        execution = self._execution(ledger)
        runs, fence = ledger.action_runs, execution.fence
        run = runs.queue(NewActionRun("p", execution.id, "a"), fence).unwrap()
        runs.start(run.id, fence).unwrap()
        wrong = PhaseFailed(ActionRunFailure("E", "m", ActionRunPhase.EFFECTS))
        assert isinstance(runs.record_writeback(run.id, fence, wrong).failure(), InvalidInput)
        assert isinstance(
            runs.record_effects(run.id, fence, PhaseSucceeded(1)).failure(), InvalidInput
        )
        for bad in (
            ActionRunFailure("E", "m", code=""),
            ActionRunFailure("E", "m", code="\x00"),
            ActionRunFailure("E", "m", retryable=1),  # type: ignore[arg-type]
        ):
            assert isinstance(
                runs.record_writeback(run.id, fence, PhaseFailed(bad)).failure(), InvalidInput
            )
        assert runs.get(run.id).unwrap().phase is ActionRunPhase.RUNNING

    def test_requeue_needs_a_failed_run_of_an_open_execution(self, ledger: Ledger) -> None:
        execution = self._execution(ledger)
        runs, fence = ledger.action_runs, execution.fence
        run = runs.queue(NewActionRun("p", execution.id, "a"), fence).unwrap()
        assert runs.requeue(run.id, fence) == Failure(
            IllegalTransition("action_run", run.id, "queued", "queued")
        )
        runs.start(run.id, fence).unwrap()
        runs.finish(
            run.id, fence, ActionRunStatus.FAILED, ActionRunFailure("E", "m", retryable=True)
        ).unwrap()
        ledger.executions.cancel(execution.id).unwrap()
        assert runs.requeue(run.id, fence) == Failure(
            ExecutionFinished(execution.id, "cancelled")
        )
        assert runs.get(run.id).unwrap().status is ActionRunStatus.FAILED

    @given(
        failure=action_run_failures(st.just(ActionRunPhase.WRITEBACK)), result=ledger_json_values()
    )
    @settings(
        max_examples=20,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.differing_executors,
        ],
    )
    def test_failures_round_trip_exactly(
        self, layer_factory: LayerFactory, failure: ActionRunFailure, result: JsonValue
    ) -> None:
        with build(merge(layer_factory(), Layer.value(CLOCK, FixedClock(T0_MS)))) as container:
            services = _services(container)
            services.executions.create(NewExecution("p", "job")).unwrap()
            execution = services.executions.claim("p", "w", 1_000).unwrap()
            assert execution is not None
            runs, fence = services.action_runs, execution.fence
            a = runs.queue(NewActionRun("p", execution.id, "a", input=result), fence).unwrap()
            b = runs.queue(NewActionRun("p", execution.id, "b"), fence).unwrap()
            for run in (a, b):
                runs.start(run.id, fence).unwrap()
            wrote = runs.record_writeback(a.id, fence, PhaseFailed(failure)).unwrap()
            assert wrote.writeback is not None
            assert wrote.writeback.failure == failure
            assert _exact(runs.get(a.id).unwrap().input) == _exact(result)
            runs.record_writeback(b.id, fence, PhaseSucceeded(result)).unwrap()
            stored = runs.get(b.id).unwrap().writeback
            assert stored is not None
            assert _exact(stored.result) == _exact(result)
            done = runs.finish(a.id, fence, ActionRunStatus.FAILED, failure).unwrap()
            assert runs.get(a.id) == Success(done)
            assert done.failure == failure

    def test_runs_list_in_queue_order_with_filters(self, ledger: Ledger) -> None:
        one, two = self._execution(ledger), self._execution(ledger)
        made = [
            ledger.action_runs.queue(
                NewActionRun("p", (one, two)[i % 2].id, f"a{i}"), (one, two)[i % 2].fence
            ).unwrap()
            for i in range(5)
        ]
        ledger.action_runs.start(made[2].id, one.fence).unwrap()
        page = ledger.action_runs.list("p", execution_id=one.id, limit=2).unwrap()
        assert [r.id for r in page.items] == [made[0].id, made[2].id]
        assert page.has_more
        rest = ledger.action_runs.list(
            "p", execution_id=one.id, limit=2, cursor=page.next_cursor
        ).unwrap()
        assert [r.id for r in rest.items] == [made[4].id]
        assert not rest.has_more
        running = ledger.action_runs.list("p", status=ActionRunStatus.RUNNING).unwrap()
        assert [r.id for r in running.items] == [made[2].id]
        assert ledger.action_runs.list("q").unwrap() == Page((), False, None)


def _reversed_keys(value: JsonValue) -> JsonValue:
    """``value`` with the keys of every object in reverse order (the same content)."""
    if isinstance(value, dict):
        return {k: _reversed_keys(v) for k, v in reversed(value.items())}
    if isinstance(value, list):
        return [_reversed_keys(v) for v in value]
    return value


def _exact(value: Any) -> Any:
    """``value`` with its types made explicit, so ``1``, ``1.0`` and ``True`` differ."""
    if isinstance(value, dict):
        return ("dict", [(k, _exact(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [_exact(v) for v in value])
    return (type(value).__name__, value)
