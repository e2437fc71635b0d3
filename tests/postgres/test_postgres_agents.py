"""Agent state on a real PostgreSQL server: the shipped contract and its state machine, the
broken layers failing there too, and processes appending to one thread or holding a stale
token."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test
from returns.result import Failure, Result, Success

from runstore.layers import Container, Layer, build, merge, postgres
from runstore.layers._postgres_agents import (
    PostgresAgentRunStore,
    PostgresCheckpointStore,
    PostgresMessageStore,
    PostgresThreadStore,
)
from runstore.layers._postgres_database import PostgresDatabase
from runstore.layers._tags import AGENT_STORAGE
from runstore.services import _agents_rules as rules
from runstore.services.agents import (
    AgentError,
    AgentRun,
    AgentRunFailure,
    AgentRunStatus,
    AgentStorage,
    NewMessage,
)
from runstore.services.clock import Clock
from runstore.services.errors import IllegalTransition
from runstore.services.ledger import ExecutionStorage, StaleFencingToken
from runstore.testing import AgentsContract, LayerFactory, agents_state_machine

WORKERS = 8
APPENDS = 25
"""Appends per worker process (each one retried once with its client id)."""


class TestPostgresAgents(AgentsContract):
    """Each layer on a fresh database of the session's PostgreSQL server."""

    @pytest.fixture
    def layer_factory(self, postgres_layers: LayerFactory) -> LayerFactory:
        return postgres_layers


def test_state_machine_postgres(postgres_layers: LayerFactory) -> None:
    """The machine's steps give the in-memory model's Results on PostgreSQL (each example on
    a fresh database)."""
    run_state_machine_as_test(
        agents_state_machine(postgres_layers), settings=settings(max_examples=10, deadline=None)
    )


# -- the broken layers, on PostgreSQL ----------------------------------------------------------


class _UnfencedRuns(PostgresAgentRunStore):
    """Finishes a run whatever token is presented (``agents_broken_fencing_layer``'s bug)."""

    def finish(
        self,
        run_id: str,
        *,
        fencing_token: int,
        status: AgentRunStatus,
        failure: AgentRunFailure | None = None,
        at: datetime | int | None = None,
    ) -> Result[AgentRun, AgentError]:
        row = self._run_row(run_id)
        token = fencing_token if row is None else row.fencing_token
        return super().finish(run_id, fencing_token=token, status=status, failure=failure, at=at)


class _ForgetfulMessages(PostgresMessageStore):
    """Never looks a client id up (``agents_broken_client_id_layer``'s bug): on PostgreSQL
    the retry then meets the schema's unique ``(thread_key, client_id)`` index."""

    def _known(self, thread_id: str, drafts: Any) -> rules.Known:
        return {}


def _postgres_with(
    postgres_layers: LayerFactory,
    runs: type[PostgresAgentRunStore] = PostgresAgentRunStore,
    messages: type[PostgresMessageStore] = PostgresMessageStore,
) -> LayerFactory:
    def storage(c: Container) -> AgentStorage:
        db, clock = c.get(PostgresDatabase), c.get(Clock)
        return rules.AgentStores(
            PostgresThreadStore(db, clock),
            runs(db, clock, c.get(ExecutionStorage)),
            messages(db, clock),
            PostgresCheckpointStore(db, clock),
        )

    def factory() -> Layer:
        return merge(postgres_layers(), Layer.service(AGENT_STORAGE, storage))

    return factory


