"""Where a run ran: versions, platform, git commit, branch, dirty flag and changed files, argv,
host and pid."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from runstore.recorder._text import safe_str
from runstore.services.test_runs import (
    CHANGED_FILE_STATUS_CODES,
    MAX_CHANGED_FILES,
    ChangedFile,
    Environment,
)

__all__ = [
    "GIT_BUDGET_SECONDS",
    "GitProbe",
    "GitStatus",
    "environment",
    "git_dirty",
    "git_head",
    "git_status",
    "host_name",
]

GIT_BUDGET_SECONDS = 0.5
"""Longest wait (s) for ``git status`` before the dirty flag is given up as unknown.

The probe runs on the recorder's writer thread while pytest collects and runs tests, so it
holds up no test; 5-12 ms is usual, and a loaded machine took over 50 ms on a tiny
repository, which is why the cap is not tighter (past it, the clean-tree evidence is lost)."""

# What a test run itself leaves in a tree that may not ignore it (bytecode, hypothesis's
# example database, coverage data files) is no change of the code: left out of the probe.
_RUN_ARTIFACTS = ("**/__pycache__/**", "**/*.pyc", "**/.hypothesis/**", "**/.coverage",
                  "**/.coverage.*")
_GIT_STATUS = (
    "git", "--no-optional-locks", "status", "--porcelain=v1", "-z", "-unormal", "--no-renames",
    "--", ":/", *(f":(top,exclude,glob){pattern}" for pattern in _RUN_ARTIFACTS),
)


def _find_git_dir(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        candidate = folder / ".git"
        if candidate.is_dir():
            return candidate
        if candidate.is_file():  # a worktree or submodule: "gitdir: <path>"
            text = candidate.read_text(encoding="utf-8", errors="replace").strip()
            if text.startswith("gitdir:"):
                return (folder / text[len("gitdir:") :].strip()).resolve()
            return None
    return None


def _read_ref(git_dir: Path, ref: str) -> str | None:
    common = git_dir
    commondir = git_dir / "commondir"
    if commondir.is_file():
        common = (git_dir / commondir.read_text(encoding="utf-8").strip()).resolve()
    for base in (git_dir, common):
        loose = base / ref
        if loose.is_file():
            return loose.read_text(encoding="utf-8").strip() or None
    packed = common / "packed-refs"
    if packed.is_file():
        for line in packed.read_text(encoding="utf-8", errors="replace").splitlines():
            sha, _, name = line.partition(" ")
            if name == ref:
                return sha
    return None


class GitStatus(NamedTuple):
    """What one ``git status`` said of a work tree: whether it is ``dirty``, the first
    ``MAX_CHANGED_FILES`` entries it listed (``changed``, in git's order) and whether it
    listed more (``truncated``)."""

    dirty: bool
    changed: tuple[ChangedFile, ...]
    truncated: bool


def _parse_status(out: bytes, cap: int = MAX_CHANGED_FILES) -> GitStatus:
    """The :class:`GitStatus` of ``git status --porcelain=v1 -z --no-renames`` output: one
    ``XY path`` entry per NUL, the path as git wrote it (bytes that are not UTF-8 become
    U+FFFD). Only the first ``cap`` entries are decoded, so a tree with 100,000 untracked
    files costs no more than one with ``cap``; an entry git would never write (a status
    letter unknown to porcelain v1, no path) is left out rather than refused later."""
    entries = out.split(b"\0", cap)
    rest = entries.pop() if len(entries) > cap else b""
    changed: list[ChangedFile] = []
    seen: set[str] = set()
    for entry in entries:
        status = entry[:2].decode("ascii", "replace")
        path = entry[3:].decode("utf-8", "replace")
        if (len(status) == 2 and set(status) <= CHANGED_FILE_STATUS_CODES and path
                and entry[2:3] == b" " and path not in seen):
            seen.add(path)
            changed.append(ChangedFile(path, status))
    return GitStatus(bool(out.strip(b"\0 \n")), tuple(changed), bool(rest.strip(b"\0")))


def git_status(start: Path, budget: float = GIT_BUDGET_SECONDS) -> GitStatus | None:
    """Whether the work tree containing ``start`` has uncommitted changes, and which: a
    changed tracked file or an untracked file that is not ignored (a new test written and
    made to pass before its first commit is a change of the code, so its flip is no
    same-commit evidence).

    One ``git --no-optional-locks status --porcelain=v1 -z -unormal --no-renames`` over the
    whole repository (ignored files and what a test run itself writes, ``_RUN_ARTIFACTS``,
    left out; no index lock taken, so a concurrent git command is never disturbed; paths
    relative to the repository root, unquoted; an untracked folder is one entry), given at
    most ``budget`` seconds and then killed. None outside a repository (no ``.git`` found,
    git not started), when git is missing, fails or is too slow.
    """
    return GitProbe(start, budget).result()


class GitProbe:
    """The ``git status`` of :func:`git_status`, started when made and read by
    :meth:`result`: the recorder starts it before the writer thread opens the database, so
    git and the database's opening overlap. :meth:`result` waits at most ``budget`` seconds
    (from when it is asked: git gets the whole overlap on top); a probe whose result is never
    asked for is killed by :meth:`close`."""

    def __init__(self, start: Path, budget: float = GIT_BUDGET_SECONDS) -> None:
        self._budget = budget
        self._process: subprocess.Popen[bytes] | None = None
        self._status: GitStatus | None = None
        try:
            if _find_git_dir(start) is None:
                return
        except (OSError, UnicodeDecodeError):
            return
        env = dict(os.environ, GIT_OPTIONAL_LOCKS="0", LC_ALL="C")
        try:
            self._process = subprocess.Popen(
                _GIT_STATUS, cwd=start, env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            )
        except OSError:  # no git on PATH
            return

    def result(self) -> GitStatus | None:
        """What git said (the first call waits for it, at most until the budget ends; later
        calls give the same answer): None when it was not started, failed or was too
        slow."""
        process, self._process = self._process, None
        if process is None:
            return self._status
        try:
            out, _ = process.communicate(timeout=self._budget)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            return None
        if process.returncode == 0:
            self._status = _parse_status(out)
        return self._status

    def close(self) -> None:
        """Kill the process when its result was never asked for (reaping it)."""
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.communicate()


def git_dirty(start: Path, budget: float = GIT_BUDGET_SECONDS) -> bool | None:
    """Whether the work tree containing ``start`` has uncommitted changes (the ``dirty``
    of :func:`git_status`); None when that is unknown."""
    status = git_status(start, budget)
    return None if status is None else status.dirty


def git_head(start: Path) -> tuple[str | None, str | None]:
    """The (commit sha, branch name) checked out in the repository containing ``start``.

    Read from the ``.git`` files (``HEAD``, loose refs, ``packed-refs``, worktree
    ``commondir``) without running git; ``(None, None)`` outside a repository or on any
    trouble, a None branch for a detached HEAD.
    """
    try:
        git_dir = _find_git_dir(start)
        if git_dir is None:
            return None, None
        head = (git_dir / "HEAD").read_text(encoding="utf-8").strip()
        if head.startswith("ref:"):
            ref = head[len("ref:") :].strip()
            branch = ref.removeprefix("refs/heads/")
            return _read_ref(git_dir, ref), branch
        return head or None, None
    except (OSError, UnicodeDecodeError):
        return None, None


def _platform() -> str:
    """``system-release-machine`` from ``uname`` (``platform.platform()`` also probes the
    C library by reading the interpreter binary: tens of ms at every start)."""
    uname = platform.uname()
    return safe_str(f"{uname.system}-{uname.release}-{uname.machine}")


def host_name() -> str:
    """This machine's host name, as runs record it."""
    return safe_str(socket.gethostname())


def environment(config: pytest.Config, probe: GitProbe | None = None) -> Environment:
    """The environment of this pytest process (argv as the process received it); the git
    facts are those of the repository holding pytest's rootdir: the dirty flag and the
    changed files come from one ``git status`` (``probe``, started earlier, or one started
    now), both None when it gave no answer."""
    commit, branch = git_head(config.rootpath)
    probe = probe or GitProbe(config.rootpath)
    status = probe.result() if commit is not None else None
    probe.close()
    return Environment(
        python_version=platform.python_version(),
        pytest_version=pytest.__version__,
        platform=_platform(),
        git_commit=commit,
        git_branch=branch,
        git_dirty=None if status is None else status.dirty,
        command_line=tuple(safe_str(a) for a in sys.argv),
        host=host_name(),
        pid=os.getpid(),
        git_changed_files=None if status is None else status.changed,
        git_changed_files_truncated=status is not None and status.truncated,
    )
