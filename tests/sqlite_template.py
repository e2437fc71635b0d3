"""Migrated SQLite files for the contract suites, copied from one template per test process
(imported by ``tests/conftest.py``), as :mod:`postgres.fixtures` does on PostgreSQL.

A contract test, and each of its hypothesis examples, wants an empty migrated database of its
own. Migrating a new file (17 migrations, each in its own unit of work) costs 50 to 400 ms on 2
shared cores (measured while the suites ran); copying a migrated file costs about 1 ms.
``sqlite_template`` (session scope, so once per pytest-xdist worker) migrates one file with
:func:`~runstore.layers.open_database` and closes it; each layer a test's ``sqlite_files``
factory makes is :func:`runstore.layers.sqlite` on a fresh copy of it. ``sqlite_memory_layers``
does the same for ``:memory:`` (about 100 to 500 ms to migrate, 2 ms to load): one migrated
in-memory database is serialized once, and each layer is :func:`runstore.layers.sqlite` on
``:memory:`` whose ``SqliteDatabase`` is a new connection (configured by
:func:`runstore.layers.connect`, as every runstore connection is) into which that image is
deserialized; every service above it is the ``:memory:`` layer's own.

``tests/layers/test_sqlite_template.py`` checks that a copy, and a loaded image, hold exactly
what a freshly migrated database holds (schema, file settings, migration journal, the rows the
migrations insert), so neither can hide a migration bug; the migration tests, and the tests of
opening a database, keep migrating databases of their own.

A copy (and a loaded image) shares the template's ``runstore_meta`` identity (``database_id``,
``created_at_ms``), which no service reads. ``TestSqliteMemoryHealth`` keeps opening
``:memory:`` itself, so one contract still runs on a database the layer migrated.
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from runstore.layers import (
    ConnectionSettings,
    Container,
    Layer,
    SqliteDatabase,
    connect,
    merge,
    open_database,
    sqlite,
)
from runstore.migrations import migration_status
from runstore.testing import LayerFactory


class SqliteTemplate:
    """A migrated, closed SQLite file to copy fresh databases from."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "template.db"
        open_database(self.path).unwrap().close()
        # Closing the last connection checkpoints the WAL into the file and removes it, so
        # the file alone holds the whole database; a copy of it must not miss a page.
        for suffix in ("-wal", "-shm", "-journal"):
            leftover = Path(f"{self.path}{suffix}")
            if leftover.exists():
                raise RuntimeError(f"the migrated template left {leftover.name} behind")
        self._numbers = itertools.count()
        memory = open_database(":memory:").unwrap()
        try:
            self.image = memory.connection.serialize("main")
        finally:
            memory.close()

    def copy(self, folder: Path, stem: str = "db") -> Path:
        """A new file in ``folder`` holding a copy of the template (written, not migrated)."""
        target = folder / f"{stem}-{next(self._numbers)}.db"
        shutil.copyfile(self.path, target)  # the bytes only: the copy is writable
        return target

    def layers(self, folder: Path, stem: str = "db") -> LayerFactory:
        """A factory of :func:`~runstore.layers.sqlite` layers, each on a new copy in
        ``folder``; the copy is made when the factory is called (a layer built twice reopens
        the same file, as a layer on a path does)."""

        def factory() -> Layer:
            return sqlite(self.copy(folder, stem))

        return factory

    def memory_layers(self) -> LayerFactory:
        """A factory of :func:`~runstore.layers.sqlite` ``:memory:`` layers, each on a new
        connection holding the migrated image (checked to be fully migrated, as
        :func:`~runstore.layers.open_database` checks)."""

        def database(_: Container) -> Iterator[SqliteDatabase]:
            settings = ConnectionSettings()
            connection = connect(":memory:", settings).unwrap()
            connection.deserialize("main", self.image)
            # synchronous is a setting of the schema, which deserialize replaced: set it again
            connection.pragma("synchronous", settings.synchronous.upper())
            db = SqliteDatabase(connection, settings, path=":memory:")
            try:
                status = migration_status(db).unwrap()
                if status.pending or status.problems:
                    raise RuntimeError(f"the migrated image is not current: {status}")
                yield db
            finally:
                db.close()

        return lambda: merge(sqlite(":memory:"), Layer.service(SqliteDatabase, database))


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> SqliteTemplate:
    """The test process's migrated template file (see the module docstring)."""
    return SqliteTemplate(tmp_path_factory.mktemp("sqlite-template"))


@pytest.fixture
def sqlite_files(sqlite_template: SqliteTemplate, tmp_path: Path) -> LayerFactory:
    """A factory of SQLite layers, each on a fresh migrated file (a copy of the template) in
    the test's ``tmp_path``."""
    return sqlite_template.layers(tmp_path)


@pytest.fixture
def sqlite_memory_layers(sqlite_template: SqliteTemplate) -> LayerFactory:
    """A factory of SQLite ``:memory:`` layers, each on a fresh copy of a migrated image."""
    return sqlite_template.memory_layers()
