"""A test that needs the shared acceptance inputs says so when they are missing, and under CI
(``CI`` set, as ``.ci/run`` runs) it fails instead of skipping.

Runs pytest in a subprocess on a generated module with the suite's ``conftest`` as a plugin,
once with ``CI=true`` and once without, against a folder that exists and one that does not.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import in_ci

TESTS = Path(__file__).resolve().parents[1]


def _run(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    present = tmp_path / "present"
    present.mkdir(exist_ok=True)
    (tmp_path / "test_generated.py").write_text(
        "import pytest\n\n"
        f"@pytest.mark.acceptance_inputs({str(tmp_path / 'absent')!r})\n"
        "def test_needs_absent():\n    pass\n\n"
        f"@pytest.mark.acceptance_inputs({str(present)!r})\n"
        "def test_needs_present():\n    pass\n",
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if k != "CI" and not k.startswith("PYTEST_")}
    env |= {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONPATH": str(TESTS)}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-rsE",
         "--strict-markers", "test_generated.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )


def test_outside_ci_a_missing_folder_skips_naming_it(tmp_path: Path) -> None:
    done = _run(tmp_path, None)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed, 1 skipped" in done.stdout
    assert f"needs the acceptance inputs in {tmp_path / 'absent'}" in done.stdout


def test_under_ci_a_missing_folder_fails(tmp_path: Path) -> None:
    done = _run(tmp_path, "true")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 passed, 1 error" in done.stdout
    assert f"the acceptance inputs are missing: {tmp_path / 'absent'}" in done.stdout
    assert "skipped" not in done.stdout


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, False), ("", False), ("0", False), ("false", False), ("False", False),
     ("true", True), ("1", True), ("yes", True)],
)
def test_in_ci_reads_the_ci_variable(value: str | None, expected: bool) -> None:
    assert in_ci({} if value is None else {"CI": value}) is expected
