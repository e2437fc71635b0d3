"""``runstore sessions``: import, export and read agent sessions (pi transcripts).

Every command opens the database with ``build(sqlite(path))`` and talks to the
:class:`~runstore.services.SessionRepository` only. Query commands accept ``--format json``
and then print one JSON document; costs are decimal strings there (exact).
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import attrs
import click
from returns.result import Failure, Result

from runstore.cli._guard import opened
from runstore.cli._output import (
    Refusals,
    Refused,
    console,
    emit_json,
    exit_on_refusal,
    plain_table,
    progress_on_terminal,
)
from runstore.cli._params import TEXT, Text
from runstore.cli._settings import format_option, settings
from runstore.layers import DATA_READER, SESSION_REPOSITORY
from runstore.services.errors import InvalidInput, NotFound
from runstore.services.pagination import MAX_PAGE_SIZE, Page
from runstore.services.sessions import (
    MAX_ID_CHARS,
    ContextMessage,
    Entry,
    ModelRef,
    SessionContext,
    SessionRecord,
    SessionRepository,
    SessionStorage,
    SessionSummary,
    iso_from_ms,
)
from runstore.sessions_import import (
    ImportMode,
    ImportReport,
    LineIssue,
    export_jsonl,
    import_jsonl,
)

if TYPE_CHECKING:
    from rich.console import Console

    from runstore.services.test_runs import DataReader, RunSummary

__all__ = [
    "SessionServices",
    "sessions",
    "sessions_context_document",
    "sessions_list_document",
    "sessions_show_document",
]

T = TypeVar("T")

SESSION_ID = Text(MAX_ID_CHARS)
"""A session or entry id: as :data:`~runstore.cli._params.TEXT`, at most ``MAX_ID_CHARS``
characters."""

PROGRESS_FROM_BYTES = 1 << 20
"""Files from this size on (bytes) get a progress bar when standard error is a terminal."""


@click.group()
def sessions() -> None:
    """Agent sessions: import pi transcripts, read them as trees, export them again.

    \b
    Example:
      runstore sessions import ~/.pi/agent/sessions/--work--/2025-11-30_x.jsonl
      runstore sessions list
      runstore sessions context SESSION_ID
    """


# -- plumbing ------------------------------------------------------------------------------------


def _fail(reason: str, document: dict[str, Any] | None = None) -> NoReturn:
    raise Refused(reason, document)


def _get(result: Result[T, Any]) -> T:
    if isinstance(result, Failure):
        _fail(str(result.failure()))
    return result.unwrap()


@contextmanager
def _repository(*, create: bool = False) -> Iterator[SessionRepository]:
    """The sessions on the command's database: read-only, or created when ``create``; a
    refusal in the block ends the command (exit 1, the reason on standard error)."""
    with (
        opened("create" if create else "read", needs=(SESSION_REPOSITORY,)) as container,
        exit_on_refusal(settings().output_format),
    ):
        yield container.get(SESSION_REPOSITORY)


@attrs.frozen
class SessionServices(Refusals):
    """What a session answer reads (``repo``), and how it says "no" (``fail``/``get`` raise
    :class:`~runstore.cli._output.Refused`, as :class:`runstore.cli._test_runs.Services`)."""

    repo: SessionRepository
    runs: DataReader | None = None
    """The test runs of the same database, when it has them: ``sessions show`` lists the
    runs recorded for the session (``RUNSTORE_SESSION_ID``)."""


def _json_mode() -> bool:
    return settings().output_format == "json"


def _out() -> Console:
    """Standard output for tables: the terminal's width, or 240 columns when piped."""
    out = console()
    return out if out.is_terminal else console(width=240)


def _line(text: str) -> None:
    """One line on standard output, never wrapped."""
    click.echo(text)


# -- documents -----------------------------------------------------------------------------------


def _model(model: ModelRef | None) -> dict[str, str] | None:
    return None if model is None else {"provider": model.provider, "model_id": model.model_id}


def _summary_document(summary: SessionSummary) -> dict[str, Any]:
    return {
        "name": summary.name,
        "entry_count": summary.entry_count,
        "message_count": summary.message_count,
        "cached_tokens": summary.cached_tokens,
        "uncached_tokens": summary.uncached_tokens,
        "output_tokens": summary.output_tokens,
        "total_tokens": summary.total_tokens,
        "cost": str(summary.cost),
        "model": _model(summary.model),
        "thinking_level": summary.thinking_level,
        "labels": dict(sorted(summary.labels.items())),
    }


