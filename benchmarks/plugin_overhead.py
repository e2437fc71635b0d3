"""Benchmark: what ``pytest --runstore`` costs over plain pytest, beside ``pytest-reportlog``.

Run: ``.venv/bin/python benchmarks/plugin_overhead.py [--tests 5000] [--rounds 5]
[--memory-tests 50000] [--no-memory]``.

Time: a generated suite of ``--tests`` trivial tests (100 per module) runs as separate
pytest processes, ``-q -p no:cacheprovider``, in three variants measured in the same
rounds, alternating: **plain** pytest, **--runstore** (into a fresh database file each
time) and **reportlog** (``--report-log``, when ``pytest-reportlog`` is installed). The
median wall time of each counts; the target is ``--runstore`` at most 1.15 x plain.

Memory: the same suite with ``--memory-tests`` items, plain vs ``--runstore``; the peak
resident set of each pytest process (``ru_maxrss`` from ``wait4``); the target is
``--runstore`` within 1.10 x plain (the recorder buffers at most one batch of results).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS_PER_MODULE = 100


def generate(folder: Path, tests: int) -> Path:
    """Write ``tests`` trivial tests into ``folder`` (100 per module) and return it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    for module in range(0, tests, TESTS_PER_MODULE):
        count = min(TESTS_PER_MODULE, tests - module)
        body = "".join(f"def test_{module + i}():\n    assert True\n\n" for i in range(count))
        (folder / f"test_gen_{module // TESTS_PER_MODULE:04d}.py").write_text(body, "utf-8")
    return folder


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "RUNSTORE_"))}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def measure(folder: Path, args: list[str]) -> tuple[float, int]:
    """Run pytest on ``folder``; return (wall seconds, peak RSS in KiB) of that process."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    started = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=folder, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"pytest {' '.join(args)} exited {process.returncode}")
    return elapsed, usage.ru_maxrss


def variants(scratch: Path, with_reportlog: bool) -> dict[str, list[str]]:
    found = {
        "plain": [],
        "--runstore": ["--runstore", f"--runstore-db={scratch / 'runstore.db'}"],
    }
    if with_reportlog:
        found["reportlog"] = ["--report-log", str(scratch / "report.jsonl")]
    return found


def _fresh(scratch: Path) -> None:
    for name in ("runstore.db", "runstore.db-wal", "runstore.db-shm", "report.jsonl"):
        (scratch / name).unlink(missing_ok=True)


def time_suite(tests: int, rounds: int) -> None:
    with_reportlog = importlib.util.find_spec("pytest_reportlog") is not None
    with tempfile.TemporaryDirectory(prefix="runstore-bench-") as tmp:
        scratch = Path(tmp)
        suite = generate(scratch / "suite", tests)
        kinds = variants(scratch, with_reportlog)
        times: dict[str, list[float]] = {name: [] for name in kinds}
        for _ in range(rounds):
            for name, args in kinds.items():
                _fresh(scratch)
                times[name].append(measure(suite, args)[0])
    plain = statistics.median(times["plain"])
    print(f"time, {tests} trivial tests, median of {rounds} rounds:")
    for name, samples in times.items():
        median = statistics.median(samples)
        print(
            f"  {name:<11} {median:7.2f} s   x{median / plain:.3f} of plain   "
            f"(rounds: {', '.join(f'{s:.2f}' for s in samples)})"
        )
    if not with_reportlog:
        print("  reportlog   not measured: pip install pytest-reportlog")
    ratio = statistics.median(times["--runstore"]) / plain
    print(f"  --runstore overhead {100 * (ratio - 1):+.1f}% (target <= +15%)")


def memory_suite(tests: int) -> None:
    with tempfile.TemporaryDirectory(prefix="runstore-bench-") as tmp:
        scratch = Path(tmp)
        suite = generate(scratch / "suite", tests)
        kinds = variants(scratch, with_reportlog=False)
        peaks: dict[str, int] = {}
        seconds: dict[str, float] = {}
        for name, args in kinds.items():
            _fresh(scratch)
            seconds[name], peaks[name] = measure(suite, args)
    plain = peaks["plain"]
    print(f"peak RSS, {tests} trivial tests:")
    for name, peak in peaks.items():
        print(
            f"  {name:<11} {peak / 1024:8.1f} MiB   x{peak / plain:.3f} of plain   "
            f"({seconds[name]:.1f} s)"
        )
    print(f"  --runstore memory {100 * (peaks['--runstore'] / plain - 1):+.1f}% (target <= +10%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--memory-tests", type=int, default=50_000)
    parser.add_argument("--no-memory", action="store_true")
    options = parser.parse_args()
    time_suite(options.tests, options.rounds)
    if not options.no_memory:
        memory_suite(options.memory_tests)


if __name__ == "__main__":
    main()
