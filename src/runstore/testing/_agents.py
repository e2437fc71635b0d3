"""The contract every ``AgentStorage`` layer must meet, shipped for third parties.

- **The state machine** (:func:`agents_state_machine`): a hypothesis ``RuleBasedStateMachine``
  driving the layer under test beside the in-memory layer (the model) with the same calls:
  threads created, listed and deleted, runs queued, started, claimed, renewed, reclaimed
  after their lease ran out, finished with current and stale tokens and cancelled, appends
  (single and batched, with current and stale tokens) interleaved across threads and runs,
  deletes by run, pops and clears, checkpoint creates with fresh, stale and replayed
  expectations, and queries with valid and invalid arguments. The whole ``Result`` of every
  call is compared, and after every step each thread, its latest checkpoint and its whole
  transcript.
- **The example contract** (:class:`AgentsContract`): pytest tests of the documented
  semantics (payload round trips, the paging contract, single flight, sequence numbers after
  deletes, compare-and-swap, deletion). A test module subclasses it and says how to make the
  layer::

      class TestSqliteAgents(AgentsContract):
          @pytest.fixture
          def layer_factory(self, tmp_path):
              return lambda: sqlite(tmp_path / f"{uuid.uuid4().hex}.db")

  The factory is called once per test and per hypothesis example and must return a layer
  providing ``AgentStorage`` and ``ExecutionStorage`` (runs are checked against the ledger)
  on a fresh, empty store; the contract puts its own ``FixedClock`` on top.
- **Broken layers** (:func:`agents_broken_sequence_layer`, :func:`agents_broken_fencing_layer`,
  :func:`agents_broken_client_id_layer`, :func:`agents_broken_clear_layer`): a layer that
  hands out a deleted sequence number again, one whose ``finish`` ignores the fencing token,
  one that stores a retried client message id twice, one whose ``clear`` starts the
  sequence numbers again. The contract must fail on each; the suite's own tests check that.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, ClassVar

import attrs
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from returns.result import Failure, Result, Success

from runstore.layers import AGENT_STORAGE, CLOCK, Container, Layer, build, in_memory, merge
from runstore.layers._agents_memory import (
    InMemoryAgentRunStore,
    InMemoryAgentStorage,
    InMemoryMessageStore,
)
from runstore.layers._memory_database import InMemoryDatabase
from runstore.services._agents_rules import Known, MessageDraft, ThreadRow
from runstore.services.agents import (
    MAX_JSON_DEPTH,
    ActiveRunExists,
    AgentError,
    AgentRun,
    AgentRunFailure,
    AgentRunStatus,
    AgentStorage,
    InvalidQuery,
    JsonValue,
    Message,
    NewMessage,
    Role,
    ThreadStatus,
    TokenUsage,
)
from runstore.services.clock import Clock, FixedClock
from runstore.services.errors import Conflict, IllegalTransition, InvalidInput, NotFound
from runstore.services.ledger import (
    ExecutionFinished,
    ExecutionId,
    ExecutionStatus,
    ExecutionStorage,
    NewExecution,
    ProjectMismatch,
    StaleFencingToken,
)
from runstore.services.pagination import CursorCodec, Page
from runstore.testing._shared import LayerFactory

__all__ = [
    "AgentsContract",
    "AgentsMachine",
    "agents_broken_clear_layer",
    "agents_broken_client_id_layer",
    "agents_broken_fencing_layer",
    "agents_broken_sequence_layer",
    "agents_json_values",
    "agents_state_machine",
]


THREADS = ("t1", "t2", "t3")
RUNS = ("r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8")
CHECKPOINTS = ("c1", "c2", "c3", "c4")
PROJECTS = ("p1", "p2")
AGENTS = ("planner", "coder")
OWNERS = ("w1", "w2")
"""Owners of threads and workers of runs alike."""
LEASES = (1, 5_000, 60_000)
"""Leases the machine grants (ms); ``tick`` moves the clock past them."""
TOKENS = ("current", "current", "current", "stale", "zero")
"""Which token a fenced call presents (see ``AgentsMachine.token``)."""
CLIENT_IDS = ("m1", "m2", "m3")
"""Client message ids the machine uses (few, so that they repeat)."""
OPEN_EXECUTIONS = {"ex-p1": "p1", "ex-p2": "p2"}
"""Executions the machine creates and claims (running) at the start, per project."""
FINISHED_EXECUTION = "ex-p1-done"
"""An execution of ``p1`` that the machine finishes at the start."""
EXECUTIONS = (*OPEN_EXECUTIONS, FINISHED_EXECUTION, "ex-missing")
CURSORS = (
    CursorCodec("agent_messages", arity=2).encode(3, 0),
    CursorCodec("agent_messages", arity=2).encode(6, 1),
    CursorCodec("agent_messages", arity=2).encode(2, 7),
    CursorCodec("executions").encode(3),
    "3",
)
"""Cursors the machine passes: forward after 3, newest first before 6, and refused ones."""


def agents_json_values(max_leaves: int = 6) -> st.SearchStrategy[JsonValue]:
    """JSON values with awkward text (NUL, emoji, right-to-left), ints, finite floats, nesting."""
    text = st.text(
        alphabet=st.sampled_from('ab \x00\n"\\é😀שלום\u202e\u0000{}'), max_size=8
    ) | st.text(max_size=6)
    leaves: st.SearchStrategy[JsonValue] = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**70), max_value=2**70)
        | st.floats(allow_nan=False, allow_infinity=False)
        | text
    )
    return st.recursive(
        leaves,
        lambda children: (
            st.lists(children, max_size=3) | st.dictionaries(text, children, max_size=3)
        ),
        max_leaves=max_leaves,
    )


def _costs(valid: bool) -> st.SearchStrategy[Decimal | None]:
    costs = [Decimal("0"), Decimal("0.000000150"), Decimal("1E+3"), Decimal("12.3400")]
    return st.none() | st.sampled_from(costs if valid else [*costs, Decimal("-1")])


def _usage(valid: bool) -> st.SearchStrategy[TokenUsage]:
    counts = st.integers(min_value=0, max_value=10**6)
    usage = st.builds(TokenUsage, counts, counts, counts, counts)
    return usage if valid else usage | st.just(TokenUsage(-1, 0, 0, 0))


def _roles(valid: bool) -> st.SearchStrategy[str]:
    roles = [*(str(r) for r in Role), "critic"]
    return st.sampled_from(roles if valid else [*roles, "", "\ud800"])


def _contents(valid: bool) -> st.SearchStrategy[JsonValue]:
    if valid:
        return agents_json_values()
    return agents_json_values() | st.just("\ud800 lone") | st.just({"k": float("nan")})


def _new_messages(valid: bool = True) -> st.SearchStrategy[NewMessage]:
    """Messages without a run (the machine adds runs it knows); ``valid=False`` mixes in
    unstorable roles, content, usage, costs and run ids."""
    return st.builds(
        NewMessage,
        role=_roles(valid),
        content=_contents(valid),
        run_id=st.none() if valid else st.none() | st.sampled_from(RUNS),
        usage=_usage(valid),
        cost=_costs(valid),
        at=st.none() | st.integers(min_value=0, max_value=2**41),
        client_id=st.none() | st.sampled_from(CLIENT_IDS if valid else [*CLIENT_IDS, "\ud800"]),
        metadata=st.none()
        | st.dictionaries(st.sampled_from("ab"), agents_json_values(2), max_size=2)
        | (st.just({"k": float("nan")}) if not valid else st.nothing()),
    )


def _failures() -> st.SearchStrategy[AgentRunFailure | None]:
    return st.none() | st.builds(
        AgentRunFailure, st.sampled_from(["timeout", "tool_error"]), st.text(max_size=5)
    )


class AgentsMachine(RuleBasedStateMachine):
    """Drives the layer under test and the in-memory model with the same calls and compares
    every whole ``Result``. Bind it to a layer with :func:`agents_state_machine`."""

    layer_factory: ClassVar[LayerFactory]
    model_factory: ClassVar[LayerFactory]

    def __init__(self) -> None:
        super().__init__()
        self.clock = FixedClock()
        self._stack = ExitStack()
        self.live = self._open(type(self).layer_factory)
        self.model = self._open(type(self).model_factory)
        self.requests: list[dict[str, Any]] = []
        self.run_threads: dict[str, str] = {}
        self.used_runs: set[str] = set()
        self.tokens: dict[str, int] = {}
        """The latest fencing token of each run, as the model handed it out."""
        self.appends: list[tuple[str, NewMessage]] = []

    def _unused_run(self) -> str | None:
        """A run name no rule has used yet (None when all are), now marked used."""
        run = next((r for r in RUNS if r not in self.used_runs), None)
        if run is not None:
            self.used_runs.add(run)
        return run

    def _turn_run(self, thread: str) -> str | None:
        """Start an unused run on ``thread`` for a turn, cancelling the one running there."""
        run = self._unused_run()
        if run is None:
            return None
        current = self.model.threads.get(thread)
        if isinstance(current, Success) and current.unwrap().active_run_id is not None:
            active = current.unwrap().active_run_id
            self.run_call(lambda s: s.runs.cancel(active))
        self.start_run(run, thread, None)
        return run

    def _pick_run(self, pick: int | str) -> str:
        """A run the model knows (most often; ``pick`` below 8), any run name, or the run
        ``pick`` names (a scripted call)."""
        if isinstance(pick, str):
            return pick
        known = sorted(self.run_threads)
        return known[pick % len(known)] if known and pick < 8 else RUNS[pick % len(RUNS)]

    def token(self, run: str, which: str = "current") -> int:
        """The ``current`` token of ``run``, a ``stale`` one (one less) or ``zero``."""
        current = self.tokens.get(run, 0)
        return {"current": current, "stale": max(0, current - 1), "zero": 0}[which]

    def run_call(self, call: Callable[[AgentStorage], Result[Any, Any]]) -> Result[Any, Any]:
        """:meth:`both`, remembering the run's token and thread when it returns a run."""
        result = self.both(call)
        if isinstance(result, Success) and isinstance(result.unwrap(), AgentRun):
            run = result.unwrap()
            self.tokens[run.id] = run.fencing_token
            self.run_threads[run.id] = run.thread_id
        return result

    def _open(self, factory: LayerFactory) -> AgentStorage:
        layer = merge(factory(), Layer.value(CLOCK, self.clock))
        container: Container = self._stack.enter_context(build(layer))
        self._seed_executions(container.get(ExecutionStorage))
        storage: AgentStorage = container.get(AgentStorage)
        return storage

    @staticmethod
    def _seed_executions(ledger: ExecutionStorage) -> None:
        for execution_id, project in {**OPEN_EXECUTIONS, FINISHED_EXECUTION: "p1"}.items():
            created = ledger.create(
                NewExecution(project_id=project, name="turn", id=ExecutionId(execution_id))
            )
            assert isinstance(created, Success), created
        for project in ("p1", "p1", "p2"):
            claimed = ledger.claim(project, "worker", 60_000)
            assert isinstance(claimed, Success), claimed
        done = ExecutionId(FINISHED_EXECUTION)
        token = ledger.get(done).unwrap().fencing_token
        finished = ledger.finish(done, token, ExecutionStatus.SUCCEEDED)
        assert isinstance(finished, Success), finished

    def teardown(self) -> None:
        self._stack.close()

    def both(self, call: Callable[[AgentStorage], Result[Any, Any]]) -> Result[Any, Any]:
        """Make ``call`` on the layer and the model; assert the two Results are equal."""
        live = call(self.live)
        model = call(self.model)
        with contextlib.suppress(InvalidArgument):  # outside hypothesis (a scripted run)
            note(f"-> {model}")
        assert live == model, f"layer returned {live!r}\n   model returned {model!r}"
        return model

    # -- threads -----------------------------------------------------------------------------

    @initialize(projects=st.lists(st.sampled_from(PROJECTS), min_size=2, max_size=2))
    def first_threads(self, projects: list[str]) -> None:
        for thread, project in zip(THREADS, projects, strict=False):
            self._create_first(thread, project)

    def _create_first(self, thread: str, project: str) -> None:
        self.both(lambda s: s.threads.create(thread, project_id=project, title="first"))

    @rule(
        thread=st.sampled_from(THREADS),
        project=st.sampled_from(PROJECTS),
        title=st.sampled_from(["", "plan", "plan", "\x00 ☃ שלום", "\ud800"]),
        metadata=st.none()
        | st.dictionaries(st.sampled_from("ab"), agents_json_values(3), max_size=2),
        agent=st.none() | st.sampled_from(AGENTS),
        owner=st.none() | st.sampled_from(OWNERS),
    )
    def create_thread(
        self,
        thread: str,
        project: str,
        title: str,
        metadata: dict[str, JsonValue] | None,
        agent: str | None,
        owner: str | None,
    ) -> None:
        self.both(
            lambda s: s.threads.create(
                thread,
                project_id=project,
                title=title,
                metadata=metadata,
                agent_id=agent,
                owner_id=owner,
            )
        )

    @rule(
        thread=st.sampled_from(THREADS),
        title=st.none() | st.sampled_from(["renamed", "\ud800"]),
        status=st.none() | st.sampled_from(list(ThreadStatus)),
    )
    def update_thread(self, thread: str, title: str | None, status: ThreadStatus | None) -> None:
        self.both(lambda s: s.threads.update(thread, title=title, status=status))

    @rule(thread=st.sampled_from(THREADS))
    def delete_thread(self, thread: str) -> None:
        if isinstance(self.both(lambda s: s.threads.delete(thread)), Success):
            for run in [r for r, owner in self.run_threads.items() if owner == thread]:
                del self.run_threads[run]

    # -- runs --------------------------------------------------------------------------------

    @rule(
        run=st.sampled_from(RUNS),
        thread=st.sampled_from(THREADS),
        execution=st.none() | st.sampled_from(EXECUTIONS),
        owner=st.sampled_from(OWNERS),
        lease=st.sampled_from(LEASES),
    )
    def start_run(
        self, run: str, thread: str, execution: str | None, owner: str = "w1", lease: int = 60_000
    ) -> None:
        self.run_call(
            lambda s: s.runs.start(
                run, thread_id=thread, owner=owner, lease_ms=lease, execution_id=execution
            )
        )

    @rule(
        run=st.sampled_from(RUNS),
        thread=st.sampled_from(THREADS),
        execution=st.none() | st.sampled_from(EXECUTIONS),
    )
    def queue_run(self, run: str, thread: str, execution: str | None) -> None:
        self.run_call(lambda s: s.runs.queue(run, thread_id=thread, execution_id=execution))

    @rule(
        pick=st.integers(min_value=0, max_value=9),
        owner=st.sampled_from(OWNERS),
        lease=st.sampled_from(LEASES),
    )
    def claim_run(self, pick: int | str, owner: str, lease: int) -> None:
        run = self._pick_run(pick)
        self.run_call(lambda s: s.runs.claim(run, owner=owner, lease_ms=lease))

    @rule(
        pick=st.integers(min_value=0, max_value=9),
        owner=st.sampled_from(OWNERS),
        lease=st.sampled_from(LEASES),
    )
    def reclaim_run(self, pick: int | str, owner: str, lease: int) -> None:
        """A second worker taking over a run whose lease ran out (a crashed first worker)."""
        run = self._pick_run(pick)
        self.run_call(lambda s: s.runs.reclaim(run, owner=owner, lease_ms=lease))

    @rule(
        pick=st.integers(min_value=0, max_value=9),
        which=st.sampled_from(TOKENS),
        lease=st.sampled_from(LEASES),
    )
    def renew_run(self, pick: int | str, which: str, lease: int) -> None:
        run = self._pick_run(pick)
        token = self.token(run, which)
        self.run_call(lambda s: s.runs.renew(run, fencing_token=token, lease_ms=lease))

    @rule(
        pick=st.integers(min_value=0, max_value=9),
        status=st.sampled_from(list(AgentRunStatus)),
        failure=_failures(),
        which=st.sampled_from(TOKENS),
    )
    def finish_run(
        self, pick: int | str, status: AgentRunStatus, failure: AgentRunFailure | None, which: str
    ) -> None:
        run = self._pick_run(pick)
        token = self.token(run, which)
        self.run_call(
            lambda s: s.runs.finish(run, fencing_token=token, status=status, failure=failure)
        )

    @rule(
        pick=st.integers(min_value=0, max_value=9),
        action=st.sampled_from(["finish", "renew", "append", "checkpoint"]),
    )
    def late_worker(self, pick: int | str, action: str) -> None:
        """A worker whose run was reclaimed (or never held) writes with an older token: every
        fenced write is refused with ``StaleFencingToken`` and changes nothing."""
        run = self._pick_run(pick)
        token = self.token(run, "stale")
        thread = self.run_threads.get(run, THREADS[0])
        calls: dict[str, Callable[[AgentStorage], Result[Any, Any]]] = {
            "finish": lambda s: s.runs.finish(
                run, fencing_token=token, status=AgentRunStatus.SUCCEEDED
            ),
            "renew": lambda s: s.runs.renew(run, fencing_token=token, lease_ms=LEASES[-1]),
            "append": lambda s: s.messages.append(
                thread, role="assistant", content="late", run_id=run, fencing_token=token
            ),
            "checkpoint": lambda s: s.checkpoints.create(
                "c-late",
                thread_id=thread,
                run_id=run,
                fencing_token=token,
                summary="late",
                through_seq=1,
                observed_head_seq=2,
                expected_latest_id=None,
            ),
        }
        self.run_call(calls[action])

    @rule(pick=st.integers(min_value=0, max_value=9), failure=_failures())
    def cancel_run(self, pick: int | str, failure: AgentRunFailure | None) -> None:
        run = self._pick_run(pick)
        self.run_call(lambda s: s.runs.cancel(run, failure=failure))

    @rule(
        thread=st.sampled_from(THREADS),
        count=st.integers(min_value=1, max_value=3),
        status=st.none() | st.sampled_from([AgentRunStatus.SUCCEEDED, AgentRunStatus.CANCELLED]),
    )
    def turn(self, thread: str, count: int, status: AgentRunStatus | None) -> None:
        """A whole agent turn: start an unused run, append its messages, maybe finish it."""
        run = self._turn_run(thread)
        if run is None:
            return
        for index in range(count):
            self._append_step(thread, run, index)
        if status is not None:
            token = self.token(run)
            self.run_call(lambda s: s.runs.finish(run, fencing_token=token, status=status))

    @rule(
        thread=st.sampled_from(THREADS),
        late=st.lists(st.sampled_from(["finish", "renew", "append", "checkpoint"]), max_size=3),
        finish=st.booleans(),
    )
    def crash_and_reclaim(self, thread: str, late: list[str], finish: bool) -> None:
        """A worker claims a queued run and stalls past its lease; another reclaims the run,
        the first one's late writes are refused, and the second may finish it."""
        run = self._unused_run()
        if run is None:
            return
        self.queue_run(run, thread, None)
        self.claim_run(run, "w1", LEASES[0])
        self.tick(LEASES[0])
        self.reclaim_run(run, "w2", LEASES[-1])
        for action in late:
            self.late_worker(run, action)
        if finish:
            token = self.token(run)
            self.run_call(
                lambda s: s.runs.finish(run, fencing_token=token, status=AgentRunStatus.SUCCEEDED)
            )

    @rule(run=st.sampled_from(RUNS))
    def get_run(self, run: str) -> None:
        self.both(lambda s: s.runs.get(run))

    @rule(runs=st.lists(st.sampled_from([*RUNS, "\ud800"]), max_size=4))
    def get_runs(self, runs: list[str]) -> None:
        self.both(lambda s: s.runs.get_many(runs))

    @rule(
        thread=st.sampled_from(THREADS),
        status=st.none() | st.sampled_from([*AgentRunStatus, "bogus"]),
        limit=st.sampled_from([0, 1, 2, 1000]),
    )
    def page_runs(self, thread: str, status: Any, limit: int) -> None:
        """Follow ``next_cursor`` through a thread's runs: every page equal."""
        cursor: str | None = None
        while True:
            def listing(s: AgentStorage, c: str | None = cursor) -> Result[Any, Any]:
                return s.runs.list(thread, status=status, limit=limit, cursor=c)

            page = self.both(listing)
            if not isinstance(page, Success) or not page.unwrap().has_more:
                return
            cursor = page.unwrap().next_cursor

    @rule(
        project=st.sampled_from(PROJECTS),
        agent=st.none() | st.sampled_from(AGENTS),
        owner=st.none() | st.sampled_from(OWNERS),
        status=st.none() | st.sampled_from(list(ThreadStatus)),
        limit=st.sampled_from([0, 1, 2, 1000]),
    )
    def page_threads(
        self,
        project: str,
        agent: str | None,
        owner: str | None,
        status: ThreadStatus | None,
        limit: int,
    ) -> None:
        """Follow ``next_cursor`` through a project's threads: every page equal."""
        cursor: str | None = None
        while True:
            def listing(s: AgentStorage, c: str | None = cursor) -> Result[Any, Any]:
                return s.threads.list(
                    project, agent_id=agent, owner_id=owner, status=status, limit=limit, cursor=c
                )

            page = self.both(listing)
            if not isinstance(page, Success) or not page.unwrap().has_more:
                return
            cursor = page.unwrap().next_cursor

    # -- messages ----------------------------------------------------------------------------

    def _run_of(self, thread: str, data: st.DataObject) -> str | None:
        """A run started on ``thread`` (as the model knows it), or None."""
        runs = sorted(run for run, owner in self.run_threads.items() if owner == thread)
        return data.draw(st.none() | st.sampled_from(runs)) if runs else None

    @rule(
        thread=st.sampled_from(THREADS),
        message=_new_messages(),
        data=st.data(),
        which=st.sampled_from(TOKENS),
    )
    def append(self, thread: str, message: NewMessage, data: st.DataObject, which: str) -> None:
        self._append(thread, self._of_run(message, thread, data, which))

    def _of_run(
        self, message: NewMessage, thread: str, data: st.DataObject, which: str = "current"
    ) -> NewMessage:
        """``message`` written by a run of ``thread`` (or none), with that run's token."""
        run = self._run_of(thread, data)
        token = None if run is None else self.token(run, which)
        return attrs.evolve(message, run_id=run, fencing_token=token)

    @rule(thread=st.sampled_from(THREADS), message=_new_messages(valid=False))
    def append_anything(self, thread: str, message: NewMessage) -> None:
        self._append(thread, message)

    def _append(self, thread: str, message: NewMessage) -> None:
        self.appends.append((thread, message))
        self.both(
            lambda s: s.messages.append(
                thread,
                role=message.role,
                content=message.content,
                run_id=message.run_id,
                fencing_token=message.fencing_token,
                usage=message.usage,
                cost=message.cost,
                at=message.at,
                client_id=message.client_id,
                metadata=message.metadata,
            )
        )

    @rule(data=st.data(), later=st.booleans())
    def retry_append(self, data: st.DataObject, later: bool) -> None:
        """Repeat an earlier append exactly, as a retry after an unknown outcome would (maybe
        later, when the clock moved): with a client id it returns the stored message."""
        if not self.appends:
            return
        thread, message = data.draw(st.sampled_from(self.appends))
        if later:
            self.clock.advance(1)
        self._append(thread, message)

    @rule(
        thread=st.sampled_from(THREADS),
        count=st.integers(min_value=1, max_value=4),
        data=st.data(),
    )
    def append_for_run(self, thread: str, count: int, data: st.DataObject) -> None:
        """Valid appends by one run: the common case, so deletes by run have work to do."""
        run = self._run_of(thread, data)
        if run is None:
            return
        for index in range(count):
            self._append_step(thread, run, index)

    def _append_step(self, thread: str, run: str, index: int) -> None:
        content: JsonValue = {"step": index}
        token = self.token(run)
        self.both(
            lambda s: s.messages.append(
                thread, role="assistant", content=content, run_id=run, fencing_token=token
            )
        )

    @rule(
        thread=st.sampled_from(THREADS),
        messages=st.lists(_new_messages(), max_size=4),
        data=st.data(),
    )
    def append_many(self, thread: str, messages: list[NewMessage], data: st.DataObject) -> None:
        batch = [self._of_run(m, thread, data) for m in messages]
        self.both(lambda s: s.messages.append_many(thread, batch))

    @rule(
        thread=st.sampled_from(THREADS),
        messages=st.lists(_new_messages(valid=False), min_size=1, max_size=3),
    )
    def append_many_anything(self, thread: str, messages: list[NewMessage]) -> None:
        self.both(lambda s: s.messages.append_many(thread, messages))

    @rule(thread=st.sampled_from(THREADS), run=st.sampled_from(RUNS))
    def delete_by_run(self, thread: str, run: str) -> None:
        self.both(lambda s: s.messages.delete_by_run(thread, run))

    @rule(thread=st.sampled_from(THREADS), regenerate=st.booleans())
    def delete_newest_run(self, thread: str, regenerate: bool) -> None:
        """Delete the messages of the run that wrote the newest message, and maybe append a
        regenerated answer at once (a "retry the last turn" flow, and the case where a layer
        counting from the stored messages would hand the deleted numbers out again)."""
        page = self.model.messages.list(thread, limit=1000)
        runs = [m.run_id for m in page.unwrap().items] if isinstance(page, Success) else []
        newest = next((run for run in reversed(runs) if run is not None), None)
        if newest is not None:
            self.both(lambda s: s.messages.delete_by_run(thread, newest))
        if regenerate:
            self.both(lambda s: s.messages.append(thread, role="assistant", content="again"))

    @rule(thread=st.sampled_from(THREADS), again=st.booleans())
    def pop(self, thread: str, again: bool) -> None:
        """Pop the newest message (the Agents SDK's ``pop_item``), maybe appending at once:
        the popped number must not come back."""
        self.both(lambda s: s.messages.pop(thread))
        if again:
            self.both(lambda s: s.messages.append(thread, role="user", content="instead"))

    @rule(thread=st.sampled_from((*THREADS, "missing", "")), again=st.booleans())
    def clear(self, thread: str, again: bool) -> None:
        """Clear the transcript (``clear_session``), maybe appending at once."""
        self.both(lambda s: s.messages.clear(thread))
        if again:
            self.both(lambda s: s.messages.append(thread, role="user", content="anew"))

    @rule(
        thread=st.sampled_from(THREADS),
        after=st.none() | st.integers(min_value=-1, max_value=12),
        before=st.none() | st.integers(min_value=-1, max_value=14),
        roles=st.none()
        | st.just([])
        | st.just("user")
        | st.lists(st.sampled_from(["user", "assistant", "tool", "critic"]), min_size=1),
        limit=st.sampled_from([-1, 0, 1, 2, 3, 7, 1000, 1001]),
        cursor=st.none() | st.sampled_from(CURSORS),
    )
    def list_messages(
        self,
        thread: str,
        after: int | None,
        before: int | None,
        roles: Any,
        limit: int,
        cursor: str | None,
    ) -> None:
        self.both(
            lambda s: s.messages.list(
                thread, after_seq=after, before_seq=before, roles=roles, limit=limit, cursor=cursor
            )
        )

    @rule(
        thread=st.sampled_from(THREADS),
        forward=st.booleans(),
        roles=st.none() | st.just(["assistant"]),
        limit=st.integers(min_value=1, max_value=3),
    )
    def page_through(self, thread: str, forward: bool, roles: list[str] | None, limit: int) -> None:
        """Follow ``next_cursor`` to the end, forward or newest first: every page equal."""
        after, cursor = (0 if forward else None), None

        def listing(s: AgentStorage) -> Result[Any, Any]:
            return s.messages.list(thread, after_seq=after, roles=roles, limit=limit, cursor=cursor)

        page = self.both(listing)
        while isinstance(page, Success) and page.unwrap().has_more:
            after, cursor = None, page.unwrap().next_cursor
            page = self.both(listing)

    @rule(thread=st.sampled_from(THREADS), seq=st.integers(min_value=-1, max_value=12))
    def get_message(self, thread: str, seq: int) -> None:
        self.both(lambda s: s.messages.get(thread, seq))

    # -- checkpoints -------------------------------------------------------------------------

    @rule(
        checkpoint=st.sampled_from(CHECKPOINTS),
        thread=st.sampled_from(THREADS),
        any_run=st.sampled_from(RUNS),
        data=st.data(),
        summary=st.sampled_from(["so far"] * 6 + ["", "\ud800"]),
        boundary=st.sampled_from(["before_user", "before_user"])
        | st.integers(min_value=-1, max_value=3),
        head_drift=st.sampled_from([0, 0, 0, -1, 1]),
        expectation=st.sampled_from(["latest", "latest", "none", "stale"]),
        which=st.sampled_from(TOKENS),
        details=st.fixed_dictionaries(
            {},
            optional={
                "reason": st.sampled_from(["threshold", "manual", ""]),
                "format_version": st.sampled_from([1, 2, 0]),
                "tokens_before": st.none() | st.integers(min_value=-1, max_value=10**6),
                "tokens_after": st.none() | st.integers(min_value=0, max_value=10**5),
                "summary_model": st.none() | st.sampled_from(["summarizer-1", "\ud800"]),
            },
        ),
    )
    def create_checkpoint(
        self,
        checkpoint: str,
        thread: str,
        any_run: str,
        data: st.DataObject,
        summary: str,
        boundary: str | int,
        head_drift: int,
        expectation: str,
        which: str,
        details: dict[str, Any],
    ) -> None:
        """A compaction attempt: usually against what the model shows now and just before its
        newest user message (it should win), sometimes with another boundary, a moved head,
        a stale latest checkpoint (a lost race) or bad details."""
        run = self._run_of(thread, data) or any_run
        current = self.model.threads.get(thread)
        head = current.unwrap().head_seq if isinstance(current, Success) else 1
        latest = self.model.checkpoints.latest(thread)
        latest_id = latest.unwrap().id if isinstance(latest, Success) and latest.unwrap() else None
        expected = {"latest": latest_id, "none": None, "stale": "c-stale"}[expectation]
        if boundary == "before_user":
            page = self.model.messages.list(thread, roles=["user"], limit=1)
            users = page.unwrap().items if isinstance(page, Success) else ()
            through = users[-1].seq - 1 if users else head - 1
        else:
            through = head - int(boundary)
        request: dict[str, Any] = {
            "checkpoint_id": checkpoint,
            "thread_id": thread,
            "run_id": run,
            "fencing_token": self.token(run, which),
            "summary": summary,
            "through_seq": through,
            "observed_head_seq": head + head_drift,
            "expected_latest_id": expected,
            **details,
        }
        self.requests.append(request)
        self.both(lambda s: s.checkpoints.create(**request))

    @rule(
        thread=st.sampled_from(THREADS),
        checkpoint=st.sampled_from(CHECKPOINTS),
        tail=st.lists(st.sampled_from(["assistant", "tool", "user"]), max_size=3),
        reason=st.sampled_from(["threshold", "overflow"]),
        tokens=st.none() | st.integers(min_value=0, max_value=200_000),
    )
    def compact(
        self, thread: str, checkpoint: str, tail: list[str], reason: str, tokens: int | None
    ) -> None:
        """A whole compaction, as a runtime makes it: a turn of the run, the user's next
        message triggers it, and the checkpoint keeps that message (through the one before),
        against the latest checkpoint the model shows."""
        run = self._turn_run(thread)
        if run is None:
            return
        for role in ["user", "assistant", *tail, "user"]:
            said = NewMessage(role, {"said": role}, run, fencing_token=self.token(run))
            self._append(thread, said)
        got = self.model.threads.get(thread)
        head = got.unwrap().head_seq if isinstance(got, Success) else 2
        latest = self.model.checkpoints.latest(thread)
        latest_id = latest.unwrap().id if isinstance(latest, Success) and latest.unwrap() else None
        request: dict[str, Any] = {
            "checkpoint_id": checkpoint,
            "thread_id": thread,
            "run_id": run,
            "fencing_token": self.token(run),
            "summary": f"through {head - 1}",
            "through_seq": head - 1,
            "observed_head_seq": head,
            "expected_latest_id": latest_id,
            "reason": reason,
            "tokens_before": tokens,
            "tokens_after": None if tokens is None else tokens // 10,
            "summary_model": "summarizer-1",
        }
        self.requests.append(request)
        self.both(lambda s: s.checkpoints.create(**request))

    @rule(data=st.data())
    def replay_checkpoint(self, data: st.DataObject) -> None:
        """Repeat an earlier create exactly, as a retry after an unknown outcome would."""
        if not self.requests:
            return
        request = data.draw(st.sampled_from(self.requests))
        self.both(lambda s: s.checkpoints.create(**request))

    @rule(run=st.sampled_from(RUNS))
    def checkpoint_of_run(self, run: str) -> None:
        self.both(lambda s: s.checkpoints.for_run(run))

    @rule(ms=st.integers(min_value=1, max_value=10_000) | st.sampled_from(LEASES))
    def tick(self, ms: int) -> None:
        self.clock.advance(ms)

    # -- after every step --------------------------------------------------------------------

    @invariant()
    def same_state(self) -> None:
        for thread in THREADS:
            self._same_thread(thread)

    def _same_thread(self, thread: str) -> None:
        got = self.both(lambda s: s.threads.get(thread))
        self.both(lambda s: s.checkpoints.latest(thread))
        page = self.both(lambda s: s.messages.list(thread, after_seq=0, limit=1000))
        if isinstance(got, Success):
            info = got.unwrap()
            items = page.unwrap().items
            assert info.message_count == len(items)
            assert all(m.seq <= info.head_seq for m in items)
            assert [m.seq for m in items] == sorted({m.seq for m in items})
            expected_last = items[-1].created_at_ms if items else None
            assert info.last_message_at_ms == expected_last


