"""show, flaky, failures, history and diff render each verdict with its "because", the
failing streak, the run's selection and its subtest totals, in text and in JSON.

The database (``_zoo``) has one test per row of the classification table (window newest
first).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _zoo import FLAKY, VERDICTS, seed_zoo  # beside this file
from click.testing import CliRunner, Result

from runstore.cli import cli


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return seed_zoo(tmp_path_factory.mktemp("zoo") / "runstore.db")


def run(db: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--db", str(db), *args], catch_exceptions=False,
                              terminal_width=1000)


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_show_json_gives_every_items_verdict_and_because(db: Path) -> None:
    tests = {t["nodeid"]: t for t in as_json(run(db, "show", "4", "--format", "json"))["tests"]}
    assert {n: (t["classification"], t["because"]["rule"]) for n, t in tests.items()
            if n in VERDICTS} == VERDICTS
    streak = tests["t::test_streak"]
    assert streak["window"] == ["failed", "failed", "passed"]
    assert streak["because"]["run_ids"] == [3, 4]
    assert all(t["because"]["summary"] for t in tests.values())


def test_show_text_prints_each_verdict_with_its_because(db: Path) -> None:
    def rows(*args: str) -> dict[str, str]:
        return {line.split()[1]: line for line in run(db, "show", "4", *args).stdout.splitlines()
                if len(line.split()) > 2 and line.split()[1] in VERDICTS}

    listed, every = rows(), rows("--all")
    for nodeid, (verdict, rule) in VERDICTS.items():
        assert f" {verdict} " in every[nodeid], every[nodeid]
        assert f" {rule}: " in every[nodeid], every[nodeid]
    assert set(every) - set(listed) == {"t::test_stable"}  # passing and stable: --all only
    text = run(db, "show", "4").stdout
    assert "subtests: 2 passed, 1 failed, 1 skipped" in text


def test_show_of_one_item_gives_its_verdict_and_failed_attempts(db: Path) -> None:
    text = run(db, "show", "4", "test_passed_on_rerun").stdout
    assert "verdict: flaky, because passed_on_rerun: " in text
    assert "attempt 1 of 2 (rerun): failed" in text
    assert "[call] AssertionError: timed out" in text
    document = as_json(run(db, "show", "4", "test_passed_on_rerun", "--format", "json"))
    assert document["test"]["because"]["rule"] == "passed_on_rerun"
    (attempt,) = document["test"]["earlier_attempts"]
    assert (attempt["outcome"], attempt["source"]) == ("failed", "rerun")
    assert [e["message"] for e in attempt["errors"]] == ["timed out"]


def test_flaky_lists_only_tests_with_flaky_evidence_and_why(db: Path) -> None:
    listed = as_json(run(db, "flaky", "--project", "zoo", "--format", "json"))["flaky"]
    assert {f["nodeid"]: f["because"]["rule"] for f in listed} == {
        n: VERDICTS[n][1] for n in FLAKY}
    text = run(db, "flaky", "--project", "zoo").stdout
    assert "t::test_fixed" not in text
    assert "t::test_clean_break_and_fix" not in text
    for nodeid in FLAKY:
        line = next(row for row in text.splitlines() if nodeid in row)
        assert VERDICTS[nodeid][1] in line
        assert "run" in line  # the runs the rule rests on
    same = as_json(run(db, "flaky", "--project", "commit", "--format", "json"))["flaky"]
    assert [(f["nodeid"], f["because"]["rule"], f["because"]["run_ids"]) for f in same] == [
        ("c::test_same_commit", "same_commit", [6, 7])]


def test_failures_show_the_streak_and_its_first_message(db: Path) -> None:
    failures = {f["nodeid"]: f for f in as_json(run(db, "failures", "5", "--format", "json"))[
        "failures"]}
    streak = failures["t::test_streak"]
    assert (streak["streak"], streak["failing_since"]) == (3, 3)
    assert streak["streak_message"] == "assert 3 == 0 in run 3"
    assert (streak["classification"], streak["because"]["rule"]) == (
        "persistent_failure", "failing_streak")
    text = run(db, "failures", "5").stdout
    assert ("failing since run 3, 3 runs in a row; "
            "the streak began with: assert 3 == 0 in run 3") in text
    assert "because failing_streak: " in text
    first = {f["nodeid"]: f for f in as_json(run(db, "failures", "4", "--format", "json"))[
        "failures"]}["t::test_first_failure"]
    assert (first["streak"], first["failing_since"]) == (1, 4)
    assert "failing since this run (1 run)" in run(db, "failures", "4").stdout


def test_history_rows_keep_the_failure_message(db: Path) -> None:
    rows = as_json(run(db, "history", "t::test_streak", "--project", "zoo",
                       "--format", "json"))["history"]
    assert [(r["run_id"], r["outcome"], r["message"]) for r in rows] == [
        (5, "failed", "assert 5 == 0 in run 5"), (4, "failed", "assert 4 == 0 in run 4"),
        (3, "failed", "assert 3 == 0 in run 3"), (2, "passed", None)]
    assert rows[0]["git_commit"] == "c0ffee5"
    assert rows[0]["git_dirty"] is False
    rerun = as_json(run(db, "history", "test_passed_on_rerun", "--project", "zoo",
                        "--format", "json"))["history"]
    assert rerun[0]["rerun_failures"] == 1
    text = run(db, "history", "t::test_streak", "--project", "zoo").stdout
    assert "assert 4 == 0 in run 4" in text


def test_show_and_diff_know_a_selection_from_a_removal(db: Path) -> None:
    document = as_json(run(db, "show", "5", "--format", "json"))
    assert document["run"]["selection"] == {
        "args": ["t.py"], "keyword": "streak or stable", "markexpr": None,
        "last_failed": False, "failed_first": False, "maxfail": 0, "deselected": 8,
        "collected": None, "is_partial": True}
    assert "selection: t.py -k 'streak or stable' (8 deselected)" in run(db, "show", "5").stdout
    subtests = as_json(run(db, "show", "4", "--format", "json"))["run"]["subtests"]
    assert subtests == {"passed": 2, "failed": 1, "skipped": 1}
    changed = as_json(run(db, "diff", "4", "5", "--format", "json"))
    assert changed["removed"] == []
    assert "t::test_fixed" in changed["not_run"]
    text = run(db, "diff", "4", "5").stdout
    assert f"not run: {len(changed['not_run'])}" in text
    assert "removed: 0" in text
