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
    DEFAULT_HISTORY_WINDOW,
    Classification,
    EvidenceRule,
    FailureSignature,
    FileCoverage,
    Outcome,
    Phase,
    RunId,
    RunStatus,
    StackFrame,
)

__all__ = [
    "DEFAULT_REPORT_CAPS",
    "DEFAULT_REPORT_RUNS",
    "MAX_REPORT_FRAMES",
    "MAX_REPORT_MESSAGE_CHARS",
    "MAX_REPORT_RUNS",
    "MAX_REPORT_TEXT_CHARS",
    "MAX_STRIP_RUNS",
    "FailingTest",
    "HistoryStrip",
    "MatrixCell",
    "MatrixRow",
    "ReportCaps",
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
    ``duration_ms`` (finished minus started) is None for a run that never finished.
    ``percent_covered`` is the run's total coverage as ``DataReader.coverage_trend`` reads
    it (None without coverage). ``failing`` are the node ids of its failed and errored items
    and of its collection errors, sorted (a collection error first on a tie), at most
    :attr:`ReportData.run_failing_cap` of them, ``failing_omitted`` more left out.
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
    (1 when it ran once; reruns and repeats add one each: ``TestRecord.attempts + 1``)."""

    outcome: Outcome
    duration_ms: float
    attempts: int


@attrs.frozen
class MatrixRow:
    """One test's row of the history matrix. ``cells`` line up with
    :attr:`ReportData.matrix_run_ids` (None: the test has no item in that run).

    ``classification`` and ``rule`` are its verdict under the report's ``FlakyPolicy``:
    in the newest reported run when that run holds the test (``DataReader.classify``),
    otherwise ``flaky`` when its newest history window is (``DataReader.flaky_tests``),
    otherwise None (no verdict: the newest run did not hold it and it is not flaky).
    ``because`` is the verdict's evidence summary (a flaky verdict's reason, never empty
    for one) and ``because_run_ids`` the runs that evidence rests on (ascending; ``()``
    when none). ``failing_cells`` counts its failed and errored cells.
    """

    nodeid: str
    classification: Classification | None
    rule: EvidenceRule | None
    because: str
    cells: tuple[MatrixCell | None, ...]
    because_run_ids: tuple[RunId, ...] = ()
    failing_cells: int = 0


@attrs.frozen
class SignatureGroup:
    """One failure signature (one root cause) with the tests it failed, newest last seen
    first in :attr:`ReportData.signatures` (first and last seen are the signature's
    ``first_seen_*`` / ``last_seen_*``). ``nodeids`` are the tests of the reported runs
    that failed with it as their first error, sorted (at most
    :attr:`ReportData.run_failing_cap`, ``nodeids_omitted`` more); empty when no reported
    run did (the signature is older than the reported runs).

    ``example`` is a stored message (at most ``MAX_REPORT_MESSAGE_CHARS``) of a failure with
    this signature in the newest reported run that has one, given only when the signature's
    normalised message says nothing on its own: every word of it masked (``<str>``,
    ``<num>``, ``<path>``, ``<hex>``; a ``KeyError`` shows only ``<str>``). ``""`` when the
    message reads well or no reported run holds such a failure."""

    signature: FailureSignature
    nodeids: tuple[str, ...]
    nodeids_omitted: int
    example: str = ""


@attrs.frozen
class SlowTest:
    """One of the slowest executed items of the newest run (a skipped item ran no test body,
    so it is never one), slowest first (ties by node id), with
    ``durations_ms`` its duration (ms) in each of the newest ``MAX_STRIP_RUNS`` reported
    runs that hold it, oldest first (the trend; the newest run's duration last).
    ``outcome`` is its outcome in the newest run."""

    nodeid: str
    duration_ms: float
    durations_ms: tuple[float, ...]
    outcome: Outcome = Outcome.PASSED


@attrs.frozen
class StripEntry:
    """One entry of a test's history strip: the run, the test's outcome and duration (ms)
    in it, and when the run finished (epoch ms; when it started, for a run still running).
    ``run_id`` is None only in a strip made from stored history whose run was pruned (the
    report's strips are made from its runs, which are all stored)."""

    run_id: RunId | None
    outcome: Outcome
    duration_ms: float
    recorded_at_ms: int


HistoryStrip = tuple[StripEntry, ...]
"""A test's outcomes in the newest ``MAX_STRIP_RUNS`` reported runs that hold it, oldest
first: one entry per run with an item of the test (skipped ones too), read with the matrix's
``DataReader.run_cells``, so the strip lines up with the runs chart."""

MAX_STRIP_RUNS = 50
"""The runs a history strip or a slowest test's trend reaches back (the newest reported
ones): as many as history keeps per test (``HISTORY_DEPTH``)."""


@attrs.frozen
class FailingTest:
    """One failing item (or collection error) of the newest run, with its first error and
    its history strip (``()`` for a collection error, which has no history).

    ``classification`` / ``rule`` / ``because`` are its verdict in that run
    (``DataReader.classify`` under the report's policy; None and ``""`` for a collection
    error). ``message`` is the first error's message, at most ``MAX_REPORT_MESSAGE_CHARS``;
    ``text`` the stored traceback text (pytest's long representation), its last
    ``MAX_REPORT_TEXT_CHARS`` characters (where pytest prints the ``E`` lines);
    ``text_truncated`` says that the store or the report cut either. ``frames`` are the
    error's stack frames, outermost first: the innermost ``MAX_REPORT_FRAMES``,
    ``frames_omitted`` outer ones left out. ``signature`` is the failure signature (``""``
    without an error), ``is_new`` whether the run saw it first, ``streak`` the runs in a
    row it has failed ending at this one and ``failing_since`` the streak's first run (see
    ``FailureRecord``). ``phase`` is the first error's phase (``collect`` for a collection
    error).
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
    phase: Phase = Phase.CALL
    rule: EvidenceRule | None = None
    text_truncated: bool = False
    frames_omitted: int = 0
    is_new: bool = False
    failing_since: RunId | None = None


DEFAULT_REPORT_RUNS = 100
"""The runs a report reads unless asked for another number (``collect_report(runs=...)``)."""

MAX_REPORT_RUNS = 500
"""The most runs one report reads: the issue's largest report (500 runs of 2,000 tests) whole.
With every cap at its default a report of that many runs stays under 2 MB of HTML."""

MAX_REPORT_MESSAGE_CHARS = 500
"""The longest error message a failing test's section shows (characters; the start kept)."""

MAX_REPORT_TEXT_CHARS = 2_000
"""The longest traceback text a failing test's section shows (characters; the end kept)."""

MAX_REPORT_FRAMES = 20
"""The most stack frames a failing test's section shows (the innermost kept)."""


@attrs.frozen
class ReportCaps:
    """How much of each section a report holds; whatever a cap leaves out is counted in the
    section's ``*_omitted``. The defaults keep a report of ``MAX_REPORT_RUNS`` runs of
    2,000 tests each under 2 MB of HTML (``benchmarks/report.py`` measures it):

    - ``matrix_runs``: columns of the history matrix (30 runs);
    - ``matrix_rows``: rows of the history matrix (200 tests: 6,000 cells);
    - ``failing``: sections of failing tests of the newest run (100, each at most
      ``MAX_REPORT_TEXT_CHARS`` of text and ``MAX_REPORT_FRAMES`` frames);
    - ``run_failing``: failing node ids kept per run and per signature group (10);
    - ``signatures``: failure signature groups (50);
    - ``slowest``: slowest tests of the newest run (20);
    - ``coverage_files``: files with the lowest coverage (30).

    Each is an ``int`` from 1 to 1,000.
    """

    matrix_runs: int = 30
    matrix_rows: int = 200
    failing: int = 100
    run_failing: int = 10
    signatures: int = 50
    slowest: int = 20
    coverage_files: int = 30


DEFAULT_REPORT_CAPS = ReportCaps()
"""The caps ``collect_report`` uses unless given others."""


@attrs.frozen
class ReportData:
    """Everything one report shows about one project.

    - ``runs``: the newest reported runs (at most ``collect_report(runs=...)``), oldest
      first by (start, id) (the runs-over-time chart);
    - ``matrix_run_ids``: the runs of the matrix's columns, oldest first (the newest of
      ``runs``, at most ``matrix_runs_cap``); ``matrix``: its rows, one per test with an
      item in the newest run or a failed or errored item in one of those runs (a test that
      only an older column holds, passing, has no row), in this order: failing in the newest
      run (``new_failure``, ``persistent_failure``), then ``flaky``, then ``recovered``,
      then tests with a failing cell, then the rest; within each, most failing cells first,
      then by node id. At most ``matrix_rows_cap`` rows, ``matrix_omitted`` tests left out (the
      last in this order);
    - ``signatures``: failure signature groups of the project, newest last seen first, at
      most ``signatures_cap`` (``signatures_omitted`` older ones left out);
    - ``slowest``: the slowest items of the newest run that were not skipped, at most
      ``slowest_cap``;
    - ``coverage_files``: the measured files of ``coverage_run_id`` (the newest reported run
      with coverage, None when none has) with the lowest coverage first (ties by path), at
      most ``coverage_files_cap`` (``coverage_files_omitted`` more); empty without coverage;
    - ``failing_tests``: a section per failing item and collection error of the newest run,
      in ``DataReader.failures`` order (by node id), at most ``failing_cap``
      (``failing_omitted`` more).

    ``generated_at_ms`` is when it was collected (epoch ms); ``runstore_version`` the package
    version; ``policy_window`` the history window the verdicts judged (``FlakyPolicy``).
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
    signatures_omitted: int = 0
    coverage_files_omitted: int = 0
    run_failing_cap: int = DEFAULT_REPORT_CAPS.run_failing
    signatures_cap: int = DEFAULT_REPORT_CAPS.signatures
    slowest_cap: int = DEFAULT_REPORT_CAPS.slowest
    coverage_files_cap: int = DEFAULT_REPORT_CAPS.coverage_files
    policy_window: int = DEFAULT_HISTORY_WINDOW
