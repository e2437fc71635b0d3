"""The whole text output of ``runstore trends`` and ``runstore history``, charts included,
against snapshot files in ``snapshots/`` (at ``COLUMNS=100``, in UTC, on recorded runs whose
times are fixed), in Unicode and in the ASCII fallback.

A changed rendering fails here with a diff; when the change is meant, rewrite the files with
``RUNSTORE_UPDATE_SNAPSHOTS=1`` and read the new ones before committing them.
"""

from __future__ import annotations

import difflib
import json
import os
import pty
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from runstore.cli import cli
from runstore.layers import build, sqlite
from runstore.services.test_runs import (
    CollectionError,
    DataStore,
    ErrorInfo,
    FileCoverage,
    Outcome,
    Phase,
    RunStart,
    RunStatus,
    TestResult,
)
from runstore.testing import make_item

SNAPSHOTS = Path(__file__).parent / "snapshots"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ENV = {"COLUMNS": "100", "TZ": "UTC"}

TOTAL = "tests/test_cart.py::test_total"

# Per run: test_total's outcome and duration (ms), the run's seconds (None: still running),
# its coverage of cart.py (lines missed of 40; None: no coverage).
PLAN: list[tuple[Outcome, float, int | None, int | None]] = [
    (Outcome.PASSED, 35.0, 12, 8),
    (Outcome.FAILED, 30.0, 14, 8),
    (Outcome.PASSED, 40.0, 13, 6),
    (Outcome.ERROR, 90.0, 25, None),
    (Outcome.PASSED, 45.0, 15, 4),
    (Outcome.FAILED, 35.0, 16, 4),
    (Outcome.PASSED, 50.0, 11, 2),
    (Outcome.PASSED, 40.0, None, None),
]


