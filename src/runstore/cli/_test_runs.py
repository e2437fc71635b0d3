"""Commands that answer questions about recorded test runs (``pytest --runstore``).

``runs``, ``show``, ``failures``, ``flaky``, ``history``, ``slowest``, ``coverage``,
``trends``, ``diff`` read through ``DataReader``; ``prune`` writes through ``DataStore``.
Every query takes ``--project`` (default: the only project in the database, else the one
named like the current directory) and ``--format text|json``. Exit codes: 0 answered,
1 refused with a one-line reason on standard error (no database, unknown project, run or
test, an ambiguous test or project, busy or broken database), 2 usage error (click's own,
for an argument that is not valid at all, such as ``--limit 0``, ``RUN`` = ``x``, a run id
above ``2**63 - 1`` or a blank node id; see ``runstore.cli._params``). JSON shapes: the
schema files in ``runstore/cli/schemas/``.
"""

from __future__ import annotations

import math
import os
import shlex
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import click
from returns.result import Failure

from runstore.cli._charts import (
    BAR_WIDTH,
    Glyphs,
    bar_counts,
    glyphs_for,
    outcome_strip,
    sparkline,
    stacked_bar,
    styled,
)
from runstore.cli._discover import configured_policy
from runstore.cli._guard import opened
from runstore.cli._output import (
    Refusals,
    console,
    emit_json,
    exit_on_refusal,
    plain_table,
    progress_on_terminal,
    say,
    status_on_terminal,
    visible,
)
from runstore.cli._params import MAX_ID, RUN_SESSION_ID, TEXT
from runstore.cli._settings import format_option, settings
from runstore.layers import DATA_READER, DATA_STORE, Access, shown_database
from runstore.services._primitives import named_error
from runstore.services.errors import NotFound
from runstore.services.pagination import MAX_PAGE_SIZE
from runstore.services.test_runs import (
    FAILING_OUTCOMES,
    FLAKY_RULES,
    AttemptSource,
    Classification,
    CoverageReport,
    DataReader,
    DataStore,
    ErrorInfo,
    Evidence,
    EvidenceRule,
    FailureRecord,
    FlakyPolicy,
    FlakyTest,
    HistoryEntry,
    Outcome,
    Phase,
    RunId,
    RunRetentionPolicy,
    RunStatus,
    RunSummary,
    Selection,
    StackFrame,
    TestClassification,
    TestDetail,
    TestRecord,
)

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

__all__ = [
    "Services",
    "coverage",
    "coverage_document",
    "diff",
    "diff_document",
    "failures",
    "failures_document",
    "flaky",
    "flaky_document",
    "history",
    "history_document",
    "prune",
    "runs",
    "show",
    "show_document",
    "slowest",
    "slowest_document",
    "trends",
    "trends_document",
]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

_MESSAGE_WIDTH = 120
_PIPE_WIDTH = 10_000  # columns when output is not a terminal: long lines are not wrapped


# -- opening the services ---------------------------------------------------------------------


@attrs.frozen
class Services(Refusals):
    """What a test-run answer reads, and how it says "no".

    ``fail(reason)`` and ``get(result)`` (from :class:`~runstore.cli._output.Refusals`)
    raise :class:`~runstore.cli._output.Refused`: a command exits 1 with the reason, the
    MCP server answers a tool error with it. ``db_path`` names the database as messages
    show it (a URL without its password); ``output_format`` is the command's (``"json"``
    for the MCP server).
    """

    store: DataStore
    reader: DataReader
    output_format: str
    db_path: str
    given_policy: FlakyPolicy | None = attrs.field(default=None, alias="policy")
    """The policy given (None: the configured one, read when first asked for)."""

    @property
    def policy(self) -> FlakyPolicy:
        """The flaky policy of every verdict shown: the one given, else
        ``[tool.runstore.flaky]`` of the project's ``pyproject.toml``
        (``configured_policy``), read on first use so that a command showing no verdict
        does not refuse a bad one (a bad one: a usage error, exit 2)."""
        if self.given_policy is None:
            object.__setattr__(self, "given_policy", configured_policy())
        assert self.given_policy is not None
        return self.given_policy


_Services = Services


@contextmanager
def _services(access: Access = "read") -> Iterator[Services]:
    """The test-run services on the command's database (read-only unless ``access`` says);
    a refusal in the block ends the command (exit 1, the reason on standard error)."""
    cfg = settings()
    with opened(access, needs=(DATA_STORE, DATA_READER)) as container:
        services = Services(
            store=container.get(DATA_STORE),
            reader=container.get(DATA_READER),
            output_format=cfg.output_format,
            db_path=shown_database(cfg.db_path),
        )
        with exit_on_refusal(services.output_format):
            yield services


def _classified(services: Services, run_id: RunId) -> tuple[TestClassification, ...]:
    """``classify`` of a run under the command's flaky policy; a refusal ends the command."""
    return services.get(services.reader.classify(run_id, policy=services.policy))


def _flaky_of(services: Services, project: str) -> tuple[FlakyTest, ...]:
    """``flaky_tests`` of a project under the command's flaky policy."""
    return services.get(services.reader.flaky_tests(project, policy=services.policy))


def _marks(services: Services, run_id: RunId) -> dict[str, str]:
    """The quarantine entry (node id or pattern) that applied to each quarantined item of a
    run, by node id (``DataReader.quarantined``); a refusal ends the command."""
    return {q.nodeid: q.entry for q in services.get(services.reader.quarantined(run_id))}


def known_project(refusals: Refusals, reader: DataReader, db_path: str, name: str) -> str:
    """``name`` when ``reader`` holds runs of that project; otherwise ``refusals.fail`` ends
    the answer naming ``db_path`` (as messages show the database) and listing the projects
    it does hold, so a misspelt ``--project`` is never an empty answer."""
    known = refusals.get(reader.projects())
    if name not in known:
        refusals.fail(
            f"no runs of project {name!r} in {db_path}"
            + (f" (projects: {', '.join(known)})" if known else "")
        )
    return name


def _project(services: _Services, explicit: str | None) -> str:
    """The project a query is about: ``--project``, else the only one, else the current
    directory's name when it is one; anything else ends the command listing the projects."""
    if explicit is not None:
        return known_project(services, services.reader, services.db_path, explicit)
    known = services.get(services.reader.projects())
    listed = ", ".join(known)
    if not known:
        services.fail(
            f"no runs recorded in {services.db_path} (record one with: pytest --runstore)"
        )
    if len(known) == 1:
        return known[0]
    here = os.path.basename(os.getcwd())
    if here in known:
        return here
    return services.fail(
        f"several projects in {services.db_path}: {listed}; choose one with --project"
    )


class _RunArgument(click.ParamType[int | str]):
    """A run id (an integer in ``1..MAX_ID``: larger ones no store holds), ``latest``, or
    ``latest~N``: the run N runs before the latest of the project (``latest~0`` is ``latest``,
    the same notation as git's ``HEAD~N``). Converts to an int id, ``"latest"`` or
    ``("latest", N)``."""

    name = "RUN"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> int | str:
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_ID:
            return value
        text = str(value).strip()
        lowered = text.lower()
        if lowered == "latest":
            return "latest"
        back = lowered.removeprefix("latest~")
        if back != lowered and back.isascii() and back.isdigit() and int(back) <= MAX_ID:
            return "latest" if int(back) == 0 else f"latest~{int(back)}"
        if text.isascii() and text.isdigit() and 0 < int(text) <= MAX_ID:
            return int(text)
        return self.fail(
            f"{value!r} is not a run id (an integer from 1 to {MAX_ID}), 'latest' or "
            "'latest~N' (N runs before the latest)",
            param,
            ctx,
        )


RUN = _RunArgument()


def _run(services: _Services, project_option: str | None, run: int | str) -> RunSummary:
    """The run ``run`` names (``latest`` of the project, or an id); a run of another project
    than an explicit ``--project`` is refused."""
    if run == "latest":
        project = _project(services, project_option)
        return services.get(services.reader.latest_run(project))
    if isinstance(run, str):
        return _runs_back(services, _project(services, project_option), int(run.partition("~")[2]))
    summary = services.get(services.reader.get_run(RunId(run)))
    if project_option is not None and summary.project != project_option:
        services.fail(f"run {run} belongs to project {summary.project!r}, not {project_option!r}")
    return summary


def _runs_back(services: _Services, project: str, back: int) -> RunSummary:
    """The run ``back`` runs before the latest of ``project`` (newest first, as ``runs``
    lists them); fewer runs than that is a failure naming how many there are."""
    seen = 0
    cursor: str | None = None
    while True:
        page = services.get(
            services.reader.list_runs(project, limit=MAX_PAGE_SIZE, cursor=cursor)
        )
        if back - seen < len(page.items):
            return page.items[back - seen]
        seen += len(page.items)
        if page.next_cursor is None:
            if seen == 0:
                services.get(services.reader.latest_run(project))  # the reader's own NotFound
            services.fail(
                f"project {project!r} has {seen} run{'' if seen == 1 else 's'}: "
                f"latest~{back} needs {back + 1}"
            )
        cursor = page.next_cursor


