"""Property: the unit-of-work combinator commits exactly what a simple model says.

A random program is a tree of units. Each unit runs steps in order (write a row, bump a
counter, toggle a flag, or run a nested unit) and then ends with ``Success``, ``Failure``,
an exception, or (SQLite only) a driver error. A unit either catches its children's
exceptions and carries on or lets them propagate. Every step changes rows and ``TxDict``
mirrors together and registers an ``on_commit`` callback; after the outermost unit returns,
the rows, the mirrors and the published callbacks must equal the model's prediction.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from returns.result import Failure, Result, Success

from runstore.layers import InMemoryDatabase, SqliteDatabase, TxDict
from runstore.services import InvalidInput, StorageFailure, StorageFailureKind

Outcome = Literal["success", "failure", "raise", "driver_error"]
Step = Literal["write", "bump", "toggle"]


class Boom(Exception):
    """The exception a unit raises."""


@attrs.frozen
class Unit:
    steps: tuple[Step | Unit, ...]
    outcome: Outcome
    catches: bool


@attrs.frozen
class Effects:
    """What a unit leaves behind when it commits: writes in order, bumps and toggles."""

    writes: tuple[str, ...] = ()
    bumps: int = 0
    toggles: int = 0

    def __add__(self, other: Effects) -> Effects:
        return Effects(
            self.writes + other.writes, self.bumps + other.bumps, self.toggles + other.toggles
        )


def units(outcomes: list[Outcome]) -> st.SearchStrategy[Unit]:
    steps = st.sampled_from(["write", "bump", "toggle"])
    leaf = st.builds(
        Unit,
        steps=st.lists(steps, max_size=3).map(tuple),
        outcome=st.sampled_from(outcomes),
        catches=st.booleans(),
    )
    return st.recursive(
        leaf,
        lambda children: st.builds(
            Unit,
            steps=st.lists(st.one_of(steps, children), max_size=4).map(tuple),
            outcome=st.sampled_from(outcomes),
            catches=st.booleans(),
        ),
        max_leaves=10,
    )


# -- the model -------------------------------------------------------------------------------


def simulate(unit: Unit, names: Iterator[str]) -> tuple[Effects | None, bool]:
    """Return (the effects if the unit commits else None, whether it raises)."""
    effects = Effects()
    for step in unit.steps:
        if isinstance(step, Unit):
            child, raised = simulate(step, names)
            if raised and not unit.catches:
                return None, True
            if child is not None:
                effects = effects + child
        elif step == "write":
            effects = effects + Effects(writes=(next(names),))
        elif step == "bump":
            effects = effects + Effects(bumps=1)
        else:
            effects = effects + Effects(toggles=1)
    if unit.outcome == "success":
        return effects, False
    return None, unit.outcome == "raise"


# -- the system: one program run against a unit of work ---------------------------------------


class Program:
    """Runs a unit tree on ``db``, writing rows (SQLite) and mirrors (every backend)."""

    def __init__(self, db: SqliteDatabase | InMemoryDatabase) -> None:
        self.db = db
        self.sql = db if isinstance(db, SqliteDatabase) else None
        self.items: TxDict[str, int] = db.mirror()
        self.state: TxDict[str, int] = db.mirror()
        self.state["counter"] = 0
        self.published: list[str] = []
        self.names = (f"w{i}" for i in itertools.count())
        self.ids = itertools.count(1)
        if self.sql is not None:
            self.sql.execute(
                "CREATE TABLE item (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE) STRICT;"
                "CREATE TABLE counter (id INTEGER PRIMARY KEY CHECK (id = 1), n INTEGER) STRICT;"
                "CREATE TABLE flag (id INTEGER PRIMARY KEY CHECK (id = 1)) STRICT;"
                "INSERT INTO counter (id, n) VALUES (1, 0);"
                "INSERT INTO item (id, name) VALUES (0, 'taken');"
            )

    def run(self, unit: Unit) -> Result[str, Any]:
        return self.db.transact("unit", lambda: self._body(unit))

    def _body(self, unit: Unit) -> Result[str, Any]:
        for step in unit.steps:
            if isinstance(step, Unit):
                try:
                    self.run(step)
                except Boom:
                    if not unit.catches:
                        raise
            elif step == "write":
                self._write()
            elif step == "bump":
                self._bump()
            else:
                self._toggle()
        if unit.outcome == "success":
            return Success("ok")
        if unit.outcome == "failure":
            return Failure(InvalidInput("unit", "fails"))
        if unit.outcome == "raise":
            raise Boom
        if self.sql is None:
            return Failure(StorageFailure("unit", StorageFailureKind.UNIQUE, 2067, "simulated"))
        self.sql.execute("INSERT INTO item (name) VALUES ('taken')")  # UNIQUE violation
        raise AssertionError("unreachable")  # pragma: no cover

    def _write(self) -> None:
        name = next(self.names)
        if self.sql is not None:
            row_id = int(
                self.sql.scalar("INSERT INTO item (name) VALUES (?) RETURNING id", (name,))
            )
        else:
            row_id = next(self.ids)
        self.items[name] = row_id
        self.db.on_commit(lambda: self.published.append(name))

    def _bump(self) -> None:
        if self.sql is not None:
            self.sql.execute("UPDATE counter SET n = n + 1 WHERE id = 1")
        self.state["counter"] += 1

    def _toggle(self) -> None:
        if "flag" in self.state:
            del self.state["flag"]
            if self.sql is not None:
                self.sql.execute("DELETE FROM flag")
        else:
            self.state["flag"] = 1
            if self.sql is not None:
                self.sql.execute("INSERT INTO flag (id) VALUES (1)")


def check(db: SqliteDatabase | InMemoryDatabase, unit: Unit) -> None:
    program = Program(db)
    expected, raises = simulate(unit, (f"w{i}" for i in itertools.count()))

    if raises:
        with pytest.raises(Boom):
            program.run(unit)
    else:
        result = program.run(unit)
        if expected is not None:
            assert result == Success("ok")
        elif unit.outcome == "failure":
            assert result == Failure(InvalidInput("unit", "fails"))
        else:
            assert isinstance(result, Failure)
            assert result.failure().kind is StorageFailureKind.UNIQUE

    committed = expected or Effects()
    assert not db.in_unit
    assert list(program.items) == list(committed.writes)
    assert dict(program.state) == (
        {"counter": committed.bumps, "flag": 1}
        if committed.toggles % 2
        else {"counter": committed.bumps}
    )
    assert program.published == list(committed.writes)
    if isinstance(db, SqliteDatabase):
        assert db.connection.getautocommit()
        rows = db.execute("SELECT name, id FROM item WHERE id > 0 ORDER BY id")
        assert rows == sorted(program.items.items(), key=lambda item: item[1])
        assert [name for name, _ in rows] == list(committed.writes)
        assert db.scalar("SELECT n FROM counter") == committed.bumps
        assert db.scalar("SELECT count(*) FROM flag") == committed.toggles % 2


ALL: list[Outcome] = ["success", "failure", "raise", "driver_error"]
_files = itertools.count()


@given(units(ALL))
def test_sqlite_memory_commits_what_the_model_says(unit: Unit) -> None:
    db = SqliteDatabase.open(":memory:").unwrap()
    try:
        check(db, unit)
    finally:
        db.close()


@given(unit=units(ALL))
def test_sqlite_file_commits_what_the_model_says(
    unit: Unit, tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder: Path = tmp_path_factory.getbasetemp() / "uow-property"
    db = SqliteDatabase.open(folder / f"{next(_files)}.db").unwrap()
    try:
        check(db, unit)
    finally:
        db.close()


@given(units(ALL))
def test_in_memory_commits_what_the_model_says(unit: Unit) -> None:
    check(InMemoryDatabase(), unit)


def test_the_model_is_not_trivial() -> None:
    """Guard the generator: nested commits inside a failed parent must count for nothing."""
    inner = Unit(steps=("write",), outcome="success", catches=False)
    failed_parent = Unit(steps=("write", inner), outcome="failure", catches=False)
    top = Unit(steps=(failed_parent, "write", inner), outcome="success", catches=True)
    effects, raised = simulate(top, (f"w{i}" for i in itertools.count()))
    assert not raised
    assert effects == Effects(writes=("w2", "w3"))
