"""Units of work: the one way any layer runs a transaction, and the state that mirrors rows.

A unit of work runs ``fn() -> Result`` atomically. The outermost unit opens a transaction, a
nested one a savepoint; ``Success`` keeps what ``fn`` wrote, ``Failure`` and exceptions undo
it. Layers hold any in-memory state that mirrors stored rows (id caches, counters, summaries,
the whole data of an in-memory layer) in :class:`TxDict` objects made by
:meth:`UnitOfWork.mirror`. Every change to a ``TxDict`` is journalled in the innermost open
unit, so when a unit rolls back (a savepoint or the whole transaction) its changes to the
mirrors are undone with it, and once the outermost unit commits they stand. Outside the
owning thread nobody can observe the state in between (a unit of work belongs to one
thread), so a mirror is published exactly when its transaction commits. This is the fix for
the stale cached id of seed 000: a cache entry added inside a rolled-back savepoint
disappears with the rows it named, so a later write re-creates the row instead of pointing
at one that no longer exists.

Work that must happen only once the data is durable (notifying another component, say)
is registered with :meth:`UnitOfWork.on_commit`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, Generic, TypeVar, final, overload

from returns.result import Failure, Result, Success

from runstore.exceptions import TransactionMisuse
from runstore.services.errors import Busy

__all__ = ["RETRY", "Retry", "TxDict", "UnitOfWork", "retrying"]

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")
E = TypeVar("E")
D = TypeVar("D")


class Retry:
    """Marker an outermost attempt returns when the database was busy (SQLITE_BUSY, a
    PostgreSQL serialization failure, deadlock or lock timeout) and it may run again."""


RETRY = Retry()


def retrying(
    operation: str,
    budget_ms: int,
    attempt: Callable[[], Result[T, E] | Retry],
    pause: Callable[[float], object] = time.sleep,
) -> Result[T, E | Busy]:
    """Run ``attempt`` until it returns a Result, pausing 5 ms doubling to 100 ms between
    tries; once ``budget_ms`` (ms) is spent, ``Busy(operation, waited_ms)``. Both live
    backends retry their outermost units of work through this one loop. ``pause(seconds)``
    waits between tries (``time.sleep``; ``runstore.aio`` passes one that awaits
    ``asyncio.sleep``, so a retry never blocks the event loop)."""
    started = time.monotonic()
    wait = 0.005
    while True:
        outcome = attempt()
        if not isinstance(outcome, Retry):
            return outcome
        waited_ms = int((time.monotonic() - started) * 1000)
        remaining_ms = budget_ms - waited_ms
        if remaining_ms <= 0:
            return Failure(Busy(operation=operation, waited_ms=waited_ms))
        pause(min(wait, remaining_ms / 1000))
        wait = min(wait * 2, 0.1)


class _Missing:
    """Marker for "this key was absent" in an undo step."""


_MISSING = _Missing()


class _Frame:
    """The undo journal of one open unit (transaction or savepoint)."""

    __slots__ = ("after_commit", "undo")

    def __init__(self) -> None:
        self.undo: list[Callable[[], object]] = []
        self.after_commit: list[Callable[[], None]] = []


class UnitOfWork:
    """Frames of open units and the mirrors they journal; engine-independent.

    Subclasses bind the frames to a storage engine (see ``SqliteDatabase``) or to none
    (``InMemoryDatabase``). One object belongs to the thread that created it:
    opening a unit from another thread raises
    :class:`~runstore.exceptions.TransactionMisuse`.
    """

    def __init__(self) -> None:
        self._frames: list[_Frame] = []
        self._thread = threading.get_ident()
        self._reading = False
        self._reorder: dict[int, TxDict[Any, Any]] = {}

    # -- mirrors -------------------------------------------------------------------------------

    def mirror(self) -> TxDict[K, V]:
        """Return a new empty :class:`TxDict` whose changes follow this unit of work.

        Annotate the target, e.g. ``self._ids: TxDict[str, int] = db.mirror()``.
        """
        return TxDict(self)

    def on_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the outermost unit commits (at once when none is open).

        Callbacks run in registration order right after COMMIT succeeds. One registered
        inside a unit that rolls back (a savepoint or the whole transaction) is dropped. A
        callback must not raise: its exception would propagate from the committed unit and
        the callbacks after it would not run.
        """
        if not self._frames:
            callback()
        else:
            self._frames[-1].after_commit.append(callback)

    def _journal(self, undo: Callable[[], object]) -> None:
        if self._frames:
            self._frames[-1].undo.append(undo)

    @property
    def in_unit(self) -> bool:
        """Whether a unit of work (write or read) is open on this object."""
        return bool(self._frames)

    @property
    def depth(self) -> int:
        """How many units are open (0 outside, 1 in a transaction, 2+ in savepoints)."""
        return len(self._frames)

    # -- frames --------------------------------------------------------------------------------

    def _check_thread(self) -> None:
        if threading.get_ident() != self._thread:
            raise TransactionMisuse(
                "a unit of work belongs to the thread that created it; "
                "build one container per thread"
            )

    def _check_can_write(self, operation: str) -> None:
        if self._reading:
            raise TransactionMisuse(
                f"transact({operation!r}) inside read(): a read unit cannot contain writes"
            )

    def _push(self) -> _Frame:
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
            self._reading = False
            for callback in frame.after_commit:
                callback()

    def _pop_rollback(self) -> None:
        """Undo the innermost frame's changes to every mirror, newest first.

        Afterwards each mirror is exactly as it was when the frame opened, iteration order
        included (a mirror whose deletions were undone is put back in order once).
        """
        frame = self._frames.pop()
        if not self._frames:
            self._reading = False
        try:
            for undo in reversed(frame.undo):
                undo()
        finally:
            reorder, self._reorder = self._reorder, {}
            for mirror in reorder.values():
                mirror._restore_order()

    def _rollback_all(self) -> None:
        while self._frames:
            self._pop_rollback()

    def _run(self, fn: Callable[[], Result[T, E]]) -> Result[T, E]:
        """Run ``fn`` as a unit of work over the mirrors only (no storage engine).

        Private on purpose: on a ``SqliteDatabase`` this would run no SQL transaction.

        ``Success`` keeps every mirror change, ``Failure`` undoes them and is returned; an
        exception undoes them and propagates (there is no driver to fail in memory).

        Raises :class:`~runstore.exceptions.TransactionMisuse` (after undoing) when ``fn``
        returns something other than a ``Success`` or ``Failure``, or when called from a
        thread other than the owner's.
        """
        self._check_thread()
        self._push()
        try:
            result = fn()
        except BaseException:
            self._pop_rollback()
            raise
        if isinstance(result, Success):
            self._pop_commit()
            return result
        self._pop_rollback()
        if isinstance(result, Failure):
            return result
        raise _not_a_result(result)


