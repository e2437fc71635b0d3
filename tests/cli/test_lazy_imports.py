"""The CLI loads rich only to render text, and never loads jsonschema (a test-only tool)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

_PROBE = """
import json, sys
from runstore.cli import cli
try:
    cli.main(sys.argv[1:], prog_name="runstore")
except SystemExit as done:
    code = done.code
print(json.dumps({"code": code, "modules": sorted(
    m for m in ("rich", "jsonschema") if m in sys.modules)}), file=sys.stderr)
"""


def _loaded(*args: str) -> tuple[int, list[str]]:
    done = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True,
                          text=True, check=False, timeout=120)
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["code"], report["modules"]


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
