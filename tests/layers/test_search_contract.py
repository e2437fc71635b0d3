"""The search contract on every shipped layer: in memory, SQLite in memory, a file,
PostgreSQL."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import settings

from runstore.layers import Layer, in_memory, sqlite
from runstore.testing import LayerFactory, SearchContract


class TestInMemorySearch(SearchContract):
    # The in-memory layer is also the model: a few examples show the checks run on it.
    search_settings: ClassVar[settings] = settings(SearchContract.search_settings, max_examples=5)

    def make_layer(self) -> Layer:
        return in_memory()


class TestSqliteMemorySearch(SearchContract):
    def make_layer(self) -> Layer:
        return sqlite(":memory:")


class TestSqliteFileSearch(SearchContract):
    search_settings: ClassVar[settings] = settings(
        SearchContract.search_settings, max_examples=10
    )

    @pytest.fixture
    def layer_factory(self, tmp_path: Path) -> LayerFactory:
        numbers = itertools.count()
        return lambda: sqlite(tmp_path / f"search-{next(numbers)}.db")


class TestPostgresSearch(SearchContract):
    """Each layer on a fresh database of the session's PostgreSQL server; fewer examples (a
    fresh database apiece)."""

    search_settings: ClassVar[settings] = settings(
        SearchContract.search_settings, max_examples=15
    )

    @pytest.fixture
    def layer_factory(self, postgres_layers: LayerFactory) -> LayerFactory:
        return postgres_layers
