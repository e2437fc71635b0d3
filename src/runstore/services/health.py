"""The health of the database under the services: can this code read it, what its migration
journal says, and whether SQLite finds the file sound.

``DatabaseHealth`` answers what a command asks before it trusts a database, so that hosts
(the CLI's ``db status`` and ``db check``, every reading command) ask a service instead of
running SQL themselves. Every method only reads: nothing is created, migrated or repaired.
The live layer answers for its SQLite file; the in-memory layer, which has no file and no
schema to migrate, is always ready and sound.
"""

from __future__ import annotations

from typing import Protocol, TypeAlias, runtime_checkable

import attrs
from returns.result import Result

from runstore.services.errors import (
    Busy,
    MigrationError,
    NotARunstoreDatabase,
    PendingMigrations,
    StorageFailure,
)

__all__ = [
    "AppliedMigration",
    "DatabaseCheck",
    "DatabaseHealth",
    "ForeignKeyViolation",
    "HealthError",
    "MigrationStatus",
    "ReadinessError",
]


@attrs.frozen
class AppliedMigration:
    """One journal row: ``applied_at_ms`` is epoch ms UTC; ``finished`` is False only for a
    migration that did not complete."""

    id: int
    name: str
    checksum: str
    applied_at_ms: int
    finished: bool


@attrs.frozen
class MigrationStatus:
    """What the journal of one database says against the shipped migrations.

    ``applied`` are the journal rows in id order, ``pending`` the ids still to apply,
    ``problems`` every reason the database would be refused (empty when it is healthy).
    """

    applied: tuple[AppliedMigration, ...]
    pending: tuple[int, ...]
    problems: tuple[MigrationError, ...]

    @property
    def healthy(self) -> bool:
        """Whether nothing would be refused (pending migrations are not a problem)."""
        return not self.problems


@attrs.frozen
class ForeignKeyViolation:
    """One row of SQLite's ``foreign_key_check``: the row ``rowid`` of ``table`` (None for a
    table without rowids) refers to a missing row of ``parent``; ``fkid`` numbers the
    foreign key within ``table``."""

    table: str
    rowid: int | None
    parent: str
    fkid: int


@attrs.frozen
class DatabaseCheck:
    """The full check of a database.

    ``integrity`` are the lines of SQLite's ``integrity_check`` (``("ok",)`` when sound, else
    up to 100 problems), ``foreign_key_violations`` every row referring to a missing row,
    ``status`` the migration journal against the shipped migrations.
    """

    integrity: tuple[str, ...]
    foreign_key_violations: tuple[ForeignKeyViolation, ...]
    status: MigrationStatus

    @property
    def problems(self) -> tuple[str, ...]:
        """One line per reason the database is not healthy, in the order checked; empty
        when it is."""
        found: list[str] = []
        if self.integrity != ("ok",):
            found.append(
                f"integrity_check: {self.integrity[0] if self.integrity else 'no answer'}"
            )
        if self.foreign_key_violations:
            found.append(f"{len(self.foreign_key_violations)} foreign key violations")
        found.extend(str(problem) for problem in self.status.problems)
        return tuple(found)

    @property
    def healthy(self) -> bool:
        """Whether every check passed (pending migrations are not a problem)."""
        return not self.problems


HealthError: TypeAlias = Busy | StorageFailure
"""Why the database could not be read: ``Busy`` past the budget, or a ``StorageFailure``
(kind ``corrupt`` for a damaged file, ``not_a_database``, ``io``, ...)."""

ReadinessError: TypeAlias = (
    NotARunstoreDatabase | PendingMigrations | MigrationError | Busy | StorageFailure
)
"""Why this code cannot read the database as it is (see :meth:`DatabaseHealth.readiness`)."""


@runtime_checkable
class DatabaseHealth(Protocol):
    """The health of one database. Every method reads only and may be called at any time."""

    def readiness(self) -> Result[None, ReadinessError]:
        """Success when this code can read the database as it is.

        Reads the migration journal only (not the migration files, nor their checksums:
        :meth:`status` compares those). Failures, in the order checked:

        - ``NotARunstoreDatabase``: the database holds no migration journal (an empty file,
          or one another program wrote, whose ``tables`` it names);
        - ``UnknownMigration``: it carries migrations this code does not know (a newer
          runstore wrote it);
        - ``HalfAppliedMigration``: a journal row was never marked finished;
        - ``PendingMigrations``: shipped migrations are not applied yet (an older runstore
          wrote it; opening it for writing migrates it);
        - ``Busy`` or ``StorageFailure`` when it cannot be read.
        """
        ...

    def quick_check(self) -> Result[None, HealthError]:
        """Run SQLite's ``quick_check``, stopping at the first problem.

        Returns ``StorageFailure`` of kind ``corrupt`` naming the first problem found (or a
        failure of the kind SQLite raised, when even reading the schema fails), ``Busy``.
        """
        ...

    def status(self) -> Result[MigrationStatus, HealthError]:
        """The migration journal against the shipped migrations, checksums included.

        Pending migrations are reported, not refused; ``problems`` holds every reason
        opening the database for writing would refuse it (unknown, drifted or half-applied
        migrations). A database without a journal has every shipped migration pending.
        Returns ``Busy`` or ``StorageFailure`` when it cannot be read.
        """
        ...

    def check(self) -> Result[DatabaseCheck, HealthError]:
        """SQLite's full ``integrity_check`` and ``foreign_key_check``, then :meth:`status`.

        Problems found are values in the :class:`DatabaseCheck`; ``Busy`` or
        ``StorageFailure`` (kind ``corrupt`` when not even the schema can be read) when the
        checks cannot run.
        """
        ...
