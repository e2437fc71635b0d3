"""Migration 0012 (search indexes) on a database written with migrations 0001-0011: the rows
already stored are indexed by the migration itself, so a search right after the upgrade
finds what the in-memory layer finds for the same writes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest
from _old_schema import copy_into_old_postgres, copy_into_old_sqlite  # beside this file

from runstore.layers import (
    DATA_READER,
    DATA_STORE,
    SESSION_REPOSITORY,
    Layer,
    SqliteDatabase,
    build,
    in_memory,
    merge,
    sqlite,
)
from runstore.migrations import shipped_migrations
from runstore.services.clock import Clock, FixedClock
from runstore.services.sessions import NewEntry, NewSession, SessionRepository
from runstore.services.test_runs import (
    CollectionError,
    DataStore,
    ErrorInfo,
    Outcome,
    Phase,
    PhaseResult,
    RunStart,
    RunStatus,
    TestResult,
)

OLD_SCHEMA = 11
T0 = datetime(2026, 2, 1, tzinfo=UTC)
CLOCK = FixedClock(1_770_000_000_000)
QUERIES = ("refused", "conn*", "import error", "pool", "circuit breaker", "tool*", "nul")


def write(store: DataStore, repo: SessionRepository) -> None:
    """Failures (with a NUL in one message), a collection error, a passing test, and a
    session with a user message, a tool call and a tool result."""
    run = store.begin_run(RunStart("p", "inv-1", T0)).unwrap()
    store.record_results(run, [
        TestResult("tests/test_db.py::test_pool", "tests/test_db.py", "test_pool",
                   (PhaseResult(Phase.CALL, Outcome.FAILED, 1.0),),
                   errors=(ErrorInfo(Phase.CALL, "ConnectionError", "connection refused"),)),
        TestResult("tests/test_db.py::test_nul", "tests/test_db.py", "test_nul",
                   (PhaseResult(Phase.CALL, Outcome.FAILED, 1.0),),
                   errors=(ErrorInfo(Phase.CALL, "ValueError", "bad\x00nul byte"),)),
        TestResult("tests/test_db.py::test_ok", "tests/test_db.py", "test_ok",
                   (PhaseResult(Phase.CALL, Outcome.PASSED, 1.0),)),
    ]).unwrap()
    store.record_collection_errors(run, [CollectionError(
        "tests/test_broken.py", "tests/test_broken.py",
        ErrorInfo(Phase.COLLECT, "ImportError", "import error: no module named pool"))]).unwrap()
    store.finish_run(run, RunStatus.FAILED, T0 + timedelta(seconds=1)).unwrap()
    repo.create(NewSession(id="s-1", cwd="/w", created=T0)).unwrap()
    session = repo.open("s-1").unwrap()
    session.append_many([
        NewEntry.message("e1", None, {"role": "user", "content": "try a circuit breaker"},
                         timestamp=T0),
        NewEntry.message("e2", "e1", {"role": "assistant", "content": [
            {"type": "toolCall", "name": "bash", "arguments": {"command": "pytest -k pool"}},
        ]}, timestamp=T0),
        NewEntry.message("e3", "e2", {"role": "toolResult", "content": [
            {"type": "text", "text": "tool said: connection refused\u0000 again"}]},
            timestamp=T0),
    ]).unwrap()


def answers(container: Any) -> dict[str, Any]:
    reader, repo = container.get(DATA_READER), container.get(SESSION_REPOSITORY)

    def unscored(page: Any) -> list[Any]:
        return sorted((attrs.evolve(h, score=0.0) for h in page.items), key=repr)

    return {
        text: (unscored(reader.search_failures(text).unwrap()),
               unscored(reader.search_tests(text).unwrap()),
               unscored(repo.search(text).unwrap()))
        for text in QUERIES
    }


@pytest.fixture(scope="module")
def expected() -> dict[str, Any]:
    with build(merge(in_memory(), Layer.value(Clock, CLOCK))) as container:
        write(container.get(DATA_STORE), container.get(SESSION_REPOSITORY))
        found = answers(container)
    assert all(any(kinds) for kinds in found.values()), found  # every query finds something
    return found


def test_the_schema_before_is_0011() -> None:
    assert max(m.id for m in shipped_migrations() if m.id <= OLD_SCHEMA) == OLD_SCHEMA
    assert any(m.id == 12 and m.name == "search" for m in shipped_migrations())


def test_sqlite_rows_stored_before_0012_are_found_after_it(
    tmp_path: Path, expected: dict[str, Any]
) -> None:
    path, new = tmp_path / "old.db", tmp_path / "new.db"
    with build(merge(sqlite(new), Layer.value(Clock, CLOCK))) as container:
        write(container.get(DATA_STORE), container.get(SESSION_REPOSITORY))
    copy_into_old_sqlite(new, path, OLD_SCHEMA)
    db = SqliteDatabase.open(path).unwrap()
    try:
        assert db.scalar("SELECT count(*) FROM sqlite_schema WHERE name LIKE 'search%'") == 0
    finally:
        db.close()
    with build(merge(sqlite(path), Layer.value(Clock, CLOCK))) as container:
        assert answers(container) == expected


def test_postgresql_rows_stored_before_0012_are_found_after_it(
    tmp_path: Path, postgres_dsn: str, expected: dict[str, Any]
) -> None:
    from runstore.layers._postgres_layer import postgres

    new = tmp_path / "new.db"
    with build(merge(sqlite(new), Layer.value(Clock, CLOCK))) as container:
        write(container.get(DATA_STORE), container.get(SESSION_REPOSITORY))
    copy_into_old_postgres(new, postgres_dsn, OLD_SCHEMA)
    with build(merge(postgres(postgres_dsn), Layer.value(Clock, CLOCK))) as container:
        assert answers(container) == expected
