"""The flaky-policy part of the test-run contract: ``classify``, ``classify_unstable`` and
``flaky_tests`` under a ``FlakyPolicy``, on any ``DataStore`` / ``DataReader`` layer.

:class:`FlakyPolicyContract` is mixed into ``TestRunsReaderContract`` (so every layer that
runs that contract runs these tests). Its property draws a policy and a history of several
tests per run, and compares every layer's verdicts with the pure rules
(``runstore.services._test_runs_rules``) over the history the test itself wrote down; it
also checks that no flaky verdict rests on an outage run, counted from what was written.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import Any, ClassVar

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from returns.result import Failure, Result, Success

from runstore.layers import Container, Layer, build, merge
from runstore.services._test_runs_rules import (
    CaseHistory,
    WindowEntry,
    classify,
    flaky_entry,
    previous_window,
)
from runstore.services.clock import Clock, FixedClock
from runstore.services.errors import InvalidInput
from runstore.services.test_runs import (
    DEFAULT_HISTORY_WINDOW,
    FAILING_OUTCOMES,
    FLAKY_RULES,
    HISTORY_DEPTH,
    Classification,
    DataReader,
    DataStore,
    EvidenceRule,
    FlakyPolicy,
    Outcome,
    Phase,
    PhaseResult,
    RunId,
    RunStart,
    RunStatus,
    TestResult,
)
from runstore.testing._shared import LayerFactory

__all__ = ["FlakyPolicyContract", "flaky_policies"]

_T0_MS = 1_700_000_000_000
_EXECUTED = frozenset({Outcome.PASSED, Outcome.FAILED, Outcome.XPASSED, Outcome.ERROR})


def flaky_policies(max_window: int = 12) -> st.SearchStrategy[FlakyPolicy]:
    """Valid ``FlakyPolicy`` values: a window of ``1..max_window``, small outage minimums
    (so generated runs of a few tests can be outages) and any subset of the flaky rules."""

    @st.composite
    def draw(data: st.DrawFn) -> FlakyPolicy:
        window = data(st.integers(1, max_window))
        return FlakyPolicy(
            window=window,
            min_runs=data(st.integers(1, window)),
            flip_rate=data(st.sampled_from([0.0, 0.3, 0.5, 0.75, 1.0])),
            evidence=data(st.frozensets(st.sampled_from(FLAKY_RULES))),
            outage_share=data(st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0])),
            outage_min_tests=data(st.integers(1, 4)),
        )

    return draw()


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _ok(result: Result[Any, Any]) -> Any:
    assert isinstance(result, Success), f"expected Success, got {result!r}"
    return result.unwrap()


def _item(nodeid: str, letter: str) -> TestResult:
    """``P`` passed, ``F`` failed, ``S`` skipped, ``R`` passed after a failed attempt."""
    outcome = {"P": Outcome.PASSED, "F": Outcome.FAILED, "S": Outcome.SKIPPED}.get(
        letter, Outcome.PASSED
    )
    item = TestResult(
        nodeid, "t.py", nodeid.split("::")[-1], (PhaseResult(Phase.CALL, outcome, 1.0),)
    )
    if letter == "R":
        failed = attrs.evolve(item, phases=(PhaseResult(Phase.CALL, Outcome.FAILED, 1.0),))
        item = attrs.evolve(item, attempts=(failed,))
    return item


def _run(store: DataStore, at: int, items: Sequence[TestResult]) -> RunId:
    run: RunId = _ok(store.begin_run(RunStart("alpha", f"inv-{at}", _utc(_T0_MS + at))))
    _ok(store.record_results(run, items))
    failing = any(i.outcome in FAILING_OUTCOMES for i in items)
    status = RunStatus.FAILED if failing else RunStatus.PASSED
    _ok(store.finish_run(run, status, _utc(_T0_MS + at + 1)))
    return run


def _open(stack: ExitStack, factory: LayerFactory) -> Container:
    clock_layer = Layer.value(Clock, FixedClock(_T0_MS))
    return stack.enter_context(build(merge(factory(), clock_layer)))


def _key(c: Any) -> tuple[Any, ...]:
    """What layers and rules must agree on: the verdict, its rule and runs, and the summary
    of a flaky one (a failing streak's summary may reach past the window)."""
    flaky = c.classification is Classification.FLAKY
    return (c.nodeid, c.classification, c.because.rule, c.because.run_ids,
            c.because.summary if flaky else "")


class FlakyPolicyContract:
    """Example tests and a property of the flaky policy; the ``store``, ``reader`` and
    ``layer_factory`` fixtures come from the contract class it is mixed into."""

    __test__: ClassVar[bool] = False

    @pytest.mark.parametrize(
        ("change", "field"),
        [
            ({"window": 0}, "policy.window"),
            ({"window": HISTORY_DEPTH + 1}, "policy.window"),
            ({"window": True}, "policy.window"),
            ({"min_runs": 0}, "policy.min_runs"),
            ({"window": 3, "min_runs": 4}, "policy.min_runs"),
            ({"flip_rate": 1.5}, "policy.flip_rate"),
            ({"flip_rate": float("nan")}, "policy.flip_rate"),
            ({"outage_share": -0.1}, "policy.outage_share"),
            ({"outage_min_tests": 0}, "policy.outage_min_tests"),
            ({"evidence": frozenset({EvidenceRule.FIXED})}, "policy.evidence"),
            ({"evidence": {EvidenceRule.OSCILLATION}}, "policy.evidence"),
        ],
    )
    def test_a_bad_policy_is_invalid_input_before_the_run_is_looked_at(
        self, store: DataStore, reader: DataReader, change: dict[str, Any], field: str
    ) -> None:
        policy = attrs.evolve(FlakyPolicy(), **change)
        run = _run(store, 0, [_item("t.py::a", "F")])
        for result in (
            reader.classify(run, policy=policy),
            reader.classify(RunId(10**9), policy=policy),
            reader.classify_unstable(run, policy=policy),
            reader.flaky_tests("alpha", policy=policy),
        ):
            assert isinstance(result, Failure), result
            error = result.failure()
            assert isinstance(error, InvalidInput), error
            assert error.field == field
        not_a_policy: Any = "strict"
        assert isinstance(reader.classify(run, policy=not_a_policy).failure(), InvalidInput)

    def test_an_outage_run_is_not_flaky_evidence(
        self, store: DataStore, reader: DataReader
    ) -> None:
        """``x`` goes P, F, P, F (oldest first); the first F fell in a run where 9 of 10
        tests failed: by default a new failure, with the guard off oscillation."""
        others = [f"t.py::o{n}" for n in range(9)]
        runs = []
        for at, (mine, theirs) in enumerate([("P", "P"), ("F", "F"), ("P", "P"), ("F", "P")]):
            items = [_item("t.py::x", mine), *(_item(n, theirs) for n in others)]
            runs.append(_run(store, at, items))
        (x,) = [c for c in _ok(reader.classify(runs[-1])) if c.nodeid == "t.py::x"]
        assert (x.classification, x.because.rule) == (
            Classification.NEW_FAILURE, EvidenceRule.FIRST_FAILURE
        )
        entries = _ok(reader.history("alpha", "t.py::x"))
        assert [(e.run_executed, e.run_failing) for e in entries] == [
            (10, 1), (10, 0), (10, 10), (10, 0)
        ]
        assert _ok(reader.flaky_tests("alpha")) == ()
        off = FlakyPolicy(outage_share=1.0)
        (x,) = [c for c in _ok(reader.classify(runs[-1], policy=off)) if c.nodeid == "t.py::x"]
        assert (x.classification, x.because.rule) == (
            Classification.FLAKY, EvidenceRule.OSCILLATION
        )
        assert x.because.run_ids == (runs[1], runs[3])
        assert [f.nodeid for f in _ok(reader.flaky_tests("alpha", policy=off))] == ["t.py::x"]

    def test_a_wider_window_reaches_older_evidence_in_the_deeper_history(
        self, store: DataStore, reader: DataReader
    ) -> None:
        letters = "FPF" + "P" * (HISTORY_DEPTH - 2)  # oldest first: 2 more than the depth
        runs = [_run(store, at, [_item("t.py::x", letter)]) for at, letter in enumerate(letters)]
        assert len(_ok(reader.history("alpha", "t.py::x"))) == HISTORY_DEPTH
        (now,) = _ok(reader.classify(runs[-1]))
        assert len(now.window) == DEFAULT_HISTORY_WINDOW
        assert now.classification is Classification.STABLE
        wide = FlakyPolicy(window=HISTORY_DEPTH)
        # The oldest F was trimmed: one failing streak left in the 50 kept entries.
        (now,) = _ok(reader.classify(runs[-1], policy=wide))
        assert (len(now.window), now.classification) == (HISTORY_DEPTH, Classification.STABLE)
        (before,) = _ok(reader.classify(runs[-2], policy=wide))
        assert before.classification is Classification.STABLE
        assert _ok(reader.flaky_tests("alpha", policy=wide)) == ()
        runs.append(_run(store, len(runs), [_item("t.py::x", "F")]))
        (flaky,) = _ok(reader.classify(runs[-1], policy=wide))
        assert (flaky.classification, flaky.because.rule) == (
            Classification.FLAKY, EvidenceRule.OSCILLATION
        )
        assert flaky.because.run_ids == (runs[2], runs[-1])
        (now,) = _ok(reader.classify(runs[-1]))
        assert now.classification is Classification.NEW_FAILURE
        (listed,) = _ok(reader.flaky_tests("alpha", policy=wide))
        assert listed.because == flaky.because
        assert _ok(reader.flaky_tests("alpha")) == ()

    def test_a_flip_rate_and_min_runs_hold_oscillation_back(
        self, store: DataStore, reader: DataReader
    ) -> None:
        runs = [_run(store, at, [_item("t.py::x", letter)]) for at, letter in enumerate("FPPPF")]
        (now,) = _ok(reader.classify(runs[-1]))
        assert now.because.rule is EvidenceRule.OSCILLATION  # 2 flips of 4
        (now,) = _ok(reader.classify(runs[-1], policy=FlakyPolicy(flip_rate=0.6)))
        assert (now.classification, now.because.rule) == (
            Classification.NEW_FAILURE, EvidenceRule.FIRST_FAILURE
        )
        assert now.because.summary == "first failure after 3 passing runs"
        (now,) = _ok(reader.classify(runs[-1], policy=FlakyPolicy(min_runs=6)))
        assert now.classification is Classification.NEW_FAILURE
        none = FlakyPolicy(evidence=frozenset())
        assert _ok(reader.flaky_tests("alpha", policy=none)) == ()

    @settings(
        max_examples=30,
        deadline=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.differing_executors,
        ],
    )
    @given(
        policy=flaky_policies(),
        runs=st.lists(
            st.tuples(*(st.sampled_from("FFPPSR") for _ in range(4))), min_size=1, max_size=14
        ),
    )
    def test_a_policy_gives_the_rules_verdicts_on_every_layer(
        self, layer_factory: LayerFactory, policy: FlakyPolicy, runs: list[tuple[str, ...]]
    ) -> None:
        """Each run of four tests (``R``: passed after a failed attempt) is judged as the
        pure rules judge the history written; ``classify_unstable`` and ``flaky_tests`` agree;
        no flaky verdict rests on an outage run."""
        nodeids = [f"t.py::w{n}" for n in range(4)]
        with ExitStack() as stack:
            container = _open(stack, layer_factory)
            store, reader = container.get(DataStore), container.get(DataReader)
            history: dict[str, list[WindowEntry]] = {n: [] for n in nodeids}  # newest first
            outages: set[int] = set()
            for at, letters in enumerate(runs):
                items = [_item(n, letter) for n, letter in zip(nodeids, letters, strict=True)]
                run = _run(store, at, items)
                executed = sum(1 for i in items if i.outcome in _EXECUTED)
                failing = sum(1 for i in items if i.outcome in FAILING_OUTCOMES)
                if executed >= policy.outage_min_tests and failing / executed > policy.outage_share:
                    outages.add(run)
                expected = []
                for item, letter in zip(items, letters, strict=True):
                    now = WindowEntry(run, item.outcome, rerun_failures=int(letter == "R"),
                                      run_executed=executed, run_failing=failing)
                    previous = previous_window(history[item.nodeid], run, policy)
                    expected.append(classify(run, CaseHistory(item.nodeid, now, previous), policy))
                    if item.outcome in _EXECUTED:
                        history[item.nodeid].insert(0, now)
                got = _ok(reader.classify(run, policy=policy))
                assert [_key(c) for c in got] == [_key(c) for c in expected], (policy, runs)
                unstable = _ok(reader.classify_unstable(run, policy=policy))
                assert unstable == tuple(
                    c for c in got if c.classification is not Classification.STABLE
                )
                for c in got:
                    if c.classification is Classification.FLAKY:
                        assert not outages & set(c.because.run_ids), (c, outages)
            wanted = sorted(
                (f.nodeid, f.because)
                for n in nodeids
                if (f := flaky_entry(n, history[n][:HISTORY_DEPTH], policy)) is not None
            )
            listed = _ok(reader.flaky_tests("alpha", policy=policy))
            assert sorted((f.nodeid, f.because) for f in listed) == wanted
