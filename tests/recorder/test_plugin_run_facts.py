"""What a recorded run knows about itself: git state, selection and duration."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import types
from datetime import UTC, datetime
from pathlib import Path

import pytest
from plugin_runs import (
    env_for,
    holding_the_write_lock,
    latest,
    pytest_args,
    run_pytest,
    write,
)

from runstore.recorder._environment import git_dirty
from runstore.recorder._recorder import _session_start
from runstore.services.test_runs import Selection

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(folder: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        cwd=folder, check=True, capture_output=True, text=True, timeout=30,
    ).stdout.strip()


@needs_git
def test_a_run_records_the_commit_branch_and_dirty_flag(tmp_path: Path) -> None:
    folder = write(tmp_path / "proj", test_one="def test_one():\n    pass\n")
    _git(folder, "init", "-q", "-b", "trunk")
    _git(folder, "add", "test_one.py")
    _git(folder, "commit", "-q", "-m", "one")
    head = _git(folder, "rev-parse", "HEAD")
    db = folder / ".runstore" / "runstore.db"
    run_pytest(folder, "--runstore")
    clean = latest(db, "proj")[0].environment
    assert (clean.git_commit, clean.git_branch, clean.git_dirty) == (head, "trunk", False)
    (folder / "test_one.py").write_text("def test_one():\n    assert 1\n", encoding="utf-8")
    run_pytest(folder, "--runstore")
    dirty = latest(db, "proj")[0].environment
    assert (dirty.git_commit, dirty.git_dirty) == (head, True)


@needs_git
def test_an_untracked_file_makes_the_tree_dirty_and_run_artifacts_do_not(tmp_path: Path) -> None:
    folder = tmp_path / "repo"
    (folder / "tests").mkdir(parents=True)
    (folder / "tests" / "test_old.py").write_text("def test_old():\n    pass\n")
    _git(folder, "init", "-q")
    _git(folder, "add", ".")
    _git(folder, "commit", "-q", "-m", "old")
    for artifact in ("tests/__pycache__/test_old.cpython-311.pyc", ".hypothesis/examples/x",
                     ".coverage", ".coverage.host.1.2"):
        (folder / artifact).parent.mkdir(parents=True, exist_ok=True)
        (folder / artifact).write_bytes(b"")
    assert git_dirty(folder / "tests") is False
    (folder / "tests" / "test_new.py").write_text("def test_new():\n    pass\n")
    assert git_dirty(folder / "tests") is True


def test_outside_a_repository_the_git_facts_are_unknown(tmp_path: Path) -> None:
    folder = write(tmp_path / "proj", test_one="def test_one():\n    pass\n")
    if any((p / ".git").exists() for p in (folder, *folder.parents)):
        pytest.skip("the temporary folder is inside a git repository")
    run_pytest(folder, "--runstore")
    env = latest(folder / ".runstore" / "runstore.db", "proj")[0].environment
    assert (env.git_commit, env.git_branch, env.git_dirty) == (None, None, None)
    assert (env.git_changed_files, env.git_changed_files_truncated) == (None, False)


@needs_git
def test_a_git_that_does_not_answer_in_time_leaves_the_flag_unknown(tmp_path: Path) -> None:
    folder = tmp_path / "repo"
    folder.mkdir()
    _git(folder, "init", "-q")
    assert git_dirty(folder) is False
    assert git_dirty(folder, budget=0.0) is None


SELECTABLE = """
    import pytest

    def test_one():
        pass

    @pytest.mark.slow
    def test_two():
        pass

    def test_three():
        pass
"""


def _selection(cwd: Path, *args: str) -> Selection:
    done = run_pytest(cwd, "--runstore", *args)
    assert done.returncode in (0, 5), done.stdout + done.stderr
    root = cwd if (cwd / "pytest.ini").exists() else cwd.parent
    return latest(root / ".runstore" / "runstore.db", "proj")[0].selection


@pytest.mark.parametrize("xdist", [False, True], ids=["serial", "xdist"])
def test_a_run_records_what_was_selected(tmp_path: Path, xdist: bool) -> None:
    if xdist:
        pytest.importorskip("xdist")
    folder = write(tmp_path / "proj", **{"pytest.ini": "[pytest]\nmarkers =\n    slow: slow\n"})
    write(folder / "tests", test_sel=SELECTABLE)
    parallel = ("-p", "xdist.plugin", "-n", "2") if xdist else ()
    # Under xdist the workers deselect; the controller knows only what was selected.
    deselected = 0 if xdist else 2
    assert _selection(folder, *parallel) == Selection(collected=3)
    assert _selection(folder, *parallel, "-k", "one or two", "-m", "not slow") == Selection(
        keyword="one or two", markexpr="not slow", deselected=deselected,
        collected=1 if xdist else 3,
    )
    chosen = _selection(folder, *parallel, "-x", "tests/test_sel.py::test_three")
    assert chosen == Selection(args=("tests/test_sel.py::test_three",), maxfail=1, collected=1)
    assert chosen.is_partial
    below = _selection(folder / "tests", *parallel, "--maxfail=3")
    assert below == Selection(args=("tests",), maxfail=3, collected=3)


def test_last_failed_narrows_only_when_pytest_had_failures_to_rerun(tmp_path: Path) -> None:
    folder = write(tmp_path / "proj", test_lf="""
        import os

        def test_ok():
            pass

        def test_flips():
            assert os.environ.get("MODE") != "fail"
    """)
    db = folder / ".runstore" / "runstore.db"

    def run(mode: str, *args: str) -> Selection:
        subprocess.run(  # with pytest's cache, which --lf and --ff need
            [sys.executable, "-m", "pytest", "-p", "runstore.pytest_plugin", "--runstore",
             *args], cwd=folder, env=env_for(MODE=mode), capture_output=True, timeout=120,
            check=False,
        )
        return latest(db, "proj")[0].selection

    assert run("pass", "--lf") == Selection(collected=2)  # nothing failed: all ran
    run("fail")
    narrowed = run("fail", "--lf", "--ff")
    # pytest collects only the failed test of a module with failures ("collected 1 item").
    assert narrowed == Selection(last_failed=True, failed_first=True, collected=1)
    assert narrowed.is_partial


def _pytest_seconds(output: str) -> float:
    found = re.findall(r" in (\d+\.\d+)s", output)
    assert found, output
    return float(found[-1])


def _assert_as_long_as_pytest_says(recorded: float, output: str) -> None:
    """The recorded duration is pytest's ``in N s`` less the terminal summary written after
    the run ends: never longer (pytest rounds to 10 ms), and shorter by at most half a second,
    whatever a loaded machine adds to writing the summary; a start or end a second off (a
    wait for the database counted out, a later stamp) falls outside."""
    said = _pytest_seconds(output)
    assert said - 0.5 <= recorded <= said + 0.01, (recorded, said)


def _recorded_seconds(db: Path) -> float:
    run = latest(db, "proj")[0]
    assert run.finished_at_ms is not None
    return (run.finished_at_ms - run.started_at_ms) / 1000


SLOW = """
    import time

    def test_slow():
        time.sleep(1.0)
