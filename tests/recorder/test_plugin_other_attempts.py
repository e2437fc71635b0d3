"""Attempts other plugins run are stored as attempts, end to end (pytest in a subprocess).

- The ``flaky`` plugin (box/flaky 3.8) runs an item again without logging the setup and call
  reports of the attempts it will retry (only their teardown reports are logged); runstore
  keeps those attempts from the reports made in the process running the test
  (``runstore.recorder._swallowed``), serial and under ``pytest-xdist``. ``FLAKY`` below is
  a stand-in module named ``flaky`` that retries the way flaky does, so the test needs no
  flaky installed; ``test_the_real_flaky_plugin_keeps_every_attempt`` runs the real one
  where it is installed.
- ``pytest-xdist`` crash recovery: a test that kills its worker (``os._exit``) is stored
  failed with xdist's "worker crashed" error; with pytest-rerunfailures, which reruns a
  crashed test, the crash is its earlier attempt and the rerun its result.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from plugin_runs import env_for, run_pytest, write

from runstore.layers import build, sqlite
from runstore.services.test_runs import (
    AttemptSource,
    Classification,
    DataReader,
    EvidenceRule,
    Outcome,
    TestDetail,
)

XDIST = ("-p", "xdist.plugin", "-n", "2")

FLAKY = '''
    """A stand-in for the flaky plugin (box/flaky 3.8.1): FlakyPlugin.pytest_runtest_protocol
    runs the runner's protocol once per attempt with call_and_report patched, and logs no
    setup or call report of an attempt that failed and will be run again."""
    from _pytest import runner

    MAX_RUNS = 3


    def pytest_runtest_protocol(item, nextitem):
        original = runner.call_and_report
        state = {"runs": 0, "failed": False}

        def call_and_report(item, when, log=True, **kwds):
            hook = getattr(item.ihook, f"pytest_runtest_{when}")
            call = runner.CallInfo.from_call(
                lambda: hook(item=item, **kwds), when=when,
                reraise=(runner.Exit, KeyboardInterrupt))
            report = item.ihook.pytest_runtest_makereport(item=item, call=call)
            if when in ("setup", "call") and report.failed:
                state["failed"] = True
                if state["runs"] + 1 < MAX_RUNS:
                    log = False
            if log:
                item.ihook.pytest_runtest_logreport(report=report)
            return report

        runner.call_and_report = call_and_report
        try:
            while True:
                state["failed"] = False
                runner.pytest_runtest_protocol(item, nextitem)
                state["runs"] += 1
                if not state["failed"] or state["runs"] >= MAX_RUNS:
                    return True
        finally:
            runner.call_and_report = original
'''

TESTS = '''
    from pathlib import Path


    def _execution(name):
        counter = Path(__file__).with_name(name + ".count")
        n = int(counter.read_text()) if counter.exists() else 0
        counter.write_text(str(n + 1))
        return n + 1


    def test_third_time_lucky():
        n = _execution("lucky")
        assert n == 3, f"attempt {n} fails"


    def test_never():
        raise RuntimeError("never passes")


    def test_steady():
        pass
'''

REAL_FLAKY_TESTS = '''
    from pathlib import Path

    from flaky import flaky


    @flaky(max_runs=3, min_passes=1)
    def test_third_time_lucky():
        counter = Path(__file__).with_name("lucky.count")
        n = int(counter.read_text()) if counter.exists() else 0
        counter.write_text(str(n + 1))
        assert n == 2, f"attempt {n + 1} fails"
'''

CRASH = '''
    import os
    from pathlib import Path


    def test_kills_its_worker():
        counter = Path(__file__).with_name("crash.count")
        n = int(counter.read_text()) if counter.exists() else 0
        counter.write_text(str(n + 1))
        if n == 0:
            os._exit(3)


    def test_steady():
        pass
'''


def _detail(db: Path, project: str, nodeid: str) -> tuple[TestDetail, Classification,
                                                          EvidenceRule]:
    with build(sqlite(db)) as container:
        reader = container.get(DataReader)
        run = reader.latest_run(project).unwrap()
        verdict = next(c for c in reader.classify(run.id).unwrap() if c.nodeid == nodeid)
        detail = reader.test_detail(run.id, nodeid).unwrap()
        return detail, verdict.classification, verdict.because.rule


def _attempts(detail: TestDetail) -> list[tuple[Outcome, str, AttemptSource | None]]:
    return [(a.outcome, errors[0].message if errors else "", a.source)
            for a, errors in zip(detail.attempts, detail.attempt_errors, strict=True)]


@pytest.mark.parametrize("xdist", [False, True], ids=["serial", "xdist"])
def test_the_attempts_flaky_does_not_report_are_kept(tmp_path: Path, xdist: bool) -> None:
    project = write(tmp_path / "proj", flaky=FLAKY, test_f=TESTS)
    db = tmp_path / "runs.db"
    done = run_pytest(project, "-p", "flaky", *(XDIST if xdist else ()), "--runstore",
                      f"--runstore-db={db}", "--runstore-project=p")
    assert done.returncode == 1, done.stdout + done.stderr
    lucky, verdict, rule = _detail(db, "p", "test_f.py::test_third_time_lucky")
    assert lucky.test.outcome is Outcome.PASSED
    assert _attempts(lucky) == [
        (Outcome.FAILED, "AssertionError: attempt 1 fails\nassert 1 == 3", AttemptSource.RERUN),
        (Outcome.FAILED, "AssertionError: attempt 2 fails\nassert 2 == 3", AttemptSource.RERUN),
    ]
    assert all(a.duration_ms > 0 for a in lucky.attempts)
    assert (verdict, rule) == (Classification.FLAKY, EvidenceRule.PASSED_ON_RERUN)
    never, _, _ = _detail(db, "p", "test_f.py::test_never")
    assert never.test.outcome is Outcome.FAILED
    assert [a.outcome for a in never.attempts] == [Outcome.FAILED, Outcome.FAILED]
    steady, _, _ = _detail(db, "p", "test_f.py::test_steady")
    assert steady.attempts == ()


def test_the_real_flaky_plugin_keeps_every_attempt(tmp_path: Path) -> None:
    if importlib.util.find_spec("flaky") is None:
        pytest.skip("the flaky plugin is not installed")
    project = write(tmp_path / "proj", test_f=REAL_FLAKY_TESTS)
    db = tmp_path / "runs.db"
    done = run_pytest(project, "-p", "flaky", "--runstore", f"--runstore-db={db}",
                      "--runstore-project=p")
    assert done.returncode == 0, done.stdout + done.stderr
    lucky, verdict, _ = _detail(db, "p", "test_f.py::test_third_time_lucky")
    assert [a.outcome for a in lucky.attempts] == [Outcome.FAILED, Outcome.FAILED]
    assert verdict is Classification.FLAKY


@pytest.mark.parametrize("reruns", [False, True], ids=["crash", "crash-rerun"])
def test_a_crashed_xdist_worker_is_an_attempt(tmp_path: Path, reruns: bool) -> None:
    project = write(tmp_path / "proj", test_c=CRASH)
    db = tmp_path / "runs.db"
    # Autoloaded: rerunfailures reruns crashed tests only when it finds xdist by its
    # entry point's name; flaky, if installed, would take over running every test.
    extra = ("--reruns", "1") if reruns else ("-p", "no:rerunfailures")
    done = run_pytest(project, "-n", "2", "-p", "no:flaky", *extra, "--runstore",
                      f"--runstore-db={db}", "--runstore-project=p",
                      env=env_for(autoload=True), autoload=True)
    assert done.returncode == (0 if reruns else 1), done.stdout + done.stderr
    crashed, _, _ = _detail(db, "p", "test_c.py::test_kills_its_worker")
    crash_error = "worker 'gw"
    if reruns:
        assert crashed.test.outcome is Outcome.PASSED
        assert [(a.outcome, a.source) for a in crashed.attempts] == [
            (Outcome.FAILED, AttemptSource.RERUN)]
        assert crashed.attempt_errors[0][0].message.startswith(crash_error)
    else:
        assert crashed.test.outcome is Outcome.FAILED
        assert crashed.attempts == ()
        assert crashed.errors[0].message.startswith(crash_error)
        assert "crashed while running" in crashed.errors[0].message
