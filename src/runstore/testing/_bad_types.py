"""The bad-types contract: every public service method refuses a wrong-typed argument alike.

A caller that passes a list where an id is expected, an ``int`` where text is, ``None``
where a value is required, ``bytes``, a deeply nested list or an object whose ``repr()``
raises, gets ``Failure(InvalidInput(field, reason))`` (``InvalidQuery`` from the agents'
listing methods) naming that argument (``field`` is its name, or a path below it such as
``start.project``; the one item of a batch argument may be named in the singular,
``message`` for ``messages``), from every layer alike, and nothing is written: never a
``TypeError``, an ``AttributeError``, a ``RecursionError`` or a driver error.

The surface is read from the service Protocols themselves (``typing.get_type_hints`` of
every public method), so a method or argument added to a Protocol is held to the rule at
once; a combinator whose argument is a function (``SessionRepository.atomic``) is left
out, since its arguments are code, not data. For each argument in turn the others get a
valid value, and the argument gets each value of :data:`WRONG_TYPED_VALUES` (and, in the
property, anything :func:`wrong_typed` draws) that its annotation does not admit. The
answer of the layer under test must equal the in-memory layer's, the reference model.
"""

from __future__ import annotations

import collections.abc
import inspect
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from decimal import Decimal
from enum import Enum
from typing import Any, ClassVar, ForwardRef, Literal, TypeVar, Union

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from returns.result import Failure, Success

from runstore.layers import (
    ACTION_RUN_STORAGE,
    AGENT_STORAGE,
    DATA_READER,
    DATA_STORE,
    EXECUTION_STORAGE,
    GRAPH_CHECKPOINTS,
    SESSION_REPOSITORY,
    Container,
    Layer,
    Tag,
    build,
    in_memory,
)
from runstore.services._primitives import MAX_JSON_DEPTH
from runstore.services.errors import InvalidInput
from runstore.testing._shared import LayerFactory

__all__ = [
    "WRONG_TYPED_VALUES",
    "BadTypesContract",
    "Unrepresentable",
    "accepts",
    "bad_type_cases",
    "bad_types_problems",
    "deeply_nested",
    "wrong_typed",
]

_T0 = datetime(2026, 1, 1, tzinfo=UTC)
_ID = "bad-types-1"
"""The valid value of every identifier argument: one id, so any write would show."""


class Unrepresentable:
    """A value whose ``repr()`` and ``str()`` overflow the stack (raise ``RecursionError``),
    as a self-referencing structure with a careless ``__repr__`` does."""

    def __repr__(self) -> str:
        raise RecursionError("maximum recursion depth exceeded while getting the repr")

    __str__ = __repr__


def deeply_nested(depth: int = 100_000) -> list[Any]:
    """A list nested ``depth`` levels deep (built without recursion), whose ``repr()``
    overflows the stack for any depth beyond the interpreter's recursion limit."""
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


WRONG_TYPED_VALUES: tuple[object, ...] = (
    None,
    True,
    7,
    2.5,
    1j,
    "text",
    b"bytes",
    bytearray(b"bytes"),
    [1, 2],
    {"key": 1},
    ("a", "b"),
    frozenset({1}),
    object(),
    deeply_nested(),
    Unrepresentable(),
)
"""One value of each kind a caller gets wrong; each argument is given those its annotation
does not admit (:func:`accepts`)."""


# -- what an annotation admits ----------------------------------------------------------------


