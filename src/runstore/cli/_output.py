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
from typing import TYPE_CHECKING, Any, NoReturn

import click

from runstore.cli._settings import Settings
from runstore.layers import scrub_database

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

__all__ = [
    "EXIT_FAILURE",
    "EXIT_OK",
    "SCHEMA_VERSION",
    "console",
    "emit_json",
    "fail",
    "plain_table",
    "say",
    "status_on_terminal",
]

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


@contextlib.contextmanager
def status_on_terminal(text: str) -> Iterator[None]:
    """Show a spinner with ``text`` on standard error while the block runs, when standard
    error is a terminal; otherwise (CI, pipes, JSON consumers) show nothing and load no rich."""
    if not sys.stderr.isatty():
        yield
        return
    with console(stderr=True).status(text):
        yield


def say(text: str) -> None:
    """Print one line of plain text on standard output, never wrapped (a long path stays
    whole for grep and friends) and never read as markup."""
    click.echo(text)


def emit_json(document: dict[str, Any]) -> None:
    """Write ``document`` as one JSON object on standard output (UTF-8, keys in order),
    with ``schema_version`` first."""
    click.echo(json.dumps({"schema_version": SCHEMA_VERSION, **document},
                          ensure_ascii=False, indent=2))


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
    reason = " ".join(_scrubbed(reason).split())
    if output_format == "json":
        emit_json({**(document or {}), "error": reason})
    click.echo(f"runstore: {reason}", err=True)
    sys.exit(EXIT_FAILURE)
