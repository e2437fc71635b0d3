"""Invalid option values are usage errors (exit 2) that name the option."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from runstore.cli import cli


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "runs.db"
    assert CliRunner().invoke(cli, ["--db", str(path), "db", "migrate"]).exit_code == 0
    return path


@pytest.mark.parametrize("limit", ["0", "-1", "1001", "99999999999"])
def test_sessions_list_limit_out_of_range(db: Path, limit: str) -> None:
    result = CliRunner().invoke(cli, ["--db", str(db), "sessions", "list", "--limit", limit])
    assert result.exit_code == 2, result.output
    assert "--limit" in result.stderr


def test_sessions_list_bad_cursor_names_the_option(db: Path) -> None:
    result = CliRunner().invoke(cli, ["--db", str(db), "sessions", "list", "--cursor", "zzz"])
    assert result.exit_code == 2, result.output
    assert "'--cursor'" in result.stderr
    assert "invalid cursor" not in result.stderr
