"""``runstore quarantine add|remove|list|check``: edits that keep the file, refusals that
change nothing, and fix checks that release a fixed test and keep a flaky one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_json_schemas import validate

from runstore import quarantine as quarantine_module
from runstore.cli import cli
from runstore.layers import build, sqlite
from runstore.services.test_runs import DataReader, FixCheckResult

TODAY = date(2026, 12, 1)

COMMENTED = """\
# Quarantined tests (commit this file).

# the cache warmer races this one
[[quarantine]]
nodeid = "tests/test_cache.py::test_warm"
owner = "alice"
reason = "races the cache warmer"
expires = 2026-12-31
"""


@pytest.fixture(autouse=True)
def _today(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quarantine_module, "today", lambda: TODAY)


def _cli(project: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(
        cli, ["--db", str(project / ".runstore" / "runstore.db"), *args],
        catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def _project(tmp_path: Path, text: str = COMMENTED) -> tuple[Path, Path]:
    project = tmp_path / "proj"
    project.mkdir()
    file = project / ".runstore-quarantine.toml"
    file.write_text(text, encoding="utf-8")
    return project, file


def test_add_appends_and_remove_takes_the_entry_out_again(tmp_path: Path) -> None:
    project, file = _project(tmp_path)
    code, out, _ = _cli(project, "quarantine", "add", "--pattern", "tests/net/*", "--owner",
                        "bob", "--reason", "the proxy flaps", "--days", "14")
    assert code == 0, out
    assert out == f"quarantined tests/net/* until 2026-12-15 (owner bob) in {file}\n"
    text = file.read_text(encoding="utf-8")
    assert text == COMMENTED + ('\n[[quarantine]]\npattern = "tests/net/*"\nowner = "bob"\n'
                                'reason = "the proxy flaps"\nexpires = 2026-12-15\n'
                                "added = 2026-12-01\n")
    code, out, _ = _cli(project, "--format", "json", "quarantine", "remove", "tests/net/*")
    assert code == 0
    document = json.loads(out)
    validate("quarantine-remove.json", document)
    assert document["entry"]["owner"] == "bob"
    assert file.read_text(encoding="utf-8") == COMMENTED


def test_list_says_active_or_expired_without_a_database(tmp_path: Path) -> None:
    project, _ = _project(tmp_path, COMMENTED.replace("2026-12-31", "2026-11-30"))
    code, out, _ = _cli(project, "--format", "json", "quarantine", "list")
    assert code == 0
    document = json.loads(out)
    validate("quarantine-list.json", document)
    assert document["project"] is None
    assert [(e["nodeid"], e["active"], e["tests"]) for e in document["entries"]] == [
        ("tests/test_cache.py::test_warm", False, [])]
    code, out, _ = _cli(project, "quarantine", "list")
    assert "[nodeid, expired after 2026-11-30, owner alice]" in out


@pytest.mark.parametrize(("args", "code"), [
    (["add", "t::x", "--owner", "a", "--reason", "r"], 2),  # no end
    (["add", "t::x", "--owner", "a", "--reason", "r", "--days", "3", "--expires",
      "2027-01-01"], 2),
    (["add", "--owner", "a", "--reason", "r", "--days", "3"], 2),  # neither
    (["add", "t::x", "--pattern", "t::*", "--owner", "a", "--reason", "r", "--days", "3"], 2),
    (["add", "t::x", "--owner", " ", "--reason", "r", "--days", "3"], 2),
    (["add", "t::x", "--owner", "a", "--reason", "two\nlines", "--days", "3"], 2),
    (["add", "t::x", "--owner", "a", "--reason", "r", "--expires", "2026-11-30"], 2),
    (["add", "t::x", "--owner", "a", "--reason", "r", "--expires", "tomorrow"], 2),
    (["add", "t::x", "--owner", "a", "--reason", "r", "--days", "-1"], 2),
    (["add", "tests/test_cache.py::test_warm", "--owner", "a", "--reason", "r", "--days",
      "3"], 1),  # already quarantined
    (["remove", "t::nope"], 1),
    (["remove", "tests/test_cache.py::*"], 1),  # a key is matched exactly, not as a pattern
    (["check", "t::nope"], 2),
    (["check", "tests/test_cache.py::test_warm", "--runs", "0"], 2),
])
def test_every_bad_input_is_refused_and_changes_nothing(
    tmp_path: Path, args: list[str], code: int
) -> None:
    project, file = _project(tmp_path)
    for output in ("text", "json"):
        exit_code, out, err = _cli(project, "--format", output, "quarantine", *args)
        assert exit_code == code, (out, err)
        if output == "json":
            validate("error.json", json.loads(out))
        assert file.read_text(encoding="utf-8") == COMMENTED
        assert sorted(os.listdir(project)) == [".runstore-quarantine.toml"]


def test_a_broken_file_is_refused_naming_entry_and_key(tmp_path: Path) -> None:
    project, file = _project(tmp_path, COMMENTED.replace("owner =", "ownr ="))
    code, out, err = _cli(project, "--format", "json", "quarantine", "add", "t::x", "--owner",
                          "a", "--reason", "r", "--days", "3")
    assert code == 1
    document = json.loads(out)
    assert (document["entry"], document["key"], document["kind"]) == (1, "ownr", "invalid")
    assert err.startswith(f"runstore: {file}, entry 1, key 'ownr': unknown key")
    assert file.read_text(encoding="utf-8") == COMMENTED.replace("owner =", "ownr =")


COUNTED = """
    from pathlib import Path

    def test_fixed():
        pass

    def test_one_in_three():
        counter = Path(__file__).with_name("counter.txt")
        count = int(counter.read_text()) + 1 if counter.exists() else 1
        counter.write_text(str(count))
        assert count % 3 != 0, f"execution {count} fails"
