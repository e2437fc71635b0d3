"""The contract of failure signatures across runs (``DataReader.failure_signatures``): first
and last seen, how many runs and distinct tests each signature affected, kept beyond
pruning, listed newest last seen first.

Two mixins the contract classes of :mod:`runstore.testing._test_runs_contract` inherit
(:class:`SignaturesStoreContract`, :class:`SignaturesReaderContract`); they use that module's
fixtures (``store``, ``reader``, ``layer_factory``), so every layer the contract runs on runs
these too. The property test records generated runs (failing items and collection errors
drawn from a few messages, each run passed, failed, interrupted or aborted, finished in a
drawn order) and compares the listing with what :func:`expected_signatures` computes from
the recorded failures, before and after pruning.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any, NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st
from returns.result import Failure

from runstore.services.errors import InvalidInput
from runstore.services.pagination import MAX_PAGE_SIZE
from runstore.services.test_runs import (
    CollectionError,
    DataReader,
    DataStore,
    ErrorInfo,
    FailureSignature,
    Outcome,
    Phase,
    PhaseResult,
    RunId,
    RunRetentionPolicy,
    RunStart,
    RunStatus,
    StackFrame,
    TestResult,
)
from runstore.testing._shared import LayerFactory
from runstore.testing._test_runs_links import _EXAMPLES, _fresh, _ok, _utc

__all__ = ["SignaturesReaderContract", "SignaturesStoreContract", "expected_signatures"]


_T0_MS = 1_764_500_000_000
_MESSAGES = (
    ("ValueError", "bad value 1"),
    ("ValueError", "bad value 22"),  # the same signature as the one above (numbers masked)
    ("KeyError", "'user'"),
    ("AssertionError", "assert 1 == 2"),
)
_NODEIDS = ("tests/test_a.py::test_one", "tests/test_a.py::test_two", "tests/test_b.py::test_ü")
_STATUSES = (RunStatus.PASSED, RunStatus.FAILED, RunStatus.FAILED, RunStatus.INTERRUPTED,
             RunStatus.ABORTED)
_PASS = PhaseResult(Phase.CALL, Outcome.PASSED, 1.0)
_FRAME = (StackFrame("src/app.py", 3, "load", is_project=True),)


def failing_item(nodeid: str, message: int) -> TestResult:
    """A failed item of ``nodeid`` whose error is ``_MESSAGES[message]`` raised in one
    project frame."""
    exception_type, text = _MESSAGES[message]
    module = nodeid.partition("::")[0]
    return TestResult(
        nodeid, module, nodeid.rpartition("::")[2],
        (PhaseResult(Phase.CALL, Outcome.FAILED, 1.0),),
        errors=(ErrorInfo(Phase.CALL, exception_type, text, frames=_FRAME),),
    )


class DrawnRun(NamedTuple):
    """One generated run: its failing items ``(node id, message)``, a collection error's
    message (None for none), its final status, and its place in the finishing order."""

    failing: tuple[tuple[str, int], ...]
    collection: int | None
    status: RunStatus
    finish_rank: int


def drawn_runs() -> st.SearchStrategy[list[DrawnRun]]:
    """One to six runs of one project, each failing up to three of a few tests with a few
    messages (passing the others), finished in any order with any final status."""
    run = st.tuples(
        st.dictionaries(st.sampled_from(_NODEIDS), st.integers(0, len(_MESSAGES) - 1),
                        max_size=3).map(lambda d: tuple(sorted(d.items()))),
        st.none() | st.integers(0, len(_MESSAGES) - 1),
        st.sampled_from(_STATUSES),
        st.integers(0, 100),
    )
    return st.lists(run, min_size=1, max_size=6).map(lambda runs: [DrawnRun(*r) for r in runs])


class _Recorded(NamedTuple):
    run_id: RunId
    status: RunStatus
    finished_ms: int
    finish_order: int
    hits: tuple[tuple[str, str], ...]
    """``(signature, node id)`` of each failing item and collection error."""


def expected_signatures(recorded: Sequence[_Recorded]) -> list[FailureSignature]:
    """The listing a layer must give for ``recorded`` runs (their signatures read from
    ``failures`` while the runs were stored), by the rules of
    ``runstore.services._signature_rules``: only passed and failed runs count; first seen is
    the lowest run id, last seen the run that finished last; newest last seen first, one
    run's signatures in ascending order."""
    facts: dict[str, dict[str, Any]] = {}
    for run in sorted(recorded, key=lambda r: r.finish_order):
        if run.status not in (RunStatus.PASSED, RunStatus.FAILED):
            continue
        for signature, nodeid in run.hits:
            seen = facts.setdefault(signature, {
                "first": run.run_id, "first_ms": run.finished_ms, "runs": set(),
                "tests": set(), "occurrences": 0,
            })
            if run.run_id < seen["first"]:
                seen["first"], seen["first_ms"] = run.run_id, run.finished_ms
            seen["last"], seen["last_ms"], seen["order"] = (
                run.run_id, run.finished_ms, run.finish_order)
            seen["runs"].add(run.run_id)
            seen["tests"].add(nodeid)
            seen["occurrences"] += 1
    ordered = sorted(facts.items(), key=lambda kv: (-kv[1]["order"], kv[0]))
    return [
        FailureSignature(
            signature=signature, exception_type="", message="", frame="",
            first_seen_run_id=seen["first"], first_seen_at_ms=seen["first_ms"],
            last_seen_run_id=seen["last"], last_seen_at_ms=seen["last_ms"],
            runs=len(seen["runs"]), tests=len(seen["tests"]), occurrences=seen["occurrences"],
        )
        for signature, seen in ordered
    ]


