"""The recorder's writer thread, with a fake store: batching by age and size, ordering, failures."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, cast

import pytest

from runstore.recorder._writer import Writer, WriterTimeout
from runstore.services.test_runs import (
    CollectionError,
    DataReader,
    DataStore,
    Outcome,
    Phase,
    PhaseResult,
    TestResult,
)

STORE = cast(DataStore, object())
READER = cast(DataReader, object())


def _item(n: int) -> TestResult:
    return TestResult(f"t.py::test_{n}", "t.py", f"test_{n}",
                      (PhaseResult(Phase.CALL, Outcome.PASSED, 1.0),))


class Sink:
    """Records every batch the writer hands over; ``keep_going`` is what it answers."""

    def __init__(self, keep_going: bool = True) -> None:
        self.batches: list[list[str]] = []
        self.written = threading.Event()
        self.keep_going = keep_going
        self.thread: threading.Thread | None = None

    def __call__(self, store: DataStore, results: list[TestResult],
                 errors: list[CollectionError]) -> bool:
        self.thread = threading.current_thread()
        self.batches.append([r.nodeid for r in results] + [e.nodeid for e in errors])
        self.written.set()
        return self.keep_going


def _writer(sink: Sink, opener: Callable[[], Any] | None = None, *, max_age: float = 0.2,
            max_items: int = 3) -> Writer:
    writer = Writer(opener or (lambda: (STORE, READER, lambda: None)), sink,
                    max_age=max_age, max_items=max_items)
    writer.start()
    return writer


def test_a_buffer_is_written_when_old_enough_with_no_further_message() -> None:
    sink = Sink()
    writer = _writer(sink)
    started = time.monotonic()
    writer.add(_item(1))
    assert sink.written.wait(10)
    assert time.monotonic() - started >= 0.2
    assert sink.batches == [["t.py::test_1"]]
    assert sink.thread is not threading.current_thread()
    writer.stop(10)


def test_a_full_batch_is_written_at_once_and_a_job_sees_every_earlier_record() -> None:
    sink = Sink()
    writer = _writer(sink, max_age=60)
    for n in range(4):
        writer.add(_item(n))
    seen = writer.call(lambda store, reader: [list(b) for b in sink.batches], timeout=10)
    assert seen == [["t.py::test_0", "t.py::test_1", "t.py::test_2"], ["t.py::test_3"]]
    assert writer.call(lambda store, reader: (store, reader), timeout=10) == (STORE, READER)
    writer.stop(10)


def test_a_job_error_and_an_open_error_reach_the_caller() -> None:
    writer = _writer(Sink())
    with pytest.raises(ZeroDivisionError):
        writer.call(lambda store, reader: 1 / 0, timeout=10)
    writer.stop(10)

    def broken() -> Any:
        raise OSError("no database")

    sink = Sink()
    writer = _writer(sink, broken)
    writer.add(_item(1))
    with pytest.raises(OSError, match="no database"):
        writer.call(lambda store, reader: None, timeout=10)
    writer.stop(10)
    assert sink.batches == []  # nothing to write into


def test_a_sink_that_gives_up_gets_no_later_batch() -> None:
    sink = Sink(keep_going=False)
    writer = _writer(sink, max_age=60, max_items=1)
    writer.add(_item(1))
    writer.add(_item(2))
    writer.stop(10)
    assert sink.batches == [["t.py::test_1"]]


def test_a_job_that_does_not_answer_in_time_is_a_timeout_and_stop_closes() -> None:
    closed = threading.Event()
    release = threading.Event()
    writer = _writer(Sink(), lambda: (STORE, READER, closed.set))
    with pytest.raises(WriterTimeout):
        writer.call(lambda store, reader: release.wait(10), timeout=0.05)
    release.set()
    writer.stop(10)
    assert closed.is_set()


def test_records_queued_while_a_batch_ages_do_not_wake_the_thread_each() -> None:
    sink = Sink()
    writer = Writer(lambda: (STORE, READER, lambda: None), sink, max_age=1.0, max_items=5000)
    waits = 0
    wait = writer._wait

    def counted() -> None:
        nonlocal waits
        waits += 1
        wait()

    writer._wait = counted  # type: ignore[method-assign]
    writer.start()
    for n in range(1000):
        writer.add(_item(n))
    assert sink.written.wait(10)
    writer.stop(10)
    assert [len(batch) for batch in sink.batches] == [1000]
    assert waits < 20  # a wake per record would be a thousand
