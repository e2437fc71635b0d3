"""A :class:`~runstore.aio.Runner` on threads: one writer thread, optionally reader threads.

Each thread is a ``ThreadPoolExecutor(max_workers=1)`` that builds an ordinary sync container
on itself (its first job) and owns it, because a container and its SQLite connection belong
to the thread that built it. Writes (and every call when there are no readers) run on the
writer, one at a time in the order they were called, as ``BEGIN IMMEDIATE`` would serialise
them anyway; reads run on the reader with the fewest calls in hand. A reader holds its own
read-only connection (WAL lets it read while the writer writes) and sees every write that
was awaited before the read was called.

A call is awaited with :func:`asyncio.wrap_future`, which binds to whichever event loop
awaits it: the runner binds no loop, so one runner serves several loops and threads.

Cancellation: a call cancelled while it waits for its thread never runs. A write cancelled
once it has started runs to its outcome (it commits or rolls back as it would have), and the
caller's ``CancelledError`` comes after that outcome, so what the caller does next sees it;
the outcome itself is not returned. A read cancelled once started is abandoned at once (its
thread finishes it and drops the value).

Closing: :meth:`ThreadRunner.aclose` refuses new calls, lets the calls already handed over
run, then closes each thread's container on that thread (readers first, then the writer:
the reverse of their opening) and awaits the end of every thread (joined by a helper
thread, so the event loop only awaits). A build whose open fails ends its threads likewise
before it raises. A call
made once closing has begun raises :class:`~runstore.exceptions.ContainerClosed` and runs
nothing, on any thread.

Fork: a child inherits the executors but not their threads, so a job queued there would
wait forever. The runner remembers the process that opened it: in any other process a call
raises :class:`~runstore.exceptions.ConnectionUsedAfterFork` at once, and
:meth:`ThreadRunner.aclose` closes nothing (the containers are the parent's).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_all
from contextlib import ExitStack, asynccontextmanager, suppress
from typing import TypeVar

from runstore.aio._runner import Access, refuse_after_fork
from runstore.exceptions import ContainerClosed
from runstore.layers._layer import Container, Layer, build

__all__ = ["ThreadRunner", "threads"]

T = TypeVar("T")


class _Worker:
    """One thread and the sync container it built and owns."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self.container: Container | None = None
        self.thread: threading.Thread | None = None
        self.in_hand = 0
        self._stack = ExitStack()

    def open(self, layer: Layer) -> Future[None]:
        """Build ``layer`` on this thread (its first job)."""
        return self.executor.submit(self._open, layer)

    def _open(self, layer: Layer) -> None:
        self.thread = threading.current_thread()
        self.container = self._stack.enter_context(build(layer))

    def submit(self, fn: Callable[[Container], T]) -> Future[T]:
        return self.executor.submit(self._run, fn)

    def _run(self, fn: Callable[[Container], T]) -> T:
        container = self.container
        if container is None:  # its open failed; the runner refuses calls then
            raise ContainerClosed(f"{self.name} has no container")
        return fn(container)

    def close(self, after: tuple[Future[None], ...] = ()) -> Future[None]:
        """Close the container on this thread once ``after`` are done (re-raising the first
        error of ``after`` or of this close), after the jobs already queued; end the thread."""
        done = self.executor.submit(self._close, after)
        self.executor.shutdown(wait=False)
        return done

    def _close(self, after: tuple[Future[None], ...]) -> None:
        wait_all(after)
        try:
            self._stack.close()
        finally:
            for earlier in after:
                earlier.result()


