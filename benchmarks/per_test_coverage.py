"""Benchmark: per-test coverage of a run of 2,000 tests over 200 files, recorded and asked.

Run: ``.venv/bin/python benchmarks/per_test_coverage.py [--tests 2000] [--files 200]
[--share 1.0] [--runs 3]``.

A synthetic coverage.py data file holds what ``--cov-context=test`` records for ``--tests``
tests, each executing ``--share`` of the ``--files`` files (1.0: every test executes every
file, the worst case) in three contexts (``|setup``, ``|run``, ``|teardown``), each test
hitting two to four stretches of 2-30 lines of a 120-line file. Measured, each the median
of ``--runs`` runs recorded into one SQLite file:

- **read**: ``session_test_coverage``, what the recorder does at the end of a session:
  coverage.py's ``measured_contexts`` and ``contexts_by_lineno`` per file, mapped back to
  node ids (the data file is built once, untimed), beside coverage.py's own
  ``coverage json --show-contexts`` of the same data (its ``json_report``), which reads the
  same way;
- **write**: ``DataStore.write_test_coverage`` of those rows (validation included);
- **size**: the bytes the runs' per-test coverage takes in the database file (tables and
  indexes, from SQLite's ``dbstat``), per run, beside what one row per covered line
  (``run, file, test, line``, the plain layout) takes for the same run;
- **ask**: ``tests_for(project, path)`` and ``tests_for(project, path, line=...)`` over the
  newest 10 runs (of ``--runs``).

Prints the figures and a verdict: a run's rows take at most 64 MiB, and recording them
(read + write) takes at most 1.5x what coverage.py's own ``coverage json --show-contexts``
takes on the same data, measured in the same process (a ratio, so a busy machine slows both
sides alike; a suite of 2,000 tests run under coverage with contexts takes minutes anyway).
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import apsw
import coverage

from runstore.layers import build, sqlite
from runstore.recorder._convert import PathResolver
from runstore.recorder._coverage import session_test_coverage
from runstore.services.test_runs import DataReader, DataStore, RunStart, TestLines

MIB = 1024 * 1024
SIZE_BUDGET = 64 * MIB
RECORD_BUDGET = 1.5
"""Most (read + write) time of a run's per-test coverage, as a multiple of coverage.py's
``json_report`` with contexts on the same data."""
FILE_LINES = 120


def _nodeid(test: int) -> str:
    return f"tests/test_m{test % 100:02d}.py::test_case_{test}[p{test % 7}]"


def _path(root: Path, file: int) -> str:
    return str(root / "src" / "pkg" / f"module_{file:03d}.py")


def build_data(root: Path, tests: int, files: int, share: float, seed: int = 7) -> Path:
    """A ``.coverage`` file as pytest-cov's ``--cov-context=test`` writes it (untimed)."""
    rng = random.Random(seed)
    data = coverage.CoverageData(basename=str(root / ".coverage"))
    per_file = max(1, round(files * share))
    for test in range(tests):
        chosen = rng.sample(range(files), per_file)
        for phase in ("setup", "run", "teardown"):
            data.set_context(f"{_nodeid(test)}|{phase}")
            lines: dict[str, list[int]] = {}
            for file in chosen:
                hit: set[int] = set()
                if phase == "run":
                    for _ in range(rng.randint(1, 3)):
                        start = rng.randint(1, FILE_LINES - 15)
                        hit.update(range(start, start + rng.randint(2, 15)))
                else:
                    hit.add(rng.randint(1, FILE_LINES))
                lines[_path(root, file)] = sorted(hit)
            data.add_lines(lines)
    data.write()
    source = "\n".join(f"x{n} = {n}" for n in range(1, FILE_LINES + 1)) + "\n"
    for file in range(files):
        target = Path(_path(root, file))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source, encoding="utf-8")
    return root / ".coverage"


class _Controller:
    def __init__(self, cov: Any) -> None:
        self.cov = cov


class _Plugin:
    def __init__(self, cov: Any) -> None:
        self.cov_controller = _Controller(cov)


class _PluginManager:
    def __init__(self, cov: Any) -> None:
        self._plugin = _Plugin(cov)

    def get_plugin(self, name: str) -> Any:
        return self._plugin if name == "_cov" else None


class _Config:
    """What ``session_test_coverage`` reads of a pytest config: pytest-cov's plugin."""

    def __init__(self, cov: Any) -> None:
        self.pluginmanager = _PluginManager(cov)


def read_rows(root: Path, data_file: Path, files: int) -> tuple[float, tuple[TestLines, ...]]:
    cov = coverage.Coverage(data_file=str(data_file))
    cov.load()
    resolver = PathResolver(str(root), str(root))
    reported = frozenset(resolver.place(_path(root, f))[0] for f in range(files))
    gc.collect()
    started = time.perf_counter()
    rows = session_test_coverage(_Config(cov), resolver, reported)  # type: ignore[arg-type]
    elapsed = time.perf_counter() - started
    assert rows is not None
    return elapsed, rows


