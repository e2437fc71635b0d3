"""The contract every layer's :class:`~runstore.services.DatabaseHealth` must meet.

On a database the layer built itself, health is the healthy answer everywhere: ready to
read, sound, nothing pending, no problems; asking changes nothing, and writes through the
layer's own services keep it so. What a damaged or foreign database must answer is the
business of each backend's own tests (the SQLite layer's are in ``tests/layers``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from returns.result import Success

from runstore.layers import DATA_STORE, DATABASE_HEALTH, Container, Layer, build
from runstore.services.health import DatabaseHealth
from runstore.services.test_runs import Outcome, Phase, PhaseResult, RunStart, RunStatus, TestResult
from runstore.testing._shared import LayerFactory

__all__ = ["HealthContract"]

_T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _assert_healthy(health: DatabaseHealth) -> None:
    assert health.readiness() == Success(None)
    assert health.quick_check() == Success(None)
    status = health.status().unwrap()
    assert status.pending == ()
    assert status.problems == ()
    assert status.healthy
    found = health.check().unwrap()
    assert found.integrity == ("ok",)
    assert found.foreign_key_violations == ()
    assert found.status == status
    assert found.problems == ()
    assert found.healthy


def _record_runs(container: Container, outcomes: list[list[bool]]) -> None:
    """One finished run per entry of ``outcomes``, a test per flag (True passes)."""
    store = container.get(DATA_STORE)
    for number, flags in enumerate(outcomes):
        started = _T0 + timedelta(minutes=number)
        run = store.begin_run(RunStart("health", f"inv-{number}", started)).unwrap()
        results = [
            TestResult(
                f"tests/test_h.py::test_{index}", "tests/test_h.py", f"test_{index}",
                (PhaseResult(Phase.CALL, Outcome.PASSED if passed else Outcome.FAILED, 1.0),),
            )
            for index, passed in enumerate(flags)
        ]
        store.record_results(run, results).unwrap()
        status = RunStatus.PASSED if all(flags) else RunStatus.FAILED
        store.finish_run(run, status, started + timedelta(seconds=1)).unwrap()


class HealthContract:
    """What every layer's ``DatabaseHealth`` must answer; subclass and define
    :meth:`make_layer` (or override the ``layer_factory`` fixture). The layer provides
    ``DATABASE_HEALTH`` and, optionally, ``DATA_STORE``.

    ``writable`` says whether the layer takes writes (a database opened read-only does
    not); when it does and provides ``DATA_STORE``, runs written through it must leave the
    database as healthy as before.
    """

    writable: ClassVar[bool] = True

    def make_layer(self) -> Layer:
        """Return a fresh layer providing ``DATABASE_HEALTH`` (override this, or the fixture)."""
        raise NotImplementedError("subclass HealthContract and define make_layer")

    @pytest.fixture
    def layer_factory(self) -> LayerFactory:
        """The factory under test (``make_layer`` unless a subclass overrides this fixture)."""
        return self.make_layer

    def test_a_fresh_database_is_ready_sound_and_current(
        self, layer_factory: LayerFactory
    ) -> None:
        with build(layer_factory()) as container:
            _assert_healthy(container.get(DATABASE_HEALTH))

    def test_asking_changes_no_answer(self, layer_factory: LayerFactory) -> None:
        with build(layer_factory()) as container:
            health = container.get(DATABASE_HEALTH)
            first = (health.readiness(), health.quick_check(), health.status(), health.check())
            again = (health.readiness(), health.quick_check(), health.status(), health.check())
            assert again == first

    def test_writes_through_the_layer_keep_it_healthy(
        self, layer_factory: LayerFactory
    ) -> None:
        if not self.writable:
            pytest.skip("the layer takes no writes")

        @settings(max_examples=10, deadline=None)
        @given(outcomes=st.lists(st.lists(st.booleans(), min_size=1, max_size=4), max_size=3))
        def writes_keep_it_healthy(outcomes: list[list[bool]]) -> None:
            with build(layer_factory()) as container:
                if DATA_STORE not in container:
                    pytest.skip("the layer provides no DataStore to write through")
                before = container.get(DATABASE_HEALTH).status().unwrap()
                _record_runs(container, outcomes)
                health = container.get(DATABASE_HEALTH)
                _assert_healthy(health)
                assert health.status().unwrap() == before

        writes_keep_it_healthy()
