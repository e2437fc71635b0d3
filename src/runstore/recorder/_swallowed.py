"""Attempts another plugin ran but did not report: the ``flaky`` plugin's retries.

``flaky`` (box/flaky, 3.8) runs an item again by calling pytest's runner protocol once per
attempt, and for every attempt but the last it makes the setup and call reports without
handing them to ``pytest_runtest_logreport`` (``FlakyPlugin.call_and_report`` sets
``log = False``), while the attempt's teardown report is logged as usual. A recorder that
reads logged reports alone would see a teardown with no call, then the last attempt, and
store only the last: every earlier attempt, failing or passing, lost.

:class:`SwallowedReports` runs where the tests run (the only process without
``pytest-xdist``, a worker with it) and watches the reports made against those logged; on
an item's teardown report it attaches the setup and call reports of that attempt that were
made but never logged, as ``report.runstore_swallowed``: a list of the reports in pytest's
own serializable form (``TestReport._to_json``, what ``pytest-xdist`` sends), so the
controller gets them with the teardown. ``runstore.recorder._convert.ItemAssembler`` reads
them back as the phases of that attempt, which is an earlier attempt of the item (a plugin
holds back the reports of an attempt it will run again). Registered only when the
``flaky`` plugin is loaded, so no other session pays for the watching.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

__all__ = ["SWALLOWED_ATTR", "SwallowedReports", "swallowed_reports"]

SWALLOWED_ATTR = "runstore_swallowed"
"""On a teardown report: the attempt's setup and call reports that were never logged."""


class SwallowedReports:
    """pytest hooks that attach :data:`SWALLOWED_ATTR` to teardown reports (module doc)."""

    def __init__(self) -> None:
        self._made: dict[str, list[pytest.TestReport]] = {}  # by node id, until teardown

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        try:
            if call.when in ("setup", "call"):
                self._made.setdefault(report.nodeid, []).append(report)
            elif call.when == "teardown":
                unlogged = self._made.pop(report.nodeid, [])
                if unlogged:
                    setattr(report, SWALLOWED_ATTR, [r._to_json() for r in unlogged])
        except Exception:  # never let watching the reports break the run
            self._made.pop(report.nodeid, None)
        return report

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        made = self._made.get(report.nodeid)
        if made:
            made[:] = [r for r in made if r is not report]


def swallowed_reports(report: Any) -> list[pytest.TestReport]:
    """The reports :class:`SwallowedReports` attached to ``report`` (none when it has no
    such attribute, or one that is not pytest's serialized form)."""
    found = getattr(report, SWALLOWED_ATTR, None)
    if not isinstance(found, list):
        return []
    reports: list[pytest.TestReport] = []
    for data in found:
        try:
            reports.append(pytest.TestReport._from_json(data))
        except Exception:  # a malformed entry: keep what can be read
            continue
    return reports
