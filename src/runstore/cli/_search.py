"""``runstore search TEXT``: failures, test names and session entries holding every word.

The answer is the searches of :mod:`runstore.services.search` (``DataReader.search_failures``
and ``search_tests``, ``SessionRepository.search``), one page of each kind asked for (every
kind unless ``--in`` narrows it). :func:`search_document` returns exactly the JSON document
the command prints (without ``schema_version``), so other front ends (an MCP server) can
serve the same answer; query text no search accepts (no word, too long, too many words) and
a cursor of another listing are usage errors (``click.BadParameter``, exit 2), a storage
failure a refusal (``services.fail`` / ``services.get``, exit 1). Text output shows each
hit's snippet with the matching words highlighted on a terminal, plain when piped.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import attrs
import click
from returns.result import Failure, Result

from runstore.cli._guard import opened
from runstore.cli._output import Refusals, console, emit_json, exit_on_refusal, say
from runstore.cli._params import TEXT
from runstore.cli._settings import format_option, settings
from runstore.cli._test_runs import known_project
from runstore.layers import DATA_READER, SESSION_REPOSITORY, shown_database
from runstore.services.errors import InvalidInput
from runstore.services.pagination import MAX_PAGE_SIZE, Page
from runstore.services.search import EntryHit, FailureHit, TestHit
from runstore.services.sessions import SessionRepository
from runstore.services.test_runs import DataReader

__all__ = ["KINDS", "SearchServices", "search", "search_document"]

KINDS = ("failures", "tests", "sessions")
"""What ``--in`` may name: failure messages, test names (node ids), session entries."""

T = TypeVar("T")


@attrs.frozen
class SearchServices(Refusals):
    """What a search answer reads, and how it says "no" (``fail``/``get`` raise
    :class:`~runstore.cli._output.Refused`); ``db_path`` names the database as messages
    show it (a URL without its password)."""

    reader: DataReader
    repo: SessionRepository
    db_path: str


def _page(found: Result[Page[T], Any], services: SearchServices) -> Page[T]:
    """The page of a search; its ``InvalidInput`` is a usage error naming the argument."""
    if isinstance(found, Failure) and isinstance(found.failure(), InvalidInput):
        bad = found.failure()
        hint = "TEXT" if bad.field == "text" else f"--{bad.field}"
        raise click.BadParameter(bad.reason, param_hint=f"'{hint}'")
    return services.get(found)


def _marks(marks: Sequence[tuple[int, int]]) -> list[list[int]]:
    return [[start, end] for start, end in marks]


def _failure(hit: FailureHit) -> dict[str, Any]:
    return {
        "run_id": hit.run_id, "project": hit.project, "nodeid": hit.nodeid,
        "collection_error": hit.collection_error, "ordinal": hit.ordinal,
        "exception_type": hit.exception_type, "snippet": hit.snippet,
        "marks": _marks(hit.marks), "score": hit.score,
    }


def _test(hit: TestHit) -> dict[str, Any]:
    return {
        "project": hit.project, "nodeid": hit.nodeid, "snippet": hit.snippet,
        "marks": _marks(hit.marks), "score": hit.score,
    }


def _entry(hit: EntryHit) -> dict[str, Any]:
    return {
        "session_id": hit.session_id, "entry_id": hit.entry_id, "seq": hit.seq,
        "entry_type": hit.entry_type, "role": hit.role, "timestamp_ms": hit.timestamp_ms,
        "snippet": hit.snippet, "marks": _marks(hit.marks), "score": hit.score,
    }


def _section(page: Page[Any], hit: Any) -> dict[str, Any]:
    return {
        "hits": [hit(h) for h in page.items],
        "has_more": page.has_more,
        "next_cursor": page.next_cursor,
    }


def search_document(
    services: SearchServices,
    text: str,
    kinds: Sequence[str] = KINDS,
    project: str | None = None,
    cwd: str | None = None,
    limit: int = 20,
    cursor: str | None = None,
) -> dict[str, Any]:
    """The ``search`` JSON document (schema ``search.json``, without ``schema_version``):
    ``query`` as given, ``in`` the kinds searched (of :data:`KINDS`, in that order), and per
    kind one page (``limit`` hits, 1-``MAX_PAGE_SIZE``) of ``hits`` best first with
    ``has_more`` and ``next_cursor``. ``project`` scopes failures and tests, ``cwd``
    sessions; ``cursor`` (a ``next_cursor``) continues one kind and needs exactly one.
    A ``project`` with no recorded runs is refused listing the projects there are, as the
    other commands' ``--project`` is.

    Raises ``click.BadParameter`` for query text no search accepts, a bad limit or a cursor
    of another listing, ``click.UsageError`` for a cursor with several kinds, and
    :class:`~runstore.cli._output.Refused` for a storage failure or an unknown project.
    """
    chosen = [k for k in KINDS if k in kinds]
    if cursor is not None and len(chosen) != 1:
        raise click.UsageError("--cursor continues one listing: give exactly one --in with it")
    if project is not None:
        known_project(services, services.reader, services.db_path, project)
    document: dict[str, Any] = {"query": text, "in": chosen, "project": project, "cwd": cwd}
    if "failures" in chosen:
        found = services.reader.search_failures(text, project=project, limit=limit,
                                                cursor=cursor)
        document["failures"] = _section(_page(found, services), _failure)
    if "tests" in chosen:
        tests = services.reader.search_tests(text, project=project, limit=limit, cursor=cursor)
        document["tests"] = _section(_page(tests, services), _test)
    if "sessions" in chosen:
        entries = services.repo.search(text, cwd=cwd, limit=limit, cursor=cursor)
        document["sessions"] = _section(_page(entries, services), _entry)
    return document


@contextmanager
def _services() -> Iterator[SearchServices]:
    """The searches on the command's database, read-only; a refusal ends the command."""
    cfg = settings()
    with opened("read", needs=(DATA_READER, SESSION_REPOSITORY)) as container:
        services = SearchServices(container.get(DATA_READER), container.get(SESSION_REPOSITORY),
                                  shown_database(cfg.db_path))
        with exit_on_refusal(cfg.output_format):
            yield services


