"""The CLI loads rich only to render text, never loads jsonschema (a test-only tool) nor
jinja2 (the report's alone: tests/cli/test_report_cli.py), and a test-run command loads no
module of another domain (agents, sessions, the ledger)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from runstore.layers import DATA_STORE, build, sqlite
from runstore.services.test_runs import (
    Outcome,
    Phase,
    PhaseResult,
    RunStart,
    RunStatus,
    TestResult,
)

_PROBE = """
import json, sys
from runstore.cli import cli
try:
    cli.main(sys.argv[1:], prog_name="runstore")
except SystemExit as done:
    code = done.code
migrations = sys.modules.get("runstore.migrations")
read = migrations is not None and migrations._read_shipped.cache_info().currsize > 0
print(json.dumps({"code": code, "modules": sorted(sys.modules), "migrations_read": read}),
      file=sys.stderr)
"""

OTHER_DOMAINS = ("agents", "sessions", "executions", "action_runs", "ledger")
"""Fragments of the module names of the domains a test-run command must not import."""


def _report(*args: str) -> dict[str, Any]:
    """How ``runstore ARGS`` ended in a fresh interpreter: ``code`` (the exit code),
    ``modules`` (every module imported by then), ``migrations_read`` (whether the migration
    files were read)."""
    done = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True,
                          text=True, check=False, timeout=120)
    report: dict[str, Any] = json.loads(done.stderr.strip().splitlines()[-1])
    return report


def _imported(*args: str) -> tuple[int, list[str]]:
    report = _report(*args)
    return report["code"], report["modules"]


def _loaded(*args: str) -> tuple[int, list[str]]:
    code, modules = _imported(*args)
    return code, [m for m in ("rich", "jsonschema", "jinja2") if m in modules]


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("lazy") / "runs.db")
    assert _loaded("--db", path, "db", "migrate")[0] == 0
    return path


@pytest.mark.parametrize(
    "args",
    [
        ["runs"],
        ["db", "status"],
        ["sessions", "list"],
        ["prune", "--keep-runs", "5"],
        ["prune", "--keep-runs", "5", "--dry-run"],
    ],
)
def test_json_output_loads_neither_rich_nor_jsonschema(db: str, args: list[str]) -> None:
    assert _loaded("--db", db, "--format", "json", *args) == (0, [])


def test_text_output_loads_rich_for_tables_only(db: str, tmp_path: Path) -> None:
    assert _loaded("--db", db, "db", "status") == (0, [])
    assert _loaded("--db", db, "sessions", "list") == (0, ["rich"])


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A database holding one finished run with a failure."""
    path = str(tmp_path_factory.mktemp("recorded") / "runs.db")
    with build(sqlite(path)) as container:
        store = container.get(DATA_STORE)
        run = store.begin_run(RunStart("shop", "inv-1", datetime.now(UTC))).unwrap()
        store.record_results(run, [TestResult(
            "tests/test_cart.py::test_total", "tests/test_cart.py", "test_total",
            (PhaseResult(Phase.CALL, Outcome.FAILED, 3.5),),
        )]).unwrap()
        store.finish_run(run, RunStatus.FAILED, datetime.now(UTC)).unwrap()
    return path


@pytest.mark.parametrize(
    ("args", "rich"),
    [
        (["--format", "json", "show", "latest"], False),
        (["--format", "json", "failures"], False),
        (["--format", "json", "runs"], False),
        (["--format", "json", "signatures"], False),
        (["failures"], False),  # lines of text, piped: written as they are
        (["show", "latest"], True),  # a table
    ],
)
def test_a_test_run_command_imports_no_other_domain(
    recorded: str, args: list[str], rich: bool
) -> None:
    code, modules = _imported("--db", recorded, *args)
    assert code == 0
    ours = [m for m in modules if m.startswith("runstore")]
    assert "runstore.services.test_runs" in ours
    assert [m for m in ours if any(domain in m for domain in OTHER_DOMAINS)] == []
    assert ("rich" in modules) is rich


def test_a_read_reads_no_migration_file_and_a_migration_does(recorded: str) -> None:
    read = _report("--db", recorded, "--format", "json", "show", "latest")
    migrate = _report("--db", recorded, "db", "migrate")
    assert (read["code"], migrate["code"]) == (0, 0)
    assert read["migrations_read"] is False
    assert migrate["migrations_read"] is True
    assert not {"importlib.resources", "apsw.ext", "apsw.bestpractice"} & set(read["modules"])


SDK_MODULES = ("mcp", "mcp_types", "pydantic", "anyio", "starlette")
"""The MCP SDK and what it brings: only ``runstore mcp`` loads them (about a second)."""


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],  # imports every command's module, runstore.cli._mcp among them
        ["mcp", "--help"],
        ["--format", "json", "failures"],
        ["triage"],
        ["--format", "json", "sessions", "list"],
    ],
)
def test_no_command_but_the_server_loads_the_mcp_sdk(recorded: str, args: list[str]) -> None:
    code, modules = _imported("--db", recorded, *args)
    assert code == 0
    assert ("runstore.cli._mcp" in modules) is (args[-1] == "--help")
    assert [m for m in modules if m.partition(".")[0] in SDK_MODULES] == []
