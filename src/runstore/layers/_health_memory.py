"""The in-memory :class:`~runstore.services.DatabaseHealth`: memory has no file to damage and
no schema to migrate, so it is always ready, sound and current."""

from __future__ import annotations

from collections.abc import Callable

from returns.result import Result, Success

from runstore.layers._layer import Layer
from runstore.layers._tags import DATABASE_HEALTH
from runstore.services.health import (
    DatabaseCheck,
    DatabaseHealth,
    HealthError,
    MigrationStatus,
    ReadinessError,
)

__all__ = ["InMemoryDatabaseHealth", "in_memory_health"]

_CURRENT = MigrationStatus(applied=(), pending=(), problems=())


class InMemoryDatabaseHealth:
    """The health of the in-memory layer: every answer is the healthy one.

    ``status()`` has no journal rows and nothing pending (no migrations apply to memory);
    ``check()`` reports ``("ok",)`` and no foreign-key violations.
    """

    def readiness(self) -> Result[None, ReadinessError]:
        return Success(None)

    def quick_check(self) -> Result[None, HealthError]:
        return Success(None)

    def status(self) -> Result[MigrationStatus, HealthError]:
        return Success(_CURRENT)

    def check(self) -> Result[DatabaseCheck, HealthError]:
        return Success(DatabaseCheck(integrity=("ok",), foreign_key_violations=(), status=_CURRENT))


def in_memory_health() -> Layer:
    """A layer providing :data:`~runstore.layers.DATABASE_HEALTH` from memory (requires
    nothing)."""
    return Layer.service(DATABASE_HEALTH, lambda _c: InMemoryDatabaseHealth())


_check: Callable[[], DatabaseHealth] = InMemoryDatabaseHealth
