"""The recording plugin: one run per pytest session, written by one writer thread.

Only the process that sees every report records: a plain pytest process, or the
``pytest-xdist`` controller (workers only annotate their reports). The rules it keeps:

- The database path, project, invocation id and retention are fixed when pytest
  configures. The default database is ``.runstore/runstore.db`` at pytest's rootdir, so
  every folder of a project records into one file. The clock is ``time.time_ns`` as bound
  when this module was imported, and batch ages use ``time.monotonic``, so tests that
  ``chdir`` or fake ``time.time``/``datetime.now`` do not move or corrupt the record.
- The run starts when pytest's session starts: ``started_at`` is the instant pytest's
  terminal reporter measures its ``in N s`` from (``_session_start``, or pytest 8.3's
  ``_sessionstarttime``, taken in its own ``pytest_sessionstart``; our own stamp right
  after it when there is no terminal reporter), and ends when the results are written at
  ``pytest_sessionfinish``, before the terminal summary that pytest's ``in N s`` still
  counts (other plugins' ``pytest_terminal_summary``: Hypothesis's imports hypothesis
  there). Opening the database, waiting for a busy one and reading git happen after that
  instant, on the writer thread, and do not shorten the recorded duration.
- All database work happens on one writer thread (:mod:`runstore.recorder._writer`): the
  hooks hand it finished items, and it writes them in batches of at most
  :data:`BATCH_ITEMS` items, or when the oldest is :data:`BATCH_SECONDS` old even while a
  test hangs, so a killed run keeps every result that finished a second before the kill.
  The layer is composed, and its driver imported, on the main thread before that thread
  starts: an import there would race pytest over logging's table of loggers (``_start``).
- The run ends ``interrupted`` on Ctrl-C (``pytest_keyboard_interrupt``, also called for
  ``pytest.exit``, but not for pytest's own stop after collection errors), an internal
  error, or SIGTERM, which is recorded at once and then handed on as without runstore
  (:mod:`runstore.recorder._signals`); ``failed`` when an item or a collector failed or
  pytest's exit code is neither "OK" nor "no tests collected" (a usage error, a coverage
  threshold); else ``passed``. Before a run begins, a ``running`` run of the same project
  whose process is gone (same host, dead pid), or last written more than
  :data:`STALE_AFTER` ago, is marked ``aborted``.
- After a run is finished, the retention policy (``--runstore-keep-runs``, default
  :data:`DEFAULT_KEEP_RUNS`; ``--runstore-max-age-days``, default none) is applied with
  ``DataStore.prune_runs``, which never removes a running run; with ``-v`` a line says
  what it removed.
- Nothing here changes pytest's outcome, exit code or output beyond one summary line (two
  with ``-v`` when runs were pruned). The first database failure (busy, broken, refused)
  is reported once on that line; recording stops and the tests go on.
"""

from __future__ import annotations

import math
import os
import shlex
import threading
import time
import uuid
from collections.abc import Callable, Generator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
from returns.result import Failure, Result

from runstore.layers import (
    DEFAULT_DB_PATH,
    ConnectionSettings,
    Layer,
    build,
    database_path_problem,
    find_project_database,
    live,
    merge,
    resolve_database,
    scrub_database,
    shown_database,
)
from runstore.recorder._convert import (
    ItemAssembler,
    PathResolver,
    collection_record,
    is_failing,
)
from runstore.recorder._coverage import session_coverage, session_test_coverage
from runstore.recorder._environment import GitProbe, environment, host_name
from runstore.recorder._quarantine import QuarantineGate
from runstore.recorder._repeat import REPEATER
from runstore.recorder._selection import selection_at_start
from runstore.recorder._signals import TermHook
from runstore.recorder._text import clean_identifier, clean_text, safe_str
from runstore.recorder._writer import Writer, WriterTimeout
from runstore.services._test_runs_rules import (
    MAX_AGE_DAYS,
    MAX_KEEP_RUNS,
    session_id_problem,
    valid_policy,
)
from runstore.services.clock import Clock
from runstore.services.errors import IllegalTransition, NotFound
from runstore.services.test_runs import (
    DEFAULT_FLAKY_POLICY,
    FAILING_OUTCOMES,
    Classification,
    CollectionError,
    DataReader,
    DataStore,
    FileCoverage,
    FlakyPolicy,
    Phase,
    RunId,
    RunRetentionPolicy,
    RunStart,
    RunStatus,
    RunSummary,
    Selection,
    TestLines,
    TestResult,
)

