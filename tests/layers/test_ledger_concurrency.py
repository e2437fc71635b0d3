"""Several processes claiming from one queue in one database file, and a stale worker's
action-run writes refused across processes."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from pathlib import Path

from returns.result import Failure

from runstore.layers import Layer, build, sqlite
from runstore.services import (
    ActionRunId,
    ActionRunStatus,
    ActionRunStorage,
    ExecutionId,
    ExecutionStatus,
    ExecutionStorage,
    Fence,
    NewActionRun,
    NewExecution,
    PhaseSucceeded,
    StaleFencingToken,
)

WORKERS = 4
EXECUTIONS = 1_000


def claim_until_empty(
    path: str, owner: str, layer: Callable[[str], Layer] = sqlite
) -> list[tuple[str, int]]:
    """Claim and finish executions of project ``q`` until none is left; return (id, token).

    ``layer`` opens ``path`` (a module-level function, so a spawned worker can be given it).
    """
    claimed: list[tuple[str, int]] = []
    with build(layer(path)) as container:
        executions: ExecutionStorage = container.get(ExecutionStorage)
        while True:
            got = executions.claim("q", owner, 600_000)
            if isinstance(got, Failure):
                raise AssertionError(f"{owner}: claim failed: {got.failure()}")
            execution = got.unwrap()
            if execution is None:
                return claimed
            claimed.append((execution.id, execution.fencing_token))
            done = executions.finish(
                execution.id, execution.fencing_token, ExecutionStatus.SUCCEEDED, output=owner
            )
            if isinstance(done, Failure):
                raise AssertionError(f"{owner}: finish failed: {done.failure()}")


def test_concurrent_workers_claim_every_execution_exactly_once(tmp_path: Path) -> None:
    path = str(tmp_path / "queue.db")
    with build(sqlite(path)) as container:
        executions: ExecutionStorage = container.get(ExecutionStorage)
        for i in range(EXECUTIONS):
            executions.create(NewExecution("q", f"job {i}")).unwrap()
    context = multiprocessing.get_context("spawn")
    with context.Pool(WORKERS) as pool:
        results = pool.starmap(claim_until_empty, [(path, f"w{i}") for i in range(WORKERS)])
    claims = [claim for worker in results for claim in worker]
    ids = [execution_id for execution_id, _ in claims]
    tokens = [token for _, token in claims]
    assert len(ids) == EXECUTIONS
    assert len(set(ids)) == EXECUTIONS
    assert sorted(tokens) == list(range(1, EXECUTIONS + 1))
    with build(sqlite(path)) as container:
        executions = container.get(ExecutionStorage)
        page = executions.list("q", status=ExecutionStatus.SUCCEEDED, limit=1_000).unwrap()
        assert len(page.items) == EXECUTIONS
        assert not page.has_more
        assert {e.attempts for e in page.items} == {1}
        by_owner: dict[str, object] = {e.id: e.output for e in page.items}
        for worker, owner in zip(results, (f"w{i}" for i in range(WORKERS)), strict=True):
            assert all(by_owner[execution_id] == owner for execution_id, _ in worker)


def test_a_stale_token_is_refused_across_connections(tmp_path: Path) -> None:
    path = tmp_path / "lease.db"
    with build(sqlite(path)) as first, build(sqlite(path)) as second:
        one: ExecutionStorage = first.get(ExecutionStorage)
        two: ExecutionStorage = second.get(ExecutionStorage)
        one.create(NewExecution("q", "job")).unwrap()
        held = one.claim("q", "slow", 1).unwrap()
        assert held is not None
        time.sleep(0.01)
        taken = two.claim("q", "fast", 60_000).unwrap()
        assert taken is not None
        assert taken.id == held.id
        assert taken.fencing_token > held.fencing_token
        late = one.finish(held.id, held.fencing_token, ExecutionStatus.SUCCEEDED)
        assert late == Failure(StaleFencingToken(held.id, held.fencing_token, taken.fencing_token))
        done = two.finish(taken.id, taken.fencing_token, ExecutionStatus.SUCCEEDED).unwrap()
        assert one.get(held.id).unwrap() == done


def stale_worker_writes(
    path: str, run_id: str, execution_id: str, token: int, layer: Callable[[str], Layer] = sqlite
) -> list[object]:
    """Worker A in its own process, still holding ``token``: try every action-run write."""
    fence = Fence(ExecutionId(execution_id), token)
    with build(layer(path)) as container:
        runs: ActionRunStorage = container.get(ActionRunStorage)
        run = ActionRunId(run_id)
        return [
            got.failure() if isinstance(got, Failure) else got.unwrap()
            for got in (
                runs.queue(NewActionRun("q", ExecutionId(execution_id), "late"), fence),
                runs.start(run, fence),
                runs.record_writeback(run, fence, PhaseSucceeded({"rows": 1})),
                runs.record_effects(run, fence, PhaseSucceeded()),
                runs.finish(run, fence, ActionRunStatus.SUCCEEDED),
                runs.requeue(run, fence),
            )
        ]


def reclaim(path: str, layer: Callable[[str], Layer] = sqlite) -> tuple[str, int]:
    """Worker B in its own process: claim the execution whose lease expired."""
    with build(layer(path)) as container:
        executions: ExecutionStorage = container.get(ExecutionStorage)
        taken = executions.claim("q", "B", 60_000).unwrap()
        assert taken is not None
        return taken.id, taken.fencing_token


def test_a_stale_worker_is_refused_when_it_writes_action_runs(tmp_path: Path) -> None:
    path = str(tmp_path / "fenced.db")
    with build(sqlite(path)) as container:
        executions: ExecutionStorage = container.get(ExecutionStorage)
        runs: ActionRunStorage = container.get(ActionRunStorage)
        executions.create(NewExecution("q", "job")).unwrap()
        held = executions.claim("q", "A", 1).unwrap()
        assert held is not None
        run = runs.queue(NewActionRun("q", held.id, "write"), held.fence).unwrap()
        started = runs.start(run.id, held.fence).unwrap()
    time.sleep(0.01)
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        execution_id, token = pool.apply(reclaim, (path,))
    assert (execution_id, token) == (held.id, held.fencing_token + 1)
    with context.Pool(1) as pool:
        refused = pool.apply(stale_worker_writes, (path, run.id, held.id, held.fencing_token))
    assert refused == [StaleFencingToken(held.id, held.fencing_token, token)] * 6
    with build(sqlite(path)) as container:
        runs = container.get(ActionRunStorage)
        assert runs.list("q").unwrap().items == (started,)
        fence = Fence(ExecutionId(held.id), token)
        wrote = runs.record_writeback(run.id, fence, PhaseSucceeded({"rows": 1})).unwrap()
        assert wrote.writeback is not None
        assert runs.finish(run.id, fence, ActionRunStatus.SUCCEEDED).unwrap().status == "succeeded"
