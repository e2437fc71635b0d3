"""``runstore signatures`` and the gate ``runstore failures --new-signatures`` on a project
recorded by real ``pytest --runstore`` runs.

The project's tests fail as environment variables say: ``BREAK_DISCOUNT=N`` makes
``test_discount`` raise ``ValueError("discount N out of range")`` (one signature whatever
N is), ``BREAK_STOCK`` makes ``test_stock`` raise a ``KeyError``, ``BREAK_TOTAL`` makes
``test_total`` raise a ``RuntimeError`` and ``STOP`` makes the last test stop the session
(``pytest.exit``: an interrupted run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from test_json_schemas import validate  # beside this file

from runstore.cli import cli
from runstore.layers import DATA_STORE, build, sqlite
from runstore.services.test_runs import (
    ErrorInfo,
    Outcome,
    Phase,
    PhaseResult,
    RunStart,
    RunStatus,
    TestResult,
)

TESTS = '''
import os

import pytest


def test_total():
    if os.environ.get("BREAK_TOTAL"):
        raise RuntimeError("total is off by " + os.environ["BREAK_TOTAL"])


def test_discount():
    if os.environ.get("BREAK_DISCOUNT"):
        raise ValueError(f"discount {os.environ['BREAK_DISCOUNT']} out of range")


def test_stock():
    if os.environ.get("BREAK_STOCK"):
        stock = {}
        stock["apples"] += 1


def test_zz_last():
    if os.environ.get("STOP"):
        pytest.exit("stopped by the test")
'''

BREAKS = ("BREAK_TOTAL", "BREAK_DISCOUNT", "BREAK_STOCK", "STOP")


def _record(project: Path, **env: str) -> None:
    clean = {k: v for k, v in os.environ.items() if k not in BREAKS and not k.startswith(
        ("RUNSTORE_", "PYTEST_"))}
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--runstore",
         "--runstore-project=shop", "test_shop.py"],
        cwd=project, env={**clean, **env}, capture_output=True, text=True, timeout=180,
        check=False,
    )


def _cli(db: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--db", str(db), *args], catch_exceptions=False)


def _json(db: Path, *args: str) -> tuple[int, Any]:
    result = _cli(db, "--format", "json", *args)
    return result.exit_code, json.loads(result.stdout)


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Runs 1-3: a ValueError (new in run 1, again in runs 2 and 3 with other numbers), and
    in run 3 a KeyError besides it (new)."""
    project = tmp_path_factory.mktemp("shop")
    (project / "test_shop.py").write_text(TESTS, encoding="utf-8")
    _record(project, BREAK_DISCOUNT="7")
    _record(project, BREAK_DISCOUNT="9")
    _record(project, BREAK_DISCOUNT="3", BREAK_STOCK="1")
    return project


