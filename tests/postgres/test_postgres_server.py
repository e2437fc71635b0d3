"""The test server outlives a pytest killed with SIGKILL; the next start clears it, and only
it: a server whose owner still runs (another pytest-xdist worker's) is left alone."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from postgres.fixtures import ENVIRONMENT, PostgresCluster
from postgres.server import SERVERS, clear_stale, leftover_postmasters

_TESTS = Path(__file__).resolve().parent.parent


def _owner(then: str) -> list[str]:
    """The command of a process that starts a server, prints its folder, then runs ``then``."""
    return [
        sys.executable, "-c",
        f"import os, signal, sys; sys.path.insert(0, {str(_TESTS)!r})\n"
        "from postgres.server import TestServer\n"
        "print(TestServer().folder, flush=True)\n"
        f"{then}\n",
    ]


def _postmasters_of(folder: Path) -> list[int]:
    return [pid for pid in leftover_postmasters() if str(folder) in _cmdline(pid)]


def test_a_server_left_by_a_killed_owner_is_stopped_and_removed() -> None:
    child = subprocess.run(
        _owner("os.kill(os.getpid(), signal.SIGKILL)"),
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert child.returncode == -signal.SIGKILL
    folder = Path(child.stdout.strip())
    assert folder.parent == SERVERS
    assert len(_postmasters_of(folder)) == 1  # detached: it outlived its owner
    clear_stale()
    assert not folder.exists()
    assert _postmasters_of(folder) == []


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_the_session_server_is_not_taken_for_a_stale_one(
    postgres_server: PostgresCluster,
) -> None:
    # Only this process's own server: under pytest-xdist the other workers' servers come and
    # go with their sessions, so the set of every postmaster may shrink meanwhile.
    if postgres_server.server is None:
        pytest.skip(f"{ENVIRONMENT} names an external server")
    folder = postgres_server.server.folder
    before = _postmasters_of(folder)
    clear_stale()
    assert len(before) == 1
    assert _postmasters_of(folder) == before
    assert (folder / "data").is_dir()


def test_a_server_whose_owner_still_runs_is_left_alone() -> None:
    # Another pytest process (a pytest-xdist worker beside this one) owns a live server: the
    # sweep every start makes must keep it, and clear it only once its owner is gone.
    owner = subprocess.Popen(
        _owner("sys.stdin.read()"), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout is not None
        folder = Path(owner.stdout.readline().strip())
        assert folder.parent == SERVERS
        running = _postmasters_of(folder)
        assert len(running) == 1
        clear_stale()
        assert folder.exists()
        assert _postmasters_of(folder) == running
        owner.kill()  # as SIGKILL would end a worker: its server is left running
        owner.wait(timeout=30)
        clear_stale()
        assert not folder.exists()
        assert _postmasters_of(folder) == []
    finally:
        owner.kill()
        owner.wait(timeout=30)
