"""The search contract on every shipped layer: in memory, SQLite in memory, a file,
PostgreSQL."""

from __future__ import annotations

from typing import ClassVar

import pytest
from hypothesis import settings

from runstore.layers import Layer, in_memory
from runstore.testing import LayerFactory, SearchContract


class TestInMemorySearch(SearchContract):
    # The in-memory layer is also the model: a few examples show the checks run on it.
    search_settings: ClassVar[settings] = settings(SearchContract.search_settings, max_examples=5)

    def make_layer(self) -> Layer:
        return in_memory()


class TestSqliteMemorySearch(SearchContract):
    @pytest.fixture
    def layer_factory(self, sqlite_memory_layers: LayerFactory) -> LayerFactory:
        return sqlite_memory_layers


class TestSqliteFileSearch(SearchContract):
    search_settings: ClassVar[settings] = settings(
        SearchContract.search_settings, max_examples=10
    )

    @pytest.fixture
    def layer_factory(self, sqlite_files: LayerFactory) -> LayerFactory:
        return sqlite_files


class TestPostgresSearch(SearchContract):
    """Each layer on a fresh database of the session's PostgreSQL server; fewer examples (a
    fresh database apiece)."""

    search_settings: ClassVar[settings] = settings(
        SearchContract.search_settings, max_examples=15
    )

    @pytest.fixture
    def layer_factory(self, postgres_layers: LayerFactory) -> LayerFactory:
        return postgres_layers
