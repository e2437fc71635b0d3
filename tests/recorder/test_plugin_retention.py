"""Retention in the plugin: old runs are pruned after each recorded run, never a running one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from plugin_runs import SUMMARY, run_pytest, write

from runstore.layers import build, sqlite
from runstore.recorder import DEFAULT_KEEP_RUNS
from runstore.services.test_runs import DataReader, DataStore, RunId, RunStart, RunStatus

ONE = "def test_one():\n    pass\n"


def _run_ids(db: Path, limit: int = 100) -> list[int]:
    with build(sqlite(db)) as container:
        page = container.get(DataReader).list_runs("proj", limit=limit).unwrap()
    return sorted(run.id for run in page.items)


def _finished_runs(db: Path, count: int, first: datetime) -> None:
    """Seed ``count`` passed runs of ``proj``, one a day from ``first``."""
    with build(sqlite(db)) as container:
        store = container.get(DataStore)
        for day in range(count):
            started = first + timedelta(days=day)
            run = store.begin_run(RunStart("proj", f"seed-{day}", started)).unwrap()
            store.finish_run(run, RunStatus.PASSED, started + timedelta(seconds=1)).unwrap()


def _pruned_lines(output: str) -> list[str]:
    return [line for line in SUMMARY.findall(output) if line.startswith("runstore: pruned")]


def test_keep_runs_prunes_after_each_run_and_says_so_only_when_verbose(tmp_path: Path) -> None:
    folder = write(tmp_path / "proj", test_one=ONE)
    db = folder / ".runstore" / "runstore.db"
    for _ in range(2):
        done = run_pytest(folder, "--runstore", "--runstore-keep-runs=2", "-v")
        assert _pruned_lines(done.stdout) == []  # nothing to prune yet
    quiet = run_pytest(folder, "--runstore", "--runstore-keep-runs=2")
    assert _run_ids(db) == [2, 3]
    assert _pruned_lines(quiet.stdout) == []
    verbose = run_pytest(folder, "--runstore", "--runstore-keep-runs", "2", "-v")
    assert _run_ids(db) == [3, 4]
    assert _pruned_lines(verbose.stdout) == [
        "runstore: pruned 1 old run and 0 unused file records (keep 2 runs per project)"
    ]


def test_the_ini_options_set_retention_and_zero_keeps_every_run(tmp_path: Path) -> None:
    folder = write(tmp_path / "proj", test_one=ONE,
                   **{"pytest.ini": "[pytest]\nrunstore_keep_runs = 1\n"})
    db = folder / ".runstore" / "runstore.db"
    run_pytest(folder, "--runstore")
    run_pytest(folder, "--runstore")
    assert _run_ids(db) == [2]
    run_pytest(folder, "--runstore", "--runstore-keep-runs=0")  # the flag beats the ini
    run_pytest(folder, "--runstore", "--runstore-keep-runs=0")
    assert _run_ids(db) == [2, 3, 4]


def test_a_running_run_is_never_pruned(tmp_path: Path) -> None:
    folder = write(tmp_path / "proj", test_one=ONE)
    db = folder / ".runstore" / "runstore.db"
    with build(sqlite(db)) as container:  # a run of another process that is still going
        store = container.get(DataStore)
        running: RunId = store.begin_run(
            RunStart("proj", "elsewhere", datetime.now(UTC))
        ).unwrap()
    # It names no pid, so no run takes it for dead, and it is younger than a day.
    run_pytest(folder, "--runstore", "--runstore-keep-runs=1")
    run_pytest(folder, "--runstore", "--runstore-keep-runs=1")
    with build(sqlite(db)) as container:
        status = container.get(DataReader).get_run(running).unwrap().status
    assert status is RunStatus.RUNNING
    assert _run_ids(db) == [running, 3]


def test_max_age_days_drops_old_runs(tmp_path: Path) -> None:
    folder = write(tmp_path / "proj", test_one=ONE)
    db = folder / ".runstore" / "runstore.db"
    _finished_runs(db, 1, datetime.now(UTC) - timedelta(days=30))
    run_pytest(folder, "--runstore", "--runstore-max-age-days=40")
    assert _run_ids(db) == [1, 2]
    run_pytest(folder, "--runstore", "--runstore-max-age-days", "7")
    assert _run_ids(db) == [2, 3]


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--runstore-keep-runs=-1"], "'--runstore-keep-runs': must be a whole number from 0 to"),
        (["--runstore-keep-runs=lots"], "'lots' is not a whole number of runs"),
        (["--runstore-max-age-days=soon"], "'soon' is not a number of days"),
        (["--runstore-max-age-days=nan"], "from 0 (no age limit) to 1,000,000, got 'nan'"),
        (["--runstore-max-age-days=1e999"], "from 0 (no age limit) to 1,000,000, got '1e999'"),
        (["--runstore-max-age-days=2000000"], "'--runstore-max-age-days': must be a finite"),
        (["-o", "runstore_keep_runs=x"], "Invalid value for ini runstore_keep_runs"),
    ],
)
def test_a_retention_that_is_not_a_count_or_an_age_is_a_usage_error(
    tmp_path: Path, args: list[str], reason: str
) -> None:
    folder = write(tmp_path / "proj", test_one=ONE)
    done = run_pytest(folder, "--runstore", *args)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    assert reason in done.stderr
    assert not (folder / ".runstore").exists()


def test_by_default_a_year_of_daily_runs_is_kept_and_no_more(tmp_path: Path) -> None:
    assert DEFAULT_KEEP_RUNS >= 366
    folder = write(tmp_path / "proj", test_one=ONE)
    db = folder / ".runstore" / "runstore.db"
    _finished_runs(db, DEFAULT_KEEP_RUNS, datetime.now(UTC) - timedelta(days=DEFAULT_KEEP_RUNS))
    done = run_pytest(folder, "--runstore", "-v")
    assert _pruned_lines(done.stdout) == [
        f"runstore: pruned 1 old run and 0 unused file records (keep {DEFAULT_KEEP_RUNS} runs "
        "per project)"
    ]
    ids = _run_ids(db, limit=DEFAULT_KEEP_RUNS + 1)
    assert (len(ids), ids[0], ids[-1]) == (DEFAULT_KEEP_RUNS, 2, DEFAULT_KEEP_RUNS + 1)
