"""Run the suite's longest tests first, split across the pytest-xdist workers.

Under ``-n 2`` the test-runs state machines take minutes each (the PostgreSQL one about ten on
2 shared cores) while most tests take milliseconds. In collection order they start late and one
worker ends minutes after the other, idle. :func:`long_first` moves the known long tests to the
start of each worker's first batch, dealt so that each worker gets about the same share of
their time, and keeps every other test in its collected order.

It relies on how pytest-xdist's default scheduler (``--dist load``, ``xdist/scheduler/load.py``
in pytest-xdist 3.8) hands tests out: every worker first gets one batch of consecutive tests in
collection order, of ``max(2, min(n // workers // 4, maxschedchunk))`` tests for ``n`` tests
(worker 1 the first batch, worker 2 the next), then small batches of what is left as it runs
low. A test placed at the start of a batch starts as soon as its worker does. Under any other
``--dist`` the order is still valid, only the split may fall elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatchcase
from itertools import islice

__all__ = ["LONG_TESTS", "first_batch_size", "long_first"]

# (node id pattern, fnmatch-style; rough seconds under HYPOTHESIS_PROFILE=ci on 2 loaded cores,
# from ``--report-log`` runs of ``-n 2``). Only their relative sizes matter. A pattern that
# matches nothing (a renamed test) is simply ignored; a test that matches several counts once,
# at its first pattern.
_RUNS = "tests/layers/test_test_runs_contract.py::"
LONG_TESTS: tuple[tuple[str, int], ...] = (
    (f"{_RUNS}TestPostgresDataStore::test_state_machine_*", 650),
    (f"{_RUNS}TestSqliteFileDataStore::test_state_machine_*", 350),
    (f"{_RUNS}TestSqliteMemoryDataStore::test_state_machine_*", 300),
    (f"{_RUNS}TestSqliteTwoConnectionsDataStore::test_state_machine_*", 200),
    (f"{_RUNS}TestInMemoryDataStore::test_state_machine_*", 120),
    ("tests/aio/test_contracts.py::TestAioSqliteFileDataStore::test_state_machine_*", 90),
    ("tests/aio/test_contracts.py::test_state_machine[[]test_runs-*", 80),
    ("tests/aio/test_postgres_machines.py::test_state_machine_through_the_facade[[]*", 40),
    ("tests/layers/test_test_runs_broken.py::*postgres*", 30),
    ("tests/layers/test_agents_contract.py::test_contract_fails_a_layer_whose_clear_*", 40),
    ("tests/layers/test_*_contract.py::*::test_state_machine_*", 30),
    ("tests/layers/test_*_contract.py::test_state_machine_*", 15),
    ("tests/aio/test_contracts.py::*state_machine*", 15),
)


def first_batch_size(count: int, workers: int, maxschedchunk: int | None) -> int:
    """The number of tests (>= 2) that ``--dist load`` first sends each of ``workers`` when
    ``count`` tests are collected (``count >= 2 * workers``; below that it deals one by one)."""
    chunk = count // workers // 4
    if maxschedchunk is not None:
        chunk = min(chunk, maxschedchunk)
    return max(chunk, 2)


def _weight(nodeid: str) -> int | None:
    for pattern, seconds in LONG_TESTS:
        if fnmatchcase(nodeid, pattern):
            return seconds
    return None


def long_first(nodeids: Sequence[str], workers: int, maxschedchunk: int | None = None) -> list[int]:
    """A reordering of ``nodeids``: the indices (a permutation of ``range(len(nodeids))``) in
    the order to run them on ``workers`` workers (1 without xdist).

    The tests matching :data:`LONG_TESTS` are dealt longest first (equal ones in collection
    order), each to the worker whose share of long seconds is smallest so far (ties to the
    first), and put at the start of that worker's first batch (:func:`first_batch_size`); the
    other tests fill the batches and follow in their collected order. With fewer than
    ``2 * workers`` tests, or long tests more than a batch holds, the long ones simply go first.
    """
    weights = [_weight(nodeid) for nodeid in nodeids]
    long = sorted(
        (index for index, weight in enumerate(weights) if weight is not None),
        key=lambda index: -(weights[index] or 0),
    )
    rest = [index for index, weight in enumerate(weights) if weight is None]
    if not long:
        return rest
    workers = max(workers, 1)
    chunk = first_batch_size(len(nodeids), workers, maxschedchunk)
    if len(nodeids) < 2 * workers or len(long) > chunk * workers:
        return long + rest
    shares: list[list[int]] = [[] for _ in range(workers)]
    seconds = [0] * workers
    for index in long:
        worker = seconds.index(min(seconds))
        shares[worker].append(index)
        seconds[worker] += weights[index] or 0
    order: list[int] = []
    others = iter(rest)
    for share in shares[:-1]:
        order.extend(share)
        order.extend(islice(others, max(chunk - len(share), 0)))
    order.extend(shares[-1])
    order.extend(others)
    return order
