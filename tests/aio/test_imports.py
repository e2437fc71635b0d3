"""``runstore.aio`` costs nothing to those who do not use it: neither ``import runstore`` nor a
CLI command imports it or asyncio, and importing it imports no domain, no service Protocol and
no thread machinery until a layer is made or a name is read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def _modules(code: str) -> set[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)), file=sys.stderr)\n"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=False, timeout=120)
    loaded: list[str] = json.loads(done.stderr.strip().splitlines()[-1])
    return set(loaded)


def _async_ones(modules: set[str]) -> set[str]:
    return {m for m in modules if m == "asyncio" or m.startswith(("asyncio.", "runstore.aio"))}


@pytest.mark.parametrize(
    "code",
    [
        "import runstore, runstore.layers, runstore.services",
        "from runstore.layers import AGENT_STORAGE, build, in_memory\n"
        "with build(in_memory()) as c: c.get(AGENT_STORAGE)",
    ],
)
def test_runstore_and_its_sync_layers_import_no_async_module(code: str) -> None:
    assert _async_ones(_modules(code)) == set()


def test_a_cli_command_imports_no_async_module(tmp_path: Path) -> None:
    code = (
        "from runstore.cli import cli\n"
        "try:\n"
        f"    cli.main(['--db', {str(tmp_path / 'r.db')!r}, 'db', 'migrate'], prog_name='rs')\n"
        "except SystemExit:\n"
        "    pass"
    )
    assert _async_ones(_modules(code)) == set()


def test_importing_aio_loads_no_domain_and_no_machinery() -> None:
    loaded = _modules("from runstore import aio\naio.DATA_STORE, aio.build, aio.AsyncLayer")
    layers = _modules("import runstore.layers")
    assert "asyncio" not in loaded
    assert {m for m in loaded - layers if m.startswith("runstore.services.")} == set()
    assert {m for m in loaded if m.startswith("runstore.aio.")} == {
        "runstore.aio._runner", "runstore.aio._tags",
    }


def test_making_a_layer_loads_the_threads_and_reading_a_protocol_its_module() -> None:
    loaded = _modules("from runstore import aio\naio.sqlite(':memory:')")
    assert {"asyncio", "runstore.aio._threads"} <= loaded
    assert "runstore.aio._services" not in loaded
    assert "runstore.aio._services" in _modules("from runstore import aio\naio.AsyncDataStore")
