"""The contract every layer's search must meet (``runstore.services.search``), shipped.

:class:`SearchContract` writes the same corpus of failures, test names and session entries
through the public services into the layer under test and into the in-memory layer (the
model), then checks, over hypothesis-made corpora and queries:

- the layer finds exactly the documents the rules say match (every hit holds every term as
  a token; every stored text holding all terms is found), the same set as the model, with
  the same snippets and marks, whatever the scores;
- walking every page returns that set once, in order of score (best first);
- query text of any kind (quotes, ``*``, ``AND``, ``NEAR(``, ``-``, SQL, control characters)
  is a ``Success`` or ``InvalidInput("text")``, alike on both, never a storage error;
- the index follows its rows: a re-recorded item, pruned runs, a deleted session and a
  refused write leave no stale or extra hit.

Subclass and define :meth:`make_layer` (or override the ``layer_factory`` fixture); the layer
must provide the test-run services and ``SessionRepository`` on a fresh, empty store.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, TypeVar

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from returns.result import Failure, Result, Success

from runstore.layers import (
    DATA_READER,
    DATA_STORE,
    SESSION_REPOSITORY,
    Container,
    Layer,
    build,
    in_memory,
    merge,
)
from runstore.services._search_rules import (
    SearchQuery,
    document_tokens,
    entry_text,
    failure_text,
    matches,
    parse_query,
)
from runstore.services.clock import Clock, FixedClock
from runstore.services.errors import InvalidInput
from runstore.services.pagination import Page
from runstore.services.search import EntryHit, FailureHit, TestHit
from runstore.services.sessions import NewEntry, NewSession
from runstore.services.test_runs import (
    ErrorInfo,
    Outcome,
    Phase,
    PhaseResult,
    RunRetentionPolicy,
    RunStart,
    RunStatus,
    TestResult,
)
from runstore.testing._shared import LayerFactory

__all__ = ["SearchContract", "search_corpora", "search_queries"]

H = TypeVar("H", FailureHit, TestHit, EntryHit)

T0 = datetime(2026, 3, 1, tzinfo=UTC)

_WORDS = (
    "Timeout", "timeout", "TIMEOUT", "conn", "connection", "connect", "refused", "café",
    "Café", "CAFÉ", "naïve", "日本語", "x", "42", "4242", "and", "or", "not", "near",
    "select", "drop", "assert", "AssertionError", "KeyError", "ab" * 140, "ab" * 128 + "z",
)
"""Words of the corpora: case variants, prefixes of each other, non-ASCII, FTS5 and SQL
keywords, and tokens around the 255-character cut."""

_SEPARATORS = (" ", "_", "::", "/", ".", "\n", "\t", "-", '"', "'", "(", ")", "*", "\ufdd0",
               "\\", "%", ";", "[", "]")
_MESSAGE_SEPARATORS = (*_SEPARATORS, "\x00", "\\u0000")


def _texts(separators: Sequence[str], max_words: int = 6) -> st.SearchStrategy[str]:
    parts = st.lists(
        st.tuples(st.sampled_from(_WORDS), st.sampled_from(separators)),
        min_size=1, max_size=max_words,
    )
    return parts.map(lambda pairs: "".join(word + sep for word, sep in pairs))


@attrs.frozen
class Corpus:
    """What a contract example writes: failing items' messages per run, passing items'
    node ids, and session entry texts."""

    failures: tuple[tuple[str, str], ...]
    """(node id, message) of failing items, one run each, all in project ``p``."""
    passing: tuple[str, ...]
    """Node ids of passing items of the first run."""
    entries: tuple[str, ...]
    """Texts of user messages, in one session."""


def search_corpora() -> st.SearchStrategy[Corpus]:
    """Corpora of a few documents of each kind."""
    node = _texts(_SEPARATORS, 4).map(lambda t: "tests/test_" + t.replace("\ufdd0", "_"))
    failures = st.lists(st.tuples(node, _texts(_MESSAGE_SEPARATORS)), min_size=1, max_size=4)
    passing = st.lists(node, max_size=3)
    entries = st.lists(_texts(_MESSAGE_SEPARATORS), max_size=4)
    return st.builds(
        Corpus, failures.map(tuple), passing.map(tuple), entries.map(tuple)
    )


_ADVERSARIAL = (
    '"', '""', '"unterminated', "*", "**", "conn**", "-conn", "NOT conn", "conn AND", "OR",
    "NEAR(conn refused)", "NEAR(", "conn:*", "'; DROP TABLE tests; --", "%", "\\", "^conn",
    "{conn}", "col:conn", "conn + refused", "(", ")", "\x00", "\ufdd0", "'", "&", "|", "!",
    ":*", "a" * 300, "timeout*" * 40,
)


def search_queries() -> st.SearchStrategy[str]:
    """Query texts: words of the corpora (some as prefixes), adversarial syntax, any text."""
    worded = st.lists(
        st.tuples(st.sampled_from(_WORDS), st.sampled_from(("", "*", " ", '"', "-"))),
        min_size=1, max_size=3,
    ).map(lambda pairs: " ".join(w + s for w, s in pairs))
    truncated = st.sampled_from(_WORDS).map(lambda w: w[: max(1, len(w) // 2)] + "*")
    return st.one_of(
        worded, truncated, st.sampled_from(_ADVERSARIAL),
        st.text(st.characters(exclude_categories=["Cs"]), max_size=20),
    )


def _open(stack: ExitStack, factory: LayerFactory) -> Container:
    return stack.enter_context(build(merge(factory(), Layer.value(Clock, FixedClock(0)))))


def _write(container: Container, corpus: Corpus) -> None:
    """Write ``corpus`` through the public services (each failure in a run of its own)."""
    store = container.get(DATA_STORE)
    for index, (nodeid, message) in enumerate(corpus.failures):
        run = store.begin_run(RunStart("p", f"inv-{index}", T0 + timedelta(minutes=index)))
        run_id = run.unwrap()
        items = [
            TestResult(
                nodeid, "tests/test_a.py", "test_a",
                (PhaseResult(Phase.CALL, Outcome.FAILED, 1.0),),
                errors=(ErrorInfo(Phase.CALL, "AssertionError", message),),
            )
        ]
        if index == 0:
            items += [
                TestResult(n, "tests/test_a.py", "test_b",
                           (PhaseResult(Phase.CALL, Outcome.PASSED, 1.0),))
                for n in corpus.passing if n != nodeid
            ]
        store.record_results(run_id, items).unwrap()
        store.finish_run(run_id, RunStatus.FAILED, T0 + timedelta(minutes=index, seconds=1))
    if corpus.entries:
        sessions = container.get(SESSION_REPOSITORY)
        sessions.create(NewSession(id="s", cwd="/w", created=T0)).unwrap()
        session = sessions.open("s").unwrap()
        parent: str | None = None
        for index, text in enumerate(corpus.entries):
            entry_id = f"e{index}"
            session.append(NewEntry.message(
                entry_id, parent, {"role": "user", "content": [{"type": "text", "text": text}]},
                timestamp=T0,
            )).unwrap()
            parent = entry_id


def _walk(call: Any, text: str, limit: int) -> Result[list[Any], Any]:
    """Every hit of every page of ``call(text, limit=..., cursor=...)``."""
    found: list[Any] = []
    cursor: str | None = None
    for _ in range(1_000):
        result = call(text, limit=limit, cursor=cursor)
        if isinstance(result, Failure):
            return Failure(result.failure())
        page: Page[Any] = result.unwrap()
        found.extend(page.items)
        if not page.has_more:
            return Success(found)
        cursor = page.next_cursor
    raise AssertionError("pages never ended")


def _unscored(hits: Sequence[H]) -> list[H]:
    return sorted((attrs.evolve(h, score=0.0) for h in hits), key=repr)


def _expected(corpus: Corpus, query: SearchQuery) -> tuple[list[str], list[str], list[str]]:
    """The node ids of failures, node ids of tests and entry texts the rules say match."""
    failing = [
        n for n, m in corpus.failures
        if matches(query, document_tokens(failure_text("AssertionError", m)))
    ]
    tests = [n for n in {*(f for f, _ in corpus.failures), *corpus.passing}
             if matches(query, document_tokens(n))]
    entries = [t for t in corpus.entries if matches(query, document_tokens(t))]
    return sorted(failing), sorted(tests), sorted(entries)


def _failures(container: Container) -> Any:
    return container.get(DATA_READER).search_failures


def _tests(container: Container) -> Any:
    return container.get(DATA_READER).search_tests


def _sessions(container: Container) -> Any:
    return container.get(SESSION_REPOSITORY).search


_SEARCHES = (_failures, _tests, _sessions)
"""The three searches, each as the bound method of a container's service."""


