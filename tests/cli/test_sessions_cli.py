"""``runstore sessions``: import, export, list, show, context, tree; JSON shapes, exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from runstore.cli import cli

TREE_ID = "5f0c2a8e-3b1d-4c6e-9a7f-2d8e4b6c1a90"

HEADER = {
    "type": "session",
    "version": 3,
    "id": TREE_ID,
    "timestamp": "2025-11-30T10:53:20.000Z",
    "cwd": "/w",
}


def _line(entry_id: str, parent: str | None, role: str = "user", **extra: Any) -> dict[str, Any]:
    message = {"role": role, "content": [{"type": "text", "text": f"text of {entry_id}"}], **extra}
    return {
        "type": "message",
        "id": entry_id,
        "parentId": parent,
        "timestamp": "2025-11-30T10:53:21.000Z",
        "message": message,
    }


ENTRIES = [
    _line("e1", None),
    _line(
        "e2",
        "e1",
        "assistant",
        provider="openai",
        model="gpt-5",
        usage={"input": 10, "output": 5, "cacheRead": 2, "cacheWrite": 1, "cost": {"total": 0.25}},
    ),
    {
        "type": "compaction",
        "id": "e3",
        "parentId": "e2",
        "timestamp": "2025-11-30T10:53:22.000Z",
        "summary": "so far",
        "firstKeptEntryId": "e2",
        "tokensBefore": 99,
    },
    _line("e4", "e3"),
    _line("e5", "e1"),
    {
        "type": "label",
        "id": "e6",
        "parentId": "e5",
        "timestamp": "2025-11-30T10:53:23.000Z",
        "targetId": "e1",
        "label": "start",
    },
    {
        "type": "session_info",
        "id": "e7",
        "parentId": "e6",
        "timestamp": "2025-11-30T10:53:24.000Z",
        "name": "Tiny",
    },
]


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def transcript(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in [HEADER, *ENTRIES]), encoding="utf-8")
    return path


@pytest.fixture
def db(tmp_path: Path, transcript: Path) -> str:
    path = str(tmp_path / "runs.db")
    result = run("--db", path, "sessions", "import", str(transcript))
    assert result.exit_code == 0, result.output
    return path


def _json(result: Result) -> Any:
    assert result.exit_code == 0, result.output + result.stderr
    return json.loads(result.stdout)


def test_import_reports_in_text_and_json(tmp_path: Path, transcript: Path) -> None:
    path = str(tmp_path / "a.db")
    text = run("--db", path, "sessions", "import", str(transcript))
    assert f"imported 7 entries from {transcript}" in text.stdout
    assert "every line imported as it was" in text.stdout
    again = run(
        "--db",
        str(tmp_path / "b.db"),
        "--format",
        "json",
        "sessions",
        "import",
        "--id",
        "copy",
        str(transcript),
    )
    document = _json(again)
    assert (document["session_id"], document["version"], document["entries"]) == ("copy", 3, 7)
    assert (document["skipped"], document["repaired"]) == ([], [])
    assert document["session"]["summary"]["cost"] == "0.25"


def test_a_second_import_of_the_same_id_is_refused(db: str, transcript: Path) -> None:
    result = run("--db", db, "sessions", "import", str(transcript))
    assert result.exit_code == 1
    assert result.stderr.startswith("runstore: conflict on session")


def test_strict_names_the_first_bad_line_and_lenient_reports_it(tmp_path: Path) -> None:
    path = tmp_path / "torn.jsonl"
    lines = [json.dumps(HEADER), json.dumps(ENTRIES[0]), "{not json", json.dumps(ENTRIES[1])[:40]]
    path.write_text("\n".join(lines), encoding="utf-8")
    before = path.read_bytes()
    strict = run("--db", str(tmp_path / "s.db"), "sessions", "import", "--strict", str(path))
    assert strict.exit_code == 1
    assert "line 3: not JSON" in strict.stderr
    lenient = run(
        "--db",
        str(tmp_path / "l.db"),
        "--format",
        "json",
        "sessions",
        "import",
        "--lenient",
        str(path),
    )
    document = _json(lenient)
    assert [s["line"] for s in document["skipped"]] == [3, 4]
    assert document["entries"] == 1
    assert path.read_bytes() == before


def test_an_empty_file_is_an_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    result = run(
        "--db", str(tmp_path / "e.db"), "--format", "json", "sessions", "import", str(empty)
    )
    assert result.exit_code == 1
    assert "is empty" in json.loads(result.stdout)["error"]


def test_list_and_show(db: str) -> None:
    listed = _json(run("--db", db, "--format", "json", "sessions", "list"))
    assert (listed["has_more"], listed["next_cursor"]) == (False, None)
    (session,) = listed["sessions"]
    assert session["id"] == TREE_ID
    assert session["summary"]["name"] == "Tiny"
    assert session["summary"]["labels"] == {"e1": "start"}
    assert session["summary"]["model"] == {"provider": "openai", "model_id": "gpt-5"}
    shown = _json(run("--db", db, "sessions", "show", TREE_ID, "--format", "json"))
    # pi resumes with the state at the leaf e7 (no model on its branch), not with the
    # latest model appended on another branch.
    resume = {"leaf_id": "e7", "model": None, "thinking_level": "off"}
    assert shown == {"schema_version": 1, **session, "resume": resume, "runs": [],
                     "runs_has_more": False}  # no test run names the session
    summary = session["summary"]
    assert (
        summary["cached_tokens"] + summary["uncached_tokens"] + summary["output_tokens"]
        == summary["total_tokens"]
    )
    text = run("--db", db, "sessions", "list").stdout
    assert TREE_ID in text
    assert "Tiny" in text
    shown_text = run("--db", db, "sessions", "show", TREE_ID).stdout
    assert "model none, thinking off (at the leaf, as pi resumes" in shown_text
    assert f"output {summary['output_tokens']})" in shown_text
    missing = run("--db", db, "sessions", "show", "nope")
    assert missing.exit_code == 1
    assert missing.stderr == "runstore: session 'nope' not found\n"


def test_context_at_the_leaf_and_at_an_entry(db: str) -> None:
    at_leaf = _json(run("--db", db, "--format", "json", "sessions", "context", TREE_ID))
    assert at_leaf["leaf_id"] == "e7"
    assert [m["entry_id"] for m in at_leaf["messages"]] == ["e1", "e5"]
    at_e4 = _json(
        run("--db", db, "--format", "json", "sessions", "context", TREE_ID, "--leaf", "e4")
    )
    assert [(m["entry_id"], m["role"]) for m in at_e4["messages"]] == [
        ("e3", "compactionSummary"),
        ("e2", "assistant"),
        ("e4", "user"),
    ]
    assert at_e4["model"] == {"provider": "openai", "model_id": "gpt-5"}
    text = run("--db", db, "sessions", "context", TREE_ID, "--leaf", "e4").stdout
    assert "compactionSummary" in text
    assert "so far" in text
    bad = run("--db", db, "sessions", "context", TREE_ID, "--leaf", "nope")
    assert (bad.exit_code, bad.stderr) == (1, "runstore: entry 'nope' not found\n")


def test_tree_draws_the_branches(db: str) -> None:
    text = run("--db", db, "sessions", "tree", TREE_ID).stdout.splitlines()
    assert text[0].startswith("e1 message [start]")
    assert text[1].startswith("├─ e2 message")
    assert text[2].startswith("│  e3 compaction")
    assert text[4].startswith("└─ e5 message")
    assert text[-1].startswith("   e7 session_info *")
    document = _json(run("--db", db, "--format", "json", "sessions", "tree", TREE_ID))
    assert [(e["id"], e["parent_id"], e["seq"]) for e in document["entries"]][:2] == [
        ("e1", None, 1),
        ("e2", "e1", 2),
    ]


def test_export_round_trips(db: str, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    written = run("--db", db, "sessions", "export", TREE_ID, "-o", str(out))
    assert written.exit_code == 0, written.stderr
    assert f"wrote 7 entries of session {TREE_ID}" in written.stdout
    to_stdout = run("--db", db, "sessions", "export", TREE_ID)
    assert to_stdout.stdout == out.read_text(encoding="utf-8")
    again = str(tmp_path / "again.db")
    assert run("--db", again, "sessions", "import", str(out)).exit_code == 0
    assert _json(run("--db", again, "--format", "json", "sessions", "show", TREE_ID)) == _json(
        run("--db", db, "--format", "json", "sessions", "show", TREE_ID)
    )
    missing = run("--db", db, "sessions", "export", "nope", "-o", str(tmp_path / "x.jsonl"))
    assert missing.exit_code == 1
    assert not (tmp_path / "x.jsonl").exists()
    assert not (tmp_path / "x.jsonl.partial").exists()


def test_queries_need_a_database(tmp_path: Path) -> None:
    result = run("--db", str(tmp_path / "none.db"), "sessions", "list")
    assert result.exit_code == 1
    assert "no runstore database at" in result.stderr
    assert not (tmp_path / "none.db").exists()


def test_every_command_has_help_with_an_example() -> None:
    for command in ("import", "export", "list", "show", "context", "tree"):
        result = run("sessions", command, "--help")
        assert result.exit_code == 0
        assert "Example:" in result.stdout


def test_a_line_nested_too_deeply_is_a_refusal_not_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "deep.jsonl"
    deep = json.dumps(ENTRIES[1])[:-1] + ', "deep": ' + "[" * 1200 + "]" * 1200 + "}"
    path.write_text("\n".join([json.dumps(HEADER), json.dumps(ENTRIES[0]), deep]) + "\n")
    strict = run("--db", str(tmp_path / "s.db"), "sessions", "import", str(path))
    assert strict.exit_code == 1
    assert "line 3: nested too deeply" in strict.stderr
    assert "Traceback" not in strict.stderr + strict.stdout
    lenient = _json(
        run("--db", str(tmp_path / "l.db"), "--format", "json", "sessions", "import",
            "--lenient", str(path))
    )
    assert lenient["skipped"] == [
        {"line": 3, "reason": lenient["skipped"][0]["reason"], "problem": "too_deep"}
    ]
    assert lenient["entries"] == 1


def test_a_leaf_entry_is_drawn_and_moves_the_leaf(tmp_path: Path) -> None:
    path = tmp_path / "moved.jsonl"
    leaf = {
        "type": "leaf",
        "id": "l1",
        "parentId": "e2",
        "timestamp": "2025-11-30T10:53:23.000Z",
        "targetId": "e1",
    }
    lines = [HEADER, ENTRIES[0], ENTRIES[1], leaf]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    db = str(tmp_path / "m.db")
    assert run("--db", db, "sessions", "import", str(path)).exit_code == 0
    text = run("--db", db, "sessions", "tree", TREE_ID).stdout.splitlines()
    assert text[0].startswith("e1 message *")  # the leaf is the target
    assert "l1 leaf" in text[-1]
    assert "leaf moved to e1" in text[-1]
    shown = _json(run("--db", db, "--format", "json", "sessions", "show", TREE_ID))
    assert (shown["leaf_id"], shown["resume"]["leaf_id"]) == ("e1", "e1")
