"""Reading commands refuse a file that is not already a runstore database, or whose schema is
older than this code reads, untouched; reading a runstore database changes nothing."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner

from runstore.cli import cli

READ_COMMANDS = [
    ["runs"],
    ["show"],
    ["failures"],
    ["flaky"],
    ["history", "x"],
    ["slowest"],
    ["coverage"],
    ["trends"],
    ["report", "-o", "-"],
    ["diff", "1", "2"],
    ["prune", "--keep-runs", "5", "--dry-run"],
    ["prune", "--keep-runs", "5"],
    ["sessions", "list"],
    ["sessions", "show", "s"],
    ["sessions", "context", "s"],
    ["sessions", "tree", "s"],
    ["sessions", "export", "s"],
]


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _foreign(path: Path) -> None:
    connection = apsw.Connection(str(path))
    connection.execute("CREATE TABLE mine (x INTEGER)")
    connection.close()


@pytest.mark.parametrize("make", [_empty, _foreign], ids=["empty", "foreign"])
@pytest.mark.parametrize("args", READ_COMMANDS, ids=lambda a: "-".join(a))
def test_a_read_command_leaves_a_non_runstore_file_alone(
    tmp_path: Path, make: object, args: list[str]
) -> None:
    path = tmp_path / "other.db"
    make(path)  # type: ignore[operator]
    path.chmod(0o640)
    before = path.read_bytes()
    result = CliRunner().invoke(cli, ["--db", str(path), *args])
    assert result.exit_code == 1, result.output
    if make is _empty:
        assert f"no runstore database at {path}" in result.stderr
        assert "runstore db migrate" in result.stderr
    else:  # neither recording nor migrating would make another program's file one
        assert f"{path} is not a runstore database" in result.stderr
        assert "another program's table (mine)" in result.stderr
    assert path.read_bytes() == before
    assert path.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]


def test_a_missing_file_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "none.db"
    result = CliRunner().invoke(cli, ["--db", str(path), "runs"])
    assert result.exit_code == 1
    assert f"no runstore database at {path}" in result.stderr
    assert not path.exists()


def test_migrate_still_creates_the_database(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    _empty(path)
    result = CliRunner().invoke(cli, ["--db", str(path), "db", "migrate"])
    assert result.exit_code == 0, result.output
    listed = CliRunner().invoke(cli, ["--db", str(path), "sessions", "list"])
    assert listed.exit_code == 0, listed.output


def test_a_read_command_does_not_migrate_an_older_database(tmp_path: Path) -> None:
    fixture = Path(__file__).parents[1] / "migrations" / "fixtures"
    path = tmp_path / "old.db"
    path.write_bytes(next(fixture.glob("schema_0001_*.db")).read_bytes())
    before = path.read_bytes()
    for args in READ_COMMANDS[:4]:
        result = CliRunner().invoke(cli, ["--db", str(path), *args])
        assert result.exit_code == 1, result.output
        assert "lacks migrations" in result.stderr
        assert "runstore db migrate" in result.stderr
        assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.db"]


def test_reading_a_runstore_database_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    assert CliRunner().invoke(cli, ["--db", str(path), "db", "migrate"]).exit_code == 0
    before = path.read_bytes()
    for args in (["runs"], ["sessions", "list"], ["prune", "--keep-runs", "5", "--dry-run"]):
        result = CliRunner().invoke(cli, ["--db", str(path), *args])
        assert result.exit_code in (0, 1), result.output
        assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.db"]
