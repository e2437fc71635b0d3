"""Benchmark: persist one run through ``DataStore`` vs raw apsw ``executemany`` of its rows.

Run: ``.venv/bin/python benchmarks/test_runs_persist.py [--cases 10000] [--modules 200]
[--rounds 5] [--batch 200]``.

The synthetic run has ``--cases`` items in ``--modules`` modules (setup, call and teardown
phases, markers on some, parametrized names); 5% fail with one error of 3 frames. Both sides
write into a fresh database file with the same schema (the shipped migrations) and the same
connection settings (WAL, ``synchronous=NORMAL``):

- **DataStore**: ``begin_run``, ``record_results`` in batches of ``--batch`` items (200 is
  what the pytest recorder uses; each batch one unit of work), ``finish_run`` (history and
  failure signatures). Validation, id lookups and caches are all inside the timing.
- **raw**: the very rows the DataStore run left in every table, read back beforehand, written
  with one ``executemany`` per table in one ``BEGIN IMMEDIATE`` transaction: the least any
  layer could do to store the same data.

Rounds alternate the two sides; the median of each counts. Prints the ratio DataStore / raw
for one batch of everything (one unit of work, like the raw side: the target, at most 2.0)
and for batches of ``--batch`` (also paying one commit per batch, which the single raw
transaction does not: shown for information).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _test_runs_synthetic import synthetic_run

from runstore.layers import SqliteDatabase, build, open_database, sqlite
from runstore.migrations import shipped_migrations
from runstore.services.test_runs import (
    DataStore,
    Outcome,
    RunStart,
    RunStatus,
    TestResult,
)

TARGET = 2.0


def persist(path: Path, items: list[TestResult], batch: int) -> float:
    """Persist ``items`` as one run through DataStore into ``path``; seconds taken."""
    with build(sqlite(path)) as c:
        store: DataStore = c.get(DataStore)
        gc.collect()
        started = time.perf_counter()
        run = store.begin_run(RunStart("bench", "inv", datetime.now(UTC))).unwrap()
        for at in range(0, len(items), batch):
            store.record_results(run, items[at : at + batch]).unwrap()
        store.finish_run(run, RunStatus.FAILED, datetime.now(UTC)).unwrap()
        return time.perf_counter() - started


def _tables(db: SqliteDatabase) -> list[str]:
    return [
        r[0]
        for r in db.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            " AND name NOT LIKE 'runstore_%' ORDER BY name"
        )
    ]


_ORDER = ("test_runs", "files", "tests", "test_modules", "test_cases", "test_output",
          "test_attempts", "test_subtests", "collection_errors", "test_errors", "stack_frames",
          "test_history", "failure_signatures", "file_coverage", "test_run_sequences")


def _test_run_objects() -> set[str]:
    """What the test-run migration creates (tables and indexes; a run writes only these)."""
    (migration,) = [m for m in shipped_migrations() if m.name == "test_runs"]
    return set(migration.creates)


def dump(path: Path) -> list[tuple[str, str, list[tuple[Any, ...]]]]:
    """Every row the DataStore run wrote, per table, as (table, INSERT statement, rows)."""
    opened = open_database(path)
    db = opened.unwrap()
    try:
        tables = set(_tables(db)) & _test_run_objects()
        unknown = tables - set(_ORDER)
        assert not unknown, f"the benchmark does not know the tables {unknown}"
        ordered = [t for t in _ORDER if t in tables]
        out = []
        for table in ordered:
            # causes have higher ids than the errors naming them: insert them first
            order = " ORDER BY id DESC" if table == "test_errors" else ""
            rows = db.execute(f'SELECT * FROM "{table}"{order}')
            if table == "test_run_sequences":
                continue  # an UPDATE below, the row exists from the migration
            if not rows:
                continue
            marks = ", ".join("?" for _ in rows[0])
            out.append((table, f'INSERT INTO "{table}" VALUES ({marks})', rows))
        sequences = db.execute("SELECT value, name FROM test_run_sequences")
        out.append(("test_run_sequences",
                    "UPDATE test_run_sequences SET value = ? WHERE name = ?", sequences))
        return out
    finally:
        db.close()


def raw(path: Path, rows: list[tuple[str, str, list[tuple[Any, ...]]]]) -> float:
    """Write ``rows`` into a fresh migrated database at ``path`` with plain apsw; seconds."""
    db = open_database(path).unwrap()
    connection = db.connection
    try:
        gc.collect()
        started = time.perf_counter()
        connection.execute("BEGIN IMMEDIATE")
        for _table, statement, values in rows:
            connection.executemany(statement, values)
        connection.execute("COMMIT")
        return time.perf_counter() - started
    finally:
        db.close()


def measure(items: list[TestResult], batch: int, rounds: int, scratch: Path) -> tuple[
    float, float, int
]:
    """Median seconds of DataStore and raw over ``rounds`` alternating rounds; row count."""
    reference = scratch / f"reference-{batch}.db"
    persist(reference, items, batch)
    rows = dump(reference)
    total_rows = sum(len(r) for _, _, r in rows)
    store_times: list[float] = []
    raw_times: list[float] = []
    for n in range(rounds):
        store_times.append(persist(scratch / f"store-{batch}-{n}.db", items, batch))
        raw_times.append(raw(scratch / f"raw-{batch}-{n}.db", rows))
    return statistics.median(store_times), statistics.median(raw_times), total_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--modules", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=200)
    args = parser.parse_args()
    items = synthetic_run(args.cases, args.modules)
    failing = sum(1 for i in items if i.outcome == Outcome.FAILED)
    print(f"persist one run: {args.cases} items, {args.modules} modules, {failing} failing "
          f"(3 frames each); median of {args.rounds} rounds")
    ratios: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        for batch in dict.fromkeys((args.cases, args.batch)):
            store_s, raw_s, total_rows = measure(items, batch, args.rounds, Path(folder))
            ratios[batch] = store_s / raw_s
            print(f"  batches of {batch:>6}: DataStore {store_s * 1000:8.1f} ms, raw executemany "
                  f"{raw_s * 1000:8.1f} ms of {total_rows} rows -> ratio {ratios[batch]:.2f}")
    ratio = ratios[args.cases]
    verdict = "ok" if ratio <= TARGET else "OVER TARGET"
    print(f"ratio in one unit of work {ratio:.2f} (target <= {TARGET}): {verdict}")
    if args.batch != args.cases:
        print(f"ratio in batches of {args.batch} (one commit each) {ratios[args.batch]:.2f}")


if __name__ == "__main__":
    main()
