"""Layers and the container: requirements, scoped resources, overrides, the public entry points."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol, TypeVar

import apsw
import pytest
from returns.result import Success

from runstore.exceptions import ContainerClosed, DatabaseOpenError, MissingServices
from runstore.layers import (
    Container,
    InMemoryDatabase,
    Layer,
    SqliteDatabase,
    build,
    in_memory,
    merge,
    provide,
    sqlite,
)
from runstore.migrations import JOURNAL_TABLE, shipped_migrations
from runstore.services import Clock, UnknownMigration

T = TypeVar("T")


class Config:
    def __init__(self, name: str) -> None:
        self.name = name


class Pool:
    def __init__(self, config: Config) -> None:
        self.config = config


class Repo:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool


class Greeter(Protocol):
    def greet(self) -> str: ...


class English:
    def greet(self) -> str:
        return "hello"


class French:
    def greet(self) -> str:
        return "bonjour"


def scoped(log: list[str], name: str, value: T) -> Iterator[T]:
    log.append(f"open {name}")
    try:
        yield value
    finally:
        log.append(f"close {name}")


def test_build_names_every_missing_requirement() -> None:
    opened: list[str] = []
    layer = merge(
        Layer.service(Repo, lambda c: Repo(c.get(Pool)), requires=(Pool,)),
        Layer.service(
            Greeter,  # type: ignore[type-abstract]
            lambda c: scoped(opened, "greeter", English()),
            requires=(Config,),
        ),
    )
    assert layer.requires == frozenset({Pool, Config})

    with pytest.raises(MissingServices) as caught, build(layer):
        pass  # pragma: no cover

    assert caught.value.missing == (f"{__name__}.Config", f"{__name__}.Pool")
    assert "Config" in str(caught.value)
    assert "Pool" in str(caught.value)
    assert opened == []


def test_requirements_met_inside_a_merge_or_by_provide() -> None:
    repo = Layer.service(Repo, lambda c: Repo(c.get(Pool)), requires=(Pool,))
    pool = Layer.service(Pool, lambda c: Pool(c.get(Config)), requires=(Config,))
    config = Layer.value(Config, Config("main"))

    assert merge(repo, pool).requires == frozenset({Config})
    assert provide(repo, pool, config).requires == frozenset()
    with build(provide(repo, pool, config)) as container:
        assert container.get(Repo).pool.config.name == "main"


def test_scoped_resources_close_in_reverse_order() -> None:
    log: list[str] = []
    layer = merge(
        Layer.service(Config, lambda c: scoped(log, "config", Config("x"))),
        Layer.service(Pool, lambda c: scoped(log, "pool", Pool(c.get(Config))), requires=(Config,)),
        Layer.service(Repo, lambda c: scoped(log, "repo", Repo(c.get(Pool))), requires=(Pool,)),
    )
    with build(layer) as container:
        assert log == ["open config", "open pool", "open repo"]
        assert container.get(Repo).pool is container.get(Pool)
    assert log == [
        "open config",
        "open pool",
        "open repo",
        "close repo",
        "close pool",
        "close config",
    ]


def test_a_dependency_registered_later_is_opened_first_and_closed_last() -> None:
    log: list[str] = []
    layer = merge(
        Layer.service(Repo, lambda c: scoped(log, "repo", Repo(c.get(Pool))), requires=(Pool,)),
        Layer.service(Pool, lambda c: scoped(log, "pool", Pool(Config("x")))),
    )
    with build(layer):
        assert log == ["open pool", "open repo"]
    assert log[2:] == ["close repo", "close pool"]


def test_resources_close_when_the_body_raises() -> None:
    log: list[str] = []
    layer = Layer.service(Config, lambda c: scoped(log, "config", Config("x")))
    with pytest.raises(ValueError, match="body"), build(layer):
        raise ValueError("body")
    assert log == ["open config", "close config"]


def test_a_later_layer_overrides_an_earlier_one() -> None:
    log: list[str] = []
    live = merge(
        Layer.service(
            Greeter,  # type: ignore[type-abstract]
            lambda c: scoped(log, "english", English()),
            requires=(Pool,),
        ),
        Layer.value(Config, Config("live")),
    )
    swap = Layer.service(Greeter, lambda c: scoped(log, "french", French()))  # type: ignore[type-abstract]
    swapped = merge(live, swap)

    # The overridden registration's requirement (Pool) goes with it.
    assert swapped.requires == frozenset()
    with build(swapped) as container:
        assert container.get(Greeter).greet() == "bonjour"
        assert container.get(Config).name == "live"
    assert log == ["open french", "close french"]


def test_provide_lets_the_layer_win_a_tie() -> None:
    layer = Layer.value(Config, Config("mine"))
    dependency = Layer.value(Config, Config("theirs"))
    with build(provide(layer, dependency)) as container:
        assert container.get(Config).name == "mine"


def test_a_raising_factory_closes_what_was_opened_and_reraises() -> None:
    log: list[str] = []

    def broken(_: Container) -> Repo:
        log.append("repo fails")
        raise RuntimeError("cannot connect")

    layer = merge(
        Layer.service(Config, lambda c: scoped(log, "config", Config("x"))),
        Layer.service(Pool, lambda c: scoped(log, "pool", Pool(c.get(Config)))),
        Layer.service(Repo, broken),
        Layer.service(Greeter, lambda c: scoped(log, "greeter", English())),  # type: ignore[type-abstract]
    )
    with pytest.raises(RuntimeError, match="cannot connect"), build(layer):
        pass  # pragma: no cover

    assert log == ["open config", "open pool", "repo fails", "close pool", "close config"]


def test_every_resource_is_closed_even_when_one_close_raises() -> None:
    log: list[str] = []

    def fragile(_: Container) -> Iterator[Pool]:
        log.append("open pool")
        yield Pool(Config("x"))
        log.append("close pool fails")
        raise OSError("socket already gone")

    layer = merge(
        Layer.service(Config, lambda c: scoped(log, "config", Config("x"))),
        Layer.service(Pool, fragile),
        Layer.service(Repo, lambda c: scoped(log, "repo", Repo(c.get(Pool)))),
    )
    with pytest.raises(OSError, match="socket"), build(layer):
        pass
    assert log == [
        "open config",
        "open pool",
        "open repo",
        "close repo",
        "close pool fails",
        "close config",
    ]


def test_a_close_error_does_not_hide_the_body_error(caplog: pytest.LogCaptureFixture) -> None:
    def fragile(_: Container) -> Iterator[Config]:
        yield Config("x")
        raise OSError("close failed")

    with pytest.raises(ValueError, match="body"), build(Layer.service(Config, fragile)):
        raise ValueError("body")
    assert "closing a scoped service failed" in caplog.text


def test_get_of_an_unprovided_key_raises_key_error() -> None:
    with build(Layer.value(Config, Config("x"))) as container:
        with pytest.raises(KeyError, match="Pool"):
            container.get(Pool)
        assert Config in container
        assert Pool not in container


def test_get_after_the_build_block_is_refused() -> None:
    log: list[str] = []
    with build(Layer.service(Config, lambda c: scoped(log, "config", Config("x")))) as container:
        pass
    with pytest.raises(ContainerClosed):
        container.get(Config)
    assert log == ["open config", "close config"]  # nothing was re-opened


def test_get_returns_the_same_object() -> None:
    with build(Layer.service(Config, lambda c: Config("x"))) as container:
        assert container.get(Config) is container.get(Config)


def test_layers_add_like_merge() -> None:
    layer = Layer.value(Config, Config("a")) + Layer.value(Config, Config("b"))
    with build(layer) as container:
        assert container.get(Config).name == "b"


# -- the public entry points ------------------------------------------------------------------


def test_in_memory_layer_provides_the_foundation() -> None:
    with build(in_memory()) as container:
        db = container.get(InMemoryDatabase)
        assert db.transact("t", lambda: Success(1)) == Success(1)
        clock = container.get(Clock)
        assert clock.now_ms() > 1_600_000_000_000


def test_sqlite_layer_opens_a_migrated_database_and_closes_it(tmp_path: Path) -> None:
    before = len(apsw.connections())
    with build(sqlite(tmp_path / "live" / "runs.db")) as container:
        db = container.get(SqliteDatabase)
        ids = [row[0] for row in db.execute(f"SELECT id FROM {JOURNAL_TABLE} ORDER BY id")]
        assert ids == [m.id for m in shipped_migrations()]
        assert db.transact("t", lambda: Success(db.scalar("SELECT 1"))) == Success(1)
    assert len(apsw.connections()) == before


def test_sqlite_layer_refuses_a_newer_database_and_closes_it(tmp_path: Path) -> None:
    path = tmp_path / "newer.db"
    with build(sqlite(path)) as container:
        db = container.get(SqliteDatabase)
        unknown = max(m.id for m in shipped_migrations()) + 1
        db.transact(
            "plant",
            lambda: Success(
                db.execute(
                    f"INSERT INTO {JOURNAL_TABLE} (id, name, checksum, applied_at_ms, finished)"
                    " VALUES (?, 'from_the_future', 'x', 0, 1)",
                    (unknown,),
                )
            ),
        )
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    before = len(apsw.connections())

    with pytest.raises(DatabaseOpenError) as caught, build(sqlite(path)):
        pass  # pragma: no cover

    assert caught.value.error == UnknownMigration((unknown,))
    assert len(apsw.connections()) == before
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest


def test_a_scoped_factory_must_yield_once() -> None:
    def twice(_: Container) -> Iterator[Config]:
        yield Config("a")
        yield Config("b")

    with pytest.raises(RuntimeError, match="exactly once"), build(Layer.service(Config, twice)):
        pass
