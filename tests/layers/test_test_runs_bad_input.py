"""Bad input to DataStore and DataReader: a typed Failure, never an exception, and nothing
written.

Each case seeds one finished and one running run, takes a snapshot (for SQLite: every row of
every table, read through ``sqlite_schema``; for memory: everything the reader shows), makes
the bad call, and checks the snapshot is unchanged and that the next good write succeeds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import attrs
import pytest
from returns.result import Failure, Result, Success

from runstore.layers import Container, Layer, SqliteDatabase, build, in_memory, merge, sqlite
from runstore.services.clock import Clock, FixedClock
from runstore.services.errors import IllegalTransition, InvalidInput, NotFound
from runstore.services.pagination import MAX_PAGE_SIZE
from runstore.services.test_runs import (
    CollectionError,
    DataReader,
    DataStore,
    Environment,
    ErrorInfo,
    FileCoverage,
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
from runstore.testing import T0_MS, make_item, utc

UNKNOWN = RunId(424_242)


class Unprintable:
    """An object whose ``__str__`` (and ``__repr__``) raise, standing in for a hostile value."""

    def __str__(self) -> str:
        raise RuntimeError("no str for you")

    def __repr__(self) -> str:
        raise RuntimeError("no repr either")


@attrs.define
class World:
    store: DataStore
    reader: DataReader
    container: Container
    finished: RunId
    running: RunId

    def snapshot(self) -> Any:
        if SqliteDatabase in self.container:
            return table_contents(self.container.get(SqliteDatabase))
        page = self.reader.list_runs(None, limit=MAX_PAGE_SIZE)
        runs = page.unwrap().items
        return (
            page,
            tuple((self.reader.tests(r.id), self.reader.failures(r.id), self.reader.coverage(r.id))
                  for r in runs),
            tuple(self.reader.history(p, "t.py::a") for p in ("alpha", "beta")),
        )


def table_contents(db: SqliteDatabase) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table (the schema's own tables included), keyed by table name."""
    names = [r[0] for r in db.execute(
        "SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")]
    return {name: sorted(db.execute(f'SELECT * FROM "{name}"'), key=repr) for name in names}


LAYERS: dict[str, Callable[[], Layer]] = {
    "memory": in_memory,
    "sqlite": lambda: sqlite(":memory:"),
}


@pytest.fixture(params=sorted(LAYERS))
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    layer = merge(LAYERS[request.param](), Layer.value(Clock, FixedClock(T0_MS)))
    with build(layer) as c:
        store: DataStore = c.get(DataStore)
        reader: DataReader = c.get(DataReader)
        finished = store.begin_run(RunStart("alpha", "inv", utc(T0_MS))).unwrap()
        store.record_results(finished, [make_item("t.py::a", Outcome.FAILED)]).unwrap()
        store.write_coverage(finished, [FileCoverage("src/a.py", 3, 1)]).unwrap()
        store.finish_run(finished, RunStatus.FAILED, utc(T0_MS + 1)).unwrap()
        running = store.begin_run(RunStart("alpha", "inv2", utc(T0_MS + 2))).unwrap()
        store.record_results(running, [make_item("t.py::a")]).unwrap()
        yield World(store, reader, c, finished, running)


NAIVE = datetime(2024, 5, 1, 12, 0)
SURROGATE = "x\udc80y"
NUL = "x\x00y"


def _item(**changes: Any) -> TestResult:
    return attrs.evolve(make_item("t.py::b", Outcome.FAILED), **changes)


def _phase(duration: float) -> tuple[PhaseResult, ...]:
    return (PhaseResult(Phase.CALL, Outcome.PASSED, duration),)


def _error(**changes: Any) -> tuple[ErrorInfo, ...]:
    return (attrs.evolve(ErrorInfo(Phase.CALL, "E", "m", "t"), **changes),)


Call = Callable[[World], Result[Any, Any]]

