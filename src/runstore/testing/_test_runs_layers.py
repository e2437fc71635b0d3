"""Seeded test layers for the test-run services: a known store to test readers and hosts on.

Each function returns a :class:`~runstore.layers.Layer` providing ``DataStore``,
``DataReader`` and :class:`SeededRuns` (what was written). The layer is the in-memory one
unless ``base`` is given (for example ``sqlite(":memory:")`` or ``sqlite(path)``), in which
case that layer is seeded instead. Seeding goes through the public ``DataStore`` API when
the container is built; a seed write that returns a ``Failure`` aborts the build by raising
:class:`SeedError`.

All seeded runs belong to project ``"demo"`` and start at fixed instants (from
2024-01-01T12:00Z, an hour apart), so readers return the same values on every build::

    from runstore.layers import build
    from runstore.services.test_runs import DataReader
    from runstore.testing import SeededRuns, with_failures

    with build(with_failures()) as container:
        seeded = container.get(SeededRuns)
        failures = container.get(DataReader).failures(seeded.run_ids[-1]).unwrap()
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import attrs
from returns.result import Failure, Result

from runstore.exceptions import RunstoreError
from runstore.layers import Container, Layer, in_memory, merge
from runstore.services.test_runs import (
    CollectionError,
    DataStore,
    Environment,
    ErrorInfo,
    FileCoverage,
    Outcome,
    Phase,
    PhaseResult,
    RunId,
    RunStart,
    RunStatus,
    StackFrame,
    TestResult,
)

__all__ = [
    "SEED_PROJECT",
    "SEED_START",
    "SeedError",
    "SeededRuns",
    "empty",
    "flaky",
    "single_passing_run",
    "with_failures",
]

T = TypeVar("T")

SEED_PROJECT = "demo"
"""The project every seeded run belongs to."""

SEED_START = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)
"""When the first seeded run started; later ones start an hour apart each."""

_ENVIRONMENT = Environment(
    python_version="3.12.4",
    pytest_version="8.3.4",
    platform="linux",
    git_commit="0123456789abcdef0123456789abcdef01234567",
    git_branch="main",
    command_line=("pytest", "-q"),
    host="seed-host",
    pid=4242,
)


@attrs.frozen
class SeededRuns:
    """What a seeded layer wrote: the project and its run ids, oldest first."""

    project: str
    run_ids: tuple[RunId, ...]


class SeedError(RunstoreError):
    """A seed write returned a Failure; ``step`` says which, ``error`` is the typed value."""

    def __init__(self, step: str, error: object) -> None:
        self.step = step
        self.error = error
        super().__init__(f"seeding failed at {step}: {error}")


def _ok(step: str, result: Result[T, object]) -> T:
    if isinstance(result, Failure):
        raise SeedError(step, result.failure())
    return result.unwrap()


def _passed(nodeid: str, call_ms: float = 2.0) -> TestResult:
    module, _, name = nodeid.partition("::")
    param = name[name.index("[") + 1 : -1] if name.endswith("]") and "[" in name else None
    return TestResult(
        nodeid=nodeid,
        module_path=module,
        name=name.split("[", 1)[0],
        phases=(
            PhaseResult(Phase.SETUP, Outcome.PASSED, 0.25),
            PhaseResult(Phase.CALL, Outcome.PASSED, call_ms),
            PhaseResult(Phase.TEARDOWN, Outcome.PASSED, 0.125),
        ),
        parametrize_id=param,
        line=10,
    )


def _failed(nodeid: str, message: str, exception_type: str = "AssertionError") -> TestResult:
    item = _passed(nodeid)
    module = item.module_path
    frames = (
        StackFrame(module, 12, item.name.rsplit("::", 1)[-1], True),
        StackFrame("src/demo/calc.py", 40, "divide", True),
    )
    return attrs.evolve(
        item,
        phases=(
            item.phases[0],
            PhaseResult(Phase.CALL, Outcome.FAILED, 3.5),
            item.phases[2],
        ),
        errors=(
            ErrorInfo(
                Phase.CALL, exception_type, message, f"E   {exception_type}: {message}", frames
            ),
        ),
        stdout="computing...\n",
    )


def _seeded(
    seed: Callable[[DataStore], tuple[RunId, ...]], base: Layer | None
) -> Layer:
    def factory(container: Container) -> SeededRuns:
        store: DataStore = container.get(DataStore)
        return SeededRuns(SEED_PROJECT, seed(store))

    return merge(
        base if base is not None else in_memory(),
        Layer.service(SeededRuns, factory, requires=(DataStore,)),
    )


def _run(
    store: DataStore,
    index: int,
    items: Sequence[TestResult],
    *,
    collection: Sequence[CollectionError] = (),
    coverage: Sequence[FileCoverage] = (),
    status: RunStatus | None = None,
) -> RunId:
    started = SEED_START + timedelta(hours=index)
    step = f"run {index}"
    run_id = _ok(
        f"{step}: begin_run",
        store.begin_run(RunStart(SEED_PROJECT, f"seed-{index}", started, _ENVIRONMENT)),
    )
    if items:
        _ok(f"{step}: record_results", store.record_results(run_id, items))
    if collection:
        _ok(f"{step}: record_collection_errors", store.record_collection_errors(run_id, collection))
    if coverage:
        _ok(f"{step}: write_coverage", store.write_coverage(run_id, coverage))
    if status is None:
        failing = collection or any(i.outcome in (Outcome.FAILED, Outcome.ERROR) for i in items)
        status = RunStatus.FAILED if failing else RunStatus.PASSED
    _ok(f"{step}: finish_run", store.finish_run(run_id, status, started + timedelta(minutes=1)))
    return run_id


_PASSING = (
    "tests/test_calc.py::test_add",
    "tests/test_calc.py::test_divide[4-2]",
    "tests/test_calc.py::test_divide[9-3]",
    "tests/test_io.py::TestReader::test_reads",
)

_COVERAGE = (
    FileCoverage("src/demo/calc.py", 20, 2, 6, 1, 1, (41, 42)),
    FileCoverage("src/demo/io.py", 12, 0),
)


def empty(base: Layer | None = None) -> Layer:
    """A layer with nothing stored (``SeededRuns.run_ids`` is empty)."""
    return _seeded(lambda _store: (), base)


def single_passing_run(base: Layer | None = None) -> Layer:
    """One finished ``passed`` run of four passing items (two of them parametrized) with
    coverage of two files."""
    return _seeded(
        lambda store: (
            _run(
                store,
                0,
                [_passed(n, 2.0 + i) for i, n in enumerate(_PASSING)],
                coverage=_COVERAGE,
            ),
        ),
        base,
    )


def with_failures(base: Layer | None = None) -> Layer:
    """One finished ``failed`` run with one item of each interesting kind: passed, failed
    (``ZeroDivisionError`` with frames, a cause and captured output), a setup error, skipped,
    xfailed, plus a collection error of ``tests/test_broken.py``."""

    def seed(store: DataStore) -> tuple[RunId, ...]:
        cause = ErrorInfo(Phase.CALL, "ValueError", "bad operand 0", "", ())
        failed = _failed("tests/test_calc.py::test_divide[1-0]", "division by zero",
                         "ZeroDivisionError")
        failed = attrs.evolve(failed, errors=(attrs.evolve(failed.errors[0], cause=cause),))
        setup_error = attrs.evolve(
            _passed("tests/test_io.py::TestReader::test_reads"),
            phases=(
                PhaseResult(Phase.SETUP, Outcome.FAILED, 1.0),
                PhaseResult(Phase.TEARDOWN, Outcome.PASSED, 0.125),
            ),
            errors=(
                ErrorInfo(
                    Phase.SETUP,
                    "FileNotFoundError",
                    "[Errno 2] No such file or directory: '/tmp/demo/input.txt'",
                    "fixture 'input_file' failed",
                    (StackFrame("tests/conftest.py", 8, "input_file", True),),
                ),
            ),
        )
        skipped = attrs.evolve(
            _passed("tests/test_io.py::test_windows_only"),
            phases=(PhaseResult(Phase.SETUP, Outcome.SKIPPED, 0.0, "needs Windows"),),
            markers=("skipif",),
        )
        xfailed = attrs.evolve(
            _passed("tests/test_calc.py::test_rounding"),
            phases=(
                PhaseResult(Phase.SETUP, Outcome.PASSED, 0.25),
                PhaseResult(Phase.CALL, Outcome.XFAILED, 1.0, "known float issue"),
                PhaseResult(Phase.TEARDOWN, Outcome.PASSED, 0.125),
            ),
            markers=("xfail",),
        )
        broken = CollectionError(
            "tests/test_broken.py",
            "tests/test_broken.py",
            ErrorInfo(Phase.COLLECT, "ImportError", "No module named 'missing_dep'",
                      "ImportError while importing test module", ()),
        )
        items = [_passed(_PASSING[0]), failed, setup_error, skipped, xfailed]
        return (_run(store, 0, items, collection=[broken], coverage=_COVERAGE),)

    return _seeded(seed, base)


def flaky(base: Layer | None = None) -> Layer:
    """Six finished runs of five tests: ``test_stable`` always passes, ``test_flaky``
    alternates (passes in even runs, fails in odd ones: flaky by oscillation),
    ``test_broken`` always fails (a persistent failure), ``test_fixed`` fails in the first
    three runs and passes after (recovered, then stable: not flaky), and ``test_retried``
    passes, except in the last run, where it passes only on a rerun after one failed attempt
    (flaky because it passed on a rerun)."""

    def seed(store: DataStore) -> tuple[RunId, ...]:
        runs: list[RunId] = []
        for index in range(6):
            items = [
                _passed("tests/test_suite.py::test_stable"),
                _passed("tests/test_suite.py::test_flaky")
                if index % 2 == 0
                else _failed("tests/test_suite.py::test_flaky", f"timeout after {index}s",
                             "TimeoutError"),
                _failed("tests/test_suite.py::test_broken", "assert 1 == 2"),
                _failed("tests/test_suite.py::test_fixed", "expected 'ok' got 'err'")
                if index < 3
                else _passed("tests/test_suite.py::test_fixed"),
                attrs.evolve(
                    _passed("tests/test_suite.py::test_retried"),
                    attempts=(_failed("tests/test_suite.py::test_retried", "connection reset",
                                      "ConnectionError"),),
                )
                if index == 5
                else _passed("tests/test_suite.py::test_retried"),
            ]
            runs.append(_run(store, index, items))
        return tuple(runs)

    return _seeded(seed, base)
