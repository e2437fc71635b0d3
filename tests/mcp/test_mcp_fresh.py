"""A warm ``runstore mcp`` never answers from what it kept once the database changed: a run
recorded while the server holds the database (and has answered from it) is in its next
answer, equal to the CLI's. On a database of its own (the seeded ``flaky`` runs), with a
server of its own, since it writes."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from _recorded import Recorded, Server, cli_json, serving  # beside this file

from runstore.layers import DATA_STORE, build, sqlite
from runstore.services.test_runs import RunStart, RunStatus
from runstore.testing import flaky, make_item


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    base = tmp_path_factory.mktemp("mcp-fresh")
    with build(flaky(sqlite(base / "runs.db"))):
        pass
    return Recorded(base, base / "runs.db")


@pytest.fixture(scope="module")
def server(seeded: Recorded, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(seeded, tmp_path_factory.mktemp("mcp-log") / "server.log") as running:
        yield running


def _record_a_passing_run(db: Path) -> int:
    with build(sqlite(db)) as container:
        store = container.get(DATA_STORE)
        run = store.begin_run(RunStart("demo", "inv-late", datetime.now(UTC))).unwrap()
        store.record_results(run, [make_item("tests/test_demo.py::test_stable")]).unwrap()
        store.finish_run(run, RunStatus.PASSED, datetime.now(UTC)).unwrap()
    return int(run)


def test_a_warm_server_answers_a_run_recorded_after_it_opened(
    server: Server, seeded: Recorded
) -> None:
    before = server.call("failures", {}).structured_content
    assert server.call("triage", {}).structured_content["run"] == before["run"]
    assert before["failures"] != []
    late = _record_a_passing_run(seeded.db)
    after = server.call("failures", {}).structured_content
    assert after["run"]["id"] == late == before["run"]["id"] + 1
    assert after["failures"] == []
    assert after == cli_json(seeded, "failures")[1]
    triage = server.call("triage", {}).structured_content
    assert triage["run"]["id"] == late
    assert triage == cli_json(seeded, "triage")[1]
