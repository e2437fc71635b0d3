"""Synthetic test-run data for the test-run benchmarks.

- :func:`synthetic_run` makes the items of one pytest run (modules, parametrized names, three
  phases, markers on some, 5% failing with one error of 3 frames).
- :func:`build_database` writes a database of many such runs quickly: it persists *one* run
  through ``DataStore`` into a scratch file (so the rows are exactly what the layer writes),
  then copies that run's rows ``runs`` times with raw apsw ``executemany``, shifting every
  row id and foreign key by the run number (read from ``PRAGMA foreign_key_list``, so a
  schema change needs no edit here). Node ids, files and tests are shared by every run, like
  a suite run again and again; history holds the newest 50 runs' outcomes and failure
  signatures span all runs, as the layer would have left them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs

from runstore.layers import SqliteDatabase, build, open_database, sqlite
from runstore.migrations import shipped_migrations
from runstore.services.test_runs import (
    HISTORY_DEPTH,
    DataStore,
    ErrorInfo,
    Outcome,
    Phase,
    PhaseResult,
    RunStart,
    RunStatus,
    StackFrame,
    TestResult,
)

RUN_MINUTES_MS = 60_000
"""Runs of a built database start one minute apart."""

BASE_MS = 1_700_000_000_000


def synthetic_run(cases: int, modules: int, *, tag: str = "") -> list[TestResult]:
    """``cases`` items over ``modules`` modules; every 20th fails with one error of 3 frames."""
    items: list[TestResult] = []
    for i in range(cases):
        module = f"tests/pkg{(i % modules) // 20}/test_mod{i % modules}{tag}.py"
        param = f"case-{i % 7}"
        name = f"TestThing::test_{i}"
        failing = i % 20 == 7
        call = Outcome.FAILED if failing else Outcome.PASSED
        phases = (
            PhaseResult(Phase.SETUP, Outcome.PASSED, 0.125),
            PhaseResult(Phase.CALL, call, 1.5 + (i % 13)),
            PhaseResult(Phase.TEARDOWN, Outcome.PASSED, 0.0625),
        )
        errors: tuple[ErrorInfo, ...] = ()
        if failing:
            frames = (
                StackFrame(module, 10 + i % 50, f"test_{i}", True),
                StackFrame(f"src/app/mod{i % 40}.py", 100 + i % 7, "helper", True),
                StackFrame("/usr/lib/python3.11/unittest/case.py", 678, "assertEqual", False),
            )
            message = f"assert {i} == {i + 1}"
            errors = (ErrorInfo(Phase.CALL, "AssertionError", message, f"E   {message}", frames),)
        items.append(
            TestResult(
                nodeid=f"{module}::{name}[{param}]",
                module_path=module,
                name=name,
                phases=phases,
                parametrize_id=param,
                line=10 + i % 50,
                markers=("slow",) if i % 10 == 0 else (),
                errors=errors,
            )
        )
    return items


@attrs.frozen
class Table:
    """One table's template rows and how to shift them for run ``r``."""

    name: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    id_column: int | None  # position of an ``id`` column shifted by ``stride * r``
    stride: int
    shifts: tuple[tuple[int, str], ...]  # (column position, parent table) to shift


SHARED = ("files", "tests")
"""Tables whose rows every run shares (written once)."""

KEPT = ("test_history", "failure_signatures")
"""Tables the layer keeps across runs (written once, pointing at the newest runs)."""

ORDER = ("test_runs", "test_modules", "test_cases", "test_output", "test_attempts",
         "test_subtests", "collection_errors", "test_errors", "stack_frames", "file_coverage")
"""Run-scoped tables, parents first."""


