"""Benchmark: importing a pi session transcript, fresh and warm, and the importer's memory.

Run: ``.venv/bin/python benchmarks/session_import.py [--transcript PATH] [--rounds N]
[--memory-mb 200] [--skip-memory] [--skip-process]``.

1. Speed. Import ``large-session.jsonl`` (1,018 entries, about 1 MB), measured in the same
   run, round by round, the order of the cases rotated every round:

   - ``json.loads`` of every line of the file (reading it included): the floor;
   - **fresh**: what ``runstore sessions import`` does in a process: build the container on
     a database file that does not exist yet (creating it and applying every migration),
     import, close (SQLite checkpoints its WAL into the file then). The target:
     at most 3x ``json.loads``;
   - warm: import into a container that is already open (the cost per file of a batch);
   - the fixed part of fresh: building, migrating and closing an empty database;
   - raw apsw inserting the same lines into one table (for scale).

   CPU time counts (user and system time of this process, the measure of a command's
   cost; steadier than wall time on a shared machine), best round of each, with the
   median of the per-round ratios beside it. Wall time, which adds the waits for the
   disk (the fsyncs of closing the new file), is printed too.
2. Whole process (information, no target here: the start-up budgets are
   ``benchmarks/startup.py``'s): ``runstore sessions import`` of the same file into a new
   database, CPU time of the child against ``python -c pass``.
3. Memory. Generate a transcript of ``--memory-mb`` MB (and one of a quarter that size) in
   a temporary folder, import each into a temporary database with ``tracemalloc`` on, and
   compare the peak of Python allocations with the file size and with the largest line plus
   one batch (``DEFAULT_BATCH_BYTES``). Streaming means the peak stays near that bound and
   does not grow with the file. The folder is deleted afterwards.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import apsw

from runstore.layers import SESSION_REPOSITORY, build, sqlite
from runstore.sessions_import import DEFAULT_BATCH_BYTES, import_jsonl

DEFAULT_TRANSCRIPT = (
    Path(__file__).resolve().parents[2]
    / "shared"
    / "acceptance"
    / "pi-sessions"
    / "large-session.jsonl"
)

BUDGET = 3.0
"""Fresh import / json.loads of the lines, at most."""


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    """Run ``fn``; return its (wall, CPU) time in seconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def speed(transcript: Path, rounds: int) -> float:
    """Print the import's times against json.loads and raw apsw; return the fresh ratio."""
    lines = transcript.read_bytes().splitlines()
    walls: dict[str, list[float]] = {}
    cpus: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="runstore-bench-") as folder:
        fresh_paths = (os.path.join(folder, f"fresh-{n}.db") for n in itertools.count())
        warm_ids = (f"warm-{n}" for n in itertools.count())
        raw = apsw.Connection(os.path.join(folder, "raw.db"))
        raw.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL")
        raw.execute("CREATE TABLE lines (k INTEGER, seq INTEGER, body TEXT, PRIMARY KEY (k, seq))")
        raw_keys = itertools.count()

        def parse() -> None:
            with open(transcript, "rb") as handle:
                for line in handle:
                    json.loads(line)

        def fresh() -> None:
            with build(sqlite(next(fresh_paths))) as built:
                import_jsonl(built.get(SESSION_REPOSITORY), transcript).unwrap()

        def empty() -> None:
            with build(sqlite(next(fresh_paths))) as built:
                built.get(SESSION_REPOSITORY)

        def raw_insert() -> None:
            key = next(raw_keys)
            with raw:
                raw.executemany(
                    "INSERT INTO lines VALUES (?, ?, ?)",
                    ((key, i, line.decode()) for i, line in enumerate(lines)),
                )

        with build(sqlite(os.path.join(folder, "warm.db"))) as container:
            repo = container.get(SESSION_REPOSITORY)

            def warm() -> None:
                import_jsonl(repo, transcript, session_id=next(warm_ids)).unwrap()

            cases: list[tuple[str, Callable[[], None]]] = [
                ("json.loads", parse),
                ("fresh", fresh),
                ("warm", warm),
                ("build+migrate+close", empty),
                ("raw apsw", raw_insert),
            ]
            fresh()  # the first build pays for lazy imports; a user's process pays them too,
            warm()  # but they are start-up costs (benchmarks/startup.py), not the import's
            for round_no in range(rounds):
                turn = round_no % len(cases)
                for name, fn in cases[turn:] + cases[:turn]:
                    wall, cpu = _timed(fn)
                    walls.setdefault(name, []).append(wall)
                    cpus.setdefault(name, []).append(cpu)
        raw.close()
    best = {name: min(values) for name, values in walls.items()}
    best_cpu = {name: min(values) for name, values in cpus.items()}

    def median_ratio(times: dict[str, list[float]], name: str) -> float:
        pairs = zip(times[name], times["json.loads"], strict=True)
        return statistics.median(t / p for t, p in pairs)

    print(f"transcript: {transcript.name}, {len(lines)} lines, {transcript.stat().st_size:,} bytes")
    print(
        f"  {'case':<22}{'CPU ms':>8}{'x json':>8}{'median x':>10}"
        f"{'wall ms':>10}{'x json':>8}{'median x':>10}"
    )
    floor_cpu, floor_wall = best_cpu["json.loads"], best["json.loads"]
    for name in walls:
        print(
            f"  {name:<22}{best_cpu[name] * 1000:8.2f}{best_cpu[name] / floor_cpu:8.2f}"
            f"{median_ratio(cpus, name):10.2f}{best[name] * 1000:10.2f}"
            f"{best[name] / floor_wall:8.2f}{median_ratio(walls, name):10.2f}"
        )
    ratio = best_cpu["fresh"] / floor_cpu
    verdict = "ok" if ratio <= BUDGET else "MISSED"
    print(
        f"  fresh import / json.loads = {ratio:.2f}x CPU (best rounds),"
        f" {median_ratio(cpus, 'fresh'):.2f}x median;"
        f" wall {best['fresh'] / floor_wall:.2f}x best"
        f" (target <= {BUDGET:g}x: {verdict})"
    )
    return ratio


