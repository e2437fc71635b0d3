"""Migration 0014 (signature spread) on a database written with migrations 0001-0013.

The old database gets its rows copied, table by table, from one the current code wrote, so
it holds exactly what that code stored apart from the new columns. After the upgrade every
signature reads as the current code keeps it: runs and distinct tests counted from the rows
still stored, the listing in last-seen order, and a later run adds to those counts. A
signature whose runs were pruned before the upgrade keeps 1 run and 0 known tests.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from _old_schema import copy_into_old_postgres, copy_into_old_sqlite  # beside this file

from runstore.layers import DATA_READER, DATA_STORE, Layer, SqliteDatabase, build, merge, sqlite
from runstore.migrations import shipped_migrations
from runstore.services.clock import Clock, FixedClock
from runstore.services.test_runs import (
    CollectionError,
    DataReader,
    DataStore,
    ErrorInfo,
    FailureSignature,
    Phase,
    RunStart,
    RunStatus,
    StackFrame,
)
from runstore.testing._test_runs_signatures import failing_item

OLD_SCHEMA = 13
T0_MS = 1_770_000_000_000
CLOCK = FixedClock(T0_MS)
_FRAME = (StackFrame("src/app.py", 3, "load", is_project=True),)
"""The frame of ``failing_item``'s errors, so the collection error shares a signature."""


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _run(store: DataStore, i: int, failing: list[tuple[str, int]], *,
         collection: bool = False, status: RunStatus = RunStatus.FAILED) -> None:
    run = store.begin_run(RunStart("alpha", f"inv-{i}", _utc(T0_MS + i * 10_000))).unwrap()
    store.record_results(run, [failing_item(n, m) for n, m in failing]).unwrap()
    if collection:
        store.record_collection_errors(run, [CollectionError(
            "tests/test_c.py", "tests/test_c.py",
            ErrorInfo(Phase.COLLECT, "KeyError", "'user'", frames=_FRAME))]).unwrap()
    store.finish_run(run, status, _utc(T0_MS + i * 10_000 + 5_000)).unwrap()


def write(store: DataStore) -> None:
    """Four runs: a ValueError in two tests over three runs (one of them interrupted, which
    counts for nothing), a KeyError in a test and a collection error."""
    a, b = "tests/test_a.py::test_one", "tests/test_a.py::test_two"
    _run(store, 1, [(a, 0)])
    _run(store, 2, [(a, 1), (b, 0), ("tests/test_b.py::test_k", 2)], collection=True)
    _run(store, 3, [(b, 0), ("tests/test_b.py::test_x", 0)], status=RunStatus.INTERRUPTED)
    _run(store, 4, [(b, 1)])


def listing(reader: DataReader) -> tuple[FailureSignature, ...]:
    return reader.failure_signatures("alpha", limit=100).unwrap().items


def test_the_schema_before_is_0013() -> None:
    assert max(m.id for m in shipped_migrations() if m.id <= OLD_SCHEMA) == OLD_SCHEMA
    assert any(m.id == 14 and m.name == "signature_spread" for m in shipped_migrations())


def test_old_signatures_read_as_the_current_code_keeps_them(tmp_path: Path) -> None:
    new, old = tmp_path / "new.db", tmp_path / "old.db"
    with build(merge(sqlite(new), Layer.value(Clock, CLOCK))) as container:
        write(container.get(DATA_STORE))
        expected = listing(container.get(DATA_READER))
    assert [(s.exception_type, s.runs, s.tests, s.occurrences) for s in expected] == [
        ("ValueError", 3, 2, 4), ("KeyError", 1, 2, 2)]
    copy_into_old_sqlite(new, old, OLD_SCHEMA)
    with build(merge(sqlite(old), Layer.value(Clock, CLOCK))) as container:
        assert listing(container.get(DATA_READER)) == expected
        _run(container.get(DATA_STORE), 5, [("tests/test_b.py::test_k", 2)])
        after = listing(container.get(DATA_READER))
    assert [(s.exception_type, s.runs, s.tests, s.last_seen_run_id) for s in after] == [
        ("KeyError", 2, 2, 5), ("ValueError", 3, 2, 4)]


def test_signatures_of_runs_pruned_before_it_keep_one_run(tmp_path: Path) -> None:
    new, old = tmp_path / "new.db", tmp_path / "old.db"
    with build(merge(sqlite(new), Layer.value(Clock, CLOCK))) as container:
        write(container.get(DATA_STORE))
    db = SqliteDatabase.open(new).unwrap()
    try:
        db.execute("DELETE FROM test_runs WHERE id IN (1, 2)")
    finally:
        db.close()
    copy_into_old_sqlite(new, old, OLD_SCHEMA)
    with build(merge(sqlite(old), Layer.value(Clock, CLOCK))) as container:
        found = listing(container.get(DATA_READER))
    assert [(s.exception_type, s.runs, s.tests, s.first_seen_run_id) for s in found] == [
        ("ValueError", 1, 1, None), ("KeyError", 1, 0, None)]


def test_postgresql_old_signatures_read_as_the_current_code_keeps_them(
    tmp_path: Path, postgres_dsn: str
) -> None:
    from runstore.layers._postgres_layer import postgres

    new = tmp_path / "new.db"
    with build(merge(sqlite(new), Layer.value(Clock, CLOCK))) as container:
        write(container.get(DATA_STORE))
        expected = listing(container.get(DATA_READER))
    copy_into_old_postgres(new, postgres_dsn, OLD_SCHEMA)
    with build(merge(postgres(postgres_dsn), Layer.value(Clock, CLOCK))) as container:
        assert listing(container.get(DATA_READER)) == expected