def coverage_json_seconds(root: Path, data_file: Path) -> float:
    """How long coverage.py's ``json_report`` with ``show_contexts`` takes on the data (the
    source files are written, so it can analyse them)."""
    cov = coverage.Coverage(data_file=str(data_file))
    cov.load()
    cov.config.json_show_contexts = True
    gc.collect()
    started = time.perf_counter()
    cov.json_report(outfile=str(root / "contexts.json"))
    return time.perf_counter() - started


def _bytes_of(db_path: Path, names: tuple[str, ...]) -> int:
    connection = apsw.Connection(str(db_path))
    try:
        marks = ",".join("?" * len(names))
        row = connection.execute(
            f"SELECT sum(pgsize) FROM dbstat WHERE name IN ({marks})", names
        ).fetchone()
        return int(row[0] or 0) if row else 0
    finally:
        connection.close()


def plain_layout_bytes(folder: Path, rows: tuple[TestLines, ...]) -> int:
    """The size of one row per covered line (run, file, test, line) for one run, with the
    indexes the same queries would need, in a scratch SQLite file."""
    path = folder / "plain.db"
    connection = apsw.Connection(str(path))
    connection.execute(
        "CREATE TABLE lines (run_id INTEGER, file_id INTEGER, test_id INTEGER, line INTEGER,"
        " PRIMARY KEY (run_id, file_id, line, test_id)) STRICT, WITHOUT ROWID;"
        "CREATE INDEX lines_by_test ON lines (test_id);"
    )
    files: dict[str, int] = {}
    tests: dict[str, int] = {}
    connection.execute("BEGIN")
    connection.executemany(
        "INSERT INTO lines VALUES (1, ?, ?, ?)",
        (
            (files.setdefault(r.path, len(files)), tests.setdefault(r.nodeid, len(tests)), n)
            for r in rows
            for n in r.lines
        ),
    )
    connection.execute("COMMIT")
    connection.close()
    return _bytes_of(path, ("lines", "lines_by_test"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=2000)
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--share", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="runstore-bench-") as folder:
        root = Path(folder)
        started = time.perf_counter()
        data_file = build_data(root, args.tests, args.files, args.share)
        print(f"built the coverage data in {time.perf_counter() - started:.1f} s "
              f"({data_file.stat().st_size / MIB:.1f} MiB)")
        reads, writes = [], []
        db_path = root / "runs.db"
        rows: tuple[TestLines, ...] = ()
        with build(sqlite(db_path)) as c:
            store, reader = c.get(DataStore), c.get(DataReader)
            for number in range(args.runs):
                took, rows = read_rows(root, data_file, args.files)
                reads.append(took)
                run = store.begin_run(RunStart("bench", f"inv-{number}",
                                               datetime.now(UTC))).unwrap()
                gc.collect()
                started = time.perf_counter()
                stored = store.write_test_coverage(run, rows).unwrap()
                writes.append(time.perf_counter() - started)
                assert stored == len(rows)
            json_s = coverage_json_seconds(root, data_file)
            path = rows[0].path
            asks = []
            for line in (None, 50):
                started = time.perf_counter()
                answer = reader.tests_for("bench", path, line=line, limit=1000).unwrap()
                asks.append((line, time.perf_counter() - started, len(answer.tests)))
        lines = sum(len(r.lines) for r in rows)
        size = _bytes_of(db_path, ("test_coverage", "test_coverage_runs",
                                   "test_coverage_by_file", "test_coverage_by_test"))
        per_run = size / args.runs
        plain = plain_layout_bytes(root, rows)
        print(f"{args.tests} tests x {args.files} files, share {args.share:g}: "
              f"{len(rows):,} (test, file) rows of {lines:,} covered lines per run")
        print(f"read contexts (recorder): median {statistics.median(reads):.2f} s; coverage json "
              f"--show-contexts of the same data: {json_s:.2f} s")
        recording = statistics.median(reads) + statistics.median(writes)
        print(f"write_test_coverage:      median {statistics.median(writes):.2f} s; recording "
              f"(read + write) {recording / json_s:.2f}x coverage json (budget "
              f"{RECORD_BUDGET:g}x)")
        print(f"stored size:              {per_run / MIB:.1f} MiB per run "
              f"({per_run / len(rows):.1f} bytes per row; budget {SIZE_BUDGET / MIB:g} MiB); "
              f"one row per line would take {plain / MIB:.1f} MiB "
              f"({plain / per_run:.1f}x)")
        for line, took, found in asks:
            what = "the file" if line is None else f"line {line}"
            print(f"tests_for({what}) over {args.runs} runs: {took * 1000:.0f} ms, "
                  f"{found} tests")
        verdict = per_run <= SIZE_BUDGET and recording <= RECORD_BUDGET * json_s
        print("verdict:", "within budget" if verdict else "OVER BUDGET")


if __name__ == "__main__":
    main()