def project_option(fn: F) -> F:
    """Add ``--project NAME`` to a query command."""
    return click.option(
        "--project",
        "project",
        type=TEXT,
        default=None,
        metavar="NAME",
        help="Project to ask about (default: the only project, else the current directory's name).",
    )(fn)


def _limit_option(default: int, help_text: str) -> Callable[[F], F]:
    return click.option(
        "--limit",
        type=click.IntRange(1, MAX_PAGE_SIZE),
        default=default,
        show_default=True,
        help=help_text,
    )


# -- documents ----------------------------------------------------------------------------------


def _run_document(summary: RunSummary) -> dict[str, Any]:
    finished = summary.finished_at_ms
    env = summary.environment
    return {
        "id": int(summary.id),
        "project": summary.project,
        "invocation_id": summary.invocation_id,
        "status": summary.status.value,
        "started_at_ms": summary.started_at_ms,
        "finished_at_ms": finished,
        "duration_ms": None if finished is None else finished - summary.started_at_ms,
        "counts": {o.value: summary.counts.get(o.value, 0) for o in Outcome},
        "total": summary.total,
        "collection_errors": summary.collection_errors,
        "environment": {
            "python_version": env.python_version,
            "pytest_version": env.pytest_version,
            "platform": env.platform,
            "git_commit": env.git_commit,
            "git_branch": env.git_branch,
            "git_dirty": env.git_dirty,
            "command_line": list(env.command_line),
            "host": env.host,
            "pid": env.pid,
            **_changed_files_document(summary),
        },
        "selection": _selection_document(summary.selection),
        "subtests": {key: summary.subtests.get(key, 0) for key in _SUBTEST_KEYS},
        "session_id": summary.session_id,
    }


def _changed_files_document(summary: RunSummary) -> dict[str, Any]:
    """``git_changed_files`` (``[{"path", "status"}]``, null when unknown) and its
    ``git_changed_files_truncated`` flag."""
    env = summary.environment
    files = env.git_changed_files
    return {
        "git_changed_files": None if files is None else [
            {"path": f.path, "status": f.status} for f in files
        ],
        "git_changed_files_truncated": env.git_changed_files_truncated,
    }


CHANGED_FILES_SHOWN = 3
"""How many changed paths ``show``'s heading names before "+N more"."""


def _changed_text(summary: RunSummary) -> str:
    """The heading's changed-files line (``3 files: a.py, b.py, c/ +1 more``), empty for a
    clean tree or unknown changes."""
    env = summary.environment
    files = env.git_changed_files or ()
    if not files:
        return ""
    shown = ", ".join(f.path for f in files[:CHANGED_FILES_SHOWN])
    rest = len(files) - CHANGED_FILES_SHOWN
    count = f"{len(files)}+ files" if env.git_changed_files_truncated else _plural(
        len(files), "file")
    more = f" +{rest} more" if rest > 0 else ""
    return f"{count} changed at start: {shown}{more}"


_SUBTEST_KEYS = ("passed", "failed", "skipped")


def _selection_document(selection: Selection) -> dict[str, Any]:
    """Every field of the selection (tuples as lists), then ``is_partial``."""
    return {**attrs.asdict(selection), "is_partial": selection.is_partial}


def _evidence_document(evidence: Evidence) -> dict[str, Any]:
    return {
        "rule": evidence.rule.value,
        "run_ids": [int(r) for r in evidence.run_ids],
        "summary": evidence.summary,
    }


def _frame_document(frame: StackFrame) -> dict[str, Any]:
    return {
        "path": frame.path,
        "line": frame.line,
        "function": frame.function,
        "is_project": frame.is_project,
    }


def _cause_document(cause: ErrorInfo) -> dict[str, Any]:
    return {
        "exception_type": cause.exception_type,
        "message": cause.message,
        "text": cause.text,
        "frames": [_frame_document(f) for f in cause.frames],
    }


def _failure_document(failure: FailureRecord) -> dict[str, Any]:
    return {
        "nodeid": failure.nodeid,
        "outcome": failure.outcome.value,
        "phase": failure.phase.value,
        "exception_type": failure.exception_type,
        "message": failure.message,
        "message_truncated": failure.message_truncated,
        "text": failure.text,
        "text_truncated": failure.text_truncated,
        "frames": [_frame_document(f) for f in failure.frames],
        "causes": [_cause_document(c) for c in failure.causes],
        "signature": failure.signature,
        "is_new": failure.is_new,
        "streak": failure.streak,
        "failing_since": None if failure.failing_since is None else int(failure.failing_since),
        "streak_message": failure.streak_message,
    }


def _verdict_document(verdict: TestClassification) -> dict[str, Any]:
    return {
        "classification": verdict.classification.value,
        "window": [o.value for o in verdict.window],
        "because": _evidence_document(verdict.because),
    }


def _verdict_or_none(verdict: TestClassification | None) -> dict[str, Any]:
    """The verdict fields of an item, all None when there is none (a collection error)."""
    if verdict is None:
        return {"classification": None, "window": None, "because": None}
    return _verdict_document(verdict)


def _test_document(test: TestRecord, failure: FailureRecord | None) -> dict[str, Any]:
    document: dict[str, Any] = {
        "nodeid": test.nodeid,
        "outcome": test.outcome.value,
        "duration_ms": test.duration_ms,
        "attempts": test.attempts,
        "fingerprint": test.fingerprint,
    }
    if test.skip_reason is not None:
        document["skip_reason"] = test.skip_reason
    if failure is not None:
        document["phase"] = failure.phase.value
        document["exception_type"] = failure.exception_type
        document["message"] = failure.message
    return document


# -- text ---------------------------------------------------------------------------------------


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def _seconds(ms: float | None) -> str:
    return "-" if ms is None else f"{ms / 1000:.2f}s"


def _first_line(message: str) -> str:
    line = next((part for part in message.splitlines() if part.strip()), "")
    return line if len(line) <= _MESSAGE_WIDTH else line[: _MESSAGE_WIDTH - 1] + "…"


def _error_line(exception_type: str, message: str) -> str:
    """The first line of an error naming its exception type once (see
    :func:`~runstore.services._primitives.named_error`)."""
    return named_error(exception_type, _first_line(message))


def _because(evidence: Evidence) -> str:
    """A verdict's reason in one line: the rule, then its summary (which names the runs)."""
    return f"{evidence.rule.value}: {evidence.summary}" if evidence.summary else evidence.rule.value


def _runs_list(run_ids: tuple[RunId, ...]) -> str:
    return ("runs " if len(run_ids) > 1 else "run ") + ", ".join(str(r) for r in run_ids)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _outcome_counts(counts: dict[str, int]) -> list[str]:
    """``counts`` (outcome value -> items) as words, in ``Outcome`` order, zeros left out."""
    return [_plural(counts[o.value], "error") if o is Outcome.ERROR
            else f"{counts[o.value]} {o.value}"
            for o in Outcome if counts.get(o.value, 0)]


def _counts_text(summary: RunSummary) -> str:
    parts = _outcome_counts(summary.counts)
    if summary.collection_errors:
        parts.append(_plural(summary.collection_errors, "collection error"))
    return ", ".join(parts) or "no items"


def _table(*columns: str) -> Table:
    table = plain_table()
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _row(table: Table, *cells: object) -> None:
    from rich.text import Text

    table.add_row(*(c if isinstance(c, Text) else Text("" if c is None else visible(str(c)))
                    for c in cells))


def _print(*renderables: object) -> None:
    """Print text (never read as markup) and tables: at the terminal's width on a terminal,
    unwrapped when piped, so node ids stay whole for grep and friends.

    Piped, a line of text is written as it is (tabs and ``:name:`` kept, as grep expects)
    and rich is loaded only for a table.
    """
    piped = not sys.stdout.isatty()
    out: Console | None = None
    for renderable in renderables:
        if piped and isinstance(renderable, str):
            say(renderable)
            continue
        if out is None:
            out = console(width=_PIPE_WIDTH) if piped else console()
        if isinstance(renderable, str):
            out.print(renderable, markup=False)
        else:
            out.print(renderable)


def _took_ms(summary: RunSummary) -> int | None:
    """How long the run took (ms): None while it has not finished."""
    if summary.finished_at_ms is None:
        return None
    return summary.finished_at_ms - summary.started_at_ms


def _run_heading(summary: RunSummary) -> str:
    lines = [
        f"run {summary.id}  {summary.project}  {summary.status.value}  "
        f"started {_when(summary.started_at_ms)}  took {_seconds(_took_ms(summary))}",
        f"{_plural(summary.total, 'item')}: {_counts_text(summary)}",
    ]
    subtests = ", ".join(f"{summary.subtests[k]} {k}" for k in _SUBTEST_KEYS
                         if summary.subtests.get(k, 0))
    if subtests:
        lines.append(f"subtests: {subtests}")
    selected = _selection_text(summary.selection)
    if selected:
        lines.append(f"selection: {selected}")
    changed = _changed_text(summary)
    if changed:
        lines.append(changed)
    if summary.session_id is not None:
        lines.append(f"session: {summary.session_id}")
    return "\n".join(lines)


