"""The hot reader queries never scan the test-case table (``EXPLAIN QUERY PLAN``).

Every statement a reader method runs is captured with apsw's exec trace, then explained with
its own bindings; a ``SCAN`` of ``test_cases`` (under its name or any alias the statement
gives it) fails the test. Checked on a populated database as shipped (no statistics) and
after ``ANALYZE``, when the planner weighs real row counts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import attrs
import pytest

from runstore.layers import Layer, SqliteDatabase, build, merge, sqlite
from runstore.services.clock import Clock, FixedClock
from runstore.services.test_runs import (
    DataReader,
    DataStore,
    FileCoverage,
    Outcome,
    RunId,
    RunStart,
    RunStatus,
    StackFrame,
)
from runstore.testing import T0_MS, make_item, utc

_KEYWORDS = frozenset({
    "where", "join", "on", "left", "inner", "cross", "natural", "using", "group", "order",
    "limit", "union", "select", "set", "values", "returning", "indexed", "not", "and",
})


@attrs.define
class Populated:
    reader: DataReader
    db: SqliteDatabase
    run: RunId
    other: RunId
    running: RunId


def _populate(store: DataStore, projects: int = 3, runs: int = 12, cases: int = 150) -> list[
    RunId
]:
    made: list[RunId] = []
    for p in range(projects):
        for r in range(runs):
            run = store.begin_run(RunStart(f"project-{p}", f"inv-{r}", utc(T0_MS + r))).unwrap()
            items = [
                make_item(
                    f"tests/test_m{i % 20}.py::test_{i}[{p}]",
                    Outcome.FAILED if (i + r) % 20 == 0 else Outcome.PASSED,
                    duration_ms=float(i % 17),
                    frames=(StackFrame(f"src/m{i % 7}.py", i + 1, "f", True),),
                )
                for i in range(cases)
            ]
            store.record_results(run, items).unwrap()
            if r % 3 == 2:
                store.write_coverage(run, [FileCoverage(f"src/m{k}.py", 50, k) for k in range(7)])
            store.finish_run(run, RunStatus.FAILED, utc(T0_MS + r + 1)).unwrap()
            made.append(run)
    return made


def _running(store: DataStore) -> RunId:
    """Two running runs with failures: "new" of the later one is computed afresh, looking
    at the earlier one."""
    run = RunId(0)
    for r in range(2):
        run = store.begin_run(RunStart("project-2", f"live-{r}", utc(T0_MS + 99))).unwrap()
        store.record_results(run, [
            make_item(f"tests/test_m{i}.py::test_{i}[2]", Outcome.FAILED, message=f"live {r}")
            for i in range(5)
        ]).unwrap()
    return run


@pytest.fixture(scope="module", params=["as shipped", "after ANALYZE"])
def populated(request: pytest.FixtureRequest) -> Iterator[Populated]:
    clock_layer = Layer.value(Clock, FixedClock(T0_MS))
    with build(merge(sqlite(":memory:"), clock_layer)) as c:
        runs = _populate(c.get(DataStore))
        running = _running(c.get(DataStore))
        db: SqliteDatabase = c.get(SqliteDatabase)
        if request.param == "after ANALYZE":
            db.execute("ANALYZE")
        yield Populated(c.get(DataReader), db, runs[-1], runs[-2], running)


@contextmanager
def captured(db: SqliteDatabase) -> Iterator[list[tuple[str, Any]]]:
    """Every statement run on ``db`` while open, with its bindings."""
    seen: list[tuple[str, Any]] = []

    def trace(_cursor: Any, sql: str, bindings: Any) -> bool:
        seen.append((sql, bindings))
        return True

    connection = db.connection
    previous = connection.exec_trace
    connection.exec_trace = trace
    try:
        yield seen
    finally:
        connection.exec_trace = previous


def scans_of(db: SqliteDatabase, sql: str, bindings: Any, table: str = "test_cases") -> list[str]:
    """The plan lines of ``sql`` that SCAN ``table`` (by name or alias)."""
    names = {table}
    for alias in re.findall(rf"\b{table}\b\s+(?:AS\s+)?(\w+)", sql, flags=re.IGNORECASE):
        if alias.lower() not in _KEYWORDS:
            names.add(alias)
    plan = db.connection.execute("EXPLAIN QUERY PLAN " + sql, bindings or ()).fetchall()
    details = [str(row[3]) for row in plan]
    return [d for d in details if d.startswith("SCAN ") and d.split()[1] in names]


HOT: dict[str, Callable[[Populated], Any]] = {
    "latest_run": lambda p: p.reader.latest_run("project-1"),
    "failures": lambda p: p.reader.failures(p.run),
    "history": lambda p: p.reader.history("project-2", "tests/test_m3.py::test_3[2]"),
    "flaky_tests": lambda p: p.reader.flaky_tests("project-2"),
    "classify": lambda p: p.reader.classify(p.run),
    "failures of a running run": lambda p: p.reader.failures(p.running),
    "classify a running run": lambda p: p.reader.classify(p.running),
    "classify_unstable": lambda p: p.reader.classify_unstable(p.run),
}

OTHERS: dict[str, Callable[[Populated], Any]] = {
    "get_run": lambda p: p.reader.get_run(p.run),
    "list_runs": lambda p: p.reader.list_runs("project-1", limit=5),
    "tests": lambda p: p.reader.tests(p.run, outcomes=frozenset({Outcome.FAILED})),
    "slowest": lambda p: p.reader.slowest(p.run, limit=5),
    "compare": lambda p: p.reader.compare(p.other, p.run),
    "compare with a running run": lambda p: p.reader.compare(p.run, p.running),
    "coverage": lambda p: p.reader.coverage(p.run),
    "coverage_trend": lambda p: p.reader.coverage_trend("project-0"),
    "find_tests": lambda p: p.reader.find_tests("project-0", "test_1"),
    "known_tests": lambda p: p.reader.known_tests(
        "project-0", [f"tests/test_m{i}.py::test_{i}[0]" for i in range(50)]),
    "run_cells": lambda p: p.reader.run_cells([p.other, p.run]),
    "run_cells of failing items": lambda p: p.reader.run_cells(
        [p.other, p.run], outcomes=frozenset({Outcome.FAILED, Outcome.ERROR})),
    "run_cells of given tests": lambda p: p.reader.run_cells(
        [p.other, p.run], nodeids=[f"tests/test_m{i}.py::test_{i}[0]" for i in range(50)]),
}


@pytest.mark.parametrize("query", sorted({**HOT, **OTHERS}))
def test_reader_queries_never_scan_test_cases(populated: Populated, query: str) -> None:
    call = {**HOT, **OTHERS}[query]
    with captured(populated.db) as statements:
        result = call(populated)
    assert result.unwrap() is not None
    explained = [s for s in statements if not s[0].lstrip().upper().startswith(
        ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "PRAGMA"))]
    assert explained, f"{query} ran no statement"
    for sql, bindings in explained:
        assert scans_of(populated.db, sql, bindings) == [], sql


def test_the_scan_detector_sees_scans(populated: Populated) -> None:
    sql = "SELECT count(*) FROM test_cases c WHERE c.duration_ms > ?"
    assert scans_of(populated.db, sql, (1.0,)) != []
    assert scans_of(populated.db, "SELECT id FROM test_cases WHERE run_id = ?", (1,)) == []


def test_the_signature_listing_reads_its_index(populated: Populated) -> None:
    """``failure_signatures`` pages through ``failure_signatures_by_seen`` (project, place)
    and never scans the signature table, whose rows are one per root cause ever seen."""
    with captured(populated.db) as statements:
        page = populated.reader.failure_signatures("project-1", limit=2).unwrap()
    assert page.has_more
    (sql, bindings), = [s for s in statements if "failure_signatures" in s[0]]
    assert scans_of(populated.db, sql, bindings, "failure_signatures") == []
    plan = " ".join(str(row[3]) for row in populated.db.connection.execute(
        "EXPLAIN QUERY PLAN " + sql, bindings).fetchall())
    assert "failure_signatures_by_seen" in plan, plan