def _session_document(record: SessionRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "cwd": record.cwd,
        "parent_session": record.parent_session,
        "metadata": dict(record.metadata),
        "created_ms": record.created_ms,
        "created": iso_from_ms(record.created_ms),
        "leaf_id": record.leaf_id,
        "summary": _summary_document(record.summary),
    }


def _report_document(report: ImportReport) -> dict[str, Any]:
    return {
        "source": report.source,
        "session_id": report.session_id,
        "mode": str(report.mode),
        "version": report.version,
        "lines": report.lines,
        "bytes": report.bytes,
        "entries": report.entries,
        "leaf_id": report.leaf_id,
        "skipped": [_issue_document(i) for i in report.skipped],
        "repaired": [_issue_document(i) for i in report.repaired],
        "kept": [_issue_document(i) for i in report.kept],
    }


def _issue_document(issue: LineIssue) -> dict[str, Any]:
    return {"line": issue.line, "reason": issue.reason, "problem": str(issue.problem)}


def _tokens_text(summary: SessionSummary) -> str:
    return (
        f"{summary.total_tokens} (cached {summary.cached_tokens}, uncached "
        f"{summary.uncached_tokens}, output {summary.output_tokens})"
    )


def _cost_text(summary: SessionSummary) -> str:
    return f"{summary.cost:.6f}"


def _preview(message: Mapping[str, Any], width: int = 72) -> str:
    """One line of a message's text for people (its first text, tool call or command)."""
    role = message.get("role")
    if role == "bashExecution":
        text = f"$ {message.get('command', '')}"
    elif role in ("compactionSummary", "branchSummary"):
        text = str(message.get("summary", ""))
    else:
        text = _content_text(message.get("content"))
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, Sequence):
        return ""
    parts: list[str] = []
    for block in content:
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind == "toolCall":
            parts.append(f"[{block.get('name', 'tool')}]")
        elif kind == "thinking":
            parts.append("(thinking)")
        elif kind == "image":
            parts.append("[image]")
    return " ".join(parts)


def _entry_preview(entry: Entry) -> str:
    payload = entry.payload
    if entry.type == "message":
        message = payload.get("message", {})
        return f"{message.get('role', '?')}: {_preview(message)}"
    if entry.type == "model_change":
        return f"model {payload.get('provider')}/{payload.get('modelId')}"
    if entry.type == "thinking_level_change":
        return f"thinking {payload.get('thinkingLevel')}"
    if entry.type in ("compaction", "branch_summary"):
        return _preview({"role": "branchSummary", "summary": payload.get("summary", "")})
    if entry.type == "label":
        return f"label {payload.get('targetId')} = {payload.get('label')!r}"
    if entry.type == "session_info":
        return f"name {payload.get('name')!r}"
    if entry.type == "leaf":
        return f"leaf moved to {payload.get('targetId') or 'before the first entry'}"
    if entry.type in ("custom", "custom_message"):
        return f"{payload.get('customType')}: {_preview({'content': payload.get('content', '')})}"
    return ""


# -- import / export -----------------------------------------------------------------------------


