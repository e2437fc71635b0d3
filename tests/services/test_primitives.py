"""The shared primitives: epoch ms, text policy, strict JSON, validator composition, cursors."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from returns.result import Failure, Success

from runstore.services import InvalidInput, JsonValue
from runstore.services._primitives import (
    MAX_EPOCH_MS,
    MAX_JSON_DEPTH,
    and_then,
    check_int,
    check_json,
    check_optional,
    check_text,
    decode_json,
    encode_json,
    first_failure,
    text_problem,
    to_epoch_ms,
    within,
)
from runstore.services.pagination import CursorCodec, Page, page_of
from runstore.testing import ledger_json_values

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def refused_field(result: object) -> str | None:
    """The field a ``Failure(InvalidInput)`` names, or None for anything else."""
    if isinstance(result, Failure) and isinstance(result.failure(), InvalidInput):
        field: str = result.failure().field
        return field
    return None


def same(a: object, b: object) -> bool:
    """Equal with the same types, the same key order and the same sign of zero."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        assert isinstance(b, float)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, list):
        assert isinstance(b, list)
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b


# -- JSON ---------------------------------------------------------------------------------------


@given(ledger_json_values(max_leaves=20))
def test_json_round_trips_exactly(value: JsonValue) -> None:
    text = encode_json(value, "v").unwrap()
    assert same(decode_json(text), value)
    assert check_json(value, "v") == Success(value)


def test_json_keeps_int_float_and_negative_zero_apart() -> None:
    for value in (1, 1.0, -0.0, True, 2**70, {"b": 1, "a": 2}):
        assert same(decode_json(encode_json(value, "v").unwrap()), value)


def _deep(levels: int) -> JsonValue:
    value: JsonValue = 0
    for _ in range(levels):
        value = [value]
    return value


class _Text(str):
    pass


@pytest.mark.parametrize(
    ("value", "field"),
    [
        (float("nan"), "v"),
        (float("inf"), "v"),
        ([1, -float("inf")], "v[1]"),
        ((1, 2), "v"),
        ({"a": (1,)}, "v['a']"),
        ({1, 2}, "v"),
        (b"bytes", "v"),
        ({1: "int key"}, "v"),
        ({"a": {2: 0}}, "v['a']"),
        ("\ud800", "v"),
        ({"k": ["ok", "x\udfff"]}, "v['k'][1]"),
        ({"\ud83d": 1}, "v"),
        (_Text("sub"), "v"),
        (object(), "v"),
    ],
)
def test_json_refuses_what_would_not_round_trip(value: object, field: str) -> None:
    result = encode_json(value, "v")
    assert isinstance(result, Failure)
    assert result.failure().field == field
    assert isinstance(check_json(value, "v"), Failure)


def test_json_refuses_an_int_too_long_for_its_text() -> None:
    assert refused_field(encode_json({"n": [10**5000]}, "v")) == "v"


def test_json_depth_is_a_parameter() -> None:
    assert isinstance(encode_json(_deep(MAX_JSON_DEPTH), "v"), Success)
    assert isinstance(encode_json(_deep(MAX_JSON_DEPTH + 1), "v"), Failure)
    assert isinstance(encode_json(_deep(10), "v", max_depth=10), Success)
    assert isinstance(encode_json(_deep(11), "v", max_depth=10), Failure)


def test_json_refuses_a_cycle_instead_of_looping() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    assert isinstance(encode_json(cycle, "v"), Failure)


def test_json_size_limit_counts_utf8_bytes() -> None:
    assert encode_json("é" * 10, "v", max_bytes=22) == Success('"' + "é" * 10 + '"')
    assert refused_field(encode_json("é" * 10, "v", max_bytes=21)) == "v"


# -- text ---------------------------------------------------------------------------------------


@given(st.text(max_size=30))
def test_text_accepts_exactly_what_its_policy_allows(text: str) -> None:
    result = check_text(text, "f", max_chars=20)
    ok = bool(text) and len(text) <= 20 and "\x00" not in text
    assert result == (Success(text) if ok else result)
    assert isinstance(result, Success) == ok
    assert (text_problem(text, "f", max_chars=20) is None) == ok
    if not ok:
        assert refused_field(result) == "f"


