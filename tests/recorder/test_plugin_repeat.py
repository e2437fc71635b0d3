"""``--runstore-repeat N`` and early flake detection (``--runstore-efd``), end to end: pytest
runs in a subprocess, the repeats are stored as earlier attempts of source ``repeat``, and a
test that flips fails the session, is named on runstore's line and is judged flaky."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from plugin_runs import SUMMARY, run_pytest, write

from runstore.layers import build, sqlite
from runstore.recorder._repeat import (
    EFD_FAULTY_SHARE,
    EfdDecision,
    decide_efd,
    efd_executions,
)
from runstore.services.test_runs import (
    AttemptSource,
    Classification,
    DataReader,
    EvidenceRule,
    Outcome,
    RunStatus,
    TestDetail,
)

XDIST = ("-p", "xdist.plugin", "-n", "2")
RERUNS = ("-p", "pytest_rerunfailures")

COUNTER = """
    from pathlib import Path

    def fails_one_in_three(name):
        # Fails on the 2nd, 5th, 8th ... execution of the session: a file counter.
        counter = Path(__file__).with_name(name + ".count")
        n = int(counter.read_text()) if counter.exists() else 0
        counter.write_text(str(n + 1))
        assert n % 3 != 1, f"execution {n + 1} fails"
"""

STEADY = """
    def test_a():
        pass

    def test_b():
        pass

    def test_c():
        pass

    def test_d():
        pass

    def test_e():
        pass

    def test_f():
        pass
