"""``runstore quarantine check``: which entry it checks (the one the plugin applies), and
that its evidence is stored before the entry leaves the file."""

from __future__ import annotations

import json
import os
import textwrap
from datetime import date
from pathlib import Path
from typing import Any

import apsw
import pytest
from click.testing import CliRunner
from returns.result import Failure

from runstore import quarantine as quarantine_module
from runstore.cli import _quarantine as cli_quarantine
from runstore.cli import cli
from runstore.layers import build, sqlite
from runstore.quarantine import QuarantineFileError
from runstore.services.test_runs import DataReader

TODAY = date(2026, 12, 1)

TESTS = """
    def test_fixed():
        pass
"""


def _entry(key: str, value: str, expires: str = "2026-12-31") -> str:
    return (f'[[quarantine]]\n{key} = "{value}"\nowner = "{key}-owner"\nreason = "r"\n'
            f"expires = {expires}\n\n")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in [n for n in os.environ if n.startswith(("PYTEST_", "RUNSTORE_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setattr(quarantine_module, "today", lambda: TODAY)
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "test_counted.py").write_text(textwrap.dedent(TESTS), encoding="utf-8")
    return folder


def _file(project: Path, text: str) -> Path:
    file = project / ".runstore-quarantine.toml"
    file.write_text(text, encoding="utf-8")
    return file


def _check(project: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    result = CliRunner().invoke(
        cli, ["--db", str(project / ".runstore" / "runstore.db"), "--format", "json",
              "quarantine", "check", "test_counted.py::test_fixed", "--runs", "2", *args],
        catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout), result.stderr


def _released(project: Path) -> list[bool]:
    """Whether each stored fix check released its test, newest first."""
    with build(sqlite(project / ".runstore" / "runstore.db")) as container:
        checks = container.get(DataReader).fix_checks("proj").unwrap()
    return [c.result.released for c in checks]


def test_a_node_id_entry_wins_over_an_earlier_pattern(project: Path) -> None:
    pattern = _entry("pattern", "test_counted.py::*")
    file = _file(project, pattern + _entry("nodeid", "test_counted.py::test_fixed"))
    code, document, _ = _check(project)
    assert code == 0, document
    assert (document["entry"], document["released"]) == ("test_counted.py::test_fixed", True)
    assert file.read_text(encoding="utf-8") == pattern


def test_an_expired_entry_is_not_checked(project: Path) -> None:
    expired = _entry("nodeid", "test_counted.py::test_fixed", expires="2026-11-30")
    file = _file(project, expired + _entry("pattern", "test_counted.py::*"))
    code, document, _ = _check(project)  # the pattern applies today, and stays
    assert code == 0, document
    assert (document["entry"], document["released"]) == ("test_counted.py::*", False)
    file.write_text(expired, encoding="utf-8")
    result = CliRunner().invoke(
        cli, ["--db", str(project / ".runstore" / "runstore.db"), "quarantine", "check",
              "test_counted.py::test_fixed"], catch_exceptions=False)
    assert result.exit_code == 2
    assert ("'test_counted.py::test_fixed' is not quarantined in "
            f"{file}; entry test_counted.py::test_fixed expired after 2026-11-30"
            in " ".join(result.stderr.split()))
    assert file.read_text(encoding="utf-8") == expired


def test_evidence_that_cannot_be_stored_leaves_the_entry(project: Path) -> None:
    text = _entry("nodeid", "test_counted.py::test_fixed")
    file = _file(project, text)
    assert _check(project)[0] == 0  # releases it, and makes the database
    file.write_text(text, encoding="utf-8")
    connection = apsw.Connection(str(project / ".runstore" / "runstore.db"))
    connection.execute("CREATE TRIGGER refuse BEFORE INSERT ON fix_checks "
                       "BEGIN SELECT RAISE(ABORT, 'refused'); END")
    connection.close()
    code, _, _ = _check(project)
    assert code == 1
    assert file.read_text(encoding="utf-8") == text  # no evidence: the entry stays
    assert _released(project) == [True]  # the first check's only


def test_an_entry_that_cannot_be_removed_is_stored_as_not_released(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _entry("nodeid", "test_counted.py::test_fixed")
    file = _file(project, text)
    monkeypatch.setattr(cli_quarantine, "remove_entry", lambda path, key: Failure(
        QuarantineFileError(path, "unreadable", "read-only file system")))
    code, document, _ = _check(project)
    assert code == 1
    assert (document["green"], document["released"]) == (True, False)
    assert document["fix_check"]["released"] is False
    assert file.read_text(encoding="utf-8") == text
    assert _released(project) == [False, True]  # the newest says it stays
