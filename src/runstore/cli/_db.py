"""``runstore db``: migrate, status and check of the database (a SQLite file, or a
PostgreSQL database named by a ``postgresql://`` URL), through its ``DatabaseHealth``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click
from returns.result import Failure

from runstore.cli._discover import DatabaseChoice
from runstore.cli._guard import cannot_open_reason, foreign_reason
from runstore.cli._output import emit_json, fail, say
from runstore.cli._settings import format_option, settings
from runstore.exceptions import DatabaseOpenError
from runstore.layers import DATABASE_HEALTH, Access, build, live, shipped_for, shown_database
from runstore.services._primitives import iso_from_ms
from runstore.services.errors import NotARunstoreDatabase
from runstore.services.health import DatabaseHealth, MigrationStatus

__all__ = ["db"]


@click.group()
def db() -> None:
    """Create, inspect and check the database file.

    \b
    Example:
      runstore db migrate && runstore db status
    """


def _status_document(path: str, status: MigrationStatus) -> dict[str, Any]:
    return {
        **_database_fields(path),
        "exists": True,
        "healthy": status.healthy,
        "migrations": {
            "applied": [
                {
                    "id": a.id,
                    "name": a.name,
                    "checksum": a.checksum,
                    "applied_at_ms": a.applied_at_ms,
                    "applied_at": iso_from_ms(a.applied_at_ms),
                    "finished": a.finished,
                }
                for a in status.applied
            ],
            "pending": list(status.pending),
            "shipped": list(shipped_for(path)),
            "problems": [str(p) for p in status.problems],
        },
    }


def _database_fields(path: str) -> dict[str, Any]:
    """``database`` (the file or URL used, without its password) and ``database_source``
    (how it was chosen)."""
    return {"database": shown_database(path), "database_source": settings().db_source}


def _render_status(document: dict[str, Any]) -> None:
    migrations = document["migrations"]
    say(f"database: {DatabaseChoice(document['database'], document['database_source']).describe()}")
    say(f"migrations: {len(migrations['applied'])} applied, {len(migrations['pending'])} pending")
    for applied in migrations["applied"]:
        say(f"  {applied['id']:04d} {applied['name']}  applied {applied['applied_at']}")
    for pending in migrations["pending"]:
        say(f"  {pending:04d} (pending)")
    for problem in migrations["problems"]:
        say(f"  problem: {problem}")


@contextmanager
def _health(access: Access) -> Iterator[DatabaseHealth]:
    """The health service of the command's database, opened once as ``access`` says.

    A database that cannot be opened ends the command with the reason (exit 1), in JSON
    mode with the status document's fields: a missing file is named as such when reading
    (nothing is created).
    """
    cfg = settings()
    path = cfg.db_path
    fields = _database_fields(path)
    shown = fields["database"]
    try:
        with build(live(path, access=access)) as container:
            yield container.get(DATABASE_HEALTH)
    except DatabaseOpenError as exc:
        if access != "read":
            error = exc.error
            reason = (foreign_reason(path, error)
                      if isinstance(error, NotARunstoreDatabase) and error.tables
                      else f"cannot migrate {shown}: {error}")
            fail(reason, output_format=cfg.output_format, document={**fields, "healthy": False})
        if isinstance(exc.error, NotARunstoreDatabase):
            fail(f"no database at {shown} (create it with: runstore db migrate)",
                 output_format=cfg.output_format,
                 document={**fields, "exists": False, "healthy": False})
        fail(cannot_open_reason(path, exc.error), output_format=cfg.output_format,
             document={**fields, "exists": True, "healthy": False})


def _refuse_foreign(health: DatabaseHealth) -> None:
    """End the command (exit 1) when the database is another program's file."""
    ready = health.readiness()
    if isinstance(ready, Failure):
        error = ready.failure()
        if isinstance(error, NotARunstoreDatabase) and error.tables:
            cfg = settings()
            fail(foreign_reason(cfg.db_path, error), output_format=cfg.output_format,
                 document={**_database_fields(cfg.db_path), "exists": True, "healthy": False})


def _answer(document: dict[str, Any], problems: list[str]) -> None:
    """Print ``document`` (JSON) or its text with ``healthy``; exit 1 naming ``problems``."""
    cfg = settings()
    if problems:
        fail("; ".join(problems), output_format=cfg.output_format, document=document)
    if cfg.output_format == "json":
        emit_json(document)
    else:
        say("healthy")


@db.command()
@format_option
def migrate() -> None:
    """Create the database if needed and apply pending migrations.

    Prints the status afterwards (the shape of ``db status``). Exits 1 with the reason when
    the database cannot be opened or is refused (unknown, drifted or half-applied
    migrations); a refused database is left exactly as it was.

    \b
    Example:
      runstore --db /tmp/runs.db db migrate
    """
    cfg = settings()
    with _health("create") as health:
        status = health.status()
    if isinstance(status, Failure):
        fail(str(status.failure()), output_format=cfg.output_format)
    document = _status_document(cfg.db_path, status.unwrap())
    if cfg.output_format == "text":
        _render_status(document)
    _answer(document, [])


@db.command()
@format_option
def status() -> None:
    """Show applied and pending migrations without changing the database.

    Exits 0 when the database can be used (pending migrations included), 1 with a one-line
    reason when it is missing (nothing is created), holds another program's tables and no
    runstore journal, cannot be read, fails SQLite's
    ``quick_check`` (stopping at the first problem), or would be refused (unknown, drifted
    or half-applied migrations).

    \b
    Example:
      runstore db status --format json
    """
    cfg = settings()
    with _health("read") as health:
        _refuse_foreign(health)
        result = health.quick_check().bind(lambda _: health.status())
    if isinstance(result, Failure):
        fail(
            f"cannot read {shown_database(cfg.db_path)}: {result.failure()}",
            output_format=cfg.output_format,
            document={**_database_fields(cfg.db_path), "exists": True, "healthy": False},
        )
    document = _status_document(cfg.db_path, result.unwrap())
    if cfg.output_format == "text":
        _render_status(document)
    _answer(document, document["migrations"]["problems"])


@db.command()
@format_option
def check() -> None:
    """Run SQLite's integrity and foreign-key checks and the migration check.

    Exits 0 when all pass, 1 with a one-line reason otherwise (a corrupt or unreadable
    file, another program's file, foreign-key violations, unknown, drifted or half-applied
    migrations). Changes nothing.

    \b
    Example:
      runstore db check
    """
    cfg = settings()
    with _health("read") as health:
        _refuse_foreign(health)
        result = health.check()
    if isinstance(result, Failure):
        fail(
            f"cannot check {shown_database(cfg.db_path)}: {result.failure()}",
            output_format=cfg.output_format,
            document={**_database_fields(cfg.db_path), "exists": True, "healthy": False},
        )
    found = result.unwrap()
    document = _status_document(cfg.db_path, found.status)
    document["integrity"] = list(found.integrity)
    document["foreign_key_violations"] = [
        {"table": v.table, "rowid": v.rowid, "parent": v.parent, "fkid": v.fkid}
        for v in found.foreign_key_violations
    ]
    document["healthy"] = found.healthy
    if cfg.output_format == "text":
        say(f"database: {DatabaseChoice(cfg.db_path, cfg.db_source).describe()}")
        say(f"integrity_check: {', '.join(found.integrity[:5])}")
        say(f"foreign_key_check: {len(found.foreign_key_violations)} violations")
        say(
            f"migrations: {len(document['migrations']['applied'])} applied, "
            f"{len(document['migrations']['pending'])} pending"
        )
    _answer(document, list(found.problems))
