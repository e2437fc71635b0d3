"""The records a report is drawn from: what :func:`runstore.report.collect_report` reads out of
a ``DataReader`` and :func:`runstore.report.render_html` turns into one HTML file.

Every record is plain, frozen data with no reference back to a store, so a report can be
collected from one layer (SQLite, PostgreSQL, memory) and rendered anywhere. Durations are
milliseconds, times are Unix epoch milliseconds, coverage is a percentage in ``[0, 100]``.
Sequences that are capped say so next to the cap (``*_omitted``: how many were left out),
so a page never silently shows less than the store holds.
"""

from __future__ import annotations

import attrs

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

__all__ = [
    "FailingTest",
    "HistoryStrip",
    "MatrixCell",
    "MatrixRow",
    "ReportData",
    "RunPoint",
    "SignatureGroup",
    "SlowTest",
    "StripEntry",
]


@attrs.frozen
class RunPoint:
    """One run of the runs-over-time chart, oldest first in :attr:`ReportData.runs`.

    ``counts`` maps every :class:`Outcome` value to its number of items (0 when none);
    ``duration_ms`` is None for a run that never finished. ``failing`` are the node ids of
    its failed and errored items (and collection errors), sorted, at most
    :attr:`ReportData.failing_cap` of them, ``failing_omitted`` more left out.
    """

    run_id: RunId
    started_at_ms: int
    duration_ms: float | None
    status: RunStatus
    counts: dict[str, int]
    collection_errors: int
    percent_covered: float | None
    git_commit: str | None
    failing: tuple[str, ...]
    failing_omitted: int


@attrs.frozen
class MatrixCell:
    """One test in one run of the history matrix: its outcome, duration (ms) and attempts
    (1 when it ran once; reruns and repeats add one each)."""

    outcome: Outcome
    duration_ms: float
    attempts: int


@attrs.frozen
class MatrixRow:
    """One test's row of the history matrix. ``cells`` line up with
    :attr:`ReportData.matrix_run_ids` (None: the test has no item in that run).

    ``classification`` and ``rule`` are its verdict in the newest run that holds it, with
    ``because`` the verdict's evidence summary (a flaky verdict's reason); None for a test
    the newest runs did not hold.
    """

    nodeid: str
    classification: Classification | None
    rule: EvidenceRule | None
    because: str
    cells: tuple[MatrixCell | None, ...]


@attrs.frozen
class SignatureGroup:
    """One failure signature (one root cause) with the tests it failed, newest last seen
    first in :attr:`ReportData.signatures`. ``nodeids`` are the tests of the reported runs
    that failed with it, sorted (at most :attr:`ReportData.failing_cap`, ``nodeids_omitted``
    more)."""

    signature: FailureSignature
    nodeids: tuple[str, ...]
    nodeids_omitted: int


@attrs.frozen
class SlowTest:
    """One of the slowest items of the newest run, slowest first, with ``durations_ms`` its
    duration in each of its stored history entries, oldest first (the trend)."""

    nodeid: str
    duration_ms: float
    durations_ms: tuple[float, ...]


@attrs.frozen
class StripEntry:
    """One entry of a test's history strip: the run (None once pruned), its outcome,
    duration (ms) and when it was recorded."""

    run_id: RunId | None
    outcome: Outcome
    duration_ms: float
    recorded_at_ms: int


HistoryStrip = tuple[StripEntry, ...]
"""A test's stored history, oldest first (at most ``HISTORY_DEPTH`` entries)."""


@attrs.frozen
class FailingTest:
    """One failing item of the newest run, with its error and its history strip.

    ``frames`` are the error's stack frames, outermost first; ``text`` is the stored
    traceback text (pytest's long representation, possibly truncated by the recorder).
    """

    nodeid: str
    outcome: Outcome
    classification: Classification | None
    because: str
    exception_type: str
    message: str
    text: str
    frames: tuple[StackFrame, ...]
    signature: str
    streak: int
    history: HistoryStrip


@attrs.frozen
class ReportData:
    """Everything one report shows about one project.

    - ``runs``: the newest reported runs, oldest first (the runs-over-time chart);
    - ``matrix_run_ids``: the runs of the matrix's columns, oldest first (the newest of
      ``runs``, at most ``matrix_runs_cap``); ``matrix``: its rows, failing and flaky tests
      first, at most ``matrix_rows_cap`` (``matrix_omitted`` stable tests left out);
    - ``signatures``: failure signature groups of the project, newest last seen first;
    - ``slowest``: the slowest items of the newest run;
    - ``coverage_files``: the newest run's measured files with the lowest coverage first
      (empty without coverage), ``coverage_run_id`` the run they were read from;
    - ``failing_tests``: a section per failing item of the newest run (at most
      ``failing_cap``, ``failing_omitted`` more).

    ``generated_at_ms`` is when it was collected; ``runstore_version`` the package version.
    """

    project: str
    generated_at_ms: int
    runstore_version: str
    runs: tuple[RunPoint, ...]
    matrix_run_ids: tuple[RunId, ...]
    matrix: tuple[MatrixRow, ...]
    matrix_omitted: int
    signatures: tuple[SignatureGroup, ...]
    slowest: tuple[SlowTest, ...]
    coverage_run_id: RunId | None
    coverage_files: tuple[FileCoverage, ...]
    failing_tests: tuple[FailingTest, ...]
    failing_omitted: int
    failing_cap: int
    matrix_runs_cap: int
    matrix_rows_cap: int
