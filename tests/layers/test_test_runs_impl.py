"""What the live test-run layer does beyond the shared contract: its schema, query plans,
id caches that stay honest across savepoint rollbacks and other connections, retention
housekeeping, and run ids that are never reused."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from returns.result import Failure, Result, Success

from runstore.exceptions import TransactionMisuse
from runstore.layers import Container, Layer, SqliteDatabase, build, in_memory, merge, sqlite
from runstore.layers._test_runs_sqlite import SqliteDataStore
from runstore.services.clock import Clock, FixedClock
from runstore.services.test_runs import (
    HISTORY_DEPTH,
    CollectionError,
    DataReader,
    DataStore,
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

T0 = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)
TESTRUN_TABLES = (
    "test_runs",
    "files",
    "tests",
    "test_modules",
    "test_cases",
    "test_output",
    "test_attempts",
    "test_subtests",
    "collection_errors",
    "test_errors",
    "stack_frames",
    "failure_signatures",
    "test_history",
    "file_coverage",
)


def _ok(result: Result[Any, Any]) -> Any:
    assert isinstance(result, Success), result
    return result.unwrap()


def _item(nodeid: str, outcome: Outcome = Outcome.PASSED, *, frame: str | None = None,
          name: str = "t") -> TestResult:
    failing = outcome == Outcome.FAILED
    frames = (StackFrame(frame, 3, "f", True),) if frame else ()
    return TestResult(
        nodeid=nodeid,
        module_path=nodeid.split("::", 1)[0],
        name=name,
        phases=(PhaseResult(Phase.CALL, outcome, 1.0),),
        errors=(ErrorInfo(Phase.CALL, "AssertionError", "assert 1 == 2", "E", frames),)
        if failing
        else (),
        stdout="captured" if failing else "",
    )


class World:
    def __init__(self, container: Container) -> None:
        self.container = container
        self.store: DataStore = container.get(DataStore)
        self.reader: DataReader = container.get(DataReader)

    @property
    def db(self) -> SqliteDatabase:
        return self.container.get(SqliteDatabase)

    def run(self, project: str = "p", hours: int = 0, invocation: str = "i") -> RunId:
        start = RunStart(project, invocation, T0 + timedelta(hours=hours))
        return RunId(_ok(self.store.begin_run(start)))

    def whole(self, items: list[TestResult], project: str = "p", hours: int = 0,
              invocation: str = "i") -> RunId:
        run = self.run(project, hours, invocation)
        _ok(self.store.record_results(run, items))
        failed = any(i.outcome == Outcome.FAILED for i in items)
        status = RunStatus.FAILED if failed else RunStatus.PASSED
        _ok(self.store.finish_run(run, status, T0 + timedelta(hours=hours, minutes=1)))
        return run

    def count(self, table: str) -> int:
        return int(self.db.scalar(f"SELECT count(*) FROM {table}"))

    def foreign_key_violations(self) -> list[Any]:
        return self.db.execute("PRAGMA foreign_key_check")


def _world(layer: Layer, clock: FixedClock | None = None) -> Iterator[World]:
    clocked = merge(layer, Layer.value(Clock, clock or FixedClock(1_704_110_400_000)))
    with build(clocked) as container:
        yield World(container)


@pytest.fixture
def world() -> Iterator[World]:
    yield from _world(sqlite(":memory:"))


# -- schema ---------------------------------------------------------------------------------------


def test_every_foreign_key_child_column_is_indexed(world: World) -> None:
    db = world.db
    missing = []
    for table in TESTRUN_TABLES:
        leading: set[str] = set()
        for index in db.execute(f"PRAGMA index_list({table})"):
            columns = db.execute(f"PRAGMA index_info({index[1]})")
            if columns:
                leading.add(columns[0][2])
        rowid_key = {
            row[1]
            for row in db.execute(f"PRAGMA table_info({table})")
            if row[5] == 1 and row[2].upper() == "INTEGER"
        }
        for fk in db.execute(f"PRAGMA foreign_key_list({table})"):
            column = fk[3]
            if column not in leading and column not in rowid_key:
                missing.append(f"{table}.{column}")
    assert missing == []


def test_tables_are_strict(world: World) -> None:
    for table in TESTRUN_TABLES:
        sql = world.db.scalar("SELECT sql FROM sqlite_schema WHERE name = ?", (table,))
        assert re.search(r"\)\s*STRICT", sql), table


# -- query plans ----------------------------------------------------------------------------------


def _plans_of(world: World, call: Callable[[], Result[Any, Any]]) -> list[str]:
    """Every EXPLAIN QUERY PLAN line of the statements ``call`` runs."""
    db = world.db
    seen: list[str] = []
    original = SqliteDatabase.execute

    def explaining(self: SqliteDatabase, sql: str, params: Any = ()) -> list[Any]:
        if sql.lstrip().upper().startswith("SELECT"):
            for row in self.connection.execute("EXPLAIN QUERY PLAN " + sql, params):
                seen.append(f"{row[3]}    [{sql[:60]}]")
        return original(self, sql, params)

    SqliteDatabase.execute = explaining  # type: ignore[method-assign]
    try:
        _ok(call())
    finally:
        SqliteDatabase.execute = original  # type: ignore[method-assign]
    assert db is world.db
    return seen


def test_hot_reader_queries_search_indexes_and_never_scan(world: World) -> None:
    for hours in range(3):
        run = world.whole(
            [_item(f"t{m}.py::x{i}", Outcome.FAILED if i == hours else Outcome.PASSED,
                   frame="src/a.py") for m in range(3) for i in range(8)],
            hours=hours,
        )
        _ok(world.store.record_collection_errors(
            world.run(hours=hours + 10),
            [CollectionError("t9.py", "t9.py", ErrorInfo(Phase.COLLECT, "ImportError", "x"))],
        ))
    _ok(world.store.write_coverage(run, [FileCoverage("src/a.py", 4, 1)]))
    reader = world.reader
    calls: dict[str, Callable[[], Result[Any, Any]]] = {
        "latest_run": lambda: reader.latest_run("p"),
        "get_run": lambda: reader.get_run(run),
        "list_runs": lambda: reader.list_runs("p", limit=2),
        "failures": lambda: reader.failures(run),
        "classify": lambda: reader.classify(run),
        "flaky_tests": lambda: reader.flaky_tests("p"),
        "history": lambda: reader.history("p", "t1.py::x1"),
        "tests": lambda: reader.tests(run),
        "slowest": lambda: reader.slowest(run, limit=3),
        "compare": lambda: reader.compare(RunId(run - 1), run),
        "coverage": lambda: reader.coverage(run),
        "coverage_trend": lambda: reader.coverage_trend("p"),
        "find_tests": lambda: reader.find_tests("p", "x1"),
    }
    for name, call in calls.items():
        plans = _plans_of(world, call)
        assert plans, name
        scans = [p for p in plans if p.startswith("SCAN") and not p.startswith("SCAN CONSTANT")]
        assert scans == [], (name, plans)


# -- caches ---------------------------------------------------------------------------------------


def test_a_rolled_back_savepoint_leaves_no_stale_file_id(world: World) -> None:
    """Seed 000's bug: a file row inserted inside a savepoint that rolls back must not stay
    cached, or the next write in the same transaction points at a row that is gone."""
    run = world.run()
    world.db.execute(
        "CREATE TEMP TRIGGER refuse_boom BEFORE INSERT ON main.test_cases"
        " WHEN NEW.name = 'boom' BEGIN SELECT RAISE(ABORT, 'refused'); END"
    )
    doomed = [_item("t.py::a", Outcome.FAILED, frame="src/fresh.py", name="boom")]
    kept = [_item("t.py::b", Outcome.FAILED, frame="src/fresh.py")]

    def both() -> Result[int, Any]:
        failed = world.store.record_results(run, doomed)
        assert isinstance(failed, Failure)
        return world.store.record_results(run, kept)

    assert world.db.transact("both", both) == Success(1)
    assert world.foreign_key_violations() == []
    (failure,) = _ok(world.reader.failures(run))
    assert failure.frames[0].path == "src/fresh.py"
    paths = world.db.execute("SELECT path FROM files ORDER BY path")
    assert paths == [("src/fresh.py",), ("t.py",)]


def test_caches_are_dropped_when_another_connection_prunes(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    with build(merge(sqlite(path), Layer.value(Clock, FixedClock(1_704_110_400_000)))) as a_c:
        a = World(a_c)
        a.whole([_item("t.py::a", Outcome.FAILED, frame="src/x.py")], hours=0)
        for b in _world(sqlite(path)):
            b.whole([_item("t.py::a")], hours=1)
            assert _ok(b.store.prune_runs(RunRetentionPolicy(1))).pruned_files == 1  # src/x.py
            b.whole([_item("t.py::a", Outcome.FAILED, frame="src/y.py")], hours=2)
        run = a.run(hours=3)
        _ok(a.store.record_results(run, [_item("t.py::c", Outcome.FAILED, frame="src/x.py")]))
        (failure,) = _ok(a.reader.failures(run))
        assert failure.frames[0].path == "src/x.py"
        assert a.foreign_key_violations() == []


# -- replacement, retention, housekeeping ---------------------------------------------------------


def test_a_rerun_replaces_the_item_and_everything_it_owned(world: World) -> None:
    run = world.run()
    _ok(world.store.record_results(run, [_item("t.py::a", Outcome.FAILED, frame="src/a.py")]))
    owned = ("test_errors", "stack_frames", "test_output")
    assert [world.count(t) for t in owned] == [1, 1, 1]
    _ok(world.store.record_results(run, [_item("t.py::a")]))
    assert [world.count(t) for t in owned] == [0, 0, 0]
    counts = _ok(world.reader.get_run(run)).counts
    assert (counts["passed"], counts["failed"]) == (1, 0)


def test_prune_leaves_no_orphans_and_keeps_history_and_signatures(world: World) -> None:
    old = world.whole([_item("t.py::a", Outcome.FAILED, frame="src/old.py"),
                       _item("skip.py::s", Outcome.SKIPPED)], hours=0)
    _ok(world.store.write_coverage(old, [FileCoverage("src/cov.py", 3, 0)]))
    world.whole([], hours=-5)
    new = world.whole([_item("t.py::a")], hours=1, invocation="j")
    result = _ok(world.store.prune_runs(RunRetentionPolicy(1)))
    assert result.pruned_runs == 2
    assert result.pruned_files == 3  # skip.py, src/old.py, src/cov.py
    db = world.db
    assert world.foreign_key_violations() == []
    for table in ("test_cases", "test_modules", "file_coverage", "collection_errors"):
        orphans = f"SELECT count(*) FROM {table} WHERE run_id NOT IN (SELECT id FROM test_runs)"
        assert db.scalar(orphans) == 0, table
    assert db.execute("SELECT nodeid FROM tests ORDER BY nodeid") == [("t.py::a",)]
    assert [e.run_id for e in _ok(world.reader.history("p", "t.py::a"))] == [new, None]
    assert db.execute("SELECT count, first_seen_run_id FROM failure_signatures") == [(1, None)]
    assert world.count("test_errors") == world.count("stack_frames") == 0
    store = world.store
    assert isinstance(store, SqliteDataStore)
    assert store.compact() == Success(None)


def test_compact_refuses_to_run_inside_a_unit(world: World) -> None:
    store = world.store
    assert isinstance(store, SqliteDataStore)
    with pytest.raises(TransactionMisuse):
        world.db.transact("outer", lambda: store.compact())


def test_compact_rewrites_a_file(tmp_path: Path) -> None:
    for world in _world(sqlite(tmp_path / "c.db")):
        world.whole([_item(f"t.py::{i}") for i in range(50)])
        _ok(world.store.prune_runs(RunRetentionPolicy(1)))
        store = world.store
        assert isinstance(store, SqliteDataStore)
        assert store.compact(full=True) == Success(None)
        assert world.db.scalar("PRAGMA integrity_check") == "ok"


@pytest.mark.parametrize("layer", [in_memory, lambda: sqlite(":memory:")], ids=["memory", "sqlite"])
def test_run_ids_are_never_reused_after_the_newest_is_pruned(layer: Callable[[], Layer]) -> None:
    for world in _world(layer()):
        late = world.whole([_item("t.py::a")], hours=5)
        early = world.whole([_item("t.py::a")], hours=0)  # highest id, oldest start
        assert early > late
        assert _ok(world.store.prune_runs(RunRetentionPolicy(1))).pruned_runs == 1
        assert world.run(hours=9) == early + 1


def test_history_is_trimmed_to_the_depth_per_test(world: World) -> None:
    for hours in range(HISTORY_DEPTH + 4):
        world.whole([_item("t.py::a", Outcome.FAILED if hours % 2 else Outcome.PASSED),
                     _item("t.py::b")], hours=hours)
    rows = world.db.execute("SELECT test_id, count(*) FROM test_history GROUP BY test_id")
    assert [n for _, n in rows] == [HISTORY_DEPTH, HISTORY_DEPTH]
    flaky = _ok(world.reader.flaky_tests("p"))  # the default window: 10 of the 50
    assert [(f.nodeid, f.flips) for f in flaky] == [("t.py::a", 9)]


def test_counts_survive_reruns_across_batches(world: World) -> None:
    run = world.run()
    _ok(world.store.record_results(run, [_item(f"t.py::{i}") for i in range(300)]))
    reruns = [_item(f"t.py::{i}", Outcome.FAILED) for i in range(0, 300, 3)]
    _ok(world.store.record_results(run, reruns))
    _ok(world.store.record_results(run, [_item("t.py::new", Outcome.SKIPPED)]))
    counts = _ok(world.reader.get_run(run)).counts
    assert (counts["passed"], counts["failed"], counts["skipped"]) == (200, 100, 1)
    stored: dict[str, int] = dict(
        world.db.execute("SELECT outcome, count(*) FROM test_cases GROUP BY outcome")
    )
    assert stored == {"passed": 200, "failed": 100, "skipped": 1}


_AWKWARD_IDS = (
    't.py::q["quoted"]',
    "t.py::back\\slash",
    "t.py::tab\tnew\nline\x01bell",
    "t.py::astral[\U0001f600]",
    "t.py::é/ü::[ß]",
    "t.py::plain",
)


def test_a_small_batch_finds_stored_tests_by_their_exact_node_ids(world: World) -> None:
    first = world.whole([_item(n) for n in _AWKWARD_IDS])
    tests_before = world.count("tests")
    run = world.run(hours=1)
    _ok(world.store.record_results(run, [_item(n, Outcome.FAILED) for n in _AWKWARD_IDS]))
    _ok(world.store.record_results(run, [_item(n) for n in _AWKWARD_IDS[:3]]))
    assert world.count("tests") == tests_before == len(_AWKWARD_IDS)
    assert [r.nodeid for r in _ok(world.reader.tests(run))] == sorted(_AWKWARD_IDS)
    counts = _ok(world.reader.get_run(run)).counts
    assert (counts["passed"], counts["failed"]) == (3, 3)
    for nodeid in _AWKWARD_IDS:
        history = _ok(world.reader.history("p", nodeid))
        assert [h.run_id for h in history] == [first]
