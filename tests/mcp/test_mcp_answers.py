"""The MCP server's answers in process (``ToolAnswers``), without the SDK: the reader
answers it keeps are dropped as soon as another connection commits, a failure is never
kept, and a database that is not there yet is refused until it is."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from returns.result import Failure, Success

from runstore.cli._mcp import ToolAnswers, _CachedReader
from runstore.cli._settings import Settings
from runstore.layers import DATA_STORE, build, sqlite
from runstore.services.errors import Busy
from runstore.services.test_runs import RunStart, RunStatus
from runstore.testing import flaky, make_item


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "runs.db"
    with build(flaky(sqlite(path))):
        pass
    return path


def _record(db: Path, project: str = "demo") -> int:
    with build(sqlite(db)) as container:
        store = container.get(DATA_STORE)
        run = store.begin_run(RunStart(project, f"inv-{datetime.now(UTC)}", datetime.now(UTC)))
        run_id = run.unwrap()
        store.record_results(run_id, [make_item("tests/test_demo.py::test_stable")]).unwrap()
        store.finish_run(run_id, RunStatus.PASSED, datetime.now(UTC)).unwrap()
    return int(run_id)


def _answers(db: Path, cache: bool = True) -> ToolAnswers:
    return ToolAnswers(Settings(str(db), "json"), cache=cache)


def test_a_commit_by_another_connection_drops_what_the_server_kept(db: Path) -> None:
    answers = _answers(db)
    try:
        first, reason = answers.call("failures", {})
        assert reason is None
        assert answers.call("failures", {}) == (first, None)  # kept: the same answer
        later = _record(db)
        document, _ = answers.call("failures", {})
        assert document["run"]["id"] == later != first["run"]["id"]
        triage, _ = answers.call("triage", {})
        assert triage["run"]["id"] == later
    finally:
        answers.close()


def test_the_answers_with_and_without_the_cache_are_equal(db: Path) -> None:
    kept, plain = _answers(db), _answers(db, cache=False)
    try:
        asked: list[tuple[str, dict[str, Any]]] = [
            ("triage", {}), ("triage", {"max_tokens": 400}), ("failures", {"run": 2}),
            ("flaky", {}), ("history", {"nodeid": "test_flaky"}),
            ("diff", {"run_a": 1, "run_b": "latest"}),
        ]
        for name, arguments in asked:
            for _ in range(2):
                assert kept.call(name, arguments) == plain.call(name, arguments), name
    finally:
        kept.close()
        plain.close()


class _Flaky:
    """A reader whose ``projects`` is busy once, then answers."""

    def __init__(self) -> None:
        self.calls = 0

    def projects(self) -> Any:
        self.calls += 1
        return Failure(Busy("projects", 1)) if self.calls == 1 else Success(("shop",))


def test_a_failure_is_never_kept() -> None:
    inner = _Flaky()
    reader = _CachedReader(inner)
    assert isinstance(reader.projects(), Failure)
    assert reader.projects() == Success(("shop",))
    assert reader.projects() == Success(("shop",))
    assert inner.calls == 2
    reader.clear()
    reader.projects()
    assert inner.calls == 3


def test_no_database_is_refused_until_one_is_recorded(tmp_path: Path) -> None:
    db = tmp_path / "later.db"
    answers = _answers(db)
    try:
        document, reason = answers.call("flaky", {})
        assert reason is not None
        assert reason.startswith(f"no runstore database at {db}")
        assert document == {"schema_version": 1, "error": reason}
        assert not db.exists()  # the server creates nothing
        with build(flaky(sqlite(db))):
            pass
        document, reason = answers.call("flaky", {})
        assert reason is None
        assert document["project"] == "demo"
    finally:
        answers.close()


def test_the_bounds_the_tools_state_are_the_services() -> None:
    from runstore.cli._mcp import _MAX_PAGE, _MAX_RUNS
    from runstore.services.pagination import MAX_PAGE_SIZE
    from runstore.services.test_runs import MAX_TESTS_FOR_RUNS

    assert (_MAX_PAGE, _MAX_RUNS) == (MAX_PAGE_SIZE, MAX_TESTS_FOR_RUNS)
