"""The in-memory unit of work: the same contract as the live one, with no storage engine."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from returns.result import Result

from runstore.layers._unit_of_work import UnitOfWork
from runstore.services.errors import Busy, StorageFailure

__all__ = ["InMemoryDatabase"]

T = TypeVar("T")
E = TypeVar("E")


class InMemoryDatabase(UnitOfWork):
    """Units of work over mirrors only, shared by every in-memory service of one container.

    Services keep all their data in :class:`~runstore.layers.TxDict` mirrors of this
    object, so a unit that fails (a ``Failure`` or an exception) leaves every one of them as
    it was, exactly as a rolled-back SQLite transaction would.
    """

    def transact(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        """Run ``fn`` as a unit of work, with the semantics of ``SqliteDatabase.transact``.

        ``Success`` keeps every mirror change (handing them to the enclosing unit when
        nested); ``Failure`` undoes the changes ``fn`` made and is returned; an exception
        undoes them and propagates. Never returns ``Busy`` or ``StorageFailure`` itself
        (``fn`` may).

        Raises :class:`~runstore.exceptions.TransactionMisuse` inside :meth:`read`, from a
        foreign thread, or when ``fn`` returns something other than a Result.
        """
        self._check_thread()
        self._check_can_write(operation)
        return self._run(fn)

    def read(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        """Run read-only ``fn`` as a unit, with the semantics of ``SqliteDatabase.read``.

        The in-memory state is consistent between units, so this only marks the unit as a
        read (a ``transact`` inside it raises ``TransactionMisuse``) and, like ``transact``,
        keeps mirror changes (warmed caches) on ``Success`` and undoes them otherwise.
        """
        del operation
        self._check_thread()
        reading = self._reading
        self._reading = True
        try:
            return self._run(fn)
        finally:
            self._reading = reading