class ThreadRunner:
    """A :class:`~runstore.aio.Runner` over one writer thread and zero or more readers
    (see the module doc). Made by :func:`threads`."""

    def __init__(self, name: str, writer: _Worker, readers: tuple[_Worker, ...]) -> None:
        self._name = name
        self._writer = writer
        self._readers = readers
        self._lock = threading.Lock()
        self._closed: Future[None] | None = None
        self._pid = os.getpid()

    @property
    def threads(self) -> tuple[threading.Thread, ...]:
        """The writer thread, then each reader's (for tests that check where work runs)."""
        return tuple(w.thread for w in (self._writer, *self._readers) if w.thread is not None)

    async def call(self, access: Access, fn: Callable[[Container], T]) -> T:
        """Run ``fn`` on the writer (``"write"``, or always without readers) or on the least
        busy reader (``"read"``); see :meth:`runstore.aio.Runner.call`.

        Raises :class:`~runstore.exceptions.ContainerClosed` once closing has begun (on any
        thread) without running ``fn``, and
        :class:`~runstore.exceptions.ConnectionUsedAfterFork` in a process forked from the
        one that opened the runner. Raises whatever ``fn`` raises.
        """
        refuse_after_fork(self._pid, repr(self))
        worker = self._writer
        if access == "read" and self._readers:
            with self._lock:
                worker = min(self._readers, key=lambda r: r.in_hand)
                worker.in_hand += 1
            try:
                return await asyncio.wrap_future(self._hand_over(worker, fn))
            finally:
                with self._lock:
                    worker.in_hand -= 1
        return await _outcome(self._hand_over(worker, fn))

    def _hand_over(self, worker: _Worker, fn: Callable[[Container], T]) -> Future[T]:
        """Queue ``fn`` on ``worker``; ContainerClosed once closing has begun (on any thread)."""
        with self._lock:  # so that no job is queued behind a close begun on another thread
            if self._closed is not None:
                raise ContainerClosed(f"the {self._name} container is closed")
            return worker.submit(fn)

    async def aclose(self) -> None:
        """Close as the module doc says; re-raises the first error a container's close raised.

        Cancelling the awaiting task does not stop the closing, which goes on on the threads.
        In a forked child it does nothing (see the module doc).
        """
        if os.getpid() != self._pid:
            return
        with self._lock:
            if self._closed is None:
                self._closed = _close_all(self._writer, self._readers)
            closed = self._closed
        await asyncio.shield(asyncio.wrap_future(closed))

    def __repr__(self) -> str:
        return f"<{self._name} runner, {len(self._readers)} readers>"


async def _outcome(job: Future[T]) -> T:
    """Await the write ``job``; when cancelled after it started, wait for its outcome first."""
    waiting = asyncio.wrap_future(job)
    try:
        return await asyncio.shield(waiting)
    except asyncio.CancelledError:
        if not job.cancel():  # it has started (or ended): its outcome comes first
            with suppress(BaseException):
                await asyncio.shield(waiting)
        raise


def _close_all(writer: _Worker, readers: tuple[_Worker, ...]) -> Future[None]:
    """Close the readers (newest first), then the writer once they are closed; the future is
    done (with the writer's close's outcome) once every one of their threads has ended.

    A thread outlives the job that closed its container by a moment (it then reads its queue
    and exits), so a helper thread joins them all, off the event loop, before the future is
    done: whoever awaits a close sees none of the runner's threads alive.
    """
    closed = tuple(reader.close() for reader in reversed(readers))
    last = writer.close(closed)
    ended: Future[None] = Future()

    def join() -> None:
        for worker in (*readers, writer):
            worker.executor.shutdown(wait=True)  # joins its thread, once its queue is done
        error = last.exception()
        if error is None:
            ended.set_result(None)
        else:
            ended.set_exception(error)

    threading.Thread(target=join, name=f"{writer.name}-joiner", daemon=True).start()
    return ended


@asynccontextmanager
async def threads(
    name: str, writer: Layer, reader: Layer | None = None, readers: int = 0
) -> AsyncIterator[ThreadRunner]:
    """Open a :class:`ThreadRunner`: build ``writer`` on the writer thread, then ``reader`` on
    each of ``readers`` reader threads; close it on exit.

    Raises what building a layer raises (a :class:`~runstore.exceptions.DatabaseOpenError`
    for a database that cannot be opened), after closing what was opened.
    """
    writer_worker = _Worker(f"runstore-{name}-writer")
    reader_workers = tuple(_Worker(f"runstore-{name}-reader-{i}") for i in range(readers))
    try:
        await asyncio.shield(asyncio.wrap_future(writer_worker.open(writer)))
        if reader is not None and reader_workers:
            opening = [asyncio.wrap_future(r.open(reader)) for r in reader_workers]
            await asyncio.shield(asyncio.gather(*opening))
    except BaseException:
        with suppress(Exception):  # what failed to open is the error to see
            await asyncio.shield(asyncio.wrap_future(_close_all(writer_worker, reader_workers)))
        raise
    runner = ThreadRunner(name, writer_worker, reader_workers if reader is not None else ())
    try:
        yield runner
    finally:
        await runner.aclose()
