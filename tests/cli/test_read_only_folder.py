"""A database in a folder that cannot be written: the reason names the folder."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from runstore.cli import cli


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[Path]:
    """A migrated database whose folder is immutable (``chattr +i``)."""
    folder = tmp_path / "imm"
    folder.mkdir()
    path = folder / "good.db"
    assert CliRunner().invoke(cli, ["--db", str(path), "db", "migrate"]).exit_code == 0
    for leftover in folder.glob("good.db-*"):
        leftover.unlink()
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(folder)], check=False).returncode:
        pytest.skip("chattr +i is not available here")
    try:
        yield path
    finally:
        subprocess.run([chattr, "-i", str(folder)], check=True)


@pytest.mark.parametrize(
    "args", [["runs"], ["sessions", "list"], ["db", "status"], ["db", "check"]]
)
def test_the_reason_says_the_folder_must_be_writable(locked: Path, args: list[str]) -> None:
    result = CliRunner().invoke(cli, ["--db", str(locked), *args])
    if result.exit_code == 0:
        return  # reading worked: even better
    assert result.exit_code == 1, result.output
    assert f"the folder of {locked} must be writable" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
