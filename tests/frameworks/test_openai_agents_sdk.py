"""The OpenAI Agents SDK's own session tests, run on ``RunstoreSession``.

The SDK's sdist (``openai-agents`` of ``requirements.txt``, unpacked by ``.ci/frameworks``,
its root in ``RUNSTORE_AGENTS_SDIST``) ships its test tree; its generic session tests run in
a pytest process of their own from that root (their package is named ``tests``, as
runstore's) with ``agents_sdk_plugin``, which swaps the adapter in and deselects by name the
tests of ``SQLiteSession``'s internals and those that build no session, each with its
reason. The counts are exact for 0.24.0: a test the SDK adds, renames or drops changes them
and fails here, so that the list is looked at again whenever the pin moves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import agents_sdk_plugin

SDK_TESTS = ("tests/memory/test_session.py", "tests/memory/test_session_limit.py")
PASSED, DESELECTED = 49, 22
"""What openai-agents 0.24.0's two files give: 71 tests, 22 of them deselected."""


def test_the_sdks_session_tests_pass_on_the_adapter(tmp_path: Path) -> None:
    sdist = Path(os.environ["RUNSTORE_AGENTS_SDIST"])
    report = tmp_path / "report.json"
    here = str(Path(__file__).parent)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])),
        "RUNSTORE_AGENTS_REPORT": str(report),
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-p", "agents_sdk_plugin", "--basetemp", str(tmp_path / "sdk"), *SDK_TESTS],
        cwd=sdist, env=env, capture_output=True, text=True, timeout=900, check=False,
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert f"{PASSED} passed, {DESELECTED} deselected" in summary, summary
    found = json.loads(report.read_text())
    built = found["built"]
    assert len(built) == PASSED, built
    assert all(built.values()), built
    names = {nodeid.split("::")[-1].split("[")[0] for nodeid in found["deselected"]}
    assert names == set(agents_sdk_plugin.DESELECTED), "every deselected name still exists"
    assert len(found["deselected"]) == DESELECTED
