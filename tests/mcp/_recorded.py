"""A project recorded by real ``pytest --runstore`` runs, the CLI and the MCP server on it:
what the ``tests/mcp`` modules share.

The project ``shop`` has three runs: ``test_total`` always passes, ``test_persistent``
always fails, ``test_flaky`` fails, passes, fails (flaky by oscillation), ``test_new`` and
the two ``test_root_cause_*`` (one failure signature) fail from run 3 on, which also measured
coverage of ``app.py`` with a context per test; one agent session is imported beside them.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import apsw
import attrs
import mcp_types as types
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

BIN = Path(sys.executable).parent
RUNSTORE = BIN / "runstore"
PROJECT = "shop"

APP = '''
def total(prices):
    return sum(prices)


def discount(price, percent):
    if percent < 0:
        raise ValueError("negative discount")
    return price * (100 - percent) / 100
'''

TESTS = '''
import os

import app
import release  # noqa: F401  (new in each run: each run's code is its own)

RUN = int(os.environ["SHOP_RUN"])


def test_total():
    assert app.total([120, 250]) == 370


def test_persistent():
    assert app.total([1]) == 2, "the total is off"


def test_flaky():
    assert RUN == 2, "the rate cache was cold"


def test_new():
    assert RUN < 3, "broke in run 3"


def test_root_cause_a():
    assert RUN < 3 or app.discount(10, -1)


def test_root_cause_b():
    assert RUN < 3 or app.discount(20, -5)
'''

SESSION_ID = "5f0c2a8e-3b1d-4c6e-9a7f-2d8e4b6c1a90"


def _session_lines() -> list[dict[str, Any]]:
    def message(entry_id: str, parent: str | None, role: str) -> dict[str, Any]:
        return {"type": "message", "id": entry_id, "parentId": parent,
                "timestamp": "2025-11-30T10:53:21.000Z",
                "message": {"role": role, "content": [{"type": "text", "text": entry_id}]}}

    return [
        {"type": "session", "version": 3, "id": SESSION_ID,
         "timestamp": "2025-11-30T10:53:20.000Z", "cwd": "/w"},
        message("e1", None, "user"),
        message("e2", "e1", "assistant"),
        message("e3", "e2", "user"),
    ]


def env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "RUNSTORE_", "COV_", "GIT_"))}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return env


def _record(folder: Path, db: Path) -> None:
    """Three runs of the project, each on code of its own (``release.py``, a new code
    fingerprint, as after an edit); the third measures coverage of ``app``, per test."""
    for run in (1, 2, 3):
        (folder / "release.py").write_text(f"RUN = {run}\n", encoding="utf-8")
        cover = ("-p", "pytest_cov.plugin", "--cov=app", "--cov-context=test",
                 "--cov-report=") if run == 3 else ()
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "runstore.pytest_plugin", "--runstore",
             f"--runstore-db={db}", "-p", "no:cacheprovider", "-q", *cover],
            cwd=folder, env={**env(), "SHOP_RUN": str(run)}, capture_output=True,
            text=True, timeout=120, check=False,
        )
        assert done.returncode == 1, done.stdout + done.stderr


@attrs.frozen
class Recorded:
    folder: Path
    db: Path



def record_project(base: Path) -> Recorded:
    """Record the project into ``base / "runs.db"`` and import the session beside it."""
    folder = base / PROJECT
    folder.mkdir()
    (folder / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (folder / "app.py").write_text(textwrap.dedent(APP), encoding="utf-8")
    (folder / "test_shop.py").write_text(textwrap.dedent(TESTS), encoding="utf-8")
    db = base / "runs.db"
    _record(folder, db)
    transcript = base / "session.jsonl"
    transcript.write_text("".join(json.dumps(line) + "\n" for line in _session_lines()),
                          encoding="utf-8")
    done = _cli(folder, db, "sessions", "import", str(transcript))
    assert done.returncode == 0, done.stderr
    return Recorded(folder, db)


def _cli(folder: Path, db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(RUNSTORE), "--db", str(db), *args], cwd=folder, env=env(),
                          capture_output=True, text=True, timeout=60, check=False)


def cli_json(recorded: Recorded, *args: str) -> tuple[int, dict[str, Any], str]:
    """``runstore --format json ARGS``: exit code, its JSON document, standard error."""
    done = _cli(recorded.folder, recorded.db, "--format", "json", *args)
    document = json.loads(done.stdout)
    assert isinstance(document, dict)
    return done.returncode, document, done.stderr


@attrs.frozen
class Server:
    """The running server: ``call`` a tool, ``listed`` tools (from the SDK's client)."""

    portal: BlockingPortal
    session: ClientSession

    def call(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        result = self.portal.call(self.session.call_tool, name, arguments)
        assert isinstance(result, types.CallToolResult)
        return result

    def listed(self) -> list[types.Tool]:
        return self.portal.call(self.session.list_tools).tools


@contextmanager
def serving(recorded: Recorded, log: Path) -> Iterator[Server]:
    """``runstore --db DB mcp`` started in the project's folder by the SDK's client, its
    standard error written to ``log``."""
    params = StdioServerParameters(command=str(RUNSTORE), args=["--db", str(recorded.db), "mcp"],
                                   env=env(), cwd=recorded.folder)
    with (log.open("w", encoding="utf-8") as errlog, start_blocking_portal() as portal,
          portal.wrap_async_context_manager(stdio_client(params, errlog=errlog)) as streams,
          portal.wrap_async_context_manager(ClientSession(*streams)) as session):
        portal.call(session.initialize)
        yield Server(portal, session)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def data_version(connection: apsw.Connection) -> int:
    row = connection.execute("PRAGMA data_version").fetchone()
    assert row is not None
    return int(row[0])
