"""A sync layer over an async one, so that every sync contract runs through ``runstore.aio``.

``bridged(aio.sqlite(path))`` is an ordinary :class:`~runstore.layers.Layer`: each of its
services is a sync object whose every method runs the async façade's method to its end on
an event loop of the calling thread (one per thread, made on its first call and closed with
the container; so a contract that calls from several threads drives the façade from
several loops, as async hosts do) and returns its ``Result``. So a contract suite, unchanged, drives
``sync call -> event loop -> async façade -> runner -> sync layer`` and compares what comes
back with the in-memory model, as it does for any layer::

    class TestAioSqliteAgents(AgentsContract):
        @pytest.fixture
        def layer_factory(self, tmp_path):
            return lambda: bridged(aio.sqlite(tmp_path / f"agents-{next(n)}.db"))

The layer provides the sync tag of every async service the backend provides, and a wall
clock; the clock the container ends up with (a contract's ``FixedClock`` merged on top) is
merged over the async layer's sync containers, so the layer under test reads it.

``SessionRepository.atomic(operation, fn)``: ``fn`` runs inside the async ``atomic``, on the
runner's side, where the bridge's session services call the sync repository directly (an
awaited call from there would wait for the unit that is running it).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import attrs
from returns.result import Result, Success

from runstore.aio import AsyncContainer, AsyncLayer
from runstore.aio import build as build_async
from runstore.aio._facade import SERVICES, Forward, Service, Shape
from runstore.exceptions import TransactionMisuse
from runstore.layers import CLOCK, Container, Layer, Tag, merge, system_clock

__all__ = ["bridged"]

T = TypeVar("T")

@attrs.frozen
class _Opened:
    """The async container a bridge opened, and the loops its calls run on."""

    container: AsyncContainer
    loops: _Loops


_BRIDGE: Tag[_Opened] = Tag(f"{__name__}._Opened")

_inside = threading.local()
"""``repository``: the sync repository of the ``atomic`` unit running on this thread."""


class _Loops:
    """An event loop per calling thread, each closed with the bridge's container."""

    def __init__(self) -> None:
        self._mine = threading.local()
        self._lock = threading.Lock()
        self._all: list[asyncio.AbstractEventLoop] = []
        self._closed = False

    def wait(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` to its end on this thread's loop (on a loop of its own once the
        container closed: a service kept past it answers as a closed one)."""
        loop: asyncio.AbstractEventLoop | None = getattr(self._mine, "loop", None)
        if loop is None:
            with self._lock:
                if self._closed:
                    return asyncio.run(coroutine)
                loop = self._mine.loop = asyncio.new_event_loop()
                self._all.append(loop)
        if loop.is_closed():
            return asyncio.run(coroutine)
        return loop.run_until_complete(coroutine)

    def close(self) -> None:
        with self._lock:
            loops, self._all, self._closed = self._all, [], True
        for loop in loops:
            loop.close()


def bridged(layer: AsyncLayer) -> Layer:
    """A sync layer whose services forward to the async services of ``layer`` (see the
    module doc). ``layer`` is opened when the sync layer is built and closed with it."""

    def open_async(c: Container) -> Iterator[_Opened]:
        loops = _Loops()
        manager = build_async(layer.merge(Layer.value(CLOCK, c.get(CLOCK))))
        opened = loops.wait(manager.__aenter__())
        try:
            yield _Opened(opened, loops)
        finally:
            try:
                loops.wait(manager.__aexit__(None, None, None))
            finally:
                loops.close()

    def service(entry: Service) -> Layer:
        def load() -> Layer:
            return Layer.service(
                entry.sync,
                lambda c: _Sync(c.get(_BRIDGE), entry.key.key, entry.shape),
                requires=(_BRIDGE,),
            )

        return Layer.lazy(load, provides=(entry.sync,), requires=(_BRIDGE,))

    return merge(
        system_clock(),
        Layer.service(_BRIDGE, open_async, requires=(CLOCK,)),
        *(service(entry) for entry in SERVICES.values()),
    )


class _Sync:
    """The sync face of an async service (a façade :class:`Forward`)."""

    def __init__(self, opened: _Opened, target: Forward | str, shape: Shape) -> None:
        self._opened = opened
        self._target = target if isinstance(target, Forward) else opened.container.get(
            Tag[Any](target)
        )
        self._shape = shape

    def __getattr__(self, name: str) -> Any:
        shape = self.__dict__.get("_shape")
        if shape is None or name.startswith("_"):
            raise AttributeError(name)
        made: Any
        if name in shape.stores:
            made = _Sync(self._opened, getattr(self._target, name), shape.stores[name])
        elif name == "atomic":
            made = self._atomic
        elif name in shape.methods:
            made = self._method(name)
        else:
            return getattr(self._target, name)  # a plain attribute (``session_id``)
        self.__dict__[name] = made
        return made

    def _method(self, name: str) -> Callable[..., Any]:
        target, opened = self._target, self._opened

        def call(*args: Any, **kwargs: Any) -> Any:
            repository = getattr(_inside, "repository", None)
            if repository is not None:  # inside ``atomic``, on the runner's side
                if not target.on_repository:
                    raise TransactionMisuse(
                        f"{name}: only the session repository and its storages may be"
                        " called inside atomic"
                    )
                return target.apply(repository, name, args, kwargs)
            return _sync_value(opened, opened.loops.wait(getattr(target, name)(*args, **kwargs)))

        call.__name__ = call.__qualname__ = name
        return call

    def _atomic(self, operation: str, fn: Callable[[], Result[T, Any]]) -> Result[T, Any]:
        def unit(repository: Any) -> Result[T, Any]:
            _inside.repository = repository
            try:
                return fn()
            finally:
                _inside.repository = None

        result: Result[T, Any] = self._opened.loops.wait(self._target.atomic(operation, unit))
        return result

    def __repr__(self) -> str:
        return f"<sync bridge of {self._target!r}>"


def _sync_value(opened: _Opened, result: Any) -> Any:
    """``result``, with an async service it carries (``open``'s storage) made sync."""
    if isinstance(result, Success) and isinstance(result.unwrap(), Forward):
        target: Forward = result.unwrap()
        return Success(_Sync(opened, target, target._shape))
    return result
