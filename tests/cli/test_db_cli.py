"""``runstore db migrate|status|check``: JSON shapes, exit codes, one-line reasons."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import apsw
import pytest
from click.testing import CliRunner, Result

from runstore.cli import cli
from runstore.migrations import JOURNAL_TABLE, shipped_migrations

SHIPPED_IDS = [m.id for m in shipped_migrations()]


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def migrated(path: Path) -> None:
    result = run("--db", str(path), "db", "migrate")
    assert result.exit_code == 0, result.output


def one_line_reason(result: Result) -> str:
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("runstore: ")
    return lines[0]


def plant_unknown_migration(path: Path) -> int:
    unknown = SHIPPED_IDS[-1] + 900
    conn = apsw.Connection(str(path))
    try:
        conn.execute(
            f"INSERT INTO {JOURNAL_TABLE} (id, name, checksum, applied_at_ms, finished)"
            " VALUES (?, 'from_the_future', 'x', 0, 1)",
            (unknown,),
        )
    finally:
        conn.close()
    return unknown


def test_status_json_on_a_new_database_lists_the_applied_migrations(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    migrated(path)

    result = run("--db", str(path), "db", "status", "--format", "json")

    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.stdout)
    assert document["database"] == str(path)
    assert document["exists"] is True
    assert document["healthy"] is True
    migrations = document["migrations"]
    assert [a["id"] for a in migrations["applied"]] == SHIPPED_IDS
    assert [a["name"] for a in migrations["applied"]] == [m.name for m in shipped_migrations()]
    assert [a["checksum"] for a in migrations["applied"]] == [
        m.checksum for m in shipped_migrations()
    ]
    assert all(a["finished"] is True and a["applied_at_ms"] > 0 for a in migrations["applied"])
    assert migrations["pending"] == []
    assert migrations["shipped"] == SHIPPED_IDS
    assert migrations["problems"] == []


def test_global_format_option_works_too(tmp_path: Path) -> None:
    migrated(tmp_path / "runs.db")
    result = run("--db", str(tmp_path / "runs.db"), "--format", "json", "db", "status")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["healthy"] is True


def test_migrate_creates_the_folder_and_reports_text(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "folder" / "runs.db"
    result = run("--db", str(path), "db", "migrate")
    assert result.exit_code == 0
    assert path.is_file()
    assert f"{len(SHIPPED_IDS)} applied, 0 pending" in result.stdout
    assert result.stdout.splitlines()[-1] == "healthy"


def test_check_passes_on_a_healthy_database(tmp_path: Path) -> None:
    migrated(tmp_path / "runs.db")
    result = run("--db", str(tmp_path / "runs.db"), "db", "check", "--format", "json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["integrity"] == ["ok"]
    assert document["foreign_key_violations"] == []
    assert document["healthy"] is True
    assert "error" not in document


def test_check_fails_on_a_migration_this_code_does_not_know(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    migrated(path)
    unknown = plant_unknown_migration(path)

    text = run("--db", str(path), "db", "check")
    as_json = run("--db", str(path), "db", "check", "--format", "json")

    assert text.exit_code == 1
    assert f"{unknown:04d}" in one_line_reason(text)
    assert as_json.exit_code == 1
    document = json.loads(as_json.stdout)
    assert document["healthy"] is False
    assert f"{unknown:04d}" in document["error"]
    assert document["migrations"]["problems"]


def test_status_and_migrate_refuse_an_unknown_migration(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    migrated(path)
    unknown = plant_unknown_migration(path)
    before = path.read_bytes()

    status = run("--db", str(path), "db", "status")
    status_json = run("--db", str(path), "db", "status", "--format", "json")
    migrate = run("--db", str(path), "db", "migrate")

    assert status.exit_code == 1
    assert f"{unknown:04d}" in one_line_reason(status)
    assert status_json.exit_code == 1
    assert f"{unknown:04d}" in json.loads(status_json.stdout)["error"]
    assert migrate.exit_code == 1
    assert "cannot migrate" in one_line_reason(migrate)
    assert path.read_bytes() == before


def test_status_on_a_missing_file_exits_1_and_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "absent" / "runs.db"

    text = run("--db", str(path), "db", "status")
    as_json = run("--db", str(path), "db", "status", "--format", "json")
    check = run("--db", str(path), "db", "check")

    assert text.exit_code == 1
    assert "no database" in one_line_reason(text)
    assert as_json.exit_code == 1
    assert json.loads(as_json.stdout) == {
        "schema_version": 1,
        "database": str(path),
        "database_source": "--db",
        "exists": False,
        "healthy": False,
        "error": f"no database at {path} (create it with: runstore db migrate)",
    }
    assert check.exit_code == 1
    assert list(tmp_path.iterdir()) == []


def test_pending_migrations_are_healthy_for_status(tmp_path: Path) -> None:
    fixture = Path(__file__).parents[1] / "migrations" / "fixtures"
    old = next(fixture.glob("schema_0001_*.db"))
    path = tmp_path / "old.db"
    path.write_bytes(old.read_bytes())

    result = run("--db", str(path), "db", "status", "--format", "json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["migrations"]["pending"] == SHIPPED_IDS[1:]
    assert path.read_bytes() == old.read_bytes()


def test_check_reports_a_corrupt_file_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.db"
    migrated(path)
    conn = apsw.Connection(str(path))
    try:
        conn.execute("CREATE TABLE filler (x TEXT)")
        conn.executemany("INSERT INTO filler VALUES (?)", [("x" * 200,)] * 500)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    with path.open("r+b") as handle:
        handle.seek(4096)
        handle.write(b"\x5a" * 4096 * 6)  # table pages
    pages = run("--db", str(path), "db", "check")

    with path.open("r+b") as handle:
        handle.seek(100)
        handle.write(b"\x5a" * 2000)  # the schema page: every statement fails
    schema = run("--db", str(path), "db", "check", "--format", "json")

    assert pages.exit_code == 1
    assert one_line_reason(pages)
    assert schema.exit_code == 1
    assert "corrupt" in one_line_reason(schema)
    assert "corrupt" in json.loads(schema.stdout)["error"]


def test_a_file_that_is_not_a_database_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not a database\n" * 100)
    for command in ("status", "check", "migrate"):
        result = run("--db", str(path), "db", command)
        assert result.exit_code == 1, command
        assert "not_a_database" in one_line_reason(result)
    assert path.read_text() == "not a database\n" * 100


def test_the_environment_variable_names_the_database(tmp_path: Path) -> None:
    path = tmp_path / "from_env.db"
    assert run("db", "migrate", env={"RUNSTORE_DB": str(path)}).exit_code == 0
    assert path.is_file()

    result = run("db", "status", "--format", "json", env={"RUNSTORE_DB": str(path)})

    assert result.exit_code == 0
    assert json.loads(result.stdout)["database"] == str(path)


def test_the_default_database_is_in_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RUNSTORE_DB", raising=False)
    result = run("db", "migrate")
    assert result.exit_code == 0, result.output
    assert (tmp_path / ".runstore" / "runstore.db").is_file()


def test_a_usage_error_exits_2() -> None:
    assert run("db", "status", "--format", "xml").exit_code == 2
    assert run("db", "nonsense").exit_code == 2


@pytest.mark.parametrize(
    "command", [(), ("db",), ("db", "migrate"), ("db", "status"), ("db", "check")]
)
def test_every_command_has_help_with_an_example(command: tuple[str, ...]) -> None:
    result = run(*command, "--help")
    assert result.exit_code == 0
    assert "Example" in result.stdout


def test_python_dash_m_runstore_works(tmp_path: Path) -> None:
    path = tmp_path / "module.db"
    migrate = subprocess.run(
        [sys.executable, "-m", "runstore", "--format", "json", "db", "migrate"],
        capture_output=True,
        text=True,
        env={**os.environ, "RUNSTORE_DB": str(path)},
        check=False,
    )
    assert migrate.returncode == 0, migrate.stderr
    assert [a["id"] for a in json.loads(migrate.stdout)["migrations"]["applied"]] == SHIPPED_IDS
    assert path.is_file()
