"""Run a coroutine on a loop of its own thread and fail if it does not end in time: a test
of a frozen event loop (a thread blocked on the loop's own thread) must fail, not hang."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

WATCHDOG_S = 60.0
"""How long a watched run may take: far beyond what the runs here need (under 5 s on a
loaded 2-core box), so only a frozen loop reaches it."""


def run_watched(main: Callable[[], Coroutine[Any, Any, T]], timeout_s: float = WATCHDOG_S) -> T:
    """``asyncio.run(main())`` on a daemon thread; its result, or its exception re-raised, or
    a test failure when it has not ended after ``timeout_s`` seconds (the thread is left to
    the process's end)."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(("ok", asyncio.run(main())))
        except BaseException as exc:  # handed to the test's thread
            outcome.append(("error", exc))

    thread = threading.Thread(target=run, name="watched-loop", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        pytest.fail(f"the event loop did not end within {timeout_s} s: frozen")
    kind, value = outcome[0]
    if kind == "error":
        raise value
    result: T = value
    return result
