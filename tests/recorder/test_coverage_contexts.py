"""Per-test coverage recorded by real pytest runs equals what coverage.py itself says.

A small project is run with ``pytest --runstore --cov --cov-context=test`` (and with
``--runstore-cov-context`` instead, under pytest-xdist, and under ``coverage run``); then
coverage's own ``coverage json --show-contexts`` reads the same ``.coverage`` data, and the
set of (test, file, line) it names must equal what ``DataReader.tests_for`` answers for the
same files, and what ``runstore tests-for`` prints.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from plugin_runs import env_for, run_pytest, write  # beside this file

from runstore.cli import cli
from runstore.layers import build, sqlite
from runstore.recorder._coverage import context_nodeid
from runstore.services.test_runs import DataReader

pytest.importorskip("pytest_cov")

Triple = tuple[str, str, int]

_PROJECT = {
    "shop/__init__.py": "",
    "shop/cart.py": """\
        def total(prices):
            result = 0
            for price in prices:
                if price < 0:
                    raise ValueError("negative price")
                result += price
            return result


        def discount(amount, percent):
            if percent == 0:
                return amount
            return amount * (100 - percent) / 100


        def never_called():
            return "never"
        """,
    "shop/stock.py": """\
        class Stock:
            def __init__(self):
                self.items = {}

            def add(self, name, count=1):
                self.items[name] = self.items.get(name, 0) + count

            def clear(self):
                self.items.clear()
        """,
    "tests/__init__.py": "",
    "tests/test_cart.py": """\
        import pytest

        from shop.cart import discount, total


        def test_total():
            assert total([1, 2]) == 3


        def test_total_refuses_negative():
            with pytest.raises(ValueError):
                total([-1])


        @pytest.mark.parametrize("percent", [0, 50], ids=["none", "half|off"])
        def test_discount(percent):
            assert discount(100, percent) <= 100
        """,
    "tests/test_stock.py": """\
        import pytest

        from shop.stock import Stock


        @pytest.fixture
        def stock():
            made = Stock()  # setup executes __init__
            yield made
            made.clear()  # teardown executes clear


        class TestStock:
            def test_add(self, stock):
                stock.add("pen")
                assert stock.items == {"pen": 1}
        """,
}


def _project(folder: Path) -> Path:
    for name, source in _PROJECT.items():
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        write(target.parent, **{target.name: source})
    return folder


def _coverage_says(folder: Path) -> set[Triple]:
    """(test, file, line) of coverage's own ``coverage json --show-contexts`` report."""
    out = folder / "contexts.json"
    subprocess.run(
        [sys.executable, "-m", "coverage", "json", "--show-contexts", "-o", str(out), "-q"],
        cwd=folder, env=env_for(), check=True, capture_output=True, timeout=60,
    )
    report = json.loads(out.read_text(encoding="utf-8"))
    found: set[Triple] = set()
    for path, entry in report["files"].items():
        for line, contexts in entry["contexts"].items():
            for context in contexts:
                nodeid = context_nodeid(context)
                if nodeid is not None:
                    found.add((nodeid, path.replace("\\", "/"), int(line)))
    return found


def _runstore_says(folder: Path, paths: set[str], line: int | None = None) -> set[Triple]:
    found: set[Triple] = set()
    with build(sqlite(folder / ".runstore" / "runstore.db")) as c:
        reader = c.get(DataReader)
        for path in paths:
            answer = reader.tests_for(folder.name, path, line=line, limit=1000).unwrap()
            assert not answer.has_more
            found |= {(t.nodeid, path, n) for t in answer.tests for n in t.lines}
    return found


def _check_equal(folder: Path, done: subprocess.CompletedProcess[str]) -> set[Triple]:
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning" not in done.stdout.lower(), done.stdout
    expected = _coverage_says(folder)
    paths = {path for _, path, _ in expected}
    assert paths == {"shop/cart.py", "shop/stock.py"}
    assert _runstore_says(folder, paths | {"shop/__init__.py"}) == expected
    return expected


def test_tests_for_equals_coverage_json_show_contexts(tmp_path: Path) -> None:
    folder = _project(tmp_path / "shop-project")
    done = run_pytest(folder, "-p", "pytest_cov.plugin", "--runstore", "--cov=shop",
                      "--cov-branch", "--cov-context=test", "--cov-report=")
    expected = _check_equal(folder, done)
    # the phases count as one test: setup and teardown lines are the test's too
    assert ("tests/test_stock.py::TestStock::test_add", "shop/stock.py", 3) in expected
    assert ("tests/test_stock.py::TestStock::test_add", "shop/stock.py", 9) in expected
    assert ("tests/test_cart.py::test_discount[half|off]", "shop/cart.py", 13) in expected
    # one line: exactly the tests coverage names for it
    line_5 = {t for t in expected if t[1:] == ("shop/cart.py", 5)}
    assert {t[0] for t in line_5} == {"tests/test_cart.py::test_total_refuses_negative"}
    assert _runstore_says(folder, {"shop/cart.py"}, line=5) == {
        t for t in expected
        if t[:2] == ("tests/test_cart.py::test_total_refuses_negative", "shop/cart.py")
    }

    runner = CliRunner()
    shown = runner.invoke(cli, ["--db", str(folder / ".runstore" / "runstore.db"),
                                "--format", "json", "tests-for", "cart.py:12"])
    assert shown.exit_code == 0, shown.output
    document = json.loads(shown.stdout)
    assert document["path"] == "shop/cart.py"
    assert [t["nodeid"] for t in document["tests"]] == ["tests/test_cart.py::test_discount[none]"]


