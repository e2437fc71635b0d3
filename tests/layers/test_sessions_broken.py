"""Testing the tester: the sessions contract must fail deliberately broken layers.

The first two keep a cache of the live layer in a plain dict instead of a mirror of the
unit of work, so what an append publishes there stays when the unit that made it rolls
back: the bug seed 004 fixed by hand (caches restored after a failed append). The others
each break one rule of the pi harness that the contract checks (leaf moves in the log,
moves with a branch summary in one unit, walks that stop at a retained tail, listing by
creation time, a fork's cwd, compactions kept as pi keeps them, a closed store's typed
failure), and the same contract tests pass on the layers they are broken from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import apsw
import attrs
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test
from returns.result import Failure, Result, Success

from runstore.layers import (
    CLOCK,
    SESSION_REPOSITORY,
    InMemoryDatabase,
    InMemorySessionRepository,
    Layer,
    SqliteDatabase,
    SqliteSessionRepository,
    build,
    in_memory_database,
    merge,
    sqlite,
)
from runstore.layers._postgres_database import PostgresDatabase
from runstore.layers._postgres_sessions import (
    _POSTGRES_PATH,
    _RETAINS_TAIL,
    PostgresSessionRepository,
)
from runstore.services import Clock, FixedClock, NewEntry, NotFound, SessionRepository
from runstore.services._sessions_rules import AppendPlan, Head, ListingKey, walk_path
from runstore.services.sessions import BranchMove, Entry, SessionError, SessionRecord
from runstore.testing import (
    LayerFactory,
    SessionsContract,
    SessionsContractViolation,
    sessions_state_machine,
)
from runstore.testing._sessions import T0_MS, Sessions

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


# -- layers that break one rule of the pi harness each (seed 004) --------------------------------


class LeafMovesNotLogged(SqliteSessionRepository):
    """Moves the leaf by storing the head only, as before leaf moves were entries."""

    def move_to(
        self, session_id: str, entry_id: str | None, summary: BranchMove | None
    ) -> Result[AppendPlan, SessionError]:
        def unit() -> Result[AppendPlan, SessionError]:
            ref = self._find(session_id)
            if ref is None or (entry_id is not None and not self._has_entry(ref, entry_id)):
                return Failure(NotFound("entry", str(entry_id)))
            head = Head(self._head(ref).next_seq, entry_id)
            self._store_head(ref, head)
            return Success(AppendPlan((), head, self._summary(ref), {}))

        return self._write("move leaf", unit)


class MoveInTwoUnits(InMemorySessionRepository):
    """Writes the leaf move and the branch summary in two units of work (else the same)."""

    def move_to(
        self, session_id: str, entry_id: str | None, summary: BranchMove | None
    ) -> Result[AppendPlan, SessionError]:
        moved = super().move_to(session_id, entry_id, None)
        if summary is None or isinstance(moved, Failure):
            return moved
        first = moved.unwrap()
        payload: dict[str, Any] = {"fromId": entry_id or "root", "summary": summary.summary}
        if summary.usage is not None:
            payload["usage"] = summary.usage
        branch = NewEntry(
            id=summary.id or f"summary-{first.head.next_seq}",
            parent_id=entry_id,
            type="branch_summary",
            timestamp=self._clock.now_ms(),
            payload=payload,
        )
        second = self.append_many(session_id, [branch], batch=False)
        if isinstance(second, Failure):
            error = second.failure()
            return Failure(attrs.evolve(error, position=1) if hasattr(error, "position") else error)
        plan = second.unwrap()
        return Success(attrs.evolve(plan, entries=(*first.entries, *plan.entries)))


class WalksPastRetainedTails(InMemorySessionRepository):
    """Walks a compaction with a retained tail as if it had none."""

    def _walk(self, ref: str, entry_id: str, *, to_root: bool) -> list[Entry]:
        def lookup(wanted: str) -> Entry | None:
            stored = self._entries.get((ref, wanted))
            if stored is None:
                return None
            entry = stored.entry
            payload = {k: v for k, v in entry.payload.items() if k != "retainedTail"}
            return attrs.evolve(entry, payload=payload)

        path = walk_path(entry_id, lookup, to_root=to_root) or []
        return [self._entries[(ref, e.id)].entry for e in path]


class ListsByStoreKey(InMemorySessionRepository):
    """Lists sessions by the order they were stored in, not by creation time."""

    def _listing(
        self, cwd: str | None, after: ListingKey | None, count: int
    ) -> list[tuple[ListingKey, SessionRecord]]:
        found = super()._listing(cwd, None, 10_000)
        found.sort(key=lambda pair: pair[0][1], reverse=True)
        kept = [pair for pair in found if after is None or pair[0][1] < after[1]]
        return [((key[1], key[1]), record) for key, record in kept[:count]]


class ForkKeepsTheSourceCwd(SqliteSessionRepository):
    """Ignores the ``cwd`` of a fork."""

    def fork(self, source: str, *, cwd: str | None = None, **rest: Any) -> Any:
        return super().fork(source, **rest)


class RefusesWhatPiKeeps(SqliteSessionRepository):
    """Refuses a compaction off its path even when asked to keep it."""

    def append_many(
        self,
        session_id: str,
        entries: Any,
        *,
        batch: bool,
        strict_compactions: bool = True,
    ) -> Result[AppendPlan, SessionError]:
        return super().append_many(session_id, entries, batch=batch, strict_compactions=True)


class ReachesTheStoreAfterClose(SqliteSessionRepository):
    """Never learns that its container closed: the driver's error escapes."""

    def close(self) -> None:
        pass


