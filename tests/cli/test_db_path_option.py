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
