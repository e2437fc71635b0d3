"""The contract of what links a run to its surroundings: the changed files git listed when it
started (``Environment.git_changed_files``) and the agent session it was made for
(``RunStart.session_id``, ``DataReader.list_runs(session_id=...)``).

Two mixins the contract classes of :mod:`runstore.testing._test_runs_contract` inherit
(:class:`RunLinksStoreContract`, :class:`RunLinksReaderContract`); they use that module's
fixtures (``store``, ``reader``, ``layer_factory``), so every layer the contract runs on
runs these too. The strategies (:func:`changed_file_lists`, :func:`session_ids`) also feed
the contract's state machine.
"""

from __future__ import annotations

import functools
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import Any, TypeVar

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from returns.result import Failure, Result, Success

from runstore.layers import Layer, build, merge
from runstore.services.clock import Clock, FixedClock
from runstore.services.errors import InvalidInput
from runstore.services.pagination import MAX_PAGE_SIZE, Page
from runstore.services.test_runs import (
    MAX_CHANGED_FILES,
    MAX_SESSION_ID_CHARS,
    ChangedFile,
    DataReader,
    DataStore,
    Environment,
    RunId,
    RunRetentionPolicy,
    RunStart,
    RunStatus,
    RunSummary,
)
from runstore.testing._shared import LayerFactory

__all__ = [
    "RunLinksReaderContract",
    "RunLinksStoreContract",
    "bad_session_ids",
    "changed_file_lists",
    "session_ids",
]

T = TypeVar("T")

_T0_MS = 1_764_500_000_000
_STATUSES = (" M", "M ", "MM", "A ", "AM", " D", "D ", "R ", " T", "??", "UU", "!!")
_PATH_TEXT = st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00")


@functools.cache
def changed_file_lists(max_size: int = 12) -> st.SearchStrategy[tuple[ChangedFile, ...]]:
    """Changed-file lists as ``git status --porcelain -z`` gives them: distinct paths (plain,
    nested, an untracked folder ending in ``/``, any Unicode but NUL, tabs and newlines
    included), each with a porcelain code; empty for a clean tree."""
    paths = st.sampled_from(
        ["src/app.py", "tests/test_app.py", "docs/ü x.md", "build/", "a\tb\nc.txt", "-rf"]
    ) | st.text(_PATH_TEXT, min_size=1, max_size=12)
    entry = st.builds(ChangedFile, path=paths, status=st.sampled_from(_STATUSES))
    return st.lists(entry, max_size=max_size, unique_by=lambda f: f.path).map(tuple)


_SESSION_TEXT = st.characters(
    blacklist_categories=["Cs", "Cc"]  # no lone surrogates, no control characters
)


@functools.cache
def session_ids() -> st.SearchStrategy[str]:
    """Session ids a run may name: 1 to ``MAX_SESSION_ID_CHARS`` characters, any Unicode but
    control characters and lone surrogates (pi's UUIDs, spaces, emoji, right-to-left), not
    blank (white space only)."""
    return st.sampled_from(
        ["0193a1b2-7c4d-7e8f-9a0b-1c2d3e4f5a6b", "s 1", " s ", "séance ✓",
         "x" * MAX_SESSION_ID_CHARS]
    ) | st.text(_SESSION_TEXT, min_size=1, max_size=40).filter(str.strip)


@functools.cache
def bad_session_ids() -> st.SearchStrategy[object]:
    """Values ``RunStart.session_id`` refuses: empty or blank (white space only, as
    ``str.strip`` sees it), one character too long, a control character (C0, DEL, C1) or a
    lone surrogate anywhere, not text."""
    blank = st.text(st.sampled_from([" ", "\u00a0", "\u2028", "\u3000"]), min_size=1, max_size=8)
    control = st.sampled_from(["\x00", "\t", "\n", "\r", "\x1b", "\x7f", "\x85", "\x9f"])
    with_control = st.tuples(
        st.text(_SESSION_TEXT, max_size=8), control, st.text(_SESSION_TEXT, max_size=8)
    ).map("".join)
    return st.one_of(
        st.just(""),
        blank,
        st.just("y" * (MAX_SESSION_ID_CHARS + 1)),
        with_control,
        st.just("s\ud800"),
        st.sampled_from([b"s-1", 7, ("s",)]),
    )


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _ok(result: Result[T, Any]) -> T:
    assert isinstance(result, Success), f"expected Success, got {result!r}"
    value: T = result.unwrap()
    return value


def _refused(result: Result[Any, Any], field: str) -> InvalidInput:
    """The ``InvalidInput`` of ``result``, which must name ``field`` or a part of it."""
    assert isinstance(result, Failure), f"expected Failure(InvalidInput), got {result!r}"
    error = result.failure()
    assert isinstance(error, InvalidInput), f"expected InvalidInput, got {error!r}"
    assert error.field == field or error.field.startswith((f"{field}.", f"{field}[")), error
    return error


