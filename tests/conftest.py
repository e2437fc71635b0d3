"""Shared test configuration: hypothesis profiles and the opt-in slow marker.

Profiles (``HYPOTHESIS_PROFILE``): ``default`` (fast, for local runs), ``ci`` (what
``.ci/run`` uses; still inside CI's time), ``deep`` (many more examples; run before calling an
issue resolved). ``RUNSTORE_SLOW=1`` runs tests marked ``slow`` (crash loops, soak tests).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("RUNSTORE_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: set RUNSTORE_SLOW=1 to run")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