class SearchContract:
    """What every layer's search must do; subclass and define :meth:`make_layer`."""

    search_settings: ClassVar[settings] = settings(
        max_examples=30, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    """Settings of the property tests (a subclass lowers ``max_examples`` for a slow store)."""

    def make_layer(self) -> Layer:
        """Return a fresh layer providing the test-run and session services."""
        raise NotImplementedError("subclass SearchContract and define make_layer")

    @pytest.fixture
    def layer_factory(self) -> LayerFactory:
        """The factory under test (``make_layer`` unless a subclass overrides this fixture)."""
        return self.make_layer

    @pytest.fixture
    def opened(self, layer_factory: LayerFactory) -> Iterator[Container]:
        """A container of a fresh layer under test."""
        with ExitStack() as stack:
            yield _open(stack, layer_factory)

    # -- properties ----------------------------------------------------------------------------

    def test_every_layer_finds_what_the_rules_match(self, layer_factory: LayerFactory) -> None:
        """Per corpus and query: the hits are exactly the documents holding every term, as
        the model finds them, with the same snippets; pages of 2 walk the same set once."""

        @self.search_settings
        @given(corpus=search_corpora(), texts=st.lists(search_queries(), min_size=1, max_size=4))
        def check(corpus: Corpus, texts: list[str]) -> None:
            with ExitStack() as stack:
                sut = _open(stack, layer_factory)
                model = _open(stack, in_memory)
                _write(sut, corpus)
                _write(model, corpus)
                for text in texts:
                    self._compare(sut, model, corpus, text)

        check()

    def _compare(self, sut: Container, model: Container, corpus: Corpus, text: str) -> None:
        parsed = parse_query(text)
        walked = [
            (_walk(call(sut), text, 2), _walk(call(model), text, 1_000)) for call in _SEARCHES
        ]
        if isinstance(parsed, Failure):
            for got, wanted in walked:
                assert got == wanted == Failure(parsed.failure()), (text, got)
                assert isinstance(parsed.failure(), InvalidInput)
                assert parsed.failure().field == "text"
            return
        query = parsed.unwrap()
        failures, tests, entries = _expected(corpus, query)
        for (got, wanted), expected, name in zip(
            walked, (failures, tests, entries), ("failures", "tests", "entries"), strict=True
        ):
            assert isinstance(got, Success), (text, name, got)
            hits, model_hits = got.unwrap(), wanted.unwrap()
            assert _unscored(hits) == _unscored(model_hits), (text, name)
            assert len(hits) == len(set(map(repr, _unscored(hits)))), (text, name, "repeated")
            scores = [h.score for h in hits]
            assert scores == sorted(scores, reverse=True), (text, name, scores)
            if name == "entries":
                found = sorted(entry_text(e.payload) for e in self._entries(sut, hits))
            else:
                found = sorted(h.nodeid for h in hits)
            assert found == expected, (text, name, found, expected)
            for hit in hits:
                assert hit.marks, (text, name, hit)
                for start, end in hit.marks:
                    assert 0 <= start < end <= len(hit.snippet)

    def _entries(self, container: Container, hits: Sequence[Any]) -> list[Any]:
        if not hits:
            return []
        session = container.get(SESSION_REPOSITORY).open("s").unwrap()
        return [session.entry(h.entry_id).unwrap() for h in hits]

    def test_query_text_is_plain_text_or_invalid_input(self, opened: Container) -> None:
        """Adversarial query text never reaches FTS5 or PostgreSQL as syntax."""
        _write(opened, Corpus((("tests/test_a.py::test_conn", "conn refused AND NEAR"),),
                              (), ("select * from tests",)))

        def one(text: str) -> None:
            for result in (
                opened.get(DATA_READER).search_failures(text),
                opened.get(DATA_READER).search_tests(text, project="p"),
                opened.get(SESSION_REPOSITORY).search(text, cwd="/w"),
            ):
                if isinstance(result, Failure):
                    error = result.failure()
                    assert isinstance(error, InvalidInput), error
                    assert error.field == "text", error

        for text in _ADVERSARIAL:
            one(text)

        @self.search_settings
        @given(text=search_queries())
        def check(text: str) -> None:
            one(text)

        check()

    # -- examples --------------------------------------------------------------------------------

    def test_terms_are_anded_folded_and_prefixed(self, opened: Container) -> None:
        """``Conn*`` finds ``connection``; every term must be there; case folds for ASCII."""
        _write(opened, Corpus(
            (("tests/test_db.py::test_pool", "ConnectionRefusedError: connection refused"),
             ("tests/test_db.py::test_other", "timeout after 42 s")),
            ("tests/test_db.py::test_plain",), ("The CONNECTION timed out",),
        ))
        reader = opened.get(DATA_READER)

        def nodeids(text: str) -> list[str]:
            return [h.nodeid for h in reader.search_failures(text).unwrap().items]

        assert nodeids("Conn*") == ["tests/test_db.py::test_pool"]
        assert nodeids("connection refused") == ["tests/test_db.py::test_pool"]
        assert nodeids("connection timeout") == []
        assert nodeids("conn") == []
        assert nodeids('"42"') == ["tests/test_db.py::test_other"]
        tests = reader.search_tests("db pool", project="p").unwrap().items
        assert [t.nodeid for t in tests] == ["tests/test_db.py::test_pool"]
        assert reader.search_tests("pool", project="other").unwrap().items == ()
        entries = opened.get(SESSION_REPOSITORY).search("connection").unwrap().items
        assert [(e.session_id, e.entry_id, e.role) for e in entries] == [("s", "e0", "user")]
        hit = entries[0]
        assert [hit.snippet[a:b] for a, b in hit.marks] == ["CONNECTION"]

    def test_the_index_follows_its_rows(self, opened: Container) -> None:
        """Re-recording an item replaces its hit; pruning a run removes its hits; deleting a
        session removes its entries' hits; a refused batch adds none."""
        store, reader = opened.get(DATA_STORE), opened.get(DATA_READER)
        run = store.begin_run(RunStart("p", "inv-1", T0)).unwrap()

        def failed(message: str) -> TestResult:
            return TestResult("tests/t.py::test_x", "tests/t.py", "test_x",
                              (PhaseResult(Phase.CALL, Outcome.FAILED, 1.0),),
                              errors=(ErrorInfo(Phase.CALL, "ValueError", message),))

        store.record_results(run, [failed("alpha broke")]).unwrap()
        store.record_results(run, [failed("beta broke")]).unwrap()
        assert reader.search_failures("alpha").unwrap().items == ()
        assert len(reader.search_failures("beta").unwrap().items) == 1
        bad = attrs.evolve(failed("gamma broke"), phases=())
        assert isinstance(store.record_results(run, [failed("gamma broke"), bad]), Failure)
        assert reader.search_failures("gamma").unwrap().items == ()
        store.finish_run(run, RunStatus.FAILED, T0 + timedelta(seconds=1)).unwrap()
        for index in (2, 3):
            later = store.begin_run(RunStart("p", f"inv-{index}", T0 + timedelta(hours=index)))
            store.finish_run(later.unwrap(), RunStatus.PASSED, T0 + timedelta(hours=index))
        store.prune_runs(RunRetentionPolicy(keep_runs=2)).unwrap()
        assert reader.search_failures("beta").unwrap().items == ()
        assert reader.search_tests("test_x").unwrap().items != ()  # history keeps the test

        sessions = opened.get(SESSION_REPOSITORY)
        sessions.create(NewSession(id="s", cwd="/w", created=T0)).unwrap()
        sessions.open("s").unwrap().append(
            NewEntry.message("e1", None, {"role": "user", "content": "delta"}, timestamp=T0)
        ).unwrap()
        assert len(sessions.search("delta").unwrap().items) == 1
        sessions.delete("s").unwrap()
        assert sessions.search("delta").unwrap().items == ()

    def test_bad_arguments_are_invalid_input(self, opened: Container) -> None:
        """Limits, cursors of another listing and scopes of the wrong type are refused."""
        reader, sessions = opened.get(DATA_READER), opened.get(SESSION_REPOSITORY)
        _write(opened, Corpus((("tests/a.py::t", "boom"), ("tests/b.py::t", "boom")), (), ()))
        page = reader.search_failures("boom", limit=1).unwrap()
        assert page.has_more
        assert page.next_cursor is not None
        cases: list[tuple[Result[Any, Any], str]] = [
            (reader.search_failures("boom", limit=0), "limit"),
            (reader.search_failures("boom", limit=1_001), "limit"),
            (reader.search_tests("boom", cursor=page.next_cursor), "cursor"),
            (sessions.search("boom", cursor=page.next_cursor), "cursor"),
            (reader.search_failures("boom", project=3), "project"),  # type: ignore[arg-type]
            (sessions.search("boom", cwd=b"/w"), "cwd"),  # type: ignore[arg-type]
            (reader.search_failures(""), "text"),
            (reader.search_failures("x" * 1_001), "text"),
            (reader.search_failures(" ".join(f"w{i}" for i in range(33))), "text"),
        ]
        for result, field in cases:
            assert isinstance(result, Failure), (field, result)
            assert isinstance(result.failure(), InvalidInput), result
            assert result.failure().field == field, result
        rest = reader.search_failures("boom", limit=1, cursor=page.next_cursor).unwrap()
        assert len(rest.items) == 1
        assert not rest.has_more
        assert rest.items[0] != page.items[0]
