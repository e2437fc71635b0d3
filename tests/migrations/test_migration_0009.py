"""Migration 0009 (session entries immutable, sessions listed by creation time) on a database
written with migrations 0001-0008.

The old rows are written with plain SQL as the 0005 schema held them (an ``anchor_id`` per
entry, no leaf entries); after the upgrade the sessions list by creation time, paths are
walked from the stored bodies (a retained tail written before the migration is honoured),
new leaf moves are entries, and neither entries nor bodies can be changed by SQL.
"""

from __future__ import annotations

import json
from pathlib import Path

import apsw
import pytest
from returns.result import Success

from runstore.layers import Layer, SqliteDatabase, build, merge, sqlite
from runstore.migrations import apply_migrations, shipped_migrations
from runstore.services import SessionRepository
from runstore.services.clock import Clock, FixedClock
from runstore.testing._sessions import T0_MS

OLD_SCHEMA = 8


def _old_session(db: SqliteDatabase, key: int, session_id: str, created_ms: int) -> None:
    db.execute(
        "INSERT INTO sessions (id, key, cwd, parent_session, metadata, created_ms, leaf_id,"
        " next_entry_seq) VALUES (?, ?, '/w', NULL, '{}', ?, NULL, 1)",
        (session_id, key, created_ms),
    )
    db.execute("INSERT INTO session_summaries (session_key) VALUES (?)", (key,))
    db.execute("UPDATE session_counters SET value = ? WHERE name = 'sessions'", (key,))


def _old_entry(
    db: SqliteDatabase,
    key: int,
    seq: int,
    entry_id: str,
    parent: str | None,
    entry_type: str,
    payload: dict[str, object],
    anchor: str | None,
) -> None:
    db.execute(
        "INSERT INTO session_entries (session_key, id, seq, parent_id, type, timestamp_ms,"
        " model_provider, model_id, thinking_level, anchor_id)"
        " VALUES (?, ?, ?, ?, ?, ?, NULL, NULL, 'off', ?)",
        (key, entry_id, seq, parent, entry_type, T0_MS, anchor),
    )
    db.execute(
        "INSERT INTO session_bodies (session_key, seq, entry_id, body) VALUES (?, ?, ?, ?)",
        (key, seq, entry_id, json.dumps(payload, separators=(",", ":"))),
    )
    db.execute(
        "UPDATE sessions SET next_entry_seq = ?, leaf_id = ? WHERE key = ?",
        (seq + 1, entry_id, key),
    )


def _user(text: str) -> dict[str, object]:
    return {"message": {"role": "user", "content": text}}


def test_the_schema_before_is_0008() -> None:
    assert [m.id for m in shipped_migrations() if m.id <= OLD_SCHEMA] == list(range(1, 9))
    assert any(m.id == 9 and m.name == "session_entries" for m in shipped_migrations())


def test_old_sessions_read_and_move_as_new_ones_after_the_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = SqliteDatabase.open(path).unwrap()
    try:
        assert isinstance(apply_migrations(db, up_to=OLD_SCHEMA), Success)
        # Stored first but created last, and the other way round: list() used to go by key.
        _old_session(db, 1, "later", T0_MS + 5_000)
        _old_session(db, 2, "earlier", T0_MS)
        tail = {
            "summary": "s",
            "tokensBefore": 9,
            "retainedTail": [{"role": "user", "content": "kept"}],
        }
        _old_entry(db, 1, 1, "a", None, "message", _user("a"), None)
        _old_entry(db, 1, 2, "b", "a", "message", _user("b"), None)
        # 0005 stored the compaction's firstKeptEntryId as the anchor; this one has a tail.
        _old_entry(db, 1, 3, "k", "b", "compaction", {**tail, "firstKeptEntryId": "a"}, "a")
        _old_entry(db, 1, 4, "c", "k", "message", _user("c"), "a")
    finally:
        db.close()

    clock = Layer.value(Clock, FixedClock(T0_MS + 60_000))
    with build(merge(sqlite(path), clock)) as container:
        repo: SessionRepository = container.get(SessionRepository)
        assert [r.id for r in repo.list().unwrap().items] == ["later", "earlier"]
        storage = repo.open("later").unwrap()
        walked = storage.path_to_root_or_compaction("c").unwrap()
        assert [e.id for e in walked] == ["k", "c"]  # the walk stops at the retained tail
        context = storage.build_context().unwrap()
        assert [(m.entry_id, m.role) for m in context.messages] == [
            ("k", "compactionSummary"),
            ("k", "user"),
            ("c", "user"),
        ]
        assert storage.set_leaf("a") == Success("a")
        assert storage.entries(after_seq=4).unwrap().items[0].type == "leaf"
        raw = container.get(SqliteDatabase)
        for statement in (
            "UPDATE session_entries SET type = 'custom' WHERE id = 'a'",
            "UPDATE session_bodies SET body = '{}' WHERE entry_id = 'a'",
        ):
            with pytest.raises(apsw.ConstraintError, match="session entries are immutable"):
                raw.execute(statement)
        assert repo.delete("later") == Success(5)  # deleting a whole session still cascades
        assert raw.scalar("SELECT count(*) FROM session_entries") == 0
