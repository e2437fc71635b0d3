"""The test-run commands on a database seeded through the DataStore API."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from runstore.cli import cli
from runstore.layers import build, sqlite
from runstore.services.test_runs import (
    CollectionError,
    DataStore,
    ErrorInfo,
    FileCoverage,
    Outcome,
    Phase,
    PhaseResult,
    RunStart,
    RunStatus,
    StackFrame,
    TestResult,
)
from runstore.testing import make_item

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _failing(nodeid: str, message: str) -> TestResult:
    frame = StackFrame("tests/test_cart.py", 12, "test_total", True)
    error = ErrorInfo(Phase.CALL, "AssertionError", message, f"E   {message}", (frame,))
    return TestResult(
        nodeid=nodeid,
        module_path=nodeid.split("::")[0],
        name=nodeid.split("::", 1)[1],
        phases=(PhaseResult(Phase.SETUP, Outcome.PASSED, 0.5),
                PhaseResult(Phase.CALL, Outcome.FAILED, 40.0)),
        errors=(error,),
    )


def _record(store: DataStore, project: str, minute: int, items: list[TestResult],
            collection: Sequence[CollectionError] = (), status: RunStatus = RunStatus.FAILED,
            coverage: Sequence[FileCoverage] = ()) -> int:
    started = T0.replace(minute=minute)
    run = store.begin_run(RunStart(project, f"inv-{project}-{minute}", started)).unwrap()
    store.record_results(run, items).unwrap()
    if collection:
        store.record_collection_errors(run, collection).unwrap()
    if coverage:
        store.write_coverage(run, coverage).unwrap()
    store.finish_run(run, status, started.replace(second=30)).unwrap()
    return int(run)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """Two runs of ``shop``: the second fixes ``test_total``, adds ``test_new`` and has
    coverage; one run of project ``blog``."""
    path = tmp_path / "runstore.db"
    with build(sqlite(path)) as container:
        store = container.get(DataStore)
        _record(store, "shop", 1, [
            make_item("tests/test_cart.py::test_add", duration_ms=3.0),
            _failing("tests/test_cart.py::test_total", "assert 458 == 457"),
            make_item("tests/test_cart.py::test_slow", duration_ms=900.0),
            make_item("tests/test_rates.py::test_live", Outcome.SKIPPED),
        ], collection=[CollectionError(
            "tests/test_broken.py", "tests/test_broken.py",
            ErrorInfo(Phase.COLLECT, "ModuleNotFoundError",
                      "ModuleNotFoundError: No module named 'nope'"),
        )])
        _record(store, "shop", 2, [
            make_item("tests/test_cart.py::test_add", duration_ms=2.0),
            make_item("tests/test_cart.py::test_total", duration_ms=35.0),
            make_item("tests/test_cart.py::test_slow", duration_ms=800.0),
            make_item("tests/test_cart.py::test_new", duration_ms=1.0),
        ], status=RunStatus.PASSED, coverage=[
            FileCoverage("src/shop/cart.py", 40, 4, 10, 2, 3, (7, 8, 9, 20)),
        ])
        _record(store, "blog", 3, [make_item("tests/test_post.py::test_render")],
                status=RunStatus.PASSED)
    return path


def run(db: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--db", str(db), *args], catch_exceptions=False)


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_show_json_has_the_run_and_every_test(db: Path) -> None:
    document = as_json(run(db, "show", "1", "--format", "json"))
    assert {k: document["run"][k] for k in ("id", "project", "status", "total")} == {
        "id": 1, "project": "shop", "status": "failed", "total": 4
    }
    assert document["run"]["counts"]["failed"] == 1
    assert document["run"]["collection_errors"] == 1
    tests = {t["nodeid"]: t for t in document["tests"]}
    assert set(tests) == {
        "tests/test_cart.py::test_add", "tests/test_cart.py::test_total",
        "tests/test_cart.py::test_slow", "tests/test_rates.py::test_live",
    }
    failed = tests["tests/test_cart.py::test_total"]
    assert failed["outcome"] == "failed"
    assert failed["phase"] == "call"
    assert failed["message"] == "assert 458 == 457"
    assert failed["duration_ms"] == pytest.approx(40.5)
    assert "message" not in tests["tests/test_cart.py::test_add"]
    assert document["collection_errors"] == [{
        "nodeid": "tests/test_broken.py", "phase": "collect",
        "exception_type": "ModuleNotFoundError",
        "message": "ModuleNotFoundError: No module named 'nope'",
    }]


def test_show_text_lists_what_did_not_pass(db: Path) -> None:
    result = run(db, "show", "1", "--project", "shop")
    assert result.exit_code == 0, result.output
    assert "run 1" in result.stdout
    assert "tests/test_cart.py::test_total" in result.stdout
    assert "assert 458 == 457" in result.stdout
    assert "tests/test_broken.py" in result.stdout
    assert "tests/test_cart.py::test_add" not in result.stdout
    assert "tests/test_cart.py::test_add" in run(db, "show", "1", "--all").stdout


def test_latest_needs_a_project_when_there_are_several(db: Path) -> None:
    result = run(db, "show")
    assert result.exit_code == 1
    assert "several projects" in result.stderr
    assert "blog, shop" in result.stderr
    assert as_json(run(db, "show", "latest", "--project", "shop", "--format", "json"))[
        "run"]["id"] == 2


def test_invalid_arguments_are_refused(db: Path) -> None:
    assert run(db, "show", "x").exit_code == 2
    assert run(db, "show", "0").exit_code == 2
    assert run(db, "slowest", "1", "--limit", "0").exit_code == 2
    assert run(db, "prune", "--keep-runs", "0").exit_code == 2
    assert run(db, "runs", "--project", "shop", "--all-projects").exit_code == 2
    missing = run(db, "show", "999")
    assert missing.exit_code == 1
    assert "run '999' not found" in missing.stderr
    other = run(db, "show", "3", "--project", "shop")
    assert other.exit_code == 1
    assert "belongs to project 'blog'" in other.stderr
    unknown = run(db, "flaky", "--project", "nope")
    assert unknown.exit_code == 1
    assert "projects: blog, shop" in unknown.stderr


def test_no_database_is_an_error(tmp_path: Path) -> None:
    result = run(tmp_path / "absent.db", "runs")
    assert result.exit_code == 1
    assert "no runstore database at" in result.stderr
    assert not (tmp_path / "absent.db").exists()


def test_runs_and_trends(db: Path) -> None:
    listed = as_json(run(db, "runs", "--project", "shop", "--format", "json"))
    assert [r["id"] for r in listed["runs"]] == [2, 1]
    assert listed["has_more"] is False
    every = as_json(run(db, "runs", "--all-projects", "--limit", "2", "--format", "json"))
    assert [r["id"] for r in every["runs"]] == [3, 2]
    assert every["has_more"] is True
    trend = as_json(run(db, "trends", "--project", "shop", "--format", "json"))
    assert [(r["run_id"], r["failing"], r["percent_covered"]) for r in trend["runs"]] == [
        (1, 1, None), (2, 0, pytest.approx(100 * (50 - 7) / 50)),
    ]
    assert "shop: last 2 runs" in run(db, "trends", "--project", "shop").stdout


def test_failures_and_new_failures(db: Path) -> None:
    document = as_json(run(db, "failures", "1", "--format", "json"))
    by_node = {f["nodeid"]: f for f in document["failures"]}
    assert set(by_node) == {"tests/test_broken.py", "tests/test_cart.py::test_total"}
    total = by_node["tests/test_cart.py::test_total"]
    assert total["is_new"] is True
    assert total["frames"] == [
        {"path": "tests/test_cart.py", "line": 12, "function": "test_total", "is_project": True}
    ]
    text = run(db, "failures", "1", "--new").stdout
    assert "tests/test_cart.py::test_total" in text
    assert "at tests/test_cart.py:12 in test_total" in text
    assert "no failures" in run(db, "failures", "2", "--project", "shop").stdout


def test_flaky_history_and_node_id_matching(db: Path) -> None:
    flaky = as_json(run(db, "flaky", "--project", "shop", "--format", "json"))
    assert flaky["flaky"] == []  # failed, then fixed: a clean fix is not flaky
    assert "no flaky tests in shop" in run(db, "flaky", "--project", "shop").stdout
    history = as_json(run(db, "history", "test_total", "--project", "shop", "--format", "json"))
    assert history["nodeid"] == "tests/test_cart.py::test_total"
    assert [(h["run_id"], h["outcome"]) for h in history["history"]] == [
        (2, "passed"), (1, "failed")
    ]
    several = run(db, "history", "test_cart.py", "--project", "shop")
    assert several.exit_code == 1
    assert "matches 4 tests" in several.stderr
    assert "tests/test_cart.py::test_add" in several.stderr
    nothing = run(db, "history", "test_nothing", "--project", "shop")
    assert nothing.exit_code == 1
    assert "no test of project 'shop' matches 'test_nothing'" in nothing.stderr


def test_slowest_coverage_and_diff(db: Path) -> None:
    slow = as_json(run(db, "slowest", "2", "--limit", "2", "--format", "json"))
    assert [t["nodeid"] for t in slow["tests"]] == [
        "tests/test_cart.py::test_slow", "tests/test_cart.py::test_total"
    ]
    cover = as_json(run(db, "coverage", "2", "--format", "json"))
    assert cover["files"][0]["path"] == "src/shop/cart.py"
    assert cover["files"][0]["missing_lines"] == [7, 8, 9, 20]
    assert "7-9, 20" in run(db, "coverage", "2").stdout
    none = run(db, "coverage", "1")
    assert none.exit_code == 1
    assert "has no coverage" in none.stderr
    changed = as_json(run(db, "diff", "1", "2", "--format", "json"))
    assert changed == {
        "schema_version": 1, "run_a": 1, "run_b": 2, "newly_failing": [],
        "fixed": ["tests/test_cart.py::test_total"],
        "added": ["tests/test_cart.py::test_new"], "not_run": [],
        "removed": ["tests/test_rates.py::test_live"],
    }


def test_diff_refuses_runs_of_two_projects(db: Path) -> None:
    """Run 3 is ``blog``'s: comparing it with ``shop``'s run 2 would say nothing changed."""
    mixed = run(db, "diff", "2", "3")
    assert mixed.exit_code == 1
    assert "run 2 belongs to project 'shop', run 3 to 'blog'" in mixed.stderr
    assert mixed.stdout == ""
    named = run(db, "diff", "2", "3", "--project", "shop")
    assert named.exit_code == 1
    assert "run 3 belongs to project 'blog', not 'shop'" in named.stderr


def test_prune_dry_run_changes_nothing(db: Path) -> None:
    rehearsed = as_json(run(db, "prune", "--keep-runs", "1", "--dry-run", "--format", "json"))
    assert rehearsed["dry_run"] is True
    assert rehearsed["pruned_runs"] == 1
    assert [r["id"] for r in as_json(run(db, "runs", "--all-projects", "--format", "json"))[
        "runs"]] == [3, 2, 1]
    done = as_json(run(db, "prune", "--keep-runs", "1", "--format", "json"))
    assert (done["pruned_runs"], done["pruned_files"]) == (
        rehearsed["pruned_runs"], rehearsed["pruned_files"]
    )
    assert [r["id"] for r in as_json(run(db, "runs", "--all-projects", "--format", "json"))[
        "runs"]] == [3, 2]
    assert "removed 0 runs" in run(db, "prune", "--keep-runs", "1").stdout


def test_failures_show_every_error_and_the_captured_output_tail(tmp_path: Path) -> None:
    path = tmp_path / "runstore.db"
    item = TestResult(
        nodeid="tests/test_io.py::test_write",
        module_path="tests/test_io.py",
        name="test_write",
        phases=(PhaseResult(Phase.CALL, Outcome.FAILED, 1.0),
                PhaseResult(Phase.TEARDOWN, Outcome.FAILED, 1.0)),
        errors=(ErrorInfo(Phase.CALL, "OSError", "disk full"),
                ErrorInfo(Phase.TEARDOWN, "RuntimeError", "handle left open")),
        stdout="".join(f"line {i}\n" for i in range(20)),
    )
    with build(sqlite(path)) as container:
        _record(container.get(DataStore), "io", 1, [item])
    text = run(path, "failures").stdout
    assert "disk full" in text
    assert "also [teardown] RuntimeError: handle left open" in text
    assert "captured stdout (last 5 lines):" in text
    assert "| line 19" in text
    assert "| line 14" not in text
    shown = run(path, "show", "latest", "test_write").stdout
    assert "FAILED tests/test_io.py::test_write" in shown
    assert "[teardown] RuntimeError: handle left open" in shown
    assert "| line 0" in shown
    document = as_json(run(path, "show", "latest", "tests/test_io.py::test_write",
                           "--format", "json"))
    assert [e["exception_type"] for e in document["test"]["errors"]] == ["OSError",
                                                                        "RuntimeError"]
    assert document["test"]["stdout"].endswith("line 19\n")


@pytest.mark.parametrize("args", [[], ["--all-projects"], ["--project", "shop"]])
def test_runs_on_an_empty_database_says_no_runs_yet(tmp_path: Path, args: list[str]) -> None:
    path = tmp_path / "runstore.db"
    assert run(path, "db", "migrate").exit_code == 0
    text = run(path, "runs", *args)
    assert text.exit_code == 0, text.output
    assert "no runs yet" in text.stdout
    document = as_json(run(path, "runs", *args, "--format", "json"))
    assert (document["runs"], document["has_more"]) == ([], False)


def test_show_names_the_exception_type_once_and_its_json_has_the_traceback(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runstore.db"
    frame = StackFrame("tests/test_io.py", 7, "test_parse", True)
    cause = ErrorInfo(Phase.CALL, "KeyError", "KeyError: 'id'", "Traceback ...\nKeyError: 'id'")
    item = TestResult(
        nodeid="tests/test_io.py::test_parse",
        module_path="tests/test_io.py",
        name="test_parse",
        phases=(PhaseResult(Phase.CALL, Outcome.FAILED, 1.0),
                PhaseResult(Phase.TEARDOWN, Outcome.FAILED, 1.0)),
        errors=(ErrorInfo(Phase.CALL, "ValueError", "ValueError: bad row 3",
                          "Traceback (most recent call last):\n  ...\nValueError: bad row 3",
                          (frame,), cause),
                ErrorInfo(Phase.TEARDOWN, "shop.errors.Leak", "shop.errors.Leak: handle"),
                ErrorInfo(Phase.TEARDOWN, "AssertionError", "assert 1 == 2")),
    )
    with build(sqlite(path)) as container:
        _record(container.get(DataStore), "io", 1, [item])
    shown = run(path, "show", "latest", "test_parse").stdout
    assert "[call] ValueError: bad row 3" in shown
    assert "caused by KeyError: 'id'" in shown
    assert "[teardown] shop.errors.Leak: handle" in shown
    assert "[teardown] AssertionError: assert 1 == 2" in shown
    assert "ValueError: ValueError" not in shown
    assert "Leak: shop.errors.Leak" not in shown
    failures = run(path, "failures").stdout
    assert "ValueError: ValueError" not in failures
    assert "  ValueError: bad row 3" in failures
    document = as_json(run(path, "show", "1", "tests/test_io.py::test_parse", "--format", "json"))
    first = document["test"]["errors"][0]
    assert first["text"] == "Traceback (most recent call last):\n  ...\nValueError: bad row 3"
    assert first["causes"][0]["text"] == "Traceback ...\nKeyError: 'id'"
    listed = as_json(run(path, "failures", "--format", "json"))["failures"][0]
    assert listed["text"] == first["text"]


def test_piped_text_keeps_a_message_as_it_is(tmp_path: Path) -> None:
    """Tabs and ``:name:`` in a failure stay as recorded (rich would expand the tab and
    draw ``:smile:`` as an emoji), so grep finds what the test printed."""
    path = tmp_path / "runstore.db"
    message = "assert 'a\tb' == ':smile:'"
    with build(sqlite(path)) as container:
        _record(container.get(DataStore), "shop", 1,
                [_failing("tests/test_cart.py::test_total[:smile:]", message)])
    result = run(path, "failures")
    assert result.exit_code == 0, result.output
    assert "FAILED tests/test_cart.py::test_total[:smile:]" in result.stdout
    assert f"AssertionError: {message}" in result.stdout


@pytest.mark.parametrize("command", ["show", "failures"])
def test_latest_tilde_n_names_the_run_n_runs_before_the_latest(db: Path, command: str) -> None:
    back_one = as_json(run(db, "--format", "json", command, "latest~1", "--project", "shop"))
    latest = as_json(run(db, "--format", "json", command, "latest", "--project", "shop"))
    assert back_one["run"]["id"] == 1
    assert latest["run"]["id"] == 2
    assert as_json(run(db, "--format", "json", command, "latest~0", "--project", "shop")) == latest


def test_latest_tilde_n_beyond_the_history_says_how_many_runs_there_are(db: Path) -> None:
    result = run(db, "show", "latest~2", "--project", "shop")
    assert result.exit_code == 1
    assert "project 'shop' has 2 runs: latest~2 needs 3" in result.stderr


@pytest.mark.parametrize("bad", ["latest~", "latest~x", "latest~-1", "latest-1"])
def test_a_malformed_run_back_is_a_usage_error(db: Path, bad: str) -> None:
    result = run(db, "show", bad, "--project", "shop")
    assert result.exit_code == 2
    assert "latest~N" in result.stderr


def test_a_negative_number_as_run_points_at_latest_tilde_n(db: Path) -> None:
    result = run(db, "show", "-2")
    assert result.exit_code == 2
    assert "write latest~2" in result.stderr



def test_coverage_file_names_one_file_as_tests_for_does(tmp_path: Path) -> None:
    path = tmp_path / "runstore.db"
    with build(sqlite(path)) as container:
        _record(container.get(DataStore), "shop", 1, [make_item("tests/test_a.py::test_a")],
                status=RunStatus.PASSED, coverage=[
                    FileCoverage("src/pkg/util.py", 10, 1, missing_lines=(3,)),
                    FileCoverage("lib/pkg/util.py", 10, 2, missing_lines=(4, 5)),
                    FileCoverage("pkg/util.py", 5, 0),
                ])
    exact = as_json(run(path, "coverage", "--file", "pkg/util.py", "--format", "json"))
    assert [f["path"] for f in exact["files"]] == ["pkg/util.py"]
    one = as_json(run(path, "coverage", "--file", "lib/pkg/util.py", "--format", "json"))
    assert [f["path"] for f in one["files"]] == ["lib/pkg/util.py"]
    refused = run(path, "coverage", "--file", "util.py")
    assert refused.exit_code == 1
    assert ("'util.py' names 3 measured files: lib/pkg/util.py, pkg/util.py, src/pkg/util.py"
            in refused.stderr)
    document = json.loads(run(path, "--format", "json", "coverage", "--file", "util.py").stdout)
    assert document["candidates"] == ["lib/pkg/util.py", "pkg/util.py", "src/pkg/util.py"]