def _every_answer(reader: DataReader, run: RunId) -> list[RunSummary]:
    """The run as every reader method that returns runs gives it."""
    summary = _ok(reader.get_run(run))
    listed = _ok(reader.list_runs(summary.project, limit=MAX_PAGE_SIZE)).items
    return [summary, _ok(reader.latest_run(summary.project)),
            *(s for s in listed if s.id == run)]


_EXAMPLES = settings(
    max_examples=15,
    deadline=None,
    # The factory fixture is only called inside the test; subclasses share the method.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors],
)


def _fresh(stack: ExitStack, factory: LayerFactory) -> tuple[DataStore, DataReader]:
    container = stack.enter_context(
        build(merge(factory(), Layer.value(Clock, FixedClock(_T0_MS))))
    )
    store: DataStore = container.get(DataStore)
    reader: DataReader = container.get(DataReader)
    return store, reader


_BAD_CHANGES: dict[str, tuple[Environment, str]] = {
    "empty path": (Environment(git_changed_files=(ChangedFile("", " M"),)), "[0].path"),
    "NUL in a path": (Environment(git_changed_files=(ChangedFile("a\x00b", " M"),)), "[0].path"),
    "lone surrogate": (Environment(git_changed_files=(ChangedFile("a\udc80", "??"),)), "[0].path"),
    "one letter": (Environment(git_changed_files=(ChangedFile("a.py", "M"),)), "[0].status"),
    "three letters": (Environment(git_changed_files=(ChangedFile("a.py", "MMM"),)), "[0].status"),
    "unknown letter": (Environment(git_changed_files=(ChangedFile("a.py", " X"),)), "[0].status"),
    "status not text": (
        Environment(git_changed_files=(ChangedFile("a.py", 1),)), "[0].status"  # type: ignore[arg-type]
    ),
    "path given twice": (
        Environment(git_changed_files=(ChangedFile("a.py", " M"), ChangedFile("a.py", "??"))),
        "[1].path",
    ),
    "not a ChangedFile": (
        Environment(git_changed_files=(("a.py", " M"),)), "[0]"  # type: ignore[arg-type]
    ),
    "one string": (Environment(git_changed_files="a.py"), ""),  # type: ignore[arg-type]
    "truncated without files": (Environment(git_changed_files_truncated=True), "_truncated"),
    "truncated not a bool": (
        Environment(git_changed_files=(), git_changed_files_truncated=1),  # type: ignore[arg-type]
        "_truncated",
    ),
}


class RunLinksStoreContract:
    """``begin_run`` keeps a run's changed files and session id (mixed into
    ``TestRunsStoreContract``)."""

    @_EXAMPLES
    @given(files=changed_file_lists(), truncated=st.booleans(), session=st.none() | session_ids())
    def test_changed_files_and_session_round_trip(
        self,
        layer_factory: LayerFactory,
        files: tuple[ChangedFile, ...],
        truncated: bool,
        session: str | None,
    ) -> None:
        env = Environment(git_commit="c0ffee", git_dirty=bool(files), git_changed_files=files,
                          git_changed_files_truncated=truncated)
        with ExitStack() as stack:
            store, reader = _fresh(stack, layer_factory)
            start = RunStart("alpha", "inv-1", _utc(_T0_MS), env, session_id=session)
            run = _ok(store.begin_run(start))
            for summary in _every_answer(reader, run):
                assert summary.environment == env
                assert summary.session_id == session
            finished = _ok(store.finish_run(run, RunStatus.PASSED, _utc(_T0_MS + 1)))
            assert (finished.environment, finished.session_id) == (env, session)

    def test_changed_files_are_unknown_without_git_and_empty_for_a_clean_tree(
        self, store: DataStore, reader: DataReader
    ) -> None:
        unknown = _ok(store.begin_run(RunStart("alpha", "inv-1", _utc(_T0_MS))))
        clean_env = Environment(git_commit="c0ffee", git_dirty=False, git_changed_files=())
        clean = _ok(store.begin_run(RunStart("alpha", "inv-2", _utc(_T0_MS), clean_env)))
        assert _ok(reader.get_run(unknown)).environment.git_changed_files is None
        assert _ok(reader.get_run(clean)).environment.git_changed_files == ()
        assert _ok(reader.get_run(unknown)).session_id is None

    @pytest.mark.parametrize("extra", [0, 1, 250])
    def test_changed_files_are_cut_at_the_cap(
        self, store: DataStore, reader: DataReader, extra: int
    ) -> None:
        count = MAX_CHANGED_FILES + extra
        files = tuple(ChangedFile(f"src/m{i:04}.py", " M") for i in range(count))
        env = Environment(git_dirty=True, git_changed_files=files)
        run = _ok(store.begin_run(RunStart("alpha", "inv-1", _utc(_T0_MS), env)))
        for summary in _every_answer(reader, run):
            stored = summary.environment
            assert stored.git_changed_files == files[:MAX_CHANGED_FILES]
            assert stored.git_changed_files_truncated is (extra > 0)

    @pytest.mark.parametrize("bad", sorted(_BAD_CHANGES))
    def test_begin_run_refuses_bad_changed_files(
        self, store: DataStore, reader: DataReader, bad: str
    ) -> None:
        env, suffix = _BAD_CHANGES[bad]
        refused = store.begin_run(RunStart("alpha", "inv-1", _utc(_T0_MS), env))
        _refused(refused, f"start.environment.git_changed_files{suffix}")
        assert _ok(reader.projects()) == ()

    @_EXAMPLES
    @given(bad=bad_session_ids())
    def test_begin_run_refuses_bad_session_ids(
        self, layer_factory: LayerFactory, bad: object
    ) -> None:
        with ExitStack() as stack:
            store, reader = _fresh(stack, layer_factory)
            start = RunStart("alpha", "inv-1", _utc(_T0_MS), session_id=bad)  # type: ignore[arg-type]
            _refused(store.begin_run(start), "start.session_id")
            assert _ok(reader.list_runs(None)) == Page((), False, None)

    def test_pruning_a_run_takes_its_changed_files(
        self, store: DataStore, reader: DataReader
    ) -> None:
        env = Environment(git_dirty=True, git_changed_files=(ChangedFile("a.py", " M"),))
        old = _ok(store.begin_run(RunStart("alpha", "inv-1", _utc(_T0_MS), env, session_id="s")))
        _ok(store.finish_run(old, RunStatus.PASSED, _utc(_T0_MS + 1)))
        new = _ok(store.begin_run(RunStart("alpha", "inv-2", _utc(_T0_MS + 10))))
        _ok(store.finish_run(new, RunStatus.PASSED, _utc(_T0_MS + 11)))
        assert _ok(store.prune_runs(RunRetentionPolicy(keep_runs=1))).pruned_runs == 1
        assert _ok(reader.list_runs(None, session_id="s")).items == ()
        assert _ok(reader.get_run(new)).environment.git_changed_files is None


