"""A real LangGraph graph (langgraph 1.2.24) on ``RunstoreSaver``: what a user's graph does
with it matches what it does with LangGraph's ``InMemorySaver``, in every durability mode,
through ``invoke`` and ``ainvoke``, on SQLite and on PostgreSQL.

The graph fans out to two nodes, one of which interrupts; resuming it finishes the run. In
every durability mode LangGraph sends some pending writes before the put of their
checkpoint (checked here with the reference saver), and the two branches' writes at once:
the store takes writes for a checkpoint not put yet, and on ``aio.postgres`` (every call a
greenlet on the loop's thread) nothing may block the loop's thread.
"""

from __future__ import annotations

import asyncio
import operator
import re
import sys
import time
import types
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict

import pytest
from _watched import run_watched  # beside this file
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, ChannelVersions, Checkpoint
from langgraph.checkpoint.base import CheckpointMetadata as Metadata
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from runstore import aio
from runstore.adapters.langgraph import RunstoreSaver

Durability = Literal["sync", "async", "exit"]
DURABILITIES: tuple[Durability, ...] = ("sync", "async", "exit")


class State(TypedDict):
    total: Annotated[int, operator.add]
    trail: Annotated[list[str], operator.add]


def start(state: State) -> dict[str, Any]:
    return {"total": 1, "trail": ["start"]}


def ask(state: State) -> dict[str, Any]:
    answer = interrupt("how many?")
    return {"total": answer, "trail": [f"asked {answer}"]}


def count(state: State) -> dict[str, Any]:
    return {"total": 10, "trail": ["counted"]}


def graph(saver: BaseCheckpointSaver[Any]) -> Any:
    builder = StateGraph(State)
    builder.add_node("start", start)
    builder.add_node("ask", ask)
    builder.add_node("count", count)
    builder.add_edge(START, "start")
    builder.add_edge("start", "ask")
    builder.add_edge("start", "count")
    builder.add_edge("ask", END)
    builder.add_edge("count", END)
    return builder.compile(checkpointer=saver)


def summary(compiled: Any, config: RunnableConfig) -> dict[str, Any]:
    """What a user sees of a thread: its state, next nodes, history sources and steps."""
    state = compiled.get_state(config)
    history = list(compiled.get_state_history(config))
    return {
        "values": state.values,
        "next": state.next,
        "interrupts": [i.value for i in state.interrupts],
        "history": [(h.metadata["source"], h.metadata["step"], h.next) for h in history],
    }


CONFIG: RunnableConfig = {"configurable": {"thread_id": "chat"}}


def run_sync(saver: BaseCheckpointSaver[Any], durability: Durability) -> list[dict[str, Any]]:
    compiled, config = graph(saver), CONFIG
    compiled.invoke({"total": 0, "trail": []}, config, durability=durability)
    asked = summary(compiled, config)
    compiled.invoke(Command(resume=5), config, durability=durability)
    return [asked, summary(compiled, config)]


async def run_async(saver: BaseCheckpointSaver[Any], durability: Durability) -> list[list[Any]]:
    compiled, config = graph(saver), CONFIG
    await compiled.ainvoke({"total": 0, "trail": []}, config, durability=durability)
    state = await compiled.aget_state(config)
    asked = [state.values, state.next, [i.value for i in state.interrupts]]
    await compiled.ainvoke(Command(resume=5), config, durability=durability)
    state = await compiled.aget_state(config)
    history = [h async for h in compiled.aget_state_history(config)]
    steps = [(h.metadata["source"], h.metadata["step"], h.next) for h in history]
    return [asked, [state.values, state.next, steps]]


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "graphs.db")


@pytest.mark.parametrize("durability", DURABILITIES)
def test_invoke_matches_the_reference_saver(durability: Durability, path: str) -> None:
    expected = run_sync(InMemorySaver(), durability)
    with RunstoreSaver.from_path(path) as saver:
        assert run_sync(saver, durability) == expected
    assert expected[1]["values"]["total"] == 16


@pytest.mark.parametrize("durability", DURABILITIES)
def test_ainvoke_matches_the_reference_saver(durability: Durability, path: str) -> None:
    expected = asyncio.run(run_async(InMemorySaver(), durability))

    async def mine() -> list[Any]:
        async with RunstoreSaver.from_path(path) as saver:
            return await run_async(saver, durability)

    assert asyncio.run(mine()) == expected


@pytest.mark.parametrize("durability", DURABILITIES)
def test_ainvoke_on_postgres_matches_the_reference_saver(
    durability: Durability, postgres_dsn: str
) -> None:
    """The fan-out's two branches write at once through ``aio.postgres``: the run ends (a
    watchdog fails a frozen loop) in the reference saver's state."""
    expected = asyncio.run(run_async(InMemorySaver(), durability))

    async def mine() -> list[Any]:
        async with RunstoreSaver.from_layer(aio.postgres(postgres_dsn)) as saver:
            return await run_async(saver, durability)

    assert run_watched(mine) == expected


