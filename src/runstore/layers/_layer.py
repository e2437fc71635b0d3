"""Layers in Effect's vocabulary, and the small typed container they are built into.

A :class:`Layer` provides services and declares the services it requires. A service is
keyed by its class (a Protocol, an ABC or a concrete class) or by a :class:`Tag` (Effect's
``Context.Tag``: a typed key that names the class without importing it). ``merge`` puts
layers side by side; ``provide`` feeds one layer's services into another's requirements.
``build(layer)`` checks that nothing required is missing (naming every missing key), makes
every provided service in registration order (so opening failures surface at once; a
:meth:`Layer.lazy` layer's services are made when first asked for), and on exit closes the
scoped ones in reverse order. When two layers provide the same key, the later one wins: that
is how a test swaps a layer.

Keys are identified by name: a class by ``module.qualname``, a tag by the name it was made
with, so ``Tag.of(DataStore)``, ``Tag("runstore.services.test_runs.DataStore")`` and the class
``DataStore`` itself are one key. A tag can therefore name a service whose module has not
been imported yet, which is what lets a lazy layer stay unimported until it is used.

Both kinds of key are typed: ``container.get(DataStore)`` and ``container.get(DATA_STORE)``
are a ``DataStore`` to mypy. A class key is annotated as a PEP 747 ``TypeForm`` rather than
``type[S]``, because mypy refuses a Protocol where ``type[S]`` is expected (``type-abstract``);
mypy 2.2 checks ``TypeForm`` by default, 1.19 to 2.1 with
``--enable-incomplete-feature=TypeForm`` (set in this project's configuration; code that only
calls runstore needs no flag). A ``TypeForm`` also admits forms that are not classes (a union,
``Any``): they type-check but name no registration, so registering one is a ``TypeError``
and asking for one a ``KeyError``.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Generic, TypeVar, final, overload

import attrs

from runstore.exceptions import ContainerClosed, MissingServices

if TYPE_CHECKING:
    from typing_extensions import TypeForm

__all__ = ["Container", "Key", "Layer", "Tag", "build", "merge", "provide"]

S = TypeVar("S")
T = TypeVar("T")



@final
class Tag(Generic[T]):
    """A typed key for the service ``T``, in the manner of Effect's ``Context.Tag``.

    ``container.get(DATA_STORE)`` is a ``DataStore`` to a type checker, and
    ``Layer.service(DATA_STORE, factory)`` checks that ``factory`` makes one. The class itself
    is a key as well typed (``container.get(DataStore)``); a tag is what names a service
    without importing its module, and it checks a :meth:`Layer.value` exactly (with a class
    key mypy may widen the service type to a common base of the key and the value). Make one
    with :meth:`Tag.of` from the class, or from the class's full name when the class must not
    be imported yet, annotated:
    ``CLOCK: Final[Tag[Clock]] = Tag("runstore.services.clock.Clock")``.

    Two tags are equal when their names are; a tag and the class it names are the same key.
    """

    __slots__ = ("key",)

    key: str
    """The full name of the service, ``module.qualname`` of its class."""

    def __init__(self, key: str) -> None:
        self.key = key

    @staticmethod
    def of(cls: TypeForm[S]) -> Tag[S]:
        """The tag of the class ``cls`` (a Protocol, an ABC or a concrete class).

        Raises ``TypeError`` when ``cls`` is not a class (a union, ``Any``, a string).
        """
        if not isinstance(cls, type):
            raise TypeError(f"a tag names a class, not {cls!r}")
        return Tag(_key(cls))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tag) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"Tag({self.key!r})"


Key = Tag[S] | type[S]
"""What a registration is keyed by: a tag, or a class (a Protocol, an ABC or a concrete one)."""

Factory = Callable[["Container"], Any]
"""Makes one service from the container: returns it, or yields it and cleans up after."""


def _key(key: object) -> str:
    """The name that identifies ``key``: a tag's name, a class's ``module.qualname``.

    Anything else (a union a type checker accepted in ``get``) gets its ``repr``, which no
    registration has, so asking for it is a ``KeyError`` naming it.
    """
    if isinstance(key, Tag):
        return key.key
    if isinstance(key, type):
        return f"{key.__module__}.{key.__qualname__}"
    return repr(key)


def _registered(key: object) -> str:
    """The name of ``key`` as a registration or a requirement: a tag's or a class's.

    Raises ``TypeError`` for anything else (a union, ``Any``, a string): a type checker
    accepts those as a ``TypeForm``, but no ``get`` could name them back.
    """
    if not isinstance(key, Tag | type):
        raise TypeError(f"a service is keyed by a tag or a class, not {key!r}")
    return _key(key)


def _keys(keys: tuple[Key[Any], ...]) -> frozenset[str]:
    return frozenset(_registered(k) for k in keys)


@attrs.frozen
class _Registration:
    key: str
    factory: Factory
    requires: frozenset[str]
    lazy: bool = False


@attrs.frozen
class Layer:
    """What a set of registrations provides and what it still requires.

    Build one with :meth:`service` (a factory), :meth:`value` (a ready object) or
    :meth:`lazy` (a layer imported on first use) and combine with :func:`merge` and
    :func:`provide`.
    """

    registrations: tuple[_Registration, ...] = ()

    @property
    def provides(self) -> frozenset[Tag[Any]]:
        """The tag of every key some registration of this layer provides."""
        return frozenset(Tag(k) for k in _provided(self))

    @property
    def requires(self) -> frozenset[Tag[Any]]:
        """The tag of every key a winning registration needs that this layer does not provide.

        A registration overridden by a later one for the same key requires nothing: when a
        test swaps a live service for an in-memory one, the live one's needs go with it.
        """
        return frozenset(Tag(k) for k in _unmet(self))

    @overload
    @staticmethod
    def service(
        key: Tag[S],
        factory: Callable[[Container], S | Iterator[S]],
        *,
        requires: tuple[Key[Any], ...] = (),
    ) -> Layer: ...
    @overload
    @staticmethod
    def service(
        key: TypeForm[S],
        factory: Callable[[Container], S | Iterator[S]],
        *,
        requires: tuple[Key[Any], ...] = (),
    ) -> Layer: ...
    @staticmethod
    def service(
        key: object,
        factory: Callable[[Container], Any],
        *,
        requires: tuple[Key[Any], ...] = (),
    ) -> Layer:
        """A layer providing ``key`` (a tag or a class) from ``factory(container)``.

        ``requires`` lists the keys the factory reads from the container; ``build``
        checks them. A generator factory is a scoped resource: it yields the service once,
        and the code after its ``yield`` runs when the container closes, in the reverse
        order of opening (whether or not the ``with`` body raised).

        Raises ``TypeError`` when ``key`` or a required key is neither a tag nor a class.
        """
        return Layer((_Registration(_registered(key), factory, _keys(requires)),))

    @overload
    @staticmethod
    def value(key: Tag[S], value: S) -> Layer: ...
    @overload
    @staticmethod
    def value(key: TypeForm[S], value: S) -> Layer: ...
    @staticmethod
    def value(key: object, value: Any) -> Layer:
        """A layer providing ``key`` as the ready object ``value`` (never closed by runstore).

        Raises ``TypeError`` when ``key`` is neither a tag nor a class.
        """
        return Layer((_Registration(_registered(key), lambda _c: value, frozenset()),))

    @staticmethod
    def lazy(
        load: Callable[[], Layer],
        *,
        provides: tuple[Key[Any], ...],
        requires: tuple[Key[Any], ...] = (),
    ) -> Layer:
        """A layer that is ``load()``, called only when one of its services is first asked for.

        ``provides`` and ``requires`` declare what the loaded layer provides and what it
        needs, so that ``build`` can check requirements and overrides without loading it;
        its services are made on first ``get`` (by the caller or by another service's
        factory), not when the container is built. Use it to keep a module unimported until
        a service of it is used: a tag names the keys without importing them. The layer is
        loaded once per ``Layer.lazy`` value, however many containers are built from it.

        Raises ``TypeError`` when a declared key is neither a tag nor a class, and
        ``RuntimeError`` on first use when the loaded layer does not provide exactly the
        declared keys or needs a key that was not declared.
        """
        declared = tuple(dict.fromkeys(_registered(k) for k in provides))
        needs = _keys(requires)
        loaded: list[dict[str, _Registration]] = []

        def registrations() -> dict[str, _Registration]:
            if not loaded:
                layer = load()
                winners = _winners(layer)
                if set(winners) != set(declared) or not _unmet(layer) <= needs:
                    raise RuntimeError(
                        f"a lazy layer declared to provide {sorted(declared)} and require"
                        f" {sorted(needs)} provides {sorted(winners)} and requires"
                        f" {sorted(_unmet(layer))}"
                    )
                loaded.append(winners)
            return loaded[0]

        def delegate(key: str) -> Factory:
            return lambda container: registrations()[key].factory(container)

        return Layer(tuple(_Registration(k, delegate(k), needs, lazy=True) for k in declared))

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


def _winners(layer: Layer) -> dict[str, _Registration]:
    """The last registration of each key, ordered by the position of that last registration."""
    winners: dict[str, _Registration] = {}
    for registration in layer.registrations:
        winners.pop(registration.key, None)  # re-insert so order follows the winner
        winners[registration.key] = registration
    return winners


def _provided(layer: Layer) -> frozenset[str]:
    return frozenset(r.key for r in layer.registrations)


def _unmet(layer: Layer) -> frozenset[str]:
    needed = frozenset[str]().union(*(r.requires for r in _winners(layer).values()))
    return needed - _provided(layer)


class Container:
    """Built services, looked up by key with :meth:`get`. Made only by :func:`build`."""

    def __init__(self, registrations: dict[str, _Registration]) -> None:
        self._registrations = registrations
        self._made: dict[str, Any] = {}
        self._making: list[str] = []
        self._opened: list[Generator[Any, None, None]] = []
        self._closed = False

    @overload
    def get(self, key: Tag[S]) -> S: ...
    @overload
    def get(self, key: TypeForm[S]) -> S: ...
    def get(self, key: object) -> Any:
        """Return the service registered under ``key`` (the same object on every call).

        ``key`` is a :class:`Tag` or a class, and the result is typed as the service it
        names: ``get(DATA_STORE)`` and ``get(DataStore)`` are both a ``DataStore`` to mypy,
        and find the same service. The first ``get`` of a lazy layer's service makes it
        (importing the layer).

        Raises ``KeyError`` (naming the key) when the built layer does not provide it,
        :class:`~runstore.exceptions.ContainerClosed` once the ``build`` block has exited,
        and ``RuntimeError`` when factories ask for each other in a cycle.
        """
        name = _key(key)
        if self._closed:
            raise ContainerClosed(f"container closed; cannot get {name}")
        if name in self._made:
            return self._made[name]
        registration = self._registrations.get(name)
        if registration is None:
            raise KeyError(f"no service {name} in this container")
        return self._make(registration)

    def __contains__(self, key: object) -> bool:
        return _key(key) in self._registrations

    def _make(self, registration: _Registration) -> Any:
        """Run ``registration``'s factory; open a generator factory and remember it."""
        if registration.key in self._making:
            cycle = [*self._making[self._making.index(registration.key) :], registration.key]
            raise RuntimeError("services require each other in a cycle: " + " -> ".join(cycle))
        self._making.append(registration.key)
        try:
            produced = registration.factory(self)
            if isinstance(produced, Generator):
                value = _open(produced)
                self._opened.append(produced)
            else:
                value = produced
        finally:
            self._making.pop()
        self._made[registration.key] = value
        return value

    def _close(self, *, reraise: bool) -> None:
        """Refuse further gets; close what was opened, newest first, every one of them.

        The first error a close raises is re-raised afterwards when ``reraise``; the others
        (and that one, when the ``with`` body is already raising) are logged.
        """
        self._closed = True
        first: Exception | None = None
        while self._opened:
            resource = self._opened.pop()
            try:
                _finish(resource)
            except Exception as exc:
                if first is None and reraise:
                    first = exc
                else:
                    import logging  # only here: importing it costs every command ~3 ms

                    logging.getLogger("runstore.layers").warning(
                        "closing a scoped service failed", exc_info=True
                    )
        if first is not None:
            raise first


