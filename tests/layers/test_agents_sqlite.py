"""What only the live agent layer can show: query plans, the schema, deletion table by table,
injected faults and several processes on one file."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest
from returns.result import Failure, Success

from runstore.layers import Container, build, sqlite
from runstore.layers._agents_sqlite import page_query, run_page_query, thread_page_query
from runstore.layers._sqlite_database import SqliteDatabase
from runstore.services import FixedClock
from runstore.services._agents_rules import (
    check_list_query,
    check_run_listing,
    check_thread_listing,
)
from runstore.services.agents import (
    ActiveRunExists,
    AgentRunStatus,
    AgentStorage,
    NewMessage,
)
from runstore.services.errors import StorageFailure, StorageFailureKind

AGENT_TABLES = {
    "agent_counters",
    "agent_threads",
    "agent_runs",
    "agent_messages",
    "agent_message_bodies",
    "agent_checkpoints",
}


@pytest.fixture
def container(tmp_path: Path) -> Iterator[Container]:
    with build(sqlite(tmp_path / "agents.db")) as built:
        yield built


@pytest.fixture
def db(container: Container) -> SqliteDatabase:
    database: SqliteDatabase = container.get(SqliteDatabase)
    return database


@pytest.fixture
def agents(container: Container) -> AgentStorage:
    storage: AgentStorage = container.get(AgentStorage)
    storage.threads.create("t", project_id="p").unwrap()
    return storage


def _thread_row(db: SqliteDatabase, thread_id: str = "t") -> tuple[Any, ...] | None:
    return db.one(
        "SELECT head_seq, message_count, last_message_at_ms, updated_at_ms, checkpoint_count"
        " FROM agent_threads WHERE id = ?",
        (thread_id,),
    )


def _row_counts(db: SqliteDatabase) -> dict[str, int]:
    return {table: db.scalar(f"SELECT count(*) FROM {table}") for table in sorted(AGENT_TABLES)}


LEASE = 60_000
"""The lease these tests grant (ms)."""


# -- schema and plans ------------------------------------------------------------------------


def test_schema_is_strict_and_every_foreign_key_column_is_indexed(db: SqliteDatabase) -> None:
    tables: dict[str, str] = dict(
        db.execute(
            "SELECT name, sql FROM sqlite_schema WHERE type = 'table' AND name LIKE 'agent%'"
        )
    )
    assert set(tables) == AGENT_TABLES
    for name, sql in tables.items():
        assert "STRICT" in sql, name
        for fk in db.execute(f"PRAGMA foreign_key_list({name})"):
            if fk[1] != 0:
                continue  # only the leading column of a composite key needs the index
            column = fk[3]
            leading = {
                db.execute(f"PRAGMA index_info({index[1]})")[0][2]
                for index in db.execute(f"PRAGMA index_list({name})")
            }
            primary = [row[1] for row in db.execute(f"PRAGMA table_info({name})") if row[5] == 1]
            assert column in leading or column in primary[:1], f"{name}.{column} has no index"


@pytest.mark.parametrize(
    ("after", "before", "roles"),
    [(None, None, None), (0, None, None), (40, None, None), (None, 90, ["user", "tool"])],
)
def test_hot_list_queries_read_only_headers_through_the_clustered_key(
    db: SqliteDatabase,
    agents: AgentStorage,
    after: int | None,
    before: int | None,
    roles: list[str] | None,
) -> None:
    agents.messages.append_many("t", [NewMessage(role="user", content=i) for i in range(100)])
    query = check_list_query(after, before, roles, 50).unwrap()
    sql, params = page_query("t", query)
    plan = {row[0]: (row[1], row[3]) for row in db.execute("EXPLAIN QUERY PLAN " + sql, params)}
    details = [detail for _, detail in plan.values()]
    assert not [d for d in details if d.startswith("SCAN") or "TEMP B-TREE" in d], details
    top = [detail for parent, detail in plan.values() if parent == 0]
    assert top[0].startswith("SEARCH m USING PRIMARY KEY (thread_key=?"), details
    assert "SEARCH r USING INTEGER PRIMARY KEY (rowid=?) LEFT-JOIN" in top
    # Bodies (content, metadata) are read only by the correlated subqueries of each returned
    # row, by key.
    body_reads = [
        (node, d) for node, (_, d) in plan.items() if " b " in f" {d} " or "bodies" in d
    ]
    assert [d for _, d in body_reads] == ["SEARCH b USING INTEGER PRIMARY KEY (rowid=?)"] * 2
    for node, _ in body_reads:
        assert plan[plan[node][0]][1].startswith("CORRELATED SCALAR SUBQUERY")
    assert "content" not in sql.replace("b.content", "")


@pytest.mark.parametrize(
    "filters",
    [
        {},
        {"agent_id": "a"},
        {"owner_id": "o"},
        {"status": "open"},
        {"agent_id": "a", "owner_id": "o"},
    ],
)
def test_listing_threads_and_runs_seeks_an_index(
    db: SqliteDatabase, agents: AgentStorage, filters: dict[str, Any]
) -> None:
    agent, status, owner = (filters.get(key) for key in ("agent_id", "status", "owner_id"))
    query = check_thread_listing("p", agent, status, owner, 50, None).unwrap()
    sql, params = thread_page_query(query)
    details = [row[3] for row in db.execute("EXPLAIN QUERY PLAN " + sql, params)]
    assert not [d for d in details if d.startswith("SCAN") or "TEMP B-TREE" in d], details
    assert any("agent_threads_" in d for d in details), details
    runs = check_run_listing("t", filters.get("status") and "running", 50, None).unwrap()
    sql, params = run_page_query(1, runs)
    details = [row[3] for row in db.execute("EXPLAIN QUERY PLAN " + sql, params)]
    assert not [d for d in details if d.startswith("SCAN") or "TEMP B-TREE" in d], details
    assert any("agent_runs_thread" in d for d in details), details


def test_listing_never_reads_a_body_it_does_not_return(
    db: SqliteDatabase, agents: AgentStorage
) -> None:
    roles = ["user", "assistant", "tool"]
    agents.messages.append_many(
        "t", [NewMessage(role=roles[i % 3], content={"i": i}) for i in range(60)]
    )
    page = agents.messages.list("t", after_seq=10, roles=["tool"], limit=5).unwrap()
    returned = [m.seq for m in page.items]
    assert returned == [12, 15, 18, 21, 24]
    # Poison every other body: a read of any of them would fail to decode.
    marks = ", ".join("?" * len(returned))
    db.execute(
        f"UPDATE agent_message_bodies SET content = 'not json'"
        f" WHERE (id & 4294967295) NOT IN ({marks})",
        returned,
    )
    assert agents.messages.list("t", after_seq=10, roles=["tool"], limit=5).unwrap() == page
    newest = agents.messages.list("t", roles=["tool"], before_seq=25, limit=5).unwrap()
    assert newest.items == page.items


# -- deletion --------------------------------------------------------------------------------


def test_deleting_a_thread_removes_its_rows_from_every_table(
    db: SqliteDatabase, agents: AgentStorage
) -> None:
    for thread in ("t", "keep"):
        if thread == "keep":
            agents.threads.create(thread, project_id="p").unwrap()
        run = agents.runs.start(f"{thread}-run", thread_id=thread, owner="w", lease_ms=LEASE)
        token = run.unwrap().fencing_token
        agents.messages.append_many(
            thread,
            [
                NewMessage(role="user", content=i, run_id=f"{thread}-run", fencing_token=token)
                for i in range(5)
            ],
        ).unwrap()
        agents.checkpoints.create(
            f"{thread}-cp",
            thread_id=thread,
            run_id=f"{thread}-run",
            fencing_token=token,
            summary="s",
            through_seq=3,
            observed_head_seq=5,
            expected_latest_id=None,
        ).unwrap()
    keys: dict[str, int] = dict(db.execute("SELECT id, key FROM agent_threads"))
    before = _row_counts(db)
    assert agents.threads.delete("t") == Success(None)
    tables = [
        name
        for (name,) in db.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name LIKE 'agent%'"
        )
    ]
    assert set(tables) == AGENT_TABLES, "a new agent table must be added to this test"
    owner = {"agent_threads": "key", "agent_message_bodies": "id >> 32"}
    for table in set(tables) - {"agent_counters"}:  # the counters belong to no thread
        column = owner.get(table, "thread_key")
        assert db.scalar(f"SELECT count(*) FROM {table} WHERE {column} = ?", (keys["t"],)) == 0
        kept = db.scalar(f"SELECT count(*) FROM {table} WHERE {column} = ?", (keys["keep"],))
        assert kept * 2 == before[table], table
    assert db.execute("PRAGMA foreign_key_check") == []
    orphans = db.scalar(
        "SELECT count(*) FROM agent_message_bodies b WHERE NOT EXISTS (SELECT 1 FROM"
        " agent_messages m WHERE m.thread_key = b.id >> 32 AND m.seq = (b.id & 4294967295))"
    )
    assert orphans == 0


def test_deleting_by_run_deletes_the_bodies_too(db: SqliteDatabase, agents: AgentStorage) -> None:
    token = agents.runs.start("r", thread_id="t", owner="w", lease_ms=LEASE).unwrap().fencing_token
    agents.messages.append_many(
        "t",
        [
            NewMessage(role="tool", content="x" * 5000, run_id="r", fencing_token=token)
            for _ in range(20)
        ],
    ).unwrap()
    agents.messages.append("t", role="user", content="kept").unwrap()
    assert agents.messages.delete_by_run("t", "r") == Success(20)
    assert db.scalar("SELECT count(*) FROM agent_message_bodies") == 1
    assert db.scalar("SELECT id & 4294967295 FROM agent_message_bodies") == 21


# -- faults ----------------------------------------------------------------------------------


def test_a_statement_failing_mid_append_changes_nothing(
    db: SqliteDatabase, agents: AgentStorage
) -> None:
    agents.messages.append("t", role="user", content="first").unwrap()
    thread_before, rows_before = _thread_row(db), _row_counts(db)
    db.execute(
        "CREATE TEMP TRIGGER fail_body BEFORE INSERT ON agent_message_bodies"
        " BEGIN SELECT RAISE(ABORT, 'injected'); END"
    )
    failed = agents.messages.append("t", role="user", content="second")
    assert isinstance(failed, Failure)
    assert isinstance(failed.failure(), StorageFailure)
    assert _thread_row(db) == thread_before
    assert _row_counts(db) == rows_before
    assert db.depth == 0
    batch = agents.messages.append_many("t", [NewMessage(role="user", content=i) for i in range(3)])
    assert isinstance(batch, Failure)
    assert _thread_row(db) == thread_before
    db.execute("DROP TRIGGER fail_body")
    assert agents.messages.append("t", role="user", content="third").unwrap().seq == 2


def test_a_full_database_mid_append_changes_nothing(
    db: SqliteDatabase, agents: AgentStorage
) -> None:
    agents.messages.append("t", role="user", content="first").unwrap()
    thread_before, rows_before = _thread_row(db), _row_counts(db)
    pages = db.scalar("PRAGMA page_count")
    db.execute(f"PRAGMA max_page_count = {pages + 2}")
    failed = agents.messages.append("t", role="tool", content="x" * 1_000_000)
    assert isinstance(failed, Failure)
    error = failed.failure()
    assert isinstance(error, StorageFailure)
    assert error.kind is StorageFailureKind.FULL
    assert _thread_row(db) == thread_before
    assert _row_counts(db) == rows_before
    db.execute("PRAGMA max_page_count = 1073741823")
    assert agents.messages.append("t", role="tool", content="x" * 1_000_000).unwrap().seq == 2


def test_a_host_unit_that_fails_after_an_append_undoes_it(
    db: SqliteDatabase, agents: AgentStorage
) -> None:
    before = _thread_row(db)

    def host_unit() -> Failure[str]:
        agents.messages.append("t", role="user", content="inside").unwrap()
        agents.runs.start("r", thread_id="t", owner="w", lease_ms=LEASE).unwrap()
        return Failure("host gave up")

    assert db.transact("host", host_unit) == Failure("host gave up")
    assert _thread_row(db) == before
    assert agents.threads.get("t").unwrap().active_run_id is None
    assert agents.messages.append("t", role="user", content="after").unwrap().seq == 1


def test_in_memory_layer_undoes_every_mirror_when_an_append_raises() -> None:
    from runstore.layers import CLOCK, in_memory, merge
    from runstore.layers._layer import Layer

    clock = FixedClock()
    with build(merge(in_memory(), Layer.value(CLOCK, clock))) as built:
        agents: AgentStorage = built.get(AgentStorage)
        agents.threads.create("t", project_id="p").unwrap()
        agents.messages.append("t", role="user", content="first").unwrap()
        state = agents.messages._s  # type: ignore[attr-defined]
        before = agents.threads.get("t")

        class Exploding(dict[Any, Any]):
            def __setitem__(self, key: Any, value: Any) -> None:
                raise RuntimeError("injected")

            def get(self, key: Any, default: Any = None) -> Any:
                return state_messages.get(key, default)

        state_messages = state.messages
        state.messages = Exploding()
        clock.advance(5)
        with pytest.raises(RuntimeError, match="injected"):
            agents.messages.append("t", role="user", content="second")
        state.messages = state_messages
        assert agents.threads.get("t") == before
        assert agents.messages.append("t", role="user", content="third").unwrap().seq == 2


# -- several processes -----------------------------------------------------------------------

PROCESSES = 4
APPENDS = 250


def append_worker(path: str, worker: int, count: int) -> list[int]:
    """Append ``count`` messages to thread ``shared`` through a container of its own."""
    seqs: list[int] = []
    with build(sqlite(path)) as container:
        agents: AgentStorage = container.get(AgentStorage)
        for index in range(count):
            stored = agents.messages.append(
                "shared", role="user", content={"worker": worker, "index": index}
            )
            if isinstance(stored, Failure):
                raise AssertionError(f"worker {worker}: {stored.failure()}")
            seqs.append(stored.unwrap().seq)
    return seqs


def start_worker(path: str, run_id: str, start_at: float) -> str:
    """Try to start ``run_id`` on thread ``shared`` at ``start_at`` (epoch s); say how it went."""
    with build(sqlite(path)) as container:
        agents: AgentStorage = container.get(AgentStorage)
        time.sleep(max(0.0, start_at - time.time()))
        result = agents.runs.start(run_id, thread_id="shared", owner=run_id, lease_ms=LEASE)
    if isinstance(result, Success):
        return "started"
    error = result.failure()
    assert isinstance(error, ActiveRunExists), error
    return f"refused:{error.active_run_id}"


def test_processes_appending_to_one_thread_get_dense_unique_sequence_numbers(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "shared.db")
    with build(sqlite(path)) as container:
        container.get(AgentStorage).threads.create("shared", project_id="p").unwrap()
    context = multiprocessing.get_context("spawn")
    with context.Pool(PROCESSES) as pool:
        results = pool.starmap(append_worker, [(path, w, APPENDS) for w in range(PROCESSES)])
    every = sorted(seq for seqs in results for seq in seqs)
    assert every == list(range(1, PROCESSES * APPENDS + 1))
    for seqs in results:
        assert seqs == sorted(seqs), "each process sees its own appends in order"
    with build(sqlite(path)) as container:
        agents: AgentStorage = container.get(AgentStorage)
        thread = agents.threads.get("shared").unwrap()
        assert (thread.head_seq, thread.message_count) == (1000, 1000)
        db: SqliteDatabase = container.get(SqliteDatabase)
        assert db.scalar("SELECT count(*) FROM agent_message_bodies") == 1000
        stored: list[int] = []
        after = 0
        while True:
            page = agents.messages.list("shared", after_seq=after, limit=1000).unwrap()
            stored.extend(m.seq for m in page.items)
            for message in page.items:
                content = message.content
                assert isinstance(content, dict)
                assert results[int(str(content["worker"]))][int(str(content["index"]))] == (
                    message.seq
                )
            if not page.has_more:
                break
            after = page.items[-1].seq
        assert stored == list(range(1, 1001))
        last = agents.messages.get("shared", 1000).unwrap()
        assert thread.last_message_at_ms == last.created_at_ms


def test_single_flight_holds_across_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "flight.db")
    with build(sqlite(path)) as container:
        container.get(AgentStorage).threads.create("shared", project_id="p").unwrap()
    context = multiprocessing.get_context("spawn")
    with context.Pool(PROCESSES) as pool:
        for round_ in range(3):
            start_at = time.time() + (1.0 if round_ == 0 else 0.3)
            outcomes = pool.starmap(
                start_worker, [(path, f"run-{round_}-{w}", start_at) for w in range(PROCESSES)]
            )
            winners = [w for w, outcome in enumerate(outcomes) if outcome == "started"]
            assert len(winners) == 1, outcomes
            winner = f"run-{round_}-{winners[0]}"
            assert sorted(outcomes) == sorted(["started"] + [f"refused:{winner}"] * (PROCESSES - 1))
            with build(sqlite(path)) as container:
                agents: AgentStorage = container.get(AgentStorage)
                assert agents.threads.get("shared").unwrap().active_run_id == winner
                token = agents.runs.get(winner).unwrap().fencing_token
                agents.runs.finish(
                    winner, fencing_token=token, status=AgentRunStatus.SUCCEEDED
                ).unwrap()


def test_the_stored_json_is_plain_text(db: SqliteDatabase, agents: AgentStorage) -> None:
    """Other tools can read the bodies with SQLite's own JSON functions."""
    agents.messages.append("t", role="user", content={"text": "שלום 😀", "n": [1, 2.5]})
    content = db.scalar("SELECT content FROM agent_message_bodies")
    assert json.loads(content) == {"text": "שלום 😀", "n": [1, 2.5]}
    assert db.scalar("SELECT json_extract(content, '$.text') FROM agent_message_bodies") == (
        "שלום 😀"
    )


