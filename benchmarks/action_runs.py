"""Benchmark: queue, start and finish action runs through the services vs raw apsw.

Run: ``.venv/bin/python benchmarks/action_runs.py [--runs 10000] [--rounds 3]``.

Each round makes two fresh database files with the full schema and drives ``--runs`` action
runs of one claimed execution through queue, start and finish (every step its own
transaction, as the services commit it, each carrying the execution's fence):

- **services**: ``ActionRunStorage.queue``, ``start`` and ``finish``, each of which reads the
  execution through ``ExecutionStorage.get`` in its unit of work to check the fence (and
  ``start`` and ``finish`` the run), then writes;
- **raw apsw**: the same statements (the layers' own SQL text: the execution by id, the run
  by id, the counter, the insert or update) on an identically configured apsw connection,
  with ``BEGIN IMMEDIATE`` / ``COMMIT`` around each step and every row fetched, but no
  validation, no records and no Results. The schema's running-execution triggers fire on
  both.

Rounds alternate between the two and the best round of each counts. The ratio
services / raw is printed per step and in total; the target is at most 2.0.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import apsw

from runstore.layers import build, connect, open_database, sqlite
from runstore.layers._ledger_sqlite import (
    _COUNTER,
    _FINISH,
    _INSERT_RUN,
    _SELECT_ACTION_RUN,
    _SELECT_BY_ID,
    _START,
)
from runstore.services import (
    ActionRunId,
    ActionRunStatus,
    ActionRunStorage,
    ExecutionStorage,
    NewActionRun,
    NewExecution,
)
from runstore.services._ledger_rules import ActionRunRow

STEPS = ("queue", "start", "finish")


def _services_round(folder: Path, runs: int) -> dict[str, float]:
    with build(sqlite(folder / "services.db")) as container:
        executions: ExecutionStorage = container.get(ExecutionStorage)
        action_runs: ActionRunStorage = container.get(ActionRunStorage)
        executions.create(NewExecution("bench", "job")).unwrap()
        execution = executions.claim("bench", "bench", 86_400_000).unwrap()
        assert execution is not None
        fence = execution.fence
        ids: list[ActionRunId] = []
        timings: dict[str, float] = {}

        started = time.perf_counter()
        for _ in range(runs):
            ids.append(
                action_runs.queue(NewActionRun("bench", execution.id, "act"), fence).unwrap().id
            )
        timings["queue"] = time.perf_counter() - started

        started = time.perf_counter()
        for run_id in ids:
            action_runs.start(run_id, fence).unwrap()
        timings["start"] = time.perf_counter() - started

        started = time.perf_counter()
        for run_id in ids:
            action_runs.finish(run_id, fence, ActionRunStatus.SUCCEEDED).unwrap()
        timings["finish"] = time.perf_counter() - started
        return timings


def _raw_round(folder: Path, runs: int) -> dict[str, float]:
    path = folder / "raw.db"
    open_database(path).unwrap().close()  # the same schema, then only raw apsw
    connection: apsw.Connection = connect(path).unwrap()
    try:
        execute = connection.execute
        execute("BEGIN IMMEDIATE")
        execute(
            "INSERT INTO executions (id, project_id, seq, name, status, input, output, "
            "metadata, request_digest, created_at_ms, updated_at_ms, lease_owner, "
            "lease_expires_at_ms, fencing_token, attempts) VALUES ('exe_1', 'bench', 1, 'job', "
            "'running', 'null', 'null', '{}', '', 0, 0, 'bench', 86400000, 1, 1)"
        )
        execute("UPDATE execution_counters SET value = 1 WHERE name = 'execution_seq'")
        execute("UPDATE execution_counters SET value = 1 WHERE name = 'fencing_token'")
        execute("COMMIT")
        ids: list[str] = []
        timings: dict[str, float] = {}
        now = time.time_ns

        started = time.perf_counter()
        for _ in range(runs):
            execute("BEGIN IMMEDIATE")
            execute(_SELECT_BY_ID, ("exe_1",)).fetchall()
            seq = int(execute(_COUNTER, ("action_run_seq",)).fetchall()[0][0])  # type: ignore[arg-type]
            new = ActionRunRow(
                f"act_{seq}", "bench", "exe_1", "act", "queued", "queued", seq, "null", 1,
                now() // 1_000_000, request_digest="",
            )
            row = execute(_INSERT_RUN, new).fetchall()[0]
            execute("COMMIT")
            ids.append(str(row[0]))
        timings["queue"] = time.perf_counter() - started

        started = time.perf_counter()
        for run_id in ids:
            execute("BEGIN IMMEDIATE")
            execute(_SELECT_BY_ID, ("exe_1",)).fetchall()
            execute(_SELECT_ACTION_RUN, (run_id,)).fetchall()
            execute(_START, ("running", "running", now() // 1_000_000, run_id)).fetchall()
            execute("COMMIT")
        timings["start"] = time.perf_counter() - started

        started = time.perf_counter()
        for run_id in ids:
            execute("BEGIN IMMEDIATE")
            execute(_SELECT_BY_ID, ("exe_1",)).fetchall()
            execute(_SELECT_ACTION_RUN, (run_id,)).fetchall()
            execute(
                _FINISH, ("succeeded", "finished", now() // 1_000_000, None, run_id)
            ).fetchall()
            execute("COMMIT")
        timings["finish"] = time.perf_counter() - started
        return timings
    finally:
        connection.close()


def _best(rounds: list[dict[str, float]]) -> dict[str, float]:
    best = {step: min(r[step] for r in rounds) for step in STEPS}
    best["total"] = min(sum(r[step] for step in STEPS) for r in rounds)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=10_000, help="action runs per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each (best counts)")
    args = parser.parse_args(argv)

    measured: dict[str, list[dict[str, float]]] = {"services": [], "raw": []}
    rounds: list[tuple[str, Callable[[Path, int], dict[str, float]]]] = [
        ("raw", _raw_round),
        ("services", _services_round),
    ]
    for number in range(args.rounds):
        for name, run in rounds if number % 2 == 0 else list(reversed(rounds)):
            with tempfile.TemporaryDirectory(prefix="runstore-bench-") as folder:
                measured[name].append(run(Path(folder), args.runs))

    services, raw = _best(measured["services"]), _best(measured["raw"])
    print(f"action runs: {args.runs:,} per round, best of {args.rounds} rounds")
    print(f"{'step':<8} {'services':>12} {'raw apsw':>12} {'ratio':>7}")
    for step in (*STEPS, "total"):
        per_run_s = services[step] / args.runs * 1e6
        per_run_r = raw[step] / args.runs * 1e6
        print(
            f"{step:<8} {per_run_s:>9.1f} µs {per_run_r:>9.1f} µs "
            f"{services[step] / raw[step]:>7.2f}"
        )
    ratio = services["total"] / raw["total"]
    print(f"ratio services/raw apsw (queue + start + finish): {ratio:.2f} (target <= 2.0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
