"""The execution ledger's pure rules: state machines, JSON at rest, request digests, cursors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from returns.result import Failure, Success

from runstore.services import (
    ActionRunFailure,
    ActionRunPhase,
    ActionRunStatus,
    Conflict,
    ExecutionId,
    ExecutionStatus,
    IllegalTransition,
    InvalidInput,
    JsonValue,
    NewExecution,
    NotFound,
    PhaseFailed,
    PhaseSucceeded,
    ProjectMismatch,
    StaleFencingToken,
)
from runstore.services._ledger_rules import (
    ACTION_RUN_CURSOR,
    EXECUTION_CURSOR,
    CreateFacts,
    ExecutionDraft,
    check_id,
    check_new_execution,
    check_outcome,
    check_renew,
    decide_cancel,
    decide_create,
    decide_held,
    decide_step,
    execution_record,
    is_claimable,
    oldest,
    state_of,
)
from runstore.services._primitives import decode_json, encode_json
from runstore.services.ledger import MAX_JSON_DEPTH
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
    got = decide_step("r", state, step)
    if step in _ALLOWED[state]:
        assert got == Success(state)
    else:
        assert got == Failure(IllegalTransition("action_run", "r", state_of(*state), step))


def test_a_missing_run_is_not_found() -> None:
    assert decide_step("r", None, "running") == Failure(NotFound("action_run", "r"))


@given(value=ledger_json_values(max_leaves=30))
def test_json_at_rest_round_trips_exactly(value: JsonValue) -> None:
    text = encode_json(value, "v").unwrap()
    back = decode_json(text)
    assert back == value
    assert encode_json(back, "v") == Success(text)  # same types (1 vs 1.0 vs True), same order


@given(bad=non_json_values())
def test_non_json_is_refused(bad: Any) -> None:
    assert isinstance(encode_json(bad, "v").failure(), InvalidInput)


def test_nesting_is_limited() -> None:
    value: Any = 0
    for _ in range(MAX_JSON_DEPTH):
        value = [value]
    assert isinstance(encode_json(value, "v"), Success)
    assert isinstance(encode_json([value], "v").failure(), InvalidInput)


def test_json_keeps_unicode_as_text() -> None:
    assert encode_json({"ü": "✓ 𝄞"}, "v") == Success('{"ü":"✓ 𝄞"}')
    assert json.loads(encode_json([1, 1.0, True, None], "v").unwrap()) == [1, 1.0, True, None]


@pytest.mark.parametrize("text", ["", "a\x00b", "\udc00", "x" * 257, 5, None])
def test_identifier_text_is_checked(text: object) -> None:
    assert isinstance(check_id(text, "f").failure(), InvalidInput)


def test_the_request_digest_ignores_key_order_but_not_types() -> None:
    a = NewExecution("p", "n", input={"x": 1, "y": [1.0]}, metadata={"m": 1, "n": 2})
    b = NewExecution(
        "q", "n", input={"y": [1.0], "x": 1}, metadata={"n": 2, "m": 1}, idempotency_key="k"
    )
    assert a.digest() == b.digest()
    assert a.digest() != NewExecution("p", "n", input={"x": 1.0, "y": [1.0]}).digest()
    assert a.digest() != NewExecution("p", "n", input={"x": True, "y": [1.0]}).digest()


def test_reserved_ids_are_refused() -> None:
    reserved = check_new_execution(NewExecution("p", "n", id=ExecutionId("exe_12")))
    assert isinstance(reserved.failure(), InvalidInput)
    assert isinstance(check_new_execution(NewExecution("p", "n", id=ExecutionId("exe_x"))), Success)


def test_cursors_round_trip_and_are_kind_specific() -> None:
    assert EXECUTION_CURSOR.decode(EXECUTION_CURSOR.encode(42)) == Success((42,))
    assert EXECUTION_CURSOR.decode(None) == Success(None)
    assert isinstance(ACTION_RUN_CURSOR.decode(EXECUTION_CURSOR.encode(42)), Failure)


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


# -- the ledger's decisions over loaded facts ------------------------------------------------------


def _draft(**fields: Any) -> ExecutionDraft:
    return check_new_execution(NewExecution("p", "job", **fields)).unwrap()


def test_create_replays_an_identical_request_and_refuses_another() -> None:
    draft = _draft(idempotency_key="k")
    stored = execution_record(draft.row(1, 5))
    assert decide_create(draft, CreateFacts(keyed=(stored, draft.digest))) == Success(stored)
    other = decide_create(draft, CreateFacts(keyed=(stored, "another digest")))
    assert isinstance(other.failure(), Conflict)
    assert decide_create(draft, CreateFacts()) == Success(None)


def test_create_checks_id_then_parent_then_its_project() -> None:
    draft = _draft(id=ExecutionId("mine"), parent_id=ExecutionId("up"))
    taken = decide_create(draft, CreateFacts(id_taken=True, parent_project="p"))
    assert isinstance(taken.failure(), Conflict)
    assert decide_create(draft, CreateFacts()) == Failure(NotFound("execution", "up"))
    assert decide_create(draft, CreateFacts(parent_project="q")) == Failure(
        ProjectMismatch("execution", "up", "p", "q")
    )
    assert decide_create(draft, CreateFacts(parent_project="p")) == Success(None)


@given(
    status=st.sampled_from(list(S)),
    expires=st.none() | st.integers(min_value=0, max_value=20),
    now=st.integers(min_value=0, max_value=20),
)
def test_claimable_is_queued_or_running_past_its_lease(
    status: ExecutionStatus, expires: int | None, now: int
) -> None:
    expected = status is S.QUEUED or (
        status is S.RUNNING and expires is not None and expires <= now
    )
    assert is_claimable(status.value, expires, now) == expected


@given(st.lists(st.tuples(st.integers(min_value=1), st.text(max_size=3)), unique_by=lambda c: c[0]))
def test_claim_takes_the_oldest_candidate(candidates: list[tuple[int, str]]) -> None:
    expected = min(candidates)[1] if candidates else None
    assert oldest(candidates) == expected


@pytest.mark.parametrize("status", list(S))
@pytest.mark.parametrize("target", [None, S.SUCCEEDED, S.FAILED, S.CANCELLED])
def test_held_decisions_follow_the_state_machine_then_the_token(
    status: ExecutionStatus, target: ExecutionStatus | None
) -> None:
    assert decide_held("e", None, 1, target) == Failure(NotFound("execution", "e"))
    got = decide_held("e", (status.value, 3), 3, target)
    stale = decide_held("e", (status.value, 3), 2, target)
    if status is S.RUNNING:
        assert got == Success(None)
        assert stale == Failure(StaleFencingToken("e", 2, 3))
    elif target is None:
        assert isinstance(got.failure(), Conflict)
    else:
        assert got == Failure(IllegalTransition("execution", "e", status.value, target.value))


@pytest.mark.parametrize("status", list(S))
def test_cancel_moves_only_unfinished_executions(status: ExecutionStatus) -> None:
    got = decide_cancel("e", status.value)
    if status.is_finished:
        assert got == Failure(IllegalTransition("execution", "e", status.value, "cancelled"))
    else:
        assert got == Success(None)
    assert decide_cancel("e", None) == Failure(NotFound("execution", "e"))


def test_a_fencing_token_beyond_64_bits_is_stale_not_invalid() -> None:
    renew = check_renew(ExecutionId("e"), 2**70, 1_000).unwrap()
    assert decide_held("e", ("running", 3), renew.fencing_token, None) == Failure(
        StaleFencingToken("e", 2**70, 3)
    )
    assert isinstance(check_renew(ExecutionId("e"), -1, 1_000).failure(), InvalidInput)
