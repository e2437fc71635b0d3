"""Exceptions for programmer error and misconfiguration.

Expected failures (a missing row, a conflict, a busy database, bad input) are never raised:
service methods return them as values inside a ``returns.result.Failure``. The exceptions here
mean the calling code or the set-up is wrong and must be fixed.
"""

from __future__ import annotations

__all__ = [
    "ConnectionUsedAfterFork",
    "ContainerClosed",
    "DatabaseOpenError",
    "MissingExtra",
    "MissingServices",
    "RunstoreError",
    "TransactionMisuse",
]


class RunstoreError(Exception):
    """Root of every exception runstore raises."""


class MissingServices(RunstoreError):
    """``build(layer)`` was given a layer whose requirements are not all provided.

    ``missing`` names every unmet requirement, not just the first.
    """

    def __init__(self, missing: tuple[str, ...]) -> None:
        self.missing = missing
        super().__init__("layer requirements not provided: " + ", ".join(missing))


class DatabaseOpenError(RunstoreError):
    """The live layer could not open or migrate its database while a container was built.

    ``error`` is the typed value (an ``OpenFailure`` or a migration refusal) that says why;
    the connection has been closed again.
    """

    def __init__(self, error: object) -> None:
        self.error = error
        super().__init__(str(error))


class MissingExtra(RunstoreError):
    """A layer was asked for whose driver is an extra that is not installed; the message
    names the extra to install (``pip install 'runstore[postgresql]'``)."""


class ContainerClosed(RunstoreError):
    """A service was asked of a container after its ``build`` block exited (and closed it)."""


class ConnectionUsedAfterFork(RunstoreError):
    """A database connection opened in one process was used in a forked child.

    SQLite connections must not cross ``fork()``; open a new container in the child.
    """


class TransactionMisuse(RunstoreError):
    """A unit of work was used in a way that cannot be correct.

    For example: from a thread other than the one that opened it, a ``transact`` inside a
    ``read``, a ``read`` that changed rows, a unit function that returned something other
    than a ``Result`` or ran COMMIT/ROLLBACK itself. The unit has been rolled back.
    """