def agents_state_machine(
    layer_factory: LayerFactory, model_factory: LayerFactory = in_memory
) -> type[AgentsMachine]:
    """Return an :class:`AgentsMachine` bound to ``layer_factory`` (the layer under test)
    and ``model_factory`` (the reference: the in-memory layer by default).

    Run it with ``hypothesis.stateful.run_state_machine_as_test(machine, settings=...)``.
    """

    class BoundAgentsMachine(AgentsMachine):
        pass

    BoundAgentsMachine.layer_factory = staticmethod(layer_factory)
    BoundAgentsMachine.model_factory = staticmethod(model_factory)
    return BoundAgentsMachine


# -- a deliberately broken layer ---------------------------------------------------------------


class _ReusingMessageStore(InMemoryMessageStore):
    """Hands out sequence numbers after the highest *stored* message, not after the counter:
    a delete of the newest messages makes their numbers come back."""

    def _head(self, thread: ThreadRow) -> int:
        stored = [
            seq for seq in range(1, thread.head_seq + 1) if (thread.id, seq) in self._s.messages
        ]
        return max(stored, default=0)


class _ReusingAgentStorage(InMemoryAgentStorage):
    message_store_class = _ReusingMessageStore


def agents_broken_sequence_layer() -> Layer:
    """The in-memory layer with one bug: sequence numbers of deleted newest messages are
    handed out again. The contract must fail on it."""
    return _broken(_ReusingAgentStorage)


