"""Benchmark: what a run's git context costs (commit, branch, dirty flag and changed files).

Run: ``.venv/bin/python benchmarks/git_context.py [--rounds 41] [--files 3000]``.

The recorder reads the git context once per run, on its writer thread: ``git_head`` (the
``.git`` files, no process) and one ``git status --porcelain=v1 -z`` (``git_status``, which
gives the dirty flag and the changed files), then ``begin_run`` stores the changed files
(at most ``MAX_CHANGED_FILES`` rows). Measured here, each in temporary repositories made
for the purpose:

- **small**: 10 tracked files, clean; **small dirty**: 3 of them changed and 2 untracked;
- **large**: ``--files`` tracked files in 30 folders, clean; **large dirty**: 200 of them
  changed and 300 untracked; **huge untracked**: the large repository with 5,000 untracked
  files in 5,000 folders, beyond the cap, so the list is cut;

the wall time of ``git_head`` + ``git_status`` over ``--rounds`` rounds (the median and the
90th percentile, in ms, after one warm-up call that fills the file-system cache; the index
refreshed once before, as in a checkout someone works in: :func:`_settled`), and of
``begin_run`` into an SQLite file with that scenario's changed files against the same call
with none (median extra ms). Printed against the budget :data:`BUDGET_MS`: git context may
add at most 50 ms to a run (and since it runs on the writer thread while pytest collects,
a run only waits for it when collection is faster). Last, the whole-run figure: ``pytest
--runstore`` of one test in a ``--files`` repository with 200 changed files, against the
same tree without its ``.git``, alternating, ``--whole-rounds`` rounds (median wall ms).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from runstore.layers import DATA_STORE, build, sqlite
from runstore.recorder._environment import git_head, git_status
from runstore.services.test_runs import Environment, RunStart

BUDGET_MS = 50.0
"""Most wall time (ms) the git context may add to a run (issue 14)."""


def _git(folder: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=b", "-c", "user.email=b@example.invalid", *args],
        cwd=folder, check=True, capture_output=True, timeout=300,
    )


def _repository(folder: Path, files: int) -> Path:
    folder.mkdir(parents=True)
    for i in range(files):
        path = folder / f"pkg{i % 30:02}" / f"module_{i:05}.py"
        path.parent.mkdir(exist_ok=True)
        path.write_text(f"VALUE = {i}\n", encoding="utf-8")
    _git(folder, "init", "-q")
    _git(folder, "add", ".")
    _git(folder, "commit", "-q", "-m", "initial")
    return folder


def _dirty(folder: Path, changed: int, untracked: int, *, folders: bool = False) -> None:
    modules = sorted(folder.glob("pkg*/module_*.py"))
    for path in modules[:changed]:
        path.write_text("VALUE = -1\n", encoding="utf-8")
    for i in range(untracked):
        where = folder / f"new{i:05}" if folders else folder / "new"
        where.mkdir(exist_ok=True)
        (where / f"file_{i:05}.py").write_text("", encoding="utf-8")


def _settled(folder: Path) -> None:
    """Let the tree's files age past git's racy-timestamp window, then refresh the index
    once, as any git command a developer runs does: a fresh index whose entries are as new
    as the files makes every ``--no-optional-locks`` status (which never writes the index)
    hash each file again (git's "racy git" rule), which no lived-in checkout does."""
    time.sleep(1.1)
    _git(folder, "status", "--porcelain")


def _median_ms(call: Callable[[], object], rounds: int) -> tuple[float, float]:
    call()  # warm-up: the file-system cache and git's index stat data
    times: list[float] = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.9))]


def _probe(folder: Path) -> Environment:
    commit, branch = git_head(folder)
    status = git_status(folder, budget=30.0)
    assert status is not None, f"git status gave no answer in {folder}"
    return Environment(git_commit=commit, git_branch=branch, git_dirty=status.dirty,
                       git_changed_files=status.changed,
                       git_changed_files_truncated=status.truncated)


