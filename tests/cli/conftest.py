"""Fixtures shared by the CLI tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from _zoo import seed_zoo  # beside this file


@pytest.fixture(scope="session")
def zoo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test-run database of ``_zoo`` (read it, never write it)."""
    return seed_zoo(tmp_path_factory.mktemp("zoo") / "runstore.db")
