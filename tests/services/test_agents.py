"""The pure rules of the agent services: argument checks and the at-rest forms of values."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from returns.result import Failure, Success

import runstore.services as services
from runstore.services import agents
from runstore.services._agents_rules import (
    check_failure,
    check_list_query,
    check_messages,
    decode_cost,
    decode_failure,
    encode_content,
    encode_cost,
    resolve_at,
)
from runstore.services._primitives import decode_json
from runstore.services.agents import (
    MAX_JSON_DEPTH,
    ActiveRunExists,
    AgentRunFailure,
    AgentRunStatus,
    InvalidQuery,
    JsonValue,
    NewMessage,
    TokenUsage,
)
from runstore.services.clock import FixedClock
from runstore.services.errors import InvalidInput
from runstore.testing import json_values


def test_every_public_name_exists_and_is_reexported() -> None:
    for name in agents.__all__:
        assert hasattr(agents, name), name
    exported = set(services.__all__)
    for name in ("AgentStorage", "ActiveRunExists", "InvalidQuery", "Message", "Thread"):
        assert name in exported
        assert getattr(services, name) is getattr(agents, name)


@given(json_values(max_leaves=20))
def test_json_round_trips_with_the_same_types(value: JsonValue) -> None:
    text = encode_content(value, "content").unwrap()
    back = decode_json(text)
    assert back == value
    assert repr(back) == repr(value)
    assert json.loads(text) == value, "the stored form is plain JSON"


@pytest.mark.parametrize(
    "value",
    ["\ud800", ["ok", "\udfff"], {"\ud83d": 1}, float("nan"), (1,), {1: 2}, b"x", {1.5}],
)
def test_values_that_would_not_round_trip_are_refused(value: object) -> None:
    result = encode_content(value, "content")
    assert isinstance(result, Failure)
    assert result.failure().field.startswith("content"), "the path names the value"


def test_nesting_is_bounded() -> None:
    ok: JsonValue = "leaf"
    for _ in range(MAX_JSON_DEPTH):
        ok = [ok]
    assert isinstance(encode_content(ok, "content"), Success)
    assert isinstance(encode_content([ok], "content"), Failure)


@given(st.decimals(allow_nan=False, allow_infinity=False, min_value=0, places=None))
def test_costs_come_back_digit_for_digit(cost: Decimal) -> None:
    text = encode_cost(cost).unwrap()
    back = decode_cost(text)
    assert back is not None
    assert str(back) == str(cost)
    assert back.as_tuple() == cost.as_tuple()


@pytest.mark.parametrize("cost", [0.5, Decimal("-1"), Decimal("sNaN"), Decimal("Infinity"), "1"])
def test_inexact_or_negative_costs_are_refused(cost: object) -> None:
    assert isinstance(encode_cost(cost), Failure)


def test_times() -> None:
    clock = FixedClock(42)
    assert resolve_at(None, clock) == Success(42)
    assert resolve_at(7, clock) == Success(7)
    aware = datetime(2024, 1, 1, 12, tzinfo=timezone(timedelta(hours=2)))
    assert resolve_at(aware, clock) == Success(
        int(datetime(2024, 1, 1, 10, tzinfo=UTC).timestamp() * 1000)
    )
    for bad in (datetime(2024, 1, 1), True, -1, 2.5, "2024-01-01"):
        result = resolve_at(bad, clock)
        assert isinstance(result, Failure), bad
        assert result.failure().field == "at"


def test_list_queries() -> None:
    assert check_list_query(None, None, None, 50).unwrap().forward is False
    assert check_list_query(0, None, ("user",), 1).unwrap().forward is True
    cases = [
        ((None, None, None, 0), "limit"),
        ((None, None, None, -1), "limit"),
        ((None, None, None, 1001), "limit"),
        ((None, None, None, 2.0), "limit"),
        ((-1, None, None, 10), "after_seq"),
        ((None, -3, None, 10), "before_seq"),
        ((None, None, [], 10), "roles"),
        ((None, None, "user", 10), "roles"),
        ((None, None, ["ok", ""], 10), "roles"),
    ]
    for args, field in cases:
        result = check_list_query(*args)
        assert isinstance(result, Failure), args
        error = result.failure()
        assert isinstance(error, InvalidQuery)
        assert error.field == field


def test_message_checks_name_the_index_in_a_batch() -> None:
    clock = FixedClock()
    good = NewMessage(role="user", content="x")
    bad = NewMessage(role="user", content="x", usage=TokenUsage(cache_read=-1))
    result = check_messages([good, bad], clock)
    assert result == Failure(InvalidInput("messages[1].usage.cache_read", result.failure().reason))
    single = check_messages([bad], clock)
    assert isinstance(single, Failure)
    assert single.failure().field == "usage.cache_read"
    assert isinstance(check_messages(good, clock), Failure), "one message is not a batch"


def test_run_failures() -> None:
    failure = AgentRunFailure("tool_error", "boom", {"tool": "search", "codes": [1, 2]})
    status, text = check_failure(AgentRunStatus.FAILED, failure).unwrap()
    assert status is AgentRunStatus.FAILED
    assert decode_failure(text) == failure
    assert check_failure("cancelled", None).unwrap() == (AgentRunStatus.CANCELLED, None)
    for status_, failure_ in (
        (AgentRunStatus.RUNNING, None),
        (AgentRunStatus.FAILED, None),
        (AgentRunStatus.SUCCEEDED, failure),
        ("done", None),
        (AgentRunStatus.FAILED, AgentRunFailure("", "no kind")),
    ):
        assert isinstance(check_failure(status_, failure_), Failure), (status_, failure_)


def test_errors_and_records_are_values() -> None:
    assert Failure(ActiveRunExists("t", "r")) == Failure(ActiveRunExists("t", "r"))
    assert Failure(InvalidQuery("limit", "x")) != Failure(InvalidInput("limit", "x"))
    usage = TokenUsage(1, 2, 3, 4)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        usage.input = 5  # type: ignore[misc]
    assert AgentRunStatus.CANCELLED.is_finished
    assert not AgentRunStatus.RUNNING.is_finished