def _selection_text(selection: Selection) -> str:
    """The selection as pytest options (``tests/a.py -k 'cart' --lf``) with the deselected
    count; empty for a run of the whole suite."""
    parts = [shlex.quote(arg) for arg in selection.args]
    if selection.keyword:
        parts.append(f"-k {shlex.quote(selection.keyword)}")
    if selection.markexpr:
        parts.append(f"-m {shlex.quote(selection.markexpr)}")
    if selection.last_failed:
        parts.append("--lf")
    if selection.failed_first:
        parts.append("--ff")
    if selection.maxfail:
        parts.append("-x" if selection.maxfail == 1 else f"--maxfail={selection.maxfail}")
    if selection.deselected:
        parts.append(f"({selection.deselected} deselected)")
    return " ".join(parts)


def _glyphs() -> Glyphs:
    """The chart characters standard output's encoding can write (:func:`glyphs_for`)."""
    return glyphs_for(getattr(sys.stdout, "encoding", None))


def _span(values: Iterable[float | None], shown: Callable[[float], str],
          nothing: str = "no values") -> str:
    """The range a sparkline of ``values`` is scaled over, as ``shown`` writes a value:
    "LOW to HIGH", one value when all are equal, ``nothing`` without a finite value."""
    present = [v for v in values if v is not None and math.isfinite(v)]
    if not present:
        return nothing
    low, high = min(present), max(present)
    return shown(low) if low == high else f"{shown(low)} to {shown(high)}"


def _duration(ms: float) -> str:
    """``ms`` for a chart's range: in ms (one decimal below 10) under a second, else in
    seconds with two decimals, so that a range of short tests is not "0.00s to 0.00s"."""
    if ms < 10:
        return f"{ms:.1f}ms"
    return f"{ms:.0f}ms" if ms < 1000 else _seconds(ms)


def _chart_line(label: str, chart: str | Text, note: str, stacked: bool = False) -> list[Text]:
    """The lines of one chart: its ``label`` in a column of its own, the chart, a ``note``,
    on one line; ``stacked``, the label and the note on one line and the chart alone on the
    next, so that the chart has the whole width; the note alone when the chart has no value
    to show (only gaps)."""
    from rich.text import Text

    plain = chart if isinstance(chart, str) else chart.plain
    if not plain.strip():
        return [Text(f"{label:<10}{note}")]
    if stacked:
        return [Text(f"{label:<10}{note}"), Text.assemble(chart)]
    return [Text.assemble(f"{label:<10}", chart, "  ", note)]


def _chart_room() -> int | None:
    """The columns a chart line may take: the terminal's on a terminal; None (no limit)
    when standard output is not one, where lines stay whole as the tables' do."""
    if not sys.stdout.isatty():
        return None
    return console().width


def _fitted(draw: Callable[[int, bool], list[Text]], count: int,
            room: int | None) -> tuple[int, list[Text]]:
    """The chart lines ``draw(n, stacked)`` draws of the newest ``n`` of ``count`` values,
    and that ``n``: all ``count`` on one line each when they fit in ``room`` columns (or
    ``room`` is None); else the layout showing more values of the two, the largest ``n``
    whose every line fits beside its label and note, or each chart on a line of its own
    under them (``stacked``: ``room`` values at most); at least one value. A chart that
    wrapped would no longer read as one line per series."""
    shown = count
    while True:
        lines = draw(shown, False)
        widest = max((line.cell_len for line in lines), default=0)
        if room is None or widest <= room or shown <= 1:
            break
        shown = max(1, min(shown - 1, shown - (widest - room)))
    if room is None or shown == count or min(count, room) <= shown:
        return shown, lines
    stacked = max(1, min(count, room))
    return stacked, draw(stacked, True)


# -- commands -----------------------------------------------------------------------------------


@click.command()
@project_option
@click.option("--all-projects", is_flag=True, help="List the runs of every project.")
@click.option("--session", "session_id", type=RUN_SESSION_ID, default=None, metavar="ID",
              help="Only the runs recorded for agent session ID (the id the plugin recorded "
              "from --runstore-session or RUNSTORE_SESSION_ID; not read from the "
              "environment here), of every project unless --project is given.")
@_limit_option(20, "Most runs to list (newest first).")
@format_option
def runs(project: str | None, all_projects: bool, limit: int, session_id: str | None) -> None:
    """List recorded runs, newest first ("no runs yet", exit 0, on an empty database).

    \b
    JSON: {"project": NAME|null, "session_id": ID|null, "runs": [RUN...], "has_more": bool}
    Example:
      runstore runs --limit 5
      runstore runs --session "$RUNSTORE_SESSION_ID"
    """
    if all_projects and project is not None:
        raise click.UsageError("give --project or --all-projects, not both")
    with _services() as services:
        if not services.get(services.reader.projects()):
            if services.output_format == "json":
                emit_json({"project": project, "session_id": session_id, "runs": [],
                           "has_more": False})
            else:
                _print(f"no runs yet in {services.db_path} (record one with: pytest --runstore)")
            return
        every = all_projects or (session_id is not None and project is None)
        name = None if every else _project(services, project)
        page = services.get(services.reader.list_runs(name, limit=limit, session_id=session_id))
        if services.output_format == "json":
            emit_json({"project": name, "session_id": session_id,
                       "runs": [_run_document(r) for r in page.items],
                       "has_more": page.has_more})
            return
        if session_id is not None and not page.items:
            _print(f"no runs of session {session_id}")
            return
        table = _table("run", "project", "status", "started", "took", "items", "counts")
        for run in page.items:
            _row(table, run.id, run.project, run.status.value, _when(run.started_at_ms),
                 _seconds(_took_ms(run)), run.total, _counts_text(run))
        _print(table)
        if page.has_more:
            _print(f"(more runs: raise --limit above {limit})")


@click.command()
@click.argument("run", type=RUN, default="latest")
@click.argument("nodeid", type=TEXT, required=False)
@project_option
@click.option("--all", "show_all", is_flag=True, help="List passing items too (text output).")
@format_option
def show(run: int | str, nodeid: str | None, project: str | None, show_all: bool) -> None:
    """Show one run (default: the latest) with its items, or one item of it in full.

    The heading gives the counts, the subtest totals and the run's selection (path
    arguments, -k, -m, --lf, --ff, -x and pytest's deselected count) when it ran one.
    Each item has its verdict (new_failure, persistent_failure, flaky, recovered, stable)
    and the reason for it (the rule and the runs it rests on). Text lists the items that
    did not pass, are flaky or just recovered (every item with --all); JSON always lists
    every item. With NODEID (an exact node id, or a fragment naming one test), show that
    item: its verdict, phases, every error with frames and causes, subtests, earlier
    rerun attempts with their errors and its captured output.

    \b
    JSON (schemas show.json, show-test.json in runstore/cli/schemas):
      {"run": RUN, "tests": [{"nodeid", "outcome", "duration_ms", "attempts", "fingerprint",
       "classification", "window", "because": {"rule", "run_ids", "summary"},
       "skip_reason"?, "phase"?, "exception_type"?, "message"?}],
       "collection_errors": [{"nodeid", "phase", "exception_type", "message"}]}
    With NODEID: {"run": RUN, "test": {"nodeid", "outcome", "duration_ms", "attempts",
       "skip_reason", "fingerprint", "classification", "window", "because", "phases", "errors":
       [{"phase", "exception_type", "message", "text", "frames", "causes"}], "subtests",
       "earlier_attempts": [{"outcome", "duration_ms", "source", "errors"}], "stdout",
       "stderr",
       "log" (each with a *_truncated flag)}}
    Example:
      runstore show latest --format json
      runstore show 12 tests/test_cart.py::test_total
    """
    with _services() as services:
        summary = _run(services, project, run)
        if nodeid is not None:
            _show_test(services, summary, _resolve_test(services, summary.project, nodeid))
            return
        shown = _shown_run(services, summary)
        tests, verdicts, by_node, collection = shown
        if services.output_format == "json":
            emit_json(_show_json(summary, *shown, marks=_marks(services, summary.id)))
            return
        marks = dict.fromkeys(_marks(services, summary.id), " (quarantined)")
        _print(_run_heading(summary))
        listed = [t for t in tests if show_all or t.outcome is not Outcome.PASSED
                  or _noteworthy(verdicts.get(t.nodeid))]
        if collection or listed:
            table = _table("outcome", "test", "verdict", "because", "phase", "took", "message")
            for error in collection:
                _row(table, "collection error", error.nodeid, "", "", "collect", "-",
                     _error_line(error.exception_type, error.message))
            for test in listed:
                failure = by_node.get(test.nodeid)
                verdict = verdicts.get(test.nodeid)
                _row(table, test.outcome.value + marks.get(test.nodeid, ""), test.nodeid,
                     verdict.classification.value if verdict else "",
                     _because(verdict.because) if verdict else "",
                     failure.phase.value if failure else "",
                     _seconds(test.duration_ms),
                     _error_line(failure.exception_type, failure.message) if failure
                     else (test.skip_reason or ""))
            _print("", table)


_Shown = tuple[
    tuple[TestRecord, ...], dict[str, TestClassification], dict[str, FailureRecord],
    list[FailureRecord],
]


