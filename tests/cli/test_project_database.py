"""Without --db or RUNSTORE_DB the CLI uses the project's database, found walking up."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from runstore.cli import cli
from runstore.cli._discover import find_project_database
from runstore.layers import build, sqlite
from runstore.services.test_runs import DataStore, RunStart, RunStatus
from runstore.testing import make_item

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _database(folder: Path, project: str) -> Path:
    """``folder/.runstore/runstore.db`` holding one passing run of ``project``."""
    path = folder / ".runstore" / "runstore.db"
    with build(sqlite(path)) as container:
        store = container.get(DataStore)
        run = store.begin_run(RunStart(project, f"inv-{project}", T0)).unwrap()
        store.record_results(run, [make_item("tests/test_a.py::test_a")]).unwrap()
        store.finish_run(run, RunStatus.PASSED, T0.replace(second=5)).unwrap()
    return path


def _here(folder: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> Result:
    folder.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(folder)
    monkeypatch.delenv("RUNSTORE_DB", raising=False)
    return CliRunner().invoke(cli, list(args), catch_exceptions=False, terminal_width=1000)


def test_a_subfolder_finds_the_projects_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = _database(tmp_path, "shop")
    result = _here(tmp_path / "tests" / "unit", monkeypatch, "--format", "json", "runs")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["project"] == "shop"
    status = _here(tmp_path / "tests" / "unit", monkeypatch, "--format", "json", "db", "status")
    document = json.loads(status.stdout)
    assert (document["database"], document["database_source"]) == (str(found), "found")
    assert not (tmp_path / "tests" / "unit" / ".runstore").exists()


def test_the_nearest_database_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _database(tmp_path, "outer")
    inner = _database(tmp_path / "packages" / "inner", "inner")
    assert find_project_database(str(tmp_path / "packages" / "inner" / "src")) == str(inner)


@pytest.mark.parametrize("marker", ["directory", "file"])
def test_the_search_stops_at_the_top_of_a_git_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, marker: str
) -> None:
    _database(tmp_path, "someone-else")
    repo = tmp_path / "repo"
    repo.mkdir()
    if marker == "directory":
        (repo / ".git").mkdir()
    else:  # a worktree or a submodule
        (repo / ".git").write_text("gitdir: ../elsewhere\n", encoding="utf-8")
    assert find_project_database(str(repo / "tests")) is None
    result = _here(repo / "tests", monkeypatch, "runs")
    assert result.exit_code == 1
    assert "no runstore database at .runstore/runstore.db" in result.stderr
    own = _database(repo, "repo")
    assert find_project_database(str(repo / "tests")) == str(own)


def test_the_option_and_the_environment_win_over_the_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _database(tmp_path, "found")
    other = _database(tmp_path / "elsewhere", "other")
    by_option = _here(tmp_path / "sub", monkeypatch, "--db", str(other), "--format", "json",
                      "db", "status")
    assert json.loads(by_option.stdout)["database_source"] == "--db"
    by_env = CliRunner().invoke(cli, ["--format", "json", "runs"],
                                env={"RUNSTORE_DB": str(other)}, catch_exceptions=False)
    assert json.loads(by_env.stdout)["project"] == "other"


def test_help_and_db_status_name_the_file_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = _database(tmp_path, "shop")
    helped = _here(tmp_path / "deep" / "down", monkeypatch, "--help")
    assert helped.exit_code == 0
    assert f"now: {found} (found walking up from the current folder)" in helped.stdout
    status = _here(tmp_path / "deep" / "down", monkeypatch, "db", "status")
    assert status.exit_code == 0, status.output
    assert f"database: {found} (found walking up from the current folder)" in status.stdout


def test_db_status_prints_times_as_iso_8601(tmp_path: Path) -> None:
    path = _database(tmp_path, "shop")
    text = CliRunner().invoke(cli, ["--db", str(path), "db", "status"]).stdout
    assert "applied_at_ms" not in text
    assert re.search(r"0001 \S+  applied \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", text), text
    document = json.loads(
        CliRunner().invoke(cli, ["--db", str(path), "--format", "json", "db", "status"]).stdout
    )
    applied = document["migrations"]["applied"][0]
    assert datetime.fromisoformat(applied["applied_at"]).timestamp() * 1000 == applied[
        "applied_at_ms"]
