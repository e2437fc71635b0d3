"""The execution-ledger contract on every shipped layer: in memory, SQLite in memory, a file,
PostgreSQL."""

from __future__ import annotations

import pytest

from runstore.layers import Layer, in_memory
from runstore.testing import LayerFactory, LedgerContract


class TestInMemoryLedger(LedgerContract):
    def make_layer(self) -> Layer:
        return in_memory()


class TestSqliteMemoryLedger(LedgerContract):
    @pytest.fixture
    def layer_factory(self, sqlite_memory_layers: LayerFactory) -> LayerFactory:
        return sqlite_memory_layers


class TestSqliteFileLedger(LedgerContract):
    @pytest.fixture
    def layer_factory(self, sqlite_files: LayerFactory) -> LayerFactory:
        return sqlite_files


class TestPostgresLedger(LedgerContract):
    """Each layer on a fresh database of the session's PostgreSQL server."""

    @pytest.fixture
    def layer_factory(self, postgres_layers: LayerFactory) -> LayerFactory:
        return postgres_layers
