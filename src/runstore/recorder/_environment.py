"""Where a run ran: versions, platform, git commit and branch, argv, host and pid."""

from __future__ import annotations

import os
import platform
import socket
import sys
from pathlib import Path

import pytest

from runstore.recorder._text import safe_str
from runstore.services.testruns import Environment

__all__ = ["environment", "git_head", "host_name"]


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


def environment(config: pytest.Config) -> Environment:
    """The environment of this pytest process (argv as the process received it)."""
    commit, branch = git_head(config.rootpath)
    return Environment(
        python_version=platform.python_version(),
        pytest_version=pytest.__version__,
        platform=_platform(),
        git_commit=commit,
        git_branch=branch,
        command_line=tuple(safe_str(a) for a in sys.argv),
        host=host_name(),
        pid=os.getpid(),
    )
