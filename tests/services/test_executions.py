"""The execution ledger's pure rules: state machines, JSON at rest, request digests, cursors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from returns.result import Failure, Success

from runstore.services import (
    ActionRunFailure,
    ActionRunPhase,
    ActionRunStatus,
    ExecutionId,
    ExecutionStatus,
    IllegalTransition,
    InvalidInput,
    JsonValue,
    NewExecution,
    NotFound,
    PhaseFailed,
    PhaseSucceeded,
)
from runstore.services.action_runs import check_outcome, check_step, state_of
from runstore.services.executions import (
    MAX_JSON_DEPTH,
    check_json,
    check_new_execution,
    check_text,
    decode_cursor,
    dump_json,
    encode_cursor,
    load_json,
)
from runstore.testing import ledger_json_values, non_json_values

S = ExecutionStatus


def test_execution_status_values_and_finished() -> None:
    assert [s.value for s in S] == ["queued", "running", "succeeded", "failed", "cancelled"]
    assert {s for s in S if s.is_finished} == {S.SUCCEEDED, S.FAILED, S.CANCELLED}


@pytest.mark.parametrize("source", list(S))
@pytest.mark.parametrize("target", list(S))
def test_the_execution_state_machine(source: ExecutionStatus, target: ExecutionStatus) -> None:
    allowed = {
        (S.QUEUED, S.RUNNING),
        (S.QUEUED, S.CANCELLED),
        (S.RUNNING, S.SUCCEEDED),
        (S.RUNNING, S.FAILED),
        (S.RUNNING, S.CANCELLED),
    }
    assert source.can_move_to(target) == ((source, target) in allowed)


_STEPS = ["running", "writeback", "effects", "queued", "succeeded", "failed", "cancelled"]
_ALLOWED = {
    ("queued", "queued"): {"running", "cancelled"},
    ("running", "running"): {"writeback", "effects", "succeeded", "failed", "cancelled"},
    ("running", "writeback"): {"effects", "succeeded", "failed", "cancelled"},
    ("running", "effects"): {"succeeded", "failed", "cancelled"},
    ("succeeded", "finished"): set(),
    ("failed", "finished"): {"queued"},
    ("cancelled", "finished"): set(),
}


@pytest.mark.parametrize("state", list(_ALLOWED))
@pytest.mark.parametrize("step", _STEPS)
def test_the_action_run_lifecycle(state: tuple[str, str], step: str) -> None:
    got = check_step("r", state, step)
    if step in _ALLOWED[state]:
        assert got is None
    else:
        assert got == IllegalTransition("action_run", "r", state_of(*state), step)


def test_a_missing_run_is_not_found() -> None:
    assert check_step("r", None, "running") == NotFound("action_run", "r")


@given(value=ledger_json_values(max_leaves=30))
def test_json_at_rest_round_trips_exactly(value: JsonValue) -> None:
    assert check_json(value, "v") is None
    text = dump_json(value)
    back = load_json(text)
    assert back == value
    assert dump_json(back) == text  # same types (1 vs 1.0 vs True) and the same key order


@given(bad=non_json_values())
def test_non_json_is_refused(bad: Any) -> None:
    assert isinstance(check_json(bad, "v"), InvalidInput)


def test_nesting_is_limited() -> None:
    value: Any = 0
    for _ in range(MAX_JSON_DEPTH):
        value = [value]
    assert check_json(value, "v") is None
    assert isinstance(check_json([value], "v"), InvalidInput)


def test_json_keeps_unicode_as_text() -> None:
    assert dump_json({"ü": "✓ 𝄞"}) == '{"ü":"✓ 𝄞"}'
    assert json.loads(dump_json([1, 1.0, True, None])) == [1, 1.0, True, None]


@pytest.mark.parametrize("text", ["", "a\x00b", "\udc00", "x" * 257, 5, None])
def test_identifier_text_is_checked(text: object) -> None:
    assert isinstance(check_text(text, "f"), InvalidInput)


def test_the_request_digest_ignores_key_order_but_not_types() -> None:
    a = NewExecution("p", "n", input={"x": 1, "y": [1.0]}, metadata={"m": 1, "n": 2})
    b = NewExecution(
        "q", "n", input={"y": [1.0], "x": 1}, metadata={"n": 2, "m": 1}, idempotency_key="k"
    )
    assert a.digest() == b.digest()
    assert a.digest() != NewExecution("p", "n", input={"x": 1.0, "y": [1.0]}).digest()
    assert a.digest() != NewExecution("p", "n", input={"x": True, "y": [1.0]}).digest()


def test_reserved_ids_are_refused() -> None:
    assert isinstance(
        check_new_execution(NewExecution("p", "n", id=ExecutionId("exe_12"))), InvalidInput
    )
    assert check_new_execution(NewExecution("p", "n", id=ExecutionId("exe_x"))) is None


def test_cursors_round_trip_and_are_kind_specific() -> None:
    assert decode_cursor("e", encode_cursor("e", 42)) == Success(42)
    assert decode_cursor("e", None) == Success(0)
    assert isinstance(decode_cursor("a", encode_cursor("e", 42)), Failure)


def test_phase_failures_get_their_phase() -> None:
    filled = check_outcome(PhaseFailed(ActionRunFailure("E", "m")), ActionRunPhase.WRITEBACK)
    assert filled == Success(PhaseFailed(ActionRunFailure("E", "m", ActionRunPhase.WRITEBACK)))
    assert isinstance(check_outcome(PhaseSucceeded(1), ActionRunPhase.EFFECTS), Failure)
    assert isinstance(check_outcome("done", ActionRunPhase.EFFECTS), Failure)


def test_action_run_status_finished() -> None:
    assert {s for s in ActionRunStatus if s.is_finished} == {
        ActionRunStatus.SUCCEEDED,
        ActionRunStatus.FAILED,
        ActionRunStatus.CANCELLED,
    }