__all__ = [
    "BATCH_ITEMS",
    "BATCH_SECONDS",
    "DEFAULT_KEEP_RUNS",
    "STALE_AFTER",
    "PinnedClock",
    "Recorder",
    "RecorderSettings",
    "resolve_settings",
]

_time_ns = time.time_ns  # bound at import: a test that fakes time.time_ns cannot reach it

BATCH_ITEMS = 200
"""Most finished items buffered before they are written."""

BATCH_SECONDS = 0.5
"""Oldest age (s) of a buffered item before the writer thread writes the buffer, whether
or not another report arrives: with a write taking milliseconds, every result that
finished a second before a SIGKILL is stored."""

DEFAULT_KEEP_RUNS = 400
"""Runs kept per project after each recorded run when nothing else is configured: a year
of daily CI (365 runs) with room to spare, while a database recording forever stays
bounded. History windows (10 outcomes per test) and failure signatures outlive pruning,
so "new" and "flaky" keep their memory; no age limit by default, since a project that
records rarely would otherwise lose its only history."""

STALE_AFTER = timedelta(hours=24)
"""A ``running`` run last written longer ago than this is abandoned, whatever its host."""

CONNECTION = ConnectionSettings(busy_timeout_ms=2_000, busy_budget_ms=5_000)
"""Wait at most ~5 s for a busy database in one write, then give up and warn."""

FINISH_TIMEOUT = 60.0
"""Longest wait (s) at session end for the writer to finish the run (a few busy budgets)."""