"""


def test_the_run_lasts_as_long_as_pytest_says(tmp_path: Path) -> None:
    folder = write(tmp_path / "proj", test_slow=SLOW)
    done = run_pytest(folder, "--runstore")
    seconds = _pytest_seconds(done.stdout)
    assert seconds >= 1.0
    _assert_as_long_as_pytest_says(
        _recorded_seconds(folder / ".runstore" / "runstore.db"), done.stdout)


def test_waiting_for_a_busy_database_does_not_shorten_the_run(tmp_path: Path) -> None:
    # Another process holds the write lock for the first second: the run cannot be begun
    # until it lets go, but the session started before, as pytest counts it.
    folder = write(tmp_path / "proj", test_slow=SLOW)
    db = folder / ".runstore" / "runstore.db"
    with holding_the_write_lock(db):
        process = subprocess.Popen(
            pytest_args("--runstore"), cwd=folder, env=env_for(),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        time.sleep(1.0)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 0, output
    assert "warning" not in output
    _assert_as_long_as_pytest_says(_recorded_seconds(db), output)


SLOW_CONFTEST = """
    import json
    import time

    time.sleep(1.0)  # before the session: pytest's "in N s" does not count it
    IMPORTED = time.time()

    def pytest_sessionfinish(session):
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        start = getattr(reporter, "_session_start", None)
        stamp = reporter._sessionstarttime if start is None else start.time
        with open("stamps.json", "w") as out:
            json.dump({"imported": IMPORTED, "session_start": stamp}, out)
"""

SLOW_MODULE = """
    import time

    time.sleep(1.0)  # at collection, in the session

    def test_quick():
        pass
"""


def test_the_run_starts_at_pytests_own_instant_after_a_slow_conftest(tmp_path: Path) -> None:
    """A conftest sleeping at import is before the session, a test module sleeping at
    import inside it: the recorded start is the terminal reporter's own instant, and the
    duration is pytest's ``in N s``."""
    folder = write(tmp_path / "proj", conftest=SLOW_CONFTEST, test_quick=SLOW_MODULE)
    done = run_pytest(folder, "--runstore")
    assert done.returncode == 0, done.stdout + done.stderr
    stamps = json.loads((folder / "stamps.json").read_text(encoding="utf-8"))
    run = latest(folder / ".runstore" / "runstore.db", "proj")[0]
    assert abs(run.started_at_ms - stamps["session_start"] * 1000) <= 1
    assert run.started_at_ms >= stamps["imported"] * 1000
    seconds = _recorded_seconds(folder / ".runstore" / "runstore.db")
    assert 1.0 <= seconds < 1.9
    _assert_as_long_as_pytest_says(seconds, done.stdout)


SLOW_SUMMARY = """
    import time

    def pytest_terminal_summary(terminalreporter):
        time.sleep(1.0)  # as Hypothesis's plugin importing hypothesis there
"""


def test_pytests_in_n_s_also_counts_the_terminal_summary_and_the_run_does_not(
    tmp_path: Path,
) -> None:
    """What README says: the run ends at ``pytest_sessionfinish``; the summary sections
    other plugins write after it lengthen pytest's ``in N s`` only."""
    folder = write(tmp_path / "proj", conftest=SLOW_SUMMARY, test_slow=SLOW)
    done = run_pytest(folder, "--runstore")
    assert done.returncode == 0, done.stdout + done.stderr
    seconds = _recorded_seconds(folder / ".runstore" / "runstore.db")
    assert seconds >= 1.0
    assert _pytest_seconds(done.stdout) - seconds >= 0.9


def test_pytest_8_3s_session_start_is_read_too() -> None:
    """pytest 8.3 keeps the instant as a float ``_sessionstarttime``: before, the recorder
    read only 8.4's ``_session_start`` and took its own later stamp."""
    reporter = types.SimpleNamespace(_sessionstarttime=1_700_000_000.25)
    config = types.SimpleNamespace(
        pluginmanager=types.SimpleNamespace(get_plugin=lambda name: reporter))
    started = _session_start(config)  # type: ignore[arg-type]
    assert started == datetime.fromtimestamp(1_700_000_000.25, tz=UTC)
