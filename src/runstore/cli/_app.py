"""The root ``runstore`` group and its global options."""

from __future__ import annotations

import os

import click
from click.core import ParameterSource
from click.types import OptionHelpExtra

from runstore.cli._discover import choose_database
from runstore.cli._group import JsonErrorsGroup, check_db_path
from runstore.cli._settings import FORMATS, Settings

__all__ = ["cli", "main"]

_TEST_RUNS = ("runs", "show", "failures", "flaky", "history", "slowest", "coverage", "trends",
              "diff", "prune")
_COMMANDS = {
    "db": "runstore.cli._copy:db",  # the db group, with its copy command
    "sessions": "runstore.cli._sessions:sessions",
    "mcp": "runstore.cli._mcp:mcp",
    "triage": "runstore.cli._triage:triage",
    "search": "runstore.cli._search:search",
    "tests-for": "runstore.cli._tests_for:tests_for",
    "quarantine": "runstore.cli._quarantine:quarantine",
    "signatures": "runstore.cli._signatures:signatures",
    "report": "runstore.cli._report:report",
    **{name: f"runstore.cli._test_runs:{name}" for name in _TEST_RUNS},
}
"""Where each command lives, imported when it runs (see :class:`JsonErrorsGroup`)."""


class _DatabaseOption(click.Option):
    """``--db``: its help names the file a command run here would use."""

    def get_help_extra(self, ctx: click.Context) -> OptionHelpExtra:
        extra = super().get_help_extra(ctx)
        choice = choose_database(os.environ.get("RUNSTORE_DB") or None, "RUNSTORE_DB")
        extra["default"] = (
            "the nearest .runstore/runstore.db up from the current folder, not above the "
            f"git repository's top; now: {choice.describe()}"
        )
        return extra


@click.group(
    cls=JsonErrorsGroup,
    lazy_commands=_COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option(
    "--db",
    "db_path",
    cls=_DatabaseOption,
    envvar="RUNSTORE_DB",
    default=None,
    type=click.Path(),
    callback=check_db_path,
    help="SQLite database file, or a postgresql:// URL (env RUNSTORE_DB).",
)
@click.option("--format", "output_format", type=FORMATS, default="text", show_default=True,
              help="Output format of every command.")
@click.version_option(package_name="runstore")
@click.pass_context
def cli(ctx: click.Context, db_path: str | None, output_format: str) -> None:
    """runstore: the records of your runs, in SQLite.

    Without --db or RUNSTORE_DB, the database is the project's: the nearest
    .runstore/runstore.db found walking up from the current folder (stopping at the top
    of the git repository), else .runstore/runstore.db here. `runstore db status` names
    the file used.

    \b
    Example:
      runstore db migrate
      runstore --format json db status
    """
    from_env = ctx.get_parameter_source("db_path") is ParameterSource.ENVIRONMENT
    choice = choose_database(
        None if db_path is None else os.fspath(db_path), "RUNSTORE_DB" if from_env else "--db"
    )
    ctx.obj = Settings(
        db_path=choice.path, output_format=output_format, db_source=choice.source
    )


def main() -> None:
    """Run the ``runstore`` command line."""
    cli(prog_name="runstore")