WRITES: dict[str, Call] = {
    # begin_run
    "begin: naive start": lambda w: w.store.begin_run(RunStart("alpha", "i", NAIVE)),
    "begin: surrogate project": lambda w: w.store.begin_run(RunStart(SURROGATE, "i", utc(T0_MS))),
    "begin: NUL in project": lambda w: w.store.begin_run(RunStart(NUL, "i", utc(T0_MS))),
    "begin: NUL in invocation": lambda w: w.store.begin_run(RunStart("alpha", NUL, utc(T0_MS))),
    "begin: surrogate invocation": lambda w: w.store.begin_run(
        RunStart("alpha", SURROGATE, utc(T0_MS))),
    "begin: unprintable project": lambda w: w.store.begin_run(
        RunStart(Unprintable(), "i", utc(T0_MS))),  # type: ignore[arg-type]
    "begin: unprintable environment": lambda w: w.store.begin_run(
        RunStart("alpha", "i", utc(T0_MS), Environment(platform=Unprintable()))),  # type: ignore[arg-type]
    "begin: pid beyond 64 bits": lambda w: w.store.begin_run(
        RunStart("alpha", "i", utc(T0_MS), Environment(pid=2**64))),
    "begin: start not a datetime": lambda w: w.store.begin_run(
        RunStart("alpha", "i", "2024-01-01T00:00:00Z")),  # type: ignore[arg-type]
    # record_results
    "record: unknown run": lambda w: w.store.record_results(UNKNOWN, [_item()]),
    "record: NaN duration": lambda w: w.store.record_results(
        w.running, [_item(phases=_phase(math.nan))]),
    "record: negative duration": lambda w: w.store.record_results(
        w.running, [_item(phases=_phase(-1.0))]),
    "record: infinite duration": lambda w: w.store.record_results(
        w.running, [_item(phases=_phase(math.inf))]),
    "record: surrogate node id": lambda w: w.store.record_results(
        w.running, [make_item("t.py::a"), _item(nodeid=SURROGATE)]),
    "record: NUL node id": lambda w: w.store.record_results(
        w.running, [make_item("t.py::a"), _item(nodeid=NUL)]),
    "record: NUL module path": lambda w: w.store.record_results(
        w.running, [make_item("t.py::a"), _item(module_path=NUL)]),
    "record: empty node id": lambda w: w.store.record_results(w.running, [_item(nodeid="")]),
    "record: unprintable node id": lambda w: w.store.record_results(
        w.running, [make_item("t.py::a"), _item(nodeid=Unprintable())]),
    "record: unprintable message": lambda w: w.store.record_results(
        w.running, [make_item("t.py::a"), _item(errors=_error(message=Unprintable()))]),
    "record: unprintable marker": lambda w: w.store.record_results(
        w.running, [_item(markers=("slow", Unprintable()))]),
    "record: unprintable frame path": lambda w: w.store.record_results(
        w.running, [_item(errors=_error(frames=(StackFrame(Unprintable(), 1, "f", True),)))]),  # type: ignore[arg-type]
    "record: line beyond 64 bits": lambda w: w.store.record_results(
        w.running, [make_item("t.py::a"), _item(line=2**64)]),
    "record: duration not a number": lambda w: w.store.record_results(
        w.running, [_item(phases=_phase("fast"))]),  # type: ignore[arg-type]
    "record: finished run": lambda w: w.store.record_results(w.finished, [_item()]),
    "collect: unknown run": lambda w: w.store.record_collection_errors(
        UNKNOWN, [CollectionError("t.py", "t.py", ErrorInfo(Phase.COLLECT, "E", "m"))]),
    "collect: surrogate node id": lambda w: w.store.record_collection_errors(
        w.running, [CollectionError(SURROGATE, "t.py", ErrorInfo(Phase.COLLECT, "E", "m"))]),
    "collect: NUL node id": lambda w: w.store.record_collection_errors(
        w.running, [CollectionError(NUL, "t.py", ErrorInfo(Phase.COLLECT, "E", "m"))]),
    "collect: NUL module path": lambda w: w.store.record_collection_errors(
        w.running, [CollectionError("t.py", NUL, ErrorInfo(Phase.COLLECT, "E", "m"))]),
    "collect: unprintable message": lambda w: w.store.record_collection_errors(
        w.running, [CollectionError("t.py", "t.py", ErrorInfo(Phase.COLLECT, "E", Unprintable()))]),  # type: ignore[arg-type]
    # finish_run / abort_stale_runs
    "finish: naive": lambda w: w.store.finish_run(w.running, RunStatus.PASSED, NAIVE),
    "finish: unknown run": lambda w: w.store.finish_run(UNKNOWN, RunStatus.PASSED, utc(T0_MS)),
    "finish: to running": lambda w: w.store.finish_run(w.running, RunStatus.RUNNING, utc(T0_MS)),
    "finish: status not a status": lambda w: w.store.finish_run(
        w.running, "done", utc(T0_MS)),  # type: ignore[arg-type]
    "abort: naive": lambda w: w.store.abort_stale_runs("alpha", older_than=NAIVE),
    # write_coverage
    "coverage: unknown run": lambda w: w.store.write_coverage(UNKNOWN, [FileCoverage("a", 1, 0)]),
    "coverage: negative": lambda w: w.store.write_coverage(w.finished, [FileCoverage("a", -1, 0)]),
    "coverage: missing > total": lambda w: w.store.write_coverage(
        w.finished, [FileCoverage("a", 1, 2)]),
    "coverage: negative line": lambda w: w.store.write_coverage(
        w.finished, [FileCoverage("a", 1, 1, missing_lines=(-3,))]),
    "coverage: duplicate path": lambda w: w.store.write_coverage(
        w.finished, [FileCoverage("a", 1, 0), FileCoverage("a", 2, 0)]),
    "coverage: surrogate path": lambda w: w.store.write_coverage(
        w.finished, [FileCoverage(SURROGATE, 1, 0)]),
    "coverage: NUL path": lambda w: w.store.write_coverage(
        w.finished, [FileCoverage(NUL, 1, 0)]),
    "coverage: count beyond 64 bits": lambda w: w.store.write_coverage(
        w.finished, [FileCoverage("a", 2**64, 0)]),
    # prune_runs
    "prune: keep 0": lambda w: w.store.prune_runs(RunRetentionPolicy(0)),
    "prune: keep negative": lambda w: w.store.prune_runs(RunRetentionPolicy(-5)),
    "prune: age NaN": lambda w: w.store.prune_runs(RunRetentionPolicy(1, math.nan)),
    "prune: age negative": lambda w: w.store.prune_runs(RunRetentionPolicy(1, -1.0)),
    "prune: age beyond epoch ms": lambda w: w.store.prune_runs(RunRetentionPolicy(1, 1e308)),
    "plan: age beyond epoch ms": lambda w: w.store.plan_prune(RunRetentionPolicy(1, 1e308)),
    "prune: keep beyond 64 bits": lambda w: w.store.prune_runs(RunRetentionPolicy(2**64)),
    "prune: keep not an int": lambda w: w.store.prune_runs(RunRetentionPolicy(1.5)),  # type: ignore[arg-type]
}