def _shown_run(services: Services, summary: RunSummary) -> _Shown:
    """A run's items, their verdicts by node id, their failures by node id, and its
    collection errors."""
    tests = services.get(services.reader.tests(summary.id))
    failures = services.get(services.reader.failures(summary.id))
    verdicts = {c.nodeid: c for c in _classified(services, summary.id)}
    by_node = {f.nodeid: f for f in failures if f.phase is not Phase.COLLECT}
    return tests, verdicts, by_node, [f for f in failures if f.phase is Phase.COLLECT]


def _show_json(
    summary: RunSummary, tests: tuple[TestRecord, ...],
    verdicts: dict[str, TestClassification], by_node: dict[str, FailureRecord],
    collection: list[FailureRecord], *, marks: dict[str, str],
) -> dict[str, Any]:
    return {
        "run": _run_document(summary),
        "tests": [{**_test_document(t, by_node.get(t.nodeid)),
                   **_verdict_or_none(verdicts.get(t.nodeid)),
                   "quarantined": marks.get(t.nodeid)} for t in tests],
        "collection_errors": [
            {"nodeid": f.nodeid, "phase": f.phase.value,
             "exception_type": f.exception_type, "message": f.message}
            for f in collection
        ],
    }


def show_document(
    services: Services, run: int | str = "latest", project: str | None = None
) -> dict[str, Any]:
    """The ``show`` JSON document of a whole run (schema ``show.json``, without
    ``schema_version``); refusals as :func:`failures_document`."""
    summary = _run(services, project, run)
    return _show_json(summary, *_shown_run(services, summary),
                      marks=_marks(services, summary.id))


def _noteworthy(verdict: TestClassification | None) -> bool:
    """Whether a passing item is listed by ``show`` without ``--all``: it is flaky or has
    just recovered."""
    return verdict is not None and verdict.classification in (
        Classification.FLAKY, Classification.RECOVERED)


def _failed_without_failures(services: Services, run_id: int) -> str:
    """Why a ``failed`` run has no failing item: its flaky passes (a repeat whose executions
    flipped fails the session though its last execution passed), else another cause."""
    flaky = sorted(c.nodeid for c in services.get(services.reader.classify_unstable(
        RunId(run_id), policy=services.policy))
        if c.classification is Classification.FLAKY and c.outcome not in FAILING_OUTCOMES)
    if flaky:
        return (f"the run failed because {len(flaky)} test(s) passed flaky (their repeated "
                f"executions flipped): {', '.join(flaky[:5])}"
                + (f" +{len(flaky) - 5} more" if len(flaky) > 5 else ""))
    return "the run failed without a failing item (a plugin or pytest's exit status failed it)"


@click.command()
@click.argument("run", type=RUN, default="latest")
@project_option
@click.option("--new", "only_new", is_flag=True, help="Only failures not seen before.")
@click.option("--new-signatures", "new_signatures", is_flag=True,
              help="Quality gate: exit 1 when the run (and the other runs of its invocation) "
              "has a failure signature no earlier run recorded, listing those signatures; "
              "exit 0 otherwise (JSON schema new-signatures.json).")
@format_option
def failures(run: int | str, project: str | None, only_new: bool, new_signatures: bool) -> None:
    """Show the failing items and collection errors of a run with where they failed.

    Each failing test has its verdict and its reason, since which run and how many runs
    in a row it has failed, and the first error message of that streak when it differs.

    \b
    JSON (schema failures.json): {"run": RUN, "failures": [{"nodeid", "outcome", "phase",
           "exception_type", "message", "message_truncated", "text", "text_truncated",
           "frames": [{"path", "line", "function", "is_project"}], "causes":
           [{"exception_type", "message", "text", "frames"}], "signature", "is_new",
           "streak", "failing_since", "streak_message", "classification", "window",
           "because"}]} (collection errors have null verdict fields)
    Example:
      runstore failures --new
      runstore failures --new-signatures || echo "a new root cause"
    """
    if new_signatures:
        from runstore.cli._signatures import gate

        gate(run, project)
        return
    with _services() as services:
        summary, found, verdicts = _failing(services, run, project, only_new)
        if services.output_format == "json":
            emit_json(_failures_json(summary, found, verdicts, _marks(services, summary.id)))
            return
        _print(_run_heading(summary))
        if not found:
            _print("no new failures" if only_new else "no failures")
            if summary.status is RunStatus.FAILED and not only_new:
                _print(_failed_without_failures(services, summary.id))
            return
        marks = _marks(services, summary.id)
        for failure in found:
            new = "  (new)" if failure.is_new else ""
            verdict = verdicts.get(failure.nodeid)
            judged = f"  {verdict.classification.value}" if verdict else ""
            held = (f"  (quarantined by {marks[failure.nodeid]})"
                    if failure.nodeid in marks else "")
            _print("", f"{failure.outcome.value.upper()} {failure.nodeid}  "
                       f"[{failure.phase.value}]{judged}{new}{held}")
            _print(f"  {_error_line(failure.exception_type, failure.message)}")
            _print(f"  {_streak_text(failure)}")
            if verdict is not None:
                _print(f"  because {_because(verdict.because)}")
            project_frames = [f for f in failure.frames if f.is_project] or list(failure.frames)
            for frame in project_frames[-3:]:
                where = f"{frame.path}:{frame.line}" if frame.line else frame.path
                _print(f"    at {where} in {frame.function or '?'}")
            for cause in failure.causes:
                _print(f"  caused by {_error_line(cause.exception_type, cause.message)}")
            if failure.phase is not Phase.COLLECT:
                _print_detail(services, summary.id, failure.nodeid)


def _failing(
    services: Services, run: int | str, project: str | None, only_new: bool
) -> tuple[RunSummary, tuple[FailureRecord, ...], dict[str, TestClassification]]:
    """The run ``run`` names, its failures (only the new ones with ``only_new``) and the
    verdict of each item by node id."""
    summary = _run(services, project, run)
    found = services.get(services.reader.failures(summary.id))
    if only_new:
        found = tuple(f for f in found if f.is_new)
    verdicts = {c.nodeid: c for c in _classified(services, summary.id)}
    return summary, found, verdicts


def _failures_json(
    summary: RunSummary,
    found: tuple[FailureRecord, ...],
    verdicts: dict[str, TestClassification],
    marks: dict[str, str],
) -> dict[str, Any]:
    return {"run": _run_document(summary), "failures": [
        {**_failure_document(f), **_verdict_or_none(verdicts.get(f.nodeid)),
         "quarantined": marks.get(f.nodeid)} for f in found]}


def failures_document(
    services: Services, run: int | str = "latest", project: str | None = None,
    only_new: bool = False, new_signatures: bool = False,
) -> dict[str, Any]:
    """The ``failures`` JSON document (schema ``failures.json``, without ``schema_version``).

    ``run`` is a run id, ``"latest"`` or ``"latest~N"`` (as :data:`RUN` converts it),
    ``project`` the ``--project`` value (None: the default project), ``only_new`` is
    ``--new``; ``new_signatures`` (``--new-signatures``) answers the gate's document
    instead (``runstore.cli._signatures.new_signatures_document``). An unknown project or
    run, or a storage failure, raises :class:`~runstore.cli._output.Refused` with the
    command's one-line reason.
    """
    if new_signatures:
        from runstore.cli._signatures import new_signatures_document

        return new_signatures_document(services, run, project)
    summary, found, verdicts = _failing(services, run, project, only_new)
    return _failures_json(summary, found, verdicts, _marks(services, summary.id))


_TAIL_LINES = 5


def _streak_text(failure: FailureRecord) -> str:
    """Since which run and how many runs in a row ``failure``'s test has failed, with the
    first error of the streak when it differs from this run's."""
    if failure.streak <= 1:
        return "failing since this run (1 run)"
    since = ("an earlier run, since pruned" if failure.failing_since is None
             else f"run {failure.failing_since}")
    text = f"failing since {since}, {failure.streak} runs in a row"
    first = _first_line(failure.streak_message)
    if first and first != _first_line(failure.message):
        text += f"; the streak began with: {first}"
    return text


def _error_document(error: ErrorInfo) -> dict[str, Any]:
    causes: list[dict[str, Any]] = []
    cause = error.cause
    while cause is not None:
        causes.append(_cause_document(cause))
        cause = cause.cause
    return {"phase": error.phase.value, **_cause_document(error), "causes": causes}


