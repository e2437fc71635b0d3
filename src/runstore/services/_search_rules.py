"""The search rules every layer shares (see :mod:`runstore.services.search` for the contract).

Pure functions: the tokenizer, the query parser, the document texts, what a query matches,
the in-memory score, the snippet, the FTS5 and PostgreSQL forms of a parsed query, and the
cursors of the three listings. Nothing here touches storage.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import attrs
from returns.result import Failure, Result, Success

from runstore.services._primitives import (
    check_text,
    first_failure,
    named_error,
    type_problem,
)
from runstore.services.errors import InvalidInput
from runstore.services.pagination import CursorCodec, Page, check_limit, page_of
from runstore.services.search import (
    ENTRY_TEXT_KEYS,
    MAX_QUERY_CHARS,
    MAX_TERM_CHARS,
    MAX_TERMS,
    SNIPPET_CHARS,
    EntryHit,
    FailureHit,
    SearchTerm,
    TestHit,
)

__all__ = [
    "ENTRY_CURSOR",
    "FAILURE_CURSOR",
    "TEST_CURSOR",
    "SearchQuery",
    "bm25_scores",
    "check_search_request",
    "document_tokens",
    "entry_text",
    "failure_text",
    "float_of_key",
    "fts5_match",
    "key_of_float",
    "make_snippet",
    "matches",
    "parse_query",
    "postgres_terms",
    "search_page",
    "tokens",
]

T = TypeVar("T")
H = TypeVar("H")

_TOKEN = re.compile("[0-9A-Za-z\u0080-\ufdcf\ufdd1-\U0010ffff]+")
"""A token (see the module doc of ``runstore.services.search``): FTS5's ``ascii`` token
characters, except U+FDD0, which PostgreSQL's layer uses to escape NUL."""

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")

FAILURE_CURSOR = CursorCodec("search_failures", 3)
"""Cursor of ``search_failures``: (score key, run id, row id)."""

TEST_CURSOR = CursorCodec("search_tests", 2)
"""Cursor of ``search_tests``: (score key, row id)."""

ENTRY_CURSOR = CursorCodec("search_entries", 3)
"""Cursor of the sessions' ``search``: (score key, session key, seq)."""


@attrs.frozen
class SearchQuery:
    """A parsed query: its distinct terms in the order written."""

    terms: tuple[SearchTerm, ...]


def fold(token: str) -> str:
    """``token`` with ASCII letters in lower case (other characters as they are)."""
    return token.translate(_ASCII_LOWER)


def tokens(text: str) -> list[tuple[int, int, str]]:
    """Every token of ``text`` as ``(start, end, folded token)``, in order."""
    return [(m.start(), m.end(), fold(m.group())) for m in _TOKEN.finditer(text)]


def document_tokens(text: str) -> frozenset[str]:
    """The distinct tokens of a document's text."""
    return frozenset(fold(m.group()) for m in _TOKEN.finditer(text))


def parse_query(text: object, field: str = "text") -> Result[SearchQuery, InvalidInput]:
    """Parse query text into its terms (see ``runstore.services.search``).

    ``InvalidInput(field, ...)`` for a non-``str``, text longer than ``MAX_QUERY_CHARS``,
    a lone surrogate, no term at all, or more than ``MAX_TERMS`` distinct terms.
    """
    checked = check_text(text, field, max_chars=MAX_QUERY_CHARS, allow_empty=True,
                         allow_nul=True)
    if isinstance(checked, Failure):
        return Failure(checked.failure())
    raw = checked.unwrap()
    terms: dict[SearchTerm, None] = {}
    for match in _TOKEN.finditer(raw):
        token = fold(match.group())
        prefix = raw.startswith("*", match.end()) or len(token) >= MAX_TERM_CHARS
        terms[SearchTerm(token[:MAX_TERM_CHARS], prefix)] = None
    if not terms:
        return Failure(InvalidInput(field, "holds no word to search for"))
    if len(terms) > MAX_TERMS:
        return Failure(InvalidInput(field, f"has {len(terms)} terms, at most {MAX_TERMS}"))
    return Success(SearchQuery(tuple(terms)))