def _json_like(value: object) -> bool:
    """Whether ``value`` has the types of a JSON value (no deeper than the stored limit);
    walked without recursion, so a deeply nested list is simply not JSON."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if item is None or type(item) in (bool, int, float, str):
            continue
        if depth >= MAX_JSON_DEPTH:
            return False
        if type(item) is list:
            stack.extend((child, depth + 1) for child in item)
        elif type(item) is dict:
            for key, child in item.items():
                if type(key) is not str:
                    return False
                stack.append((child, depth + 1))
        else:
            return False
    return True


def accepts(annotation: object, value: object) -> bool:
    """Whether ``value`` has a type ``annotation`` admits (its values are not judged).

    Strict in runstore's way: ``bool`` is not an ``int``, a ``NewType`` admits its base
    type, an enum only its members, a ``Sequence[X]`` only sequences of ``X`` (so ``"ab"``
    is no ``Sequence[Record]``), a ``JsonValue`` only JSON's types, a ``datetime`` also
    epoch ms (an ``int``, as :func:`runstore.services._primitives.to_epoch_ms` takes), a
    ``Decimal`` also a whole ``int`` (as the agents' costs take). An annotation it does not
    know (a ``TypeVar``, ``Any``) admits everything, so it is never given a wrong value.
    """
    if annotation is Any or annotation is object or isinstance(annotation, TypeVar):
        return True
    if annotation is None or annotation is type(None):
        return value is None
    if isinstance(annotation, ForwardRef | str):  # JsonValue refers to itself by name
        return _json_like(value)
    supertype = getattr(annotation, "__supertype__", None)
    if supertype is not None:  # a NewType
        return accepts(supertype, value)
    origin = typing.get_origin(annotation)
    arguments = typing.get_args(annotation)
    if origin is Union or origin is types.UnionType:
        return any(accepts(arm, value) for arm in arguments)
    if origin is Literal:
        return value in arguments
    if origin is collections.abc.Callable:
        return callable(value)
    if origin is not None:
        if not isinstance(value, origin):
            return False
        if isinstance(origin, type) and issubclass(origin, Mapping):
            key_type, value_type = arguments or (Any, Any)
            return all(
                accepts(key_type, k) and accepts(value_type, v)
                for k, v in value.items()
            )
        if origin is tuple and arguments and arguments[-1] is not Ellipsis:
            return len(value) == len(arguments) and all(
                accepts(a, v) for a, v in zip(arguments, value, strict=False)
            )
        item_type = arguments[0] if arguments else Any
        return all(accepts(item_type, item) for item in value)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is datetime:  # or epoch ms, as runstore's time primitive takes
        return isinstance(value, datetime) or accepts(int, value)
    if annotation is Decimal:  # or a whole number, as the agents' costs take
        return isinstance(value, Decimal) or accepts(int, value)
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(annotation, type):
        return isinstance(value, annotation)
    return True


def wrong_typed(annotation: object) -> st.SearchStrategy[object]:
    """Values of every kind that ``annotation`` does not admit (see :func:`accepts`)."""
    anything = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.complex_numbers(),
        st.text(max_size=8),
        st.binary(max_size=8),
        st.lists(st.integers(), min_size=1, max_size=3),
        st.lists(st.text(max_size=3), min_size=1, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=3), st.integers(), min_size=1, max_size=2),
        st.frozensets(st.integers(), min_size=1, max_size=2),
        st.datetimes(timezones=st.just(UTC)).map(lambda moment: moment.date()),
        st.decimals(allow_nan=False),
        st.builds(object),
        st.integers(min_value=2_000, max_value=100_000).map(deeply_nested),
        st.builds(Unrepresentable),
    )
    return anything.filter(lambda value: not accepts(annotation, value))


# -- valid arguments --------------------------------------------------------------------------

_NAMED: dict[str, object] = {"role": "user"}
"""Valid values of arguments whose name alone decides (a message role is one of a set)."""


def _records() -> dict[type, Callable[[], object]]:
    """A valid value of each record type a Protocol method takes beside other arguments."""
    from runstore.services.graphs import ChannelValue
    from runstore.services.ledger import PhaseSucceeded
    from runstore.services.test_runs import RunRetentionPolicy, RunStart

    return {
        ChannelValue: lambda: ChannelValue("bytes", b""),
        RunStart: lambda: RunStart("bad-types", "inv-1", _T0),
        RunRetentionPolicy: lambda: RunRetentionPolicy(1),
        PhaseSucceeded: PhaseSucceeded,
    }


class _NoExample(Exception):
    """No valid value is known for an argument's annotation."""


def _valid(annotation: object, name: str) -> object:
    """A value of ``annotation`` every layer accepts as such for argument ``name``."""
    if name in _NAMED and accepts(annotation, _NAMED[name]):
        return _NAMED[name]
    supertype = getattr(annotation, "__supertype__", None)
    if supertype is not None:
        return _valid(supertype, name)
    origin = typing.get_origin(annotation)
    arguments = typing.get_args(annotation)
    if origin is Union or origin is types.UnionType:
        if type(None) in arguments:
            return None
        return _valid(arguments[0], name)
    if origin is collections.abc.Callable:
        return lambda: Success(None)
    if origin in (collections.abc.Sequence, collections.abc.Collection,
                  collections.abc.Iterable, tuple, list):
        return ()
    if origin in (frozenset, collections.abc.Set):
        return frozenset()
    if origin in (collections.abc.Mapping, dict):
        return {}
    if isinstance(annotation, ForwardRef):
        return None
    if annotation is str:
        return _ID
    if annotation is int:
        return 1
    if annotation is datetime:
        return _T0
    if annotation is Decimal:
        return Decimal("0.5")
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        members = list(annotation)  # a final status where there is one: finish takes only those
        return next((m for m in members if m.value in ("succeeded", "passed")), members[0])
    if isinstance(annotation, type):
        made = _records().get(annotation)
        if made is not None:
            return made()
        if attrs.has(annotation):  # a record: its required fields get valid values in turn
            hints = typing.get_type_hints(annotation)
            required = {
                f.alias: _valid(hints[f.name], f.name)
                for f in attrs.fields(annotation)
                if f.init and f.default is attrs.NOTHING
            }
            try:
                return annotation(**required)
            except (TypeError, ValueError) as exc:
                raise _NoExample(f"{annotation.__name__}(**{required}) failed: {exc}") from exc
    raise _NoExample(f"no valid example of {annotation!r} for argument {name!r}")


# -- the surface ------------------------------------------------------------------------------


@attrs.frozen
class Surface:
    """One service Protocol of a layer: its name, the Protocol, and how to reach it."""

    name: str
    protocol: type
    reach: Callable[[Container, ExitStack], object | None]


def _tag_service(tag: Tag[Any], attribute: str | None = None) -> Callable[..., object | None]:
    def reach(container: Container, _stack: ExitStack) -> object | None:
        if tag not in container:
            return None
        service: object = container.get(tag)
        return getattr(service, attribute) if attribute else service

    return reach


def _session_storage(container: Container, _stack: ExitStack) -> object | None:
    from runstore.services.sessions import NewSession

    if SESSION_REPOSITORY not in container:
        return None
    repository = container.get(SESSION_REPOSITORY)
    repository.create(NewSession(id=_ID, created=_T0)).unwrap()
    return repository.open(_ID).unwrap()


def _surfaces() -> tuple[Surface, ...]:
    from runstore.services.agents import AgentStorage
    from runstore.services.graphs import GraphCheckpointStore
    from runstore.services.ledger import ActionRunStorage, ExecutionStorage
    from runstore.services.sessions import SessionRepository, SessionStorage
    from runstore.services.test_runs import DataReader, DataStore

    found = [
        Surface("DataStore", DataStore, _tag_service(DATA_STORE)),
        Surface("DataReader", DataReader, _tag_service(DATA_READER)),
        Surface("ExecutionStorage", ExecutionStorage, _tag_service(EXECUTION_STORAGE)),
        Surface("ActionRunStorage", ActionRunStorage, _tag_service(ACTION_RUN_STORAGE)),
    ]
    for attribute, member in inspect.getmembers(AgentStorage):
        if isinstance(member, property) and member.fget is not None:
            store = typing.get_type_hints(member.fget).get("return")
            if isinstance(store, type):
                found.append(
                    Surface(f"AgentStorage.{attribute}", store,
                            _tag_service(AGENT_STORAGE, attribute))
                )
    found.append(
        Surface("GraphCheckpointStore", GraphCheckpointStore, _tag_service(GRAPH_CHECKPOINTS))
    )
    found.append(
        Surface("SessionRepository", SessionRepository, _tag_service(SESSION_REPOSITORY))
    )
    found.append(Surface("SessionStorage", SessionStorage, _session_storage))
    return tuple(found)


@attrs.frozen
class Case:
    """One argument of one method, and the valid values of the others."""

    surface: str
    method: str
    argument: str
    annotation: object
    positional: tuple[str, ...]
    keyword: tuple[str, ...]
    valid: Mapping[str, object] = attrs.field(repr=False)

    def call(self, service: object, wrong: object) -> object:
        """Call the method on ``service`` with ``wrong`` as the argument."""
        values = {**self.valid, self.argument: wrong}
        method = getattr(service, self.method)
        return method(
            *(values[n] for n in self.positional), **{n: values[n] for n in self.keyword}
        )


def bad_type_cases() -> tuple[tuple[Case, ...], tuple[str, ...]]:
    """Every (method, argument) of every service Protocol, and the arguments left out
    because no valid value is known for another argument of their method (each as
    ``"Surface.method(argument)"``: a gap in this contract, to be closed)."""
    cases: list[Case] = []
    gaps: list[str] = []
    for surface in _surfaces():
        for name, function in inspect.getmembers(surface.protocol, inspect.isfunction):
            if name.startswith("_"):
                continue
            hints = typing.get_type_hints(function)
            if any(typing.get_origin(h) is collections.abc.Callable for h in hints.values()):
                continue  # a combinator (``atomic``): its arguments are code, not data
            parameters = [
                p for p in inspect.signature(function).parameters.values() if p.name != "self"
            ]
            valid: dict[str, object] = {}
            missing: list[str] = []
            for parameter in parameters:
                if parameter.default is not inspect.Parameter.empty:
                    valid[parameter.name] = parameter.default
                    continue
                try:
                    valid[parameter.name] = _valid(hints[parameter.name], parameter.name)
                except _NoExample:
                    missing.append(parameter.name)
            positional = tuple(
                p.name for p in parameters if p.kind is not inspect.Parameter.KEYWORD_ONLY
            )
            keyword = tuple(
                p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY
            )
            for parameter in parameters:
                others_missing = [m for m in missing if m != parameter.name]
                if others_missing:
                    gaps.append(f"{surface.name}.{name}({parameter.name})")
                    continue
                cases.append(
                    Case(surface.name, name, parameter.name, hints[parameter.name],
                         positional, keyword, {**valid, parameter.name: None})
                )
    return tuple(cases), tuple(gaps)


# -- running the calls ------------------------------------------------------------------------


def _invalid_kinds() -> tuple[type, ...]:
    from runstore.services.agents import InvalidQuery

    return (InvalidInput, InvalidQuery)


def _described(value: object) -> str:
    """A short name of a wrong value for a report (never its full ``repr``)."""
    if isinstance(value, list) and value and isinstance(value[0], list):
        return "a deeply nested list"
    if isinstance(value, Unrepresentable):
        return "an object whose repr() overflows the stack"
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 40 else text[:37] + "..."


def _outcome(call: Callable[[], object]) -> object:
    """What ``call`` returned, or ``("raised", exception type name)``."""
    try:
        return call()
    except Exception as exc:
        return ("raised", type(exc).__name__, _described(str(exc)) if _safe(exc) else "")


def _safe(exc: BaseException) -> bool:
    try:
        str(exc)
    except Exception:
        return False
    return True


def _names_the_argument(result: object, argument: str) -> bool:
    if not isinstance(result, Failure):
        return False
    error = result.failure()
    if not isinstance(error, _invalid_kinds()):
        return False
    field = str(getattr(error, "field", ""))
    names = (argument, argument[:-1]) if argument.endswith("s") else (argument,)
    return any(field == name or field.startswith((f"{name}.", f"{name}[")) for name in names)


@attrs.define
class _Side:
    """The services of one built layer, by surface name (None: not provided)."""

    container: Container
    services: dict[str, object | None]


@contextmanager
def _opened(layer: Layer) -> Iterator[_Side]:
    with ExitStack() as stack:
        container = stack.enter_context(build(layer))
        services = {s.name: s.reach(container, stack) for s in _surfaces()}
        yield _Side(container, services)


def _state(side: _Side) -> tuple[object, ...]:
    """What the side's reads answer: the same before and after refused calls."""
    reads: list[Callable[[], object]] = []
    services = side.services
    if services.get("DataReader") is not None:
        reader: Any = services["DataReader"]
        reads += [reader.projects, lambda: reader.list_runs(None)]
    if services.get("ExecutionStorage") is not None:
        executions: Any = services["ExecutionStorage"]
        reads.append(lambda: executions.list(_ID))
    if services.get("ActionRunStorage") is not None:
        action_runs: Any = services["ActionRunStorage"]
        reads.append(lambda: action_runs.list(_ID))
    if services.get("AgentStorage.threads") is not None:
        threads: Any = services["AgentStorage.threads"]
        reads.append(lambda: threads.get(_ID))
    if services.get("AgentStorage.messages") is not None:
        messages: Any = services["AgentStorage.messages"]
        reads.append(lambda: messages.list(_ID))
    if services.get("GraphCheckpointStore") is not None:
        graphs: Any = services["GraphCheckpointStore"]
        reads.append(lambda: graphs.list(None))
    if services.get("SessionRepository") is not None:
        repository: Any = services["SessionRepository"]
        reads.append(lambda: repository.list())
    if services.get("SessionStorage") is not None:
        storage: Any = services["SessionStorage"]
        reads += [storage.entries, storage.info]
    return tuple(_outcome(read) for read in reads)


def _check(case: Case, wrong: object, side: _Side, model: _Side) -> str | None:
    """Why ``side`` answered ``case`` with ``wrong`` badly, or None."""
    service = side.services.get(case.surface)
    if service is None:
        return None
    where = f"{case.surface}.{case.method}({case.argument}={_described(wrong)})"
    got = _outcome(lambda: case.call(service, wrong))
    reference = model.services.get(case.surface)
    expected = got if reference is None else _outcome(lambda: case.call(reference, wrong))
    if not _names_the_argument(got, case.argument):
        return f"{where} answered {_shown(got)}, not InvalidInput naming {case.argument!r}"
    if got != expected:
        return f"{where} answered {_shown(got)}, the in-memory model {_shown(expected)}"
    return None


def _shown(outcome: object) -> str:
    try:
        text = str(outcome)
    except Exception as exc:
        return f"<an answer whose str() raised {type(exc).__name__}>"
    return text if len(text) <= 200 else text[:197] + "..."


def bad_types_problems(
    layer_factory: LayerFactory,
    *,
    most: int = 40,
    watch: Callable[[Container], object] | None = None,
) -> list[str]:
    """Call every case with every wrong value of :data:`WRONG_TYPED_VALUES` on the layer
    ``layer_factory()`` makes and on the in-memory model; return what went wrong (at most
    ``most`` lines; empty when the layer meets the contract).

    Nothing may change what the layer's reads answer; ``watch(container)``, when given, is
    a backend's own sign of a write (SQLite's ``total_changes()``), which must not change
    either.
    """
    cases, _gaps = bad_type_cases()
    problems: list[str] = []
    with _opened(layer_factory()) as side, _opened(in_memory()) as model:
        before = _state(side)
        watched = None if watch is None else watch(side.container)
        for case in cases:
            for wrong in WRONG_TYPED_VALUES:
                if accepts(case.annotation, wrong):
                    continue
                problem = _check(case, wrong, side, model)
                if problem is not None:
                    problems.append(problem)
                    if len(problems) >= most:
                        return problems
        after = _state(side)
        if after != before:
            problems.append(f"refused calls changed what reads answer: {before} -> {after}")
        if watch is not None and watch(side.container) != watched:
            problems.append(f"refused calls wrote: {watched} -> {watch(side.container)}")
    return problems


class BadTypesContract:
    """Every public method of every service the layer provides refuses each wrong-typed
    argument with ``InvalidInput`` (``InvalidQuery`` for the agents' listings) naming it,
    as the in-memory layer does, and writes nothing. Subclass and define
    :meth:`make_layer` (or override the ``layer_factory`` fixture); services the layer
    does not provide are left out.
    """

    examples: ClassVar[int] = 200
    """How many random wrong values the property draws (per test run)."""

    def make_layer(self) -> Layer:
        """Return a fresh, empty layer under test (override this, or the fixture)."""
        raise NotImplementedError("subclass BadTypesContract and define make_layer")

    @pytest.fixture
    def layer_factory(self) -> LayerFactory:
        """The factory under test (``make_layer`` unless a subclass overrides this fixture)."""
        return self.make_layer

    def test_the_contract_reaches_every_argument(self) -> None:
        cases, gaps = bad_type_cases()
        assert cases
        assert gaps == (), f"arguments with no valid neighbours to call them beside: {gaps}"

    def test_each_wrong_typed_argument_is_refused_alike(
        self, layer_factory: LayerFactory
    ) -> None:
        problems = bad_types_problems(layer_factory)
        assert problems == [], "\n".join(problems)

    def test_random_wrong_typed_arguments_are_refused_alike(
        self, layer_factory: LayerFactory
    ) -> None:
        cases, _gaps = bad_type_cases()
        with _opened(layer_factory()) as side, _opened(in_memory()) as model:
            before = _state(side)

            @settings(max_examples=self.examples, deadline=None,
                      suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
            @given(data=st.data())
            def refused_alike(data: st.DataObject) -> None:
                case = data.draw(st.sampled_from(cases), label="case")
                wrong = data.draw(wrong_typed(case.annotation), label="wrong")
                problem = _check(case, wrong, side, model)
                assert problem is None, problem

            refused_alike()
            assert _state(side) == before
