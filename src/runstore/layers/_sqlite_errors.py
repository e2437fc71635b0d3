"""The one place where apsw exceptions become runstore error values.

Classification uses SQLite's (extended) result codes, https://sqlite.org/rescode.html, never
the message text.
"""

from __future__ import annotations

import apsw

from runstore.services.errors import Busy, StorageFailure, StorageFailureKind

__all__ = ["from_apsw", "is_busy"]

_PRIMARY_KINDS: dict[int, StorageFailureKind] = {
    apsw.SQLITE_CONSTRAINT: StorageFailureKind.CONSTRAINT,
    apsw.SQLITE_LOCKED: StorageFailureKind.LOCKED,
    apsw.SQLITE_FULL: StorageFailureKind.FULL,
    apsw.SQLITE_IOERR: StorageFailureKind.IO,
    apsw.SQLITE_CORRUPT: StorageFailureKind.CORRUPT,
    apsw.SQLITE_READONLY: StorageFailureKind.READ_ONLY,
    apsw.SQLITE_CANTOPEN: StorageFailureKind.CANT_OPEN,
    apsw.SQLITE_NOTADB: StorageFailureKind.NOT_A_DATABASE,
    apsw.SQLITE_INTERRUPT: StorageFailureKind.INTERRUPTED,
}

_CONSTRAINT_KINDS: dict[int, StorageFailureKind] = {
    apsw.SQLITE_CONSTRAINT_UNIQUE: StorageFailureKind.UNIQUE,
    apsw.SQLITE_CONSTRAINT_PRIMARYKEY: StorageFailureKind.PRIMARY_KEY,
    apsw.SQLITE_CONSTRAINT_FOREIGNKEY: StorageFailureKind.FOREIGN_KEY,
    apsw.SQLITE_CONSTRAINT_NOTNULL: StorageFailureKind.NOT_NULL,
    apsw.SQLITE_CONSTRAINT_CHECK: StorageFailureKind.CHECK,
}


def _codes(exc: apsw.Error) -> tuple[int, int]:
    primary = int(getattr(exc, "result", -1))
    extended = int(getattr(exc, "extendedresult", primary))
    if primary < 0:
        primary = extended & 0xFF
    return primary, extended


def is_busy(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's SQLITE_BUSY (any extended variant)."""
    if not isinstance(exc, apsw.Error):
        return False
    primary, _ = _codes(exc)
    return primary == apsw.SQLITE_BUSY


def from_apsw(
    exc: apsw.Error, *, operation: str, table: str = "", waited_ms: int = 0
) -> Busy | StorageFailure:
    """Translate an apsw exception into ``Busy`` or ``StorageFailure``.

    ``operation`` names the unit of work, ``table`` the table involved when known, and
    ``waited_ms`` how long the caller already waited (ms) when the error is SQLITE_BUSY.
    SQLITE_BUSY becomes ``Busy``; every other code becomes ``StorageFailure`` whose ``kind``
    comes from the extended code (constraint kinds) or the primary code (locked, full, I/O,
    corrupt, read-only, ...), and ``OTHER`` otherwise.
    """
    primary, extended = _codes(exc)
    if primary == apsw.SQLITE_BUSY:
        return Busy(operation=operation, waited_ms=waited_ms)
    kind = _CONSTRAINT_KINDS.get(extended) or _PRIMARY_KINDS.get(primary, StorageFailureKind.OTHER)
    return StorageFailure(
        operation=operation, kind=kind, code=extended, message=str(exc), table=table
    )
