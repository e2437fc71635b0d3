"""The contract every ``GraphCheckpointStore`` layer must meet, shipped for third parties.

- **The state machine** (:func:`graphs_state_machine`): a hypothesis ``RuleBasedStateMachine``
  driving the layer under test beside the in-memory layer (the model) with the same calls:
  puts of new and repeated checkpoint ids across threads and namespaces with incremental
  values, pending writes (normal and special indexes, repeated), listings with filters,
  ``before`` and limits, deletes of threads and of runs, copies and prunes, agent threads
  archived and deleted under the graph rows, and calls with bad arguments. The whole
  ``Result`` of every call is compared, and after every step each thread's whole listing.
- **The example contract** (:class:`GraphsContract`): pytest tests of the documented
  semantics (values by version, replace versus first-wins writes, the order of writes and
  of listings, the metadata filter, what prunes and deletes keep, copies, threads). A test
  module subclasses it and says how to make the layer::

      class TestSqliteGraphs(GraphsContract):
          @pytest.fixture
          def layer_factory(self, tmp_path):
              return lambda: sqlite(tmp_path / f"{uuid.uuid4().hex}.db")

  The factory is called once per test and per hypothesis example and must return a layer
  providing ``GraphCheckpointStore`` and ``AgentStorage`` on a fresh, empty store; the
  contract puts its own ``FixedClock`` on top.
- **Broken layers** (:func:`graphs_broken_writes_layer`, :func:`graphs_broken_prune_layer`):
  one whose special-channel writes keep the first value instead of replacing it, one whose
  ``keep_latest`` prune keeps the oldest checkpoint. The contract must fail on each; the
  suite's own tests check that.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from typing import Any, ClassVar

import attrs
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from returns.result import Failure, Result, Success

from runstore.layers import (
    AGENT_STORAGE,
    CLOCK,
    GRAPH_CHECKPOINTS,
    Container,
    Layer,
    build,
    in_memory,
    merge,
)
from runstore.layers._graphs_memory import InMemoryGraphCheckpointStore
from runstore.layers._graphs_shared import Place
from runstore.layers._memory_database import InMemoryDatabase
from runstore.services import _graphs_rules as rules
from runstore.services.agents import AgentStorage, InvalidQuery, JsonValue, ThreadStatus
from runstore.services.clock import FixedClock
from runstore.services.errors import Conflict, InvalidInput, NotFound
from runstore.services.graphs import (
    ChannelBlob,
    ChannelValue,
    ChannelVersion,
    GraphCheckpoint,
    GraphCheckpointStore,
    GraphWrite,
    NewGraphCheckpoint,
    PendingWrite,
    PruneStrategy,
)
from runstore.testing._shared import LayerFactory

__all__ = [
    "GraphsContract",
    "GraphsMachine",
    "graph_versions",
    "graphs_broken_prune_layer",
    "graphs_broken_writes_layer",
    "graphs_state_machine",
]

THREADS = ("g1", "g2", "g3")
NAMESPACES = ("", "child:1")
CHANNELS = ("messages", "count", "branch:to:node")
RUNS = ("run-a", "run-b", "run-c")
TASKS = ("task-1", "task-2")
SPECIAL = {"__error__": -1, "__scheduled__": -2, "__interrupt__": -3, "__resume__": -4}
"""LangGraph's ``WRITES_IDX_MAP`` (langgraph-checkpoint 4.3.2): the indexes of special writes."""
PROJECT = "graphs"


def _value(data: bytes, kind: str = "msgpack") -> ChannelValue:
    return ChannelValue(kind, data)


def graph_versions() -> st.SearchStrategy[ChannelVersion]:
    """Channel versions of every kind a runtime gives: ints, finite floats and text (such as
    LangGraph's ``"00000000000000000000000000000002.0.243..."``)."""
    return st.one_of(
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=40),
    )


def _metadata() -> st.SearchStrategy[dict[str, JsonValue]]:
    scalars: st.SearchStrategy[JsonValue] = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-3, 3),
        st.sampled_from([1.0, 2.5]),
        st.sampled_from(["loop", "input", "x"]),
    )
    return st.dictionaries(
        st.sampled_from(["source", "step", "run_id", "user", "score"]),
        st.one_of(
            scalars,
            st.lists(scalars, max_size=2).map(_json),
            st.dictionaries(st.sampled_from("ab"), scalars).map(_json),
        ),
        max_size=4,
    )


def _json(value: JsonValue) -> JsonValue:
    return value


def _blob(channel: str, version: ChannelVersion, data: bytes) -> ChannelBlob:
    return ChannelBlob(channel, version, _value(data))


