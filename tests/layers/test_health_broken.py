"""Testing the tester: the database-health contract must fail deliberately broken layers,
on SQLite and on PostgreSQL (each breakage applied to either live health)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from returns.result import Result

from runstore.layers import (
    DATABASE_HEALTH,
    Layer,
    SqliteDatabase,
    SqliteDatabaseHealth,
    merge,
    sqlite,
)
from runstore.layers._postgres_database import PostgresDatabase
from runstore.layers._postgres_layer import PostgresDatabaseHealth
from runstore.services import DatabaseCheck, HealthError, MigrationStatus
from runstore.testing import HealthContract, LayerFactory

Health = type[SqliteDatabaseHealth] | type[PostgresDatabaseHealth]


def forgets_the_last_migration(base: Health) -> Health:
    """``base`` reporting the newest applied migration as still pending."""

    class ForgetsTheLastMigration(base):  # type: ignore[valid-type,misc]
        def status(self) -> Result[MigrationStatus, HealthError]:
            return super().status().map(  # type: ignore[no-any-return]
                lambda s: attrs.evolve(s, applied=s.applied[:-1], pending=(s.applied[-1].id,))
            )

    return ForgetsTheLastMigration


def checks_another_journal(base: Health) -> Health:
    """``base`` whose full check carries an empty journal instead of the one ``status``
    reads."""

    class ChecksAnotherJournal(base):  # type: ignore[valid-type,misc]
        def check(self) -> Result[DatabaseCheck, HealthError]:
            return super().check().map(  # type: ignore[no-any-return]
                lambda c: attrs.evolve(c, status=MigrationStatus(applied=(), pending=(),
                                                                  problems=()))
            )

    return ChecksAnotherJournal


BREAKAGES = [forgets_the_last_migration, checks_another_journal]


def _factory(cls: type[SqliteDatabaseHealth]) -> LayerFactory:
    def make() -> Layer:
        return merge(
            sqlite(":memory:"),
            Layer.service(DATABASE_HEALTH, lambda c: cls(c.get(SqliteDatabase)),
                          requires=(SqliteDatabase,)),
        )

    return make


def _on_postgres(postgres_layers: LayerFactory, cls: type[PostgresDatabaseHealth]) -> LayerFactory:
    def make() -> Layer:
        return merge(
            postgres_layers(),
            Layer.service(DATABASE_HEALTH, lambda c: cls(c.get(PostgresDatabase)),
                          requires=(PostgresDatabase,)),
        )

    return make


@pytest.mark.parametrize("breakage", BREAKAGES)
def test_the_contract_fails_a_broken_health(breakage: Any) -> None:
    with pytest.raises(AssertionError):
        HealthContract().test_a_fresh_database_is_ready_sound_and_current(
            _factory(breakage(SqliteDatabaseHealth))
        )


def test_the_contract_passes_the_real_one() -> None:
    HealthContract().test_a_fresh_database_is_ready_sound_and_current(
        _factory(SqliteDatabaseHealth)
    )


@pytest.mark.parametrize("breakage", BREAKAGES)
def test_the_contract_fails_a_broken_postgres_health(
    postgres_layers: LayerFactory, breakage: Any
) -> None:
    with pytest.raises(AssertionError):
        HealthContract().test_a_fresh_database_is_ready_sound_and_current(
            _on_postgres(postgres_layers, breakage(PostgresDatabaseHealth))
        )


def test_the_contract_passes_the_real_postgres_one(postgres_layers: LayerFactory) -> None:
    HealthContract().test_a_fresh_database_is_ready_sound_and_current(
        _on_postgres(postgres_layers, PostgresDatabaseHealth)
    )
