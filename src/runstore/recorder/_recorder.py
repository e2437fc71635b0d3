"""The recording plugin: one run per pytest session, written in short batches.

Only the process that sees every report records: a plain pytest process, or the
``pytest-xdist`` controller (workers only annotate their reports). The rules it keeps:

- The database path, project and invocation id are fixed when pytest configures; the clock
  is ``time.time_ns`` as bound when this module was imported, and batch ages use
  ``time.monotonic``, so tests that ``chdir`` or fake ``time.time``/``datetime.now`` do not
  move or corrupt the record.
- Finished items are buffered and written in batches of at most :data:`BATCH_ITEMS` items
  or :data:`BATCH_SECONDS` of age (each batch one ``BEGIN IMMEDIATE`` unit of work), so a
  killed run keeps what finished before its last second and memory stays flat.
- The run ends ``interrupted`` on Ctrl-C (``pytest_keyboard_interrupt``, also called for
  ``pytest.exit``, but not for pytest's own stop after collection errors) or an internal
  error; ``failed`` when an item or a collector failed or pytest's exit code is neither
  "OK" nor "no tests collected" (a usage error, a coverage threshold); else ``passed``.
  Before a run begins, a ``running`` run of the same project whose process is gone (same
  host, dead pid), or last written more than :data:`STALE_AFTER` ago, is marked
  ``aborted``.
- Nothing here changes pytest's outcome, exit code or output beyond one summary line. The
  first database failure (busy, broken, refused) is reported once on that line; recording
  stops and the tests go on.
"""

from __future__ import annotations

import os
import shlex
import time
import uuid
from collections.abc import Generator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
from returns.result import Failure, Result

from runstore.layers import ConnectionSettings, Layer, build, merge, sqlite
from runstore.recorder._convert import (
    ItemAssembler,
    PathResolver,
    collection_record,
    is_failing,
)
from runstore.recorder._coverage import session_coverage
from runstore.recorder._environment import environment, host_name
from runstore.recorder._text import clean_identifier, clean_text, safe_str
from runstore.services.clock import Clock
from runstore.services.errors import IllegalTransition, NotFound
from runstore.services.testruns import (
    FAILING_OUTCOMES,
    Classification,
    CollectionError,
    DataReader,
    DataStore,
    RunId,
    RunStart,
    RunStatus,
    RunSummary,
    TestResult,
)

__all__ = [
    "BATCH_ITEMS",
    "BATCH_SECONDS",
    "STALE_AFTER",
    "PinnedClock",
    "Recorder",
    "RecorderSettings",
    "resolve_settings",
]

_time_ns = time.time_ns  # bound at import: a test that fakes time.time_ns cannot reach it
_monotonic = time.monotonic

BATCH_ITEMS = 200
"""Most finished items buffered before they are written."""

BATCH_SECONDS = 1.0
"""Oldest age (s) of a buffered item before the buffer is written at the next report."""

STALE_AFTER = timedelta(hours=24)
"""A ``running`` run last written longer ago than this is abandoned, whatever its host."""

CONNECTION = ConnectionSettings(busy_timeout_ms=2_000, busy_budget_ms=5_000)
"""Wait at most ~5 s for a busy database in one write, then give up and warn."""

DEFAULT_DB = os.path.join(".runstore", "runstore.db")

_CLEAN_EXITS = frozenset({pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED})
"""Exit codes of a session that went as it should; any other (tests failed, collection
errors, a usage error such as a missing path, a plugin failing the run) makes it failed."""


@attrs.frozen
class PinnedClock:
    """The wall clock as it was when runstore's recorder was imported (epoch ms)."""

    def now_ms(self) -> int:
        """Return the current time as integer epoch milliseconds UTC."""
        return _time_ns() // 1_000_000


def _now() -> datetime:
    return datetime.fromtimestamp(_time_ns() / 1e9, tz=UTC)


