"""Benchmark: what ``pytest --runstore`` costs, beside plain pytest and the reporters pytest has.

Run: ``.venv/bin/python benchmarks/plugin_overhead.py [--tests 5000] [--rounds 5]
[--collect-rounds 20] [--memory-tests 50000] [--no-memory]`` (``pip install -e '.[bench]'``
brings ``pytest-reportlog`` and ``pytest-json-report``; a reporter that is not installed is
left out and named).

Time: a generated suite of ``--tests`` trivial tests (100 per module) runs as whole pytest
processes, ``-q -p no:cacheprovider``, in these variants, each round running every variant
once in an order rotated by one each round (so none always runs first, or right after
another):

- **plain**: pytest alone;
- **junitxml**: ``--junitxml FILE`` (pytest's own reporter);
- **reportlog**: ``--report-log FILE`` (``pytest-reportlog``);
- **json-report**: ``--json-report --json-report-file FILE`` (``pytest-json-report``);
- **runstore**: ``--runstore --runstore-db FILE`` into a fresh database each time.

Equal work: every reporter writes its whole record to a file, which is deleted before each
run. Plugin autoloading is off (``PYTEST_DISABLE_PLUGIN_AUTOLOAD``) and each variant loads
its own plugin with ``-p``, so no variant pays for another's plugin and plain pytest is
pytest alone. The children run from bytecode compiled once in a warm-up round into a
temporary ``PYTHONPYCACHEPREFIX`` (pytest keeps its rewritten test modules there too).

Counted is the CPU time of the pytest process (user + system from ``wait4``, every thread
of it and the children it waited for, such as ``git``): steadier than wall time on a busy
machine. Printed per variant: the median and best CPU and the median wall time, and the
median ratios against plain and against junitxml. The budget: runstore at most
:data:`BUDGET_VS_JUNITXML` x junitxml (median CPU).

Collect-only: ``pytest --collect-only`` on a one-test project, plain and with
``--runstore``, ``--collect-rounds`` rounds alternating; the budget is at most
:data:`COLLECT_BUDGET_S` s more CPU with ``--runstore`` (median difference).

Memory: the suite with ``--memory-tests`` items, plain vs ``--runstore``; the peak resident
set of each pytest process (``ru_maxrss`` from ``wait4``); the target is ``--runstore``
within 1.10 x plain (the recorder buffers at most one batch of results).
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TESTS_PER_MODULE = 100
BUDGET_VS_JUNITXML = 1.0
"""Most median CPU of a recorded run, as a multiple of the same run with ``--junitxml``."""
COLLECT_BUDGET_S = 0.05
"""Most extra CPU (s) of ``--runstore --collect-only`` over plain ``--collect-only``."""
MEMORY_BUDGET = 1.10
"""Most peak RSS of a recorded run of ``--memory-tests`` items, as a multiple of plain."""


def generate(folder: Path, tests: int) -> Path:
    """Write ``tests`` trivial tests into ``folder`` (100 per module) and return it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    for module in range(0, tests, TESTS_PER_MODULE):
        count = min(TESTS_PER_MODULE, tests - module)
        body = "".join(f"def test_{module + i}():\n    assert True\n\n" for i in range(count))
        (folder / f"test_gen_{module // TESTS_PER_MODULE:04d}.py").write_text(body, "utf-8")
    return folder


def _env(scratch: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "RUNSTORE_")) and k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env["PYTHONPYCACHEPREFIX"] = str(scratch / "pycache")
    return env


@dataclass(frozen=True)
class Sample:
    """One pytest process: wall time (s), CPU time (user + system, s), peak RSS (KiB)."""

    wall: float
    cpu: float
    peak_kib: int


@dataclass(frozen=True)
class Variant:
    """A pytest command line (after ``pytest -q -p no:cacheprovider``) and the files it
    writes, removed before each run."""

    args: list[str]
    writes: tuple[Path, ...] = ()

    def fresh(self) -> None:
        for path in self.writes:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)


def measure(folder: Path, variant: Variant, env: dict[str, str]) -> Sample:
    """Run pytest on ``folder`` and measure that process (``wait4`` gives its own usage)."""
    variant.fresh()
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *variant.args]
    started = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"pytest {' '.join(variant.args)} exited {code}")
    missing = [str(path) for path in variant.writes if not path.exists()]
    if missing:
        raise SystemExit(f"pytest {' '.join(variant.args)} wrote no {', '.join(missing)}")
    return Sample(elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss)


def runstore_variant(scratch: Path, *extra: str) -> Variant:
    db = scratch / "runstore.db"
    return Variant(["-p", "runstore.pytest_plugin", "--runstore", f"--runstore-db={db}",
                    *extra], (db,))


REPORTERS: dict[str, tuple[str | None, Callable[[Path], Variant]]] = {
    "plain": (None, lambda scratch: Variant([])),
    "junitxml": (None, lambda scratch: Variant(
        ["--junitxml", str(scratch / "junit.xml")], (scratch / "junit.xml",))),
    "reportlog": ("pytest_reportlog", lambda scratch: Variant(
        ["-p", "pytest_reportlog.plugin", "--report-log", str(scratch / "report.jsonl")],
        (scratch / "report.jsonl",))),
    "json-report": ("pytest_jsonreport", lambda scratch: Variant(
        ["-p", "pytest_jsonreport.plugin", "--json-report",
         "--json-report-file", str(scratch / "report.json")], (scratch / "report.json",))),
    "runstore": (None, runstore_variant),
}
"""Each variant: the module it needs installed (None: always there) and its command line."""


