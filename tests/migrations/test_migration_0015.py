"""Migration 0015 (history run share) on a database written with migrations 0001-0014.

The old database gets its rows copied, table by table, from one the current code wrote, so
it holds exactly what that code stored apart from the new columns. After the upgrade each
history entry whose run is still stored carries that run's executed and failing item counts,
as the current code writes them when a run finishes, so the outage guard judges the old
runs as it judges new ones; an entry whose run was pruned before the upgrade has None
(unknown: not an outage).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import apsw
from _old_schema import copy_into_old_sqlite  # beside this file

from runstore.layers import DATA_READER, DATA_STORE, Layer, SqliteDatabase, build, merge, sqlite
from runstore.migrations import shipped_migrations
from runstore.services.clock import Clock, FixedClock
from runstore.services.test_runs import (
    Classification,
    DataReader,
    DataStore,
    EvidenceRule,
    Outcome,
    Phase,
    PhaseResult,
    RunId,
    RunStart,
    RunStatus,
    TestResult,
)

OLD_SCHEMA = 14
T0_MS = 1_770_000_000_000
CLOCK = FixedClock(T0_MS)
X = "tests/test_a.py::test_x"
OTHERS = [f"tests/test_a.py::test_{n}" for n in range(9)]


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _item(nodeid: str, failing: bool) -> TestResult:
    outcome = Outcome.FAILED if failing else Outcome.PASSED
    return TestResult(nodeid, "tests/test_a.py", nodeid.split("::")[1],
                      (PhaseResult(Phase.CALL, outcome, 1.0),))


def write(store: DataStore) -> list[RunId]:
    """x goes P, F, P, F (oldest first); its first failure falls in a run where all 10
    tests failed (an outage by the default policy)."""
    runs = []
    for i, (mine, theirs) in enumerate([(False, False), (True, True), (False, False),
                                        (True, False)]):
        run = store.begin_run(RunStart("alpha", f"inv-{i}", _utc(T0_MS + i * 10_000))).unwrap()
        store.record_results(run, [_item(X, mine), *(_item(n, theirs) for n in OTHERS)]).unwrap()
        status = RunStatus.FAILED if mine or theirs else RunStatus.PASSED
        store.finish_run(run, status, _utc(T0_MS + i * 10_000 + 5_000)).unwrap()
        runs.append(run)
    return runs


def _shares(reader: DataReader) -> list[tuple[int | None, int | None]]:
    return [(e.run_executed, e.run_failing) for e in reader.history("alpha", X).unwrap()]


def test_the_schema_before_is_0014() -> None:
    assert max(m.id for m in shipped_migrations() if m.id <= OLD_SCHEMA) == OLD_SCHEMA
    assert any(m.id == 15 and m.name == "history_run_share" for m in shipped_migrations())


def test_old_history_gets_its_runs_counts_and_the_outage_guard_applies(tmp_path: Path) -> None:
    new, old = tmp_path / "new.db", tmp_path / "old.db"
    with build(merge(sqlite(new), Layer.value(Clock, CLOCK))) as container:
        runs = write(container.get(DATA_STORE))
        reader = container.get(DATA_READER)
        expected = reader.history("alpha", X).unwrap()
        verdicts = reader.classify(runs[-1]).unwrap()
    assert [(e.run_executed, e.run_failing) for e in expected] == [
        (10, 1), (10, 0), (10, 10), (10, 0)]
    copy_into_old_sqlite(new, old, OLD_SCHEMA)
    with apsw.Connection(str(old)) as connection:  # nothing of the counts before 0015
        assert "run_executed" not in {r[1] for r in connection.execute(
            "PRAGMA table_info(test_history)")}
    with build(merge(sqlite(old), Layer.value(Clock, CLOCK))) as container:
        reader = container.get(DATA_READER)
        assert reader.history("alpha", X).unwrap() == expected
        assert reader.classify(runs[-1]).unwrap() == verdicts
    (x,) = [v for v in verdicts if v.nodeid == X]
    assert (x.classification, x.because.rule) == (
        Classification.NEW_FAILURE, EvidenceRule.FIRST_FAILURE)


def test_entries_of_runs_pruned_before_it_have_no_counts(tmp_path: Path) -> None:
    new, old = tmp_path / "new.db", tmp_path / "old.db"
    with build(merge(sqlite(new), Layer.value(Clock, CLOCK))) as container:
        runs = write(container.get(DATA_STORE))
    db = SqliteDatabase.open(new).unwrap()
    try:
        db.execute("DELETE FROM test_runs WHERE id = ?", (runs[1],))
    finally:
        db.close()
    copy_into_old_sqlite(new, old, OLD_SCHEMA)
    with build(merge(sqlite(old), Layer.value(Clock, CLOCK))) as container:
        reader = container.get(DATA_READER)
        assert _shares(reader) == [(10, 1), (10, 0), (None, None), (10, 0)]
        # The pruned outage is unknown, so no longer left out: x reads as flaky again.
        (x,) = [v for v in reader.classify(runs[-1]).unwrap() if v.nodeid == X]
    assert (x.classification, x.because.rule) == (Classification.FLAKY, EvidenceRule.OSCILLATION)
