"""Migration 0018 (graph checkpoints) on a database written with migrations 0001-0017.

The old database gets its rows copied, table by table, from one the current code wrote
(agent threads with messages, a run and a context checkpoint). After the upgrade those rows
are unchanged, the graph store puts checkpoints on the old threads (the project must match),
takes writes for a checkpoint not put yet, and deleting an old thread deletes its graph rows
with it, those writes included.
"""

from __future__ import annotations

from pathlib import Path

from _old_schema import copy_into_old_sqlite  # beside this file
from returns.result import Failure

from runstore.layers import AGENT_STORAGE, GRAPH_CHECKPOINTS, SqliteDatabase, build, sqlite
from runstore.migrations import shipped_migrations
from runstore.services.errors import Conflict
from runstore.services.graphs import ChannelBlob, ChannelValue, GraphWrite, NewGraphCheckpoint

OLD_SCHEMA = 17


def _checkpoint(checkpoint_id: str) -> NewGraphCheckpoint:
    value = ChannelValue("msgpack", b"\x01")
    return NewGraphCheckpoint(
        checkpoint_id, None, 2, "", value, {"step": 1}, {"messages": 1},
        [ChannelBlob("messages", 1, value)],
    )


def test_the_schema_before_is_0017() -> None:
    assert max(m.id for m in shipped_migrations() if m.id <= OLD_SCHEMA) == OLD_SCHEMA
    assert any(m.id == 18 and m.name == "graph_checkpoints" for m in shipped_migrations())


def test_old_threads_take_graph_checkpoints_after_the_upgrade(tmp_path: Path) -> None:
    new, old = tmp_path / "new.db", tmp_path / "old.db"
    with build(sqlite(new)) as container:
        agents = container.get(AGENT_STORAGE)
        agents.threads.create("t", project_id="p", title="old").unwrap()
        agents.threads.create("u", project_id="q").unwrap()
        agents.messages.append("t", role="user", content="hello").unwrap()
        before = (agents.threads.get("t").unwrap(), agents.messages.list("t").unwrap())
    copy_into_old_sqlite(new, old, OLD_SCHEMA)
    with build(sqlite(old, access="read")) as container:
        tables = container.get(SqliteDatabase).execute(
            "SELECT name FROM sqlite_schema WHERE name LIKE 'graph%'"
        )
        assert tables == []

    with build(sqlite(old)) as container:
        agents, graphs = container.get(AGENT_STORAGE), container.get(GRAPH_CHECKPOINTS)
        assert (agents.threads.get("t").unwrap(), agents.messages.list("t").unwrap()) == before
        graphs.put("t", _checkpoint("1"), project_id="p").unwrap()
        refused = graphs.put("u", _checkpoint("1"), project_id="p")
        assert refused == Failure(
            Conflict("thread", "u", "thread belongs to another project", expected="p", actual="q")
        )
        got = graphs.get("t").unwrap()
        assert got is not None
        assert got.channel_values == {"messages": ChannelValue("msgpack", b"\x01")}
        write = [GraphWrite(0, "messages", ChannelValue("msgpack", b"\x02"))]
        for checkpoint_id in ("1", "2"):  # "2" is not put
            graphs.put_writes("t", write, checkpoint_id=checkpoint_id, task_id="k").unwrap()
        graphs.put("t", _checkpoint("2"), project_id="p").unwrap()
        assert len(graphs.get("t").unwrap().pending_writes) == 1  # type: ignore[union-attr]
        agents.threads.delete("t").unwrap()
        rows = container.get(SqliteDatabase).execute(
            "SELECT (SELECT count(*) FROM graph_checkpoints), (SELECT count(*) FROM graph_blobs),"
            " (SELECT count(*) FROM graph_channel_versions), (SELECT count(*) FROM graph_writes)"
        )
        assert rows == [(0, 0, 0, 0)]