@sessions.command(name="import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, readable=True))
@click.option("--strict", is_flag=True, help="Refuse the file at its first bad line (the default).")
@click.option(
    "--lenient",
    is_flag=True,
    help="Import what is valid; report every line skipped or repaired.",
)
@click.option(
    "--id",
    "session_id",
    type=SESSION_ID,
    default=None,
    help="Import under this session id instead of the header's.",
)
@format_option
def import_(file: str, strict: bool, lenient: bool, session_id: str | None) -> None:
    """Import a pi session transcript (JSONL, versions 1-3) as one session.

    The file is only read, never changed. Exits 1, writing nothing, when the file is
    empty, unreadable, or (in strict mode) has a bad line, naming it.

    \b
    Example:
      runstore sessions import --lenient session.jsonl
    """
    if strict and lenient:
        raise click.UsageError("--strict and --lenient cannot be used together")
    mode = "lenient" if lenient else "strict"
    with (
        _repository(create=True) as repo,
        progress_on_terminal("importing", os.path.getsize(file), unit="bytes",
                             at_least=PROGRESS_FROM_BYTES) as progress,
    ):
        result = import_jsonl(
            repo, file, mode=ImportMode(mode), session_id=session_id, progress=progress
        )
        report = _get(result)
        record = _get(repo.get(report.session_id))
    if _json_mode():
        emit_json({**_report_document(report), "session": _session_document(record)})
        return
    summary = record.summary
    _line(
        f"imported {report.entries} entries from {report.source} (format version "
        f"{report.version}, {report.mode}) as session {report.session_id}"
    )
    _line(
        f"messages {summary.message_count}, tokens {_tokens_text(summary)}, "
        f"cost {_cost_text(summary)}, leaf {record.leaf_id}"
    )
    for issue in report.issues:
        _line(f"  {issue}")
    if not report.issues:
        _line("every line imported as it was")


@sessions.command()
@click.argument("session_id", type=SESSION_ID)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Write to this file instead of standard output.",
)
@format_option
def export(session_id: str, output: str | None) -> None:
    """Write a session as a pi transcript (JSONL, version 3) that imports back to it.

    \b
    Example:
      runstore sessions export SESSION_ID -o session.jsonl
    """
    with _repository() as repo:
        if output is None:
            _get(export_jsonl(repo, session_id, sys.stdout))
            return
        partial = f"{output}.partial"
        try:
            with open(partial, "w", encoding="utf-8", newline="\n") as out:
                report = export_jsonl(repo, session_id, out)
            if isinstance(report, Failure):
                os.unlink(partial)
                _fail(str(report.failure()))
            os.replace(partial, output)
        except OSError as exc:
            _fail(f"cannot write {output}: {exc.strerror or exc}")
        done = report.unwrap()
    if _json_mode():
        emit_json(
            {
                "session_id": done.session_id,
                "entries": done.entries,
                "leaf_id": done.leaf_id,
                "file": output,
            }
        )
    else:
        _line(f"wrote {done.entries} entries of session {done.session_id} to {output}")


# -- queries -------------------------------------------------------------------------------------


def _listed(
    services: SessionServices, cwd: str | None, limit: int, cursor: str | None
) -> Page[SessionRecord]:
    """One page of sessions; a cursor or cwd the repository refuses is a usage error
    (``click.BadParameter`` naming the option), as on the command line."""
    listed = services.repo.list(cwd=cwd, limit=limit, cursor=cursor)
    if isinstance(listed, Failure) and isinstance(listed.failure(), InvalidInput):
        bad = listed.failure()
        raise click.BadParameter(bad.reason, param_hint=f"'--{bad.field}'")
    return services.get(listed)


def _list_json(page: Page[SessionRecord]) -> dict[str, Any]:
    return {
        "sessions": [_session_document(r) for r in page.items],
        "has_more": page.has_more,
        "next_cursor": page.next_cursor,
    }


def sessions_list_document(
    services: SessionServices, cwd: str | None = None, limit: int = 50,
    cursor: str | None = None,
) -> dict[str, Any]:
    """The ``sessions list`` JSON document (schema ``sessions-list.json``, without
    ``schema_version``): sessions newest first, ``limit`` (1-``MAX_PAGE_SIZE``) a page,
    ``cursor`` the previous page's ``next_cursor``. A cursor or cwd the repository refuses
    raises ``click.BadParameter`` (a usage error, exit 2 on the command line); a storage
    failure raises :class:`~runstore.cli._output.Refused`."""
    return _list_json(_listed(services, cwd, limit, cursor))