"""


def _counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
             tests: str = COUNTED) -> tuple[Path, Path]:
    """A project with an empty quarantine and ``tests`` as test_counted.py, run by pytest
    in a clean environment."""
    for name in [n for n in os.environ if n.startswith(("PYTEST_", "RUNSTORE_"))]:
        monkeypatch.delenv(name)
    project, file = _project(tmp_path, "")
    (project / "test_counted.py").write_text(textwrap.dedent(tests), encoding="utf-8")
    return project, file


def _record(project: Path) -> None:
    subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--runstore"],
                   cwd=project, capture_output=True, check=False)


def _check(project: Path, nodeid: str, runs: int) -> tuple[int, dict[str, Any]]:
    code, out, _ = _cli(project, "--format", "json", "quarantine", "check", nodeid,
                          "--runs", str(runs))
    document: dict[str, Any] = json.loads(out)
    return code, document


def test_a_fix_check_releases_a_fixed_test_and_keeps_a_flaky_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, file = _counted(tmp_path, monkeypatch)
    _record(project)  # a check refuses a node id the project's runs never recorded
    (project / "counter.txt").unlink()
    for nodeid in ("test_counted.py::test_fixed", "test_counted.py::test_one_in_three"):
        assert _cli(project, "quarantine", "add", nodeid, "--owner", "a", "--reason", "r",
                    "--days", "7")[0] == 0
    code, released = _check(project, "test_counted.py::test_fixed", 3)
    assert code == 0, released
    validate("quarantine-check.json", released)
    assert (released["executions"], released["passed"], released["released"]) == (3, 3, True)
    assert "test_fixed" not in file.read_text(encoding="utf-8")

    code, kept = _check(project, "test_counted.py::test_one_in_three", 6)
    assert code == 1, kept
    validate("quarantine-check.json", kept)
    assert (kept["executions"], kept["passed"], kept["failed"], kept["released"]) == (
        6, 4, 2, False)
    assert kept["failing_executions"] == [
        {"execution": 3, "outcome": "failed", "message": "AssertionError: execution 3 fails"},
        {"execution": 6, "outcome": "failed", "message": "AssertionError: execution 6 fails"},
    ]
    assert "test_one_in_three" in file.read_text(encoding="utf-8")

    with build(sqlite(project / ".runstore" / "runstore.db")) as container:
        checks = container.get(DataReader).fix_checks("proj").unwrap()
    assert [c.result for c in checks] == [
        FixCheckResult("proj", "test_counted.py::test_one_in_three", kept["run_id"], 6, 4, 2,
                       False),
        FixCheckResult("proj", "test_counted.py::test_fixed", released["run_id"], 3, 3, 0,
                       True),
    ]
    code, out, _ = _cli(project, "--format", "json", "quarantine", "list")
    listed = json.loads(out)
    validate("quarantine-list.json", listed)
    (entry,) = listed["entries"]
    assert entry["last_fix_check"]["passed"] == 4
    assert entry["tests"] == [{"nodeid": "test_counted.py::test_one_in_three",
                               "run_id": kept["run_id"], "outcome": "failed",
                               "classification": entry["tests"][0]["classification"]}]
    code, out, _ = _cli(project, "show", "latest", "test_counted.py::test_one_in_three")
    assert "quarantined in this run by test_counted.py::test_one_in_three" in out
    # quarantined anew after the check (removed, added again): the old check is not its own.
    # The check is stamped by the real clock, so the new entry is dated the day after the
    # real today (allowed: a day of slack for another time zone), not after the fixed TODAY.
    real_today = date.today()
    monkeypatch.setattr(quarantine_module, "today", lambda: real_today)
    file.write_text(file.read_text(encoding="utf-8").replace(
        "added = 2026-12-01", f"added = {(real_today + timedelta(days=1)).isoformat()}"))
    code, out, _ = _cli(project, "--format", "json", "quarantine", "list")
    assert json.loads(out)["entries"][0]["last_fix_check"] is None


def test_add_refuses_a_c1_control_or_bidi_override_in_the_owner(tmp_path: Path) -> None:
    project, file = _project(tmp_path)
    for char in ("\x9b", "\u202e", "\u2028"):
        code, _, err = _cli(project, "quarantine", "add", "t.py::t", "--owner", f"a{char}b",
                            "--reason", "r", "--days", "3")
        assert code == 2
        assert f"U+{ord(char):04X}" in err
    assert file.read_text(encoding="utf-8") == COMMENTED


@pytest.mark.parametrize("pattern", ["*", "**", "*::*"])
def test_add_refuses_a_pattern_matching_every_test(tmp_path: Path, pattern: str) -> None:
    project, file = _project(tmp_path)
    code, _, err = _cli(project, "quarantine", "add", "--pattern", pattern, "--owner", "a",
                        "--reason", "r", "--days", "3")
    assert code == 2
    assert "matches every test" in err
    assert file.read_text(encoding="utf-8") == COMMENTED


def test_add_keeps_a_crlf_file_crlf_and_a_bom_is_read_past(tmp_path: Path) -> None:
    project, file = _project(tmp_path)
    file.write_bytes(b"\xef\xbb\xbf" + COMMENTED.replace("\n", "\r\n").encode())
    code, out, err = _cli(project, "quarantine", "add", "t.py::t", "--owner", "a",
                          "--reason", "r", "--days", "3")
    assert code == 0, err
    raw = file.read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf# Quarantined")
    assert raw.count(b"\n") == raw.count(b"\r\n")
    code, out, _ = _cli(project, "quarantine", "remove", "t.py::t")
    assert code == 0, out
    assert file.read_bytes() == b"\xef\xbb\xbf" + COMMENTED.replace("\n", "\r\n").encode()


def test_file_naming_a_folder_is_a_usage_error_and_a_missing_folder_is_named(
        tmp_path: Path) -> None:
    project, _ = _project(tmp_path)
    code, _, err = _cli(project, "quarantine", "list", "--file", str(project))
    assert code == 2
    assert "is a folder" in err
    missing = project / "ci" / "quarantine.toml"
    code, _, err = _cli(project, "quarantine", "add", "t.py::t", "--owner", "a", "--reason",
                        "r", "--days", "3", "--file", str(missing))
    assert code == 1
    assert f"its folder {project / 'ci'} does not exist" in err


def _runs(project: Path) -> int:
    with build(sqlite(project / ".runstore" / "runstore.db")) as container:
        return len(container.get(DataReader).list_runs("proj").unwrap().items)


def test_unknown_node_ids_are_warned_on_add_refused_by_check_and_marked_by_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, _ = _counted(tmp_path, monkeypatch, COUNTED + """
    import pytest

    @pytest.mark.parametrize("word", ["日本"])
    def test_u(word):
        pass
