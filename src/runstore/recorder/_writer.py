"""The recorder's writer: one thread that owns the database and does all of a run's I/O.

Why a thread: a result must reach the database while a later test hangs (a CI time-out
kills exactly such a run), and pytest calls no hook while a test runs. A timer on the main
thread cannot write either: an apsw connection and the container holding it belong to the
thread that built them. So one daemon thread builds the container, uses it for every
write and read of the run, and closes it; the pytest hooks only hand it work:

- :meth:`Writer.add` queues a finished record (a ``TestResult`` or ``CollectionError``).
  The thread buffers records and writes them as one batch (one unit of work) when the
  oldest is :attr:`max_age` seconds old, when :attr:`max_items` are buffered, or before
  any job, so a killed run keeps every result that finished more than ``max_age`` plus
  one write before the kill. When the thread falls more than :attr:`max_backlog` messages
  behind (tests finishing faster than they are written), ``add`` waits for it to catch
  up, at most :data:`BACKLOG_WAIT` seconds per call, so memory stays flat on a fast suite
  while a database that stays busy still never stops the tests for long.
- :meth:`Writer.call` runs a job ``fn(store, reader)`` on the thread after the buffered
  records are written and waits for its value (at most ``timeout`` seconds).
- :meth:`Writer.submit` queues a job without waiting.

Messages travel through a ``queue.SimpleQueue``, whose ``put`` is reentrant: a signal
handler (the recorder's SIGTERM handler) may call :meth:`call` even while the main thread
was interrupted inside :meth:`add`. The thread does not wait on that queue, since every
``put`` would then wake it (a thread switch per test, which cost a trivial test more than
writing it): it waits on a second one, a bell, which ``add`` rings only when the thread is
idle (so the first record of a batch starts its clock) or a whole batch is queued, and
which every job rings; then it takes every queued message at once.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from runstore.services.test_runs import CollectionError, DataReader, DataStore, TestResult

__all__ = ["BACKLOG_WAIT", "Job", "Writer", "WriterTimeout"]

BACKLOG_WAIT = 0.05
"""Longest wait (s) of one :meth:`Writer.add` for a writer that is behind."""

_monotonic = time.monotonic  # bound at import: a test that fakes time.monotonic cannot reach it

Job = Callable[[DataStore, DataReader], Any]
"""Work run on the writer thread with the run's store and reader."""

Opener = Callable[[], tuple[DataStore, DataReader, Callable[[], None]]]
"""Builds the container on the writer thread: (store, reader, close)."""

Sink = Callable[[DataStore, list[TestResult], list[CollectionError]], bool]
"""Writes one batch; returns False to drop every later batch (recording stopped)."""


class WriterTimeout(Exception):
    """A :meth:`Writer.call` job did not finish within its timeout (it may still run)."""


class _Call:
    __slots__ = ("done", "error", "job", "value")

    def __init__(self, job: Job | None) -> None:
        self.job = job
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None


_STOP = object()
_BUSY, _IDLE, _TIMED = 0, 1, 2
"""What the thread is doing: working, waiting for anything, waiting for a batch to age."""


