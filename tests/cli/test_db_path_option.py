"""A blank or directory ``--db``/``RUNSTORE_DB`` is a usage error naming where it came from."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from runstore.cli import cli


@pytest.mark.parametrize("value", [" ", "DIR"])
def test_runstore_db_from_the_environment_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.chdir(tmp_path)
    value = str(tmp_path) if value == "DIR" else value
    result = CliRunner().invoke(
        cli, ["db", "migrate"], env={"RUNSTORE_DB": value}, catch_exceptions=False
    )
    assert result.exit_code == 2, result.output
    assert "RUNSTORE_DB" in result.stderr
    assert "'--db'" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", [" ", "DIR"])
def test_db_option_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.chdir(tmp_path)
    value = str(tmp_path) if value == "DIR" else value
    result = CliRunner().invoke(cli, ["--db", value, "runs"])
    assert result.exit_code == 2, result.output
    assert "'--db'" in result.stderr


@pytest.mark.parametrize("source", ["--db", "RUNSTORE_DB"])
def test_a_key_value_connection_string_is_a_usage_error_never_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    monkeypatch.chdir(tmp_path)
    conninfo = "host=localhost password=hunter2 dbname=app"
    args, env = (["--db", conninfo], {}) if source == "--db" else ([], {"RUNSTORE_DB": conninfo})
    result = CliRunner().invoke(cli, [*args, "db", "migrate"], env=env, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert "a key=value connection string is not served" in result.stderr
    assert "postgresql://user@host:port/dbname" in result.stderr
    assert "hunter2" not in result.stdout + result.stderr
    assert list(tmp_path.iterdir()) == []  # no SQLite file of that name