def test_text_policy_parameters() -> None:
    assert check_text("", "f", max_chars=5, allow_empty=True) == Success("")
    assert isinstance(check_text("", "f", max_chars=5), Failure)
    assert check_text("a\x00b", "f", max_chars=None, allow_nul=True) == Success("a\x00b")
    assert isinstance(check_text("a\x00b", "f", max_chars=None), Failure)
    assert check_text("x" * 10_000, "f", max_chars=None) == Success("x" * 10_000)
    assert isinstance(check_text("abcdef", "f", max_chars=5), Failure)
    for bad in ("a\ud800", "\udfff", 5, None, b"x"):
        result = check_text(bad, "f", max_chars=None, allow_nul=True, allow_empty=True)
        assert refused_field(result) == "f"


@given(st.text(max_size=30))
def test_text_with_replaced_surrogates_keeps_every_other_character(text: str) -> None:
    checked = check_text(text, "f", max_chars=None, allow_empty=True, replace_surrogates=True)
    if "\x00" in text:
        assert refused_field(checked) == "f"
        return
    kept = checked.unwrap()
    assert len(kept) == len(text)
    assert len(kept.encode("utf-8")) >= len(kept)  # storable as UTF-8
    for before, after in zip(text, kept, strict=True):
        assert after == ("\ufffd" if "\ud800" <= before <= "\udfff" else before)
    problem = text_problem(text, "f", max_chars=None, allow_empty=True, replace_surrogates=True)
    assert problem is None


def test_replaced_surrogates_follow_the_rest_of_the_policy() -> None:
    assert check_text("a\ud800b", "f", max_chars=3, replace_surrogates=True) == Success("a\ufffdb")
    with_nul = check_text("\udfff\x00", "f", max_chars=4, allow_nul=True, replace_surrogates=True)
    assert with_nul == Success("\ufffd\x00")
    assert refused_field(check_text("a\ud800bc", "f", max_chars=3, replace_surrogates=True)) == "f"
    assert refused_field(check_text("", "f", max_chars=3, replace_surrogates=True)) == "f"
    plain = check_text(_Text("\ud800"), "f", max_chars=3, replace_surrogates=True).unwrap()
    assert type(plain) is str
    assert plain == "\ufffd"


def test_text_returns_a_plain_str_for_a_subclass() -> None:
    checked = check_text(_Text("abc"), "f", max_chars=5).unwrap()
    assert type(checked) is str
    assert checked == "abc"


# -- numbers, time, composition -----------------------------------------------------------------


@given(st.integers(min_value=-(2**70), max_value=2**70))
def test_int_range(value: int) -> None:
    result = check_int(value, "n", minimum=-5, maximum=2**63 - 1)
    assert (result == Success(value)) == (-5 <= value <= 2**63 - 1)
    assert isinstance(check_int(value, "n", minimum=0, maximum=None), Success) == (value >= 0)
    assert isinstance(check_int(True, "n"), Failure)
    assert isinstance(check_int(1.0, "n"), Failure)


@given(
    st.datetimes(
        min_value=datetime(1970, 1, 1),
        max_value=datetime(9999, 12, 31, 23, 59, 59, 999_999),
        timezones=st.just(UTC),
    ),
    st.integers(min_value=-14 * 60, max_value=14 * 60),
)
def test_epoch_ms_of_aware_datetimes_floors_to_the_millisecond(
    moment: datetime, offset_minutes: int
) -> None:
    local = moment.astimezone(timezone(timedelta(minutes=offset_minutes)))
    ms = to_epoch_ms(local, "at").unwrap()
    assert _EPOCH + timedelta(milliseconds=ms) <= moment < _EPOCH + timedelta(milliseconds=ms + 1)
    assert to_epoch_ms(ms, "at") == Success(ms)


@given(st.integers(min_value=-(2**64), max_value=2**64))
def test_epoch_ms_ints_are_range_checked(ms: int) -> None:
    result = to_epoch_ms(ms, "at")
    assert (result == Success(ms)) == (0 <= ms <= MAX_EPOCH_MS)
    wide = to_epoch_ms(ms, "at", minimum=-(2**53) + 1, maximum=2**53 - 1)
    assert (wide == Success(ms)) == (abs(ms) < 2**53)


@pytest.mark.parametrize("bad", [datetime(2024, 1, 1), True, 1.5, "2024-01-01", None])
def test_epoch_ms_refuses_naive_datetimes_and_other_types(bad: object) -> None:
    assert refused_field(to_epoch_ms(bad, "at")) == "at"


def test_epoch_ms_refuses_datetimes_before_the_minimum() -> None:
    assert isinstance(to_epoch_ms(datetime(1969, 12, 31, tzinfo=UTC), "at"), Failure)
    last_ms_of_1969 = datetime(1969, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC)
    assert to_epoch_ms(last_ms_of_1969, "at", minimum=-1) == Success(-1)