def test_a_test_that_stops_executing_a_file_is_no_longer_listed(tmp_path: Path) -> None:
    folder = _project(tmp_path / "shop-edited")
    args = ("-p", "pytest_cov.plugin", "--runstore", "--cov=shop", "--cov-context=test",
            "--cov-report=")
    _check_equal(folder, run_pytest(folder, *args))
    before = _runstore_says(folder, {"shop/cart.py"}, line=3)
    assert {t[0] for t in before} == {
        "tests/test_cart.py::test_total", "tests/test_cart.py::test_total_refuses_negative"}
    cart = folder / "tests" / "test_cart.py"
    cart.write_text(cart.read_text(encoding="utf-8").replace(
        "assert total([1, 2]) == 3", "assert sum([1, 2]) == 3"), encoding="utf-8")
    _check_equal(folder, run_pytest(folder, *args))
    # the newer run shows test_total ran and executed nothing of cart.py: the older run's
    # lines of it no longer count
    after = _runstore_says(folder, {"shop/cart.py"})
    assert {t[0] for t in after} == {
        "tests/test_cart.py::test_total_refuses_negative",
        "tests/test_cart.py::test_discount[none]", "tests/test_cart.py::test_discount[half|off]",
    }
    # a run of some tests leaves the others judged by the run before
    done = run_pytest(folder, *args, "-k", "test_discount")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _runstore_says(folder, {"shop/cart.py"}) == after


def test_the_runstore_option_turns_contexts_on_under_xdist(tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    folder = _project(tmp_path / "shop-xdist")
    done = run_pytest(folder, "-p", "pytest_cov.plugin", "-p", "xdist.plugin", "-n", "2",
                      "--runstore", "--cov=shop", "--runstore-cov-context", "--cov-report=")
    expected = _check_equal(folder, done)
    assert {t[0] for t in expected} == {
        "tests/test_cart.py::test_total", "tests/test_cart.py::test_total_refuses_negative",
        "tests/test_cart.py::test_discount[none]", "tests/test_cart.py::test_discount[half|off]",
        "tests/test_stock.py::TestStock::test_add",
    }


def test_the_runstore_option_under_coverage_run(tmp_path: Path) -> None:
    folder = _project(tmp_path / "shop-coverage-run")
    done = subprocess.run(
        [sys.executable, "-m", "coverage", "run", "--source=shop", "-m", "pytest",
         "-p", "no:cacheprovider", "-p", "runstore.pytest_plugin", "--runstore",
         "--runstore-cov-context"],
        cwd=folder, env=env_for(), capture_output=True, text=True, timeout=120, check=False,
    )
    _check_equal(folder, done)


def test_a_run_without_contexts_gives_the_hint(tmp_path: Path) -> None:
    folder = _project(tmp_path / "shop-plain")
    done = run_pytest(folder, "-p", "pytest_cov.plugin", "--runstore", "--cov=shop",
                      "--cov-report=")
    assert done.returncode == 0, done.stdout + done.stderr
    db = str(folder / ".runstore" / "runstore.db")
    runner = CliRunner()
    text = runner.invoke(cli, ["--db", db, "tests-for", "shop/cart.py"])
    assert text.exit_code == 1
    assert "--cov-context=test" in text.stderr
    assert "--runstore-cov-context" in text.stderr
    as_json = runner.invoke(cli, ["--db", db, "--format", "json", "tests-for", "shop/cart.py"])
    assert as_json.exit_code == 1
    error = json.loads(as_json.stdout)
    assert error["kind"] == "no_per_test_coverage"
    assert "--cov-context=test" in error["hint"]
    with build(sqlite(db)) as c:  # per-file coverage was stored: only the contexts lack
        reader = c.get(DataReader)
        assert reader.coverage(reader.latest_run(folder.name).unwrap().id).unwrap().files


def test_the_option_without_coverage_warns(tmp_path: Path) -> None:
    folder = _project(tmp_path / "shop-unmeasured")
    done = run_pytest(folder, "--runstore", "--runstore-cov-context")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "--runstore-cov-context: this session is not measured by coverage" in done.stdout


@pytest.mark.parametrize(
    ("context", "nodeid"),
    [
        ("tests/t.py::f|run", "tests/t.py::f"),
        ("tests/t.py::f[a|b]|setup", "tests/t.py::f[a|b]"),
        ("tests/t.py::C::f|teardown", "tests/t.py::C::f"),
        ("", None),
        ("tests.t.f", None),  # coverage's own dynamic_context = test_function
        ("tests/t.py::f|call", None),
        ("|run", None),
    ],
)
def test_context_names_map_back_to_node_ids(context: str, nodeid: str | None) -> None:
    assert context_nodeid(context) == nodeid