def _snippet(snippet: str, marks: Sequence[Sequence[int]]) -> Any:
    """The snippet with its marks highlighted, as a rich ``Text``."""
    from rich.text import Text

    shown = Text(snippet)
    for start, end in marks:
        shown.stylize("bold yellow", start, end)
    return shown


def _heading(kind: str, hit: dict[str, Any]) -> str:
    if kind == "failures":
        return f"  run {hit['run_id']}  {hit['nodeid']}"
    if kind == "tests":
        return f"  {hit['project']}"
    role = f" {hit['role']}" if hit["role"] else ""
    return f"  {hit['session_id']}  {hit['entry_id']}  {hit['entry_type']}{role}"


def _render(document: dict[str, Any]) -> None:
    """Each kind's hits: a heading line, then the snippet (marks highlighted on a terminal)."""
    out = console() if sys.stdout.isatty() else None
    for kind in document["in"]:
        section = document[kind]
        more = (f"; more: --in {kind} --cursor {section['next_cursor']}"
                if section["has_more"] else "")
        say(f"{kind}: {len(section['hits'])} shown{more}")
        for hit in section["hits"]:
            if out is None:
                say(_heading(kind, hit))
                say(f"    {hit['snippet']}")
            else:
                out.print(_heading(kind, hit), markup=False)
                out.print("    ", _snippet(hit["snippet"], hit["marks"]), sep="")


@click.command()
@click.argument("text", type=TEXT)
@click.option("--in", "kinds", type=click.Choice(KINDS), multiple=True,
              help="What to search (repeat for several; default: all of "
              + ", ".join(KINDS) + ").")
@click.option("--project", type=TEXT, default=None, metavar="NAME",
              help="Only failures and tests of this project (default: every project).")
@click.option("--cwd", type=TEXT, default=None,
              help="Only entries of sessions of this working directory.")
@click.option("--limit", type=click.IntRange(1, MAX_PAGE_SIZE), default=20, show_default=True,
              help=f"Hits per kind (1-{MAX_PAGE_SIZE}).")
@click.option("--cursor", type=TEXT, default=None,
              help="The next_cursor of the previous page (with exactly one --in).")
@format_option
def search(
    text: str, kinds: tuple[str, ...], project: str | None, cwd: str | None, limit: int,
    cursor: str | None,
) -> None:
    """Search failure messages, test names and session entries for every word of TEXT.

    Words are runs of letters and digits (ASCII case does not matter); a word ending in *
    matches as a prefix; every other character is plain text, never query syntax. At most
    32 distinct words. Hits come best first, each with a snippet. TEXT starting with -
    needs -- before it (runstore search -- -refused).

    \b
    JSON: {"query", "in", "project", "cwd", "failures"|"tests"|"sessions":
           {"hits": [...], "has_more", "next_cursor"}}
    Example:
      runstore search 'connection refused'
      runstore search 'Timeout*' --in failures --project shop --limit 5
      runstore search -- '-refused'
    """
    with _services() as services:
        document = search_document(services, text, kinds or KINDS, project, cwd, limit, cursor)
    if settings().output_format == "json":
        emit_json(document)
        return
    _render(document)
