"""The one place where apsw exceptions become runstore error values.

Classification uses SQLite's (extended) result codes, https://sqlite.org/rescode.html, never
the message text. An exception that carries no code (apsw sometimes raises one itself, e.g.
from a VFS) is classified by its class, which apsw derives from the primary code.
"""

from __future__ import annotations

import apsw

from runstore.services.errors import Busy, StorageFailure, StorageFailureKind

__all__ = ["from_apsw", "is_busy", "is_programmer_error"]

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

# apsw's exception class for each primary result code (SQLITE_ERROR = 1 ... SQLITE_NOTADB = 26).
_CLASS_CODES: dict[type[BaseException], int] = {
    type(apsw.exception_for(code)): code for code in range(1, apsw.SQLITE_NOTADB + 1)
}

# Raised by apsw (not SQLite) when the calling code misuses the API: wrong bindings, a closed
# connection or cursor, use across threads or forks. These are bugs, never returned as values.
_MISUSE: tuple[type[apsw.Error], ...] = (
    apsw.BindingsError,
    apsw.ConnectionClosedError,
    apsw.CursorClosedError,
    apsw.ExecutionCompleteError,
    apsw.ForkingViolationError,
    apsw.IncompleteExecutionError,
    apsw.MisuseError,
    apsw.ThreadingViolationError,
)


def _codes(exc: BaseException) -> tuple[int, int]:
    """Return ``(primary, extended)`` result codes of ``exc`` (``-1`` when it has none)."""
    result = getattr(exc, "result", None)
    extended = getattr(exc, "extendedresult", None)
    if isinstance(extended, int) and extended >= 0:
        primary = result if isinstance(result, int) and result >= 0 else extended & 0xFF
        return primary, extended
    if isinstance(result, int) and result >= 0:
        return result, result
    for cls in type(exc).__mro__:
        code = _CLASS_CODES.get(cls)
        if code is not None:
            return code, code
    return -1, -1


def is_busy(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's SQLITE_BUSY (any extended variant)."""
    if not isinstance(exc, apsw.Error):
        return False
    return _codes(exc)[0] == apsw.SQLITE_BUSY


def is_programmer_error(exc: BaseException) -> bool:
    """Whether ``exc`` means the calling code misused apsw (a bug to raise, not a value).

    True for apsw's own misuse errors (wrong number of bindings, closed connection or cursor,
    use from another thread or after ``fork()``) and SQLite's SQLITE_MISUSE and SQLITE_RANGE.
    """
    if isinstance(exc, _MISUSE):
        return True
    return isinstance(exc, apsw.Error) and _codes(exc)[0] in (
        apsw.SQLITE_MISUSE,
        apsw.SQLITE_RANGE,
    )


def from_apsw(
    exc: apsw.Error, *, operation: str, table: str = "", waited_ms: int = 0
) -> Busy | StorageFailure:
    """Translate an apsw exception into ``Busy`` or ``StorageFailure``.

    ``operation`` names the unit of work, ``table`` the table involved when known, and
    ``waited_ms`` how long the caller already waited (ms) when the error is SQLITE_BUSY.

    - SQLITE_BUSY (any extended code) becomes ``Busy(operation, waited_ms)``.
    - SQLITE_CONSTRAINT becomes ``StorageFailure`` of kind ``unique``, ``primary_key``,
      ``foreign_key``, ``not_null`` or ``check`` by its extended code, else ``constraint``
      (e.g. a trigger's ``RAISE(ABORT, ...)``).
    - SQLITE_LOCKED, FULL, IOERR, CORRUPT, READONLY, CANTOPEN, NOTADB and INTERRUPT become
      kinds ``locked``, ``full``, ``io``, ``corrupt``, ``read_only``, ``cant_open``,
      ``not_a_database`` and ``interrupted``; every other code becomes ``other``.

    ``StorageFailure.code`` is the extended result code (``-1`` when apsw gave none).
    """
    primary, extended = _codes(exc)
    if primary == apsw.SQLITE_BUSY:
        return Busy(operation=operation, waited_ms=waited_ms)
    kind = _CONSTRAINT_KINDS.get(extended) or _PRIMARY_KINDS.get(primary, StorageFailureKind.OTHER)
    return StorageFailure(
        operation=operation, kind=kind, code=extended, message=str(exc), table=table
    )
