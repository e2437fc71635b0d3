"""Running pytest with the runstore plugin in a subprocess, and reading what it recorded.

Shared by the plugin's end-to-end tests (imported by name: pytest puts this folder on
``sys.path`` for the test modules beside it).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import apsw

from runstore.exceptions import DatabaseOpenError
from runstore.layers import build, sqlite
from runstore.services.test_runs import DataReader, RunSummary, TestRecord

__all__ = ["SUMMARY", "env_for", "holding_the_write_lock", "latest", "pytest_args",
           "recorded_items", "run_pytest", "write"]

SUMMARY = re.compile(r"^runstore: .*$", re.M)


def env_for(*, autoload: bool = False, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "RUNSTORE_"))}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if not autoload:  # load only runstore (and what a test names): pytest starts seconds faster
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env.update(extra)
    return env


def pytest_args(*args: str, autoload: bool = False) -> list[str]:
    """The command line of a pytest process: runstore's plugin by its entry point when
    ``autoload``, else named with ``-p`` (as the entry point names it)."""
    plugin = () if autoload else ("-p", "runstore.pytest_plugin")
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *plugin, *args]


def run_pytest(
    folder: Path, *args: str, env: dict[str, str] | None = None, autoload: bool = False
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        pytest_args(*args, autoload=autoload), cwd=folder, env=env or env_for(autoload=autoload),
        capture_output=True, text=True, errors="replace", timeout=120, check=False,
    )


def write(folder: Path, **files: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, source in files.items():
        filename = name if "." in name else f"{name}.py"
        (folder / filename).write_text(textwrap.dedent(source), encoding="utf-8")
    return folder


def latest(db: Path, project: str) -> tuple[RunSummary, dict[str, TestRecord]]:
    with build(sqlite(db)) as container:
        reader = container.get(DataReader)
        run = reader.latest_run(project).unwrap()
        return run, {t.nodeid: t for t in reader.tests(run.id).unwrap()}


def recorded_items(db: Path, project: str) -> int:
    """Items of the newest run of ``project`` so far (0 while there is none to read)."""
    if not db.exists():
        return 0
    try:
        with build(sqlite(db)) as container:
            found = container.get(DataReader).latest_run(project)
    except DatabaseOpenError:  # the recording process is creating it
        return 0
    total: int = found.map(lambda run: run.total).value_or(0)
    return total


@contextmanager
def holding_the_write_lock(db: Path) -> Iterator[None]:
    """Create and migrate ``db``, then hold its write lock (as another writer would) inside
    the ``with`` block."""
    with build(sqlite(db)):
        pass
    holder = apsw.Connection(str(db))
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()
