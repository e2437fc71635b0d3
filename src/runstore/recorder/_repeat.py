"""Running a test several times in one process: ``--runstore-repeat N`` and early flake
detection (``--runstore-efd``).

Both take an item's test protocol over as pytest-rerunfailures does (a ``tryfirst``
``pytest_runtest_protocol`` that calls ``runtestprotocol`` once per execution): every
execution but the last is logged with pytest-rerunfailures' outcome ``rerun`` (shown ``R`` /
``RERUN``, counted ``N rerun`` on pytest's closing line) and carries :data:`REPEAT_ATTR`,
``{"outcome": <the outcome pytest reported>, "execution": k}``; the last execution is
logged as pytest reported it, its teardown report carrying ``{"execution": k, "planned": p,
"new": bool, "cut": bool}`` (``cut``: early flake detection's budget stopped it before
``planned``). The recorder stores the earlier executions as the item's earlier attempts
(source ``repeat``) with their real outcome, duration and errors. The reports travel as
they are under ``pytest-xdist``: the repeats run in the worker, the controller reads them.

A repeated test whose executions *flipped* (one failed, another passed) fails the session:
in the process that sees every report, a passing session's exit status becomes 1 (tests
failed) and a summary line names the tests, even when their last execution passed, unless
the quarantine (``runstore.recorder._quarantine``) covers every one of them, which then
gives the session back exit status 0 and says so on its own line.

pytest-rerunfailures at once: ``--runstore-repeat`` with a global rerun count
(``--reruns``, ``--force-reruns`` or the ini ``reruns``) is a usage error, since a rerun
would run a failing execution again and hide the flip a repeat looks for. An item that the
repeat or early flake detection runs is never rerun (its ``flaky(reruns=...)`` marker is not
read); early flake detection leaves every other item to pytest-rerunfailures.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs
import pytest
from _pytest.runner import runtestprotocol

from runstore.recorder._annotate import REPEAT_ATTR

__all__ = [
    "EFD_BUDGET_FACTOR",
    "EFD_FAULTY_SHARE",
    "EFD_MAX_EXECUTIONS",
    "EFD_MIN_BUDGET_S",
    "EFD_TABLE",
    "MAX_EFD_BUDGET_S",
    "MAX_REPEAT",
    "REPEATER",
    "REPEAT_ATTR",
    "Efd",
    "EfdDecision",
    "EfdSettings",
    "KnownLookup",
    "Repeater",
    "decide_efd",
    "efd_enabled",
    "efd_executions",
    "efd_settings",
    "install_repeats",
    "repeat_count",
]


MAX_REPEAT = 10_000
"""Most executions ``--runstore-repeat`` accepts."""

EFD_TABLE: tuple[tuple[float, int], ...] = ((5.0, 10), (10.0, 5), (30.0, 3), (300.0, 2))
"""Executions of a new test by its first execution's duration (s): under 5 s 10, under
10 s 5, under 30 s 3, under 5 min 2, else 1 (no repeat). Datadog's Early Flake Detection
table (https://docs.datadoghq.com/tests/flaky_tests/early_flake_detection/, "retries
based on test duration"; ``slow_test_retries`` in its libraries' settings)."""

EFD_MAX_EXECUTIONS = 10
"""Default ``--runstore-efd-max``: the table's most executions of one new test."""

EFD_FAULTY_SHARE = 0.30
"""Early flake detection stands down for the whole session when more than this share of
the selected tests (rounded up) is new: a renamed folder or a first run would otherwise
repeat the suite. Datadog's "faulty session" threshold, 30 % by default, computed as
``ceil(tests * 30 / 100)`` (datadog-ci-rb, ``TestRetries::Strategy::RetryNew``); Datadog also
stands down when no test of the project is known, and so does this."""

EFD_MIN_BUDGET_S = 60.0
"""Default budget (s) of a session's repeats, before :data:`EFD_BUDGET_FACTOR` adds to it."""

EFD_BUDGET_FACTOR = 5.0
"""Default budget: :data:`EFD_MIN_BUDGET_S` plus this many times the first executions'
durations of the new tests run so far, so the repeats cost at most about five times what
the new tests cost once (each test's share is still capped by :data:`EFD_TABLE`)."""

REPEATER: pytest.StashKey[Repeater] = pytest.StashKey()
"""Where ``config.stash`` keeps the session's :class:`Repeater` (the recorder reads its
``flipped``)."""


def efd_executions(duration_s: float, cap: int = EFD_MAX_EXECUTIONS) -> int:
    """Executions of a new test whose first execution took ``duration_s`` seconds: the
    :data:`EFD_TABLE` row, at most ``cap``, at least 1."""
    planned = next((n for below, n in EFD_TABLE if duration_s < below), 1)
    return max(1, min(planned, cap))


@attrs.frozen
class EfdDecision:
    """Which selected tests early flake detection repeats: ``new`` (node ids no run of the
    project recorded), or none with ``stood_down`` saying why (None when it runs)."""

    new: frozenset[str]
    selected: int
    stood_down: str | None = None


def decide_efd(
    selected: Sequence[str], known: frozenset[str] | None, problem: str | None = None
) -> EfdDecision:
    """Decide early flake detection for the ``selected`` node ids, ``known`` being those
    the project's database knows (None when it could not be read, ``problem`` saying why).

    Stands down (no test is repeated) when the database could not be read, when it knows
    no test of the project, or when more new tests were selected than
    ``ceil(len(selected) * EFD_FAULTY_SHARE)`` (:data:`EFD_FAULTY_SHARE`).
    """
    unique = set(selected)
    if known is None:
        return EfdDecision(frozenset(), len(unique), f"the database cannot be read ({problem})")
    new = frozenset(unique - known)
    if not known & unique:
        return EfdDecision(frozenset(), len(unique), "no selected test is recorded yet")
    limit = math.ceil(len(unique) * EFD_FAULTY_SHARE)
    if len(new) > limit:
        return EfdDecision(
            frozenset(),
            len(unique),
            f"{len(new)} of the {len(unique)} selected tests are new, more than "
            f"{EFD_FAULTY_SHARE:.0%} ({limit})",
        )
    return EfdDecision(new, len(unique))


KnownLookup = Callable[[Sequence[str]], tuple[frozenset[str] | None, str | None]]
"""Which of these node ids the project's database knows: (known, None), or (None, why it
could not be read)."""


@attrs.frozen
class EfdSettings:
    """Early flake detection as configured: the most executions of one new test (``cap``),
    the session's budget in seconds (None: the default, see :data:`EFD_BUDGET_FACTOR`) and
    how to ask the database which tests it knows."""

    cap: int
    budget_s: float | None
    lookup: KnownLookup


@attrs.define
class Efd:
    """Early flake detection in one process: which tests are new, the cap per test, and
    the budget (s) of this process's repeats (None: the default, which grows with the new
    tests' first executions; under ``pytest-xdist`` each of ``workers`` processes has its
    share of the budget)."""

    decision: EfdDecision
    cap: int = EFD_MAX_EXECUTIONS
    budget_s: float | None = None
    workers: int = 1
    spent_s: float = 0.0
    first_s: float = 0.0

    def budget(self) -> float:
        """This process's budget (s) now."""
        if self.budget_s is not None:
            return self.budget_s / self.workers
        return EFD_MIN_BUDGET_S / self.workers + EFD_BUDGET_FACTOR * self.first_s

    def planned(self, first_s: float) -> int:
        """Note a new test's first execution (``first_s`` seconds); its planned executions."""
        self.first_s += first_s
        return efd_executions(first_s, self.cap)

    def allows(self, cost_s: float) -> bool:
        """Whether one more execution costing about ``cost_s`` s fits the budget; spends it."""
        if self.spent_s + cost_s > self.budget():
            return False
        self.spent_s += cost_s
        return True


def repeat_count(config: pytest.Config) -> int | None:
    """The ``--runstore-repeat`` count (None when not given); a usage error for a value
    that is not a whole number from 1 to :data:`MAX_REPEAT`, or given while
    pytest-rerunfailures has a global rerun count."""
    given = config.getoption("runstore_repeat", None)
    if given is None:
        return None
    try:
        count = int(str(given))
    except ValueError:
        raise pytest.UsageError(
            f"Invalid value for '--runstore-repeat': {given!r} is not a whole number"
        ) from None
    if not 1 <= count <= MAX_REPEAT:
        raise pytest.UsageError(
            f"Invalid value for '--runstore-repeat': must be from 1 to {MAX_REPEAT:,}, "
            f"got {given!r}"
        )
    reruns = _global_reruns(config)
    if reruns:
        raise pytest.UsageError(
            f"'--runstore-repeat' cannot be combined with pytest-rerunfailures' {reruns}: a "
            "repeat counts every execution, and a rerun would hide the flips it looks for"
        )
    return count


def _global_reruns(config: pytest.Config) -> str | None:
    """Where pytest-rerunfailures' global rerun count comes from, when it is above 0."""
    # Read by option name: the plugin registers under its entry point's name or its module's.
    for dest, name in (("force_reruns", "--force-reruns"), ("reruns", "--reruns")):
        value = config.getoption(dest, None)
        if value:
            return f"{name} {value}"
    try:
        ini = int(str(config.getini("reruns") or 0))
    except (ValueError, TypeError):
        return None
    return f"ini reruns = {ini}" if ini else None


def _duration_s(reports: Iterable[Any]) -> float:
    total = 0.0
    for report in reports:
        value = getattr(report, "duration", 0.0)
        if isinstance(value, int | float) and math.isfinite(value) and value > 0:
            total += float(value)
    return total


def _executed(reports: Sequence[Any]) -> bool:
    """Whether an execution ran the test (its call passed or failed, or its setup failed)."""
    return any(r.outcome == "failed" or (r.when == "call" and r.outcome == "passed")
               for r in reports)


def _fresh(item: pytest.Item) -> None:
    """Let the next execution start afresh: a new class instance (pytest makes one per
    item and keeps it on the item), as pytest-rerunfailures does."""
    if getattr(item, "_instance", None) is not None:
        del item._instance  # type: ignore[attr-defined]
        item._obj = None  # type: ignore[attr-defined]


@attrs.define
class _Tally:
    """The executions of one item seen so far (by the process that sees every report)."""

    failed: int = 0
    passed: int = 0
    failing: bool = False
    passing: bool = False

    def take(self, report: Any, outcome: str) -> None:
        if outcome == "failed":
            self.failing = True
        elif outcome == "passed" and report.when == "call" and not _is_subtest(report):
            self.passing = True

    def end_execution(self) -> None:
        if self.failing:
            self.failed += 1
        elif self.passing:
            self.passed += 1
        self.failing = self.passing = False


def _is_subtest(report: Any) -> bool:
    context = getattr(report, "context", None)
    return context is not None and hasattr(context, "msg")


class Repeater:
    """The hooks of ``--runstore-repeat`` and early flake detection (module docstring).

    ``count`` repeats every item that many times; ``efd`` repeats the new tests by its
    table within its budget (``count`` wins when both are given). ``flipped`` maps the node
    id of each repeated test whose executions flipped to (failed, total) executions;
    ``new_tests`` / ``unchecked`` count the new tests early flake detection saw and those it
    ran only once (cut by the budget, or too slow); ``cut_short`` counts those repeated but
    stopped by the budget before their planned executions, ``cut_runs`` their (executions,
    planned executions), summed.
    """

    def __init__(self, config: pytest.Config, count: int | None,
                 efd: EfdSettings | None = None) -> None:
        self._config = config
        self._count = count
        self._settings = efd if count is None else None  # a repeat count wins
        self._efd: Efd | None = None
        self._controls = not hasattr(config, "workerinput")
        self._tallies: dict[str, _Tally] = {}
        self.flipped: dict[str, tuple[int, int]] = {}
        self.new_tests = 0
        self.repeated_new = 0
        self.unchecked = 0
        self.cut_short = 0
        self.cut_runs = (0, 0)
        self.executions = 0

    @property
    def efd(self) -> Efd | None:
        """Early flake detection of this process once decided (None when off or before the
        items are collected)."""
        return self._efd

    def _decide(self, nodeids: Sequence[str]) -> None:
        settings = self._settings
        if settings is None or self._efd is not None:
            return
        known, problem = settings.lookup(nodeids)
        workers = getattr(self._config, "workerinput", {}).get("workercount", 1)
        self._efd = Efd(decide_efd(nodeids, known, problem), settings.cap, settings.budget_s,
                        max(1, int(workers)))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # Where tests run (a plain process, a pytest-xdist worker): every selected item.
        self._decide([item.nodeid for item in session.items])

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        # The controller collects nothing: the first worker's ids, for the summary line.
        self._decide(ids)

    # -- where tests run -----------------------------------------------------------------

    def _plan(self, item: pytest.Item) -> tuple[int | None, bool] | None:
        """(planned executions, or None to decide after the first; new) of an item we
        run, or None to leave the item to pytest."""
        if self._count is not None:
            return self._count, False
        efd = self._efd
        if efd is not None and item.nodeid in efd.decision.new:
            return None, True
        return None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> bool | None:
        plan = self._plan(item)
        if plan is None:
            return None
        planned, new = plan
        efd = self._efd
        ihook = item.ihook
        execution = 0
        while True:
            execution += 1
            ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
            reports = runtestprotocol(item, nextitem=nextitem, log=False)
            cost = _duration_s(reports)
            if planned is None:
                assert efd is not None
                new = _executed(reports)  # a skipped new test is not repeated
                planned = efd.planned(cost) if new else 1
            last = execution >= planned or item.session.shouldstop or item.session.shouldfail
            cut = not last and new and efd is not None and not efd.allows(cost)
            last = last or cut
            for report in reports:
                if last:
                    if report.when == "teardown":
                        setattr(report, REPEAT_ATTR, {"execution": execution,
                                                      "planned": planned, "new": new,
                                                      "cut": cut})
                else:
                    setattr(report, REPEAT_ATTR, {"outcome": report.outcome,
                                                  "execution": execution})
                    report.outcome = "rerun"  # type: ignore[assignment]
                ihook.pytest_runtest_logreport(report=report)
            ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
            if last:
                return True
            _fresh(item)

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report: pytest.TestReport) -> Any:
        marks = getattr(report, REPEAT_ATTR, None)
        if report.outcome != "rerun" or not isinstance(marks, dict) or "outcome" not in marks:  # type: ignore[comparison-overlap]
            return None
        if report.when != "call" and marks["outcome"] != "failed":
            return "", "", ""
        return "rerun", "R", ("RERUN", {"yellow": True})

    # -- where every report arrives ------------------------------------------------------

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not self._controls:
            return
        found = getattr(report, REPEAT_ATTR, None)
        marks: dict[str, Any] = found if isinstance(found, dict) else {}
        tally = self._tallies.get(report.nodeid)
        if tally is None:
            if not marks:
                return
            tally = self._tallies[report.nodeid] = _Tally()
        earlier = "outcome" in marks
        tally.take(report, str(marks["outcome"]) if earlier else report.outcome)
        if report.when != "teardown":
            return
        tally.end_execution()
        if earlier:
            return
        del self._tallies[report.nodeid]
        self._finished(report.nodeid, tally, marks)

    def _finished(self, nodeid: str, tally: _Tally, marks: dict[str, Any]) -> None:
        total = tally.failed + tally.passed
        executions = marks.get("execution")
        self.executions += executions if isinstance(executions, int) else total
        if marks.get("new"):
            self.new_tests += 1
            if isinstance(executions, int) and executions > 1:
                self.repeated_new += 1
                planned = marks.get("planned")
                if marks.get("cut") and isinstance(planned, int):
                    self.cut_short += 1
                    self.cut_runs = (self.cut_runs[0] + executions, self.cut_runs[1] + planned)
            else:
                self.unchecked += 1
        if tally.failed and tally.passed:
            self.flipped[nodeid] = (tally.failed, executions if isinstance(executions, int)
                                    else total)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self._controls and self.flipped and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def summary_lines(self) -> list[str]:
        """The lines runstore adds to pytest's summary about its repeats."""
        lines = []
        efd = self._efd
        if self._count is None and efd is not None:
            if efd.decision.stood_down is not None:
                lines.append(f"runstore: early flake detection stood down: "
                             f"{efd.decision.stood_down}")
            elif self.new_tests:
                text = (f"runstore: early flake detection repeated {self.repeated_new} of "
                        f"{_plural(self.new_tests, 'new test')}")
                if self.cut_short:
                    ran, planned = self.cut_runs
                    text += (f"; {self.cut_short} cut short by the repeat budget ({ran} of "
                             f"{planned} planned executions)")
                if self.unchecked:
                    text += (f"; {self.unchecked} unchecked (run once: the repeat budget was "
                             "spent or the test is too slow)")
                lines.append(text)
        if self.flipped:
            shown = sorted(self.flipped)
            names = ", ".join(f"{n} ({self.flipped[n][0]} of {self.flipped[n][1]} failed)"
                              for n in shown[:5])
            more = f" and {len(shown) - 5} more" if len(shown) > 5 else ""
            word = "new test" if self._count is None else "repeated test"
            # The quarantine may still pass the session (its own line follows and says so).
            lines.append(f"runstore: {_plural(len(shown), word)} flipped, so the session "
                         f"fails unless quarantined (flaky): {names}{more}")
        return lines

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Any:
        result = yield
        if self._controls:
            for line in self.summary_lines():
                terminalreporter.write_line(line)
        return result


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


