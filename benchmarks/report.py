"""Benchmark: the HTML report of a 1,000,000-item project: collect (``collect_report``) and
render (``render_html``) under 2 s, the page under 2 MB.

Run: ``.venv/bin/python benchmarks/report.py [--db-runs 500] [--cases 2000] [--runs 100]
[--repeat 5] [--no-postgres]`` (the first run builds the database: about a minute; not part
of CI).

The database holds ``--db-runs`` finished runs of ``--cases`` items each (500 x 2,000 =
1,000,000 items; 5% failing with one error of 3 frames, 20 items per module), built with raw
bulk inserts from a run the layer wrote (``_test_runs_synthetic.build_database``) and cached
in the temporary folder under a name holding its shape and the schema's migrations, so a
later run reuses it. Peers, each timed ``--repeat`` times after a warm-up, the order rotated
every round (so no peer always runs on a warm or a cold cache); medians count:

- ``sqlite``: ``collect_report(reader, project, runs=--runs)`` on the SQLite file, then
  ``render_html`` of what it collected (timed apart and together);
- ``postgres``: the same report on PostgreSQL (the database copied there by ``runstore db
  copy`` and ``ANALYZE``d), on the server ``RUNSTORE_TEST_POSTGRES`` names or the tests'
  embedded one (``tests/postgres/server.py``); left out with ``--no-postgres`` or when no
  server can be started (the line says why);
- ``baseline``: the plain reads of ``runstore trends --format json`` for as many runs
  (``list_runs`` and ``coverage_trend``) on the SQLite file: the least a chart of the runs
  reads.

Prints each peer's medians, the ratio of each report to the baseline, the page's size (and
the size at ``MAX_REPORT_RUNS`` runs, the largest report), and a verdict per target:
collect + render <= 2 s on each backend, the page <= 2 MB.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from _test_runs_synthetic import build_database

from runstore.layers import build, sqlite
from runstore.migrations import shipped_migrations
from runstore.report import MAX_REPORT_RUNS, ReportData, collect_report
from runstore.services.test_runs import DataReader

TIME_TARGET_S = 2.0
SIZE_TARGET_BYTES = 2_000_000
PROJECT = "bench"


def cached_database(runs: int, cases: int, modules: int) -> Path:
    """The benchmark's SQLite file, built once per shape and schema in the temporary folder."""
    schema = hashlib.sha256(
        "".join(m.name + m.checksum for m in shipped_migrations()).encode()
    ).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / "runstore-bench-report"
    folder.mkdir(exist_ok=True)
    path = folder / f"report-{runs}x{cases}-m{modules}-{schema}.db"
    if not path.exists():
        partial = path.with_suffix(".partial.db")
        for stale in (partial, partial.with_suffix(".template.db")):
            stale.unlink(missing_ok=True)
        seconds = build_database(partial, runs, cases=cases, modules=modules, project=PROJECT)
        partial.rename(path)
        print(f"built {runs} runs x {cases} items = {runs * cases:,} items in {seconds:.1f} s: "
              f"{path}")
    else:
        print(f"reusing {path}")
    return path


def _render() -> Callable[[ReportData], str] | None:
    try:
        from runstore.report import render_html
    except ImportError:
        return None
    return render_html


def report_peer(reader: DataReader, runs: int) -> Callable[[], dict[str, float]]:
    """A call that collects and renders the report once, returning its timings (s)."""
    render = _render()

    def call() -> dict[str, float]:
        started = time.perf_counter()
        data = collect_report(reader, PROJECT, runs=runs).unwrap()
        collected = time.perf_counter()
        if render is not None:
            render(data)
        rendered = time.perf_counter()
        return {"collect": collected - started, "render": rendered - collected,
                "total": rendered - started}

    return call


def baseline_peer(reader: DataReader, runs: int) -> Callable[[], dict[str, float]]:
    """What ``runstore trends --format json --limit RUNS`` reads, once."""

    def call() -> dict[str, float]:
        started = time.perf_counter()
        reader.list_runs(PROJECT, limit=runs).unwrap()
        reader.coverage_trend(PROJECT, limit=runs).unwrap()
        return {"total": time.perf_counter() - started}

    return call


