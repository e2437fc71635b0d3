"""``pytest --runstore`` into PostgreSQL keeps the changed files of the tree and the agent
session, and the CLI lists the session's runs from the server, as it does from a file."""

from __future__ import annotations

import json
from pathlib import Path

from postgres.test_postgres_cli import url_of
from postgres.test_postgres_plugin import (
    FLAKY_PROJECT,
    committed_project,
    pytest_args,
    run,
    runstore,
)
from runstore.layers import DATA_READER, build, postgres
from runstore.services.test_runs import ChangedFile


def test_a_run_into_postgresql_keeps_its_changed_files_and_session(
    tmp_path: Path, postgres_dsn: str
) -> None:
    url = url_of(postgres_dsn)
    project = committed_project(tmp_path / "shop", FLAKY_PROJECT)
    (project / "test_project.py").write_text(FLAKY_PROJECT + "\n# edited\n", encoding="utf-8")
    (project / "notes é.txt").write_text("", encoding="utf-8")
    done = run(project, *pytest_args("--runstore", f"--runstore-db={url}"), RATES="warm",
               RUNSTORE_SESSION_ID="agent-séance-1")
    assert done.returncode == 0, done.stdout + done.stderr
    run(project, *pytest_args("--runstore", f"--runstore-db={url}"), RATES="warm")

    with build(postgres(postgres_dsn)) as container:
        reader = container.get(DATA_READER)
        page = reader.list_runs(None, session_id="agent-séance-1").unwrap()
    (linked,) = page.items
    assert linked.environment.git_dirty is True
    assert linked.environment.git_changed_files == (
        ChangedFile("test_project.py", " M"), ChangedFile("notes é.txt", "??"))

    listed = json.loads(runstore(project, "--db", url, "--format", "json", "runs", "--session",
                                 "agent-séance-1").stdout)
    assert [(r["id"], r["session_id"]) for r in listed["runs"]] == [(linked.id, "agent-séance-1")]
    shown = json.loads(runstore(project, "--db", url, "--format", "json", "show",
                                str(linked.id)).stdout)
    assert shown["run"]["environment"]["git_changed_files"] == [
        {"path": "test_project.py", "status": " M"}, {"path": "notes é.txt", "status": "??"}]
