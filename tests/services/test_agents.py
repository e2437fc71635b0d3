"""The pure rules of the agent services: argument checks and the at-rest forms of values."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from returns.result import Failure, Success

import runstore.services as services
from runstore.services import agents
from runstore.services._agents_rules import (
    CheckpointDraft,
    CheckpointFacts,
    Decided,
    RunQueue,
    RunRow,
    ThreadRow,
    check_failure,
    check_list_query,
    check_messages,
    decide_checkpoint,
    decide_run_queue,
    decode_cost,
    decode_failure,
    encode_content,
    encode_cost,
    message_page,
    resolve_at,
)
from runstore.services._primitives import decode_json
from runstore.services.agents import (
    MAX_JSON_DEPTH,
    ActiveRunExists,
    AgentRunFailure,
    AgentRunId,
    AgentRunStatus,
    CheckpointId,
    ContextCheckpoint,
    InvalidQuery,
    JsonValue,
    Message,
    NewMessage,
    ThreadId,
    ThreadStatus,
    TokenUsage,
)
from runstore.services.clock import FixedClock
from runstore.services.errors import Conflict, InvalidInput, NotFound
from runstore.services.ledger import StaleFencingToken
from runstore.testing import agents_json_values


def test_every_public_name_exists_and_is_reexported() -> None:
    for name in agents.__all__:
        assert hasattr(agents, name), name
    exported = set(services.__all__)
    for name in ("AgentStorage", "ActiveRunExists", "InvalidQuery", "Message", "Thread"):
        assert name in exported
        assert getattr(services, name) is getattr(agents, name)


@given(agents_json_values(max_leaves=20))
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
    assert check_list_query(None, None, [], 10).unwrap().roles == frozenset(), "an empty page"
    cases = [
        ((None, None, None, 0), "limit"),
        ((None, None, None, -1), "limit"),
        ((None, None, None, 1001), "limit"),
        ((None, None, None, 2.0), "limit"),
        ((-1, None, None, 10), "after_seq"),
        ((None, -3, None, 10), "before_seq"),
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
    assert not AgentRunStatus.QUEUED.is_finished


# -- decisions over loaded facts ---------------------------------------------------------------


class _NoLedger:
    """An ExecutionStorage stand-in that must not be read."""

    def get(self, execution_id: str) -> object:
        raise AssertionError(f"the ledger was read for {execution_id}")


def _thread_row(**changes: Any) -> ThreadRow:
    row = ThreadRow("t", "p", 1, None, None, "", "{}", ThreadStatus.OPEN, None, 0, 0, None, 0, 1, 1)
    return attrs.evolve(row, **changes)


def _run_row(**changes: Any) -> RunRow:
    row = RunRow(
        "r", "t", "p", None, 1, AgentRunStatus.RUNNING, "w", 10, 7, 1, None, 1, 1, None
    )
    return attrs.evolve(row, **changes)


def _counter() -> Any:
    values: dict[str, int] = {}

    def take(name: str) -> int:
        values[name] = values.get(name, 0) + 1
        return values[name]

    return take


def test_a_run_queue_reads_the_ledger_only_when_its_rung_is_reached() -> None:
    ledger: Any = _NoLedger()
    queue = RunQueue("r", "t", "ex", 5, None, 0, 5)
    counter = _counter()
    assert decide_run_queue(None, None, queue, ledger, counter) == Failure(
        NotFound("thread", "t")
    )
    replay = _run_row(execution_id="ex")
    assert decide_run_queue(_thread_row(), replay, queue, ledger, counter) == Success(
        Decided(replay, write=False)
    )
    archived = _thread_row(status=ThreadStatus.ARCHIVED)
    assert decide_run_queue(archived, None, queue, ledger, counter) == Failure(
        Conflict("thread", "t", "thread is archived")
    )
    busy = _thread_row(active_run_id="other")
    start = RunQueue("r", "t", None, 5, "w", 1_000, 6)
    assert decide_run_queue(busy, None, start, ledger, counter) == Failure(
        ActiveRunExists("t", "other")
    )
    queued = decide_run_queue(busy, None, attrs.evolve(start, owner=None), ledger, counter)
    assert queued.unwrap().row.status is AgentRunStatus.QUEUED, "queueing takes no slot"
    decided = decide_run_queue(_thread_row(), None, start, ledger, counter).unwrap()
    assert decided.write
    row = decided.row
    assert (row.status, row.started_at_ms, row.lease_expires_at_ms) == ("running", 5, 1_006)
    assert (row.seq, row.fencing_token, row.attempts, row.owner) == (2, 1, 1, "w")


def _draft(**changes: Any) -> CheckpointDraft:
    draft = CheckpointDraft("c2", "t", "r", 7, "c1", "so far", 3, 4, 9)
    return attrs.evolve(draft, **changes)


def _checkpoint(**changes: Any) -> ContextCheckpoint:
    stored = ContextCheckpoint(
        CheckpointId("c1"),
        ThreadId("t"),
        AgentRunId("r0"),
        1,
        None,
        "before",
        2,
        3,
        1,
        "manual",
        1,
        None,
        None,
        None,
    )
    return attrs.evolve(stored, **changes)


def _why(error: object) -> str:
    return getattr(error, "reason", type(error).__name__)


def test_the_checkpoint_ladder_answers_in_its_documented_order() -> None:
    good = CheckpointFacts(
        thread=_thread_row(head_seq=4, checkpoint_count=1),
        run=_run_row(),
        mine=None,
        id_taken=False,
        latest=_checkpoint(),
        first_kept=(4, "user"),
    )
    made = decide_checkpoint(good, _draft()).unwrap()
    assert made.write
    assert (made.row.number, made.row.previous_id, made.row.created_at_ms) == (2, "c1", 9)
    # Each broken fact alone gives its reason; earlier rungs win when several are broken.
    kept = "first kept message is not a user message at through_seq + 1"
    cases: list[tuple[dict[str, Any], str]] = [
        ({"thread": None}, "NotFound"),
        ({"run": None}, "NotFound"),
        ({"run": _run_row(thread_id="other")}, "run belongs to another thread"),
        ({"run": _run_row(fencing_token=8)}, "StaleFencingToken"),
        ({"mine": _checkpoint(id="c9", run_id="r")}, "run already created a different checkpoint"),
        ({"run": _run_row(status=AgentRunStatus.FAILED)}, "run is not running"),
        ({"id_taken": True}, "checkpoint id taken"),
        ({"latest": None}, "latest checkpoint changed"),
        ({"thread": _thread_row(head_seq=5, checkpoint_count=1)}, "head moved"),
        ({"latest": _checkpoint(through_seq=3)}, "checkpoint does not advance"),
        ({"first_kept": (4, "assistant")}, kept),
        ({"first_kept": (5, "user")}, kept),
        ({"first_kept": None}, kept),
    ]
    for index, (changes, reason) in enumerate(cases):
        result = decide_checkpoint(attrs.evolve(good, **changes), _draft())
        assert isinstance(result, Failure), changes
        assert _why(result.failure()) == reason, (changes, result)
        later = dict(kv for c, _ in cases[index + 1 :] for kv in c.items())
        both = decide_checkpoint(attrs.evolve(good, **{**later, **changes}), _draft())
        assert both == result, ("an earlier rung decides", changes)
    stale = decide_checkpoint(attrs.evolve(good, run=_run_row(fencing_token=8)), _draft())
    assert stale == Failure(StaleFencingToken("r", 7, 8, entity="agent run"))
    assert str(stale.failure()) == "agent run 'r': fencing token 7 is stale (current 8)"
    replay = _checkpoint(
        id="c2", run_id="r", summary="so far", through_seq=3, observed_head_seq=4, previous_id="c1"
    )
    standing = attrs.evolve(good, mine=replay, latest=replay)
    assert decide_checkpoint(standing, _draft()) == Success(Decided(replay, write=False))
    moved_on = attrs.evolve(standing, thread=_thread_row(head_seq=8))
    assert _why(decide_checkpoint(moved_on, _draft()).failure()) == "head moved"
    superseded = attrs.evolve(standing, latest=_checkpoint(id="c3", through_seq=4))
    assert _why(decide_checkpoint(superseded, _draft()).failure()) == "latest checkpoint changed"


@given(
    st.lists(st.integers(min_value=1, max_value=2**40), min_size=1, max_size=5, unique=True),
    st.booleans(),
)
def test_a_page_cursor_continues_from_the_far_end_of_its_page(
    seqs: list[int], forward: bool
) -> None:
    query = check_list_query(0 if forward else None, None, None, 5).unwrap()
    items = [
        Message(ThreadId("t"), seq, "user", None, None, TokenUsage(), None, 0)
        for seq in sorted(seqs)
    ]
    page = message_page(items, True, query)
    assert page.next_cursor is not None
    assert not page.next_cursor.isdigit(), "opaque, not the bare sequence number"
    after, before = (items[-1].seq, None) if forward else (None, items[0].seq)
    resumed = check_list_query(None, None, None, 5, page.next_cursor).unwrap()
    assert (resumed.after_seq, resumed.before_seq, resumed.forward) == (after, before, forward)
    assert message_page(items, False, query).next_cursor is None
