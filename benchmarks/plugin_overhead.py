"""Benchmark: what ``pytest --runstore`` costs over plain pytest, beside ``pytest-reportlog``.

Run: ``.venv/bin/python benchmarks/plugin_overhead.py [--tests 5000] [--rounds 5]
[--memory-tests 50000] [--no-memory]``.

Time: a generated suite of ``--tests`` trivial tests (100 per module) runs as separate
pytest processes, ``-q -p no:cacheprovider``, in three variants measured in the same
rounds, alternating: **plain** pytest, **--runstore** (into a fresh database file each
time) and **reportlog** (``--report-log``, when ``pytest-reportlog`` is installed). The
median wall time of each counts, and the median and best CPU time (user + system of the
pytest process, steadier than wall time on a busy machine; the best round is the one least
disturbed by other work); the target is ``--runstore`` at most 1.15 x plain.

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
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Sample:
    """One pytest process: wall time (s), CPU time (user + system, s), peak RSS (KiB)."""

    wall: float
    cpu: float
    peak_kib: int


def measure(folder: Path, args: list[str]) -> Sample:
    """Run pytest on ``folder`` and measure that process (``wait4`` gives its own usage)."""
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
    return Sample(elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss)


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
        samples: dict[str, list[Sample]] = {name: [] for name in kinds}
        for _ in range(rounds):
            for name, args in kinds.items():
                _fresh(scratch)
                samples[name].append(measure(suite, args))
    wall = {name: statistics.median(s.wall for s in runs) for name, runs in samples.items()}
    cpu = {name: statistics.median(s.cpu for s in runs) for name, runs in samples.items()}
    best = {name: min(s.cpu for s in runs) for name, runs in samples.items()}
    print(f"time, {tests} trivial tests, {rounds} rounds (CPU = user + system):")
    for name, runs in samples.items():
        print(f"  {name:<11} median wall {wall[name]:6.2f} s x{wall[name] / wall['plain']:.3f}"
              f"   median CPU {cpu[name]:6.2f} s x{cpu[name] / cpu['plain']:.3f}"
              f"   best CPU {best[name]:6.2f} s x{best[name] / best['plain']:.3f}"
              f"   (wall rounds: {', '.join(f'{s.wall:.2f}' for s in runs)})")
    if not with_reportlog:
        print("  reportlog   not measured: pip install pytest-reportlog")
    def over(measure: dict[str, float]) -> str:
        return f"{100 * (measure['--runstore'] / measure['plain'] - 1):+.1f}%"

    print(f"  --runstore overhead: median wall {over(wall)}, median CPU {over(cpu)}, "
          f"best CPU {over(best)} (target <= +15%)")


def memory_suite(tests: int) -> None:
    with tempfile.TemporaryDirectory(prefix="runstore-bench-") as tmp:
        scratch = Path(tmp)
        suite = generate(scratch / "suite", tests)
        measured: dict[str, Sample] = {}
        for name, args in variants(scratch, with_reportlog=False).items():
            _fresh(scratch)
            measured[name] = measure(suite, args)
    plain = measured["plain"].peak_kib
    print(f"peak RSS, {tests} trivial tests:")
    for name, sample in measured.items():
        print(f"  {name:<11} {sample.peak_kib / 1024:8.1f} MiB   x{sample.peak_kib / plain:.3f} "
              f"of plain   ({sample.wall:.1f} s wall)")
    extra = measured["--runstore"].peak_kib / plain - 1
    print(f"  --runstore memory {100 * extra:+.1f}% (target <= +10%)")


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
