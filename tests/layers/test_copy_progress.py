"""``copy_database(..., progress=...)`` reports rows written out of the rows counted first:
never going back, ending at ``(total, total)`` only once the copy is verified and
committed, and the copy is the same with or without it (SQLite to SQLite; the PostgreSQL
side writes through the same loop)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from returns.result import Failure

from runstore.layers import DATA_STORE, _copy, build, sqlite
from runstore.layers._copy import CopyMismatch, DestinationNotEmpty, copy_database, table_checksums
from runstore.services.errors import InvalidInput
from runstore.services.test_runs import (
    Outcome,
    Phase,
    PhaseResult,
    RunStart,
    RunStatus,
    TestResult,
)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database of 12 runs with 3 items each."""
    path = tmp_path_factory.mktemp("copy") / "source.db"
    with build(sqlite(path)) as container:
        store = container.get(DATA_STORE)
        for n in range(12):
            at = datetime.fromtimestamp(1_764_500_000 + 60 * n, tz=UTC)
            run = store.begin_run(RunStart("shop", f"inv-{n}", at)).unwrap()
            store.record_results(run, [
                TestResult(f"tests/test_a.py::test_{i}", "tests/test_a.py", f"test_{i}",
                           (PhaseResult(Phase.CALL, Outcome.PASSED, 1.0),))
                for i in range(3)
            ]).unwrap()
            store.finish_run(run, RunStatus.PASSED, at).unwrap()
    return path


def _checked(calls: list[tuple[int, int]], total: int) -> None:
    assert calls[-1] == (total, total)
    assert {t for _, t in calls} == {total}
    dones = [d for d, _ in calls]
    assert dones == sorted(dones)
    assert all(0 <= d < total for d in dones[:-1])


@pytest.mark.parametrize("every", [1, 7, 10_000])
def test_copy_progress_counts_rows_up_to_the_total(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, every: int
) -> None:
    monkeypatch.setattr(_copy, "PROGRESS_ROWS", every)
    calls: list[tuple[int, int]] = []
    told = copy_database(str(source), str(tmp_path / "told.db"),
                         progress=lambda d, t: calls.append((d, t))).unwrap()
    quiet = copy_database(str(source), str(tmp_path / "quiet.db")).unwrap()
    assert told.rows == quiet.rows > 36
    _checked(calls, told.rows)
    tables_with_rows = sum(1 for t in told.tables if t.rows)
    if every == 1:
        assert len(calls) == told.rows + 1  # (0, total), each row, then the committed call
    else:
        assert len(calls) >= min(tables_with_rows, told.rows // every)
    assert table_checksums(str(tmp_path / "told.db")) == table_checksums(
        str(tmp_path / "quiet.db"))


def test_a_refused_copy_reports_nothing(source: Path, tmp_path: Path) -> None:
    target = str(tmp_path / "full.db")
    copy_database(str(source), target).unwrap()
    calls: list[tuple[int, int]] = []
    refused = copy_database(str(source), target, progress=lambda d, t: calls.append((d, t)))
    assert isinstance(refused, Failure)
    assert isinstance(refused.failure(), DestinationNotEmpty)
    assert calls == []


def test_a_copy_rolled_back_never_reports_the_end(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    insert = _copy._SqliteSide.insert

    def lossy(self: Any, table: str, columns: Any, rows: Any) -> None:
        kept = list(rows)
        insert(self, table, columns, kept[:-1] if table == "test_cases" else kept)

    monkeypatch.setattr(_copy._SqliteSide, "insert", lossy)
    calls: list[tuple[int, int]] = []
    failed = copy_database(str(source), str(tmp_path / "lossy.db"),
                           progress=lambda d, t: calls.append((d, t)))
    assert isinstance(failed, Failure)
    assert isinstance(failed.failure(), CopyMismatch)
    assert calls
    assert all(d < t for d, t in calls)


@pytest.mark.parametrize("bad", [3, "bar"])
def test_a_progress_that_is_not_callable_is_refused(
    source: Path, tmp_path: Path, bad: object
) -> None:
    target = tmp_path / "never.db"
    refused = copy_database(str(source), str(target), progress=bad)  # type: ignore[arg-type]
    assert isinstance(refused, Failure)
    assert isinstance(refused.failure(), InvalidInput)
    assert refused.failure().field == "progress"
    assert not target.exists()
