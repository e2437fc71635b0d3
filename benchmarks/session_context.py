"""Benchmark: ``build_context`` on a long session versus a short one, and listing sessions.

Run: ``.venv/bin/python benchmarks/session_context.py [--long 100000] [--short 1000]
[--kept 250] [--sessions 10000]``.

1. Two sessions in one SQLite file: a long one (``--long`` entries) and a short one
   (``--short`` entries), each a chain of user and assistant messages whose newest
   compaction keeps the last ``--kept`` entries, so the context at their leaves has the
   same length. ``build_context`` at each leaf is timed, interleaved round by round (the best
   round counts). Target: long / short <= 1.5 (the path read stops at the compaction, so the
   session's length should not matter). For scale, the same path query on raw apsw.
2. ``list(limit=50)`` newest first, and filtered by cwd, among ``--sessions`` sessions: the
   time of one page.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable

from returns.result import Result, Success

from runstore.layers import SESSION_REPOSITORY, SqliteDatabase, build, sqlite
from runstore.services import NewEntry, NewSession, SessionRepository

TEXT = "The retry wraps fetch() with exponential backoff and jitter; each attempt is logged. "


def _message(n: int, parent: str | None) -> NewEntry:
    role = "user" if n % 2 else "assistant"
    message: dict[str, object] = {"role": role, "content": [{"type": "text", "text": TEXT * 4}]}
    if role == "assistant":
        message |= {
            "provider": "anthropic",
            "model": "claude-sonnet-4-5",
            "usage": {
                "input": 900,
                "output": 120,
                "cacheRead": 5000,
                "cacheWrite": 0,
                "cost": {"total": 0.0123},
            },
        }
    return NewEntry.message(f"e{n:07d}", parent, message, timestamp=1_764_500_000_000 + n)


def fill(repo: SessionRepository, session_id: str, count: int, kept: int) -> str:
    """Append ``count`` entries in a chain whose compaction keeps the last ``kept``.

    Returns the id of the leaf (the last entry).
    """
    repo.create(NewSession(id=session_id, cwd="/bench")).unwrap()
    storage = repo.open(session_id).unwrap()
    compaction_at = count - kept // 2
    batch: list[NewEntry] = []
    parent: str | None = None
    for n in range(1, count + 1):
        if n == compaction_at:
            entry = NewEntry.compaction(
                f"e{n:07d}",
                parent,
                "summary of earlier work",
                f"e{count - kept + 1:07d}",
                150_000,
                timestamp=1,
            )
        else:
            entry = _message(n, parent)
        batch.append(entry)
        parent = entry.id
        if len(batch) == 1000:
            storage.append_many(batch).unwrap()
            batch = []
    if batch:
        storage.append_many(batch).unwrap()
    assert parent is not None
    return parent


def _best(rounds: int, calls: int, fns: dict[str, Callable[[], object]]) -> dict[str, float]:
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            started = time.perf_counter()
            for _ in range(calls):
                fn()
            best[name] = min(best[name], (time.perf_counter() - started) / calls)
    return best


def context(long: int, short: int, kept: int, rounds: int) -> float:
    with (
        tempfile.TemporaryDirectory(prefix="runstore-bench-") as folder,
        build(sqlite(os.path.join(folder, "context.db"))) as container,
    ):
        repo = container.get(SESSION_REPOSITORY)
        started = time.perf_counter()
        long_leaf = fill(repo, "long", long, kept)
        short_leaf = fill(repo, "short", short, kept)
        elapsed = time.perf_counter() - started
        print(f"built sessions of {long:,} and {short:,} entries in {elapsed:.1f} s")
        long_storage = repo.open("long").unwrap()
        short_storage = repo.open("short").unwrap()
        got_long = long_storage.build_context().unwrap()
        got_short = short_storage.build_context().unwrap()
        assert len(got_long.messages) == len(got_short.messages)
        assert long_storage.build_context().unwrap().leaf_id == long_leaf
        assert short_storage.build_context().unwrap().leaf_id == short_leaf
        db = container.get(SqliteDatabase)
        keys: dict[str, int] = dict(db.execute("SELECT id, key FROM sessions"))
        raw_sql = (
            "WITH RECURSIVE up(id, parent_id, seq) AS ("
            " SELECT id, parent_id, seq FROM session_entries WHERE session_key = ? AND id = ?"
            " UNION ALL SELECT e.id, e.parent_id, e.seq FROM up JOIN session_entries AS e"
            " ON e.session_key = ? AND e.id = up.parent_id WHERE up.id IS NOT ?)"
            " SELECT up.id, b.body FROM up CROSS JOIN session_bodies AS b"
            " ON b.session_key = ? AND b.seq = up.seq ORDER BY up.seq"
        )
        anchor_long = f"e{long - kept + 1:07d}"
        connection = db.connection

        def raw_long() -> object:
            k = keys["long"]
            return connection.execute(raw_sql, (k, long_leaf, k, anchor_long, k)).fetchall()

        best = _best(
            rounds,
            20,
            {
                "long": long_storage.build_context,
                "short": short_storage.build_context,
                "raw long": raw_long,
            },
        )
    ratio = best["long"] / best["short"]
    print(f"build_context, {len(got_long.messages)} messages after the compaction:")
    print(f"  at the leaf of {long:>7,} entries: {best['long'] * 1000:7.3f} ms")
    print(f"  at the leaf of {short:>7,} entries: {best['short'] * 1000:7.3f} ms")
    print(f"  long / short = {ratio:.2f}x (target <= 1.5x: {'ok' if ratio <= 1.5 else 'MISSED'})")
    print(
        f"  raw apsw path query on the long one: {best['raw long'] * 1000:7.3f} ms "
        f"(build_context = {best['long'] / best['raw long']:.2f}x that, JSON and records included)"
    )
    return ratio


def listing(count: int, rounds: int) -> None:
    with (
        tempfile.TemporaryDirectory(prefix="runstore-bench-") as folder,
        build(sqlite(os.path.join(folder, "list.db"))) as container,
    ):
        repo = container.get(SESSION_REPOSITORY)
        db = container.get(SqliteDatabase)
        started = time.perf_counter()

        def create_all() -> Result[None, object]:
            for n in range(count):
                repo.create(NewSession(id=f"session-{n:06d}", cwd=f"/home/dev/p{n % 20}")).unwrap()
            return Success(None)

        db.transact("create sessions", create_all).unwrap()
        print(f"created {count:,} sessions in {time.perf_counter() - started:.1f} s")
        page = repo.list(limit=50).unwrap()
        best = _best(
            rounds,
            20,
            {
                "newest": lambda: repo.list(limit=50),
                "cwd": lambda: repo.list(cwd="/home/dev/p7", limit=50),
                "next page": lambda: repo.list(limit=50, cursor=page.next_cursor),
            },
        )
    print(
        f"list(limit=50) among {count:,} sessions: newest {best['newest'] * 1000:.2f} ms, "
        f"by cwd {best['cwd'] * 1000:.2f} ms, a later page {best['next page'] * 1000:.2f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--long", type=int, default=100_000)
    parser.add_argument("--short", type=int, default=1_000)
    parser.add_argument("--kept", type=int, default=250)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    ratio = context(args.long, args.short, args.kept, args.rounds)
    listing(args.sessions, args.rounds)
    return 0 if ratio <= 1.5 else 1


if __name__ == "__main__":
    sys.exit(main())
