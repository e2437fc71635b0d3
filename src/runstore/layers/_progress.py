"""How a unit of work reports its progress to a caller's ``progress(done, total)`` (a bar).

The work is counted in units the caller's documentation names (runs pruned, rows copied).
While the unit runs, :class:`UnitProgress` passes on ``(done, total)`` for ``done < total``
only and never below a ``done`` already passed on: a unit run again after ``Busy`` plans
again and repeats its first steps, which are not told twice. The last call, ``(total,
total)``, is made by :meth:`UnitProgress.committed` once the unit has committed, so a
caller never sees the work complete that then rolled back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["UnitProgress"]

T = TypeVar("T")


class UnitProgress:
    """The reports of one unit of work to ``progress`` (None: nobody listens)."""

    __slots__ = ("_progress", "_told", "_total")

    def __init__(self, progress: Callable[[int, int], None] | None) -> None:
        self._progress = progress
        self._total = 0
        self._told = -1

    def planned(self, total: int) -> None:
        """The unit's plan holds ``total`` units of work; none is done yet."""
        self._total = total
        self.reached(0)

    def reached(self, done: int) -> None:
        """``done`` units of the plan are done (not yet committed)."""
        if self._progress is not None and self._told < done < self._total:
            self._told = done
            self._progress(done, self._total)

    def committed(self, value: T) -> T:
        """The unit committed: the last call, ``(total, total)``; returns ``value`` (for
        ``Result.map``)."""
        if self._progress is not None:
            self._progress(self._total, self._total)
        return value