READS: dict[str, Call] = {
    "get_run: unknown": lambda w: w.reader.get_run(UNKNOWN),
    "tests: unknown": lambda w: w.reader.tests(UNKNOWN),
    "failures: unknown": lambda w: w.reader.failures(UNKNOWN),
    "classify: unknown": lambda w: w.reader.classify(UNKNOWN),
    "slowest: unknown": lambda w: w.reader.slowest(UNKNOWN),
    "coverage: unknown": lambda w: w.reader.coverage(UNKNOWN),
    "compare: unknown": lambda w: w.reader.compare(w.finished, UNKNOWN),
    "latest_run: unknown project": lambda w: w.reader.latest_run("nobody"),
    "history: unknown test": lambda w: w.reader.history("alpha", "t.py::nope"),
    "list_runs: negative limit": lambda w: w.reader.list_runs("alpha", limit=-1),
    "list_runs: zero limit": lambda w: w.reader.list_runs(None, limit=0),
    "list_runs: bool limit": lambda w: w.reader.list_runs(None, limit=True),
    "list_runs: bad cursor": lambda w: w.reader.list_runs(None, cursor="\udc80"),
    "slowest: negative limit": lambda w: w.reader.slowest(w.finished, limit=-2),
    "find_tests: negative limit": lambda w: w.reader.find_tests("alpha", "t", limit=-1),
    "coverage_trend: negative limit": lambda w: w.reader.coverage_trend("alpha", limit=-1),
    "history: surrogate node id": lambda w: w.reader.history("alpha", SURROGATE),
    "find_tests: surrogate fragment": lambda w: w.reader.find_tests("alpha", SURROGATE),
    "latest_run: unprintable project": lambda w: w.reader.latest_run(Unprintable()),  # type: ignore[arg-type]
}


def _typed_failure(case: str, result: object) -> None:
    assert isinstance(result, Failure), f"expected a typed Failure, got {result!r}"
    error = result.failure()
    expected: tuple[type[Any], ...] = (InvalidInput,)
    if "unknown" in case:
        expected = (NotFound,)
    elif case in ("record: finished run", "finish: to running"):
        expected = (IllegalTransition,)
    elif case == "history: surrogate node id":
        expected = (InvalidInput, NotFound)
    assert isinstance(error, expected), f"{case}: expected {expected}, got {error!r}"


@pytest.mark.parametrize("case", sorted(WRITES))
def test_bad_writes_fail_typed_and_write_nothing(world: World, case: str) -> None:
    before = world.snapshot()
    _typed_failure(case, WRITES[case](world))
    assert world.snapshot() == before
    again = world.store.record_results(world.running, [make_item("t.py::after")])
    assert again == Success(1)


@pytest.mark.parametrize("case", sorted(READS))
def test_bad_reads_fail_typed_and_change_nothing(world: World, case: str) -> None:
    before = world.snapshot()
    _typed_failure(case, READS[case](world))
    assert world.snapshot() == before


def test_lone_surrogates_and_nul_in_free_text_are_stored_safely(world: World) -> None:
    item = _item(errors=_error(message="a\ud800b\x00c", text="\udfff"), stdout="o\udc00")
    assert world.store.record_results(world.running, [item]) == Success(1)
    (failure,) = world.reader.failures(world.running).unwrap()
    failure.message.encode("utf-8")
    failure.text.encode("utf-8")
    assert failure.message[0] == "a"
    assert failure.message.endswith("\x00c")


def test_nul_in_skip_reason_and_output_is_kept(world: World) -> None:
    item = attrs.evolve(
        make_item("t.py::nul"),
        phases=(PhaseResult(Phase.SETUP, Outcome.SKIPPED, 0.0, "why\x00not"),),
        stdout="o\x00ut",
    )
    assert world.store.record_results(world.running, [item]) == Success(1)
    (record,) = [t for t in world.reader.tests(world.running).unwrap() if t.nodeid == "t.py::nul"]
    assert record.skip_reason == "why\x00not"


def test_nul_named_field(world: World) -> None:
    result = world.store.record_results(world.running, [make_item("t.py::a"), _item(nodeid=NUL)])
    error = result.failure()
    assert isinstance(error, InvalidInput)
    assert error.field == "results[1].nodeid"