@sessions.command(name="list")
@click.option("--cwd", type=TEXT, default=None, help="Only sessions of this working directory.")
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_PAGE_SIZE),
    default=50,
    show_default=True,
    help=f"Sessions per page (1-{MAX_PAGE_SIZE}).",
)
@click.option("--cursor", type=TEXT, default=None, help="The next_cursor of the previous page.")
@format_option
def list_(cwd: str | None, limit: int, cursor: str | None) -> None:
    """List sessions, newest first.

    \b
    Example:
      runstore sessions list --cwd "$PWD" --limit 20
    """
    with _repository() as repo:
        page = _listed(SessionServices(repo), cwd, limit, cursor)
    if _json_mode():
        emit_json(_list_json(page))
        return
    table = plain_table()
    for column in ("session", "created", "entries", "messages", "tokens", "cost", "model"):
        numeric = column in ("entries", "messages", "tokens", "cost")
        table.add_column(column, justify="right" if numeric else "left", no_wrap=True)
    table.add_column("name", overflow="ellipsis", no_wrap=True, max_width=32)
    table.add_column("cwd", overflow="ellipsis", no_wrap=True, max_width=48)
    for record in page.items:
        summary = record.summary
        table.add_row(
            record.id,
            iso_from_ms(record.created_ms)[:19],
            str(summary.entry_count),
            str(summary.message_count),
            str(summary.total_tokens),
            _cost_text(summary),
            str(summary.model or ""),
            summary.name or "",
            record.cwd,
        )
    out = _out()
    if page.items:
        out.print(table)
    else:
        out.print("no sessions")
    if page.has_more:
        out.print(f"more: --cursor {page.next_cursor}", markup=False)


SESSION_RUNS_SHOWN = 20
"""How many of a session's runs ``sessions show`` lists (newest first)."""


@contextmanager
def _session_services() -> Iterator[SessionServices]:
    """:func:`_repository`'s sessions with the test runs of the same database."""
    with (
        opened("read", needs=(SESSION_REPOSITORY,)) as container,
        exit_on_refusal(settings().output_format),
    ):
        runs = container.get(DATA_READER) if DATA_READER in container else None
        yield SessionServices(container.get(SESSION_REPOSITORY), runs)


def _session_runs(services: SessionServices, session_id: str) -> tuple[list[RunSummary], bool]:
    """The newest :data:`SESSION_RUNS_SHOWN` test runs recorded for the session (of every
    project), and whether it has more; none without test runs in the database."""
    if services.runs is None:
        return [], False
    page = services.get(
        services.runs.list_runs(None, session_id=session_id, limit=SESSION_RUNS_SHOWN)
    )
    return list(page.items), page.has_more


def _session_run_document(run: RunSummary) -> dict[str, Any]:
    return {
        "id": int(run.id),
        "project": run.project,
        "status": run.status.value,
        "started_at_ms": run.started_at_ms,
        "finished_at_ms": run.finished_at_ms,
        "counts": dict(run.counts),
        "total": run.total,
    }


def _runs_json(services: SessionServices, session_id: str) -> dict[str, Any]:
    """``runs`` and ``runs_has_more`` of the ``sessions show`` document (absent when the
    answer has no test runs to read)."""
    if services.runs is None:
        return {}
    found, more = _session_runs(services, session_id)
    return {"runs": [_session_run_document(r) for r in found], "runs_has_more": more}


def _shown(services: SessionServices, session_id: str) -> tuple[SessionRecord, SessionContext]:
    """A session and the context it resumes with (at its leaf); a session not stored is
    refused by :func:`_refuse_unstored` when test runs carry its id."""
    found = services.repo.get(session_id)
    if isinstance(found, Failure) and isinstance(found.failure(), NotFound):
        _refuse_unstored(services, session_id)
    record = services.get(found)
    storage = services.get(services.repo.open(session_id))
    return record, services.get(storage.build_context())


def _refuse_unstored(services: SessionServices, session_id: str) -> None:
    """Refuse a session that is not stored while test runs carry its id (the plugin records
    the id a run was given, whether or not its transcript was ever imported), saying how
    many (at most ``MAX_PAGE_SIZE`` counted) and the command that lists them; the document
    holds ``session_id``, ``test_runs``, ``test_runs_has_more`` and ``runs_command``.
    Returns when no test run carries the id (the caller then refuses "not found")."""
    if services.runs is None:
        return
    page = services.get(services.runs.list_runs(None, session_id=session_id,
                                                limit=MAX_PAGE_SIZE))
    if not page.items:
        return
    count = len(page.items)
    runs = f"{'more than ' if page.has_more else ''}{count} test run" + (
        " carries" if count == 1 and not page.has_more else "s carry")
    command = f"runstore runs --session {shlex.quote(session_id)}"
    services.fail(
        f"session {session_id!r} is not stored; {runs} its id: {command}",
        {"session_id": session_id, "test_runs": count, "test_runs_has_more": page.has_more,
         "runs_command": command},
    )