def _tables(db: SqliteDatabase) -> set[str]:
    (migration,) = [m for m in shipped_migrations() if m.name == "test_runs"]
    names = {r[0] for r in db.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
    return names & set(migration.creates)


def _template(path: Path, cases: int, modules: int, project: str) -> dict[str, Table]:
    """Persist one finished run into ``path`` and read back its rows per table."""
    with build(sqlite(path)) as c:
        store: DataStore = c.get(DataStore)
        run = store.begin_run(RunStart(project, "inv", datetime.now(UTC))).unwrap()
        items = synthetic_run(cases, modules)
        for at in range(0, len(items), 1_000):
            store.record_results(run, items[at : at + 1_000]).unwrap()
        store.finish_run(run, RunStatus.FAILED, datetime.now(UTC)).unwrap()
        assert run == 1
        db: SqliteDatabase = c.get(SqliteDatabase)
        names = _tables(db)
        unknown = names - set(ORDER) - set(SHARED) - set(KEPT) - {"test_run_sequences"}
        assert not unknown, f"the benchmark does not know the tables {unknown}"
        template: dict[str, Table] = {}
        for name in (*SHARED, *ORDER, *KEPT):
            if name not in names:
                continue
            columns = tuple(r[1] for r in db.execute(f'PRAGMA table_info("{name}")'))
            rows = tuple(db.execute(f'SELECT * FROM "{name}"'))
            parents = {r[3]: r[2] for r in db.execute(f'PRAGMA foreign_key_list("{name}")')}
            shifts = tuple(
                (columns.index(column), parent)
                for column, parent in parents.items()
                if parent in ORDER
            )
            id_column = columns.index("id") if "id" in columns and name in ORDER else None
            stride = max((r[id_column] for r in rows), default=0) if id_column is not None else 0
            template[name] = Table(name, columns, rows, id_column, stride, shifts)
        return template


def _shifted(table: Table, template: dict[str, Table], r: int) -> Iterator[tuple[Any, ...]]:
    strides = {name: template[name].stride for name in ORDER if name in template}
    strides["test_runs"] = 1
    id_column = table.id_column
    shifts = [(pos, strides[parent] * r) for pos, parent in table.shifts]
    for row in table.rows:
        out = list(row)
        if id_column is not None:
            out[id_column] += table.stride * r
        for pos, by in shifts:
            if out[pos] is not None:
                out[pos] += by
        yield tuple(out)


def _run_rows(table: Table, template: dict[str, Table], r: int) -> Iterator[tuple[Any, ...]]:
    if table.name != "test_runs":
        yield from _shifted(table, template, r)
        return
    columns = table.columns
    (row,) = table.rows
    out = list(row)
    out[columns.index("id")] = r + 1
    out[columns.index("invocation_id")] = f"inv-{r}"
    started = BASE_MS + r * RUN_MINUTES_MS
    out[columns.index("started_at_ms")] = started
    out[columns.index("finished_at_ms")] = started + 30_000
    out[columns.index("last_write_at_ms")] = started + 30_000
    yield tuple(out)


def build_database(
    path: Path, runs: int, *, cases: int = 500, modules: int = 20, project: str = "bench"
) -> float:
    """Write ``runs`` finished runs of ``cases`` items each into a fresh database at
    ``path`` (raw apsw bulk inserts after one template run); return seconds taken."""
    started = time.perf_counter()
    template = _template(path.with_suffix(".template.db"), cases, modules, project)
    db = open_database(path).unwrap()
    connection = db.connection
    try:
        connection.execute("BEGIN IMMEDIATE")
        for name in SHARED:
            table = template[name]
            marks = ", ".join("?" for _ in table.columns)
            connection.executemany(f'INSERT INTO "{name}" VALUES ({marks})', table.rows)
        for name in ORDER:
            if name not in template:
                continue
            table = template[name]
            if not table.rows:
                continue
            marks = ", ".join("?" for _ in table.columns)
            statement = f'INSERT INTO "{name}" VALUES ({marks})'
            for r in range(runs):
                rows = list(_run_rows(table, template, r))
                if name == "test_errors":  # causes before the errors naming them
                    rows.sort(key=lambda row: -row[0])
                connection.executemany(statement, rows)
        _kept(connection, template, runs)
        connection.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = 'test_runs'",
                           (runs,))
        connection.execute(
            "UPDATE test_run_sequences SET value = ? WHERE name = 'history'", (runs,)
        )
        connection.execute("COMMIT")
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
    return time.perf_counter() - started


def _kept(connection: Any, template: dict[str, Table], runs: int) -> None:
    """History of the newest runs (window per test) and signatures over every run."""
    history = template["test_history"]
    columns = history.columns
    seq, run_id, recorded = (columns.index(c) for c in ("seq", "run_id", "recorded_at_ms"))
    marks = ", ".join("?" for _ in columns)
    rows = []
    for r in range(max(0, runs - HISTORY_DEPTH), runs):
        for row in history.rows:
            out = list(row)
            out[seq], out[run_id] = r + 1, r + 1
            out[recorded] = BASE_MS + r * RUN_MINUTES_MS + 30_000
            rows.append(tuple(out))
    connection.executemany(f"INSERT INTO test_history VALUES ({marks})", rows)
    signatures = template["failure_signatures"]
    columns = signatures.columns
    marks = ", ".join("?" for _ in columns)
    rows = []
    for row in signatures.rows:
        out = list(row)
        out[columns.index("count")] = row[columns.index("count")] * runs
        out[columns.index("first_seen_run_id")] = 1
        out[columns.index("last_seen_run_id")] = runs
        rows.append(tuple(out))
    connection.executemany(f"INSERT INTO failure_signatures VALUES ({marks})", rows)
