"""Which database the plugin records into: the project's, from whatever folder pytest runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from plugin_runs import SUMMARY, env_for, latest, run_pytest, write

from runstore.layers import GITIGNORE

PROJECT = {
    "pytest.ini": "[pytest]\n",
    "tests/test_one.py": "def test_one():\n    pass\n",
}


def _project(folder: Path) -> Path:
    for name, text in PROJECT.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def _runs(folder: Path, cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "runstore", "runs"], cwd=cwd, env=env_for(),
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_run_from_a_subfolder_records_into_the_rootdirs_database(tmp_path: Path) -> None:
    folder = _project(tmp_path / "proj")
    first = run_pytest(folder, "--runstore")
    second = run_pytest(folder / "tests", "--runstore")
    assert first.returncode == second.returncode == 0, second.stdout
    assert not (folder / "tests" / ".runstore").exists()
    run, tests = latest(folder / ".runstore" / "runstore.db", "proj")
    assert run.id == 2
    assert list(tests) == ["tests/test_one.py::test_one"]
    # The CLI finds the same file from the subfolder, so the line needs no --db.
    assert SUMMARY.findall(second.stdout) == [
        "runstore: run 2 recorded: no failures (runstore show 2)"
    ]
    listed = _runs(folder, folder / "tests")
    assert listed.splitlines()[1].split()[:3] == ["2", "proj", "passed"]


def test_a_database_the_cli_would_not_find_is_named_on_the_line(tmp_path: Path) -> None:
    folder = _project(tmp_path / "proj")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = run_pytest(elsewhere, "--runstore", str(folder / "tests"))
    assert done.returncode == 0, done.stdout
    db = folder / ".runstore" / "runstore.db"
    assert SUMMARY.findall(done.stdout) == [
        f"runstore: run 1 recorded: no failures (runstore --db {db} show 1)"
    ]


def test_the_runstore_folder_the_plugin_creates_is_ignored_by_git(tmp_path: Path) -> None:
    folder = _project(tmp_path / "proj")
    run_pytest(folder, "--runstore")
    assert (folder / ".runstore" / ".gitignore").read_text(encoding="utf-8") == GITIGNORE
    assert GITIGNORE.splitlines()[-1] == "*"
    # A folder the user made stays as it is.
    mine = _project(tmp_path / "mine")
    (mine / ".runstore").mkdir()
    run_pytest(mine, "--runstore")
    assert (mine / ".runstore" / "runstore.db").is_file()
    assert not (mine / ".runstore" / ".gitignore").exists()


def _cli_refusal(value: str, *, env: bool) -> str:
    """The reason the CLI gives for ``value`` as its database (after ``Invalid value for``)."""
    args = ["runs"] if env else ["--db", value, "runs"]
    done = subprocess.run(
        [sys.executable, "-m", "runstore", *args],
        env=env_for(RUNSTORE_DB=value) if env else env_for(),
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 2, done.stderr
    return done.stderr.strip().splitlines()[-1].partition(": ")[2]


@pytest.mark.parametrize(
    ("how", "value"),
    [("option", ""), ("option", "   "), ("option", "directory"),
     ("environment", "   "), ("environment", "directory")],
)
def test_a_blank_or_directory_database_is_refused_as_the_cli_refuses_it(
    tmp_path: Path, how: str, value: str
) -> None:
    folder = write(tmp_path / "proj", test_one="def test_one():\n    pass\n")
    if value == "directory":
        value = str(tmp_path)
    if how == "option":
        done = run_pytest(folder, "--runstore", f"--runstore-db={value}")
    else:
        done = run_pytest(folder, "--runstore", env=env_for(RUNSTORE_DB=value))
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    hint = "'--runstore-db'" if how == "option" else "RUNSTORE_DB"
    (line,) = [x for x in done.stderr.splitlines() if "Invalid value for" in x]
    cli = _cli_refusal(value, env=how == "environment")
    assert line == f"ERROR: Invalid value for {hint}: {cli.partition(': ')[2]}"
    assert "test_one" not in done.stdout  # no test ran
    assert not (folder / ".runstore").exists()


def test_an_empty_runstore_db_is_unset_for_the_plugin_as_for_the_cli(tmp_path: Path) -> None:
    folder = write(tmp_path / "proj", test_one="def test_one():\n    pass\n")
    done = run_pytest(folder, "--runstore", env=env_for(RUNSTORE_DB=""))
    assert done.returncode == 0, done.stdout + done.stderr
    assert latest(folder / ".runstore" / "runstore.db", "proj")[0].total == 1
    assert "no runstore database at" in subprocess.run(  # the CLI's default, not a refusal
        [sys.executable, "-m", "runstore", "runs"], cwd=tmp_path, env=env_for(RUNSTORE_DB=""),
        capture_output=True, text=True, timeout=60, check=False,
    ).stderr