"""


def _db(folder: Path) -> Path:
    return folder / ".runstore" / "runstore.db"


def _detail(folder: Path, nodeid: str) -> tuple[RunStatus, TestDetail, Classification,
                                                 EvidenceRule]:
    with build(sqlite(_db(folder))) as container:
        reader = container.get(DataReader)
        run = reader.latest_run(folder.name).unwrap()
        detail = reader.test_detail(run.id, nodeid).unwrap()
        (verdict,) = [c for c in reader.classify(run.id).unwrap() if c.nodeid == nodeid]
    return run.status, detail, verdict.classification, verdict.because.rule


def _lines(output: str) -> list[str]:
    return SUMMARY.findall(output)


# -- --runstore-repeat -------------------------------------------------------------------------


@pytest.mark.parametrize("parallel", [(), XDIST], ids=["serial", "xdist"])
def test_repeat_stores_every_earlier_execution_as_a_repeat_attempt(
    tmp_path: Path, parallel: tuple[str, ...]
) -> None:
    if parallel:
        pytest.importorskip("xdist")
    folder = write(tmp_path / "proj", test_steady="def test_ok():\n    pass\n")
    done = run_pytest(folder, "--runstore", "--runstore-repeat", "5", *parallel)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed, 4 rerun" in done.stdout, done.stdout
    status, detail, verdict, rule = _detail(folder, "test_steady.py::test_ok")
    assert status is RunStatus.PASSED
    assert detail.test.attempts == 4
    assert [(a.outcome, a.source) for a in detail.attempts] == [
        (Outcome.PASSED, AttemptSource.REPEAT)] * 4
    assert all(a.duration_ms >= 0 for a in detail.attempts)
    assert (verdict, rule) == (Classification.STABLE, EvidenceRule.NO_FAILURE)
    assert not any("flipped" in line for line in _lines(done.stdout)), done.stdout


@pytest.mark.parametrize("parallel", [(), XDIST], ids=["serial", "xdist"])
def test_a_repeated_test_that_flips_fails_the_session_and_is_flaky(
    tmp_path: Path, parallel: tuple[str, ...]
) -> None:
    """Three executions: pass, fail, pass. The last one passed, yet the session fails."""
    if parallel:
        pytest.importorskip("xdist")
    folder = write(tmp_path / "proj", conftest=COUNTER, test_flip="""
        from conftest import fails_one_in_three

        def test_flip():
            fails_one_in_three("flip")

        def test_ok():
            pass
    """)
    done = run_pytest(folder, "--runstore", "--runstore-repeat", "3", *parallel)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "2 passed, 4 rerun" in done.stdout, done.stdout
    lines = _lines(done.stdout)
    assert ("runstore: 1 repeated test flipped, so the session fails unless quarantined (flaky): "
            "test_flip.py::test_flip (1 of 3 failed)") in lines, lines
    status, detail, verdict, rule = _detail(folder, "test_flip.py::test_flip")
    assert status is RunStatus.FAILED
    assert detail.test.outcome is Outcome.PASSED
    assert [a.outcome for a in detail.attempts] == [Outcome.PASSED, Outcome.FAILED]
    assert {a.source for a in detail.attempts} == {AttemptSource.REPEAT}
    (errors_1, errors_2) = detail.attempt_errors
    assert errors_1 == ()
    assert "execution 2 fails" in errors_2[0].message
    assert (verdict, rule) == (Classification.FLAKY, EvidenceRule.PASSED_ON_RERUN)
    assert re.search(r"runstore: run \d+ recorded: no failures, 1 flaky", done.stdout)


def test_a_repeat_that_ends_failing_after_a_pass_is_flaky_flipped_in_run(tmp_path: Path) -> None:
    folder = write(tmp_path / "proj", conftest=COUNTER, test_flip="""
        from conftest import fails_one_in_three

        def test_flip():
            fails_one_in_three("flip")
    """)
    done = run_pytest(folder, "--runstore", "--runstore-repeat", "2")
    assert done.returncode == 1, done.stdout
    _, detail, verdict, rule = _detail(folder, "test_flip.py::test_flip")
    assert (detail.test.outcome, [a.outcome for a in detail.attempts]) == (
        Outcome.FAILED, [Outcome.PASSED])
    assert (verdict, rule) == (Classification.FLAKY, EvidenceRule.FLIPPED_IN_RUN)
    with build(sqlite(_db(folder))) as container:
        (entry,) = container.get(DataReader).history("proj", "test_flip.py::test_flip").unwrap()
    assert (entry.earlier_passes, entry.rerun_failures) == (1, 0)


def test_repeat_without_recording_still_fails_a_flipping_session(tmp_path: Path) -> None:
    folder = write(tmp_path / "proj", conftest=COUNTER, test_flip="""
        from conftest import fails_one_in_three

        def test_flip():
            fails_one_in_three("flip")
    """)
    done = run_pytest(folder, "--runstore-repeat", "3")
    assert done.returncode == 1, done.stdout
    assert "flipped, so the session fails unless quarantined" in done.stdout
    assert not _db(folder).exists()


@pytest.mark.parametrize("value", ["0", "x", "-2", "10001"])
def test_a_bad_repeat_count_is_a_usage_error(tmp_path: Path, value: str) -> None:
    folder = write(tmp_path / "proj", test_a="def test_a():\n    pass\n")
    done = run_pytest(folder, "--runstore-repeat", value)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "--runstore-repeat" in done.stderr


def test_repeat_refuses_pytest_rerunfailures_reruns(tmp_path: Path) -> None:
    """A rerun would run a failing execution again and hide the flip the repeat counts."""
    pytest.importorskip("pytest_rerunfailures")
    folder = write(tmp_path / "proj", test_a="def test_a():\n    pass\n")
    done = run_pytest(folder, *RERUNS, "--reruns", "2", "--runstore-repeat", "3")
    assert done.returncode == 4, done.stdout + done.stderr
    assert ("'--runstore-repeat' cannot be combined with pytest-rerunfailures' --reruns 2"
            in done.stderr)
    marker_only = run_pytest(folder, *RERUNS, "--runstore-repeat", "2")
    assert marker_only.returncode == 0, marker_only.stdout + marker_only.stderr


def test_a_repeated_item_is_never_rerun_by_its_flaky_marker(tmp_path: Path) -> None:
    pytest.importorskip("pytest_rerunfailures")
    folder = write(tmp_path / "proj", conftest=COUNTER, test_flip="""
        import pytest
        from conftest import fails_one_in_three

        @pytest.mark.flaky(reruns=5)
        def test_flip():
            fails_one_in_three("flip")
    """)
    done = run_pytest(folder, *RERUNS, "--runstore", "--runstore-repeat", "2")
    assert done.returncode == 1, done.stdout
    _, detail, _, _ = _detail(folder, "test_flip.py::test_flip")
    assert [a.source for a in detail.attempts] == [AttemptSource.REPEAT]
    assert detail.test.outcome is Outcome.FAILED  # not rerun to a pass


# -- early flake detection ------------------------------------------------------------------------


def _known_project(tmp_path: Path, **extra: str) -> Path:
    """A project whose six steady tests are recorded once, so they are known."""
    folder = write(tmp_path / "proj", conftest=COUNTER, test_steady=STEADY)
    first = run_pytest(folder, "--runstore", "--runstore-efd")
    assert first.returncode == 0, first.stdout + first.stderr
    assert ("runstore: early flake detection stood down: no selected test is recorded yet"
            in _lines(first.stdout)), first.stdout
    write(folder, **extra)
    return folder


NEW_FLAKY = """
    from conftest import fails_one_in_three

    def test_new():
        fails_one_in_three("new")
