"""Layers in Effect's vocabulary, over the ``svcs`` container.

A :class:`Layer` provides services (keyed by their Protocol or class) and declares the
services it requires. ``merge`` puts layers side by side; ``provide`` feeds one layer's
services into another's requirements. ``build(layer)`` checks that nothing required is
missing (naming every missing key), instantiates every provided service in registration
order (so opening failures surface at once), and on exit closes them in reverse order. When
two layers provide the same key, the later one wins: that is how a test swaps a layer.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, overload

import attrs
import svcs

from runstore.exceptions import MissingServices

__all__ = ["Container", "Layer", "build", "merge", "provide"]

S = TypeVar("S")

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
        """Every key some registration needs that no registration of this layer provides."""
        needed = frozenset().union(*(r.requires for r in self.registrations))
        return needed - self.provides

    @staticmethod
    def service(
        key: type[S],
        factory: Callable[[Container], S] | Callable[[Container], Generator[S, None, None]],
        *,
        requires: tuple[type[Any], ...] = (),
    ) -> Layer:
        """A layer providing ``key`` from ``factory(container)``.

        ``requires`` lists the keys the factory reads from the container. A generator
        factory is a scoped resource: the code after its ``yield`` runs when the container
        closes.
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


class Container:
    """Built services, looked up by key with :meth:`get`. Made only by :func:`build`."""

    def __init__(self, inner: svcs.Container, provides: frozenset[type[Any]]) -> None:
        self._inner = inner
        self._provides = provides

    @overload
    def get(self, key: type[S]) -> S: ...
    @overload
    def get(self, key: Any) -> Any: ...
    def get(self, key: Any) -> Any:
        """Return the service registered under ``key``.

        Raises ``KeyError`` (naming the key) when the built layer does not provide it.
        """
        if key not in self._provides:
            raise KeyError(f"no service {_name(key)} in this container")
        return self._inner.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._provides


@contextmanager
def build(layer: Layer) -> Iterator[Container]:
    """Build ``layer`` into a :class:`Container`; close its resources in reverse order on exit.

    Raises :class:`~runstore.exceptions.MissingServices` naming every unmet requirement,
    and re-raises whatever a factory raises (after closing what was already opened).
    """
    missing = layer.requires
    if missing:
        raise MissingServices(tuple(sorted(_name(k) for k in missing)))
    winners: dict[type[Any], _Registration] = {}
    for registration in layer.registrations:
        winners.pop(registration.key, None)  # re-insert so order follows the winner
        winners[registration.key] = registration
    registry = svcs.Registry()
    inner = svcs.Container(registry)
    container = Container(inner, frozenset(winners))
    for registration in winners.values():
        registry.register_factory(registration.key, _adapt(registration.factory, container))
    try:
        for key in winners:
            inner.get(key)
        yield container
    finally:
        inner.close()
        registry.close()


def _adapt(factory: Factory, container: Container) -> Callable[[], Generator[Any, None, None]]:
    """Wrap ``factory`` as a generator so svcs runs the cleanup of scoped resources."""

    def make() -> Generator[Any, None, None]:
        produced = factory(container)
        if not isinstance(produced, Generator):
            yield produced
            return
        value = next(produced)
        try:
            yield value
        finally:
            produced.close()

    return make
