"""The pytest plugin end to end: real pytest processes recording into a real database."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from plugin_runs import (
    SUMMARY,
    env_for,
    holding_the_write_lock,
    latest,
    pytest_args,
    recorded_items,
    run_pytest,
    write,
)

from runstore.layers import build, sqlite
from runstore.services.test_runs import DataReader, Outcome, RunStatus

SIMPLE = """
    def test_one():
        pass

    def test_two():
        assert 1 == 2
"""


def test_disabled_plugin_imports_nothing_but_its_options(tmp_path: Path) -> None:
    folder = write(tmp_path / "proj", test_quiet="""
        import sys

        def test_nothing_of_runstore_is_loaded():
            assert "runstore.pytest_plugin" in sys.modules
            loaded = [m for m in sys.modules
                      if m.startswith(("runstore.recorder", "runstore.layers",
                                       "runstore.services", "apsw"))]
            assert loaded == []
    """)
    done = run_pytest(folder, "-q", autoload=True)  # installed, found by its entry point
    assert done.returncode == 0, done.stdout
    assert SUMMARY.search(done.stdout) is None
    assert not (folder / ".runstore").exists()


def test_collect_only_imports_no_recorder_service_or_database(tmp_path: Path) -> None:
    folder = write(tmp_path / "proj", test_simple=SIMPLE, conftest="""
        import json, sys

        def pytest_collection_finish(session):
            with open("modules.json", "w") as out:
                json.dump(sorted(sys.modules), out)
    """)
    done = run_pytest(folder, "-q", "--runstore", "--collect-only")
    assert done.returncode == 0, done.stdout
    modules = json.loads((folder / "modules.json").read_text())
    ours = [m for m in modules if m.startswith("runstore")]
    assert ours == ["runstore", "runstore._lazy", "runstore.pytest_plugin", "runstore.recorder"]
    assert [m for m in modules if m.split(".")[0] in ("apsw", "attrs", "returns")] == []
    assert SUMMARY.search(done.stdout) is None
    assert not (folder / ".runstore").exists()


def test_output_and_exit_code_are_pytests_own_plus_one_line(tmp_path: Path) -> None:
    folder = write(tmp_path / "proj", test_simple=SIMPLE)
    plain = run_pytest(folder, "-rA")
    recorded = run_pytest(folder, "-rA", "--runstore")
    assert plain.returncode == recorded.returncode == 1

    def normal(text: str) -> list[str]:
        return [re.sub(r" in \d+\.\d+s", " in Ns", line) for line in text.splitlines()]

    extra = [line for line in normal(recorded.stdout) if line not in normal(plain.stdout)]
    assert extra == ["runstore: run 1 recorded: 1 new failure (runstore show 1)"]
    assert recorded.stderr == plain.stderr
    # Nothing else of runstore's is on the screen; the line sits before pytest's last line.
    lines = recorded.stdout.splitlines()
    assert lines[-2].startswith("runstore: run 1")
    run, tests = latest(folder / ".runstore" / "runstore.db", "proj")
    assert run.status is RunStatus.FAILED
    assert {n: t.outcome for n, t in tests.items()} == {
        "test_simple.py::test_one": Outcome.PASSED,
        "test_simple.py::test_two": Outcome.FAILED,
    }


def test_options_ini_and_environment(tmp_path: Path) -> None:
    folder = write(
        tmp_path / "proj",
        test_simple=SIMPLE,
        **{"pytest.ini": "[pytest]\nrunstore = true\nrunstore_project = shop\n"},
    )
    run_pytest(folder)  # the ini value alone enables recording
    run, _ = latest(folder / ".runstore" / "runstore.db", "shop")
    assert run.total == 2
    elsewhere = tmp_path / "elsewhere.db"
    done = run_pytest(folder, "--runstore-project", "other",
                      env=env_for(RUNSTORE_DB=str(elsewhere)))
    assert "(runstore show 1)" in done.stdout  # the CLI reads $RUNSTORE_DB as well
    run, _ = latest(elsewhere, "other")
    assert run.project == "other"
    explicit = tmp_path / "explicit.db"
    done = run_pytest(folder, f"--runstore-db={explicit}")
    assert f"(runstore --db {explicit} show 1)" in done.stdout
    assert latest(explicit, "shop")[0].total == 2


def test_chdir_fake_clocks_and_loud_tests_do_not_move_or_break_the_record(
    tmp_path: Path,
) -> None:
    folder = write(tmp_path / "proj", test_hostile="""
        import datetime
        import os
        import sys
        import time

        def test_moves_away():
            os.chdir(os.environ["ELSEWHERE"])  # never restored

        def test_fakes_the_clocks():
            time.time = lambda: 0.0
            time.time_ns = lambda: 0
            class Frozen(datetime.datetime):
                @classmethod
                def now(cls, tz=None):
                    return datetime.datetime(2000, 1, 1, tzinfo=tz)
            datetime.datetime = Frozen

        def test_prints_megabytes():
            sys.stdout.write("x" * 3_000_000)
            sys.stderr.write("y" * 3_000_000)
            assert False

        def test_after_all_that():
            pass
    """)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    before_ms = time.time_ns() // 1_000_000
    done = run_pytest(folder, "--runstore", env=env_for(ELSEWHERE=str(elsewhere)))
    assert done.returncode == 1
    db = folder / ".runstore" / "runstore.db"
    run, tests = latest(db, "proj")
    assert run.total == 4
    assert tests["test_hostile.py::test_prints_megabytes"].outcome is Outcome.FAILED
    assert run.started_at_ms >= before_ms
    assert run.finished_at_ms is not None
    assert run.finished_at_ms >= run.started_at_ms
    assert list(elsewhere.iterdir()) == []  # nothing followed the test's chdir


def test_a_session_that_fails_to_start_its_tests_is_a_failed_run(tmp_path: Path) -> None:
    folder = write(tmp_path / "proj", test_simple="def test_ok():\n    pass\n")
    done = run_pytest(folder, "--runstore", "no_such_test_file.py")
    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    run, tests = latest(folder / ".runstore" / "runstore.db", "proj")
    assert run.status is RunStatus.FAILED
    assert tests == {}


def test_a_busy_database_warns_once_and_the_tests_go_on(tmp_path: Path) -> None:
    folder = write(tmp_path / "proj", test_simple=SIMPLE)
    with holding_the_write_lock(folder / ".runstore" / "runstore.db"):  # throughout
        done = run_pytest(folder, "--runstore")
    assert done.returncode == 1
    lines = SUMMARY.findall(done.stdout)
    assert len(lines) == 1
    assert lines[0].startswith("runstore: warning:")
    assert "busy" in lines[0]
    assert "1 failed, 1 passed" in done.stdout


def test_a_broken_database_warns_once_and_the_tests_go_on(tmp_path: Path) -> None:
    folder = write(tmp_path / "proj", test_simple="def test_ok():\n    pass\n")
    db = folder / ".runstore" / "runstore.db"
    db.parent.mkdir()
    db.write_bytes(b"this is not a database" * 200)
    done = run_pytest(folder, "--runstore")
    assert done.returncode == 0
    lines = SUMMARY.findall(done.stdout)
    assert len(lines) == 1
    assert lines[0].startswith("runstore: warning: this run not recorded: ")


def test_a_killed_run_keeps_its_finished_batches_and_is_aborted_later(tmp_path: Path) -> None:
    folder = write(tmp_path / "proj", test_slow="""
        import time

        def test_a():
            pass

        def test_b():
            time.sleep(1.2)  # older than a batch's age when it finishes: a and b get written

        def test_c_hangs():
            time.sleep(120)
    """)
    db = folder / ".runstore" / "runstore.db"
    process = subprocess.Popen(
        pytest_args("--runstore"), cwd=folder, env=env_for(),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while recorded_items(db, "proj") < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    killed, tests = latest(db, "proj")
    assert killed.status is RunStatus.RUNNING
    assert set(tests) == {"test_slow.py::test_a", "test_slow.py::test_b"}
    (folder / "test_slow.py").write_text("def test_quick():\n    pass\n", encoding="utf-8")
    run_pytest(folder, "--runstore")
    with build(sqlite(db)) as container:
        reader = container.get(DataReader)
        assert reader.get_run(killed.id).unwrap().status is RunStatus.ABORTED
        assert reader.latest_run("proj").unwrap().status is RunStatus.PASSED


def test_reruns_are_attempts_of_one_item(tmp_path: Path) -> None:
    pytest.importorskip("pytest_rerunfailures")
    folder = write(tmp_path / "proj", test_flaky="""
        import pathlib

        MARK = pathlib.Path(__file__).with_name("attempted")

        def test_second_time_lucky():
            if not MARK.exists():
                MARK.write_text("1")
                assert False, "first attempt"
    """)
    done = run_pytest(folder, "-p", "pytest_rerunfailures", "--runstore", "--reruns", "2")
    assert done.returncode == 0, done.stdout
    run, tests = latest(folder / ".runstore" / "runstore.db", "proj")
    item = tests["test_flaky.py::test_second_time_lucky"]
    assert item.outcome is Outcome.PASSED
    assert item.attempts == 1  # one earlier attempt was rerun
    assert run.total == 1


def test_coverage_measured_by_pytest_cov_is_stored(tmp_path: Path) -> None:
    pytest.importorskip("pytest_cov")
    folder = write(
        tmp_path / "proj",
        **{
            "shapes.py": """
                def area(w, h):
                    if w < 0 or h < 0:
                        raise ValueError("negative")
                    return w * h

                def unused():
                    return 1
            """,
            "test_shapes.py": """
                from shapes import area

                def test_area():
                    assert area(2, 3) == 6
            """,
        },
    )
    done = run_pytest(folder, "-p", "pytest_cov.plugin", "--runstore", "--cov=shapes",
                      "--cov-branch", "--cov-report=")
    assert done.returncode == 0, done.stdout
    with build(sqlite(folder / ".runstore" / "runstore.db")) as container:
        reader = container.get(DataReader)
        run = reader.latest_run("proj").unwrap()
        report = reader.coverage(run.id).unwrap()
    (shapes,) = report.files
    assert shapes.path == "shapes.py"
    assert shapes.statements == 6
    assert shapes.missing_lines == (4, 8)
    assert shapes.missing_statements == 2
    assert shapes.branches == 2
    assert shapes.partial_branches == 1
    assert shapes.missing_branches == 1