_FIND_BUG = settings(
    max_examples=300,
    deadline=None,
    database=None,
    derandomize=True,  # the same search every run: its cost (each example a fresh database)
    # is fixed, not what a random seed makes it
    phases=[Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)


def test_the_machine_fails_postgres_ignoring_the_fencing_token(
    postgres_layers: LayerFactory,
) -> None:
    machine = agents_state_machine(_postgres_with(postgres_layers, runs=_UnfencedRuns))
    with pytest.raises(AssertionError, match="is stale"):
        run_state_machine_as_test(machine, settings=_FIND_BUG)


def test_the_machine_fails_postgres_storing_a_retried_client_id_twice(
    postgres_layers: LayerFactory,
) -> None:
    machine = agents_state_machine(_postgres_with(postgres_layers, messages=_ForgetfulMessages))
    with pytest.raises(AssertionError, match="layer returned"):
        run_state_machine_as_test(machine, settings=_FIND_BUG)


def test_the_late_worker_script_catches_an_unfenced_finish_on_postgres(
    postgres_layers: LayerFactory,
) -> None:
    """The scenario the machine finds, scripted, on the real and the broken layer."""
    for factory, broken in (
        (postgres_layers, False),
        (_postgres_with(postgres_layers, runs=_UnfencedRuns), True),
    ):
        machine = agents_state_machine(factory)()
        try:
            machine.first_threads(["p1", "p1"])
            machine.start_run("r1", "t1", None, "w1", 1)
            machine.tick(1)
            machine.reclaim_run("r1", "w2", 60_000)
            if broken:
                with pytest.raises(AssertionError, match="is stale"):
                    machine.late_worker("r1", "finish")
            else:
                machine.late_worker("r1", "finish")
                machine.same_state()
        finally:
            machine.teardown()


def test_the_retry_script_catches_a_client_id_stored_twice_on_postgres(
    postgres_layers: LayerFactory,
) -> None:
    message = NewMessage("user", "hi", client_id="m1")
    for factory, broken in (
        (postgres_layers, False),
        (_postgres_with(postgres_layers, messages=_ForgetfulMessages), True),
    ):
        machine = agents_state_machine(factory)()
        try:
            machine.first_threads(["p1", "p1"])
            machine._append("t1", message)
            if broken:
                with pytest.raises(AssertionError, match="layer returned"):
                    machine._append("t1", message)
            else:
                machine._append("t1", message)
                machine.same_state()
        finally:
            machine.teardown()


# -- processes on one database -----------------------------------------------------------------


@pytest.fixture
def dsn(postgres_dsn: str) -> str:
    """A fresh database with the runstore schema and thread ``t`` (project ``p``)."""
    with build(postgres(postgres_dsn)) as container:
        container.get(AgentStorage).threads.create("t", project_id="p").unwrap()
    return postgres_dsn


def append_as(dsn: str, worker: int) -> list[tuple[int, int, str]]:
    """Append :data:`APPENDS` messages to thread ``t`` as ``worker`` (every third a batch of
    two), each retried once with its client ids as after a lost reply; return
    ``(seq, retried seq, client id)`` of every message."""
    appended: list[tuple[int, int, str]] = []
    with build(postgres(dsn)) as container:
        messages = container.get(AgentStorage).messages
        for i in range(APPENDS):
            ids = [f"w{worker}-{i}-{part}" for part in range(2 if i % 3 == 0 else 1)]
            batch = [NewMessage("user", {"w": worker, "i": i}, client_id=c) for c in ids]
            first = messages.append_many("t", batch).unwrap()
            again = messages.append_many("t", batch).unwrap()
            appended += [(a.seq, b.seq, c) for a, b, c in zip(first, again, ids, strict=True)]
    return appended


def test_eight_processes_appending_to_one_thread_lose_and_repeat_no_seq(dsn: str) -> None:
    context = multiprocessing.get_context("spawn")
    with context.Pool(WORKERS) as pool:
        results = pool.starmap(append_as, [(dsn, worker) for worker in range(WORKERS)])
    appended = [row for worker in results for row in worker]
    total = len(appended)
    assert total == WORKERS * (APPENDS + (APPENDS + 2) // 3)
    assert all(seq == retried for seq, retried, _ in appended)  # a retry returns the stored one
    assert sorted(seq for seq, _, _ in appended) == list(range(1, total + 1))  # dense, once each
    for worker in results:  # each worker's messages in the order it appended them
        assert [seq for seq, _, _ in worker] == sorted(seq for seq, _, _ in worker)
    with build(postgres(dsn)) as container:
        agents = container.get(AgentStorage)
        thread = agents.threads.get("t").unwrap()
        assert (thread.head_seq, thread.message_count) == (total, total)
        page = agents.messages.list("t", limit=total).unwrap()
        stored = {(m.seq, m.client_id) for m in page.items}
        assert stored == {(seq, client) for seq, _, client in appended}
        assert not page.has_more
    with psycopg.connect(dsn) as connection:
        bodies = connection.execute("SELECT count(*) FROM agent_message_bodies").fetchone()
        assert bodies == (total,)


def reclaim_in_process(dsn: str) -> int:
    """Reclaim run ``r1`` (its lease expired) as worker ``w2``; return the new token."""
    with build(postgres(dsn)) as container:
        run = container.get(AgentStorage).runs.reclaim("r1", owner="w2", lease_ms=600_000)
        return run.unwrap().fencing_token


def stale_writes(dsn: str, token: int) -> list[object]:
    """Every write of run ``r1`` with ``token``, from this process: their failures."""
    with build(postgres(dsn)) as container:
        agents = container.get(AgentStorage)
        late = NewMessage("assistant", "late", run_id="r1", fencing_token=token)
        results: list[Result[Any, AgentError]] = [
            agents.runs.renew("r1", fencing_token=token, lease_ms=1_000),
            agents.runs.finish("r1", fencing_token=token, status=AgentRunStatus.SUCCEEDED),
            agents.messages.append_many("t", [NewMessage("user", "fine"), late]),
            agents.checkpoints.create(
                "c1",
                thread_id="t",
                run_id="r1",
                fencing_token=token,
                summary="s",
                through_seq=1,
                observed_head_seq=2,
                expected_latest_id=None,
            ),
        ]
        return [result.failure() if isinstance(result, Failure) else result for result in results]


def test_a_stale_worker_in_another_process_is_refused_every_write(dsn: str) -> None:
    with build(postgres(dsn)) as container:
        agents = container.get(AgentStorage)
        held = agents.runs.start("r1", thread_id="t", owner="w1", lease_ms=1).unwrap()
        agents.messages.append(
            "t", role="assistant", content="a", run_id="r1", fencing_token=held.fencing_token
        ).unwrap()
    time.sleep(0.01)
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        token = pool.apply(reclaim_in_process, (dsn,))
        refused = pool.apply(stale_writes, (dsn, held.fencing_token))
    assert token > held.fencing_token
    assert refused == [StaleFencingToken("r1", held.fencing_token, token, entity="agent run")] * 4
    with build(postgres(dsn)) as container:
        agents = container.get(AgentStorage)
        thread = agents.threads.get("t").unwrap()
        assert (thread.head_seq, thread.message_count) == (1, 1)
        assert agents.checkpoints.latest("t").unwrap() is None
        run = agents.runs.get("r1").unwrap()
        assert (run.status, run.owner, run.fencing_token) == ("running", "w2", token)
        done = agents.runs.finish("r1", fencing_token=token, status=AgentRunStatus.SUCCEEDED)
        assert done.unwrap().status == AgentRunStatus.SUCCEEDED


# -- clients racing for one fact (a container each, released at once) -------------------------


def _race(
    dsn: str, rounds: int, call: Callable[[AgentStorage, int], Result[Any, Any]]
) -> list[list[Result[Any, Any]]]:
    """Run ``call(agents, round)`` on :data:`WORKERS` clients at once, ``rounds`` times; return
    each round's Results in client order."""
    outcomes: list[list[Result[Any, Any]]] = [[Failure("not run")] * WORKERS for _ in range(rounds)]
    start = threading.Barrier(WORKERS, timeout=60)

    def client(index: int) -> None:
        with build(postgres(dsn)) as container:
            agents = container.get(AgentStorage)
            agents.threads.get("t")  # the pool is open before the start line
            for number in range(rounds):
                start.wait()
                try:
                    outcomes[number][index] = call(agents, number)
                except Exception as exc:  # reported in the Results, not lost with the thread
                    outcomes[number][index] = Failure(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return outcomes


ROUNDS = 5


def test_clients_appending_one_client_id_at_once_store_it_once(dsn: str) -> None:
    """Without the thread's lock before the client ids are looked up, the second appender
    meets the unique index (``StorageFailure``) instead of the stored message."""

    def append(agents: AgentStorage, number: int) -> Result[Any, Any]:
        message = NewMessage("user", number, client_id=f"m{number}")
        return agents.messages.append_many("t", [message])

    for number, results in enumerate(_race(dsn, ROUNDS, append)):
        assert all(isinstance(result, Success) for result in results), results
        assert {result.unwrap()[0].seq for result in results} == {number + 1}
    with build(postgres(dsn)) as container:
        thread = container.get(AgentStorage).threads.get("t").unwrap()
        assert (thread.head_seq, thread.message_count) == (ROUNDS, ROUNDS)


def test_clients_claiming_one_run_at_once_give_it_one_holder(dsn: str) -> None:
    with build(postgres(dsn)) as container:
        runs = container.get(AgentStorage).runs
        for number in range(ROUNDS):
            runs.queue(f"r{number}", thread_id="t").unwrap()

    def claim(agents: AgentStorage, number: int) -> Result[Any, Any]:
        run = f"r{number}"
        claimed = agents.runs.claim(run, owner=f"w{threading.get_ident()}", lease_ms=600_000)
        if isinstance(claimed, Success):
            agents.runs.finish(
                run, fencing_token=claimed.unwrap().fencing_token, status=AgentRunStatus.SUCCEEDED
            ).unwrap()
        return claimed

    tokens = []
    for results in _race(dsn, ROUNDS, claim):
        won = [result.unwrap() for result in results if isinstance(result, Success)]
        assert len(won) == 1, results
        lost = [result.failure() for result in results if isinstance(result, Failure)]
        assert {type(failure) for failure in lost} == {IllegalTransition}
        tokens.append(won[0].fencing_token)
    assert tokens == list(range(1, ROUNDS + 1))


def test_clients_creating_one_thread_at_once_make_one(dsn: str) -> None:
    """A repeated create returns the stored thread: every client gets the one made (without
    the thread's lock all but one would meet the unique index)."""

    def create(agents: AgentStorage, number: int) -> Result[Any, Any]:
        return agents.threads.create(f"n{number}", project_id="p")

    seqs = []
    for results in _race(dsn, ROUNDS, create):
        assert all(isinstance(result, Success) for result in results), results
        assert all(result == results[0] for result in results)
        seqs.append(results[0].unwrap().seq)
    assert seqs == list(range(2, ROUNDS + 2))  # one thread_seq value each
