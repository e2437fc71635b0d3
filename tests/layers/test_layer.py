"""Layers and the container: requirements, scoped resources, overrides, the public entry points."""

from __future__ import annotations

import ast
import hashlib
import importlib
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol, TypeVar

import apsw
import pytest
from returns.result import Success

from runstore.exceptions import ContainerClosed, DatabaseOpenError, MissingServices
from runstore.layers import (
    CLOCK,
    Container,
    InMemoryDatabase,
    Layer,
    SqliteDatabase,
    Tag,
    build,
    in_memory,
    merge,
    provide,
    sqlite,
)
from runstore.migrations import JOURNAL_TABLE, shipped_migrations
from runstore.services import UnknownMigration

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


GREETER = Tag.of(Greeter)


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
        Layer.service(GREETER, lambda c: scoped(opened, "greeter", English()), requires=(Config,)),
    )
    assert layer.requires == frozenset({Tag.of(Pool), Tag.of(Config)})

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

    assert merge(repo, pool).requires == frozenset({Tag.of(Config)})
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
        Layer.service(GREETER, lambda c: scoped(log, "english", English()), requires=(Pool,)),
        Layer.value(Config, Config("live")),
    )
    swap = Layer.service(GREETER, lambda c: scoped(log, "french", French()))
    swapped = merge(live, swap)

    # The overridden registration's requirement (Pool) goes with it.
    assert swapped.requires == frozenset()
    with build(swapped) as container:
        assert container.get(GREETER).greet() == "bonjour"
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
        Layer.service(GREETER, lambda c: scoped(log, "greeter", English())),
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
        clock = container.get(CLOCK)
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


# -- typed keys -------------------------------------------------------------------------------


def test_a_tag_and_the_class_it_names_are_one_key() -> None:
    config = Tag.of(Config)
    assert config == Tag(f"{__name__}.Config")
    assert hash(config) == hash(Tag(f"{__name__}.Config"))
    assert config != Tag.of(Pool)
    assert repr(config) == f"Tag('{__name__}.Config')"

    with build(Layer.value(config, Config("by tag")) + Layer.value(Pool, Pool(Config("p")))) as c:
        assert c.get(Config).name == "by tag"
        assert c.get(Tag.of(Pool)) is c.get(Pool)
        assert config in c
        assert Tag.of(Repo) not in c


def test_a_tag_registration_overrides_a_class_registration_of_the_same_service() -> None:
    layer = Layer.value(Config, Config("class")) + Layer.value(Tag.of(Config), Config("tag"))
    assert layer.provides == frozenset({Tag.of(Config)})
    with build(layer) as container:
        assert container.get(Config).name == "tag"


def test_tag_of_refuses_what_is_not_a_class() -> None:
    with pytest.raises(TypeError, match="names a class"):
        Tag.of(int | str)


def test_a_protocol_class_is_a_key_like_its_tag() -> None:
    with build(Layer.value(Greeter, English())) as c:
        assert c.get(Greeter) is c.get(GREETER)
        assert c.get(Greeter).greet() == "hello"
        assert Greeter in c
    with build(Layer.value(GREETER, French())) as c:
        assert c.get(Greeter).greet() == "bonjour"


def test_a_key_that_is_neither_a_tag_nor_a_class_is_refused() -> None:
    union: Any = int | str  # what a caller without a type checker might pass
    with pytest.raises(TypeError, match="tag or a class"):
        Layer.value(int | str, 1)
    with pytest.raises(TypeError, match="tag or a class"):
        Layer.service(Config, lambda _: Config("c"), requires=(union,))
    with pytest.raises(TypeError, match="tag or a class"):
        Layer.lazy(lambda: Layer(), provides=(union,))
    with build(Layer.value(Config, Config("c"))) as c, pytest.raises(KeyError, match=r"int \| str"):
        c.get(int | str)


def test_every_service_tag_names_its_protocol() -> None:
    import runstore.layers as layers
    from runstore.layers import _tags

    exported = {name for name in layers.__all__ if isinstance(getattr(layers, name), Tag)}
    assert exported == set(_tags.__all__)
    assert len(exported) == 9
    # The one tag named for what it keeps rather than its Protocol (a "store" of the store).
    named_otherwise = {"GRAPH_CHECKPOINTS": "GRAPH_CHECKPOINT_STORE"}
    for name in exported:
        tag = getattr(layers, name)
        module, _, qualname = tag.key.rpartition(".")
        protocol = getattr(importlib.import_module(module), qualname)
        assert Tag.of(protocol) == tag, name
        expected = re.sub(r"(?<!^)(?=[A-Z])", "_", qualname).upper()
        assert named_otherwise.get(name, name) == expected


def test_factories_that_need_each_other_are_refused_naming_the_cycle() -> None:
    layer = merge(
        Layer.service(Pool, lambda c: Pool(c.get(Repo).pool.config), requires=(Repo,)),
        Layer.service(Repo, lambda c: Repo(c.get(Pool)), requires=(Pool,)),
    )
    pool, repo = f"{__name__}.Pool", f"{__name__}.Repo"
    with pytest.raises(RuntimeError, match=f"cycle: {pool} -> {repo} -> {pool}"), build(layer):
        pass  # pragma: no cover


