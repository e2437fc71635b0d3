"""Migration 0008 (fenced agent runs) on a database written with the schema before it.

The old rows are written with plain SQL as 0004 defined them: a thread with a finished run
that created a checkpoint, a run still running (its writer gone), and messages of both. After
the upgrade every row reads back, the foreign keys hold, the running run can be reclaimed and
finished, and new threads, runs and tokens continue after the old ones.
"""

from __future__ import annotations

from pathlib import Path

from returns.result import Failure, Success

from runstore.layers import Layer, SqliteDatabase, build, merge, sqlite
from runstore.migrations import apply_migrations, shipped_migrations
from runstore.services.agents import AgentRunStatus, AgentStorage
from runstore.services.clock import Clock, FixedClock
from runstore.services.ledger import StaleFencingToken

OLD_SCHEMA = max(m.id for m in shipped_migrations() if m.id < 8)

_OLD_ROWS = """
INSERT INTO agent_threads (id, project_id, title, metadata, status, head_seq, message_count,
    last_message_at_ms, checkpoint_count, created_at_ms, updated_at_ms)
VALUES ('t', 'p', 'old', '{"k": 1}', 'open', 3, 3, 30, 1, 1, 30);
INSERT INTO agent_runs (id, thread_key, status, started_at_ms, finished_at_ms)
VALUES ('done', 1, 'succeeded', 10, 20);
INSERT INTO agent_runs (id, thread_key, status, started_at_ms) VALUES ('stuck', 1, 'running', 25);
INSERT INTO agent_messages (thread_key, seq, role, run_key, input_tokens, output_tokens,
    cache_read_tokens, cache_write_tokens, created_at_ms)
VALUES (1, 1, 'user', NULL, 0, 0, 0, 0, 10), (1, 2, 'assistant', 1, 5, 6, 0, 0, 20),
       (1, 3, 'user', 2, 0, 0, 0, 0, 30);
INSERT INTO agent_message_bodies (id, content)
VALUES (4294967297, '"q"'), (4294967298, '"a"'), (4294967299, '"more"');
INSERT INTO agent_checkpoints (id, thread_key, number, run_key, summary, through_seq,
    observed_head_seq, created_at_ms)
VALUES ('c1', 1, 1, 1, 'so far', 1, 2, 20);
"""


def test_the_schema_before_is_older_than_0008() -> None:
    assert 4 <= OLD_SCHEMA < 8
    assert any(m.id == 8 and m.name == "agent_runs_fencing" for m in shipped_migrations())


def test_old_agent_rows_read_and_work_after_the_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = SqliteDatabase.open(path).unwrap()
    try:
        assert isinstance(apply_migrations(db, up_to=OLD_SCHEMA), Success)
        db.execute(_OLD_ROWS)
    finally:
        db.close()

    clock = FixedClock(1_000)
    with build(merge(sqlite(path), Layer.value(Clock, clock))) as c:
        db = c.get(SqliteDatabase)
        assert db.execute("PRAGMA foreign_key_check") == []
        assert db.scalar("PRAGMA integrity_check") == "ok"
        agents: AgentStorage = c.get(AgentStorage)
        thread = agents.threads.get("t").unwrap()
        assert (thread.seq, thread.agent_id, thread.active_run_id, thread.head_seq) == (
            1, None, "stuck", 3
        )
        done = agents.runs.get("done").unwrap()
        assert (done.seq, done.status, done.queued_at_ms, done.started_at_ms) == (
            1, AgentRunStatus.SUCCEEDED, 10, 10
        )
        stuck = agents.runs.get("stuck").unwrap()
        assert (stuck.fencing_token, stuck.lease_expires_at_ms, stuck.owner) == (0, 25, None)
        page = agents.messages.list("t", after_seq=0).unwrap()
        assert [(m.seq, m.content, m.run_id) for m in page.items] == [
            (1, "q", None), (2, "a", "done"), (3, "more", "stuck")
        ]
        assert agents.checkpoints.for_run("done").unwrap() == agents.checkpoints.latest(
            "t"
        ).unwrap()
        # The run left running by a writer that is gone: its slot is reclaimed, not held.
        taken = agents.runs.reclaim("stuck", owner="w", lease_ms=60_000).unwrap()
        assert (taken.fencing_token, taken.attempts) == (1, 2)
        assert agents.runs.finish(
            "stuck", fencing_token=0, status=AgentRunStatus.SUCCEEDED
        ) == Failure(StaleFencingToken("stuck", 0, 1, entity="agent run"))
        agents.runs.finish("stuck", fencing_token=1, status=AgentRunStatus.SUCCEEDED).unwrap()
        new = agents.threads.create("u", project_id="p").unwrap()
        run = agents.runs.start("next", thread_id="t", owner="w", lease_ms=60_000).unwrap()
        assert (new.seq, run.seq, run.fencing_token) == (2, 3, 2)
        assert [r.id for r in agents.runs.list("t").unwrap().items] == ["done", "stuck", "next"]
