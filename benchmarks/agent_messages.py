"""Benchmark: append 10,000 agent messages and read them back, at equal durability.

Run: ``.venv/bin/python benchmarks/agent_messages.py [--messages 10000] [--page 50]
[--chunk 250] [--passes 5] [--tail-messages 100000] [--synchronous sdk|OFF|NORMAL|FULL|EXTRA]``.

**Equal durability.** Every store commits with the same ``PRAGMA synchronous``. By default
(``--synchronous sdk``) that is the level the OpenAI Agents SDK's ``SQLiteSession`` runs with:
it opens its connections with Python's ``sqlite3``, switches them to WAL and sets no
``synchronous``, so they keep SQLite's compiled-in default, read here from a connection opened
the same way (``FULL`` with the usual builds: one fsync per commit); runstore and the raw apsw
floor are opened with that level. A level given explicitly is set on all three: on the SDK's
connections through its per-connection hook ``_configure_connection`` (a private method: when
it is missing the SDK keeps its default and its ratios are no verdict). The line
``durability:`` says which level each store ran with, read back from its own connection.

**Equal work.** The stores do the same work in the same run, each on its own fresh database
file, and take turns in small slices (``--chunk`` appends, then one read pass each, the order
rotating) so that all of them meet the same machine load; each store's time is the sum of its
append slices and the best of its ``--passes`` read passes. Each read measure reads the same
rows from every store (checked):

- **append**: one call per message, each its own commit (runstore ``MessageStore.append``,
  the SDK ``await session.add_items([item])``).
- **read back (whole)**: every message once, as few statements as each API allows: the SDK
  ``get_items()`` (one query); runstore ``MessageStore.list`` forward in pages of the largest
  ``limit`` (1,000 rows), following ``next_cursor``; raw apsw the same page query.
- **newest pages**: ``ceil(messages / page)`` reads of the newest ``--page`` messages (the SDK
  ``get_items(limit=page)``, runstore ``list(limit=page)``).
- **forward pages** (runstore and raw apsw only: the SDK cannot page forward): the whole
  thread in pages of ``--page``.

The stores: **runstore** (the live layer); **raw apsw**, the layer's own statements on an
identically configured apsw connection, ``BEGIN IMMEDIATE`` / ``COMMIT`` around each append,
the same page query, ``json.loads`` of each body, but no validation, no records, no Results
(the floor); the **OpenAI Agents SDK** ``SQLiteSession``, imported as ``agents`` from the
interpreter running this script (``pip install openai-agents``; skipped with a message when it
is missing).

Ratios printed: runstore / raw apsw and runstore / SDK; the target is runstore not slower than
the SDK at equal durability (every ratio <= 1.00). Then the cost of a page at the end of a
long thread: the newest ``--page`` messages (and the same page read forward) of a
``--tail-messages`` thread against a 1,000-message thread, the two interleaved; the clustered
``(thread_key, seq)`` key makes it a seek, not a scan. The target is at most 1.5x. The last
line is the verdict.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

from runstore.layers import (
    AGENT_STORAGE,
    ConnectionSettings,
    Container,
    SqliteDatabase,
    build,
    connect,
    open_database,
    sqlite,
)
from runstore.layers._agents_sqlite import PAGE_CONTENT, PAGE_HAS_MORE, page_query
from runstore.services._agents_rules import check_list_query
from runstore.services.agents import AgentStorage, NewMessage
from runstore.services.pagination import MAX_PAGE_SIZE

SDK_TARGET = 1.0
TAIL_TARGET = 1.5
LEVELS = ("OFF", "NORMAL", "FULL", "EXTRA")


def _item(index: int) -> dict[str, Any]:
    """A typical response item (what an agent loop stores per turn), about 200 bytes."""
    role = "user" if index % 2 == 0 else "assistant"
    return {
        "role": role,
        "content": f"message {index}: the quick brown fox jumps over the lazy dog; "
        "שלום 😀 — a little unicode, and some more words to make it realistic.",
    }


def sdk_synchronous(folder: Path) -> str:
    """The ``synchronous`` level of a connection opened as the SDK opens its own: Python's
    ``sqlite3``, ``PRAGMA journal_mode=WAL``, no ``synchronous`` set."""
    connection = sqlite3.connect(str(folder / "probe.db"))
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        level: int = connection.execute("PRAGMA synchronous").fetchone()[0]
    finally:
        connection.close()
    return LEVELS[level]


class Store:
    """One contestant: appends a slice of items and reads them back in three ways."""

    name = ""
    pages_forward = True

    async def append(self, items: list[dict[str, Any]]) -> None:
        raise NotImplementedError

    async def read_whole(self) -> int:
        raise NotImplementedError

    async def read_forward(self, limit: int) -> int:
        raise NotImplementedError

    async def newest_pages(self, pages: int, limit: int) -> int:
        raise NotImplementedError

    def close(self) -> None:
        """Release the store's connection."""