Form = Literal["from_path with", "from_path async with", "from_layer with", "host container"]


@pytest.mark.parametrize("durability", DURABILITIES)
@pytest.mark.parametrize(
    "form", ["from_path with", "from_path async with", "from_layer with", "host container"]
)
def test_invoke_runs_on_every_documented_saver(
    form: Form, durability: Durability, path: str
) -> None:
    """``invoke`` puts from LangGraph's worker threads: each way the README makes a saver
    serves it (in an ``async with`` block from a thread of its own, as sync code beside a
    loop runs)."""
    expected = run_sync(InMemorySaver(), durability)
    if form == "from_path with":
        with RunstoreSaver.from_path(path) as saver:
            assert run_sync(saver, durability) == expected
    elif form == "from_layer with":
        with RunstoreSaver.from_layer(aio.in_memory()) as saver:
            assert run_sync(saver, durability) == expected
    else:

        async def main() -> list[dict[str, Any]]:
            if form == "from_path async with":
                async with RunstoreSaver.from_path(path) as saver:
                    return await asyncio.to_thread(run_sync, saver, durability)
            async with aio.build(aio.sqlite(path)) as container:
                saver = RunstoreSaver(container)
                try:
                    return await asyncio.to_thread(run_sync, saver, durability)
                finally:
                    saver.close()  # its sync calls' thread; the container is the host's

        assert asyncio.run(main()) == expected


def test_a_thread_resumes_in_another_process_s_saver(path: str) -> None:
    """The interrupted run's state is in the file: a new saver on it resumes the run."""
    with RunstoreSaver.from_path(path) as saver:
        graph(saver).invoke({"total": 0, "trail": []}, CONFIG)
    with RunstoreSaver.from_path(path) as saver:
        done = graph(saver).invoke(Command(resume=2), CONFIG)
    assert done["total"] == 13
    assert sorted(done["trail"]) == ["asked 2", "counted", "start"]


PUT_PAUSE_S = 0.02
"""How long the savers below take to put a checkpoint (a slow disk's fsync)."""


class Recording(InMemorySaver):
    """LangGraph's in-memory saver with slow puts, noting writes sent before their checkpoint
    was put."""

    def __init__(self) -> None:
        super().__init__()
        self.put_ids: set[str] = set()
        self.early: list[str] = []

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: Metadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        time.sleep(PUT_PAUSE_S)
        self.put_ids.add(checkpoint["id"])
        return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(
        self, config: RunnableConfig, writes: Any, task_id: str, task_path: str = ""
    ) -> None:
        if config["configurable"]["checkpoint_id"] not in self.put_ids:
            self.early.extend(channel for channel, _ in writes)
        super().put_writes(config, writes, task_id, task_path)


class SlowPuts(RunstoreSaver):
    """``RunstoreSaver`` with puts as slow as :class:`Recording`'s."""

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: Metadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        time.sleep(PUT_PAUSE_S)
        return super().put(config, checkpoint, metadata, new_versions)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: Metadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        await asyncio.sleep(PUT_PAUSE_S)
        return await super().aput(config, checkpoint, metadata, new_versions)


@pytest.mark.parametrize("durability", DURABILITIES)
def test_writes_sent_before_their_checkpoint_reach_it(durability: Durability, path: str) -> None:
    """With puts that take a while, LangGraph sends writes before their checkpoint's put
    (seen on the reference saver); runstore's store takes them and the saver ends in the
    same state."""
    recording = Recording()
    expected = run_sync(recording, durability)
    assert recording.early, "no early writes: this test would prove nothing"
    with SlowPuts.from_path(path) as saver:
        assert run_sync(saver, durability) == expected


README = Path(__file__).resolve().parents[2] / "README.md"


def readme_example() -> str:
    """The python block of the README's LangGraph subsection (marked not run there, since the
    main test venv has no LangGraph)."""
    section = README.read_text(encoding="utf-8").split("### LangGraph: `RunstoreSaver`", 1)[1]
    found = re.search(r"^```python\n(.*?)^```$", section, re.M | re.S)
    assert found is not None, "the LangGraph subsection has no python block"
    return found[1]


def test_the_readme_example_runs_twice_in_a_fresh_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    code = compile(readme_example(), "README.md", "exec")
    outputs = []
    for _ in range(2):  # each run in a fresh module, whose annotations LangGraph resolves
        module = types.ModuleType("readme_example")
        monkeypatch.setitem(sys.modules, module.__name__, module)
        exec(code, module.__dict__)
        outputs.append(capsys.readouterr().out)
    assert outputs == [
        "['hello', 'reply to hello']\n3 checkpoints in chat-1\n",
        "['hello', 'reply to hello']\n6 checkpoints in chat-1\n",
    ]
