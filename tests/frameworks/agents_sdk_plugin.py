"""A pytest plugin that runs the OpenAI Agents SDK's own session tests on ``RunstoreSession``.

Loaded with ``-p agents_sdk_plugin`` by ``test_openai_agents_sdk.py`` in a pytest process of
its own, started in the root of the SDK's sdist (its tests are a package named ``tests``,
like runstore's). The SDK's generic session tests (``tests/memory/test_session.py``,
``test_session_limit.py``) build ``SQLiteSession`` by the name their module imported; an
autouse fixture replaces that name in each test's module with a factory of
:class:`~runstore.adapters.openai_agents.RunstoreSession`, and fails the test at teardown
when it never called the factory, so every test counted as passed ran on the adapter.

The tests deselected (:data:`DESELECTED`, by name, each with its reason) are those that
build no session at all or check ``SQLiteSession``'s own SQLite internals (its per-thread
``sqlite3`` connections, its class-level file locks, rows planted through its private
connection, an injected ``sqlite3.Connection`` subclass). What they cover that a session
must do is tested on the adapter in ``test_openai_agents.py``.

``RUNSTORE_AGENTS_REPORT``, when set, names a JSON file the plugin writes at the end:
``{"deselected": [...], "built": {nodeid: sessions built}}``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

NO_SESSION = "builds no session"
CONNECTIONS = "SQLiteSession internals: its per-thread sqlite3 connections (_connections)"
PLANTED = (
    "plants an undecodable row into SQLiteSession's own table through its private"
    " _locked_connection(); runstore stores checked JSON only (a damaged row is a"
    " StorageFailure, tested in runstore)"
)
INJECTED = "injects a sqlite3.Connection subclass through SQLiteSession._get_connection"

DESELECTED: dict[str, str] = {
    "test_await_mutation_cancellation_hides_later_failure_without_loop_error":
        f"{NO_SESSION}: tests the SDK helper _await_mutation alone",
    "test_session_memory_disabled_parametrized": f"{NO_SESSION}: runs with session=None",
    "test_session_settings_resolve": f"{NO_SESSION}: tests SessionSettings.resolve alone",
    "test_sqlite_session_close_closes_worker_thread_connections": CONNECTIONS,
    "test_sqlite_session_reaps_connections_from_exited_worker_threads": CONNECTIONS,
    "test_sqlite_session_closes_retired_connections_before_the_next_allocation":
        f"{CONNECTIONS}; monkeypatches sqlite3.connect",
    "test_sqlite_session_keeps_connections_of_live_worker_threads": CONNECTIONS,
    "test_sqlite_session_pop_item_skips_corrupt_most_recent": PLANTED,
    "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": PLANTED,
    "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": PLANTED,
    "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": PLANTED,
    "test_sqlite_session_file_lock_is_shared_across_instances":
        "SQLiteSession internals: its class-level file locks (_lock, _file_lock_counts)",
    "test_sqlite_session_failed_add_items_releases_write_lock":
        "probes SQLiteSession's agent_sessions table with sqlite3 (runstore's own test:"
        " a failed add stores nothing and leaves the session usable)",
    "test_sqlite_session_failed_clear_session_rolls_back":
        f"drops SQLiteSession's own table; {CONNECTIONS}",
    "test_sqlite_session_failed_pop_item_releases_write_lock":
        f"drops SQLiteSession's own table; {CONNECTIONS}",
    "test_sqlite_session_rollback_failure_evicts_connection": INJECTED,
    "test_sqlite_session_close_retries_quarantined_connection":
        f"{INJECTED}; _quarantined_connections",
    "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome":
        f"{INJECTED} to pause a commit (runstore's own test cancels after the writer"
        " committed)",
}
"""The SDK tests left out, by function name (every parametrization), and why."""

_deselected: list[str] = []
_built: dict[str, int] = {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        name = getattr(item, "originalname", item.name)
        (dropped if name in DESELECTED else kept).append(item)
    _deselected.extend(item.nodeid for item in dropped)
    config.hook.pytest_deselected(items=dropped)
    items[:] = kept


@pytest.fixture(autouse=True)
def _runstore_session(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Build ``RunstoreSession`` wherever the test module builds ``SQLiteSession``."""
    from runstore.adapters.openai_agents import RunstoreSession

    node = request.node.nodeid
    _built[node] = 0

    def build(*args: Any, **kwargs: Any) -> RunstoreSession:
        _built[node] += 1
        return RunstoreSession(*args, **kwargs)

    monkeypatch.setattr(request.module, "SQLiteSession", build)
    yield
    assert _built[node] > 0, f"{node} never built the runstore adapter"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    built = sum(1 for count in _built.values() if count)
    terminalreporter.write_line(f"runstore adapter built in {built}/{len(_built)} tests")
    report = os.environ.get("RUNSTORE_AGENTS_REPORT")
    if report:
        Path(report).write_text(json.dumps({"deselected": _deselected, "built": _built}))
