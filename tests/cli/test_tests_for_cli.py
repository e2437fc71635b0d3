"""``runstore tests-for PATH[:LINE]``: text and JSON, paths as stored, by their last
components or on disk, the hint without per-test coverage, and the JSON schema."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner, Result

from runstore.cli import cli
from runstore.cli._tests_for import MAX_SHOWN_RANGES, split_location
from runstore.layers import build, sqlite
from runstore.services.test_runs import (
    DataStore,
    FileCoverage,
    RunStart,
    RunStatus,
    TestLines,
)
from runstore.testing import make_item

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _run(store: DataStore, minute: int, rows: list[TestLines], project: str = "shop") -> int:
    run = store.begin_run(RunStart(project, f"inv-{minute}", T0.replace(minute=minute))).unwrap()
    store.record_results(run, [make_item(n) for n in sorted({r.nodeid for r in rows})]).unwrap()
    store.write_coverage(run, [FileCoverage(p, 10, 1) for p in sorted({r.path for r in rows})])
    store.write_test_coverage(run, rows).unwrap()
    store.finish_run(run, RunStatus.PASSED, T0.replace(minute=minute, second=30)).unwrap()
    return int(run)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project folder with its database in ``.runstore``: run 1 and run 2 measured per
    test, and a file on disk."""
    folder = tmp_path / "shop"
    (folder / "src" / "shop").mkdir(parents=True)
    (folder / "src" / "shop" / "cart.py").write_text("x = 1\n", encoding="utf-8")
    with build(sqlite(folder / ".runstore" / "runstore.db")) as c:
        store = c.get(DataStore)
        _run(store, 1, [
            TestLines("tests/test_cart.py::test_total", "src/shop/cart.py", (1, 2, 3, 10)),
            TestLines("tests/test_cart.py::test_old", "src/shop/cart.py", (2,)),
            TestLines("tests/test_tax.py::test_rate", "src/shop/tax.py", (4,)),
            TestLines("tests/test_tax.py::test_rate", "src/other/cart.py", (1,)),
        ])
        _run(store, 2, [
            TestLines("tests/test_cart.py::test_total", "src/shop/cart.py",
                      tuple(range(1, 200, 2))),  # 100 single-line ranges
        ])
    return folder


def _invoke(folder: Path, *args: str, cwd: Path | None = None) -> Result:
    with contextlib.chdir(cwd or folder.parent):
        return CliRunner().invoke(
            cli, ["--db", str(folder / ".runstore" / "runstore.db"), *args],
            catch_exceptions=False,
        )


def _json(folder: Path, *args: str, cwd: Path | None = None) -> Any:
    result = _invoke(folder, "--format", "json", "tests-for", *args, cwd=cwd)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    _validate(document)
    return document


