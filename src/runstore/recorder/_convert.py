"""Turning pytest's reports into runstore's records.

Everything is read from the report objects pytest hands to its hooks (``TestReport``,
``CollectReport`` and the ``SubtestReport`` of pytest 9), never by re-parsing the text pytest
prints: the phase outcome from ``report.outcome`` and ``report.wasxfail`` (as pytest's own
``skipping`` and ``junitxml`` modules read them), and the error's exception type, message,
frames and cause chain from the facts the running process took from the exception itself
(``runstore.recorder._annotate``), so they do not depend on ``--tb``; only the error's text
is ``longrepr`` as pytest prints it. A report without those facts (one made by another
process, a crashed ``pytest-xdist`` worker's) is read from ``longrepr``
(``ExceptionChainRepr.chain`` for the cause chain, ``reprcrash`` for the message, which is
the text ``--junitxml`` writes as ``message``, ``reprtraceback.reprentries`` with their
``ReprFileLocation`` for the frames, which ``--tb=line``, ``no`` and ``native`` leave out).

An item's phases are assembled as its reports arrive (interleaved under ``pytest-xdist``);
the item is finished by its teardown report. A phase reported with pytest-rerunfailures'
outcome ``rerun`` makes that attempt an earlier attempt of the item, kept with its phases
and errors.

Subtests (pytest 9's ``subtests`` fixture and unittest's ``self.subTest``, both reported as
``SubtestReport``, also under ``pytest-xdist``) become the item's ``SubtestResult``s with
their errors and frames; a failing one makes the item failed (``derive_outcome``). Pytest
marks the call of a ``subtests``-fixture test failed with the text "contains N failed
subtests"; that phase is kept as pytest reported it, but the text is not stored as an error
of its own, so the item's first error is its first failing subtest's, as for a unittest
``TestCase`` (whose call pytest reports as passed).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from typing import Any

import attrs

from runstore.recorder._annotate import EXC_ATTR, FINGERPRINT_ATTR, MARKERS_ATTR, REPEAT_ATTR
from runstore.recorder._swallowed import SWALLOWED_ATTR, swallowed_reports
from runstore.recorder._text import clean_identifier, clean_text, safe_str
from runstore.services.test_runs import (
    FAILING_OUTCOMES,
    MAX_FRAMES,
    AttemptSource,
    CollectionError,
    ErrorInfo,
    Outcome,
    Phase,
    PhaseResult,
    StackFrame,
    SubtestResult,
    TestResult,
    derive_outcome,
)

__all__ = [
    "ItemAssembler",
    "PathResolver",
    "collection_record",
    "error_from_report",
    "is_failing",
    "is_subtest_report",
    "split_nodeid",
]

_PHASES = {"setup": Phase.SETUP, "call": Phase.CALL, "teardown": Phase.TEARDOWN}
_SKIP_PREFIX = "Skipped: "  # how pytest words a skip reason in ``longrepr`` (as junitxml strips it)
_SITE_DIRS = frozenset({"site-packages", "dist-packages"})
_SUBTESTS_FAILED = re.compile(r"contains \d+ failed subtests?")
"""pytest's text for a ``subtests``-fixture test failed only by its subtests
(``_pytest.subtests.pytest_report_teststatus``)."""


def split_nodeid(nodeid: str) -> tuple[str, str | None]:
    """Split a node id into the item name without parameters and the parametrize id.

    ``"tests/t.py::TestX::test_y[a::b]"`` -> ``("TestX::test_y", "a::b")``; ``"t.py::f"`` ->
    ``("f", None)``; ``"t.py::f[]"`` -> ``("f", "")``. Names and class names cannot contain
    ``[``, so the first bracket after the path starts the parameters.
    """
    _, sep, rest = nodeid.partition("::")
    if not sep:
        rest = nodeid
    bracket = rest.find("[")
    if bracket != -1 and rest.endswith("]"):
        return rest[:bracket], rest[bracket + 1 : -1]
    return rest, None


@attrs.frozen
class PathResolver:
    """Resolves the paths in reports: relative ones against the invocation directory.

    ``relative(path)`` is the path stored for a frame: relative to the rootdir (``/``
    separated) when under it, else absolute. A frame is the project's own when its file is
    under the rootdir and not inside a ``site-packages`` or ``dist-packages`` folder.
    """

    rootdir: str
    invocation_dir: str

    def absolute(self, path: str) -> str:
        """``path`` made absolute against the invocation directory and normalized."""
        if path.startswith("<"):  # "<string>", "<frozen importlib._bootstrap>"
            return path
        return os.path.normpath(os.path.join(self.invocation_dir, path))

    def place(self, path: str) -> tuple[str, bool]:
        """(stored path, is the project's own) of ``path`` as a report or tool gave it."""
        absolute = self.absolute(path)
        if absolute.startswith("<"):
            return clean_identifier(absolute), False
        try:
            relative = os.path.relpath(absolute, self.rootdir)
        except ValueError:  # another drive on Windows
            return clean_identifier(absolute), False
        if relative.split(os.sep, 1)[0] == os.pardir:
            return clean_identifier(absolute), False
        in_site = bool(_SITE_DIRS.intersection(relative.split(os.sep)))
        return clean_identifier(relative.replace(os.sep, "/")), not in_site

    def frame(self, path: str, line: int | None, function: str) -> StackFrame:
        """A stack frame for ``path`` (as reported), with its project flag."""
        stored, is_project = self.place(path)
        return StackFrame(stored, line, clean_text(function), is_project)


def _duration_ms(report: Any) -> float:
    try:
        value = float(report.duration) * 1000.0
    except (TypeError, ValueError, AttributeError):
        return 0.0
    return value if math.isfinite(value) and value >= 0.0 else 0.0


def _skip_reason(longrepr: Any) -> str | None:
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = safe_str(longrepr[2])
        return reason[len(_SKIP_PREFIX) :] if reason.startswith(_SKIP_PREFIX) else reason
    return None


def _phase_outcome(report: Any) -> tuple[Outcome, str | None, bool] | None:
    """(phase outcome, reason, is_rerun) of a report, or None for an outcome we do not know.

    A report of an earlier execution of runstore's own repeats (outcome ``rerun`` with
    ``REPEAT_ATTR``) has the outcome pytest reported before it was renamed, and is a rerun.
    """
    marks = getattr(report, REPEAT_ATTR, None)
    if isinstance(marks, dict) and isinstance(marks.get("outcome"), str):
        judged = _reported_outcome(report, marks["outcome"])
        return None if judged is None else (judged[0], judged[1], True)
    return _reported_outcome(report, report.outcome)


def _reported_outcome(report: Any, outcome: str) -> tuple[Outcome, str | None, bool] | None:
    wasxfail = getattr(report, "wasxfail", None)
    if outcome == "passed":
        if wasxfail is not None:
            return Outcome.XPASSED, safe_str(wasxfail) or None, False
        return Outcome.PASSED, None, False
    if outcome == "failed":
        return Outcome.FAILED, None, False
    if outcome == "skipped":
        if wasxfail is not None:
            return Outcome.XFAILED, safe_str(wasxfail) or None, False
        return Outcome.SKIPPED, _skip_reason(report.longrepr), False
    if outcome == "rerun":  # pytest-rerunfailures: this attempt failed and will be rerun
        return Outcome.FAILED, None, True
    return None


def _entry_frames(resolver: PathResolver, reprtraceback: Any) -> tuple[StackFrame, ...]:
    frames: list[StackFrame] = []
    for entry in getattr(reprtraceback, "reprentries", None) or ():
        location = getattr(entry, "reprfileloc", None)
        if location is None:  # ``--tb=native`` entries are text only: no frame is made up
            continue
        line = location.lineno if isinstance(location.lineno, int) else None
        frames.append(resolver.frame(safe_str(location.path), line, ""))
    return tuple(frames[-MAX_FRAMES:])


def _doctest_frames(resolver: PathResolver, longrepr: Any) -> tuple[StackFrame, ...]:
    """The example locations of a doctest failure (``ReprFailDoctest.reprlocation_lines``)."""
    frames = []
    for location, _lines in getattr(longrepr, "reprlocation_lines", None) or ():
        line = location.lineno if isinstance(location.lineno, int) else None
        frames.append(resolver.frame(safe_str(location.path), line, ""))
    return tuple(frames[-MAX_FRAMES:])


def _entry_type(reprtraceback: Any) -> str:
    """The exception type name pytest put on the innermost long-style entry, else ""."""
    entries = getattr(reprtraceback, "reprentries", None) or ()
    if entries:
        location = getattr(entries[-1], "reprfileloc", None)
        if location is not None and getattr(entries[-1], "style", "") == "long":
            return safe_str(location.message)
    return ""


def _text(longrepr: Any) -> str:
    try:
        return clean_text(str(longrepr))
    except Exception:
        return "<unprintable report>"


def error_from_report(resolver: PathResolver, report: Any, phase: Phase) -> ErrorInfo:
    """The error of a failed phase report, with its cause chain.

    ``text`` is the whole report text as pytest prints it (which follows ``--tb``). When the
    running process described the exception (``runstore.recorder._annotate``), the
    exception type, ``message`` (pytest's crash message, the text ``--junitxml`` writes as
    ``message``), frames and causes are its facts, the same under every ``--tb`` style;
    else they are read from ``longrepr``, with ``exception_type`` from the innermost
    traceback entry (else ``""``) and frames without function names. A report without a
    traceback (a strict xpass, a doctest failure, a missing fixture, a crashed
    ``pytest-xdist`` worker) has the whole text as its message.
    """
    longrepr = report.longrepr
    facts = getattr(report, EXC_ATTR, None)
    facts = facts if isinstance(facts, list) else []
    chain = getattr(longrepr, "chain", None)
    if not chain:
        reprtraceback = getattr(longrepr, "reprtraceback", None)
        crash = getattr(longrepr, "reprcrash", None)
        chain = [(reprtraceback, crash, None)] if reprtraceback is not None else []
    text = _text(longrepr)
    if not chain:  # a plain string, a doctest failure or another text-only repr
        exc_type = str(facts[-1].get("type", "")) if facts else ""
        frames = _doctest_frames(resolver, longrepr)
        return ErrorInfo(phase, clean_text(exc_type), text, text, frames)
    if facts:
        return _error_from_facts(resolver, facts, phase, text)
    error: ErrorInfo | None = None
    for index, (reprtraceback, crash, _descr) in enumerate(chain):
        exc_type = _entry_type(reprtraceback)
        error = ErrorInfo(
            phase=phase,
            exception_type=clean_text(exc_type),
            message=safe_str(crash.message) if crash is not None else exc_type,
            text=text if index == len(chain) - 1 else "",
            frames=_entry_frames(resolver, reprtraceback),
            cause=error,
        )
    assert error is not None
    return error


def _error_from_facts(
    resolver: PathResolver, facts: Sequence[Any], phase: Phase, text: str
) -> ErrorInfo:
    """The error chain the running process described, oldest cause first in ``facts``; the
    message of each is its crash message when described (a test's), else its
    exception-only line (a collector's)."""
    error: ErrorInfo | None = None
    for index, fact in enumerate(facts):
        frames = tuple(
            resolver.frame(safe_str(f[0]), f[1] if isinstance(f[1], int) else None, safe_str(f[2]))
            for f in fact.get("frames", ())
            if isinstance(f, (list, tuple)) and len(f) == 3
        )
        error = ErrorInfo(
            phase=phase,
            exception_type=clean_text(str(fact.get("type", ""))),
            message=safe_str(fact.get("crash") or fact.get("message", "")),
            text=text if index == len(facts) - 1 else "",
            frames=frames[-MAX_FRAMES:],
            cause=error,
        )
    assert error is not None
    return error


def _module_path(nodeid: str, location: Any) -> str:
    if isinstance(location, tuple) and location and isinstance(location[0], str):
        return clean_identifier(location[0].replace(os.sep, "/"))
    return clean_identifier(nodeid.partition("::")[0])


def collection_record(
    resolver: PathResolver, report: Any
) -> CollectionError | TestResult | None:
    """The record of a collect report: a ``CollectionError`` when the collector failed, a
    skipped ``TestResult`` when it was skipped (a module-level ``pytest.skip``, as pytest
    and ``--junitxml`` list it), None when it passed.

    A collection error is pytest's wrapper around the real error (an import error, a syntax
    error): when the running process described the chain, the error stored is the innermost
    cause that pytest wrapped, with its frames; ``text`` is pytest's report text.
    """
    nodeid = clean_identifier(report.nodeid) or "."
    module_path = clean_identifier(nodeid.partition("::")[0])
    if report.outcome == "skipped":
        reason = _skip_reason(report.longrepr)
        phase = PhaseResult(Phase.SETUP, Outcome.SKIPPED, 0.0, reason)
        name, param = split_nodeid(nodeid)
        return TestResult(nodeid, module_path, name, (phase,), parametrize_id=param)
    if report.outcome != "failed":
        return None
    text = _text(report.longrepr)
    facts = getattr(report, EXC_ATTR, None)
    if isinstance(facts, list) and facts:
        # Drop pytest's own ``CollectError`` wrapper when it has the real error as its cause.
        if len(facts) > 1 and str(facts[-1].get("type", "")).endswith("CollectError"):
            facts = facts[:-1]
        error = _error_from_facts(resolver, facts, Phase.COLLECT, text)
    else:
        error = ErrorInfo(Phase.COLLECT, "", text, text, ())
    return CollectionError(nodeid, module_path, error)


def _subtest_description(context: Any) -> str:
    parts = []
    msg = getattr(context, "msg", None)
    if msg is not None:
        parts.append(f"[{safe_str(msg)}]")
    kwargs = getattr(context, "kwargs", None) or {}
    if kwargs:
        pairs = ", ".join(f"{safe_str(k)}={safe_str(v)}" for k, v in kwargs.items())
        parts.append(f"({pairs})")
    return " ".join(parts) or "(<subtest>)"


def is_subtest_report(report: Any) -> bool:
    """Whether ``report`` is a subtest's report (pytest 9 ``SubtestReport`` or the
    ``pytest-subtests`` plugin's), recognised by its ``context`` with ``msg`` and ``kwargs``."""
    context = getattr(report, "context", None)
    return context is not None and hasattr(context, "msg") and hasattr(context, "kwargs")


class _Pending:
    """What has arrived so far of one item (mutable; lives until the item finishes)."""

    __slots__ = ("attempts", "errors", "line", "markers", "module_path", "nodeid", "phases",
                 "rerun", "subtests")

    def __init__(self, nodeid: str, module_path: str, line: int | None,
                 markers: tuple[str, ...]) -> None:
        self.nodeid = nodeid
        self.module_path = module_path
        self.line = line
        self.markers = markers
        self.phases: list[PhaseResult] = []
        self.errors: list[ErrorInfo] = []
        self.subtests: list[SubtestResult] = []
        self.attempts: list[TestResult] = []
        self.rerun = False


def _fails(phases: Sequence[PhaseResult], subtests: Sequence[SubtestResult]) -> bool:
    if not subtests and all(p.outcome is Outcome.PASSED for p in phases):
        return False  # the common case, without building derive_outcome's table
    return derive_outcome(phases, (s.outcome for s in subtests)) in FAILING_OUTCOMES


def is_failing(result: TestResult) -> bool:
    """Whether an item fails (``failed`` or ``error``): a phase or a subtest failed, as
    ``derive_outcome`` judges it."""
    return _fails(result.phases, result.subtests)


def _only_failed_subtests(pending: _Pending, report: Any) -> bool:
    """Whether a failed call report is pytest's "contains N failed subtests" for an item
    whose failing subtests have arrived (their errors say why)."""
    longrepr = report.longrepr
    return (
        isinstance(longrepr, str)
        and _SUBTESTS_FAILED.fullmatch(longrepr) is not None
        and any(s.outcome is Outcome.FAILED for s in pending.subtests)
    )


class ItemAssembler:
    """Builds one ``TestResult`` per item from its phase reports.

    Feed every test report to :meth:`add`; it returns the finished ``TestResult`` when the
    report finished an item (its teardown, or a report of an unknown phase such as a
    crashed ``pytest-xdist`` worker's), else None. Only unfinished items are held, so
    memory does not grow with the number of items. :meth:`add` runs for every phase of
    every test, so the plain passing phase takes the shortest path.
    """

    def __init__(self, resolver: PathResolver) -> None:
        self._resolver = resolver
        self._pending: dict[str, _Pending] = {}  # by node id as reported
        self._markers: dict[str, tuple[str, ...]] = {}
        self._fingerprints: dict[str, str] = {}  # by node id as reported, until it finishes

    def note_markers(self, nodeid: str, names: list[str]) -> None:
        """Remember the markers of an item whose setup report comes next (an
        :class:`~runstore.recorder.Annotator` sink)."""
        if names:
            self._markers[nodeid] = tuple(clean_text(n) for n in names)

    def note_fingerprint(self, nodeid: str, fingerprint: str | None) -> None:
        """Remember the code fingerprint of an item whose teardown report comes next (an
        :class:`~runstore.recorder.Annotator` sink); None forgets an earlier attempt's."""
        if fingerprint is None:
            self._fingerprints.pop(nodeid, None)
        else:
            self._fingerprints[nodeid] = fingerprint

    @property
    def unfinished(self) -> int:
        """How many items have reported some phases but not finished."""
        return len(self._pending)

    def _start(self, report: Any) -> _Pending:
        raw = report.nodeid
        nodeid = clean_identifier(raw)
        location = getattr(report, "location", None)
        line = None
        if isinstance(location, tuple) and len(location) > 1 and isinstance(location[1], int):
            line = location[1] + 1
        pending = _Pending(nodeid, _module_path(nodeid, location), line,
                           self._markers.pop(raw, ()))
        self._pending[raw] = pending
        return pending

    def add(self, report: Any) -> TestResult | None:
        """Take one test report; return the item's result when this report finished it."""
        when = report.when
        if when == "teardown" and getattr(report, SWALLOWED_ATTR, None):
            self._add_swallowed(report)
        pending = self._pending.get(report.nodeid) or self._start(report)
        if when == "call" and is_subtest_report(report):
            self._add_subtest(pending, report)
            return None
        phase = _PHASES.get(when, Phase.CALL)
        if when == "setup":
            markers = getattr(report, MARKERS_ATTR, None)
            if isinstance(markers, list):
                pending.markers = tuple(clean_text(str(m)) for m in markers)
        if report.outcome == "passed" and getattr(report, "wasxfail", None) is None:
            result = PhaseResult(phase, Outcome.PASSED, _duration_ms(report))
        else:
            judged = _phase_outcome(report)
            if judged is None:
                result = None
            else:
                outcome, reason, rerun = judged
                result = PhaseResult(phase, outcome, _duration_ms(report), reason)
                if outcome is Outcome.FAILED and not (
                    when == "call" and _only_failed_subtests(pending, report)
                ):
                    pending.errors.append(error_from_report(self._resolver, report, phase))
                pending.rerun = pending.rerun or rerun
        if result is not None:
            if any(p.phase is phase for p in pending.phases):  # a phase reported twice
                pending.phases = [p for p in pending.phases if p.phase is not phase]
            pending.phases.append(result)
        if when == "setup" or when == "call":
            return None
        return self._finish_attempt(pending, report)

    def _add_swallowed(self, report: Any) -> None:
        """Take, ahead of the teardown ``report``, the setup and call reports of its attempt
        that another plugin made but never logged (``runstore.recorder._swallowed``: the
        ``flaky`` plugin's retries); such an attempt is an earlier attempt of the item."""
        for earlier in swallowed_reports(report):
            if earlier.nodeid == report.nodeid and earlier.when in ("setup", "call"):
                self.add(earlier)
        pending = self._pending.get(report.nodeid) or self._start(report)
        pending.rerun = True

    def _add_subtest(self, pending: _Pending, report: Any) -> None:
        judged = _phase_outcome(report)
        if judged is None:
            return
        outcome = judged[0]
        error = None
        if outcome is Outcome.FAILED:
            error = error_from_report(self._resolver, report, Phase.CALL)
        description = _subtest_description(report.context)
        pending.subtests.append(SubtestResult(description, outcome, _duration_ms(report), error))

    def _result(
        self,
        pending: _Pending,
        report: Any | None,
        attempts: tuple[TestResult, ...] = (),
        fingerprint: str | None = None,
    ) -> TestResult:
        name, param = split_nodeid(pending.nodeid)
        phases = tuple(pending.phases)
        stdout = stderr = log = ""
        if report is not None and _fails(phases, pending.subtests):
            # The last report carries the output captured in every phase so far.
            stdout = safe_str(getattr(report, "capstdout", ""))
            stderr = safe_str(getattr(report, "capstderr", ""))
            log = safe_str(getattr(report, "caplog", ""))
        return TestResult(
            nodeid=pending.nodeid,
            module_path=pending.module_path,
            name=name,
            phases=phases,
            parametrize_id=param,
            line=pending.line,
            markers=pending.markers,
            errors=tuple(pending.errors),
            stdout=stdout,
            stderr=stderr,
            log=log,
            attempts=attempts,
            subtests=tuple(pending.subtests),
            fingerprint=fingerprint,
        )

    def _finish_attempt(self, pending: _Pending, report: Any) -> TestResult | None:
        if pending.rerun:  # pytest-rerunfailures (or runstore's repeats) will run it again
            attempt = self._result(pending, None)
            if isinstance(getattr(report, REPEAT_ATTR, None), dict):
                attempt = attrs.evolve(attempt, source=AttemptSource.REPEAT)
            pending.attempts.append(attempt)
            pending.phases, pending.errors, pending.subtests = [], [], []
            pending.rerun = False
            return None
        del self._pending[report.nodeid]
        fingerprint = self._fingerprints.pop(report.nodeid, None)
        if fingerprint is None:
            given = getattr(report, FINGERPRINT_ATTR, None)
            fingerprint = given if isinstance(given, str) else None
        if not pending.phases:
            return None
        return self._result(pending, report, tuple(pending.attempts), fingerprint)
