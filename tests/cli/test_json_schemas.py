"""Every command's JSON output matches the JSON Schema shipped for it in the package.

The schemas live in ``runstore/cli/schemas/`` (package data): one file per document, shared
shapes in ``definitions.json``, errors of every command in ``error.json``. The cases below
run every command of the CLI (each one at least once, checked against the click group) and
validate what it prints.
"""

from __future__ import annotations

import fnmatch
import json
import shutil
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import click
import jsonschema
import pytest
from _zoo import seed_zoo  # beside this file
from click.testing import CliRunner
from referencing import Registry, Resource

from runstore.cli import cli
from runstore.cli._output import SCHEMA_VERSION

_TRANSCRIPT = [
    {"type": "session", "version": 3, "id": "s-1", "timestamp": "2025-11-30T10:53:20.000Z",
     "cwd": "/w"},
    {"type": "message", "id": "e1", "parentId": None, "timestamp": "2025-11-30T10:53:21.000Z",
     "message": {"role": "user", "content": [{"type": "text", "text": "hello"}]}},
    {"type": "label", "id": "e2", "parentId": "e1", "timestamp": "2025-11-30T10:53:22.000Z",
     "targetId": "e1", "label": "start"},
]

# (schema file, arguments after --db PATH --format json, exit code)
CASES: list[tuple[str, list[str], int]] = [
    ("db-status.json", ["db", "migrate"], 0),
    ("db-status.json", ["db", "status"], 0),
    ("db-check.json", ["db", "check"], 0),
    ("db-copy.json", ["db", "copy", "SELF", "NEW"], 0),
    ("error.json", ["db", "copy", "SELF", "SELF"], 1),
    ("runs.json", ["runs", "--project", "zoo"], 0),
    ("runs.json", ["runs", "--all-projects", "--limit", "2"], 0),
    ("show.json", ["show", "4"], 0),
    ("show.json", ["show", "5"], 0),
    ("show-test.json", ["show", "4", "test_passed_on_rerun"], 0),
    ("show-test.json", ["show", "4", "test_with_subtests"], 0),
    ("show-test.json", ["show", "5", "t::test_streak"], 0),
    ("failures.json", ["failures", "4"], 0),
    ("failures.json", ["failures", "5", "--new"], 0),
    ("flaky.json", ["flaky", "--project", "zoo"], 0),
    ("flaky.json", ["flaky", "--project", "commit"], 0),
    ("flaky-explain.json", ["flaky", "--project", "zoo", "--explain"], 0),
    ("flaky-explain.json", ["flaky", "--project", "zoo", "--explain", "--window", "3",
                            "--evidence", "oscillation", "t::test_oscillating"], 0),
    ("error.json", ["flaky", "--project", "zoo", "--explain", "--window", "0"], 2),
    ("signatures.json", ["signatures", "--project", "zoo", "--limit", "2"], 0),
    ("signatures.json", ["signatures", "--project", "commit"], 0),
    ("new-signatures.json", ["failures", "4", "--new-signatures"], 1),
    ("new-signatures.json", ["failures", "5", "--new-signatures"], 0),
    ("history.json", ["history", "t::test_streak", "--project", "zoo"], 0),
    ("history.json", ["history", "test_passed_on_rerun", "--project", "zoo"], 0),
    ("slowest.json", ["slowest", "4", "--limit", "3"], 0),
    ("coverage.json", ["coverage", "4"], 0),
    ("tests-for.json", ["tests-for", "src/zoo.py", "--project", "zoo"], 0),
    ("tests-for.json", ["tests-for", "zoo.py:4", "--project", "zoo", "--runs", "1"], 0),
    ("error.json", ["tests-for", "c.py", "--project", "commit"], 1),
    ("report.json", ["report", "--project", "zoo", "-o", "REPORT"], 0),
    ("error.json", ["report", "--project", "nope", "-o", "REPORT"], 1),
    ("error.json", ["report", "-o", "-"], 2),
    ("trends.json", ["trends", "--project", "zoo"], 0),
    ("diff.json", ["diff", "4", "5"], 0),
    ("triage.json", ["triage", "4"], 0),
    ("triage.json", ["triage", "--project", "zoo", "--max-tokens", "900"], 0),
    ("error.json", ["triage", "4", "--max-tokens", "10"], 1),
    ("prune.json", ["prune", "--keep-runs", "2", "--dry-run"], 0),
    ("prune.json", ["prune", "--keep-runs", "3", "--max-age-days", "100000"], 0),
    ("sessions-import.json", ["sessions", "import", "--lenient", "TRANSCRIPT"], 0),
    ("sessions-list.json", ["sessions", "list"], 0),
    ("sessions-show.json", ["sessions", "show", "s-1"], 0),
    ("sessions-context.json", ["sessions", "context", "s-1"], 0),
    ("sessions-tree.json", ["sessions", "tree", "s-1"], 0),
    ("sessions-export.json", ["sessions", "export", "s-1", "-o", "OUT"], 0),
    ("error.json", ["show", "999"], 1),
    ("error.json", ["history", "t::test_", "--project", "zoo"], 1),
    ("error.json", ["coverage", "5"], 1),
    ("error.json", ["sessions", "show", "nope"], 1),
    ("error.json", ["runs", "--limit", "0"], 2),
    ("search.json", ["search", "timed out"], 0),
    ("search.json", ["search", "stre*", "--in", "tests", "--project", "zoo", "--limit", "1"], 0),
    ("error.json", ["search", "!!"], 2),
    ("error.json", ["no-such-command"], 2),
    ("quarantine-add.json", ["quarantine", "add", "t::test_new", "--owner", "a", "--reason",
                             "r", "--days", "3", "--file", "QFILE"], 0),
    ("quarantine-list.json", ["quarantine", "list", "--project", "zoo", "--file", "QFILE"], 0),
    ("quarantine-remove.json", ["quarantine", "remove", "t::test_streak", "--file", "QFILE"],
     0),
    ("error.json", ["quarantine", "remove", "t::nope", "--file", "QFILE"], 1),
    ("error.json", ["quarantine", "check", "t::nope", "--file", "QFILE"], 2),
]


