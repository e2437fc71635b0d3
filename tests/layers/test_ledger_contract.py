"""The execution-ledger contract on every shipped layer: in memory, SQLite in memory, a file,
PostgreSQL."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from runstore.layers import Layer, in_memory, sqlite
from runstore.testing import LayerFactory, LedgerContract


class TestInMemoryLedger(LedgerContract):
    def make_layer(self) -> Layer:
        return in_memory()


class TestSqliteMemoryLedger(LedgerContract):
    def make_layer(self) -> Layer:
        return sqlite(":memory:")


class TestSqliteFileLedger(LedgerContract):
    @pytest.fixture
    def layer_factory(self, tmp_path: Path) -> LayerFactory:
        numbers = itertools.count()
        return lambda: sqlite(tmp_path / f"ledger-{next(numbers)}.db")


class TestPostgresLedger(LedgerContract):
    """Each layer on a fresh database of the session's PostgreSQL server."""

    @pytest.fixture
    def layer_factory(self, postgres_layers: LayerFactory) -> LayerFactory:
        return postgres_layers
