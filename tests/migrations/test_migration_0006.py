"""Migration 0006 (test-run evidence) on a database written with migrations 0001-0005.

The old rows are written with plain SQL as the 0005 schema held them; after the upgrade the
readers see sensible values: counted subtest totals, the default selection, unknown dirty
flags, history messages and rerun failures read back from rows still stored, streaks walked
over history rows that never stored one, and "new" computed for runs that ended before it
was frozen.
"""

from __future__ import annotations

from pathlib import Path

from returns.result import Success

from runstore.layers import Layer, SqliteDatabase, build, merge, sqlite
from runstore.migrations import apply_migrations, shipped_migrations
from runstore.services.clock import Clock, FixedClock
from runstore.services.test_runs import (
    Classification,
    DataReader,
    DataStore,
    EvidenceRule,
    Outcome,
    RunId,
    RunStart,
    RunStatus,
    Selection,
)
from runstore.testing import T0_MS, make_item, utc

OLD_SCHEMA = 5

_OLD_ROWS = """
INSERT INTO files (id, path) VALUES (1, 't.py');
INSERT INTO tests (id, project, nodeid) VALUES (1, 'alpha', 't.py::x'), (2, 'alpha', 't.py::s');
"""


def _old_run(db: SqliteDatabase, run_id: int, *, commit: str) -> None:
    """Write a finished ``failed`` run as 0005 did: ``t.py::x`` failed after one failed
    rerun attempt, ``t.py::s`` passed with two subtests (one skipped), a history row each."""
    at = T0_MS + run_id * 1_000
    db.execute(
        "INSERT INTO test_runs (id, project, invocation_id, status, started_at_ms,"
        " finished_at_ms, last_write_at_ms, python_version, pytest_version, platform,"
        " git_commit, git_branch, command_line, host, pid, n_passed, n_failed)"
        " VALUES (?, 'alpha', ?, 'failed', ?, ?, ?, '3.11', '8.3', 'linux', ?, 'main', '[]',"
        " 'h', 1, 1, 1)",
        (run_id, f"inv-{run_id}", at, at + 10, at + 10, commit),
    )
    module, case_x, case_s = 10 * run_id, 10 * run_id + 1, 10 * run_id + 2
    db.execute("INSERT INTO test_modules (id, run_id, file_id) VALUES (?, ?, 1)",
               (module, run_id))
    db.execute(
        "INSERT INTO test_cases (id, run_id, test_id, module_id, outcome, duration_ms, name,"
        " call_outcome, call_ms, attempts) VALUES (?, ?, 1, ?, 'failed', 1.0, 'x', 'failed',"
        " 1.0, 1), (?, ?, 2, ?, 'passed', 1.0, 's', 'passed', 1.0, 0)",
        (case_x, run_id, module, case_s, run_id, module),
    )
    db.execute(
        "INSERT INTO test_attempts (case_id, ordinal, outcome, duration_ms, call_outcome,"
        " call_ms) VALUES (?, 1, 'failed', 1.0, 'failed', 1.0)",
        (case_x,),
    )
    db.execute(
        "INSERT INTO test_subtests (case_id, ordinal, description, outcome, duration_ms)"
        " VALUES (?, 0, 'i=0', 'passed', 0.5), (?, 1, 'i=1', 'skipped', 0.0)",
        (case_s, case_s),
    )
    db.execute(
        "INSERT INTO test_errors (id, case_id, attempt, ordinal, depth, phase,"
        " exception_type, message, message_truncated, text, text_truncated, signature,"
        " signature_frame) VALUES (?, ?, 0, 0, 0, 'call', 'AssertionError', ?, 0, 'E', 0,"
        " 'sig', '')",
        (case_x, case_x, f"boom {run_id}"),
    )
    seq = db.scalar(
        "UPDATE test_run_sequences SET value = value + 1 WHERE name = 'history'"
        " RETURNING value"
    )
    db.execute(
        "INSERT INTO test_history (test_id, seq, run_id, outcome, duration_ms,"
        " recorded_at_ms) VALUES (1, ?1, ?2, 'failed', 1.0, ?3), (2, ?1, ?2, 'passed', 1.0, ?3)",
        (seq, run_id, at + 10),
    )
    db.execute(
        "INSERT INTO failure_signatures (project, signature, exception_type, message, frame,"
        " count, first_seen_run_id, last_seen_run_id, first_seen_at_ms, last_seen_at_ms)"
        " VALUES ('alpha', 'sig', 'AssertionError', 'boom <num>', '', 1, ?1, ?1, ?2, ?2)"
        " ON CONFLICT (project, signature) DO UPDATE SET count = count + 1,"
        " last_seen_run_id = excluded.last_seen_run_id",
        (run_id, at + 10),
    )


def test_the_schema_before_is_0005() -> None:
    assert [m.id for m in shipped_migrations() if m.id <= OLD_SCHEMA] == [1, 2, 3, 4, 5]
    assert any(m.id == 6 and m.name == "test_run_evidence" for m in shipped_migrations())


def test_old_runs_and_history_read_sensibly_after_the_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = SqliteDatabase.open(path).unwrap()
    try:
        assert isinstance(apply_migrations(db, up_to=OLD_SCHEMA), Success)
        db.execute(_OLD_ROWS)
        _old_run(db, 1, commit="c0ffee")
        _old_run(db, 2, commit="c0ffee")
    finally:
        db.close()

    clock = Layer.value(Clock, FixedClock(T0_MS + 60_000))
    with build(merge(sqlite(path), clock)) as c:
        reader: DataReader = c.get(DataReader)
        store: DataStore = c.get(DataStore)
        old = reader.get_run(RunId(2)).unwrap()
        assert old.subtests == {"passed": 1, "failed": 0, "skipped": 1}
        assert old.selection == Selection()
        assert old.environment.git_dirty is None
        newest, oldest = reader.history("alpha", "t.py::x").unwrap()
        assert (newest.message, newest.git_commit, newest.git_dirty, newest.rerun_failures) == (
            "boom 2", "c0ffee", None, 1
        )
        assert oldest.message == "boom 1"
        (passing, _) = reader.history("alpha", "t.py::s").unwrap()
        assert (passing.message, passing.rerun_failures) == (None, 0)
        (x,) = reader.failures(RunId(2)).unwrap()
        assert (x.is_new, x.streak, x.failing_since, x.streak_message) == (
            False, 2, RunId(1), "boom 1"
        )
        assert reader.failures(RunId(1)).unwrap()[0].is_new
        verdicts = {t.nodeid: t for t in reader.classify(RunId(2)).unwrap()}
        assert verdicts["t.py::x"].classification == Classification.PERSISTENT_FAILURE

        run = store.begin_run(RunStart("alpha", "inv-3", utc(T0_MS + 50_000))).unwrap()
        store.record_results(run, [make_item("t.py::x", Outcome.FAILED, message="boom 3"),
                                   make_item("t.py::s")]).unwrap()
        store.finish_run(run, RunStatus.FAILED, utc(T0_MS + 51_000)).unwrap()
        (x,) = reader.failures(run).unwrap()
        assert (x.streak, x.failing_since, x.streak_message) == (3, RunId(1), "boom 1")
        (entry, *_) = reader.history("alpha", "t.py::x").unwrap()
        assert entry.message == "boom 3"
        verdicts = {t.nodeid: t for t in reader.classify(run).unwrap()}
        assert (verdicts["t.py::s"].classification, verdicts["t.py::s"].because.rule) == (
            Classification.STABLE, EvidenceRule.NO_FAILURE
        )
        assert verdicts["t.py::x"].because.rule == EvidenceRule.FAILING_STREAK
