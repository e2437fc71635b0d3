"""A SQLite file that another program wrote is refused, never given runstore's schema.

Opening for creation (the default of ``sqlite(path)``, the pytest plugin and ``runstore db
migrate``) used to add runstore's tables beside another program's. It now refuses such a
file with ``NotARunstoreDatabase`` naming the tables found, and leaves its bytes, mode and
folder exactly as they were; a new, empty (0 bytes) or empty-database file is still made a
runstore database.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner
from returns.result import Failure, Success

from runstore.cli import cli
from runstore.exceptions import DatabaseOpenError
from runstore.layers import DATABASE_HEALTH, build, open_database, sqlite
from runstore.migrations import JOURNAL_TABLE
from runstore.services.errors import NotARunstoreDatabase

Snapshot = tuple[str, int, list[str]]


def _snapshot(path: Path) -> Snapshot:
    """What "untouched" means: the bytes, the mode and the folder's listing."""
    return (
        hashlib.sha256(path.read_bytes()).hexdigest(),
        path.stat().st_mode,
        sorted(p.name for p in path.parent.iterdir()),
    )


def _foreign(path: Path, *tables: str, wal: bool = False) -> Path:
    connection = apsw.Connection(str(path))
    if wal:
        connection.pragma("journal_mode", "wal")
    for table in tables:
        connection.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, name TEXT)")
        connection.execute(f"INSERT INTO {table} (name) VALUES ('kept')")
    connection.close()
    path.chmod(0o640)
    return path


def _refusal(path: Path, *tables: str) -> NotARunstoreDatabase:
    shown = ", ".join(tables)
    noun = "table" if len(tables) == 1 else "tables"
    return NotARunstoreDatabase(
        str(path),
        f"it holds another program's {noun} ({shown}) and no {JOURNAL_TABLE} journal;"
        " runstore adds its schema only to a new or empty file",
        tables,
    )


@pytest.mark.parametrize("access", ["create", "write"])
@pytest.mark.parametrize("wal", [False, True], ids=["rollback-journal", "wal"])
def test_building_on_another_programs_file_is_refused_and_changes_nothing(
    tmp_path: Path, access: str, wal: bool
) -> None:
    path = _foreign(tmp_path / "app.db", "users", "orders", wal=wal)
    before = _snapshot(path)

    with pytest.raises(DatabaseOpenError) as refused, build(sqlite(path, access=access)):  # type: ignore[arg-type]
        pass

    assert refused.value.error == _refusal(path, "orders", "users")
    assert _snapshot(path) == before
    tables = apsw.Connection(str(path)).execute(
        "SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name"
    ).fetchall()
    assert tables == [("orders",), ("users",)]


def test_a_view_counts_and_many_tables_are_cut_in_the_text(tmp_path: Path) -> None:
    names = [f"t{i}" for i in range(7)]
    path = _foreign(tmp_path / "app.db", *names)
    connection = apsw.Connection(str(path))
    connection.execute("CREATE VIEW v AS SELECT 1")
    connection.close()
    before = _snapshot(path)

    refused = open_database(path)

    assert isinstance(refused, Failure)
    error = refused.failure()
    assert isinstance(error, NotARunstoreDatabase)
    assert error.tables == (*names, "v")
    assert "(t0, t1, t2, t3, t4, ...)" in error.detail
    assert _snapshot(path) == before


def test_reading_another_programs_file_says_whose_it_is(tmp_path: Path) -> None:
    path = _foreign(tmp_path / "app.db", "users")
    before = _snapshot(path)

    with build(sqlite(path, access="read")) as container:
        ready = container.get(DATABASE_HEALTH).readiness()

    assert ready == Failure(_refusal(path, "users"))
    assert _snapshot(path) == before


def _empty_database(path: Path) -> None:
    """A valid SQLite file with a header and no schema (as a VACUUM of nothing leaves)."""
    connection = apsw.Connection(str(path))
    connection.execute("CREATE TABLE gone (x); DROP TABLE gone")
    connection.close()
    assert path.stat().st_size > 0


@pytest.mark.parametrize("make", ["missing", "zero-bytes", "empty-database"])
def test_a_new_or_empty_file_is_still_created(tmp_path: Path, make: str) -> None:
    path = tmp_path / "runs.db"
    if make == "zero-bytes":
        path.write_bytes(b"")
    elif make == "empty-database":
        _empty_database(path)

    with build(sqlite(path)) as container:
        assert container.get(DATABASE_HEALTH).readiness() == Success(None)


def test_runstores_own_empty_journal_is_not_foreign(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    open_database(path).unwrap().close()
    assert open_database(path, access="write").bind(lambda db: db.close()) == Success(None)


@pytest.mark.parametrize(
    "args", [["db", "migrate"], ["db", "status"], ["db", "check"], ["runs"], ["show"]],
    ids=lambda a: "-".join(a),
)
def test_the_cli_refuses_another_programs_file_in_one_line(
    tmp_path: Path, args: list[str]
) -> None:
    path = _foreign(tmp_path / "app.db", "users")
    before = _snapshot(path)

    result = CliRunner().invoke(cli, ["--db", str(path), *args])

    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines() == [f"runstore: {_refusal(path, 'users')}"]
    assert _snapshot(path) == before


def test_the_cli_json_error_of_migrate_names_the_file(tmp_path: Path) -> None:
    path = _foreign(tmp_path / "app.db", "users")
    result = CliRunner().invoke(cli, ["--db", str(path), "--format", "json", "db", "migrate"])
    assert result.exit_code == 1
    assert str(_refusal(path, "users")) in result.stdout
    assert '"healthy": false' in result.stdout


def test_the_pytest_plugin_records_nothing_into_another_programs_file(tmp_path: Path) -> None:
    path = _foreign(tmp_path / "app.db", "users")
    project = tmp_path / "proj"
    (project / "tests").mkdir(parents=True)
    (project / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (project / "tests" / "test_one.py").write_text("def test_one():\n    pass\n", "utf-8")
    before = _snapshot(path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "RUNSTORE_"))}
    env.update(PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", PYTHONDONTWRITEBYTECODE="1")

    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "runstore.pytest_plugin",
         "--runstore", "--runstore-db", str(path)],
        cwd=project, env=env, capture_output=True, text=True, timeout=120, check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr  # the tests still ran and passed
    lines = [line for line in done.stdout.splitlines() if line.startswith("runstore:")]
    assert len(lines) == 1, done.stdout
    assert str(_refusal(path, "users")) in lines[0]
    assert _snapshot(path) == before
