"""Query-time git: the files that changed since a commit, in the repository a command runs in.

Used by ``runstore triage`` to say what changed since the last green run. Every function
here answers None instead of raising when it cannot answer: git is missing, the folder is
not in a repository, the commit is unknown there, a git command fails or the time budget
runs out (the git processes are then killed).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

__all__ = ["GIT_BUDGET_SECONDS", "changed_since"]

GIT_BUDGET_SECONDS = 2.0
"""Longest wait (s) for all the git commands of one :func:`changed_since` call together.

``git diff --name-only`` over a large repository takes tens of milliseconds when its index
is fresh; past the budget the answer is None ("not known"), never a partial list."""

_COMMIT = re.compile(r"[0-9a-fA-F]{4,64}")
"""What a stored commit looks like (an abbreviated or full SHA-1 or SHA-256 name); anything
else is never handed to git, so no stored text can become a git option."""


def _git(args: list[str], cwd: Path, deadline: float) -> bytes | None:
    """Standard output of ``git args`` run in ``cwd``, or None when git is missing, exits
    non-zero or does not finish before ``deadline`` (a ``time.monotonic()`` value)."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return None
    env = dict(os.environ, GIT_OPTIONAL_LOCKS="0", LC_ALL="C")
    try:
        process = subprocess.Popen(
            ["git", "--no-optional-locks", *args], cwd=cwd, env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )
    except OSError:  # no git on PATH, or cwd is gone
        return None
    try:
        out, _ = process.communicate(timeout=remaining)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        return None
    return out if process.returncode == 0 else None


def _paths(out: bytes) -> set[str]:
    """The NUL-separated paths of a ``-z`` listing (undecodable bytes replaced)."""
    return {p for p in out.decode("utf-8", errors="replace").split("\0") if p}


def changed_since(
    commit: str, cwd: Path | None = None, *, budget: float = GIT_BUDGET_SECONDS
) -> tuple[str, ...] | None:
    """The files of the repository containing ``cwd`` (default: the current folder) that
    differ from ``commit``: sorted, each once, relative to the repository's top, ``/``
    separated.

    That is ``git diff --name-only <commit>`` (what was committed since, plus staged and
    unstaged changes of tracked files; renames as a deletion and an addition) and the
    untracked files git does not ignore (``git ls-files --others --exclude-standard``),
    all within ``budget`` seconds. None when ``commit`` does not look like a commit name,
    the folder is in no repository, the commit does not exist there, git is missing, a git
    command fails, or the budget runs out. Never raises.
    """
    if not isinstance(commit, str) or _COMMIT.fullmatch(commit) is None:
        return None
    try:
        folder = Path.cwd() if cwd is None else cwd
    except OSError:  # the current folder was removed
        return None
    deadline = time.monotonic() + budget
    if _git(["cat-file", "-e", f"{commit}^{{commit}}"], folder, deadline) is None:
        return None
    diff = _git(["diff", "--name-only", "--no-renames", "-z", commit, "--"], folder, deadline)
    if diff is None:
        return None
    untracked = _git(
        ["ls-files", "--others", "--exclude-standard", "--full-name", "-z", "--", ":/"],
        folder, deadline,
    )
    if untracked is None:
        return None
    return tuple(sorted(_paths(diff) | _paths(untracked)))
