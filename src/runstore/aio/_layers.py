"""``aio.sqlite`` and ``aio.in_memory``: the sync layers on a :class:`ThreadRunner`."""

from __future__ import annotations

import os
from contextlib import AbstractAsyncContextManager

from runstore import layers
from runstore.aio._runner import AsyncLayer, Runner
from runstore.aio._threads import threads
from runstore.layers._layer import Layer, merge

__all__ = ["in_memory", "sqlite"]


def sqlite(
    path: str | os.PathLike[str],
    settings: layers.ConnectionSettings | None,
    *,
    access: layers.Access,
    readers: int,
) -> AsyncLayer:
    """See :func:`runstore.aio.sqlite`."""
    count = 0 if os.fspath(path) == ":memory:" else readers

    def open_(over: Layer) -> AbstractAsyncContextManager[Runner]:
        writer = merge(layers.sqlite(path, settings, access=access), over)
        reader = merge(layers.sqlite(path, settings, access="read"), over) if count else None
        return threads("sqlite", writer, reader, count)

    return AsyncLayer("sqlite", open_)


def in_memory() -> AsyncLayer:
    """See :func:`runstore.aio.in_memory`."""

    def open_(over: Layer) -> AbstractAsyncContextManager[Runner]:
        return threads("in_memory", merge(layers.in_memory(), over))

    return AsyncLayer("in_memory", open_)
