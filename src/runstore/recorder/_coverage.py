"""Per-file coverage of the session, read from coverage.py after the tests ran."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

from runstore.recorder._convert import PathResolver
from runstore.services.test_runs import FileCoverage

__all__ = ["session_coverage"]


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