class _RestartingMessageStore(InMemoryMessageStore):
    """Clears a transcript by starting its thread's counter again from 0: the numbers of
    cleared messages are handed out again."""

    def clear(self, thread_id: str) -> Result[int, AgentError]:
        cleared = super().clear(thread_id)
        row = self._s.threads.get(thread_id)
        if isinstance(cleared, Success) and row is not None:
            self._s.threads[thread_id] = attrs.evolve(row, head_seq=0)
        return cleared


class _RestartingAgentStorage(InMemoryAgentStorage):
    message_store_class = _RestartingMessageStore


def agents_broken_clear_layer() -> Layer:
    """The in-memory layer with one bug: ``messages.clear`` resets the thread's counter, so
    the next append reuses sequence number 1. The contract must fail on it."""
    return _broken(_RestartingAgentStorage)


class _UnfencedRunStore(InMemoryAgentRunStore):
    """Finishes a run whatever token is presented: a stale worker's finish goes through."""

    def finish(
        self,
        run_id: str,
        *,
        fencing_token: int,
        status: AgentRunStatus,
        failure: AgentRunFailure | None = None,
        at: datetime | int | None = None,
    ) -> Result[AgentRun, AgentError]:
        row = self._s.runs.get(run_id)
        token = fencing_token if row is None else row.fencing_token
        return super().finish(run_id, fencing_token=token, status=status, failure=failure, at=at)


