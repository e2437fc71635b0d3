"""Each async Protocol has exactly its sync twin's methods and signatures, every service
Protocol of ``runstore.services`` has a twin, and the façade's table forwards exactly the
async Protocols' methods: a method added to a sync Protocol shows up here until its async
twin and its forwarding exist."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from typing import Any

import pytest

import runstore.services
from runstore import aio
from runstore.aio import _services
from runstore.aio._facade import SERVICES, SESSION_STORAGE, Shape
from runstore.layers import Tag

DIFFERENT = {
    ("SessionRepository", "atomic", "fn"): (
        "Callable[[], Result[T, E]]",
        "Callable[[SessionRepository], Result[T, E]]",
    ),
}
"""Parameters whose annotation differs on purpose: ``atomic``'s function is sync and gets the
sync repository (a unit of work cannot span awaits)."""

NOT_STORAGE = {"Clock"}
"""Service Protocols without an async twin: the clock is read, never awaited."""


def _protocols() -> dict[str, type]:
    """Every Protocol class that a public module of ``runstore.services`` defines."""
    found: dict[str, type] = {}
    for module in pkgutil.iter_modules(runstore.services.__path__):
        if module.name.startswith("_"):
            continue
        loaded = importlib.import_module(f"runstore.services.{module.name}")
        for name, value in vars(loaded).items():
            if (
                isinstance(value, type)
                and getattr(value, "_is_protocol", False)
                and value.__module__ == loaded.__name__
            ):
                found[name] = value
    return found


SYNC = _protocols()
TWINS = {name: getattr(_services, f"Async{name}", None) for name in SYNC if name not in NOT_STORAGE}


def _members(cls: type) -> dict[str, Any]:
    return {k: v for k, v in vars(cls).items() if not k.startswith("_")}


def _async_name(annotation: str) -> str:
    """``annotation`` with each sync service Protocol named by its async twin."""
    return re.sub(r"\b(" + "|".join(TWINS) + r")\b", r"Async\1", annotation)


def test_every_service_protocol_has_an_async_twin() -> None:
    assert {name for name, twin in TWINS.items() if twin is None} == set()
    assert set(_services.__all__) == {f"Async{name}" for name in TWINS}


@pytest.mark.parametrize("name", sorted(TWINS))
def test_the_twin_has_the_same_methods_and_signatures(name: str) -> None:
    sync, twin = SYNC[name], TWINS[name]
    assert twin is not None
    ours, theirs = _members(sync), _members(twin)
    assert sorted(theirs) == sorted(ours), f"Async{name} and {name} differ in members"
    for member, value in ours.items():
        other = theirs[member]
        if isinstance(value, property):
            assert isinstance(other, property), member
            annotation = value.fget.__annotations__["return"]
            mapped = other.fget.__annotations__["return"]
            assert mapped == _async_name(annotation), member
            continue
        assert inspect.iscoroutinefunction(other), f"Async{name}.{member} is not async"
        assert not inspect.iscoroutinefunction(value), member
        expected, got = inspect.signature(value), inspect.signature(other)
        assert list(got.parameters) == list(expected.parameters), member
        for parameter, want in expected.parameters.items():
            have = got.parameters[parameter]
            assert (have.kind, have.default) == (want.kind, want.default), (member, parameter)
            differs = DIFFERENT.get((name, member, parameter))
            if differs is None:
                assert have.annotation == want.annotation, (member, parameter)
            else:
                assert (want.annotation, have.annotation) == differs, (member, parameter)
        returned = expected.return_annotation
        assert got.return_annotation == _async_name(returned), member


def _async_methods(protocol: type) -> set[str]:
    return {k for k, v in _members(protocol).items() if inspect.iscoroutinefunction(v)}


def _check_shape(shape: Shape, protocol: type) -> None:
    assert set(shape.methods) == _async_methods(protocol), protocol.__name__
    properties = {k: v for k, v in _members(protocol).items() if isinstance(v, property)}
    stores = {k for k, v in properties.items() if v.fget.__annotations__["return"] != "SessionId"}
    assert set(shape.stores) == stores, protocol.__name__
    for store, inner in shape.stores.items():
        _check_shape(inner, getattr(_services, properties[store].fget.__annotations__["return"]))


@pytest.mark.parametrize("key", sorted(SERVICES))
def test_the_facade_forwards_exactly_the_protocol(key: str) -> None:
    service = SERVICES[key]
    protocol = getattr(_services, key.rsplit(".", 1)[1])
    _check_shape(service.shape, protocol)
    assert service.sync.key.rsplit(".", 1)[1] == protocol.__name__.removeprefix("Async")


def test_the_session_storage_table_is_the_protocol() -> None:
    _check_shape(SESSION_STORAGE, _services.AsyncSessionStorage)


def test_every_twin_with_a_tag_is_a_service_of_the_container() -> None:
    tags = {value.key for name in aio.__all__ if isinstance(value := getattr(aio, name), Tag)}
    assert tags == set(SERVICES)
    nested = {"ThreadStore", "AgentRunStore", "MessageStore", "CheckpointStore", "SessionStorage"}
    assert {key.rsplit(".", 1)[1] for key in SERVICES} == {
        f"Async{name}" for name in TWINS if name not in nested
    }
