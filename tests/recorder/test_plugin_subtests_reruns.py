"""Subtests and reruns: what pytest reports beside an item's own phases reaches the store."""

from __future__ import annotations

from pathlib import Path

import pytest
from plugin_runs import SUMMARY, run_pytest, write

from runstore.layers import build, sqlite
from runstore.services.test_runs import (
    Classification,
    DataReader,
    EvidenceRule,
    Outcome,
    RunStatus,
)

XDIST = ("-p", "xdist.plugin", "-n", "2")

SUBTESTS = """
    import unittest

    class TestCase(unittest.TestCase):
        def test_sub(self):
            for i in range(4):
                with self.subTest(i=i):
                    self.assertEqual(i % 2, 0)

        def test_all_pass(self):
            for i in range(2):
                with self.subTest(i=i):
                    pass

    def test_fixture(subtests):
        for i in range(3):
            with subtests.test(msg="m", i=i):
                assert i != 1
"""


@pytest.mark.parametrize("parallel", [(), XDIST], ids=["serial", "xdist"])
def test_a_failing_subtest_fails_its_item_with_the_subtests_error(
    tmp_path: Path, parallel: tuple[str, ...]
) -> None:
    if parallel:
        pytest.importorskip("xdist")
    folder = write(tmp_path / "proj", test_subtests=SUBTESTS)
    done = run_pytest(folder, "--runstore", *parallel)
    assert done.returncode == 1, done.stdout
    with build(sqlite(folder / ".runstore" / "runstore.db")) as container:
        reader = container.get(DataReader)
        run = reader.latest_run("proj").unwrap()
        outcomes = {t.nodeid: t.outcome for t in reader.tests(run.id).unwrap()}
        failures = {f.nodeid: f for f in reader.failures(run.id).unwrap()}
        unittest_case = reader.test_detail(run.id, "test_subtests.py::TestCase::test_sub").unwrap()
        fixture = reader.test_detail(run.id, "test_subtests.py::test_fixture").unwrap()
    assert run.status is RunStatus.FAILED
    assert outcomes == {
        "test_subtests.py::TestCase::test_sub": Outcome.FAILED,
        "test_subtests.py::TestCase::test_all_pass": Outcome.PASSED,
        "test_subtests.py::test_fixture": Outcome.FAILED,
    }
    assert run.subtests == {"passed": 6, "failed": 3, "skipped": 0}
    # The item's error is its first failing subtest's, with that subtest's frames.
    first = failures["test_subtests.py::TestCase::test_sub"]
    assert first.message == "AssertionError: 1 != 0"
    assert first.exception_type == "AssertionError"
    assert [(f.path, f.function) for f in first.frames][-1] == ("test_subtests.py", "test_sub")
    # Descriptions as pytest prints them; under xdist pytest shows the values repr'd twice.
    value = "'{}'" if parallel else "{}"
    assert [(s.description, s.outcome) for s in unittest_case.subtests] == [
        (f"(i={value.format(i)})", Outcome.FAILED if i % 2 else Outcome.PASSED)
        for i in range(4)
    ]
    # pytest's own "contains 1 failed subtest" is no error of its own: the subtest's is.
    assert [e.message for e in fixture.errors] == ["assert 1 != 1"]
    assert failures["test_subtests.py::test_fixture"].message == "assert 1 != 1"
    (failing,) = [s for s in fixture.subtests if s.outcome is Outcome.FAILED]
    assert failing.description == f"[m] (i={value.format(1)})"
    assert failing.error is not None
    assert failing.error.frames[-1].function == "test_fixture"
    assert SUMMARY.findall(done.stdout) == [
        "runstore: run 1 recorded: 2 new failures (runstore show 1)"
    ]


RERUN = """
    import pathlib

    MARK = pathlib.Path(__file__).with_name("attempted")

    def test_second_time_lucky():
        if not MARK.exists():
            MARK.write_text("1")
            assert False, "first attempt"

    def test_steady():
        pass
"""


@pytest.mark.parametrize("parallel", [(), XDIST], ids=["serial", "xdist"])
def test_a_pass_on_rerun_arrives_with_its_failed_attempt_and_is_flaky(
    tmp_path: Path, parallel: tuple[str, ...]
) -> None:
    pytest.importorskip("pytest_rerunfailures")
    if parallel:
        pytest.importorskip("xdist")
    folder = write(tmp_path / "proj", test_rerun=RERUN)
    done = run_pytest(folder, "-p", "pytest_rerunfailures", "--reruns", "2", "--runstore",
                      *parallel)
    assert done.returncode == 0, done.stdout
    assert "1 rerun" in done.stdout
    nodeid = "test_rerun.py::test_second_time_lucky"
    with build(sqlite(folder / ".runstore" / "runstore.db")) as container:
        reader = container.get(DataReader)
        run = reader.latest_run("proj").unwrap()
        detail = reader.test_detail(run.id, nodeid).unwrap()
        verdicts = {c.nodeid: c for c in reader.classify(run.id).unwrap()}
        flaky = reader.flaky_tests("proj").unwrap()
    assert detail.test.outcome is Outcome.PASSED
    assert [a.outcome for a in detail.attempts] == [Outcome.FAILED]
    (attempt_errors,) = detail.attempt_errors
    assert [e.message for e in attempt_errors] == ["AssertionError: first attempt\nassert False"]
    assert attempt_errors[0].frames[-1].function == "test_second_time_lucky"
    assert verdicts[nodeid].classification is Classification.FLAKY
    assert verdicts[nodeid].because.rule is EvidenceRule.PASSED_ON_RERUN
    assert [f.nodeid for f in flaky] == [nodeid]
    assert SUMMARY.findall(done.stdout) == [
        "runstore: run 1 recorded: no failures, 1 flaky (runstore show 1)"
    ]
