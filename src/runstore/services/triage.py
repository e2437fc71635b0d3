"""Triage: one answer about a run of a project, composed from ``DataReader`` queries.

:func:`triage_run` reads a run (the latest of a project, or a given one) through the public
``DataReader`` methods only (``latest_run`` / ``get_run``, ``failures``,
``classify_unstable``, ``slowest``, ``list_runs``, ``compare``), so every layer,
runstore's or a third party's, gives the same answer without code of its own. What it
adds are these rules, all pure:

- **Failures** (:class:`TriageFailure`): each failing item and collection error of the run
  with its verdict and ``because`` (``DataReader.classify_unstable``, which judges only
  the items whose verdict can be other than stable), its first error and where it
  was raised (the deepest frame in the project's own code; without one, the file and line
  the error itself names, as a ``SyntaxError`` of a test module does, when that file is
  the failing module; else None, never a frame outside the project), its
  failure signature, ``is_new`` and its failing streak (``DataReader.failures``). Ordered
  by what an agent should look at first: collection errors, then ``new_failure``, then
  ``persistent_failure``, then ``flaky``, each by node id.
- **Groups** (:class:`FailureGroup`): the failures that share a stored failure signature
  (exception type, masked message, innermost project frame): one root cause failing 40
  tests is one group of 40. Failures stored without an error (signature ``""``) are in no
  group. Largest group first, then by its first node id.
- **Flaky suspects** (:class:`FlakySuspect`): every item of the run that ``classify`` calls
  ``flaky``, failing or passing, with its evidence; judged as of that run (its window), so
  the answer for an older run does not move when later runs arrive. Tests the run did not
  execute are not listed (``DataReader.flaky_tests`` lists the project's).
- **Slowest**: the run's ``slowest`` items (``DataReader.slowest``).
- **Since the last green run** (:class:`SinceGreen`): the *green* run is the newest run of
  the project listed before this one by ``list_runs`` (start time, then id, newest first)
  that :func:`is_green` accepts: finished ``passed``, at least one item, no failing item,
  no collection error, and not partial (:func:`run_is_partial`: no
  narrowing selection such as a path argument, ``-k``, ``-m``, ``--lf``, ``-x`` or
  deselected items, and as many items recorded as pytest collected). A partial run may
  have left the failing tests out, and an interrupted, aborted or running run may not
  have reached them, so none of them is evidence that everything passed. Against it:
  ``newly_failing`` (in both runs, failing now, not failing then: ``DataReader.compare``),
  ``added_failing`` (failing now, not in the green run at all) and, when a
  ``changed_files`` function is given and the green run recorded a git commit, the files
  changed since that commit.

Each reader call reads its own snapshot: a finished run gives the same answer on every
call (history trimming aside); a run still being written may show parts of different
moments. Finding the green run reads the summaries of ``passed`` runs only (never items),
newest first, from the newest run of the project back to the green one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TypeVar

import attrs
from returns.result import Result

from runstore.services._compose import composed, stop, value
from runstore.services._test_runs_rules import run_is_partial
from runstore.services.errors import InvalidInput
from runstore.services.pagination import MAX_PAGE_SIZE, check_limit
from runstore.services.test_runs import (
    DEFAULT_FLAKY_POLICY,
    Classification,
    DataReader,
    DataReaderError,
    Evidence,
    FailureRecord,
    FlakyPolicy,
    Outcome,
    Phase,
    RunId,
    RunStatus,
    RunSummary,
    StackFrame,
    TestClassification,
    TestRecord,
)

__all__ = [
    "DEFAULT_SLOWEST",
    "ChangedSince",
    "FailureGroup",
    "FlakySuspect",
    "SinceGreen",
    "Triage",
    "TriageFailure",
    "group_failures",
    "is_green",
    "triage_run",
]

T = TypeVar("T")

DEFAULT_SLOWEST = 10
"""How many of the slowest items a triage lists unless told otherwise."""

ChangedSince = Callable[[str], Sequence[str] | None]
"""Given a git commit, the files changed since it (None when that cannot be known), such as
:func:`runstore._git.changed_since` bound to a repository."""


@attrs.frozen
class TriageFailure:
    """One failing item (or collection error) of the triaged run.

    ``message`` is the first error's stored message (bounded, ``MAX_MESSAGE_CHARS``);
    ``location`` the deepest frame of the first error in the project's own code, else the
    last ``File "PATH", line N`` of the error text when PATH is the failing module (path
    stored relative, as frames are), else None; ``signature`` the failure signature (hex, ``""``
    when no error was stored); ``is_new``, ``streak`` (runs in a row, >= 1) and
    ``failing_since`` as ``FailureRecord`` has them. ``classification``, ``window``
    (newest first) and ``because`` are the item's verdict from ``DataReader.classify``
    (``new_failure``, ``persistent_failure`` or ``flaky`` for a failing item); all three are
    None for a collection error, which has no history.
    """

    nodeid: str
    outcome: Outcome
    phase: Phase
    exception_type: str
    message: str
    location: StackFrame | None
    signature: str
    is_new: bool
    streak: int
    failing_since: RunId | None
    classification: Classification | None
    window: tuple[Outcome, ...] | None
    because: Evidence | None

    @property
    def is_collection_error(self) -> bool:
        """Whether this is a collector that failed (no test item)."""
        return self.phase is Phase.COLLECT


@attrs.frozen
class FailureGroup:
    """Failures of one run sharing one failure signature: one root cause.

    ``exception_type``, ``message`` and ``location`` are those of the group's first failure
    (by node id); ``is_new`` whether the signature is new in the run (the same for every
    member); ``nodeids`` sorted, at least one.
    """

    signature: str
    exception_type: str
    message: str
    location: StackFrame | None
    is_new: bool
    nodeids: tuple[str, ...]

    @property
    def count(self) -> int:
        """How many failures share the signature."""
        return len(self.nodeids)


@attrs.frozen
class FlakySuspect:
    """An item of the run that ``classify`` calls ``flaky``: its outcome in the run, its
    window (newest first) and the flaky rule with its runs (``because``)."""

    nodeid: str
    outcome: Outcome
    window: tuple[Outcome, ...]
    because: Evidence


@attrs.frozen
class SinceGreen:
    """What changed from the last green run (``green``) to the triaged run.

    ``newly_failing``: node ids in both runs, failing now and not failing then (sorted);
    ``added_failing``: failing now and absent from the green run (sorted);
    ``changed_files``: paths changed since the green run's git commit as the
    ``changed_files`` function of :func:`triage_run` says (sorted), None when no function was
    given, the green run has no commit, or the function could not tell.
    """

    green: RunSummary
    newly_failing: tuple[str, ...]
    added_failing: tuple[str, ...]
    changed_files: tuple[str, ...] | None


@attrs.frozen
class Triage:
    """The answer of :func:`triage_run` (see the module docstring for each part's rule).

    ``run`` is the triaged run with its status and counts; ``failures`` ordered collection
    errors, ``new_failure``, ``persistent_failure``, ``flaky``, then by node id; ``groups``
    largest first; ``flaky`` by node id; ``slowest`` slowest first (durations in ms);
    ``since_green`` None when no earlier run of the project is green.
    """

    run: RunSummary
    failures: tuple[TriageFailure, ...]
    groups: tuple[FailureGroup, ...]
    flaky: tuple[FlakySuspect, ...]
    slowest: tuple[TestRecord, ...]
    since_green: SinceGreen | None

    @property
    def partial(self) -> bool:
        """Whether the triaged run may have left tests out (:func:`run_is_partial`), so its
        failures may not be all there are."""
        return run_is_partial(self.run.status, self.run.selection, self.run.total)


# -- rules ------------------------------------------------------------------------------------


def is_green(run: RunSummary) -> bool:
    """Whether ``run`` counts as green for "since the last green run": finished ``passed``
    (a run its runner called failed is not green, even without a failing item), at least
    one item, no ``failed`` or ``error`` item, no collection error, and not partial
    (:func:`run_is_partial` with its recorded item count)."""
    return (
        run.status is RunStatus.PASSED
        and run.total > 0
        and run.counts.get(Outcome.FAILED.value, 0) == 0
        and run.counts.get(Outcome.ERROR.value, 0) == 0
        and run.collection_errors == 0
        and not run_is_partial(run.status, run.selection, run.total)
    )


_NAMED_PLACE = re.compile(r'File "([^"\n]+)", line (\d+)')
"""Where an error names its own place in its report text: Python's traceback writes a
``SyntaxError``'s ``filename`` and ``lineno`` so (pytest prefixes the line with ``E``)."""


def _location(record: FailureRecord) -> StackFrame | None:
    """The deepest project frame (frames are outermost first); without one, the place the
    error's text names when it is the failing module (``module`` relative to the rootdir,
    the text's path absolute or relative); else None."""
    own = [f for f in record.frames if f.is_project]
    if own:
        return own[-1]
    module = record.nodeid.partition("::")[0]
    named = _NAMED_PLACE.findall(record.text)
    if not named or not module:
        return None
    path, line = named[-1]
    if path.replace("\\", "/") == module or path.replace("\\", "/").endswith("/" + module):
        return StackFrame(module, int(line), "", True)
    return None


_RANK = {
    None: 0,
    Classification.NEW_FAILURE: 1,
    Classification.PERSISTENT_FAILURE: 2,
    Classification.FLAKY: 3,
}


def _failure(record: FailureRecord, verdict: TestClassification | None) -> TriageFailure:
    judged = None if record.phase is Phase.COLLECT else verdict
    return TriageFailure(
        nodeid=record.nodeid,
        outcome=record.outcome,
        phase=record.phase,
        exception_type=record.exception_type,
        message=record.message,
        location=_location(record),
        signature=record.signature,
        is_new=record.is_new,
        streak=record.streak,
        failing_since=record.failing_since,
        classification=None if judged is None else judged.classification,
        window=None if judged is None else judged.window,
        because=None if judged is None else judged.because,
    )


def _ordered(failures: Sequence[TriageFailure]) -> tuple[TriageFailure, ...]:
    return tuple(sorted(
        failures,
        key=lambda f: (_RANK.get(f.classification, 4), not f.is_collection_error, f.nodeid),
    ))


def group_failures(failures: Sequence[TriageFailure]) -> tuple[FailureGroup, ...]:
    """Group ``failures`` by signature (those without one, ``""``, in no group): largest
    group first, then by first node id; each group described by its first failure."""
    members: dict[str, list[TriageFailure]] = {}
    for failure in failures:
        if failure.signature:
            members.setdefault(failure.signature, []).append(failure)
    groups = []
    for signature, found in members.items():
        found.sort(key=lambda f: f.nodeid)
        head = found[0]
        groups.append(FailureGroup(
            signature=signature,
            exception_type=head.exception_type,
            message=head.message,
            location=head.location,
            is_new=head.is_new,
            nodeids=tuple(f.nodeid for f in found),
        ))
    return tuple(sorted(groups, key=lambda g: (-g.count, g.nodeids[0])))


# -- composition ------------------------------------------------------------------------------


_FIRST_PAGE = 20
"""Runs read on the first page when looking for the green run (it is usually recent)."""


def _green_before(reader: DataReader, run: RunSummary) -> RunSummary | None:
    """The newest run listed after ``run`` (``list_runs`` order: start time, then id, newest
    first) that :func:`is_green` accepts, None when none is. Only ``passed`` runs are
    listed (the status filter), so runs that failed cost nothing."""
    before = (run.started_at_ms, run.id)
    cursor: str | None = None
    limit = _FIRST_PAGE
    while True:
        page = value(reader.list_runs(run.project, status=RunStatus.PASSED, limit=limit,
                                       cursor=cursor))
        for listed in page.items:
            if (listed.started_at_ms, listed.id) < before and is_green(listed):
                return listed
        if page.next_cursor is None:
            return None
        cursor, limit = page.next_cursor, MAX_PAGE_SIZE


def _since_green(
    reader: DataReader, run: RunSummary, failing: set[str], changed_files: ChangedSince | None
) -> SinceGreen | None:
    green = _green_before(reader, run)
    if green is None:
        return None
    compared = value(reader.compare(green.id, run.id))
    changed: tuple[str, ...] | None = None
    commit = green.environment.git_commit
    if changed_files is not None and commit is not None:
        found = changed_files(commit)
        changed = None if found is None else tuple(sorted(set(found)))
    return SinceGreen(
        green=green,
        newly_failing=compared.newly_failing,
        added_failing=tuple(n for n in compared.added if n in failing),
        changed_files=changed,
    )


def _summary(reader: DataReader, project: str | None, run_id: RunId | None) -> RunSummary:
    if run_id is None:
        if project is None:
            stop(InvalidInput("project", "give a project or a run id"))
        return value(reader.latest_run(project))
    summary = value(reader.get_run(run_id))
    if project is not None and summary.project != project:
        stop(InvalidInput("run_id", f"run {run_id} belongs to another project"))
    return summary


def _compose(
    reader: DataReader,
    project: str | None,
    run_id: RunId | None,
    slowest: int,
    changed_files: ChangedSince | None,
    policy: FlakyPolicy = DEFAULT_FLAKY_POLICY,
) -> Triage:
    limit = value(check_limit(slowest, field="slowest"))
    run = _summary(reader, project, run_id)
    verdicts = {v.nodeid: v for v in value(reader.classify_unstable(run.id, policy=policy))}
    failures = _ordered([_failure(f, verdicts.get(f.nodeid))
                         for f in value(reader.failures(run.id))])
    failing = {f.nodeid for f in failures if not f.is_collection_error}
    return Triage(
        run=run,
        failures=failures,
        groups=group_failures(failures),
        flaky=tuple(
            FlakySuspect(v.nodeid, v.outcome, v.window, v.because)
            for v in sorted(verdicts.values(), key=lambda v: v.nodeid)
            if v.classification is Classification.FLAKY
        ),
        slowest=value(reader.slowest(run.id, limit=limit)),
        since_green=_since_green(reader, run, failing, changed_files),
    )


def triage_run(
    reader: DataReader,
    project: str | None = None,
    *,
    run_id: RunId | None = None,
    slowest: int = DEFAULT_SLOWEST,
    changed_files: ChangedSince | None = None,
    policy: FlakyPolicy = DEFAULT_FLAKY_POLICY,
) -> Result[Triage, DataReaderError]:
    """Triage run ``run_id``, or the latest run of ``project`` (see the module docstring).

    ``slowest`` is how many of the slowest items to list (1-1000); ``changed_files``, when
    given, is asked once for the files changed since the green run's git commit (the CLI
    passes :func:`runstore._git.changed_since` in the folder it runs in); ``policy`` is the
    flaky policy of the verdicts (``DataReader.classify_unstable``).

    Failures: ``InvalidInput`` when neither ``project`` nor ``run_id`` is given, when
    ``run_id`` belongs to a project other than a given ``project``, for ``slowest`` outside
    1-1000, or for a project or run id the reader refuses; ``NotFound("project", name)``
    when the project has no run, ``NotFound("run", id)`` when the run is missing (pruned
    while triage read it, too); ``Busy`` and ``StorageFailure`` from the reader.
    """
    return composed(
        lambda: _compose(reader, project, run_id, slowest, changed_files, policy)
    )
