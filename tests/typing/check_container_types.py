"""What mypy concludes about the container's keys: checked by mypy (``assert_type``), never run.

``tests/typing/test_container_typing.py`` runs mypy on this file beside a wrong snippet, so
a change that loosens these types to ``Any`` fails the tests as well as ``mypy``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import assert_type

from runstore import layers
from runstore.layers import CLOCK, DATA_READER, DATA_STORE, Container, Layer, Tag
from runstore.services import (
    ActionRunStorage,
    AgentStorage,
    Clock,
    DataReader,
    DataStore,
    ExecutionStorage,
    FixedClock,
    SessionRepository,
)


def every_service_tag_gives_its_protocol(c: Container) -> None:
    assert_type(c.get(DATA_STORE), DataStore)
    assert_type(c.get(DATA_READER), DataReader)
    assert_type(c.get(layers.EXECUTION_STORAGE), ExecutionStorage)
    assert_type(c.get(layers.ACTION_RUN_STORAGE), ActionRunStorage)
    assert_type(c.get(layers.AGENT_STORAGE), AgentStorage)
    assert_type(c.get(layers.SESSION_REPOSITORY), SessionRepository)
    assert_type(c.get(CLOCK), Clock)


def every_service_protocol_gives_itself(c: Container) -> None:
    assert_type(c.get(DataStore), DataStore)
    assert_type(c.get(DataReader), DataReader)
    assert_type(c.get(ExecutionStorage), ExecutionStorage)
    assert_type(c.get(ActionRunStorage), ActionRunStorage)
    assert_type(c.get(AgentStorage), AgentStorage)
    assert_type(c.get(SessionRepository), SessionRepository)
    assert_type(c.get(Clock), Clock)


def a_concrete_class_gives_itself(c: Container) -> None:
    assert_type(c.get(layers.SqliteDatabase), layers.SqliteDatabase)
    assert_type(c.get(layers.InMemoryDatabase), layers.InMemoryDatabase)


def a_tag_of_a_protocol_class_is_typed_without_an_ignore() -> None:
    assert_type(Tag.of(DataStore), Tag[DataStore])
    assert_type(DATA_STORE, Tag[DataStore])


def registrations_take_what_the_key_promises() -> None:
    Layer.value(CLOCK, FixedClock(0))  # a subclass is a Clock
    Layer.value(Clock, FixedClock(0))
    Layer.service(DATA_READER, lambda c: c.get(DATA_READER))
    Layer.service(DataStore, lambda c: c.get(DataStore), requires=(DataStore, Clock))

    def scoped(_: Container) -> Iterator[Clock]:
        yield FixedClock(0)

    Layer.service(CLOCK, scoped, requires=(DATA_STORE, layers.SqliteDatabase))


def build_gives_a_container() -> None:
    with layers.build(layers.in_memory()) as container:
        assert_type(container, Container)
