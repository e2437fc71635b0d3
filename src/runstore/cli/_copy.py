"""``runstore db copy SRC DST``: copy a whole database between a SQLite file and PostgreSQL.

Registered on the ``db`` group here, so that the group's own module stays as it is and the
copy module (:mod:`runstore.layers._copy`) is imported only when a copy runs.
"""

from __future__ import annotations

from typing import Any

import click
from returns.result import Failure

from runstore.cli._db import db
from runstore.cli._output import emit_json, fail, progress_on_terminal, say
from runstore.cli._settings import format_option, settings
from runstore.layers import database_path_problem, scrub_database, shown_database

__all__ = ["db"]


def _target(ctx: click.Context, param: click.Parameter, value: str) -> str:
    problem = database_path_problem(value)
    if problem is not None:
        raise click.BadParameter(problem, ctx, param)
    return value


@db.command("copy")
@click.argument("source", callback=_target)
@click.argument("destination", callback=_target)
@click.option(
    "--partial",
    is_flag=True,
    help="Copy even when some source records have no table on the destination yet "
    "(they are listed, and left behind).",
)
@format_option
def copy(source: str, destination: str, partial: bool) -> None:
    """Copy every record of the database SOURCE into the empty database DESTINATION.

    Each is the path of a SQLite file or a postgresql:// URL. DESTINATION is created and
    migrated when needed and must hold no records; SOURCE must be a runstore database at
    this runstore's schema (run `runstore db migrate` on it first). Tables are read from
    both schemas and written in one transaction, ids and id counters kept, then every
    table is checked on both sides by row count and checksum: either the whole copy is
    there, verified, or nothing is. Tables the destination's schema cannot hold yet are
    listed; when they hold records the copy is refused unless --partial is given.

    Exits 0 when the copy is done and verified, 1 with the reason when it is refused or
    fails (the destination is then left without any copied record). Passwords in URLs are
    never printed.

    \b
    Example:
      runstore db copy .runstore/runstore.db postgresql://runstore@db.internal/runstore
      runstore db copy postgresql://runstore@db.internal/runstore backup.db
    """
    from runstore.layers._copy import copy_database

    cfg = settings()
    shown = {"source": shown_database(source), "destination": shown_database(destination)}
    with progress_on_terminal("copying rows", None) as advance:
        result = copy_database(source, destination, partial=partial, progress=advance)
    if isinstance(result, Failure):
        reason = scrub_database(scrub_database(str(result.failure()), source), destination)
        fail(f"cannot copy: {reason}", output_format=cfg.output_format,
             document={**shown, "copied": False})
    report = result.unwrap()
    document: dict[str, Any] = {
        **shown,
        "copied": True,
        "rows": report.rows,
        "tables": [{"table": t.table, "rows": t.rows, "checksum": t.checksum}
                   for t in report.tables],
        "not_copied": [{"table": t.table, "rows": t.rows, "data_rows": t.data_rows,
                        "reason": t.reason} for t in report.not_copied],
        "counters": [{"table": c.table, "column": c.column, "value": c.value}
                     for c in report.counters],
    }
    if cfg.output_format == "json":
        emit_json(document)
        return
    say(f"copied {shown['source']} -> {shown['destination']}")
    for table in report.tables:
        if table.rows:
            say(f"  {table.table}: {_rows(table.rows)} (checksum {table.checksum})")
    empty = [t.table for t in report.tables if not t.rows]
    if empty:
        say(f"  empty: {', '.join(empty)}")
    for left in report.not_copied:
        held = f"{_rows(left.data_rows)} left behind" if left.data_rows else "no records"
        say(f"  not copied: {left.table} ({held}): {left.reason}")
    say(f"verified: {len(report.tables)} tables, {_rows(report.rows)}, equal row for row")


def _rows(count: int) -> str:
    return f"{count} row" if count == 1 else f"{count} rows"
