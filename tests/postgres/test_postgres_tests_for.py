"""Per-test coverage on PostgreSQL: ``pytest --runstore --cov --cov-context=test`` into a
server, then ``runstore tests-for`` on it says what ``coverage json --show-contexts`` says."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from postgres.test_postgres_cli import url_of
from postgres.test_postgres_plugin import env, pytest_args, run, runstore

pytest.importorskip("pytest_cov")

SOURCE = """\
def price(count, unit):
    if count > 10:
        return count * unit * 0.9
    return count * unit
"""

TESTS = """\
import pytest

from pricing import price


@pytest.mark.parametrize("count", [1, 20], ids=["one", "bulk|order"])
def test_price(count):
    assert price(count, 2) > 0
"""


def test_tests_for_on_postgresql_equals_coverage_contexts(
    tmp_path: Path, postgres_dsn: str
) -> None:
    url = url_of(postgres_dsn)
    folder = tmp_path / "pricing-project"
    (folder / "tests").mkdir(parents=True)
    (folder / "pricing.py").write_text(SOURCE, encoding="utf-8")
    (folder / "tests" / "test_price.py").write_text(TESTS, encoding="utf-8")
    (folder / "conftest.py").write_text("", encoding="utf-8")  # the rootdir on sys.path
    done = run(folder, *pytest_args("-p", "pytest_cov.plugin", "--runstore",
                                    f"--runstore-db={url}", "--cov=pricing",
                                    "--cov-context=test", "--cov-report="))
    assert done.returncode == 0, done.stdout + done.stderr
    subprocess.run([sys.executable, "-m", "coverage", "json", "--show-contexts", "-o",
                    "contexts.json", "-q"], cwd=folder, env=env(), check=True, timeout=60)
    report = json.loads((folder / "contexts.json").read_text(encoding="utf-8"))
    expected = {
        (context.rpartition("|")[0], int(line))
        for line, contexts in report["files"]["pricing.py"]["contexts"].items()
        for context in contexts
        if context
    }
    shown = json.loads(runstore(folder, "--db", url, "--format", "json", "tests-for",
                                "pricing.py").stdout)
    assert shown["path"] == "pricing.py"
    got = {
        (test["nodeid"], line)
        for test in shown["tests"]
        for span in test["lines"].split(",")
        for line in range(int(span.split("-")[0]), int(span.split("-")[-1]) + 1)
    }
    assert got == expected
    bulk = json.loads(runstore(folder, "--db", url, "--format", "json", "tests-for",
                               "pricing.py:3").stdout)
    assert [t["nodeid"] for t in bulk["tests"]] == ["tests/test_price.py::test_price[bulk|order]"]