"""


@pytest.mark.parametrize("parallel", [(), XDIST], ids=["serial", "xdist"])
def test_efd_catches_a_new_test_that_fails_one_run_in_three(
    tmp_path: Path, parallel: tuple[str, ...]
) -> None:
    if parallel:
        pytest.importorskip("xdist")
    folder = _known_project(tmp_path, test_new=NEW_FLAKY)
    done = run_pytest(folder, "--runstore", "--runstore-efd", *parallel)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = _lines(done.stdout)
    assert "runstore: early flake detection repeated 1 of 1 new test" in lines, lines
    assert ("runstore: 1 new test flipped, so the session fails unless quarantined (flaky): "
            "test_new.py::test_new (3 of 10 failed)") in lines, lines
    status, detail, verdict, _ = _detail(folder, "test_new.py::test_new")
    assert status is RunStatus.FAILED
    assert detail.test.attempts == 9  # a fast test: 10 executions by the table
    assert {a.source for a in detail.attempts} == {AttemptSource.REPEAT}
    assert verdict is Classification.FLAKY
    # The known tests ran once each.
    with build(sqlite(_db(folder))) as container:
        reader = container.get(DataReader)
        run = reader.latest_run("proj").unwrap()
        attempts = {t.nodeid: t.attempts for t in reader.tests(run.id).unwrap()}
    assert {n: a for n, a in attempts.items() if n.startswith("test_steady")} == {
        f"test_steady.py::test_{c}": 0 for c in "abcdef"}


def test_efd_leaves_a_known_test_alone_and_stays_green_on_a_steady_new_one(
    tmp_path: Path,
) -> None:
    folder = _known_project(tmp_path, test_new="def test_new():\n    pass\n")
    done = run_pytest(folder, "--runstore", "--runstore-efd", "--runstore-efd-max", "4")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "7 passed, 3 rerun" in done.stdout, done.stdout
    again = run_pytest(folder, "--runstore", "--runstore-efd")  # now known: run once
    assert again.returncode == 0, again.stdout
    assert "rerun" not in again.stdout.splitlines()[-1], again.stdout
    assert "early flake detection repeated" not in again.stdout


def test_efd_respects_its_budget(tmp_path: Path) -> None:
    """A 0.3 s test would run 10 times by the table; a 1 s budget allows 3 repeats. A 1.2 s
    test then does not fit at all and goes unchecked."""
    folder = _known_project(tmp_path, test_new="""
        import time

        def test_quick():
            time.sleep(0.3)

        def test_slow():
            time.sleep(1.2)
    """)
    done = run_pytest(folder, "--runstore", "--runstore-efd", "--runstore-efd-budget", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = _lines(done.stdout)
    _, quick, _, _ = _detail(folder, "test_new.py::test_quick")
    _, slow, _, _ = _detail(folder, "test_new.py::test_slow")
    assert 1 <= quick.test.attempts <= 3
    assert slow.test.attempts == 0
    assert (f"runstore: early flake detection repeated 1 of 2 new tests; 1 cut short by the "
            f"repeat budget ({quick.test.attempts + 1} of 10 planned executions); 1 unchecked "
            "(run once: the repeat budget was spent or the test is too slow)") in lines, lines


def test_efd_stands_down_when_too_many_tests_are_new(tmp_path: Path) -> None:
    """Three new tests beside six known ones: 3 > ceil(9 * 30 %) = 3 is false, so four."""
    folder = _known_project(tmp_path, test_new="""
        def test_n1():
            pass

        def test_n2():
            pass

        def test_n3():
            pass

        def test_n4():
            pass
    """)
    done = run_pytest(folder, "--runstore", "--runstore-efd")
    assert done.returncode == 0, done.stdout + done.stderr
    assert ("runstore: early flake detection stood down: 4 of the 10 selected tests are "
            "new, more than 30% (3)") in _lines(done.stdout), done.stdout
    assert "rerun" not in done.stdout


def test_efd_leaves_known_tests_to_pytest_rerunfailures(tmp_path: Path) -> None:
    pytest.importorskip("pytest_rerunfailures")
    folder = _known_project(tmp_path, test_new=NEW_FLAKY)
    write(folder, test_steady=STEADY.replace("def test_a():\n    pass", """def test_a():
        from conftest import fails_one_in_three
        fails_one_in_three("known")"""))
    done = run_pytest(folder, *RERUNS, "--reruns", "1", "--runstore", "--runstore-efd")
    assert done.returncode == 1, done.stdout + done.stderr  # the new test flipped
    _, known, _, _ = _detail(folder, "test_steady.py::test_a")
    _, new, _, _ = _detail(folder, "test_new.py::test_new")
    assert [a.source for a in known.attempts] == []  # passed on its first execution
    assert {a.source for a in new.attempts} == {AttemptSource.REPEAT}


@pytest.mark.parametrize(("option", "value"), [("--runstore-efd-max", "x"),
                                               ("--runstore-efd-budget", "-1")])
def test_a_bad_efd_option_is_a_usage_error(tmp_path: Path, option: str, value: str) -> None:
    folder = write(tmp_path / "proj", test_a="def test_a():\n    pass\n")
    done = run_pytest(folder, "--runstore-efd", option, value)
    assert done.returncode == 4, done.stdout + done.stderr
    assert option in done.stderr


@pytest.mark.parametrize("option", ["--runstore-efd-max", "--runstore-efd-budget"])
def test_an_efd_option_without_efd_is_a_usage_error(tmp_path: Path, option: str) -> None:
    folder = write(tmp_path / "proj", test_a="def test_a():\n    pass\n")
    for extra in ((), ("--runstore-repeat", "2")):
        done = run_pytest(folder, "--runstore", option, "3", *extra)
        assert done.returncode == 4, done.stdout + done.stderr
        assert (f"ERROR: '{option}' sets early flake detection, which is off: add "
                "'--runstore-efd' (or ini runstore_efd = true)") in done.stderr, done.stderr
    (folder / "pytest.ini").write_text("[pytest]\nrunstore_efd = true\n", encoding="utf-8")
    assert run_pytest(folder, "--runstore", option, "3").returncode == 0


# -- the rules -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "executions"),
    [(0.0, 10), (4.99, 10), (5.0, 5), (9.9, 5), (10.0, 3), (29.0, 3), (30.0, 2), (299.0, 2),
     (300.0, 1), (3600.0, 1)],
)
def test_the_efd_table_is_datadogs(seconds: float, executions: int) -> None:
    assert efd_executions(seconds) == executions
    assert efd_executions(seconds, cap=3) == min(executions, 3)


def test_the_faulty_session_threshold() -> None:
    ids = [f"t.py::t{n}" for n in range(10)]
    assert EFD_FAULTY_SHARE == 0.30
    assert decide_efd(ids, frozenset(ids[3:])) == EfdDecision(frozenset(ids[:3]), 10)
    assert decide_efd(ids, frozenset(ids[4:])).stood_down == (
        "4 of the 10 selected tests are new, more than 30% (3)")
    assert decide_efd(ids, frozenset()).stood_down == "no selected test is recorded yet"
    assert decide_efd(ids, None, "locked").stood_down == "the database cannot be read (locked)"


def test_an_efd_max_out_of_range_is_a_usage_error_saying_a_whole_number(
        tmp_path: Path) -> None:
    folder = write(tmp_path / "proj", test_a="def test_a():\n    pass\n")
    done = run_pytest(folder, "--runstore-efd", "--runstore-efd-max", "2000")
    assert ("'--runstore-efd-max': must be a whole number from 0 to 1,000 (0: the default, "
            "10), got '2000'") in done.stderr, done.stderr


def test_a_database_file_with_no_tables_yet_knows_no_test(tmp_path: Path) -> None:
    """The file the recorder of this session is creating (empty, its migration not yet
    committed) knows no test; it is not a database that cannot be read."""
    from runstore.recorder._repeat import _database_lookup

    empty = tmp_path / "runstore.db"
    empty.write_bytes(b"")
    assert _database_lookup(str(empty), "proj")(["t.py::test_a"]) == (frozenset(), None)
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database at all" * 100)
    known, problem = _database_lookup(str(garbage), "proj")(["t.py::test_a"])
    assert known is None
    assert problem