def lease_worker(path: str, action: str, token: int, start_at: float) -> tuple[str, int]:
    """Do ``action`` on run ``r`` of thread ``shared`` from a process of its own at
    ``start_at`` (epoch s); return the outcome's type name and the run's token after it."""
    with build(sqlite(path)) as container:
        agents: AgentStorage = container.get(AgentStorage)
        time.sleep(max(0.0, start_at - time.time()))
        if action == "start":
            result: Any = agents.runs.start("r", thread_id="shared", owner="a", lease_ms=200)
        elif action == "reclaim":
            result = agents.runs.reclaim("r", owner=f"b{os.getpid()}", lease_ms=LEASE)
        elif action == "append":
            result = agents.messages.append(
                "shared", role="assistant", content=action, run_id="r", fencing_token=token
            )
        else:
            result = agents.runs.finish(
                "r", fencing_token=token, status=AgentRunStatus.SUCCEEDED
            )
        kind = "Success" if isinstance(result, Success) else type(result.failure()).__name__
        return kind, agents.runs.get("r").unwrap().fencing_token


def test_a_stale_worker_is_refused_across_processes(tmp_path: Path) -> None:
    """Worker ``a`` starts a run and stalls past its lease; of the processes that race to
    reclaim it exactly one wins; ``a``'s later append and finish are refused and write
    nothing; the winner's go through."""
    path = str(tmp_path / "lease.db")
    with build(sqlite(path)) as container:
        container.get(AgentStorage).threads.create("shared", project_id="p").unwrap()
    context = multiprocessing.get_context("spawn")
    with context.Pool(PROCESSES) as pool:
        started, old = pool.apply(lease_worker, (path, "start", 0, 0.0))
        assert started == "Success"
        at = time.time() + 1.0  # past the 200 ms lease, with every process ready
        raced = pool.starmap(lease_worker, [(path, "reclaim", 0, at)] * PROCESSES)
        assert sorted(kind for kind, _ in raced) == ["Conflict"] * (PROCESSES - 1) + ["Success"]
        (new,) = {token for _, token in raced}
        assert new > old
        assert pool.apply(lease_worker, (path, "append", old, 0.0)) == ("StaleFencingToken", new)
        assert pool.apply(lease_worker, (path, "finish", old, 0.0)) == ("StaleFencingToken", new)
        assert pool.apply(lease_worker, (path, "append", new, 0.0)) == ("Success", new)
        assert pool.apply(lease_worker, (path, "finish", new, 0.0)) == ("Success", new)
    with build(sqlite(path)) as container:
        agents: AgentStorage = container.get(AgentStorage)
        thread = agents.threads.get("shared").unwrap()
        assert (thread.head_seq, thread.active_run_id) == (1, None)
        run = agents.runs.get("r").unwrap()
        assert (run.status, run.attempts, run.fencing_token) == ("succeeded", 2, new)
        assert str(run.owner).startswith("b")