def _items(run: int, total: Outcome, total_ms: float) -> list[TestResult]:
    items = [
        make_item("tests/test_cart.py::test_add", duration_ms=3.0),
        make_item(TOTAL, total, duration_ms=total_ms, message=f"assert {457 + run} == 457"),
        make_item("tests/test_cart.py::test_slow", duration_ms=800.0),
        make_item("tests/test_rates.py::test_live", Outcome.SKIPPED),
        make_item("tests/test_rates.py::test_known_bug", Outcome.XFAILED),
    ]
    if run % 3 == 0:
        items.append(make_item("tests/test_rates.py::test_fixed_bug", Outcome.XPASSED))
    return items


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """Eight runs of ``shop`` (the last one still running) whose ``test_total`` fails and
    errs now and then, with coverage in five of them."""
    path = tmp_path / "runstore.db"
    with build(sqlite(path)) as container:
        store = container.get(DataStore)
        for run, (total, total_ms, seconds, missed) in enumerate(PLAN):
            started = T0 + timedelta(minutes=run)
            run_id = store.begin_run(RunStart("shop", f"inv-{run}", started)).unwrap()
            store.record_results(run_id, _items(run, total, total_ms)).unwrap()
            if missed is not None:
                store.write_coverage(run_id, [FileCoverage(
                    "src/shop/cart.py", 40, missed, 0, 0, 0, tuple(range(1, missed + 1)))]
                ).unwrap()
            if seconds is not None:
                status = RunStatus.PASSED if total is Outcome.PASSED else RunStatus.FAILED
                store.finish_run(run_id, status, started + timedelta(seconds=seconds)).unwrap()
    return path


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Local time is UTC while a test runs (the tables show local times)."""
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _output(db: Path, *args: str, charset: str = "utf-8") -> str:
    result = CliRunner(charset=charset).invoke(cli, ["--db", str(db), *args],
                                               catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def _trimmed(text: str) -> str:
    """``text`` without the spaces rich pads a table's last column with (an editor would
    trim them from the file too)."""
    return "".join(line.rstrip() + "\n" for line in text.splitlines())


def assert_snapshot(name: str, text: str) -> None:
    """``text`` (trailing spaces trimmed) is the content of ``snapshots/NAME.txt``; with
    ``RUNSTORE_UPDATE_SNAPSHOTS=1`` the file is written instead."""
    path = SNAPSHOTS / f"{name}.txt"
    text = _trimmed(text)
    if os.environ.get("RUNSTORE_UPDATE_SNAPSHOTS") == "1":
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"no snapshot {path.name}: run with RUNSTORE_UPDATE_SNAPSHOTS=1"
    expected = path.read_text(encoding="utf-8")
    diff = "\n".join(difflib.unified_diff(expected.splitlines(), text.splitlines(),
                                          f"{path.name} (snapshot)", "output", lineterm=""))
    assert text == expected, f"the output differs from {path.name}:\n{diff}"


def test_trends_text(db: Path) -> None:
    assert_snapshot("trends", _output(db, "trends"))


def test_history_text(db: Path) -> None:
    assert_snapshot("history", _output(db, "history", "test_total"))


def test_trends_text_in_ascii(db: Path) -> None:
    text = _output(db, "trends", charset="ascii")
    assert text.isascii()
    assert_snapshot("trends-ascii", text)


def test_history_text_in_ascii(db: Path) -> None:
    text = _output(db, "history", "test_total", charset="ascii")
    assert text.isascii()
    assert_snapshot("history-ascii", text)


def test_an_ascii_standard_output_gets_the_ascii_charts(db: Path) -> None:
    """The fallback follows the real standard output's encoding, as a user's
    ``PYTHONIOENCODING=ascii`` (or a C locale without coercion to UTF-8) sets it."""
    env = {**os.environ, **ENV, "PYTHONIOENCODING": "ascii"}
    done = subprocess.run(
        [sys.executable, "-c", "from runstore.cli import cli; cli.main()", "--db", str(db),
         "history", "test_total"],
        capture_output=True, env=env, check=False, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert_snapshot("history-ascii", done.stdout.decode("ascii"))


def _on_a_terminal(db: Path, *args: str, columns: int = 100) -> str:
    """What ``runstore --db DB ARGS`` writes to a pseudo-terminal of ``columns`` columns."""
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env.update(ENV, TERM="xterm-256color", COLUMNS=str(columns))
    leader, follower = pty.openpty()
    with subprocess.Popen(
        [sys.executable, "-c", "from runstore.cli import cli; cli.main()", "--db", str(db),
         *args],
        stdin=subprocess.DEVNULL, stdout=follower, stderr=subprocess.DEVNULL, env=env,
    ) as child:
        os.close(follower)  # read while it writes: a full terminal buffer would block it
        written = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal's other end is closed: all is read
                break
            if not chunk:
                break
            written += chunk
        os.close(leader)
        assert child.wait(timeout=120) == 0
    return written.decode("utf-8").replace("\r\n", "\n")


@pytest.mark.parametrize(("name", "args"), [
    ("trends", ("trends",)), ("history", ("history", "test_total")),
], ids=["trends", "history"])
def test_a_terminal_gets_the_same_charts_in_colour(
    db: Path, name: str, args: tuple[str, ...]
) -> None:
    """On a terminal of 100 columns nothing wraps: the output is the snapshot's, coloured
    (failing cells in red, passed in green)."""
    shown = _on_a_terminal(db, *args)
    assert "\x1b[1;31m✗" in shown
    assert "\x1b[32m" in shown
    assert_snapshot(name, re.sub(r"\x1b\[[0-9;]*m", "", shown))


@pytest.mark.parametrize(("name", "args"), [
    ("trends-json", ("trends",)), ("history-json", ("history", "test_total")),
], ids=["trends", "history"])
def test_json_output_has_no_chart(db: Path, name: str, args: tuple[str, ...]) -> None:
    """The charts are text only: the JSON documents are as they were before them."""
    assert_snapshot(name, _output(db, "--format", "json", *args))


@pytest.mark.parametrize(("args", "columns", "line"), [
    (("trends",), 34, "▁█▁█▁█▁▁"), (("history", "test_total"), 60, "✓✗✓E✓✗✓"),
], ids=["trends", "history"])
def test_a_narrow_terminal_gives_each_chart_a_line_of_its_own(
    db: Path, args: tuple[str, ...], columns: int, line: str
) -> None:
    """A chart line never wraps on a terminal: where a chart and its label and note do not
    fit on one line, the chart goes under them and keeps every run that fits the width;
    piped, the lines are the snapshots'."""
    shown = re.sub(r"\x1b\[[0-9;]*m", "", _on_a_terminal(db, *args, columns=columns))
    lines = shown.splitlines()
    assert line in lines
    assert "charts: the newest" not in shown
    assert max(len(text) for text in lines[:lines.index(line) + 1]) <= columns


