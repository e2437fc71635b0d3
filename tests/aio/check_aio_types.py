"""What mypy concludes about the async container: checked by ``mypy --strict`` (``assert_type``),
never run. A change that loosens these types to ``Any`` fails mypy."""

from __future__ import annotations

from typing import assert_type

from returns.result import Result

from runstore import aio
from runstore.services import AgentError, DataReaderError, Message, RunSummary, SessionError
from runstore.services.sessions import SessionRecord


async def every_async_tag_gives_its_async_protocol(c: aio.AsyncContainer) -> None:
    assert_type(c.get(aio.DATA_STORE), aio.AsyncDataStore)
    assert_type(c.get(aio.DATA_READER), aio.AsyncDataReader)
    assert_type(c.get(aio.EXECUTION_STORAGE), aio.AsyncExecutionStorage)
    assert_type(c.get(aio.ACTION_RUN_STORAGE), aio.AsyncActionRunStorage)
    assert_type(c.get(aio.AGENT_STORAGE), aio.AsyncAgentStorage)
    assert_type(c.get(aio.SESSION_REPOSITORY), aio.AsyncSessionRepository)
    assert_type(c.get(aio.DATABASE_HEALTH), aio.AsyncDatabaseHealth)
    assert_type(c.get(aio.GRAPH_CHECKPOINTS), aio.AsyncGraphCheckpointStore)
    assert_type(c.get(aio.AsyncDataReader), aio.AsyncDataReader)


async def awaited_methods_give_the_sync_results(c: aio.AsyncContainer) -> None:
    agents = c.get(aio.AGENT_STORAGE)
    assert_type(agents.messages, aio.AsyncMessageStore)
    assert_type(await agents.messages.get("t", 1), Result[Message, AgentError])
    assert_type(await c.get(aio.DATA_READER).latest_run("p"), Result[RunSummary, DataReaderError])
    opened = (await c.get(aio.SESSION_REPOSITORY).open("s")).unwrap()
    assert_type(opened, aio.AsyncSessionStorage)
    assert_type(await opened.info(), Result[SessionRecord, SessionError])
