"""Acceptance: pytest's own summary line and the counts runstore stored for the same run agree,
on every folder of ``../shared/acceptance/pytest-zoo`` and on a generated suite with unittest
``subTest``s, pytest ``subtests``, reruns (pytest-rerunfailures), xfail and xpass, setup,
teardown and collection errors, skips and a deselected test, serially and under xdist.

pytest's line (``6 failed, 4 passed, 1 skipped, 7 subtests passed, 1 rerun in 0.12s``)
counts *reports*, runstore's ``RunSummary.counts`` counts *items*; they differ by pytest's
own counting rules, each applied here from what the run stored:

- a failing subtest is a ``failed`` report beside its item's own (``SUBFAILED``), a passing
  one ``subtests passed``, a skipped one ``skipped`` (shown with ``verbosity_subtests=1``);
- a unittest case whose only failures are in ``subTest``s keeps a ``passed`` call report
  (pytest 9), while runstore counts the item ``failed``;
- a teardown error is an ``error`` report after the call's ``passed`` or ``failed`` one,
  where runstore counts one ``error`` or ``failed`` item;
- each earlier attempt of a rerun test is a ``rerun`` report (``TestRecord.attempts``);
- a collection error is an ``error`` (``RunSummary.collection_errors``);
- deselected tests are ``deselected`` (``RunSummary.selection.deselected``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from test_pytest_zoo import XDIST, ZOO, _env, fresh_copy, needs_zoo, read_latest

from runstore.services.test_runs import (
    FAILING_OUTCOMES,
    Outcome,
    Phase,
    RunSummary,
    TestRecord,
)

ZOO_FOLDERS = sorted(p.name for p in ZOO.iterdir() if p.is_dir()) if ZOO.is_dir() else ["-"]
"""Every folder of the zoo, so a folder added there is compared too (``-`` when the zoo is
missing: one test that then skips, or fails under CI, instead of an empty parameter set)."""

_SUMMARY = re.compile(r"^=+ (?P<body>.+?) in [\d.]+s(?: \([^)]*\))? =+$", re.M)
_PART = re.compile(r"(?P<n>\d+) (?P<what>[a-z][a-z ]*)")


def summary_line(output: str) -> Counter[str]:
    """pytest's final summary line as counts by word (``errors`` -> ``error``)."""
    found = _SUMMARY.findall(output)
    assert found, output[-3000:]
    counts: Counter[str] = Counter()
    for part in found[-1].split(", "):
        matched = _PART.fullmatch(part)
        if matched is None:  # "no tests ran"
            continue
        word = {"errors": "error", "warnings": "warning"}.get(matched["what"], matched["what"])
        counts[word] += int(matched["n"])
    del counts["warning"]
    return +counts


def _phases(test: TestRecord) -> dict[Phase, Outcome]:
    return {p.phase: p.outcome for p in test.phases}


def predicted_line(run: RunSummary, tests: list[TestRecord]) -> Counter[str]:
    """pytest's summary line as the stored run implies it (see the module docstring)."""
    counts = run.counts
    passed_then_teardown_error = sum(
        t.outcome is Outcome.ERROR and _phases(t).get(Phase.CALL) is Outcome.PASSED
        for t in tests
    )
    failed_then_teardown_error = sum(
        t.outcome is Outcome.FAILED and _phases(t).get(Phase.TEARDOWN) in FAILING_OUTCOMES
        for t in tests
    )
    failed_by_subtests_only = sum(
        t.outcome is Outcome.FAILED and _phases(t).get(Phase.CALL) is Outcome.PASSED
        for t in tests
    )
    line = Counter({
        "passed": counts["passed"] + passed_then_teardown_error + failed_by_subtests_only,
        "failed": counts["failed"] - failed_by_subtests_only + run.subtests["failed"],
        "skipped": counts["skipped"] + run.subtests["skipped"],
        "xfailed": counts["xfailed"],
        "xpassed": counts["xpassed"],
        "error": counts["error"] + failed_then_teardown_error + run.collection_errors,
        "subtests passed": run.subtests["passed"],
        "rerun": sum(t.attempts for t in tests),
        "deselected": run.selection.deselected,
    })
    return +line


SHOW_SUBTESTS = ("-o", "verbosity_subtests=1")  # pytest prints passing subtests only so