def _show_test(services: _Services, summary: RunSummary, nodeid: str) -> None:
    """Print (or emit as JSON) everything stored about one item of a run."""
    detail = services.get(services.reader.test_detail(summary.id, nodeid))
    test = detail.test
    verdict = next((c for c in _classified(services, summary.id)
                    if c.nodeid == test.nodeid), None)
    if services.output_format == "json":
        emit_json({"run": _run_document(summary), "test": {
            "nodeid": test.nodeid, "outcome": test.outcome.value,
            "duration_ms": test.duration_ms, "attempts": test.attempts,
            "skip_reason": test.skip_reason, "fingerprint": test.fingerprint,
            **_verdict_or_none(verdict),
            "quarantined": _marks(services, summary.id).get(test.nodeid),
            "phases": [{"phase": p.phase.value, "outcome": p.outcome.value,
                        "duration_ms": p.duration_ms} for p in test.phases],
            "errors": [_error_document(e) for e in detail.errors],
            "subtests": [{"description": t.description, "outcome": t.outcome.value,
                          "duration_ms": t.duration_ms,
                          "error": None if t.error is None else _error_document(t.error)}
                         for t in detail.subtests],
            "earlier_attempts": [{"outcome": a.outcome.value, "duration_ms": a.duration_ms,
                                  "source": _source(a).value,
                                  "errors": [_error_document(e) for e in errors]}
                                 for a, errors in _attempts_with_errors(detail)],
            "stdout": detail.stdout, "stdout_truncated": detail.stdout_truncated,
            "stderr": detail.stderr, "stderr_truncated": detail.stderr_truncated,
            "log": detail.log, "log_truncated": detail.log_truncated,
        }})
        return
    _print(_run_heading(summary), "",
           f"{test.outcome.value.upper()} {test.nodeid}  {_seconds(test.duration_ms)}")
    _print("  phases: " + ", ".join(f"{p.phase.value} {p.outcome.value}" for p in test.phases))
    if verdict is not None:
        _print(f"  verdict: {verdict.classification.value}, because {_because(verdict.because)}")
    held = _marks(services, summary.id).get(test.nodeid)
    if held is not None:
        _print(f"  quarantined in this run by {held}")
    if test.skip_reason:
        _print(f"  reason: {test.skip_reason}")
    for error in detail.errors:
        _print(f"  [{error.phase.value}] {_error_line(error.exception_type, error.message)}")
        for frame in error.frames:
            where = f"{frame.path}:{frame.line}" if frame.line else frame.path
            _print(f"    at {where} in {frame.function or '?'}")
        cause = error.cause
        while cause is not None:
            _print(f"    caused by {_error_line(cause.exception_type, cause.message)}")
            cause = cause.cause
    for subtest in detail.subtests:
        reason = "" if subtest.error is None else (
            f"  {_error_line(subtest.error.exception_type, subtest.error.message)}")
        _print(f"  subtest {subtest.description}: {subtest.outcome.value}{reason}")
    _print_attempts(detail)
    for stream, text, cut in (("stdout", detail.stdout, detail.stdout_truncated),
                              ("stderr", detail.stderr, detail.stderr_truncated),
                              ("log", detail.log, detail.log_truncated)):
        if text:
            note = " (stored cut at its cap)" if cut else ""
            _print(f"  captured {stream}{note}:")
            for line in text.rstrip("\n").splitlines():
                _print(f"    | {line}")


def _attempts_with_errors(
    detail: TestDetail,
) -> list[tuple[TestRecord, tuple[ErrorInfo, ...]]]:
    """Each earlier attempt of an item, oldest first, with its errors (none stored: ())."""
    errors = list(detail.attempt_errors) + [()] * len(detail.attempts)
    return list(zip(detail.attempts, errors[: len(detail.attempts)], strict=True))


def _source(attempt: TestRecord) -> AttemptSource:
    """Where an earlier attempt came from (a record without one is a rerun)."""
    return attempt.source or AttemptSource.RERUN


def _print_attempts(detail: TestDetail) -> None:
    """One line per earlier attempt (outcome, duration, source: rerun or repeat), then a
    line per error."""
    for number, (attempt, errors) in enumerate(_attempts_with_errors(detail), start=1):
        _print(f"  attempt {number} of {len(detail.attempts) + 1} ({_source(attempt).value}):"
               f" {attempt.outcome.value}  {_seconds(attempt.duration_ms)}")
        for error in errors:
            _print(f"    [{error.phase.value}] {_error_line(error.exception_type, error.message)}")


def _print_detail(services: _Services, run_id: RunId, nodeid: str) -> None:
    """Print what ``failures`` adds after an item's first error: its other errors, failed
    subtests, earlier attempts and the last lines of its captured output."""
    found = services.reader.test_detail(run_id, nodeid)
    if isinstance(found, Failure) and isinstance(found.failure(), NotFound):
        return
    detail = services.get(found)
    for error in detail.errors[1:]:
        _print(f"  also [{error.phase.value}] {_error_line(error.exception_type, error.message)}")
    for subtest in detail.subtests:
        if subtest.outcome in FAILING_OUTCOMES:
            reason = "" if subtest.error is None else (
                _error_line(subtest.error.exception_type, subtest.error.message))
            _print(f"  subtest {subtest.description} {subtest.outcome.value}: {reason}")
    _print_attempts(detail)
    for stream, text, cut in (("stdout", detail.stdout, detail.stdout_truncated),
                              ("stderr", detail.stderr, detail.stderr_truncated),
                              ("log", detail.log, detail.log_truncated)):
        if not text.strip():
            continue
        lines = text.rstrip("\n").splitlines()[-_TAIL_LINES:]
        note = ", stored cut at its cap" if cut else ""
        _print(f"  captured {stream} (last {len(lines)} lines{note}):")
        for line in lines:
            _print(f"    | {line}")


