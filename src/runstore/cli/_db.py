"""``runstore db``: migrate, status and check of the database file."""

from __future__ import annotations

import os
from typing import Any

import click
from returns.result import Failure

from runstore.cli._output import console, emit_json, fail
from runstore.cli._settings import format_option, settings
from runstore.layers import SqliteDatabase, open_database
from runstore.migrations import MigrationStatus, migration_status, shipped_migrations

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
        "database": path,
        "exists": True,
        "healthy": status.healthy,
        "migrations": {
            "applied": [
                {
                    "id": a.id,
                    "name": a.name,
                    "checksum": a.checksum,
                    "applied_at_ms": a.applied_at_ms,
                    "finished": a.finished,
                }
                for a in status.applied
            ],
            "pending": list(status.pending),
            "shipped": [m.id for m in shipped_migrations()],
            "problems": [str(p) for p in status.problems],
        },
    }


def _render_status(document: dict[str, Any]) -> None:
    out = console()
    migrations = document["migrations"]
    out.print(f"database: {document['database']}")
    out.print(
        f"migrations: {len(migrations['applied'])} applied, {len(migrations['pending'])} pending"
    )
    for applied in migrations["applied"]:
        out.print(f"  {applied['id']:04d} {applied['name']}  applied_at_ms={applied['applied_at_ms']}")
    for pending in migrations["pending"]:
        out.print(f"  {pending:04d} (pending)")
    for problem in migrations["problems"]:
        out.print(f"  problem: {problem}")
    out.print("healthy" if document["healthy"] else "UNHEALTHY")


def _open_read_only(path: str, output_format: str) -> SqliteDatabase:
    if path != ":memory:" and not os.path.exists(path):
        fail(
            f"no database at {path} (create it with: runstore db migrate)",
            output_format=output_format,
            document={"database": path, "exists": False, "healthy": False},
        )
    opened = SqliteDatabase.open_read_only(path)
    if isinstance(opened, Failure):
        fail(f"cannot open {path}: {opened.failure()}", output_format=output_format)
    return opened.unwrap()


@db.command()
@format_option
def migrate() -> None:
    """Create the database if needed and apply pending migrations.

    \b
    Example:
      runstore --db /tmp/runs.db db migrate
    """
    cfg = settings()
    opened = open_database(cfg.db_path)
    if isinstance(opened, Failure):
        fail(f"cannot migrate {cfg.db_path}: {opened.failure()}", output_format=cfg.output_format)
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


@db.command()
@format_option
def status() -> None:
    """Show applied and pending migrations without changing the database.

    Exits 1 when the database is missing or would be refused (unknown, drifted or
    half-applied migrations).

    \b
    Example:
      runstore db status --format json
    """
    cfg = settings()
    database = _open_read_only(cfg.db_path, cfg.output_format)
    try:
        result = migration_status(database)
    finally:
        database.close()
    if isinstance(result, Failure):
        fail(str(result.failure()), output_format=cfg.output_format)
    document = _status_document(cfg.db_path, result.unwrap())
    if cfg.output_format == "json":
        emit_json(document)
    else:
        _render_status(document)
    if not document["healthy"]:
        raise SystemExit(1)


@db.command()
@format_option
def check() -> None:
    """Run SQLite's integrity and foreign-key checks and the migration check.

    Exits 0 when all pass, 1 with a one-line reason otherwise. Changes nothing.

    \b
    Example:
      runstore db check
    """
    cfg = settings()
    database = _open_read_only(cfg.db_path, cfg.output_format)
    try:
        integrity = [row[0] for row in database.execute("PRAGMA integrity_check")]
        foreign_keys = [
            {"table": r[0], "rowid": r[1], "parent": r[2], "fkid": r[3]}
            for r in database.execute("PRAGMA foreign_key_check")
        ]
        result = migration_status(database)
    finally:
        database.close()
    if isinstance(result, Failure):
        fail(str(result.failure()), output_format=cfg.output_format)
    document = _status_document(cfg.db_path, result.unwrap())
    document["integrity"] = integrity
    document["foreign_key_violations"] = foreign_keys
    reasons = []
    if integrity != ["ok"]:
        reasons.append(f"integrity_check: {integrity[0]}")
    if foreign_keys:
        reasons.append(f"{len(foreign_keys)} foreign key violations")
    reasons.extend(document["migrations"]["problems"])
    document["healthy"] = not reasons
    if cfg.output_format == "json":
        emit_json(document)
    else:
        out = console()
        out.print(f"database: {cfg.db_path}")
        out.print(f"integrity_check: {', '.join(integrity[:5])}")
        out.print(f"foreign_key_check: {len(foreign_keys)} violations")
        out.print(f"migrations: {len(document['migrations']['applied'])} applied, "
                  f"{len(document['migrations']['pending'])} pending")
    if reasons:
        fail("; ".join(reasons))
    if cfg.output_format == "text":
        console().print("healthy")
