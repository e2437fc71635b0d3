"""The longest tests go first, split so that each xdist worker starts with its share."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from xdist.scheduler import LoadScheduling  # type: ignore[import-untyped]

from schedule import first_batch_size, long_first

RUNS = "tests/layers/test_test_runs_contract.py::"
POSTGRES = f"{RUNS}TestPostgresDataStore::test_state_machine_agrees_with_the_model"
FILE = f"{RUNS}TestSqliteFileDataStore::test_state_machine_agrees_with_the_model"
MEMORY = f"{RUNS}TestSqliteMemoryDataStore::test_state_machine_agrees_with_the_model"
TWO = f"{RUNS}TestSqliteTwoConnectionsDataStore::test_state_machine_agrees_with_the_model"
SESSIONS = "tests/layers/test_sessions_contract.py::TestSqliteFileSessions::test_state_machine_x"
SHORT = [f"tests/test_short.py::test_{n}" for n in range(400)]
# Collected late, as they are: the long ones sit among and after the short ones.
COLLECTED = [*SHORT[:200], SESSIONS, TWO, *SHORT[200:], MEMORY, FILE, POSTGRES]


class _Node:
    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.sent: list[int] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        pass


class _Config:
    def __init__(self, workers: int, maxschedchunk: int | None) -> None:
        self.values: dict[str, Any] = {"tx": [f"{workers}*popen"], "maxschedchunk": maxschedchunk}

    def getoption(self, name: str) -> Any:
        return self.values[name]

    getvalue = getoption


def first_batches(
    collection: list[str], workers: int, maxschedchunk: int | None
) -> list[list[str]]:
    """What the installed xdist's ``--dist load`` first sends each worker of ``collection``."""
    scheduler = LoadScheduling(_Config(workers, maxschedchunk))
    nodes = [_Node(f"gw{n}") for n in range(workers)]
    for node in nodes:
        scheduler.add_node(node)
        scheduler.add_node_collection(node, collection)
    scheduler.schedule()
    return [[collection[index] for index in node.sent] for node in nodes]


def ordered(nodeids: list[str], workers: int, maxschedchunk: int | None = None) -> list[str]:
    return [nodeids[index] for index in long_first(nodeids, workers, maxschedchunk)]


@pytest.mark.parametrize("maxschedchunk", [None, 60])
def test_each_worker_starts_its_first_batch_with_its_share_of_the_long_tests(
    maxschedchunk: int | None,
) -> None:
    batches = first_batches(ordered(COLLECTED, 2, maxschedchunk), 2, maxschedchunk)
    assert len(batches[0]) == first_batch_size(len(COLLECTED), 2, maxschedchunk)
    # Longest first, each to the worker with fewer long seconds so far (ties to the first):
    # 650 + 200 | 350 + 300 + 30
    assert batches[0][:2] == [POSTGRES, TWO]
    assert batches[1][:3] == [FILE, MEMORY, SESSIONS]
    assert not {POSTGRES, FILE, MEMORY, TWO, SESSIONS} & set(batches[0][2:] + batches[1][3:])


def test_the_others_keep_their_collected_order_and_nothing_is_lost() -> None:
    order = ordered(COLLECTED, 2)
    assert sorted(order) == sorted(COLLECTED)
    assert [nodeid for nodeid in order if nodeid in SHORT] == SHORT


def test_one_worker_runs_the_long_tests_first_longest_first() -> None:
    assert ordered(COLLECTED, 1)[:5] == [POSTGRES, FILE, MEMORY, TWO, SESSIONS]
    assert ordered(COLLECTED, 1)[5:] == SHORT


def test_a_collection_without_the_listed_tests_keeps_its_order() -> None:
    assert ordered(SHORT, 2) == SHORT
    assert ordered([], 2) == []


def test_more_long_tests_than_the_batches_hold_just_go_first() -> None:
    assert ordered([SHORT[0], POSTGRES, FILE], 2) == [POSTGRES, FILE, SHORT[0]]
