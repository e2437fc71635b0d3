"""The test server outlives a pytest killed with SIGKILL; the next start clears it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from postgres.server import SERVERS, clear_stale, leftover_postmasters

_TESTS = Path(__file__).resolve().parent.parent


def test_a_server_left_by_a_killed_owner_is_stopped_and_removed() -> None:
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        sys.path.insert(0, {str(_TESTS)!r})
        from postgres.server import TestServer
        server = TestServer()
        print(server.folder, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    child = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert child.returncode == -signal.SIGKILL
    folder = Path(child.stdout.strip())
    assert folder.parent == SERVERS
    mine = [pid for pid in leftover_postmasters() if str(folder) in _cmdline(pid)]
    assert len(mine) == 1  # detached: it outlived its owner
    clear_stale()
    assert not folder.exists()
    assert all(str(folder) not in _cmdline(pid) for pid in leftover_postmasters())


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_the_session_server_is_not_taken_for_a_stale_one(postgres_server: object) -> None:
    del postgres_server
    before = set(leftover_postmasters())
    clear_stale()
    assert set(leftover_postmasters()) >= before - {os.getpid()}