""")
    add = ("--owner", "a", "--reason", "r", "--days", "7")
    assert _cli(project, "quarantine", "add", "test_counted.py::test_u[日本]", *add)[0] == 0
    _record(project)
    code, _, err = _cli(project, "quarantine", "add", "test_counted.py::test_fixd", *add)
    assert code == 0
    assert err == ("runstore: warning: no recorded test of proj has the node id "
                   "'test_counted.py::test_fixd'; closest: test_counted.py::test_fixed\n")
    code, _, err = _cli(project, "quarantine", "add", "test_counted.py::test_u[日本x]", *add)
    assert "pytest would record it escaped: test_counted.py::test_u[\\u65e5\\u672cx]" in err
    runs = _runs(project)
    code, _, err = _cli(project, "quarantine", "check", "test_counted.py::test_fixd")
    assert code == 2
    assert "closest: test_counted.py::test_fixed" in err
    code, _, err = _cli(project, "quarantine", "check", "test_counted.py::test_u[日本]")
    assert code == 2
    assert "pytest recorded it escaped: test_counted.py::test_u[\\u65e5\\u672c]" in err
    assert _cli(project, "quarantine", "add", "--pattern", "test_counted.py::test_f*", *add)[0] == 0
    code, _, err = _cli(project, "quarantine", "check", "test_counted.py::test_f*")
    assert code == 2
    assert "is a pattern, not a node id" in err
    assert _runs(project) == runs  # nothing ran, nothing recorded
    code, out, _ = _cli(project, "quarantine", "list")
    assert out.count("(no recorded test matches this entry") == 3  # the two typos, 日本


def test_check_names_the_collection_error_of_a_module_that_no_longer_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, _ = _counted(tmp_path, monkeypatch)
    counted = project / "test_counted.py"
    assert _cli(project, "quarantine", "add", "test_counted.py::test_one_in_three", "--owner",
                "a", "--reason", "r", "--days", "7")[0] == 0
    _record(project)
    counted.write_text("import no_such_module_here\n" + textwrap.dedent(COUNTED),
                       encoding="utf-8")
    code, _, err = _cli(project, "quarantine", "check", "test_counted.py::test_one_in_three")
    assert code == 1, err
    assert "could not collect 'test_counted.py::test_one_in_three'" in err
    assert "No module named 'no_such_module_here'" in err


def test_a_bad_flaky_policy_stops_only_the_commands_that_show_verdicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, _ = _counted(tmp_path, monkeypatch)
    _record(project)
    (project / "pyproject.toml").write_text("[tool.runstore.flaky]\nwindow = 0\n",
                                            encoding="utf-8")
    monkeypatch.chdir(project)
    for command in (("runs",), ("signatures",), ("history", "test_counted.py::test_fixed"),
                    ("quarantine", "add", "test_counted.py::test_fixed", "--owner", "a",
                     "--reason", "r", "--days", "3")):
        code, _, err = _cli(project, *command)
        assert code == 0, (command, err)
    for command in (("flaky",), ("show", "latest"), ("quarantine", "list")):
        code, _, err = _cli(project, *command)
        assert code == 2, command
        assert f"Error: {project / 'pyproject.toml'}: tool.runstore.flaky.window: " in err
    (project / "pyproject.toml").write_text("[tool.runstore]\nquarantine_file = 3\n",
                                            encoding="utf-8")
    code, _, err = _cli(project, "quarantine", "list")
    assert code == 2
    assert f"Error: {project / 'pyproject.toml'}: tool.runstore.quarantine_file: " in err
