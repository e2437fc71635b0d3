"""Crash safety of the live DataStore: a writer killed with SIGKILL mid-write loses nothing it
committed and leaves no partial records.

A child process persists runs through ``DataStore`` in a loop (begin, batches, finish) and
reports on stdout every run it finished. The parent kills it at a random moment, then checks
the file: ``integrity_check`` is ok, ``foreign_key_check`` is empty, every reported run is
there and finished, every finished run has all its items, and a run left ``running`` holds
whole batches only. The next child first marks the killed writer's runs ``aborted``.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import apsw
import pytest
from returns.result import Success

from runstore.layers import build, sqlite
from runstore.services.pagination import MAX_PAGE_SIZE
from runstore.services.test_runs import DataReader, RunStatus

BATCH = 25
BATCHES = 4

CHILD = textwrap.dedent(
    f"""
    import sys
    from datetime import UTC, datetime
    from returns.result import Success
    from runstore.layers import build, sqlite
    from runstore.services.test_runs import (
        DataStore, ErrorInfo, Outcome, Phase, PhaseResult, RunStart, RunStatus, StackFrame,
        TestResult, RunRetentionPolicy,
    )

    path, seed = sys.argv[1], int(sys.argv[2])
    with build(sqlite(path)) as c:
        store = c.get(DataStore)
        aborted = store.abort_stale_runs("crash", older_than=datetime.now(UTC))
        assert isinstance(aborted, Success), aborted
        print("ready", flush=True)
        n = 0
        while True:
            n += 1
            run = store.begin_run(RunStart("crash", f"{{seed}}-{{n}}", datetime.now(UTC))).unwrap()
            for b in range({BATCHES}):
                items = []
                for i in range({BATCH}):
                    k = b * {BATCH} + i
                    failed = k % 7 == 0
                    frames = tuple(
                        StackFrame(f"src/m{{(k + j) % 13}}.py", j + 1, "f", True) for j in range(3)
                    )
                    items.append(TestResult(
                        nodeid=f"tests/test_m{{k % 9}}.py::test_{{k}}[{{seed}}]",
                        module_path=f"tests/test_m{{k % 9}}.py",
                        name=f"test_{{k}}",
                        phases=(PhaseResult(
                            Phase.CALL, Outcome.FAILED if failed else Outcome.PASSED, 0.5),),
                        markers=("slow",) if k % 2 else (),
                        errors=(ErrorInfo(Phase.CALL, "AssertionError", f"bad {{k}}", "E", frames),)
                        if failed else (),
                    ))
                stored = store.record_results(run, items)
                assert isinstance(stored, Success), stored
            finished = store.finish_run(run, RunStatus.FAILED, datetime.now(UTC))
            assert isinstance(finished, Success), finished
            print(f"finished {{int(run)}}", flush=True)
            if n % 5 == 0:
                assert isinstance(store.prune_runs(RunRetentionPolicy(keep_runs=8)), Success)
    """
)


def _check(path: Path, reported: set[int]) -> int:
    """Check the file after a kill; return how many runs were cut short (not finished)."""
    connection = apsw.Connection(str(path))
    try:
        assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert connection.execute("PRAGMA foreign_key_check").fetchall() == []
    finally:
        connection.close()
    with build(sqlite(path)) as c:
        reader: DataReader = c.get(DataReader)
        page = reader.list_runs("crash", limit=MAX_PAGE_SIZE)
        assert isinstance(page, Success), page
        runs = {int(s.id): s for s in page.unwrap().items}
        for run_id in reported:
            if run_id in runs:
                assert runs[run_id].status == RunStatus.FAILED, runs[run_id]
            else:  # only retention (keep_runs=8) may remove a finished run
                assert sum(1 for r in runs if r > run_id) >= 8, (run_id, sorted(runs))
        for summary in runs.values():
            tests = reader.tests(summary.id)
            assert isinstance(tests, Success), tests
            stored = len(tests.unwrap())
            assert stored == summary.total, (summary, stored)
            if summary.status == RunStatus.FAILED:
                assert stored == BATCH * BATCHES, (summary, stored)
                failures = reader.failures(summary.id)
                assert isinstance(failures, Success)
                assert len(failures.unwrap()) == summary.counts["failed"]
                assert all(len(f.frames) == 3 for f in failures.unwrap())
            else:
                assert summary.status in (RunStatus.RUNNING, RunStatus.ABORTED), summary
                assert stored % BATCH == 0, (summary, stored)  # whole batches or nothing
        return sum(1 for s in runs.values() if s.status != RunStatus.FAILED)


def _kill_loop(tmp_path: Path, kills: int, seed: int) -> int:
    """Kill ``kills`` writers; return the most runs found cut short after one kill."""
    path = tmp_path / "crash.db"
    rng = random.Random(seed)
    reported: set[int] = set()
    cut_short = 0
    for round_no in range(kills):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path), str(round_no)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        ready = child.stdout.readline()
        assert ready.strip() == "ready", (ready, child.stderr.read() if child.stderr else "")
        time.sleep(rng.uniform(0.0, 0.4))
        os.kill(child.pid, signal.SIGKILL)
        out, err = child.communicate(timeout=30)
        assert child.returncode == -signal.SIGKILL, err
        for line in out.splitlines():
            words = line.split()
            if len(words) == 2 and words[0] == "finished" and words[1].isdigit():
                reported.add(int(words[1]))
        cut_short = max(cut_short, _check(path, reported))
    assert reported, "the writer never finished a run; kill later"
    return cut_short


def test_a_killed_writer_leaves_complete_runs(tmp_path: Path) -> None:
    _kill_loop(tmp_path, kills=3, seed=1)


@pytest.mark.slow
def test_a_writer_killed_thirty_times_leaves_complete_runs(tmp_path: Path) -> None:
    assert _kill_loop(tmp_path, kills=30, seed=2) >= 1, "no kill landed inside a run"