class Runstore(Store):
    name = "runstore"

    def __init__(self, folder: Path, synchronous: str) -> None:
        self._built = build(
            sqlite(folder / "runstore.db", ConnectionSettings(synchronous=synchronous))
        )
        container: Container = self._built.__enter__()
        self.agents: AgentStorage = container.get(AGENT_STORAGE)
        self.db = container.get(SqliteDatabase)
        self.agents.threads.create("bench", project_id="p").unwrap()

    async def append(self, items: list[dict[str, Any]]) -> None:
        append = self.agents.messages.append
        for item in items:
            append("bench", role=item["role"], content=item).unwrap()

    async def read_whole(self) -> int:
        return await self.read_forward(MAX_PAGE_SIZE)

    async def read_forward(self, limit: int) -> int:
        listing = self.agents.messages.list
        got = listing("bench", after_seq=0, limit=limit).unwrap()
        read = len(got.items)
        while got.has_more:
            got = listing("bench", cursor=got.next_cursor, limit=limit).unwrap()
            read += len(got.items)
        return read

    def level(self) -> str:
        """The ``synchronous`` level of the layer's connection, read back from it."""
        level: int = self.db.scalar("PRAGMA synchronous")
        return LEVELS[level]

    async def newest_pages(self, pages: int, limit: int) -> int:
        listing = self.agents.messages.list
        return sum(len(listing("bench", limit=limit).unwrap().items) for _ in range(pages))

    def close(self) -> None:
        self._built.__exit__(None, None, None)


_BUMP = (
    "UPDATE agent_threads SET head_seq = head_seq + 1, message_count = message_count + 1,"
    " last_message_at_ms = ?, updated_at_ms = ? WHERE id = ? AND status = 'open'"
    " RETURNING key, head_seq"
)
_HEADER = (
    "INSERT INTO agent_messages (thread_key, seq, role, run_key, input_tokens, output_tokens,"
    " cache_read_tokens, cache_write_tokens, cost, created_at_ms)"
    " VALUES (?, ?, ?, NULL, 0, 0, 0, 0, NULL, ?)"
)
_BODY = "INSERT INTO agent_message_bodies (id, content) VALUES (? * 4294967296 + ?, ?)"


class RawApsw(Store):
    name = "raw apsw (same SQL)"

    def __init__(self, folder: Path, synchronous: str) -> None:
        path = folder / "raw.db"
        open_database(path).unwrap().close()  # the same schema, migrated
        self.connection = connect(path, ConnectionSettings(synchronous=synchronous)).unwrap()
        self.connection.execute(
            "INSERT INTO agent_threads (id, project_id, title, metadata, status, created_at_ms,"
            " updated_at_ms) VALUES ('bench', 'p', '', '{}', 'open', 0, 0)"
        )

    async def append(self, items: list[dict[str, Any]]) -> None:
        connection = self.connection
        now = int(time.time() * 1000)
        for item in items:
            connection.execute("BEGIN IMMEDIATE")
            key, seq = connection.execute(_BUMP, (now, now, "bench")).fetchall()[0]
            connection.execute(_HEADER, (key, seq, item["role"], now))
            connection.execute(_BODY, (key, seq, json.dumps(item, ensure_ascii=False)))
            connection.execute("COMMIT")

    def level(self) -> str:
        """The ``synchronous`` level of the connection, read back from it."""
        level = self.connection.execute("PRAGMA synchronous").fetchall()[0][0]
        return LEVELS[int(level)]  # type: ignore[arg-type]

    def _page(self, after: int | None, limit: int) -> list[Any]:
        sql, params = page_query("bench", check_list_query(after, None, None, limit).unwrap())
        rows: list[Any] = self.connection.execute(sql, params).fetchall()
        return rows

    async def read_whole(self) -> int:
        return await self.read_forward(MAX_PAGE_SIZE)

    async def read_forward(self, limit: int) -> int:
        after, read = 0, 0
        while True:
            rows = self._page(after, limit)
            read += len([json.loads(row[PAGE_CONTENT]) for row in rows])
            if rows[0][PAGE_HAS_MORE] is None:
                return read
            after = rows[-1][0]

    async def newest_pages(self, pages: int, limit: int) -> int:
        read = 0
        for _ in range(pages):
            read += len([json.loads(row[PAGE_CONTENT]) for row in self._page(None, limit)])
        return read

    def close(self) -> None:
        self.connection.close()