@contextmanager
def build(layer: Layer) -> Iterator[Container]:
    """Build ``layer`` into a :class:`Container`; close its resources in reverse order on exit.

    Every provided service is made at once, in registration order (a service a factory asks
    for is made first), so opening failures surface here, not on first use; a lazy layer's
    services are made on first ``get``. Scoped resources (generator factories) are closed in
    the reverse order of their opening, so a resource is closed before everything it was
    opened from.

    Raises :class:`~runstore.exceptions.MissingServices` naming every unmet requirement
    (nothing is opened then), and re-raises whatever a factory raises after closing, in
    reverse order, what was already opened. An error raised while closing does not stop
    the other closes; the first one is re-raised afterwards unless the ``with`` body or a
    factory is already raising (then it is logged on the ``runstore.layers`` logger).
    """
    missing = _unmet(layer)
    if missing:
        raise MissingServices(tuple(sorted(missing)))
    container = Container(_winners(layer))
    try:
        for registration in container._registrations.values():
            if not registration.lazy and registration.key not in container._made:
                container._make(registration)
        yield container
    except BaseException:
        container._close(reraise=False)
        raise
    container._close(reraise=True)


def _open(resource: Generator[Any, None, None]) -> Any:
    """Run a scoped factory up to its ``yield`` and return what it yielded."""
    try:
        return next(resource)
    except StopIteration:
        raise RuntimeError("a scoped service factory must yield exactly once") from None


def _finish(resource: Generator[Any, None, None]) -> None:
    """Run the code after a scoped factory's ``yield`` (its cleanup)."""
    try:
        next(resource)
    except StopIteration:
        return
    resource.close()
    raise RuntimeError("a scoped service factory must yield exactly once")