def _checkpoint(
    checkpoint_id: str,
    *,
    parent: str | None = None,
    metadata: dict[str, JsonValue] | None = None,
    versions: dict[str, ChannelVersion] | None = None,
    blobs: Sequence[ChannelBlob] = (),
    state: bytes = b"state",
) -> NewGraphCheckpoint:
    return NewGraphCheckpoint(
        checkpoint_id=checkpoint_id,
        parent_checkpoint_id=parent,
        format_version=2,
        ts="2026-01-01T00:00:00+00:00",
        state=_value(state),
        metadata={} if metadata is None else metadata,
        channel_versions={} if versions is None else versions,
        blobs=blobs,
    )


class GraphsMachine(RuleBasedStateMachine):
    """Drives the layer under test and the in-memory model with the same calls and compares
    every whole ``Result``. Bind it to a layer with :func:`graphs_state_machine`."""

    layer_factory: ClassVar[LayerFactory]
    model_factory: ClassVar[LayerFactory]

    def __init__(self) -> None:
        super().__init__()
        self.clock = FixedClock()
        self._stack = ExitStack()
        self.live, self.live_agents = self._open(type(self).layer_factory)
        self.model, self.model_agents = self._open(type(self).model_factory)
        self.next_id = 0
        self.version = 0

    def _open(self, factory: LayerFactory) -> tuple[GraphCheckpointStore, AgentStorage]:
        layer = merge(factory(), Layer.value(CLOCK, self.clock))
        container: Container = self._stack.enter_context(build(layer))
        return container.get(GRAPH_CHECKPOINTS), container.get(AGENT_STORAGE)

    def teardown(self) -> None:
        self._stack.close()

    def both(self, call: Callable[[GraphCheckpointStore], Result[Any, Any]]) -> Result[Any, Any]:
        """Make ``call`` on the layer and the model; assert the two Results are equal."""
        live = call(self.live)
        model = call(self.model)
        with contextlib.suppress(InvalidArgument):  # outside hypothesis (a scripted run)
            note(f"-> {model}")
        assert live == model, f"layer returned {live!r}\n   model returned {model!r}"
        return model

    def both_agents(self, call: Callable[[AgentStorage], Result[Any, Any]]) -> Result[Any, Any]:
        live, model = call(self.live_agents), call(self.model_agents)
        assert live == model, f"layer returned {live!r}\n   model returned {model!r}"
        return model

    def _latest(self, thread: str, ns: str) -> GraphCheckpoint | None:
        found = self.model.get(thread, checkpoint_ns=ns)
        return found.unwrap() if isinstance(found, Success) else None

    @initialize()
    def first_checkpoint(self) -> None:
        self.put(THREADS[0], NAMESPACES[0], [CHANNELS[0]], {}, False)

    # -- writes --------------------------------------------------------------------------

    @rule(
        thread=st.sampled_from(THREADS),
        ns=st.sampled_from(NAMESPACES),
        changed=st.lists(st.sampled_from(CHANNELS), max_size=3, unique=True),
        metadata=_metadata(),
        again=st.booleans(),
    )
    def put(
        self,
        thread: str,
        ns: str,
        changed: list[str],
        metadata: dict[str, JsonValue],
        again: bool,
    ) -> None:
        """A put after the namespace's latest: the changed channels get a new version and
        value, the others keep theirs (``again``: the latest's id is put once more)."""
        latest = self._latest(thread, ns)
        versions: dict[str, ChannelVersion] = (
            {} if latest is None else dict(latest.channel_versions)
        )
        blobs = []
        for channel in changed:
            self.version += 1
            versions[channel] = self.version if self.version % 3 else f"{self.version:08}.5"
            blobs.append(_blob(channel, versions[channel], b"v%d" % self.version))
        if again and latest is not None:
            checkpoint_id, parent = latest.checkpoint_id, latest.parent_checkpoint_id
        else:
            self.next_id += 1
            checkpoint_id = f"{self.next_id:06}"
            parent = None if latest is None else latest.checkpoint_id
        checkpoint = _checkpoint(
            checkpoint_id, parent=parent, metadata=metadata, versions=versions, blobs=blobs
        )
        self.both(lambda s: s.put(thread, checkpoint, project_id=PROJECT, checkpoint_ns=ns))

    @rule(
        thread=st.sampled_from(THREADS),
        ns=st.sampled_from(NAMESPACES),
        task=st.sampled_from(TASKS),
        channels=st.lists(st.sampled_from([*CHANNELS, *SPECIAL]), max_size=3),
        data=st.binary(max_size=3),
        which=st.sampled_from(["latest", "oldest", "next", "never"]),
        project=st.sampled_from([None, PROJECT]),
    )
    def put_writes(
        self,
        thread: str,
        ns: str,
        task: str,
        channels: list[str],
        data: bytes,
        which: str,
        project: str | None,
    ) -> None:
        """Writes to a stored checkpoint, to the id the next put takes (sent before it, as
        LangGraph does), or to one never put."""
        listed = self.model.list(thread, checkpoint_ns=ns).unwrap()
        if which == "next" or not listed:
            checkpoint_id = f"{self.next_id + 1:06}"
        elif which == "never":
            checkpoint_id = "none"
        else:
            checkpoint_id = (listed[-1] if which == "oldest" else listed[0]).checkpoint_id
        writes = [
            GraphWrite(SPECIAL.get(channel, index), channel, _value(data + b"%d" % index))
            for index, channel in enumerate(channels)
        ]
        self.both(
            lambda s: s.put_writes(
                thread,
                writes,
                checkpoint_id=checkpoint_id,
                task_id=task,
                task_path=f"~{task}",
                checkpoint_ns=ns,
                project_id=project,
            )
        )

    @rule(thread=st.sampled_from(THREADS))
    def delete_thread(self, thread: str) -> None:
        self.both(lambda s: s.delete_thread(thread))

    @rule(runs=st.lists(st.sampled_from(RUNS), max_size=2))
    def delete_for_runs(self, runs: list[str]) -> None:
        self.both(lambda s: s.delete_for_runs(runs))

    @rule(source=st.sampled_from(THREADS), destination=st.sampled_from((*THREADS, "g-copy")))
    def copy_thread(self, source: str, destination: str) -> None:
        self.both(lambda s: s.copy_thread(source, destination))

    @rule(
        threads=st.lists(st.sampled_from((*THREADS, "missing")), max_size=3),
        strategy=st.sampled_from([*PruneStrategy, "keep_latest", "other"]),
    )
    def prune(self, threads: list[str], strategy: str) -> None:
        self.both(lambda s: s.prune(threads, strategy=strategy))

    @rule(thread=st.sampled_from(THREADS))
    def prune_thread(self, thread: str) -> None:
        self.both(lambda s: s.prune([thread]))

    @rule(thread=st.sampled_from(THREADS), archived=st.booleans())
    def archive_thread(self, thread: str, archived: bool) -> None:
        status = ThreadStatus.ARCHIVED if archived else ThreadStatus.OPEN
        self.both_agents(lambda a: a.threads.update(thread, status=status))

    @rule(thread=st.sampled_from(THREADS))
    def delete_agent_thread(self, thread: str) -> None:
        self.both_agents(lambda a: a.threads.delete(thread))

    @rule(
        thread=st.sampled_from(THREADS),
        bad=st.sampled_from(["", "\ud800", 7, None, "x" * 300]),
        where=st.sampled_from(["thread", "checkpoint", "ns", "version", "value"]),
    )
    def put_bad(self, thread: str, bad: object, where: str) -> None:
        checkpoint: Any = _checkpoint(
            "bad" if where != "checkpoint" else bad,  # type: ignore[arg-type]
            versions={"count": bad if where == "version" else 1},  # type: ignore[dict-item]
            blobs=[ChannelBlob("count", 1, bad if where == "value" else _value(b""))],  # type: ignore[arg-type]
        )
        ns: Any = bad if where == "ns" else ""
        target: Any = bad if where == "thread" else thread
        self.both(lambda s: s.put(target, checkpoint, project_id=PROJECT, checkpoint_ns=ns))

    # -- reads ---------------------------------------------------------------------------

    @rule(
        thread=st.sampled_from((*THREADS, None)),
        ns=st.sampled_from((*NAMESPACES, None)),
        metadata=st.none() | _metadata(),
        before=st.none() | st.integers(0, 12).map(lambda n: f"{n:06}"),
        limit=st.none() | st.integers(-1, 4),
    )
    def list_checkpoints(
        self,
        thread: str | None,
        ns: str | None,
        metadata: dict[str, JsonValue] | None,
        before: str | None,
        limit: int | None,
    ) -> None:
        self.both(
            lambda s: s.list(thread, checkpoint_ns=ns, filter=metadata, before=before, limit=limit)
        )

    @rule(
        thread=st.sampled_from(THREADS),
        ns=st.sampled_from(NAMESPACES),
        checkpoint=st.none() | st.integers(0, 12).map(lambda n: f"{n:06}"),
    )
    def get(self, thread: str, ns: str, checkpoint: str | None) -> None:
        self.both(lambda s: s.get(thread, checkpoint_ns=ns, checkpoint_id=checkpoint))

    @invariant()
    def same_state(self) -> None:
        for thread in (*THREADS, "g-copy"):
            listed = self.both(lambda s, t=thread: s.list(t))  # type: ignore[misc]
            for checkpoint in listed.unwrap():
                assert checkpoint.thread_id == thread
                assert set(checkpoint.channel_values) <= set(checkpoint.channel_versions)


