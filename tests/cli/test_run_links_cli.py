"""The command line shows what links a run to its surroundings: ``runs --session``, the
changed files and the session in ``show`` (text and JSON), and a session's runs in
``sessions show``; every JSON document matches its shipped schema."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_json_schemas import validate  # beside this file

from runstore.cli import cli
from runstore.layers import DATA_STORE, build, sqlite
from runstore.services.test_runs import (
    MAX_CHANGED_FILES,
    ChangedFile,
    Environment,
    RunStart,
    RunStatus,
)
from runstore.testing import make_item

SESSION = "0193a1b2-7c4d-séance"
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def _transcript(folder: Path) -> Path:
    lines = [
        {"type": "session", "version": 3, "id": SESSION, "timestamp": "2026-01-05T09:00:00.000Z",
         "cwd": "/w"},
        {"type": "message", "id": "e1", "parentId": None,
         "timestamp": "2026-01-05T09:00:01.000Z",
         "message": {"role": "user", "content": [{"type": "text", "text": "fix the cart"}]}},
    ]
    path = folder / "session.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """Runs 1-4: 1 and 3 of the session (3 in another project, 3 with changed files), 2 of
    another session, 4 of none with more changed files than are kept."""
    path = tmp_path / "runstore.db"
    changed = (ChangedFile("src/cart.py", " M"), ChangedFile("tests/test_cart.py", "A "),
               ChangedFile("notes/", "??"), ChangedFile("a b.txt", " D"))
    many = tuple(ChangedFile(f"gen/f{i:04}.py", "??") for i in range(MAX_CHANGED_FILES + 1))
    runs = [("shop", SESSION, Environment(git_commit="c0ffee", git_dirty=False,
                                          git_changed_files=())),
            ("shop", "other", Environment()),
            ("admin", SESSION, Environment(git_commit="c0ffee", git_dirty=True,
                                           git_changed_files=changed)),
            ("shop", None, Environment(git_commit="c0ffee", git_dirty=True,
                                       git_changed_files=many))]
    with build(sqlite(path)) as container:
        store = container.get(DATA_STORE)
        for minute, (project, session, env) in enumerate(runs):
            started = T0.replace(minute=minute)
            run = store.begin_run(RunStart(project, f"inv-{minute}", started, env,
                                           session_id=session)).unwrap()
            store.record_results(run, [make_item("t.py::test_a")]).unwrap()
            store.finish_run(run, RunStatus.PASSED, started.replace(second=30)).unwrap()
    assert _cli(path, "sessions", "import", str(_transcript(tmp_path)))[0] == 0
    return path


def _cli(db: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--db", str(db), *args], catch_exceptions=False)
    return result.exit_code, result.stdout


def _json(db: Path, *args: str) -> Any:
    code, out = _cli(db, "--format", "json", *args)
    assert code == 0, out
    return json.loads(out)


def test_runs_of_a_session_are_listed_from_every_project(db: Path) -> None:
    listed = _json(db, "runs", "--session", SESSION)
    validate("runs.json", listed)
    assert (listed["project"], listed["session_id"]) == (None, SESSION)
    assert [(r["id"], r["project"], r["session_id"]) for r in listed["runs"]] == [
        (3, "admin", SESSION), (1, "shop", SESSION)]
    shop = _json(db, "runs", "--session", SESSION, "--project", "shop")
    assert [r["id"] for r in shop["runs"]] == [1]
    assert _json(db, "runs", "--session", "nobody")["runs"] == []
    plain = _json(db, "runs", "--project", "shop")
    assert plain["session_id"] is None
    assert [r["session_id"] for r in plain["runs"]] == [None, "other", SESSION]
    code, text = _cli(db, "runs", "--session", SESSION)
    assert code == 0
    assert "admin" in text
    assert "shop" in text
    assert _cli(db, "runs", "--session", "nobody") == (0, "no runs of session nobody\n")


def test_show_gives_the_changed_files_and_the_session(db: Path) -> None:
    shown = _json(db, "show", "3")
    validate("show.json", shown)
    run = shown["run"]
    assert run["session_id"] == SESSION
    assert run["environment"]["git_changed_files"] == [
        {"path": "src/cart.py", "status": " M"}, {"path": "tests/test_cart.py", "status": "A "},
        {"path": "notes/", "status": "??"}, {"path": "a b.txt", "status": " D"}]
    assert run["environment"]["git_changed_files_truncated"] is False
    code, text = _cli(db, "show", "3")
    assert code == 0
    assert "4 files changed at start: src/cart.py, tests/test_cart.py, notes/ +1 more" in text
    assert f"session: {SESSION}" in text

    clean = _json(db, "show", "1")["run"]
    assert clean["environment"]["git_changed_files"] == []
    unknown = _json(db, "show", "2")["run"]
    assert (unknown["environment"]["git_changed_files"], unknown["session_id"]) == (None, "other")
    for quiet in ("1", "2"):
        assert "changed at start" not in _cli(db, "show", quiet)[1]

    cut = _json(db, "show", "4")
    validate("show.json", cut)
    env = cut["run"]["environment"]
    assert (len(env["git_changed_files"]), env["git_changed_files_truncated"]) == (
        MAX_CHANGED_FILES, True)
    assert "session:" not in _cli(db, "show", "4")[1]
    assert f"{MAX_CHANGED_FILES}+ files changed at start: gen/f0000.py" in _cli(db, "show", "4")[1]


def test_a_session_shows_its_runs(db: Path) -> None:
    shown = _json(db, "sessions", "show", SESSION)
    validate("sessions-show.json", shown)
    assert [(r["id"], r["project"], r["status"], r["total"]) for r in shown["runs"]] == [
        (3, "admin", "passed", 1), (1, "shop", "passed", 1)]
    assert shown["runs"][0]["counts"]["passed"] == 1
    assert shown["runs_has_more"] is False
    code, text = _cli(db, "sessions", "show", SESSION)
    assert code == 0
    run_lines = [line.split() for line in text.splitlines() if line.split()[:1] in (["3"], ["1"])]
    assert [line[:3] for line in run_lines] == [["3", "admin", "passed"], ["1", "shop", "passed"]]
    assert all("1 passed" in " ".join(line) for line in run_lines)


def test_a_session_without_runs_lists_none(tmp_path: Path) -> None:
    path = tmp_path / "runstore.db"
    assert _cli(path, "sessions", "import", str(_transcript(tmp_path)))[0] == 0
    shown = _json(path, "sessions", "show", SESSION)
    assert (shown["runs"], shown["runs_has_more"]) == ([], False)
    code, text = _cli(path, "sessions", "show", SESSION)
    assert code == 0
    assert "started" not in text  # no table of runs


def test_a_session_not_stored_but_carried_by_runs_points_to_them(db: Path) -> None:
    """Run 2 names session ``other``, never imported: ``sessions show other`` says the
    session is not stored and how to list the runs that carry its id (text and JSON)."""
    reason = ("session 'other' is not stored; 1 test run carries its id: "
              "runstore runs --session other")
    result = CliRunner().invoke(cli, ["--db", str(db), "sessions", "show", "other"])
    assert result.exit_code == 1, result.output
    assert result.stderr == f"runstore: {reason}\n"
    result = CliRunner().invoke(
        cli, ["--db", str(db), "--format", "json", "sessions", "show", "other"])
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout) == {
        "schema_version": 1, "session_id": "other", "test_runs": 1, "test_runs_has_more": False,
        "runs_command": "runstore runs --session other", "error": reason}
    unknown = CliRunner().invoke(cli, ["--db", str(db), "sessions", "show", "nobody"])
    assert (unknown.exit_code, unknown.stderr) == (1, "runstore: session 'nobody' not found\n")


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("a\x1b[31mRED", "must not hold a control character, found U+001B"),
        ("s\x07", "must not hold a control character, found U+0007"),
        ("   ", "must not be blank"),
        ("x" * 257, "must be at most 256 characters"),
    ],
    ids=["escape", "bell", "blank", "too long"],
)
def test_runs_refuses_a_session_id_no_run_can_carry(db: Path, value: str, reason: str) -> None:
    """``runs --session`` applies ``RunStart.session_id``'s rule: a usage error (exit 2)
    naming the option, the value shown escaped, never its raw control characters."""
    result = CliRunner().invoke(cli, ["--db", str(db), "runs", "--session", value])
    assert result.exit_code == 2, result.output
    assert "'--session'" in result.stderr
    assert reason in result.stderr
    assert not any(c in result.output for c in "\x1b\x07")