def rotating(folder: Path, kinds: dict[str, Variant], env: dict[str, str],
             rounds: int) -> dict[str, list[Sample]]:
    """``rounds`` samples of each variant, after one warm-up round; each round runs every
    variant once, the order rotated by one each round."""
    names = list(kinds)
    for name in names:  # warm the file cache and the bytecode once
        measure(folder, kinds[name], env)
    samples: dict[str, list[Sample]] = {name: [] for name in names}
    for round_ in range(rounds):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(measure(folder, kinds[name], env))
    return samples


def time_suite(tests: int, rounds: int) -> bool:
    """Print the timing table of the suite; return whether runstore kept its budget."""
    with tempfile.TemporaryDirectory(prefix="runstore-bench-") as tmp:
        scratch = Path(tmp)
        suite = generate(scratch / "suite", tests)
        kinds = {name: make(scratch) for name, (needs, make) in REPORTERS.items()
                 if needs is None or importlib.util.find_spec(needs) is not None}
        samples = rotating(suite, kinds, _env(scratch), rounds)
    cpu = {name: statistics.median(s.cpu for s in runs) for name, runs in samples.items()}
    print(f"time, {tests} trivial tests, {rounds} rounds in rotating order "
          "(CPU = user + system of the pytest process):")
    print(f"  {'variant':<12} {'median CPU':>10} {'best CPU':>9} {'median wall':>11} "
          f"{'x plain':>8} {'x junitxml':>10}")
    for name, runs in samples.items():
        print(f"  {name:<12} {cpu[name]:>8.2f} s {min(s.cpu for s in runs):>7.2f} s "
              f"{statistics.median(s.wall for s in runs):>9.2f} s "
              f"{cpu[name] / cpu['plain']:>8.3f} {cpu[name] / cpu['junitxml']:>10.3f}")
    for name, (needs, _) in REPORTERS.items():
        if name not in samples:
            print(f"  {name:<12} not measured: {needs} is not installed "
                  "(pip install -e '.[bench]')")
    ratio = cpu["runstore"] / cpu["junitxml"]
    ok = ratio <= BUDGET_VS_JUNITXML
    print(f"verdict: {'PASS' if ok else 'FAIL'}: runstore {ratio:.3f}x junitxml in median CPU "
          f"(budget <= {BUDGET_VS_JUNITXML:.1f}x; {cpu['runstore'] / cpu['plain']:.3f}x plain)")
    return ok


def collect_only(rounds: int) -> bool:
    """Print what ``--runstore`` adds to ``--collect-only`` of one test; return whether it
    kept its budget."""
    with tempfile.TemporaryDirectory(prefix="runstore-bench-") as tmp:
        scratch = Path(tmp)
        project = generate(scratch / "one", 1)
        kinds = {
            "plain": Variant(["--collect-only"]),
            "runstore": Variant(["-p", "runstore.pytest_plugin", "--runstore",
                                 "--collect-only"]),
        }
        samples = rotating(project, kinds, _env(scratch), rounds)
    cpu = {name: [s.cpu for s in runs] for name, runs in samples.items()}
    median = {name: statistics.median(values) for name, values in cpu.items()}
    best = {name: min(values) for name, values in cpu.items()}
    extra = median["runstore"] - median["plain"]
    best_extra = best["runstore"] - best["plain"]
    print(f"collect-only, one test, {rounds} rounds alternating:")
    for name in kinds:
        print(f"  {name:<12} median CPU {median[name] * 1e3:7.1f} ms   best "
              f"{best[name] * 1e3:7.1f} ms")
    ok = extra <= COLLECT_BUDGET_S
    print(f"verdict: {'PASS' if ok else 'FAIL'}: --runstore --collect-only costs "
          f"{extra * 1e3:+.1f} ms of median CPU over plain (best {best_extra * 1e3:+.1f} ms; "
          f"budget <= +{COLLECT_BUDGET_S * 1e3:.0f} ms)")
    return ok


def memory_suite(tests: int) -> bool:
    """Print the peak RSS of plain and recorded runs; return whether runstore kept its
    target."""
    with tempfile.TemporaryDirectory(prefix="runstore-bench-") as tmp:
        scratch = Path(tmp)
        suite = generate(scratch / "suite", tests)
        env = _env(scratch)
        measured = {name: measure(suite, variant, env) for name, variant in
                    {"plain": Variant([]), "runstore": runstore_variant(scratch)}.items()}
    plain = measured["plain"].peak_kib
    print(f"peak RSS, {tests} trivial tests:")
    for name, sample in measured.items():
        print(f"  {name:<12} {sample.peak_kib / 1024:8.1f} MiB   x{sample.peak_kib / plain:.3f} "
              f"of plain   ({sample.wall:.1f} s wall)")
    ratio = measured["runstore"].peak_kib / plain
    ok = ratio <= MEMORY_BUDGET
    print(f"verdict: {'PASS' if ok else 'FAIL'}: runstore peak RSS {ratio:.3f}x plain "
          f"(target <= {MEMORY_BUDGET:.2f}x)")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--collect-rounds", type=int, default=20)
    parser.add_argument("--memory-tests", type=int, default=50_000)
    parser.add_argument("--no-memory", action="store_true")
    options = parser.parse_args()
    results = [collect_only(options.collect_rounds), time_suite(options.tests, options.rounds)]
    if not options.no_memory:
        results.append(memory_suite(options.memory_tests))
    print(f"verdict: {'PASS' if all(results) else 'FAIL'} overall")


if __name__ == "__main__":
    main()