def _child_cpu(argv: list[str], env: dict[str, str]) -> float:
    """The CPU time (user + system, seconds) of one child process running ``argv``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def whole_process(transcript: Path, rounds: int) -> None:
    """Print the CPU time of ``runstore sessions import`` as a process against ``pass``."""
    script = shutil.which("runstore", path=os.path.dirname(sys.executable))
    if script is None:
        print("whole process: no runstore console script beside this interpreter; skipped")
        return
    env = dict(os.environ)
    env.pop("RUNSTORE_DB", None)
    times: dict[str, list[float]] = {"python -c pass": [], "runstore sessions import": []}
    with tempfile.TemporaryDirectory(prefix="runstore-bench-") as folder:
        for n in range(rounds):
            times["python -c pass"].append(_child_cpu([sys.executable, "-c", "pass"], env))
            database = os.path.join(folder, f"cli-{n}.db")
            times["runstore sessions import"].append(
                _child_cpu([script, "--db", database, "sessions", "import", str(transcript)], env)
            )
    floor = statistics.median(times["python -c pass"])
    print("whole process, CPU of the child (median of rounds):")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:<26}{median * 1000:9.1f} ms {median / floor:6.1f}x python -c pass")


def generate(path: Path, size_bytes: int, seed: int = 7) -> int:
    """Write a version-3 transcript of about ``size_bytes``; return its largest line (bytes)."""
    rng = random.Random(seed)
    words = ["retry", "backoff", "fetch", "circuit", "breaker", "logging", "attempt", "jitter"]
    largest = 0
    written = 0
    parent: str | None = None
    with open(path, "w", encoding="utf-8") as out:
        header = {
            "type": "session",
            "version": 3,
            "id": "bench-session",
            "cwd": "/work",
            "timestamp": "2025-11-30T10:00:00.000Z",
        }
        out.write(json.dumps(header) + "\n")
        n = 0
        while written < size_bytes:
            n += 1
            entry_id = f"{n:08x}"
            stamp = f"2025-11-30T10:{(n // 60) % 60:02d}:{n % 60:02d}.000Z"
            kind = n % 3
            if n == 1000:  # one line far larger than the rest
                text = "x" * 3_000_000
                message = {
                    "role": "toolResult",
                    "toolCallId": f"c{n}",
                    "toolName": "read",
                    "content": [{"type": "text", "text": text}],
                    "isError": False,
                }
            elif kind == 0:
                message = {"role": "user", "content": " ".join(rng.choices(words, k=40))}
            elif kind == 1:
                message = {
                    "role": "assistant",
                    "provider": "anthropic",
                    "model": "claude-sonnet-4-5",
                    "content": [{"type": "text", "text": " ".join(rng.choices(words, k=200))}],
                    "usage": {
                        "input": rng.randint(1, 5000),
                        "output": rng.randint(1, 900),
                        "cacheRead": rng.randint(0, 90000),
                        "cacheWrite": rng.randint(0, 900),
                        "cost": {"total": rng.randint(1, 99999) / 1_000_000},
                    },
                    "stopReason": "stop",
                }
            else:
                text = " ".join(rng.choices(words, k=rng.randint(200, 3000)))
                message = {
                    "role": "toolResult",
                    "toolCallId": f"c{n}",
                    "toolName": "read",
                    "content": [{"type": "text", "text": text}],
                    "isError": False,
                }
            line = (
                json.dumps(
                    {
                        "type": "message",
                        "id": entry_id,
                        "parentId": parent,
                        "timestamp": stamp,
                        "message": message,
                    }
                )
                + "\n"
            )
            out.write(line)
            written += len(line)
            largest = max(largest, len(line))
            parent = entry_id
    return largest


def memory(size_mb: int) -> bool:
    """Print the import's peak memory for two file sizes; return whether it stayed bounded."""
    results: list[tuple[int, int, int, float]] = []
    with tempfile.TemporaryDirectory(prefix="runstore-bench-") as folder:
        for size in (size_mb // 4, size_mb):
            path = Path(folder) / f"generated-{size}mb.jsonl"
            largest = generate(path, size * 1_000_000)
            with build(sqlite(os.path.join(folder, f"mem-{size}.db"))) as container:
                repo = container.get(SESSION_REPOSITORY)
                tracemalloc.start()
                started = time.perf_counter()
                report = import_jsonl(repo, path).unwrap()
                elapsed = time.perf_counter() - started
                _, peak = tracemalloc.get_traced_memory()
                tracemalloc.stop()
            results.append((path.stat().st_size, largest, peak, elapsed))
            print(
                f"generated {path.stat().st_size / 1e6:7.1f} MB, {report.entries:,} entries, "
                f"largest line {largest / 1e6:.1f} MB: import {elapsed:5.1f} s, "
                f"peak Python memory {peak / 1e6:6.1f} MB"
            )
            path.unlink()
    size, largest, peak, _ = results[-1]
    bound = largest + DEFAULT_BATCH_BYTES
    growth = results[-1][2] / results[0][2]
    print(
        f"  largest line + one batch ({DEFAULT_BATCH_BYTES / 1e6:.1f} MB) = {bound / 1e6:.1f} MB; "
        f"peak = {peak / bound:.1f}x that, {peak / size:.3f}x the file"
    )
    print(
        f"  peak at {results[-1][0] / 1e6:.0f} MB / peak at {results[0][0] / 1e6:.0f} MB"
        f" = {growth:.2f} (streaming: about 1, not 4)"
    )
    print(
        f"  process max RSS (includes SQLite's page cache and the interpreter): "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3:.0f} MB"
    )
    return growth < 1.5 and peak < size / 4


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transcript", type=Path, default=DEFAULT_TRANSCRIPT)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--memory-mb", type=int, default=200)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--skip-process", action="store_true")
    args = parser.parse_args()
    ok = speed(args.transcript, args.rounds) <= BUDGET
    if not args.skip_process:
        whole_process(args.transcript, max(3, args.rounds // 3))
    if not args.skip_memory:
        ok = memory(args.memory_mb) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
