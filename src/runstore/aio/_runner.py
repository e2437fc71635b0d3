"""The seam between the async façade and a backend: a :class:`Runner`, the async layer that
opens one, and the container the façade's services come from.

A :class:`Runner` runs ordinary sync code on an ordinary sync
:class:`~runstore.layers.Container` somewhere that does not block the event loop (a writer
thread for SQLite, a greenlet over async connections for PostgreSQL) and hands back its
value: ``await runner.call("write", lambda c: c.get(DATA_STORE).begin_run(start))``. The
façade (:mod:`runstore.aio._facade`) is nothing but such calls, so every rule, statement and
unit of work of the sync layers is reused unchanged; a backend is one ``Runner``.

:class:`AsyncLayer` is a name and how to open a runner; :func:`build` opens it into an
:class:`AsyncContainer` whose ``get(aio.DATA_STORE)`` is an ``AsyncDataStore`` to mypy, as
the sync container's ``get(DATA_STORE)`` is a ``DataStore``::

    async with aio.build(aio.sqlite("runs.db")) as container:
        store = container.get(aio.DATA_STORE)
        run = (await store.begin_run(start)).unwrap()
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, final, overload

import attrs

from runstore.exceptions import ConnectionUsedAfterFork, ContainerClosed
from runstore.layers._layer import Container, Layer, Tag, _key, merge

if TYPE_CHECKING:
    from typing_extensions import TypeForm

__all__ = ["Access", "AsyncContainer", "AsyncLayer", "Runner", "build", "refuse_after_fork"]

S = TypeVar("S")
T = TypeVar("T")

Access = Literal["read", "write"]
"""What a call does to the database: ``"read"`` only reads (a runner may send it to a reader
connection), ``"write"`` may write (it goes where writes go, in the order they were called)."""


class Runner(Protocol):
    """Runs sync service code for the async façade without blocking the event loop.

    A runner is opened by an :class:`AsyncLayer` and owns the sync containers it builds (one
    per thread, per connection or per call: the backend's choice).
    """

    async def call(self, access: Access, fn: Callable[[Container], T]) -> T:
        """Run ``fn`` on a sync container of this runner's database and return its value.

        ``access`` says whether ``fn`` may write (``"write"``) or only reads (``"read"``);
        ``fn`` calls sync services on the container it is given and must not keep it. What
        ``fn`` raises is raised here. Works from any event loop and any thread.

        Cancellation: a call cancelled before its ``fn`` started never runs it. A ``"write"``
        cancelled once ``fn`` has started runs to its outcome (it commits or rolls back as
        it would have) and only then raises ``CancelledError`` here, so the caller's next
        call sees that outcome; the value itself is dropped. A ``"read"`` may be abandoned
        at once.

        Once :meth:`aclose` has begun, a call raises
        :class:`~runstore.exceptions.ContainerClosed` without running ``fn`` (the façade
        answers a session store's call with ``StorageFailure`` of kind ``closed`` instead,
        as that Protocol's contract says). In a process forked from the one that opened the
        runner, a call raises :class:`~runstore.exceptions.ConnectionUsedAfterFork` at once
        (the runner's threads, loops and connections are the parent's), as the sync layers'
        connections do.
        """
        ...

    async def aclose(self) -> None:
        """Close the sync containers, in the reverse order of their opening, after the calls
        already handed over have run; never blocks the event loop. Idempotent. In a forked
        child it closes nothing (what it would close is the parent's)."""
        ...


def refuse_after_fork(pid: int, what: str) -> None:
    """Raise :class:`~runstore.exceptions.ConnectionUsedAfterFork` unless this is process
    ``pid``, the one that made ``what`` (named in the message): a thread, a loop or a
    connection does not cross ``fork()``, so a forked child must open its own."""
    here = os.getpid()
    if here != pid:
        raise ConnectionUsedAfterFork(f"{what} was opened in process {pid}, used in {here}")


@final
@attrs.frozen
class AsyncLayer:
    """An async layer: a name and how to open its :class:`Runner`.

    ``open(over)`` returns an async context manager that starts the runner and closes it on
    exit; ``over`` is a sync :class:`~runstore.layers.Layer` merged over every sync container
    the runner builds (later wins, as :func:`~runstore.layers.merge` says): empty unless a
    test puts its ``FixedClock`` there with :meth:`merge`. Made by :func:`runstore.aio.sqlite`,
    :func:`runstore.aio.in_memory` and :func:`runstore.aio.postgres`; open it with
    :func:`build`.
    """

    name: str
    """What the layer runs on, for messages and reprs (``"sqlite"``, ``"in_memory"``, ...)."""

    open: Callable[[Layer], AbstractAsyncContextManager[Runner]]
    """Start a runner whose sync containers have ``over`` merged in last; closed on exit."""

    def merge(self, *layers: Layer) -> AsyncLayer:
        """This layer with the sync ``layers`` merged over each of its sync containers, after
        anything merged before (a test's clock: ``layer.merge(Layer.value(CLOCK, clock))``)."""
        inner = self.open
        return AsyncLayer(self.name, lambda over: inner(merge(*layers, over)))


@final
class AsyncContainer:
    """The async services of one opened :class:`AsyncLayer`, looked up with :meth:`get`.

    Made only by :func:`build`. The services are façades: each method awaits its runner, so
    a container and its services may be used from any task, loop or thread until the
    ``build`` block exits.
    """

    def __init__(self, runner: Runner, provided: frozenset[str]) -> None:
        self._runner = runner
        self._provided = provided
        self._made: dict[str, Any] = {}
        self._closed = False

    @property
    def runner(self) -> Runner:
        """The runner every service of this container calls (for a host's own sync code)."""
        return self._runner

    @overload
    def get(self, key: Tag[S]) -> S: ...
    @overload
    def get(self, key: TypeForm[S]) -> S: ...
    def get(self, key: object) -> Any:
        """Return the async service under ``key`` (an ``aio`` tag or an async Protocol class),
        the same object on every call: ``get(aio.DATA_STORE)`` is an ``AsyncDataStore``.

        Raises ``KeyError`` (naming the key) when the backend does not provide the service's
        sync twin or ``key`` names no async service, and
        :class:`~runstore.exceptions.ContainerClosed` once the ``build`` block has exited.
        """
        from runstore.aio._facade import SERVICES, facade

        name = _key(key)
        if self._closed:
            raise ContainerClosed(f"container closed; cannot get {name}")
        made = self._made.get(name)
        if made is not None:
            return made
        service = SERVICES.get(name)
        if service is None or service.sync.key not in self._provided:
            raise KeyError(f"no service {name} in this container")
        made = self._made[name] = facade(service, self._runner)
        return made

    def __contains__(self, key: object) -> bool:
        from runstore.aio._facade import SERVICES

        service = SERVICES.get(_key(key))
        return service is not None and service.sync.key in self._provided


@asynccontextmanager
async def build(layer: AsyncLayer) -> AsyncIterator[AsyncContainer]:
    """Open ``layer`` into an :class:`AsyncContainer`; close its runner on exit.

    The runner opens its database(s) here, so opening failures surface at once (the sync
    layer's :class:`~runstore.exceptions.DatabaseOpenError` for a file that cannot be opened
    or migrated). On exit the runner closes its sync containers in reverse order, without
    blocking the event loop, whether or not the block raised.

    Raises ``TypeError`` (on entering) when ``layer`` is not an :class:`AsyncLayer`, e.g. a
    sync layer of :mod:`runstore.layers`.
    """
    if not isinstance(layer, AsyncLayer):
        raise TypeError(
            f"runstore.aio.build takes an async layer (runstore.aio.sqlite(...), "
            f"runstore.aio.in_memory(), runstore.aio.postgres(...)), not {layer!r}"
        )
    from runstore.aio._facade import SERVICES

    sync_keys = tuple({service.sync.key for service in SERVICES.values()})
    async with layer.open(Layer()) as runner:
        provided = await runner.call(
            "read", lambda c: frozenset(k for k in sync_keys if Tag(k) in c)
        )
        container = AsyncContainer(runner, provided)
        try:
            yield container
        finally:
            container._closed = True