def _numbers(found: Sequence[FailureSignature]) -> list[tuple[Any, ...]]:
    """What :func:`expected_signatures` decides of each signature (not its texts)."""
    return [
        (s.signature, s.first_seen_run_id, s.first_seen_at_ms, s.last_seen_run_id,
         s.last_seen_at_ms, s.runs, s.tests, s.occurrences)
        for s in found
    ]


def _listing(
    reader: DataReader, project: str, limit: int = MAX_PAGE_SIZE
) -> list[FailureSignature]:
    """Every signature of ``project``, walking pages of ``limit``."""
    found: list[FailureSignature] = []
    cursor: str | None = None
    while True:
        page = _ok(reader.failure_signatures(project, limit=limit, cursor=cursor))
        found.extend(page.items)
        if not page.has_more:
            assert page.next_cursor is None
            return found
        cursor = page.next_cursor


def _record(store: DataStore, reader: DataReader, runs: Sequence[DrawnRun]) -> list[_Recorded]:
    """Begin every run (ids in order), record its items, then finish them in their drawn
    order, one second apart; the signatures are read from ``failures`` before finishing."""
    begun: list[tuple[RunId, DrawnRun, tuple[tuple[str, str], ...]]] = []
    for i, drawn in enumerate(runs):
        run = _ok(store.begin_run(RunStart("alpha", f"inv-{i}", _utc(_T0_MS + i))))
        items = [failing_item(n, m) for n, m in drawn.failing] + [
            TestResult(n, n.partition("::")[0], "t", (_PASS,))
            for n in _NODEIDS if n not in dict(drawn.failing)
        ]
        _ok(store.record_results(run, items))
        if drawn.collection is not None:
            exception_type, text = _MESSAGES[drawn.collection]
            _ok(store.record_collection_errors(run, [CollectionError(
                "tests/test_c.py", "tests/test_c.py",
                ErrorInfo(Phase.COLLECT, exception_type, text, frames=_FRAME))]))
        hits = tuple((f.signature, f.nodeid) for f in _ok(reader.failures(run)))
        begun.append((run, drawn, hits))
    order = sorted(range(len(begun)), key=lambda i: (begun[i][1].finish_rank, i))
    recorded = []
    for position, i in enumerate(order):
        run, drawn, hits = begun[i]
        finished_ms = _T0_MS + 60_000 + 1_000 * position
        _ok(store.finish_run(run, drawn.status, _utc(finished_ms)))
        recorded.append(_Recorded(run, drawn.status, finished_ms, position, hits))
    return recorded