def _validate(document: Any) -> None:
    from importlib import resources

    schema = json.loads((resources.files("runstore.cli") / "schemas" / "tests-for.json")
                        .read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(schema).validate(document)


def test_json_lists_each_test_with_its_newest_run_and_bounded_lines(project: Path) -> None:
    document = _json(project, "src/shop/cart.py")
    assert (document["project"], document["path"], document["line"]) == (
        "shop", "src/shop/cart.py", None)
    assert document["runs"] == [2, 1]
    total, old = document["tests"]
    assert (total["nodeid"], total["run_id"], total["line_count"]) == (
        "tests/test_cart.py::test_total", 2, 100)
    assert total["lines"] == ",".join(str(n) for n in range(1, 2 * MAX_SHOWN_RANGES, 2))
    assert total["lines_truncated"] is True
    assert old == {"nodeid": "tests/test_cart.py::test_old", "run_id": 1, "lines": "2",
                   "lines_truncated": False, "line_count": 1}
    assert document["has_more"] is False


def test_a_line_narrows_to_the_tests_whose_newest_run_executed_it(project: Path) -> None:
    assert [t["nodeid"] for t in _json(project, "src/shop/cart.py:3")["tests"]] == [
        "tests/test_cart.py::test_total"]
    # run 2 is newer and test_total did not execute line 10 there
    assert _json(project, "src/shop/cart.py:10")["tests"] == []
    only = _json(project, "src/shop/cart.py:2")
    assert [(t["nodeid"], t["run_id"]) for t in only["tests"]] == [
        ("tests/test_cart.py::test_old", 1)]
    assert _json(project, "src/shop/cart.py", "--runs", "1")["runs"] == [2]
    limited = _json(project, "src/shop/cart.py", "--limit", "1")
    assert (len(limited["tests"]), limited["has_more"]) == (1, True)


def test_a_path_by_its_last_components_or_on_disk(project: Path) -> None:
    assert _json(project, "tax.py")["path"] == "src/shop/tax.py"
    assert _json(project, "shop/cart.py:3")["path"] == "src/shop/cart.py"
    on_disk = project / "src" / "shop" / "cart.py"
    assert _json(project, f"{on_disk}:3")["path"] == "src/shop/cart.py"
    assert _json(project, "cart.py:3", cwd=on_disk.parent)["path"] == "src/shop/cart.py"
    # a file measured but not executed by any test is an empty list, not a refusal
    unexecuted = _json(project, "src/other/cart.py:5")
    assert (unexecuted["path"], unexecuted["tests"]) == ("src/other/cart.py", [])


def test_a_path_naming_several_files_lists_them(project: Path) -> None:
    result = _invoke(project, "--format", "json", "tests-for", "cart.py:1", cwd=project)
    assert result.exit_code == 1
    assert json.loads(result.stdout)["candidates"] == ["src/other/cart.py", "src/shop/cart.py"]


def test_text_names_the_runs_and_lines(project: Path) -> None:
    result = _invoke(project, "tests-for", "src/shop/cart.py:2")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "1 test executed src/shop/cart.py:2 (newest first; read 2 runs: 2, 1)"
    assert lines[2].split() == ["1", "tests/test_cart.py::test_old", "2"]
    empty = _invoke(project, "tests-for", "src/shop/cart.py:10")
    assert empty.stdout.startswith("0 tests executed src/shop/cart.py:10")


def test_without_per_test_coverage_it_says_how_to_record_it(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    with build(sqlite(db)) as c:
        store = c.get(DataStore)
        run = store.begin_run(RunStart("plain", "inv-1", T0)).unwrap()
        store.write_coverage(run, [FileCoverage("src/a.py", 3, 0)]).unwrap()
    runner = CliRunner()
    text = runner.invoke(cli, ["--db", str(db), "tests-for", "src/a.py"])
    assert text.exit_code == 1
    assert text.stderr.strip() == (
        "runstore: no run of project 'plain' recorded per-test coverage; record it with: pytest "
        "--runstore --cov=PKG --cov-context=test (or --cov=PKG --runstore-cov-context)")
    as_json = runner.invoke(cli, ["--db", str(db), "--format", "json", "tests-for", "src/a.py"])
    assert as_json.exit_code == 1
    error = json.loads(as_json.stdout)
    assert error["kind"] == "no_per_test_coverage"
    assert error["hint"].startswith("pytest --runstore --cov=PKG --cov-context=test")
    assert error["error"] == text.stderr.strip().removeprefix("runstore: ")


@pytest.mark.parametrize(
    ("location", "split"),
    [
        ("src/a.py", ("src/a.py", None)),
        ("src/a.py:12", ("src/a.py", 12)),
        ("src/a.py:0", ("src/a.py", 0)),
        ("src/a.py:007", ("src/a.py", 7)),
        ("src/a.py:", ("src/a.py", None)),
        (":12", (":12", None)),
        ("C:\\src\\a.py", ("C:\\src\\a.py", None)),
        ("C:\\src\\a.py:7", ("C:\\src\\a.py", 7)),
        ("src/a.py:١٢", ("src/a.py:١٢", None)),  # digits, but not ASCII ones
    ],
)
def test_path_and_line_are_split_at_the_last_colon(
    location: str, split: tuple[str, int | None]
) -> None:
    assert split_location(location) == split


def test_line_0_and_an_unmeasured_file_are_refused(project: Path) -> None:
    for args in (("cart.py:0",), ("--format", "json", "cart.py:0")):
        refused = _invoke(project, *args[:-1], "tests-for", args[-1])
        assert refused.exit_code == 1, refused.output
        assert "line" in refused.output, refused.output
    text = _invoke(project, "tests-for", "src/shop/nowhere.py")
    assert text.exit_code == 1, text.output
    assert "'src/shop/nowhere.py' is not a file" in text.stderr
    as_json = _invoke(project, "--format", "json", "tests-for", "nowhere.py:3")
    assert as_json.exit_code == 1
    assert json.loads(as_json.stdout)["kind"] == "not_measured"
    # an empty line part is the file itself
    assert _json(project, "src/shop/cart.py:")["path"] == "src/shop/cart.py"
