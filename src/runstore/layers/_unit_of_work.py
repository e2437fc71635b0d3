"""Units of work: the one way any layer runs a transaction, and the state that mirrors rows.

A unit of work runs ``fn() -> Result`` atomically. The outermost unit opens a transaction, a
nested one a savepoint; ``Success`` keeps what ``fn`` wrote, ``Failure`` and exceptions undo
it. Layers hold any in-memory state that mirrors stored rows (id caches, counters, summaries,
the whole data of an in-memory layer) in :class:`TxDict` objects made by :meth:`UnitOfWork.mirror`.
Every change to a ``TxDict`` is journalled in the innermost open unit, so when a unit rolls
back (a savepoint or the whole transaction) its changes to the mirrors are undone with it,
and once the outermost unit commits they stand. Outside the owning thread nobody can observe
the state in between (a unit of work belongs to one thread), so a mirror is published exactly
when its transaction commits. This is the fix for the stale cached id of seed 000: a cache
entry added inside a rolled-back savepoint disappears with the rows it named.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, MutableMapping
from typing import Generic, TypeVar, final

from returns.result import Failure, Result

from runstore.exceptions import TransactionMisuse

__all__ = ["TxDict", "UnitOfWork"]

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")
E = TypeVar("E")

_MISSING: object = object()


class _Frame:
    """The undo journal of one open unit (transaction or savepoint)."""

    __slots__ = ("after_commit", "undo")

    def __init__(self) -> None:
        self.undo: list[Callable[[], None]] = []
        self.after_commit: list[Callable[[], None]] = []


class UnitOfWork:
    """Frames of open units and the mirrors they journal; engine-independent.

    Subclasses bind the frame events to a storage engine (``_begin``, ``_commit``,
    ``_rollback`` and the savepoint variants); the in-memory layers use this class as it is.
    """

    def __init__(self) -> None:
        self._frames: list[_Frame] = []
        self._thread = threading.get_ident()

    # -- mirrors -------------------------------------------------------------------------------

    def mirror(self) -> TxDict[K, V]:
        """Return a new empty :class:`TxDict` whose changes follow this unit of work."""
        return TxDict(self)

    def on_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the outermost transaction commits (at once when none is open).

        Registered inside a savepoint that later rolls back, the callback is dropped.
        """
        if not self._frames:
            callback()
        else:
            self._frames[-1].after_commit.append(callback)

    def _journal(self, undo: Callable[[], None]) -> None:
        if self._frames:
            self._frames[-1].undo.append(undo)

    @property
    def in_unit(self) -> bool:
        """Whether a unit of work is open on this object."""
        return bool(self._frames)

    @property
    def depth(self) -> int:
        """How many units are open (0 outside, 1 in a transaction, 2+ in savepoints)."""
        return len(self._frames)

    # -- frames --------------------------------------------------------------------------------

    def _check_thread(self) -> None:
        if threading.get_ident() != self._thread:
            raise TransactionMisuse(
                "a unit of work belongs to the thread that created it; build one container per thread"
            )

    def _push(self) -> _Frame:
        self._check_thread()
        frame = _Frame()
        self._frames.append(frame)
        return frame

    def _pop_commit(self) -> None:
        """Keep the innermost frame's changes: hand them to the parent, or publish them."""
        frame = self._frames.pop()
        if self._frames:
            parent = self._frames[-1]
            parent.undo.extend(frame.undo)
            parent.after_commit.extend(frame.after_commit)
        else:
            for callback in frame.after_commit:
                callback()

    def _pop_rollback(self) -> None:
        """Undo the innermost frame's changes to every mirror, newest first."""
        frame = self._frames.pop()
        for undo in reversed(frame.undo):
            undo()

    def _rollback_all(self) -> None:
        while self._frames:
            self._pop_rollback()

    def run(self, fn: Callable[[], Result[T, E]]) -> Result[T, E]:
        """Run ``fn`` as a unit of work over the mirrors only (no storage engine).

        ``Success`` keeps every mirror change, ``Failure`` undoes them and is returned; an
        exception undoes them and propagates (there is no driver to fail in memory).
        """
        self._push()
        try:
            result = fn()
        except BaseException:
            self._pop_rollback()
            raise
        if isinstance(result, Failure):
            self._pop_rollback()
        else:
            self._pop_commit()
        return result


@final
class TxDict(MutableMapping[K, V], Generic[K, V]):
    """A dict whose changes are undone when the unit of work that made them rolls back.

    Reads are plain dict reads (O(1)); each write inside an open unit appends one undo step
    to that unit's journal. Outside any unit a write simply stands.
    """

    __slots__ = ("_data", "_unit")

    def __init__(self, unit: UnitOfWork) -> None:
        self._unit = unit
        self._data: dict[K, V] = {}

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def __setitem__(self, key: K, value: V) -> None:
        data = self._data
        old = data.get(key, _MISSING)
        data[key] = value
        if old is _MISSING:
            self._unit._journal(lambda: data.pop(key, None))
        else:
            self._unit._journal(lambda: data.__setitem__(key, old))  # type: ignore[arg-type]

    def __delitem__(self, key: K) -> None:
        data = self._data
        old = data.pop(key)
        self._unit._journal(lambda: data.__setitem__(key, old))

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def get(self, key: K, default: V | None = None) -> V | None:  # type: ignore[override]
        return self._data.get(key, default)

    def clear(self) -> None:
        for key in list(self._data):
            del self[key]

    def __repr__(self) -> str:
        return f"TxDict({self._data!r})"
