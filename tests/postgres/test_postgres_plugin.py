"""``pytest --runstore`` into a PostgreSQL database, then the CLI on it, as subprocesses: the
README's flow with a flaky test, ``RUNSTORE_DB``, eight recording processes at once, and
the password, which pytest's output never shows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from postgres.test_postgres_cli import SECRET, url_of
from runstore.layers import DATA_READER, build, postgres, shown_database
from runstore.services.test_runs import RunStatus

BIN = Path(sys.executable).parent

FLAKY_PROJECT = """\
import os

def test_total():
    assert sum([120, 250]) == 370

def test_rates_are_fresh():
    assert os.environ.get("RATES") == "warm", "the rate cache was cold"
"""


def env(**extra: str) -> dict[str, str]:
    """A user's environment: no test-runner or runstore settings, only runstore's plugin
    loaded (pytest starts seconds faster), and ``extra``."""
    found = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "RUNSTORE_"))}
    found.update(PYTHONDONTWRITEBYTECODE="1", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", **extra)
    return found


def pytest_args(*args: str) -> list[str]:
    return [str(BIN / "pytest"), "-p", "runstore.pytest_plugin", "-p", "no:cacheprovider",
            "-q", *args]


def run(folder: Path, *argv: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in ``folder``; its output is checked to hold no password."""
    done = subprocess.run(argv, cwd=folder, env=env(**extra), capture_output=True, text=True,
                          timeout=120, check=False)
    assert SECRET not in done.stdout + done.stderr
    return done


def runstore(folder: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    done = run(folder, str(BIN / "runstore"), *args, **extra)
    assert done.returncode == 0, done.stderr
    return done


def committed_project(folder: Path, source: str) -> Path:
    """A git repository holding ``source`` as its one test file, committed (a clean tree)."""
    folder.mkdir()
    (folder / "test_project.py").write_text(source, encoding="utf-8")
    (folder / ".gitignore").write_text("__pycache__/\n", encoding="utf-8")
    git = ["git", "-c", "user.name=runstore", "-c", "user.email=runstore@example.invalid"]
    for step in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "tests"]):
        subprocess.run([*git, *step], cwd=folder, check=True, capture_output=True)
    return folder


def summary_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in done.stdout.splitlines() if line.startswith("runstore: ")]
    assert len(lines) == 1, done.stdout + done.stderr
    return lines[0]


def test_the_readme_flow_records_into_postgresql_and_reads_it_back(
    tmp_path: Path, postgres_dsn: str
) -> None:
    url = url_of(postgres_dsn)
    project = committed_project(tmp_path / "shop", FLAKY_PROJECT)
    cold = run(project, *pytest_args("--runstore", f"--runstore-db={url}"), RATES="cold")
    assert cold.returncode == 1, cold.stdout + cold.stderr
    line = summary_line(cold)
    assert line.startswith("runstore: run 1 recorded: 1 new failure")
    assert f"(runstore --db '{shown_database(url)}' show 1)" in line
    warm = run(project, *pytest_args("--runstore", f"--runstore-db={url}"), RATES="warm")
    assert warm.returncode == 0, warm.stdout + warm.stderr
    assert summary_line(warm).startswith("runstore: run 2 recorded: no failures, 1 flaky")

    shown = runstore(project, "--db", url, "show", "latest").stdout
    assert "run 2  shop  passed" in shown
    assert "test_project.py::test_rates_are_fresh" in shown  # flaky items are listed
    failures = runstore(project, "--db", url, "failures", "1").stdout
    assert "FAILED test_project.py::test_rates_are_fresh" in failures
    assert "the rate cache was cold" in failures
    flaky = runstore(project, "--db", url, "flaky").stdout
    assert "test_project.py::test_rates_are_fresh" in flaky
    assert "same_code" in flaky  # one code fingerprint (and one clean commit): same_code first
    document = json.loads(runstore(project, "--db", url, "--format", "json", "show", "latest")
                          .stdout)
    assert document["run"]["id"] == 2
    assert document["run"]["status"] == "passed"
    assert document["run"]["counts"]["passed"] == 2
    assert document["run"]["counts"]["failed"] == 0
    argv = document["run"]["environment"]["command_line"]
    assert f"--runstore-db={shown_database(url)}" in argv  # stored without the password


