"""Rendering for the CLI: one JSON document or rich text, and the exit codes.

Exit codes: 0 success (healthy), 1 the answer is "no" or the store refused (unhealthy
database, not found, busy), 2 usage error (click's own, and arguments no store could
hold). rich is imported only when text is rendered, so JSON output never loads it.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal, NoReturn, Protocol, TypeVar

import click
from returns.result import Failure, Result

from runstore.cli._settings import Settings
from runstore.layers import scrub_database

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

__all__ = [
    "EXIT_FAILURE",
    "EXIT_OK",
    "SCHEMA_VERSION",
    "Advance",
    "Refusals",
    "Refused",
    "console",
    "emit_json",
    "exit_on_refusal",
    "fail",
    "one_line",
    "plain_table",
    "progress_on_terminal",
    "say",
    "status_on_terminal",
    "visible",
]

T = TypeVar("T")

EXIT_OK = 0
EXIT_FAILURE = 1

SCHEMA_VERSION = 1
"""The version of every JSON document's shape (its top-level ``schema_version``).

Raised when a field is removed or changes meaning; adding a field keeps it. The shapes are
published as JSON Schema files in ``runstore/cli/schemas/``.
"""


def console(**options: Any) -> Console:
    """A rich console on standard output (plain text when it is not a terminal).

    ``options`` are further ``rich.console.Console`` arguments (``width``, ``stderr``).
    """
    from rich.console import Console

    return Console(soft_wrap=False, highlight=False, **options)


def plain_table(**options: Any) -> Table:
    """A rich table without borders or padding at the edges, headers in bold.

    ``options`` override those settings or add ``rich.table.Table`` arguments.
    """
    from rich.table import Table

    settings: dict[str, Any] = {
        "show_edge": False, "pad_edge": False, "box": None, "header_style": "bold", **options
    }
    return Table(**settings)


class Advance(Protocol):
    """``advance(done, total=None)``: move a progress bar to ``done`` units (of ``total``
    when given, which then becomes the bar's total; None keeps the total it had)."""

    def __call__(self, done: int, total: int | None = None) -> None: ...


def _on_terminal() -> bool:
    """Whether a bar or spinner may be drawn: standard error is a terminal and the running
    command's output format (if any) is not JSON."""
    context = click.get_current_context(silent=True)
    found = None if context is None else context.find_object(Settings)
    return sys.stderr.isatty() and (found is None or found.output_format != "json")


def _ignore(done: int, total: int | None = None) -> None:
    """The ``advance`` of no bar."""


@contextlib.contextmanager
def progress_on_terminal(
    description: str,
    total: int | None,
    *,
    unit: Literal["items", "bytes"] = "items",
    at_least: int = 0,
) -> Iterator[Advance]:
    """Show a progress bar on standard error while the block runs, yielding its
    ``advance(done, total=None)``.

    ``total`` is how many units the work has (None: not known yet, the bar pulses until an
    ``advance`` gives one). The bar shows ``description``, the percentage done, ``done/total``
    (with ``unit="bytes"``: sizes in kB/MB) and the time left, and is erased when the block
    ends; lines written on standard error meanwhile are printed above it, standard output is
    left alone. Drawn only when standard error is a terminal, the output format is not JSON and
    ``total`` (when known) is at least ``at_least`` units (work too small for a bar shows
    none); otherwise (CI, pipes, JSON consumers) ``advance`` does nothing and rich is not
    loaded.
    """
    if not _on_terminal() or (total is not None and total < at_least):
        yield _ignore
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        DownloadColumn() if unit == "bytes" else MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console(stderr=True),
        transient=True,
        redirect_stdout=False,  # standard output may be a file (report -o -): never the bar's
    ) as bar:
        task = bar.add_task(description, total=total)

        def advance(done: int, total: int | None = None) -> None:
            if total is None:
                bar.update(task, completed=done)
            else:
                bar.update(task, completed=done, total=total)

        yield advance


