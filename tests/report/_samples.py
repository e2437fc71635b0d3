"""ReportData values built by hand, so the page can be rendered and checked without a store."""

from __future__ import annotations

from typing import Any

import attrs

from runstore.report import (
    DEFAULT_REPORT_CAPS,
    MAX_REPORT_FRAMES,
    MAX_REPORT_MESSAGE_CHARS,
    MAX_REPORT_TEXT_CHARS,
    FailingTest,
    MatrixCell,
    MatrixRow,
    ReportData,
    RunPoint,
    SignatureGroup,
    SlowTest,
    StripEntry,
)
from runstore.services.test_runs import (
    Classification,
    EvidenceRule,
    FailureSignature,
    FileCoverage,
    Outcome,
    RunId,
    RunStatus,
    StackFrame,
)

T0 = 1_764_500_000_000
"""2025-11-30 10:53:20 UTC in epoch ms."""

HOSTILE = "t::test_x[<script>alert('x')</script>\"&\x1b[31m\x00\u202e]"
"""A node id holding markup, quotes, an ANSI colour, NUL and a bidirectional override."""


def counts(passed: int = 0, failed: int = 0, skipped: int = 0, error: int = 0,
           xfailed: int = 0, xpassed: int = 0) -> dict[str, int]:
    return {"passed": passed, "failed": failed, "skipped": skipped, "xfailed": xfailed,
            "xpassed": xpassed, "error": error}


def run_point(run_id: int, *, failing: tuple[str, ...] = (), passed: int = 10,
              covered: float | None = None, duration_ms: float | None = 1234.0,
              status: RunStatus | None = None, skipped: int = 0) -> RunPoint:
    return RunPoint(
        run_id=RunId(run_id), started_at_ms=T0 + run_id * 60_000, duration_ms=duration_ms,
        status=status or (RunStatus.FAILED if failing else RunStatus.PASSED),
        counts=counts(passed=passed, failed=len(failing), skipped=skipped),
        collection_errors=0, percent_covered=covered, git_commit="0123456789abcdef",
        failing=failing, failing_omitted=0,
    )


def signature(sig: str, message: str = "assert 1 == 2", first: int = 1, last: int = 3,
              ) -> FailureSignature:
    return FailureSignature(
        signature=sig, exception_type="AssertionError", message=message,
        frame="tests/test_a.py:test_a", first_seen_run_id=RunId(first),
        first_seen_at_ms=T0 + first * 60_000, last_seen_run_id=RunId(last),
        last_seen_at_ms=T0 + last * 60_000, runs=2, tests=1, occurrences=2,
    )


def failing_test(nodeid: str, *, message: str = "assert 1 == 2", text: str = "",
                 sig: str = "abc123", history: tuple[StripEntry, ...] = ()) -> FailingTest:
    return FailingTest(
        nodeid=nodeid, outcome=Outcome.FAILED, classification=Classification.NEW_FAILURE,
        because="first failure in the window", exception_type="AssertionError",
        message=message, text=text or f"def test():\n>       assert 1 == 2\nE       {message}",
        frames=(StackFrame("tests/test_a.py", 12, "test_a", True),
                StackFrame("/usr/lib/python3/x.py", 3, "helper", False)),
        signature=sig, streak=2, history=history, rule=EvidenceRule.FIRST_FAILURE,
        failing_since=RunId(2),
    )


def empty_report(**changes: Any) -> ReportData:
    """A project with runs and nothing else: no tests, failures, coverage or signatures."""
    data = ReportData(
        project="shop", generated_at_ms=T0 + 10 * 60_000, runstore_version="0.1.0",
        runs=(run_point(1, passed=0), run_point(2, passed=0)), matrix_run_ids=(),
        matrix=(), matrix_omitted=0, signatures=(), slowest=(), coverage_run_id=None,
        coverage_files=(), failing_tests=(), failing_omitted=0,
        failing_cap=DEFAULT_REPORT_CAPS.failing,
        matrix_runs_cap=DEFAULT_REPORT_CAPS.matrix_runs,
        matrix_rows_cap=DEFAULT_REPORT_CAPS.matrix_rows,
    )
    return attrs.evolve(data, **changes)