class SignaturesStoreContract:
    """Finished runs maintain each signature's first and last seen, runs and distinct tests,
    and pruning keeps them (mixed into ``TestRunsStoreContract``)."""

    @_EXAMPLES
    @given(runs=drawn_runs(), keep=st.integers(0, 3), page=st.integers(1, 3))
    def test_signature_counts_follow_the_recorded_failures(
        self, layer_factory: LayerFactory, runs: list[DrawnRun], keep: int, page: int
    ) -> None:
        with ExitStack() as stack:
            store, reader = _fresh(stack, layer_factory)
            recorded = _record(store, reader, runs)
            expected = expected_signatures(recorded)
            found = _listing(reader, "alpha", limit=page)
            assert _numbers(found) == _numbers(expected)
            if keep:
                pruned = _ok(store.prune_runs(RunRetentionPolicy(keep)))
                alive = {s.id for s in _ok(reader.list_runs("alpha", limit=MAX_PAGE_SIZE)).items}
                assert pruned.pruned_runs == len(recorded) - len(alive)
                after = _listing(reader, "alpha", limit=page)

                def gone(run: RunId | None) -> RunId | None:
                    return run if run in alive else None

                assert _numbers(after) == [
                    (*n[:1], gone(n[1]), n[2], gone(n[3]), *n[4:]) for n in _numbers(found)
                ], "pruning changed a signature's counts or order"

    def test_signatures_keep_their_texts_and_other_projects_apart(
        self, store: DataStore, reader: DataReader
    ) -> None:
        for i, project in enumerate(("alpha", "beta", "alpha")):
            run = _ok(store.begin_run(RunStart(project, f"inv-{i}", _utc(_T0_MS + i))))
            _ok(store.record_results(run, [failing_item(_NODEIDS[i], 0)]))
            _ok(store.finish_run(run, RunStatus.FAILED, _utc(_T0_MS + 10_000 + i)))
        (alpha,) = _listing(reader, "alpha")
        (beta,) = _listing(reader, "beta")
        assert alpha.signature == beta.signature
        assert (alpha.exception_type, alpha.message, alpha.frame) == (
            "ValueError", "bad value <num>", "src/app.py:load")
        assert (alpha.runs, alpha.tests, alpha.occurrences) == (2, 2, 2)
        assert (alpha.first_seen_run_id, alpha.last_seen_run_id) == (1, 3)
        assert (beta.runs, beta.tests, beta.first_seen_run_id) == (1, 1, 2)
        assert _ok(reader.failure_signatures("gamma")).items == ()


    def test_a_pruned_first_run_stays_the_first(
        self, store: DataStore, reader: DataReader
    ) -> None:
        """Once the first run of a signature is pruned, a later run with a lower id than
        another that recorded it still finds it seen before (first seen stays unknown, not
        the later run: PostgreSQL's LEAST skips NULLs where SQLite's min returns NULL)."""
        first = _ok(store.begin_run(RunStart("alpha", "inv-1", _utc(_T0_MS))))
        _ok(store.record_results(first, [failing_item(_NODEIDS[0], 0)]))
        _ok(store.finish_run(first, RunStatus.FAILED, _utc(_T0_MS + 1_000)))
        green = _ok(store.begin_run(RunStart("alpha", "inv-2", _utc(_T0_MS + 2_000))))
        _ok(store.finish_run(green, RunStatus.PASSED, _utc(_T0_MS + 3_000)))
        assert _ok(store.prune_runs(RunRetentionPolicy(1))).pruned_runs == 1
        older = _ok(store.begin_run(RunStart("alpha", "inv-3", _utc(_T0_MS + 4_000))))
        newer = _ok(store.begin_run(RunStart("alpha", "inv-4", _utc(_T0_MS + 5_000))))
        for run in (newer, older):
            _ok(store.record_results(run, [failing_item(_NODEIDS[1], 1)]))
        _ok(store.finish_run(newer, RunStatus.FAILED, _utc(_T0_MS + 6_000)))
        _ok(store.finish_run(older, RunStatus.FAILED, _utc(_T0_MS + 7_000)))
        assert [f.is_new for f in _ok(reader.failures(older))] == [False]
        (signature,) = _listing(reader, "alpha")
        assert (signature.first_seen_run_id, signature.first_seen_at_ms) == (None, _T0_MS + 1_000)
        assert (signature.last_seen_run_id, signature.runs, signature.tests) == (older, 3, 2)


class SignaturesReaderContract:
    """``failure_signatures`` checks its arguments as every listing does (mixed into
    ``TestRunsReaderContract``)."""

    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [({"limit": 0}, "limit"), ({"limit": MAX_PAGE_SIZE + 1}, "limit"),
         ({"cursor": "runs.1.1.1.00000000"}, "cursor"), ({"cursor": 3}, "cursor")],
    )
    def test_failure_signatures_refuses_bad_arguments(
        self, reader: DataReader, kwargs: dict[str, Any], field: str
    ) -> None:
        refused = reader.failure_signatures("alpha", **kwargs)
        assert isinstance(refused, Failure), refused
        error = refused.failure()
        assert isinstance(error, InvalidInput), error
        assert error.field == field, error

    def test_failure_signatures_refuses_a_project_that_is_not_text(
        self, reader: DataReader
    ) -> None:
        refused = reader.failure_signatures(b"alpha")  # type: ignore[arg-type]
        assert isinstance(refused, Failure), refused
        assert isinstance(refused.failure(), InvalidInput), refused