@contextlib.contextmanager
def status_on_terminal(text: str) -> Iterator[None]:
    """Show a spinner with ``text`` on standard error while the block runs (for work whose
    size is unknown), under the rules of :func:`progress_on_terminal`."""
    if not _on_terminal():
        yield
        return
    with console(stderr=True).status(text):
        yield


def say(text: str) -> None:
    """Print one line of plain text on standard output, never wrapped (a long path stays
    whole for grep and friends) and never read as markup."""
    click.echo(text)


def visible(text: str) -> str:
    """``text`` safe for one line of a terminal: ANSI escape sequences removed as
    ``click.echo`` removes them when output is piped (``click.unstyle``), then every other
    control character (line breaks and tabs too) written as ``repr`` writes it
    (``\\n``, ``\\x1b``)."""
    return "".join(repr(c)[1:-1] if not c.isprintable() and c != " " else c
                   for c in click.unstyle(text))


def emit_json(document: dict[str, Any]) -> None:
    """Write ``document`` as one JSON object on standard output (UTF-8, keys in order),
    with ``schema_version`` first."""
    click.echo(json.dumps({"schema_version": SCHEMA_VERSION, **document},
                          ensure_ascii=False, indent=2))


class Refused(Exception):
    """An answer's "no": ``reason`` (one line for a person) and ``document``, what the
    answer knew before it stopped (JSON fields such as ``candidates``).

    Raised by :meth:`Refusals.fail` inside a document function; the command line turns it
    into exit 1 with the reason (:func:`exit_on_refusal`), the MCP server into a tool
    error with the same line. Not an error of runstore: a control signal of the CLI.
    """

    def __init__(self, reason: str, document: dict[str, Any] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.document = document


class Refusals:
    """How a document function says "no": ``fail(reason)`` or ``get(result)``, both raising
    :class:`Refused`; a command's services mix it in."""

    __slots__ = ()

    def fail(self, reason: str, document: dict[str, Any] | None = None) -> NoReturn:
        """Stop the answer with ``reason`` (and what it knew, ``document``)."""
        raise Refused(reason, document)

    def get(self, result: Result[T, Any]) -> T:
        """The value of ``result``; a Failure stops the answer with its text as the reason."""
        if isinstance(result, Failure):
            self.fail(str(result.failure()))
        return result.unwrap()


@contextlib.contextmanager
def exit_on_refusal(output_format: str) -> Iterator[None]:
    """Turn a :class:`Refused` raised in the block into the command's exit 1 (:func:`fail`)."""
    try:
        yield
    except Refused as refused:
        fail(refused.reason, output_format=output_format, document=refused.document)


def one_line(reason: str, database: str | None = None) -> str:
    """``reason`` as one line (line breaks folded), without the password of ``database``
    (a ``postgresql://`` URL) when one is given."""
    if database is not None:
        reason = scrub_database(reason, database)
    return " ".join(reason.split())


def _scrubbed(reason: str) -> str:
    """``reason`` without the password of the command's database URL, if any (the last
    guard: each message already names the database without it)."""
    context = click.get_current_context(silent=True)
    found = None if context is None else context.find_object(Settings)
    if found is None:
        return reason
    return scrub_database(reason, found.db_path)


def fail(
    reason: str, *, output_format: str = "text", document: dict[str, Any] | None = None
) -> NoReturn:
    """Exit with code 1 and ``reason`` as one line on standard error.

    In JSON mode also write ``document`` with ``"error": reason`` added on standard output.
    Line breaks in ``reason`` are folded so the reason stays one line, and the password of
    the command's ``postgresql://`` database never appears in it.
    """
    reason = one_line(_scrubbed(reason))
    if output_format == "json":
        emit_json({**(document or {}), "error": reason})
    click.echo(f"runstore: {reason}", err=True)
    sys.exit(EXIT_FAILURE)