def run_recorded(folder: Path, *args: str) -> tuple[str, RunSummary, list[TestRecord]]:
    """Run pytest with runstore on ``folder``; return its output and the stored run."""
    db = folder.parent / f"{folder.name}.db"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "runstore.pytest_plugin", "--runstore",
         f"--runstore-db={db}", "-p", "no:cacheprovider", *SHOW_SUBTESTS, *args],
        cwd=folder, env=_env(), capture_output=True, text=True, errors="replace", timeout=180,
        check=False,
    )
    output = done.stdout + done.stderr
    assert "runstore: warning" not in output, output[-3000:]
    run, tests, _ = read_latest(db, folder.name)
    return output, run, sorted(tests.values(), key=lambda t: t.nodeid)


def assert_line_agrees(printed: Counter[str], run: RunSummary, tests: list[TestRecord]) -> None:
    """The stored counts are the stored items' outcomes, and imply the line pytest printed."""
    recount = Counter(t.outcome.value for t in tests)
    assert run.counts == {o.value: recount[o.value] for o in Outcome}
    assert predicted_line(run, tests) == +printed


@needs_zoo
@pytest.mark.parametrize("folder", ZOO_FOLDERS)
def test_the_summary_line_agrees_on_the_zoo(folder: str, tmp_path: Path) -> None:
    output, run, tests = run_recorded(fresh_copy(folder, tmp_path))
    assert_line_agrees(summary_line(output), run, tests)


# -- a generated suite with every kind of report ---------------------------------------------

SUITE = {
    "conftest.py": '''
import pytest

@pytest.fixture
def broken_setup():
    raise RuntimeError("setup broke")

@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("teardown broke")
''',
    "test_outcomes.py": '''
import pytest

def test_passes():
    pass

def test_fails():
    assert 1 == 2

@pytest.mark.skip(reason="not today")
def test_skipped_by_marker():
    pass

def test_skips_itself():
    pytest.skip("not here")

@pytest.mark.xfail(reason="known")
def test_xfails():
    assert False

@pytest.mark.xfail(reason="fixed meanwhile")
def test_xpasses():
    pass

@pytest.mark.xfail(reason="must fail", strict=True)
def test_xpasses_strictly():
    pass

def test_setup_errors(broken_setup):
    pass

def test_passes_then_teardown_errors(broken_teardown):
    pass

def test_fails_then_teardown_errors(broken_teardown):
    assert False

def test_deselected_by_k():
    pass
''',
    "test_reruns.py": '''
from pathlib import Path
import pytest

@pytest.mark.flaky(reruns=2)
def test_passes_on_its_second_attempt():
    marks = Path(__file__).with_name("attempts.txt")
    marks.write_text((marks.read_text() if marks.exists() else "") + "x")
    assert len(marks.read_text()) >= 2, "first attempt fails"

@pytest.mark.flaky(reruns=1)
def test_fails_every_attempt():
    assert False
''',
    "test_unittest_cases.py": '''
import unittest

class TestCases(unittest.TestCase):
    def test_a_subtest_fails(self):
        for i in range(3):
            with self.subTest(i=i):
                self.assertNotEqual(i, 1)

    def test_subtests_pass(self):
        for i in range(2):
            with self.subTest(i=i):
                pass

    def test_a_subtest_skips(self):
        with self.subTest(i=0):
            self.skipTest("not this one")

    @unittest.skip("not the whole case")
    def test_skipped(self):
        pass

    @unittest.expectedFailure
    def test_expected_failure(self):
        self.assertEqual(1, 2)

    def test_plain_failure(self):
        self.assertEqual(1, 2)
''',
    "test_subtests_fixture.py": '''
def test_a_subtest_fails(subtests):
    for i in range(3):
        with subtests.test(i=i):
            assert i != 2

def test_subtests_pass(subtests):
    for i in range(2):
        with subtests.test(i=i):
            pass
''',
    "test_broken_module.py": "import module_that_does_not_exist\n",
}

