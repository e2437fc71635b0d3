"""The quarantine in a recorded pytest session: failures of quarantined tests do not fail it.

The recorder (in the process that sees every report: a plain pytest process, or the
``pytest-xdist`` controller, so the decision is taken once, over every worker's reports)
reads the project's quarantine file (:mod:`runstore.quarantine`) at its rootdir when the
session starts, hands every finished item to :meth:`QuarantineGate.item` and asks
:meth:`QuarantineGate.decide` at session finish. The rules:

- A quarantined item still runs and is recorded exactly as without the quarantine; the run
  stores which items an entry applied to (``DataStore.mark_quarantined``).
- The exit status becomes OK only when it is "tests failed" and every failing test is
  quarantined: each failing item (``failed``/``error``; an item that passed on a rerun does
  not fail) and each repeated test whose executions flipped (``--runstore-repeat``, early
  flake detection). Collection errors, an interrupted session, an internal error, a session
  stopped early (``-x``, ``--maxfail``: the tests after the stop did not run), a usage error
  or any other exit status are never masked.
- Only a quarantined item's own failure is masked: a failing teardown never is, since pytest
  reports the teardown of a module- or session-scoped fixture against the last item that
  used it. And the failures pytest counted (``session.testsfailed``) must be the failed
  test reports the gate counted, as pytest counts them (:meth:`QuarantineGate.report`): a
  plugin that fails the session by raising that count (pytest-cov's ``--cov-fail-under``
  does ``session.testsfailed += 1``) is never masked.
- An entry applies up to and including its ``expires`` day, the local date when the session
  started (:data:`runstore.quarantine.today`). An expired entry naming a test of the
  session no longer applies, and the summary names it with its owner and end date.
- A quarantine file that cannot be read quarantines nothing; the summary says why.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import date
from fnmatch import translate
from typing import Any

import attrs
from returns.result import Failure

from runstore import quarantine as _quarantine
from runstore.quarantine import (
    Quarantine,
    QuarantineEntry,
    QuarantineFileError,
    load_quarantine,
    quarantine_path,
)
from runstore.recorder._annotate import REPEAT_ATTR
from runstore.recorder._convert import is_failing, is_subtest_report
from runstore.services.test_runs import FAILING_OUTCOMES, Phase, QuarantinedItem, TestResult

__all__ = ["QuarantineGate"]

_SHOWN = 5
"""Most node ids a summary line names before ``+N more``."""


def _named(nodeids: Iterable[str]) -> str:
    shown = sorted(nodeids)
    more = f" +{len(shown) - _SHOWN} more" if len(shown) > _SHOWN else ""
    return ", ".join(shown[:_SHOWN]) + more


def _entry_text(entry: QuarantineEntry) -> str:
    return f"{entry.key} (owner {entry.owner}, until {entry.expires.isoformat()})"


@attrs.define
class QuarantineGate:
    """What the quarantine decides in one session: the entry each item matched, the
    failing tests, those whose teardown failed, the failed reports counted as pytest
    counts them, the expired entries met, and whether the exit status was masked."""

    quarantine: Quarantine | None
    problem: QuarantineFileError | None = None
    day: date = attrs.field(factory=lambda: _quarantine.today())
    applied: dict[str, QuarantineEntry] = attrs.Factory(dict)
    failing: set[str] = attrs.Factory(set)
    torn: set[str] = attrs.Factory(set)
    reported: int = 0
    expired: dict[str, tuple[QuarantineEntry, set[str]]] = attrs.Factory(dict)
    masked: bool = False
    unmasked: set[str] = attrs.Factory(set)
    counted: int = 0

    @classmethod
    def at(cls, root: str) -> QuarantineGate:
        """The gate of the project at ``root`` (its quarantine file, see
        :func:`runstore.quarantine.quarantine_path`)."""
        found = quarantine_path(root).bind(load_quarantine)
        if isinstance(found, Failure):
            return cls(None, found.failure())
        return cls(found.unwrap())

    _exact: frozenset[str] = attrs.field(init=False, factory=frozenset)
    _patterns: Callable[[str], object] | None = attrs.field(init=False, default=None)
    _subtests: dict[str, int] = attrs.field(init=False, factory=dict)
    _judged: list[str] = attrs.field(init=False, factory=list)
    _stopped: bool = attrs.field(init=False, default=False)
    _exitstatus: int = attrs.field(init=False, default=0)

    def __attrs_post_init__(self) -> None:
        # A node id no entry can name is told apart with one set lookup and one regular
        # expression (every pattern's fnmatch.translate, joined): most items are such.
        entries = () if self.quarantine is None else self.quarantine.entries
        self._exact = frozenset(e.nodeid for e in entries if e.nodeid is not None)
        patterns = [translate(e.pattern) for e in entries if e.pattern is not None]
        if patterns:
            self._patterns = re.compile("|".join(f"(?:{p})" for p in patterns)).match

    def report(self, report: Any) -> None:
        """Count one test or collect report as pytest's session counts ``testsfailed``
        (``_pytest.main.Session.pytest_runtest_logreport``): a failed report not marked
        ``wasxfail``; an earlier execution (outcome ``rerun``) is not one. A
        pytest-rerunfailures rerun takes back the failed subtest reports of the attempt it
        ends, as that plugin does (``_remove_failed_subtest_reports_from_stats``)."""
        outcome, nodeid = report.outcome, report.nodeid
        if outcome == "failed" and not hasattr(report, "wasxfail"):
            self.reported += 1
            if is_subtest_report(report):
                self._subtests[nodeid] = self._subtests.get(nodeid, 0) + 1
        elif outcome == "rerun" and getattr(report, REPEAT_ATTR, None) is None:
            self.reported -= self._subtests.pop(nodeid, 0)

    def item(self, result: TestResult) -> None:
        """Take one finished item: which entry applies to it, whether it failed (its last
        attempt: one that passed on a rerun does not fail the session), whether its
        teardown failed."""
        nodeid = result.nodeid
        self._subtests.pop(nodeid, None)
        if is_failing(result):
            self.failing.add(nodeid)
            if any(p.phase is Phase.TEARDOWN and p.outcome in FAILING_OUTCOMES
                   for p in result.phases):
                self.torn.add(nodeid)
        if self.quarantine is None or (nodeid not in self._exact and (
                self._patterns is None or self._patterns(nodeid) is None)):
            return
        match = self.quarantine.match(nodeid, self.day)
        if match.active is not None:
            self.applied[nodeid] = match.active
        for entry in match.expired:
            self.expired.setdefault(entry.key, (entry, set()))[1].add(nodeid)

    def decide(self, exitstatus: int, flipped: Iterable[str], *, testsfailed: int,
               collection_errors: bool, interrupted: bool) -> int:
        """The session's exit status: OK for "tests failed" when every failing test (and
        every ``flipped`` one) is quarantined, none of them failed its teardown, pytest's
        ``testsfailed`` is the number of failed reports counted (:meth:`report`), and there
        was no collection error and no interruption; else ``exitstatus`` unchanged."""
        import pytest

        failing = self.failing | set(flipped)
        self.unmasked = {n for n in failing if n not in self.applied}
        self._judged = sorted(failing - self.unmasked)
        self.counted = testsfailed
        self._stopped = collection_errors or interrupted
        self._exitstatus = exitstatus
        self.masked = (exitstatus == pytest.ExitCode.TESTS_FAILED and bool(self._judged)
                       and not self.unmasked and not self.torn & failing
                       and testsfailed == self.reported
                       and not collection_errors and not interrupted)
        return int(pytest.ExitCode.OK) if self.masked else exitstatus

    def marks(self) -> list[QuarantinedItem]:
        """The items an entry applied to, for ``DataStore.mark_quarantined``."""
        return [QuarantinedItem(n, e.key) for n, e in sorted(self.applied.items())]

    def lines(self) -> list[str]:
        """The summary lines of the quarantine (none when it changed and met nothing)."""
        lines: list[str] = []
        if self.problem is not None:
            lines.append(f"runstore: quarantine not applied: {self.problem}")
        quarantined = self._judged
        if quarantined:
            entries: dict[str, QuarantineEntry] = {}
            for nodeid in quarantined:
                entries.setdefault(self.applied[nodeid].key, self.applied[nodeid])
            shown = "; ".join(_entry_text(e) for e in entries.values())
            verdict = ("the session passes (exit status 0)" if self.masked else
                       "the session still fails: " + "; ".join(self._reasons()))
            word = "failure" if len(quarantined) == 1 else "failures"
            lines.append(f"runstore: {len(quarantined)} quarantined {word} "
                         f"({_named(quarantined)}) by {shown}: {verdict}")
        for entry, nodeids in self.expired.values():
            lines.append(f"runstore: quarantine entry {entry.key} (owner {entry.owner}) "
                         f"expired after {entry.expires.isoformat()}: it no longer applies "
                         f"to {_named(nodeids)}")
        return lines

    def _reasons(self) -> list[str]:
        """Why the quarantine did not mask the session, each cause once."""
        import pytest

        reasons = ["a collection error or interruption is never masked"] if self._stopped else []
        if self._exitstatus != pytest.ExitCode.TESTS_FAILED:
            reasons.append(f"exit status {self._exitstatus} is never masked (only 1, tests "
                           "failed)")
        if self.unmasked:
            reasons.append(f"{_named(self.unmasked)} not quarantined")
        torn = self.torn.intersection(self._judged)
        if torn:
            reasons.append(f"the teardown of {_named(torn)} failed, which is never masked (it "
                           "may be a module- or session-scoped fixture's)")
        if self.counted != self.reported and not self._stopped:
            reasons.append(f"pytest counted {self.counted} failures where the test reports "
                           f"have {self.reported} (a plugin failed the session, such as "
                           "pytest-cov's --cov-fail-under)")
        return reasons
