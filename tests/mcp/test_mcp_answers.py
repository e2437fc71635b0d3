"""The MCP server's answers in process (``ToolAnswers``), without the SDK: the reader
answers it keeps are dropped as soon as another connection commits, a failure is never
kept, and a database that is not there yet is refused until it is; a database replaced,
removed or migrated past this code while the server holds it is read anew or refused as
the CLI refuses it."""

from __future__ import annotations

import json
import os
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import apsw
import pytest
from click.testing import CliRunner
from returns.result import Failure, Success

from runstore.cli import cli
from runstore.cli._mcp import ToolAnswers, _CachedReader
from runstore.cli._settings import Settings
from runstore.layers import DATA_STORE, build, sqlite
from runstore.migrations import JOURNAL_TABLE, shipped_ids
from runstore.services.errors import Busy
from runstore.services.test_runs import RunStart, RunStatus
from runstore.testing import flaky, make_item


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "runs.db"
    _seed(path)
    return path


def _seed(path: Path) -> None:
    with build(flaky(sqlite(path))):
        pass


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


def test_triage_is_computed_once_per_call(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import runstore.cli._triage as command
    import runstore.services.triage as service

    computed: list[int] = []
    original = service.triage_run

    def counted(*args: Any, **kwargs: Any) -> Any:
        computed.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(service, "triage_run", counted)
    monkeypatch.setattr(command, "triage_run", counted)
    answers = _answers(db)
    try:
        first, reason = answers.call("triage", {})
        assert reason is None
        assert len(computed) == 1
        assert answers.call("triage", {}) == (first, None)  # kept: computed, not rendered
        assert len(computed) == 2
        document, reason = answers.call("triage", {"max_tokens": 1})
        assert reason is not None
        assert reason.startswith("--max-tokens 1 is too small for this answer: it needs at "
                                 "least ")
        assert len(computed) == 3
        plain = _answers(db, cache=False)
        assert plain.call("triage", {"max_tokens": 1}) == (document, reason)
        plain.close()
    finally:
        answers.close()


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


class _Counting:
    """A reader answering ``failures(run)`` with ``text`` and counting what it was asked."""

    def __init__(self, text: str = "boom") -> None:
        self.asked: list[int] = []
        self.text = text

    def failures(self, run: int) -> Any:
        self.asked.append(run)
        return Success((f"{self.text} {run}",))


def test_the_kept_answers_are_the_least_recently_used_few() -> None:
    from runstore.cli._mcp import KEPT_ANSWERS

    inner = _Counting()
    reader = _CachedReader(inner)
    for run in range(KEPT_ANSWERS):
        reader.failures(run)
    reader.failures(0)  # used again: now the most recently used
    reader.failures(KEPT_ANSWERS)  # one too many: 1, the least recently used, goes
    assert inner.asked == [*range(KEPT_ANSWERS), KEPT_ANSWERS]
    reader.failures(0)
    reader.failures(KEPT_ANSWERS)
    assert inner.asked[-1] == KEPT_ANSWERS  # both still kept
    reader.failures(1)
    assert inner.asked[-1] == 1


def test_the_kept_answers_are_bounded_in_bytes() -> None:
    inner = _Counting("x" * 100_000)
    reader = _CachedReader(inner, most_bytes=250_000)
    for run in (1, 2, 3):
        reader.failures(run)
    reader.failures(3)
    reader.failures(2)
    assert inner.asked == [1, 2, 3]  # 2 and 3 kept: about 200,000 bytes
    reader.failures(1)
    assert inner.asked == [1, 2, 3, 1]  # 1 was left out for 3
    big = _Counting("x" * 300_000)
    too_big = _CachedReader(big, most_bytes=250_000)
    too_big.failures(1)
    too_big.failures(1)
    assert big.asked == [1, 1]  # larger than the bound: never kept


def test_no_database_is_refused_until_one_is_recorded(tmp_path: Path) -> None:
    db = tmp_path / "later.db"
    answers = _answers(db)
    try:
        document, reason = answers.call("flaky", {})
        assert reason is not None
        assert reason.startswith(f"no runstore database at {db}")
        assert document == {"schema_version": 1, "error": reason}
        assert not db.exists()  # the server creates nothing
        _seed(db)
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


def _cli_document(db: Path, *args: str) -> dict[str, Any]:
    """The JSON document of ``runstore --db DB --format json ARGS``."""
    done = CliRunner().invoke(cli, ["--db", str(db), "--format", "json", *args],
                              catch_exceptions=False)
    document: dict[str, Any] = json.loads(done.stdout)
    return document


@pytest.mark.parametrize("cache", [True, False], ids=["cache", "no-cache"])
def test_a_database_replaced_while_served_is_read_anew(
    db: Path, tmp_path: Path, cache: bool
) -> None:
    answers = _answers(db, cache)
    try:
        first, _ = answers.call("failures", {})
        assert answers.call("triage", {})[0]["run"] == first["run"]
        other = tmp_path / "other.db"
        _seed(other)
        later = _record(other)
        os.replace(other, db)
        document, reason = answers.call("failures", {})
        assert reason is None
        assert document["run"]["id"] == later != first["run"]["id"]
        assert json.loads(json.dumps(document)) == _cli_document(db, "failures")
        assert answers.call("triage", {})[0]["run"]["id"] == later
    finally:
        answers.close()


@pytest.mark.parametrize("cache", [True, False], ids=["cache", "no-cache"])
def test_a_database_removed_while_served_is_refused_until_one_is_recorded(
    db: Path, cache: bool
) -> None:
    answers = _answers(db, cache)
    try:
        assert answers.call("failures", {})[1] is None
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        document, reason = answers.call("failures", {})
        assert reason is not None
        assert reason.startswith(f"no runstore database at {db}")
        assert document == _cli_document(db, "failures")
        assert not db.exists()  # the server creates nothing
        _seed(db)
        later = _record(db)
        document, reason = answers.call("failures", {})
        assert reason is None
        assert document["run"]["id"] == later
    finally:
        answers.close()


@pytest.mark.parametrize("cache", [True, False], ids=["cache", "no-cache"])
def test_a_database_migrated_past_this_code_while_served_is_refused(
    db: Path, cache: bool
) -> None:
    answers = _answers(db, cache)
    future = max(shipped_ids()) + 1
    writer = apsw.Connection(str(db))
    try:
        assert answers.call("failures", {})[1] is None
        writer.execute(f"INSERT INTO {JOURNAL_TABLE} (id, name, checksum, applied_at_ms, "
                       "finished) VALUES (?, 'future', 'x', 0, 1)", (future,))
        document, reason = answers.call("failures", {})
        assert reason is not None
        assert f"database has migrations this runstore does not know: {future:04d}" in reason
        assert document == _cli_document(db, "failures")
        assert answers.call("triage", {})[1] == reason
        writer.execute(f"DELETE FROM {JOURNAL_TABLE} WHERE id = ?", (future,))
        assert answers.call("failures", {})[1] is None
    finally:
        writer.close()
        answers.close()


def test_a_watch_that_cannot_be_opened_is_a_refusal_that_closes_the_database(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import runstore.cli._mcp as served

    closed: list[bool] = []

    class Stack(ExitStack):
        def close(self) -> None:
            closed.append(True)
            super().close()

    def unopenable(_path: str) -> Any:
        raise apsw.CantOpenError("unable to open database file")

    monkeypatch.setattr(served, "ExitStack", Stack)
    monkeypatch.setattr(served, "_Changes", unopenable)
    answers = _answers(db)
    try:
        document, reason = answers.call("failures", {})
        assert reason is not None
        assert reason.startswith(f"cannot open {db}: storage failure (cant_open) in open: "
                                 "unable to open database file")
        assert document == {"schema_version": 1, "error": reason}
        assert closed == [True]
        monkeypatch.undo()
        assert answers.call("failures", {})[1] is None
    finally:
        answers.close()
