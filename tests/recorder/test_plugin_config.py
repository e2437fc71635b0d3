"""The plugin reads ``[tool.runstore.flaky]`` from the ``pyproject.toml`` at pytest's
rootdir: its summary line counts the verdicts of that policy, and a bad value stops pytest
with a usage error (exit 4) naming the file and the key, before any test runs."""

from __future__ import annotations

from pathlib import Path

from plugin_runs import SUMMARY, run_pytest, write

FLIP = """
from pathlib import Path


def test_flip():
    runs = Path(__file__).with_name("runs.txt")
    n = int(runs.read_text()) + 1 if runs.exists() else 1
    runs.write_text(str(n))
    assert n != 2
"""


def _line(output: str) -> str:
    found: list[str] = [
        line for line in SUMMARY.findall(output) if line.startswith("runstore: run")
    ]
    assert found, output
    return found[-1]


def test_the_summary_line_judges_under_the_rootdirs_policy(tmp_path: Path) -> None:
    folder = write(tmp_path / "proj", test_flip=FLIP)
    (folder / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    for _ in range(3):  # P F P: recovered, and flaky by same_code on one code
        done = run_pytest(folder, "--runstore")
    assert "1 flaky" in _line(done.stdout), done.stdout
    (folder / "pyproject.toml").write_text(
        "[tool.runstore.flaky]\nevidence = ['oscillation']\n", encoding="utf-8")
    (folder / "runs.txt").write_text("3", encoding="utf-8")  # the next run passes: P P F P
    done = run_pytest(folder, "--runstore")
    assert "flaky" not in _line(done.stdout), done.stdout


def test_a_bad_value_is_a_usage_error_before_any_test_runs(tmp_path: Path) -> None:
    folder = write(tmp_path / "proj", test_flip=FLIP)
    config = folder / "pyproject.toml"
    config.write_text("[tool.runstore.flaky]\nflip_rate = 2\n", encoding="utf-8")
    done = run_pytest(folder, "--runstore")
    assert done.returncode == 4, done.stdout + done.stderr
    assert f"runstore: {config}: tool.runstore.flaky.flip_rate: must be a number in 0.0..1.0" in (
        done.stderr)
    assert not (folder / "runs.txt").exists()
    assert not (folder / ".runstore").exists()
    done = run_pytest(folder)  # not recording: the file is not read
    assert done.returncode == 0, done.stdout + done.stderr