def _evidence_names(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> frozenset[EvidenceRule] | None:
    """``--evidence RULE,...``: flaky rule names, comma-separated (empty: none)."""
    if value is None:
        return None
    names = [n.strip() for n in value.split(",") if n.strip()]
    allowed = {r.value for r in FLAKY_RULES}
    wrong = [n for n in names if n not in allowed]
    if wrong:
        raise click.BadParameter(
            f"{wrong[0]!r} is not a flaky rule ({', '.join(r.value for r in FLAKY_RULES)})"
        )
    return frozenset(EvidenceRule(n) for n in names)


def _overridden(base: FlakyPolicy, changes: dict[str, Any]) -> FlakyPolicy | None:
    """``base`` with the options given (None when none was), checked as a reader checks a
    policy: a value out of its range is a usage error naming the option."""
    given = {k: v for k, v in changes.items() if v is not None}
    if not given:
        return None
    from runstore.services._test_runs_rules import check_flaky_policy

    checked = check_flaky_policy(attrs.evolve(base, **given))
    if isinstance(checked, Failure):
        error = checked.failure()
        option = "--" + error.field.removeprefix("policy.").replace("_", "-")
        raise click.BadParameter(error.reason, param_hint=f"'{option}'")
    return checked.unwrap()


@click.command()
@click.argument("nodeids", nargs=-1, type=TEXT, metavar="[NODEID]...")
@project_option
@click.option("--explain", is_flag=True, default=False,
              help="Show each test's window, entry by entry, and why each flaky rule did or "
              "did not match (NODEIDs: those tests; default: the flaky ones).")
@click.option("--window", type=click.INT, default=None, metavar="N",
              help="Judge the newest N executed runs (1-50; configured: [tool.runstore.flaky]).")
@click.option("--min-runs", type=click.INT, default=None, metavar="N",
              help="Evidence runs a rule comparing runs needs before it fires.")
@click.option("--flip-rate", type=click.FLOAT, default=None, metavar="X",
              help="Least flips/(runs-1) for oscillation (0.0-1.0).")
@click.option("--outage-share", type=click.FLOAT, default=None, metavar="X",
              help="A run with more than this share failing is an outage (0.0-1.0).")
@click.option("--outage-min-tests", type=click.INT, default=None, metavar="N",
              help="Least executed tests of a run before it can be an outage.")
@click.option("--evidence", type=TEXT, default=None, metavar="RULE,...",
              callback=_evidence_names, help="The flaky rules that count, comma-separated.")
@format_option
def flaky(
    nodeids: tuple[str, ...], project: str | None, explain: bool, window: int | None,
    min_runs: int | None, flip_rate: float | None, outage_share: float | None,
    outage_min_tests: int | None, evidence: frozenset[EvidenceRule] | None,
) -> None:
    """List tests with evidence of flakiness in their recent runs, and why.

    Flaky means the outcome changed while the code did not, by the first rule that
    applies: passed_on_rerun (failed, then passed on a rerun in one run), flipped_in_run
    (runstore's own repeats saw it pass and fail), same_code (passed and failed with one
    code fingerprint), same_commit (passed and failed on one git commit with a clean
    tree), oscillation (two or more separate failing streaks, F..P..F). A test that broke
    once and stays broken, or was fixed once, is not listed. Runs where most tests failed
    (an outage) are never evidence. The thresholds come from [tool.runstore.flaky] in
    pyproject.toml; the options change them for this answer. With --explain the answer is
    each test's evidence and, with changed thresholds, a preview: the tests they would
    newly flag and those they would no longer flag.

    \b
    JSON: {"project": NAME, "flaky": [{"nodeid", "flips", "failures", "passes",
           "window": [OUTCOME...] (newest first), "last_run_id",
           "because": {"rule", "run_ids", "summary"}}]}
    JSON with --explain: schemas/flaky-explain.json.
    Example:
      runstore flaky --format json
      runstore flaky --explain --window 20 --flip-rate 0.3
    """
    if nodeids and not explain:
        raise click.UsageError("NODEID is given with --explain only")
    with _services() as services:
        if explain or services.output_format == "json":
            document = flaky_document(
                services, project, nodeids, explain, window, min_runs, flip_rate,
                outage_share, outage_min_tests, evidence,
            )
            if services.output_format == "json":
                emit_json(document)
                return
            from runstore.cli._flaky_explain import render_explain

            for line in render_explain(document):
                say(visible(line))
            return
        changes = _changes(window, min_runs, flip_rate, outage_share, outage_min_tests,
                           evidence)
        chosen = _overridden(services.policy, changes)
        if chosen is not None:
            services = attrs.evolve(services, policy=chosen)
        name = _project(services, project)
        found = _flaky_of(services, name)
        if not found:
            _print(f"no flaky tests in {name}")
            return
        table = _table("test", "rule", "because", "recent (newest first)")
        for test in found:
            _row(table, test.nodeid, test.because.rule.value,
                 test.because.summary or _runs_list(test.because.run_ids),
                 " ".join(_SYMBOL.get(o, "?") for o in test.window))
        _print(f"{_plural(len(found), 'flaky test')} in {name}", table)


def _flaky_json(name: str, found: tuple[FlakyTest, ...]) -> dict[str, Any]:
    return {"project": name, "flaky": [
        {"nodeid": f.nodeid, "flips": f.flips, "failures": f.failures,
         "passes": f.passes, "window": [o.value for o in f.window],
         "last_run_id": f.last_run_id, "because": _evidence_document(f.because)}
        for f in found
    ]}


def _changes(
    window: int | None, min_runs: int | None, flip_rate: float | None,
    outage_share: float | None, outage_min_tests: int | None,
    evidence: frozenset[EvidenceRule] | None,
) -> dict[str, Any]:
    """The ``FlakyPolicy`` fields the threshold options name (None: not given)."""
    return {"window": window, "min_runs": min_runs, "flip_rate": flip_rate,
            "outage_share": outage_share, "outage_min_tests": outage_min_tests,
            "evidence": evidence}


def flaky_document(
    services: Services,
    project: str | None = None,
    nodeids: tuple[str, ...] = (),
    explain: bool = False,
    window: int | None = None,
    min_runs: int | None = None,
    flip_rate: float | None = None,
    outage_share: float | None = None,
    outage_min_tests: int | None = None,
    evidence: frozenset[EvidenceRule] | None = None,
) -> dict[str, Any]:
    """The ``flaky`` JSON document (schema ``flaky.json``, without ``schema_version``) of
    ``project`` (None: the default project) under ``services.policy`` changed by the
    threshold options given; with ``explain`` the ``flaky --explain`` document
    (``flaky-explain.json``, :func:`runstore.cli._flaky_explain.explain_document`, the
    change as its preview). A threshold out of range is a usage error (``click``); other
    refusals as :func:`failures_document`."""
    changes = _changes(window, min_runs, flip_rate, outage_share, outage_min_tests, evidence)
    chosen = _overridden(services.policy, changes)
    if explain:
        from runstore.cli._flaky_explain import explain_document

        return explain_document(services, project, nodeids, chosen)
    if chosen is not None:
        services = attrs.evolve(services, policy=chosen)
    name = _project(services, project)
    return _flaky_json(name, _flaky_of(services, name))


_SYMBOL = {
    Outcome.PASSED: "P",
    Outcome.FAILED: "F",
    Outcome.ERROR: "E",
    Outcome.XPASSED: "X",
    Outcome.SKIPPED: "s",
    Outcome.XFAILED: "x",
}


def _resolve_test(services: _Services, project: str, fragment: str) -> str:
    """The one node id ``fragment`` names: an exact node id, else the only one containing it;
    none or several end the command, listing the candidates."""
    candidates = services.get(services.reader.find_tests(project, fragment, limit=20))
    if fragment in candidates:
        return fragment
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        services.fail(f"no test of project {project!r} matches {fragment!r}")
    shown = "; ".join(candidates[:10])
    more = " ..." if len(candidates) > 10 else ""
    return services.fail(
        f"{fragment!r} matches {len(candidates)} tests of project {project!r}: {shown}{more} "
        "(give more of the node id)",
        document={"candidates": list(candidates)},
    )


@click.command()
@click.argument("nodeid", type=TEXT)
@project_option
@format_option
def history(nodeid: str, project: str | None) -> None:
    """Show the recent outcomes of one test, newest first.

    NODEID is a node id or a unique part of one.

    Text output starts with two charts, oldest to newest: a strip of one character per
    outcome (a check mark passed, a ballot X failed, then pytest's E error, s skipped,
    x xfailed, X xpassed; pytest's . and F where standard output cannot write the marks)
    and a sparkline of the durations, scaled between the shortest and the longest shown
    beside it (on a terminal, the newest outcomes that fit its width).

    Each row keeps the first error message of a failing outcome, the git commit (with
    "+dirty" for uncommitted changes), the code fingerprint of the code the test ran (its
    first 12 hex digits under "code") and the failed rerun attempts before the final one;
    the rows outlive the pruning of their runs.

    \b
    JSON: {"project": NAME, "nodeid": NODEID, "history": [{"run_id", "outcome",
           "duration_ms", "recorded_at_ms", "message", "git_commit", "git_dirty",
           "rerun_failures", "earlier_passes", "fingerprint"}]}
    Example:
      runstore history test_checkout.py::test_total
    """
    with _services() as services:
        name, resolved, entries = _history_of(services, nodeid, project)
        if services.output_format == "json":
            emit_json(_history_json(name, resolved, entries))
            return
        table = _table("run", "outcome", "took", "recorded", "commit", "code", "reruns",
                       "message")
        _, charts = _fitted(lambda n, stacked: _history_charts(entries[:n], _glyphs(),
                                                               len(entries), stacked),
                            len(entries), _chart_room())
        for entry in entries:
            commit = (entry.git_commit or "")[:12] + ("+dirty" if entry.git_dirty else "")
            _row(table, entry.run_id if entry.run_id is not None else "(pruned)",
                 entry.outcome.value, _seconds(entry.duration_ms), _when(entry.recorded_at_ms),
                 commit, (entry.fingerprint or "")[:12], entry.rerun_failures or "",
                 _first_line(entry.message or ""))
        _print(resolved, *charts, table)


def _history_charts(entries: tuple[HistoryEntry, ...], glyphs: Glyphs,
                    of: int | None = None, stacked: bool = False) -> list[Text]:
    """The outcome strip and the duration sparkline of ``entries`` (newest first, as
    ``DataReader.history`` gives them), drawn oldest to newest; none without entries.
    ``of``: how many entries there are when ``entries`` are only the newest of them (the
    strip's note then says "newest N of OF" instead of "oldest -> newest"); ``stacked``:
    each chart under its label and note (:func:`_chart_line`)."""
    if not entries:
        return []
    oldest = entries[::-1]
    counts: dict[str, int] = {}
    for entry in oldest:
        counts[entry.outcome.value] = counts.get(entry.outcome.value, 0) + 1
    durations = [e.duration_ms for e in oldest]
    strip = styled(outcome_strip((e.outcome for e in oldest), glyphs), glyphs)
    shown = (f"newest {len(entries)} of {of}" if of is not None and of > len(entries)
             else f"oldest {glyphs.arrow} newest")
    return [
        *_chart_line("outcome", strip, f"{shown}: {', '.join(_outcome_counts(counts))}",
                     stacked),
        *_chart_line("took", sparkline(durations, glyphs), _span(durations, _duration), stacked),
    ]


def _history_of(
    services: Services, nodeid: str, project: str | None
) -> tuple[str, str, tuple[HistoryEntry, ...]]:
    """The project, the one node id ``nodeid`` names in it, and that test's history."""
    name = _project(services, project)
    resolved = _resolve_test(services, name, nodeid)
    return name, resolved, services.get(services.reader.history(name, resolved))


def _history_json(name: str, resolved: str, entries: tuple[HistoryEntry, ...]) -> dict[str, Any]:
    return {"project": name, "nodeid": resolved, "history": [
        {"run_id": e.run_id, "outcome": e.outcome.value, "duration_ms": e.duration_ms,
         "recorded_at_ms": e.recorded_at_ms, "message": e.message,
         "git_commit": e.git_commit, "git_dirty": e.git_dirty,
         "rerun_failures": e.rerun_failures, "earlier_passes": e.earlier_passes,
         "fingerprint": e.fingerprint}
        for e in entries
    ]}


def history_document(
    services: Services, nodeid: str, project: str | None = None
) -> dict[str, Any]:
    """The ``history`` JSON document (schema ``history.json``, without ``schema_version``)
    of the one test ``nodeid`` (a node id or a unique part of one) names; no match or
    several raise :class:`~runstore.cli._output.Refused` (several: with ``candidates``),
    other refusals as :func:`failures_document`."""
    return _history_json(*_history_of(services, nodeid, project))


@click.command()
@click.argument("run", type=RUN, default="latest")
@project_option
@_limit_option(10, "How many items.")
@format_option
def slowest(run: int | str, project: str | None, limit: int) -> None:
    """List the slowest items of a run.

    \b
    JSON: {"run": RUN, "tests": [{"nodeid", "outcome", "duration_ms", "attempts"}]}
    Example:
      runstore slowest --limit 5
    """
    with _services() as services:
        summary = _run(services, project, run)
        found = services.get(services.reader.slowest(summary.id, limit=limit))
        if services.output_format == "json":
            emit_json(_slowest_json(summary, found))
            return
        table = _table("took", "outcome", "test")
        for test in found:
            _row(table, _seconds(test.duration_ms), test.outcome.value, test.nodeid)
        _print(_run_heading(summary), table)


def _slowest_json(summary: RunSummary, found: tuple[TestRecord, ...]) -> dict[str, Any]:
    return {"run": _run_document(summary), "tests": [_test_document(t, None) for t in found]}


def slowest_document(
    services: Services, run: int | str = "latest", project: str | None = None, limit: int = 10
) -> dict[str, Any]:
    """The ``slowest`` JSON document (schema ``slowest.json``, without ``schema_version``):
    the ``limit`` slowest items of the run; refusals as :func:`failures_document`."""
    summary = _run(services, project, run)
    return _slowest_json(summary, services.get(services.reader.slowest(summary.id, limit=limit)))


def _coverage_document(report: CoverageReport) -> dict[str, Any]:
    return {
        "run_id": int(report.run_id),
        "source_run_id": int(report.source_run_id),
        "percent_covered": report.percent_covered,
        "files": [
            {"path": f.path, "statements": f.statements,
             "missing_statements": f.missing_statements, "branches": f.branches,
             "partial_branches": f.partial_branches, "missing_branches": f.missing_branches,
             "percent_covered": f.percent_covered, "missing_lines": list(f.missing_lines)}
            for f in report.files
        ],
    }


def _covered(
    services: Services, run: int | str, project: str | None, path: str | None
) -> tuple[RunSummary, CoverageReport]:
    """The run ``run`` names and its coverage, its files narrowed to ``path`` when given."""
    summary = _run(services, project, run)
    found = services.reader.coverage(summary.id)
    if isinstance(found, Failure) and isinstance(found.failure(), NotFound):
        services.fail(
            f"run {summary.id} has no coverage (record with pytest --cov=PKG --runstore)"
        )
    report = services.get(found)
    if path is None:
        return summary, report
    from runstore.cli._tests_for import _stored_form  # it imports this module

    chosen = measured_file(services, (f.path for f in report.files),
                           _stored_form(services, path), path)
    if chosen is None:
        services.fail(f"run {summary.id} has no coverage of {path!r} "
                      f"({_plural(len(report.files), 'file')} measured)")
    return summary, attrs.evolve(report, files=tuple(f for f in report.files
                                                     if f.path == chosen))


def _names_file(stored: str, asked: str) -> bool:
    """Whether ``asked`` names the stored coverage path ``stored``: the same path, or its
    last components (``cart.py`` and ``shop/cart.py`` name ``src/shop/cart.py``)."""
    stored, asked = stored.replace("\\", "/"), asked.replace("\\", "/").removeprefix("./")
    return stored == asked or stored.endswith("/" + asked)


def measured_file(
    refusals: Refusals, measured: Iterable[str], stored: str, asked: str
) -> str | None:
    """The one measured file that ``stored`` (a ``PATH`` in its stored form; ``asked`` as
    given, for the message) names: itself when it was measured, else the one file whose
    last components it is (:func:`_names_file`); None when it names none. Naming several
    ends the answer (``refusals.fail``) listing the first 10, with every one as the error
    document's ``candidates``: ``coverage --file`` and ``tests-for`` match alike."""
    paths = set(measured)
    if stored in paths:
        return stored
    named = sorted(p for p in paths if _names_file(p, stored))
    if len(named) > 1:
        refusals.fail(
            f"{asked!r} names {_plural(len(named), 'measured file')}: "
            + ", ".join(named[:10]) + ("" if len(named) <= 10 else ", ..."),
            {"candidates": named},
        )
    return named[0] if named else None


def coverage_document(
    services: Services, run: int | str = "latest", project: str | None = None,
    path: str | None = None,
) -> dict[str, Any]:
    """The ``coverage`` JSON document (schema ``coverage.json``, without ``schema_version``)
    of run ``run``; with ``path`` (``--file``) only the file it names (as ``tests-for``'s
    PATH: the path as stored, its last components or a path on disk; see
    :func:`measured_file`), ``percent_covered`` staying the run's. A run without coverage,
    no file named ``path``, or several (with ``candidates``), raises
    :class:`~runstore.cli._output.Refused`; other refusals as :func:`failures_document`."""
    return _coverage_document(_covered(services, run, project, path)[1])


@click.command()
@click.argument("run", type=RUN, default="latest")
@project_option
@click.option("--file", "path", type=TEXT, default=None, metavar="PATH",
              help="Only the file PATH (as stored, its last components: shop/cart.py, or a "
              "path on disk); a PATH naming several measured files is refused.")
@format_option
def coverage(run: int | str, project: str | None, path: str | None) -> None:
    """Show the per-file coverage stored with a run (pytest-cov or coverage.py measured it).

    With --file, only that file (percent_covered in JSON stays the run's total).

    \b
    JSON: {"run_id", "source_run_id", "percent_covered", "files": [{"path", "statements",
           "missing_statements", "branches", "partial_branches", "missing_branches",
           "percent_covered", "missing_lines"}]}
    Example:
      runstore coverage latest
      runstore coverage --file src/shop/cart.py
    """
    with _services() as services:
        summary, report = _covered(services, run, project, path)
        if services.output_format == "json":
            emit_json(_coverage_document(report))
            return
        table = _table("file", "stmts", "miss", "branch", "brpart", "cover", "missing lines")
        for f in report.files:
            _row(table, f.path, f.statements, f.missing_statements, f.branches,
                 f.partial_branches, f"{f.percent_covered:.1f}%", _ranges(f.missing_lines))
        _row(table, "TOTAL", sum(f.statements for f in report.files),
             sum(f.missing_statements for f in report.files),
             sum(f.branches for f in report.files),
             sum(f.partial_branches for f in report.files), f"{report.percent_covered:.1f}%", "")
        _print(f"coverage of run {summary.id}"
               + (f" (stored with run {report.source_run_id})"
                  if report.source_run_id != report.run_id else ""), table)


def _ranges(lines: tuple[int, ...], most: int = 12) -> str:
    spans: list[str] = []
    start = previous = None
    for line in lines:
        if previous is not None and line == previous + 1:
            previous = line
            continue
        if start is not None:
            spans.append(f"{start}" if start == previous else f"{start}-{previous}")
        start = previous = line
    if start is not None:
        spans.append(f"{start}" if start == previous else f"{start}-{previous}")
    return ", ".join(spans[:most]) + (", ..." if len(spans) > most else "")


def trends_document(
    services: Services, project: str | None = None, limit: int = 20
) -> dict[str, Any]:
    """The ``trends`` JSON document (schema ``trends.json``, without ``schema_version``):
    the newest ``limit`` runs of the project, oldest first; refusals as
    :func:`failures_document`."""
    return _trends_json(*_trend_runs(services, project, limit))


def _trend_runs(
    services: Services, project: str | None, limit: int
) -> tuple[str, list[RunSummary], dict[RunId, float]]:
    """The project, its newest ``limit`` runs oldest first, and their coverage (percent) by
    run id (runs without coverage left out)."""
    name = _project(services, project)
    page = services.get(services.reader.list_runs(name, limit=limit))
    points = services.get(services.reader.coverage_trend(name, limit=limit))
    return name, list(reversed(page.items)), {p.run_id: p.percent_covered for p in points}


def _failing_items(summary: RunSummary) -> int:
    """The run's failed and error items (JSON's ``failing``)."""
    return sum(summary.counts.get(o.value, 0) for o in FAILING_OUTCOMES)


def _failing_shown(summary: RunSummary) -> int:
    """The run's failing items and collection errors, as the text of ``trends`` and the
    HTML report count what failed: a run stopped by collection errors has no items."""
    return _failing_items(summary) + summary.collection_errors


def _trends_json(
    name: str, ordered: list[RunSummary], covered: dict[RunId, float]
) -> dict[str, Any]:
    rows: list[dict[str, Any]] = [
        {"run_id": int(r.id), "started_at_ms": r.started_at_ms, "status": r.status.value,
         "counts": {o.value: r.counts.get(o.value, 0) for o in Outcome}, "total": r.total,
         "failing": _failing_items(r), "collection_errors": r.collection_errors,
         "percent_covered": covered.get(r.id)}
        for r in ordered
    ]
    return {"project": name, "runs": rows}


def _percent(value: float) -> str:
    return f"{value:.1f}%"


def _trend_charts(
    ordered: list[RunSummary], covered: dict[RunId, float], glyphs: Glyphs,
    stacked: bool = False,
) -> list[Text]:
    """Sparklines of the runs' failing items, durations and coverage, oldest to newest
    (one cell per run, a gap where a run has no value); none without runs. ``stacked``:
    each sparkline under its label and range (:func:`_chart_line`)."""
    if not ordered:
        return []
    failing: list[float | None] = [_failing_shown(r) for r in ordered]
    took: list[float | None] = [_took_ms(r) for r in ordered]
    cover = [covered.get(r.id) for r in ordered]
    return [
        *_chart_line("failing", sparkline(failing, glyphs),
                     _span(failing, lambda v: str(int(v))), stacked),
        *_chart_line("took", sparkline(took, glyphs), _span(took, _duration, "not finished"),
                     stacked),
        *_chart_line("coverage", sparkline(cover, glyphs), _span(cover, _percent, "no coverage"),
                     stacked),
    ]


def _bar_legend(glyphs: Glyphs, room: int | None) -> Text:
    """The legend of the outcome bars' column: each segment's character and what it is,
    after the label column; without it (and with single gaps) when that would not fit in
    ``room`` columns (None: no limit)."""
    from rich.text import Text

    for label, gap in ((f"{'outcomes':<10}", "  "), ("", " ")):
        legend = Text(label)
        for char, name in zip(glyphs.bar, ("passed", "failing", "skipped"), strict=True):
            legend.append_text(styled(char, glyphs)).append(f" {name}{gap}")
        legend.rstrip()
        if room is None or legend.cell_len <= room:
            break
    return legend


_TREND_COLUMNS = ("run", "started", "status", "items", "failing", "coverage", "took")
"""The columns of the trends table before its outcome bars."""


def _bar_width(rows: Sequence[tuple[object, ...]], room: int | None) -> int:
    """The cells of the trends table's outcome bars: ``BAR_WIDTH``, fewer (down to the
    width of the column's heading) on a terminal of ``room`` columns too narrow for the
    other columns of ``rows`` (the cells before the bar), their gaps of two and a full bar,
    so that each run stays one line."""
    if room is None:
        return BAR_WIDTH
    others = sum(max(len(str(cell)) for cell in column)
                 for column in zip(_TREND_COLUMNS, *rows, strict=True))
    return max(len("outcomes"), min(BAR_WIDTH, room - others - 2 * len(_TREND_COLUMNS)))


@click.command()
@project_option
@_limit_option(20, "How many recent runs.")
@format_option
def trends(project: str | None, limit: int) -> None:
    """Show how the recent runs of a project went: counts and coverage, oldest first.

    Text output starts with sparklines of the runs' failing items (failed and error items
    and collection errors, as the failing column counts them), durations and coverage
    (one cell per run, oldest to newest, scaled between the smallest and the largest value
    shown beside each; a gap for a run without one; on a terminal, the newest runs that fit
    its width), and draws each run's items as a bar of 20 cells (fewer on a terminal too
    narrow for the table): passed (and xpassed), failing (failed, error, collection
    errors), skipped (and xfailed).

    \b
    JSON: {"project": NAME, "runs": [{"run_id", "started_at_ms", "status", "counts",
           "total", "failing" (failed and error items), "collection_errors",
           "percent_covered" (null without coverage)}]}
    Example:
      runstore trends --limit 10
    """
    with _services() as services:
        name, ordered, covered = _trend_runs(services, project, limit)
        if services.output_format == "json":
            emit_json(_trends_json(name, ordered, covered))
            return
        glyphs = _glyphs()
        rows = [(run.id, _when(run.started_at_ms), run.status.value, run.total,
                 _failing_shown(run),
                 "-" if covered.get(run.id) is None else _percent(covered[run.id]),
                 _seconds(_took_ms(run))) for run in ordered]
        width = _bar_width(rows, _chart_room())
        table = _table(*_TREND_COLUMNS)
        table.add_column("outcomes", no_wrap=True, min_width=width)
        for run, row in zip(ordered, rows, strict=True):
            bar = stacked_bar(bar_counts(run.counts, run.collection_errors), width, glyphs)
            _row(table, *row, styled(bar, glyphs))
        shown, charts = _fitted(lambda n, stacked: _trend_charts(
            ordered[len(ordered) - n:], covered, glyphs, stacked), len(ordered), _chart_room())
        cut = f" (charts: the newest {shown})" if shown < len(ordered) else ""
        legend = [_bar_legend(glyphs, _chart_room())] if ordered else []
        _print(f"{name}: last {len(ordered)} runs, oldest first{cut}", *charts, *legend, table)


@click.command()
@click.argument("run_a", type=RUN)
@click.argument("run_b", type=RUN)
@project_option
@format_option
def diff(run_a: int | str, run_b: int | str, project: str | None) -> None:
    """Show what changed from RUN_A to RUN_B: newly failing, fixed, added, not run, removed.

    A test of RUN_A missing from RUN_B is "not run" when RUN_B ran a selection (a path or
    node id argument, -k, -m, --lf, -x or deselected items) or was interrupted or aborted,
    and "removed" otherwise.

    \b
    JSON: {"run_a", "run_b", "newly_failing": [NODEID], "fixed": [...], "added": [...],
           "not_run": [...], "removed": [...]}
    Example:
      runstore diff 11 12
    """
    with _services() as services:
        a, b, document = _compared(services, run_a, run_b, project)
        if services.output_format == "json":
            emit_json(document)
            return
        _print(f"run {a.id} -> run {b.id}")
        selected = _selection_text(b.selection)
        if selected:
            _print(f"run {b.id} ran a selection: {selected}")
        not_run = (f"not run (run {b.id} was {b.status.value})"
                   if b.status in (RunStatus.INTERRUPTED, RunStatus.ABORTED) else "not run")
        for key, title in (("newly_failing", "newly failing"), ("fixed", "fixed"),
                           ("added", "added"), ("not_run", not_run), ("removed", "removed")):
            names = document[key]
            _print(f"{title}: {len(names)}")
            for nodeid in names:
                _print(f"  {nodeid}")


def _compared(
    services: Services, run_a: int | str, run_b: int | str, project: str | None
) -> tuple[RunSummary, RunSummary, dict[str, Any]]:
    """The two runs and the ``diff`` document comparing them; runs of two projects are
    refused (their node ids would share nothing, so every list would be empty)."""
    a = _run(services, project, run_a)
    b = _run(services, project, run_b)
    if a.project != b.project:
        services.fail(f"run {a.id} belongs to project {a.project!r}, run {b.id} to "
                      f"{b.project!r}")
    compared = services.get(services.reader.compare(a.id, b.id))
    return a, b, {
        "run_a": int(compared.run_a), "run_b": int(compared.run_b),
        "newly_failing": list(compared.newly_failing), "fixed": list(compared.fixed),
        "added": list(compared.added), "not_run": list(compared.not_run),
        "removed": list(compared.removed),
    }


def diff_document(
    services: Services, run_a: int | str, run_b: int | str, project: str | None = None
) -> dict[str, Any]:
    """The ``diff`` JSON document (schema ``diff.json``, without ``schema_version``) from
    ``run_a`` to ``run_b`` (each as :func:`failures_document`'s ``run``); refusals as
    :func:`failures_document`, and two runs of different projects are refused too."""
    return _compared(services, run_a, run_b, project)[2]


_MAX_AGE_DAYS = 1_000_000  # about 2,700 years: far enough to mean "no age limit"


class _Days(click.ParamType[float]):
    """A finite number of days in (0, 1,000,000]; the refusal quotes the value as typed
    (``1e999``, not the ``inf`` it parses to)."""

    name = "DAYS"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float):
            days = value
        else:
            try:
                days = float(str(value).strip())
            except ValueError:
                days = math.nan
        if not (math.isfinite(days) and 0 < days <= _MAX_AGE_DAYS):
            self.fail(f"{value!r} is not a number of days in (0, {_MAX_AGE_DAYS}]", param, ctx)
        return days