class _UnfencedAgentStorage(InMemoryAgentStorage):
    run_store_class = _UnfencedRunStore


def _broken(storage: type[InMemoryAgentStorage]) -> Layer:
    def factory(c: Container) -> AgentStorage:
        return storage(c.get(InMemoryDatabase), c.get(Clock), c.get(ExecutionStorage))

    return merge(
        in_memory(),
        Layer.service(
            AGENT_STORAGE, factory, requires=(InMemoryDatabase, Clock, ExecutionStorage)
        ),
    )


class _ForgetfulMessageStore(InMemoryMessageStore):
    """Never looks a client id up: a retried append is stored again as a new message."""

    def _known(self, thread_id: str, drafts: Sequence[MessageDraft]) -> Known:
        return {}


class _ForgetfulAgentStorage(InMemoryAgentStorage):
    message_store_class = _ForgetfulMessageStore


def agents_broken_client_id_layer() -> Layer:
    """The in-memory layer with one bug: an append retried with the same client message id
    stores the message twice. The contract must fail on it."""
    return _broken(_ForgetfulAgentStorage)


def agents_broken_fencing_layer() -> Layer:
    """The in-memory layer with one bug: ``runs.finish`` ignores the fencing token, so a
    worker whose run was reclaimed can still finish it. The contract must fail on it."""
    return _broken(_UnfencedAgentStorage)


# -- the example contract ----------------------------------------------------------------------

EIGHT_MB = 8 * 1024 * 1024
_FIXTURES = [HealthCheck.function_scoped_fixture, HealthCheck.differing_executors]
"""The health checks a property over the ``layer_factory`` fixture suppresses (it builds a
fresh layer per example)."""
LEASE = 30_000
"""The lease the example tests grant (ms)."""


def _start(agents: AgentStorage, run: str, *, execution_id: str | None = None) -> AgentRun:
    """Start ``run`` on thread ``t`` for worker ``w``."""
    return agents.runs.start(
        run, thread_id="t", owner="w", lease_ms=LEASE, execution_id=execution_id
    ).unwrap()


def _finish(agents: AgentStorage, run: AgentRun) -> AgentRun:
    """Finish ``run`` as succeeded with its token."""
    return agents.runs.finish(
        run.id, fencing_token=run.fencing_token, status=AgentRunStatus.SUCCEEDED
    ).unwrap()


def _seq(popped: Result[Message | None, AgentError]) -> int | None:
    """The sequence number of a popped message (None: nothing was popped)."""
    message = popped.unwrap()
    return None if message is None else message.seq