def test_a_message_body_that_is_not_json_is_a_typed_corrupt_failure(tmp_path: Path) -> None:
    """A body damaged behind runstore's back (raw apsw, as another program or a bad disk
    would) makes every read of it a ``StorageFailure(kind=corrupt)``, not a ValueError, and
    a pop of it writes nothing."""
    path = tmp_path / "damaged.db"
    with build(sqlite(path)) as built:
        agents = built.get(AgentStorage)
        agents.threads.create("t", project_id="p").unwrap()
        agents.messages.append("t", role="user", content={"ok": 1}).unwrap()
        agents.messages.append("t", role="user", content="fine", client_id="m2").unwrap()
    raw = apsw.Connection(str(path))
    raw.execute(
        "UPDATE agent_message_bodies SET content = 'not valid json {{{' WHERE id & 4294967295 = 2"
    )
    raw.close()
    with build(sqlite(path)) as built:
        agents = built.get(AgentStorage)
        db = built.get(SqliteDatabase)
        for operation, call in (
            ("get message", lambda: agents.messages.get("t", 2)),
            ("list messages", lambda: agents.messages.list("t")),
            ("pop message", lambda: agents.messages.pop("t")),
            ("append messages",
             lambda: agents.messages.append("t", role="user", content="fine", client_id="m2")),
        ):
            result = call()
            assert isinstance(result, Failure), operation
            failure = result.failure()
            assert isinstance(failure, StorageFailure)
            assert (failure.operation, failure.kind, failure.table) == (
                operation, StorageFailureKind.CORRUPT, "agent_message_bodies"
            )
        assert agents.messages.get("t", 1).unwrap().content == {"ok": 1}
        assert _thread_row(db)[:2] == (2, 2), "the failed pop wrote nothing"  # type: ignore[index]
        assert agents.messages.clear("t") == Success(2), "clear reads no body"
