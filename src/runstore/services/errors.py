"""Error values shared by every service.

These are plain ``attrs`` frozen classes, not exceptions, so two failures compare by value:
``Failure(NotFound("run", "7")) == Failure(NotFound("run", "7"))``. Each service names its own
union of them as a ``TypeAlias``. Nothing here refers to a database driver: the live SQLite
layer maps driver errors onto ``Busy`` and ``StorageFailure`` in one place, and a later live
layer for another database maps its own errors onto the same values.

The text fields of ``NotFound``, ``Conflict``, ``IllegalTransition`` and ``InvalidInput``
always hold text: a value of another type given for one (a caller's id that was a list) is
kept as its bounded ``repr`` (:func:`runstore.services._primitives.describe`), so that
printing or comparing an error never raises, whatever a caller passed.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TypeAlias

import attrs

__all__ = [
    "Busy",
    "Conflict",
    "HalfAppliedMigration",
    "IllegalTransition",
    "InvalidInput",
    "MigrationDrift",
    "MigrationError",
    "NotARunstoreDatabase",
    "NotFound",
    "OpenError",
    "PendingMigrations",
    "StorageFailure",
    "StorageFailureKind",
    "UnknownMigration",
]


def _text(value: object) -> str:
    """``value`` as the text an error field holds: a ``str`` (an enum's member included) as it
    is, anything else (a value a caller passed where text belongs) as its bounded ``repr``
    that never raises, so that formatting an error never fails, not even for a deeply
    nested list."""
    if isinstance(value, str):
        return value
    from runstore.services._primitives import describe  # that module imports this one

    return describe(value)


@attrs.frozen
class NotFound:
    """No ``entity`` exists under ``key`` (both as text, e.g. ``NotFound("run", "12")``)."""

    entity: str = attrs.field(converter=_text)
    key: str = attrs.field(converter=_text)

    def __str__(self) -> str:
        return f"{self.entity} {self.key!r} not found"


@attrs.frozen
class Conflict:
    """A write would contradict what is stored.

    ``expected`` is what the caller assumed and ``actual`` what the store holds (both as text,
    empty when not applicable); ``reason`` says which rule was hit.
    """

    entity: str = attrs.field(converter=_text)
    key: str = attrs.field(converter=_text)
    reason: str = attrs.field(converter=_text)
    expected: str = attrs.field(default="", converter=_text)
    actual: str = attrs.field(default="", converter=_text)

    def __str__(self) -> str:
        detail = ""
        if self.expected or self.actual:
            detail = f" (expected {self.expected!r}, actual {self.actual!r})"
        return f"conflict on {self.entity} {self.key!r}: {self.reason}{detail}"


@attrs.frozen
class IllegalTransition:
    """``entity`` ``key`` cannot move from status ``from_status`` to ``to_status``."""

    entity: str = attrs.field(converter=_text)
    key: str = attrs.field(converter=_text)
    from_status: str = attrs.field(converter=_text)
    to_status: str = attrs.field(converter=_text)

    def __str__(self) -> str:
        return (
            f"{self.entity} {self.key!r} cannot move from {self.from_status!r} "
            f"to {self.to_status!r}"
        )


@attrs.frozen
class InvalidInput:
    """Argument ``field`` was rejected for ``reason``; nothing was written."""

    field: str = attrs.field(converter=_text)
    reason: str = attrs.field(converter=_text)

    def __str__(self) -> str:
        return f"invalid {self.field}: {self.reason}"


@attrs.frozen
class Busy:
    """Another connection held the write lock for the whole retry budget.

    ``operation`` names the unit of work; ``waited_ms`` is how long it waited in total (ms).
    Nothing was written; the same call may be retried later.
    """

    operation: str
    waited_ms: int

    def __str__(self) -> str:
        return f"database busy: {self.operation} gave up after {self.waited_ms} ms"


class StorageFailureKind(StrEnum):
    """What went wrong in the storage engine, independent of the engine.

    The SQLite layer derives the kind from SQLite's extended result codes
    (https://sqlite.org/rescode.html), the PostgreSQL layer from the SQLSTATE
    (https://www.postgresql.org/docs/current/errcodes-appendix.html), never from message
    text. ``connection`` is a connection to a database server lost or refused (SQLSTATE
    class 08, an administrator's shutdown or termination of the session).
    """

    UNIQUE = "unique"
    PRIMARY_KEY = "primary_key"
    FOREIGN_KEY = "foreign_key"
    NOT_NULL = "not_null"
    CHECK = "check"
    CONSTRAINT = "constraint"
    LOCKED = "locked"
    FULL = "full"
    IO = "io"
    CORRUPT = "corrupt"
    READ_ONLY = "read_only"
    CANT_OPEN = "cant_open"
    NOT_A_DATABASE = "not_a_database"
    INTERRUPTED = "interrupted"
    CONNECTION = "connection"
    CLOSED = "closed"  # the store's container was closed before the call
    OTHER = "other"


@attrs.frozen
class StorageFailure:
    """The storage engine refused or failed an operation.

    ``operation`` names the unit of work, ``table`` the table involved when known (else ""),
    ``kind`` the portable classification, ``code`` the engine's own (extended) result code
    (SQLite's; -1 from PostgreSQL), ``sqlstate`` PostgreSQL's five-character SQLSTATE (""
    from SQLite, and for a PostgreSQL connection lost without one), ``message`` the
    engine's text, for people only.
    """

    operation: str
    kind: StorageFailureKind
    code: int
    message: str
    table: str = ""
    sqlstate: str = ""

    def __str__(self) -> str:
        where = f" on {self.table}" if self.table else ""
        return f"storage failure ({self.kind}) in {self.operation}{where}: {self.message}"


@attrs.frozen
class UnknownMigration:
    """The database carries migrations this code does not know (written by a newer runstore).

    ``ids`` lists them; the database is left untouched.
    """

    ids: tuple[int, ...]

    def __str__(self) -> str:
        listed = ", ".join(f"{i:04d}" for i in self.ids)
        return f"database has migrations this runstore does not know: {listed} (upgrade runstore)"


@attrs.frozen
class MigrationDrift:
    """An applied migration's checksum differs from the shipped file's (it was edited).

    ``expected`` is the shipped checksum, ``actual`` the journalled one (sha256, hex).
    """

    id: int
    name: str
    expected: str
    actual: str

    def __str__(self) -> str:
        return (
            f"migration {self.id:04d} {self.name} differs from the one applied "
            f"(checksum {self.actual[:12]}, expected {self.expected[:12]})"
        )


@attrs.frozen
class HalfAppliedMigration:
    """Migration ``id`` is partly present: a journal row never marked finished, or objects it
    creates exist although the journal does not list it. ``detail`` says which."""

    id: int
    name: str
    detail: str

    def __str__(self) -> str:
        return f"migration {self.id:04d} {self.name} is half-applied: {self.detail}"


@attrs.frozen
class NotARunstoreDatabase:
    """The file at ``path`` is not a runstore database, so it was neither read nor changed.

    ``detail`` says why: the file does not exist, or it holds no migration journal (an empty
    file, or SQLite that another program wrote). ``tables`` names, sorted, the tables and
    views such a file holds instead: runstore never adds its own beside another program's,
    not even when asked to create the database (empty for a missing or empty file, which
    creating may use).
    """

    path: str
    detail: str
    tables: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.path} is not a runstore database: {self.detail}"


@attrs.frozen
class PendingMigrations:
    """The database lacks the shipped migrations ``ids`` (written by an older runstore).

    Code that only reads refuses it rather than read an older schema; opening it for
    writing applies them.
    """

    ids: tuple[int, ...]

    def __str__(self) -> str:
        listed = ", ".join(f"{i:04d}" for i in self.ids)
        return f"database lacks migrations {listed} of this runstore (migrate it to read it)"


MigrationError: TypeAlias = UnknownMigration | MigrationDrift | HalfAppliedMigration
"""Why a database was refused before any data was touched."""

OpenError: TypeAlias = StorageFailure | Busy | MigrationError | NotARunstoreDatabase
"""Why a live layer could not open its database."""
