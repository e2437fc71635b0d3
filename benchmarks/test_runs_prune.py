"""Benchmark: ``DataStore.prune_runs`` vs a raw cascading DELETE of the same runs.

Run: ``.venv/bin/python benchmarks/test_runs_prune.py [--scale 1.0] [--rounds 3]``.

A database of ``2000 * scale`` finished runs of 500 items each (5% failing with 3 frames;
built once with raw bulk inserts from a run the layer wrote, see ``_test_runs_synthetic``) is
copied afresh for every measurement and pruned to ``keep_runs = 100 * scale``:

- **DataStore**: ``prune_runs(RunRetentionPolicy(keep_runs))``: it plans in Python, moves
  coverage, deletes the doomed runs (the schema cascades the rest), then removes orphaned
  ``files`` and ``tests`` rows, in one unit of work.
- **raw**: one ``DELETE FROM test_runs WHERE id IN (... beyond the newest keep_runs ...)``
  in one ``BEGIN IMMEDIATE`` transaction on a connection with the same settings, letting the
  same cascades run: the least any layer could do.

Only the prune itself is timed. Rounds alternate; the medians count. Prints the ratio
DataStore / raw; the target is at most 2.0. Both must leave the same runs and items.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from _test_runs_synthetic import build_database

from runstore.layers import build, open_database, sqlite
from runstore.services.test_runs import DataStore, RunRetentionPolicy

TARGET = 2.0


def _counts(path: Path) -> tuple[int, int]:
    db = open_database(path).unwrap()
    try:
        return (int(db.scalar("SELECT count(*) FROM test_runs")),
                int(db.scalar("SELECT count(*) FROM test_cases")))
    finally:
        db.close()


def prune_store(path: Path, keep: int) -> float:
    with build(sqlite(path)) as c:
        store: DataStore = c.get(DataStore)
        gc.collect()
        started = time.perf_counter()
        result = store.prune_runs(RunRetentionPolicy(keep)).unwrap()
        elapsed = time.perf_counter() - started
    assert result.pruned_runs > 0, result
    return elapsed


def prune_raw(path: Path, keep: int) -> float:
    db = open_database(path).unwrap()
    connection = db.connection
    try:
        gc.collect()
        started = time.perf_counter()
        connection.execute("BEGIN IMMEDIATE")
        connection.execute(
            "DELETE FROM test_runs WHERE id IN (SELECT id FROM test_runs"
            " ORDER BY started_at_ms DESC, id DESC LIMIT -1 OFFSET ?)",
            (keep,),
        )
        connection.execute("COMMIT")
        return time.perf_counter() - started
    finally:
        db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=1.0,
                        help="fraction of 2000 runs and of keep_runs=100 (e.g. 0.1)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", type=int, default=500)
    args = parser.parse_args()
    runs = max(2, round(2_000 * args.scale))
    keep = max(1, round(100 * args.scale))
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        base = scratch / "base.db"
        built = build_database(base, runs, cases=args.cases)
        total_runs, total_cases = _counts(base)
        size_mb = base.stat().st_size / 1e6
        print(f"prune {total_runs} runs x {args.cases} items ({total_cases} items, "
              f"{size_mb:.0f} MB, built in {built:.1f} s) to keep_runs={keep}; "
              f"median of {args.rounds} rounds")
        store_times: list[float] = []
        raw_times: list[float] = []
        left: set[tuple[int, int]] = set()
        for n in range(args.rounds):
            for side, prune, times in (("store", prune_store, store_times),
                                       ("raw", prune_raw, raw_times)):
                copy = scratch / f"{side}-{n}.db"
                shutil.copyfile(base, copy)
                times.append(prune(copy, keep))
                left.add(_counts(copy))
                copy.unlink()
                for extra in ("-wal", "-shm"):
                    Path(f"{copy}{extra}").unlink(missing_ok=True)
        assert len(left) == 1, f"the two sides left different stores: {left}"
        store_s, raw_s = statistics.median(store_times), statistics.median(raw_times)
        ratio = store_s / raw_s
        print(f"  DataStore.prune_runs {store_s * 1000:9.1f} ms")
        print(f"  raw cascading DELETE {raw_s * 1000:9.1f} ms   (left {left.pop()} runs, items)")
        verdict = "ok" if ratio <= TARGET else "OVER TARGET"
        print(f"ratio {ratio:.2f} (target <= {TARGET}): {verdict}")


if __name__ == "__main__":
    main()