def _store_ms(env: Environment, rounds: int, folder: Path) -> float:
    """Median extra ms of ``begin_run`` with ``env``'s changed files over one without."""
    bare = Environment(git_commit=env.git_commit, git_dirty=env.git_dirty)
    with build(sqlite(folder / "bench.db")) as container:
        store = container.get(DATA_STORE)
        started = datetime.now(UTC)

        def begin(environment: Environment) -> Callable[[], object]:
            return lambda: store.begin_run(RunStart("bench", "inv", started, environment))

        with_files = _median_ms(begin(env), rounds)[0]
        without = _median_ms(begin(bare), rounds)[0]
    return max(with_files - without, 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--whole-rounds", type=int, default=15)
    options = parser.parse_args()
    print(f"git context per run: median (p90) ms of {options.rounds} rounds; budget "
          f"{BUDGET_MS:.0f} ms; {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="runstore-git-") as tmp:
        root = Path(tmp)
        small = _repository(root / "small", 10)
        large = _repository(root / "large", options.files)
        scenarios: list[tuple[str, Path, Callable[[], None]]] = [
            ("small, clean", small, lambda: None),
            ("small, dirty", small, lambda: _dirty(small, 3, 2)),
            (f"{options.files} files, clean", large, lambda: None),
            (f"{options.files} files, dirty", large, lambda: _dirty(large, 200, 300)),
            ("+5,000 untracked folders", large,
             lambda: _dirty(large, 0, 5000, folders=True)),
        ]
        worst = 0.0
        print(f"{'repository':<28}{'changed':>9}{'git ms':>9}{'p90':>8}{'store ms':>10}"
              f"{'total':>8}  verdict")
        for name, folder, prepare in scenarios:
            prepare()
            _settled(folder)
            env = _probe(folder)
            git_ms, p90 = _median_ms(functools.partial(_probe, folder), options.rounds)
            store = _store_ms(env, options.rounds, root)
            total = git_ms + store
            worst = max(worst, total)
            files = env.git_changed_files or ()
            changed = f"{len(files)}{'+' if env.git_changed_files_truncated else ''}"
            verdict = "within budget" if total <= BUDGET_MS else "OVER BUDGET"
            print(f"{name:<28}{changed:>9}{git_ms:>9.1f}{p90:>8.1f}{store:>10.2f}"
                  f"{total:>8.1f}  {verdict}")
        print(f"worst median: {worst:.1f} ms of {BUDGET_MS:.0f} ms "
              f"({'within' if worst <= BUDGET_MS else 'over'} budget)")
        _whole_runs(root, options.files, options.whole_rounds)


def _pytest_ms(folder: Path) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "RUNSTORE_"))}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
         "runstore.pytest_plugin", "--runstore", "--runstore-keep-runs=0", "test_one.py"],
        cwd=folder, env=env, check=True, capture_output=True, timeout=300,
    )
    return (time.perf_counter() - start) * 1000


def _whole_runs(root: Path, files: int, rounds: int) -> None:
    """``pytest --runstore`` of one test in a repository of ``files`` files (200 of them
    changed) against the same tree with its ``.git`` moved away, alternating, ``rounds``
    rounds each: the wall time git context adds to a whole run."""
    folder = _repository(root / "whole", files)
    (folder / "test_one.py").write_text("def test_one():\n    pass\n", encoding="utf-8")
    _dirty(folder, 200, 0)
    _settled(folder)
    hidden = root / "hidden.git"
    with_git: list[float] = []
    without: list[float] = []
    _pytest_ms(folder)  # warm-up: bytecode, the database file
    for _ in range(rounds):
        with_git.append(_pytest_ms(folder))
        (folder / ".git").rename(hidden)
        try:
            without.append(_pytest_ms(folder))
        finally:
            hidden.rename(folder / ".git")
    added = statistics.median(with_git) - statistics.median(without)
    print(f"whole run, one test, {files} files, 200 changed: {statistics.median(with_git):.0f} ms"
          f" with git, {statistics.median(without):.0f} ms without (medians of {rounds}):"
          f" {added:+.0f} ms, {'within' if added <= BUDGET_MS else 'over'} the budget")


if __name__ == "__main__":
    main()
