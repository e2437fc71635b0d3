"""An event loop on a thread of its own, for adapters whose framework calls them from sync
code or from loops that come and go (not part of the public API)."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from runstore.aio._runner import refuse_after_fork

__all__ = ["LoopThread"]

T = TypeVar("T")


class LoopThread:
    """An event loop on a daemon thread, started on first use; :meth:`run` runs a coroutine
    on it and waits, from whichever thread calls it (never from the loop's own thread).

    It belongs to the process that made it: in a forked child (which has no loop thread)
    :meth:`run` raises :class:`~runstore.exceptions.ConnectionUsedAfterFork` at once
    instead of waiting forever, and :meth:`stop` only forgets the parent's loop."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop thread and return its value (or raise its error);
        ``ConnectionUsedAfterFork`` (``coroutine`` closed unrun) in a forked child."""
        try:
            refuse_after_fork(self._pid, f"the {self._name} loop thread")
        except BaseException:
            coroutine.close()
            raise
        return asyncio.run_coroutine_threadsafe(coroutine, self._started()).result()

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name=self._name, daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def stop(self) -> None:
        """Stop the loop and end its thread (nothing when never started). Idempotent."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None or os.getpid() != self._pid:
            return
        loop.call_soon_threadsafe(loop.stop)
        if thread is not threading.current_thread():
            thread.join()
        loop.close()
