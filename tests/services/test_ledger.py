"""The execution ledger's pure rules: state machines, JSON at rest, request digests, cursors."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from returns.result import Failure, Success

from runstore.services import (
    ActionRunFailure,
    ActionRunId,
    ActionRunPhase,
    ActionRunStatus,
    Conflict,
    Execution,
    ExecutionFinished,
    ExecutionId,
    ExecutionMismatch,
    ExecutionStatus,
    Fence,
    IllegalTransition,
    InvalidInput,
    JsonValue,
    NewActionRun,
    NewExecution,
    NotFound,
    PhaseFailed,
    PhaseSucceeded,
    ProjectMismatch,
    RetryRefused,
    StaleFencingToken,
)
from runstore.services._ledger_rules import (
    ACTION_RUN_CURSOR,
    EXECUTION_CURSOR,
    ActionRunRow,
    CreateFacts,
    DamagedRecord,
    ExecutionDraft,
    action_run_record,
    check_fence,
    check_id,
    check_new_action_run,
    check_new_execution,
    check_outcome,
    check_phase,
    check_renew,
    decide_cancel,
    decide_create,
    decide_fence,
    decide_held,
    decide_new_run,
    decide_phase,
    decide_requeue,
    decide_run,
    decide_step,
    execution_record,
    final_failure_json,
    is_claimable,
    oldest,
    state_of,
)
from runstore.services._primitives import decode_json, encode_json
from runstore.services.ledger import MAX_JSON_DEPTH
from runstore.testing import ledger_json_values, non_json_values
from runstore.testing._ledger import _reversed_keys

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


# -- action runs: the fence, idempotency, repeats and the retry policy ---------------------------


def _execution(status: ExecutionStatus, token: int = 3, project: str = "p") -> Execution:
    row = _draft().row(1, 5)._replace(status=status.value, project_id=project, fencing_token=token)
    if status is S.RUNNING:
        row = row._replace(lease_expires_at_ms=10)
    return execution_record(row)


FENCE = Fence(ExecutionId("exe_1"), 3)


@pytest.mark.parametrize("status", list(S))
def test_only_a_running_execution_with_the_current_token_authorises(
    status: ExecutionStatus,
) -> None:
    got = decide_fence(FENCE, None, Success(_execution(status)))
    if status is S.RUNNING:
        assert got == Success(None)
    elif status.is_finished:
        assert got == Failure(ExecutionFinished("exe_1", status.value))
    else:
        assert got == Failure(
            Conflict(
                "execution",
                "exe_1",
                "only a running execution takes action-run writes",
                expected="running",
                actual="queued",
            )
        )


def test_the_fence_is_checked_lookup_project_status_then_token() -> None:
    missing = Failure(NotFound("execution", "exe_1"))
    assert decide_fence(FENCE, "p", missing) == missing
    finished_elsewhere = Success(_execution(S.FAILED, project="q"))
    assert decide_fence(FENCE, "p", finished_elsewhere) == Failure(
        ProjectMismatch("execution", "exe_1", "p", "q")
    )
    stale = Success(_execution(S.FAILED, token=4))
    assert decide_fence(FENCE, "p", stale) == Failure(ExecutionFinished("exe_1", "failed"))
    assert decide_fence(FENCE, "p", Success(_execution(S.RUNNING, token=4))) == Failure(
        StaleFencingToken("exe_1", 3, 4)
    )
    assert decide_fence(FENCE, None, Success(_execution(S.RUNNING, project="q"))) == Success(None)


@pytest.mark.parametrize(
    "fence", [None, ("exe_1", 3), Fence(ExecutionId(""), 3), Fence(ExecutionId("e"), -1)]
)
def test_bad_fences_are_invalid(fence: Any) -> None:
    assert isinstance(check_fence(fence).failure(), InvalidInput)


def _run_row(**fields: Any) -> ActionRunRow:
    return ActionRunRow("r", "p", "exe_1", "a", "running", "running", 1, "null", 1, 0)._replace(
        **fields
    )


def test_a_run_must_belong_to_the_fences_execution() -> None:
    assert decide_run("r", None, FENCE) == Failure(NotFound("action_run", "r"))
    other = _run_row(execution_id="exe_2")
    assert decide_run("r", other, FENCE) == Failure(ExecutionMismatch("r", "exe_1", "exe_2"))
    assert decide_run("r", _run_row(), FENCE) == Success(_run_row())


def test_the_action_run_digest_ignores_key_order_and_selectors_but_not_types() -> None:
    a = NewActionRun("p", ExecutionId("e"), "a", input={"x": 1, "y": [1.0]})
    b = NewActionRun("q", ExecutionId("f"), "a", input={"y": [1.0], "x": 1}, idempotency_key="k")
    assert a.digest() == b.digest()
    for other in (
        attrs.evolve(a, input={"x": 1.0, "y": [1.0]}),
        attrs.evolve(a, action_id="b"),
        attrs.evolve(a, max_attempts=1),
        attrs.evolve(a, id=ActionRunId("mine")),
    ):
        assert other.digest() != a.digest()


def test_queue_replays_the_same_keyed_request_and_refuses_another() -> None:
    new = NewActionRun("p", ExecutionId("exe_1"), "a", idempotency_key="k")
    draft = check_new_action_run(new, FENCE).unwrap()
    stored = draft.row(1, 5)
    assert decide_new_run(draft, stored, id_taken=False) == Success(action_run_record(stored))
    changed = stored._replace(request_digest="another")
    assert isinstance(decide_new_run(draft, changed, id_taken=False).failure(), Conflict)
    assert decide_new_run(draft, None, id_taken=False) == Success(None)


def test_queue_needs_a_fence_naming_the_runs_execution() -> None:
    new = NewActionRun("p", ExecutionId("exe_2"), "a")
    assert check_new_action_run(new, FENCE).failure() == InvalidInput(
        "fence.execution_id", "names execution 'exe_1', the run 'exe_2'"
    )


@given(result=ledger_json_values(max_leaves=8))
def test_a_phase_outcome_repeats_whatever_its_key_order(result: JsonValue) -> None:
    write = check_phase("r", FENCE, PhaseSucceeded(result), ActionRunPhase.WRITEBACK).unwrap()
    row = _run_row()._replace(**write.columns(7))
    reordered = check_phase(
        "r", FENCE, PhaseSucceeded(_reversed_keys(result)), ActionRunPhase.WRITEBACK
    ).unwrap()
    assert reordered.repeats(row)
    assert decide_phase(reordered, row) == Success(action_run_record(row))
    other = check_phase("r", FENCE, PhaseSucceeded([result]), ActionRunPhase.WRITEBACK).unwrap()
    assert not other.repeats(row)
    assert decide_phase(other, row) == Failure(
        IllegalTransition("action_run", "r", "writeback", "writeback")
    )


def test_an_old_stored_failure_repeats_and_reads_with_defaults() -> None:
    old = '{"name":"E","message":"m","phase":"effects","details":null}'
    row = _run_row(
        phase="effects", effects_status="failed", effects_completed_at_ms=3, effects_failure=old
    )
    record = action_run_record(row)
    assert record.effects is not None
    assert record.effects.failure == ActionRunFailure("E", "m", ActionRunPhase.EFFECTS)
    again = check_phase(
        "r", FENCE, PhaseFailed(ActionRunFailure("E", "m")), ActionRunPhase.EFFECTS
    ).unwrap()
    assert again.repeats(row)
    retryable = PhaseFailed(ActionRunFailure("E", "m", retryable=True))
    assert not check_phase("r", FENCE, retryable, ActionRunPhase.EFFECTS).unwrap().repeats(row)


def test_a_stored_phase_failure_of_another_phase_is_damaged() -> None:
    wrong = '{"name":"E","message":"m","phase":"effects","details":null}'
    row = _run_row(writeback_status="failed", writeback_completed_at_ms=1, writeback_failure=wrong)
    with pytest.raises(DamagedRecord, match="its writeback failure names phase effects"):
        action_run_record(row)


@pytest.mark.parametrize(
    ("attempt", "max_attempts", "retryable", "expected"),
    [
        (1, 3, True, None),
        (2, 3, True, None),
        (3, 3, True, "attempts_exhausted"),
        (1, 1, True, "attempts_exhausted"),
        (1, 3, False, "not_retryable"),
        (3, 3, False, "not_retryable"),
    ],
)
def test_requeue_follows_the_retry_policy(
    attempt: int, max_attempts: int, retryable: bool, expected: str | None
) -> None:
    failure = final_failure_json(ActionRunFailure("E", "m", retryable=retryable), "running")
    row = _run_row(
        status="failed", phase="finished", attempt=attempt, max_attempts=max_attempts,
        failure=failure,
    )
    got = decide_requeue("r", row)
    if expected is None:
        assert got == Success(None)
    else:
        assert got == Failure(RetryRefused("r", expected, attempt, max_attempts))
    assert decide_requeue("r", _run_row()) == Failure(
        IllegalTransition("action_run", "r", "running", "queued")
    )