class AgentsSdk(Store):
    name = "openai-agents SQLiteSession"
    pages_forward = False

    def __init__(self, session_class: Any, folder: Path) -> None:
        self.session = session_class("bench", folder / "sdk.db")

    def synchronous(self) -> str:
        """The level of the session's connections, read back from one (``"unknown"`` when its
        private connection getter is gone)."""
        try:
            row = self.session._get_connection().execute("PRAGMA synchronous").fetchone()
        except AttributeError:
            return "unknown"
        return LEVELS[row[0]]

    async def append(self, items: list[dict[str, Any]]) -> None:
        for item in items:
            await self.session.add_items([item])

    async def read_whole(self) -> int:
        return len(await self.session.get_items())

    async def newest_pages(self, pages: int, limit: int) -> int:
        read = 0
        for _ in range(pages):
            read += len(await self.session.get_items(limit=limit))
        return read

    def close(self) -> None:
        self.session.close()


def _sdk_session_class(level: str | None) -> Any | None:
    """The SDK's ``SQLiteSession`` (None when not installed); with ``level``, a subclass whose
    every new connection is also set to ``PRAGMA synchronous=<level>``."""
    try:
        module = importlib.import_module("agents")
    except ImportError:
        return None
    session_class = getattr(module, "SQLiteSession", None)
    configure: Any = getattr(session_class, "_configure_connection", None)
    if session_class is None or level is None or configure is None:
        return session_class

    class LevelledSession(session_class):  # type: ignore[misc, valid-type]
        @staticmethod
        def _configure_connection(connection: sqlite3.Connection) -> None:
            configure(connection)
            connection.execute(f"PRAGMA synchronous={level}")

    return LevelledSession


MEASURES = ("append", "read back (whole)", "newest pages", "forward pages")


