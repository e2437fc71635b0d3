"""The latest-checkpoint read and the reads of what it returns go through indexes:
``EXPLAIN QUERY PLAN`` of every statement ``get`` runs shows no ``SCAN`` of a graph table and
no sort of its own (the unique index is walked backwards), with and without ``ANALYZE``;
so do the collection of unnamed values after a prune and ``delete_for_runs``, and the reads
and deletes of pending writes, which find them by thread, namespace and checkpoint id (the
primary key's first columns: writes name their checkpoint, not its row)."""

from __future__ import annotations

from typing import Any

import pytest

from runstore.layers import GRAPH_CHECKPOINTS, SqliteDatabase, build, sqlite
from runstore.services.graphs import ChannelBlob, ChannelValue, GraphWrite, NewGraphCheckpoint


def _plans(db: SqliteDatabase, call: Any) -> list[str]:
    statements: list[tuple[str, Any]] = []

    def trace(_cursor: Any, sql: str, bindings: Any) -> bool:
        statements.append((sql, bindings))
        return True

    db.connection.exec_trace = trace
    try:
        call()
    finally:
        db.connection.exec_trace = None
    plans = []
    for sql, bindings in statements:
        if sql.lstrip().upper().startswith(("SELECT", "DELETE")):
            rows = db.execute(f"EXPLAIN QUERY PLAN {sql}", bindings or ())
            plans.append(" / ".join(str(r[-1]) for r in rows))
    return plans


@pytest.mark.parametrize("analyzed", [False, True], ids=["as shipped", "analyzed"])
def test_the_latest_checkpoint_is_read_by_index(analyzed: bool) -> None:
    with build(sqlite(":memory:")) as container:
        graphs, db = container.get(GRAPH_CHECKPOINTS), container.get(SqliteDatabase)
        value = ChannelValue("msgpack", b"v")
        for thread in ("a", "b", "c"):
            for n in range(60):
                checkpoint = NewGraphCheckpoint(
                    f"{n:04}", None, 2, "", value, {"run_id": f"r{thread}{n // 2}"},
                    {"x": n, "y": 1}, [ChannelBlob("x", n, value), ChannelBlob("y", 1, value)],
                )
                for ns in ("", "child:1"):
                    graphs.put(thread, checkpoint, project_id="p", checkpoint_ns=ns).unwrap()
                    write = [GraphWrite(0, "x", value)]
                    cid = checkpoint.checkpoint_id
                    graphs.put_writes(
                        thread, write, checkpoint_id=cid, task_id="k", checkpoint_ns=ns
                    ).unwrap()
        if analyzed:
            db.execute("ANALYZE")
        plans = _plans(db, lambda: graphs.get("b").unwrap())
        plans += _plans(db, lambda: graphs.prune(["a"]).unwrap())
        plans += _plans(db, lambda: graphs.delete_for_runs(["rb1", "rc7"]).unwrap())
        joined = "\n".join(plans)
        assert "graph_checkpoints_run" in joined, joined
        writes = [plan for plan in plans if "graph_writes" in plan or "SEARCH w " in plan]
        assert len(writes) == 3, joined  # get's read, then the deletes of prune and of runs
        key = "graph_writes_1 (thread_key=? AND checkpoint_ns=? AND checkpoint_id=?)"
        assert all(key in plan for plan in writes), writes
        for plan in plans:  # a table (or its alias) is only ever searched
            scans = [step for step in plan.split(" / ") if step.startswith("SCAN ")]
            assert all(step.startswith("SCAN json_each") for step in scans), plan
        latest = plans[1]  # after the thread's own lookup
        assert "USE TEMP B-TREE" not in latest, latest
        assert graphs.get("b").unwrap().checkpoint_id == "0059"  # type: ignore[union-attr]