@click.command()
@click.option("--keep-runs", type=click.IntRange(1, MAX_ID), required=True,
              help="Keep the newest N runs of each project.")
@click.option("--max-age-days", type=_Days(), default=None,
              help=f"Also drop runs that started more than D days ago (0 < D <= {_MAX_AGE_DAYS}).")
@click.option("--dry-run", is_flag=True,
              help="Report what would be removed and change nothing.")
@format_option
def prune(keep_runs: int, max_age_days: float | None, dry_run: bool) -> None:
    """Remove old runs of every project; their tests' history survives.

    Keeps the newest --keep-runs runs of each project and, with --max-age-days, also
    removes runs that started longer ago. Running runs are never removed.

    \b
    JSON: {"dry_run": bool, "keep_runs": N, "max_age_days": D|null, "pruned_runs": N,
           "pruned_files": N}
    Example:
      runstore prune --keep-runs 50 --max-age-days 30 --dry-run
    """
    policy = RunRetentionPolicy(keep_runs=keep_runs, max_age_days=max_age_days)
    with _services("read" if dry_run else "write") as services:
        if dry_run:
            with status_on_terminal("planning the prune..."):
                outcome = services.get(services.store.plan_prune(policy))
        else:
            with progress_on_terminal("pruning runs", None) as advance:
                outcome = services.get(services.store.prune_runs(policy, progress=advance))
        if services.output_format == "json":
            emit_json({"dry_run": dry_run, "keep_runs": keep_runs, "max_age_days": max_age_days,
                       "pruned_runs": outcome.pruned_runs, "pruned_files": outcome.pruned_files})
            return
        verb = "would remove" if dry_run else "removed"
        _print(f"{verb} {_plural(outcome.pruned_runs, 'run')} and "
               f"{_plural(outcome.pruned_files, 'unused file row')}")
