"""mypy reads the container's keys as typed: the checked file passes, a wrong snippet fails.

mypy runs (with the project's configuration) on ``check_container_types.py`` and on a snippet
whose wrong lines each say the error codes mypy must report there (``# E: code ...``). The
test fails when a key loosens to ``Any`` (the wrong lines would then pass) and when the
checked file stops type-checking.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy")

HERE = Path(__file__).parent
ROOT = HERE.parents[1]

WRONG = """\
from collections.abc import Iterator

from runstore.layers import CLOCK, DATA_READER, DATA_STORE, Container, Layer, SqliteDatabase, Tag
from runstore.services import DataReader, DataStore


def wrong(c: Container) -> None:
    reader: DataReader = c.get(DATA_STORE)  # E: assignment
    store: DataReader = c.get(DataStore)  # E: assignment
    c.get(Tag.of(DataStore)).no_such_method()  # E: attr-defined
    c.get(DataStore).no_such_method()  # E: attr-defined
    c.get("runstore.services.test_runs.DataStore")  # E: call-overload
    Layer.value(CLOCK, "noon")  # E: misc
    Layer.service(DATA_READER, lambda c: c.get(SqliteDatabase))  # E: arg-type return-value
    Layer.service(DataReader, lambda c: c.get(DataStore))  # E: arg-type return-value

    def opens_a_database(c: Container) -> Iterator[SqliteDatabase]:
        yield c.get(SqliteDatabase)

    Layer.service(DATA_READER, opens_a_database)  # E: arg-type
    Layer.service(DataReader, opens_a_database)  # E: arg-type
"""

_ERROR = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+): error: .*\[(?P<code>[a-z-]+)\]$")
# mypy 2.2 and later say so for the configuration's `enable_incomplete_feature = ["TypeForm"]`,
# which mypy 1.19 to 2.1 need (see pyproject.toml).
_ALREADY_ENABLED = "Warning: TypeForm is already enabled by default"


def _expected(source: str) -> set[tuple[int, str]]:
    return {
        (number, code)
        for number, line in enumerate(source.splitlines(), start=1)
        if "# E:" in line
        for code in line.split("# E:")[1].split()
    }


def test_mypy_accepts_the_checked_types_and_reports_each_wrong_line(tmp_path: Path) -> None:
    snippet = tmp_path / "wrong_container_use.py"
    snippet.write_text(WRONG, encoding="utf-8")
    checked = HERE / "check_container_types.py"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / "mypy-cache"),
            "--no-error-summary",
            "--show-error-codes",
            str(checked),
            str(snippet),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    reported: dict[str, set[tuple[int, str]]] = {}
    for line in result.stdout.splitlines():
        match = _ERROR.match(line)
        assert match is not None or ": note: " in line or line == _ALREADY_ENABLED, line
        if match:
            name = Path(match["path"]).name
            reported.setdefault(name, set()).add((int(match["line"]), match["code"]))
    assert reported.get(checked.name, set()) == set(), result.stdout
    assert reported.get(snippet.name, set()) == _expected(WRONG), result.stdout
