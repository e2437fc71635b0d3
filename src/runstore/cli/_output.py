"""Rendering for the CLI: one JSON document or rich text, and the exit codes.

Exit codes: 0 success (healthy), 1 the answer is "no" or the store refused (unhealthy
database, not found, busy, invalid input), 2 usage error (click's own).
"""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import click
from rich.console import Console

__all__ = ["EXIT_FAILURE", "EXIT_OK", "console", "emit_json", "fail", "say"]

EXIT_OK = 0
EXIT_FAILURE = 1


def console() -> Console:
    """A rich console on standard output (plain text when it is not a terminal)."""
    return Console(soft_wrap=False, highlight=False)


def say(text: str) -> None:
    """Print one line of plain text on standard output (no rich markup is interpreted)."""
    console().print(text, markup=False)


def emit_json(document: Any) -> None:
    """Write ``document`` as one JSON object on standard output (UTF-8, keys in order)."""
    click.echo(json.dumps(document, ensure_ascii=False, indent=2))


def fail(
    reason: str, *, output_format: str = "text", document: dict[str, Any] | None = None
) -> NoReturn:
    """Exit with code 1 and ``reason`` as one line on standard error.

    In JSON mode also write ``document`` with ``"error": reason`` added on standard output.
    Line breaks in ``reason`` are folded so the reason stays one line.
    """
    reason = " ".join(reason.split())
    if output_format == "json":
        emit_json({**(document or {}), "error": reason})
    click.echo(f"runstore: {reason}", err=True)
    sys.exit(EXIT_FAILURE)
