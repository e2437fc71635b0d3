"""Fault injection into the live DataStore: a statement fails mid-transaction.

Two kinds of fault: a TEMP trigger that ``RAISE(ABORT)``s on the k-th insert into one table
(counted by a Python function, so the count survives the rollback), and a full database
(``PRAGMA max_page_count``). After each failed write every row of every table (counters and
the derived ``n_*`` counts included) and the layer's id caches are as they were, the Failure
is typed, and the next write succeeds and leaves the store as a layer that never saw the
failed call would (the in-memory layer fed only the successful calls).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import apsw
import attrs
import pytest
from returns.result import Failure, Result, Success

from runstore.layers import Layer, SqliteDatabase, build, in_memory, merge, sqlite
from runstore.layers._test_runs_sqlite import SqliteDataStore
from runstore.services.clock import Clock, FixedClock
from runstore.services.errors import StorageFailure, StorageFailureKind
from runstore.services.pagination import MAX_PAGE_SIZE
from runstore.services.test_runs import (
    CollectionError,
    DataReader,
    DataStore,
    ErrorInfo,
    FileCoverage,
    Outcome,
    Phase,
    RunId,
    RunRetentionPolicy,
    RunStart,
    RunStatus,
    StackFrame,
    SubtestResult,
    TestResult,
)
from runstore.testing import T0_MS, make_item, utc


class Faults:
    """Decides which insert fails: the ``k``-th one into ``table`` (1-based), once armed."""

    def __init__(self) -> None:
        self.table = ""
        self.k = 0
        self.seen = 0

    def arm(self, table: str, k: int) -> None:
        self.table, self.k, self.seen = table, k, 0

    def disarm(self) -> None:
        self.table = ""

    def fire(self, *args: Any) -> int:
        """The SQL function: 1 when this call is the armed one (``args`` is the table)."""
        table = args[0]
        if table != self.table:
            return 0
        self.seen += 1
        return 1 if self.seen == self.k else 0


@attrs.define
class World:
    store: DataStore
    reader: DataReader
    db: SqliteDatabase
    model: DataStore
    model_reader: DataReader
    faults: Faults

    def both(self, call: Callable[[DataStore], Result[Any, Any]]) -> Any:
        live, model = call(self.store), call(self.model)
        assert live == model, (live, model)
        return live.unwrap()

    def snapshot(self) -> Any:
        names = [r[0] for r in self.db.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")]
        rows = {n: sorted(self.db.execute(f'SELECT * FROM "{n}"'), key=repr) for n in names}
        return rows, caches(self.store)

    def agree(self) -> None:
        """Every run reads the same from the live layer as from the model."""
        live = self.reader.list_runs(None, limit=MAX_PAGE_SIZE)
        assert live == self.model_reader.list_runs(None, limit=MAX_PAGE_SIZE)
        for summary in live.unwrap().items:
            for query in ("tests", "failures", "classify", "coverage"):
                a = getattr(self.reader, query)(summary.id)
                b = getattr(self.model_reader, query)(summary.id)
                assert a == b, (query, a, b)
        assert self.db.execute("PRAGMA foreign_key_check") == []


def caches(store: DataStore) -> dict[str, dict[Any, Any]]:
    """The id caches of the live store (mirrors of rows: files and modules)."""
    assert isinstance(store, SqliteDataStore)
    return {name: dict(getattr(store, name)) for name in ("_files", "_modules")}


TABLES = (
    "test_runs", "files", "tests", "test_modules", "test_cases", "test_output",
    "test_attempts", "test_subtests", "collection_errors", "test_errors", "stack_frames",
    "test_history", "failure_signatures", "failure_signature_tests", "file_coverage",
)


def _open(path: str) -> Iterator[World]:
    clock_layer = Layer.value(Clock, FixedClock(T0_MS))
    with build(merge(sqlite(path), clock_layer)) as live, build(
        merge(in_memory(), clock_layer)
    ) as model:
        db: SqliteDatabase = live.get(SqliteDatabase)
        faults = Faults()
        db.connection.create_scalar_function("runstore_test_fault", faults.fire, 1)
        for table in TABLES:
            db.execute(
                f"CREATE TEMP TRIGGER fault_{table} BEFORE INSERT ON main.{table}"
                f" WHEN runstore_test_fault('{table}')"
                " BEGIN SELECT RAISE(ABORT, 'injected fault'); END"
            )
        for event, table in (("DELETE", "test_runs"), ("DELETE", "files"),
                             ("DELETE", "tests"), ("UPDATE", "file_coverage")):
            name = f"{event.lower()} {table}"
            db.execute(
                f"CREATE TEMP TRIGGER fault_{event.lower()}_{table} BEFORE {event}"
                f" ON main.{table} WHEN runstore_test_fault('{name}')"
                " BEGIN SELECT RAISE(ABORT, 'injected fault'); END"
            )
        yield World(
            live.get(DataStore), live.get(DataReader), db, model.get(DataStore),
            model.get(DataReader), faults,
        )


@pytest.fixture
def w() -> Iterator[World]:
    yield from _open(":memory:")


def frame(path: str) -> StackFrame:
    return StackFrame(path, 7, "f", True)


def rich_batch(tag: str) -> list[TestResult]:
    """Items that touch every child table: new files, errors with causes and frames, output,
    attempts and subtests."""
    cause = ErrorInfo(Phase.CALL, "OSError", f"disk {tag}", "", (frame(f"src/cause_{tag}.py"),))
    error = ErrorInfo(Phase.CALL, "AssertionError", f"bad {tag}", "E", (frame(f"src/{tag}.py"),
                                                                         frame("src/shared.py")),
                      cause)
    failing = attrs.evolve(
        make_item(f"tests/test_{tag}.py::t_fail", Outcome.FAILED), errors=(error,),
        stdout=f"out {tag}",
        attempts=(make_item(f"tests/test_{tag}.py::t_fail", Outcome.FAILED),),
        subtests=(SubtestResult("sub", Outcome.FAILED, 1.0, error),),
    )
    return [make_item(f"tests/test_{tag}.py::t_ok"), failing,
            make_item("tests/test_shared.py::t", Outcome.PASSED)]


def seed(w: World) -> RunId:
    """One finished run and one running run with items; returns the running one."""
    done = w.both(lambda s: s.begin_run(RunStart("alpha", "inv-0", utc(T0_MS))))
    w.both(lambda s: s.record_results(done, rich_batch("seed")))
    w.both(lambda s: s.write_coverage(done, [FileCoverage("src/shared.py", 4, 1)]))
    w.both(lambda s: s.finish_run(done, RunStatus.FAILED, utc(T0_MS + 1)))
    running: RunId = w.both(lambda s: s.begin_run(RunStart("alpha", "inv-1", utc(T0_MS + 2))))
    w.both(lambda s: s.record_results(running, [make_item("tests/test_shared.py::t")]))
    return running


Write = Callable[[DataStore, RunId], Result[Any, Any]]

WRITES: dict[str, Write] = {
    "record_results": lambda s, r: s.record_results(r, rich_batch("new")),
    "rerun": lambda s, r: s.record_results(
        r, [make_item("tests/test_shared.py::t", Outcome.FAILED), *rich_batch("new")]),
    "record_collection_errors": lambda s, r: s.record_collection_errors(r, [
        CollectionError("tests/test_c.py", "tests/test_c.py",
                        ErrorInfo(Phase.COLLECT, "ImportError", "x", "", (frame("src/c.py"),))),
    ]),
    "finish_run": lambda s, r: s.finish_run(r, RunStatus.FAILED, utc(T0_MS + 9)),
    "write_coverage": lambda s, r: s.write_coverage(r, [FileCoverage("src/cov_new.py", 3, 1),
                                                        FileCoverage("src/shared.py", 4, 0)]),
    "begin_run": lambda s, r: s.begin_run(RunStart("alpha", "inv-2", utc(T0_MS + 3))),
    "prune_runs": lambda s, r: s.prune_runs(RunRetentionPolicy(1)),
}

# Which tables each write inserts into (so every (write, table) pair below really faults);
# prune deletes runs, files and tests and moves coverage.
INSERTS: dict[str, tuple[str, ...]] = {
    "record_results": ("files", "tests", "test_modules", "test_cases", "test_output",
                       "test_attempts", "test_subtests", "test_errors", "stack_frames"),
    "rerun": ("files", "test_cases", "test_errors", "stack_frames"),
    "record_collection_errors": ("files", "test_modules", "collection_errors", "test_errors",
                                 "stack_frames"),
    "finish_run": ("test_history", "failure_signatures", "failure_signature_tests"),
    "write_coverage": ("files", "file_coverage"),
    "begin_run": ("test_runs",),
    "prune_runs": ("delete test_runs", "delete files", "delete tests", "update file_coverage"),
}

CASES = [(write, table, at) for write, tables in INSERTS.items() for table in tables
         for at in ("first", "last")]


def _whole_run(w: World, i: int, status: RunStatus) -> None:
    start = RunStart("alpha", "inv-0", utc(T0_MS - i - 1))
    old: RunId = w.both(lambda s: s.begin_run(start))
    w.both(lambda s: s.record_results(old, rich_batch(f"old{i}")))
    w.both(lambda s: s.finish_run(old, status, utc(T0_MS)))


def _prepare(w: World, write: str, running: RunId) -> None:
    if write == "finish_run":
        w.both(lambda s: s.record_results(running, rich_batch("fin")))
    if write == "prune_runs":  # more doomed runs, one whose coverage moves to a sibling
        for i in range(3):
            # the first one is interrupted: no history, so its tests are collected too
            _whole_run(w, i, RunStatus.INTERRUPTED if i == 0 else RunStatus.PASSED)
        w.both(lambda s: s.begin_run(RunStart("beta", "inv-0", utc(T0_MS))))


def count_inserts(w: World, write: str, running: RunId, table: str) -> int:
    """How many rows ``write`` inserts into ``table``, from a dry run that is rolled back."""
    w.faults.arm(table, 0)  # counts, never fires
    dry = w.db.transact("dry run", lambda: WRITES[write](w.store, running).bind(
        lambda _: Failure("roll the dry run back")))
    assert dry == Failure("roll the dry run back"), dry
    w.faults.disarm()
    return w.faults.seen


@pytest.mark.parametrize(("write", "table", "at"), CASES)
def test_a_failing_insert_changes_nothing(w: World, write: str, table: str, at: str) -> None:
    running = seed(w)
    _prepare(w, write, running)
    before = w.snapshot()
    inserts = count_inserts(w, write, running, table)
    assert inserts >= 1, f"{write} inserts nothing into {table}"
    assert w.snapshot() == before
    w.faults.arm(table, 1 if at == "first" else inserts)
    result = WRITES[write](w.store, running)
    w.faults.disarm()
    assert isinstance(result, Failure), result
    error = result.failure()
    assert isinstance(error, StorageFailure), error
    assert error.kind == StorageFailureKind.CONSTRAINT
    assert w.snapshot() == before
    # The next write succeeds and leaves exactly what a layer that never saw the fault has.
    w.both(lambda s: WRITES[write](s, running))
    w.agree()


def test_a_rolled_back_savepoint_does_not_leave_stale_cached_ids(w: World) -> None:
    """Seed 000's bug: a nested unit that fails after inserting (and caching) a file must not
    leave a cached id for a row its rollback removed; a later write in the same transaction
    re-creates the file."""
    running = seed(w)
    store, db = w.store, w.db

    def outer() -> Result[int, Any]:
        w.faults.arm("stack_frames", 1)
        failed = store.record_results(running, rich_batch("sp"))  # a SAVEPOINT inside outer
        w.faults.disarm()
        assert isinstance(failed, Failure), failed
        assert "src/sp.py" not in caches(store)["_files"]
        return store.record_results(running, rich_batch("sp"))

    assert db.transact("outer", outer) == Success(3)
    w.model.record_results(running, rich_batch("sp")).unwrap()
    w.agree()
    paths = {f.path for failure in w.reader.failures(running).unwrap() for f in failure.frames}
    assert "src/sp.py" in paths


@pytest.fixture
def wf(tmp_path: Path) -> Iterator[World]:
    yield from _open(str(tmp_path / "full.db"))


def _fill_limit(db: SqliteDatabase, spare_pages: int) -> None:
    pages = int(db.scalar("PRAGMA page_count"))
    db.execute(f"PRAGMA max_page_count = {pages + spare_pages}")


@pytest.mark.parametrize("write", ["record_results", "write_coverage", "finish_run"])
def test_a_full_database_changes_nothing_and_the_next_write_succeeds(
    wf: World, write: str
) -> None:
    running = seed(wf)
    big = [
        attrs.evolve(item, stdout="x" * 60_000, nodeid=f"{item.nodeid}_{i}")
        for i in range(40) for item in rich_batch(f"full{i}")
    ]
    calls: dict[str, Write] = {
        "record_results": lambda s, r: s.record_results(r, big),
        "write_coverage": lambda s, r: s.write_coverage(
            r, [FileCoverage(f"src/{'d' * 200}/f{i}.py", 10, 1, missing_lines=tuple(
                range(1, 400, 2))) for i in range(3_000)]),
        "finish_run": lambda s, r: s.finish_run(r, RunStatus.FAILED, utc(T0_MS + 9)),
    }
    if write == "finish_run":  # many items so that history and signatures need pages
        wf.both(lambda s: s.record_results(running, [
            make_item(f"tests/test_h.py::t{i}", Outcome.FAILED, message=f"m{i} {'y' * 300}",
                      frames=(frame(f"src/h{i}.py"),)) for i in range(3_000)
        ]))
    before = wf.snapshot()
    _fill_limit(wf.db, spare_pages=2)
    result = calls[write](wf.store, running)
    assert isinstance(result, Failure), result
    error = result.failure()
    assert isinstance(error, StorageFailure), error
    assert error.kind == StorageFailureKind.FULL
    wf.db.execute("PRAGMA max_page_count = 1073741823")
    assert wf.snapshot() == before
    assert wf.db.execute("PRAGMA integrity_check") == [("ok",)]
    wf.both(lambda s: calls[write](s, running))
    wf.agree()


def test_the_fault_function_is_wired(w: World) -> None:
    """The injection itself works (a fault in a raw insert is a constraint error)."""
    w.faults.arm("files", 1)
    with pytest.raises(apsw.ConstraintError):
        w.db.execute("INSERT INTO files (path) VALUES ('x')")
    w.faults.disarm()
    w.db.execute("INSERT INTO files (path) VALUES ('x')")


_: Sequence[str] = TABLES
