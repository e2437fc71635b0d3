"""``runstore db copy``: SQLite -> PostgreSQL -> SQLite, row for row, and every refusal
leaving the destination as it was."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from click.testing import CliRunner
from psycopg.conninfo import conninfo_to_dict
from returns.result import Failure, Success

from postgres.fixtures import PostgresCluster
from postgres.server import fresh_name
from runstore.cli import cli
from runstore.layers import (
    DATA_STORE,
    Access,
    SqliteDatabase,
    build,
    open_database,
    postgres,
    sqlite,
)
from runstore.layers._copy import (
    CopyMismatch,
    DestinationNotEmpty,
    RowsNotCopyable,
    SchemaMismatch,
    _SqliteSide,
    copy_database,
    table_checksums,
)
from runstore.layers._sqlite_database import connect
from runstore.services import (
    DataStore,
    ErrorInfo,
    FileCoverage,
    InvalidInput,
    NotARunstoreDatabase,
    Outcome,
    Phase,
    PhaseResult,
    RunId,
    RunRetentionPolicy,
    RunStart,
    RunStatus,
    StackFrame,
    SubtestResult,
    TestResult,
)
from runstore.testing import make_item

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

SESSION = "\n".join(
    json.dumps(line)
    for line in (
        {"type": "session", "version": 3, "id": "s-1", "timestamp": "2025-11-30T10:00:00.000Z",
         "cwd": "/home/dev/shop"},
        # ids sort opposite to the tree, so a copy in key order would write a child first
        {"type": "message", "id": "z1", "parentId": None, "timestamp": "2025-11-30T10:00:01.000Z",
         "message": {"role": "user", "content": "hello", "timestamp": 1764496801000}},
        {"type": "message", "id": "m2", "parentId": "z1", "timestamp": "2025-11-30T10:00:02.000Z",
         "message": {"role": "user", "content": "again", "timestamp": 1764496802000}},
        {"type": "message", "id": "a3", "parentId": "m2", "timestamp": "2025-11-30T10:00:03.000Z",
         "message": {"role": "user", "content": "more", "timestamp": 1764496803000}},
    )
) + "\n"


def _url(conninfo: str, *, password: str = "") -> str:
    """The ``postgresql://`` URL of a test database's key=value DSN (Unix socket host)."""
    params = conninfo_to_dict(conninfo)
    secret = f":{password}" if password else ""
    return (f"postgresql://{params.get('user', '')}{secret}@/{params['dbname']}"
            f"?host={quote(str(params['host']), safe='')}")


@pytest.fixture
def migrated(postgres_server: PostgresCluster) -> Iterator[str]:
    """The URL of a fresh, migrated, empty PostgreSQL database."""
    name = fresh_name()
    yield _url(postgres_server.create(name))
    postgres_server.drop(name)


def _run(store: DataStore, project: str, minute: int, items: list[TestResult]) -> RunId:
    start = T0 + timedelta(minutes=minute)
    run = store.begin_run(RunStart(project, f"inv-{project}-{minute}", start)).unwrap()
    store.record_results(run, items).unwrap()
    store.finish_run(run, RunStatus.FAILED, start + timedelta(seconds=30)).unwrap()
    return run


def seed(path: Path) -> Path:
    """A recorded project: failures with frames and a cause chain, NUL in a message,
    reruns, subtests, output, coverage, and a pruned run holding the highest id (so the
    AUTOINCREMENT counter, 12, is above every id left, 11)."""
    frame = StackFrame("tests/test_cart.py", 12, "test_total", True)
    cause = ErrorInfo(Phase.CALL, "KeyError", "'sku'", "E KeyError", (frame,))
    error = ErrorInfo(Phase.CALL, "ValueError", "bad\x00price 12", "E ValueError", (frame,), cause)
    failing = TestResult("tests/test_cart.py::test_total", "tests/test_cart.py", "test_total",
                         (PhaseResult(Phase.CALL, Outcome.FAILED, 4.5),), errors=(error,),
                         stdout="printed\n", markers=("slow",))
    rerun = TestResult("tests/test_cart.py::test_rerun", "tests/test_cart.py", "test_rerun",
                       (PhaseResult(Phase.CALL, Outcome.PASSED, 2.0),),
                       attempts=(make_item("tests/test_cart.py::test_rerun", Outcome.FAILED),))
    subtests = TestResult("tests/test_sub.py::test_each", "tests/test_sub.py", "test_each",
                          (PhaseResult(Phase.CALL, Outcome.PASSED, 1.0),),
                          subtests=(SubtestResult("i=0", Outcome.PASSED, 0.1),
                                    SubtestResult("i=1", Outcome.FAILED, 0.1,
                                                  ErrorInfo(Phase.CALL, "AssertionError", "i=1"))))
    with build(sqlite(path)) as container:
        store = container.get(DATA_STORE)
        for minute in range(1, 6):
            items = [make_item("tests/test_cart.py::test_ok"), rerun, subtests]
            items.append(failing if minute % 2 else make_item(failing.nodeid))
            run = _run(store, "shop", minute, items)
        store.write_coverage(run, [FileCoverage("src/shop.py", 40, 4, 10, 2, 3, (7, 8))]).unwrap()
        _run(store, "other", 10, [make_item("tests/test_a.py::test_a")])
        for minute in range(50, 55):
            _run(store, "old", minute, [make_item("tests/test_o.py::test_o")])
        _run(store, "old", 0, [make_item("tests/test_o.py::test_o", Outcome.FAILED)])
        pruned = store.prune_runs(RunRetentionPolicy(keep_runs=5)).unwrap()  # run 12, the oldest
        assert pruned.pruned_runs == 1
    runner = CliRunner()
    transcript = path.parent / "session.jsonl"
    transcript.write_text(SESSION, encoding="utf-8")
    imported = runner.invoke(cli, ["--db", str(path), "sessions", "import", str(transcript)])
    assert imported.exit_code == 0, imported.output
    return path


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return seed(tmp_path / "source.db")