EXPECTED = {
    "test_outcomes.py::test_passes": Outcome.PASSED,
    "test_outcomes.py::test_fails": Outcome.FAILED,
    "test_outcomes.py::test_skipped_by_marker": Outcome.SKIPPED,
    "test_outcomes.py::test_skips_itself": Outcome.SKIPPED,
    "test_outcomes.py::test_xfails": Outcome.XFAILED,
    "test_outcomes.py::test_xpasses": Outcome.XPASSED,
    "test_outcomes.py::test_xpasses_strictly": Outcome.FAILED,
    "test_outcomes.py::test_setup_errors": Outcome.ERROR,
    "test_outcomes.py::test_passes_then_teardown_errors": Outcome.ERROR,
    "test_outcomes.py::test_fails_then_teardown_errors": Outcome.FAILED,
    "test_reruns.py::test_passes_on_its_second_attempt": Outcome.PASSED,
    "test_reruns.py::test_fails_every_attempt": Outcome.FAILED,
    "test_unittest_cases.py::TestCases::test_a_subtest_fails": Outcome.FAILED,
    "test_unittest_cases.py::TestCases::test_subtests_pass": Outcome.PASSED,
    "test_unittest_cases.py::TestCases::test_a_subtest_skips": Outcome.PASSED,
    "test_unittest_cases.py::TestCases::test_skipped": Outcome.SKIPPED,
    "test_unittest_cases.py::TestCases::test_expected_failure": Outcome.XFAILED,
    "test_unittest_cases.py::TestCases::test_plain_failure": Outcome.FAILED,
    "test_subtests_fixture.py::test_a_subtest_fails": Outcome.FAILED,
    "test_subtests_fixture.py::test_subtests_pass": Outcome.PASSED,
}


def generated_suite(into: Path) -> Path:
    folder = into / "generated"
    folder.mkdir()
    for name, text in SUITE.items():
        (folder / name).write_text(text.lstrip("\n"), encoding="utf-8")
    return folder


@pytest.mark.parametrize("parallel", [(), XDIST], ids=["serial", "xdist"])
def test_the_summary_line_agrees_on_every_kind_of_report(
    parallel: tuple[str, ...], tmp_path: Path
) -> None:
    pytest.importorskip("pytest_rerunfailures")
    if parallel:
        pytest.importorskip("xdist")
    folder = generated_suite(tmp_path)
    output, run, tests = run_recorded(
        folder, "-p", "pytest_rerunfailures", *parallel, "--continue-on-collection-errors",
        "-k", "not deselected_by_k",
    )
    assert {t.nodeid: t.outcome for t in tests} == EXPECTED, output[-3000:]
    assert run.collection_errors == 1
    assert run.subtests == {"passed": 8, "failed": 2, "skipped": 1}
    assert {t.nodeid: t.attempts for t in tests if t.attempts} == {
        "test_reruns.py::test_passes_on_its_second_attempt": 1,
        "test_reruns.py::test_fails_every_attempt": 1,
    }
    # What pytest itself printed for this suite, so that the rules above cannot drift
    # with pytest unnoticed. Under xdist the controller never collects, so its line has no
    # "deselected" (the workers deselect); the stored count is then not compared with it.
    printed = summary_line(output)
    assert printed == Counter({
        "failed": 8, "passed": 7, "skipped": 4, "xfailed": 2, "xpassed": 1, "error": 4,
        "subtests passed": 8, "rerun": 2, "deselected": 0 if parallel else 1,
    }), output[-3000:]
    if parallel:
        printed["deselected"] = run.selection.deselected
    else:
        assert run.selection.deselected == 1
    assert_line_agrees(printed, run, tests)


def test_the_summary_line_parser() -> None:
    output = (
        "...\n= 2 failed, 1 passed, 1 skipped, 7 subtests passed, 3 errors, 1 rerun, "
        "2 warnings in 62.10s (0:01:02) =\n"
    )
    assert summary_line(output) == Counter(
        {"failed": 2, "passed": 1, "skipped": 1, "subtests passed": 7, "error": 3, "rerun": 1}
    )
    assert summary_line("===== no tests ran in 0.01s =====") == Counter()


def test_the_suite_and_its_expectations_name_the_same_tests(tmp_path: Path) -> None:
    folder = generated_suite(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-p", "pytest_rerunfailures", "--continue-on-collection-errors"],
        cwd=folder, env=_env(), capture_output=True, text=True, timeout=120, check=False,
    )
    collected = {line for line in done.stdout.splitlines() if "::" in line}
    assert collected == set(EXPECTED) | {"test_outcomes.py::test_deselected_by_k"}
    shutil.rmtree(folder)