@pytest.fixture
def db(shop: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "runstore.db"
    copy.write_bytes((shop / ".runstore" / "runstore.db").read_bytes())
    return copy


def test_the_gate_fails_on_a_new_signature_and_passes_on_an_old_one(db: Path) -> None:
    first = _cli(db, "failures", "1", "--new-signatures")
    assert first.exit_code == 1
    assert "1 new failure signature in run 1 (never seen before):" in first.stdout
    assert "ValueError: discount <num> out of range" in first.stdout
    old = _cli(db, "failures", "2", "--new-signatures")
    assert old.exit_code == 0, old.stdout
    assert "no new failure signatures in run 2" in old.stdout
    latest = _cli(db, "failures", "--new-signatures")
    assert latest.exit_code == 1
    assert "KeyError: <str>" in latest.stdout
    assert "at test_shop.py:test_stock" in latest.stdout
    assert "1 test: test_shop.py::test_stock" in latest.stdout
    assert "ValueError" not in latest.stdout  # seen in runs 1 and 2


def test_the_gate_answers_in_json(db: Path) -> None:
    code, document = _json(db, "failures", "--new-signatures")
    assert code == 1
    validate("new-signatures.json", document)
    assert [r["id"] for r in document["runs"]] == [3]
    assert (document["passed"], document["partial"]) == (False, False)
    (entry,) = document["new_signatures"]
    assert (entry["exception_type"], entry["message"], entry["frame"], entry["tests"]) == (
        "KeyError", "KeyError: <str>", "test_shop.py:test_stock", ["test_shop.py::test_stock"])
    code, document = _json(db, "failures", "latest~1", "--new-signatures")
    assert (code, document["passed"], document["new_signatures"]) == (0, True, [])


def test_signatures_count_runs_and_tests_and_outlive_pruning(db: Path) -> None:
    code, document = _json(db, "signatures")
    assert code == 0
    validate("signatures.json", document)
    counts = [(s["exception_type"], s["runs"], s["tests"], s["occurrences"],
               s["first_seen_run_id"], s["last_seen_run_id"]) for s in document["signatures"]]
    # Both last seen in run 3, where the listing orders them by signature.
    assert sorted(counts) == [("KeyError", 1, 1, 1, 3, 3), ("ValueError", 3, 1, 3, 1, 3)]
    text = _cli(db, "signatures")
    assert text.exit_code == 0
    assert "2 failure signatures in shop" in text.stdout
    assert "ValueError: discount <num> out of range" in text.stdout
    assert _cli(db, "prune", "--keep-runs", "1").exit_code == 0
    _, after = _json(db, "signatures")
    assert [(s["exception_type"], s["runs"], s["tests"], s["occurrences"],
             s["first_seen_run_id"], s["last_seen_run_id"]) for s in after["signatures"]] == [
        (*c[:4], None if c[4] < 3 else c[4], c[5]) for c in counts]  # runs 1-2 pruned
    assert "pruned run" in _cli(db, "signatures").stdout


def test_an_interrupted_run_is_gated_and_leaves_its_signature_new(shop: Path,
                                                                 tmp_path: Path) -> None:
    """An interrupted run's new signature fails the gate (said to be partial), and since an
    interrupted run records no signature, the next complete run that fails the same way
    fails the gate too."""
    project = tmp_path / "shop"
    project.mkdir()
    (project / "test_shop.py").write_text(TESTS, encoding="utf-8")
    db = project / ".runstore" / "runstore.db"
    _record(project, BREAK_TOTAL="1", STOP="1")
    code, document = _json(db, "failures", "--new-signatures")
    assert (code, document["partial"]) == (1, True)
    assert document["runs"][0]["status"] == "interrupted"
    assert [e["exception_type"] for e in document["new_signatures"]] == ["RuntimeError"]
    assert "did not finish every test" in _cli(db, "failures", "--new-signatures").stdout
    _record(project, BREAK_TOTAL="2")
    code, document = _json(db, "failures", "--new-signatures")
    assert (code, document["partial"], document["runs"][0]["id"]) == (1, False, 2)
    assert [e["exception_type"] for e in document["new_signatures"]] == ["RuntimeError"]
    _record(project, BREAK_TOTAL="3")
    assert _cli(db, "failures", "--new-signatures").exit_code == 0


def test_the_gate_reads_every_run_of_the_latest_invocation(tmp_path: Path) -> None:
    """Two runs of one invocation (shards written through the API): the latest passed, the
    other has a new signature, so the invocation fails the gate."""
    db = tmp_path / "runstore.db"
    started = datetime(2026, 3, 1, tzinfo=UTC)
    item = TestResult("t.py::test_a", "t.py", "test_a",
                      (PhaseResult(Phase.CALL, Outcome.FAILED, 1.0),),
                      errors=(ErrorInfo(Phase.CALL, "OSError", "disk full"),))
    with build(sqlite(db)) as container:
        store = container.get(DATA_STORE)
        shard = store.begin_run(RunStart("p", "inv-1", started)).unwrap()
        store.record_results(shard, [item]).unwrap()
        store.finish_run(shard, RunStatus.FAILED, started).unwrap()
        latest = store.begin_run(RunStart("p", "inv-1", started.replace(second=5))).unwrap()
        store.finish_run(latest, RunStatus.PASSED, started.replace(second=6)).unwrap()
    code, document = _json(db, "failures", "--new-signatures")
    assert code == 1
    assert [r["id"] for r in document["runs"]] == [shard, latest]
    assert document["new_signatures"][0]["tests"] == ["t.py::test_a"]
