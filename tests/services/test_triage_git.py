"""``runstore._git.changed_since``: the files changed since a commit, or None, never raising."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from runstore._git import changed_since


def _git(folder: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    done = subprocess.run(
        ["git", "-c", "user.name=runstore", "-c", "user.email=runstore@example.invalid",
         *args], cwd=folder, env=env, check=True, capture_output=True, text=True)
    return done.stdout.strip()


@pytest.fixture
def repository(tmp_path: Path) -> tuple[Path, str]:
    """A repository with one commit (``a.py``, ``pkg/b.py``, ``pkg/c.py``, a ``.gitignore``)
    and its sha."""
    folder = tmp_path / "repo"
    (folder / "pkg").mkdir(parents=True)
    for name in ("a.py", "pkg/b.py", "pkg/c.py"):
        (folder / name).write_text("x = 1\n", encoding="utf-8")
    (folder / ".gitignore").write_text("*.log\n", encoding="utf-8")
    _git(folder, "init", "-q")
    _git(folder, "add", ".")
    _git(folder, "commit", "-q", "-m", "first")
    return folder, _git(folder, "rev-parse", "HEAD")


def test_nothing_changed_is_an_empty_list(repository: tuple[Path, str]) -> None:
    folder, commit = repository
    assert changed_since(commit, folder) == ()


def test_committed_staged_unstaged_and_untracked_changes_count(
    repository: tuple[Path, str],
) -> None:
    folder, commit = repository
    (folder / "a.py").write_text("x = 2\n", encoding="utf-8")          # committed since
    _git(folder, "commit", "-q", "-am", "second")
    (folder / "pkg" / "b.py").write_text("x = 3\n", encoding="utf-8")  # staged
    _git(folder, "add", "pkg/b.py")
    (folder / "pkg" / "c.py").unlink()                                  # deleted, unstaged
    (folder / "pkg" / "new é.py").write_text("", encoding="utf-8")     # untracked
    (folder / "debug.log").write_text("", encoding="utf-8")            # ignored
    expected = ("a.py", "pkg/b.py", "pkg/c.py", "pkg/new é.py")
    assert changed_since(commit, folder) == expected
    assert changed_since(commit, folder / "pkg") == expected  # from any folder of it
    assert changed_since(commit[:12], folder) == expected     # an abbreviated name


def test_no_answer_is_none(repository: tuple[Path, str], tmp_path: Path,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    folder, commit = repository
    assert changed_since("0" * 40, folder) is None            # not in this repository
    assert changed_since("--output=x", folder) is None        # never handed to git
    assert changed_since("HEAD", folder) is None              # not a commit name
    outside = tmp_path / "outside"
    outside.mkdir()
    assert changed_since(commit, outside) is None             # no repository here
    assert changed_since(commit, tmp_path / "gone") is None   # no such folder
    assert changed_since(commit, folder, budget=0) is None    # out of time
    monkeypatch.setenv("PATH", str(outside))                  # no git at all
    assert changed_since(commit, folder) is None


def test_the_current_folder_is_the_default(repository: tuple[Path, str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    folder, commit = repository
    (folder / "a.py").write_text("x = 2\n", encoding="utf-8")
    monkeypatch.chdir(folder / "pkg")
    assert changed_since(commit) == ("a.py",)
