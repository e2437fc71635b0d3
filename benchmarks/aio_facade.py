"""What a call through ``runstore.aio`` costs over the same sync call, measured in one run.

Per layer (in memory, SQLite ``:memory:``, an SQLite file), the median over rounds (in
rotating order) of the time per call of ``messages.get`` (a read) and ``messages.append``
(a write) three ways: the sync service called directly; awaited through the async façade
(one hop to the runner's thread and back); and through the contracts' sync bridge
(``runstore.testing._aio``: one more hop, to the bridge's event loop). Prints microseconds
per call and the façade's overhead (façade minus direct).

    .venv/bin/python benchmarks/aio_facade.py [--calls 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from runstore import aio
from runstore.layers import AGENT_STORAGE, Layer, build, in_memory, sqlite
from runstore.testing import bridged


def _sync(layer: Layer, calls: int) -> tuple[float, float]:
    with build(layer) as c:
        messages = c.get(AGENT_STORAGE).messages
        c.get(AGENT_STORAGE).threads.create("t", project_id="p").unwrap()
        start = time.perf_counter()
        for i in range(calls):
            messages.append("t", role="user", content=i).unwrap()
        wrote = time.perf_counter() - start
        start = time.perf_counter()
        for i in range(calls):
            messages.get("t", i + 1).unwrap()
        return wrote / calls, (time.perf_counter() - start) / calls


def _async(layer: aio.AsyncLayer, calls: int) -> tuple[float, float]:
    async def main() -> tuple[float, float]:
        async with aio.build(layer) as c:
            messages = c.get(aio.AGENT_STORAGE).messages
            (await c.get(aio.AGENT_STORAGE).threads.create("t", project_id="p")).unwrap()
            start = time.perf_counter()
            for i in range(calls):
                (await messages.append("t", role="user", content=i)).unwrap()
            wrote = time.perf_counter() - start
            start = time.perf_counter()
            for i in range(calls):
                (await messages.get("t", i + 1)).unwrap()
            return wrote / calls, (time.perf_counter() - start) / calls

    return asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    numbers = iter(range(1_000_000))

    def file() -> str:
        return str(folder / f"bench-{next(numbers)}.db")

    cases: dict[str, dict[str, Callable[[], tuple[float, float]]]] = {
        "in memory": {
            "sync": lambda: _sync(in_memory(), args.calls),
            "aio": lambda: _async(aio.in_memory(), args.calls),
            "bridge": lambda: _sync(bridged(aio.in_memory()), args.calls),
        },
        "sqlite :memory:": {
            "sync": lambda: _sync(sqlite(":memory:"), args.calls),
            "aio": lambda: _async(aio.sqlite(":memory:"), args.calls),
            "bridge": lambda: _sync(bridged(aio.sqlite(":memory:")), args.calls),
        },
        "sqlite file": {
            "sync": lambda: _sync(sqlite(file()), args.calls),
            "aio": lambda: _async(aio.sqlite(file()), args.calls),
            "bridge": lambda: _sync(bridged(aio.sqlite(file())), args.calls),
        },
    }
    print(f"{args.calls} calls per measurement, median of {args.rounds} rounds, µs per call")
    for layer, ways in cases.items():
        times: dict[str, list[tuple[float, float]]] = {way: [] for way in ways}
        order = list(ways)
        for round_ in range(args.rounds):
            for way in order[round_ % len(order):] + order[: round_ % len(order)]:
                times[way].append(ways[way]())
        median = {
            way: tuple(statistics.median(t[k] for t in got) * 1e6 for k in (0, 1))
            for way, got in times.items()
        }
        print(f"{layer}:")
        for way, (write, read) in median.items():
            print(f"  {way:7} append {write:8.1f}   get {read:8.1f}")
        print(
            f"  façade overhead: append {median['aio'][0] - median['sync'][0]:+.1f}"
            f"   get {median['aio'][1] - median['sync'][1]:+.1f}"
        )


if __name__ == "__main__":
    main()
