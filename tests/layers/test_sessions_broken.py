"""Testing the tester: the sessions contract must fail deliberately broken layers.

Both broken layers keep a cache of the live layer in a plain dict instead of a mirror of the
unit of work, so what an append publishes there stays when the unit that made it rolls
back: the bug seed 004 fixed by hand (caches restored after a failed append).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from runstore.layers import (
    SESSION_REPOSITORY,
    Layer,
    SqliteDatabase,
    SqliteSessionRepository,
    merge,
    sqlite,
)
from runstore.services import Clock
from runstore.testing import SessionsContractViolation, sessions_state_machine

FIND_IT = settings(
    max_examples=200,
    stateful_step_count=25,
    phases=[Phase.generate],
    database=None,
    suppress_health_check=list(HealthCheck),
)


class SummaryPublishedBeforeCommit(SqliteSessionRepository):
    """Publishes each new summary at once, not when the unit of work commits."""

    def __init__(self, db: SqliteDatabase, clock: Clock) -> None:
        super().__init__(db, clock)
        self._summaries: Any = {}


class HeadPublishedBeforeCommit(SqliteSessionRepository):
    """Publishes the entry counter and the active leaf at once, not at commit."""

    def __init__(self, db: SqliteDatabase, clock: Clock) -> None:
        super().__init__(db, clock)
        self._heads: Any = {}


def _layer(cls: type[SqliteSessionRepository]) -> Layer:
    return merge(
        sqlite(":memory:"),
        Layer.service(
            SESSION_REPOSITORY,
            lambda c: cls(c.get(SqliteDatabase), c.get(Clock)),
            requires=(SqliteDatabase, Clock),
        ),
    )


@pytest.mark.parametrize("broken", [SummaryPublishedBeforeCommit, HeadPublishedBeforeCommit])
def test_the_contract_catches_caches_published_before_commit(
    broken: type[SqliteSessionRepository],
) -> None:
    machine = sessions_state_machine(lambda: _layer(broken))
    with pytest.raises(SessionsContractViolation):
        run_state_machine_as_test(machine, settings=FIND_IT)


def test_the_live_layer_itself_passes_the_same_search() -> None:
    run_state_machine_as_test(
        sessions_state_machine(lambda: _layer(SqliteSessionRepository)),
        settings=settings(FIND_IT, max_examples=10),
    )