def graphs_state_machine(
    layer_factory: LayerFactory, model_factory: LayerFactory = in_memory
) -> type[GraphsMachine]:
    """Return a :class:`GraphsMachine` bound to ``layer_factory`` (the layer under test) and
    ``model_factory`` (the reference: the in-memory layer by default).

    Run it with ``hypothesis.stateful.run_state_machine_as_test(machine, settings=...)``.
    """

    class BoundGraphsMachine(GraphsMachine):
        pass

    BoundGraphsMachine.layer_factory = staticmethod(layer_factory)
    BoundGraphsMachine.model_factory = staticmethod(model_factory)
    return BoundGraphsMachine


# -- deliberately broken layers ----------------------------------------------------------------


class _FirstWinsEverywhere(InMemoryGraphCheckpointStore):
    """Keeps the first write of every key, special channels included (``INSERT OR IGNORE``
    for all): an error or interrupt written again keeps its stale value."""

    def _store_writes(self, at: Place, writes: Sequence[PendingWrite], *, replace: bool) -> None:
        super()._store_writes(at, writes, replace=False)


class _KeepsOldest(InMemoryGraphCheckpointStore):
    """Prunes ``keep_latest`` by keeping the smallest id of each namespace."""

    def _thread_heads(self, thread_keys: Sequence[int]) -> list[rules.Head]:
        heads = super()._thread_heads(thread_keys)
        return [attrs.evolve(h, checkpoint_id=_reversed(h.checkpoint_id)) for h in heads]


