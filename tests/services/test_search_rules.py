"""The search rules (``runstore.services._search_rules``): tokens, query terms, snippets,
cursor keys, and the entry text rule the migrations repeat in SQL."""

from __future__ import annotations

import math
import re

from hypothesis import given
from hypothesis import strategies as st
from returns.result import Failure, Success

from runstore.migrations import POSTGRESQL_FOLDER, shipped_migrations
from runstore.services._search_rules import (
    SearchQuery,
    entry_text,
    float_of_key,
    fts5_match,
    key_of_float,
    make_snippet,
    parse_query,
    tokens,
)
from runstore.services.errors import InvalidInput
from runstore.services.search import ENTRY_TEXT_KEYS, MAX_TERM_CHARS, SearchTerm


def terms(text: str) -> tuple[SearchTerm, ...]:
    return parse_query(text).unwrap().terms


def test_words_fold_ascii_case_only_and_split_on_ascii_punctuation() -> None:
    assert [t for _, _, t in tokens("Café_CAFÉ x::Y/z.py\x00NUL\ufdd0a-b")] == [
        "café", "cafÉ", "x", "y", "z", "py", "nul", "a", "b"]


def test_a_query_is_its_distinct_terms_with_prefixes() -> None:
    assert terms('Conn* refused CONN* "refused" AND') == (
        SearchTerm("conn", True), SearchTerm("refused"), SearchTerm("and"))
    assert terms("conn *") == (SearchTerm("conn"),)
    long = "a" * 300
    assert terms(long) == (SearchTerm("a" * MAX_TERM_CHARS, True),)
    assert terms("b" * (MAX_TERM_CHARS - 1)) == (SearchTerm("b" * (MAX_TERM_CHARS - 1)),)


def test_query_text_no_search_accepts_is_invalid_input_naming_text() -> None:
    for bad in ("", '"*" -- ;', "x" * 1_001, " ".join(f"w{i}" for i in range(33)), "\ud800a",
                b"conn", None, 3):
        result = parse_query(bad)
        assert isinstance(result, Failure), bad
        assert isinstance(result.failure(), InvalidInput)
        assert result.failure().field == "text"
    assert isinstance(parse_query(" ".join(f"w{i}" for i in range(32))), Success)


@given(st.text(max_size=40))
def test_the_fts5_form_quotes_every_term(text: str) -> None:
    parsed = parse_query(text)
    if isinstance(parsed, Success):
        match = fts5_match(parsed.unwrap())
        assert re.fullmatch(r'"[^" ]+"( \*)?( "[^" ]+"( \*)?)*', match), match


@given(st.floats(allow_nan=False), st.floats(allow_nan=False))
def test_score_keys_order_as_the_scores_and_give_them_back(a: float, b: float) -> None:
    assert float_of_key(key_of_float(a)) == a
    assert math.copysign(1, float_of_key(key_of_float(a))) == math.copysign(1, a)
    if a < b:
        assert key_of_float(a) < key_of_float(b)


@given(st.lists(st.sampled_from(["conn", "Refused", "x", "日本", " ", "\n", "::", "é"]),
                max_size=80), st.sampled_from(["conn", "refus*", "x 日本", "é"]))
def test_every_mark_of_a_snippet_is_a_matching_word(parts: list[str], text: str) -> None:
    document = "".join(parts)
    query: SearchQuery = parse_query(text).unwrap()
    shown, marks = make_snippet(document, query)
    assert len(shown) <= 162
    for start, end in marks:
        assert 0 <= start < end <= len(shown)
        (folded,) = [t for _, _, t in tokens(shown[start:end])]
        clipped = start <= 1 or end >= len(shown) - 1  # cut by the window (and its "…")
        assert clipped or any(
            folded.startswith(t.token) if t.prefix else folded == t.token for t in query.terms
        ), (shown, start, end)
    hit = [s for s, _, w in tokens(document)
           if any(w.startswith(t.token) if t.prefix else w == t.token for t in query.terms)]
    if hit:  # the window starts a little before the first matching word, so it is marked
        assert marks


def test_entry_text_takes_the_named_string_members_in_document_order() -> None:
    payload = {"message": {"role": "user", "content": [
        {"type": "text", "text": "one"},
        {"type": "toolCall", "name": "bash", "arguments": {"command": "two", "path": 3}},
    ]}, "summary": "three", "label": ["not", "a", "string"], "thinking": "four"}
    assert entry_text(payload) == "one two three four"
    assert entry_text({"content": "five"}) == "five"


def test_both_migrations_name_the_entry_text_keys() -> None:
    for folder in (None, POSTGRESQL_FOLDER):
        shipped = shipped_migrations() if folder is None else shipped_migrations(folder)
        (search,) = [m for m in shipped if m.name == "search"]
        lists = re.findall(r"IN \(('command'[^)]*)\)", search.sql)
        assert lists, folder
        for listed in lists:
            assert tuple(re.findall(r"'(\w+)'", listed)) == ENTRY_TEXT_KEYS, (folder, listed)
