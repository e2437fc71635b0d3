"""``examples/main-job.sh`` does what its header and README's quick start say it does."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAIN_JOB = ROOT / "examples" / "main-job.sh"


def _named_rule(text: str) -> str:
    """The flaky rule ``text`` says the example's test is listed for: "because of `RULE`"
    (line breaks and comment marks between the words allowed)."""
    words = " ".join(line.lstrip("# ") for line in text.splitlines())
    found = re.search(r"because of `(\w+)`", words)
    assert found, "names no rule"
    return found.group(1)


def test_the_main_job_lists_its_flaky_test_for_the_rule_its_header_names(
    tmp_path: Path,
) -> None:
    """Run in a copy of ``examples/`` (outside git, so with no clean commit): the header
    and README named ``same_commit`` and ``same_code`` while the output said ``same_code``."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples",
                    ignore=shutil.ignore_patterns(".runstore", "__pycache__", ".pytest_cache"))
    env = {**os.environ, "RUNSTORE_BIN": str(Path(sys.executable).parent)}
    env.pop("RUNSTORE_DB", None)
    done = subprocess.run(["sh", str(tmp_path / "examples" / "main-job.sh")], cwd=tmp_path,
                          env=env, capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr
    flaky = done.stdout.split("== runstore flaky", 1)[1]
    row = next(line for line in flaky.splitlines()
               if line.startswith("tests/test_pricing.py::test_exchange_rates_are_fresh"))
    header = MAIN_JOB.read_text(encoding="utf-8").split("\nset -eu", 1)[0]
    assert row.split()[1] == _named_rule(header)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    intro = readme[:readme.index("examples/main-job.sh")]
    assert _named_rule(intro) == _named_rule(header)