def _reversed(text: str) -> str:
    """Text whose code-point order is the reverse of ``text``'s (for ids of digits)."""
    return "".join(chr(0x10FFFF - ord(c)) for c in text)


def _broken(store: type[InMemoryGraphCheckpointStore]) -> Layer:
    def factory(c: Container) -> GraphCheckpointStore:
        return store(c.get(InMemoryDatabase), c.get(CLOCK), c.get(AGENT_STORAGE))

    return merge(
        in_memory(),
        Layer.service(
            GRAPH_CHECKPOINTS, factory, requires=(InMemoryDatabase, CLOCK, AGENT_STORAGE)
        ),
    )


def graphs_broken_writes_layer() -> Layer:
    """The in-memory layer with one bug: a special channel's write (negative index) keeps the
    first value stored under its key instead of replacing it. The contract must fail on it."""
    return _broken(_FirstWinsEverywhere)


def graphs_broken_prune_layer() -> Layer:
    """The in-memory layer with one bug: ``prune(keep_latest)`` keeps the oldest checkpoint of
    each namespace. The contract must fail on it."""
    return _broken(_KeepsOldest)


# -- the example contract ----------------------------------------------------------------------

_FIXTURES = [HealthCheck.function_scoped_fixture, HealthCheck.differing_executors]
"""The health checks a property over the ``layer_factory`` fixture suppresses."""


def _ids(found: Result[tuple[GraphCheckpoint, ...], Any]) -> list[str]:
    return [c.checkpoint_id for c in found.unwrap()]


