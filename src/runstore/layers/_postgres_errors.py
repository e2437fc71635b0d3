"""The one place where psycopg exceptions become runstore error values, and DSN redaction.

Classification uses the SQLSTATE the server sent
(https://www.postgresql.org/docs/current/errcodes-appendix.html), by class (its first two
characters) and, inside class 23, by code; never the message text. An error without a
SQLSTATE is one psycopg raised itself: a lost connection (``OperationalError`` on a broken
connection) is kind ``connection``, anything else a programmer error.
"""

from __future__ import annotations

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from runstore.services.errors import Busy, StorageFailure, StorageFailureKind

__all__ = ["from_psycopg", "is_programmer_error", "is_retryable", "redact", "scrub"]

RETRYABLE = frozenset({"40001", "40P01"})
"""serialization_failure and deadlock_detected: the transaction may simply be run again."""

_CONSTRAINT_KINDS = {
    "23505": StorageFailureKind.UNIQUE,
    "23503": StorageFailureKind.FOREIGN_KEY,
    "23502": StorageFailureKind.NOT_NULL,
    "23514": StorageFailureKind.CHECK,
}

_CODE_KINDS = {
    "53100": StorageFailureKind.FULL,  # disk_full
    "58030": StorageFailureKind.IO,  # io_error
    "XX001": StorageFailureKind.CORRUPT,  # data_corrupted
    "XX002": StorageFailureKind.CORRUPT,  # index_corrupted
    "25006": StorageFailureKind.READ_ONLY,  # read_only_sql_transaction
    "57014": StorageFailureKind.INTERRUPTED,  # query_canceled
    "55P03": StorageFailureKind.LOCKED,  # lock_not_available
    "3D000": StorageFailureKind.CANT_OPEN,  # invalid_catalog_name: no such database
    # An administrator's shutdown, a crash shutdown, the server starting up, and a
    # terminated session (pg_terminate_backend sends 57P01): the connection is gone.
    "57P01": StorageFailureKind.CONNECTION,
    "57P02": StorageFailureKind.CONNECTION,
    "57P03": StorageFailureKind.CONNECTION,
}

_CLASS_KINDS = {
    "08": StorageFailureKind.CONNECTION,  # connection_exception
    "23": StorageFailureKind.CONSTRAINT,  # integrity_constraint_violation
    "28": StorageFailureKind.CANT_OPEN,  # invalid_authorization_specification
    "53": StorageFailureKind.FULL,  # insufficient_resources
    "58": StorageFailureKind.IO,  # system_error
    "XX": StorageFailureKind.CORRUPT,  # internal_error
}


def kind_of(sqlstate: str) -> StorageFailureKind:
    """The portable kind of a SQLSTATE (``other`` for every code not listed here)."""
    return (
        _CONSTRAINT_KINDS.get(sqlstate)
        or _CODE_KINDS.get(sqlstate)
        or _CLASS_KINDS.get(sqlstate[:2], StorageFailureKind.OTHER)
    )


def is_retryable(exc: BaseException) -> bool:
    """Whether ``exc`` is a serialization failure or a deadlock (SQLSTATE 40001, 40P01)."""
    return isinstance(exc, psycopg.Error) and exc.sqlstate in RETRYABLE


def is_connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` means the connection is gone: kind ``connection``, with a SQLSTATE or
    without one (psycopg's ``OperationalError`` when the socket closed)."""
    if not isinstance(exc, psycopg.Error):
        return False
    if exc.sqlstate:
        return kind_of(exc.sqlstate) is StorageFailureKind.CONNECTION
    return isinstance(exc, psycopg.OperationalError)


def is_programmer_error(exc: BaseException) -> bool:
    """Whether ``exc`` is psycopg refusing a call (wrong parameters, a closed cursor, ...):
    a psycopg error without a SQLSTATE that is not a lost connection. A bug, raised."""
    return (
        isinstance(exc, psycopg.Error)
        and not exc.sqlstate
        and not isinstance(exc, psycopg.OperationalError)
    )


def from_psycopg(
    exc: psycopg.Error, *, operation: str, secret: str = "", table: str = "", waited_ms: int = 0
) -> Busy | StorageFailure:
    """Translate a psycopg error into ``Busy`` or ``StorageFailure``.

    - 40001 and 40P01 (the caller has spent its retry budget) become
      ``Busy(operation, waited_ms)``;
    - 23505 ``unique``, 23503 ``foreign_key``, 23502 ``not_null``, 23514 ``check``, other
      class 23 codes (a trigger's refusal) ``constraint``: as the SQLite layer maps them;
    - class 08, 57P01-57P03 and an error without SQLSTATE ``connection``; 53100 ``full``;
      58030 ``io``; XX001/XX002 ``corrupt``; 25006 ``read_only``; 57014 ``interrupted``;
      55P03 ``locked``; 3D000 and class 28 ``cant_open``; every other code ``other``.

    ``StorageFailure.sqlstate`` is the SQLSTATE ("" when psycopg gave none), ``code`` -1.
    ``secret`` (the password of the DSN) is replaced by ``***`` in the message.
    """
    sqlstate = exc.sqlstate or ""
    if sqlstate in RETRYABLE:
        return Busy(operation=operation, waited_ms=waited_ms)
    kind = kind_of(sqlstate) if sqlstate else StorageFailureKind.CONNECTION
    table = table or (exc.diag.table_name or "" if sqlstate else "")
    return StorageFailure(
        operation=operation,
        kind=kind,
        code=-1,
        message=scrub(str(exc), secret),
        table=table,
        sqlstate=sqlstate,
    )


def scrub(text: str, secret: str) -> str:
    """``text`` with every occurrence of ``secret`` (when not empty) replaced by ``***``."""
    return text.replace(secret, "***") if secret else text


def password_of(dsn: str) -> str:
    """The password a DSN (URL or ``key=value`` form) carries, "" when none or unparsable."""
    try:
        return str(conninfo_to_dict(dsn).get("password") or "")
    except psycopg.Error:
        return ""


def redact(dsn: str) -> str:
    """``dsn`` without its password, for output and errors (``key=value`` form).

    A DSN psycopg cannot parse is shown as ``<unparsable DSN>``: its text may hold a
    password in a place no parser found.
    """
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "<unparsable DSN>"
    if "password" in params:
        params["password"] = "***"
    return make_conninfo("", **{k: v for k, v in params.items() if v is not None})
