"""Run a function in a forked child and read what it reports, with a deadline: for tests of
what a process forked after runstore opened something gets when it uses it."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest

__all__ = ["in_child"]


def in_child(fn: Callable[[], str], *, deadline_s: float = 30.0) -> str:
    """Fork; in the child run ``fn`` and send back the text it returns (``"raised: <type>:
    <message>"`` when it raises), then leave with ``os._exit``; return that text here.

    Fails the test when the child has not answered within ``deadline_s`` seconds (it is
    killed then): a child that hangs is the bug these tests look for. ``deadline_s`` is a
    bound for a hang, far above what an answer takes on a loaded machine (under 1 s).
    """
    if not hasattr(os, "fork"):  # pragma: no cover - POSIX only
        pytest.skip("needs os.fork")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        os.close(read_end)
        try:
            text = fn()
        except BaseException as exc:
            text = f"raised: {type(exc).__name__}: {exc}"
        os.write(write_end, text.encode())
        os._exit(0)
    os.close(write_end)
    try:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.01)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"the forked child did not answer within {deadline_s} s")
        chunks = []
        while chunk := os.read(read_end, 65536):
            chunks.append(chunk)
        return b"".join(chunks).decode()
    finally:
        os.close(read_end)
