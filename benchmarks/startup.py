"""Benchmark: what starting runstore costs, as whole processes, against ``python -c pass``.

Run: ``.venv/bin/python benchmarks/startup.py [--rounds 15] [--cases 200]``.

Cases, each a fresh process of this interpreter, measured in the same rounds with the order
rotated every round (so no case always runs first, or right after another):

- ``python -c pass``: the floor every Python command pays;
- ``python -c "import click, attrs, returns.result, apsw"``: the dependency floor, what the
  libraries every command needs cost before runstore's own code runs;
- ``python -c "import runstore.layers"``: the container and the layers (no domain);
- ``runstore --format json show latest`` and ``runstore failures``: the console script
  (when installed beside this interpreter) on a temporary database seeded with two
  finished runs of ``--cases`` items each (every 20th failing).

The CPU time (user + system of the child, from ``getrusage``) counts: steadier than wall
time on a busy machine. Prints per case the median and best CPU time and the ratios of the
medians to ``python -c pass`` and to the dependency floor; the budget is at most 6x
``python -c pass`` for each ``runstore`` command. Then, for each ``runstore``
command, which runstore modules of other domains it imported (the budget allows none) and
whether it imported ``rich`` (only text output may).

Every child compiles its bytecode once, in the warm-up, into a temporary
``PYTHONPYCACHEPREFIX`` (``PYTHONDONTWRITEBYTECODE`` is dropped for the children): an
installed runstore runs from bytecode, and compiling the sources on every call would measure
the compiler instead.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from _test_runs_synthetic import synthetic_run

from runstore.layers import DATA_STORE, build, sqlite
from runstore.services.test_runs import RunStart, RunStatus

BUDGET = 6.0
PROJECT = "bench"
FLOOR = "import click, attrs, returns.result, apsw"
"""What every ``runstore`` command imports before any of runstore's own modules."""
OTHER_DOMAINS = ("agents", "sessions", "executions", "action_runs", "ledger")
"""Fragments of the module names of the domains a test-runs command must not import."""


def seed(path: Path, cases: int) -> None:
    """Write two finished runs of ``cases`` items of project ``bench`` into ``path``."""
    with build(sqlite(path)) as container:
        store = container.get(DATA_STORE)
        for status in (RunStatus.PASSED, RunStatus.FAILED):
            run = store.begin_run(RunStart(PROJECT, f"inv-{status}", datetime.now(UTC))).unwrap()
            store.record_results(run, synthetic_run(cases, max(1, cases // 20))).unwrap()
            store.finish_run(run, status, datetime.now(UTC)).unwrap()


def cpu_seconds(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    """Run ``argv`` to completion; return its CPU time (user + system, s)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def imported_by(argv: list[str], env: dict[str, str], cwd: Path) -> list[str]:
    """The modules a ``runstore`` command (``argv`` after the program name) leaves imported."""
    probe = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('\\n'.join(sorted(sys.modules)), file=sys.stderr))\n"
        f"sys.argv = ['runstore', *{argv!r}]\n"
        "from runstore.cli import main\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, cwd=cwd, capture_output=True, text=True, check=True
    )
    return done.stderr.split()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--cases", type=int, default=200)
    args = parser.parse_args()

    python = sys.executable
    script = Path(python).with_name("runstore")
    with tempfile.TemporaryDirectory() as folder:
        cwd = Path(folder)
        db = cwd / "runstore.db"
        seed(db, args.cases)
        env = {
            k: v for k, v in os.environ.items()
            if not k.startswith("RUNSTORE_") and k != "PYTHONDONTWRITEBYTECODE"
        }
        env["RUNSTORE_DB"] = str(db)
        env["PYTHONPYCACHEPREFIX"] = str(cwd / "pycache")
        cases: dict[str, list[str]] = {
            "python -c pass": [python, "-c", "pass"],
            "dependency floor": [python, "-c", FLOOR],
            "import runstore.layers": [python, "-c", "import runstore.layers"],
        }
        commands = {
            "runstore --format json show latest": ["--format", "json", "show", "latest"],
            "runstore failures": ["failures"],
        }
        if script.exists():
            cases.update({name: [str(script), *argv] for name, argv in commands.items()})
        else:
            print(f"no console script at {script}: the runstore commands are left out")

        names = list(cases)
        samples: dict[str, list[float]] = {name: [] for name in names}
        for argv in cases.values():  # warm the file cache and the bytecode once
            cpu_seconds(argv, env, cwd)
        for round_ in range(args.rounds):
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                samples[name].append(cpu_seconds(cases[name], env, cwd))

        floor = statistics.median(samples["python -c pass"])
        dependencies = statistics.median(samples["dependency floor"])
        print(f"{args.rounds} rounds, rotating order; CPU time (user + system) per process")
        print(f"dependency floor: {FLOOR}")
        print(f"{'case':<36} {'median ms':>10} {'best ms':>9} {'x pass':>8} {'x floor':>8}")
        verdicts: list[bool] = []
        for name in names:
            median, best = statistics.median(samples[name]), min(samples[name])
            ratio = median / floor
            print(f"{name:<36} {median * 1e3:>10.1f} {best * 1e3:>9.1f} {ratio:>8.2f}"
                  f" {median / dependencies:>8.2f}")
            if name.startswith("runstore"):
                verdicts.append(ratio <= BUDGET)

        if script.exists():
            for name, argv in commands.items():
                modules = imported_by(argv, env, cwd)
                ours = [m for m in modules if m.startswith("runstore")]
                foreign = [m for m in ours if any(d in m for d in OTHER_DOMAINS)]
                verdicts.append(not foreign and "rich" not in modules)
                print(f"{name}: imported {len(ours)} runstore modules; of other domains:"
                      f" {', '.join(foreign) or 'none'}; rich: "
                      f"{'yes' if 'rich' in modules else 'no'}")
            verdict = "PASS" if all(verdicts) else "FAIL"
            print(f"verdict: {verdict} (budget: each runstore command at most {BUDGET:g}x"
                  " python -c pass in CPU, importing no other domain and no rich)")
        else:
            print("verdict: n/a (no runstore console script)")


if __name__ == "__main__":
    main()
