"""Agent state on a real PostgreSQL server: the shipped contract and its state machine, the
broken layers failing there too, and processes appending to one thread or holding a stale
token."""

from __future__ import annotations

import pytest

from runstore.testing import AgentsContract, LayerFactory


class TestPostgresAgents(AgentsContract):
    """Each layer on a fresh database of the session's PostgreSQL server."""

    @pytest.fixture
    def layer_factory(self, postgres_layers: LayerFactory) -> LayerFactory:
        return postgres_layers
