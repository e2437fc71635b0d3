"""Full-text search over failure messages, test names and session entries: the records.

One set of rules (:mod:`runstore.services._search_rules`) decides what every layer does; the
in-memory layer applies them directly, SQLite keeps an FTS5 index (``tokenize='ascii'``) and
PostgreSQL a ``tsvector`` with a GIN index, both filled by triggers of migration 0012 in the
unit of work that writes the rows, so every layer finds the same hits.

**Words (tokens).** A token is a maximal run of ASCII letters and digits and characters
beyond ASCII (U+0080 and above, except the noncharacter U+FDD0); every other ASCII character
(space, punctuation, ``_``, NUL) separates tokens. ASCII letters are folded to lower case;
other characters are kept as they are (``Café`` is ``café``, ``É`` and ``é`` differ). This is
SQLite FTS5's ``ascii`` tokenizer, chosen over ``unicode61`` because PostgreSQL and the
in-memory layer can reproduce it exactly (``unicode61`` folds by its own Unicode 6.1 tables).
The whole text of a document is searched.

**A query** is plain text, tokenized the same way; every token is a term and a document
matches when it holds every term (AND). A term written with ``*`` right after it
(``conn*``) matches any token starting with it. Nothing else is syntax: quotes, ``-``,
``AND``/``OR``/``NOT``, ``NEAR(``, parentheses and SQL are words or separators, never
passed to FTS5 or PostgreSQL as operators. A term of :data:`MAX_TERM_CHARS` characters or
more is cut to that length and matches as a prefix (PostgreSQL keeps that many characters
of a token in its index). Repeated terms count once. A query without a term, longer than
:data:`MAX_QUERY_CHARS` or with more than :data:`MAX_TERMS` terms is ``InvalidInput("text",
...)``.

**Documents.** A *failure* is an error of a failing item's final result (``failed`` or
``error``; not an earlier rerun attempt, a subtest or a cause) or a collection error; its text
is ``"<exception type>: <message>"``. A *test* is a node id of a project. A session *entry*'s
text is every string member named one of :data:`ENTRY_TEXT_KEYS` anywhere in its payload, in
document order, joined by spaces (user, assistant and tool-result message texts, thinking,
tool-call commands and paths, edits, summaries, custom message content, labels).

**Order and pages.** Hits come best first by ``score`` (higher is better), then newest
(failures: higher run id; entries: later session, then later entry), then the layer's row
id. The score is the layer's own: SQLite's FTS5 ``bm25()`` (negated), the same BM25 formula
in memory over its documents, and on PostgreSQL ``1 / (1 + distinct tokens)`` (its index is
a ``text[]`` of each document's distinct tokens, with no statistics to rank by). So every
layer returns the same *set* of hits for a query, each with the same snippet, but scores
and the order among hits may differ between layers. Pages follow
:mod:`runstore.services.pagination`; a cursor is a position in that order (score, newest,
id), so rows written between pages that change BM25's statistics may move a hit across a
page boundary.

**Snippets.** ``snippet`` is at most :data:`SNIPPET_CHARS` characters of the document around
its first matching token (line breaks and tabs shown as spaces, ``…`` where it was cut) and
``marks`` the ``(start, end)`` character offsets in ``snippet`` of every matching token.
"""

from __future__ import annotations

import attrs

__all__ = [
    "ENTRY_TEXT_KEYS",
    "MAX_QUERY_CHARS",
    "MAX_TERMS",
    "MAX_TERM_CHARS",
    "SNIPPET_CHARS",
    "EntryHit",
    "FailureHit",
    "SearchTerm",
    "TestHit",
]

MAX_QUERY_CHARS = 1_000
"""Longest query text (characters)."""

MAX_TERMS = 32
"""Most distinct terms in a query."""

MAX_TERM_CHARS = 255
"""Longest exact term; a longer one is cut to this length and matches as a prefix.
PostgreSQL's index keeps the first 255 characters of each token (a GIN index entry holds
about 2.7 kB: 255 characters of 4 bytes fit)."""

SNIPPET_CHARS = 160
"""Longest snippet (characters, without the ``…`` marks)."""

ENTRY_TEXT_KEYS = (
    "command",
    "content",
    "errorMessage",
    "label",
    "newText",
    "oldText",
    "path",
    "summary",
    "text",
    "thinking",
)
"""Names of the payload members whose string values make a session entry's text (seed 004's
message shapes: ``text`` parts of user, assistant and tool-result messages, ``thinking``,
tool-call ``arguments`` such as ``command``, ``path``, ``oldText`` and ``newText``,
``content`` when a string, ``summary`` of compactions and branch summaries, labels, errors)."""


@attrs.frozen
class SearchTerm:
    """One term of a query: a token, and whether it matches as a prefix."""

    token: str
    prefix: bool = False


@attrs.frozen
class FailureHit:
    """A failure that matched: run ``run_id`` of ``project``, item (or collector, when
    ``collection_error``) ``nodeid``, the error's position ``ordinal`` among the item's
    errors (0 for the first), its ``exception_type``, the ``snippet`` of its text with the
    matching tokens at ``marks``, and the layer's ``score`` (higher is better)."""

    run_id: int
    project: str
    nodeid: str
    collection_error: bool
    ordinal: int
    exception_type: str
    snippet: str
    marks: tuple[tuple[int, int], ...]
    score: float


@attrs.frozen
class TestHit:
    """A test whose node id matched, in ``project``, with the ``snippet`` of the node id,
    the matching tokens at ``marks`` and the layer's ``score`` (higher is better)."""

    __test__ = False

    project: str
    nodeid: str
    snippet: str
    marks: tuple[tuple[int, int], ...]
    score: float


@attrs.frozen
class EntryHit:
    """A session entry that matched: entry ``entry_id`` (log position ``seq``, of
    ``entry_type``; ``role`` for a message entry, else None) of session ``session_id``,
    written at ``timestamp_ms`` (epoch ms UTC), with the ``snippet`` of its text, the
    matching tokens at ``marks`` and the layer's ``score`` (higher is better)."""

    session_id: str
    entry_id: str
    seq: int
    entry_type: str
    role: str | None
    timestamp_ms: int
    snippet: str
    marks: tuple[tuple[int, int], ...]
    score: float
