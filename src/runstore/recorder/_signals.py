"""SIGTERM (a CI cancel): record the run as interrupted, then do what would have happened.

:class:`TermHook` runs a callback when the process receives SIGTERM and then hands the
signal on exactly as without runstore: to the handler installed before it (a Python
callable is called with the same arguments), or, for the default disposition, by restoring
``SIG_DFL`` and sending the signal again, so the process ends by SIGTERM with the exit
status it would have had. A process that ignores SIGTERM gets no hook at all: nothing
would have happened, so nothing is recorded. Python runs signal handlers in the main
thread only, between bytecodes, so the callback runs there and must not wait on a lock
the main thread may hold.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["TermHook"]


class TermHook:
    """Runs ``on_term`` on SIGTERM, then hands the signal on (see the module docstring)."""

    def __init__(self, on_term: Callable[[], None]) -> None:
        self._on_term = on_term
        self._previous: Any = None
        self._installed = False

    def install(self) -> None:
        """Install the handler (main thread only; elsewhere, or when SIGTERM is ignored or
        unavailable, do nothing)."""
        sigterm = getattr(signal, "SIGTERM", None)
        if sigterm is None or threading.current_thread() is not threading.main_thread():
            return
        previous = signal.getsignal(sigterm)
        if previous is signal.SIG_IGN:
            return
        self._previous = previous
        signal.signal(sigterm, self._handle)
        self._installed = True

    def uninstall(self) -> None:
        """Put the previous handler back, unless someone replaced ours meanwhile."""
        if not self._installed:
            return
        self._installed = False
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) == self._handle:
            previous = self._previous if self._previous is not None else signal.SIG_DFL
            signal.signal(signal.SIGTERM, previous)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        previous = self._previous
        self.uninstall()  # a second SIGTERM meanwhile acts as it would without runstore
        with contextlib.suppress(Exception):  # recording never changes what the signal does
            self._on_term()
        if callable(previous):
            previous(signum, frame)
            return
        # SIG_DFL, or a handler installed outside Python (None): end as the default would.
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
