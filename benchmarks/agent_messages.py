"""Benchmark: append 10,000 agent messages and read them back in pages of 50.

Run: ``.venv/bin/python benchmarks/agent_messages.py [--messages 10000] [--page 50]
[--chunk 250] [--passes 5] [--tail-messages 100000] [--full]``.

The stores do the same work in the same run, each on its own fresh database file, and take
turns in small slices (``--chunk`` appends, then one read pass each, the order rotating) so
that all of them meet the same machine load; each store's time is the sum of its append
slices and the best of its ``--passes`` read passes.

- **runstore**: ``MessageStore.append`` once per message (each its own unit of work: the
  thread's counter row, the header and the body), then ``MessageStore.list``: forward in
  pages of ``--page`` until ``has_more`` is False (the read-back), and the newest
  ``--page`` as many times as that takes pages. Default ``synchronous=NORMAL``; ``--full``
  adds a runstore with ``FULL``, the setting Python's ``sqlite3`` (and so the SDK) keeps.
- **raw apsw**: the layer's own statements on an identically configured apsw connection,
  ``BEGIN IMMEDIATE`` / ``COMMIT`` around each append, the same page query, ``json.loads``
  of each body, but no validation, no records, no Results: the floor.
- **OpenAI Agents SDK** ``SQLiteSession`` (``pip install openai-agents``; skipped with a
  message when it is missing): ``await session.add_items([item])`` once per message. It has
  no cursor, so its read-back is one ``await session.get_items()`` (its one way to read a
  whole session) and its page read is ``get_items(limit=page)``, which returns the newest
  ``page`` items.

Ratios printed: runstore / raw apsw and runstore / SDK; the target is runstore not slower
than the SDK (ratio <= 1.0).

Then the cost of a page at the end of a long thread: the newest ``--page`` messages (and the
same page read forward) of a ``--tail-messages`` thread against a 1,000-message thread, the
two interleaved; the clustered ``(thread_key, seq)`` key makes it a seek, not a scan. The
target is at most 1.5x.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from runstore.layers import ConnectionSettings, Container, build, connect, open_database, sqlite
from runstore.layers._agents_sqlite import page_query
from runstore.services.agents import AgentStorage, NewMessage, check_list_query


def _item(index: int) -> dict[str, Any]:
    """A typical response item (what an agent loop stores per turn), about 200 bytes."""
    role = "user" if index % 2 == 0 else "assistant"
    return {
        "role": role,
        "content": f"message {index}: the quick brown fox jumps over the lazy dog; "
        "שלום 😀 — a little unicode, and some more words to make it realistic.",
    }


class Store:
    """One contestant: appends a slice of items, reads everything back, reads newest pages."""

    name = ""

    async def append(self, items: list[dict[str, Any]]) -> None:
        raise NotImplementedError

    async def read_back(self) -> int:
        raise NotImplementedError

    async def newest_pages(self, pages: int) -> int:
        raise NotImplementedError

    def close(self) -> None:
        """Release the store's connection."""


class Runstore(Store):
    def __init__(self, folder: Path, page: int, synchronous: str) -> None:
        self.name = f"runstore (synchronous={synchronous})"
        self._built = build(
            sqlite(folder / "runstore.db", ConnectionSettings(synchronous=synchronous))
        )
        container: Container = self._built.__enter__()
        self.agents: AgentStorage = container.get(AgentStorage)
        self.agents.threads.create("bench", project_id="p").unwrap()
        self.page = page

    async def append(self, items: list[dict[str, Any]]) -> None:
        append = self.agents.messages.append
        for item in items:
            append("bench", role=item["role"], content=item).unwrap()

    async def read_back(self) -> int:
        after, read = 0, 0
        while True:
            got = self.agents.messages.list("bench", after_seq=after, limit=self.page).unwrap()
            read += len(got.items)
            if not got.has_more:
                return read
            after = got.items[-1].seq

    async def newest_pages(self, pages: int) -> int:
        listing = self.agents.messages.list
        return sum(len(listing("bench", limit=self.page).unwrap().items) for _ in range(pages))

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
    name = "raw apsw (same SQL, NORMAL)"

    def __init__(self, folder: Path, page: int) -> None:
        path = folder / "raw.db"
        open_database(path).unwrap().close()  # the same schema, migrated
        self.connection = connect(path).unwrap()
        self.connection.execute(
            "INSERT INTO agent_threads (id, project_id, title, metadata, status, created_at_ms,"
            " updated_at_ms) VALUES ('bench', 'p', '', '{}', 'open', 0, 0)"
        )
        self.page = page

    async def append(self, items: list[dict[str, Any]]) -> None:
        connection = self.connection
        now = int(time.time() * 1000)
        for item in items:
            connection.execute("BEGIN IMMEDIATE")
            key, seq = connection.execute(_BUMP, (now, now, "bench")).fetchall()[0]
            connection.execute(_HEADER, (key, seq, item["role"], now))
            connection.execute(_BODY, (key, seq, json.dumps(item, ensure_ascii=False)))
            connection.execute("COMMIT")

    def _page(self, after: int | None) -> list[Any]:
        sql, params = page_query("bench", check_list_query(after, None, None, self.page).unwrap())
        rows: list[Any] = self.connection.execute(sql, params).fetchall()
        return rows

    async def read_back(self) -> int:
        after, read = 0, 0
        while True:
            rows = self._page(after)
            read += len([json.loads(row[10]) for row in rows])
            if rows[0][11] is None:
                return read
            after = rows[-1][0]

    async def newest_pages(self, pages: int) -> int:
        read = 0
        for _ in range(pages):
            read += len([json.loads(row[10]) for row in self._page(None)])
        return read

    def close(self) -> None:
        self.connection.close()