def _checksums(target: str) -> dict[str, tuple[int, str]]:
    return table_checksums(target).unwrap()


def _next_run_id(layer_target: str) -> int:
    layer = postgres(layer_target) if layer_target.startswith("postgresql") else sqlite(
        layer_target
    )
    with build(layer) as container:
        store = container.get(DATA_STORE)
        return int(store.begin_run(RunStart("shop", "inv-next", T0 + timedelta(hours=1))).unwrap())


def _show_latest(target: str) -> dict[str, Any]:
    shown = CliRunner().invoke(
        cli, ["--db", target, "--format", "json", "show", "latest", "--project", "shop"]
    )
    assert shown.exit_code == 0, shown.output
    document: dict[str, Any] = json.loads(shown.output)
    return {k: v for k, v in document.items() if not k.startswith("database")}


def test_a_round_trip_through_postgresql_keeps_every_row_ids_and_counters(
    source: Path, migrated: str, tmp_path: Path
) -> None:
    back = str(tmp_path / "back.db")
    there = copy_database(str(source), migrated).unwrap()
    again = copy_database(migrated, back).unwrap()

    original, on_server, returned = _checksums(str(source)), _checksums(migrated), _checksums(back)
    copied = {t.table for t in there.tables}
    assert {"test_runs", "test_errors", "sessions", "session_entries"} <= copied
    assert original["test_runs"][0] == 11
    assert original["session_entries"][0] == 3
    for table in copied:
        assert original[table] == on_server[table] == returned[table], table
    # only the agents tables may lag on PostgreSQL, and they hold no records here
    left_there = {t.table for t in there.not_copied}
    assert all(name.startswith("agent_") for name in left_there)
    assert {t.table for t in again.not_copied} <= left_there
    assert all(t.data_rows == 0 for t in there.not_copied)
    assert original == returned  # what PostgreSQL cannot hold yet is empty in a fresh file too
    assert _show_latest(str(source)) == _show_latest(migrated) == _show_latest(back)
    # the counters followed: run 12 was pruned, so the next run is 13 on every copy
    assert _next_run_id(migrated) == 13
    assert _next_run_id(back) == 13


def test_a_copy_leaves_later_writes_on_the_destination_free_of_collisions(
    source: Path, migrated: str
) -> None:
    copy_database(str(source), migrated).unwrap()
    with build(postgres(migrated)) as container:
        store = container.get(DATA_STORE)
        _run(store, "shop", 30, [make_item("tests/test_new.py::test_new", Outcome.FAILED),
                                 make_item("tests/test_cart.py::test_ok")])
    assert _checksums(migrated)["test_runs"][0] == 12


def test_a_destination_holding_records_is_refused_and_left_as_it_was(
    source: Path, migrated: str
) -> None:
    copy_database(str(source), migrated).unwrap()
    before = _checksums(migrated)
    refused = copy_database(str(source), migrated)
    assert isinstance(refused, Failure)
    assert isinstance(refused.failure(), DestinationNotEmpty)
    assert "test_runs" in refused.failure().tables
    assert _checksums(migrated) == before


