"""A blank project name is not recorded: the rootdir's name is used, with one warning."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from runstore.layers import build, sqlite
from runstore.services.test_runs import DataReader


@pytest.mark.parametrize("how", ["option", "ini"])
def test_a_blank_project_falls_back_to_the_rootdir_name(tmp_path: Path, how: str) -> None:
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "test_one.py").write_text("def test_one():\n    assert True\n", encoding="utf-8")
    extra = ["--runstore-project= "]
    if how == "ini":
        extra = ["-o", "runstore_project= "]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "RUNSTORE_"))}
    env.update(PYTHONDONTWRITEBYTECODE="1", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p",
         "runstore.pytest_plugin", "-q", "--runstore", *extra],
        cwd=folder, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stdout
    lines = re.findall(r"^runstore: .*$", done.stdout, re.M)
    assert len(lines) == 1, done.stdout
    assert "is blank; recorded as project 'proj'" in lines[0]
    with build(sqlite(folder / ".runstore" / "runstore.db")) as container:
        assert container.get(DataReader).latest_run("proj").unwrap().project == "proj"
