"""``tests_for`` reads per-test coverage through indexes (``EXPLAIN QUERY PLAN``): the
measured runs by the project's run index, then one key range per run and file, never a
scan of ``test_coverage``; as shipped (no statistics) and after ``ANALYZE``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from runstore.layers import SqliteDatabase, build, sqlite
from runstore.services.test_runs import DataReader, DataStore, RunStart, TestLines
from runstore.testing import T0_MS, make_item, utc


@pytest.fixture(params=["as shipped", "analyzed"])
def db(request: pytest.FixtureRequest) -> Iterator[tuple[SqliteDatabase, DataReader]]:
    with build(sqlite(":memory:")) as c:
        store = c.get(DataStore)
        for project in ("alpha", "beta"):
            for r in range(15):
                run = store.begin_run(RunStart(project, f"inv-{r}", utc(T0_MS + r))).unwrap()
                store.record_results(run, [make_item(f"tests/t.py::test_{t}")
                                           for t in range(40)]).unwrap()
                store.write_test_coverage(run, [
                    TestLines(f"tests/t.py::test_{t}", f"src/m{f}.py", (1, 2, t + 3))
                    for t in range(40) for f in range(12)
                ]).unwrap()
        database = c.get(SqliteDatabase)
        if request.param == "analyzed":
            database.execute("ANALYZE")
        yield database, c.get(DataReader)


def _plans(database: SqliteDatabase, reader: DataReader) -> list[str]:
    statements: list[tuple[str, tuple[Any, ...]]] = []

    def trace(_cursor: object, sql: str, bindings: object) -> bool:
        if "test_coverage" in sql and not sql.lstrip().upper().startswith("EXPLAIN"):
            statements.append((sql, tuple(bindings) if bindings else ()))  # type: ignore[arg-type]
        return True

    database.connection.exec_trace = trace
    try:
        answer = reader.tests_for("alpha", "src/m3.py", line=5, runs=10).unwrap()
    finally:
        database.connection.exec_trace = None
    assert [t.nodeid for t in answer.tests] == ["tests/t.py::test_2"]
    assert len(statements) == 2
    return [
        " | ".join(str(row[-1]) for row in database.execute(f"EXPLAIN QUERY PLAN {sql}", params))
        for sql, params in statements
    ]


def test_tests_for_never_scans_per_test_coverage(
    db: tuple[SqliteDatabase, DataReader],
) -> None:
    runs_plan, rows_plan = _plans(*db)
    assert "test_runs_by_project" in runs_plan, runs_plan
    assert "SCAN m" not in runs_plan, runs_plan
    assert "SCAN test_coverage_runs" not in runs_plan, runs_plan
    # a range of the primary key, or of the file index (which holds the key's columns too)
    assert ("SEARCH c USING PRIMARY KEY (run_id=? AND file_id=?)" in rows_plan
            or "SEARCH c USING INDEX test_coverage_by_file (file_id=? AND run_id=?)" in rows_plan
            ), rows_plan
    assert "SCAN c" not in rows_plan, rows_plan
    # where the tests with rows of the file ran: their items by the (run_id, test_id)
    # unique index, their rows of other files by the test index (run_id is in its key)
    assert "SEARCH k USING INDEX sqlite_autoindex_test_cases_1 (run_id=? AND test_id=?)" \
        in rows_plan, rows_plan
    assert "SEARCH o EXISTS USING COVERING INDEX test_coverage_by_test (test_id=? AND run_id=?)" \
        in rows_plan, rows_plan
    # (the runs read come from test_coverage_runs, one row per measured run: after ANALYZE
    # of 30 such rows the planner may read them all rather than look 10 up)
    for table in ("k", "o", "test_cases", "test_coverage", "t"):
        assert f"SCAN {table} " not in rows_plan + " ", rows_plan
