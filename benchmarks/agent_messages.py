"""Benchmark: append 10,000 agent messages and read them back in pages of 50.

Run: ``.venv/bin/python benchmarks/agent_messages.py [--messages 10000] [--page 50]
[--rounds 3] [--tail-messages 100000]``.

Three stores do the same work in the same run, each on a fresh database file per round,
rounds alternating, the best round of each counting:

- **runstore**: ``MessageStore.append`` once per message (each its own unit of work: the
  thread's counter row, the header and the body), then ``MessageStore.list`` forward in
  pages of ``--page`` until ``has_more`` is False. Run twice: with the default
  ``synchronous=NORMAL`` and with ``FULL`` (what Python's ``sqlite3`` module, and so the
  SDK, leaves in place).
- **raw apsw**: the layer's own statements on an identically configured apsw connection,
  ``BEGIN IMMEDIATE`` / ``COMMIT`` around each append, the same two queries per page, no
  validation, no records, no Results: the floor.
- **OpenAI Agents SDK** ``SQLiteSession`` (``pip install openai-agents``; skipped with a
  message when it is missing): ``await session.add_items([item])`` once per message, then
  ``await session.get_items(limit=page)`` as many times as runstore reads pages. The SDK
  has no cursor: ``get_items(limit)`` returns the newest ``limit`` items, its only way to
  read part of a session, so that is the page read it is timed on.

Ratios printed: runstore / raw apsw and runstore / SDK for appends and for page reads; the
target is runstore not slower than the SDK (ratio <= 1.0).

Then the cost of a page at the end of a long thread: the newest ``--page`` messages of a
``--tail-messages`` thread against the same page of a 1,000-message thread (the clustered
``(thread_key, seq)`` key makes it a seek, not a scan); the target is at most 1.5x.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from runstore.layers import ConnectionSettings, build, connect, open_database, sqlite
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


# -- runstore ----------------------------------------------------------------------------------


class Timings(NamedTuple):
    """Seconds for the appends, for reading everything back, and for as many newest-page
    reads as reading everything takes pages."""

    append: float
    read_back: float
    newest_pages: float


def runstore_round(folder: Path, messages: int, page: int, synchronous: str) -> Timings:
    """Time the services."""
    settings = ConnectionSettings(synchronous=synchronous)
    with build(sqlite(folder / f"runstore-{synchronous}.db", settings)) as container:
        agents: AgentStorage = container.get(AgentStorage)
        agents.threads.create("bench", project_id="p").unwrap()
        items = [_item(i) for i in range(messages)]
        started = time.perf_counter()
        for item in items:
            agents.messages.append("bench", role=item["role"], content=item).unwrap()
        appended = time.perf_counter() - started

        def read_all() -> int:
            after, read = 0, 0
            while True:
                got = agents.messages.list("bench", after_seq=after, limit=page).unwrap()
                read += len(got.items)
                if not got.has_more:
                    return read
                after = got.items[-1].seq

        pages = -(-messages // page)

        def newest() -> int:
            return sum(
                len(agents.messages.list("bench", limit=page).unwrap().items) for _ in range(pages)
            )

        return Timings(
            appended,
            _best_of(READ_PASSES, read_all, messages),
            _best_of(READ_PASSES, newest, pages * page),
        )


# -- raw apsw ------------------------------------------------------------------------------------

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
_BODY = "INSERT INTO agent_message_bodies (thread_key, seq, content) VALUES (?, ?, ?)"
READ_PASSES = 5
"""Reading changes nothing, so each round reads everything this many times; the best counts."""


def _best_of(passes: int, read_all: Callable[[], int], expected: int) -> float:
    best = float("inf")
    for _ in range(passes):
        started = time.perf_counter()
        read = read_all()
        best = min(best, time.perf_counter() - started)
        assert read == expected, read
    return best


def raw_round(folder: Path, messages: int, page: int) -> Timings:
    """Time the same statements on bare apsw."""
    import json

    path = folder / "raw.db"
    open_database(path).unwrap().close()  # the same schema, migrated
    connection = connect(path).unwrap()
    connection.execute(
        "INSERT INTO agent_threads (id, project_id, title, metadata, status, created_at_ms,"
        " updated_at_ms) VALUES ('bench', 'p', '', '{}', 'open', 0, 0)"
    )
    items = [_item(i) for i in range(messages)]
    now = int(time.time() * 1000)
    started = time.perf_counter()
    for item in items:
        connection.execute("BEGIN IMMEDIATE")
        key, seq = connection.execute(_BUMP, (now, now, "bench")).fetchall()[0]
        connection.execute(_HEADER, (key, seq, item["role"], now))
        connection.execute(_BODY, (key, seq, json.dumps(item, ensure_ascii=False)))
        connection.execute("COMMIT")
    appended = time.perf_counter() - started

    def read_all() -> int:
        after, read = 0, 0
        while True:
            query = check_list_query(after, None, None, page).unwrap()
            sql, params = page_query("bench", query)
            rows: list[Any] = connection.execute(sql, params).fetchall()
            read += len([json.loads(row[10]) for row in rows])
            if rows[0][11] is None:
                return read
            after = rows[-1][0]

    pages = -(-messages // page)
    newest_sql, newest_params = page_query(
        "bench", check_list_query(None, None, None, page).unwrap()
    )

    def newest() -> int:
        read = 0
        for _ in range(pages):
            rows: list[Any] = connection.execute(newest_sql, newest_params).fetchall()
            read += len([json.loads(row[10]) for row in rows])
        return read

    timings = Timings(
        appended,
        _best_of(READ_PASSES, read_all, messages),
        _best_of(READ_PASSES, newest, pages * page),
    )
    connection.close()
    return timings


# -- the OpenAI Agents SDK -----------------------------------------------------------------------


def _sdk_session_class() -> Any | None:
    try:
        module = importlib.import_module("agents")
    except ImportError:
        return None
    return getattr(module, "SQLiteSession", None)


def sdk_round(session_class: Any, folder: Path, messages: int, page: int) -> Timings:
    """Time ``SQLiteSession`` (async API): reading everything back is one ``get_items()``."""

    async def work() -> Timings:
        session = session_class("bench", folder / "sdk.db")
        items = [_item(i) for i in range(messages)]
        started = time.perf_counter()
        for item in items:
            await session.add_items([item])
        appended = time.perf_counter() - started
        pages = -(-messages // page)
        newest = read_back = float("inf")
        for _ in range(READ_PASSES):
            started = time.perf_counter()
            read = 0
            for _ in range(pages):
                read += len(await session.get_items(limit=page))
            newest = min(newest, time.perf_counter() - started)
            assert read == pages * page
            started = time.perf_counter()
            everything = await session.get_items()
            read_back = min(read_back, time.perf_counter() - started)
            assert len(everything) == messages
        session.close()
        return Timings(appended, read_back, newest)

    return asyncio.run(work())


# -- a page at the end of a long thread ----------------------------------------------------------


def tail_page_seconds(folder: Path, size: int, page: int, repeats: int) -> float:
    """Median seconds to read the newest ``page`` messages of a ``size``-message thread."""
    with build(sqlite(Path(tempfile.mkdtemp(dir=folder)) / "tail.db")) as container:
        agents: AgentStorage = container.get(AgentStorage)
        agents.threads.create("long", project_id="p").unwrap()
        batch = 1_000
        for start in range(0, size, batch):
            count = min(batch, size - start)
            drafts = [NewMessage(role="user", content=_item(start + i)) for i in range(count)]
            agents.messages.append_many("long", drafts).unwrap()
        samples: list[float] = []
        for _ in range(repeats):
            started = time.perf_counter()
            got = agents.messages.list("long", limit=page).unwrap()
            forward = agents.messages.list("long", after_seq=size - page, limit=page).unwrap()
            samples.append(time.perf_counter() - started)
            assert got.items[-1].seq == size
            assert forward.items == got.items
        return statistics.median(samples)


def _best(rounds: list[Timings]) -> Timings:
    return Timings(*(min(values) for values in zip(*rounds, strict=True)))


def _line(name: str, t: Timings, messages: int) -> None:
    print(
        f"  {name:<31} append {t.append:7.3f} s ({messages / t.append:7,.0f} msg/s)"
        f"  read back {t.read_back * 1000:7.1f} ms  newest pages {t.newest_pages * 1000:7.1f} ms"
    )


def _ratios(name: str, ours: Timings, theirs: Timings, note: str = "") -> None:
    print(
        f"  {name:<31} append {ours.append / theirs.append:5.2f}x"
        f"  read back {ours.read_back / theirs.read_back:5.2f}x"
        f"  newest pages {ours.newest_pages / theirs.newest_pages:5.2f}x{note}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--page", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tail-messages", type=int, default=100_000)
    parser.add_argument("--tail-repeats", type=int, default=300)
    args = parser.parse_args(argv)
    messages, page = args.messages, args.page

    session_class = _sdk_session_class()
    normal, full, raw, sdk = (
        "runstore (synchronous=NORMAL)",
        "runstore (synchronous=FULL)",
        "raw apsw (same SQL, NORMAL)",
        "openai-agents SQLiteSession",
    )
    steps: dict[str, Callable[[Path], Timings]] = {
        normal: lambda f: runstore_round(f, messages, page, "NORMAL"),
        full: lambda f: runstore_round(f, messages, page, "FULL"),
        raw: lambda f: raw_round(f, messages, page),
    }
    if session_class is not None:
        steps[sdk] = lambda f: sdk_round(session_class, f, messages, page)
    runs: dict[str, list[Timings]] = {name: [] for name in steps}

    pages = -(-messages // page)
    print(
        f"{messages:,} appends (one call each), then: read back (runstore and raw: {pages}"
        f" forward pages of {page}; the SDK: get_items(), its one way to read a whole"
        f" session), and {pages} reads of the newest {page} (the SDK: get_items(limit={page}))."
    )
    for round_ in range(args.rounds):
        order = list(steps) if round_ % 2 == 0 else list(reversed(steps))
        for name in order:
            with tempfile.TemporaryDirectory() as folder:
                runs[name].append(steps[name](Path(folder)))
    best = {name: _best(results) for name, results in runs.items()}
    for name, timings in best.items():
        _line(name, timings, messages)

    print("ratios (runstore / other; lower is better for runstore):")
    _ratios("runstore / raw apsw", best[normal], best[raw])
    if session_class is None:
        print(
            "  runstore / SDK: skipped, the 'openai-agents' package is not installed"
            " (pip install openai-agents to compare with its SQLiteSession)"
        )
    else:
        _ratios("runstore / SDK", best[normal], best[sdk], "  (target <= 1.00)")
        _ratios("runstore FULL / SDK (same fsync)", best[full], best[sdk])

    with tempfile.TemporaryDirectory() as folder:
        small = tail_page_seconds(Path(folder), 1_000, page, args.tail_repeats)
        large = tail_page_seconds(Path(folder), args.tail_messages, page, args.tail_repeats)
    print(
        f"newest {page} + the same page forward, median of {args.tail_repeats}:"
        f" 1,000-message thread {small * 1e6:7.0f} us,"
        f" {args.tail_messages:,}-message thread {large * 1e6:7.0f} us,"
        f" ratio {large / small:4.2f}x (target <= 1.50)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