def _schemas() -> dict[str, Any]:
    folder = resources.files("runstore.cli") / "schemas"
    return {entry.name: json.loads(entry.read_text(encoding="utf-8"))
            for entry in folder.iterdir() if entry.name.endswith(".json")}


SCHEMAS = _schemas()
REGISTRY: Registry[Any] = Registry().with_resources(
    (name, Resource.from_contents(schema)) for name, schema in SCHEMAS.items()
)


def validate(name: str, document: Any) -> None:
    """Validate ``document`` against the shipped schema ``name`` (every error at once)."""
    validator = jsonschema.Draft202012Validator(SCHEMAS[name], registry=REGISTRY)
    problems = [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
                for e in validator.iter_errors(document)]
    assert not problems, "\n".join(problems)


@pytest.fixture(scope="module")
def zoo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return seed_zoo(tmp_path_factory.mktemp("zoo") / "runstore.db")


@pytest.fixture
def db(zoo_db: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "runstore.db"
    shutil.copyfile(zoo_db, copy)
    transcript = tmp_path / "session.jsonl"
    transcript.write_text("".join(json.dumps(line) + "\n" for line in _TRANSCRIPT),
                          encoding="utf-8")
    return copy


def _invoke(db: Path, args: list[str]) -> tuple[int, Any]:
    folder = db.parent
    places = {"TRANSCRIPT": folder / "session.jsonl", "OUT": folder / "out.jsonl",
              "QFILE": folder / "quarantine.toml", "REPORT": folder / "report.html",
              "SELF": db, "NEW": folder / "copy.db"}
    args = [str(places[a]) if a in places else a for a in args]
    result = CliRunner().invoke(cli, ["--db", str(db), "--format", "json", *args],
                                catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout)


def test_every_schema_is_a_valid_draft_2020_12_schema() -> None:
    assert len(SCHEMAS) > 2
    for schema in SCHEMAS.values():
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.parametrize(("schema", "args", "code"), CASES,
                         ids=[" ".join(a) for _, a, _ in CASES])
def test_json_output_matches_its_schema(db: Path, schema: str, args: list[str], code: int) -> None:
    if args[0] == "sessions" and args[1] != "import":
        assert _invoke(db, ["sessions", "import", "TRANSCRIPT"])[0] == 0
    if args[0] == "quarantine" and args[1] != "add":
        for nodeid in ("t::test_streak", "t::test_oscillating"):
            assert _invoke(db, ["quarantine", "add", nodeid, "--owner", "a", "--reason", "r",
                                "--days", "3", "--file", "QFILE"])[0] == 0
    exit_code, document = _invoke(db, args)
    assert exit_code == code, document
    assert document["schema_version"] == SCHEMA_VERSION
    validate(schema, document)


def test_an_empty_database_answers_in_the_same_shapes(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    for schema, args in (("db-status.json", ["db", "migrate"]), ("runs.json", ["runs"]),
                         ("sessions-list.json", ["sessions", "list"])):
        exit_code, document = _invoke(path, args)
        assert exit_code == 0
        validate(schema, document)
    exit_code, document = _invoke(tmp_path / "absent.db", ["db", "status"])
    assert exit_code == 1
    validate("error.json", document)


def test_the_schemas_are_strict_about_unknown_and_missing_fields(db: Path) -> None:
    _, document = _invoke(db, ["failures", "4"])
    with pytest.raises(AssertionError, match="streak"):
        validate("failures.json", {**document, "failures": [
            {k: v for k, v in f.items() if k != "streak"} for f in document["failures"]]})
    with pytest.raises(AssertionError, match="surprise"):
        validate("failures.json", {**document, "surprise": 1})


def _leaf_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Every leaf command under ``group``, the lazily imported ones included (``commands``
    holds only those some earlier test in this process happened to load)."""
    found: set[tuple[str, ...]] = set()
    context = click.Context(group)
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        assert command is not None, name
        if isinstance(command, click.Group):
            found |= _leaf_commands(command, (*prefix, name))
        else:
            found.add((*prefix, name))
    return found


def test_the_cases_run_every_command_and_use_every_schema() -> None:
    # runstore mcp prints no document of its own: its tools answer the other commands'
    # documents (tests/mcp checks each against the command's JSON).
    commands = _leaf_commands(cli) - {("mcp",)}
    covered = {tuple(args[:2]) if args[0] in ("db", "sessions", "quarantine") else (args[0],)
               for _, args, _ in CASES}
    assert commands - covered == set()
    # quarantine check runs pytest in a project: tests/cli/test_quarantine_cli.py checks
    # its document against quarantine-check.json.
    assert set(SCHEMAS) - {schema for schema, _, _ in CASES} == {"definitions.json",
                                                                  "quarantine-check.json"}


def test_the_schemas_are_package_data() -> None:
    root = Path(__file__).resolve().parents[2]
    declared = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = declared["tool"]["setuptools"]["package-data"]["runstore"]
    for name in SCHEMAS:
        assert any(fnmatch.fnmatch(f"cli/schemas/{name}", p) for p in patterns), name


def test_the_readme_names_every_shipped_schema() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    shipped = sorted(
        entry.name
        for entry in resources.files("runstore.cli").joinpath("schemas").iterdir()
        if entry.name.endswith(".json")
    )
    assert shipped
    assert [name for name in shipped if f"`{name}`" not in readme] == []
