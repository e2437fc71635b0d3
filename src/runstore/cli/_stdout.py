"""Standard output whose failures the command line can tell apart and answer in one line.

A write to standard output can fail: a full device (``> /dev/full``, ``ENOSPC``), a closed
descriptor (``>&-``, ``EBADF``), a pipe whose reader has gone (``| head -1``, ``EPIPE``).
:func:`guard_standard_output` puts a text stream over descriptor 1 in place of
``sys.stdout`` whose failed writes raise :class:`StandardOutputError` (an ``OSError`` with
the write's ``errno``), and after its first failure discards what is written to it, so that
the flush at exit adds no second error. :class:`~runstore.cli._group.JsonErrorsGroup` turns
the error into exit 1: quietly for a broken pipe, as Python's documentation advises
("Note on SIGPIPE", https://docs.python.org/3/library/signal.html#note-on-sigpipe), else
with one line on standard error.
"""

from __future__ import annotations

import errno
import io
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

__all__ = ["StandardOutputError", "guard_standard_output"]


class StandardOutputError(OSError):
    """Writing standard output failed (``errno``, ``strerror``: the write's)."""


class _Guarded(io.TextIOWrapper):
    """The guarded ``sys.stdout`` (a type of its own, so it is put in place once)."""


class _Descriptor(io.RawIOBase):
    """Descriptor 1 as a raw stream: a failed write raises :class:`StandardOutputError`,
    once; every write after it is discarded. ``closed_at_start``: descriptor 1 was not open
    (it is then held on the null device, so no file the command opens takes it, and every
    write fails with ``EBADF``)."""

    def __init__(self, closed_at_start: bool) -> None:
        super().__init__()
        self._closed_at_start = closed_at_start
        self._failed = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return 1

    def isatty(self) -> bool:
        return not self._closed_at_start and os.isatty(1)

    def write(self, data: ReadableBuffer) -> int:
        size = memoryview(data).nbytes
        if self._failed:
            return size
        try:
            if self._closed_at_start:
                raise OSError(errno.EBADF, os.strerror(errno.EBADF))
            return os.write(1, data)
        except OSError as exc:
            self._failed = True
            if exc.errno == errno.EPIPE:  # the documentation's advice: nothing more goes there
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, 1)
                os.close(null)
            raise StandardOutputError(exc.errno, exc.strerror) from None


def _is_open(descriptor: int) -> bool:
    try:
        os.fstat(descriptor)
    except OSError:
        return False
    return True


def guard_standard_output() -> None:
    """Put a stream over descriptor 1 whose failed writes raise
    :class:`StandardOutputError` in place of ``sys.stdout``, with its encoding, error
    handler and line buffering; only while ``sys.stdout`` is the process's own
    (``sys.__stdout__``, or None when descriptor 1 was closed at start), never over a
    stream a test put there (click's ``CliRunner``, pytest's capture)."""
    original = sys.stdout
    if original is not sys.__stdout__ or isinstance(original, _Guarded):
        return
    closed = original is None or not _is_open(1)
    if closed:
        null = os.open(os.devnull, os.O_WRONLY)
        if null != 1:
            os.dup2(null, 1)
            os.close(null)
    sys.stdout = _Guarded(
        io.BufferedWriter(_Descriptor(closed)),
        encoding=getattr(original, "encoding", None) or "utf-8",
        errors=getattr(original, "errors", None) or "strict",
        line_buffering=bool(getattr(original, "line_buffering", False)),
    )
