"""Benchmark: one triage of the latest run on a 1,000,000-item database, as a service call and
as a whole ``runstore triage --format json`` process.

Run: ``.venv/bin/python benchmarks/triage.py [--runs 500] [--cases 2000] [--repeat 20]
[--processes 5] [--db PATH]``.

The database holds ``--runs`` finished runs of ``--cases`` items each (500 x 2,000 =
1,000,000 items; 5% failing with 3 frames, so every run has failures and the search for the
last green run reads every run summary: the worst case), built with raw bulk inserts from a
run the layer wrote (``_test_runs_synthetic.build_database``). ``--db PATH`` keeps the built
file and reuses it on the next call.

Timed, median of the repeats after a warm-up:

- ``service``: ``triage_run(reader, project)`` on an open container (a warm server answers
  this way), with each reader query beside it (``failures``, ``classify_unstable`` and the
  ``classify`` of every item it saves, ``slowest``, ``list_runs`` of one page of 1,000 runs);
- ``document``: the service call plus building the JSON document and printing it to a string;
- ``process``: ``runstore --db PATH triage --format json`` as a fresh process, from start to
  exit (interpreter start, imports, opening the file, the answer, the JSON).

Prints each, and the service call as a share of the process time (the MCP server's target
is under 5%).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _test_runs_synthetic import build_database

from runstore.cli._triage import document_of
from runstore.layers import DATA_READER, build, sqlite
from runstore.services.pagination import MAX_PAGE_SIZE
from runstore.services.triage import triage_run

PROJECT = "bench"


def median_ms(call: Callable[[], Any], repeat: int) -> float:
    """The median wall time of ``call`` over ``repeat`` calls after two warm-up calls (ms)."""
    for _ in range(2):
        call()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def process_ms(db: Path, repeat: int) -> tuple[float, int]:
    """The median wall time of the whole CLI process (ms) and the size of its output
    (characters)."""
    command = [sys.executable, "-m", "runstore", "--db", str(db), "triage", "--format", "json"]
    samples, size = [], 0
    for attempt in range(repeat + 1):
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=300)
        if attempt:  # the first call warms the page cache
            samples.append(time.perf_counter() - started)
        size = len(done.stdout)
        json.loads(done.stdout)
    return statistics.median(samples) * 1000, size


def arguments(description: str) -> argparse.Namespace:
    """The options of a triage benchmark: ``--runs``, ``--cases``, ``--repeat``,
    ``--processes`` and ``--db``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--db", type=Path, default=None,
                        help="Build the database here, or reuse it when it exists.")
    return parser.parse_args()


def database(options: argparse.Namespace, scratch: Path) -> Path:
    """The benchmark's database: ``--db`` when it exists, else built there (or in
    ``scratch``) with ``--runs`` runs of ``--cases`` items."""
    db: Path = options.db or scratch / "triage.db"
    if db.exists():
        print(f"reusing {db}")
    else:
        took = build_database(db, options.runs, cases=options.cases, modules=40,
                              project=PROJECT)
        print(f"built {options.runs} runs x {options.cases} items in {took:.1f}s")
    return db


def main() -> None:
    options = arguments(__doc__.splitlines()[0])
    with tempfile.TemporaryDirectory() as scratch:
        db = database(options, Path(scratch))
        with build(sqlite(db, access="read")) as container:
            reader = container.get(DATA_READER)
            latest = reader.latest_run(PROJECT).unwrap()
            print(f"{latest.total * options.runs:,} items; latest run {latest.id}: "
                  f"{latest.counts['failed']} failing of {latest.total}")
            answer = triage_run(reader, PROJECT).unwrap()
            print(f"answer: {len(answer.failures)} failures in {len(answer.groups)} groups, "
                  f"{len(answer.flaky)} flaky, green run: {answer.since_green}")
            parts = {
                "failures": lambda: reader.failures(latest.id).unwrap(),
                "classify": lambda: reader.classify(latest.id).unwrap(),
                "unstable": lambda: reader.classify_unstable(latest.id).unwrap(),
                "slowest": lambda: reader.slowest(latest.id).unwrap(),
                "list_runs": lambda: reader.list_runs(PROJECT, limit=MAX_PAGE_SIZE).unwrap(),
            }
            for name, call in parts.items():
                print(f"  {name:<10} {median_ms(call, options.repeat):8.2f} ms")
            service = median_ms(lambda: triage_run(reader, PROJECT).unwrap(), options.repeat)
            document = median_ms(
                lambda: json.dumps(document_of(triage_run(reader, PROJECT).unwrap()), indent=2),
                options.repeat,
            )
        process, size = process_ms(db, options.processes)
    print(f"service call (warm, open database): {service:8.2f} ms")
    print(f"service call + JSON document:       {document:8.2f} ms")
    print(f"whole CLI process:                  {process:8.2f} ms ({size:,} characters)")
    print(f"service call / process:             {100 * service / process:8.2f} %")


if __name__ == "__main__":
    main()