def check_search_request(
    text: object, limit: object, cursor: object, codec: CursorCodec, **scopes: object
) -> Result[tuple[SearchQuery, tuple[int, ...] | None], InvalidInput]:
    """Check a search call's arguments, in order: ``text``, each scope (``str`` or None:
    a project, a cwd), ``limit``, ``cursor``; return the query and the decoded position."""
    query = parse_query(text)
    problems: list[Result[object, InvalidInput]] = [query]
    for name, value in scopes.items():
        problem = type_problem(value, name, (str, None))
        if problem is None and value is not None:
            problems.append(check_text(value, name, max_chars=None, allow_empty=True,
                                       allow_nul=True))
        elif problem is not None:
            problems.append(Failure(problem))
    size = check_limit(limit)  # type: ignore[arg-type]  # it checks the type too
    position = codec.decode(cursor)
    checked = first_failure(*problems, size, position)
    if isinstance(checked, Failure):
        return Failure(checked.failure())
    return Success((query.unwrap(), position.unwrap()))


def _term_matches(term: SearchTerm, held: frozenset[str]) -> bool:
    if term.prefix:
        return any(token.startswith(term.token) for token in held)
    return term.token in held


def matches(query: SearchQuery, held: frozenset[str]) -> bool:
    """Whether a document holding the tokens ``held`` matches every term of ``query``."""
    return all(_term_matches(term, held) for term in query.terms)


def _hits(term: SearchTerm, token: str) -> bool:
    return token.startswith(term.token) if term.prefix else token == term.token


def bm25_scores(query: SearchQuery, documents: Sequence[str]) -> list[float]:
    """The BM25 score of each of ``documents`` for ``query`` over that set of documents, as
    SQLite's FTS5 ``bm25()`` computes it (k1 = 1.2, b = 0.75, an IDF of at least 1e-6;
    https://sqlite.org/fts5.html#the_bm25_function), negated so that higher is better."""
    k1, b = 1.2, 0.75
    counted = [
        [fold(m.group()) for m in _TOKEN.finditer(d)] for d in documents
    ]
    total = len(counted)
    average = (sum(len(c) for c in counted) / total) if total else 0.0
    idf: list[float] = []
    for term in query.terms:
        holding = sum(1 for c in counted if any(_hits(term, t) for t in c))
        value = math.log((total - holding + 0.5) / (holding + 0.5))
        idf.append(value if value > 0 else 1e-6)
    scores: list[float] = []
    for c in counted:
        score = 0.0
        for weight, term in zip(idf, query.terms, strict=True):
            frequency = sum(1 for t in c if _hits(term, t))
            norm = 1 - b + b * (len(c) / average if average else 0.0)
            score += weight * frequency * (k1 + 1) / (frequency + k1 * norm)
        scores.append(score)
    return scores


def failure_text(exception_type: str, message: str) -> str:
    """The searched text of a failure: ``"<exception type>: <message>"`` (as the SQLite and
    PostgreSQL indexes hold it, even when the message already starts with the type; a hit's
    snippet names the type once, :func:`~runstore.services._primitives.named_error`)."""
    return f"{exception_type}: {message}"


def entry_text(payload: Mapping[str, Any]) -> str:
    """The searched text of a session entry: the string members named one of
    ``ENTRY_TEXT_KEYS`` anywhere in ``payload``, in document order, joined by spaces (the
    rule migration 0012's triggers apply to the stored JSON body)."""
    found: list[str] = []
    wanted = frozenset(ENTRY_TEXT_KEYS)

    def walk(value: object, key: object) -> None:
        if isinstance(value, str):
            if key in wanted:
                found.append(value)
        elif isinstance(value, Mapping):
            for name, member in value.items():
                walk(member, name)
        elif isinstance(value, list | tuple):
            for member in value:
                walk(member, None)

    walk(payload, None)
    return " ".join(found)


