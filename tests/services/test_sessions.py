"""The pure rules of the sessions service: validation, time, summary, context state, context."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Context, Decimal, localcontext
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from returns.result import Failure, Result, Success

from runstore import services
from runstore.services import InvalidInput, ModelRef, NewEntry
from runstore.services._sessions_rules import SESSIONS_CURSOR, check_listing, walk_step
from runstore.services.pagination import CursorCodec
from runstore.services.sessions import (
    ROOT_STATE,
    CompactionEntry,
    EntryState,
    LabelEntry,
    MessageEntry,
    SessionSummary,
    SummaryBuilder,
    UnknownEntry,
    ValidEntry,
    assemble_context,
    empty_summary,
    fold_summary,
    iso_from_ms,
    make_entry,
    ms_from_iso,
    next_state,
    payload_from_body,
    to_epoch_ms,
    validate_entry,
)


def _valid(new: NewEntry) -> ValidEntry:
    return validate_entry(new).unwrap()


def _refused(checked: Result[Any, InvalidInput]) -> InvalidInput:
    assert isinstance(checked, Failure), checked
    refusal: InvalidInput = checked.failure()
    return refusal


def test_session_names_are_exported_from_services() -> None:
    for name in (
        "SessionRepository",
        "SessionStorage",
        "NewEntry",
        "SessionSummary",
        "DuplicateEntry",
    ):
        assert name in services.__all__


# -- time ----------------------------------------------------------------------------------------


def test_timestamps_are_epoch_ms_utc() -> None:
    assert ms_from_iso("2025-11-30T10:53:21.000Z") == 1_764_500_001_000
    assert ms_from_iso("2025-11-30T11:53:21.000+01:00") == 1_764_500_001_000
    assert ms_from_iso("2025-11-30T10:53:21.123") == 1_764_500_001_123  # no zone: UTC
    assert ms_from_iso("yesterday") is None
    assert ms_from_iso("1969-12-31T23:59:59.999Z") is None  # before epoch ms 0: not a time
    assert iso_from_ms(1_764_500_001_007) == "2025-11-30T10:53:21.007Z"
    aware = datetime(2025, 11, 30, 11, 53, 21, tzinfo=timezone(timedelta(hours=1)))
    assert to_epoch_ms(aware, "t") == Success(1_764_500_001_000)
    assert to_epoch_ms(5, "t") == Success(5)
    for refused in (datetime(2025, 1, 1), True, -1, 2**63):
        assert _refused(to_epoch_ms(refused, "t")).field == "t"


@given(st.integers(min_value=0, max_value=253_402_300_799_999))
def test_iso_round_trips_every_millisecond(ms: int) -> None:
    assert ms_from_iso(iso_from_ms(ms)) == ms


# -- validation ----------------------------------------------------------------------------------


def test_the_constructors_build_valid_entries_of_every_type() -> None:
    entries = [
        NewEntry.message("a", None, {"role": "user", "content": "hi"}, timestamp=1),
        NewEntry.thinking_level_change("b", "a", "high", timestamp=1),
        NewEntry.model_change("c", "b", "openai", "gpt-5", timestamp=1),
        NewEntry.compaction("d", "c", "s", "a", 10, timestamp=1),
        NewEntry.branch_summary("e", "a", "d", "left", timestamp=1),
        NewEntry.custom("f", "e", "state", {"x": 1}, timestamp=1),
        NewEntry.custom_message("g", "f", "note", [{"type": "text", "text": "t"}], timestamp=1),
        NewEntry.label("h", "g", "a", "mark", timestamp=1),
        NewEntry.session_info("i", "h", "name", timestamp=1),
    ]
    for entry in entries:
        _valid(entry)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"id": ""}, "id"),
        ({"id": "x" * 257}, "id"),
        ({"id": 7}, "id"),
        ({"parent_id": ""}, "parent_id"),
        ({"type": ""}, "type"),
        ({"type": "session"}, "type"),
        ({"timestamp": datetime(2025, 1, 1)}, "timestamp"),
        ({"timestamp": "2025"}, "timestamp"),
        ({"payload": [1]}, "payload"),
        ({"payload": {1: "x"}}, "payload"),
        ({"payload": {"customType": "x", "parentId": "y"}}, "payload"),
        ({"payload": {"customType": "x", "data": float("nan")}}, "payload['data']"),
        ({"payload": {"customType": "x", "data": object()}}, "payload['data']"),
        ({"payload": {"customType": "x", "data": [(1, 2)]}}, "payload['data'][0]"),
        ({"payload": {"customType": "\udc00"}}, "payload['customType']"),
        ({"timestamp": -1}, "timestamp"),
        ({"timestamp": 2**63}, "timestamp"),
        ({"payload": {"customType": 3}}, "payload.customType"),
        ({"id": "\ud800"}, "id"),
    ],
)
def test_validation_names_the_refused_field(fields: dict[str, Any], field: str) -> None:
    base: dict[str, Any] = {
        "id": "a",
        "parent_id": None,
        "type": "custom",
        "timestamp": 1,
        "payload": {"customType": "x"},
    }
    refused = _refused(validate_entry(NewEntry(**{**base, **fields}), "entries[2]."))
    assert refused.field == f"entries[2].{field}"


@pytest.mark.parametrize(
    ("entry_type", "payload", "field"),
    [
        ("message", {"message": "hi"}, "payload.message"),
        ("message", {"message": {"content": "x"}}, "payload.message.role"),
        ("thinking_level_change", {}, "payload.thinkingLevel"),
        ("model_change", {"provider": "p", "modelId": None}, "payload.modelId"),
        ("compaction", {"summary": "s", "firstKeptEntryId": "a"}, "payload.tokensBefore"),
        (
            "compaction",
            {"summary": "s", "firstKeptEntryId": "a", "tokensBefore": True},
            "payload.tokensBefore",
        ),
        ("branch_summary", {"fromId": "a"}, "payload.summary"),
        ("custom_message", {"customType": "c", "content": 5}, "payload.content"),
        (
            "custom_message",
            {"customType": "c", "content": "x", "display": "yes"},
            "payload.display",
        ),
        ("label", {"targetId": "a", "label": 3}, "payload.label"),
        ("session_info", {"name": ["x"]}, "payload.name"),
    ],
)
def test_known_types_need_their_shape(entry_type: str, payload: dict[str, Any], field: str) -> None:
    refused = _refused(
        validate_entry(
            NewEntry(id="a", parent_id=None, type=entry_type, timestamp=1, payload=payload)
        )
    )
    assert refused.field == field


def test_unknown_types_take_any_json_object() -> None:
    checked = _valid(
        NewEntry(id="a", parent_id=None, type="later", timestamp=1, payload={"x": [None]})
    )
    assert checked.body == '{"x":[null]}'


def test_raw_text_is_stored_as_given_unless_it_escapes_surrogates() -> None:
    payload = {"customType": "c", "data": "é"}
    raw = '{"type": "custom", "id": "a", "customType": "c", "data": "\\u00e9"}'
    checked = _valid(
        NewEntry(id="a", parent_id=None, type="custom", timestamp=1, payload=payload, raw=raw)
    )
    assert checked.body == raw
    assert payload_from_body(checked.body) == payload
    paired = '{"customType": "c", "data": "\\ud83d\\ude00"}'
    emoji = {"customType": "c", "data": "\N{GRINNING FACE}"}
    body = _valid(
        NewEntry(id="a", parent_id=None, type="custom", timestamp=1, payload=emoji, raw=paired)
    ).body
    assert body == '{"customType":"c","data":"\N{GRINNING FACE}"}'
    lone = {"customType": "c", "data": "\ud800"}
    refused = validate_entry(
        NewEntry(
            id="a",
            parent_id=None,
            type="custom",
            timestamp=1,
            payload=lone,
            raw='{"customType": "c", "data": "\\ud800"}',
        )
    )
    assert _refused(refused).field == "payload['data']"


def test_records_expose_the_fields_of_their_type() -> None:
    message = make_entry(
        "message", "a", None, 1, 5, {"message": {"role": "assistant", "content": []}}
    )
    assert isinstance(message, MessageEntry)
    assert message.role == "assistant"
    compaction = make_entry(
        "compaction", "k", "a", 2, 5, {"summary": "s", "firstKeptEntryId": "a", "tokensBefore": 9}
    )
    assert isinstance(compaction, CompactionEntry)
    assert (compaction.first_kept_entry_id, compaction.tokens_before) == ("a", 9)
    label = make_entry("label", "l", "k", 3, 5, {"targetId": "a", "label": ""})
    assert isinstance(label, LabelEntry)
    assert (label.target_id, label.label) == ("a", None)
    unknown = make_entry("later", "u", None, 4, 5, {})
    assert isinstance(unknown, UnknownEntry)
    assert unknown.type == "later"


# -- summary -------------------------------------------------------------------------------------


def _assistant(usage: Any, provider: str = "p", model: str = "m") -> dict[str, Any]:
    return {
        "message": {
            "role": "assistant",
            "content": [],
            "provider": provider,
            "model": model,
            "usage": usage,
        }
    }


def test_usage_counts_by_the_readme_rules() -> None:
    usage = {
        "input": 100,
        "output": 25,
        "cacheRead": 40,
        "cacheWrite": 10,
        "totalTokens": 1,
        "cost": {"total": 0.37},
    }
    summary = fold_summary(empty_summary(), "message", _assistant(usage))
    assert (summary.cached_tokens, summary.uncached_tokens, summary.total_tokens) == (40, 110, 175)
    assert summary.cost == Decimal("0.37")
    assert (summary.message_count, summary.entry_count, summary.model) == (1, 1, ModelRef("p", "m"))


def test_odd_usage_values_count_as_nothing() -> None:
    usage = {"input": "many", "output": 2.0, "cacheRead": True, "cost": {"total": float("inf")}}
    summary = fold_summary(empty_summary(), "message", _assistant(usage))
    assert (summary.total_tokens, summary.cost) == (2, Decimal(0))
    missing = fold_summary(empty_summary(), "message", {"message": {"role": "assistant"}})
    assert (missing.total_tokens, missing.model) == (0, None)


def test_costs_add_up_exactly() -> None:
    builder = SummaryBuilder(empty_summary())
    for _ in range(10):
        builder.add("message", _assistant({"cost": {"total": 0.1}}))
    builder.add("message", _assistant({"cost": {"total": 1e-20}}))
    assert builder.build().cost == Decimal("1.00000000000000000001")
    builder.add("message", _assistant({"cost": {"total": 2}}))
    assert builder.build().cost == Decimal("3.00000000000000000001")  # built twice: once each
    builder.add("message", _assistant({"cost": {"total": 0.5}}))
    assert builder.build().cost == Decimal("3.50000000000000000001")


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False) | st.integers(), max_size=20))
def test_a_cost_is_the_exact_sum_of_the_decimal_texts(totals: list[float | int]) -> None:
    builder = SummaryBuilder(empty_summary())
    for total in totals:
        builder.add("message", _assistant({"cost": {"total": total}}))
    with localcontext(Context(prec=80)):  # exact for sums of doubles (see SessionSummary)
        expected = sum((Decimal(repr(t)) for t in totals if t), Decimal(0))
    assert builder.build().cost == expected


def test_name_labels_model_and_thinking_are_the_latest_appended() -> None:
    builder = SummaryBuilder(empty_summary())
    builder.add("session_info", {"name": "  first "})
    builder.add("session_info", {"name": "   "})
    builder.add("label", {"targetId": "a", "label": "x"})
    builder.add("label", {"targetId": "b", "label": "y"})
    builder.add("label", {"targetId": "a", "label": None})
    builder.add("thinking_level_change", {"thinkingLevel": "high"})
    builder.add("model_change", {"provider": "q", "modelId": "n"})
    builder.add("later", {})
    summary = builder.build()
    assert (summary.name, summary.labels, summary.thinking_level) == ("first", {"b": "y"}, "high")
    assert (summary.model, summary.entry_count, summary.message_count) == (ModelRef("q", "n"), 8, 0)
    assert SummaryBuilder(summary).build() == summary


# -- context -------------------------------------------------------------------------------------


def test_state_follows_the_path() -> None:
    state = next_state(None, "thinking_level_change", {"thinkingLevel": "low"})
    assert state == EntryState(None, "low")
    same = next_state(state, "message", {"message": {"role": "user"}})
    assert same is state
    modelled = next_state(state, "message", _assistant({}))
    assert modelled == EntryState(ModelRef("p", "m"), "low")
    assert next_state(modelled, "message", _assistant({})) is modelled
    # A compaction or a leaf move changes neither: the state is over the whole path.
    assert next_state(modelled, "compaction", {"firstKeptEntryId": "k"}) is modelled
    assert next_state(modelled, "leaf", {"targetId": None}) is modelled
    assert next_state(None, "custom", {}) is ROOT_STATE


@pytest.mark.parametrize(
    ("steps", "stops_at"),
    [
        ([("a", "message", {})], None),
        (
            [
                ("k", "compaction", {"firstKeptEntryId": "b"}),
                ("c", "message", {}),
                ("b", "message", {}),
                ("a", "message", {}),
            ],
            "b",
        ),
        ([("k", "compaction", {"retainedTail": []}), ("a", "message", {})], "k"),
        ([("k", "compaction", {"firstKeptEntryId": "zz"}), ("a", "message", {})], None),
        # The first kept entry is not met before an older compaction: that one's rule holds.
        (
            [
                ("k2", "compaction", {"firstKeptEntryId": "a"}),
                ("k1", "compaction", {"firstKeptEntryId": "c"}),
                ("c", "message", {}),
                ("a", "message", {}),
            ],
            "c",
        ),
        ([("k", "compaction", {"firstKeptEntryId": "k"}), ("a", "message", {})], None),
    ],
)
def test_the_walk_stops_where_seed_004_stops(
    steps: list[tuple[str, str, dict[str, Any]]], stops_at: str | None
) -> None:
    """walk_step over a path read from the leaf towards the root (getPathToRootOrCompaction)."""
    pending: str | None = None
    stopped: str | None = None
    for entry_id, entry_type, payload in steps:
        done, pending = walk_step(entry_id, entry_type, payload, pending)
        if done:
            stopped = entry_id
            break
    assert stopped == stops_at


def test_context_puts_the_compaction_summary_first() -> None:
    path = [
        make_entry("message", "a", None, 1, 1, {"message": {"role": "user"}}),
        make_entry("custom", "c", "a", 2, 2, {"customType": "x"}),
        make_entry(
            "compaction",
            "k",
            "c",
            3,
            3,
            {"summary": "s", "firstKeptEntryId": "a", "tokensBefore": 7},
        ),
        make_entry("branch_summary", "b", "k", 4, 4, {"summary": "", "fromId": "z"}),
        make_entry(
            "custom_message",
            "m",
            "b",
            5,
            5,
            {"customType": "t", "content": "c", "details": {"d": 1}},
        ),
    ]
    context = assemble_context(None, path, ROOT_STATE)
    assert [(m.entry_id, m.role) for m in context.messages] == [
        ("k", "compactionSummary"),
        ("a", "user"),
        ("m", "custom"),
    ]
    assert context.messages[0].message == {
        "role": "compactionSummary",
        "summary": "s",
        "tokensBefore": 7,
        "timestamp": 3,
    }
    assert context.messages[2].message == {
        "role": "custom",
        "customType": "t",
        "content": "c",
        "display": False,
        "details": {"d": 1},
        "timestamp": 5,
    }


# -- cursors -------------------------------------------------------------------------------------


@given(st.integers(min_value=0, max_value=2**62), st.integers(min_value=1, max_value=2**62))
def test_listing_cursors_name_a_creation_time_and_a_session_key(created: int, key: int) -> None:
    assert check_listing(10, SESSIONS_CURSOR.encode(created, key)) == Success((created, key))
    assert check_listing(10, None) == Success(None)


@pytest.mark.parametrize(
    "cursor", ["", "s", "s5", "x5", "sessions.1.5", CursorCodec("executions").encode(5)]
)
def test_foreign_cursors_are_refused(cursor: str) -> None:
    assert _refused(check_listing(10, cursor)).field == "cursor"


def test_empty_summary_is_the_default() -> None:
    assert empty_summary() == SessionSummary()
    assert empty_summary().thinking_level == "off"
