"""Service Protocols, their records and their error values. No I/O happens here."""

from __future__ import annotations

from runstore.services.clock import Clock, FixedClock, SystemClock
from runstore.services.errors import (
    Busy,
    Conflict,
    HalfAppliedMigration,
    IllegalTransition,
    InvalidInput,
    MigrationDrift,
    MigrationError,
    NotFound,
    OpenError,
    StorageFailure,
    StorageFailureKind,
    UnknownMigration,
)

__all__ = [
    "Busy",
    "Clock",
    "Conflict",
    "FixedClock",
    "HalfAppliedMigration",
    "IllegalTransition",
    "InvalidInput",
    "MigrationDrift",
    "MigrationError",
    "NotFound",
    "OpenError",
    "StorageFailure",
    "StorageFailureKind",
    "SystemClock",
    "UnknownMigration",
]
