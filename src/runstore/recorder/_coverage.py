"""Coverage of the session, read from coverage.py after the tests ran: per file, and per test
when coverage.py recorded a dynamic context per test (pytest-cov's ``--cov-context=test``, or
``--runstore-cov-context``, which turns those contexts on)."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

from runstore.recorder._convert import PathResolver
from runstore.recorder._text import clean_identifier
from runstore.services.test_runs import FileCoverage, TestLines

__all__ = ["enable_test_contexts", "session_coverage", "session_test_coverage"]


def _measuring(config: pytest.Config) -> Any | None:
    """The ``coverage.Coverage`` that measured this session, or None.

    pytest-cov's plugin (registered as ``_cov``) holds it as ``cov_controller.cov``, the
    object its own ``cov`` fixture hands out; by ``pytest_sessionfinish`` it has stopped and
    combined the workers' data. Without pytest-cov, a ``coverage run -m pytest`` session is
    found with ``coverage.Coverage.current()``. coverage is never imported by runstore.
    """
    plugin = config.pluginmanager.get_plugin("_cov")
    controller = getattr(plugin, "cov_controller", None)
    cov = getattr(controller, "cov", None)
    if cov is not None:
        return cov
    coverage = sys.modules.get("coverage")
    current = getattr(getattr(coverage, "Coverage", None), "current", None)
    return current() if callable(current) else None


def _file(resolver: PathResolver, name: str, entry: dict[str, Any]) -> FileCoverage:
    summary = entry["summary"]
    return FileCoverage(
        path=resolver.place(name)[0],
        statements=int(summary["num_statements"]),
        missing_statements=int(summary["missing_lines"]),
        branches=int(summary.get("num_branches", 0)),
        partial_branches=int(summary.get("num_partial_branches", 0)),
        missing_branches=int(summary.get("missing_branches", 0)),
        missing_lines=tuple(sorted(int(n) for n in entry.get("missing_lines", ()))),
    )


def session_coverage(config: pytest.Config, resolver: PathResolver) -> tuple[FileCoverage, ...]:
    """Per-file coverage of this session through coverage.py's public ``json_report``
    (statements, missing lines, branches), sorted by path; ``()`` when nothing was measured.

    Coverage's own "no data" is not an error here; any other exception propagates to the
    caller, which warns.
    """
    cov = _measuring(config)
    if cov is None:
        return ()
    import json  # only a measured session pays for these
    import tempfile
    import warnings

    from coverage.exceptions import NoDataError

    with tempfile.TemporaryDirectory(prefix="runstore-cov-") as folder:
        target = os.path.join(folder, "coverage.json")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                cov.json_report(outfile=target)
            except NoDataError:
                return ()
        with open(target, encoding="utf-8") as stream:
            document = json.load(stream)
    files = {}
    for name, entry in (document.get("files") or {}).items():
        record = _file(resolver, name, entry)
        files[record.path] = record  # two names for one file keep the last
    return tuple(files[path] for path in sorted(files))


# -- per-test coverage: coverage.py's dynamic contexts, named by pytest-cov ----------------------

CONTEXT_PHASES = frozenset({"setup", "run", "teardown"})
"""The phase suffixes of pytest-cov's test contexts: ``TestContextPlugin.switch_context``
names the context ``f"{item.nodeid}|{when}"`` in ``pytest_runtest_setup``, ``_call`` (as
``run``) and ``_teardown`` (pytest-cov 4.0 on; ``pytest_cov/plugin.py``)."""


def context_nodeid(context: str) -> str | None:
    """The node id of a pytest-cov test context (``tests/t.py::f[a|b]|run`` ->
    ``tests/t.py::f[a|b]``), None for any other context (``""``, the code run before the
    first test, or coverage.py's own ``test_function`` contexts, which name no node id)."""
    head, sep, tail = context.rpartition("|")
    return head if sep and head and tail in CONTEXT_PHASES else None


class _ContextSwitcher:
    """Switches coverage.py's dynamic context per test phase, with pytest-cov's names, for
    a session measured without pytest-cov (``coverage run -m pytest``)."""

    def __init__(self, cov: Any) -> None:
        self._cov = cov

    def _switch(self, item: pytest.Item, when: str) -> None:
        self._cov.switch_context(f"{item.nodeid}|{when}")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self._switch(item, "setup")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        self._switch(item, "run")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        self._switch(item, "teardown")


def enable_test_contexts(config: pytest.Config) -> bool:
    """Turn on a coverage context per test for this process (``--runstore-cov-context``);
    return whether a measurement to turn them on in was found.

    With pytest-cov, its own mechanism: its plugin (``_cov``, registered while pytest loads
    the initial conftests) reads ``options.cov_context`` at ``pytest_sessionstart`` and then
    registers its ``TestContextPlugin``, so setting that option to ``"test"`` here (from
    ``pytest_configure``, earlier) is ``--cov-context=test``; under ``pytest-xdist`` every
    worker does the same, and pytest-cov combines the workers' data with their contexts.
    Without pytest-cov, a session measured by ``coverage run`` gets the same context names
    from :class:`_ContextSwitcher`. Nothing is measured: nothing to do (False).
    """
    plugin = config.pluginmanager.get_plugin("_cov")
    options = getattr(plugin, "options", None)
    if options is not None:
        if getattr(options, "cov_context", None) is None:
            options.cov_context = "test"
        return True
    coverage = sys.modules.get("coverage")
    current = getattr(getattr(coverage, "Coverage", None), "current", None)
    cov = current() if callable(current) else None
    if cov is None:
        return False
    if not config.pluginmanager.has_plugin("runstore-cov-contexts"):
        config.pluginmanager.register(_ContextSwitcher(cov), "runstore-cov-contexts")
    return True


def session_test_coverage(
    config: pytest.Config, resolver: PathResolver, reported: frozenset[str]
) -> tuple[TestLines, ...] | None:
    """The lines each test executed in each reported file (``reported``: the stored paths
    of :func:`session_coverage`), from the contexts of coverage.py's data
    (``CoverageData.measured_contexts`` and ``contexts_by_lineno``, over the contexts the
    configuration's ``report_contexts`` selects, as coverage's own reports read them); a
    test's setup, call and teardown contexts count as one. None when the session has no
    pytest-cov test context (nothing to store: the run is not measured per test).

    Any exception propagates to the caller, which warns.
    """
    cov = _measuring(config)
    if cov is None or not reported:
        return None
    data = cov.get_data()
    nodeids = {
        context: clean_identifier(nodeid)
        for context in data.measured_contexts()
        if (nodeid := context_nodeid(context)) is not None
    }
    if not nodeids:
        return None
    data.set_query_contexts(getattr(cov.config, "report_contexts", None))
    rows: list[TestLines] = []
    done: set[str] = set()
    for filename in sorted(data.measured_files()):
        path = resolver.place(filename)[0]
        if path not in reported or path in done:  # two names for one file keep the first
            continue
        done.add(path)
        by_context: dict[str, list[int]] = {}
        for line, contexts in data.contexts_by_lineno(filename).items():
            for context in contexts:
                by_context.setdefault(context, []).append(line)
        by_test: dict[str, list[int]] = {}
        for context, lines in by_context.items():
            nodeid = nodeids.get(context)
            if nodeid is not None:
                by_test.setdefault(nodeid, []).extend(lines)
        rows.extend(
            TestLines(nodeid, path, tuple(sorted(set(lines))))
            for nodeid, lines in by_test.items()
        )
    return tuple(rows)
