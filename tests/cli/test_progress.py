"""Long commands draw a progress bar on standard error when it is a terminal, and nothing
(loading no rich) when it is a pipe or the output is JSON.

Each command runs in a fresh interpreter: standard error on a pseudo-terminal (``pty``) or
a pipe, standard output on a pipe. The bar is recognised by its description and a
percentage ("100%") among the bytes written to the terminal.
"""

from __future__ import annotations

import fcntl
import json
import os
import struct
import subprocess
import sys
import termios
import threading
from datetime import UTC, datetime
from pathlib import Path

import attrs
import pytest

from runstore.cli._sessions import PROGRESS_FROM_BYTES
from runstore.layers import DATA_STORE, build, sqlite
from runstore.services.test_runs import (
    Outcome,
    Phase,
    PhaseResult,
    RunStart,
    RunStatus,
    TestResult,
)

_PROBE = """
import json, sys
from runstore.cli import cli
report, args = sys.argv[1], sys.argv[2:]
try:
    cli.main(args, prog_name="runstore")
except SystemExit as done:
    code = done.code
with open(report, "w") as out:
    json.dump({"code": code, "rich": "rich" in sys.modules}, out)
"""

_ENV = {
    **{k: v for k, v in os.environ.items()
       if k not in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "CI")},
    "TERM": "xterm-256color",
    "COLUMNS": "100",
}
"""The environment of each run: a terminal rich draws on (CI systems set variables that
change rich's choice), 100 columns wide."""


@attrs.frozen
class Ran:
    """How one command ended: its exit code, standard output, what it wrote on standard
    error (the terminal's bytes decoded, or the pipe's text), and whether it loaded rich."""

    code: int
    stdout: str
    stderr: str
    rich: bool


def _drain(fd: int, into: list[bytes]) -> None:
    """Read the terminal's side ``fd`` until the child closes its end."""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: every writer of the terminal is gone
            return
        if not chunk:
            return
        into.append(chunk)


def runstore(tmp_path: Path, *args: str, terminal: bool, probe: str = _PROBE) -> Ran:
    """Run ``runstore ARGS`` (or another ``probe`` script given ARGS) with standard error on
    a pseudo-terminal (``terminal``) or a pipe."""
    report = tmp_path / "probe.json"
    command = [sys.executable, "-c", probe, str(report), *args]
    if not terminal:
        done = subprocess.run(command, capture_output=True, text=True, env=_ENV, timeout=300,
                              stdin=subprocess.DEVNULL, check=False)
        told = json.loads(report.read_text())
        return Ran(told["code"], done.stdout, done.stderr, told["rich"])
    parent, child = os.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    chunks: list[bytes] = []
    reader = threading.Thread(target=_drain, args=(parent, chunks))
    try:
        with subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=child, env=_ENV) as process:
            os.close(child)
            child = -1
            reader.start()
            stdout, _ = process.communicate(timeout=300)
        reader.join(timeout=60)
    finally:
        if child != -1:
            os.close(child)
        os.close(parent)
    told = json.loads(report.read_text())
    return Ran(told["code"], stdout.decode(), b"".join(chunks).decode(errors="replace"),
               told["rich"])


def drew_bar(stderr: str, description: str) -> bool:
    """Whether ``stderr`` holds a progress bar of ``description`` that reached 100%."""
    return description in stderr and "100%" in stderr and "━" in stderr


def assert_no_bar(ran: Ran, description: str) -> None:
    """Nothing of a bar on standard error, and rich never loaded."""
    assert description not in ran.stderr
    assert "%" not in ran.stderr
    assert "━" not in ran.stderr
    assert "\x1b" not in ran.stderr
    assert ran.rich is False


_WRITES_DURING_A_BAR = """
import json, sys
import click
from runstore.cli._output import progress_on_terminal
with progress_on_terminal("working", 3) as advance:
    for n in range(1, 4):
        click.echo(f"line {n}")
        print(f"print {n}")
        advance(n)
with open(sys.argv[1], "w") as out:
    json.dump({"code": 0, "rich": "rich" in sys.modules}, out)
"""


