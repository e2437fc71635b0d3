"""Layers in Effect's vocabulary, over the ``svcs`` container.

A :class:`Layer` provides services (keyed by their Protocol or class) and declares the
services it requires. ``merge`` puts layers side by side; ``provide`` feeds one layer's
services into another's requirements. ``build(layer)`` checks that nothing required is
missing (naming every missing key), instantiates every provided service in registration
order (so opening failures surface at once), and on exit closes them in reverse order. When
two layers provide the same key, the later one wins: that is how a test swaps a layer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, overload

import attrs
import svcs

from runstore.exceptions import ContainerClosed, MissingServices

__all__ = ["Container", "Layer", "build", "merge", "provide"]

S = TypeVar("S")

_log = logging.getLogger("runstore.layers")

Factory = Callable[["Container"], Any]
"""Makes one service from the container: returns it, or yields it and cleans up after."""


def _name(key: type[Any]) -> str:
    return f"{key.__module__}.{key.__qualname__}"


@attrs.frozen
class _Registration:
    key: type[Any]
    factory: Factory
    requires: frozenset[type[Any]]


@attrs.frozen
class Layer:
    """What a set of registrations provides and what it still requires.

    Build one with :meth:`service` (a factory) or :meth:`value` (a ready object) and combine
    with :func:`merge` and :func:`provide`.
    """

    registrations: tuple[_Registration, ...] = ()

    @property
    def provides(self) -> frozenset[type[Any]]:
        """Every key some registration of this layer provides."""
        return frozenset(r.key for r in self.registrations)

    @property
    def requires(self) -> frozenset[type[Any]]:
        """Every key a winning registration needs that no registration of this layer provides.

        A registration overridden by a later one for the same key requires nothing: when a
        test swaps a live service for an in-memory one, the live one's needs go with it.
        """
        needed = frozenset[type[Any]]().union(*(r.requires for r in _winners(self).values()))
        return needed - self.provides

    @staticmethod
    def service(
        key: type[S],
        factory: Callable[[Container], S] | Callable[[Container], Iterator[S]],
        *,
        requires: tuple[type[Any], ...] = (),
    ) -> Layer:
        """A layer providing ``key`` from ``factory(container)``.

        ``requires`` lists the keys the factory reads from the container; ``build``
        checks them. A generator factory is a scoped resource: it yields the service once,
        and the code after its ``yield`` runs when the container closes, in the reverse
        order of opening (whether or not the ``with`` body raised).
        """
        return Layer((_Registration(key, factory, frozenset(requires)),))

    @staticmethod
    def value(key: type[S], value: S) -> Layer:
        """A layer providing ``key`` as the ready object ``value`` (never closed by runstore)."""
        return Layer((_Registration(key, lambda _c: value, frozenset()),))

    def __add__(self, other: Layer) -> Layer:
        return merge(self, other)


def merge(*layers: Layer) -> Layer:
    """Put ``layers`` side by side: one layer providing what each provides.

    Requirements one of them provides to another are met inside the merge. For a key
    provided twice the later layer's registration wins.
    """
    return Layer(tuple(r for layer in layers for r in layer.registrations))


def provide(layer: Layer, *dependencies: Layer) -> Layer:
    """Feed ``dependencies`` into ``layer``'s requirements.

    The result provides what ``layer`` and the dependencies provide, and requires what is
    still unmet. Dependencies come first, so ``layer``'s own registrations win a tie.
    """
    return merge(*dependencies, layer)


def _winners(layer: Layer) -> dict[type[Any], _Registration]:
    """The last registration of each key, ordered by the position of that last registration."""
    winners: dict[type[Any], _Registration] = {}
    for registration in layer.registrations:
        winners.pop(registration.key, None)  # re-insert so order follows the winner
        winners[registration.key] = registration
    return winners


class Container:
    """Built services, looked up by key with :meth:`get`. Made only by :func:`build`."""

    def __init__(self, inner: svcs.Container, provides: frozenset[type[Any]]) -> None:
        self._inner = inner
        self._provides = provides
        self._closed = False

    @overload
    def get(self, key: type[S]) -> S: ...
    @overload
    def get(self, key: Any) -> Any: ...
    def get(self, key: Any) -> Any:
        """Return the service registered under ``key`` (the same object on every call).

        Raises ``KeyError`` (naming the key) when the built layer does not provide it, and
        :class:`~runstore.exceptions.ContainerClosed` once the ``build`` block has exited.
        """
        if self._closed:
            raise ContainerClosed(f"container closed; cannot get {_name(key)}")
        if key not in self._provides:
            raise KeyError(f"no service {_name(key)} in this container")
        return self._inner.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._provides


@contextmanager
def build(layer: Layer) -> Iterator[Container]:
    """Build ``layer`` into a :class:`Container`; close its resources in reverse order on exit.

    Every provided service is instantiated at once, in registration order (a service a
    factory asks for is made first), so opening failures surface here, not on first use.
    Scoped resources (generator factories) are closed in the reverse order of their
    opening, so a resource is closed before everything it was opened from.

    Raises :class:`~runstore.exceptions.MissingServices` naming every unmet requirement
    (nothing is opened then), and re-raises whatever a factory raises after closing, in
    reverse order, what was already opened. An error raised while closing does not stop
    the other closes; the first one is re-raised afterwards unless the ``with`` body or a
    factory is already raising (then it is logged on the ``runstore.layers`` logger).
    """
    missing = layer.requires
    if missing:
        raise MissingServices(tuple(sorted(_name(k) for k in missing)))
    winners = _winners(layer)
    registry = svcs.Registry()
    inner = svcs.Container(registry)
    container = Container(inner, frozenset(winners))
    opened: list[Generator[Any, None, None]] = []
    for registration in winners.values():
        registry.register_factory(
            registration.key, _adapt(registration.factory, container, opened)
        )
    try:
        for key in winners:
            inner.get(key)
        yield container
    except BaseException:
        container._closed = True
        _close_all(opened, reraise=False)
        raise
    else:
        container._closed = True
        _close_all(opened, reraise=True)
    finally:
        inner.close()
        registry.close()


def _close_all(opened: list[Generator[Any, None, None]], *, reraise: bool) -> None:
    """Close ``opened`` newest first; every one is closed even when one of them raises."""
    first: Exception | None = None
    while opened:
        resource = opened.pop()
        try:
            _finish(resource)
        except Exception as exc:
            if first is None and reraise:
                first = exc
            else:
                _log.warning("closing a scoped service failed", exc_info=True)
    if first is not None:
        raise first


def _finish(resource: Generator[Any, None, None]) -> None:
    """Run the code after a scoped factory's ``yield`` (its cleanup)."""
    try:
        next(resource)
    except StopIteration:
        return
    resource.close()
    raise RuntimeError("a scoped service factory must yield exactly once")


def _adapt(
    factory: Factory, container: Container, opened: list[Generator[Any, None, None]]
) -> Callable[[], Any]:
    """Wrap ``factory`` for svcs; a generator factory is opened and remembered in ``opened``.

    runstore closes scoped resources itself, in the order they finished opening: svcs
    registers a cleanup before its factory runs, which would close a dependency the
    factory opened before the factory's own resource.
    """

    def make() -> Any:
        produced = factory(container)
        if not isinstance(produced, Generator):
            return produced
        value = next(produced)
        opened.append(produced)
        return value

    return make