class AgentsContract:
    """Example tests of the documented agent semantics; subclass and provide ``layer_factory``
    (a fixture returning a factory of fresh layers) or override :meth:`make_layer`."""

    def make_layer(self) -> Layer:
        """Return a fresh layer providing ``AgentStorage`` and ``ExecutionStorage``."""
        raise NotImplementedError("override make_layer or the layer_factory fixture")

    @pytest.fixture
    def layer_factory(self) -> LayerFactory:
        """The factory of fresh layers under test."""
        return self.make_layer

    @pytest.fixture
    def clock(self) -> FixedClock:
        """The clock the contract controls."""
        return FixedClock()

    @pytest.fixture
    def container(self, layer_factory: LayerFactory, clock: FixedClock) -> Iterator[Container]:
        """A built container of the layer under test with the contract's clock."""
        with build(merge(layer_factory(), Layer.value(CLOCK, clock))) as built:
            yield built

    @pytest.fixture
    def agents(self, container: Container) -> AgentStorage:
        """The agent storage under test, with thread ``t`` (project ``p``) created."""
        storage: AgentStorage = container.get(AgentStorage)
        storage.threads.create("t", project_id="p", title="thread").unwrap()
        return storage

    @pytest.fixture
    def ledger(self, container: Container) -> ExecutionStorage:
        """The execution ledger of the same container."""
        ledger: ExecutionStorage = container.get(ExecutionStorage)
        return ledger

    # -- payloads ----------------------------------------------------------------------------

    @pytest.mark.parametrize(
        "content",
        [
            "nul \x00 inside",
            "emoji 😀👩‍👩‍👧 and RTL שלום עולם \u202eevil",
            {"parts": [{"type": "text", "text": "\x00\u200f"}], "n": -0.0, "big": 2**80},
            [1, 1.0, True, None, "1"],
        ],
    )
    def test_content_round_trips_exactly(self, agents: AgentStorage, content: JsonValue) -> None:
        stored = agents.messages.append("t", role="user", content=content).unwrap()
        assert stored.content == content
        read = agents.messages.get("t", stored.seq).unwrap()
        assert read == stored
        assert repr(read.content) == repr(content)

    def test_eight_megabyte_message_round_trips(self, agents: AgentStorage) -> None:
        text = ("0123456789abcdef" * (EIGHT_MB // 16))[:-1] + "😀"
        stored = agents.messages.append("t", role="tool", content={"output": text}).unwrap()
        page = agents.messages.list("t", limit=1).unwrap()
        assert page.items == (stored,)
        content = page.items[0].content
        assert isinstance(content, dict)
        assert content["output"] == text

    @pytest.mark.parametrize(
        ("field", "kwargs"),
        [
            ("content", {"content": "lone \ud800 surrogate"}),
            ("content", {"content": {"k\udfff": 1}}),
            ("role", {"role": "\ud83d"}),
            ("content", {"content": float("inf")}),
            ("content", {"content": (1, 2)}),
            ("content", {"content": {1: "int key"}}),
            ("content", {"content": Decimal("1")}),
            ("cost", {"cost": 0.1}),
            ("cost", {"cost": Decimal("NaN")}),
            ("cost", {"cost": Decimal("-0.01")}),
            ("usage.output", {"usage": TokenUsage(output=-1)}),
            ("at", {"at": datetime(2024, 1, 1)}),
            ("role", {"role": ""}),
        ],
    )
    def test_unstorable_input_is_refused_and_nothing_is_written(
        self, agents: AgentStorage, field: str, kwargs: dict[str, Any]
    ) -> None:
        arguments: dict[str, Any] = {"role": "user", "content": "ok", **kwargs}
        result = agents.messages.append("t", **arguments)
        assert isinstance(result, Failure)
        error = result.failure()
        assert isinstance(error, InvalidInput)
        assert error.field == field
        thread = agents.threads.get("t").unwrap()
        assert (thread.head_seq, thread.message_count) == (0, 0)
        assert agents.messages.append("t", role="user", content="next").unwrap().seq == 1

    def test_too_deep_json_is_refused(self, agents: AgentStorage) -> None:
        deep: JsonValue = []
        for _ in range(MAX_JSON_DEPTH + 1):
            deep = [deep]
        result = agents.messages.append("t", role="user", content=deep)
        assert isinstance(result, Failure)
        assert isinstance(result.failure(), InvalidInput)

    def test_lone_surrogates_are_refused_in_every_text_field(self, agents: AgentStorage) -> None:
        bad = "x\ud800"
        results = [
            agents.threads.create(bad, project_id="p"),
            agents.threads.create("t2", project_id=bad),
            agents.threads.create("t2", project_id="p", title=bad),
            agents.threads.create("t2", project_id="p", metadata={bad: 1}),
            agents.threads.update("t", title=bad),
            agents.runs.start(bad, thread_id="t", owner="w", lease_ms=LEASE),
            agents.messages.list("t", roles=[bad]),
        ]
        for result in results:
            assert isinstance(result, Failure)
            assert isinstance(result.failure(), InvalidInput | InvalidQuery), result
        assert isinstance(agents.threads.get("t2"), Failure)

    def test_cost_and_usage_are_exact(self, agents: AgentStorage) -> None:
        costs = [Decimal("0.000000150"), Decimal("1E+3"), Decimal("12.3400"), Decimal(7)]
        for cost in costs:
            usage = TokenUsage(input=2**40, output=3, cache_read=4, cache_write=5)
            agents.messages.append("t", role="assistant", content="c", cost=cost, usage=usage)
        items = agents.messages.list("t", after_seq=0).unwrap().items
        assert [str(m.cost) for m in items] == [str(c) for c in costs]
        assert items[0].usage == TokenUsage(2**40, 3, 4, 5)

    def test_times_take_aware_datetimes_and_epoch_ms(self, agents: AgentStorage) -> None:
        eastern = timezone(timedelta(hours=-5))
        aware = datetime(2024, 5, 1, 7, 0, 0, 123000, tzinfo=eastern)
        stored = agents.messages.append("t", role="user", content="a", at=aware).unwrap()
        assert stored.created_at_ms == int(aware.astimezone(UTC).timestamp() * 1000)
        assert (
            agents.messages.append("t", role="user", content="b", at=5).unwrap().created_at_ms == 5
        )
        assert agents.threads.get("t").unwrap().last_message_at_ms == 5

    # -- paging ------------------------------------------------------------------------------

    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [
            ({"limit": 0}, "limit"),
            ({"limit": -5}, "limit"),
            ({"limit": 1001}, "limit"),
            ({"limit": True}, "limit"),
            ({"after_seq": -1}, "after_seq"),
            ({"before_seq": -1}, "before_seq"),
            ({"roles": "user"}, "roles"),
        ],
    )
    def test_invalid_queries(
        self, agents: AgentStorage, kwargs: dict[str, Any], field: str
    ) -> None:
        result = agents.messages.list("t", **kwargs)
        assert isinstance(result, Failure)
        error = result.failure()
        assert isinstance(error, InvalidQuery)
        assert error.field == field
        missing = agents.messages.list("nope", **kwargs)
        assert missing == result, "query arguments are checked before the thread"

    def test_an_empty_roles_filter_is_an_empty_page(self, agents: AgentStorage) -> None:
        agents.messages.append_many("t", [NewMessage(role="user", content=i) for i in range(3)])
        bounds: list[dict[str, Any]] = [{}, {"after_seq": 0}, {"before_seq": 3}]
        for kwargs in bounds:
            assert agents.messages.list("t", roles=[], **kwargs) == Success(Page((), False))
        assert agents.messages.list("t", roles=set()) == Success(Page((), False))
        assert agents.messages.list("nope", roles=[]) == Failure(NotFound("thread", "nope"))

    def test_newest_n_ascending_and_paging_both_ways(self, agents: AgentStorage) -> None:
        drafts = [
            NewMessage(role="user" if i % 3 == 0 else "assistant", content=i) for i in range(23)
        ]
        agents.messages.append_many("t", drafts).unwrap()
        newest = agents.messages.list("t", limit=5).unwrap()
        assert [m.seq for m in newest.items] == [19, 20, 21, 22, 23]
        assert newest.has_more
        assert newest.next_cursor is not None
        seen: list[int] = []
        page = agents.messages.list("t", after_seq=0, limit=5).unwrap()
        while True:
            seen.extend(m.seq for m in page.items)
            if not page.has_more:
                assert page.next_cursor is None
                break
            assert page.next_cursor is not None
            page = agents.messages.list("t", cursor=page.next_cursor, limit=5).unwrap()
        assert seen == list(range(1, 24))
        back: list[int] = []
        cursor: str | None = None
        while True:
            page = agents.messages.list("t", roles=["user"], limit=3, cursor=cursor).unwrap()
            back = [m.seq for m in page.items] + back
            if not page.has_more:
                break
            cursor = page.next_cursor
            assert cursor is not None
        assert back == list(range(1, 24, 3))
        window = agents.messages.list("t", after_seq=4, before_seq=9, limit=10).unwrap()
        assert [m.seq for m in window.items] == [5, 6, 7, 8]
        assert not window.has_more
        first = agents.messages.list("t", after_seq=4, before_seq=9, limit=2).unwrap()
        assert first.next_cursor is not None
        rest = agents.messages.list("t", before_seq=9, limit=10, cursor=first.next_cursor)
        assert [m.seq for m in rest.unwrap().items] == [7, 8], "a cursor keeps the window"

    def test_cursors_are_opaque_and_refused_when_foreign(self, agents: AgentStorage) -> None:
        agents.messages.append_many("t", [NewMessage(role="user", content=i) for i in range(6)])
        forward = agents.messages.list("t", after_seq=0, limit=2).unwrap().next_cursor
        newest = agents.messages.list("t", limit=2).unwrap().next_cursor
        assert forward is not None
        assert newest is not None
        assert "3" != forward != newest, "not the bare sequence number"
        edited = forward[:-1] + ("0" if forward[-1] != "0" else "1")
        refused: list[dict[str, Any]] = [
            {"cursor": "2"},
            {"cursor": edited},
            {"cursor": CursorCodec("executions").encode(2)},
            {"cursor": forward, "after_seq": 0},
            {"cursor": newest, "before_seq": 5},
            {"cursor": newest, "after_seq": 1},
        ]
        for kwargs in refused:
            result = agents.messages.list("t", limit=2, **kwargs)
            assert isinstance(result, Failure), kwargs
            assert result.failure() == InvalidQuery("cursor", result.failure().reason), kwargs
            assert agents.messages.list("nope", limit=2, **kwargs) == result, "before the thread"

    # -- runs --------------------------------------------------------------------------------

    def test_single_flight(self, agents: AgentStorage) -> None:
        first = _start(agents, "r1")
        assert first.status is AgentRunStatus.RUNNING
        second = agents.runs.start("r2", thread_id="t", owner="w", lease_ms=LEASE)
        assert second == Failure(ActiveRunExists("t", "r1"))
        retry = agents.runs.start("r1", thread_id="t", owner="w", lease_ms=LEASE)
        assert retry == Success(first), "a retry is safe"
        assert agents.threads.get("t").unwrap().active_run_id == "r1"
        _finish(agents, first)
        assert agents.threads.get("t").unwrap().active_run_id is None
        assert _start(agents, "r2").status is AgentRunStatus.RUNNING

    def test_finish_rules(self, agents: AgentStorage) -> None:
        token = _start(agents, "r1").fencing_token
        failed = agents.runs.finish("r1", fencing_token=token, status=AgentRunStatus.FAILED)
        assert isinstance(failed, Failure)
        assert isinstance(failed.failure(), InvalidInput)
        failure = AgentRunFailure("timeout", "took too long", {"after_ms": 30_000})
        done = agents.runs.finish(
            "r1", fencing_token=token, status=AgentRunStatus.FAILED, failure=failure
        ).unwrap()
        assert done.failure == failure
        assert done.lease_expires_at_ms is None
        again = agents.runs.finish(
            "r1", fencing_token=token, status=AgentRunStatus.FAILED, failure=failure
        )
        assert again == Success(done)
        other = agents.runs.finish("r1", fencing_token=token, status=AgentRunStatus.SUCCEEDED)
        assert other == Failure(IllegalTransition("agent_run", "r1", "failed", "succeeded"))

    def test_runs_are_checked_against_the_ledger(
        self, agents: AgentStorage, ledger: ExecutionStorage
    ) -> None:
        mine = ledger.create(NewExecution(project_id="p", name="turn", id=ExecutionId("ex-mine")))
        theirs = ledger.create(
            NewExecution(project_id="q", name="turn", id=ExecutionId("ex-theirs"))
        )
        assert isinstance(mine, Success)
        assert isinstance(theirs, Success)
        missing = agents.runs.queue("r0", thread_id="t", execution_id="ex-none")
        assert missing == Failure(NotFound("execution", "ex-none"))
        wrong = agents.runs.queue("r1", thread_id="t", execution_id="ex-theirs")
        assert wrong == Failure(ProjectMismatch("execution", "ex-theirs", "p", "q"))
        ledger.cancel(ExecutionId("ex-theirs")).unwrap()
        agents.threads.create("tq", project_id="q").unwrap()
        finished = agents.runs.queue("r2", thread_id="tq", execution_id="ex-theirs")
        assert finished == Failure(ExecutionFinished("ex-theirs", "cancelled"))
        run = _start(agents, "r3", execution_id="ex-mine")
        assert (run.execution_id, run.project_id) == ("ex-mine", "p")
        agents.runs.queue("r4", thread_id="t", execution_id="ex-mine").unwrap()
        _finish(agents, run)
        ledger.cancel(ExecutionId("ex-mine")).unwrap()
        late = agents.runs.claim("r4", owner="w", lease_ms=LEASE)
        assert late == Failure(ExecutionFinished("ex-mine", "cancelled")), "checked at claim too"

    # -- client message ids and metadata -----------------------------------------------------

    def test_a_client_id_makes_an_append_safe_to_repeat(
        self, agents: AgentStorage, clock: FixedClock
    ) -> None:
        content: JsonValue = {"text": "hi", "parts": [1, 2]}
        meta: dict[str, JsonValue] = {"source": "web", "trace": {"id": 7}}
        first = agents.messages.append(
            "t", role="user", content=content, client_id="c-1", metadata=meta
        ).unwrap()
        assert (first.client_id, first.metadata) == ("c-1", meta)
        clock.advance(5_000)
        reordered: JsonValue = {"parts": [1, 2], "text": "hi"}
        again = agents.messages.append(
            "t", role="user", content=reordered, client_id="c-1", metadata=dict(meta)
        )
        assert again == Success(first), "the stored message, with its seq and time"
        assert agents.threads.get("t").unwrap().head_seq == 1, "nothing stored twice"
        other = agents.messages.append("t", role="user", content="else", client_id="c-1")
        assert other == Failure(
            Conflict("message", "c-1", "client id used for another message", actual="1")
        )
        batch = agents.messages.append_many(
            "t",
            [
                NewMessage("user", content, client_id="c-1", metadata=meta),
                NewMessage("assistant", "new", client_id="c-2"),
                NewMessage("assistant", "new", client_id="c-2"),
                NewMessage("tool", "plain"),
            ],
        ).unwrap()
        assert [m.seq for m in batch] == [1, 2, 2, 3]
        assert batch[0] == first
        assert agents.threads.get("t").unwrap().message_count == 3
        twice = [NewMessage("user", "x", client_id="c-3"), NewMessage("user", "y", client_id="c-3")]
        clash = agents.messages.append_many("t", twice)
        assert clash == Failure(
            Conflict("message", "c-3", "client id used for another message", actual="4")
        )
        assert agents.threads.get("t").unwrap().head_seq == 3, "a refused batch writes nothing"
        assert agents.messages.get("t", 1).unwrap() == first
        page = agents.messages.list("t", after_seq=0).unwrap()
        assert [(m.client_id, m.metadata) for m in page.items] == [
            ("c-1", meta), ("c-2", {}), (None, {})
        ]

    def test_a_client_id_is_per_thread_and_freed_with_its_message(
        self, agents: AgentStorage
    ) -> None:
        agents.threads.create("u", project_id="p").unwrap()
        token = _start(agents, "r1").fencing_token
        mine = agents.messages.append(
            "t", role="a", content=1, run_id="r1", fencing_token=token, client_id="same"
        ).unwrap()
        theirs = agents.messages.append("u", role="a", content=2, client_id="same").unwrap()
        assert (mine.seq, theirs.seq) == (1, 1)
        agents.messages.delete_by_run("t", "r1").unwrap()
        again = agents.messages.append("t", role="a", content=3, client_id="same").unwrap()
        assert again.seq == 2, "the id is free once its message is deleted"

    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [
            ({"client_id": ""}, "client_id"),
            ({"client_id": "x" * 257}, "client_id"),
            ({"metadata": ["not", "an", "object"]}, "metadata"),
            ({"metadata": {"k": float("nan")}}, "metadata['k']"),
        ],
    )
    def test_bad_client_ids_and_metadata_are_refused(
        self, agents: AgentStorage, kwargs: dict[str, Any], field: str
    ) -> None:
        result = agents.messages.append("t", role="user", content="x", **kwargs)
        assert isinstance(result, Failure)
        assert result.failure() == InvalidInput(field, result.failure().reason)
        assert agents.threads.get("t").unwrap().head_seq == 0

    # -- claims, leases and fencing tokens ---------------------------------------------------

    def test_queue_claim_renew_reclaim(self, agents: AgentStorage, clock: FixedClock) -> None:
        queued = agents.runs.queue("r1", thread_id="t").unwrap()
        assert (queued.status, queued.fencing_token, queued.attempts) == ("queued", 0, 0)
        assert (queued.owner, queued.started_at_ms, queued.lease_expires_at_ms) == (None,) * 3
        assert agents.threads.get("t").unwrap().active_run_id is None, "queued runs hold no slot"
        held = agents.runs.claim("r1", owner="w1", lease_ms=LEASE).unwrap()
        now = clock.now_ms()
        assert (held.status, held.owner, held.attempts) == ("running", "w1", 1)
        assert (held.started_at_ms, held.lease_expires_at_ms) == (now, now + LEASE)
        assert held.fencing_token > 0
        assert agents.runs.claim("r1", owner="w1", lease_ms=LEASE) == Success(held), "a retry"
        assert agents.runs.claim("r1", owner="w2", lease_ms=LEASE) == Failure(
            IllegalTransition("agent_run", "r1", "running", "running")
        )
        clock.advance(LEASE // 2)
        renewed = agents.runs.renew("r1", fencing_token=held.fencing_token, lease_ms=LEASE)
        assert renewed.unwrap().lease_expires_at_ms == clock.now_ms() + LEASE
        early = agents.runs.reclaim("r1", owner="w2", lease_ms=LEASE)
        expiry = str(clock.now_ms() + LEASE)
        assert early == Failure(
            Conflict("agent_run", "r1", "lease is still held", expiry, str(clock.now_ms()))
        )
        clock.advance(LEASE)
        taken = agents.runs.reclaim("r1", owner="w2", lease_ms=LEASE).unwrap()
        assert (taken.owner, taken.attempts, taken.started_at_ms) == ("w2", 2, now)
        assert taken.fencing_token > held.fencing_token
        stale = Failure(
            StaleFencingToken("r1", held.fencing_token, taken.fencing_token, entity="agent run")
        )
        assert agents.runs.renew("r1", fencing_token=held.fencing_token, lease_ms=1) == stale
        done = agents.runs.finish(
            "r1", fencing_token=held.fencing_token, status=AgentRunStatus.SUCCEEDED
        )
        assert done == stale
        assert agents.runs.get("r1") == Success(taken), "a stale finish writes nothing"
        assert _finish(agents, taken).status is AgentRunStatus.SUCCEEDED
        assert agents.runs.renew("r1", fencing_token=taken.fencing_token, lease_ms=1) == Failure(
            Conflict("agent_run", "r1", "only a running run has a lease", "running", "succeeded")
        )

    def test_stale_writes_on_behalf_of_a_run_write_nothing(
        self, agents: AgentStorage, clock: FixedClock
    ) -> None:
        held = agents.runs.start("r1", thread_id="t", owner="w1", lease_ms=1).unwrap()
        agents.messages.append(
            "t", role="assistant", content="a", run_id="r1", fencing_token=held.fencing_token
        ).unwrap()
        clock.advance(1)
        taken = agents.runs.reclaim("r1", owner="w2", lease_ms=LEASE).unwrap()
        before = agents.threads.get("t").unwrap()
        stale = Failure(
            StaleFencingToken("r1", held.fencing_token, taken.fencing_token, entity="agent run")
        )
        late = NewMessage("assistant", "late", run_id="r1", fencing_token=held.fencing_token)
        fresh = NewMessage("user", "fine")
        assert agents.messages.append_many("t", [fresh, late]) == stale
        checkpoint = agents.checkpoints.create(
            "c1",
            thread_id="t",
            run_id="r1",
            fencing_token=held.fencing_token,
            summary="s",
            through_seq=1,
            observed_head_seq=2,
            expected_latest_id=None,
        )
        assert checkpoint == stale
        assert agents.threads.get("t").unwrap() == before
        assert agents.checkpoints.latest("t") == Success(None)
        good = attrs.evolve(late, fencing_token=taken.fencing_token)
        assert [m.seq for m in agents.messages.append_many("t", [fresh, good]).unwrap()] == [2, 3]

    def test_a_crashed_worker_does_not_hold_the_slot_forever(
        self, agents: AgentStorage, clock: FixedClock
    ) -> None:
        crashed = agents.runs.start("r1", thread_id="t", owner="w1", lease_ms=1_000).unwrap()
        agents.runs.queue("r2", thread_id="t").unwrap()
        assert agents.runs.claim("r2", owner="w2", lease_ms=LEASE) == Failure(
            ActiveRunExists("t", "r1")
        )
        clock.advance(1_000)
        taken = agents.runs.reclaim("r1", owner="w2", lease_ms=LEASE).unwrap()
        assert taken.fencing_token > crashed.fencing_token
        failure = AgentRunFailure("worker_lost", "the lease of w1 expired")
        agents.runs.finish(
            "r1", fencing_token=taken.fencing_token, status=AgentRunStatus.FAILED, failure=failure
        ).unwrap()
        claimed = agents.runs.claim("r2", owner="w2", lease_ms=LEASE).unwrap()
        assert agents.threads.get("t").unwrap().active_run_id == "r2"
        assert claimed.fencing_token > taken.fencing_token, "tokens only grow"

    def test_an_expired_lease_that_was_not_reclaimed_keeps_its_token(
        self, agents: AgentStorage, clock: FixedClock
    ) -> None:
        held = agents.runs.start("r1", thread_id="t", owner="w1", lease_ms=1).unwrap()
        clock.advance(10)
        token = held.fencing_token
        agents.messages.append(
            "t", role="assistant", content="x", run_id="r1", fencing_token=token
        ).unwrap()
        assert agents.runs.renew("r1", fencing_token=token, lease_ms=LEASE).unwrap().owner == "w1"

    def test_tokens_only_grow_across_threads(self, agents: AgentStorage) -> None:
        agents.threads.create("u", project_id="q").unwrap()
        tokens = []
        for index in range(3):
            for thread in ("t", "u"):
                run = agents.runs.start(
                    f"r{index}{thread}", thread_id=thread, owner="w", lease_ms=LEASE
                ).unwrap()
                tokens.append(run.fencing_token)
                _finish(agents, run)
        assert tokens == sorted(set(tokens))

    def test_cancel_is_the_operators_call(self, agents: AgentStorage) -> None:
        queued = agents.runs.queue("rq", thread_id="t").unwrap()
        cancelled = agents.runs.cancel("rq").unwrap()
        assert (cancelled.status, cancelled.started_at_ms) == ("cancelled", None)
        assert agents.runs.cancel("rq") == Success(cancelled), "a retry"
        assert agents.runs.claim("rq", owner="w", lease_ms=LEASE) == Failure(
            IllegalTransition("agent_run", "rq", "cancelled", "running")
        )
        held = _start(agents, "r1")
        assert queued.seq < held.seq
        agents.runs.cancel("r1").unwrap()
        assert agents.threads.get("t").unwrap().active_run_id is None
        late = agents.runs.finish(
            "r1", fencing_token=held.fencing_token, status=AgentRunStatus.SUCCEEDED
        )
        assert late == Failure(IllegalTransition("agent_run", "r1", "cancelled", "succeeded"))
        never = agents.runs.queue("rn", thread_id="t").unwrap()
        unclaimed = agents.runs.finish("rn", fencing_token=0, status=AgentRunStatus.SUCCEEDED)
        assert unclaimed == Failure(IllegalTransition("agent_run", "rn", "queued", "succeeded"))
        assert never.fencing_token == 0

    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [
            ({"run_id": "r1"}, "fencing_token"),
            ({"fencing_token": 1}, "fencing_token"),
            ({"run_id": "r1", "fencing_token": -1}, "fencing_token"),
            ({"run_id": "r1", "fencing_token": True}, "fencing_token"),
        ],
    )
    def test_a_message_of_a_run_carries_its_token(
        self, agents: AgentStorage, kwargs: dict[str, Any], field: str
    ) -> None:
        _start(agents, "r1")
        result = agents.messages.append("t", role="assistant", content="x", **kwargs)
        assert isinstance(result, Failure)
        assert result.failure() == InvalidInput(field, result.failure().reason)

    def test_only_a_running_run_writes(self, agents: AgentStorage) -> None:
        agents.runs.queue("rq", thread_id="t").unwrap()
        queued = agents.messages.append("t", role="x", content=1, run_id="rq", fencing_token=0)
        assert queued == Failure(
            Conflict("agent_run", "rq", "run is not running", "running", "queued")
        )
        run = _finish(agents, _start(agents, "r1"))
        late = agents.messages.append(
            "t", role="x", content=1, run_id="r1", fencing_token=run.fencing_token
        )
        assert late == Failure(
            Conflict("agent_run", "r1", "run is not running", "running", "succeeded")
        )

    @pytest.mark.parametrize(
        ("call", "error"),
        [
            (lambda a: a.runs.claim("r", owner="w", lease_ms=0), InvalidInput),
            (lambda a: a.runs.claim("r", owner="w", lease_ms=86_400_001), InvalidInput),
            (lambda a: a.runs.claim("r", owner="", lease_ms=1), InvalidInput),
            (lambda a: a.runs.renew("r", fencing_token=-1, lease_ms=1), InvalidInput),
            (lambda a: a.runs.start("r", thread_id="t", owner="w", lease_ms=1.5), InvalidInput),
            (lambda a: a.runs.list("t", limit=0), InvalidQuery),
            (lambda a: a.runs.list("t", status="bogus"), InvalidQuery),
            (lambda a: a.runs.list("t", cursor="x"), InvalidQuery),
            (lambda a: a.runs.get_many("r1"), InvalidQuery),
            (lambda a: a.runs.get_many(["ok", "\ud800"]), InvalidInput),
            (lambda a: a.threads.list("p", limit=1001), InvalidQuery),
            (lambda a: a.threads.list("p", cursor=CURSORS[0]), InvalidQuery),
            (lambda a: a.threads.list("p", agent_id="\ud800"), InvalidInput),
        ],
    )
    def test_bad_run_and_listing_arguments_are_refused(
        self, agents: AgentStorage, call: Callable[[AgentStorage], Result[Any, Any]], error: type
    ) -> None:
        result = call(agents)
        assert isinstance(result, Failure)
        assert isinstance(result.failure(), error), result
        assert agents.runs.list("t").unwrap().items == ()

    def test_threads_are_listed_by_agent_status_and_owner(self, agents: AgentStorage) -> None:
        specs = [("a1", "planner", "ann"), ("a2", "coder", "ann"), ("a3", "planner", "bob")]
        for thread, agent, owner in specs:
            agents.threads.create(thread, project_id="p", agent_id=agent, owner_id=owner).unwrap()
        agents.threads.create("other", project_id="q", agent_id="planner").unwrap()
        agents.threads.update("a3", status=ThreadStatus.ARCHIVED).unwrap()

        def ids(**kwargs: Any) -> list[str]:
            found: list[str] = []
            cursor = None
            while True:
                page = agents.threads.list("p", limit=1, cursor=cursor, **kwargs).unwrap()
                found.extend(t.id for t in page.items)
                if not page.has_more:
                    assert page.next_cursor is None
                    return found
                cursor = page.next_cursor

        assert ids() == ["t", "a1", "a2", "a3"]
        assert ids(agent_id="planner") == ["a1", "a3"]
        assert ids(owner_id="ann") == ["a1", "a2"]
        assert ids(status=ThreadStatus.ARCHIVED) == ["a3"]
        assert ids(agent_id="planner", status=ThreadStatus.OPEN) == ["a1"]
        assert agents.threads.list("nobody").unwrap().items == ()
        first = agents.threads.get("a1").unwrap()
        assert (first.agent_id, first.owner_id, first.seq) == ("planner", "ann", 2)

    def test_runs_are_listed_and_read_in_bulk(self, agents: AgentStorage) -> None:
        done = _finish(agents, _start(agents, "r1"))
        queued = agents.runs.queue("r2", thread_id="t").unwrap()
        running = _start(agents, "r3")
        page = agents.runs.list("t", limit=2).unwrap()
        assert page.items == (done, queued)
        assert page.has_more
        rest = agents.runs.list("t", limit=2, cursor=page.next_cursor).unwrap()
        assert rest == Page((running,), has_more=False)
        assert agents.runs.list("t", status=AgentRunStatus.QUEUED).unwrap().items == (queued,)
        many = agents.runs.get_many(["r3", "nope", "r1", "r3"])
        assert many == Success((running, done))
        assert agents.runs.get_many([]) == Success(())
        assert agents.runs.list("nope") == Failure(NotFound("thread", "nope"))
        assert agents.checkpoints.for_run("r1") == Success(None)
        assert agents.checkpoints.for_run("nope") == Failure(NotFound("agent_run", "nope"))

    # -- sequence numbers --------------------------------------------------------------------

    def test_sequence_numbers_are_never_reused_after_deletes(self, agents: AgentStorage) -> None:
        token = _start(agents, "r1").fencing_token
        agents.messages.append("t", role="user", content="q").unwrap()
        for i in range(3):
            agents.messages.append(
                "t", role="assistant", content=i, run_id="r1", fencing_token=token, at=100 + i
            ).unwrap()
        assert agents.messages.delete_by_run("t", "r1") == Success(3)
        thread = agents.threads.get("t").unwrap()
        assert (thread.head_seq, thread.message_count) == (4, 1)
        assert thread.last_message_at_ms == agents.messages.get("t", 1).unwrap().created_at_ms
        assert agents.messages.append("t", role="user", content="next").unwrap().seq == 5
        assert agents.messages.delete_by_run("t", "r1") == Success(0)
        assert agents.messages.delete_by_run("t", "r9") == Failure(NotFound("agent_run", "r9"))

    @given(contents=st.lists(agents_json_values(), max_size=6), pops=st.integers(0, 8))
    @settings(max_examples=20, deadline=None, suppress_health_check=_FIXTURES)
    def test_pop_returns_the_newest_and_its_number_never_comes_back(
        self, layer_factory: LayerFactory, contents: list[JsonValue], pops: int
    ) -> None:
        with build(merge(layer_factory(), Layer.value(CLOCK, FixedClock()))) as container:
            agents = container.get(AGENT_STORAGE)
            agents.threads.create("t", project_id="p").unwrap()
            stored = [
                agents.messages.append("t", role="user", content=c, client_id=f"m{i}").unwrap()
                for i, c in enumerate(contents)
            ]
            popped = [agents.messages.pop("t").unwrap() for _ in range(pops)]
            expected: list[Any] = list(reversed(stored))[:pops]
            assert popped == expected + [None] * (pops - len(expected))
            kept = stored[: max(0, len(stored) - pops)]
            assert agents.messages.list("t", limit=1000).unwrap().items == tuple(kept)
            thread = agents.threads.get("t").unwrap()
            assert (thread.head_seq, thread.message_count) == (len(stored), len(kept))
            assert thread.last_message_at_ms == (kept[-1].created_at_ms if kept else None)
            first: JsonValue = contents[0] if contents else "next"
            again = agents.messages.append("t", role="user", content=first, client_id="m0")
            # a kept m0 is a repeat; a popped one's client id is free, its number is not
            assert again.unwrap().seq == (1 if kept else len(stored) + 1)

    def test_clear_keeps_the_thread_and_its_numbers(
        self, agents: AgentStorage, clock: FixedClock
    ) -> None:
        assert agents.messages.clear("t") == Success(0)
        before = agents.threads.get("t").unwrap()
        agents.threads.update("t", metadata={"k": 1}).unwrap()
        agents.messages.append_many("t", [NewMessage("user", i) for i in range(3)]).unwrap()
        clock.advance(5)
        assert agents.messages.clear("t") == Success(3)
        thread = agents.threads.get("t").unwrap()
        assert (thread.head_seq, thread.message_count, thread.last_message_at_ms) == (3, 0, None)
        assert (thread.title, thread.metadata, thread.created_at_ms) == (
            before.title, {"k": 1}, before.created_at_ms
        )
        assert thread.updated_at_ms == clock.now_ms()
        assert agents.messages.list("t").unwrap().items == ()
        assert agents.messages.pop("t") == Success(None)
        assert agents.messages.append("t", role="user", content="anew").unwrap().seq == 4
        assert agents.messages.clear("missing") == Failure(NotFound("thread", "missing"))
        assert agents.messages.pop("missing") == Failure(NotFound("thread", "missing"))
        assert isinstance(agents.messages.pop(""), Failure)

    def test_pop_and_clear_leave_a_running_run_and_an_archived_thread_alone(
        self, agents: AgentStorage
    ) -> None:
        agents.messages.append("t", role="user", content="q").unwrap()
        run = _start(agents, "r1")
        active = Failure(Conflict("thread", "t", "active run", actual="r1"))
        assert agents.messages.pop("t") == active
        assert agents.messages.clear("t") == active
        _finish(agents, run)
        agents.threads.update("t", status=ThreadStatus.ARCHIVED).unwrap()
        archived = Failure(Conflict("thread", "t", "thread is archived"))
        assert agents.messages.pop("t") == archived
        assert agents.messages.clear("t") == archived
        assert agents.threads.get("t").unwrap().message_count == 1
        agents.threads.update("t", status=ThreadStatus.OPEN).unwrap()
        assert agents.messages.pop("t").unwrap() is not None

    def test_pop_and_clear_never_remove_what_a_checkpoint_summarises(
        self, agents: AgentStorage
    ) -> None:
        run = _start(agents, "r1")
        roles = ["user", "assistant", "user", "assistant"]
        agents.messages.append_many(
            "t", [NewMessage(r, i, run_id="r1", fencing_token=run.fencing_token)
                  for i, r in enumerate(roles)]
        ).unwrap()
        agents.checkpoints.create(
            "c1", thread_id="t", run_id="r1", fencing_token=run.fencing_token,
            summary="so far", through_seq=2, observed_head_seq=4, expected_latest_id=None,
        ).unwrap()
        _finish(agents, run)
        assert _seq(agents.messages.pop("t")) == 4, "the kept context can be popped"

        def summarised(seq: int) -> Failure[Conflict]:
            return Failure(
                Conflict("thread", "t", "message is summarised by a checkpoint", "> 2", str(seq))
            )

        assert agents.messages.clear("t") == summarised(1)
        assert _seq(agents.messages.pop("t")) == 3
        assert agents.messages.pop("t") == summarised(2)
        assert agents.messages.delete_by_run("t", "r1") == Success(2)
        assert agents.messages.clear("t") == Success(0)
        assert agents.checkpoints.latest("t").unwrap() is not None, "checkpoints stay"

    def test_runs_of_other_threads_are_refused(self, agents: AgentStorage) -> None:
        agents.threads.create("u", project_id="p").unwrap()
        token = agents.runs.start("ru", thread_id="u", owner="w", lease_ms=LEASE).unwrap()
        conflict = Conflict(
            "agent_run", "ru", "run belongs to another thread", expected="t", actual="u"
        )
        append = agents.messages.append(
            "t", role="user", content=1, run_id="ru", fencing_token=token.fencing_token
        )
        assert append == Failure(conflict)
        assert agents.messages.delete_by_run("t", "ru") == Failure(conflict)
        assert agents.threads.get("t").unwrap().head_seq == 0

    def test_append_many_is_all_or_nothing(self, agents: AgentStorage) -> None:
        good = NewMessage(role="user", content="fine")
        bad_run = NewMessage(role="assistant", content="x", run_id="missing", fencing_token=1)
        result = agents.messages.append_many("t", [good, good, bad_run])
        assert result == Failure(NotFound("agent_run", "missing"))
        assert agents.threads.get("t").unwrap().head_seq == 0
        stored = agents.messages.append_many("t", [good, good]).unwrap()
        assert [m.seq for m in stored] == [1, 2]

    # -- checkpoints -------------------------------------------------------------------------

    def test_checkpoint_compare_and_swap(self, agents: AgentStorage) -> None:
        first_run = _start(agents, "r1")
        agents.messages.append_many("t", [NewMessage(role="user", content=i) for i in range(4)])

        def create(cid: str, run: str, head: int, expected: str | None, through: int = 3) -> Any:
            return agents.checkpoints.create(
                cid,
                thread_id="t",
                run_id=run,
                fencing_token=agents.runs.get(run).unwrap().fencing_token,
                summary=f"summary {cid}",
                through_seq=through,
                observed_head_seq=head,
                expected_latest_id=expected,
            )

        assert agents.checkpoints.latest("t") == Success(None)
        first = create("c1", "r1", 4, None).unwrap()
        assert (first.number, first.previous_id) == (1, None)
        assert create("c1", "r1", 4, None) == Success(first), "replay returns the same record"
        assert create("c9", "r1", 4, None) == Failure(
            Conflict("checkpoint", "c9", "run already created a different checkpoint", actual="c1")
        )
        _finish(agents, first_run)
        _start(agents, "r2")
        assert create("c2", "r2", 4, None) == Failure(
            Conflict("thread", "t", "latest checkpoint changed", expected="", actual="c1")
        )
        agents.messages.append("t", role="user", content="more").unwrap()
        assert create("c2", "r2", 4, "c1") == Failure(
            Conflict("thread", "t", "head moved", expected="4", actual="5")
        )
        assert create("c2", "r2", 5, "c1", through=3) == Failure(
            Conflict("thread", "t", "checkpoint does not advance", expected="> 3", actual="3")
        )
        assert create("c1", "r1", 4, None) == Failure(
            Conflict("thread", "t", "head moved", expected="4", actual="5")
        ), "a replay re-checks the head"
        second = create("c2", "r2", 5, "c1", through=4).unwrap()
        assert (second.number, second.previous_id) == (2, "c1")
        assert create("c1", "r1", 4, None) == Failure(
            Conflict("thread", "t", "latest checkpoint changed", expected="c1", actual="c2")
        ), "and the latest"
        assert agents.checkpoints.latest("t") == Success(second)
        assert agents.checkpoints.for_run("r1") == Success(first)
        assert agents.checkpoints.for_run("r2") == Success(second)
        assert agents.threads.get("t").unwrap().checkpoint_count == 2
        assert len(agents.messages.list("t", after_seq=0).unwrap().items) == 5, "transcript kept"

    def test_a_checkpoint_keeps_its_trigger_and_starts_the_kept_context_with_the_user(
        self, agents: AgentStorage
    ) -> None:
        token = _start(agents, "r1").fencing_token
        roles = ["user", "assistant", "tool", "assistant", "user", "assistant", "user"]
        agents.messages.append_many(
            "t",
            [
                NewMessage(role, i, run_id="r1", fencing_token=token)
                for i, role in enumerate(roles)
            ],
        ).unwrap()

        def create(through: int, head: int = 7, **details: Any) -> Any:
            return agents.checkpoints.create(
                "c1",
                thread_id="t",
                run_id="r1",
                fencing_token=token,
                summary="so far",
                through_seq=through,
                observed_head_seq=head,
                expected_latest_id=None,
                **details,
            )

        whole = create(7)
        assert isinstance(whole, Failure)
        assert whole.failure() == InvalidInput("through_seq", whole.failure().reason)
        refused = "first kept message is not a user message at through_seq + 1"
        assert create(2) == Failure(Conflict("thread", "t", refused, "user at 3", "tool at 3"))
        assert create(5) == Failure(
            Conflict("thread", "t", refused, "user at 6", "assistant at 6")
        )
        details: dict[str, Any] = {
            "reason": "threshold",
            "format_version": 2,
            "tokens_before": 180_000,
            "tokens_after": 12_000,
            "summary_model": "summarizer-1",
        }
        made = create(4, **details).unwrap()
        assert (made.through_seq, made.observed_head_seq) == (4, 7)
        assert (made.reason, made.format_version, made.summary_model) == (
            "threshold", 2, "summarizer-1"
        )
        assert (made.tokens_before, made.tokens_after) == (180_000, 12_000)
        assert create(4, **details) == Success(made), "a replay while nothing moved"
        assert create(4, **{**details, "reason": "manual"}) == Failure(
            Conflict("checkpoint", "c1", "run already created a different checkpoint", actual="c1")
        )
        assert agents.checkpoints.latest("t") == Success(made)

    def test_the_first_kept_message_must_still_be_stored(self, agents: AgentStorage) -> None:
        token = _start(agents, "r1").fencing_token
        agents.messages.append("t", role="user", content="q").unwrap()
        agents.messages.append(
            "t", role="user", content="gone", run_id="r1", fencing_token=token
        ).unwrap()
        agents.messages.append("t", role="assistant", content="a").unwrap()
        agents.messages.delete_by_run("t", "r1").unwrap()
        refused = agents.checkpoints.create(
            "c1",
            thread_id="t",
            run_id="r1",
            fencing_token=token,
            summary="s",
            through_seq=1,
            observed_head_seq=3,
            expected_latest_id=None,
        )
        assert refused == Failure(
            Conflict(
                "thread",
                "t",
                "first kept message is not a user message at through_seq + 1",
                "user at 2",
                "assistant at 3",
            )
        )

    @pytest.mark.parametrize(
        ("details", "field"),
        [
            ({"reason": ""}, "reason"),
            ({"format_version": 0}, "format_version"),
            ({"tokens_before": -1}, "tokens_before"),
            ({"tokens_after": 1.5}, "tokens_after"),
            ({"summary_model": "\ud800"}, "summary_model"),
        ],
    )
    def test_bad_checkpoint_details_are_refused(
        self, agents: AgentStorage, details: dict[str, Any], field: str
    ) -> None:
        token = _start(agents, "r1").fencing_token
        agents.messages.append_many("t", [NewMessage("user", i) for i in range(2)]).unwrap()
        result = agents.checkpoints.create(
            "c1",
            thread_id="t",
            run_id="r1",
            fencing_token=token,
            summary="s",
            through_seq=1,
            observed_head_seq=2,
            expected_latest_id=None,
            **details,
        )
        assert isinstance(result, Failure)
        assert result.failure() == InvalidInput(field, result.failure().reason)
        assert agents.checkpoints.latest("t") == Success(None)

    # -- deletion ----------------------------------------------------------------------------

    def test_deleted_thread_is_gone_and_late_writes_never_resurrect_it(
        self, agents: AgentStorage
    ) -> None:
        token = _start(agents, "r1").fencing_token
        agents.messages.append("t", role="user", content="hi", run_id="r1", fencing_token=token)
        agents.messages.append("t", role="user", content="next").unwrap()
        agents.checkpoints.create(
            "c1",
            thread_id="t",
            run_id="r1",
            fencing_token=token,
            summary="s",
            through_seq=1,
            observed_head_seq=2,
            expected_latest_id=None,
        ).unwrap()
        assert agents.threads.delete("t") == Success(None)
        gone = Failure(NotFound("thread", "t"))
        assert agents.threads.get("t") == gone
        assert agents.threads.delete("t") == gone
        assert agents.messages.append("t", role="user", content="late") == gone
        assert agents.messages.append_many("t", []) == gone
        assert agents.messages.list("t") == gone
        assert agents.messages.delete_by_run("t", "r1") == gone
        assert agents.runs.start("r2", thread_id="t", owner="w", lease_ms=LEASE) == gone
        assert agents.runs.queue("r2", thread_id="t") == gone
        assert agents.runs.list("t") == gone
        assert agents.runs.get("r1") == Failure(NotFound("agent_run", "r1"))
        assert agents.threads.update("t", title="x") == gone
        assert agents.checkpoints.latest("t") == gone
        assert agents.threads.get("t") == gone
        again = agents.threads.create("t", project_id="p").unwrap()
        assert (again.head_seq, again.message_count, again.checkpoint_count) == (0, 0, 0)
        assert _start(agents, "r1").status is AgentRunStatus.RUNNING

    def test_archived_threads_refuse_new_work(self, agents: AgentStorage) -> None:
        _start(agents, "r1")
        agents.runs.queue("rq", thread_id="t").unwrap()
        archived = agents.threads.update("t", status=ThreadStatus.ARCHIVED)
        assert archived == Failure(Conflict("thread", "t", "active run", actual="r1"))
        agents.runs.cancel("r1").unwrap()
        agents.threads.update("t", status=ThreadStatus.ARCHIVED).unwrap()
        refused = Failure(Conflict("thread", "t", "thread is archived"))
        assert agents.messages.append("t", role="user", content="x") == refused
        assert agents.runs.start("r2", thread_id="t", owner="w", lease_ms=LEASE) == refused
        assert agents.runs.claim("rq", owner="w", lease_ms=LEASE) == refused
        assert agents.threads.update("t", status=ThreadStatus.OPEN).unwrap().status == "open"

    def test_create_thread_is_idempotent(self, agents: AgentStorage) -> None:
        meta: dict[str, JsonValue] = {"a": 1, "b": [1.5, None]}
        first = agents.threads.create("u", project_id="p", title="x", metadata=meta).unwrap()
        reordered: dict[str, JsonValue] = {"b": [1.5, None], "a": 1}
        assert agents.threads.create("u", project_id="p", title="x", metadata=reordered) == (
            Success(first)
        )
        other = agents.threads.create("u", project_id="p", title="y")
        assert other == Failure(Conflict("thread", "u", "thread exists with other values"))
        assert math.isclose(1.5, first.metadata["b"][0])  # type: ignore[index,arg-type]