def test_standard_output_written_during_a_bar_stays_on_standard_output(tmp_path: Path) -> None:
    ran = runstore(tmp_path, terminal=True, probe=_WRITES_DURING_A_BAR)
    assert drew_bar(ran.stderr, "working")
    assert ran.stdout == "".join(f"line {n}\nprint {n}\n" for n in range(1, 4))
    assert "line" not in ran.stderr
    assert "print" not in ran.stderr


# -- sessions import -----------------------------------------------------------------------------


def _transcript(path: Path, entries: int) -> Path:
    """A pi transcript of ``entries`` user messages in one chain."""
    header = {"type": "session", "version": 3, "id": "big", "timestamp": "2025-11-30T10:53:20.000Z",
              "cwd": "/w"}
    lines = [json.dumps(header)]
    for n in range(entries):
        lines.append(json.dumps({
            "type": "message", "id": f"e{n}", "parentId": f"e{n - 1}" if n else None,
            "timestamp": "2025-11-30T10:53:21.000Z",
            "message": {"role": "user", "content": [{"type": "text", "text": "x" * 200}]},
        }))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def big_transcript(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = _transcript(tmp_path_factory.mktemp("big") / "big.jsonl", 5_000)
    assert path.stat().st_size >= PROGRESS_FROM_BYTES
    return path


def test_sessions_import_of_a_large_file_draws_a_bar_of_bytes(
    tmp_path: Path, big_transcript: Path
) -> None:
    ran = runstore(tmp_path, "--db", str(tmp_path / "s.db"), "sessions", "import",
                   str(big_transcript), terminal=True)
    assert ran.code == 0, ran.stderr
    assert drew_bar(ran.stderr, "importing")
    assert " MB" in ran.stderr  # sizes, not a count of items
    assert ran.stdout.startswith("imported 5000 entries")


@pytest.mark.parametrize("terminal", [False, True])
def test_sessions_import_shows_no_bar_piped_or_as_json(
    tmp_path: Path, big_transcript: Path, terminal: bool
) -> None:
    args: tuple[str, ...] = ("--format", "json") if terminal else ()
    ran = runstore(tmp_path, "--db", str(tmp_path / "s.db"), *args, "sessions", "import",
                   str(big_transcript), terminal=terminal)
    assert ran.code == 0, ran.stderr
    assert_no_bar(ran, "importing")
    if terminal:
        assert json.loads(ran.stdout)["entries"] == 5000


def test_sessions_import_of_a_small_file_shows_no_bar(tmp_path: Path) -> None:
    small = _transcript(tmp_path / "small.jsonl", 10)
    ran = runstore(tmp_path, "--db", str(tmp_path / "s.db"), "sessions", "import", str(small),
                   terminal=True)
    assert ran.code == 0, ran.stderr
    assert_no_bar(ran, "importing")


# -- prune ---------------------------------------------------------------------------------------


def _recorded(path: Path, runs: int) -> Path:
    """A database of ``runs`` finished runs of one project, each with two items."""
    with build(sqlite(path)) as container:
        store = container.get(DATA_STORE)
        for n in range(runs):
            run = store.begin_run(RunStart("shop", f"inv-{n}", datetime.fromtimestamp(
                1_764_500_000 + n * 60, tz=UTC))).unwrap()
            store.record_results(run, [
                TestResult(f"tests/test_cart.py::test_{i}", "tests/test_cart.py", f"test_{i}",
                           (PhaseResult(Phase.CALL, Outcome.PASSED, 1.0),))
                for i in range(2)
            ]).unwrap()
            store.finish_run(run, RunStatus.PASSED, datetime.fromtimestamp(
                1_764_500_000 + n * 60 + 1, tz=UTC)).unwrap()
    return path


def test_prune_draws_a_bar_of_the_runs_it_removes(tmp_path: Path) -> None:
    db = _recorded(tmp_path / "runs.db", 40)
    ran = runstore(tmp_path, "--db", str(db), "prune", "--keep-runs", "5", terminal=True)
    assert ran.code == 0, ran.stderr
    assert drew_bar(ran.stderr, "pruning runs")
    assert "35/35" in ran.stderr  # runs removed out of the runs the plan removes
    assert ran.stdout.startswith("removed 35 runs")


@pytest.mark.parametrize("terminal", [False, True])
def test_prune_shows_no_bar_piped_or_as_json(tmp_path: Path, terminal: bool) -> None:
    db = _recorded(tmp_path / "runs.db", 12)
    args: tuple[str, ...] = ("--format", "json") if terminal else ()
    ran = runstore(tmp_path, "--db", str(db), *args, "prune", "--keep-runs", "5",
                   terminal=terminal)
    assert ran.code == 0, ran.stderr
    assert_no_bar(ran, "pruning runs")
    if terminal:
        assert json.loads(ran.stdout)["pruned_runs"] == 7
    else:
        assert ran.stdout.startswith("removed 7 runs")


# -- db copy -------------------------------------------------------------------------------------


def test_db_copy_draws_a_bar_of_rows(tmp_path: Path) -> None:
    source = _recorded(tmp_path / "source.db", 20)
    ran = runstore(tmp_path, "db", "copy", str(source), str(tmp_path / "copy.db"),
                   terminal=True)
    assert ran.code == 0, ran.stderr
    assert drew_bar(ran.stderr, "copying rows")
    assert "verified: " in ran.stdout


@pytest.mark.parametrize("terminal", [False, True])
def test_db_copy_shows_no_bar_piped_or_as_json(tmp_path: Path, terminal: bool) -> None:
    source = _recorded(tmp_path / "source.db", 5)
    args: tuple[str, ...] = ("--format", "json") if terminal else ()
    ran = runstore(tmp_path, *args, "db", "copy", str(source), str(tmp_path / "copy.db"),
                   terminal=terminal)
    assert ran.code == 0, ran.stderr
    assert_no_bar(ran, "copying rows")
    if terminal:
        assert json.loads(ran.stdout)["copied"] is True


def test_prune_dry_run_as_json_shows_no_spinner(tmp_path: Path) -> None:
    db = _recorded(tmp_path / "runs.db", 8)
    ran = runstore(tmp_path, "--db", str(db), "--format", "json", "prune", "--keep-runs", "5",
                   "--dry-run", terminal=True)
    assert ran.code == 0, ran.stderr
    assert_no_bar(ran, "planning the prune")
    assert json.loads(ran.stdout)["pruned_runs"] == 3


# -- report --------------------------------------------------------------------------------------


def test_report_draws_a_bar_while_collecting(tmp_path: Path) -> None:
    db = _recorded(tmp_path / "runs.db", 6)
    page = tmp_path / "report.html"
    ran = runstore(tmp_path, "--db", str(db), "report", "-o", str(page), terminal=True)
    assert ran.code == 0, ran.stderr
    assert drew_bar(ran.stderr, "collecting the report")
    assert page.stat().st_size > 0


@pytest.mark.parametrize("terminal", [False, True])
def test_report_shows_no_bar_piped_or_as_json(tmp_path: Path, terminal: bool) -> None:
    db = _recorded(tmp_path / "runs.db", 6)
    args: tuple[str, ...] = ("--format", "json") if terminal else ()
    ran = runstore(tmp_path, "--db", str(db), *args, "report", "-o",
                   str(tmp_path / "report.html"), terminal=terminal)
    assert ran.code == 0, ran.stderr
    assert_no_bar(ran, "collecting the report")
    if terminal:
        assert json.loads(ran.stdout)["runs"] == 6
