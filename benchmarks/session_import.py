"""Benchmark: importing a pi session transcript, and the importer's memory on a large one.

Run: ``.venv/bin/python benchmarks/session_import.py [--transcript PATH] [--rounds N]
[--memory-mb 200] [--skip-memory]``.

1. Speed. Import ``large-session.jsonl`` (1,018 entries, about 1 MB) into a fresh session
   of an SQLite file, against two baselines measured in the same run, interleaved round by
   round (the best round of each counts): reading the file and ``json.loads`` of each line
   (the target: import <= 3x), and raw apsw inserting the same lines into one table
   (for scale).
2. Memory. Generate a transcript of ``--memory-mb`` MB (and one of a quarter that size) in
   a temporary folder, import each into a temporary database with ``tracemalloc`` on, and
   compare the peak of Python allocations with the file size and with the largest line plus
   one batch (``DEFAULT_BATCH_BYTES``). Streaming means the peak stays near that bound and
   does not grow with the file. The folder is deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import apsw

from runstore.layers import build, sqlite
from runstore.services import SessionRepository
from runstore.sessions_import import DEFAULT_BATCH_BYTES, import_jsonl

DEFAULT_TRANSCRIPT = (
    Path(__file__).resolve().parents[2]
    / "shared"
    / "acceptance"
    / "pi-sessions"
    / "large-session.jsonl"
)


def _timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def speed(transcript: Path, rounds: int) -> float:
    """Print import time against json.loads and raw apsw; return the json.loads ratio.

    Each round times the three one after the other; the machine may be shared, so the
    ratio is reported both from the best times and as the median of the rounds' ratios.
    """
    lines = transcript.read_bytes().splitlines()
    times: dict[str, list[float]] = {"parse": [], "import": [], "raw": []}
    with tempfile.TemporaryDirectory(prefix="runstore-bench-") as folder:
        raw = apsw.Connection(os.path.join(folder, "raw.db"))
        raw.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL")
        raw.execute("CREATE TABLE lines (k INTEGER, seq INTEGER, body TEXT, PRIMARY KEY (k, seq))")

        def parse() -> None:
            with open(transcript, "rb") as handle:
                for line in handle:
                    json.loads(line)

        with build(sqlite(os.path.join(folder, "runstore.db"))) as container:
            repo = container.get(SessionRepository)
            for round_no in range(rounds):

                def imported(n: int = round_no) -> None:
                    import_jsonl(repo, transcript, session_id=f"r{n}").unwrap()

                def raw_insert(n: int = round_no) -> None:
                    with raw:
                        raw.executemany(
                            "INSERT INTO lines VALUES (?, ?, ?)",
                            ((n, i, line.decode()) for i, line in enumerate(lines)),
                        )

                times["parse"].append(_timed(parse))
                times["import"].append(_timed(imported))
                times["raw"].append(_timed(raw_insert))
        raw.close()
    best = {name: min(values) for name, values in times.items()}
    ratio = best["import"] / best["parse"]
    median = statistics.median(i / p for i, p in zip(times["import"], times["parse"], strict=True))
    print(f"transcript: {transcript.name}, {len(lines)} lines, {transcript.stat().st_size:,} bytes")
    print(f"  json.loads of every line: {best['parse'] * 1000:8.2f} ms")
    print(f"  raw apsw insert of lines: {best['raw'] * 1000:8.2f} ms")
    print(f"  runstore import (sqlite): {best['import'] * 1000:8.2f} ms")
    verdict = "ok" if ratio <= 3 else "MISSED"
    print(
        f"  import / json.loads = {ratio:.2f}x best, {median:.2f}x median (target <= 3x: {verdict})"
    )
    print(f"  import / raw apsw   = {best['import'] / best['raw']:.2f}x")
    return ratio


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
                repo = container.get(SessionRepository)
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
    args = parser.parse_args()
    ok = speed(args.transcript, args.rounds) <= 3
    if not args.skip_memory:
        ok = memory(args.memory_mb) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
