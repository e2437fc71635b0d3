"""Migration 0010 (a run's changed files and agent session) on a database written with
migrations 0001-0009.

A run stored before it (written with plain SQL as the 0009 schema held it, dirty tree and
all) reads back with unknown changed files (None, not an empty list: nobody asked git) and
no session; runs recorded after it keep both, and a session lists only its own runs.
"""

from __future__ import annotations

from pathlib import Path

from returns.result import Success

from runstore.layers import Layer, SqliteDatabase, build, merge, sqlite
from runstore.migrations import apply_migrations, shipped_migrations
from runstore.services.clock import Clock, FixedClock
from runstore.services.test_runs import (
    ChangedFile,
    DataReader,
    DataStore,
    Environment,
    RunId,
    RunStart,
)
from runstore.testing import T0_MS, utc

OLD_SCHEMA = 9


def test_the_schema_before_is_0009() -> None:
    assert [m.id for m in shipped_migrations() if m.id <= OLD_SCHEMA] == list(range(1, 10))
    assert any(m.id == 10 and m.name == "run_links" for m in shipped_migrations())


def test_old_runs_have_unknown_changed_files_and_no_session(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = SqliteDatabase.open(path).unwrap()
    try:
        assert isinstance(apply_migrations(db, up_to=OLD_SCHEMA), Success)
        db.execute(
            "INSERT INTO test_runs (id, project, invocation_id, status, started_at_ms,"
            " last_write_at_ms, python_version, pytest_version, platform, git_commit,"
            " git_branch, command_line, host, pid, git_dirty)"
            " VALUES (1, 'alpha', 'inv-1', 'running', ?, ?, '3.11', '9.0', 'linux', 'c0ffee',"
            " 'main', '[]', 'h', 1, 1)",
            (T0_MS, T0_MS),
        )
    finally:
        db.close()

    with build(merge(sqlite(path), Layer.value(Clock, FixedClock(T0_MS)))) as container:
        store, reader = container.get(DataStore), container.get(DataReader)
        old = reader.get_run(RunId(1)).unwrap()
        assert old.environment.git_dirty is True
        assert (old.environment.git_changed_files, old.session_id) == (None, None)
        assert old.environment.git_changed_files_truncated is False

        files = (ChangedFile("src/app.py", " M"), ChangedFile("new/", "??"))
        env = Environment(git_commit="c0ffee", git_dirty=True, git_changed_files=files)
        new = store.begin_run(
            RunStart("alpha", "inv-2", utc(T0_MS + 1), env, session_id="s-1")
        ).unwrap()
        assert new > 1
        listed = reader.list_runs(None, session_id="s-1").unwrap().items
        assert [(r.id, r.environment.git_changed_files) for r in listed] == [(new, files)]
        assert [r.id for r in reader.list_runs("alpha").unwrap().items] == [new, 1]