class Writer:
    """The thread that owns the run's database (see the module docstring).

    ``opener`` builds the store and reader on the thread; if it raises, every job fails
    with that exception and records are dropped. ``sink`` writes a batch of records.
    """

    def __init__(self, opener: Opener, sink: Sink, *, max_age: float, max_items: int) -> None:
        self.max_age = max_age
        self.max_items = max_items
        self.max_backlog = 2 * max_items
        self._caught_up = threading.Event()
        self._opener = opener
        self._sink = sink
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._bell: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._state = _BUSY
        self._thread = threading.Thread(target=self._main, name="runstore-writer", daemon=True)
        self._results: list[TestResult] = []
        self._errors: list[CollectionError] = []
        self._since = 0.0
        self._dropping = False
        self._store: DataStore | None = None
        self._reader: DataReader | None = None
        self._open_error: BaseException | None = None

    def start(self) -> None:
        """Start the thread (it opens the database first)."""
        self._thread.start()

    def add(self, record: TestResult | CollectionError) -> None:
        """Queue a finished record for the next batch (waiting briefly when the thread is
        behind, see the module docstring)."""
        self._queue.put(record)
        state, queued = self._state, self._queue.qsize()
        if state == _IDLE or (state == _TIMED and queued >= self.max_items):
            self._bell.put(None)
        if queued > self.max_backlog and self._thread.is_alive():
            self._caught_up.clear()
            self._caught_up.wait(BACKLOG_WAIT)

    def _post(self, message: object) -> None:
        self._queue.put(message)
        self._bell.put(None)

    def submit(self, job: Job) -> None:
        """Queue ``job`` after the records queued so far; never waits. Its exceptions are
        dropped: a job that must report a problem records it itself."""
        self._post(_Call(job))

    def call(self, job: Job, timeout: float | None = None) -> Any:
        """Run ``job`` on the thread after every record queued so far is written; return
        its value. Raises the job's exception, the opener's, or :class:`WriterTimeout`."""
        pending = _Call(job)
        self._post(pending)
        if not pending.done.wait(timeout):
            raise WriterTimeout(f"the database did not answer within {timeout} s")
        if pending.error is not None:
            raise pending.error
        return pending.value

    def stop(self, timeout: float | None = None) -> None:
        """Write what is buffered, close the database and end the thread (waiting at most
        ``timeout`` seconds). Safe to call more than once, and before :meth:`start`."""
        if not self._thread.is_alive():
            return
        self._post(_STOP)
        self._thread.join(timeout)

    # -- the thread ------------------------------------------------------------------------

    def _main(self) -> None:
        close: Callable[[], None] | None = None
        try:
            self._store, self._reader, close = self._opener()
        except BaseException as exc:  # reported through every call, never lost silently
            self._open_error = exc
        try:
            self._loop()
        finally:
            if close is not None:
                close()

    def _loop(self) -> None:
        while True:
            try:
                message = self._queue.get_nowait()
            except queue.Empty:
                self._wait()
                continue
            if message is _STOP:
                self._flush()
                return
            if isinstance(message, _Call):
                self._flush()
                self._run(message)
                continue
            if not self._results and not self._errors:
                self._since = _monotonic()
            if isinstance(message, CollectionError):
                self._errors.append(message)
            else:
                self._results.append(message)
            if len(self._results) >= self.max_items:
                self._flush()
                if self._queue.qsize() <= self.max_items:
                    self._caught_up.set()

    def _wait(self) -> None:
        """Wait for the bell with nothing queued; write the buffer once it is old enough."""
        timeout = None
        if self._results or self._errors:
            timeout = self._since + self.max_age - _monotonic()
            if timeout <= 0:
                self._flush()
                self._caught_up.set()
                return
        # Say how to be woken before looking at the queue a last time: a record queued
        # after that look sees the state and rings.
        self._state = _IDLE if timeout is None else _TIMED
        try:
            if self._queue.empty():
                self._bell.get(timeout=timeout)
        except queue.Empty:
            pass
        finally:
            self._state = _BUSY
        while not self._bell.empty():  # rings that came while we were not listening
            self._bell.get_nowait()

    def _run(self, pending: _Call) -> None:
        try:
            if self._open_error is not None:
                raise self._open_error
            assert pending.job is not None
            assert self._store is not None
            assert self._reader is not None
            pending.value = pending.job(self._store, self._reader)
        except BaseException as exc:
            pending.error = exc
        finally:
            pending.done.set()

    def _flush(self) -> None:
        results, errors = self._results, self._errors
        if not results and not errors:
            return
        self._results, self._errors = [], []
        if self._dropping or self._store is None:
            return
        try:
            keep_going = self._sink(self._store, results, errors)
        except Exception:
            keep_going = False
        self._dropping = not keep_going