class GraphsContract:
    """Example tests of the documented graph checkpoint semantics; subclass and provide
    ``layer_factory`` (a fixture returning a factory of fresh layers) or override
    :meth:`make_layer`."""

    def make_layer(self) -> Layer:
        """Return a fresh layer providing ``GraphCheckpointStore`` and ``AgentStorage``."""
        raise NotImplementedError("override make_layer or the layer_factory fixture")

    @pytest.fixture
    def layer_factory(self) -> LayerFactory:
        """The factory of fresh layers under test."""
        return self.make_layer

    @pytest.fixture
    def clock(self) -> FixedClock:
        """The clock the contract controls."""
        return FixedClock()

    @pytest.fixture
    def container(self, layer_factory: LayerFactory, clock: FixedClock) -> Iterator[Container]:
        """A built container of the layer under test with the contract's clock."""
        with build(merge(layer_factory(), Layer.value(CLOCK, clock))) as built:
            yield built

    @pytest.fixture
    def graphs(self, container: Container) -> GraphCheckpointStore:
        """The graph checkpoint store under test."""
        store: GraphCheckpointStore = container.get(GRAPH_CHECKPOINTS)
        return store

    @pytest.fixture
    def agents(self, container: Container) -> AgentStorage:
        """The agent storage of the same container."""
        storage: AgentStorage = container.get(AGENT_STORAGE)
        return storage

    def count_stored_values(self, graphs: GraphCheckpointStore) -> int:
        """How many channel values ``graphs`` holds, in every thread (rows), for the tests
        that values no checkpoint names are deleted (they are invisible through the
        Protocol). runstore's layers answer ``stored_values()``; override this for a layer
        that does not (e.g. count its table)."""
        count = getattr(graphs, "stored_values", None)
        if count is None:
            raise NotImplementedError(
                f"{type(graphs).__name__} has no stored_values(): override count_stored_values"
            )
        found: int = count().unwrap()
        return found

    def _put(
        self,
        graphs: GraphCheckpointStore,
        thread: str,
        checkpoint: NewGraphCheckpoint,
        ns: str = "",
    ) -> None:
        graphs.put(thread, checkpoint, project_id=PROJECT, checkpoint_ns=ns).unwrap()

    # -- values and versions -------------------------------------------------------------

    @settings(max_examples=10, deadline=None, suppress_health_check=_FIXTURES)
    @given(
        version=graph_versions(),
        data=st.binary(max_size=64),
        kind=st.sampled_from(["msgpack", "empty", "bytes"]),
    )
    def test_a_value_comes_back_at_its_version_with_its_type(
        self, layer_factory: LayerFactory, version: ChannelVersion, data: bytes, kind: str
    ) -> None:
        with build(layer_factory()) as c:
            graphs = c.get(GRAPH_CHECKPOINTS)
            blob = ChannelBlob("ch", version, _value(data, kind))
            graphs.put(
                "t", _checkpoint("1", versions={"ch": version}, blobs=[blob]), project_id=PROJECT
            ).unwrap()
            got = graphs.get("t").unwrap()
            assert got is not None
            assert got.channel_values == {"ch": _value(data, kind)}
            (stored,) = got.channel_versions.values()
            assert type(stored) is type(version)
            assert repr(stored) == repr(version)

    def test_an_unchanged_channel_keeps_the_value_of_its_version(
        self, graphs: GraphCheckpointStore
    ) -> None:
        self._put(
            graphs,
            "t",
            _checkpoint(
                "1", versions={"a": 1, "b": 1}, blobs=[_blob("a", 1, b"a1"), _blob("b", 1, b"b1")]
            ),
        )
        self._put(
            graphs,
            "t",
            _checkpoint("2", parent="1", versions={"a": 2, "b": 1}, blobs=[_blob("a", 2, b"a2")]),
        )
        self._put(graphs, "t", _checkpoint("3", parent="2", versions={"a": 2}))
        first, second, third = (graphs.get("t", checkpoint_id=i).unwrap() for i in "123")
        assert first is not None
        assert second is not None
        assert third is not None
        assert first.channel_values == {"a": _value(b"a1"), "b": _value(b"b1")}
        assert second.channel_values == {"a": _value(b"a2"), "b": _value(b"b1")}
        assert third.channel_values == {"a": _value(b"a2")}
        assert third.parent_checkpoint_id == "2"

    def test_versions_of_other_types_are_other_versions(self, graphs: GraphCheckpointStore) -> None:
        self._put(
            graphs, "t", _checkpoint("1", versions={"a": 1}, blobs=[_blob("a", "1", b"text one")])
        )
        got = graphs.get("t").unwrap()
        assert got is not None
        assert got.channel_versions == {"a": 1}
        assert got.channel_values == {}

    def test_putting_an_id_again_replaces_it_and_keeps_its_writes(
        self, graphs: GraphCheckpointStore, clock: FixedClock
    ) -> None:
        self._put(graphs, "t", _checkpoint("1", metadata={"step": 1}, versions={"a": 1}))
        graphs.put_writes(
            "t", [GraphWrite(0, "a", _value(b"w"))], checkpoint_id="1", task_id="k"
        ).unwrap()
        first = graphs.get("t").unwrap()
        clock.advance(5_000)
        self._put(
            graphs, "t", _checkpoint("1", metadata={"step": 2}, versions={"b": 7}, state=b"new")
        )
        again = graphs.get("t").unwrap()
        assert first is not None
        assert again is not None
        assert again.metadata == {"step": 2}
        assert again.channel_versions == {"b": 7}
        assert again.state == _value(b"new")
        assert again.pending_writes == first.pending_writes
        assert again.created_at_ms == first.created_at_ms
        assert _ids(graphs.list("t")) == ["1"]

    # -- pending writes ------------------------------------------------------------------

    def test_normal_writes_keep_the_first_and_special_ones_the_last(
        self, graphs: GraphCheckpointStore
    ) -> None:
        self._put(graphs, "t", _checkpoint("1"))
        for round_ in (b"1", b"2"):
            writes = [
                GraphWrite(0, "a", _value(b"a" + round_)),
                GraphWrite(-1, "__error__", _value(b"e" + round_)),
            ]
            graphs.put_writes("t", writes, checkpoint_id="1", task_id="k").unwrap()
        got = graphs.get("t").unwrap()
        assert got is not None
        assert [(w.idx, w.value.value) for w in got.pending_writes] == [(-1, b"e2"), (0, b"a1")]

    def test_writes_come_back_in_task_path_task_and_index_order(
        self, graphs: GraphCheckpointStore
    ) -> None:
        self._put(graphs, "t", _checkpoint("1"))
        for path, task in (("~b", "t1"), ("~a", "t2"), ("~a", "t0")):
            writes = [GraphWrite(i, f"c{i}", _value(b"")) for i in (1, 0)]
            graphs.put_writes("t", writes, checkpoint_id="1", task_id=task, task_path=path).unwrap()
        got = graphs.get("t").unwrap()
        assert got is not None
        order = [(w.task_path, w.task_id, w.idx) for w in got.pending_writes]
        assert order == sorted(order)
        assert len(order) == 6

    def test_writes_sent_before_their_checkpoint_are_its_writes_once_it_is_put(
        self, graphs: GraphCheckpointStore
    ) -> None:
        self._put(graphs, "t", _checkpoint("1"))
        write = [GraphWrite(0, "a", _value(b"w"))]
        early = graphs.put_writes("t", write, checkpoint_id="2", task_id="k", checkpoint_ns="c")
        assert early == Success(None)
        assert graphs.get("t", checkpoint_ns="c") == Success(None)
        assert graphs.get("t").unwrap().pending_writes == ()  # type: ignore[union-attr]
        self._put(graphs, "t", _checkpoint("2"), "c")
        got = graphs.get("t", checkpoint_ns="c").unwrap()
        assert got is not None
        assert [(w.task_id, w.value.value) for w in got.pending_writes] == [("k", b"w")]

    def test_writes_to_a_missing_thread_need_a_project(self, graphs: GraphCheckpointStore) -> None:
        write = [GraphWrite(0, "a", _value(b"w"))]
        assert graphs.put_writes("u", write, checkpoint_id="1", task_id="k") == Failure(
            NotFound("thread", "u")
        )
        assert graphs.put_writes("u", write, checkpoint_id="1", task_id="k", project_id="q") == (
            Success(None)
        )
        assert graphs.put_writes("u", write, checkpoint_id="1", task_id="k", project_id="p") == (
            Failure(
                Conflict(
                    "thread", "u", "thread belongs to another project", expected="p", actual="q"
                )
            )
        )
        graphs.put("u", _checkpoint("1"), project_id="q").unwrap()
        got = graphs.get("u").unwrap()
        assert got is not None
        assert len(got.pending_writes) == 1

    def test_writes_of_a_checkpoint_never_put_go_with_the_thread_only(
        self, graphs: GraphCheckpointStore
    ) -> None:
        self._put(graphs, "t", _checkpoint("1"))
        self._put(graphs, "t", _checkpoint("2"))
        write = [GraphWrite(0, "a", _value(b"w"))]
        graphs.put_writes("t", write, checkpoint_id="9", task_id="k").unwrap()
        graphs.put_writes("t", write, checkpoint_id="1", task_id="k").unwrap()
        assert graphs.prune(["t"]) == Success(1)
        self._put(graphs, "t", _checkpoint("1"))  # the pruned one's writes went with it
        assert graphs.get("t", checkpoint_id="1").unwrap().pending_writes == ()  # type: ignore[union-attr]
        self._put(graphs, "t", _checkpoint("9"))  # the early ones stayed
        assert len(graphs.get("t").unwrap().pending_writes) == 1  # type: ignore[union-attr]
        graphs.put_writes("t", write, checkpoint_id="10", task_id="k").unwrap()
        assert graphs.delete_thread("t") == Success(3)
        self._put(graphs, "t", _checkpoint("10"))
        assert graphs.get("t").unwrap().pending_writes == ()  # type: ignore[union-attr]

    # -- collecting values ---------------------------------------------------------------

    def test_values_no_checkpoint_names_are_deleted(self, graphs: GraphCheckpointStore) -> None:
        """Counted in rows: each delete leaves exactly the values a kept checkpoint names."""
        runs: dict[str, dict[str, JsonValue]] = {"1": {}, "2": {"run_id": "r2"}, "3": {}}
        for checkpoint_id, metadata in runs.items():
            a = int(checkpoint_id)
            blobs = [_blob("a", a, b"a%d" % a)] + ([_blob("b", 1, b"b1")] if a == 1 else [])
            checkpoint = _checkpoint(
                checkpoint_id, metadata=metadata, versions={"a": a, "b": 1}, blobs=blobs
            )
            self._put(graphs, "t", checkpoint)
        assert self.count_stored_values(graphs) == 4
        assert graphs.delete_for_runs(["r2"]) == Success(1)
        assert self.count_stored_values(graphs) == 3
        assert graphs.prune(["t"]) == Success(1)
        assert self.count_stored_values(graphs) == 2
        got = graphs.get("t").unwrap()
        assert got is not None
        assert got.channel_values == {"a": _value(b"a3"), "b": _value(b"b1")}
        self._put(graphs, "u", _checkpoint("3", versions={"c": 1}, blobs=[_blob("c", 1, b"c")]))
        assert self.count_stored_values(graphs) == 3
        assert graphs.copy_thread("t", "u") == Success(1)  # replaces u's 3, which named c
        assert self.count_stored_values(graphs) == 4
        assert graphs.delete_thread("t") == Success(1)
        assert self.count_stored_values(graphs) == 2
        assert graphs.prune(["u"], strategy="delete") == Success(1)
        assert self.count_stored_values(graphs) == 0

    # -- listing -------------------------------------------------------------------------

    def test_listing_is_newest_first_with_before_and_limit(
        self, graphs: GraphCheckpointStore
    ) -> None:
        for cid in ("03", "01", "02"):
            self._put(graphs, "t", _checkpoint(cid))
        self._put(graphs, "t", _checkpoint("02"), ns="child")
        assert _ids(graphs.list("t", checkpoint_ns="")) == ["03", "02", "01"]
        assert [(c.checkpoint_id, c.checkpoint_ns) for c in graphs.list("t").unwrap()] == [
            ("03", ""),
            ("02", ""),
            ("02", "child"),
            ("01", ""),
        ]
        assert _ids(graphs.list("t", checkpoint_ns="", before="03", limit=1)) == ["02"]
        assert _ids(graphs.list("t", limit=0)) == []
        assert graphs.list("t", limit=-1) == Failure(
            InvalidQuery("limit", "must be None or an int >= 0")
        )
        latest = graphs.get("t").unwrap()
        assert latest is not None
        assert latest.checkpoint_id == "03"

    def test_the_filter_compares_top_level_json_values(self, graphs: GraphCheckpointStore) -> None:
        self._put(graphs, "t", _checkpoint("1", metadata={"step": 1, "tags": {"a": 1, "b": [1]}}))
        self._put(graphs, "t", _checkpoint("2", metadata={"step": True, "user": None}))
        self._put(graphs, "u", _checkpoint("3", metadata={"step": 1.0, "user": "x"}))
        assert _ids(graphs.list(None, filter={"step": 1})) == ["3", "1"]
        assert _ids(graphs.list(None, filter={"step": True})) == ["2"]
        assert _ids(graphs.list(None, filter={"tags": {"b": [1], "a": 1.0}})) == ["1"]
        assert _ids(graphs.list(None, filter={"tags": {"a": 1}})) == []
        assert _ids(graphs.list(None, filter={"user": None})) == ["2", "1"]
        assert _ids(graphs.list("t", filter={"step": 1, "user": None}, limit=1)) == ["1"]

    def test_an_unknown_thread_has_nothing(self, graphs: GraphCheckpointStore) -> None:
        assert graphs.get("nobody") == Success(None)
        assert graphs.list("nobody") == Success(())
        assert graphs.delete_thread("nobody") == Success(0)
        assert graphs.prune(["nobody"]) == Success(0)
        assert graphs.copy_thread("nobody", "t") == Success(0)

    # -- deletes, copies, prunes ---------------------------------------------------------

    def _three_with_shared_values(self, graphs: GraphCheckpointStore, thread: str = "t") -> None:
        self._put(
            graphs,
            thread,
            _checkpoint(
                "1",
                metadata={"run_id": "r1"},
                versions={"a": 1, "b": 1},
                blobs=[_blob("a", 1, b"a1"), _blob("b", 1, b"b1")],
            ),
        )
        self._put(
            graphs,
            thread,
            _checkpoint(
                "2",
                metadata={"run_id": "r1"},
                versions={"a": 2, "b": 1},
                blobs=[_blob("a", 2, b"a2")],
            ),
        )
        self._put(
            graphs,
            thread,
            _checkpoint(
                "3",
                metadata={"run_id": "r2"},
                versions={"a": 3, "b": 1},
                blobs=[_blob("a", 3, b"a3")],
            ),
        )
        self._put(graphs, thread, _checkpoint("1", metadata={"run_id": "r1"}), ns="child")
        graphs.put_writes(
            thread, [GraphWrite(0, "a", _value(b"w"))], checkpoint_id="3", task_id="k"
        ).unwrap()

    def test_keep_latest_keeps_the_newest_of_each_namespace_with_its_values_and_writes(
        self, graphs: GraphCheckpointStore
    ) -> None:
        self._three_with_shared_values(graphs)
        self._three_with_shared_values(graphs, "other")
        assert graphs.prune(["t"]) == Success(2)
        latest = graphs.get("t").unwrap()
        assert latest is not None
        assert latest.channel_values == {"a": _value(b"a3"), "b": _value(b"b1")}
        assert len(latest.pending_writes) == 1
        assert _ids(graphs.list("t")) == ["3", "1"]
        assert len(graphs.list("other").unwrap()) == 4
        assert graphs.prune(["t", "other"], strategy="delete") == Success(6)
        assert graphs.list(None) == Success(())

    def test_deleting_runs_keeps_the_values_others_name(self, graphs: GraphCheckpointStore) -> None:
        self._three_with_shared_values(graphs)
        assert graphs.delete_for_runs(["r1", "missing"]) == Success(3)
        left = graphs.list("t").unwrap()
        assert [c.checkpoint_id for c in left] == ["3"]
        assert left[0].channel_values == {"a": _value(b"a3"), "b": _value(b"b1")}
        assert graphs.delete_for_runs([]) == Success(0)
        assert graphs.delete_for_runs("r2") == Failure(
            InvalidInput("run_ids", "must be a sequence of run ids, not one")
        )

    def test_deleting_a_thread_keeps_the_agent_thread(
        self, graphs: GraphCheckpointStore, agents: AgentStorage
    ) -> None:
        self._three_with_shared_values(graphs)
        assert graphs.delete_thread("t") == Success(4)
        assert graphs.list("t") == Success(())
        assert agents.threads.get("t").unwrap().project_id == PROJECT
        self._put(graphs, "t", _checkpoint("9", versions={"a": 1}))
        got = graphs.get("t").unwrap()
        assert got is not None
        assert got.channel_values == {}  # the old values went too

    def test_a_copy_is_whole_and_repeats_to_the_same(
        self, graphs: GraphCheckpointStore, agents: AgentStorage
    ) -> None:
        self._three_with_shared_values(graphs)
        source = graphs.list("t").unwrap()
        assert graphs.copy_thread("t", "u") == Success(4)
        assert graphs.copy_thread("t", "u") == Success(4)
        copied = graphs.list("u").unwrap()
        assert [attrs.evolve(c, thread_id="t") for c in copied] == list(source)
        assert graphs.list("t") == Success(source)
        assert agents.threads.get("u").unwrap().project_id == PROJECT
        assert graphs.copy_thread("t", "t") == Failure(
            InvalidInput("target_thread_id", "is the source thread")
        )

    # -- threads -------------------------------------------------------------------------

    def test_a_thread_of_another_project_or_archived_is_refused(
        self, graphs: GraphCheckpointStore, agents: AgentStorage
    ) -> None:
        agents.threads.create("mine", project_id="elsewhere").unwrap()
        refused = graphs.put("mine", _checkpoint("1"), project_id=PROJECT)
        assert refused == Failure(
            Conflict(
                "thread",
                "mine",
                "thread belongs to another project",
                expected=PROJECT,
                actual="elsewhere",
            )
        )
        self._put(graphs, "t", _checkpoint("1"))
        agents.threads.update("t", status=ThreadStatus.ARCHIVED).unwrap()
        archived = Failure(Conflict("thread", "t", "thread is archived"))
        assert graphs.put("t", _checkpoint("2"), project_id=PROJECT) == archived
        write = [GraphWrite(0, "a", _value(b""))]
        assert graphs.put_writes("t", write, checkpoint_id="1", task_id="k") == archived
        assert graphs.copy_thread("t", "mine") == Failure(
            Conflict(
                "thread",
                "mine",
                "thread belongs to another project",
                expected=PROJECT,
                actual="elsewhere",
            )
        )
        assert _ids(graphs.list("t")) == ["1"]

    def test_deleting_the_agent_thread_deletes_its_graph_rows(
        self, graphs: GraphCheckpointStore, agents: AgentStorage
    ) -> None:
        self._three_with_shared_values(graphs)
        agents.threads.delete("t").unwrap()
        assert graphs.list(None) == Success(())
        assert graphs.delete_for_runs(["r1", "r2"]) == Success(0)
        self._put(graphs, "t", _checkpoint("5"))
        assert _ids(graphs.list(None)) == ["5"]

    @pytest.mark.parametrize(
        ("call", "field"),
        [
            (lambda g: g.put("", _checkpoint("1"), project_id=PROJECT), "thread_id"),
            (lambda g: g.put("t", _checkpoint(""), project_id=PROJECT), "checkpoint.checkpoint_id"),
            (
                lambda g: g.put("t", _checkpoint("1", versions={"a": True}), project_id=PROJECT),
                'checkpoint.channel_versions["a"]',
            ),
            (
                lambda g: g.put(
                    "t", _checkpoint("1", versions={"a": float("nan")}), project_id=PROJECT
                ),
                'checkpoint.channel_versions["a"]',
            ),
            (
                lambda g: g.put(
                    "t",
                    _checkpoint("1", metadata={"a": (1,)}),  # type: ignore[dict-item]
                    project_id=PROJECT,
                ),
                "checkpoint.metadata",
            ),
            (
                lambda g: g.put(
                    "t",
                    _checkpoint("1", blobs=[_blob("a", 1, b""), _blob("a", 1, b"")]),
                    project_id=PROJECT,
                ),
                "checkpoint.blobs[1]",
            ),
            (
                lambda g: g.put("t", _checkpoint("1"), project_id=PROJECT, checkpoint_ns="\x00"),
                "checkpoint_ns",
            ),
            (
                lambda g: g.put_writes(
                    "t", [GraphWrite(True, "a", _value(b""))], checkpoint_id="1", task_id="k"
                ),
                "writes[0].idx",
            ),
            (lambda g: g.list("t", filter=[("a", 1)]), "filter"),
            (lambda g: g.prune(["t"], strategy="all"), "strategy"),
        ],
    )
    def test_bad_arguments_are_refused_naming_them(
        self,
        graphs: GraphCheckpointStore,
        call: Callable[[GraphCheckpointStore], Result[Any, Any]],
        field: str,
    ) -> None:
        refused = call(graphs)
        assert isinstance(refused, Failure)
        error = refused.failure()
        assert isinstance(error, InvalidInput)
        assert error.field.startswith(field), error
        assert graphs.list(None) == Success(())
