"""Graph checkpoints on a real PostgreSQL server: the shipped contract and its state machine,
and writers of one thread in several processes."""

from __future__ import annotations

import multiprocessing

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from runstore.layers import GRAPH_CHECKPOINTS, build, postgres
from runstore.services.graphs import ChannelBlob, ChannelValue, NewGraphCheckpoint
from runstore.testing import GraphsContract, LayerFactory, graphs_state_machine

WORKERS = 4
PUTS = 30


class TestPostgresGraphs(GraphsContract):
    """Each test on a fresh database of the session's PostgreSQL server."""

    @pytest.fixture
    def layer_factory(self, postgres_layers: LayerFactory) -> LayerFactory:
        return postgres_layers


def test_state_machine_postgres(postgres_layers: LayerFactory) -> None:
    """The machine's steps give the in-memory model's Results on PostgreSQL."""
    run_state_machine_as_test(
        graphs_state_machine(postgres_layers), settings=settings(max_examples=10, deadline=None)
    )


def _writer(dsn: str, worker: int) -> None:
    """Put checkpoints into the worker's own namespace of a shared thread, every second one
    keeping the version of the one before (so it writes no value), pruning the thread after
    each put."""
    with build(postgres(dsn, access="write")) as c:
        graphs = c.get(GRAPH_CHECKPOINTS)
        for n in range(PUTS):
            version = f"{worker:02}.{n // 2:04}"
            blobs = [ChannelBlob("count", version, ChannelValue("msgpack", b"%d" % n))]
            checkpoint = NewGraphCheckpoint(
                checkpoint_id=f"{n:04}.{worker:02}",
                parent_checkpoint_id=None,
                format_version=2,
                ts="",
                state=ChannelValue("msgpack", b""),
                metadata={"worker": worker},
                channel_versions={"count": version},
                blobs=blobs if n % 2 == 0 else (),
            )
            graphs.put("shared", checkpoint, project_id="p", checkpoint_ns=f"w{worker}").unwrap()
            graphs.prune(["shared"]).unwrap()


def test_writers_of_one_thread_in_several_processes(postgres_dsn: str) -> None:
    """Processes create, put and prune one thread at once: no put fails on the thread a
    concurrent first put created, each namespace keeps its newest checkpoint, and every kept
    checkpoint has its value (in any serial order of the units, it would)."""
    with build(postgres(postgres_dsn)):
        pass  # migrated; no connection of this process is open while the workers fork
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_writer, args=(postgres_dsn, w)) for w in range(WORKERS)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(120)
    assert [p.exitcode for p in workers] == [0] * WORKERS
    with build(postgres(postgres_dsn, access="read")) as c:
        kept = c.get(GRAPH_CHECKPOINTS).list("shared").unwrap()
    assert sorted(c.checkpoint_ns for c in kept) == [f"w{w}" for w in range(WORKERS)]
    assert {c.checkpoint_id for c in kept} == {f"{PUTS - 1:04}.{w:02}" for w in range(WORKERS)}
    for checkpoint in kept:
        assert set(checkpoint.channel_values) == {"count"}, checkpoint
