"""The seeded test-run layers: the same store in memory and on SQLite, and a seed write that
fails aborts the build."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from returns.result import Failure, Result

from runstore.layers import Layer, build, in_memory, merge, sqlite
from runstore.services.errors import InvalidInput
from runstore.services.test_runs import (
    Classification,
    DataReader,
    DataStore,
    EvidenceRule,
    Outcome,
    RunId,
    RunStart,
)
from runstore.testing import (
    SEED_PROJECT,
    SeededRuns,
    SeedError,
    empty,
    flaky,
    single_passing_run,
    with_failures,
)

SEEDS: dict[str, Callable[[Layer | None], Layer]] = {
    "empty": empty,
    "single_passing_run": single_passing_run,
    "with_failures": with_failures,
    "flaky": flaky,
}


def _everything(reader: DataReader, runs: tuple[RunId, ...]) -> list[Result[Any, Any]]:
    answers: list[Result[Any, Any]] = [
        reader.projects(),
        reader.list_runs(None, limit=100),
        reader.flaky_tests(SEED_PROJECT),
        reader.coverage_trend(SEED_PROJECT),
        reader.find_tests(SEED_PROJECT, "test_"),
    ]
    for run in runs:
        answers += [
            reader.get_run(run),
            reader.tests(run),
            reader.failures(run),
            reader.classify(run),
            reader.slowest(run, limit=3),
            reader.coverage(run),
        ]
    return answers


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_a_seeded_layer_is_the_same_in_memory_and_on_sqlite(name: str) -> None:
    seed = SEEDS[name]
    with build(seed(None)) as memory, build(seed(sqlite(":memory:"))) as live:
        seeded = memory.get(SeededRuns)
        assert live.get(SeededRuns) == seeded
        expected = _everything(memory.get(DataReader), seeded.run_ids)
        assert _everything(live.get(DataReader), seeded.run_ids) == expected


def test_the_seeds_hold_what_they_say() -> None:
    with build(with_failures()) as c:
        (run,) = c.get(SeededRuns).run_ids
        counts = c.get(DataReader).get_run(run).unwrap().counts
        assert {k: v for k, v in counts.items() if v} == {
            "passed": 1, "failed": 1, "error": 1, "skipped": 1, "xfailed": 1,
        }
        failures = c.get(DataReader).failures(run).unwrap()
        assert [f.nodeid for f in failures] == [
            "tests/test_broken.py",
            "tests/test_calc.py::test_divide[1-0]",
            "tests/test_io.py::TestReader::test_reads",
        ]
        assert [c.exception_type for c in failures[1].causes] == ["ValueError"]
    with build(flaky()) as c:
        runs = c.get(SeededRuns).run_ids
        assert len(runs) == 6
        reader = c.get(DataReader)
        by_node = {t.nodeid: t for t in reader.classify(runs[-1]).unwrap()}
        assert by_node["tests/test_suite.py::test_broken"].classification == (
            Classification.PERSISTENT_FAILURE
        )
        assert by_node["tests/test_suite.py::test_stable"].classification == Classification.STABLE
        assert by_node["tests/test_suite.py::test_flaky"].outcome == Outcome.FAILED
        assert by_node["tests/test_suite.py::test_flaky"].because.rule == (
            EvidenceRule.OSCILLATION
        )
        retried = by_node["tests/test_suite.py::test_retried"]
        assert (retried.classification, retried.because.rule, retried.because.run_ids) == (
            Classification.FLAKY, EvidenceRule.PASSED_ON_RERUN, (runs[-1],)
        )
        assert [(f.nodeid, f.because.rule) for f in reader.flaky_tests(SEED_PROJECT).unwrap()] == [
            ("tests/test_suite.py::test_flaky", EvidenceRule.OSCILLATION),
            ("tests/test_suite.py::test_retried", EvidenceRule.PASSED_ON_RERUN),
        ]
        recovered = reader.classify(runs[3]).unwrap()
        assert {t.nodeid: t.classification for t in recovered}[
            "tests/test_suite.py::test_fixed"
        ] == Classification.RECOVERED  # newest first P F F F: prev1 failed
        later = reader.classify(runs[4]).unwrap()
        assert {t.nodeid: t.classification for t in later}[
            "tests/test_suite.py::test_fixed"
        ] == Classification.STABLE  # P P F F F: it recovered in the run before
        (broken,) = [f for f in reader.failures(runs[-1]).unwrap()
                     if f.nodeid == "tests/test_suite.py::test_broken"]
        assert (broken.streak, broken.failing_since, broken.streak_message) == (
            6, runs[0], "assert 1 == 2"
        )


class _RefusingStore:
    """A DataStore whose begin_run always fails (everything else is never reached)."""

    def begin_run(self, start: RunStart) -> Result[RunId, InvalidInput]:
        return Failure(InvalidInput("start", "refused for the test"))


def test_a_failing_seed_write_aborts_the_build() -> None:
    refusing = merge(in_memory(), Layer.value(DataStore, _RefusingStore()))
    with pytest.raises(SeedError) as caught, build(flaky(refusing)):
        pass
    assert caught.value.step == "run 0: begin_run"
    assert caught.value.error == InvalidInput("start", "refused for the test")
    with build(empty(refusing)) as c:  # nothing to write, nothing to fail
        assert c.get(SeededRuns).run_ids == ()