def _not_a_result(value: object) -> TransactionMisuse:
    return TransactionMisuse(
        f"a unit of work must return Success or Failure, not {type(value).__name__}; "
        "nothing was committed"
    )


@final
class TxDict(MutableMapping[K, V], Generic[K, V]):
    """A dict whose changes are undone when the unit of work that made them rolls back.

    Reads are plain dict reads (O(1)); each write inside an open unit appends one undo step
    to that unit's journal. Outside any unit a write simply stands. A rollback leaves the
    mapping exactly as it was, iteration (insertion) order included. Like its unit of
    work, a ``TxDict`` belongs to one thread. Every ``MutableMapping`` method (``pop``,
    ``setdefault``, ``update``, ``clear``, ...) goes through the journalled writes.
    """

    __slots__ = ("_added", "_data", "_order", "_unit")

    def __init__(self, unit: UnitOfWork) -> None:
        self._unit = unit
        self._data: dict[K, V] = {}
        # When each present key was inserted, to put undone deletions back in place.
        self._order: dict[K, int] = {}
        self._added = 0

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def __setitem__(self, key: K, value: V) -> None:
        data = self._data
        old = data.get(key, _MISSING)
        data[key] = value
        if isinstance(old, _Missing):
            self._added += 1
            self._order[key] = self._added
            self._unit._journal(lambda: self._forget(key))
        else:
            self._unit._journal(lambda: data.__setitem__(key, old))

    def __delitem__(self, key: K) -> None:
        old = self._data.pop(key)
        inserted = self._order.pop(key)
        self._unit._journal(lambda: self._put_back(key, old, inserted))

    def _forget(self, key: K) -> None:
        self._data.pop(key, None)
        self._order.pop(key, None)

    def _put_back(self, key: K, value: V, inserted: int) -> None:
        data = self._data
        out_of_order = bool(data) and self._order[next(reversed(data))] > inserted
        data[key] = value
        self._order[key] = inserted
        if out_of_order:
            self._unit._reorder[id(self)] = self

    def _restore_order(self) -> None:
        order = self._order
        items = sorted(self._data.items(), key=lambda item: order[item[0]])
        self._data.clear()
        self._data.update(items)

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    @overload
    def get(self, key: K, /) -> V | None: ...
    @overload
    def get(self, key: K, /, default: V | D) -> V | D: ...
    def get(self, key: K, /, default: object = None) -> object:
        """Return the value for ``key``, or ``default`` (None) when absent."""
        return self._data.get(key, default)

    def clear(self) -> None:
        """Remove every key (each removal is journalled)."""
        for key in list(self._data):
            del self[key]

    def __repr__(self) -> str:
        return f"TxDict({self._data!r})"
