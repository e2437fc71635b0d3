"""The root ``runstore`` group and its global options."""

from __future__ import annotations

import os

import click

from runstore.cli._db import db
from runstore.cli._group import JsonErrorsGroup, check_db_path
from runstore.cli._sessions import sessions
from runstore.cli._settings import FORMATS, Settings
from runstore.cli._testruns import (
    coverage,
    diff,
    failures,
    flaky,
    history,
    prune,
    runs,
    show,
    slowest,
    trends,
)
from runstore.layers import DEFAULT_DB_PATH

__all__ = ["cli", "main"]


@click.group(cls=JsonErrorsGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    "db_path",
    envvar="RUNSTORE_DB",
    default=DEFAULT_DB_PATH,
    show_default=True,
    type=click.Path(),
    callback=check_db_path,
    help="SQLite database file (env RUNSTORE_DB).",
)
@click.option("--format", "output_format", type=FORMATS, default="text", show_default=True,
              help="Output format of every command.")
@click.version_option(package_name="runstore")
@click.pass_context
def cli(ctx: click.Context, db_path: str, output_format: str) -> None:
    """runstore: the records of your runs, in SQLite.

    \b
    Example:
      runstore db migrate
      runstore --format json db status
    """
    ctx.obj = Settings(db_path=os.fspath(db_path), output_format=output_format)


cli.add_command(db)
cli.add_command(runs)
cli.add_command(show)
cli.add_command(failures)
cli.add_command(flaky)
cli.add_command(history)
cli.add_command(slowest)
cli.add_command(coverage)
cli.add_command(trends)
cli.add_command(diff)
cli.add_command(prune)
cli.add_command(sessions)


def main() -> None:
    """Run the ``runstore`` command line."""
    cli(prog_name="runstore")