MAX_EFD_BUDGET_S = 7 * 24 * 3600.0
"""Largest ``--runstore-efd-budget`` accepted (a week, in seconds)."""


def efd_enabled(config: pytest.Config) -> bool:
    """Whether early flake detection was asked for (``--runstore-efd`` or ini
    ``runstore_efd = true``)."""
    return bool(config.getoption("runstore_efd", False) or config.getini("runstore_efd"))


def efd_settings(config: pytest.Config) -> EfdSettings:
    """The early flake detection options: ``--runstore-efd-max`` / ini ``runstore_efd_max``
    (most executions of one new test, 1 to 1,000; 0 or unset: :data:`EFD_MAX_EXECUTIONS`),
    ``--runstore-efd-budget`` / ini ``runstore_efd_budget`` (seconds of repeats in the
    session, 0 for none; unset: the default of :data:`EFD_BUDGET_FACTOR`). A usage error
    names the value that is not one. The database and project are the recorder's
    (``resolve_settings``), read only."""
    from runstore.recorder._recorder import _count, resolve_settings

    cap = _count(config, "runstore_efd_max", int, "a whole number of executions",
                 f"the default, {EFD_MAX_EXECUTIONS}", 1_000)
    budget = _count(config, "runstore_efd_budget", float, "a number of seconds", "no repeats",
                    MAX_EFD_BUDGET_S)
    recorded = resolve_settings(config)
    return EfdSettings(int(cap or EFD_MAX_EXECUTIONS), budget,
                       _database_lookup(recorded.db_path, recorded.project))