class RunLinksReaderContract:
    """``list_runs(session_id=...)`` lists one session's runs (mixed into
    ``TestRunsReaderContract``)."""

    def test_list_runs_filters_by_session(self, store: DataStore, reader: DataReader) -> None:
        def begin(project: str, at: int, session: str | None) -> RunId:
            start = RunStart(project, f"inv-{at}", _utc(_T0_MS + at), session_id=session)
            return _ok(store.begin_run(start))

        ours = [begin("alpha", 1, "s-1"), begin("beta", 2, "s-1"), begin("alpha", 3, "s-1")]
        begin("alpha", 4, "s-2")
        begin("alpha", 5, None)
        tie = begin("beta", 3, "s-1")  # the same start as ours[2]: the higher id comes first
        _ok(store.finish_run(ours[0], RunStatus.FAILED, _utc(_T0_MS + 9)))
        newest_first = [tie, ours[2], ours[1], ours[0]]

        every = _ok(reader.list_runs(None, session_id="s-1", limit=MAX_PAGE_SIZE))
        assert [s.id for s in every.items] == newest_first
        assert {s.session_id for s in every.items} == {"s-1"}
        first = _ok(reader.list_runs(None, session_id="s-1", limit=3))
        assert ([s.id for s in first.items], first.has_more) == (newest_first[:3], True)
        begin("alpha", 99, "s-1")  # a newer run between pages moves no page
        rest = _ok(reader.list_runs(None, session_id="s-1", limit=3, cursor=first.next_cursor))
        assert ([s.id for s in rest.items], rest.has_more) == (newest_first[3:], False)

        alpha = _ok(reader.list_runs("alpha", session_id="s-1", limit=MAX_PAGE_SIZE))
        assert [s.id for s in alpha.items][1:] == [ours[2], ours[0]]
        failed = _ok(reader.list_runs(None, session_id="s-1", status=RunStatus.FAILED))
        assert [s.id for s in failed.items] == [ours[0]]
        for nobody in ("s-3", "", "s-1\x00", "S-1", "s-1 "):
            assert _ok(reader.list_runs(None, session_id=nobody)) == Page((), False, None)

    @pytest.mark.parametrize("bad", [7, b"s-1", ["s-1"], "s\ud800"])
    def test_list_runs_refuses_a_session_that_is_not_text(
        self, reader: DataReader, bad: object
    ) -> None:
        _refused(reader.list_runs(None, session_id=bad), "session_id")  # type: ignore[arg-type]

    @_EXAMPLES
    @given(session=session_ids(), others=st.lists(st.none() | session_ids(), max_size=4))
    def test_a_session_lists_exactly_its_runs(
        self, layer_factory: LayerFactory, session: str, others: list[str | None]
    ) -> None:
        with ExitStack() as stack:
            store, reader = _fresh(stack, layer_factory)
            mine: list[RunId] = []
            for at, name in enumerate([session, *others, session]):
                start = RunStart("alpha", "inv", _utc(_T0_MS + at), session_id=name)
                run = _ok(store.begin_run(start))
                if name == session:
                    mine.append(run)
            listed = _ok(reader.list_runs(None, session_id=session, limit=MAX_PAGE_SIZE))
            assert [s.id for s in listed.items] == mine[::-1]
            assert all(attrs.evolve(s, session_id=session) == s for s in listed.items)
