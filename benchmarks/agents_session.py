"""Benchmark: ``RunstoreSession`` against the Agents SDK's ``SQLiteSession``, at equal durability.

Run from the frameworks venv (it has the SDK): ``.venv-frameworks/bin/python
benchmarks/agents_session.py [--turns 1000] [--chunk 50] [--history 20]``.

The workload is an agent loop's: each turn appends one item (``await
session.add_items([item])``, its own commit) and reads the session's newest ``--history``
items (``await session.get_items(limit=history)``); at the end each session reads its whole
history once (``get_items()``), best of 5. Both sessions are file-backed, each on its own
fresh file, and take turns in slices of ``--chunk`` turns, the order rotating, so that both
meet the same machine load; a store's time is the sum of its slices.

**Equal durability.** ``SQLiteSession`` opens its connections with Python's ``sqlite3`` in
WAL and sets no ``synchronous``, so it runs with SQLite's compiled-in default, ``FULL`` with
the usual builds (research of openai-agents 0.24: ``agents/memory/sqlite_session.py``);
runstore's default is ``NORMAL``, so ``RunstoreSession`` is opened here with
``ConnectionSettings(synchronous="FULL")``. The line ``durability:`` prints the level each
ran with, read back from its own connection.

Ratios printed: runstore / SDK per measure (below 1.00: runstore is faster).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from agent_messages import LEVELS, _item, sdk_synchronous
from agents import SQLiteSession

from runstore.adapters.openai_agents import RunstoreSession
from runstore.layers import ConnectionSettings, SqliteDatabase

MEASURES = ("turn (add 1 + get newest)", "read whole history")


async def _runstore_level(session: RunstoreSession) -> str:
    database = session._database
    assert database is not None
    level: int = await database.container.runner.call(
        "write", lambda c: c.get(SqliteDatabase).scalar("PRAGMA synchronous")
    )
    return LEVELS[level]


def _sdk_level(session: SQLiteSession) -> str:
    try:
        row = session._get_connection().execute("PRAGMA synchronous").fetchone()
    except AttributeError:  # the SDK's private getter is gone
        return "unknown"
    return LEVELS[row[0]]


async def _timed(work: Awaitable[Any]) -> float:
    started = time.perf_counter()
    await work
    return time.perf_counter() - started


async def contest(args: argparse.Namespace, folder: Path) -> dict[str, dict[str, float]]:
    """Run the workload on both sessions, taking turns; the seconds per store and measure."""
    sessions: dict[str, Any] = {
        "runstore": RunstoreSession(
            "bench", folder / "runstore.db", settings=ConnectionSettings(synchronous="FULL")
        ),
        "sdk": SQLiteSession("bench", folder / "sdk.db"),
    }
    try:
        print(
            f"durability: runstore synchronous={await _runstore_level(sessions['runstore'])},"
            f" SQLiteSession synchronous={_sdk_level(sessions['sdk'])}"
            f" (SQLite's default on a connection opened as the SDK opens its own:"
            f" {sdk_synchronous(folder)})"
        )
        times = {name: dict.fromkeys(MEASURES, 0.0) for name in sessions}
        items = [_item(i) for i in range(args.turns)]

        async def turns(session: Any, chunk: list[Any]) -> None:
            for item in chunk:
                await session.add_items([item])
                await session.get_items(limit=args.history)

        order = list(sessions)
        for start in range(0, args.turns, args.chunk):
            chunk = items[start : start + args.chunk]
            for name in order:
                session = sessions[name]
                times[name][MEASURES[0]] += await _timed(turns(session, chunk))
            order.append(order.pop(0))
        for _ in range(5):
            for name in order:
                session = sessions[name]
                assert await session.get_items() == items, f"{name} lost items"
                spent = await _timed(session.get_items())
                times[name][MEASURES[1]] = min(times[name][MEASURES[1]] or spent, spent)
            order.append(order.pop(0))
        return times
    finally:
        for session in sessions.values():
            session.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--chunk", type=int, default=50)
    parser.add_argument("--history", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        times = asyncio.run(contest(args, Path(folder)))
    print(f"{args.turns} turns, newest {args.history} read after each add, slices of {args.chunk}")
    print(f"{'measure':<28} {'runstore':>12} {'SQLiteSession':>14} {'ratio':>7}")
    for measure in MEASURES:
        ours, theirs = times["runstore"][measure], times["sdk"][measure]
        per = args.turns if measure == MEASURES[0] else 1
        print(
            f"{measure:<28} {ours / per * 1000:>9.3f} ms {theirs / per * 1000:>11.3f} ms"
            f" {ours / theirs:>7.2f}"
        )
    ratios = [times["runstore"][m] / times["sdk"][m] for m in MEASURES]
    print(f"geometric mean of the ratios: {statistics.geometric_mean(ratios):.2f}")


if __name__ == "__main__":
    main()
