"""The sessions contract on every shipped layer: in memory, SQLite in memory, a file,
PostgreSQL."""

from __future__ import annotations

from typing import ClassVar

import pytest
from hypothesis import settings

from runstore.layers import Layer, in_memory
from runstore.testing import LayerFactory, SessionsContract


class TestInMemorySessions(SessionsContract):
    # The in-memory layer is also the model: a few examples show the machine runs on it.
    state_machine_settings: ClassVar[settings] = settings(
        SessionsContract.state_machine_settings, max_examples=5
    )

    def make_layer(self) -> Layer:
        return in_memory()


class TestSqliteMemorySessions(SessionsContract):
    @pytest.fixture
    def layer_factory(self, sqlite_memory_layers: LayerFactory) -> LayerFactory:
        return sqlite_memory_layers


class TestSqliteFileSessions(SessionsContract):
    @pytest.fixture
    def layer_factory(self, sqlite_files: LayerFactory) -> LayerFactory:
        return sqlite_files


class TestPostgresSessions(SessionsContract):
    """Each layer on a fresh database of the session's PostgreSQL server. The state machine
    runs fewer examples (about 2 s each on 2 shared cores, a fresh database apiece)."""

    state_machine_settings: ClassVar[settings] = settings(
        SessionsContract.state_machine_settings, max_examples=25
    )

    @pytest.fixture
    def layer_factory(self, postgres_layers: LayerFactory) -> LayerFactory:
        return postgres_layers