def test_a_scoped_factory_must_yield_at_all() -> None:
    def never(_: Container) -> Iterator[Config]:
        return
        yield Config("unreachable")  # pragma: no cover

    with pytest.raises(RuntimeError, match="exactly once"), build(Layer.service(Config, never)):
        pass  # pragma: no cover


# -- lazy layers ------------------------------------------------------------------------------


def _lazy_pool(loads: list[str], log: list[str]) -> Layer:
    def load() -> Layer:
        loads.append("loaded")
        return merge(
            Layer.service(
                Pool, lambda c: scoped(log, "pool", Pool(c.get(Config))), requires=(Config,)
            ),
            Layer.service(Repo, lambda c: Repo(c.get(Pool)), requires=(Pool,)),
        )

    return Layer.lazy(load, provides=(Pool, Repo), requires=(Config,))


def test_a_lazy_layer_is_loaded_and_made_on_first_get_only() -> None:
    loads: list[str] = []
    log: list[str] = []
    layer = merge(
        Layer.service(Config, lambda c: scoped(log, "config", Config("x"))), _lazy_pool(loads, log)
    )
    assert layer.requires == frozenset()
    assert layer.provides == frozenset({Tag.of(Config), Tag.of(Pool), Tag.of(Repo)})

    with build(layer) as container:
        assert (loads, log) == ([], ["open config"])
        assert Repo in container
        repo = container.get(Repo)
        assert (loads, log) == (["loaded"], ["open config", "open pool"])
        assert repo.pool is container.get(Pool)
    assert log == ["open config", "open pool", "close pool", "close config"]

    with build(layer) as again:
        assert again.get(Repo) is not repo
    assert loads == ["loaded"]  # one load per lazy layer value, however many builds


def test_a_lazy_layer_s_requirements_are_checked_without_loading_it() -> None:
    loads: list[str] = []
    with pytest.raises(MissingServices) as caught, build(_lazy_pool(loads, [])):
        pass  # pragma: no cover
    assert caught.value.missing == (f"{__name__}.Config",)
    assert loads == []


def test_a_later_layer_overrides_a_lazy_one_without_loading_it() -> None:
    loads: list[str] = []
    layer = merge(
        Layer.value(Config, Config("x")),
        _lazy_pool(loads, []),
        Layer.value(Repo, Repo(Pool(Config("mine")))),
    )
    with build(layer) as container:
        assert container.get(Repo).pool.config.name == "mine"
    assert loads == []


def test_a_lazy_layer_that_breaks_its_declaration_is_refused_on_first_use() -> None:
    def load() -> Layer:
        return Layer.service(Pool, lambda c: Pool(c.get(Config)), requires=(Config,))

    layer = merge(
        Layer.value(Config, Config("x")),
        Layer.lazy(load, provides=(Pool, Repo)),  # declares too much and too little
    )
    with build(layer) as container, pytest.raises(RuntimeError, match="declared to provide"):
        container.get(Pool)


# -- the public entry points import one domain at a time ---------------------------------------

_DOMAIN_MODULES = (
    "runstore.layers._ledger_memory",
    "runstore.layers._ledger_sqlite",
    "runstore.layers._agents_memory",
    "runstore.layers._agents_sqlite",
    "runstore.layers._ledger_memory",
    "runstore.layers._ledger_sqlite",
    "runstore.layers._sessions_memory",
    "runstore.layers._sessions_sqlite",
    "runstore.layers._test_runs_memory",
    "runstore.layers._test_runs_sqlite",
)


def _domain_modules_after(code: str) -> list[str]:
    """The domain layer modules a fresh interpreter has imported after running ``code``."""
    probe = f"{code}\nimport sys\nprint(sorted(m for m in sys.modules if m in {_DOMAIN_MODULES!r}))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return list(ast.literal_eval(out.stdout.strip().splitlines()[-1]))


def test_importing_the_layers_imports_no_domain() -> None:
    assert _domain_modules_after("import runstore.layers") == []


def test_a_test_runs_container_imports_the_test_runs_layer_only(tmp_path: Path) -> None:
    code = (
        "from runstore.layers import DATA_READER, build, sqlite\n"
        f"with build(sqlite({str(tmp_path / 'runs.db')!r})) as c:\n"
        "    c.get(DATA_READER)"
    )
    assert _domain_modules_after(code) == ["runstore.layers._test_runs_sqlite"]


@pytest.mark.parametrize("name", ["sqlite", "in_memory"])
def test_every_service_of_the_entry_points_is_made(name: str, tmp_path: Path) -> None:
    import runstore.layers as layers

    layer: Layer = layers.sqlite(tmp_path / "all.db") if name == "sqlite" else layers.in_memory()
    with build(layer) as container:
        for tag in layer.provides:
            assert container.get(tag) is container.get(tag)
        assert isinstance(container.get(layers.DATA_STORE), getattr(layers, _STORES[name]))


_STORES = {"sqlite": "SqliteDataStore", "in_memory": "InMemoryDataStore"}


def test_an_unknown_name_of_the_layers_package_is_an_attribute_error() -> None:
    import runstore.layers as layers

    with pytest.raises(AttributeError, match="no_such_layer"):
        getattr(layers, "no_such_layer")  # noqa: B009
    assert "sqlite_test_runs" in dir(layers)
