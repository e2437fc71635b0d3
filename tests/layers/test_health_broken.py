"""Testing the tester: the database-health contract must fail deliberately broken layers."""

from __future__ import annotations

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
from runstore.services import DatabaseCheck, HealthError, MigrationStatus
from runstore.testing import HealthContract, LayerFactory


class ForgetsTheLastMigration(SqliteDatabaseHealth):
    """Reports the newest applied migration as still pending."""

    def status(self) -> Result[MigrationStatus, HealthError]:
        return super().status().map(
            lambda s: attrs.evolve(s, applied=s.applied[:-1], pending=(s.applied[-1].id,))
        )


class ChecksAnotherJournal(SqliteDatabaseHealth):
    """Its full check carries an empty journal instead of the one ``status`` reads."""

    def check(self) -> Result[DatabaseCheck, HealthError]:
        return super().check().map(
            lambda c: attrs.evolve(c, status=MigrationStatus(applied=(), pending=(),
                                                              problems=()))
        )


def _factory(cls: type[SqliteDatabaseHealth]) -> LayerFactory:
    def make() -> Layer:
        return merge(
            sqlite(":memory:"),
            Layer.service(DATABASE_HEALTH, lambda c: cls(c.get(SqliteDatabase)),
                          requires=(SqliteDatabase,)),
        )

    return make


@pytest.mark.parametrize("broken", [ForgetsTheLastMigration, ChecksAnotherJournal])
def test_the_contract_fails_a_broken_health(broken: type[SqliteDatabaseHealth]) -> None:
    with pytest.raises(AssertionError):
        HealthContract().test_a_fresh_database_is_ready_sound_and_current(_factory(broken))


def test_the_contract_passes_the_real_one() -> None:
    HealthContract().test_a_fresh_database_is_ready_sound_and_current(
        _factory(SqliteDatabaseHealth)
    )
