"""The bad-types contract on every shipped layer, and the contract tested against broken ones.

Every public method of every service (test runs, ledger, agents, sessions) answers a
wrong-typed argument with ``InvalidInput`` naming it, the same on each layer, and writes
nothing (on SQLite not even one row change). Before, a list where an id belongs raised
``TypeError`` (unhashable) in memory and reached apsw's binding on SQLite, a deeply nested
status raised ``RecursionError`` quoting it, and a wrong-typed session id was a
``NotFound`` of its repr.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest
from returns.result import Failure, Result, Success

from runstore.layers import (
    DATA_READER,
    DATA_STORE,
    Container,
    Layer,
    build,
    in_memory,
    merge,
    sqlite,
)
from runstore.layers._sqlite_database import SqliteDatabase
from runstore.services import NotFound, RunStart
from runstore.services._primitives import JsonValue, member_of, type_problem, type_refusal
from runstore.services.errors import InvalidInput
from runstore.services.ledger import ExecutionId
from runstore.services.test_runs import RunId, TestResult
from runstore.testing import BadTypesContract, LayerFactory
from runstore.testing._bad_types import (
    WRONG_TYPED_VALUES,
    Unrepresentable,
    accepts,
    bad_type_cases,
    bad_types_problems,
    deeply_nested,
)

# -- the contract on every shipped layer --------------------------------------------------------


class TestInMemoryBadTypes(BadTypesContract):
    def make_layer(self) -> Layer:
        return in_memory()


class TestSqliteMemoryBadTypes(BadTypesContract):
    def make_layer(self) -> Layer:
        return sqlite(":memory:")


class TestSqliteFileBadTypes(BadTypesContract):
    @pytest.fixture
    def layer_factory(self, tmp_path: Path) -> LayerFactory:
        numbers = itertools.count()
        return lambda: sqlite(tmp_path / f"bad-types-{next(numbers)}.db")


def test_sqlite_changes_not_one_row_for_any_refused_call(tmp_path: Path) -> None:
    def changes(container: Container) -> int:
        count: int = container.get(SqliteDatabase).connection.total_changes()
        return count

    problems = bad_types_problems(lambda: sqlite(tmp_path / "runs.db"), watch=changes)
    assert problems == []


def test_the_contract_reaches_every_service_and_many_arguments() -> None:
    cases, gaps = bad_type_cases()
    surfaces = {case.surface for case in cases}
    assert {"DataStore", "DataReader", "ExecutionStorage", "ActionRunStorage",
            "AgentStorage.threads", "AgentStorage.runs", "AgentStorage.messages",
            "AgentStorage.checkpoints", "SessionRepository", "SessionStorage"} <= surfaces
    assert ("DataReader", "compare", "run_b") in {(c.surface, c.method, c.argument)
                                                   for c in cases}
    assert gaps == ()
    assert len(cases) > 100


# -- test the tester: broken layers fail it ------------------------------------------------------


class _Delegate:
    def __init__(self, inner: object) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _UncheckedReader(_Delegate):
    """Looks a run up by whatever it is given: a list raises, a string is not found."""

    def get_run(self, run_id: RunId) -> Result[Any, Any]:
        runs: dict[object, object] = {}
        if run_id in runs:  # unhashable for a list, as a dict-backed layer was
            return Success(runs[run_id])
        return Failure(NotFound("run", str(run_id)))


class _WritingStore(_Delegate):
    """Writes a run before it checks what it was given (and then refuses it)."""

    def abort_stale_runs(self, project: str, *, older_than: datetime) -> Result[Any, Any]:
        self._inner.begin_run(  # type: ignore[attr-defined]
            RunStart("written", "inv", datetime(2026, 1, 1).astimezone())
        )
        inner: Any = self._inner
        return inner.abort_stale_runs(project, older_than=older_than)  # type: ignore[no-any-return]


def _overriding(
    *, reader: type[_Delegate] = _Delegate, store: type[_Delegate] = _Delegate
) -> LayerFactory:
    """In-memory services, with the test-run reader and store wrapped (both on one inner
    container, so that what the store writes the reader reads)."""

    def factory() -> Layer:
        inner: list[Container] = []

        def opened(container: Container) -> Iterator[Container]:
            with build(in_memory()) as built:
                inner.append(built)
                yield built

        def wrapped(tag: Any, wrapper: type[_Delegate]) -> Layer:
            return Layer.service(
                tag, lambda c: wrapper(c.get(_INNER).get(tag)), requires=(_INNER,)
            )

        return merge(
            in_memory(),
            Layer.service(_INNER, opened),
            wrapped(DATA_READER, reader),
            wrapped(DATA_STORE, store),
        )

    return factory


class _Inner:
    """Key of the inner container the wrapped services come from."""


_INNER: Any = _Inner


def test_a_layer_that_raises_or_answers_not_found_fails_the_contract() -> None:
    problems = bad_types_problems(_overriding(reader=_UncheckedReader), most=500)
    raised = [p for p in problems if p.startswith("DataReader.get_run(") and "TypeError" in p]
    not_found = [p for p in problems if p.startswith("DataReader.get_run(") and "not found" in p]
    assert raised
    assert not_found
    assert all(p.startswith("DataReader.get_run(") for p in problems)


def test_a_layer_that_writes_before_refusing_fails_the_contract() -> None:
    problems = bad_types_problems(_overriding(store=_WritingStore), most=500)
    assert [p for p in problems if p.startswith("refused calls changed what reads answer")]


# -- the shared checks ---------------------------------------------------------------------------


def test_type_problem_names_what_was_expected_never_the_value() -> None:
    assert type_problem([1], "entry_id", str) == InvalidInput("entry_id", "must be text, got list")
    assert type_problem(None, "leaf", (str, None)) is None
    assert type_problem(b"x", "leaf", (str, None)) == InvalidInput(
        "leaf", "must be text or None, got bytes"
    )
    assert type_problem(True, "seq", int) == InvalidInput("seq", "must be an integer, got bool")
    assert type_problem(3, "seq", int) is None
    assert type_problem(Unrepresentable(), "new", RunStart) == InvalidInput(
        "new", "must be a RunStart, got Unrepresentable"
    )


def test_type_refusal_refuses_the_first_wrong_argument_in_order() -> None:
    assert type_refusal(str, a="x", b="y") is None
    assert type_refusal(str, a="x", b=1, c=[2]) == Failure(
        InvalidInput("b", "must be text, got int")
    )


class _Colour(StrEnum):
    RED = "red"


def test_member_of_never_reads_a_foreign_values_text() -> None:
    assert member_of(_Colour, _Colour.RED) is _Colour.RED
    assert member_of(_Colour, "red") is _Colour.RED
    for value in ("blue", 7, None, deeply_nested(), Unrepresentable()):
        assert member_of(_Colour, value) is None


@pytest.mark.parametrize(
    ("annotation", "admitted", "refused"),
    [
        (str, ["x"], [None, 7, b"x", ["x"]]),
        (int, [7], [True, 2.5, "7", None]),
        (RunId, [7], ["7", [7]]),
        (ExecutionId, ["e"], [7, None]),
        (str | None, [None, "x"], [b"x", 7]),
        (datetime, [datetime(2026, 1, 1), 7], ["2026", 2.5]),
        (Decimal, [Decimal("1.5"), 2], [2.5, "1"]),
        (tuple[TestResult, ...], [()], ["ab", [1]]),
        (JsonValue, [None, 1, 2.5, "x", [1], {"k": [None]}], [b"x", (1,), {1: 2},
                                                              deeply_nested(100)]),
    ],
)
def test_accepts_is_strict_in_runstores_way(
    annotation: Any, admitted: list[object], refused: list[object]
) -> None:
    from typing import get_type_hints

    if annotation is JsonValue:  # the alias is a string: read it as a Protocol method does
        def probe(value: JsonValue) -> None: ...
        annotation = get_type_hints(probe)["value"]
    assert all(accepts(annotation, value) for value in admitted)
    assert not any(accepts(annotation, value) for value in refused)


def test_every_wrong_value_is_wrong_for_text() -> None:
    assert [v for v in WRONG_TYPED_VALUES if accepts(str, v)] == ["text"]
