"""Shared test configuration: hypothesis profiles, the opt-in slow marker, acceptance inputs.

Profiles (``HYPOTHESIS_PROFILE``): ``default`` (fast, for local runs), ``ci`` (what
``.ci/run`` uses; still inside CI's time: 60 examples, but the test-runs state machine runs 15
on PostgreSQL and 20 on two connections to one SQLite file, whose examples cost seconds each),
``deep`` (many more examples, every layer alike; run before calling an issue resolved).
``RUNSTORE_SLOW=1`` runs tests marked ``slow`` (crash loops, soak tests). The tests run in
pytest-xdist workers (``-n 2``), each its own process with its own PostgreSQL server and its
own migrated SQLite template (``sqlite_files``, ``sqlite_memory_layers``: see
:mod:`sqlite_template`); the longest tests run first, split between the workers (see
:mod:`schedule`).

``tests/frameworks`` (the frameworks profile: the adapters against the frameworks they plug
into, which must be installed: ``tests/frameworks/requirements.txt``) is collected only with
``RUNSTORE_FRAMEWORKS=1``, which ``.ci/frameworks`` sets when it runs them in
``.venv-frameworks``. The rule lives here, not in a conftest of that folder: a second
``conftest`` module would shadow this one for the tests that import from it.

``@pytest.mark.acceptance_inputs(FOLDER)`` marks a test that reads the shared acceptance
inputs in ``FOLDER`` (``../shared/acceptance/...`` beside the repository). When the folder is
missing the test is skipped with a reason naming it, except under CI (``CI`` set, as
``.ci/run`` runs), where it fails: CI must run every acceptance test, never skip one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from postgres.fixtures import postgres_dsn, postgres_layers, postgres_server
from schedule import long_first
from sqlite_template import sqlite_files, sqlite_memory_layers, sqlite_template

if os.environ.get("RUNSTORE_FRAMEWORKS") != "1":
    collect_ignore = ["frameworks"]

__all__ = [  # fixtures for every folder
    "postgres_dsn",
    "postgres_layers",
    "postgres_server",
    "sqlite_files",
    "sqlite_memory_layers",
    "sqlite_template",
]

settings.register_profile(
    "default",
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "ci",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile(
    "deep",
    max_examples=1_000,
    stateful_step_count=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


# Last, so that it orders what -k, -m and the other plugins left (xdist sends that collection).
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The longest tests first, split across the xdist workers so that they end together.
    workerinput = getattr(config, "workerinput", None)
    workers = int(workerinput["workercount"]) if workerinput is not None else 1
    chunk = getattr(config.option, "maxschedchunk", None)  # an xdist option; None without it
    order = long_first([item.nodeid for item in items], workers, chunk)
    items[:] = [items[index] for index in order]
    if os.environ.get("RUNSTORE_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: set RUNSTORE_SLOW=1 to run")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def in_ci(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether CI runs the tests: ``CI`` is set to anything but empty, ``0`` or ``false``."""
    return environ.get("CI", "").strip().lower() not in ("", "0", "false")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "acceptance_inputs(folder): needs the shared acceptance inputs in folder "
        "(skipped when missing, failed under CI)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker in item.iter_markers("acceptance_inputs"):
        (folder,) = marker.args
        if Path(folder).is_dir():
            continue
        if in_ci():
            pytest.fail(
                f"the acceptance inputs are missing: {folder} is not a folder (CI runs every "
                "acceptance test; lay ../shared/acceptance beside the repository)",
                pytrace=False,
            )
        pytest.skip(
            f"needs the acceptance inputs in {folder} (../shared/acceptance beside the "
            "repository), which is missing; under CI this fails"
        )