def _show_json(record: SessionRecord, resume: SessionContext) -> dict[str, Any]:
    return {
        **_session_document(record),
        "resume": {
            "leaf_id": resume.leaf_id,
            "model": _model(resume.model),
            "thinking_level": resume.thinking_level,
        },
    }


def sessions_show_document(services: SessionServices, session_id: str) -> dict[str, Any]:
    """The ``sessions show`` JSON document (schema ``sessions-show.json``, without
    ``schema_version``); an unknown session or a storage failure raises
    :class:`~runstore.cli._output.Refused` with the command's reason."""
    return {**_show_json(*_shown(services, session_id)), **_runs_json(services, session_id)}


@sessions.command()
@click.argument("session_id", type=SESSION_ID)
@format_option
def show(session_id: str) -> None:
    """Show one session: where it ran, its leaf, what it resumes with, and its summary.

    "resumes with" is the model and thinking level at the leaf, those the pi agent resumes
    the session with; the summary's latest model is the newest appended on any branch.

    \b
    Example:
      runstore sessions show SESSION_ID --format json
    """
    with _session_services() as services:
        record, resume = _shown(services, session_id)
        found, more = _session_runs(services, session_id)
        if _json_mode():
            emit_json({**_show_json(record, resume), **_runs_json(services, session_id)})
            return
    summary = record.summary
    table = plain_table(show_header=False)
    table.add_column(style="bold")
    table.add_column()
    rows = [
        ("session", record.id),
        ("name", summary.name or ""),
        ("cwd", record.cwd),
        ("created", iso_from_ms(record.created_ms)),
        ("parent session", record.parent_session or ""),
        ("leaf", record.leaf_id or ""),
        (
            "resumes with",
            f"model {resume.model or 'none'}, thinking {resume.thinking_level}"
            " (at the leaf, as pi resumes the session)",
        ),
        ("entries", str(summary.entry_count)),
        ("messages", str(summary.message_count)),
        ("tokens", _tokens_text(summary)),
        ("cost", str(summary.cost)),
        ("latest model", f"{summary.model or ''} (newest appended, any branch)"),
        ("latest thinking", f"{summary.thinking_level} (newest appended, any branch)"),
    ]
    rows.extend((f"label {target}", label) for target, label in sorted(summary.labels.items()))
    if record.metadata:
        rows.append(("metadata", ", ".join(f"{k}={v}" for k, v in record.metadata.items())))
    for name, value in rows:
        table.add_row(name, value)
    _out().print(table)
    if found:
        _out().print(_runs_table(found), markup=False)
        if more:
            _line(f"(newest {SESSION_RUNS_SHOWN}: runstore runs --session ID lists them all)")


def _context_document(session_id: str, context: SessionContext) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "leaf_id": context.leaf_id,
        "model": _model(context.model),
        "thinking_level": context.thinking_level,
        "messages": [
            {"entry_id": m.entry_id, "role": m.role, "message": dict(m.message)}
            for m in context.messages
        ],
    }


def _built(services: SessionServices, session_id: str, leaf: str | None) -> SessionContext:
    """The context of a session at ``leaf`` (None: its active leaf)."""
    storage: SessionStorage = services.get(services.repo.open(session_id))
    return services.get(storage.build_context(leaf))


def sessions_context_document(
    services: SessionServices, session_id: str, leaf: str | None = None
) -> dict[str, Any]:
    """The ``sessions context`` JSON document (schema ``sessions-context.json``, without
    ``schema_version``) at ``leaf`` (None: the active leaf); an unknown session or entry,
    or a storage failure, raises :class:`~runstore.cli._output.Refused`."""
    return _context_document(session_id, _built(services, session_id, leaf))