async def contest(
    stores: list[Store], messages: int, page: int, chunk: int, passes: int
) -> dict[str, dict[str, float]]:
    """Return per store and measure the seconds: appends summed, reads the best pass."""
    times = {store.name: dict.fromkeys(MEASURES, float("inf")) for store in stores}
    for store in stores:
        times[store.name]["append"] = 0.0
    items = [_item(i) for i in range(messages)]
    for turn, start in enumerate(range(0, messages, chunk), start=1):
        for store in stores[turn % len(stores) :] + stores[: turn % len(stores)]:
            began = time.perf_counter()
            await store.append(items[start : start + chunk])
            times[store.name]["append"] += time.perf_counter() - began
    pages = -(-messages // page)
    for pass_ in range(passes):
        for store in stores[pass_ % len(stores) :] + stores[: pass_ % len(stores)]:
            mine = times[store.name]
            reads: list[tuple[str, Callable[[], Awaitable[int]], int]] = [
                ("read back (whole)", store.read_whole, messages),
                ("newest pages", partial(store.newest_pages, pages, page), pages * page),
            ]
            if store.pages_forward:
                reads.append(("forward pages", partial(store.read_forward, page), messages))
            for measure, read, rows in reads:
                began = time.perf_counter()
                got = await read()
                mine[measure] = min(mine[measure], time.perf_counter() - began)
                assert got == rows, (store.name, measure, got, rows)
    return times


def tail_pages(
    folder: Path, sizes: tuple[int, int], page: int, repeats: int, synchronous: str
) -> list[float]:
    """Median seconds per (newest page + the same page forward), per thread size, interleaved."""
    settings = ConnectionSettings(synchronous=synchronous)
    with build(sqlite(folder / "tail.db", settings)) as container:
        agents: AgentStorage = container.get(AGENT_STORAGE)
        for size in sizes:
            thread = f"t{size}"
            agents.threads.create(thread, project_id="p").unwrap()
            for start in range(0, size, 1_000):
                count = min(1_000, size - start)
                drafts = [NewMessage(role="user", content=_item(start + i)) for i in range(count)]
                agents.messages.append_many(thread, drafts).unwrap()
        samples: list[list[float]] = [[] for _ in sizes]
        for _ in range(repeats):
            for index, size in enumerate(sizes):
                thread = f"t{size}"
                began = time.perf_counter()
                newest = agents.messages.list(thread, limit=page).unwrap()
                forward = agents.messages.list(thread, after_seq=size - page, limit=page).unwrap()
                samples[index].append(time.perf_counter() - began)
                assert newest.items[-1].seq == size
                assert forward.items == newest.items
        return [statistics.median(s) for s in samples]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--page", type=int, default=50)
    parser.add_argument("--chunk", type=int, default=250)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--tail-messages", type=int, default=100_000)
    parser.add_argument("--tail-repeats", type=int, default=300)
    parser.add_argument(
        "--synchronous",
        default="sdk",
        choices=["sdk", *LEVELS],
        help="PRAGMA synchronous of every store (default: the level the SDK runs with)",
    )
    args = parser.parse_args(argv)
    messages, page = args.messages, args.page
    with tempfile.TemporaryDirectory() as root:
        folders = [Path(tempfile.mkdtemp(dir=root)) for _ in range(4)]
        sdk_default = sdk_synchronous(folders[3])
        level = sdk_default if args.synchronous == "sdk" else args.synchronous
        session_class = _sdk_session_class(None if args.synchronous == "sdk" else level)
        runstore = Runstore(folders[0], level)
        raw = RawApsw(folders[1], level)
        stores: list[Store] = [runstore, raw]
        sdk = None if session_class is None else AgentsSdk(session_class, folders[3])
        if sdk is not None:
            stores.append(sdk)
        try:
            times = asyncio.run(contest(stores, messages, page, args.chunk, args.passes))
            levels = (runstore.level(), raw.level())
            sdk_level = "not installed" if sdk is None else sdk.synchronous()
        finally:
            for store in stores:
                store.close()
    equal = levels == (level, level) and sdk_level == level
    print(
        f"durability: synchronous={levels[0]} for runstore, {levels[1]} for raw apsw,"
        f" {sdk_level} for the SDK"
        f" (its default: {sdk_default}, Python's sqlite3 in WAL; it sets none)"
        + ("" if equal else "; NOT equal, so the SDK ratios are no verdict")
    )

    pages = -(-messages // page)
    print(
        f"{messages:,} appends, one commit each, in slices of {args.chunk} taking turns; then"
        f" best of {args.passes}: read back whole ({messages:,} rows: runstore and raw apsw in"
        f" pages of {MAX_PAGE_SIZE}, the SDK in one get_items()), {pages} reads of the newest"
        f" {page}, and forward pages of {page} (not the SDK):"
    )
    for name, measured in times.items():
        append_s = measured["append"]
        reads = "  ".join(
            f"{measure} {measured[measure] * 1000:7.1f} ms"
            if measured[measure] != float("inf")
            else f"{measure}       n/a"
            for measure in MEASURES[1:]
        )
        print(f"  {name:<28} append {append_s:7.3f} s ({messages / append_s:6,.0f} msg/s)  {reads}")

    print("ratios (runstore / other; lower is better for runstore):")
    ours = times[Runstore.name]
    sdk_ratios: list[tuple[str, float]] = []
    for other in times:
        if other == Runstore.name:
            continue
        theirs = times[other]
        shared = [m for m in MEASURES if theirs[m] != float("inf")]
        ratios = [(m, ours[m] / theirs[m]) for m in shared]
        if other == AgentsSdk.name:
            sdk_ratios = ratios
        print(f"  runstore / {other:<28} " + "  ".join(f"{m} {r:5.2f}x" for m, r in ratios))
    if sdk is None:
        print(
            "  runstore / SDK: skipped, the 'openai-agents' package is not installed"
            " (pip install openai-agents to compare with its SQLiteSession)"
        )

    with tempfile.TemporaryDirectory() as folder:
        small, large = tail_pages(
            Path(folder), (1_000, args.tail_messages), page, args.tail_repeats, level
        )
    tail = large / small
    print(
        f"newest {page} + the same page forward, median of {args.tail_repeats}:"
        f" 1,000-message thread {small * 1e6:6.0f} us,"
        f" {args.tail_messages:,}-message thread {large * 1e6:6.0f} us,"
        f" ratio {tail:4.2f}x (target <= {TAIL_TARGET:.2f})"
    )

    verdicts = [f"tail {tail:.2f}x {'ok' if tail <= TAIL_TARGET else 'MISSED'}"]
    if sdk_ratios and equal:
        over = [f"{m} {r:.2f}x" for m, r in sdk_ratios if r > SDK_TARGET]
        verdicts.insert(
            0,
            f"runstore / SDK at synchronous={level}: "
            + ("ok, every ratio <= 1.00" if not over else "MISSED: " + ", ".join(over)),
        )
    else:
        verdicts.insert(0, "runstore / SDK: no verdict (SDK missing or durability not equal)")
    print("verdict: " + "; ".join(verdicts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
