"""The clock every service reads time from, so tests and hosts can control it."""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

import attrs

__all__ = ["Clock", "FixedClock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """A source of the current time."""

    def now_ms(self) -> int:
        """Return the current time as integer epoch milliseconds UTC."""
        ...


@attrs.frozen
class SystemClock:
    """The wall clock (``time.time``), read once per call."""

    def now_ms(self) -> int:
        """Return ``time.time()`` as integer epoch milliseconds UTC."""
        return time.time_ns() // 1_000_000


@attrs.define
class FixedClock:
    """A clock that only moves when told to (for tests and replays); ``now`` is epoch ms."""

    now: int = 1_700_000_000_000

    def now_ms(self) -> int:
        """Return the fixed time (epoch ms)."""
        return self.now

    def advance(self, ms: int) -> None:
        """Move the clock forward by ``ms`` milliseconds."""
        self.now += ms
