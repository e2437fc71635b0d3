"""``prune --max-age-days`` refuses values that are not a usable number of days."""

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


@pytest.mark.parametrize(
    "days", ["1e308", "1e999", "inf", "-inf", "nan", "-1", "0", "1000001", "two", ""]
)
@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]], ids=["real", "dry"])
def test_unusable_max_age_is_a_usage_error(db: Path, days: str, dry_run: list[str]) -> None:
    result = CliRunner().invoke(
        cli, ["--db", str(db), "prune", "--keep-runs", "1", "--max-age-days", days, *dry_run]
    )
    assert result.exit_code == 2, result.output
    assert "--max-age-days" in result.stderr
    assert f"{days!r} is not a number of days" in result.stderr  # as typed, not as parsed
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_large_but_usable_max_age_works(db: Path) -> None:
    result = CliRunner().invoke(
        cli, ["--db", str(db), "prune", "--keep-runs", "1", "--max-age-days", "1000000"]
    )
    assert result.exit_code == 0, result.output
