"""``runstore._config``: ``[tool.runstore]`` of ``pyproject.toml`` read into settings."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from returns.result import Failure, Success

from runstore._config import ConfigError, RunstoreConfig, find_config, read_config
from runstore.services.test_runs import DEFAULT_FLAKY_POLICY, EvidenceRule, FlakyPolicy


def _write(folder: Path, text: str) -> str:
    path = folder / "pyproject.toml"
    path.write_text(text, encoding="utf-8")
    return os.fspath(path)


def test_no_file_and_no_table_are_the_defaults(tmp_path: Path) -> None:
    assert read_config(None) == Success(RunstoreConfig())
    assert read_config(os.fspath(tmp_path / "pyproject.toml")) == Success(RunstoreConfig())
    path = _write(tmp_path, "[project]\nname = 'x'\n")
    assert read_config(path) == Success(RunstoreConfig(path))
    assert RunstoreConfig().flaky == DEFAULT_FLAKY_POLICY


def test_every_key_is_read(tmp_path: Path) -> None:
    path = _write(tmp_path, """
[tool.runstore]
quarantine_file = "ci/q.toml"

[tool.runstore.flaky]
window = 20
min_runs = 5
flip_rate = 0.25
evidence = ["oscillation", "same_commit"]
outage_share = 0.8
outage_min_tests = 3
""")
    assert read_config(path) == Success(RunstoreConfig(
        path,
        FlakyPolicy(20, 5, 0.25, frozenset({EvidenceRule.OSCILLATION, EvidenceRule.SAME_COMMIT}),
                    0.8, 3),
        "ci/q.toml",
    ))


@pytest.mark.parametrize(
    ("text", "key", "words"),
    [
        ("[tool.runstore.flaky]\nwindow = 0\n", "tool.runstore.flaky.window", "1..50"),
        ("[tool.runstore.flaky]\nwindow = 51\n", "tool.runstore.flaky.window", "1..50"),
        ("[tool.runstore.flaky]\nwindow = '10'\n", "tool.runstore.flaky.window", "integer"),
        ("[tool.runstore.flaky]\nwindow = 4\nmin_runs = 5\n", "tool.runstore.flaky.min_runs",
         "1..4"),
        ("[tool.runstore.flaky]\nflip_rate = 2\n", "tool.runstore.flaky.flip_rate", "0.0..1.0"),
        ("[tool.runstore.flaky]\noutage_share = true\n", "tool.runstore.flaky.outage_share",
         "0.0..1.0"),
        ("[tool.runstore.flaky]\noutage_min_tests = 0\n",
         "tool.runstore.flaky.outage_min_tests", "1.."),
        ("[tool.runstore.flaky]\nevidence = ['fixed']\n", "tool.runstore.flaky.evidence",
         "'fixed' is not a flaky rule (passed_on_rerun, flipped_in_run, same_code,"),
        ("[tool.runstore.flaky]\nevidence = 'oscillation'\n", "tool.runstore.flaky.evidence",
         "array"),
        ("[tool.runstore.flaky]\nevidence = ['same_code', 'oscillation', 'same_code']\n",
         "tool.runstore.flaky.evidence", "'same_code' is given twice"),
        ("[tool.runstore.flaky]\nwindw = 3\n", "tool.runstore.flaky.windw",
         "keys: window, min_runs"),
        ("[tool.runstore]\nflaky = 3\n", "tool.runstore.flaky", "table"),
        ("[tool.runstore]\nflakey = {}\n", "tool.runstore.flakey", "keys: flaky"),
        ("[tool]\nrunstore = 1\n", "tool.runstore", "table"),
        ("[tool.runstore]\nquarantine_file = ''\n", "tool.runstore.quarantine_file", "path"),
        ("[tool.runstore\n", "", "cannot be read as TOML"),
    ],
)
def test_a_bad_value_names_the_file_the_key_and_what_is_allowed(
    tmp_path: Path, text: str, key: str, words: str
) -> None:
    path = _write(tmp_path, text)
    result = read_config(path)
    assert isinstance(result, Failure), result
    error = result.failure()
    assert isinstance(error, ConfigError)
    assert (error.path, error.key) == (path, key)
    assert words in error.reason
    assert str(error).startswith(f"{path}: {key}" if key else path)


def test_no_evidence_rule_turns_flaky_detection_off(tmp_path: Path) -> None:
    path = _write(tmp_path, "[tool.runstore.flaky]\nevidence = []\n")
    assert read_config(path) == Success(RunstoreConfig(
        path, FlakyPolicy(evidence=frozenset())))


def test_the_nearest_file_wins_and_the_search_stops_at_the_git_top(tmp_path: Path) -> None:
    outer = _write(tmp_path, "")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    deep = repo / "a" / "b"
    deep.mkdir(parents=True)
    assert find_config(os.fspath(deep)) is None  # the outer file is above the git top
    inner = _write(repo / "a", "")
    assert find_config(os.fspath(deep)) == inner
    (repo / ".git").rmdir()
    os.remove(inner)
    assert find_config(os.fspath(deep)) == outer
