"""Counts in CLI text read as English: "2 errors", "1 error"."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from runstore.cli import cli
from runstore.layers import build, sqlite
from runstore.services.test_runs import DataStore, Outcome, RunStart, RunStatus
from runstore.testing import make_item

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize("errors", [1, 2])
def test_error_counts_are_plural(tmp_path: Path, errors: int) -> None:
    path = tmp_path / "runstore.db"
    with build(sqlite(path)) as container:
        store = container.get(DataStore)
        run = store.begin_run(RunStart("shop", "inv-1", T0)).unwrap()
        items = [make_item(f"tests/test_a.py::test_{n}", Outcome.ERROR) for n in range(errors)]
        store.record_results(run, [*items, make_item("tests/test_a.py::test_ok")]).unwrap()
        store.finish_run(run, RunStatus.FAILED, T0.replace(second=30)).unwrap()
    for command in (["show"], ["runs"]):
        result = CliRunner().invoke(cli, ["--db", str(path), *command])
        assert result.exit_code == 0, result.output
        expected = "1 error" if errors == 1 else "2 errors"
        assert re.search(rf"\b{expected}\b", result.stdout), result.stdout
