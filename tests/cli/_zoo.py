"""A test-run database several CLI tests read (seed it once per module, never write it).

``seed_zoo(path)`` records runs 1-4 of project ``zoo`` with one test per row of the
classification table (window newest first); run 4 adds a rerun pass, subtests, coverage
(per test too) and a collection error; run 5 ran a selection; project ``commit`` has a
failure and a pass on one clean commit.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runstore.layers import build, sqlite
from runstore.services.test_runs import (
    CollectionError,
    DataStore,
    Environment,
    ErrorInfo,
    FileCoverage,
    Outcome,
    Phase,
    PhaseResult,
    RunStart,
    RunStatus,
    Selection,
    SubtestResult,
    TestLines,
    TestResult,
)
from runstore.testing import make_item

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

# Outcomes per test, oldest run first ("-" not in that run). Runs 1-4 of project "zoo".
ZOO = {
    "t::test_first_failure": "---F",          # F         new_failure
    "t::test_first_after_passes": "-PPF",     # F P P     new_failure
    "t::test_streak": "-PFF",                 # F F P     persistent_failure
    "t::test_fixed": "-FFP",                  # P F F     recovered
    "t::test_clean_break_and_fix": "-PFP",    # P F P     recovered
    "t::test_oscillating": "FPFP",            # P F P F   flaky (oscillation)
    "t::test_oscillating_now_failing": "-FPF",  # F P F   flaky (oscillation)
    "t::test_stable": "-PPP",                 # P P P     stable
}
VERDICTS = {
    "t::test_first_failure": ("new_failure", "first_failure"),
    "t::test_first_after_passes": ("new_failure", "first_failure"),
    "t::test_streak": ("persistent_failure", "failing_streak"),
    "t::test_fixed": ("recovered", "fixed"),
    "t::test_clean_break_and_fix": ("recovered", "fixed"),
    "t::test_oscillating": ("flaky", "oscillation"),
    "t::test_oscillating_now_failing": ("flaky", "oscillation"),
    "t::test_stable": ("stable", "no_failure"),
    "t::test_passed_on_rerun": ("flaky", "passed_on_rerun"),
}
FLAKY = {"t::test_oscillating", "t::test_oscillating_now_failing", "t::test_passed_on_rerun"}


def _item(nodeid: str, outcome: str, run: int) -> TestResult:
    if outcome == "P":
        return make_item(nodeid)
    return make_item(nodeid, Outcome.FAILED, message=f"assert {run} == 0 in run {run}")


def _rerun_pass(nodeid: str) -> TestResult:
    failed = make_item(nodeid, Outcome.FAILED, message="timed out")
    return TestResult(nodeid, "t", nodeid.split("::")[1],
                      (PhaseResult(Phase.CALL, Outcome.PASSED, 2.0),), attempts=(failed,))


def _begin(store: DataStore, project: str, minute: int, commit: str,
           selection: Selection | None = None) -> Any:
    environment = Environment(git_commit=commit, git_dirty=False)
    start = RunStart(project, f"inv-{project}-{minute}", T0.replace(minute=minute),
                     environment, selection or Selection())
    return store.begin_run(start).unwrap()


def seed_zoo(path: Path) -> Path:
    """Record the runs this module's docstring describes into a new database at ``path``."""
    with build(sqlite(path)) as container:
        store = container.get(DataStore)
        for run in range(1, 5):
            run_id = _begin(store, "zoo", run, f"c0ffee{run:034d}")
            items = [_item(n, o[run - 1], run) for n, o in ZOO.items() if o[run - 1] != "-"]
            if run == 4:
                items.append(_rerun_pass("t::test_passed_on_rerun"))
                items.append(TestResult(
                    "t::test_with_subtests", "t", "test_with_subtests",
                    (PhaseResult(Phase.CALL, Outcome.PASSED, 1.0),),
                    subtests=(SubtestResult("i=0", Outcome.PASSED, 0.1),
                              SubtestResult("i=1", Outcome.PASSED, 0.1),
                              SubtestResult("i=2", Outcome.FAILED, 0.1,
                                            ErrorInfo(Phase.CALL, "AssertionError", "i=2")),
                              SubtestResult("i=3", Outcome.SKIPPED, 0.1))))
            store.record_results(run_id, items).unwrap()
            if run == 4:
                store.record_collection_errors(run_id, [CollectionError(
                    "t_broken.py", "t_broken.py",
                    ErrorInfo(Phase.COLLECT, "SyntaxError", "SyntaxError: invalid syntax"),
                )]).unwrap()
                store.write_coverage(run_id, [
                    FileCoverage("src/zoo.py", 40, 4, 10, 2, 3, (7, 8, 9, 20))]).unwrap()
                store.write_test_coverage(run_id, [
                    TestLines("t::test_stable", "src/zoo.py", (1, 2, 3, 10)),
                    TestLines("t::test_streak", "src/zoo.py", (1, 4, 5))]).unwrap()
            store.finish_run(run_id, RunStatus.FAILED, T0.replace(minute=run, second=30))
        # Run 5: a selection (-k, a path, deselected items), leaving most tests out.
        run_id = _begin(store, "zoo", 5, "c0ffee5", Selection(
            args=("t.py",), keyword="streak or stable", deselected=8))
        store.record_results(run_id, [_item("t::test_streak", "F", 5),
                                      make_item("t::test_stable")]).unwrap()
        store.finish_run(run_id, RunStatus.FAILED, T0.replace(minute=5, second=30)).unwrap()
        # Project "commit": failed, then passed, on one clean commit.
        for minute, outcome in ((10, "F"), (11, "P")):
            run_id = _begin(store, "commit", minute, "abc123")
            store.record_results(run_id, [_item("c::test_same_commit", outcome, minute)])
            store.finish_run(run_id, RunStatus.PASSED, T0.replace(minute=minute, second=30))
    return path
