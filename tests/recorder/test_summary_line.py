"""The plugin's one summary line always shows how many items failed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

SOURCE = """
    import os

    import release  # noqa: F401

    def test_flips():
        assert os.environ["MODE"] != "fail"

    def test_broken():
        assert False
"""


def _record(folder: Path, mode: str) -> str:
    # Each run on code of its own (a new code fingerprint), as after an edit: the break and
    # the fix are the code's, not flakiness on unchanged code.
    (folder / "release.py").write_text(f"MODE = {mode!r}\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "RUNSTORE_"))}
    env.update(PYTHONDONTWRITEBYTECODE="1", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", MODE=mode)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p",
         "runstore.pytest_plugin", "-q", "--runstore"],
        cwd=folder, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 1, done.stdout
    lines = re.findall(r"^runstore: .*$", done.stdout, re.M)
    assert len(lines) == 1, done.stdout
    return str(lines[0])


def test_failures_are_counted_beside_flaky_ones(tmp_path: Path) -> None:
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "test_mixed.py").write_text(textwrap.dedent(SOURCE), encoding="utf-8")
    assert _record(folder, "fail") == "runstore: run 1 recorded: 2 new failures (runstore show 1)"
    assert _record(folder, "pass") == (
        "runstore: run 2 recorded: 1 failed, none new, 1 recovered (runstore show 2)"
    )
    assert _record(folder, "fail") == (
        "runstore: run 3 recorded: 2 failed, none new, 1 flaky (runstore show 3)"
    )
