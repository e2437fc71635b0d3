"""Retention of test runs on SQLite (``DataStore.prune_runs``, seed 000 semantics).

Ties at the keep boundary, the age limit, running runs, coverage moved to the surviving
sibling of an invocation, orphaned files removed, history and signatures kept; after every
prune every table is checked for orphans (each foreign key read from ``sqlite_schema`` and
``PRAGMA foreign_key_list``) and ``PRAGMA foreign_key_check`` is empty. Counts are exact and
the in-memory layer, given the same calls, returns the same ``PruneRunsResult``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs
import pytest
from returns.result import Success

from runstore.layers import Layer, SqliteDatabase, build, in_memory, merge, sqlite
from runstore.services.clock import Clock, FixedClock
from runstore.services.errors import NotFound
from runstore.services.pagination import MAX_PAGE_SIZE
from runstore.services.test_runs import (
    CollectionError,
    DataReader,
    DataStore,
    ErrorInfo,
    FileCoverage,
    Outcome,
    Phase,
    PruneRunsResult,
    RunId,
    RunRetentionPolicy,
    RunStart,
    RunStatus,
    StackFrame,
    TestResult,
)
from runstore.testing import DAY_MS, T0_MS, make_item, utc

HOUR_MS = 3_600_000


@attrs.define
class Store:
    """The live layer under test and, fed the same calls, the in-memory layer."""

    store: DataStore
    reader: DataReader
    db: SqliteDatabase
    model: DataStore
    model_reader: DataReader
    clock: FixedClock

    def both(self, call: Callable[[DataStore], Any]) -> Any:
        """Make ``call`` on both layers; return the live result after checking they agree."""
        live, model = call(self.store), call(self.model)
        assert live == model, (live, model)
        return live

    def run(
        self,
        items: Sequence[TestResult] = (),
        *,
        project: str = "alpha",
        invocation: str = "inv",
        at_ms: int = T0_MS,
        status: RunStatus | None = RunStatus.PASSED,
        coverage: Sequence[FileCoverage] = (),
        collection: Sequence[CollectionError] = (),
    ) -> RunId:
        run: RunId = self.both(
            lambda s: s.begin_run(RunStart(project, invocation, utc(at_ms)))
        ).unwrap()
        if items:
            self.both(lambda s: s.record_results(run, items)).unwrap()
        if collection:
            self.both(lambda s: s.record_collection_errors(run, collection)).unwrap()
        if coverage:
            self.both(lambda s: s.write_coverage(run, coverage)).unwrap()
        if status is not None:
            self.both(lambda s: s.finish_run(run, status, utc(at_ms + 1_000))).unwrap()
        return run

    def prune(self, keep_runs: int, max_age_days: float | None = None) -> PruneRunsResult:
        result = self.both(lambda s: s.prune_runs(RunRetentionPolicy(keep_runs, max_age_days)))
        assert isinstance(result, Success), result
        check_integrity(self.db)
        pruned: PruneRunsResult = result.unwrap()
        return pruned

    def alive(self) -> set[int]:
        page = self.reader.list_runs(None, limit=MAX_PAGE_SIZE).unwrap()
        return {int(s.id) for s in page.items}


@pytest.fixture
def s() -> Iterator[Store]:
    clock = FixedClock(T0_MS + 10 * DAY_MS)
    clock_layer = Layer.value(Clock, clock)
    with build(merge(sqlite(":memory:"), clock_layer)) as live, build(
        merge(in_memory(), clock_layer)
    ) as model:
        yield Store(
            live.get(DataStore),
            live.get(DataReader),
            live.get(SqliteDatabase),
            model.get(DataStore),
            model.get(DataReader),
            clock,
        )


# -- schema-driven checks ---------------------------------------------------------------------


def tables(db: SqliteDatabase) -> list[str]:
    return [r[0] for r in db.execute(
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        " ORDER BY name")]


def foreign_keys(db: SqliteDatabase) -> list[tuple[str, str, str, str]]:
    """Every single-column foreign key as (child table, child column, parent, parent column)."""
    found = []
    for table in tables(db):
        for row in db.execute(f'PRAGMA foreign_key_list("{table}")'):
            _id, _seq, parent, child_column, parent_column = row[:5]
            found.append((table, child_column, parent, parent_column or "rowid"))
    return found


def orphans(db: SqliteDatabase) -> dict[str, int]:
    """Rows of any table whose foreign key names a missing parent, per (table.column)."""
    found: dict[str, int] = {}
    for table, column, parent, parent_column in foreign_keys(db):
        n = db.scalar(
            f'SELECT count(*) FROM "{table}" c WHERE c."{column}" IS NOT NULL AND NOT EXISTS'
            f' (SELECT 1 FROM "{parent}" p WHERE p."{parent_column}" = c."{column}")'
        )
        if n:
            found[f"{table}.{column}"] = n
    return found


def unreferenced(db: SqliteDatabase, parent: str) -> int:
    """Rows of ``parent`` that no foreign key of any table refers to."""
    refs = [(t, c, pc) for t, c, p, pc in foreign_keys(db) if p == parent]
    assert refs, f"no table refers to {parent}"
    conditions = " AND ".join(
        f'NOT EXISTS (SELECT 1 FROM "{t}" c WHERE c."{c}" = p."{pc}")' for t, c, pc in refs
    )
    return int(db.scalar(f'SELECT count(*) FROM "{parent}" p WHERE {conditions}'))


def check_integrity(db: SqliteDatabase) -> None:
    assert db.execute("PRAGMA foreign_key_check") == []
    assert orphans(db) == {}
    assert unreferenced(db, "files") == 0


def counts(db: SqliteDatabase) -> dict[str, int]:
    return {t: int(db.scalar(f'SELECT count(*) FROM "{t}"')) for t in tables(db)}


def rows_of_runs(db: SqliteDatabase, runs: set[int]) -> dict[str, int]:
    """Rows of every table with a ``run_id`` column that belong to ``runs``."""
    marks = ", ".join("?" for _ in runs)
    found: dict[str, int] = {}
    for table in tables(db):
        columns = {r[1] for r in db.execute(f'PRAGMA table_info("{table}")')}
        if "run_id" in columns:
            n = db.scalar(f'SELECT count(*) FROM "{table}" WHERE run_id IN ({marks})', tuple(runs))
            if n:
                found[table] = n
    return found


def failing(nodeid: str, frame_path: str, message: str = "assert 1 == 2") -> TestResult:
    return make_item(
        nodeid,
        Outcome.FAILED,
        message=message,
        frames=(StackFrame(frame_path, 3, "f", True),),
        module_path=nodeid.split("::")[0],
    )


# -- the rules --------------------------------------------------------------------------------


def test_ties_at_the_boundary_keep_the_higher_ids(s: Store) -> None:
    same = T0_MS
    first = s.run([make_item("t.py::a")], at_ms=same)
    second = s.run([make_item("t.py::a")], at_ms=same)
    third = s.run([make_item("t.py::a")], at_ms=same)
    older = s.run([make_item("t.py::a")], at_ms=same - 1)
    newer = s.run([make_item("t.py::a")], at_ms=same + 1)
    assert s.prune(keep_runs=3) == PruneRunsResult(pruned_runs=2, pruned_files=0)
    assert s.alive() == {newer, third, second}
    for gone in (first, older):
        assert s.reader.get_run(gone).failure() == NotFound("run", str(gone))
    assert s.prune(keep_runs=3) == PruneRunsResult(0, 0)


def test_keep_counts_per_project(s: Store) -> None:
    alpha = [s.run([make_item("t.py::a")], at_ms=T0_MS + i) for i in range(3)]
    beta = [s.run([make_item("t.py::a")], project="beta", at_ms=T0_MS - i) for i in range(2)]
    assert s.prune(keep_runs=2) == PruneRunsResult(1, 0)
    assert s.alive() == {alpha[1], alpha[2], *beta}


def test_max_age_drops_older_runs_and_keeps_the_boundary(s: Store) -> None:
    now = s.clock.now
    ancient = s.run([make_item("old.py::a")], at_ms=now - 3 * DAY_MS)
    just_over = s.run([make_item("t.py::a")], at_ms=now - DAY_MS - 1)
    at_cutoff = s.run([make_item("t.py::a")], at_ms=now - DAY_MS)
    fresh = s.run([make_item("t.py::a")], at_ms=now - HOUR_MS)
    result = s.prune(keep_runs=100, max_age_days=1)
    assert result == PruneRunsResult(pruned_runs=2, pruned_files=1)  # old.py went with them
    assert s.alive() == {at_cutoff, fresh}
    assert {ancient, just_over}.isdisjoint(s.alive())
    half = s.prune(keep_runs=100, max_age_days=0.5)
    assert half == PruneRunsResult(pruned_runs=1, pruned_files=0)
    assert s.alive() == {fresh}


def test_running_runs_are_ranked_but_never_pruned(s: Store) -> None:
    now = s.clock.now
    old_running = s.run([make_item("t.py::a")], at_ms=now - 30 * DAY_MS, status=None)
    finished = [s.run([make_item("t.py::a")], at_ms=now - 5 * DAY_MS + i) for i in range(3)]
    newest_running = s.run([make_item("t.py::a")], at_ms=now, status=None)
    aborted = s.both(lambda st: st.abort_stale_runs("alpha", older_than=utc(0))).unwrap()
    assert aborted == ()
    result = s.prune(keep_runs=1, max_age_days=1)
    assert result == PruneRunsResult(pruned_runs=3, pruned_files=0)
    assert s.alive() == {old_running, newest_running}
    assert set(finished).isdisjoint(s.alive())
    assert s.reader.get_run(old_running).unwrap().status == RunStatus.RUNNING


def test_coverage_moves_to_the_lowest_surviving_sibling(s: Store) -> None:
    files = (FileCoverage("src/a.py", 10, 2, 4, 1, 1, (3, 9)), FileCoverage("src/b.py", 5, 0))
    holder = s.run([make_item("t.py::a")], project="alpha", invocation="i1", at_ms=T0_MS,
                   coverage=files)
    sibling_low = s.run([make_item("t.py::a")], project="beta", invocation="i1", at_ms=T0_MS)
    sibling_high = s.run([make_item("t.py::a")], project="gamma", invocation="i1", at_ms=T0_MS)
    s.run([make_item("t.py::a")], project="alpha", invocation="i2", at_ms=T0_MS + HOUR_MS)
    before = s.reader.coverage(sibling_high).unwrap()
    assert (before.source_run_id, before.files) == (holder, files)
    assert s.prune(keep_runs=1) == PruneRunsResult(pruned_runs=1, pruned_files=0)
    assert s.db.execute("SELECT DISTINCT run_id FROM file_coverage") == [(sibling_low,)]
    for run in (sibling_low, sibling_high):
        report = s.reader.coverage(run).unwrap()
        assert (report.source_run_id, report.files) == (sibling_low, files)
        assert report == s.model_reader.coverage(run).unwrap()


def test_coverage_is_not_moved_when_a_survivor_has_its_own(s: Store) -> None:
    old = (FileCoverage("src/old_only.py", 1, 0),)
    own = (FileCoverage("src/a.py", 3, 1),)
    s.run([make_item("t.py::a")], invocation="i1", at_ms=T0_MS, coverage=old)
    survivor = s.run([make_item("t.py::a")], project="beta", invocation="i1", at_ms=T0_MS,
                     coverage=own)
    s.run([make_item("t.py::a")], invocation="i2", at_ms=T0_MS + 1)
    assert s.prune(keep_runs=1) == PruneRunsResult(pruned_runs=1, pruned_files=1)
    assert s.reader.coverage(survivor).unwrap().files == own
    assert s.db.scalar("SELECT count(*) FROM files WHERE path = 'src/old_only.py'") == 0


def test_only_the_lowest_doomed_runs_coverage_moves(s: Store) -> None:
    first = (FileCoverage("src/first.py", 1, 0),)
    second = (FileCoverage("src/second.py", 1, 0),)
    s.run([make_item("t.py::a")], project="p1", invocation="i1", at_ms=T0_MS, coverage=first)
    s.run([make_item("t.py::a")], project="p2", invocation="i1", at_ms=T0_MS, coverage=second)
    survivor = s.run([make_item("t.py::a")], project="p3", invocation="i1", at_ms=T0_MS)
    s.run([make_item("t.py::a")], project="p1", invocation="i2", at_ms=T0_MS + 1)
    s.run([make_item("t.py::a")], project="p2", invocation="i2", at_ms=T0_MS + 1)
    assert s.prune(keep_runs=1) == PruneRunsResult(pruned_runs=2, pruned_files=1)
    assert s.reader.coverage(survivor).unwrap().files == first


def test_coverage_of_an_invocation_without_survivors_goes(s: Store) -> None:
    s.run([make_item("t.py::a")], invocation="i1", at_ms=T0_MS,
          coverage=(FileCoverage("src/gone.py", 1, 0),))
    newest = s.run([make_item("t.py::a")], invocation="i2", at_ms=T0_MS + 1)
    assert s.prune(keep_runs=1) == PruneRunsResult(pruned_runs=1, pruned_files=1)
    assert s.db.scalar("SELECT count(*) FROM file_coverage") == 0
    assert isinstance(s.reader.coverage(newest).failure(), NotFound)


def test_orphaned_files_go_and_shared_files_stay(s: Store) -> None:
    collect = CollectionError(
        "tests/test_broken.py",
        "tests/test_broken.py",
        ErrorInfo(Phase.COLLECT, "ImportError", "x", "", (StackFrame("src/imp.py", 1, "m", True),)),
    )
    old = s.run(
        [failing("tests/test_old.py::t", "src/old_frame.py"),
         failing("tests/test_shared.py::t", "src/shared_frame.py")],
        invocation="i-old",
        at_ms=T0_MS,
        status=RunStatus.FAILED,
        coverage=(FileCoverage("src/old_cov.py", 1, 1), FileCoverage("src/shared_cov.py", 2, 0)),
        collection=(collect,),
    )
    new = s.run(
        [failing("tests/test_shared.py::t", "src/shared_frame.py")],
        invocation="i-new",
        at_ms=T0_MS + 1,
        status=RunStatus.FAILED,
        coverage=(FileCoverage("src/shared_cov.py", 2, 1),),
    )
    before = counts(s.db)
    assert before["files"] == 8
    result = s.prune(keep_runs=1)
    gone = {"tests/test_old.py", "src/old_frame.py", "src/old_cov.py", "tests/test_broken.py",
            "src/imp.py"}
    assert result == PruneRunsResult(pruned_runs=1, pruned_files=len(gone))
    paths = {r[0] for r in s.db.execute("SELECT path FROM files")}
    assert paths == {"tests/test_shared.py", "src/shared_frame.py", "src/shared_cov.py"}
    assert rows_of_runs(s.db, {old}) == {}
    assert rows_of_runs(s.db, {new}) != {}
    after = counts(s.db)
    assert after["test_runs"] == 1
    assert after["collection_errors"] == 0
    assert after["test_cases"] == 1
    assert after["stack_frames"] == 1


def test_history_and_signatures_outlive_their_runs(s: Store) -> None:
    item = failing("tests/test_x.py::t", "src/x.py", message="expected 3 got 4")
    runs = [s.run([item], at_ms=T0_MS + i, status=RunStatus.FAILED) for i in range(3)]
    signatures_before = s.db.execute(
        "SELECT project, signature, count FROM failure_signatures ORDER BY signature")
    history_before = s.reader.history("alpha", "tests/test_x.py::t").unwrap()
    assert [e.run_id for e in history_before] == runs[::-1]
    assert s.prune(keep_runs=1) == PruneRunsResult(pruned_runs=2, pruned_files=0)
    history = s.reader.history("alpha", "tests/test_x.py::t").unwrap()
    assert [e.run_id for e in history] == [runs[2], None, None]
    assert [attrs.evolve(e, run_id=None) for e in history] == [
        attrs.evolve(e, run_id=None) for e in history_before
    ]
    assert history == s.model_reader.history("alpha", "tests/test_x.py::t").unwrap()
    assert s.db.execute(
        "SELECT project, signature, count FROM failure_signatures ORDER BY signature"
    ) == signatures_before
    assert s.db.execute("SELECT first_seen_run_id, last_seen_run_id FROM failure_signatures") == [
        (None, runs[2])
    ]
    (failure,) = s.reader.failures(runs[2]).unwrap()
    assert failure.is_new is False  # first seen in a pruned run
    later = s.run([item], at_ms=T0_MS + 10, status=RunStatus.FAILED)
    assert s.reader.failures(later).unwrap()[0].is_new is False
    assert s.reader.classify(later).unwrap() == s.model_reader.classify(later).unwrap()


def test_a_mixed_store_prunes_exactly_like_the_model(s: Store) -> None:
    now = s.clock.now
    for i in range(12):
        project = ("alpha", "beta", "gamma")[i % 3]
        items = [
            make_item(f"tests/test_{i % 4}.py::a"),
            failing(f"tests/test_{i % 5}.py::b", f"src/m{i % 6}.py", message=f"bad {i}"),
        ]
        s.run(
            items,
            project=project,
            invocation=f"inv-{i // 3}",
            at_ms=now - (12 - i) * DAY_MS // 2,
            status=(RunStatus.FAILED, RunStatus.INTERRUPTED, None, RunStatus.ABORTED)[i % 4],
            coverage=(FileCoverage(f"src/c{i % 7}.py", 4, i % 4),) if i % 2 else (),
        )
    result = s.prune(keep_runs=2, max_age_days=2.5)
    assert result.pruned_runs > 0
    assert s.alive() == {int(x.id) for x in s.model_reader.list_runs(
        None, limit=MAX_PAGE_SIZE).unwrap().items}
    for run in s.alive():
        rid = RunId(run)
        assert s.reader.get_run(rid) == s.model_reader.get_run(rid)
        assert s.reader.coverage(rid) == s.model_reader.coverage(rid)
        assert s.reader.failures(rid) == s.model_reader.failures(rid)


def test_the_orphan_checks_see_orphans(s: Store) -> None:
    """The checks above would notice: every child table is covered, and a planted orphan and
    an unreferenced file are found."""
    children = {t for t, _, _, _ in foreign_keys(s.db)}
    assert {"test_cases", "test_errors", "stack_frames", "file_coverage", "test_history",
            "test_modules", "collection_errors"} <= children
    run = s.run([failing("tests/test_x.py::t", "src/x.py")], status=RunStatus.FAILED)
    s.db.execute("PRAGMA foreign_keys = OFF")
    try:
        s.db.execute("DELETE FROM test_runs WHERE id = ?", (run,))
        s.db.execute("INSERT INTO files (path) VALUES ('src/nobody.py')")
        found = orphans(s.db)
        assert found["test_cases.run_id"] == 1
        assert found["test_modules.run_id"] == 1
        assert unreferenced(s.db, "files") == 1
        assert s.db.execute("PRAGMA foreign_key_check") != []
    finally:
        s.db.execute("PRAGMA foreign_keys = ON")
