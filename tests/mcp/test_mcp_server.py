"""``runstore mcp`` end to end: the SDK's own client starts the server over stdio, lists its
tools and calls each on a database recorded by real ``pytest --runstore`` runs; every answer
equals the CLI's JSON document for the same question, every refusal is a tool error with the
CLI's one-line reason, and the server never writes.

One server serves the whole module (it costs the SDK's import, 1-3 s); nothing here writes:
the test that records a run while a server runs is in test_mcp_fresh.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import attrs
import mcp_types as types
import pytest
from _recorded import (  # beside this file
    PROJECT,
    SESSION_ID,
    Recorded,
    Server,
    cli_json,
    data_version,
    digest,
    record_project,
    serving,
)
from jsonschema import Draft202012Validator

from runstore.cli._mcp import TOOLS, output_schema


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    pytest.importorskip("pytest_cov")
    return record_project(tmp_path_factory.mktemp("mcp"))


@attrs.frozen
class Watched:
    """A connection held open since before the server started, to see whether anything
    committed since (``PRAGMA data_version`` changes when another connection commits), and
    the file's digest then."""

    connection: apsw.Connection
    data_version: int
    digest: str


@pytest.fixture(scope="module")
def watched(recorded: Recorded) -> Iterator[Watched]:
    connection = apsw.Connection(str(recorded.db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        yield Watched(connection, data_version(connection), digest(recorded.db))
    finally:
        connection.close()


@pytest.fixture(scope="module")
def server(recorded: Recorded, watched: Watched, tmp_path_factory: pytest.TempPathFactory,
           ) -> Iterator[Server]:
    with serving(recorded, tmp_path_factory.mktemp("mcp-log") / "server.log") as running:
        yield running


# -- the tools and their schemas --------------------------------------------------------------

NAMES = ["triage", "failures", "flaky", "signatures", "history", "diff", "coverage",
         "tests_for", "search", "sessions_list", "sessions_show", "sessions_context"]


def test_the_server_lists_every_tool_with_valid_input_and_output_schemas(server: Server) -> None:
    listed = {tool.name: tool for tool in server.listed()}
    assert set(NAMES) <= set(listed)
    assert set(listed) == {t.name for t in TOOLS}
    for tool in listed.values():
        assert tool.description
        Draft202012Validator.check_schema(tool.input_schema)
        assert tool.input_schema["type"] == "object"
        assert tool.output_schema is not None
        Draft202012Validator.check_schema(tool.output_schema)
        assert "definitions.json" not in json.dumps(tool.output_schema)  # stands alone
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is True


def test_an_output_schema_is_the_shipped_schema_with_its_definitions_bundled() -> None:
    schema = output_schema("failures")
    assert schema["title"] == "runstore failures"
    assert schema["properties"]["run"] == {"$ref": "#/$defs/run"}
    assert "evidence" in schema["$defs"]
    assert output_schema("diff") == json.loads(
        (Path(__file__).parents[2] / "src/runstore/cli/schemas/diff.json").read_text())


# -- answers equal the CLI's --------------------------------------------------------------------

SAME: list[tuple[str, dict[str, Any], list[str]]] = [
    ("triage", {}, ["triage"]),
    ("triage", {"run": 2, "slowest": 2}, ["triage", "2", "--slowest", "2"]),
    ("triage", {"max_tokens": 700}, ["triage", "--max-tokens", "700"]),
    ("failures", {}, ["failures"]),
    ("failures", {"run": 2}, ["failures", "2"]),
    ("failures", {"run": "latest~1", "new": True}, ["failures", "latest~1", "--new"]),
    ("failures", {"project": PROJECT, "new": False}, ["failures", "--project", PROJECT]),
    ("flaky", {}, ["flaky"]),
    ("signatures", {}, ["signatures"]),
    ("signatures", {"limit": 1, "project": PROJECT},
     ["signatures", "--limit", "1", "--project", PROJECT]),
    ("history", {"nodeid": "test_flaky"}, ["history", "test_flaky"]),
    ("history", {"nodeid": "test_shop.py::test_new", "project": PROJECT},
     ["history", "test_shop.py::test_new", "--project", PROJECT]),
    ("diff", {"run_a": 1, "run_b": "latest"}, ["diff", "1", "latest"]),
    ("diff", {"run_a": "latest~2", "run_b": 2}, ["diff", "latest~2", "2"]),
    ("coverage", {}, ["coverage"]),
    ("coverage", {"file": "app.py"}, ["coverage", "--file", "app.py"]),
    ("tests_for", {"location": "app.py"}, ["tests-for", "app.py"]),
    ("tests_for", {"location": "app.py:3", "limit": 2, "runs": 1},
     ["tests-for", "app.py:3", "--limit", "2", "--runs", "1"]),
    ("search", {"text": "cache"}, ["search", "cache"]),
    ("search", {"text": "root*", "in": ["tests"], "project": PROJECT},
     ["search", "root*", "--in", "tests", "--project", PROJECT]),
    ("search", {"text": "e2", "in": ["sessions", "failures"], "limit": 1},
     ["search", "e2", "--in", "sessions", "--in", "failures", "--limit", "1"]),
    ("sessions_list", {}, ["sessions", "list"]),
    ("sessions_list", {"limit": 1, "cwd": "/w"}, ["sessions", "list", "--limit", "1",
                                                  "--cwd", "/w"]),
    ("sessions_show", {"session_id": SESSION_ID}, ["sessions", "show", SESSION_ID]),
    ("sessions_context", {"session_id": SESSION_ID}, ["sessions", "context", SESSION_ID]),
    ("sessions_context", {"session_id": SESSION_ID, "leaf": "e2"},
     ["sessions", "context", SESSION_ID, "--leaf", "e2"]),
]


@pytest.mark.parametrize(("tool", "arguments", "command"), SAME,
                         ids=[" ".join(c) for _, _, c in SAME])
def test_a_tool_answers_the_cli_json_document(
    server: Server, recorded: Recorded, tool: str, arguments: dict[str, Any], command: list[str]
) -> None:
    code, expected, _ = cli_json(recorded, *command)
    assert code == 0, expected
    result = server.call(tool, arguments)
    assert result.is_error is False, result.content
    assert result.structured_content == expected
    assert isinstance(result.content[0], types.TextContent)
    assert json.loads(result.content[0].text) == expected


def test_the_answers_hold_what_was_recorded(server: Server) -> None:
    failures = server.call("failures", {}).structured_content
    verdicts = {f["nodeid"].partition("::")[2]: f["classification"]
                for f in failures["failures"]}
    assert verdicts == {"test_persistent": "persistent_failure", "test_new": "new_failure",
                        "test_flaky": "flaky", "test_root_cause_a": "new_failure",
                        "test_root_cause_b": "new_failure"}
    flaky = server.call("flaky", {}).structured_content
    assert [f["nodeid"] for f in flaky["flaky"]] == ["test_shop.py::test_flaky"]
    covered = server.call("coverage", {"file": "app.py"}).structured_content
    assert [f["path"] for f in covered["files"]] == ["app.py"]
    assert covered["files"][0]["missing_lines"] == [9]  # after the raise in discount


# -- refusals are tool errors with the CLI's reason -----------------------------------------------

REFUSED: list[tuple[str, dict[str, Any], list[str], int]] = [
    ("triage", {"run": 99}, ["triage", "99"], 1),
    ("triage", {"max_tokens": 1}, ["triage", "--max-tokens", "1"], 1),
    ("triage", {"slowest": 0}, ["triage", "--slowest", "0"], 2),
    ("failures", {"run": 99}, ["failures", "99"], 1),
    ("failures", {"project": "nope"}, ["failures", "--project", "nope"], 1),
    ("failures", {"run": "x"}, ["failures", "x"], 2),
    ("failures", {"run": 0}, ["failures", "0"], 2),
    ("history", {"nodeid": "test_nothing_like_it"}, ["history", "test_nothing_like_it"], 1),
    ("history", {"nodeid": "test_root"}, ["history", "test_root"], 1),  # ambiguous
    ("history", {"nodeid": " "}, ["history", " "], 2),
    ("diff", {"run_a": 1, "run_b": 99}, ["diff", "1", "99"], 1),
    ("coverage", {"run": 1}, ["coverage", "1"], 1),  # run 1 measured none
    ("coverage", {"file": "nowhere.py"}, ["coverage", "--file", "nowhere.py"], 1),
    ("tests_for", {"location": "app.py", "project": "nope"},
     ["tests-for", "app.py", "--project", "nope"], 1),
    ("tests_for", {"location": "app.py", "runs": 0}, ["tests-for", "app.py", "--runs", "0"], 2),
    ("search", {"text": "cache", "in": ["logs"]}, ["search", "cache", "--in", "logs"], 2),
    ("search", {"text": "cache", "cursor": "x"}, ["search", "cache", "--cursor", "x"], 2),
    ("search", {"text": "cache", "project": "nope"}, ["search", "cache", "--project", "nope"],
     1),
    ("sessions_list", {"limit": "ten"}, ["sessions", "list", "--limit", "ten"], 2),
    ("sessions_list", {"limit": 0}, ["sessions", "list", "--limit", "0"], 2),
    ("sessions_list", {"cursor": "garbage"}, ["sessions", "list", "--cursor", "garbage"], 2),
    ("sessions_show", {"session_id": "nope"}, ["sessions", "show", "nope"], 1),
    ("sessions_context", {"session_id": SESSION_ID, "leaf": "e9"},
     ["sessions", "context", SESSION_ID, "--leaf", "e9"], 1),
]


@pytest.mark.parametrize(("tool", "arguments", "command", "exit_code"), REFUSED,
                         ids=[" ".join(c) for _, _, c, _ in REFUSED])
def test_a_refusal_is_a_tool_error_with_the_cli_reason(
    server: Server, recorded: Recorded, tool: str, arguments: dict[str, Any],
    command: list[str], exit_code: int,
) -> None:
    code, expected, _ = cli_json(recorded, *command)
    assert code == exit_code
    result = server.call(tool, arguments)
    assert result.is_error is True
    assert isinstance(result.content[0], types.TextContent)
    assert result.content[0].text == expected["error"]
    assert result.structured_content == expected


def test_a_search_snippet_names_the_exception_type_once(server: Server) -> None:
    found = server.call("search", {"text": "cache cold", "in": ["failures"]})
    hits = found.structured_content["failures"]["hits"]
    assert hits
    assert all(h["snippet"].startswith("AssertionError: the rate cache was cold")
               for h in hits), hits


def test_search_in_an_empty_list_is_a_usage_error(server: Server) -> None:
    result = server.call("search", {"text": "cache", "in": []})
    assert result.is_error is True
    assert isinstance(result.content[0], types.TextContent)
    assert "an empty list names nothing" in result.content[0].text
    assert result.content[0].text.startswith("Invalid value for '--in'")


def test_an_ambiguous_test_lists_its_candidates(server: Server) -> None:
    result = server.call("history", {"nodeid": "test_root"})
    assert result.is_error is True
    assert result.structured_content["candidates"] == [
        "test_shop.py::test_root_cause_a", "test_shop.py::test_root_cause_b"]


@pytest.mark.parametrize(("arguments", "reason"), [
    ({"new": "yes"}, "Invalid value for '--new': 'yes' is not a valid boolean."),
    ({"run": [1]}, "Invalid value for '[RUN]': '[1]' is not a run id"),
    ({"since": 3}, "failures takes no argument 'since' (arguments: run, project, new)"),
])
def test_an_argument_of_the_wrong_kind_is_a_tool_error(
    server: Server, arguments: dict[str, Any], reason: str
) -> None:
    result = server.call("failures", arguments)
    assert result.is_error is True
    assert isinstance(result.content[0], types.TextContent)
    assert result.content[0].text.startswith(reason)


def test_an_unknown_tool_is_an_error(server: Server) -> None:
    result = server.call("prune", {"keep_runs": 1})
    assert result.is_error is True


# -- never writes ---------------------------------------------------------------------------


def test_the_server_changed_nothing(server: Server, recorded: Recorded, watched: Watched) -> None:
    for tool, arguments, _ in SAME:
        server.call(tool, arguments)
    assert data_version(watched.connection) == watched.data_version
    assert digest(recorded.db) == watched.digest
