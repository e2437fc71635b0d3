"""``db status`` does not call a corrupted database healthy."""

from __future__ import annotations

import json
from pathlib import Path

import apsw
from click.testing import CliRunner

from runstore.cli import cli


def _corrupted(tmp_path: Path) -> Path:
    path = tmp_path / "bad.db"
    assert CliRunner().invoke(cli, ["--db", str(path), "db", "migrate"]).exit_code == 0
    connection = apsw.Connection(str(path))
    page_size = int(str(connection.pragma("page_size")))
    connection.close()
    data = bytearray(path.read_bytes())
    assert len(data) >= 16 * page_size
    data[4 * page_size : 15 * page_size] = b"\x5a" * (11 * page_size)
    path.write_bytes(bytes(data))
    return path


def test_status_of_a_corrupted_database_fails(tmp_path: Path) -> None:
    path = _corrupted(tmp_path)
    result = CliRunner().invoke(cli, ["--db", str(path), "db", "status"])
    assert result.exit_code == 1, result.output
    assert "healthy" not in result.stdout
    assert len(result.stderr.strip().splitlines()) == 1
    assert "malformed" in result.stderr or "corrupt" in result.stderr


def test_status_json_of_a_corrupted_database(tmp_path: Path) -> None:
    path = _corrupted(tmp_path)
    result = CliRunner().invoke(cli, ["--db", str(path), "--format", "json", "db", "status"])
    assert result.exit_code == 1
    assert json.loads(result.stdout)["healthy"] is False
