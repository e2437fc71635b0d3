"""Benchmark: ``aio.postgres`` (the sync layer in greenlets on ``AsyncConnectionPool``) against
the sync PostgreSQL layer, one call at a time, and how long one call holds the event loop.

Run: ``.venv/bin/python benchmarks/aio_postgres.py [--calls 500] [--sizes 0.06,1,4,16]``.

The server is ``RUNSTORE_TEST_POSTGRES=<dsn>`` when set, else a throw-away one (as in
``benchmarks/postgres_ledger.py``), in a fresh database. Phases, each on both layers, in
rotating order: ``--calls`` appends of a small message to one thread (each its own unit of
work), then ``--calls`` reads of the newest page of 20. Printed per phase: wall and CPU
milliseconds per call on each layer and their ratio. Then one append of a message whose
content is a string of each of ``--sizes`` MiB, through ``aio``, with the longest stretch
the bridge's sync code ran on the loop between two awaits (``greenlet.settrace``): the
time a payload's validation and JSON encoding keep the loop from other tasks.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable

from postgres_ledger import _database

from runstore import aio
from runstore.aio._greenlet import BridgeStretches
from runstore.layers import AGENT_STORAGE, build, postgres


def _timed(run: Callable[[], None]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - wall, time.process_time() - cpu


def _sync_phases(dsn: str, calls: int, thread: str) -> dict[str, tuple[float, float]]:
    with build(postgres(dsn, access="write")) as c:
        agents = c.get(AGENT_STORAGE)
        agents.threads.create(thread, project_id="bench").unwrap()

        def append() -> None:
            for i in range(calls):
                agents.messages.append(thread, role="user", content={"i": i}).unwrap()

        def read() -> None:
            for _ in range(calls):
                agents.messages.list(thread, limit=20).unwrap()

        return {"append": _timed(append), "newest page": _timed(read)}


def _aio_phases(dsn: str, calls: int, thread: str) -> dict[str, tuple[float, float]]:
    async def main() -> dict[str, tuple[float, float]]:
        async with aio.build(aio.postgres(dsn, access="write")) as c:
            agents = c.get(aio.AGENT_STORAGE)
            (await agents.threads.create(thread, project_id="bench")).unwrap()

            async def append() -> None:
                for i in range(calls):
                    (await agents.messages.append(thread, role="user", content={"i": i})).unwrap()

            async def read() -> None:
                for _ in range(calls):
                    (await agents.messages.list(thread, limit=20)).unwrap()

            return {"append": await _atimed(append), "newest page": await _atimed(read)}

    return asyncio.run(main())


async def _atimed(run: Callable[[], Awaitable[None]]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    await run()
    return time.perf_counter() - wall, time.process_time() - cpu


def _held(dsn: str, sizes: list[float]) -> list[tuple[float, float]]:
    """(MiB, longest bridge stretch in ms) of one append per size."""
    found: list[tuple[float, float]] = []

    async def main() -> None:
        async with aio.build(aio.postgres(dsn, access="write")) as c:
            agents = c.get(aio.AGENT_STORAGE)
            (await agents.threads.create("held", project_id="bench")).unwrap()
            for mib in sizes:
                text = "x" * int(mib * 1024 * 1024)
                with BridgeStretches() as held:
                    appended = await agents.messages.append("held", role="user", content=text)
                appended.unwrap()
                found.append((mib, held.longest * 1000))

    asyncio.run(main())
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=500, help="calls per phase")
    parser.add_argument("--sizes", default="0.06,1,4,16", help="payload sizes, MiB")
    args = parser.parse_args(argv)
    with _database() as dsn:
        with build(postgres(dsn)):
            pass
        totals: dict[str, dict[str, list[tuple[float, float]]]] = {"sync": {}, "aio": {}}
        for rnd in range(2):
            order = [("sync", _sync_phases), ("aio", _aio_phases)]
            for name, phases in order if rnd % 2 == 0 else order[::-1]:
                for phase, figures in phases(dsn, args.calls, f"{name}-{rnd}").items():
                    totals[name].setdefault(phase, []).append(figures)
        for phase in totals["sync"]:
            sync_wall, sync_cpu = min(totals["sync"][phase])
            aio_wall, aio_cpu = min(totals["aio"][phase])
            per = 1000 / args.calls
            print(
                f"{phase}: sync {sync_wall * per:.2f} ms/call ({sync_cpu * per:.2f} ms CPU),"
                f" aio {aio_wall * per:.2f} ms/call ({aio_cpu * per:.2f} ms CPU);"
                f" aio/sync {aio_wall / sync_wall:.2f}x wall, {aio_cpu / sync_cpu:.2f}x CPU"
            )
        sizes = [float(s) for s in args.sizes.split(",")]
        for mib, held in _held(dsn, sizes):
            print(f"append of {mib:g} MiB: the loop held {held:.1f} ms at most")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
