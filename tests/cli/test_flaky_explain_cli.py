"""``runstore flaky --explain`` and the configured flaky policy of every command that shows
verdicts (``[tool.runstore.flaky]`` of the nearest ``pyproject.toml``).

The database (``_zoo``) has one test per row of the classification table (window newest
first); each test here runs in a folder of its own, with or without a ``pyproject.toml``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _zoo import FLAKY, seed_zoo  # beside this file
from click.testing import CliRunner, Result

from runstore.cli import cli
from runstore.services.test_runs import FLAKY_RULES


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return seed_zoo(tmp_path_factory.mktemp("zoo") / "runstore.db")


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder of its own, inside a git repository top so the search stops there."""
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(db: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--db", str(db), *args], catch_exceptions=False,
                              terminal_width=1000)


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _flaky(db: Path, *args: str) -> set[str]:
    document = as_json(run(db, "--format", "json", "flaky", "--project", "zoo", *args))
    return {f["nodeid"] for f in document["flaky"]}


def test_explain_lists_every_flaky_test_with_each_rule_tried(db: Path, here: Path) -> None:
    document = as_json(run(db, "--format", "json", "flaky", "--project", "zoo", "--explain"))
    assert {t["nodeid"] for t in document["tests"]} == FLAKY
    assert document["preview"] is None
    assert (document["newly_flagged"], document["no_longer_flagged"]) == ([], [])
    assert document["policy"]["window"] == 10
    for test in document["tests"]:
        assert [r["rule"] for r in test["rules"]] == [r.value for r in FLAKY_RULES]
        matched = [r for r in test["rules"] if r["matched"]]
        assert test["classification"] == "flaky"
        assert matched[0]["rule"] == test["because"]["rule"]
        assert matched[0]["summary"] == test["because"]["summary"]
        assert all(r["summary"] for r in test["rules"])
        assert all(e["outage"] is False for e in test["window"])
    oscillating = next(t for t in document["tests"] if t["nodeid"] == "t::test_oscillating")
    assert [e["outcome"] for e in oscillating["window"]] == [
        "passed", "failed", "passed", "failed"]
    assert [e["run_id"] for e in oscillating["window"]] == [4, 3, 2, 1]


def test_a_preview_says_what_a_changed_threshold_flags(db: Path, here: Path) -> None:
    document = as_json(run(db, "--format", "json", "flaky", "--project", "zoo", "--explain",
                           "--window", "3"))
    under = _flaky(db, "--window", "3")
    assert under != FLAKY  # the window of 3 changes something
    assert set(document["no_longer_flagged"]) == FLAKY - under
    assert set(document["newly_flagged"]) == under - FLAKY
    assert document["preview"]["window"] == 3
    for test in document["tests"]:
        assert (test["preview"]["classification"] == "flaky") == (test["nodeid"] in under)
    oscillating = next(t for t in document["tests"] if t["nodeid"] == "t::test_oscillating")
    assert oscillating["preview"]["classification"] == "recovered"  # P F P
    assert not any(r["matched"] for r in oscillating["preview"]["rules"])


def test_explain_text_shows_the_window_the_rules_and_the_preview(db: Path, here: Path) -> None:
    result = run(db, "flaky", "--project", "zoo", "--explain", "--evidence", "passed_on_rerun",
                 "t::test_oscillating")
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "t::test_oscillating\n  window (newest first):\n    run 4" in text
    assert "verdict: flaky because oscillation" in text
    assert "preview: recovered because fixed" in text
    assert "    oscillation      no       not in the policy's evidence" in text
    assert "would no longer flag: t::test_oscillating, t::test_oscillating_now_failing" in text


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--explain", "--window", "0"], "'--window'"),
        (["--explain", "--window", "4", "--min-runs", "5"], "'--min-runs'"),
        (["--flip-rate", "2"], "'--flip-rate'"),
        (["--explain", "--evidence", "fixed"], "'fixed' is not a flaky rule"),
        (["t::test_oscillating"], "NODEID is given with --explain only"),
    ],
)
def test_a_bad_threshold_is_a_usage_error(
    db: Path, here: Path, args: list[str], words: str
) -> None:
    result = run(db, "flaky", "--project", "zoo", *args)
    assert result.exit_code == 2, result.output
    assert words in result.output


def test_every_command_judges_under_the_configured_policy(db: Path, here: Path) -> None:
    default = {
        "show": as_json(run(db, "--format", "json", "show", "4"))["tests"],
        "triage": as_json(run(db, "--format", "json", "triage", "4"))["flaky"],
    }
    assert {t["nodeid"] for t in default["triage"]} & FLAKY
    (here / "pyproject.toml").write_text(
        "[tool.runstore.flaky]\nwindow = 3\nevidence = ['oscillation']\n", encoding="utf-8")
    assert _flaky(db) == {"t::test_oscillating_now_failing"}  # F P F: still two streaks
    assert _flaky(db) == _flaky(db, "--window", "3")  # the options start from the file
    shown = {t["nodeid"]: t for t in as_json(run(db, "--format", "json", "show", "4"))["tests"]}
    assert shown["t::test_oscillating"]["classification"] == "recovered"
    assert shown["t::test_passed_on_rerun"]["classification"] == "stable"
    failures = as_json(run(db, "--format", "json", "failures", "4"))["failures"]
    assert {f["nodeid"]: f["classification"] for f in failures
            if f["nodeid"] == "t::test_oscillating_now_failing"} == {
        "t::test_oscillating_now_failing": "flaky"}
    triage = as_json(run(db, "--format", "json", "triage", "4"))["flaky"]
    assert {t["nodeid"] for t in triage} == {"t::test_oscillating_now_failing"}
    explained = as_json(run(db, "--format", "json", "flaky", "--project", "zoo", "--explain"))
    assert explained["policy"]["evidence"] == ["oscillation"]


@pytest.mark.parametrize("command", [["flaky", "--project", "zoo"], ["show", "4"],
                                     ["failures", "4"], ["triage", "4"]])
def test_a_bad_configuration_is_a_usage_error_naming_file_and_key(
    db: Path, here: Path, command: list[str]
) -> None:
    (here / "pyproject.toml").write_text("[tool.runstore.flaky]\nwindow = 0\n", encoding="utf-8")
    result = run(db, *command)
    assert result.exit_code == 2, result.output
    assert f"{here / 'pyproject.toml'}: tool.runstore.flaky.window: must be in 1..50" in (
        " ".join(result.output.split()))
    document = run(db, "--format", "json", *command)
    assert document.exit_code == 2
    assert "tool.runstore.flaky.window" in json.loads(document.stdout)["error"]


def test_the_configuration_is_found_walking_up_but_not_above_the_git_top(
    db: Path, here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (here / "pyproject.toml").write_text("[tool.runstore.flaky]\nevidence = []\n",
                                         encoding="utf-8")
    deep = here / "src" / "pkg"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert _flaky(db) == set()
    (here / ".git").rmdir()
    inner = here / "src"
    (inner / ".git").mkdir()
    assert _flaky(db) == FLAKY  # the file is above the repository's top: not read
