"""``runstore search`` on a database recorded by real ``pytest --runstore`` runs, with the pi
sessions of the acceptance inputs imported into it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from runstore.cli import cli
from runstore.cli._search import SearchServices, search_document
from runstore.layers import DATA_READER, SESSION_REPOSITORY, build, sqlite

PI_SESSIONS = Path(__file__).resolve().parents[2].parent / "shared" / "acceptance" / "pi-sessions"

pytestmark = pytest.mark.acceptance_inputs(PI_SESSIONS)  # skipped when missing, failed under CI

TESTS = '''
import os

def test_connection_refused():
    raise ConnectionRefusedError("connection refused by db-primary:5432")

def test_timeout():
    assert os.environ.get("RUN") == "2", "Timeout while waiting for the cache"

def test_quoting():
    raise ValueError('bad value: "AND" NEAR(x) -- DROP TABLE tests; *')

def test_passes():
    assert True
'''


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "RUNSTORE_"))}
    return {**env, "PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **extra}


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("search") / "project"
    folder.mkdir()
    (folder / "test_search_me.py").write_text(textwrap.dedent(TESTS), encoding="utf-8")
    (folder / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    for run in (1, 2):
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "runstore.pytest_plugin", "--runstore",
             "-p", "no:cacheprovider"],
            cwd=folder, env=_env(RUN=str(run)), capture_output=True, text=True, timeout=120,
            check=False,
        )
        assert done.returncode == 1, done.stdout + done.stderr
    database = folder / ".runstore" / "runstore.db"
    for name in ("tree-v3.jsonl", "large-session.jsonl"):
        imported = CliRunner().invoke(
            cli, ["--db", str(database), "sessions", "import", str(PI_SESSIONS / name)],
            catch_exceptions=False,
        )
        assert imported.exit_code == 0, imported.output
    return database


def run(db: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--db", str(db), *args], catch_exceptions=False)


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_failures_of_both_runs_are_found_newest_first_on_equal_scores(db: Path) -> None:
    answer = as_json(run(db, "--format", "json", "search", "connection refused",
                         "--in", "failures"))
    hits = answer["failures"]["hits"]
    assert [(h["run_id"], h["nodeid"]) for h in hits] == [
        (2, "test_search_me.py::test_connection_refused"),
        (1, "test_search_me.py::test_connection_refused"),
    ]
    hit = hits[0]
    assert hit["exception_type"] == "ConnectionRefusedError"
    # one token, connectionrefusederror, is not the word connection
    assert [hit["snippet"][a:b] for a, b in hit["marks"]] == ["connection", "refused"]


def test_a_prefix_finds_the_timeout_of_the_first_run_only(db: Path) -> None:
    answer = as_json(run(db, "--format", "json", "search", "timeo*", "--in", "failures"))
    assert [(h["run_id"], h["nodeid"]) for h in answer["failures"]["hits"]] == [
        (1, "test_search_me.py::test_timeout")]


def test_query_syntax_is_plain_text(db: Path) -> None:
    answer = as_json(run(db, "--format", "json", "search", '"AND" NEAR(x) -- DROP TABLE;*',
                         "--in", "failures"))
    assert {h["nodeid"] for h in answer["failures"]["hits"]} == {
        "test_search_me.py::test_quoting"}
    refused = run(db, "search", '"*" -- ;')
    assert refused.exit_code == 2
    assert "holds no word" in refused.output


def test_test_names_and_project_scope(db: Path) -> None:
    answer = as_json(run(db, "--format", "json", "search", "pass*", "--in", "tests"))
    assert [h["nodeid"] for h in answer["tests"]["hits"]] == ["test_search_me.py::test_passes"]
    project = answer["tests"]["hits"][0]["project"]
    scoped = as_json(run(db, "--format", "json", "search", "passes", "--in", "tests",
                         "--project", project))
    assert [h["project"] for h in scoped["tests"]["hits"]] == [project]


def test_session_entries_of_the_imported_transcripts(db: Path) -> None:
    answer = as_json(run(db, "--format", "json", "search", "circuit breaker",
                         "--in", "sessions"))
    hits = answer["sessions"]["hits"]
    assert {(h["entry_id"], h["role"]) for h in hits} == {
        ("e0000013", "user"), ("e0000014", "assistant")}


def test_pages_walk_every_hit_once(db: Path) -> None:
    seen: list[tuple[str, str]] = []
    cursor: list[str] = []
    for _ in range(100):
        page = as_json(run(db, "--format", "json", "search", "the", "--in", "sessions",
                           "--limit", "7", *cursor))["sessions"]
        seen += [(h["session_id"], h["entry_id"]) for h in page["hits"]]
        if not page["has_more"]:
            break
        cursor = ["--cursor", page["next_cursor"]]
    with build(sqlite(db, access="read")) as container:
        every = container.get(SESSION_REPOSITORY).search("the", limit=1_000).unwrap()
    assert len(seen) == len(set(seen)) == len(every.items) > 7
    assert set(seen) == {(h.session_id, h.entry_id) for h in every.items}


def test_a_cursor_needs_one_kind_and_its_own_listing(db: Path) -> None:
    first = as_json(run(db, "--format", "json", "search", "the", "--in", "sessions",
                        "--limit", "1"))
    cursor = first["sessions"]["next_cursor"]
    assert run(db, "search", "the", "--cursor", cursor).exit_code == 2
    wrong = run(db, "search", "the", "--in", "failures", "--cursor", cursor)
    assert wrong.exit_code == 2
    assert "--cursor" in wrong.output


def test_the_document_function_is_what_the_command_prints(db: Path) -> None:
    printed = as_json(run(db, "--format", "json", "search", "refused"))
    with build(sqlite(db, access="read")) as container:
        services = SearchServices(container.get(DATA_READER), container.get(SESSION_REPOSITORY),
                                  str(db))
        document = search_document(services, "refused")
    assert printed == {"schema_version": 1, **document}
    assert printed["in"] == ["failures", "tests", "sessions"]


def test_text_is_plain_when_piped(db: Path) -> None:
    shown = run(db, "search", "connection refused")
    assert shown.exit_code == 0
    lines = shown.stdout.splitlines()
    assert lines[0] == "failures: 2 shown"
    assert "  run 2  test_search_me.py::test_connection_refused" in lines
    assert "\x1b[" not in shown.stdout  # no colour codes through a pipe
    assert "tests: 1 shown" in lines
    assert any(line.startswith("sessions: ") for line in lines)


def test_help_has_an_example() -> None:
    shown = CliRunner().invoke(cli, ["search", "--help"])
    assert shown.exit_code == 0
    assert "Example:" in shown.output


def test_a_failure_snippet_names_its_exception_type_once(db: Path) -> None:
    answer = as_json(run(db, "--format", "json", "search", "connection refused",
                         "--in", "failures"))
    snippet = answer["failures"]["hits"][0]["snippet"]
    assert snippet.count("ConnectionRefusedError") == 1, snippet
    assert snippet.startswith("ConnectionRefusedError: connection refused")
    shown = run(db, "search", "connection refused", "--in", "failures")
    assert "ConnectionRefusedError: ConnectionRefusedError" not in shown.stdout


def test_an_unknown_project_is_refused_listing_the_projects(db: Path) -> None:
    known = as_json(run(db, "--format", "json", "search", "pass*", "--in", "tests"))
    project = known["tests"]["hits"][0]["project"]
    refused = run(db, "search", "passes", "--project", "nope")
    assert refused.exit_code == 1
    assert "'nope'" in refused.output
    assert project in refused.output


def test_text_starting_with_a_dash_follows_a_double_dash(db: Path) -> None:
    assert "runstore search -- " in CliRunner().invoke(cli, ["search", "--help"]).output
    assert run(db, "search", "-refused").exit_code == 2  # read as an option
    answer = as_json(run(db, "--format", "json", "search", "--in", "failures", "--",
                         "-refused"))
    assert answer["failures"]["hits"]
