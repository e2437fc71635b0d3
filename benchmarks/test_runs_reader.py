"""Benchmark: reader queries on 10,000 vs 1,000,000 stored items (they must not grow with it).

Run: ``.venv/bin/python benchmarks/test_runs_reader.py [--small-runs 20] [--large-runs 2000]
[--repeat 30]``.

Two databases of finished runs of 500 items each (5% failing with 3 frames), built with raw
bulk inserts from a run the layer wrote (``_test_runs_synthetic``): ``20`` runs (10,000 items)
and ``2000`` runs (1,000,000 items). On each, the hot ``DataReader`` queries of the newest
run and of one test are timed ``--repeat`` times after a warm-up, alternating between the
two databases; the median per call counts:

``latest_run``, ``failures``, ``history``, ``flaky_tests``, ``classify``.

Prints per query the time on each and the ratio large / small, and the ratio of the summed
medians; the target is at most 1.5 (an index lookup, not a scan, on every hot path).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from _test_runs_synthetic import build_database

from runstore.layers import build, sqlite
from runstore.services.test_runs import DataReader, RunId

TARGET = 1.5
PROJECT = "bench"
NODEID = "tests/pkg0/test_mod7.py::TestThing::test_107[case-2]"  # one of the failing items


def queries(reader: DataReader) -> dict[str, Callable[[], Any]]:
    latest: RunId = reader.latest_run(PROJECT).unwrap().id
    return {
        "latest_run": lambda: reader.latest_run(PROJECT).unwrap(),
        "failures": lambda: reader.failures(latest).unwrap(),
        "history": lambda: reader.history(PROJECT, NODEID).unwrap(),
        "flaky_tests": lambda: reader.flaky_tests(PROJECT).unwrap(),
        "classify": lambda: reader.classify(latest).unwrap(),
    }


def timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def compare(calls: dict[str, dict[str, Callable[[], Any]]], repeat: int) -> tuple[float, float]:
    """Time each query of ``calls["small"]`` and ``calls["large"]`` ``repeat`` times after a
    warm-up, alternating; print the medians; return the ratio large / small of the summed
    medians and the worst single query's ratio."""
    samples: dict[str, dict[str, list[float]]] = {
        label: {name: [] for name in calls[label]} for label in calls
    }
    for label in calls:  # warm-up: caches, statement cache, page cache
        for call in calls[label].values():
            for _ in range(3):
                call()
    for _ in range(repeat):
        for label in calls:
            for name, call in calls[label].items():
                samples[label][name].append(timed(call))
    medians = {
        label: {name: statistics.median(times) for name, times in by_name.items()}
        for label, by_name in samples.items()
    }
    print(f"median of {repeat} calls each:")
    print(f"  {'query':<12} {'small':>10} {'large':>10}  ratio")
    for name in medians["small"]:
        small, large = medians["small"][name], medians["large"][name]
        print(f"  {name:<12} {small * 1000:8.3f}ms {large * 1000:8.3f}ms  {large / small:5.2f}")
    ratio = sum(medians["large"].values()) / sum(medians["small"].values())
    worst = max(medians["large"][n] / medians["small"][n] for n in medians["small"])
    return ratio, worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small-runs", type=int, default=20)
    parser.add_argument("--large-runs", type=int, default=2_000)
    parser.add_argument("--cases", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, ExitStack() as stack:
        sizes = {"small": args.small_runs, "large": args.large_runs}
        calls: dict[str, dict[str, Callable[[], Any]]] = {}
        for label, runs in sizes.items():
            path = Path(folder) / f"{label}.db"
            built = build_database(path, runs, cases=args.cases)
            print(f"{label}: {runs} runs x {args.cases} items = {runs * args.cases} items, "
                  f"{path.stat().st_size / 1e6:.0f} MB (built in {built:.1f} s)")
            container = stack.enter_context(build(sqlite(path)))
            calls[label] = queries(container.get(DataReader))
        ratio, worst = compare(calls, args.repeat)
        verdict = "ok" if ratio <= TARGET else "OVER TARGET"
        print(f"ratio of the summed medians {ratio:.2f} (target <= {TARGET}): {verdict}; "
              f"worst single query {worst:.2f}")


if __name__ == "__main__":
    main()