@sessions.command()
@click.argument("session_id", type=SESSION_ID)
@click.option(
    "--leaf",
    type=SESSION_ID,
    default=None,
    help="Build the context at this entry (default: the active leaf).",
)
@format_option
def context(session_id: str, leaf: str | None) -> None:
    """Show what the model gets at a leaf: the messages, the model and the thinking level.

    \b
    Example:
      runstore sessions context SESSION_ID --leaf e0000010
    """
    with _repository() as repo:
        built = _built(SessionServices(repo), session_id, leaf)
    if _json_mode():
        emit_json(_context_document(session_id, built))
        return
    _line(
        f"leaf {built.leaf_id}, model {built.model or '-'}, thinking {built.thinking_level}, "
        f"{len(built.messages)} messages"
    )
    table = plain_table()
    table.add_column("entry", no_wrap=True)
    table.add_column("role", no_wrap=True)
    table.add_column("text", overflow="ellipsis", no_wrap=True)
    for message in built.messages:
        table.add_row(message.entry_id, message.role, _message_text(message))
    _out().print(table)


def _message_text(message: ContextMessage) -> str:
    return _preview(message.message)


def _all_entries(storage: SessionStorage) -> list[Entry]:
    entries: list[Entry] = []
    after = 0
    while True:
        page = _get(storage.entries(after_seq=after, limit=1000))
        entries.extend(page.items)
        if not page.has_more:
            return entries
        after = page.items[-1].seq


@sessions.command()
@click.argument("session_id", type=SESSION_ID)
@format_option
def tree(session_id: str) -> None:
    """Show the entries of a session as a tree (indented where it branches; * marks the leaf).

    \b
    Example:
      runstore sessions tree SESSION_ID
    """
    with _repository() as repo:
        storage: SessionStorage = _get(repo.open(session_id))
        record = _get(storage.info())
        entries = _all_entries(storage)
    labels = record.summary.labels
    if _json_mode():
        emit_json(
            {
                "session_id": session_id,
                "leaf_id": record.leaf_id,
                "entries": [
                    {
                        "id": e.id,
                        "parent_id": e.parent_id,
                        "seq": e.seq,
                        "type": e.type,
                        "timestamp": iso_from_ms(e.timestamp_ms),
                        "label": labels.get(e.id),
                    }
                    for e in entries
                ],
            }
        )
        return
    for line in tree_lines(entries, record.leaf_id, labels):
        _line(line)


def tree_lines(
    entries: Sequence[Entry], leaf_id: str | None, labels: Mapping[str, str]
) -> list[str]:
    """Lines drawing ``entries`` as a tree: a chain stays at one depth, each branch of a
    fork is drawn below it with ``├─``/``└─``; ``*`` marks the leaf."""
    children: dict[str | None, list[Entry]] = {}
    known = {e.id for e in entries}
    for entry in entries:
        parent = entry.parent_id if entry.parent_id in known else None
        children.setdefault(parent, []).append(entry)
    lines: list[str] = []

    def describe(entry: Entry) -> str:
        marks = " *" if entry.id == leaf_id else ""
        label = f" [{labels[entry.id]}]" if entry.id in labels else ""
        return f"{entry.id} {entry.type}{label}{marks}  {_entry_preview(entry)}".rstrip()

    # Each stack item: (entry, prefix for its line, prefix for what follows it).
    stack: list[tuple[Entry, str, str]] = []
    roots = children.get(None, [])
    for index, root in reversed(list(enumerate(roots))):
        last = index == len(roots) - 1
        if len(roots) == 1:
            stack.append((root, "", ""))
        else:
            stack.append((root, "└─ " if last else "├─ ", "   " if last else "│  "))
    while stack:
        entry, first, rest = stack.pop()
        lines.append(first + describe(entry))
        kids = children.get(entry.id, [])
        if len(kids) == 1:
            stack.append((kids[0], rest, rest))
            continue
        for index, kid in reversed(list(enumerate(kids))):
            last = index == len(kids) - 1
            stack.append(
                (kid, rest + ("└─ " if last else "├─ "), rest + ("   " if last else "│  "))
            )
    return lines


def _runs_table(found: Sequence[RunSummary]) -> Any:
    """The test runs recorded for a session: id, project, status, start and counts."""
    table = plain_table()
    for column in ("run", "project", "status", "started", "counts"):
        table.add_column(column)
    for run in found:
        counts = ", ".join(f"{n} {o}" for o, n in run.counts.items() if n) or "no items"
        table.add_row(str(run.id), run.project, run.status.value, iso_from_ms(run.started_at_ms),
                      counts)
    return table