def test_validators_compose_in_order_and_name_nested_paths() -> None:
    bad_a = check_text("", "a", max_chars=5)
    bad_b = check_int("x", "b")
    assert first_failure(Success(1), bad_a, bad_b) == bad_a
    assert first_failure(Success(1), Success("x")) == Success(None)
    assert within("messages[3]", check_text("", "content", max_chars=5)) == Failure(
        InvalidInput("messages[3].content", "must not be empty")
    )
    assert within("m", Success(1)) == Success(1)
    text_check = lambda v, f: check_text(v, f, max_chars=3)  # noqa: E731
    assert check_optional(None, "o", text_check) == Success(None)
    assert refused_field(check_optional("abcd", "o", text_check)) == "o"


# -- cursors ------------------------------------------------------------------------------------

kinds = st.from_regex(r"[a-z][a-z0-9_]{0,15}", fullmatch=True)
int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@given(kinds, st.integers(min_value=1, max_value=4), st.data())
def test_cursor_round_trips(kind: str, arity: int, data: st.DataObject) -> None:
    codec = CursorCodec(kind, arity)
    keys = tuple(data.draw(int64) for _ in range(arity))
    assert codec.decode(codec.encode(*keys)) == Success(keys)
    assert codec.decode(None) == Success(None)


@given(kinds, kinds, int64)
def test_a_cursor_of_another_listing_is_refused(kind: str, other: str, key: int) -> None:
    assume(kind != other)
    cursor = CursorCodec(other).encode(key)
    assert CursorCodec(kind).decode(cursor) == Failure(
        InvalidInput("cursor", f"not a cursor of this listing ({kind})")
    )
    assert isinstance(CursorCodec(other, 2).decode(cursor), Failure)


@given(int64, int64, st.data())
def test_an_edited_cursor_is_refused(first: int, second: int, data: st.DataObject) -> None:
    codec = CursorCodec("runs", 2)
    cursor = codec.encode(first, second)
    index = data.draw(st.integers(min_value=0, max_value=len(cursor) - 1))
    replacement = data.draw(st.characters(codec="ascii").filter(lambda c: c != cursor[index]))
    edited = cursor[:index] + replacement + cursor[index + 1 :]
    assert isinstance(codec.decode(edited), Failure)
    assert isinstance(codec.decode(cursor[:index] + cursor[index + 1 :]), Failure)


@given(st.text(max_size=40))
def test_arbitrary_text_is_not_a_cursor(text: str) -> None:
    assert isinstance(CursorCodec("executions").decode(text), Failure)


def test_non_canonical_keys_and_other_types_are_refused() -> None:
    codec = CursorCodec("exe")
    valid = codec.encode(7)
    check = valid.rsplit(".", 1)[1]
    for spelling in ("+7", "07", " 7", "7_0", "\u0667"):  # the last: ARABIC-INDIC DIGIT SEVEN
        assert isinstance(codec.decode(f"exe.1.{spelling}.{check}"), Failure)
    for bad in (7, b"exe.1.7", valid + " ", "x" * 1000):
        assert isinstance(codec.decode(bad, "after"), Failure)
    assert refused_field(codec.decode(5)) == "cursor"
    assert refused_field(codec.decode(5, "after")) == "after"


def test_the_codec_refuses_programmer_errors() -> None:
    with pytest.raises(ValueError, match="cursor kind"):
        CursorCodec("Bad kind")
    with pytest.raises(ValueError, match="arity"):
        CursorCodec("ok", 0)
    with pytest.raises(ValueError, match="int64 keys"):
        CursorCodec("ok").encode(1, 2)
    with pytest.raises(ValueError, match="int64 keys"):
        CursorCodec("ok").encode(2**63)


def test_page_of_keeps_limit_rows_and_points_after_the_last() -> None:
    codec = CursorCodec("n")
    assert page_of([1, 2, 3], 2, codec.encode) == Page((1, 2), True, codec.encode(2))
    assert page_of([1, 2], 2, codec.encode) == Page((1, 2), False, None)
    assert page_of([], 2, codec.encode) == Page((), False, None)


def test_and_then_runs_the_unit_only_on_checked_input() -> None:
    ran: list[int] = []

    def unit(value: int) -> Success[int]:
        ran.append(value)
        return Success(value * 2)

    assert and_then(check_int(3, "n"), unit) == Success(6)
    refused = check_int("x", "n")
    assert and_then(refused, unit) == refused
    assert ran == [3]
