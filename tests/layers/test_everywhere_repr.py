"""A value whose ``repr()`` overflows the stack never crashes the formatting of an error.

Such a value is a list nested deeper than the recursion limit, or an object whose
``__repr__`` raises ``RecursionError``. A validator that quoted it with ``{value!r}`` raised
``RecursionError`` out of a service method; an error value holding it raised when printed
(by the CLI, a log line, a test report). Now validators quote with ``describe`` and the
text fields of the shared errors hold text, so both are answers that print.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from returns.result import Failure

from runstore.layers import DATA_STORE, Layer, build, in_memory, sqlite
from runstore.services import RunRetentionPolicy, RunStart, RunStatus
from runstore.services._primitives import describe
from runstore.services.errors import Conflict, IllegalTransition, InvalidInput, NotFound
from runstore.testing._bad_types import Unrepresentable, deeply_nested

DEEP = deeply_nested(sys.getrecursionlimit() * 20)
OVERFLOWING = [DEEP, Unrepresentable(), [Unrepresentable()], {"k": DEEP}]
LAYERS: dict[str, Callable[[], Layer]] = {"memory": in_memory, "sqlite": lambda: sqlite(":memory:")}


@pytest.mark.parametrize("value", OVERFLOWING, ids=["deep", "raises", "inside", "in-dict"])
def test_repr_of_these_values_overflows(value: object) -> None:
    with pytest.raises(RecursionError):
        repr(value)


@pytest.mark.parametrize("value", OVERFLOWING, ids=["deep", "raises", "inside", "in-dict"])
def test_describe_never_raises_and_stays_short(value: object) -> None:
    text = describe(value)
    assert 0 < len(text) <= 200


def test_describe_reads_as_repr_for_plain_values_and_cuts_the_rest() -> None:
    assert [describe(v) for v in ("abc", 7, None, True, 2.5)] == ["'abc'", "7", "None", "True",
                                                                  "2.5"]
    assert describe(DEEP) == "[[[[[[[...]]]]]]]"
    assert describe(Unrepresentable()) == "<Unrepresentable object>"
    long = describe("x" * 1_000)
    assert len(long) < 80
    assert "..." in long


@given(st.recursive(st.none() | st.integers() | st.text() | st.binary(),
                    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner)
                    | st.tuples(inner, inner) | st.builds(lambda v: [v, Unrepresentable()], inner)))
def test_describe_never_raises_on_any_nesting(value: object) -> None:
    assert isinstance(describe(value), str)


@pytest.mark.parametrize("value", OVERFLOWING, ids=["deep", "raises", "inside", "in-dict"])
def test_shared_errors_holding_such_a_value_print_and_compare(value: object) -> None:
    errors = [
        NotFound("entry", value),
        Conflict("run", value, value, value, value),
        IllegalTransition("run", value, value, value),
        InvalidInput(value, value),
    ]
    for error in errors:
        assert str(error)
        assert repr(error)
        assert str(Failure(error))
        assert all(isinstance(getattr(error, f.name), str)
                   for f in type(error).__attrs_attrs__)  # type: ignore[attr-defined]
    assert NotFound("entry", value) == NotFound("entry", value)


def test_text_fields_keep_text_and_enum_members_as_they_are() -> None:
    assert NotFound("run", "12").key == "12"
    assert IllegalTransition("run", "1", RunStatus.PASSED, "x").from_status is RunStatus.PASSED


@pytest.mark.parametrize("layer", sorted(LAYERS))
@pytest.mark.parametrize("value", OVERFLOWING[:2], ids=["deep", "raises"])
def test_a_validator_quoting_such_a_value_answers_invalid_input(layer: str, value: object) -> None:
    factory: Callable[[], Layer] = LAYERS[layer]
    with build(factory()) as container:
        store = container.get(DATA_STORE)
        run = store.begin_run(RunStart("p", "i", datetime(2026, 1, 1, tzinfo=UTC))).unwrap()
        finished = store.finish_run(run, value, datetime(2026, 1, 2, tzinfo=UTC))  # type: ignore[arg-type]
        pruned = store.plan_prune(RunRetentionPolicy(1, value))  # type: ignore[arg-type]

    assert isinstance(finished, Failure)
    assert finished == Failure(InvalidInput("status", finished.failure().reason))
    assert str(finished.failure())
    assert isinstance(pruned, Failure)
    assert pruned == Failure(InvalidInput("policy.max_age_days", pruned.failure().reason))


def test_the_cli_prints_such_an_error_in_one_line() -> None:
    import click

    from runstore.cli._output import fail

    @click.command()
    def failing() -> None:
        fail(str(NotFound("entry", DEEP)))

    result = CliRunner().invoke(failing, [])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == ["runstore: entry '[[[[[[[...]]]]]]]' not found"]
