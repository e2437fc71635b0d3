"""Compose many ``DataReader`` reads into one answer, stopping at the first Failure.

A composition (triage, the HTML report) makes a dozen reads, each a ``Result``; checking each
by hand buries the rules in ``isinstance`` tests. Inside :func:`composed`, :func:`value`
unwraps a ``Success`` and ends the composition at a ``Failure``, which :func:`composed`
returns unchanged. The carrier exception never leaves :func:`composed`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn, TypeVar

from returns.result import Failure, Result, Success

from runstore.services.test_runs import DataReaderError

__all__ = ["composed", "stop", "value"]

T = TypeVar("T")


class _Stop(Exception):
    """Carries a reader's Failure out to :func:`composed` (never escapes it)."""

    def __init__(self, error: DataReaderError) -> None:
        super().__init__(error)
        self.error = error


def value(result: Result[T, DataReaderError]) -> T:
    """The value of a ``Success``; a ``Failure`` ends the enclosing :func:`composed`."""
    if isinstance(result, Failure):
        raise _Stop(result.failure())
    return result.unwrap()


def stop(error: DataReaderError) -> NoReturn:
    """End the enclosing :func:`composed` with ``Failure(error)``."""
    raise _Stop(error)


def composed(compose: Callable[[], T]) -> Result[T, DataReaderError]:
    """``Success`` of what ``compose()`` returns, or the ``Failure`` that :func:`value` or
    :func:`stop` ended it with."""
    try:
        return Success(compose())
    except _Stop as stopped:
        return Failure(stopped.error)
