"""Databases of an older schema holding what the current code stores.

The current code writes columns that later migrations added, so it can no longer write an
older schema itself. A migration test instead records with the current code into a SQLite
file of the current schema, then copies every row into a database migrated only up to the
old schema, the columns that schema has. The search tables are left out (the old schema's
own triggers, where it has them, fill them), and so are the counter rows that later
migrations add (they are theirs to add).
"""

from __future__ import annotations

from pathlib import Path

import apsw
from returns.result import Success

from runstore.layers import SqliteDatabase
from runstore.migrations import apply_migrations

_TABLES = (
    "SELECT name FROM main.sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite%'"
    " AND name NOT LIKE 'search%' AND name NOT IN ('runstore_migrations', 'runstore_meta')"
)


def copy_into_old_sqlite(source: Path, target: Path, up_to: int) -> None:
    """Migrate the SQLite file ``target`` up to migration ``up_to`` and copy into it every
    row of the SQLite file ``source`` (the current schema) it has columns for."""
    db = SqliteDatabase.open(target).unwrap()
    try:
        assert isinstance(apply_migrations(db, up_to=up_to), Success)
    finally:
        db.close()
    connection = apsw.Connection(str(target))
    connection.execute("PRAGMA foreign_keys = OFF")
    connection.execute("ATTACH DATABASE ? AS new", (str(source),))
    tables = [r[0] for r in connection.execute(_TABLES)]
    counters = [r[0] for r in connection.execute("SELECT name FROM main.test_run_sequences")]
    with connection:
        for table in tables:
            columns = ", ".join(r[1] for r in connection.execute(
                f"PRAGMA main.table_info({table})"))
            connection.execute(f"DELETE FROM main.{table}")
            connection.execute(
                f"INSERT INTO main.{table} ({columns}) SELECT {columns} FROM new.{table}")
        marks = ", ".join("?" * len(counters))
        connection.execute(
            f"DELETE FROM main.test_run_sequences WHERE name NOT IN ({marks})", counters)
    connection.close()


def copy_into_old_postgres(source: Path, dsn: str, up_to: int) -> None:
    """Migrate the PostgreSQL database ``dsn`` up to migration ``up_to`` and copy into it
    every row of the SQLite file ``source`` (the current schema) it has columns for, strings
    escaped as the PostgreSQL layer keeps them (its text cannot hold NUL); foreign keys are
    not checked while copying (``session_replication_role``), as the tables go in any
    order."""
    import psycopg

    from runstore.layers._postgres_database import PostgresDatabase, _escape
    from runstore.layers._postgres_migrations import apply_migrations as apply_postgres

    db = PostgresDatabase.open(dsn).unwrap()
    try:
        assert isinstance(apply_postgres(db, up_to=up_to), Success)
    finally:
        db.close()

    def kept(value: object) -> object:
        return _escape(value) if isinstance(value, str) else value

    rows_of = apsw.Connection(str(source))
    with psycopg.connect(dsn) as pg:
        pg.execute("SET session_replication_role = replica")
        counters = [r[0] for r in pg.execute("SELECT name FROM test_run_sequences")]
        tables = [r[0] for r in pg.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema ="
            " current_schema() AND table_type = 'BASE TABLE' AND table_name NOT LIKE 'search%%'"
            " AND table_name NOT IN ('runstore_migrations', 'runstore_meta')")]
        for table in tables:
            columns = [r[0] for r in pg.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema ="
                " current_schema() AND table_name = %s ORDER BY ordinal_position", (table,))]
            listed = ", ".join(columns)
            rows = [tuple(map(kept, row)) for row in rows_of.execute(
                f"SELECT {listed} FROM {table}")]
            pg.execute(f"DELETE FROM {table}")
            if rows:
                marks = ", ".join(["%s"] * len(columns))
                pg.cursor().executemany(
                    f"INSERT INTO {table} ({listed}) VALUES ({marks})", rows)
        pg.execute("DELETE FROM test_run_sequences WHERE NOT (name = ANY(%s))", (counters,))
    rows_of.close()