class AgentsSdk(Store):
    name = "openai-agents SQLiteSession"

    def __init__(self, session_class: Any, folder: Path, page: int) -> None:
        self.session = session_class("bench", folder / "sdk.db")
        self.page = page

    async def append(self, items: list[dict[str, Any]]) -> None:
        for item in items:
            await self.session.add_items([item])

    async def read_back(self) -> int:
        return len(await self.session.get_items())

    async def newest_pages(self, pages: int) -> int:
        read = 0
        for _ in range(pages):
            read += len(await self.session.get_items(limit=self.page))
        return read

    def close(self) -> None:
        self.session.close()


def _sdk_session_class() -> Any | None:
    try:
        module = importlib.import_module("agents")
    except ImportError:
        return None
    return getattr(module, "SQLiteSession", None)


async def contest(
    stores: list[Store], messages: int, page: int, chunk: int, passes: int
) -> dict[str, list[float]]:
    """Return per store: [append seconds, best read-back seconds, best newest-pages seconds]."""
    times = {store.name: [0.0, float("inf"), float("inf")] for store in stores}
    items = [_item(i) for i in range(messages)]
    for turn, start in enumerate(range(0, messages, chunk), start=1):
        for store in stores[turn % len(stores) :] + stores[: turn % len(stores)]:
            began = time.perf_counter()
            await store.append(items[start : start + chunk])
            times[store.name][0] += time.perf_counter() - began
    pages = -(-messages // page)
    for pass_ in range(passes):
        for store in stores[pass_ % len(stores) :] + stores[: pass_ % len(stores)]:
            began = time.perf_counter()
            read = await store.read_back()
            times[store.name][1] = min(times[store.name][1], time.perf_counter() - began)
            assert read == messages, (store.name, read)
            began = time.perf_counter()
            read = await store.newest_pages(pages)
            times[store.name][2] = min(times[store.name][2], time.perf_counter() - began)
            assert read == pages * page, (store.name, read)
    return times


def tail_pages(folder: Path, sizes: tuple[int, int], page: int, repeats: int) -> list[float]:
    """Median seconds per (newest page + the same page forward), per thread size, interleaved."""
    with build(sqlite(folder / "tail.db")) as container:
        agents: AgentStorage = container.get(AgentStorage)
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
    parser.add_argument("--full", action="store_true", help="add runstore with synchronous=FULL")
    args = parser.parse_args(argv)
    messages, page = args.messages, args.page
    session_class = _sdk_session_class()

    with tempfile.TemporaryDirectory() as root:
        folders = [Path(tempfile.mkdtemp(dir=root)) for _ in range(4)]
        stores: list[Store] = [Runstore(folders[0], page, "NORMAL"), RawApsw(folders[1], page)]
        if args.full:
            stores.append(Runstore(folders[2], page, "FULL"))
        if session_class is not None:
            stores.append(AgentsSdk(session_class, folders[3], page))
        try:
            times = asyncio.run(contest(stores, messages, page, args.chunk, args.passes))
        finally:
            for store in stores:
                store.close()

    pages = -(-messages // page)
    print(
        f"{messages:,} appends, one call each, in slices of {args.chunk} taking turns; then"
        f" best of {args.passes}: read back ({pages} forward pages of {page}; the SDK:"
        f" one get_items()) and {pages} reads of the newest {page}:"
    )
    for name, (append_s, back_s, newest_s) in times.items():
        print(
            f"  {name:<30} append {append_s:7.3f} s ({messages / append_s:7,.0f} msg/s)"
            f"  read back {back_s * 1000:7.1f} ms  newest pages {newest_s * 1000:7.1f} ms"
        )
    ours = times["runstore (synchronous=NORMAL)"]
    print("ratios (runstore / other; lower is better for runstore):")
    others = [("raw apsw", RawApsw.name, "")]
    if session_class is not None:
        others.append(("SDK", AgentsSdk.name, "  (target <= 1.00)"))
    for label, name, note in others:
        theirs = times[name]
        print(
            f"  runstore / {label:<19} append {ours[0] / theirs[0]:5.2f}x"
            f"  read back {ours[1] / theirs[1]:5.2f}x"
            f"  newest pages {ours[2] / theirs[2]:5.2f}x{note}"
        )
    if args.full and session_class is not None:
        full, sdk = times["runstore (synchronous=FULL)"], times[AgentsSdk.name]
        print(f"  runstore FULL / SDK (same fsync) append {full[0] / sdk[0]:5.2f}x")
    if session_class is None:
        print(
            "  runstore / SDK: skipped, the 'openai-agents' package is not installed"
            " (pip install openai-agents to compare with its SQLiteSession)"
        )

    with tempfile.TemporaryDirectory() as folder:
        small, large = tail_pages(
            Path(folder), (1_000, args.tail_messages), page, args.tail_repeats
        )
    print(
        f"newest {page} + the same page forward, median of {args.tail_repeats}:"
        f" 1,000-message thread {small * 1e6:6.0f} us,"
        f" {args.tail_messages:,}-message thread {large * 1e6:6.0f} us,"
        f" ratio {large / small:4.2f}x (target <= 1.50)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