def test_a_source_that_is_not_a_runstore_database_is_refused(
    tmp_path: Path, migrated: str
) -> None:
    foreign = tmp_path / "foreign.db"
    connection = connect(foreign).unwrap()
    connection.execute(
        "CREATE TABLE invoices (id INTEGER PRIMARY KEY); INSERT INTO invoices VALUES (1)"
    )
    connection.close()
    before = _checksums(migrated)
    refused = copy_database(str(foreign), migrated)
    assert isinstance(refused, Failure)
    assert isinstance(refused.failure(), NotARunstoreDatabase)
    assert _checksums(migrated) == before
    missing = copy_database(str(tmp_path / "missing.db"), migrated)
    assert isinstance(missing.failure(), NotARunstoreDatabase)
    assert not (tmp_path / "missing.db").exists()


def test_a_column_the_other_schema_lacks_is_refused_as_a_schema_mismatch(
    source: Path, migrated: str, tmp_path: Path
) -> None:
    connection = connect(source).unwrap()
    connection.execute("ALTER TABLE test_runs ADD COLUMN extra INTEGER")
    connection.close()
    before = _checksums(migrated)
    refused = copy_database(str(source), migrated)
    assert refused == Failure(SchemaMismatch("test_runs", ("extra",), ()))
    assert _checksums(migrated) == before
    # SQLite to SQLite: the same migrations on both sides, the same refusal
    fresh = tmp_path / "fresh.db"
    connect_database(fresh, access="create").close()
    before_file = fresh.read_bytes()
    assert copy_database(str(source), str(fresh)) == refused
    assert fresh.read_bytes() == before_file


def test_records_the_destination_cannot_hold_are_refused_unless_partial(
    source: Path, migrated: str
) -> None:
    # a table the destination's schema does not have (as a domain not yet translated)
    side = _SqliteSide(connect_database(source))
    side.statements.execute(
        "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT);"
        " INSERT INTO notes (body) VALUES ('a'), ('b'), ('c')"
    )
    side.close()
    before = _checksums(migrated)
    refused = copy_database(str(source), migrated)
    assert isinstance(refused, Failure)
    assert isinstance(refused.failure(), RowsNotCopyable)
    assert [t.table for t in refused.failure().tables] == ["notes"]
    assert _checksums(migrated) == before
    partial = copy_database(str(source), migrated, partial=True).unwrap()
    left = {t.table: t for t in partial.not_copied}
    assert left["notes"].data_rows == 3
    assert _checksums(migrated)["test_runs"][0] == 11


def connect_database(path: Path, access: Access = "write") -> SqliteDatabase:
    return open_database(path, access=access).unwrap()


def test_a_copy_that_does_not_verify_is_rolled_back(
    source: Path, migrated: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runstore.layers import _copy

    insert = _copy._PostgresSide.insert

    def lossy(self: Any, table: str, columns: Any, rows: Any) -> None:
        kept = list(rows)
        insert(self, table, columns, kept[:-1] if table == "test_subtests" else kept)

    monkeypatch.setattr(_copy._PostgresSide, "insert", lossy)
    before = _checksums(migrated)
    failed = copy_database(str(source), migrated)
    assert isinstance(failed, Failure)
    assert isinstance(failed.failure(), CopyMismatch)
    assert failed.failure().table == "test_subtests"
    assert (failed.failure().source_rows, failed.failure().destination_rows) == (10, 9)
    assert _checksums(migrated) == before


def test_the_same_database_on_both_sides_is_refused(source: Path) -> None:
    assert copy_database(str(source), str(source)) == Failure(
        InvalidInput("destination", "the destination is the source itself")
    )


def test_the_command_copies_verifies_and_never_prints_the_password(
    source: Path, postgres_server: PostgresCluster
) -> None:
    name = fresh_name()
    target = _url(postgres_server.create(name), password="s3cret-pw")
    try:
        runner = CliRunner()
        done = runner.invoke(cli, ["db", "copy", str(source), target])
        assert done.exit_code == 0, done.output
        assert "verified: " in done.output
        assert "test_runs: 11 rows" in done.output
        refused = runner.invoke(cli, ["--format", "json", "db", "copy", str(source), target])
        assert refused.exit_code == 1
        document = json.loads(refused.stdout)
        assert document["copied"] is False
        assert "already holds records" in document["error"]
        for output in (done.output, refused.output):
            assert "s3cret-pw" not in output
        unserved = runner.invoke(cli, ["db", "copy", str(source), "mysql://u:pw@h/db"])
        assert unserved.exit_code == 2
        assert "pw" not in unserved.output
    finally:
        postgres_server.drop(name)


def test_a_missing_sqlite_destination_is_created_and_filled(
    source: Path, tmp_path: Path
) -> None:
    target = tmp_path / "new" / "copy.db"
    report = copy_database(str(source), str(target))
    assert isinstance(report, Success)
    assert _checksums(str(target)) == _checksums(str(source))
    assert _next_run_id(str(target)) == 13