def _long_history(tmp_path: Path, runs: int) -> Path:
    """``runs`` passed runs of ``proj`` with one test, ``tests/test_m0.py::test_0``, taking
    2 to 4 s."""
    path = tmp_path / "long.db"
    with build(sqlite(path)) as container:
        store = container.get(DataStore)
        for run in range(runs):
            started = T0 + timedelta(minutes=run)
            run_id = store.begin_run(RunStart("proj", f"inv-{run}", started)).unwrap()
            store.record_results(run_id, [make_item("tests/test_m0.py::test_0",
                                                    duration_ms=1.0 + run % 3)]).unwrap()
            store.finish_run(run_id, RunStatus.PASSED,
                             started + timedelta(seconds=2 + run % 3)).unwrap()
    return path


@pytest.mark.parametrize(("args", "chart", "title"), [
    (("history", "tests/test_m0.py::test_0"), "outcome   newest 40 of 50: 40 passed",
     "tests/test_m0.py::test_0"),
    (("trends",), "took      2.00s to 4.00s", "proj: last 20 runs, oldest first"),
], ids=["history", "trends"])
def test_forty_columns_give_the_charts_the_whole_width(
    tmp_path: Path, args: tuple[str, ...], chart: str, title: str
) -> None:
    """On 40 columns a strip of 50 outcomes keeps 40 of them (beside its label and note it
    kept 5: "outcome ✓  newest 1 of 50"), trends keeps all its 20 runs under an unwrapped
    title, and no chart or legend line is wider than the terminal."""
    shown = re.sub(r"\x1b\[[0-9;]*m", "", _on_a_terminal(_long_history(tmp_path, 50), *args,
                                                         columns=40))
    lines = shown.splitlines()
    assert lines[0] == title
    assert chart in lines
    assert len(lines[lines.index(chart) + 1]) == (40 if args[0] == "history" else 20)
    charts = lines[:next(i for i, text in enumerate(lines) if text.startswith("run "))]
    assert max(len(text) for text in charts) <= 40


def test_a_terminal_too_narrow_for_the_whole_bar_gets_a_shorter_one(db: Path) -> None:
    """On 80 columns the outcome bars give up cells so that each run stays one line (a
    bar of 20 pushed the table past the width and rich wrapped every row in two)."""
    shown = re.sub(r"\x1b\[[0-9;]*m", "", _on_a_terminal(db, "trends", columns=80))
    lines = shown.splitlines()
    rows = lines[[line.startswith("run ") for line in lines].index(True) + 1:]
    assert [line.split()[0] for line in rows] == [str(i) for i in range(1, len(PLAN) + 1)]
    assert max(len(line.rstrip()) for line in shown.splitlines()) <= 80
    assert {len(line.rstrip()) for line in rows} == {80}  # the bars take what is left
    assert {len(line.rstrip().rsplit("  ", 1)[-1]) for line in rows} <= set(range(8, 20))


def test_trends_counts_a_runs_collection_errors_as_failing(tmp_path: Path) -> None:
    """A run stopped by two collection errors has no items: its failing column, failing
    sparkline and bar show the 2 errors (as the HTML report draws them), and its JSON row
    has them in ``collection_errors`` with ``failing`` still its failed and error items.
    Before, the text said failing 0 under an empty bar."""
    path = tmp_path / "broken.db"
    with build(sqlite(path)) as container:
        store = container.get(DataStore)
        first = store.begin_run(RunStart("proj", "inv-0", T0)).unwrap()
        store.record_results(first, [make_item("t.py::a")]).unwrap()
        store.finish_run(first, RunStatus.PASSED, T0 + timedelta(seconds=1)).unwrap()
        broken = store.begin_run(RunStart("proj", "inv-1", T0 + timedelta(minutes=1))).unwrap()
        store.record_collection_errors(broken, [
            CollectionError(f"tests/test_{name}.py", f"tests/test_{name}.py",
                            ErrorInfo(Phase.COLLECT, "ModuleNotFoundError", "No module 'x'"))
            for name in ("a", "b")]).unwrap()
        store.finish_run(broken, RunStatus.FAILED, T0 + timedelta(minutes=1, seconds=1)).unwrap()
    lines = _output(path, "trends").splitlines()
    assert "failing   ▁█  0 to 2" in lines
    row = next(line for line in lines if line.startswith("2 "))
    assert row.split()[3:6] == ["failed", "0", "2"]
    assert row.rstrip().endswith("✗" * 20)
    runs = json.loads(_output(path, "--format", "json", "trends"))["runs"]
    assert [(r["total"], r["failing"], r["collection_errors"]) for r in runs] == [
        (1, 0, 0), (0, 0, 2)]
