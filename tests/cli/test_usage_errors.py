"""Invalid option values are usage errors (exit 2) that name the option."""

from __future__ import annotations

import json
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


@pytest.mark.parametrize(
    "args",
    [
        ["--format", "json", "show", "x"],
        ["--format", "json", "runs", "--limit", "0"],
        ["runs", "--limit", "0", "--format", "json"],
        ["sessions", "list", "--format=json", "--cursor", "zzz"],
        ["--format", "json", "prune", "--keep-runs", "1", "--max-age-days", "nan"],
        ["--format", "json", "no-such-command"],
        ["--format", "json", "--no-such-option", "runs"],
    ],
)
def test_usage_errors_in_json_mode_print_a_json_error(db: Path, args: list[str]) -> None:
    result = CliRunner().invoke(cli, ["--db", str(db), *args])
    assert result.exit_code == 2, result.output
    document = json.loads(result.stdout)
    assert set(document) == {"schema_version", "error"}
    assert document["error"]
    assert "Usage:" in result.stderr


_LONG_ID = "s" * 257
_HUGE = "99999999999999999999999"


@pytest.mark.parametrize(
    "args",
    [
        ["show", _HUGE],
        ["show", str(2**63)],
        ["show", "\u00b2"],  # a digit to str.isdigit, not to int()
        ["failures", _HUGE],
        ["slowest", _HUGE],
        ["coverage", _HUGE],
        ["diff", "1", _HUGE],
        ["diff", _HUGE, "1"],
        ["prune", "--keep-runs", str(2**63), "--dry-run"],
        ["prune", "--keep-runs", "-1"],
        ["runs", "--project", ""],
        ["runs", "--project", "  "],
        ["flaky", "--project", "\udcff"],  # argv bytes that are not UTF-8
        ["history", ""],
        ["history", "\udcff"],
        ["show", "latest", " "],
        ["sessions", "show", ""],
        ["sessions", "show", _LONG_ID],
        ["sessions", "tree", _LONG_ID],
        ["sessions", "export", ""],
        ["sessions", "context", "s", "--leaf", _LONG_ID],
        ["sessions", "list", "--cwd", "\udcff"],
        ["sessions", "list", "--cursor", ""],
    ],
)
def test_arguments_no_store_could_hold_are_usage_errors(db: Path, args: list[str]) -> None:
    result = CliRunner().invoke(cli, ["--db", str(db), *args], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert "Invalid value" in result.stderr
    assert result.stdout == ""


def test_sessions_import_id_too_long_is_a_usage_error(db: Path, tmp_path: Path) -> None:
    source = tmp_path / "s.jsonl"
    source.write_text("{}\n", encoding="utf-8")
    result = CliRunner().invoke(
        cli, ["--db", str(db), "sessions", "import", "--id", _LONG_ID, str(source)]
    )
    assert result.exit_code == 2, result.output
    assert "'--id'" in result.stderr


def test_usage_errors_in_text_mode_print_nothing_on_stdout(db: Path) -> None:
    result = CliRunner().invoke(cli, ["--db", str(db), "runs", "--limit", "0"])
    assert result.exit_code == 2
    assert result.stdout == ""


@pytest.mark.parametrize("order", [["--strict", "--lenient"], ["--lenient", "--strict"]])
def test_strict_and_lenient_together_are_refused(
    tmp_path: Path, order: list[str]
) -> None:
    source = tmp_path / "s.jsonl"
    source.write_text(
        json.dumps({"type": "session", "version": 3, "id": "s",
                    "timestamp": "2025-11-30T10:00:00.000Z", "cwd": "/w"}) + "\n",
        encoding="utf-8",
    )
    path = tmp_path / "new.db"
    result = CliRunner().invoke(cli, ["--db", str(path), "sessions", "import", *order, str(source)])
    assert result.exit_code == 2, result.output
    assert "--strict and --lenient" in result.stderr
    assert not path.exists()


@pytest.mark.parametrize("flag", [[], ["--strict"], ["--lenient"]])
def test_one_mode_flag_still_imports(tmp_path: Path, flag: list[str]) -> None:
    source = tmp_path / "s.jsonl"
    source.write_text(
        json.dumps({"type": "session", "version": 3, "id": "s",
                    "timestamp": "2025-11-30T10:00:00.000Z", "cwd": "/w"}) + "\n",
        encoding="utf-8",
    )
    path = tmp_path / "new.db"
    result = CliRunner().invoke(
        cli, ["--db", str(path), "--format", "json", "sessions", "import", *flag, str(source)]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["mode"] == ("lenient" if flag == ["--lenient"] else "strict")
