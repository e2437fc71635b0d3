"""Killed and cancelled runs: what finished is kept, whatever happens to the process.

Each test runs pytest on a temporary project whose third test hangs, waits until that test
has started (it writes a marker file), then signals the process; every wait is bounded.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from plugin_runs import env_for, latest, pytest_args, write

from runstore.services.test_runs import Outcome, RunStatus

HANGS = """
    import pathlib
    import time

    def test_a():
        pass

    def test_b():
        pass

    def test_c_hangs():
        pathlib.Path(__file__).with_name("hanging").write_text("1")
        time.sleep(120)
"""

FINISHED = {"test_hang.py::test_a": Outcome.PASSED, "test_hang.py::test_b": Outcome.PASSED}


def _start(folder: Path, *args: str) -> subprocess.Popen[str]:
    (folder / "hanging").unlink(missing_ok=True)
    return subprocess.Popen(
        pytest_args(*args), cwd=folder, env=env_for(), text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )


def _wait_for_hang(folder: Path, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while not (folder / "hanging").exists():
        assert process.poll() is None, process.communicate()[0]
        assert time.monotonic() < deadline, "the hanging test never started"
        time.sleep(0.02)


def _signal_and_wait(process: subprocess.Popen[str], signum: int) -> tuple[int, str]:
    process.send_signal(signum)
    try:
        output, _ = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        raise AssertionError(f"pytest did not end on signal {signum}:\n{output}") from None
    return process.returncode, output


def _terminate_with_and_without_runstore(
    folder: Path,
) -> tuple[tuple[int, str], tuple[int, str]]:
    """(exit status, output) of pytest sent SIGTERM in the hanging test, without runstore
    and then with it."""
    ended = []
    for args in ((), ("--runstore",)):
        process = _start(folder, *args)
        _wait_for_hang(folder, process)
        ended.append(_signal_and_wait(process, signal.SIGTERM))
    return ended[0], ended[1]


def test_sigkill_during_a_hanging_test_keeps_what_finished_a_second_before(
    tmp_path: Path,
) -> None:
    folder = write(tmp_path / "proj", test_hang=HANGS)
    process = _start(folder, "--runstore")
    _wait_for_hang(folder, process)
    time.sleep(1.0)  # test_a and test_b finished at least this long ago; no report since
    returncode, _ = _signal_and_wait(process, signal.SIGKILL)
    assert returncode == -signal.SIGKILL
    run, tests = latest(folder / ".runstore" / "runstore.db", "proj")
    assert run.status is RunStatus.RUNNING  # aborted by the next run (see test_plugin)
    assert {n: t.outcome for n, t in tests.items()} == FINISHED


def test_sigterm_marks_the_run_interrupted_at_once_and_exits_as_pytest_would(
    tmp_path: Path,
) -> None:
    folder = write(tmp_path / "proj", test_hang=HANGS)
    (plain_code, _), (code, _) = _terminate_with_and_without_runstore(folder)
    assert code == plain_code == -signal.SIGTERM  # ended by the signal, as without runstore
    run, tests = latest(folder / ".runstore" / "runstore.db", "proj")
    assert run.status is RunStatus.INTERRUPTED
    assert run.finished_at_ms is not None
    assert {n: t.outcome for n, t in tests.items()} == FINISHED


def test_sigterm_goes_on_to_the_handler_installed_before(tmp_path: Path) -> None:
    # A conftest (or a CI wrapper) that turns SIGTERM into KeyboardInterrupt: pytest then
    # stops as after Ctrl-C, prints its summary, and the run line says what was kept.
    folder = write(
        tmp_path / "proj",
        test_hang=HANGS,
        conftest="""
            import signal

            def _stop(signum, frame):
                raise KeyboardInterrupt("terminated")

            signal.signal(signal.SIGTERM, _stop)
        """,
    )
    (plain_code, plain_output), (code, output) = _terminate_with_and_without_runstore(folder)
    assert code == plain_code == 2, plain_output  # pytest's "interrupted" exit status
    assert "KeyboardInterrupt" in output
    assert "runstore: run 1 recorded as interrupted: 2 finished items" in output
    run, tests = latest(folder / ".runstore" / "runstore.db", "proj")
    assert run.status is RunStatus.INTERRUPTED
    assert {n: t.outcome for n, t in tests.items()} == FINISHED
