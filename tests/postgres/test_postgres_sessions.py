"""Sessions on a real PostgreSQL server: what the CLI shows of an imported pi transcript is
what it shows on SQLite, writers of one session from many clients neither lose nor reuse a
``seq``, creates of one id race to one session, and the schema refuses to change an entry
with SQLite's message."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from returns.result import Failure, Result, Success

from postgres.test_postgres_cli import url_of
from runstore.cli import cli
from runstore.layers import Layer, SqliteDatabase, build, postgres, sqlite
from runstore.layers._postgres_database import PostgresDatabase
from runstore.services import NewEntry, NewSession, SessionRepository
from runstore.services.errors import Conflict, StorageFailure, StorageFailureKind

FILES = Path(__file__).resolve().parents[2].parent / "shared" / "acceptance" / "pi-sessions"
TREE_ID = "5f0c2a8e-3b1d-4c6e-9a7f-2d8e4b6c1a90"
LARGE_ID = "d703a1a9-1b7b-4fb1-b512-c9738b1fe617"
WORKERS = 8


def _run(db: str, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--db", db, *args], catch_exceptions=False)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result.stdout


@pytest.mark.acceptance_inputs(FILES)
@pytest.mark.parametrize(
    ("name", "session_id"), [("tree-v3", TREE_ID), ("large-session", LARGE_ID)]
)
def test_an_imported_pi_transcript_shows_as_on_sqlite(
    tmp_path: Path, postgres_dsn: str, name: str, session_id: str
) -> None:
    """``sessions import`` into a PostgreSQL URL (which migrates the empty database), then
    every reading command prints what it prints for the same file imported into SQLite."""
    source = str(FILES / f"{name}.jsonl")
    databases = {"sqlite": str(tmp_path / "sessions.db"), "postgresql": url_of(postgres_dsn)}
    outputs: dict[str, list[str]] = {}
    for kind, db in databases.items():
        _run(db, "sessions", "import", source)
        outputs[kind] = [
            _run(db, *fmt, "sessions", *command)
            for fmt in ((), ("--format", "json"))
            for command in (
                ("show", session_id),
                ("tree", session_id),
                ("context", session_id),
                ("list",),
            )
        ]
    assert outputs["postgresql"] == outputs["sqlite"]
    assert session_id in outputs["postgresql"][0]
    exported = {kind: tmp_path / f"{kind}.jsonl" for kind in databases}
    for kind, db in databases.items():
        _run(db, "sessions", "export", session_id, "--output", str(exported[kind]))
    assert exported["postgresql"].read_bytes() == exported["sqlite"].read_bytes()


def _in_threads(count: int, work: Callable[[int], Result[Any, Any]]) -> list[Result[Any, Any]]:
    results: list[Result[Any, Any]] = [Failure("not run")] * count
    start = threading.Barrier(count)

    def run(index: int) -> None:
        start.wait()
        results[index] = work(index)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


def test_appenders_of_one_session_on_many_clients_lose_and_reuse_no_seq(
    postgres_dsn: str,
) -> None:
    """8 clients (a container each) append 10 entries each to one session at once: every
    append succeeds, and the log holds 81 entries numbered 1..81."""
    per_worker = 10
    with build(postgres(postgres_dsn)) as c:
        repo = c.get(SessionRepository)
        session = repo.create(NewSession(id="shared", cwd="/w")).unwrap()
        root = NewEntry.message("root", None, {"role": "user", "content": "hi"}, timestamp=1)
        repo.open(session.id).unwrap().append(root).unwrap()

    def appender(worker: int) -> Result[Any, Any]:
        with build(postgres(postgres_dsn)) as own:
            storage = own.get(SessionRepository).open("shared").unwrap()
            for i in range(per_worker):
                entry = NewEntry.message(
                    f"w{worker}-{i}", "root", {"role": "user", "content": str(i)}, timestamp=2
                )
                appended = storage.append(entry)
                if isinstance(appended, Failure):
                    return appended
        return Success(None)

    results = _in_threads(WORKERS, appender)
    assert results == [Success(None)] * WORKERS
    with build(postgres(postgres_dsn)) as c:
        storage = c.get(SessionRepository).open("shared").unwrap()
        page = storage.entries(after_seq=0, limit=1000).unwrap()
        assert [e.seq for e in page.items] == list(range(1, WORKERS * per_worker + 2))
        ids = {e.id for e in page.items}
        assert ids == {"root"} | {f"w{w}-{i}" for w in range(WORKERS) for i in range(per_worker)}
        assert storage.info().unwrap().summary.entry_count == WORKERS * per_worker + 1


def test_creates_of_one_id_on_many_clients_make_one_session(postgres_dsn: str) -> None:
    """8 clients create session ``same`` at once: one succeeds, seven get ``Conflict``
    (not a unique violation), and one session exists."""
    with build(postgres(postgres_dsn)):
        pass  # migrate first, so the clients race on the create alone

    def creator(worker: int) -> Result[Any, Any]:
        with build(postgres(postgres_dsn)) as own:
            return own.get(SessionRepository).create(NewSession(id="same", cwd=f"/w{worker}"))

    results = _in_threads(WORKERS, creator)
    assert sum(isinstance(r, Success) for r in results) == 1
    refused = [r.failure() for r in results if isinstance(r, Failure)]
    assert refused == [Conflict("session", "same", "a session with this id exists")] * (WORKERS - 1)
    with build(postgres(postgres_dsn)) as c:
        assert [s.id for s in c.get(SessionRepository).list().unwrap().items] == ["same"]


def _update_refused(db: PostgresDatabase | SqliteDatabase) -> StorageFailureKind:
    def update() -> Result[None, Any]:
        db.execute("UPDATE session_entries SET type = 'custom'")
        return Success(None)

    refused = db.transact("change an entry", update)
    assert isinstance(refused, Failure)
    failure = refused.failure()
    assert isinstance(failure, StorageFailure)
    return failure.kind


def test_the_schema_refuses_to_change_an_entry_with_sqlites_message(postgres_dsn: str) -> None:
    """Migration 0009: an UPDATE of an entry or a body is a constraint error (SQLSTATE class
    23) with the message of SQLite's trigger, a ``StorageFailure`` of the kind SQLite's is;
    deleting the session still cascades."""
    entry = NewEntry.message("e1", None, {"role": "user", "content": "hi"}, timestamp=1)
    kinds = []
    backends: tuple[tuple[Layer, type[Any]], ...] = (
        (postgres(postgres_dsn), PostgresDatabase),
        (sqlite(":memory:"), SqliteDatabase),
    )
    for layer, database in backends:
        with build(layer) as c:
            repo = c.get(SessionRepository)
            repo.create(NewSession(id="s", cwd="/w")).unwrap()
            repo.open("s").unwrap().append(entry).unwrap()
            kinds.append(_update_refused(c.get(database)))
    assert kinds == [StorageFailureKind.CONSTRAINT] * 2
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        for statement in (
            "UPDATE session_entries SET type = 'custom'",
            "UPDATE session_bodies SET body = '{}'",
        ):
            with pytest.raises(psycopg.errors.IntegrityError) as raised:
                conn.execute(statement)
            assert raised.value.sqlstate == "23000"
            assert raised.value.diag.message_primary == "session entries are immutable"
        conn.execute("DELETE FROM sessions")
        row = conn.execute("SELECT count(*) FROM session_entries").fetchone()
        assert row == (0,)


def test_each_step_of_a_walk_is_one_primary_key_lookup(postgres_dsn: str) -> None:
    """The path, ancestor and copy walks look each parent up by the primary key; planned as
    a join, each step scanned every entry of the session (a walk quadratic in its length)."""
    from runstore.layers._postgres_sessions import (
        _POSTGRES_ANCESTOR,
        _POSTGRES_COPY,
        _POSTGRES_PATH,
    )

    with build(postgres(postgres_dsn)) as c:
        repo = c.get(SessionRepository)
        repo.create(NewSession(id="s", cwd="/w")).unwrap()
        entries = [
            NewEntry.message(
                f"e{i}", f"e{i - 1}" if i else None, {"role": "user", "content": "x"}, timestamp=i
            )
            for i in range(1000)
        ]
        repo.open("s").unwrap().append_many(entries).unwrap()
    with psycopg.connect(postgres_dsn) as conn:
        conn.execute("ANALYZE session_entries")
        row = conn.execute("SELECT key FROM sessions").fetchone()
        assert row is not None
        start = {"key": row[0], "start": "e999"}
        for sql, params in (
            (_POSTGRES_PATH, {**start, "walk": 1, "all_bodies": 0}),
            (_POSTGRES_ANCESTOR, {**start, "target": "e0"}),
            (_POSTGRES_COPY, start),
        ):
            document = conn.execute("EXPLAIN (FORMAT JSON) " + sql, params).fetchone()
            assert document is not None
            step = _recursive_step(document[0][0]["Plan"])
            scans = {(n["Node Type"], n.get("Index Name")) for n in _nodes(step)}
            assert ("Index Scan", "session_entries_pkey") in scans, scans
            assert not {kind for kind, _ in scans} & {"Hash Join", "Merge Join", "Seq Scan"}


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(n for child in plan.get("Plans", ()) for n in _nodes(child))]


def _recursive_step(plan: dict[str, Any]) -> dict[str, Any]:
    """The recursive term of the plan's ``Recursive Union``."""
    union = next(n for n in _nodes(plan) if n["Node Type"] == "Recursive Union")
    step: dict[str, Any] = union["Plans"][1]
    return step
