"""``runstore db``: migrate, status and check of the database file."""

from __future__ import annotations

import os
from typing import Any

import apsw
import attrs
import click
from returns.result import Failure, Result, Success

from runstore.cli._discover import DatabaseChoice
from runstore.cli._guard import cannot_open_reason
from runstore.cli._output import emit_json, fail, say
from runstore.cli._settings import format_option, settings
from runstore.layers import SqliteDatabase, open_database
from runstore.migrations import MigrationStatus, migration_status, shipped_migrations
from runstore.services.errors import Busy, StorageFailure, StorageFailureKind
from runstore.services.sessions import iso_from_ms

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
            "shipped": [m.id for m in shipped_migrations()],
            "problems": [str(p) for p in status.problems],
        },
    }


def _database_fields(path: str) -> dict[str, Any]:
    """``database`` (the file used) and ``database_source`` (how it was chosen)."""
    return {"database": path, "database_source": settings().db_source}


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


def _open_read_only(path: str, output_format: str) -> SqliteDatabase:
    if path != ":memory:" and not os.path.exists(path):
        fail(
            f"no database at {path} (create it with: runstore db migrate)",
            output_format=output_format,
            document={**_database_fields(path), "exists": False, "healthy": False},
        )
    opened = SqliteDatabase.open_read_only(path)
    if isinstance(opened, Failure):
        fail(
            cannot_open_reason(path, opened.failure()),
            output_format=output_format,
            document={**_database_fields(path), "exists": True, "healthy": False},
        )
    return opened.unwrap()


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
    opened = open_database(cfg.db_path)
    if isinstance(opened, Failure):
        fail(
            f"cannot migrate {cfg.db_path}: {opened.failure()}",
            output_format=cfg.output_format,
            document={**_database_fields(cfg.db_path), "healthy": False},
        )
    database = opened.unwrap()
    try:
        status = migration_status(database)
    finally:
        database.close()
    if isinstance(status, Failure):
        fail(str(status.failure()), output_format=cfg.output_format)
    document = _status_document(cfg.db_path, status.unwrap())
    if cfg.output_format == "json":
        emit_json(document)
    else:
        _render_status(document)
        say("healthy")


@db.command()
@format_option
def status() -> None:
    """Show applied and pending migrations without changing the database.

    Exits 0 when the database can be used (pending migrations included), 1 with a one-line
    reason when it is missing (nothing is created), cannot be read, fails SQLite's
    ``quick_check`` (stopping at the first problem), or would be refused (unknown, drifted
    or half-applied migrations).

    \b
    Example:
      runstore db status --format json
    """
    cfg = settings()
    database = _open_read_only(cfg.db_path, cfg.output_format)
    try:
        result = database.read("db status", lambda: _quick_check(database)).bind(
            lambda _: migration_status(database)
        )
    finally:
        database.close()
    if isinstance(result, Failure):
        fail(
            f"cannot read {cfg.db_path}: {result.failure()}",
            output_format=cfg.output_format,
            document={**_database_fields(cfg.db_path), "exists": True, "healthy": False},
        )
    document = _status_document(cfg.db_path, result.unwrap())
    problems: list[str] = document["migrations"]["problems"]
    if problems:
        if cfg.output_format == "text":
            _render_status(document)
        fail("; ".join(problems), output_format=cfg.output_format, document=document)
    if cfg.output_format == "json":
        emit_json(document)
    else:
        _render_status(document)
        say("healthy")


def _quick_check(database: SqliteDatabase) -> Result[None, StorageFailure]:
    """SQLite's ``quick_check`` stopping at the first problem: a corrupt file is a Failure."""
    found = [str(row[0]) for row in database.execute("PRAGMA quick_check(1)")]
    if found == ["ok"]:
        return Success(None)
    return Failure(
        StorageFailure(
            operation="quick_check",
            kind=StorageFailureKind.CORRUPT,
            code=apsw.SQLITE_CORRUPT,
            message=found[0] if found else "no answer",
        )
    )


@attrs.frozen
class _Checks:
    integrity: list[str]
    foreign_key_violations: list[dict[str, Any]]
    status: MigrationStatus


def _run_checks(database: SqliteDatabase) -> Result[_Checks, Busy | StorageFailure]:
    def checks() -> Result[_Checks, Busy | StorageFailure]:
        integrity = [str(row[0]) for row in database.execute("PRAGMA integrity_check")]
        violations = [
            {"table": r[0], "rowid": r[1], "parent": r[2], "fkid": r[3]}
            for r in database.execute("PRAGMA foreign_key_check")
        ]
        return migration_status(database).map(
            lambda status: _Checks(integrity, violations, status)
        )

    return database.read("db check", checks)


@db.command()
@format_option
def check() -> None:
    """Run SQLite's integrity and foreign-key checks and the migration check.

    Exits 0 when all pass, 1 with a one-line reason otherwise (a corrupt or unreadable
    file, foreign-key violations, unknown, drifted or half-applied migrations). Changes
    nothing.

    \b
    Example:
      runstore db check
    """
    cfg = settings()
    database = _open_read_only(cfg.db_path, cfg.output_format)
    try:
        result = _run_checks(database)
    finally:
        database.close()
    if isinstance(result, Failure):
        fail(
            f"cannot check {cfg.db_path}: {result.failure()}",
            output_format=cfg.output_format,
            document={**_database_fields(cfg.db_path), "exists": True, "healthy": False},
        )
    found = result.unwrap()
    document = _status_document(cfg.db_path, found.status)
    document["integrity"] = found.integrity
    document["foreign_key_violations"] = found.foreign_key_violations
    reasons: list[str] = []
    if found.integrity != ["ok"]:
        reasons.append(f"integrity_check: {found.integrity[0] if found.integrity else 'no answer'}")
    if found.foreign_key_violations:
        reasons.append(f"{len(found.foreign_key_violations)} foreign key violations")
    reasons.extend(document["migrations"]["problems"])
    document["healthy"] = not reasons
    if cfg.output_format == "text":
        say(f"database: {DatabaseChoice(cfg.db_path, cfg.db_source).describe()}")
        say(f"integrity_check: {', '.join(found.integrity[:5])}")
        say(f"foreign_key_check: {len(found.foreign_key_violations)} violations")
        say(
            f"migrations: {len(document['migrations']['applied'])} applied, "
            f"{len(document['migrations']['pending'])} pending"
        )
    if reasons:
        fail("; ".join(reasons), output_format=cfg.output_format, document=document)
    if cfg.output_format == "json":
        emit_json(document)
    else:
        say("healthy")
