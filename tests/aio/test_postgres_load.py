"""100 coroutines appending to 10 agent threads at once through ``aio.postgres``: nothing is
lost and the event loop is never blocked.

Nothing lost: every thread ends with dense sequence numbers 1..N and every client id once.
Never blocked: on PostgreSQL every statement is awaited on the loop's thread by design, and
the layer's Python work for every client runs there between awaits, so what is judged is
what holds the loop, not the loop's lag: no sync psycopg connection is made during the run
(every statement went through ``AsyncConnection``), and each stretch the sync layer's code
ran in a bridge greenlet between two awaits (``BridgeStretches``) is held to the 50 ms bound,
a longer one failing only when a control thread's idle loop, sampled over the same interval
as on SQLite (``test_load``), saw no comparable stall. The loop's own lag (a task sleeping
5 ms noting how late each wake-up is) is printed beside the control loop's, not judged
(see the test). The figures are printed (``-s`` shows them).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import attrs
import psycopg
import pytest
from test_load import Sample, _figures, _monitor, unexplained

from postgres.fixtures import PostgresCluster
from postgres.server import fresh_name
from runstore import aio
from runstore.aio._greenlet import BridgeStretches, in_bridge
from runstore.layers import AGENT_STORAGE, build, postgres

COROUTINES = 100
THREADS = 10
APPENDS = 5
"""Each coroutine's appends: 500 in all, 50 per agent thread."""


@attrs.frozen
class Run:
    """What one load run saw: the two sleepers' samples, the bridge's stretches on the loop
    (as samples: when each ended, how long it ran) and the sync connections made."""

    loop: list[Sample]
    control: list[Sample]
    stretches: list[Sample]
    sync_connections: int


@pytest.fixture
def load_dsn(postgres_server: PostgresCluster) -> Iterator[str]:
    name = fresh_name()
    yield postgres_server.create(name)
    postgres_server.drop(name)


def _load(dsn: str, monkeypatch: pytest.MonkeyPatch, attempt: int) -> Run:
    loop_samples: list[Sample] = []
    control_samples: list[Sample] = []
    made: list[str] = []
    connect = psycopg.Connection.connect

    def counting_connect(*args: Any, **kwargs: Any) -> Any:
        made.append("sync")
        return connect(*args, **kwargs)

    stop = threading.Event()
    held = BridgeStretches()

    async def main() -> None:
        async with aio.build(aio.postgres(dsn, access="write")) as c:
            agents = c.get(aio.AGENT_STORAGE)
            for t in range(THREADS):
                (await agents.threads.create(f"t{attempt}-{t}", project_id="load")).unwrap()
            monkeypatch.setattr(psycopg.Connection, "connect", counting_connect)
            watching = asyncio.create_task(_monitor(loop_samples, lambda: False))
            try:

                async def client(n: int) -> None:
                    for k in range(APPENDS):
                        appended = await agents.messages.append(
                            f"t{attempt}-{n % THREADS}",
                            role="user",
                            content={"n": n, "k": k},
                            client_id=f"c{n}-{k}",
                        )
                        appended.unwrap()

                with held:
                    await asyncio.gather(*(client(n) for n in range(COROUTINES)))
            finally:
                monkeypatch.undo()
                watching.cancel()

    control = threading.Thread(
        target=lambda: asyncio.run(_monitor(control_samples, stop.is_set)), daemon=True
    )
    control.start()
    started = time.perf_counter()
    try:
        asyncio.run(main())
    finally:
        stop.set()
        control.join()
    stretches = [Sample(ended, seconds) for ended, seconds in held.stretches]
    print(
        f"\n{COROUTINES * APPENDS} appends in {time.perf_counter() - started:.2f} s; loop lag"
        f" {_figures(loop_samples)}; control loop {_figures(control_samples)}; bridge"
        f" stretches {_figures(stretches)}"
    )
    return Run(loop_samples, control_samples, stretches, len(made))


def test_a_hundred_coroutines_lose_nothing_and_never_block_the_loop(
    load_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Up to three runs (on fresh agent threads): nothing lost and no sync connection in
    every one, and one run whose every bridge stretch over 50 ms the control loop explains.

    The loop's own lag is printed beside the control loop's, not judged: here the loop's
    thread does the layer's work for 100 clients (about 2.4 ms of CPU per append, see
    ``benchmarks/aio_postgres.py``), and on a loaded 2-core machine a thread that is always
    busy waits longer for a core than a control thread that only sleeps (loop p99 43 to 65
    ms against the control's 20 to 25 ms at load 11, with every stretch under 2 ms at p99).
    What blocks a loop is a callback that runs long, which the stretches measure.
    """
    assert not in_bridge()
    for attempt in range(3):
        run = _load(load_dsn, monkeypatch, attempt)
        with build(postgres(load_dsn, access="write")) as c:
            messages = c.get(AGENT_STORAGE).messages
            for t in range(THREADS):
                stored = messages.list(f"t{attempt}-{t}", limit=1_000).unwrap().items
                assert [m.seq for m in stored] == list(range(1, len(stored) + 1))
                assert sorted(m.client_id or "" for m in stored) == sorted(
                    f"c{n}-{k}" for n in range(t, COROUTINES, THREADS) for k in range(APPENDS)
                )
        assert run.sync_connections == 0, "a statement ran on a sync connection"
        assert len(run.stretches) > COROUTINES * APPENDS
        assert len(run.loop) > 10
        stalls = unexplained(run.stretches, run.control)
        if not stalls:
            return
    assert stalls == [], [
        (stall, [c for c in run.control if stall.since - 0.05 < c.at < stall.at + 0.1])
        for stall in stalls
    ]