def test_runstore_db_with_a_url_serves_the_plugin_and_the_cli(
    tmp_path: Path, postgres_dsn: str
) -> None:
    url = url_of(postgres_dsn)
    project = committed_project(tmp_path / "shop", FLAKY_PROJECT)
    done = run(project, *pytest_args("--runstore"), RUNSTORE_DB=url, RATES="warm")
    assert done.returncode == 0, done.stdout + done.stderr
    assert summary_line(done).endswith("(runstore show 1)")  # the CLI finds it by itself
    assert not (project / ".runstore").exists()
    shown = runstore(project, "show", "latest", RUNSTORE_DB=url).stdout
    assert "run 1  shop  passed" in shown
    status = json.loads(runstore(project, "--format", "json", "db", "status",
                                 RUNSTORE_DB=url).stdout)
    assert status["database"] == shown_database(url)


def test_an_unreachable_server_is_one_warning_without_the_password(tmp_path: Path) -> None:
    project = committed_project(tmp_path / "shop", FLAKY_PROJECT)
    url = f"postgresql://runner:{SECRET}@127.0.0.1:1/runs"
    done = run(project, *pytest_args("--runstore", f"--runstore-db={url}"), RATES="warm")
    assert done.returncode == 0, done.stdout + done.stderr  # the tests go on
    line = summary_line(done)
    assert line.startswith("runstore: warning: this run not recorded: opening the database")
    assert "Connection refused" in line


LOGGER_WATCH = """\
import logging
import threading
from pathlib import Path

class Watched(dict):
    '''logging's table of loggers, noting each logger added off the main thread.'''

    off_main = []

    def __setitem__(self, name, value):
        if threading.current_thread() is not threading.main_thread():
            self.off_main.append(name)
        super().__setitem__(name, value)

logging.Logger.manager.loggerDict = Watched(logging.Logger.manager.loggerDict)

def pytest_unconfigure(config):
    Path(__file__).with_name("off_main.txt").write_text("\\n".join(Watched.off_main))
"""


def test_the_postgresql_driver_makes_no_logger_while_a_test_runs(tmp_path: Path) -> None:
    # pytest iterates logging's table of loggers at every test phase (catching_logs), so a
    # logger that psycopg's import makes on the writer thread meanwhile failed a test's
    # setup with "dictionary changed size during iteration", once in many runs. Every
    # logger made off the main thread is such a chance; the driver's must all be made
    # before the first test.
    project = committed_project(tmp_path / "shop", FLAKY_PROJECT)
    (project / "conftest.py").write_text(LOGGER_WATCH, encoding="utf-8")
    url = f"postgresql://runner:{SECRET}@127.0.0.1:1/runs"  # the import is the same
    done = run(project, *pytest_args("--runstore", f"--runstore-db={url}"), RATES="warm")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not recorded: opening the database" in summary_line(done)  # it did try
    assert (project / "off_main.txt").read_text(encoding="utf-8") == ""


CASES = 30
"""Tests in each of the eight concurrent projects; every fifth fails."""

FLEET_PROJECT = f"""\
import time

import pytest

@pytest.mark.parametrize("n", range({CASES}))
def test_case(n):
    time.sleep(0.01)
    assert n % 5, "every fifth case fails"
"""


def test_eight_pytest_processes_record_into_one_database_at_once(
    tmp_path: Path, postgres_dsn: str
) -> None:
    url = url_of(postgres_dsn)  # empty: the eight processes race to migrate it, too
    folders = [committed_project(tmp_path / f"worker{i}", FLEET_PROJECT) for i in range(8)]
    started = time.perf_counter()
    processes = [
        subprocess.Popen(
            pytest_args("--runstore", f"--runstore-db={url}", "--runstore-project=fleet"),
            cwd=folder, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for folder in folders
    ]
    outputs = [process.communicate(timeout=180)[0] for process in processes]
    elapsed = time.perf_counter() - started
    failing = CASES // 5
    for process, output in zip(processes, outputs, strict=True):
        assert process.returncode == 1, output
        assert SECRET not in output
        assert "warning" not in output, output
        assert f"{failing} failed, {CASES - failing} passed" in output, output

    with build(postgres(url, access="read")) as container:
        reader = container.get(DATA_READER)
        runs = reader.list_runs("fleet", limit=100).unwrap().items
        assert sorted(run.id for run in runs) == list(range(1, 9))
        for run in runs:
            assert run.status is RunStatus.FAILED
            assert run.total == CASES
            assert run.counts.get("passed") == CASES - failing
            assert run.counts.get("failed") == failing
            assert len(reader.tests(run.id).unwrap()) == CASES
    print(f"8 pytest --runstore processes into one PostgreSQL database: {elapsed:.1f} s")
