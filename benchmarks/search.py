"""Benchmark: search latency on a large database, and what the search index costs a run.

Run: ``.venv/bin/python benchmarks/search.py [--failures 100000] [--per-run 1000]
[--cases 5000] [--rounds 5] [--calls 20]``.

1. **Latency.** ``--failures`` failing items are recorded through ``DataStore`` (runs of
   ``--per-run`` items, every item failing with a message of six words drawn from a
   vocabulary of 2,000, so some words are rare and some common), then
   ``DataReader.search_failures`` (first page of 20, and the page after it) and
   ``search_tests`` are timed for a rare word, a common word, a prefix and two words; the
   median of ``--calls`` calls is printed in ms with the number of hits of the query.
2. **Write overhead.** One run of ``--cases`` items (the synthetic run of the other
   test-run benchmarks: 5% failing) and one where every item fails are recorded into fresh
   database files twice per round: once with migration 0012's triggers, once with them
   dropped (the same schema otherwise), rounds alternating; the ratio of the medians is
   printed (with / without the index).
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

from _test_runs_synthetic import synthetic_run

from runstore.layers import DATA_READER, DATA_STORE, SqliteDatabase, build, sqlite
from runstore.services._search_rules import document_tokens, failure_text, matches, parse_query
from runstore.services.test_runs import (
    ErrorInfo,
    Outcome,
    Phase,
    PhaseResult,
    RunStart,
    RunStatus,
    TestResult,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
_WORDS = [f"w{n:04d}" for n in range(2_000)]


def _failing(count: int, seed: int) -> list[TestResult]:
    """``count`` failing items, each with a message of six vocabulary words (Zipf-like:
    low-numbered words are common)."""
    rng = random.Random(seed)
    items = []
    for i in range(count):
        words = " ".join(_WORDS[min(int(rng.paretovariate(0.7)) - 1, 1_999)] for _ in range(6))
        items.append(TestResult(
            f"tests/test_mod{i % 50}.py::test_{i}", f"tests/test_mod{i % 50}.py", f"test_{i}",
            (PhaseResult(Phase.CALL, Outcome.FAILED, 1.0),),
            errors=(ErrorInfo(Phase.CALL, "AssertionError", f"assert {i} failed: {words}"),),
        ))
    return items


def _record(path: Path, items: list[TestResult], *, runs: int = 1, drop_index: bool = False,
            batch: int = 200, warm: int = 0) -> float:
    """Record ``warm`` runs of ``items`` into ``path``, then ``runs`` more; seconds taken by
    the writes of the ``runs`` (200 items a batch: what the pytest recorder uses)."""
    with build(sqlite(path)) as c:
        if drop_index:
            db = c.get(SqliteDatabase)
            for name in ("search_failures_insert", "search_tests_insert",
                         "search_entries_insert"):
                db.execute(f"DROP TRIGGER {name}")
        store = c.get(DATA_STORE)
        started = 0.0
        for r in range(warm + runs):
            if r == warm:
                gc.collect()
                started = time.perf_counter()
            at = T0 + timedelta(minutes=r)
            run = store.begin_run(RunStart("bench", f"inv-{r}", at)).unwrap()
            for offset in range(0, len(items), batch):
                store.record_results(run, items[offset : offset + batch]).unwrap()
            store.finish_run(run, RunStatus.FAILED, at + timedelta(seconds=30)).unwrap()
        return time.perf_counter() - started


def _median_ms(call: Callable[[], object], calls: int) -> float:
    call()
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1_000


def latency(folder: Path, failures: int, per_run: int, calls: int) -> None:
    """Part 1 (see the module doc)."""
    path = folder / "large.db"
    runs = max(1, failures // per_run)
    items = _failing(per_run, 1)
    took = _record(path, items, runs=runs, batch=1_000)
    size = path.stat().st_size / 1e6
    print(f"recorded {runs * per_run:,} failing items in {runs} runs: {took:.1f} s, "
          f"{size:.0f} MB")
    queries = ("w0400", "w0040", "w0000", "w01*", "w0001 w0002")
    texts = [document_tokens(failure_text("AssertionError", i.errors[0].message)) for i in items]
    with build(sqlite(path, access="read")) as c:
        reader = c.get(DATA_READER)
        print(f"{'query':<14}{'hits':>9}{'page 1 ms':>11}{'page 2 ms':>11}")
        for text in queries:
            query = parse_query(text).unwrap()
            count = runs * sum(1 for held in texts if matches(query, held))
            first = reader.search_failures(text).unwrap()
            page1 = _median_ms(partial(reader.search_failures, text), calls)
            cursor = first.next_cursor
            page2 = (_median_ms(partial(reader.search_failures, text, cursor=cursor), calls)
                     if cursor else 0.0)
            print(f"{text:<14}{count:>9,}{page1:>11.1f}{page2:>11.1f}")
        for text in ("mod7 40*", "test*"):
            hits = len(reader.search_tests(text, limit=1_000).unwrap().items)
            took_ms = _median_ms(partial(reader.search_tests, text), calls)
            print(f"tests {text!r}: {hits} hits (to 1,000), page 1 {took_ms:.1f} ms")


def overhead(folder: Path, cases: int, rounds: int) -> None:
    """Part 2 (see the module doc)."""
    shapes = {"synthetic (5% failing)": synthetic_run(cases, 50),
              "every item failing": _failing(cases, 2)}
    for label, items in shapes.items():
        for warm, when in ((0, "first run, new tests"), (1, "next run, tests known")):
            with_index: list[float] = []
            without: list[float] = []
            for r in range(rounds):
                for drop in ((False, True) if r % 2 == 0 else (True, False)):
                    path = folder / f"w-{label[:4]}-{warm}-{r}-{drop}.db"
                    took = _record(path, items, drop_index=drop, warm=warm)
                    (without if drop else with_index).append(took)
            a, b = statistics.median(with_index), statistics.median(without)
            print(f"{label}, {cases:,} items, {when}: with index {a * 1_000:.0f} ms, "
                  f"without {b * 1_000:.0f} ms, ratio {a / b:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--failures", type=int, default=100_000)
    parser.add_argument("--per-run", type=int, default=1_000)
    parser.add_argument("--cases", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        latency(folder, args.failures, args.per_run, args.calls)
        overhead(folder, args.cases, args.rounds)


if __name__ == "__main__":
    main()
