"""PostgreSQL migrations: the shipped ids and names match SQLite's, the journal holds their
checksums, and the shared refusal rules apply."""

from __future__ import annotations

import subprocess
import sys

import psycopg
import pytest
from returns.result import Failure, Success

from runstore.exceptions import DatabaseOpenError
from runstore.layers import DATABASE_HEALTH, build, postgres
from runstore.layers._postgres_layer import open_postgres
from runstore.migrations import POSTGRESQL_FOLDER, shipped_ids, shipped_migrations
from runstore.services.errors import (
    HalfAppliedMigration,
    MigrationDrift,
    NotARunstoreDatabase,
    PendingMigrations,
    UnknownMigration,
)


def test_every_postgresql_migration_has_the_sqlite_id_and_name() -> None:
    sqlite = [(m.id, m.name) for m in shipped_migrations()]
    pg = [(m.id, m.name) for m in shipped_migrations(POSTGRESQL_FOLDER)]
    assert pg == sqlite[: len(pg)]
    assert [i for i, _ in pg] == list(range(1, 7)) + [i for i, _ in pg[6:]]


def test_a_fresh_database_is_migrated_and_journalled(postgres_dsn: str) -> None:
    with build(postgres(postgres_dsn)) as c:
        status = c.get(DATABASE_HEALTH).status().unwrap()
        assert status.pending == ()
        assert status.problems == ()
        shipped = {m.id: m.checksum for m in shipped_migrations(POSTGRESQL_FOLDER)}
        assert {a.id: a.checksum for a in status.applied} == shipped
    assert isinstance(open_postgres(postgres_dsn), Success)  # again: nothing to do


@pytest.mark.parametrize(
    ("tamper", "refusal"),
    [
        ("UPDATE runstore_migrations SET checksum = 'x' WHERE id = 2", MigrationDrift),
        ("INSERT INTO runstore_migrations VALUES (9999, 'future', 'c', 0, 1)", UnknownMigration),
        ("UPDATE runstore_migrations SET finished = 0 WHERE id = 6", HalfAppliedMigration),
        ("DELETE FROM runstore_migrations WHERE id = 4", HalfAppliedMigration),
    ],
)
def test_a_database_this_code_cannot_use_is_refused(
    postgres_dsn: str, tamper: str, refusal: type
) -> None:
    open_postgres(postgres_dsn).unwrap().close()
    with psycopg.connect(postgres_dsn, autocommit=True) as c:
        c.execute(tamper)
    opened = open_postgres(postgres_dsn)
    assert isinstance(opened, Failure)
    assert isinstance(opened.failure(), refusal)


def test_an_older_schema_is_pending_for_a_reader_and_migrated_by_a_writer(
    postgres_dsn: str,
) -> None:
    from runstore.layers._postgres_database import PostgresDatabase
    from runstore.layers._postgres_migrations import apply_migrations, readiness

    db = PostgresDatabase.open(postgres_dsn).unwrap()
    assert apply_migrations(db, up_to=5) == Success((1, 2, 3, 4, 5))
    pending = tuple(i for i in shipped_ids(POSTGRESQL_FOLDER) if i > 5)
    assert readiness(db) == Failure(PendingMigrations(pending))
    db.close()
    assert isinstance(open_postgres(postgres_dsn, access="write"), Success)


def test_another_programs_schema_is_refused(postgres_dsn: str) -> None:
    with psycopg.connect(postgres_dsn, autocommit=True) as c:
        c.execute("CREATE TABLE invoices (id int)")
    with pytest.raises(DatabaseOpenError) as raised, build(postgres(postgres_dsn)):
        pass
    error = raised.value.error
    assert isinstance(error, NotARunstoreDatabase)
    assert error.tables == ("invoices",)


def test_nothing_but_the_postgresql_layer_imports_psycopg() -> None:
    code = (
        "import sys, runstore.layers, runstore.services, runstore.cli, runstore.testing,"
        " runstore.migrations, runstore.pytest_plugin;"
        " from runstore.layers import build, sqlite;"
        " build(sqlite(':memory:')).__enter__();"
        " assert not any(m.split('.')[0] in ('psycopg', 'psycopg_pool') for m in sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
