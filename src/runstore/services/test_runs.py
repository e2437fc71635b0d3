"""Test-run records: what a test runner produced, and the questions asked of it afterwards.

Terms are pytest's: a *node id* (``tests/test_a.py::TestX::test_y[param]``, stored verbatim),
the *phases* ``setup``, ``call`` and ``teardown`` of each item, and the outcomes
``passed failed skipped xfailed xpassed error``. ``DataStore`` writes, ``DataReader`` reads.

Times at rest are integer epoch milliseconds UTC; durations are float milliseconds.

Outcome of an item, from its phases (the first rule that matches wins), following how pytest
itself reports (``pytest -rA`` and ``--junitxml``):

1. setup ``failed`` -> ``error``;
2. any phase ``skipped`` before the call ran (setup skip, ``skip`` marker) -> ``skipped``, or
   ``xfailed`` when that phase is ``xfailed`` (an ``xfail(run=False)`` marker);
3. call ``failed``, or any subtest ``failed`` or ``error`` -> ``failed`` (a strict xpass is
   reported by pytest as a failed call; an item with a failing unittest ``subTest`` or
   pytest ``subtests`` subtest is failed, as pytest's summary line counts it);
4. teardown ``failed`` -> ``error`` (the passing call is still stored in its phase row);
5. call ``xfailed`` / ``xpassed`` / ``skipped`` -> that outcome;
6. otherwise ``passed``.

Identifiers (project, invocation id, node ids, module paths, collection-error node ids and
module paths, coverage file paths) are stored verbatim but may hold neither lone surrogates
nor NUL (U+0000): a write carrying one is ``InvalidInput`` naming the field, and nothing is
written. Free text (messages, error texts, captured output, skip reasons, names, frame paths)
keeps NUL exactly and has lone surrogates replaced with U+FFFD. Reads given such an identifier
to look up find nothing.

Failing outcomes are ``failed`` and ``error``; *executed* outcomes (the ones history keeps)
are every outcome except ``skipped`` and ``xfailed``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from enum import StrEnum
from typing import NewType, Protocol, TypeAlias, runtime_checkable

import attrs
from returns.result import Result

from runstore.services.errors import (
    Busy,
    IllegalTransition,
    InvalidInput,
    NotFound,
    StorageFailure,
)
from runstore.services.pagination import Page
from runstore.services.search import FailureHit, TestHit

__all__ = [
    "CHANGED_FILE_STATUS_CODES",
    "CLASSIFICATION_TABLE",
    "DEFAULT_FIX_CHECKS",
    "DEFAULT_FLAKY_POLICY",
    "DEFAULT_HISTORY_WINDOW",
    "DEFAULT_TESTS_FOR_RUNS",
    "FAILING_OUTCOMES",
    "FLAKY_RULES",
    "HISTORY_DEPTH",
    "MAX_CAPTURE_CHARS",
    "MAX_CELL_RUNS",
    "MAX_CHANGED_FILES",
    "MAX_FINGERPRINT_CHARS",
    "MAX_FRAMES",
    "MAX_MESSAGE_CHARS",
    "MAX_SESSION_ID_CHARS",
    "MAX_TESTS_FOR_RUNS",
    "MAX_TEXT_CHARS",
    "AttemptSource",
    "ChangedFile",
    "Classification",
    "CollectionError",
    "CoverageReport",
    "CoverageTrendPoint",
    "CoveringTest",
    "DataReader",
    "DataReaderError",
    "DataStore",
    "DataStoreError",
    "Environment",
    "ErrorInfo",
    "Evidence",
    "EvidenceRule",
    "FailureRecord",
    "FailureSignature",
    "FileCoverage",
    "FixCheck",
    "FixCheckResult",
    "FlakyPolicy",
    "FlakyTest",
    "HistoryEntry",
    "Outcome",
    "Phase",
    "PhaseResult",
    "PruneRunsResult",
    "QuarantinedItem",
    "RunComparison",
    "RunId",
    "RunRetentionPolicy",
    "RunStart",
    "RunStatus",
    "RunSummary",
    "Selection",
    "StackFrame",
    "SubtestResult",
    "TestCell",
    "TestClassification",
    "TestDetail",
    "TestLines",
    "TestRecord",
    "TestResult",
    "TestsFor",
    "derive_outcome",
]

RunId = NewType("RunId", int)
"""Identifies one run (one project in one invocation)."""

DEFAULT_HISTORY_WINDOW = 10
"""The default window: a verdict judges the newest 10 executed outcomes per (project, node id)
(seed 000); ``FlakyPolicy.window`` changes it, up to ``HISTORY_DEPTH``."""

HISTORY_DEPTH = 50
"""History keeps the newest 50 executed outcomes per (project, node id), so a configured
window (``FlakyPolicy.window``) may reach back that far."""

MAX_MESSAGE_CHARS = 16_384
"""Longest stored exception message (characters); longer ones are cut and marked truncated."""

MAX_TEXT_CHARS = 65_536
"""Longest stored full error text (the long representation), in characters."""

MAX_CAPTURE_CHARS = 65_536
"""Longest stored captured output per stream (stdout, stderr, log), in characters."""

MAX_FRAMES = 100
"""Most stack frames stored per error; deeper stacks keep the innermost ``MAX_FRAMES``."""

MAX_CHANGED_FILES = 1_000
"""Most changed paths stored per run (``Environment.git_changed_files``); a longer list keeps
its first ``MAX_CHANGED_FILES`` and is marked truncated, so a huge dirty tree (a vendored
folder, a build output nobody ignored) costs a run at most about 100 kB."""

MAX_FINGERPRINT_CHARS = 128
"""Longest code fingerprint (``TestResult.fingerprint``), in hex digits: a 512-bit digest."""

MAX_CELL_RUNS = 1_000
"""The most runs one ``DataReader.run_cells`` call may read (as a page limit)."""

MAX_SESSION_ID_CHARS = 256
"""Longest agent session id a run may name (``RunStart.session_id``), in characters: the
longest session id of ``runstore.services.sessions`` (``MAX_ID_CHARS``)."""


class RunStatus(StrEnum):
    """Where a run stands. ``running`` until finished; the rest are final."""

    RUNNING = "running"
    PASSED = "passed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    ABORTED = "aborted"


class Outcome(StrEnum):
    """The outcome of one test item (pytest's names)."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    XFAILED = "xfailed"
    XPASSED = "xpassed"
    ERROR = "error"


FAILING_OUTCOMES = frozenset({Outcome.FAILED, Outcome.ERROR})


class AttemptSource(StrEnum):
    """Where an earlier attempt of an item came from: ``rerun`` when another plugin ran the
    item again (pytest-rerunfailures reruns a failing item; attempts stored before sources
    were kept are reruns too), ``repeat`` when runstore ran it again itself
    (``--runstore-repeat``, early flake detection), whatever the earlier outcome."""

    RERUN = "rerun"
    REPEAT = "repeat"


class Phase(StrEnum):
    """The phase a result or an error belongs to; ``collect`` is for collection errors."""

    COLLECT = "collect"
    SETUP = "setup"
    CALL = "call"
    TEARDOWN = "teardown"


class Classification(StrEnum):
    """How a test's outcome in a run relates to its history window: the verdict of
    :meth:`DataReader.classify`, always with its ``Evidence`` (the "because").

    The *window* of an item of run ``r`` is its outcome in ``r`` when it executed, then its
    previous entries: the newest ``window - 1`` history entries of runs with a lower id than
    ``r`` (or whose run was pruned), newest first; ``window`` executed outcomes at most
    (``FlakyPolicy.window``, ``DEFAULT_HISTORY_WINDOW`` by default, at most
    ``HISTORY_DEPTH``). So a finished run and a running one are judged alike, and a later run
    never changes an earlier run's verdict beyond what history trimming removed.

    The ``FlakyPolicy`` sets the thresholds: the flaky rules enabled (``evidence``), the
    evidence runs a rule comparing runs needs (``min_runs``), the flip rate oscillation needs
    (``flip_rate``), and the outage guard: the entries of a run where most tests failed
    (``outage_share``, ``outage_min_tests``) stay in the window but are never flaky evidence.
    A window whose flaky rules do not match is judged by the item now, as below.

    *Flaky* means evidence that the outcome changed while the code did not. The rules, in
    this order of precedence (the first that matches wins; evidence anywhere in the window
    counts):

    1. ``flaky`` because ``passed_on_rerun``: an entry passed (or xpassed) after failed
       rerun attempts inside its run (Develocity's and Trunk's pass-on-retry rule);
    1a. ``flaky`` because ``flipped_in_run``: a failing entry whose run also passed it in an
       earlier attempt (runstore's repeats: ``--runstore-repeat``, early flake detection;
       Datadog's rule that a new test with a failing and a passing attempt is flaky);
    1b. ``flaky`` because ``same_code``: the window holds a failing and a passing entry with
       one non-null code fingerprint (``TestResult.fingerprint``: the test ran the same
       code, with or without git, on a clean or dirty tree; a local form of Develocity's
       "same inputs" rule). Entries without a fingerprint never count;
    2. ``flaky`` because ``same_commit``: the window holds a failing and a passing entry of
       runs on one git commit, each with a clean tree (``git_dirty`` False; BuildPulse's
       same-tree rule). Runs without a commit, or with a dirty or unknown tree, never count;
    3. ``flaky`` because ``oscillation``: at least two separate failing streaks in the window
       (``F..P..F``; Allure's history rule);
    4. failing now, no earlier failure in the window: ``new_failure`` (``first_failure``);
    5. failing now, one failing streak reaching back from now: ``persistent_failure``
       (``failing_streak``: since run X, N runs in a row);
    6. passing now and failing in the run before: ``recovered`` (``fixed``);
    7. passing now otherwise: ``stable`` (``no_failure``);
    8. not executed in this run (skipped, xfailed): ``stable`` (``not_executed``).

    A clean break is ``new_failure`` then ``persistent_failure``; a clean fix is
    ``recovered``; neither is flaky. The table (``CLASSIFICATION_TABLE`` holds it as
    markdown), window newest first, ``F`` failing, ``P`` passing:

    =====================================================  ==================  ===============
    window (newest first)                                  verdict             because
    =====================================================  ==================  ===============
    ``F``                                                  new_failure         first_failure
    ``F P P``                                              new_failure         first_failure
    ``F F P``                                              persistent_failure  failing_streak
    ``P F F``                                              recovered           fixed
    ``P F P`` (one failing streak: broken, then fixed)     recovered           fixed
    ``P P F`` (fixed in an earlier run)                    stable              no_failure
    ``P F P F`` (two failing streaks)                      flaky               oscillation
    ``F P F`` (two failing streaks)                        flaky               oscillation
    ``P P F P F`` (older evidence still in the window)     flaky               oscillation
    ``P`` after a failed rerun attempt in the same run     flaky               passed_on_rerun
    ``P P``, the older ``P`` after a failed rerun attempt  flaky               passed_on_rerun
    ``F`` after a passing repeat in the same run           flaky               flipped_in_run
    ``F`` and ``P`` with one code fingerprint              flaky               same_code
    ``F`` and ``P`` on one commit with a clean tree        flaky               same_commit
    ``F P`` on one commit with a dirty or unknown tree     new_failure         first_failure
    ``F P F``, the older ``F`` in an outage run            new_failure         first_failure
    ``P F P F`` with ``window = 3``                        recovered           fixed
    ``F P P P F`` with ``flip_rate = 0.6``                 new_failure         first_failure
    ``P P P``                                              stable              no_failure
    skipped or xfailed in this run                         stable              not_executed
    =====================================================  ==================  ===============
    """

    NEW_FAILURE = "new_failure"
    PERSISTENT_FAILURE = "persistent_failure"
    FLAKY = "flaky"
    RECOVERED = "recovered"
    STABLE = "stable"


CLASSIFICATION_TABLE = """\
| window (newest first) | verdict | because |
| --- | --- | --- |
| `F` | new_failure | first_failure |
| `F P P` | new_failure | first_failure |
| `F F P` | persistent_failure | failing_streak (since run X, 2 in a row) |
| `P F F` | recovered | fixed |
| `P F P` | recovered | fixed (one failing streak: a clean break and fix, not flaky) |
| `P P F` | stable | no_failure (fixed in an earlier run) |
| `P F P F` | flaky | oscillation (two failing streaks) |
| `F P F` | flaky | oscillation (two failing streaks) |
| `P P F P F` | flaky | oscillation (evidence anywhere in the window counts) |
| `P` after a failed rerun attempt in the same run | flaky | passed_on_rerun |
| `P P`, the older `P` after a failed rerun attempt | flaky | passed_on_rerun |
| `F` after a passing repeat in the same run | flaky | flipped_in_run |
| `F` and `P` with one code fingerprint (no git needed, dirty tree fine) | flaky | same_code |
| `F` and `P` on one commit with a clean tree | flaky | same_commit |
| `F P` on one commit with a dirty or unknown tree | new_failure | first_failure |
| `F P F`, the older `F` in a run where most tests failed | new_failure | first_failure (outage) |
| `P F P F` with `window = 3` configured | recovered | fixed (the window is `P F P`) |
| `F P P P F` with `flip_rate = 0.6` configured | new_failure | first_failure (2 flips in 4) |
| `P P P` | stable | no_failure |
| skipped or xfailed in this run | stable | not_executed |

Precedence: passed_on_rerun, then flipped_in_run, then same_code, then same_commit, then
oscillation, then the verdicts that are not flaky. The window is the newest 10 executed
outcomes (`DEFAULT_HISTORY_WINDOW`; `FlakyPolicy.window` changes it), the run's own first,
then runs with a lower id. An outage run (at least 10 executed tests, more than half of
them failing, by default) stays in the window but is never flaky evidence. Each run of a
row ran changed code (a code fingerprint of its own, as after an edit) unless the row says
one code fingerprint: the same flip on unchanged code is same_code.
"""
"""The rules of ``Classification`` as a markdown table (window newest first)."""


class EvidenceRule(StrEnum):
    """Which rule decided a verdict (the "because" of a ``Classification``).

    Flaky rules, in order of precedence: ``passed_on_rerun`` (failed, then passed on a rerun
    inside one run: Develocity's and Trunk's pass-on-retry rule), ``flipped_in_run`` (passed,
    then failed in runstore's repeats inside one run), ``same_code`` (passed and failed
    with one code fingerprint, with or without git), ``same_commit`` (passed and
    failed on one git commit with a clean tree: BuildPulse's rule), ``oscillation`` (two or
    more separate failing streaks in the window, ``F..P..F``: Allure's history rule).
    Non-flaky rules: ``first_failure`` (``new_failure``), ``failing_streak``
    (``persistent_failure``), ``fixed`` (``recovered``), ``no_failure`` and ``not_executed``
    (``stable``). ``FlakyPolicy.evidence`` names the flaky rules that may fire
    (``FLAKY_RULES``, all of them, by default).
    """

    PASSED_ON_RERUN = "passed_on_rerun"
    FLIPPED_IN_RUN = "flipped_in_run"
    SAME_CODE = "same_code"
    SAME_COMMIT = "same_commit"
    OSCILLATION = "oscillation"
    FIRST_FAILURE = "first_failure"
    FAILING_STREAK = "failing_streak"
    FIXED = "fixed"
    NO_FAILURE = "no_failure"
    NOT_EXECUTED = "not_executed"


@attrs.frozen
class Evidence:
    """Why a verdict was reached: the ``rule`` that applied, the runs it rests on (ascending
    ids; empty when the rule rests on no run, e.g. ``not_executed``) and one human line."""

    rule: EvidenceRule
    run_ids: tuple[RunId, ...] = ()
    summary: str = ""


FLAKY_RULES: tuple[EvidenceRule, ...] = (
    EvidenceRule.PASSED_ON_RERUN,
    EvidenceRule.FLIPPED_IN_RUN,
    EvidenceRule.SAME_CODE,
    EvidenceRule.SAME_COMMIT,
    EvidenceRule.OSCILLATION,
)
"""The flaky rules in their order of precedence (the first that matches wins)."""


@attrs.frozen
class FlakyPolicy:
    """The thresholds of the flaky verdict (``Classification``); the defaults give the verdicts
    of the table exactly. ``[tool.runstore.flaky]`` in ``pyproject.toml`` sets them for the
    plugin and the command line (``runstore._config``).

    - ``window``: executed entries judged, the item now first (``1..HISTORY_DEPTH``).
    - ``min_runs``: the least evidence entries (the window without outage entries) before a
      rule that compares runs (``same_code``, ``same_commit``, ``oscillation``) may fire
      (``1..window``; Trunk asks for 10 runs per test before it calls one flaky). The rules
      inside one run (``passed_on_rerun``, ``flipped_in_run``) need no history.
    - ``flip_rate``: ``oscillation`` also needs ``flips / (entries - 1) >= flip_rate`` over
      the evidence entries (``0.0..1.0``; 0 adds nothing to the two failing streaks).
    - ``evidence``: the enabled flaky rules (a subset of ``FLAKY_RULES``); a rule left out
      never fires, and the verdict falls to the rules that are not flaky.
    - ``outage_share`` / ``outage_min_tests``: a run with at least ``outage_min_tests``
      executed items of which more than ``outage_share`` (a fraction, ``0.0..1.0``) failed
      is an outage: its entries stay in the window but never count as flaky evidence. This
      is Trunk's Infrastructure Failure Protection, which excludes an upload whose share of
      failing tests exceeds a threshold
      (https://docs.trunk.io/flaky-tests/detection/infrastructure-failure-protection); the
      defaults (more than half failing, of at least 10) leave small runs alone.

    Readers check a policy (``InvalidInput`` naming ``policy.<field>``) before anything else.
    """

    window: int = DEFAULT_HISTORY_WINDOW
    min_runs: int = 1
    flip_rate: float = 0.0
    evidence: frozenset[EvidenceRule] = frozenset(FLAKY_RULES)
    outage_share: float = 0.5
    outage_min_tests: int = 10


DEFAULT_FLAKY_POLICY = FlakyPolicy()
"""The policy that gives the verdicts of ``CLASSIFICATION_TABLE``."""


# -- inputs -----------------------------------------------------------------------------------


CHANGED_FILE_STATUS_CODES = frozenset(" MTADRCU?!")
"""The letters of a porcelain v1 status code (``git status`` documents each one)."""


@attrs.frozen
class ChangedFile:
    """One path ``git status --porcelain`` listed when a run started.

    ``path`` is relative to the repository root, ``/``-separated, as git prints it with
    ``-z`` (not quoted); an untracked folder is one entry ending in ``/`` (``-unormal``).
    ``status`` is the two-letter porcelain v1 code ``XY``: ``X`` the index, ``Y`` the work
    tree (``" M"`` changed, not staged; ``"M "`` staged; ``"A "`` added; ``" D"`` deleted;
    ``"??"`` untracked; ``"UU"`` unmerged; each letter one of
    ``CHANGED_FILE_STATUS_CODES``). An identifier: no NUL, no lone surrogate, not empty.
    """

    path: str
    status: str


@attrs.frozen
class Environment:
    """Where a run ran. Versions are as the tools print them; ``command_line`` is argv.

    ``git_commit`` / ``git_branch`` name the checked-out commit and branch, ``git_dirty``
    whether the work tree had uncommitted changes; each is None outside a git repository or
    when git is unavailable.

    ``git_changed_files`` are the paths the same ``git status`` call listed (``ChangedFile``,
    in git's order; ``()`` for a clean tree, None when unknown, as for ``git_dirty``). At most
    ``MAX_CHANGED_FILES`` are stored; ``git_changed_files_truncated`` says that more were
    given (or, from the recorder, that git listed more) and only the first ones were kept.
    """

    python_version: str = ""
    pytest_version: str = ""
    platform: str = ""
    git_commit: str | None = None
    git_branch: str | None = None
    command_line: tuple[str, ...] = ()
    host: str = ""
    pid: int | None = None
    git_dirty: bool | None = None
    git_changed_files: tuple[ChangedFile, ...] | None = None
    git_changed_files_truncated: bool = False


@attrs.frozen
class Selection:
    """Which tests a run was asked to run, as given on pytest's command line.

    ``args`` are the positional path / node-id arguments as given; ``keyword`` is ``-k``,
    ``markexpr`` is ``-m``; ``last_failed`` / ``failed_first`` are ``--lf`` / ``--ff``;
    ``maxfail`` is ``--maxfail`` (``-x`` is 1, 0 is no limit); ``deselected`` is pytest's
    deselected count and ``collected`` the number of items collected (None when unknown).
    """

    args: tuple[str, ...] = ()
    keyword: str | None = None
    markexpr: str | None = None
    last_failed: bool = False
    failed_first: bool = False
    maxfail: int = 0
    deselected: int = 0
    collected: int | None = None

    @property
    def is_partial(self) -> bool:
        """Whether the run may have left tests out: any narrowing argument, ``-k``, ``-m``,
        ``--lf``, a deselected item, or a ``maxfail`` limit (whether it stopped the run early
        is not knowable from the selection, so any limit counts)."""
        return bool(
            self.args
            or self.keyword
            or self.markexpr
            or self.last_failed
            or self.deselected > 0
            or self.maxfail > 0
        )


@attrs.frozen
class RunStart:
    """What ``begin_run`` needs: the project, the invocation it belongs to, when it started.

    ``started_at`` must be timezone-aware (a naive datetime is ``InvalidInput``).
    ``invocation_id`` is shared by every project run of one invocation. ``selection`` is
    what the command line asked for, as far as it is known at the start (``record_selection``
    replaces it once pytest has collected and deselected).

    ``session_id`` names the agent session the run was made for (``RUNSTORE_SESSION_ID``;
    ``DataReader.list_runs(session_id=...)`` lists a session's runs): None for none, else 1
    to ``MAX_SESSION_ID_CHARS`` characters without control characters (Unicode category
    ``Cc``: NUL, tab, newline, escape, DEL, ...) or lone surrogates, kept verbatim.
    """

    project: str
    invocation_id: str
    started_at: datetime
    environment: Environment = Environment()
    selection: Selection = Selection()
    session_id: str | None = None


@attrs.frozen
class StackFrame:
    """One frame of a traceback: ``path`` and 1-based ``line``, ``function`` name, and whether
    the frame is in the project's own code (not the standard library or site-packages)."""

    path: str
    line: int | None
    function: str
    is_project: bool


@attrs.frozen
class ErrorInfo:
    """An error as the runner reported it.

    ``message`` is the exception's message, ``text`` the full report text; both are stored
    bounded (``MAX_MESSAGE_CHARS``, ``MAX_TEXT_CHARS``) with a truncated flag. ``frames``
    are outermost first (bounded by ``MAX_FRAMES``); ``cause`` is the exception this one was
    raised from (``__cause__`` or ``__context__``), forming the cause chain.
    """

    phase: Phase
    exception_type: str
    message: str
    text: str = ""
    frames: tuple[StackFrame, ...] = ()
    cause: ErrorInfo | None = None


@attrs.frozen
class PhaseResult:
    """One phase of one item: its outcome (``passed failed skipped xfailed xpassed``) and
    duration (ms, finite and >= 0)."""

    phase: Phase
    outcome: Outcome
    duration_ms: float
    skip_reason: str | None = None


@attrs.frozen
class SubtestResult:
    """One subtest of an item (pytest 9 ``subtests`` / unittest ``subTest``): its description,
    outcome, duration (ms) and error when it failed."""

    description: str
    outcome: Outcome
    duration_ms: float
    error: ErrorInfo | None = None


@attrs.frozen
class TestResult:
    """Everything recorded about one test item in one run.

    ``nodeid`` is stored verbatim. ``module_path`` is the file path relative to the rootdir,
    ``name`` the item name without parameters (``TestX::test_y``), ``parametrize_id`` the
    text inside the brackets (``None`` when unparametrized), ``line`` 1-based. The outcome is
    derived from ``phases`` and the subtests' outcomes by :func:`derive_outcome`; a failing
    item without errors of its own is stored with the first failing subtest's error as its
    error (its message and frames are what ``failures`` shows). ``attempts`` are earlier
    rerun attempts
    of this item (oldest first, each itself a ``TestResult`` without attempts). Captured
    output is bounded by ``MAX_CAPTURE_CHARS`` per stream with a truncated flag.
    ``fingerprint`` is the code fingerprint of the item (1 to ``MAX_FINGERPRINT_CHARS``
    lowercase hex digits; None when unknown): two executions with one fingerprint ran the
    same code (the recorder's is defined in ``runstore.recorder._fingerprint``); an attempt's
    own fingerprint is not stored.
    """

    __test__ = False  # not a pytest test class

    nodeid: str
    module_path: str
    name: str
    phases: tuple[PhaseResult, ...]
    parametrize_id: str | None = None
    line: int | None = None
    markers: tuple[str, ...] = ()
    errors: tuple[ErrorInfo, ...] = ()
    stdout: str = ""
    stderr: str = ""
    log: str = ""
    attempts: tuple[TestResult, ...] = ()
    subtests: tuple[SubtestResult, ...] = ()
    fingerprint: str | None = None
    source: AttemptSource = AttemptSource.RERUN
    """Of an attempt (in another result's ``attempts``): where it came from. Not stored for
    the item itself."""

    @property
    def outcome(self) -> Outcome:
        """The item's outcome, by the module's documented precedence (subtests included)."""
        return derive_outcome(self.phases, (s.outcome for s in self.subtests))

    @property
    def duration_ms(self) -> float:
        """Total duration of the phases (ms)."""
        return sum(p.duration_ms for p in self.phases)


@attrs.frozen
class CollectionError:
    """A module (or other collector) that failed to collect: its node id and the error."""

    nodeid: str
    module_path: str
    error: ErrorInfo


@attrs.frozen
class FileCoverage:
    """Coverage of one file in one run.

    Counts are of statements and branches as coverage.py reports them; ``missing_lines``
    are 1-based line numbers never executed. Percentages are derived, never stored as input.
    """

    path: str
    statements: int
    missing_statements: int
    branches: int = 0
    partial_branches: int = 0
    missing_branches: int = 0
    missing_lines: tuple[int, ...] = ()

    @property
    def percent_covered(self) -> float:
        """Covered share of statements and branches, 0-100 (coverage.py's formula)."""
        total = self.statements + self.branches
        if total == 0:
            return 100.0
        covered = (self.statements - self.missing_statements) + (
            self.branches - self.missing_branches
        )
        return 100.0 * covered / total


@attrs.frozen
class RunRetentionPolicy:
    """Keep the newest ``keep_runs`` runs of each project (``keep_runs >= 1``); with
    ``max_age_days`` (> 0) also drop runs that started more than that many days ago."""

    keep_runs: int
    max_age_days: float | None = None


# -- outputs ----------------------------------------------------------------------------------


@attrs.frozen
class PruneRunsResult:
    """What ``prune_runs`` removed: runs deleted (their cascaded rows are not counted) and
    ``files`` rows garbage-collected because nothing referenced them any more."""

    pruned_runs: int
    pruned_files: int


@attrs.frozen
class RunSummary:
    """One run with counts computed from its stored test rows (never taken from input).

    ``counts`` maps every ``Outcome`` value to a number of items; ``collection_errors`` counts
    collectors that failed. ``finished_at_ms`` is None while running. ``selection`` is what
    the run was asked to run (``RunStart.selection``, or the latest ``record_selection``).
    ``subtests`` maps ``passed``, ``failed`` and ``skipped`` to the number of stored subtests
    of the run's items, as pytest's summary line counts them (``passed`` and ``xpassed``
    count as passed, ``failed`` and ``error`` as failed, ``skipped`` and ``xfailed`` as
    skipped). ``session_id`` is ``RunStart.session_id``.
    """

    id: RunId
    project: str
    invocation_id: str
    status: RunStatus
    started_at_ms: int
    finished_at_ms: int | None
    counts: dict[str, int]
    collection_errors: int
    environment: Environment
    selection: Selection = Selection()
    subtests: dict[str, int] = attrs.Factory(
        lambda: {"passed": 0, "failed": 0, "skipped": 0}
    )
    session_id: str | None = None

    @property
    def total(self) -> int:
        """Number of recorded items."""
        return sum(self.counts.values())


@attrs.frozen
class TestRecord:
    """A stored test item of one run, without its payload (errors, output).

    ``attempts`` counts the *earlier* rerun attempts stored with the item, not counting the
    final one: 0 for an item that ran once, 1 for one that passed on its first rerun.
    ``fingerprint`` is the item's code fingerprint (``TestResult.fingerprint``; None when
    unknown).
    """

    __test__ = False

    run_id: RunId
    nodeid: str
    module_path: str
    name: str
    parametrize_id: str | None
    line: int | None
    markers: tuple[str, ...]
    outcome: Outcome
    duration_ms: float
    phases: tuple[PhaseResult, ...]
    attempts: int
    skip_reason: str | None = None
    fingerprint: str | None = None
    source: AttemptSource | None = None
    """Where an attempt record (``TestDetail.attempts``) came from; None on an item's own."""


@attrs.frozen
class TestCell:
    """One item of one run in the few fields a history matrix draws
    (``DataReader.run_cells``): its outcome, duration (ms), ``attempts`` (the earlier
    attempts stored with it, as ``TestRecord.attempts``) and, for a failing item
    (``failed``, ``error``), the failure signature of its first error, as
    ``FailureRecord.signature`` has it (``""`` for any other item and for a failing one
    stored without an error)."""

    __test__ = False

    run_id: RunId
    nodeid: str
    outcome: Outcome
    duration_ms: float
    attempts: int
    signature: str = ""


@attrs.frozen
class TestDetail:
    """Everything stored about one item of one run.

    ``test`` is the item's record; ``errors`` every error of its final result in the order
    given (each with its frames and ``cause`` chain); captured output per stream with
    whether storage cut it (``MAX_CAPTURE_CHARS``); ``subtests`` in the order given, each
    with its error; ``attempts`` the earlier rerun attempts, oldest first, each a record of
    the same item with that attempt's phases, outcome and duration (and ``attempts == 0``);
    ``attempt_errors`` the errors of each of those attempts, one tuple per attempt in the
    same order (each error with its frames and ``cause`` chain).
    """

    __test__ = False

    test: TestRecord
    errors: tuple[ErrorInfo, ...]
    stdout: str
    stdout_truncated: bool
    stderr: str
    stderr_truncated: bool
    log: str
    log_truncated: bool
    subtests: tuple[SubtestResult, ...]
    attempts: tuple[TestRecord, ...]
    attempt_errors: tuple[tuple[ErrorInfo, ...], ...] = ()


@attrs.frozen
class FailureRecord:
    """A failing item (or collection error) of one run with its errors.

    ``phase`` is the phase of the first error; ``message`` its (bounded) message;
    ``message_truncated`` / ``text_truncated`` say whether storage cut them. ``signature`` is
    the stable failure-signature hash of the first error (hex).

    ``is_new``: no run of the project with a lower id than this run recorded the signature
    (runs still running count; interrupted and aborted ones, which record no signatures, do
    not). It is decided once, by run start order, and frozen when the run ends: later runs,
    and earlier-started runs that end later, never change it. While the run is running it is
    computed afresh on every call. A failure without an error is never new.

    ``streak`` is how many runs in a row the test has failed, ending at this run (>= 1, runs
    where it did not execute do not break it); ``failing_since`` the first run of the streak
    (None once that run was pruned); ``streak_message`` the first error message of the
    streak (empty when that failure had no error). Both come from the history rows of runs
    with a lower id, which keep the failure message and the streak beyond the history window
    and beyond pruning. A collection error has no history: its streak is 1.
    """

    nodeid: str
    outcome: Outcome
    phase: Phase
    exception_type: str
    message: str
    message_truncated: bool
    text: str
    text_truncated: bool
    frames: tuple[StackFrame, ...]
    causes: tuple[ErrorInfo, ...]
    signature: str
    is_new: bool
    streak: int = 1
    failing_since: RunId | None = None
    streak_message: str = ""


@attrs.frozen
class TestClassification:
    """How one item of a run is classified, the window it was judged on (newest first) and
    the ``Evidence`` that decided it (see ``Classification``)."""

    __test__ = False

    nodeid: str
    outcome: Outcome
    classification: Classification
    window: tuple[Outcome, ...]
    because: Evidence = Evidence(EvidenceRule.NO_FAILURE)


@attrs.frozen
class FlakyTest:
    """A test with flaky evidence in its newest history window (see ``Classification``).

    ``window`` is the newest ``FlakyPolicy.window`` history entries (``DEFAULT_HISTORY_WINDOW``
    by default), newest first;
    ``flips`` counts adjacent changes between failing and passing in it; ``failures`` /
    ``passes`` count its failing / passing entries; ``last_run_id`` is the run of the newest
    entry (None once pruned); ``because`` the flaky rule that applied and its runs.
    """

    nodeid: str
    flips: int
    failures: int
    passes: int
    window: tuple[Outcome, ...]
    last_run_id: RunId | None
    because: Evidence = Evidence(EvidenceRule.OSCILLATION)


@attrs.frozen
class HistoryEntry:
    """One executed outcome of one test. ``run_id`` is None once that run was pruned.

    ``message`` is the first error message when the outcome is failing (None when passing
    or when the failure had no error); ``git_commit`` / ``git_dirty`` are the run's
    (``Environment``); ``rerun_failures`` counts the failing attempts before the final one
    in that run (pytest-rerunfailures' reruns); ``fingerprint`` is the item's code
    fingerprint in that run (``TestResult.fingerprint``). All survive pruning of the run;
    entries recorded before these fields existed have None and 0.
    """

    run_id: RunId | None
    outcome: Outcome
    duration_ms: float
    recorded_at_ms: int
    message: str | None = None
    git_commit: str | None = None
    git_dirty: bool | None = None
    rerun_failures: int = 0
    run_executed: int | None = None
    """Executed items of the entry's run when it finished (None when unknown: an entry
    written before this was kept whose run was already pruned)."""
    run_failing: int | None = None
    """Failing items among them (``FlakyPolicy`` calls a run of many failures an outage)."""
    fingerprint: str | None = None
    earlier_passes: int = 0
    """Passing (passed, xpassed) attempts before the final one in that run: runstore's
    repeats (``AttemptSource.REPEAT``); 0 for entries recorded before it was kept."""


@attrs.frozen
class CoverageReport:
    """The coverage of a run: per-file rows (sorted by path) and totals over them.

    ``source_run_id`` is the run whose rows are shown: the run itself, or a sibling run of the
    same invocation that stored the invocation's coverage (seed 000).
    """

    run_id: RunId
    source_run_id: RunId
    files: tuple[FileCoverage, ...]

    @property
    def percent_covered(self) -> float:
        """Total covered share of statements and branches, 0-100."""
        statements = sum(f.statements for f in self.files)
        branches = sum(f.branches for f in self.files)
        total = statements + branches
        if total == 0:
            return 100.0
        missing = sum(f.missing_statements + f.missing_branches for f in self.files)
        return 100.0 * (total - missing) / total


@attrs.frozen
class CoverageTrendPoint:
    """Total coverage (percent, 0-100) of one run of a project."""

    run_id: RunId
    started_at_ms: int
    percent_covered: float


@attrs.frozen
class RunComparison:
    """How run ``b`` differs from run ``a``, as sorted node ids (see ``DataReader.compare``)."""

    run_a: RunId
    run_b: RunId
    newly_failing: tuple[str, ...]
    fixed: tuple[str, ...]
    added: tuple[str, ...]
    removed: tuple[str, ...]
    not_run: tuple[str, ...] = ()


# -- per-test coverage (coverage.py dynamic contexts) ------------------------------------------

DEFAULT_TESTS_FOR_RUNS = 10
"""``tests_for`` reads the newest 10 runs of a project that recorded per-test coverage."""

MAX_TESTS_FOR_RUNS = 1_000
"""The most runs one ``tests_for`` call may read (``runs`` is 1..1000, as a page limit)."""


@attrs.frozen
class TestLines:
    """The lines of one file that one test executed in a run.

    ``nodeid`` is the test's node id (pytest-cov's dynamic context ``<nodeid>|setup``,
    ``|run`` and ``|teardown`` together); ``path`` the file as the run's ``FileCoverage``
    names it (relative to the rootdir, ``/`` separated, when under it); ``lines`` 1-based line
    numbers, stored sorted and without repeats.
    """

    __test__ = False  # not a pytest test class

    nodeid: str
    path: str
    lines: tuple[int, ...]


@attrs.frozen
class CoveringTest:
    """A test that executed a file: the newest run (``run_id``) of the window in which it
    ran, where it executed the file, and the lines of the file it executed there (sorted,
    1-based)."""

    nodeid: str
    run_id: RunId
    lines: tuple[int, ...]


@attrs.frozen
class TestsFor:
    """The answer of ``DataReader.tests_for``.

    ``runs`` are the runs read (newest first by start, then id): the newest ``runs`` of the
    project with per-test coverage. ``tests`` are the tests that executed ``path`` (and
    ``line`` when given) in them, newest run first, then by node id, at most ``limit``;
    ``has_more`` says that more matched.
    """

    __test__ = False  # not a pytest test class

    project: str
    path: str
    line: int | None
    runs: tuple[RunId, ...]
    tests: tuple[CoveringTest, ...]
    has_more: bool


@attrs.frozen
class FailureSignature:
    """One failure signature of a project across its runs (``DataReader.failure_signatures``).

    ``signature`` is the hash ``FailureRecord.signature`` carries; ``exception_type``,
    ``message`` (normalized: numbers, quoted strings, hex addresses and paths masked) and
    ``frame`` (``path:function`` of the failing frame, ``""`` without frames) are what it
    was made from. ``first_seen_*`` / ``last_seen_*``: the run that first (lowest id) and
    last (latest to finish) recorded it and when those runs finished (epoch ms); a run id is
    None once that run was pruned. ``runs``: the passed or failed runs that recorded it;
    ``tests``: the distinct node ids (items and collection errors) it affected in them;
    ``occurrences``: failing items and collection errors with it, summed over those runs.
    Interrupted and aborted runs record no signatures, and pruning changes none of these
    numbers (signatures outlive runs).
    """

    signature: str
    exception_type: str
    message: str
    frame: str
    first_seen_run_id: RunId | None
    first_seen_at_ms: int
    last_seen_run_id: RunId | None
    last_seen_at_ms: int
    runs: int
    tests: int
    occurrences: int


# -- quarantine and fix checks (runstore.quarantine) ------------------------------------------


@attrs.frozen
class QuarantinedItem:
    """An item of a run that a quarantine entry applied to in that run: its ``nodeid`` and
    the entry's node id or pattern (``entry``, as ``runstore.quarantine`` names it). Both are
    identifiers: not empty, no NUL, no lone surrogate."""

    nodeid: str
    entry: str


@attrs.frozen
class FixCheckResult:
    """What a fix check found (``runstore quarantine check``): the test of ``project`` it
    ran, the run that recorded it (None: none was recorded), how many ``executions`` the
    run had of it (>= 1), how many ``passed`` and ``failed`` (each >= 0, together at most
    ``executions``: skipped ones are neither), and whether the test was ``released`` from
    quarantine, which only a check whose every execution passed may do."""

    project: str
    nodeid: str
    run_id: RunId | None
    executions: int
    passed: int
    failed: int
    released: bool


@attrs.frozen
class FixCheck:
    """A stored fix check: the ``FixCheckResult`` and when it was stored (``checked_at_ms``,
    the store's clock, epoch ms). ``run_id`` becomes None when that run is pruned; the
    evidence stays."""

    result: FixCheckResult
    checked_at_ms: int


DEFAULT_FIX_CHECKS = 20
"""``fix_checks`` answers the newest 20 checks unless asked for another ``limit``."""


DataStoreError: TypeAlias = NotFound | IllegalTransition | InvalidInput | Busy | StorageFailure
"""Every failure a ``DataStore`` method returns."""

DataReaderError: TypeAlias = NotFound | InvalidInput | Busy | StorageFailure
"""Every failure a ``DataReader`` method returns."""


def derive_outcome(
    phases: Sequence[PhaseResult], subtests: Iterable[Outcome] = ()
) -> Outcome:
    """Derive an item's outcome from its phases and its subtests' outcomes by the precedence
    in the module docstring (a failing subtest makes an item ``failed``)."""
    by_phase = {p.phase: p.outcome for p in phases}
    setup = by_phase.get(Phase.SETUP)
    call = by_phase.get(Phase.CALL)
    teardown = by_phase.get(Phase.TEARDOWN)
    if setup in (Outcome.FAILED, Outcome.ERROR):
        return Outcome.ERROR
    if call is None and setup in (Outcome.SKIPPED, Outcome.XFAILED):
        return setup
    if call in (Outcome.FAILED, Outcome.ERROR) or any(
        o in (Outcome.FAILED, Outcome.ERROR) for o in subtests
    ):
        return Outcome.FAILED
    if teardown in (Outcome.FAILED, Outcome.ERROR):
        return Outcome.ERROR
    if call in (Outcome.XFAILED, Outcome.XPASSED, Outcome.SKIPPED):
        return call
    return Outcome.PASSED


# -- services ---------------------------------------------------------------------------------


@runtime_checkable
class DataStore(Protocol):
    """Writes test-run records. Every method is one unit of work: all or nothing."""

    def begin_run(self, start: RunStart) -> Result[RunId, DataStoreError]:
        """Create a ``running`` run for ``start.project`` and return its id.

        Failures: ``InvalidInput`` for an empty project or invocation id, one holding NUL or
        a lone surrogate, a naive ``started_at``, an environment or selection field of the
        wrong type (``git_dirty`` must be a ``bool`` or None; the selection is checked as
        ``record_selection`` checks it), or text that cannot be stored (lone surrogates are
        replaced, never rejected, in free text); for a changed file whose path is empty or
        holds NUL or a lone surrogate, whose status is not two porcelain letters, a path
        given twice, or ``git_changed_files_truncated`` without changed files (more than
        ``MAX_CHANGED_FILES`` are cut, never refused); for a ``session_id`` that is empty,
        longer than ``MAX_SESSION_ID_CHARS`` or holds a control character or a lone
        surrogate; ``Busy``; ``StorageFailure``.
        """
        ...

    def record_results(
        self, run_id: RunId, results: Sequence[TestResult]
    ) -> Result[int, DataStoreError]:
        """Store one batch of item results of a running run; return how many items were stored.

        A node id already stored in this run is replaced by the new result (a rerun of the
        same item); a node id given twice in one batch keeps the later item, and the count
        returned is of distinct node ids. Phases must be in order (setup, call, teardown),
        each at most once. Input is checked before the run is looked at. Failures:
        ``NotFound("run", id)``; ``IllegalTransition("run", id, status, "running")`` when
        the run is no longer ``running``; ``InvalidInput`` (naming the field, e.g.
        ``results[3].phases[0].duration_ms``) for an empty node id, a node id or module path
        holding NUL or a lone surrogate, a non-finite or negative
        duration, an item without phases, a value of the wrong type (nothing of the batch
        is stored); ``Busy``; ``StorageFailure``.
        """
        ...

    def record_collection_errors(
        self, run_id: RunId, errors: Sequence[CollectionError]
    ) -> Result[int, DataStoreError]:
        """Store collection errors of a running run (one per collector node id; a repeat
        replaces the earlier one); return how many were stored. Failures as ``record_results``
        (a node id or module path holding NUL or a lone surrogate is ``InvalidInput``)."""
        ...

    def finish_run(
        self, run_id: RunId, status: RunStatus, finished_at: datetime
    ) -> Result[RunSummary, DataStoreError]:
        """Move a ``running`` run to a final status and return its summary.

        ``passed``/``failed`` runs update the history window of every executed item (then
        trimmed to the newest ``HISTORY_DEPTH`` per test in one statement; each
        entry keeps the first error message, the run's commit and dirty flag, the failed
        rerun attempts, the run's executed and failing item counts and, when failing, its
        streak) and the failure signatures;
        ``interrupted``/``aborted`` runs update neither. Every final status freezes which
        failure signatures are new in the run (``FailureRecord.is_new``).
        Failures: ``NotFound``; ``IllegalTransition(from, to)`` when the run is not
        ``running`` or ``status`` is ``running``; ``InvalidInput`` for a naive datetime;
        ``Busy``; ``StorageFailure``.
        """
        ...

    def record_selection(
        self, run_id: RunId, selection: Selection
    ) -> Result[RunSummary, DataStoreError]:
        """Replace the selection of a ``running`` run (pytest knows its deselected count only
        after collection) and return the run's summary carrying it.

        Text (``args``, ``keyword``, ``markexpr``) is free text: lone surrogates are
        replaced, NUL is kept; each is cut at ``MAX_TEXT_CHARS``. Failures:
        ``NotFound("run", id)``; ``IllegalTransition("run", id, status, "running")`` when
        the run is no longer ``running``; ``InvalidInput`` (naming the field, e.g.
        ``selection.maxfail``) for a value that is not a ``Selection``, a field of the wrong
        type, a negative ``maxfail`` / ``deselected`` / ``collected`` (nothing is written);
        ``Busy``; ``StorageFailure``.
        """
        ...

    def abort_stale_runs(
        self, project: str, *, older_than: datetime
    ) -> Result[tuple[RunId, ...], DataStoreError]:
        """Mark ``aborted`` every ``running`` run of ``project`` last written before ``older_than``.

        Returns the ids it aborted (ascending); an aborted run's ``finished_at_ms`` is its
        last write, and its new failure signatures are frozen as ``finish_run`` freezes them.
        Failures: ``InvalidInput`` (naive datetime), ``Busy``, ``StorageFailure``.
        """
        ...

    def write_coverage(
        self, run_id: RunId, files: Sequence[FileCoverage]
    ) -> Result[int, DataStoreError]:
        """Store per-file coverage of a run (replacing any it had); return the number of files.

        Any run status is accepted. ``missing_lines`` are stored sorted and without repeats.
        Failures: ``NotFound``; ``InvalidInput`` for negative counts, missing greater than
        total, a duplicate path, or a path that is empty or holds NUL or a lone surrogate;
        ``Busy``; ``StorageFailure``.
        """
        ...

    def prune_runs(
        self,
        policy: RunRetentionPolicy,
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> Result[PruneRunsResult, DataStoreError]:
        """Apply a retention policy in one unit of work (seed 000 semantics).

        Keeps the newest ``keep_runs`` runs per project by (start desc, id desc) and, with
        ``max_age_days``, drops older runs; never a ``running`` run. Coverage rows of a doomed
        run move to the lowest surviving run of its invocation unless a survivor already has
        coverage. History rows and failure signatures survive (history with a NULL run).
        Then every ``files`` row nothing references is removed (on every call, also when no
        run was pruned). Running runs count in the ranking but are never removed.

        ``progress(done, total)``, when given, is told how far the prune got, in runs:
        ``total`` is the number of runs the plan removes (the result's ``pruned_runs``),
        ``done`` how many of them are deleted so far (in the unit of work, not yet
        committed). ``done`` never decreases, and the last call, ``(total, total)``, is made
        once the prune has committed, so a returned Success always had one (also when
        ``total`` is 0). A refused policy calls nothing; after a ``Busy`` or
        ``StorageFailure`` the calls made stand but nothing was removed. The result is the
        same with or without ``progress``.
        Failures: ``InvalidInput`` (``keep_runs`` outside ``[1, 2**63 - 1]``,
        ``max_age_days`` not finite or outside ``(0, 1_000_000]``; ``progress`` neither None
        nor callable), ``Busy``, ``StorageFailure``.
        """
        ...


    def plan_prune(self, policy: RunRetentionPolicy) -> Result[PruneRunsResult, DataStoreError]:
        """Say exactly what ``prune_runs(policy)`` would remove now, changing nothing.

        The result equals that of a ``prune_runs(policy)`` called next with the same clock
        and no write between: runs it would delete and ``files`` rows it would collect (after
        moving coverage as ``prune_runs`` does). A read: it takes no write lock.
        Failures: ``InvalidInput`` as ``prune_runs``, ``Busy``, ``StorageFailure``.
        """
        ...


    def write_test_coverage(
        self, run_id: RunId, tests: Sequence[TestLines]
    ) -> Result[int, DataStoreError]:
        """Store which lines of which files each test of a run executed (replacing what the
        run had); return the number of ``(test, file)`` rows stored.

        One row per ``(test, file)``: a ``TestLines`` given twice for one pair is
        ``InvalidInput``. An empty ``tests`` still marks the run as measured per test (its
        ``tests_for`` answers are empty, not ``NotFound``). Any run status is accepted; the
        rows go with the run when it is pruned. Failures: ``NotFound("run", id)``;
        ``InvalidInput`` (naming the field, e.g. ``tests[3].lines[0]``) for a value that is
        not a ``TestLines``, an empty node id or path, one holding NUL or a lone surrogate,
        a line number that is not an ``int`` in ``1..2**53 - 1``, an empty ``lines``, a
        repeated ``(nodeid, path)`` (nothing is written); ``Busy``; ``StorageFailure``.
        """
        ...


    # -- quarantine and fix checks --------------------------------------------------------

    def mark_quarantined(
        self, run_id: RunId, items: Sequence[QuarantinedItem]
    ) -> Result[int, DataStoreError]:
        """Store which items of a running run a quarantine entry applied to (replacing what
        the run had); return how many were stored.

        Each ``nodeid`` must be an item already recorded in the run. Failures:
        ``NotFound("run", id)``; ``NotFound("test", nodeid)`` for a node id the run has no
        item of; ``IllegalTransition("run", id, status, "running")`` when the run has
        ended; ``InvalidInput`` (naming the field, e.g. ``items[2].entry``) for a value that
        is not a ``QuarantinedItem``, an empty node id or entry, one holding NUL or a lone
        surrogate, a node id given twice (nothing is written); ``Busy``; ``StorageFailure``.
        """
        ...

    def record_fix_check(self, result: FixCheckResult) -> Result[FixCheck, DataStoreError]:
        """Store the evidence of one fix check, stamped with the store's clock, and return it.

        Failures: ``NotFound("run", id)`` for a ``run_id`` no run has; ``InvalidInput``
        (naming the field) for a value that is not a ``FixCheckResult``, an empty project or
        node id (or one holding NUL or a lone surrogate), a run of another project,
        ``executions`` below 1, ``passed`` or ``failed`` below 0 or adding up to more than
        ``executions``, ``released`` with an execution that did not pass, counts above
        ``2**53 - 1``; ``Busy``; ``StorageFailure``.
        """
        ...

@runtime_checkable
class DataReader(Protocol):
    """Answers questions about stored test runs. Reads never change anything."""

    def latest_run(self, project: str) -> Result[RunSummary, DataReaderError]:
        """The newest run of ``project`` by (start desc, id desc); ``NotFound("project",
        project)`` when it has none."""
        ...

    def get_run(self, run_id: RunId) -> Result[RunSummary, DataReaderError]:
        """One run with its counts; ``NotFound("run", id)`` when missing."""
        ...

    def list_runs(
        self,
        project: str | None,
        *,
        status: RunStatus | None = None,
        limit: int = 20,
        cursor: str | None = None,
        session_id: str | None = None,
    ) -> Result[Page[RunSummary], DataReaderError]:
        """Runs of ``project`` (every project when None), only those in ``status`` when
        given and only those of agent session ``session_id`` when given (a lookup: an id no
        run names finds nothing), newest first, per the pagination contract of
        ``runstore.services.pagination``.

        Failures: ``InvalidInput`` for a bad limit, a foreign cursor, a ``status`` that is
        not a ``RunStatus`` or a ``session_id`` that is not text; ``Busy``;
        ``StorageFailure``."""
        ...

    def projects(self) -> Result[tuple[str, ...], DataReaderError]:
        """Every project with at least one run, sorted."""
        ...

    def tests(
        self, run_id: RunId, *, outcomes: frozenset[Outcome] | None = None
    ) -> Result[tuple[TestRecord, ...], DataReaderError]:
        """Items of a run (only ``outcomes`` when given), sorted by node id; ``NotFound``."""
        ...

    def test_detail(self, run_id: RunId, nodeid: str) -> Result[TestDetail, DataReaderError]:
        """Everything stored about item ``nodeid`` of run ``run_id`` (see ``TestDetail``).

        Failures: ``NotFound("run", id)`` when the run is missing, ``NotFound("test",
        nodeid)`` when the run has no such item; ``InvalidInput`` for a run id or node id of
        the wrong type; ``Busy``; ``StorageFailure``."""
        ...

    def failures(self, run_id: RunId) -> Result[tuple[FailureRecord, ...], DataReaderError]:
        """Failing items and collection errors of a run with errors, frames, signatures,
        ``is_new`` and the failing streak (see ``FailureRecord``), sorted by node id (a
        collection error first on a tie); ``NotFound`` when the run is missing. ``causes``
        are the first error's cause chain, nearest first, each without a cause of its own; a
        failing item stored without an error has empty texts, the failing phase and
        signature ``""``."""
        ...

    def classify(
        self, run_id: RunId, *, policy: FlakyPolicy = DEFAULT_FLAKY_POLICY
    ) -> Result[tuple[TestClassification, ...], DataReaderError]:
        """Classify every item of a run against its history window under ``policy``, with
        the evidence of each verdict (see ``Classification`` and ``FlakyPolicy``), sorted by
        node id. Failures: ``InvalidInput`` naming ``policy.<field>`` for a policy out of
        its ranges (checked first); ``NotFound`` when the run is missing."""
        ...

    def flaky_tests(
        self, project: str, *, policy: FlakyPolicy = DEFAULT_FLAKY_POLICY
    ) -> Result[tuple[FlakyTest, ...], DataReaderError]:
        """Tests of ``project`` with flaky evidence in their newest history window
        (``policy.window`` entries), most flips first, then by node id.

        The window is judged as ``Classification`` judges the newest entry under ``policy``:
        listed are the tests it calls ``flaky`` (passed on a rerun in some run of the window,
        passed and failed on one clean commit, or two separate failing streaks, ...). A clean
        break (``F F P``) or a clean fix (``P F F``, ``P F P``) is not listed. Failures:
        ``InvalidInput`` for a bad project or a policy out of its ranges."""
        ...

    def history(
        self, project: str, nodeid: str
    ) -> Result[tuple[HistoryEntry, ...], DataReaderError]:
        """The stored history of one test (its newest ``HISTORY_DEPTH`` executed outcomes),
        newest first; ``NotFound("test", nodeid)`` when the project has never recorded it."""
        ...

    def find_tests(
        self, project: str, fragment: str, *, limit: int = 20
    ) -> Result[tuple[str, ...], DataReaderError]:
        """Node ids of ``project`` containing ``fragment`` (exact match first), sorted.

        Searched among node ids with a stored item, a history entry or per-test coverage
        (``write_test_coverage``) in ``project``; the fragment is plain text (no
        wildcards)."""
        ...

    def slowest(
        self, run_id: RunId, *, limit: int = 10
    ) -> Result[tuple[TestRecord, ...], DataReaderError]:
        """The ``limit`` slowest items of a run, slowest first (ties by node id)."""
        ...

    def coverage(self, run_id: RunId) -> Result[CoverageReport, DataReaderError]:
        """Coverage of a run, read from a sibling run of its invocation when that one holds
        the invocation's rows; ``NotFound("coverage", id)`` when no run of it has any."""
        ...

    def coverage_trend(
        self, project: str, *, limit: int = 50
    ) -> Result[tuple[CoverageTrendPoint, ...], DataReaderError]:
        """Total coverage of the newest ``limit`` runs of ``project`` that have coverage
        (their own or a sibling's, as ``coverage`` reads it), oldest first."""
        ...

    def compare(self, run_a: RunId, run_b: RunId) -> Result[RunComparison, DataReaderError]:
        """What changed from ``run_a`` to ``run_b``; ``NotFound`` when either is missing.

        ``newly_failing``: in both, failing in ``b`` but not in ``a``; ``fixed``: in both,
        failing in ``a`` and passed or xpassed in ``b``; ``added``: only in ``b``. Items
        only in ``a`` are ``not_run`` when ``b`` may have left tests out (its selection
        ``is_partial``, ``b`` recorded fewer items than ``selection.collected``, or ``b`` is
        ``running``, ``interrupted`` or ``aborted``) and ``removed`` otherwise."""
        ...


    def tests_for(
        self,
        project: str,
        path: str,
        *,
        line: int | None = None,
        runs: int = DEFAULT_TESTS_FOR_RUNS,
        limit: int = 100,
    ) -> Result[TestsFor, DataReaderError]:
        """The tests that executed file ``path`` (line ``line`` when given) in the newest
        ``runs`` runs of ``project`` that recorded per-test coverage (see ``TestsFor``).

        Each test is judged by the newest of those runs in which it ran (it was recorded
        there as an item that was not skipped, or executed some measured file), among the
        tests that executed the file in one of them: it is listed when it executed the file
        in that run and, with a ``line``, when that run's lines hold it. An older run that
        hit the file or line does not count once a newer one shows the test no longer does;
        it counts for a test the newer runs did not run. ``path`` is matched
        exactly as stored. Failures: ``NotFound("test_coverage", project)`` when no run of
        the project recorded per-test coverage; ``InvalidInput`` for a project or path that
        is not ``str`` or holds a lone surrogate, an empty path, a ``line`` that is not an
        ``int >= 1`` or None, ``runs`` or ``limit`` outside ``1..1000``; ``Busy``;
        ``StorageFailure``.
        """
        ...

    # -- search (runstore.services.search) ----------------------------------------------------

    def search_failures(
        self,
        text: str,
        *,
        project: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> Result[Page[FailureHit], DataReaderError]:
        """The failures (of ``project``, of every project when None) whose text holds every
        term of ``text``, best first, then newest run, by the rules and the order of
        ``runstore.services.search``; paged per ``runstore.services.pagination``.

        Failures: ``InvalidInput("text", ...)`` for query text that is not ``str``, too long,
        holding a lone surrogate, with no term or too many terms; ``InvalidInput`` for a
        project that is not ``str`` or None, a bad limit or a foreign cursor; ``Busy``;
        ``StorageFailure``.
        """
        ...

    def search_tests(
        self,
        text: str,
        *,
        project: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> Result[Page[TestHit], DataReaderError]:
        """The tests (of ``project``, of every project when None) whose node id holds every
        term of ``text``, best first, by the rules of ``runstore.services.search``; paged.
        Failures as ``search_failures``."""
        ...

    def classify_unstable(
        self, run_id: RunId, *, policy: FlakyPolicy = DEFAULT_FLAKY_POLICY
    ) -> Result[tuple[TestClassification, ...], DataReaderError]:
        """The items of a run whose verdict under ``policy`` is not ``stable``
        (``new_failure``, ``persistent_failure``, ``flaky``, ``recovered``): exactly the
        records ``classify(run_id, policy=policy)`` returns for them, in its order (by node
        id).

        Only items that fail now, had failed rerun attempts now, or have a failing or
        rerun-failed entry in their history can be anything but stable, so a layer may judge
        those alone: the cost follows the unsettled items, not the size of the run (triage
        asks this of runs of thousands of items). Failures as ``classify``: ``NotFound``
        when the run is missing; ``InvalidInput`` for a run id of the wrong type; ``Busy``;
        ``StorageFailure``."""
        ...

    def failure_signatures(
        self, project: str, *, limit: int = 20, cursor: str | None = None
    ) -> Result[Page[FailureSignature], DataReaderError]:
        """The failure signatures of ``project``, newest last seen first (the order in which
        finished runs recorded them; a run records its signatures in order of first
        appearance among its failing items), per the pagination contract of
        ``runstore.services.pagination``; an empty page for a project without any.

        Failures: ``InvalidInput`` for a project that is not a lookup name, a bad limit or a
        foreign cursor; ``Busy``; ``StorageFailure``."""
        ...


    def quarantined(self, run_id: RunId) -> Result[tuple[QuarantinedItem, ...], DataReaderError]:
        """The items of a run a quarantine entry applied to (``mark_quarantined``), by node
        id. Failures: ``NotFound("run", id)``; ``InvalidInput`` for a run id of the wrong
        type; ``Busy``; ``StorageFailure``."""
        ...

    def fix_checks(
        self, project: str, nodeid: str | None = None, *, limit: int = DEFAULT_FIX_CHECKS
    ) -> Result[tuple[FixCheck, ...], DataReaderError]:
        """The newest ``limit`` fix checks of ``project`` (of test ``nodeid`` only, when
        given), newest first (in the order they were stored). A project or test without
        any answers ``()``. Failures: ``InvalidInput`` for a project or node id that is not
        ``str`` or holds a lone surrogate, a bad ``limit`` (the pagination rule); ``Busy``;
        ``StorageFailure``."""
        ...

    def known_tests(
        self, project: str, nodeids: Iterable[str]
    ) -> Result[frozenset[str], DataReaderError]:
        """Those of ``nodeids`` that ``project`` has a record of (a stored item, a history
        entry or per-test coverage: the node ids ``find_tests`` searches), in one read;
        early flake detection calls the others new. A node id no write could store (a lone
        surrogate, NUL) is simply not known; an unknown project knows none. Failures:
        ``InvalidInput`` for a project that is not a valid name, or ``nodeids`` that is a
        ``str`` or holds something that is not one (field ``nodeids[i]``); ``Busy``;
        ``StorageFailure``."""
        ...

    def run_cells(
        self,
        run_ids: Iterable[RunId],
        *,
        nodeids: Iterable[str] | None = None,
        outcomes: frozenset[Outcome] | None = None,
    ) -> Result[tuple[TestCell, ...], DataReaderError]:
        """The items of the runs ``run_ids`` (only those of ``nodeids`` when given, only
        those with ``outcomes`` when given) as compact cells (``TestCell``: what a history
        matrix of tests by runs draws, without phases, markers or payload), in one read, by
        run id, then node id. Repeated run ids and node ids count once; an id no stored run
        has gives no cell (a run pruned since it was listed is simply absent), nor does a
        node id no write could store (NUL, a lone surrogate). Each cell equals the run's
        ``tests`` record in its fields, and a failing cell's signature its ``failures``
        record's.

        Failures: ``InvalidInput`` for ``run_ids`` that is a ``str`` or not iterable, holds
        more than ``MAX_CELL_RUNS`` distinct ids (field ``run_ids``) or something that is
        not a run id (``run_ids[i]``); ``nodeids`` that is a ``str``, not iterable
        (``nodeids``) or holds something that is not a ``str`` (``nodeids[i]``);
        ``outcomes`` that is not a set of ``Outcome`` or None; ``Busy``;
        ``StorageFailure``."""
        ...