def _service(cls: type[Any], database: Callable[[], Layer], db_key: Any) -> Layer:
    def scoped(c: Any) -> Iterator[Any]:
        repository = cls(c.get(db_key), c.get(CLOCK))
        yield repository
        repository.close()

    return merge(database(), Layer.service(SESSION_REPOSITORY, scoped, requires=(db_key, CLOCK)))


def _live(cls: type[Any]) -> Callable[[], Layer]:
    return lambda: _service(cls, lambda: sqlite(":memory:"), SqliteDatabase)


def _memory(cls: type[Any]) -> Callable[[], Layer]:
    return lambda: _service(cls, in_memory_database, InMemoryDatabase)


@pytest.mark.parametrize(
    ("factory", "test"),
    [
        (_live(LeafMovesNotLogged), "test_leaf_moves_are_entries_of_the_log"),
        (_memory(MoveInTwoUnits), "test_move_to_writes_the_move_and_its_summary_in_one_unit"),
        (_memory(WalksPastRetainedTails), "test_a_compaction_with_a_retained_tail_stops_the_walk"),
        (_memory(ListsByStoreKey), "test_list_is_newest_first_by_creation_time"),
        (_live(ForkKeepsTheSourceCwd), "test_fork_can_set_the_cwd"),
        (_live(RefusesWhatPiKeeps), "test_a_first_kept_entry_off_the_path_is_kept_as_pi_keeps_it"),
        (_live(ReachesTheStoreAfterClose), "test_a_closed_store_answers_with_a_typed_failure"),
    ],
    ids=lambda value: getattr(value, "__name__", value) if isinstance(value, str) else None,
)
def test_the_contract_catches_a_broken_rule(factory: Callable[[], Layer], test: str) -> None:
    method = getattr(SessionsContract(), test)
    if test == "test_a_closed_store_answers_with_a_typed_failure":
        with pytest.raises(apsw.ConnectionClosedError):  # the driver's error escapes
            method(factory)
        return
    clock = FixedClock(T0_MS)
    with build(merge(factory(), Layer.value(CLOCK, clock))) as container:
        sessions = Sessions(container.get(SessionRepository), clock)
        with pytest.raises(AssertionError):
            method(sessions)


