"""``runstore quarantine add|remove|list|check``: the project's quarantine file, and the fix
check that releases a test from it.

The file is ``runstore.quarantine``'s: ``.runstore-quarantine.toml`` at the project root,
here the folder holding the database's ``.runstore`` folder (else the current folder), or
the file ``[tool.runstore] quarantine_file`` of that root's ``pyproject.toml`` names;
``--file PATH`` names it outright. Exit codes: 0 done, 1 refused (a file that cannot be
read or changed, a duplicate or unknown entry, a database problem; for ``check``: the test
is still failing), 2 usage errors (a blank owner, a date in the past, a node id no entry
quarantines). JSON shapes: ``quarantine-add.json``, ``quarantine-remove.json``,
``quarantine-list.json``, ``quarantine-check.json`` in ``runstore/cli/schemas/``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from datetime import date, timedelta
from typing import Any

import attrs
import click
from returns.result import Failure

from runstore import quarantine as _quarantine
from runstore.cli._output import Refused, emit_json, fail, say
from runstore.cli._params import TEXT
from runstore.cli._settings import format_option, settings
from runstore.cli._test_runs import Services, _project, _services, project_option
from runstore.quarantine import (
    MAX_DAYS,
    Quarantine,
    QuarantineEntry,
    QuarantineFileError,
    add_entry,
    load_quarantine,
    pattern_problem,
    quarantine_path,
    remove_entry,
    text_problem,
)
from runstore.services.test_runs import (
    FAILING_OUTCOMES,
    FixCheck,
    FixCheckResult,
    Outcome,
    Phase,
    RunId,
    TestDetail,
)

__all__ = [
    "MAX_DAYS",
    "MAX_RUNS",
    "check_document",
    "list_document",
    "quarantine",
]

MAX_RUNS = 1_000
"""Most executions ``check --runs`` asks for."""

_PASSING = frozenset({Outcome.PASSED, Outcome.XPASSED})
_RUN_LINE = re.compile(r"^runstore: run (\d+) recorded", re.M)


def _root(db_path: str) -> str:
    """The project root of the command's database: the folder holding its ``.runstore``
    folder, else the current folder (a URL, or a file kept elsewhere)."""
    folder = os.path.dirname(os.path.abspath(db_path)) if "://" not in db_path else ""
    if os.path.basename(folder) == ".runstore":
        return os.path.dirname(folder)
    return os.getcwd()


def _file(given: str | None) -> str:
    """The quarantine file the command works on (see the module docstring); a
    ``pyproject.toml`` that cannot name it is a usage error (exit 2), as for every command
    (its flaky policy is not read here)."""
    cfg = settings()
    if given is not None:
        path = os.path.abspath(given)
        if os.path.isdir(path):
            raise click.BadParameter(f"{given} is a folder, not a file", param_hint="'--file'")
        return path
    found = quarantine_path(_root(cfg.db_path))
    if isinstance(found, Failure):  # as every command says a refused pyproject.toml
        from runstore._config import ConfigError

        error = found.failure()
        raise click.UsageError(str(ConfigError(error.path, error.key or "", error.reason)))
    return found.unwrap()


def _shown(path: str) -> str:
    """``path`` as text output names it: relative to the current folder when under it."""
    relative = os.path.relpath(path)
    return path if relative.startswith(os.pardir) else relative


def _error_document(error: QuarantineFileError) -> dict[str, Any]:
    return {"file": error.path, "kind": error.kind, "entry": error.entry, "key": error.key}


def _refuse(error: QuarantineFileError) -> None:
    fail(str(error), output_format=settings().output_format, document=_error_document(error))


def entry_document(entry: QuarantineEntry, today: date) -> dict[str, Any]:
    """One entry as JSON (``definitions.json#/$defs/quarantine_entry``)."""
    return {"nodeid": entry.nodeid, "pattern": entry.pattern, "owner": entry.owner,
            "reason": entry.reason, "expires": entry.expires.isoformat(),
            "added": None if entry.added is None else entry.added.isoformat(),
            "active": entry.is_active(today)}


def _entry_text(entry: QuarantineEntry, today: date) -> str:
    state = (f"active until {entry.expires.isoformat()}" if entry.is_active(today)
             else f"expired after {entry.expires.isoformat()}")
    kind = "nodeid" if entry.nodeid is not None else "pattern"
    return f"{entry.key}  [{kind}, {state}, owner {entry.owner}]  {entry.reason}"


# -- the group ------------------------------------------------------------------------------


@click.group()
def quarantine() -> None:
    """Quarantine flaky tests: their failures stop failing recorded sessions.

    The entries live in .runstore-quarantine.toml at the project root (commit it), each
    with an owner, a reason and a last day; `pytest --runstore` still runs and records a
    quarantined test, but when every failure of a session is quarantined it exits 0.
    `check` reruns a test N times and releases it when every execution passes.

    \b
    Example:
      runstore quarantine add tests/test_cache.py::test_warm --owner alice \\
          --reason "races the cache warmer (#123)" --days 14
      runstore quarantine list
      runstore quarantine check tests/test_cache.py::test_warm --runs 20
    """


_FILE = click.option("--file", "file", type=TEXT, default=None, metavar="PATH",
                     help="The quarantine file (default: .runstore-quarantine.toml at the "
                     "project root, or [tool.runstore] quarantine_file).")


def _days(value: int | None, expires: str | None, today: date) -> date:
    """The last day an added entry applies: ``--expires`` or today plus ``--days``."""
    if (value is None) == (expires is None):
        raise click.UsageError("give exactly one of --expires DATE and --days N")
    if value is not None:
        return today + timedelta(days=value)
    assert expires is not None
    try:
        day = date.fromisoformat(expires)
    except ValueError:
        raise click.BadParameter(f"{expires!r} is not a date (YYYY-MM-DD)",
                                 param_hint="'--expires'") from None
    if day < today:
        raise click.BadParameter(f"{day.isoformat()} is before today ({today.isoformat()}): "
                                 "the entry would never apply", param_hint="'--expires'")
    if day > today + timedelta(days=MAX_DAYS):
        raise click.BadParameter(f"{day.isoformat()} is more than {MAX_DAYS} days away",
                                 param_hint="'--expires'")
    return day


def _text(value: str, hint: str) -> str:
    problem = text_problem(value)
    if problem is not None:
        raise click.BadParameter(problem, param_hint=hint)
    return value


def _pattern(value: str) -> str:
    _text(value, "'--pattern'")
    problem = pattern_problem(value)
    if problem is not None:
        raise click.BadParameter(problem, param_hint="'--pattern'")
    return value


def _warn_unknown(nodeid: str) -> None:
    """Warn on standard error when the project's database records no test ``nodeid``
    (:func:`unknown_nodeid`); silent without a database or a run of the project."""
    db_path = settings().db_path
    if not _has_database(db_path):
        return
    with _services("read") as services:
        name = _recorded_project(services, None, _root(db_path))
        said = None if name is None else unknown_nodeid(services, name, nodeid)
    if said is not None:
        click.echo(f"runstore: warning: {said}", err=True)


@quarantine.command("add")
@click.argument("nodeid", type=TEXT, required=False)
@click.option("--pattern", type=TEXT, default=None, metavar="P",
              help="Quarantine every node id P matches (fnmatch: *, ?, [abc]) instead.")
@click.option("--owner", type=TEXT, required=True, help="Who answers for the entry.")
@click.option("--reason", type=TEXT, required=True, help="Why the test is quarantined.")
@click.option("--expires", type=TEXT, default=None, metavar="DATE",
              help="The last day the entry applies (YYYY-MM-DD).")
@click.option("--days", type=click.IntRange(0, MAX_DAYS), default=None, metavar="N",
              help="The entry applies for N more days (0: today only).")
@_FILE
@format_option
def add(nodeid: str | None, pattern: str | None, owner: str, reason: str,
        expires: str | None, days: int | None, file: str | None) -> None:
    """Quarantine NODEID (or every test --pattern matches) until a given day.

    Exactly one of NODEID and --pattern, and of --expires and --days. The entry is
    appended to the file (created when missing) with today as `added`; the rest of the
    file stays as it was.

    \b
    JSON (schema quarantine-add.json): {"file", "entry": ENTRY}
      ENTRY = {"nodeid", "pattern", "owner", "reason", "expires", "added", "active"}
    Example:
      runstore quarantine add tests/test_net.py::test_dns --owner bob \\
          --reason "the proxy flaps" --expires 2026-12-31
    """
    today = _quarantine.today()
    if (nodeid is None) == (pattern is None):
        raise click.UsageError("give exactly one of NODEID and --pattern P")
    entry = QuarantineEntry(
        owner=_text(owner, "'--owner'"), reason=_text(reason, "'--reason'"),
        expires=_days(days, expires, today),
        nodeid=None if nodeid is None else _text(nodeid, "'NODEID'"),
        pattern=None if pattern is None else _pattern(pattern), added=today)
    path = _file(file)
    added = add_entry(path, entry)
    if isinstance(added, Failure):
        _refuse(added.failure())
        return
    if entry.nodeid is not None:
        _warn_unknown(entry.nodeid)
    if settings().output_format == "json":
        emit_json({"file": path, "entry": entry_document(entry, today)})
        return
    say(f"quarantined {entry.key} until {entry.expires.isoformat()} (owner {entry.owner}) "
        f"in {_shown(path)}")


@quarantine.command("remove")
@click.argument("key", type=TEXT, metavar="NODEID|PATTERN")
@_FILE
@format_option
def remove(key: str, file: str | None) -> None:
    """Remove the entry whose node id or pattern is exactly NODEID|PATTERN.

    Only the entry's own lines (its header, the comments right above it, its keys) leave
    the file; an unknown entry is refused (exit 1) listing the entries.

    \b
    JSON (schema quarantine-remove.json): {"file", "entry": ENTRY}
    Example:
      runstore quarantine remove tests/test_net.py::test_dns
    """
    path = _file(file)
    removed = remove_entry(path, key)
    if isinstance(removed, Failure):
        _refuse(removed.failure())
        return
    entry = removed.unwrap()
    if settings().output_format == "json":
        emit_json({"file": path, "entry": entry_document(entry, _quarantine.today())})
        return
    say(f"removed {entry.key} (owner {entry.owner}) from {_shown(path)}")


# -- list -----------------------------------------------------------------------------------


def _fix_check_document(check: FixCheck | None) -> dict[str, Any] | None:
    if check is None:
        return None
    r = check.result
    return {"run_id": r.run_id, "executions": r.executions, "passed": r.passed,
            "failed": r.failed, "released": r.released, "checked_at_ms": check.checked_at_ms}


_MATCHED = 100
"""Most tests ``quarantine list`` shows per pattern entry (``tests_truncated`` says more)."""

MAX_PAGE = 1_000
"""The most candidates one pattern entry reads (the pagination contract's largest page)."""

_WILDCARD = re.compile(r"[*?\[]")


def _latest_outcome(
    services: Services, project: str, nodeid: str, verdicts: dict[int, dict[str, str]]
) -> dict[str, Any] | None:
    """The newest recorded outcome of ``nodeid`` (its newest history entry: finished runs,
    executed outcomes) with that run's verdict of it; None when never recorded."""
    found = services.reader.history(project, nodeid)
    if isinstance(found, Failure) or not found.unwrap():
        return None
    newest = found.unwrap()[0]
    verdict = None
    if newest.run_id is not None:
        if newest.run_id not in verdicts:
            verdicts[newest.run_id] = {
                c.nodeid: c.classification.value
                for c in services.get(services.reader.classify(newest.run_id,
                                                               policy=services.policy))}
        verdict = verdicts[newest.run_id].get(nodeid)
    return {"nodeid": nodeid, "run_id": newest.run_id, "outcome": newest.outcome.value,
            "classification": verdict}


def _matched(services: Services, project: str, entry: QuarantineEntry) -> tuple[list[str], bool]:
    """The recorded node ids ``entry`` names (at most ``_MATCHED``, and whether more)."""
    if entry.nodeid is not None:
        return [entry.nodeid], False
    pattern = str(entry.pattern)
    prefix = _WILDCARD.split(pattern, maxsplit=1)[0]
    candidates = services.get(services.reader.find_tests(project, prefix, limit=MAX_PAGE))
    hits = sorted(n for n in candidates if entry.matches(n))
    return hits[:_MATCHED], len(hits) > _MATCHED or len(candidates) == MAX_PAGE


def _since(check: FixCheck, entry: QuarantineEntry) -> bool:
    """Whether ``check`` was made on or after the day ``entry`` was added (local date; an
    entry that does not say: every check): an older one judged an earlier quarantine."""
    from datetime import datetime

    return entry.added is None or (
        datetime.fromtimestamp(check.checked_at_ms / 1000).date() >= entry.added)


def _escaped(nodeid: str) -> str:
    """``nodeid`` as pytest records it: the parameter part (from the first ``[``) with every
    non-ASCII character escaped, as ``_pytest.compat.ascii_escaped`` writes it."""
    cut = nodeid.find("[")
    if cut < 0:
        return nodeid
    return nodeid[:cut] + nodeid[cut:].encode("unicode_escape").decode("ascii")


def unknown_nodeid(services: Services, project: str, nodeid: str) -> str | None:
    """None when ``project`` has a record of ``nodeid`` (``DataReader.known_tests``), else
    what to say of it: the form pytest records when it escapes the parameter part, else up
    to three recorded node ids closest to it (``difflib``: a typo), else that none is."""
    import difflib

    escaped = _escaped(nodeid)
    known = services.get(services.reader.known_tests(project, {nodeid, escaped}))
    if nodeid in known:
        return None
    if escaped != nodeid:
        recorded = "recorded" if escaped in known else "would record"
        return (f"no recorded test of {project} has the node id {nodeid!r}; pytest "
                f"{recorded} it escaped: {escaped}")
    base = nodeid.split("[", 1)[0]
    candidates = {n for fragment in (base.split("::", 1)[0], base.rsplit("::", 1)[-1])
                  for n in services.get(services.reader.find_tests(project, fragment,
                                                                   limit=MAX_PAGE))}
    close = difflib.get_close_matches(nodeid, sorted(candidates), n=3, cutoff=0.85)
    return (f"no recorded test of {project} has the node id {nodeid!r}"
            + (f"; closest: {', '.join(close)}" if close else ""))


def _recorded_project(services: Services, project: str | None, root: str) -> str | None:
    """The project ``--project`` names, else the one pytest records at ``root`` (its
    folder's name), when the database has it; else None (nothing to check against)."""
    name = project if project is not None else os.path.basename(root)
    return name if name in services.get(services.reader.projects()) else None


def list_document(
    found: Quarantine, today: date, services: Services | None, project: str | None = None
) -> dict[str, Any]:
    """The ``quarantine list`` JSON document (schema ``quarantine-list.json``, without
    ``schema_version``): each entry with whether it is active on ``today`` and, with
    ``services`` (None: no database) holding runs, the recorded tests it names with each
    one's newest recorded outcome and that run's verdict, and a node-id entry's newest fix
    check made since the entry's ``added`` day (None when there is none). Refusals (an
    unknown project) raise :class:`~runstore.cli._output.Refused`."""
    name: str | None = None
    if services is not None and services.get(services.reader.projects()):
        name = _project(services, project)
    verdicts: dict[int, dict[str, str]] = {}
    entries = []
    for entry in found.entries:
        tests: list[dict[str, Any]] = []
        check, more = None, False
        if services is not None and name is not None:
            nodeids, more = _matched(services, name, entry)
            tests = [t for t in (_latest_outcome(services, name, n, verdicts) for n in nodeids)
                     if t is not None]
            if entry.nodeid is not None:
                checks = services.get(services.reader.fix_checks(name, entry.nodeid, limit=1))
                check = checks[0] if checks and _since(checks[0], entry) else None
        entries.append({**entry_document(entry, today), "tests": tests,
                        "tests_truncated": more, "last_fix_check": _fix_check_document(check)})
    return {"file": found.path, "today": today.isoformat(), "project": name,
            "entries": entries}


def _has_database(path: str) -> bool:
    return "://" in path or os.path.isfile(path)


@quarantine.command("list")
@project_option
@_FILE
@format_option
def list_(project: str | None, file: str | None) -> None:
    """List the quarantine's entries: active or expired, and how their tests did.

    With a database, each entry shows the recorded tests it names, each with its newest
    recorded outcome and that run's verdict, and a node-id entry its newest fix check.
    Without one, the entries alone.

    \b
    JSON (schema quarantine-list.json): {"file", "today", "project", "entries": [ENTRY +
      {"tests": [{"nodeid", "run_id", "outcome", "classification"}], "tests_truncated",
      "last_fix_check": {"run_id", "executions", "passed", "failed", "released",
      "checked_at_ms"} | null}]}
    Example:
      runstore quarantine list --format json
    """
    cfg = settings()
    path = _file(file)
    loaded = load_quarantine(path)
    if isinstance(loaded, Failure):
        _refuse(loaded.failure())
        return
    found, today = loaded.unwrap(), _quarantine.today()
    if _has_database(cfg.db_path):
        with _services("read") as services:
            document = list_document(found, today, services, project)
    else:
        document = list_document(found, today, None, project)
    if cfg.output_format == "json":
        emit_json(document)
        return
    if not found.entries:
        say(f"no quarantined tests in {_shown(path)}")
        return
    say(f"{len(found.entries)} quarantine entr{'y' if len(found.entries) == 1 else 'ies'} "
        f"in {_shown(path)}, today {today.isoformat()}")
    for entry, shown in zip(found.entries, document["entries"], strict=True):
        say(f"  {_entry_text(entry, today)}")
        for test in shown["tests"]:
            verdict = f", {test['classification']}" if test["classification"] else ""
            where = "" if test["run_id"] is None else f" in run {test['run_id']}"
            say(f"      {test['nodeid']}: {test['outcome']}{where}{verdict}")
        if document["project"] is not None and not shown["tests"]:
            say("      (no recorded test matches this entry: a typo, or a test not run yet?)")
        if shown["tests_truncated"]:
            say(f"      (more tests match than the {len(shown['tests'])} shown)")
        check = shown["last_fix_check"]
        if check is not None:
            say(f"      last fix check: {check['passed']} of {check['executions']} passed"
                + (f" (run {check['run_id']})" if check["run_id"] else ""))


# -- check ----------------------------------------------------------------------------------


@attrs.frozen
class Executions:
    """What a fix-check run recorded of one test: each execution's outcome, oldest first,
    and the first error message of each failing one (``""`` when none was stored)."""

    outcomes: tuple[Outcome, ...]
    messages: tuple[str, ...]

    @property
    def passed(self) -> int:
        """Executions that passed (``passed`` or ``xpassed``)."""
        return sum(o in _PASSING for o in self.outcomes)

    @property
    def failed(self) -> int:
        """Executions that failed (``failed`` or ``error``)."""
        return sum(o in FAILING_OUTCOMES for o in self.outcomes)


def executions_of(detail: TestDetail) -> Executions:
    """The executions of a repeated item: its earlier attempts, then the item itself (the
    last execution), as ``--runstore-repeat`` records them."""
    runs = [*zip(detail.attempts, list(detail.attempt_errors)
                 + [()] * (len(detail.attempts) - len(detail.attempt_errors)), strict=True),
            (detail.test, detail.errors)]
    return Executions(
        tuple(test.outcome for test, _ in runs),
        tuple(errors[0].message.splitlines()[0] if errors and errors[0].message else ""
              for _, errors in runs))


Runner = Callable[[Sequence[str], str], "subprocess.CompletedProcess[str]"]
"""How ``check`` runs pytest: the command line and the folder to run it in."""


def _run(command: Sequence[str], cwd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(command), cwd=cwd, capture_output=True, text=True,
                          errors="replace", check=False)


def check_document(
    services: Services, nodeid: str, runs: int, entry: QuarantineEntry, file: str,
    run_id: RunId,
) -> tuple[dict[str, Any], FixCheckResult]:
    """Judge the fix check recorded as run ``run_id`` of ``nodeid`` (quarantined by
    ``entry`` in ``file``), asked for ``runs`` executions: the ``quarantine check`` JSON
    document (without ``released``, ``fix_check`` and ``schema_version``) and the result to
    store. All ``runs`` executions passing releases a node-id entry; a pattern entry stays.
    A run without the test raises :class:`~runstore.cli._output.Refused`."""
    summary = services.get(services.reader.get_run(run_id))
    found = services.reader.test_detail(run_id, nodeid)
    if isinstance(found, Failure):
        if summary.collection_errors:
            first = next((f for f in services.get(services.reader.failures(run_id))
                          if f.phase is Phase.COLLECT), None)
            said = "" if first is None else (
                f" {first.nodeid}: {(first.message.splitlines() or [first.exception_type])[0]}")
            services.fail(f"run {run_id} could not collect {nodeid!r}: pytest had "
                          f"{summary.collection_errors} collection error(s):{said}")
        services.fail(f"run {run_id} recorded no item {nodeid!r}: is it the node id pytest "
                      "prints, relative to the project root?")
    done = executions_of(found.unwrap())
    green = len(done.outcomes) == runs and done.passed == runs
    releasable = green and entry.nodeid == nodeid
    failing = [{"execution": n, "outcome": o.value, "message": m}
               for n, (o, m) in enumerate(zip(done.outcomes, done.messages, strict=True),
                                          start=1) if o not in _PASSING]
    result = FixCheckResult(summary.project, nodeid, run_id, len(done.outcomes), done.passed,
                            done.failed, releasable)
    return {"file": file, "nodeid": nodeid, "entry": entry.key, "project": summary.project,
            "run_id": run_id, "runs": runs, "executions": len(done.outcomes),
            "passed": done.passed, "failed": done.failed, "green": green,
            "failing_executions": failing}, result


@quarantine.command("check")
@click.argument("nodeid", type=TEXT)
@click.option("--runs", type=click.IntRange(1, MAX_RUNS), default=10, show_default=True,
              metavar="N", help="Executions of the test in one pytest process.")
@project_option
@_FILE
@format_option
def check(nodeid: str, runs: int, project: str | None, file: str | None) -> None:
    """Run a quarantined test N times; all green releases it from quarantine.

    Runs `python -m pytest NODEID --runstore --runstore-repeat N` at the project root
    (recording into this database), then reads the recorded run: when all N executions
    passed, the node-id entry is removed from the file; otherwise it stays and the failing
    executions are named. Either way the evidence (run, executions, passed, failed,
    released) is stored first, and `quarantine list` shows it; when the entry then cannot
    be removed, a newer record says it was not released. The entry checked is the one the
    plugin applies today (a node-id entry before a pattern; an expired one does not
    apply). A test quarantined by a pattern is never released by a check (remove the
    pattern when its tests are fixed). Exit codes: 0 all green, 1 still failing (or
    refused), 2 usage errors (NODEID not quarantined, or only by expired entries).

    \b
    JSON (schema quarantine-check.json): {"file", "nodeid", "entry", "project", "run_id",
      "runs", "executions", "passed", "failed", "green", "released",
      "failing_executions": [{"execution", "outcome", "message"}], "fix_check"}
    Example:
      runstore quarantine check tests/test_cache.py::test_warm --runs 20
    """
    cfg = settings()
    path = _file(file)
    loaded = load_quarantine(path)
    if isinstance(loaded, Failure):
        _refuse(loaded.failure())
        return
    match = loaded.unwrap().match(nodeid, _quarantine.today())  # as the plugin matches
    entry = match.active
    if entry is None:
        expired = "".join(f"; entry {e.key} expired after {e.expires.isoformat()}"
                          for e in match.expired)
        raise click.BadParameter(f"{nodeid!r} is not quarantined in {path}{expired}",
                                 param_hint="'NODEID'")
    root = _root(cfg.db_path)
    if entry.pattern == nodeid or re.search(r"[*?]", nodeid.split("[", 1)[0]):
        raise click.BadParameter(
            f"{nodeid!r} is a pattern, not a node id: give the node id of one test that "
            f"{entry.key} quarantines", param_hint="'NODEID'")
    if _has_database(cfg.db_path):
        with _services("read") as services:
            name = _recorded_project(services, project, root)
            unknown = None if name is None else unknown_nodeid(services, name, nodeid)
        if unknown is not None:
            raise click.BadParameter(unknown, param_hint="'NODEID'")
    command = [sys.executable, "-m", "pytest", nodeid, "-p", "no:cacheprovider",
               "--runstore", f"--runstore-repeat={runs}", f"--runstore-db={cfg.db_path}"]
    if project is not None:
        command.append(f"--runstore-project={project}")
    done = _runner(command, root)
    recorded = _RUN_LINE.search(done.stdout)
    if recorded is None:
        tail = " | ".join(done.stdout.strip().splitlines()[-3:] or done.stderr.strip()
                          .splitlines()[-3:])
        fail(f"pytest recorded no run (exit {done.returncode}): {tail}",
             output_format=cfg.output_format, document={"file": path, "nodeid": nodeid})
    with _services("write") as services:
        document, result = check_document(services, nodeid, runs, entry, path,
                                          RunId(int(recorded.group(1))))
        # The evidence first: a store that fails leaves the entry in place.
        stored = services.get(services.store.record_fix_check(result))
        if result.released:
            removed = remove_entry(path, entry.key)
            if isinstance(removed, Failure):  # a newer record says it stays quarantined
                result = attrs.evolve(result, released=False)
                stored = services.get(services.store.record_fix_check(result))
                raise Refused(f"all {runs} executions passed, but {removed.failure()}",
                              {**document, "released": False,
                               "fix_check": _fix_check_document(stored)})
    document = {**document, "released": result.released,
                "fix_check": _fix_check_document(stored)}
    if cfg.output_format == "json":
        emit_json(document)
    else:
        _say_check(document)
    if not document["green"]:
        sys.exit(1)


_runner: Runner = _run
"""The runner ``check`` uses (a test may replace it)."""


def _say_check(document: dict[str, Any]) -> None:
    head = (f"{document['nodeid']}: {document['passed']} of {document['executions']} "
            f"executions passed (run {document['run_id']})")
    if document["released"]:
        say(f"{head}: released, entry {document['entry']} removed from "
            f"{_shown(document['file'])}")
    elif document["green"]:
        say(f"{head}: all green, but it is quarantined by the pattern {document['entry']}, "
            "which stays")
    else:
        say(f"{head}: still quarantined by {document['entry']}")
        for failing in document["failing_executions"]:
            message = f": {failing['message']}" if failing["message"] else ""
            say(f"  execution {failing['execution']} of {document['executions']} "
                f"{failing['outcome']}{message}")
