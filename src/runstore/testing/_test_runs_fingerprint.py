"""The contract of the code fingerprint of a test (``TestResult.fingerprint``): stored with the
item, read back by ``tests``, ``test_detail`` and ``history`` (where it outlives pruning, as the
git commit does), refused when it is not lowercase hex, and judged by the ``same_code`` rule
(a failing and a passing entry with one fingerprint are flaky evidence).

A mixin the reader contract of :mod:`runstore.testing._test_runs_contract` inherits
(:class:`FingerprintContract`); it uses that module's ``layer_factory`` fixture, so every
layer the contract runs on runs it too. :func:`code_fingerprints` also feeds the contract's
strategies (the state machine compares the fingerprints of every layer with the model's).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from contextlib import ExitStack

import pytest
from hypothesis import given
from hypothesis import strategies as st
from returns.result import Failure

from runstore.services.errors import InvalidInput
from runstore.services.test_runs import (
    MAX_FINGERPRINT_CHARS,
    Classification,
    DataStore,
    EvidenceRule,
    Outcome,
    Phase,
    PhaseResult,
    RunId,
    RunRetentionPolicy,
    RunStart,
    RunStatus,
    TestResult,
)
from runstore.testing._shared import LayerFactory
from runstore.testing._test_runs_links import _EXAMPLES, _T0_MS, _fresh, _ok, _utc

__all__ = ["FingerprintContract", "code_fingerprints", "reference_same_code"]

_NODEID = "tests/test_cart.py::test_total"
_FEW = ("0123456789abcdef" * 2, "f" * 32, "c0ffee")
"""A few fingerprints, so that drawn windows share them often."""


@functools.cache
def code_fingerprints() -> st.SearchStrategy[str | None]:
    """Code fingerprints ``TestResult.fingerprint`` accepts, or None (unknown): mostly one of a
    few, so that runs share them, else 1 to ``MAX_FINGERPRINT_CHARS`` lowercase hex digits."""
    return st.one_of(
        st.none(),
        st.sampled_from(_FEW),
        st.text("0123456789abcdef", min_size=1, max_size=MAX_FINGERPRINT_CHARS),
    )


def reference_same_code(window: str, prints: Sequence[str | None]) -> bool:
    """Whether ``same_code`` holds over letters (``F`` failing, ``P`` passing) and their
    fingerprints (None: unknown, never evidence), as a reference written apart from the rules."""
    groups: dict[str, set[str]] = {}
    for letter, fingerprint in zip(window, prints, strict=True):
        if fingerprint is not None:
            groups.setdefault(fingerprint, set()).add(letter)
    return any(letters == {"F", "P"} for letters in groups.values())


def _item(letter: str, fingerprint: object) -> TestResult:
    outcome = Outcome.FAILED if letter == "F" else Outcome.PASSED
    return TestResult(
        _NODEID, "tests/test_cart.py", "test_total",
        (PhaseResult(Phase.CALL, outcome, 1.0),),
        fingerprint=fingerprint,  # type: ignore[arg-type]  # bad values on purpose
    )


def _run(store: DataStore, letter: str, fingerprint: str | None, at: int) -> RunId:
    run = _ok(store.begin_run(RunStart("alpha", f"inv-{at}", _utc(_T0_MS + at * 60_000))))
    _ok(store.record_results(run, [_item(letter, fingerprint)]))
    status = RunStatus.FAILED if letter == "F" else RunStatus.PASSED
    _ok(store.finish_run(run, status, _utc(_T0_MS + at * 60_000 + 1_000)))
    return run


class FingerprintContract:
    """The code fingerprint on every layer (mixed into ``TestRunsReaderContract``)."""

    @_EXAMPLES
    @given(runs=st.lists(st.tuples(st.sampled_from("FP"), code_fingerprints()), min_size=1,
                         max_size=6))
    def test_a_stored_fingerprint_reads_back_equal_and_decides_same_code(
        self, layer_factory: LayerFactory, runs: list[tuple[str, str | None]]
    ) -> None:
        """Each run records one item with its letter and fingerprint (oldest first): every
        reader gives the fingerprint back, history newest first, and the last run is flaky
        because ``same_code`` exactly when a failing and a passing entry share one."""
        with ExitStack() as stack:
            store, reader = _fresh(stack, layer_factory)
            ids = [_run(store, letter, fp, at) for at, (letter, fp) in enumerate(runs)]
            for run, (_, fp) in zip(ids, runs, strict=True):
                (record,) = _ok(reader.tests(run))
                assert record.fingerprint == fp
                assert _ok(reader.test_detail(run, _NODEID)).test.fingerprint == fp
            history = _ok(reader.history("alpha", _NODEID))
            assert [(e.run_id, e.fingerprint) for e in history] == [
                (run, fp) for run, (_, fp) in reversed(list(zip(ids, runs, strict=True)))
            ][: len(history)]
            window = "".join(letter for letter, _ in reversed(runs))
            prints = [fp for _, fp in reversed(runs)]
            (verdict,) = _ok(reader.classify(ids[-1]))
            same = reference_same_code(window, prints)
            assert (verdict.because.rule is EvidenceRule.SAME_CODE) is same, verdict
            if same:
                assert verdict.classification is Classification.FLAKY
                shared = {fp for letter, fp in runs if fp is not None}
                assert any(fp[:12] in verdict.because.summary for fp in shared), verdict
                flaky = _ok(reader.flaky_tests("alpha"))
                assert [(f.nodeid, f.because) for f in flaky] == [(_NODEID, verdict.because)]

    def test_history_keeps_the_fingerprint_after_its_run_is_pruned(
        self, layer_factory: LayerFactory
    ) -> None:
        with ExitStack() as stack:
            store, reader = _fresh(stack, layer_factory)
            _run(store, "P", "c0ffee", 0)
            last = _run(store, "F", "c0ffee", 1)
            _ok(store.prune_runs(RunRetentionPolicy(keep_runs=1)))
            history = _ok(reader.history("alpha", _NODEID))
            assert [(e.run_id, e.fingerprint) for e in history] == [
                (last, "c0ffee"), (None, "c0ffee")
            ]
            (verdict,) = _ok(reader.classify(last))
            assert (verdict.classification, verdict.because.rule) == (
                Classification.FLAKY, EvidenceRule.SAME_CODE
            )
            assert verdict.because.run_ids == (last,)
            assert "c0ffee" in verdict.because.summary

    @pytest.mark.parametrize(
        "bad",
        ["", "ABCDEF", "c0ffee ", "g0", "0x1f", "é1", "1" * (MAX_FINGERPRINT_CHARS + 1), 7,
         b"c0ffee"],
    )
    def test_a_fingerprint_that_is_not_lowercase_hex_is_refused(
        self, layer_factory: LayerFactory, bad: object
    ) -> None:
        with ExitStack() as stack:
            store, reader = _fresh(stack, layer_factory)
            run = _ok(store.begin_run(RunStart("alpha", "inv-1", _utc(_T0_MS))))
            refused = store.record_results(run, [_item("P", "c0ffee"), _item("F", bad)])
            assert isinstance(refused, Failure), refused
            error = refused.failure()
            assert isinstance(error, InvalidInput), error
            assert error.field == "results[1].fingerprint", error
            assert _ok(reader.tests(run)) == ()