def _database_lookup(db_path: str, project: str) -> KnownLookup:
    """:data:`KnownLookup` over the database at ``db_path`` (opened for reading only, one
    ``DataReader.known_tests`` call); a missing database file knows no test, and so does a
    file with no test-run tables yet (the recorder of this very session may be creating it
    at this moment: its migration, not yet committed, is not visible to this reader)."""

    def lookup(nodeids: Sequence[str]) -> tuple[frozenset[str] | None, str | None]:
        import os

        from returns.result import Success

        from runstore.layers import build, live, merge, scrub_database
        from runstore.layers._layer import Layer
        from runstore.layers._open import postgres_url
        from runstore.recorder._recorder import CONNECTION, PinnedClock
        from runstore.services.clock import Clock
        from runstore.services.test_runs import DataReader

        if not postgres_url(db_path) and not (os.path.isfile(db_path) and _has_tests(db_path)):
            return frozenset(), None
        try:
            layer = merge(live(db_path, CONNECTION, access="read"),
                          Layer.value(Clock, PinnedClock()))
            with build(layer) as container:
                known = container.get(DataReader).known_tests(project, nodeids)
        except Exception as exc:  # a broken database must not stop the tests
            return None, scrub_database(f"{type(exc).__name__}: {exc}", db_path)
        if isinstance(known, Success):
            return known.unwrap(), None
        return None, scrub_database(str(known.failure()), db_path)

    return lookup


def _has_tests(db_path: str) -> bool:
    """Whether the SQLite file ``db_path`` has its ``tests`` table; True when the file
    cannot be read as SQLite, so that the layer opened next names the problem."""
    import apsw

    try:
        probe = apsw.Connection(db_path, flags=apsw.SQLITE_OPEN_READONLY)
        try:
            found = probe.execute(
                "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'tests'"
            ).fetchone()
        finally:
            probe.close()
    except apsw.Error:
        return True
    return found is not None


def install_repeats(config: pytest.Config) -> None:
    """Register the session's :class:`Repeater` (``--runstore-repeat``, early flake
    detection); a usage error for a bad value (:func:`repeat_count`, :func:`efd_settings`)."""
    count = repeat_count(config)
    settings = efd_settings(config) if efd_enabled(config) and count is None else None
    repeater = Repeater(config, count, settings)
    config.stash[REPEATER] = repeater
    config.pluginmanager.register(repeater, "runstore-repeater")