@contextmanager
def postgres_reader(path: Path) -> Iterator[tuple[DataReader | None, str]]:
    """A reader on a PostgreSQL copy of ``path``, or None with the reason there is none."""
    try:
        import psycopg
        from postgres_test_runs import _fresh, _url

        from postgres.fixtures import cluster as clusters
        from runstore.layers import postgres
        from runstore.layers._copy import copy_database
    except ImportError as missing:
        yield None, f"PostgreSQL left out: {missing}"
        return
    with ExitStack() as stack:
        try:
            cluster = stack.enter_context(clusters())
        except Exception as failed:  # no server binary, no port, ...: say so and go on
            yield None, f"PostgreSQL left out: no server could be started ({failed})"
            return
        dsn = stack.enter_context(_fresh(cluster))
        started = time.perf_counter()
        copied = copy_database(str(path), _url(dsn)).unwrap()
        with psycopg.connect(dsn, autocommit=True) as connection:
            connection.execute("ANALYZE")
        note = (f"PostgreSQL: copied {copied.rows:,} rows in "
                f"{time.perf_counter() - started:.1f} s")
        container = stack.enter_context(build(postgres(dsn)))
        yield container.get(DataReader), note


def measure(peers: dict[str, Callable[[], dict[str, float]]], repeat: int) -> dict[
    str, dict[str, float]
]:
    """Each peer once to warm up, then ``repeat`` rounds, each in an order rotated by one;
    the median of each timing."""
    for call in peers.values():
        call()
    names = list(peers)
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in names}
    for round_no in range(repeat):
        shift = round_no % len(names)
        for name in names[shift:] + names[:shift]:
            for key, seconds in peers[name]().items():
                samples[name].setdefault(key, []).append(seconds)
    return {
        name: {key: statistics.median(values) for key, values in timings.items()}
        for name, timings in samples.items()
    }


def page_size(reader: DataReader, runs: int) -> int | None:
    render = _render()
    if render is None:
        return None
    return len(render(collect_report(reader, PROJECT, runs=runs).unwrap()).encode("utf-8"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--db-runs", type=int, default=500)
    parser.add_argument("--cases", type=int, default=2_000)
    parser.add_argument("--modules", type=int, default=100)
    parser.add_argument("--runs", type=int, default=100, help="runs in the report")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    path = cached_database(args.db_runs, args.cases, args.modules)
    if _render() is None:
        print("render_html is not there yet: timing the collection alone")
    ok = True
    with ExitStack() as stack:
        local = stack.enter_context(build(sqlite(path))).get(DataReader)
        peers = {"sqlite": report_peer(local, args.runs),
                 "baseline": baseline_peer(local, args.runs)}
        if not args.no_postgres:
            remote, note = stack.enter_context(postgres_reader(path))
            print(note)
            if remote is not None:
                peers["postgres"] = report_peer(remote, args.runs)
        medians = measure(peers, args.repeat)
        base = medians["baseline"]["total"]
        print(f"\nmedian of {args.repeat} rounds, report of {args.runs} runs of "
              f"{args.db_runs} x {args.cases} items:")
        print(f"  {'peer':<10} {'collect':>10} {'render':>10} {'total':>10}  total / baseline")
        for name, timing in medians.items():
            cells = [f"{timing[k] * 1000:8.1f}ms" if k in timing else f"{'-':>10}"
                     for k in ("collect", "render", "total")]
            print(f"  {name:<10} {' '.join(cells)}  {timing['total'] / base:8.1f}")
        for name in ("sqlite", "postgres"):
            if name not in medians:
                continue
            total = medians[name]["total"]
            passed = total <= TIME_TARGET_S
            ok = ok and passed
            print(f"verdict {name}: {'PASS' if passed else 'FAIL'}: collect + render "
                  f"{total:.2f} s (target <= {TIME_TARGET_S:.0f} s)")
        for runs in sorted({args.runs, MAX_REPORT_RUNS}):
            size = page_size(local, runs)
            if size is None:
                continue
            passed = size <= SIZE_TARGET_BYTES
            ok = ok and passed
            print(f"verdict size: {'PASS' if passed else 'FAIL'}: a report of {runs} runs is "
                  f"{size:,} bytes of HTML (target <= {SIZE_TARGET_BYTES:,})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
