"""What only the live sessions layer has: its schema, its plans, faults, caches, reopening."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from returns.result import Failure, Success

from runstore.layers import (
    Container,
    SqliteDatabase,
    SqliteSessionRepository,
    build,
    in_memory,
    sqlite,
)
from runstore.layers._sessions_sqlite import _PATH_SQL
from runstore.services import (
    Clock,
    NewEntry,
    NewSession,
    NotFound,
    SessionRepository,
    StorageFailure,
)
from runstore.services.errors import StorageFailureKind

TABLES = (
    "session_counters",
    "sessions",
    "session_entries",
    "session_bodies",
    "session_summaries",
    "session_labels",
)


def _msg(entry_id: str, parent: str | None, role: str = "user", **extra: Any) -> NewEntry:
    return NewEntry.message(entry_id, parent, {"role": role, "content": "x", **extra}, timestamp=1)


def _assistant(entry_id: str, parent: str | None, tokens: int) -> NewEntry:
    usage = {"input": tokens, "output": 0, "cacheRead": 0, "cacheWrite": 0, "cost": {"total": 0.5}}
    return _msg(entry_id, parent, "assistant", provider="p", model="m", usage=usage)


@pytest.fixture
def container() -> Iterator[Container]:
    with build(sqlite(":memory:")) as built:
        yield built


def _repo(container: Container) -> SessionRepository:
    repo: SessionRepository = container.get(SessionRepository)
    return repo


def _db(container: Container) -> SqliteDatabase:
    return container.get(SqliteDatabase)


def _rows(db: SqliteDatabase) -> dict[str, list[tuple[Any, ...]]]:
    return {table: sorted(db.execute(f"SELECT * FROM {table}"), key=repr) for table in TABLES}


def _plan(db: SqliteDatabase, sql: str, params: Any = ()) -> str:
    return " | ".join(str(row[-1]) for row in db.execute(f"EXPLAIN QUERY PLAN {sql}", params))


# -- schema --------------------------------------------------------------------------------------


def test_small_hot_tables_are_without_rowid_and_bodies_are_not(container: Container) -> None:
    db = _db(container)
    sql: dict[str, str] = dict(
        db.execute("SELECT name, sql FROM sqlite_schema WHERE type = 'table'")
    )
    for table in (
        "session_counters",
        "sessions",
        "session_entries",
        "session_summaries",
        "session_labels",
    ):
        assert "WITHOUT ROWID" in sql[table], table
        assert "STRICT" in sql[table], table
    assert "WITHOUT ROWID" not in sql["session_bodies"]


def test_every_foreign_key_child_column_is_indexed(container: Container) -> None:
    db = _db(container)
    for table in TABLES:
        keys: dict[int, list[str]] = {}
        for row in db.execute(f"PRAGMA foreign_key_list({table})"):
            keys.setdefault(row[0], []).append(row[3])
        indexes = [
            ([col[2] for col in db.execute(f"PRAGMA index_info({index[1]})")], bool(index[2]))
            for index in db.execute(f"PRAGMA index_list({table})")
        ]
        for columns in keys.values():
            # An index led by the child columns, or a unique one on a prefix of them (which
            # finds the one candidate row directly).
            assert any(
                index[: len(columns)] == columns or (unique and columns[: len(index)] == index)
                for index, unique in indexes
            ), (table, columns)


def test_hot_queries_use_their_indexes(container: Container) -> None:
    db = _db(container)
    path = _plan(
        db,
        "SELECT e.id FROM session_entries AS e WHERE e.session_key = 1 AND e.id = 'x'",
    )
    assert "USING PRIMARY KEY" in path
    children = _plan(
        db, "SELECT id FROM session_entries WHERE session_key = 1 AND parent_id IS 'x' ORDER BY seq"
    )
    assert "session_entries_parent" in children
    assert "TEMP B-TREE" not in children
    for where, index in (
        ("AND s.cwd = '/w'", "sessions_cwd_created"),
        ("", "sessions_created"),
    ):
        listing = _plan(
            db,
            "SELECT s.id FROM sessions AS s JOIN session_summaries AS m ON m.session_key = s.key"
            f" WHERE (s.created_ms, s.key) < (5, 100) {where}"
            " ORDER BY s.created_ms DESC, s.key DESC LIMIT 51",
        )
        assert index in listing
        assert "TEMP B-TREE" not in listing
        assert "SCAN" not in listing.replace("SCAN m", "")  # the summary is looked up by key
    walk = _plan(db, _PATH_SQL, {"key": 1, "start": "x", "walk": 1, "all_bodies": 0})
    assert "SEARCH e USING PRIMARY KEY" in walk  # one primary-key step per ancestor
    assert "SEARCH b USING INDEX" in walk  # bodies by (session_key, seq), never scanned
    assert "SCAN b" not in walk
    page = _plan(
        db,
        "SELECT b.body FROM session_bodies AS b"
        " WHERE b.session_key = 1 AND b.seq > 5 AND b.seq <= 10",
    )
    assert "SEARCH b USING INDEX" in page


# -- faults change nothing -----------------------------------------------------------------------


def _seeded(repo: SessionRepository) -> None:
    repo.create(NewSession(id="s1", cwd="/w")).unwrap()
    storage = repo.open("s1").unwrap()
    storage.append_many([_msg("a", None), _assistant("b", "a", 10)]).unwrap()
    storage.append(NewEntry.label("l", "b", "a", "kept", timestamp=1)).unwrap()


@pytest.mark.parametrize(
    ("trigger", "table"),
    [
        ("AFTER UPDATE ON session_summaries", "summaries"),
        ("AFTER INSERT ON session_bodies", "bodies"),
        ("AFTER UPDATE ON sessions", "leaf"),
        ("AFTER INSERT ON session_labels", "labels"),
    ],
)
def test_a_statement_failing_mid_append_leaves_rows_counters_summary_caches_and_leaf(
    container: Container, trigger: str, table: str
) -> None:
    repo, db = _repo(container), _db(container)
    _seeded(repo)
    storage = repo.open("s1").unwrap()
    before_rows = _rows(db)
    before_info = storage.info()
    db.execute(
        f"CREATE TEMP TRIGGER fail_{table} {trigger} BEGIN SELECT RAISE(ABORT, 'injected'); END"
    )
    batch = [
        _assistant("c", "l", 5),
        NewEntry.label("m", "c", "b", "new", timestamp=1),
        _msg("d", "m"),
    ]
    failed = storage.append_many(batch)
    assert isinstance(failed.failure(), StorageFailure)
    assert _rows(db) == before_rows
    assert storage.info() == before_info  # served from the caches
    db.execute(f"DROP TRIGGER fail_{table}")
    fresh = SqliteSessionRepository(db, container.get(Clock))
    assert fresh.get("s1") == before_info  # read from the rows, not from any cache
    assert storage.append_many(batch) == Success(3)
    assert [e.seq for e in storage.entries().unwrap().items] == [1, 2, 3, 4, 5, 6]


def test_a_fork_failing_half_way_leaves_no_session(container: Container) -> None:
    repo, db = _repo(container), _db(container)
    _seeded(repo)
    before = _rows(db)
    db.execute(
        "CREATE TEMP TRIGGER fail_copy AFTER INSERT ON session_bodies WHEN new.seq = 2"
        " BEGIN SELECT RAISE(ABORT, 'injected'); END"
    )
    assert isinstance(repo.fork("s1", session_id="s2").failure(), StorageFailure)
    assert _rows(db) == before
    assert repo.get("s2") == Failure(NotFound("session", "s2"))
    db.execute("DROP TRIGGER fail_copy")
    assert repo.fork("s1", session_id="s2").unwrap().summary.entry_count == 3


def test_a_full_database_is_a_storage_failure_that_changes_nothing(tmp_path: Path) -> None:
    with build(sqlite(tmp_path / "full.db")) as built:
        repo, db = _repo(built), _db(built)
        _seeded(repo)
        storage = repo.open("s1").unwrap()
        before = storage.info()
        pages = db.scalar("PRAGMA page_count")
        db.execute(f"PRAGMA max_page_count = {pages + 1}")
        big = [_msg(f"big{n}", "l", content="y" * 50_000) for n in range(4)]
        failed = storage.append_many(big)
        error = failed.failure()
        assert isinstance(error, StorageFailure)
        assert error.kind is StorageFailureKind.FULL
        assert storage.info() == before
        db.execute("PRAGMA max_page_count = 1073741823")
        assert storage.append_many(big) == Success(4)


def test_delete_removes_every_row_of_the_session(container: Container) -> None:
    repo, db = _repo(container), _db(container)
    _seeded(repo)
    repo.create(NewSession(id="other")).unwrap()
    repo.open("other").unwrap().append(_msg("a", None)).unwrap()
    assert repo.delete("s1") == Success(3)
    rows = _rows(db)
    assert [r[0] for r in rows["sessions"]] == ["other"]
    assert len(rows["session_entries"]) == len(rows["session_bodies"]) == 1
    assert len(rows["session_summaries"]) == 1
    assert rows["session_labels"] == []
    assert db.execute("PRAGMA foreign_key_check") == []


# -- caches and other connections ----------------------------------------------------------------


def test_caches_follow_commits_of_other_connections(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    with build(sqlite(path)) as first, build(sqlite(path)) as second:
        one, two = _repo(first), _repo(second)
        one.create(NewSession(id="s1")).unwrap()
        one.open("s1").unwrap().append(_msg("a", None)).unwrap()
        assert two.get("s1").unwrap().summary.entry_count == 1  # fills two's caches
        one.open("s1").unwrap().append_many([_msg("b", "a"), _assistant("c", "b", 4)]).unwrap()
        seen = two.get("s1").unwrap()
        assert (seen.summary.entry_count, seen.leaf_id, seen.summary.uncached_tokens) == (3, "c", 4)
        assert two.open("s1").unwrap().append(_msg("d", "c")).unwrap().seq == 4
        assert one.get("s1").unwrap().leaf_id == "d"
        assert two.delete("s1") == Success(4)
        assert one.get("s1") == Failure(NotFound("session", "s1"))


def test_everything_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "kept.db"
    with build(sqlite(path)) as built:
        repo = _repo(built)
        _seeded(repo)
        storage = repo.open("s1").unwrap()
        storage.set_leaf("a").unwrap()
        before = repo.get("s1").unwrap()
        entries = storage.entries().unwrap()
    with build(sqlite(path)) as again:
        repo = _repo(again)
        assert repo.get("s1") == Success(before)
        assert before.leaf_id == "a"
        assert repo.open("s1").unwrap().entries() == Success(entries)
        assert entries.items[-1].type == "leaf"  # the move is in the log
        assert repo.open("s1").unwrap().append(_msg("e", "a")).unwrap().seq == 5


@pytest.mark.parametrize("bad_id", ["\ud800", "a\udfffb"])
def test_ids_no_store_could_hold_are_not_found_in_both_layers(bad_id: str) -> None:
    """A lone surrogate cannot be stored, so such an id names nothing: NotFound, as in memory,
    never the driver's UnicodeEncodeError."""
    answers = []
    for layer in (sqlite(":memory:"), in_memory()):
        with build(layer) as built:
            repo = _repo(built)
            _seeded(repo)
            session = repo.open("s1").unwrap()
            answers.append(
                (
                    repo.get(bad_id),
                    repo.delete(bad_id),
                    repo.fork(bad_id),
                    session.entry(bad_id),
                    session.children(bad_id),
                    session.set_leaf(bad_id),
                    session.path_to_root(bad_id),
                    session.build_context(bad_id),
                )
            )
    live, memory = answers
    assert live == memory
    assert live[0] == Failure(NotFound("session", bad_id))
    assert live[3] == Failure(NotFound("entry", bad_id))
