"""Global CLI settings and the ``--format`` option every query command also accepts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import attrs
import click

__all__ = ["FORMATS", "Settings", "format_option", "settings"]

FORMATS = click.Choice(["text", "json"])

F = TypeVar("F", bound=Callable[..., Any])


@attrs.define
class Settings:
    """What every command reads from the global options: the database path and output format.

    ``db_source`` says where ``db_path`` came from: ``"--db"``, ``"RUNSTORE_DB"``,
    ``"found"`` (walking up from the current folder) or ``"default"`` (nothing found).
    """

    db_path: str
    output_format: str
    db_source: str = "--db"


def settings() -> Settings:
    """The settings of the running command (set by the root group)."""
    obj = click.get_current_context().find_object(Settings)
    if obj is None:  # pragma: no cover - the root group always sets it
        raise click.UsageError("runstore commands must run under the runstore group")
    return obj


def _set_format(ctx: click.Context, _: click.Parameter, value: str | None) -> str | None:
    if value is not None:
        found = ctx.find_object(Settings)
        if found is not None:
            found.output_format = value
    return value


def format_option(fn: F) -> F:
    """Add ``--format text|json`` to a command; it overrides the global ``--format``."""
    return click.option(
        "--format",
        "output_format_override",
        type=FORMATS,
        default=None,
        expose_value=False,
        callback=_set_format,
        help="Output format (overrides the global --format).",
    )(fn)