@attrs.frozen
class RecorderSettings:
    """What a recording session is fixed to when pytest configures.

    ``db_path`` is absolute (or ``:memory:``); ``cli_db`` is the ``--db`` the summary line
    must name for ``runstore`` run from the invocation directory to find it (None when the
    CLI's default finds it).
    """

    db_path: str
    project: str
    invocation_id: str
    rootdir: str
    invocation_dir: str
    cli_db: str | None
    warning: str | None = None


def _absolute(path: str, base: str) -> str:
    if path == ":memory:":
        return path
    return os.path.normpath(os.path.join(base, os.path.expanduser(path)))


def resolve_settings(config: pytest.Config) -> RecorderSettings:
    """Fix the database path, project and invocation id of this session.

    Database: ``--runstore-db``, else ``$RUNSTORE_DB``, else ``.runstore/runstore.db``,
    relative paths taken from the invocation directory. Project: ``--runstore-project``,
    else ini ``runstore_project``, else the rootdir's name.
    """
    invocation_dir = str(config.invocation_params.dir)
    env_db = os.environ.get("RUNSTORE_DB") or None
    option_db = config.getoption("runstore_db", None)
    db_path = _absolute(option_db or env_db or DEFAULT_DB, invocation_dir)
    cli_default = _absolute(env_db or DEFAULT_DB, invocation_dir)
    named = {
        "--runstore-project": config.getoption("runstore_project", None) or "",
        "ini runstore_project": str(config.getini("runstore_project") or ""),
    }
    given = next(((where, name) for where, name in named.items() if name), None)
    project = config.rootpath.name or "default"
    warning = None
    if given is not None and given[1].strip():
        project = given[1]
    elif given is not None:
        warning = f"{given[0]} is blank; recorded as project {project!r}"
    return RecorderSettings(
        db_path=db_path,
        project=clean_identifier(project),
        invocation_id=uuid.uuid4().hex,
        rootdir=str(config.rootpath),
        invocation_dir=invocation_dir,
        cli_db=None if db_path == cli_default else db_path,
        warning=warning,
    )


def _alive(pid: int) -> bool:
    if pid == os.getpid():  # an earlier process that had our pid
        return False
    if os.name != "posix":  # no harmless liveness probe: assume alive
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, it is someone else's
        return True
    return True


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


