"""``list_runs(session_id=...)`` and the changed files of the runs it returns are read by
indexes: ``EXPLAIN QUERY PLAN`` of every statement the reader runs shows no ``SCAN`` of
``test_runs`` or ``test_run_changed_files``, with and without ``ANALYZE``."""

from __future__ import annotations

from typing import Any

import pytest

from runstore.layers import Layer, SqliteDatabase, build, merge, sqlite
from runstore.services.clock import Clock, FixedClock
from runstore.services.test_runs import ChangedFile, DataReader, DataStore, Environment, RunStart
from runstore.testing import T0_MS, utc


@pytest.mark.parametrize("analyzed", [False, True], ids=["as shipped", "analyzed"])
def test_a_sessions_runs_are_found_by_index(analyzed: bool) -> None:
    layer = merge(sqlite(":memory:"), Layer.value(Clock, FixedClock(T0_MS)))
    with build(layer) as container:
        store, reader = container.get(DataStore), container.get(DataReader)
        db = container.get(SqliteDatabase)
        files = tuple(ChangedFile(f"src/m{i}.py", " M") for i in range(5))
        for i in range(600):
            env = Environment(git_dirty=True, git_changed_files=files[: i % 6])
            start = RunStart(f"p{i % 3}", f"inv-{i}", utc(T0_MS + i), env,
                             session_id=None if i % 4 else f"s-{i % 40}")
            store.begin_run(start).unwrap()
        if analyzed:
            db.execute("ANALYZE")
        statements: list[tuple[str, Any]] = []

        def trace(_cursor: Any, sql: str, bindings: Any) -> bool:
            statements.append((sql, bindings))
            return True

        db.connection.exec_trace = trace
        try:
            page = reader.list_runs(None, session_id="s-8", limit=5).unwrap()
            reader.list_runs("p2", session_id="s-8", limit=5).unwrap()
        finally:
            db.connection.exec_trace = None
        assert [s.session_id for s in page.items] == ["s-8"] * 5
        assert any(s.environment.git_changed_files for s in page.items)
        plans = []
        for sql, bindings in statements:
            if not sql.lstrip().upper().startswith("SELECT"):
                continue
            rows = db.execute(f"EXPLAIN QUERY PLAN {sql}", bindings or ())
            plans.append(" / ".join(str(r[-1]) for r in rows))
        joined = "\n".join(plans)
        assert "test_runs_session" in joined, joined
        assert "test_run_changed_files" in joined, joined
        for plan in plans:
            for table in ("test_runs", "test_run_changed_files"):
                assert f"SCAN {table}" not in plan, plan