TERM_TIMEOUT = 5.0
"""Longest wait (s) on SIGTERM for the writer to mark the run interrupted (one busy
budget): a CI cancel usually allows about ten seconds before it kills."""

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

    ``db_path`` is absolute (or ``:memory:``, or a ``postgresql://`` URL); ``env_db`` is
    ``$RUNSTORE_DB`` made absolute (None when unset), which the CLI reads as well.
    ``retention`` is the policy applied after the run (None: keep every run).
    ``session_id`` is the agent session the run is recorded for (None: none).
    """

    db_path: str
    project: str
    invocation_id: str
    rootdir: str
    invocation_dir: str
    env_db: str | None
    retention: RunRetentionPolicy | None = attrs.field(
        factory=lambda: RunRetentionPolicy(DEFAULT_KEEP_RUNS)
    )
    warning: str | None = None
    session_id: str | None = None
    policy: FlakyPolicy = DEFAULT_FLAKY_POLICY
    """The flaky policy of the summary line's verdicts: ``[tool.runstore.flaky]`` of the
    ``pyproject.toml`` at pytest's rootdir (``runstore._config``)."""


def _session_id(config: pytest.Config) -> str | None:
    """The agent session of this run: ``--runstore-session``, else ``$RUNSTORE_SESSION_ID``
    (empty is unset, as for ``RUNSTORE_DB``), else None. A value ``RunStart.session_id``
    would refuse (empty option, blank, longer than ``MAX_SESSION_ID_CHARS``, a control
    character) is a usage error naming where it came from, with the service's reason; so is
    an environment value of white space only: unlike empty it is not unset, since it is
    most likely an id that went missing (``"$ID "``), and a run recorded unlinked would hide
    that."""
    given = config.getoption("runstore_session", None)
    where = "'--runstore-session'"
    if given is None:
        given, where = os.environ.get("RUNSTORE_SESSION_ID") or None, "RUNSTORE_SESSION_ID"
        if given is None:
            return None
    problem = session_id_problem(given, "session id")
    if problem is not None:
        reason = "the session id is blank" if not given.strip() else problem.reason
        raise pytest.UsageError(f"Invalid value for {where}: {reason}")
    return str(given)


def _checked_db(value: str | None, hint: str) -> str | None:
    """``value`` when it may name a database (None when not given); else a usage error
    worded as the CLI words it."""
    if value is None:
        return None
    problem = database_path_problem(value)
    if problem is not None:
        raise pytest.UsageError(f"Invalid value for {hint}: {problem}")
    return value


def _count(config: pytest.Config, name: str, convert: Callable[[str], float], noun: str,
           zero: str, most: float) -> float | None:
    """The value of retention setting ``name``: the flag, else the ini value, else None.

    A usage error names where the value came from when ``convert`` refuses it (``noun``
    says what was expected) or it is not a finite number from 0 (``zero`` says what 0
    means) to ``most``; the value is quoted as given.
    """
    given = config.getoption(name, None)
    where, text = f"'--{name.replace('_', '-')}'", "" if given is None else str(given)
    if given is None:
        where, text = f"ini {name}", str(config.getini(name) or "").strip()
        if not text:
            return None
    try:
        value = convert(text)
    except ValueError:
        raise pytest.UsageError(f"Invalid value for {where}: {text!r} is not {noun}") from None
    if not (math.isfinite(value) and 0 <= value <= most):
        if convert is int:  # a count: no "finite", and 0's meaning after the range
            raise pytest.UsageError(f"Invalid value for {where}: must be a whole number from "
                                    f"0 to {most:,} (0: {zero}), got {text!r}")
        raise pytest.UsageError(f"Invalid value for {where}: must be a finite number from 0 "
                                f"({zero}) to {most:,}, got {text!r}")
    return value


def _retention(config: pytest.Config) -> RunRetentionPolicy | None:
    """The retention policy of the options (see the plugin's docstring): None keeps every
    run. A usage error for a value that is not a count of runs or an age in days."""
    keep = _count(config, "runstore_keep_runs", int, "a whole number of runs",
                  "keep every run", MAX_KEEP_RUNS)
    age = _count(config, "runstore_max_age_days", float, "a number of days", "no age limit",
                 MAX_AGE_DAYS)
    keep_runs = DEFAULT_KEEP_RUNS if keep is None else int(keep) or MAX_KEEP_RUNS
    if keep_runs == MAX_KEEP_RUNS and not age:
        return None
    policy = RunRetentionPolicy(keep_runs, age or None)
    checked = valid_policy(policy)
    if isinstance(checked, Failure):
        raise pytest.UsageError(f"Invalid retention: {checked.failure()}")
    return policy


def resolve_settings(config: pytest.Config) -> RecorderSettings:
    """Fix the database path, project, invocation id and retention of this session.

    Database: ``--runstore-db``, else ``$RUNSTORE_DB`` (relative paths taken from the
    invocation directory), else ``.runstore/runstore.db`` at pytest's rootdir. Project:
    ``--runstore-project``, else ini ``runstore_project``, else the rootdir's name.

    Raises ``pytest.UsageError`` (pytest exits 4 before any test runs) for a blank or
    directory database path, worded as the CLI refuses its ``--db``, and for a retention
    value that is not a count or an age.
    """
    invocation_dir = str(config.invocation_params.dir)
    rootdir = str(config.rootpath)
    # An empty RUNSTORE_DB is unset, as click (the CLI) reads environment variables.
    env_db = _checked_db(os.environ.get("RUNSTORE_DB") or None, "RUNSTORE_DB")
    option_db = _checked_db(config.getoption("runstore_db", None), "'--runstore-db'")
    given = option_db or env_db
    db_path = (resolve_database(given, invocation_dir) if given is not None
               else os.path.join(rootdir, DEFAULT_DB_PATH))
    named = {
        "--runstore-project": config.getoption("runstore_project", None) or "",
        "ini runstore_project": str(config.getini("runstore_project") or ""),
    }
    chosen = next(((where, name) for where, name in named.items() if name), None)
    project = config.rootpath.name or "default"
    warning = None
    if chosen is not None and chosen[1].strip():
        project = chosen[1]
    elif chosen is not None:
        warning = f"{chosen[0]} is blank; recorded as project {project!r}"
    return RecorderSettings(
        db_path=db_path,
        project=clean_identifier(project),
        invocation_id=uuid.uuid4().hex,
        rootdir=rootdir,
        invocation_dir=invocation_dir,
        env_db=None if env_db is None else resolve_database(env_db, invocation_dir),
        retention=_retention(config),
        warning=warning,
        session_id=_session_id(config),
        policy=_policy(rootdir),
    )


def _policy(rootdir: str) -> FlakyPolicy:
    """The flaky policy of ``pyproject.toml`` at ``rootdir`` (the defaults without one);
    ``pytest.UsageError`` naming the file, key and reason when runstore refuses it."""
    from runstore._config import CONFIG_FILE, read_config

    found = read_config(os.path.join(rootdir, CONFIG_FILE))
    if isinstance(found, Failure):
        raise pytest.UsageError(f"runstore: {found.failure()}")
    return found.unwrap().flaky


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


def _session_start(config: pytest.Config) -> datetime:
    """The instant pytest's terminal reporter measures the session from, else now.

    pytest 8.4 and later keep it as ``_session_start``, a ``_pytest.timing.Instant``
    (wall time in ``.time``); pytest 8.3 as ``_sessionstarttime``, a float of
    ``time.time()`` (both set in the reporter's own ``pytest_sessionstart``)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    stamp = getattr(getattr(reporter, "_session_start", None), "time", None)
    if stamp is None:
        stamp = getattr(reporter, "_sessionstarttime", None)
    if isinstance(stamp, float) and math.isfinite(stamp) and stamp > 0:
        return datetime.fromtimestamp(stamp, tz=UTC)
    return _now()


class Recorder:
    """pytest hooks recording one run of one project into the runstore database.

    The hooks run on pytest's main thread and hand work to the :class:`Writer`, which owns
    the database; ``_run_id``, ``_writing``, ``_finished`` and the problem are set by the
    writer thread and read by the hooks (single attribute writes, under the GIL).
    """

    def __init__(self, config: pytest.Config, settings: RecorderSettings) -> None:
        self._config = config
        self._settings = settings
        self._resolver = PathResolver(settings.rootdir, settings.invocation_dir)
        self._assembler = ItemAssembler(self._resolver)
        self._stack = ExitStack()
        self._layer: Layer | None = None
        self._writer = Writer(self._open, self._write_batch,
                              max_age=BATCH_SECONDS, max_items=BATCH_ITEMS)
        self._term = TermHook(self._on_sigterm)
        self._lock = threading.RLock()
        self._selection = Selection()
        self._deselected = 0
        self._selection_sent = False
        self._run_id: RunId | None = None
        self._started = False
        self._writing = False
        self._finished = False
        self._seen_collectors: set[str] = set()
        self._failing = False
        self._interrupted = False
        self._problem: str | None = None
        self._line: str | None = None
        self._pruned: str | None = None
        self._git: GitProbe | None = None
        self._test_lines: tuple[TestLines, ...] | None = None  # per-test coverage, at the end
        if settings.warning is not None:
            self._warn(settings.warning)
        # The quarantine (runstore.recorder._quarantine): None when the file holds no entry.
        gate = QuarantineGate.at(settings.rootdir)
        self._gate = gate if gate.problem is not None or (
            gate.quarantine is not None and gate.quarantine.entries) else None
        self._collect_failed = False
        self._quarantine_lines: list[str] = []

    def note_markers(self, nodeid: str, names: list[str]) -> None:
        """Take an item's markers from the :class:`~runstore.recorder.Annotator`."""
        self._assembler.note_markers(nodeid, names)

    def note_fingerprint(self, nodeid: str, fingerprint: str | None) -> None:
        """Take an item's code fingerprint from the :class:`~runstore.recorder.Annotator`."""
        self._assembler.note_fingerprint(nodeid, fingerprint)

    # -- problems ------------------------------------------------------------------------

    def _warn(self, reason: str) -> None:
        """Remember the first problem for the summary line (any thread)."""
        with self._lock:
            if self._problem is None:
                self._problem = clean_text(scrub_database(reason, self._settings.db_path))

    def _fail(self, reason: str) -> None:
        """Remember the first problem and stop writing results; the tests go on."""
        self._warn(reason)
        self._writing = False

    def _ok(self, result: Result[Any, Any], doing: str) -> Any | None:
        if isinstance(result, Failure):
            self._fail(f"{doing}: {safe_str(result.failure())}")
            return None
        return result.unwrap()

    def _guard(self, doing: str, action: Callable[..., Any], *args: Any) -> None:
        """Run ``action``; an unexpected exception becomes the one warning, never a failure."""
        try:
            action(*args)
        except WriterTimeout as exc:
            self._fail(f"{doing}: {exc}")
        except Exception as exc:
            self._fail(f"{doing}: {type(exc).__name__}: {safe_str(exc)}")

    # -- on the writer thread ------------------------------------------------------------

    def _open(self) -> tuple[DataStore, DataReader, Callable[[], None]]:
        assert self._layer is not None  # composed by _start before the thread starts
        try:
            container = self._stack.enter_context(build(self._layer))
        except Exception as exc:
            self._fail(f"opening the database: {type(exc).__name__}: {safe_str(exc)}")
            raise
        return container.get(DataStore), container.get(DataReader), self._stack.close

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

    def _begin(self, store: DataStore, reader: DataReader, start: RunStart) -> None:
        self._abort_stale(store, reader)
        if not self._writing:
            return
        found = environment(self._config, self._git)
        # The command line may hold the database URL: its password is never stored.
        argv = tuple(scrub_database(arg, self._settings.db_path) for arg in found.command_line)
        start = attrs.evolve(start, environment=attrs.evolve(found, command_line=argv))
        self._run_id = self._ok(store.begin_run(start), "starting the run")

    def _write_batch(
        self, store: DataStore, results: list[TestResult], errors: list[CollectionError]
    ) -> bool:
        run_id = self._run_id
        if run_id is None or not self._writing or self._finished:
            return False
        if errors and self._ok(store.record_collection_errors(run_id, errors),
                               "writing collection errors") is None:
            return False
        return not results or self._ok(store.record_results(run_id, results),
                                       "writing results") is not None

    def _write_selection(self, store: DataStore, _reader: DataReader,
                         selection: Selection) -> None:
        run_id = self._run_id
        if run_id is not None and self._writing and not self._finished:
            self._ok(store.record_selection(run_id, selection), "recording the selection")

    def _finish_run(self, store: DataStore, reader: DataReader, status: RunStatus,
                    files: tuple[FileCoverage, ...]) -> RunSummary | None:
        run_id = self._run_id
        if run_id is None or self._finished:
            return None
        if files and self._writing:
            written = store.write_coverage(run_id, files)
            if isinstance(written, Failure):
                self._warn(f"writing coverage: {safe_str(written.failure())}")
            if self._test_lines is not None:
                per_test = store.write_test_coverage(run_id, self._test_lines)
                if isinstance(per_test, Failure):
                    self._warn(f"writing per-test coverage: {safe_str(per_test.failure())}")
        if self._gate is not None and self._gate.applied and self._writing:
            marked = store.mark_quarantined(run_id, self._gate.marks())
            if isinstance(marked, Failure):
                self._warn(f"recording the quarantine: {safe_str(marked.failure())}")
        summary: RunSummary | None = self._ok(store.finish_run(run_id, status, _now()),
                                              "finishing the run")
        if summary is not None:
            self._finished = True
            self._line = self._summary_line(reader, summary)
        return summary

    def _finish(self, store: DataStore, reader: DataReader, exitstatus: int,
                files: tuple[FileCoverage, ...]) -> None:
        # Results lost to a database problem make the record incomplete: keep it out of
        # history by ending it interrupted.
        status = self._status(exitstatus) if self._writing else RunStatus.INTERRUPTED
        if self._finish_run(store, reader, status, files) is not None:
            self._prune(store)

    def _interrupt(self, store: DataStore, reader: DataReader) -> None:
        self._interrupted = True
        self._finish_run(store, reader, RunStatus.INTERRUPTED, ())

    def _prune(self, store: DataStore) -> None:
        policy = self._settings.retention
        if policy is None:
            return
        pruned = store.prune_runs(policy)
        if isinstance(pruned, Failure):
            self._warn(f"pruning old runs: {safe_str(pruned.failure())}")
            return
        done = pruned.unwrap()
        if done.pruned_runs or done.pruned_files:
            keep = (f"keep {_plural(policy.keep_runs, 'run')} per project"
                    if policy.keep_runs < MAX_KEEP_RUNS else "keep every run")
            age = "" if policy.max_age_days is None else (
                f", none older than {policy.max_age_days:g} days")
            self._pruned = (f"runstore: pruned {_plural(done.pruned_runs, 'old run')} and "
                            f"{_plural(done.pruned_files, 'unused file record')} "
                            f"({keep}{age})")

    def _status(self, exitstatus: int) -> RunStatus:
        if self._interrupted or exitstatus == pytest.ExitCode.INTERNAL_ERROR:
            return RunStatus.INTERRUPTED
        repeater = self._config.stash.get(REPEATER, None)
        flipped = repeater is not None and bool(repeater.flipped)  # the session fails
        if self._failing or flipped or exitstatus not in _CLEAN_EXITS:
            return RunStatus.FAILED
        return RunStatus.PASSED

    def _cli_db(self) -> str | None:
        """The ``--db`` the summary line names: None when ``runstore`` run from the
        invocation directory finds this database by itself (``$RUNSTORE_DB``, or the
        project database it finds walking up)."""
        db_path = self._settings.db_path
        if self._settings.env_db is not None:
            return None if self._settings.env_db == db_path else db_path
        found = find_project_database(self._settings.invocation_dir)
        if found is not None and os.path.realpath(found) == os.path.realpath(db_path):
            return None
        return db_path

    def _summary_line(self, reader: DataReader, summary: RunSummary) -> str:
        run = summary.id
        cli_db = self._cli_db()
        show = "runstore show" if cli_db is None else (
            f"runstore --db {shlex.quote(shown_database(cli_db))} show"
        )
        if summary.status is RunStatus.INTERRUPTED:
            detail = f"recorded as interrupted: {_plural(summary.total, 'finished item')}"
        else:
            detail = "recorded: " + ", ".join(self._verdicts(reader, summary))
        problem = f" (warning: {self._problem})" if self._problem else ""
        return f"runstore: run {run} {detail}{problem} ({show} {run})"

    def _verdicts(self, reader: DataReader, summary: RunSummary) -> list[str]:
        """The verdict words of the line, from the same reader answers as ``runstore show``
        and ``runstore flaky``: ``classify`` for flaky and recovered, ``failures`` for which
        failures are new (``is_new``)."""
        classified = reader.classify(summary.id, policy=self._settings.policy)
        failed = reader.failures(summary.id)
        parts = []
        if isinstance(classified, Failure) or isinstance(failed, Failure):
            parts.append(_plural(summary.total, "item"))
        else:
            kinds = [c.classification for c in classified.unwrap()]
            flaky = kinds.count(Classification.FLAKY)
            recovered = kinds.count(Classification.RECOVERED)
            new = len({f.nodeid for f in failed.unwrap()
                       if f.is_new and f.phase is not Phase.COLLECT})
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
        return parts

    # -- on the main thread --------------------------------------------------------------

    def _on_sigterm(self) -> None:
        """Mark the run interrupted at once, keeping what finished (the signal handler)."""
        self._interrupted = True
        if self._started:
            self._guard("recording the interruption",
                        self._writer.call, self._interrupt, TERM_TIMEOUT)

    def _start(self) -> None:
        settings = self._settings
        self._selection = selection_at_start(self._config, settings.rootdir,
                                             settings.invocation_dir)
        start = RunStart(
            project=settings.project,
            invocation_id=settings.invocation_id,
            started_at=_session_start(self._config),
            selection=self._selection,
            session_id=settings.session_id,
        )
        # Composing the layer imports its driver (psycopg and psycopg_pool for a URL), and
        # an import makes module loggers: here, on the main thread, and never on the writer
        # thread, since pytest iterates logging's table of loggers at every test phase
        # (``catching_logs``) and fails the test being set up when a logger is added meanwhile
        # ("dictionary changed size during iteration"). Only building it waits for the database.
        self._layer = merge(live(settings.db_path, CONNECTION), Layer.value(Clock, PinnedClock()))
        # git status runs while the writer thread opens the database (see GitProbe).
        self._git = GitProbe(self._config.rootpath)
        self._writing = True
        self._writer.start()
        self._started = True
        self._writer.submit(lambda store, reader: self._begin(store, reader, start))
        self._term.install()

    def _send_selection(self, collected: int | None) -> None:
        if self._selection_sent or not self._writing:
            return
        self._selection_sent = True
        selection = attrs.evolve(self._selection, deselected=self._deselected,
                                 collected=collected)
        self._writer.submit(lambda store, reader: self._write_selection(store, reader,
                                                                        selection))

    def _end(self, exitstatus: int) -> None:
        if not self._started:
            return
        try:
            files = session_coverage(self._config, self._resolver)
        except Exception as exc:  # a coverage problem must not lose the run
            self._warn(f"reading coverage: {type(exc).__name__}: {safe_str(exc)}")
            files = ()
        try:
            self._test_lines = session_test_coverage(
                self._config, self._resolver, frozenset(f.path for f in files)
            )
        except Exception as exc:  # nor a problem with the per-test contexts
            self._warn(f"reading per-test coverage: {type(exc).__name__}: {safe_str(exc)}")
        self._writer.call(lambda store, reader: self._finish(store, reader, exitstatus, files),
                          FINISH_TIMEOUT)

    def _close(self) -> None:
        self._term.uninstall()
        self._writer.stop(FINISH_TIMEOUT)
        if self._git is not None:
            self._git.close()

    # -- pytest hooks --------------------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionstart(self, session: pytest.Session) -> Generator[None, None, None]:
        # After every other implementation: the terminal reporter has taken the instant
        # its "in N s" counts from, and pytest-xdist has started its workers.
        yield
        self._guard("starting the run", self._start)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._collect_failed = self._collect_failed or report.failed
        if report.failed and self._gate is not None:
            self._gate.report(report)  # pytest counts each in testsfailed
        if report.passed or not self._writing or report.nodeid in self._seen_collectors:
            return
        self._seen_collectors.add(report.nodeid)  # xdist workers each report it
        self._guard("recording a collection report", self._collected, report)

    def _collected(self, report: pytest.CollectReport) -> None:
        record = collection_record(self._resolver, report)
        if record is not None:
            if isinstance(record, CollectionError):
                self._failing = True
            self._writer.add(record)

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self._deselected += len(items)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # session.items holds the selected items by now; pytest's "collected N items"
        # counts the deselected ones too.
        self._guard("recording the selection", self._send_selection,
                    len(session.items) + self._deselected)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        # The controller collects nothing itself: the first worker's ids are the selection.
        self._guard("recording the selection", self._send_selection, len(ids))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        gate = self._gate
        if not self._writing and gate is None:
            return
        try:  # _guard, inlined: this runs for every phase of every test
            if gate is not None and report.outcome != "passed":
                gate.report(report)  # failures as pytest counts them
            result = self._assembler.add(report)
            if result is not None:
                self._failing = self._failing or is_failing(result)
                if gate is not None:  # the quarantine judges items the database lost too
                    gate.item(result)
                if self._writing:
                    self._writer.add(result)
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
        # The run's status comes from ``exitstatus``, as pytest gave it: the quarantine
        # changes the session's exit status and nothing that is recorded.
        self._guard("applying the quarantine", self._apply_quarantine, session)
        self._guard("finishing the run", self._end, int(exitstatus))
        if self._line is None and self._problem is not None:
            where = f"run {self._run_id}" if self._run_id is not None else "this run"
            self._line = f"runstore: warning: {where} not recorded: {self._problem}"
        self._guard("closing the database", self._close)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Generator[None, None, None]:
        # Outermost wrapper: the line follows every other summary (the short test summary
        # included) and precedes pytest's closing "N passed" line.
        yield
        if self._line is not None:
            terminalreporter.write_line(self._line)
        for line in self._quarantine_lines:
            terminalreporter.write_line(line)
        if self._pruned is not None and self._config.get_verbosity() > 0:
            terminalreporter.write_line(self._pruned)

    def _apply_quarantine(self, session: pytest.Session) -> None:
        """Let the quarantine decide the session's exit status (after every other plugin's
        ``pytest_sessionfinish`` but the recorder's own, so after the repeats' flip rule)."""
        gate = self._gate
        if gate is None:
            return
        repeater = self._config.stash.get(REPEATER, None)
        session.exitstatus = gate.decide(
            int(session.exitstatus), () if repeater is None else repeater.flipped,
            testsfailed=int(session.testsfailed), collection_errors=self._collect_failed,
            interrupted=(self._interrupted or session.shouldstop is not False
                         or session.shouldfail is not False),
        )
        self._quarantine_lines = gate.lines()

    def pytest_unconfigure(self) -> None:
        self._guard("closing the database", self._close)
