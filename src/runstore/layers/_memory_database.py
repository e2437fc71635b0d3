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
        """Run ``fn`` as a unit of work (see ``SqliteDatabase.transact``); never ``Busy``."""
        del operation
        return self.run(fn)

    def read(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        """Run read-only ``fn``; the in-memory state is always consistent between units."""
        del operation
        return fn()