@pytest.mark.parametrize(
    "factory", [_live(SqliteSessionRepository), _memory(InMemorySessionRepository)]
)
def test_the_same_tests_pass_on_the_layers_they_are_broken_from(
    factory: Callable[[], Layer],
) -> None:
    contract = SessionsContract()
    contract.test_a_closed_store_answers_with_a_typed_failure(factory)
    clock = FixedClock(T0_MS)
    for test in (
        "test_leaf_moves_are_entries_of_the_log",
        "test_move_to_writes_the_move_and_its_summary_in_one_unit",
        "test_a_compaction_with_a_retained_tail_stops_the_walk",
        "test_list_is_newest_first_by_creation_time",
        "test_fork_can_set_the_cwd",
        "test_a_first_kept_entry_off_the_path_is_kept_as_pi_keeps_it",
    ):
        with build(merge(factory(), Layer.value(CLOCK, clock))) as container:
            getattr(contract, test)(Sessions(container.get(SessionRepository), clock))


# -- PostgreSQL ----------------------------------------------------------------------------------


class WalksPastRetainedTailsOnPostgres(PostgresSessionRepository):
    """Walks a compaction with a retained tail as if it had none: the PostgreSQL path
    statement without its retained-tail step."""

    def _path_rows(self, ref: int, start: str, *, to_root: bool, all_bodies: bool) -> list[Any]:
        return self._postgres.execute(
            _POSTGRES_PATH.replace(_RETAINS_TAIL, "false"),
            {"key": ref, "start": start, "walk": int(not to_root), "all_bodies": int(all_bodies)},
        )


class LeafMovesNotLoggedOnPostgres(LeafMovesNotLogged, PostgresSessionRepository):
    """:class:`LeafMovesNotLogged` over the PostgreSQL layer."""


class ForkKeepsTheSourceCwdOnPostgres(ForkKeepsTheSourceCwd, PostgresSessionRepository):
    """:class:`ForkKeepsTheSourceCwd` over the PostgreSQL layer."""


class RefusesWhatPiKeepsOnPostgres(RefusesWhatPiKeeps, PostgresSessionRepository):
    """:class:`RefusesWhatPiKeeps` over the PostgreSQL layer."""


def _on_postgres(postgres_layers: LayerFactory, cls: type[Any]) -> Callable[[], Layer]:
    return lambda: _service(cls, postgres_layers, PostgresDatabase)


def test_the_state_machine_fails_a_broken_postgres_layer(postgres_layers: LayerFactory) -> None:
    machine = sessions_state_machine(_on_postgres(postgres_layers, LeafMovesNotLoggedOnPostgres))
    with pytest.raises(SessionsContractViolation):
        run_state_machine_as_test(machine, settings=FIND_IT)


@pytest.mark.parametrize(
    ("cls", "test"),
    [
        (LeafMovesNotLoggedOnPostgres, "test_leaf_moves_are_entries_of_the_log"),
        (WalksPastRetainedTailsOnPostgres, "test_a_compaction_with_a_retained_tail_stops_the_walk"),
        (ForkKeepsTheSourceCwdOnPostgres, "test_fork_can_set_the_cwd"),
        (
            RefusesWhatPiKeepsOnPostgres,
            "test_a_first_kept_entry_off_the_path_is_kept_as_pi_keeps_it",
        ),
        (PostgresSessionRepository, None),
    ],
    ids=lambda value: getattr(value, "__name__", value) if isinstance(value, type) else None,
)
def test_the_contract_catches_a_broken_postgres_layer(
    postgres_layers: LayerFactory, cls: type[Any], test: str | None
) -> None:
    """Each broken layer fails its test; the layer they are broken from passes them all."""
    contract = SessionsContract()
    clock = FixedClock(T0_MS)
    tests = (
        [test]
        if test is not None
        else [
            "test_leaf_moves_are_entries_of_the_log",
            "test_a_compaction_with_a_retained_tail_stops_the_walk",
            "test_fork_can_set_the_cwd",
            "test_a_first_kept_entry_off_the_path_is_kept_as_pi_keeps_it",
        ]
    )
    for name in tests:
        factory = _on_postgres(postgres_layers, cls)
        with build(merge(factory(), Layer.value(CLOCK, clock))) as container:
            sessions = Sessions(container.get(SessionRepository), clock)
            if test is None:
                getattr(contract, name)(sessions)
            else:
                with pytest.raises(AssertionError):
                    getattr(contract, name)(sessions)