class Recorder:
    """pytest hooks recording one run of one project into the runstore database."""

    def __init__(self, config: pytest.Config, settings: RecorderSettings) -> None:
        self._config = config
        self._settings = settings
        self._resolver = PathResolver(settings.rootdir, settings.invocation_dir)
        self._assembler = ItemAssembler(self._resolver)
        self._stack = ExitStack()
        self._store: DataStore | None = None
        self._reader: DataReader | None = None
        self._run_id: RunId | None = None
        self._writing = False
        self._results: list[TestResult] = []
        self._collection_errors: list[CollectionError] = []
        self._seen_collectors: set[str] = set()
        self._buffered_since = 0.0
        self._failing = False
        self._interrupted = False
        self._problem: str | None = None
        self._line: str | None = None
        if settings.warning is not None:
            self._warn(settings.warning)

    def note_markers(self, nodeid: str, names: list[str]) -> None:
        """Take an item's markers from the :class:`~runstore.recorder.Annotator`."""
        self._assembler.note_markers(nodeid, names)

    # -- the database --------------------------------------------------------------------

    def _warn(self, reason: str) -> None:
        """Remember the first problem for the summary line."""
        if self._problem is None:
            self._problem = clean_text(reason)

    def _fail(self, reason: str) -> None:
        """Remember the first problem and stop writing results; the tests go on."""
        self._warn(reason)
        self._writing = False

    def _ok(self, result: Result[Any, Any], doing: str) -> Any | None:
        if isinstance(result, Failure):
            self._fail(f"{doing}: {safe_str(result.failure())}")
            return None
        return result.unwrap()

    def _open(self) -> None:
        layer: Layer = merge(
            sqlite(self._settings.db_path, CONNECTION),
            Layer.value(Clock, PinnedClock()),  # type: ignore[type-abstract]
        )
        container = self._stack.enter_context(build(layer))
        self._store = container.get(DataStore)
        self._reader = container.get(DataReader)

    def _abort_stale(self, store: DataStore, reader: DataReader) -> None:
        now = _now()
        project = self._settings.project
        if self._ok(store.abort_stale_runs(project, older_than=now - STALE_AFTER),
                    "marking stale runs") is None:
            return
        running: list[RunSummary] = []
        cursor: str | None = None
        while True:  # every running run of the project, whatever its age
            listed = reader.list_runs(project, status=RunStatus.RUNNING, limit=100, cursor=cursor)
            if isinstance(listed, Failure):
                return
            page = listed.unwrap()
            running.extend(page.items)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        host = host_name()
        for run in running:
            env = run.environment
            if (run.status is RunStatus.RUNNING and env.pid is not None
                    and env.host == host and not _alive(env.pid)):
                finished = store.finish_run(run.id, RunStatus.ABORTED, now)
                if isinstance(finished, Failure) and not isinstance(
                    finished.failure(), IllegalTransition | NotFound
                ):  # another process may have aborted it first
                    self._fail(f"marking run {run.id} aborted: {safe_str(finished.failure())}")
                    return

    def _begin(self) -> None:
        self._open()
        store, reader = self._store, self._reader
        assert store is not None
        assert reader is not None
        self._writing = True
        self._abort_stale(store, reader)
        if self._writing:
            start = RunStart(
                project=self._settings.project,
                invocation_id=self._settings.invocation_id,
                started_at=_now(),
                environment=environment(self._config),
            )
            self._run_id = self._ok(store.begin_run(start), "starting the run")

    def _flush(self) -> None:
        store, run_id = self._store, self._run_id
        if store is None or run_id is None or not self._writing:
            self._results.clear()
            self._collection_errors.clear()
            return
        # A buffer is emptied only once written: a Ctrl-C during a write leaves it for the
        # final flush (writing an item twice replaces it, so that is harmless).
        if self._collection_errors:
            if self._ok(store.record_collection_errors(run_id, self._collection_errors),
                        "writing collection errors") is None:
                return
            self._collection_errors = []
        if self._results:
            if self._ok(store.record_results(run_id, self._results), "writing results") is None:
                return
            self._results = []

    def _buffer(self, record: TestResult | CollectionError) -> None:
        if not self._results and not self._collection_errors:
            self._buffered_since = _monotonic()
        if isinstance(record, CollectionError):
            self._collection_errors.append(record)
            self._failing = True
        else:
            self._results.append(record)
            self._failing = self._failing or is_failing(record.phases)
        if (len(self._results) >= BATCH_ITEMS
                or _monotonic() - self._buffered_since >= BATCH_SECONDS):
            self._flush()

    def _status(self, exitstatus: int) -> RunStatus:
        if self._interrupted or exitstatus == pytest.ExitCode.INTERNAL_ERROR:
            return RunStatus.INTERRUPTED
        if self._failing or exitstatus not in _CLEAN_EXITS:
            return RunStatus.FAILED
        return RunStatus.PASSED

    def _finish(self, exitstatus: int) -> None:
        self._flush()
        store, reader, run_id = self._store, self._reader, self._run_id
        if store is None or reader is None or run_id is None:
            return
        # Results lost to a database problem make the record incomplete: keep it out of
        # history by ending it interrupted.
        status = self._status(exitstatus) if self._writing else RunStatus.INTERRUPTED
        try:
            files = session_coverage(self._config, self._resolver)
        except Exception as exc:  # a coverage problem must not lose the run
            self._warn(f"reading coverage: {type(exc).__name__}: {safe_str(exc)}")
            files = ()
        if files and self._writing:
            written = store.write_coverage(run_id, files)
            if isinstance(written, Failure):
                self._warn(f"writing coverage: {safe_str(written.failure())}")
        summary = self._ok(store.finish_run(run_id, status, _now()), "finishing the run")
        if summary is not None:
            self._line = self._summary_line(reader, summary)

    def _summary_line(self, reader: DataReader, summary: RunSummary) -> str:
        run = summary.id
        show = "runstore show" if self._settings.cli_db is None else (
            f"runstore --db {shlex.quote(self._settings.cli_db)} show"
        )
        if summary.status is RunStatus.INTERRUPTED:
            detail = f"recorded as interrupted: {_plural(summary.total, 'finished item')}"
        else:
            classified = reader.classify(run)
            parts = []
            if isinstance(classified, Failure):
                parts.append(_plural(summary.total, "item"))
            else:
                kinds = [c.classification for c in classified.unwrap()]
                new = kinds.count(Classification.NEW_FAILURE)
                flaky = kinds.count(Classification.FLAKY)
                recovered = kinds.count(Classification.RECOVERED)
                failing = sum(summary.counts.get(o.value, 0) for o in FAILING_OUTCOMES)
                if failing and new == failing and not flaky:
                    parts.append(_plural(new, "new failure"))
                elif failing:
                    parts += [f"{failing} failed", f"{new} new" if new else "none new"]
                elif not summary.collection_errors:
                    parts.append("no failures")
                if flaky:
                    parts.append(f"{flaky} flaky")
                if recovered:
                    parts.append(f"{recovered} recovered")
            if summary.collection_errors:
                parts.append(_plural(summary.collection_errors, "collection error"))
            detail = "recorded: " + ", ".join(parts)
        problem = f" (warning: {self._problem})" if self._problem else ""
        return f"runstore: run {run} {detail}{problem} ({show} {run})"

    def _guard(self, doing: str, action: Any, *args: Any) -> None:
        """Run ``action``; an unexpected exception becomes the one warning, never a failure."""
        try:
            action(*args)
        except Exception as exc:
            self._fail(f"{doing}: {type(exc).__name__}: {safe_str(exc)}")

    # -- pytest hooks --------------------------------------------------------------------

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self._guard("opening the database", self._begin)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.passed or not self._writing or report.nodeid in self._seen_collectors:
            return
        self._seen_collectors.add(report.nodeid)  # xdist workers each report it
        self._guard("recording a collection report", self._collected, report)

    def _collected(self, report: pytest.CollectReport) -> None:
        record = collection_record(self._resolver, report)
        if record is not None:
            self._buffer(record)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not self._writing:
            return
        try:  # _guard, inlined: this runs for every phase of every test
            result = self._assembler.add(report)
            if result is not None:
                self._buffer(result)
        except Exception as exc:
            self._fail(f"recording a test report: {type(exc).__name__}: {safe_str(exc)}")

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        # pytest ends a session stopped after collection errors (or by --stepwise) with its
        # own Session.Interrupted, a KeyboardInterrupt too: that run is not cut short.
        if not isinstance(excinfo.value, pytest.Session.Interrupted):
            self._interrupted = True

    def pytest_internalerror(self) -> None:
        self._interrupted = True

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self._guard("finishing the run", self._finish, int(exitstatus))
        if self._line is None and self._problem is not None:
            where = f"run {self._run_id}" if self._run_id is not None else "this run"
            self._line = f"runstore: warning: {where} not recorded: {self._problem}"
        self._guard("closing the database", self._stack.close)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Generator[None, None, None]:
        # Outermost wrapper: the line follows every other summary (the short test summary
        # included) and precedes pytest's closing "N passed" line.
        yield
        if self._line is not None:
            terminalreporter.write_line(self._line)

    def pytest_unconfigure(self) -> None:
        self._guard("closing the database", self._stack.close)