def entry_text_of_body(body: str) -> str:
    """:func:`entry_text` of a stored JSON body."""
    payload = json.loads(body)
    return entry_text(payload) if isinstance(payload, dict) else ""


def make_snippet(text: str, query: SearchQuery) -> tuple[str, tuple[tuple[int, int], ...]]:
    """The snippet of ``text`` for ``query`` and the offsets of its matching tokens (see
    ``runstore.services.search``): ``SNIPPET_CHARS`` characters from a little before the
    first matching token (from the start when none is found), ``…`` where cut."""
    found = [
        (start, end)
        for start, end, token in tokens(text)
        if any(_hits(term, token) for term in query.terms)
    ]
    first = found[0][0] if found else 0
    begin = max(0, first - SNIPPET_CHARS // 4)
    stop = min(len(text), begin + SNIPPET_CHARS)
    begin = max(0, min(begin, stop - SNIPPET_CHARS))
    lead = "…" if begin > 0 else ""
    tail = "…" if stop < len(text) else ""
    shown = lead + re.sub(r"[\r\n\t]", " ", text[begin:stop]) + tail
    shift = len(lead) - begin
    marks = tuple(
        (max(start, begin) + shift, min(end, stop) + shift)
        for start, end in found
        if start < stop and end > begin
    )
    return shown, marks


def fts5_match(query: SearchQuery) -> str:
    """The FTS5 ``MATCH`` expression of ``query``: each term a quoted string (a token holds
    no ``"``), prefix terms followed by ``*``, joined by spaces (FTS5's implicit AND)."""
    return " ".join(f'"{t.token}"' + (" *" if t.prefix else "") for t in query.terms)


def postgres_terms(query: SearchQuery) -> tuple[list[str], list[str]]:
    """The exact and the prefix terms of ``query``, as PostgreSQL's array parameters."""
    return (
        [t.token for t in query.terms if not t.prefix],
        [t.token for t in query.terms if t.prefix],
    )


_FLOAT = struct.Struct(">d")
_INT = struct.Struct(">q")


def key_of_float(value: float) -> int:
    """An int64 that orders as ``value`` does (IEEE 754 bits, negatives flipped), so a
    score fits the integer cursor format exactly."""
    bits: int = _INT.unpack(_FLOAT.pack(value))[0]
    return bits if bits >= 0 else bits ^ 0x7FFF_FFFF_FFFF_FFFF


def float_of_key(key: int) -> float:
    """The score :func:`key_of_float` made ``key`` of."""
    bits = key if key >= 0 else key ^ 0x7FFF_FFFF_FFFF_FFFF
    value: float = _FLOAT.unpack(_INT.pack(bits))[0]
    return value


def search_page(
    rows: Sequence[T], limit: int, codec: CursorCodec, position: Callable[[T], Iterable[int]]
) -> Page[T]:
    """The page of the first ``limit`` of ``rows`` (fetched as ``limit + 1``), the cursor
    naming the last kept row's ``position`` (score key first)."""
    return page_of(rows, limit, lambda row: codec.encode(*position(row)))


# -- rows a backend finds, and the hits made of them --------------------------------------------


@attrs.frozen
class FailureRow:
    """A failure document a backend found: its score, run, row id (``key``, the layer's
    own), project, node id, whether a collector's, its ordinal, exception type, message."""

    score: float
    run_id: int
    key: int
    project: str
    nodeid: str
    collection_error: bool
    ordinal: int
    exception_type: str
    message: str

    def position(self) -> tuple[int, int, int]:
        """Where this row is in the order: its cursor keys."""
        return (key_of_float(self.score), self.run_id, self.key)


@attrs.frozen
class TestRow:
    """A test document a backend found: its score, row id, project and node id."""

    __test__ = False

    score: float
    key: int
    project: str
    nodeid: str

    def position(self) -> tuple[int, int]:
        """Where this row is in the order: its cursor keys."""
        return (key_of_float(self.score), self.key)


@attrs.frozen
class EntryRow:
    """A session entry a backend found: its score, session key and id, seq, entry id and
    type, timestamp and payload."""

    score: float
    session_key: int
    session_id: str
    seq: int
    entry_id: str
    entry_type: str
    timestamp_ms: int
    payload: Mapping[str, Any]

    def position(self) -> tuple[int, int, int]:
        """Where this row is in the order: its cursor keys."""
        return (key_of_float(self.score), self.session_key, self.seq)


def sort_key(position: Sequence[int]) -> tuple[float, ...]:
    """The ascending sort key of a cursor position: best score first, then newest (higher
    run id or session key and seq), then the lowest row id (the last key of a test)."""
    score = -float_of_key(position[0])
    if len(position) == 2:
        return (score, position[1])
    if len(position) == 3:
        return (score, -position[1], position[2])
    raise ValueError(f"not a search position: {position!r}")


def entry_sort_key(position: Sequence[int]) -> tuple[float, ...]:
    """The ascending sort key of an entry position: best score, then later session, then
    later entry."""
    return (-float_of_key(position[0]), -position[1], -position[2])


def after(
    rows: Iterable[T],
    position: Callable[[T], Sequence[int]],
    start: Sequence[int] | None,
    order: Callable[[Sequence[int]], tuple[float, ...]] = sort_key,
) -> list[T]:
    """``rows`` in the listing's order, only those after the cursor position ``start``
    (all when None): the in-memory layer's keyset step."""
    ordered = sorted(rows, key=lambda row: order(position(row)))
    if start is None:
        return ordered
    bound = order(start)
    return [row for row in ordered if order(position(row)) > bound]


def failure_hit(row: FailureRow, query: SearchQuery) -> FailureHit:
    """The hit of a found failure."""
    shown, marks = make_snippet(named_error(row.exception_type, row.message), query)
    return FailureHit(
        row.run_id, row.project, row.nodeid, row.collection_error, row.ordinal,
        row.exception_type, shown, marks, row.score,
    )


def test_hit(row: TestRow, query: SearchQuery) -> TestHit:
    """The hit of a found test."""
    shown, marks = make_snippet(row.nodeid, query)
    return TestHit(row.project, row.nodeid, shown, marks, row.score)


def entry_hit(row: EntryRow, query: SearchQuery) -> EntryHit:
    """The hit of a found session entry."""
    shown, marks = make_snippet(entry_text(row.payload), query)
    message = row.payload.get("message")
    role = message.get("role") if isinstance(message, dict) else None
    return EntryHit(
        row.session_id, row.entry_id, row.seq, row.entry_type,
        role if isinstance(role, str) else None, row.timestamp_ms, shown, marks, row.score,
    )


def hits_page(
    rows: Sequence[T],
    limit: int,
    codec: CursorCodec,
    position: Callable[[T], Iterable[int]],
    hit: Callable[[T, SearchQuery], H],
    query: SearchQuery,
) -> Page[H]:
    """The page of hits of ``rows`` (fetched as ``limit + 1`` in the listing's order)."""
    page = search_page(rows, limit, codec, position)
    return Page(tuple(hit(row, query) for row in page.items), page.has_more, page.next_cursor)


def memory_key(*parts: str) -> int:
    """A stable row id for a document of the in-memory layer, which has no row ids: the
    first 7 bytes of the BLAKE2b hash of ``parts`` (a tie-break only)."""
    digest = hashlib.blake2b("\x00".join(parts).encode("utf-8", "surrogatepass"),
                             digest_size=7).digest()
    return int.from_bytes(digest, "big")


def entry_type_of(entry: object) -> str:
    """The stored type name of a session entry record (its class's, or an unknown one's)."""
    kind = getattr(entry, "type", None)
    if not isinstance(kind, str):
        raise TypeError(f"not a session entry: {type(entry).__name__}")
    return kind