def sample_report(nodeid: str = "tests/test_a.py::test_a", message: str = "assert 1 == 2",
                  text: str = "") -> ReportData:
    """Three runs of a project: the newest fails ``nodeid`` with ``message``; a flaky test,
    a signature group, coverage and the slowest tests."""
    sig = "abc123"
    strip = tuple(StripEntry(RunId(i), Outcome.PASSED if i == 1 else Outcome.FAILED, 5.0 * i,
                             T0 + i * 60_000) for i in (1, 2, 3))
    cells = (MatrixCell(Outcome.PASSED, 3.0, 1), MatrixCell(Outcome.FAILED, 4.5, 1),
             MatrixCell(Outcome.FAILED, 5.0, 2))
    flaky_cells = (MatrixCell(Outcome.FAILED, 1.0, 1), MatrixCell(Outcome.PASSED, 1.0, 2),
                   None)
    return empty_report(
        runs=(run_point(1, covered=80.0), run_point(2, failing=(nodeid,), covered=81.5),
              run_point(3, failing=(nodeid,), covered=None, skipped=2)),
        matrix_run_ids=(RunId(1), RunId(2), RunId(3)),
        matrix=(
            MatrixRow(nodeid, Classification.PERSISTENT_FAILURE, EvidenceRule.FAILING_STREAK,
                      "failing since run 2", cells, (RunId(2), RunId(3)), 2),
            MatrixRow("tests/test_b.py::test_flaky", Classification.FLAKY,
                      EvidenceRule.PASSED_ON_RERUN, "passed on a rerun in run 2", flaky_cells,
                      (RunId(2),), 1),
        ),
        matrix_omitted=7,
        signatures=(SignatureGroup(signature(sig, message, 2, 3), (nodeid,), 0),),
        slowest=(SlowTest(nodeid, 5.0, (3.0, 4.5, 5.0), Outcome.FAILED),
                 SlowTest("tests/test_c.py::test_slow", 2.0, (2.0,))),
        coverage_run_id=RunId(2),
        coverage_files=(FileCoverage("src/shop/cart.py", 40, 10, 8, 1, 2),
                        FileCoverage("src/shop/<b>.py", 10, 1)),
        failing_tests=(failing_test(nodeid, message=message, text=text, sig=sig,
                                    history=strip),),
    )


def large_report(runs: int = 500, tests: int = 2_000) -> ReportData:
    """The issue's largest report at the collector's default caps: ``runs`` runs of ``tests``
    tests each, every section full and every text at its longest, long node ids."""
    caps = DEFAULT_REPORT_CAPS

    def nodeid(i: int) -> str:
        return f"tests/integration/checkout/test_payment_flows.py::test_case_{i:05d}[param-{i}]"

    def fail_ids(r: int) -> tuple[str, ...]:
        return tuple(nodeid((r * 7 + k) % tests) for k in range(caps.run_failing))

    points = tuple(
        attrs.evolve(run_point(r, failing=fail_ids(r), passed=tests - caps.run_failing - 5,
                               covered=70 + r % 20, skipped=5), failing_omitted=17)
        for r in range(1, runs + 1)
    )
    matrix_runs = tuple(p.run_id for p in points[-caps.matrix_runs:])
    outcomes = (Outcome.PASSED, Outcome.FAILED, Outcome.PASSED, Outcome.SKIPPED,
                Outcome.ERROR, Outcome.PASSED)
    rows = tuple(
        MatrixRow(nodeid(i), Classification.FLAKY, EvidenceRule.OSCILLATION,
                  "2 failing streaks in the last 10 runs (runs 480, 490)",
                  tuple(MatrixCell(outcomes[(i + c) % len(outcomes)], 1234.5 + c, 1 + c % 2)
                        for c in range(len(matrix_runs))), (RunId(480), RunId(490)), 5)
        for i in range(caps.matrix_rows)
    )
    history = tuple(StripEntry(RunId(runs - 49 + k), outcomes[k % len(outcomes)], 1000.0 + k,
                               T0 + k) for k in range(50))
    frames = tuple(StackFrame(f"src/shop/module_{k}.py", 100 + k, f"function_{k}", k % 2 == 0)
                   for k in range(MAX_REPORT_FRAMES))
    failing = tuple(
        attrs.evolve(failing_test(nodeid(i), message="m" * MAX_REPORT_MESSAGE_CHARS,
                                  text=("E   assert something went wrong here\n" * 60)
                                  [:MAX_REPORT_TEXT_CHARS], sig=f"sig{i % caps.signatures}",
                                  history=history), frames=frames, frames_omitted=30,
                     text_truncated=True)
        for i in range(caps.failing)
    )
    groups = tuple(
        SignatureGroup(signature(f"sig{g}", "x" * MAX_REPORT_MESSAGE_CHARS, 1, runs),
                       tuple(nodeid(g * 10 + k) for k in range(caps.run_failing)), 40)
        for g in range(caps.signatures)
    )
    slowest = tuple(SlowTest(nodeid(i), 9_000.0 - i, tuple(8_000.0 + k for k in range(50)))
                    for i in range(caps.slowest))
    files = tuple(FileCoverage(f"src/shop/some/package/module_{k:03d}.py", 500, k, 100, 3, 4)
                  for k in range(caps.coverage_files))
    return empty_report(
        runs=points, matrix_run_ids=matrix_runs, matrix=rows, matrix_omitted=tests - len(rows),
        signatures=groups, signatures_omitted=12, slowest=slowest,
        coverage_run_id=points[-1].run_id, coverage_files=files, coverage_files_omitted=100,
        failing_tests=failing, failing_omitted=5,
    )
