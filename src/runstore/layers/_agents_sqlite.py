"""The live agent stores: threads, runs, messages and checkpoints in SQLite (migration 0004).

Every write is one unit of work on the container's :class:`SqliteDatabase` (``BEGIN
IMMEDIATE``), so the thread's counter row, the messages and the checks between them commit
together or not at all, across threads and processes alike. Message headers and bodies are
apart: listing reads headers through the clustered ``(thread_key, seq)`` key and then the
bodies of exactly the rows it returns, each by a rowid computed from its header.

This layer keeps no in-process cache: counters live in the thread row, and another process
may change it at any moment, so every unit reads what it needs under its own lock.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

import apsw
from returns.result import Failure, Result, Success

from runstore.layers._layer import Container, Layer
from runstore.layers._sqlite_database import SqliteDatabase
from runstore.layers._sqlite_errors import from_apsw
from runstore.services.agents import (
    MAX_TITLE_CHARS,
    ActiveRunExists,
    AgentError,
    AgentRun,
    AgentRunFailure,
    AgentRunId,
    AgentRunStatus,
    AgentStorage,
    CheckpointDraft,
    CheckpointId,
    ContextCheckpoint,
    JsonValue,
    ListQuery,
    Message,
    MessageDraft,
    NewMessage,
    Thread,
    ThreadId,
    ThreadStatus,
    TokenUsage,
    check_checkpoint,
    check_failure,
    check_id,
    check_list_query,
    check_messages,
    check_seq,
    check_text,
    check_thread_status,
    decode_cost,
    decode_failure,
    decode_json,
    encode_object,
    to_epoch_ms,
)
from runstore.services.clock import Clock
from runstore.services.errors import Conflict, IllegalTransition, NotFound
from runstore.services.executions import (
    ExecutionFinished,
    ExecutionId,
    ExecutionStorage,
    ProjectMismatch,
    StaleFencingToken,
)
from runstore.services.pagination import Page

__all__ = [
    "SqliteAgentRunStore",
    "SqliteAgentStorage",
    "SqliteCheckpointStore",
    "SqliteMessageStore",
    "SqliteThreadStore",
    "sqlite_agent_storage",
]

Row = tuple[Any, ...]

BODY_STRIDE = 2**32
"""A body's rowid is ``thread_key * BODY_STRIDE + seq`` (migration 0004 bounds both)."""

_THREAD_COLUMNS = (
    "t.key, t.id, t.project_id, t.title, t.metadata, t.status,"
    " (SELECT r.id FROM agent_runs r WHERE r.thread_key = t.key AND r.status = 'running'),"
    " t.head_seq, t.message_count, t.last_message_at_ms, t.checkpoint_count,"
    " t.created_at_ms, t.updated_at_ms"
)

_RUN_COLUMNS = (
    "r.key, r.id, t.id, t.project_id, r.execution_id, r.status, r.failure,"
    " r.started_at_ms, r.finished_at_ms, r.thread_key"
)

_CHECKPOINT_COLUMNS = (
    "c.id, t.id, r.id, c.number, c.previous_id, c.summary, c.through_seq,"
    " c.observed_head_seq, c.created_at_ms"
)

_HEADER_COLUMNS = (
    "m.seq, m.role, r.id, m.input_tokens, m.output_tokens, m.cache_read_tokens,"
    " m.cache_write_tokens, m.cost, m.created_at_ms, m.thread_key"
)


def _thread(row: Row) -> Thread:
    metadata = decode_json(row[4])
    assert isinstance(metadata, dict)
    return Thread(
        id=ThreadId(row[1]),
        project_id=row[2],
        title=row[3],
        metadata=metadata,
        status=ThreadStatus(row[5]),
        active_run_id=None if row[6] is None else AgentRunId(row[6]),
        head_seq=row[7],
        message_count=row[8],
        last_message_at_ms=row[9],
        checkpoint_count=row[10],
        created_at_ms=row[11],
        updated_at_ms=row[12],
    )


def _run(row: Row) -> AgentRun:
    return AgentRun(
        id=AgentRunId(row[1]),
        thread_id=ThreadId(row[2]),
        project_id=row[3],
        execution_id=row[4],
        status=AgentRunStatus(row[5]),
        failure=decode_failure(row[6]),
        started_at_ms=row[7],
        finished_at_ms=row[8],
    )


def _checkpoint(row: Row) -> ContextCheckpoint:
    return ContextCheckpoint(
        id=CheckpointId(row[0]),
        thread_id=ThreadId(row[1]),
        run_id=AgentRunId(row[2]),
        number=row[3],
        previous_id=None if row[4] is None else CheckpointId(row[4]),
        summary=row[5],
        through_seq=row[6],
        observed_head_seq=row[7],
        created_at_ms=row[8],
    )


_NO_USAGE = TokenUsage()


def _message(thread_id: ThreadId, header: Row, content: str) -> Message:
    # The hot path of every listing: one record per row, built positionally (measurably
    # cheaper than keywords for an attrs class), in Message's field order.
    usage = header[3:7]
    return Message(
        thread_id,
        header[0],  # seq
        header[1],  # role
        decode_json(content),
        header[2],  # run id
        _NO_USAGE if usage == (0, 0, 0, 0) else TokenUsage(*usage),
        None if header[7] is None else Decimal(header[7]),  # cost
        header[8],  # created_at_ms
    )


def _canonical(text: str) -> str:
    return json.dumps(json.loads(text), sort_keys=True, ensure_ascii=False)


class _Base:
    """What every store of one :class:`SqliteAgentStorage` shares."""

    def __init__(self, db: SqliteDatabase, clock: Clock) -> None:
        self._db = db
        self._clock = clock

    def _thread_row(self, thread_id: str) -> Row | None:
        return self._db.one(
            f"SELECT {_THREAD_COLUMNS} FROM agent_threads t WHERE t.id = ?", (thread_id,)
        )

    def _thread_key(self, thread_id: str) -> int | None:
        key: int | None = self._db.scalar(
            "SELECT key FROM agent_threads WHERE id = ?", (thread_id,)
        )
        return key

    def _run_row(self, run_id: str) -> Row | None:
        return self._db.one(
            f"SELECT {_RUN_COLUMNS} FROM agent_runs r JOIN agent_threads t ON t.key = r.thread_key"
            " WHERE r.id = ?",
            (run_id,),
        )

    def _run_in_thread(self, run_id: str, thread_id: str) -> Result[Row, AgentError]:
        """The run row, checked to belong to ``thread_id``."""
        row = self._run_row(run_id)
        if row is None:
            return Failure(NotFound("agent_run", run_id))
        if row[2] != thread_id:
            return Failure(
                Conflict(
                    "agent_run",
                    run_id,
                    "run belongs to another thread",
                    expected=thread_id,
                    actual=row[2],
                )
            )
        return Success(row)


class SqliteThreadStore(_Base):
    """Threads in ``agent_threads``; see :class:`~runstore.services.agents.ThreadStore`."""

    def create(
        self,
        thread_id: str,
        *,
        project_id: str,
        title: str = "",
        metadata: Mapping[str, JsonValue] | None = None,
        at: datetime | int | None = None,
    ) -> Result[Thread, AgentError]:
        """Create an open, empty thread (see ``ThreadStore.create``)."""
        checked_id = check_id("thread_id", thread_id)
        if isinstance(checked_id, Failure):
            return checked_id
        checked_project = check_id("project_id", project_id)
        if isinstance(checked_project, Failure):
            return checked_project
        checked_title = check_text("title", title, max_chars=MAX_TITLE_CHARS, allow_empty=True)
        if isinstance(checked_title, Failure):
            return checked_title
        encoded = encode_object("metadata", metadata)
        if isinstance(encoded, Failure):
            return encoded
        at_ms = to_epoch_ms("at", at, self._clock)
        if isinstance(at_ms, Failure):
            return at_ms
        metadata_json, now = encoded.unwrap(), at_ms.unwrap()

        def unit() -> Result[Thread, AgentError]:
            existing = self._thread_row(thread_id)
            if existing is not None:
                if (
                    existing[2] == project_id
                    and existing[3] == title
                    and _canonical(existing[4]) == _canonical(metadata_json)
                ):
                    return Success(_thread(existing))
                return Failure(Conflict("thread", thread_id, "thread exists with other values"))
            self._db.execute(
                "INSERT INTO agent_threads (id, project_id, title, metadata, status,"
                " created_at_ms, updated_at_ms) VALUES (?, ?, ?, ?, 'open', ?, ?)",
                (thread_id, project_id, title, metadata_json, now, now),
            )
            row = self._thread_row(thread_id)
            assert row is not None
            return Success(_thread(row))

        return self._db.transact("create thread", unit)

    def get(self, thread_id: str) -> Result[Thread, AgentError]:
        """Return the thread (see ``ThreadStore.get``)."""
        checked = check_id("thread_id", thread_id)
        if isinstance(checked, Failure):
            return checked

        def read() -> Result[Thread, AgentError]:
            row = self._thread_row(thread_id)
            return Failure(NotFound("thread", thread_id)) if row is None else Success(_thread(row))

        return self._db.read("get thread", read)

    def update(
        self,
        thread_id: str,
        *,
        title: str | None = None,
        metadata: Mapping[str, JsonValue] | None = None,
        status: ThreadStatus | None = None,
        at: datetime | int | None = None,
    ) -> Result[Thread, AgentError]:
        """Change title, metadata and/or status (see ``ThreadStore.update``)."""
        checked = check_id("thread_id", thread_id)
        if isinstance(checked, Failure):
            return checked
        if title is not None:
            checked_title = check_text("title", title, max_chars=MAX_TITLE_CHARS, allow_empty=True)
            if isinstance(checked_title, Failure):
                return checked_title
        metadata_json: str | None = None
        if metadata is not None:
            encoded = encode_object("metadata", metadata)
            if isinstance(encoded, Failure):
                return encoded
            metadata_json = encoded.unwrap()
        new_status: ThreadStatus | None = None
        if status is not None:
            checked_status = check_thread_status(status)
            if isinstance(checked_status, Failure):
                return checked_status
            new_status = checked_status.unwrap()
        at_ms = to_epoch_ms("at", at, self._clock)
        if isinstance(at_ms, Failure):
            return at_ms
        now = at_ms.unwrap()

        def unit() -> Result[Thread, AgentError]:
            row = self._thread_row(thread_id)
            if row is None:
                return Failure(NotFound("thread", thread_id))
            if new_status is ThreadStatus.ARCHIVED and row[6] is not None:
                return Failure(
                    Conflict("thread", thread_id, "active run", expected="", actual=row[6])
                )
            self._db.execute(
                "UPDATE agent_threads SET title = coalesce(?, title),"
                " metadata = coalesce(?, metadata), status = coalesce(?, status),"
                " updated_at_ms = ? WHERE key = ?",
                (
                    title,
                    metadata_json,
                    None if new_status is None else str(new_status),
                    now,
                    row[0],
                ),
            )
            updated = self._thread_row(thread_id)
            assert updated is not None
            return Success(_thread(updated))

        return self._db.transact("update thread", unit)

    def delete(self, thread_id: str) -> Result[None, AgentError]:
        """Delete the thread and everything of it (see ``ThreadStore.delete``)."""
        checked = check_id("thread_id", thread_id)
        if isinstance(checked, Failure):
            return checked

        def unit() -> Result[None, AgentError]:
            gone = self._db.execute(
                "DELETE FROM agent_threads WHERE id = ? RETURNING key", (thread_id,)
            )
            return Success(None) if gone else Failure(NotFound("thread", thread_id))

        return self._db.transact("delete thread", unit)


class SqliteAgentRunStore(_Base):
    """Runs in ``agent_runs``; see :class:`~runstore.services.agents.AgentRunStore`."""

    def __init__(self, db: SqliteDatabase, clock: Clock, executions: ExecutionStorage) -> None:
        super().__init__(db, clock)
        self._executions = executions

    def start(
        self,
        run_id: str,
        *,
        thread_id: str,
        execution_id: str | None = None,
        at: datetime | int | None = None,
    ) -> Result[AgentRun, AgentError]:
        """Start the thread's one active run (see ``AgentRunStore.start``)."""
        for field, value in (("run_id", run_id), ("thread_id", thread_id)):
            checked = check_id(field, value)
            if isinstance(checked, Failure):
                return checked
        if execution_id is not None:
            checked_execution = check_id("execution_id", execution_id)
            if isinstance(checked_execution, Failure):
                return checked_execution
        at_ms = to_epoch_ms("at", at, self._clock)
        if isinstance(at_ms, Failure):
            return at_ms
        now = at_ms.unwrap()

        def unit() -> Result[AgentRun, AgentError]:
            thread = self._db.one(
                "SELECT key, project_id, status FROM agent_threads WHERE id = ?", (thread_id,)
            )
            if thread is None:
                return Failure(NotFound("thread", thread_id))
            thread_key, project_id, status = thread
            existing = self._run_row(run_id)
            if existing is not None:
                if existing[2] == thread_id and existing[4] == execution_id:
                    return Success(_run(existing))
                return Failure(
                    Conflict("agent_run", run_id, "run exists with another thread or execution")
                )
            if status == ThreadStatus.ARCHIVED:
                return Failure(Conflict("thread", thread_id, "thread is archived"))
            if execution_id is not None:
                checked = _check_execution(self._executions, execution_id, project_id)
                if isinstance(checked, Failure):
                    return checked
            active = self._db.scalar(
                "SELECT id FROM agent_runs WHERE thread_key = ? AND status = 'running'",
                (thread_key,),
            )
            if active is not None:
                return Failure(ActiveRunExists(thread_id, active))
            self._db.execute(
                "INSERT INTO agent_runs (id, thread_key, execution_id, status, started_at_ms)"
                " VALUES (?, ?, ?, 'running', ?)",
                (run_id, thread_key, execution_id, now),
            )
            return Success(
                AgentRun(
                    id=AgentRunId(run_id),
                    thread_id=ThreadId(thread_id),
                    project_id=project_id,
                    execution_id=execution_id,
                    status=AgentRunStatus.RUNNING,
                    failure=None,
                    started_at_ms=now,
                    finished_at_ms=None,
                )
            )

        return self._db.transact("start agent run", unit)

    def finish(
        self,
        run_id: str,
        *,
        status: AgentRunStatus,
        failure: AgentRunFailure | None = None,
        at: datetime | int | None = None,
    ) -> Result[AgentRun, AgentError]:
        """Finish a running run (see ``AgentRunStore.finish``)."""
        checked = check_id("run_id", run_id)
        if isinstance(checked, Failure):
            return checked
        final = check_failure(status, failure)
        if isinstance(final, Failure):
            return final
        target, failure_json = final.unwrap()
        at_ms = to_epoch_ms("at", at, self._clock)
        if isinstance(at_ms, Failure):
            return at_ms
        now = at_ms.unwrap()

        def unit() -> Result[AgentRun, AgentError]:
            row = self._run_row(run_id)
            if row is None:
                return Failure(NotFound("agent_run", run_id))
            current = AgentRunStatus(row[5])
            if current is not AgentRunStatus.RUNNING:
                if current is target and row[6] == failure_json:
                    return Success(_run(row))
                return Failure(IllegalTransition("agent_run", run_id, str(current), str(target)))
            self._db.execute(
                "UPDATE agent_runs SET status = ?, failure = ?, finished_at_ms = ? WHERE key = ?",
                (str(target), failure_json, now, row[0]),
            )
            done = self._run_row(run_id)
            assert done is not None
            return Success(_run(done))

        return self._db.transact("finish agent run", unit)

    def get(self, run_id: str) -> Result[AgentRun, AgentError]:
        """Return the run (see ``AgentRunStore.get``)."""
        checked = check_id("run_id", run_id)
        if isinstance(checked, Failure):
            return checked

        def read() -> Result[AgentRun, AgentError]:
            row = self._run_row(run_id)
            return Failure(NotFound("agent_run", run_id)) if row is None else Success(_run(row))

        return self._db.read("get agent run", read)


def _check_execution(
    executions: ExecutionStorage, execution_id: str, project_id: str
) -> Result[None, AgentError]:
    """Check, inside the caller's unit of work, that the execution may own a run of
    ``project_id``: it exists, is of that project and is not finished."""
    found = executions.get(ExecutionId(execution_id))
    if isinstance(found, Failure):
        error = found.failure()
        if isinstance(error, StaleFencingToken):  # pragma: no cover - get never returns it
            raise TypeError(f"ExecutionStorage.get returned {error!r}")
        return Failure(error)
    execution = found.unwrap()
    if execution.project_id != project_id:
        return Failure(ProjectMismatch("execution", execution_id, project_id, execution.project_id))
    if execution.status.is_finished:
        return Failure(ExecutionFinished(execution_id, str(execution.status)))
    return Success(None)


class SqliteMessageStore(_Base):
    """Messages in ``agent_messages`` (headers) and ``agent_message_bodies``; see
    :class:`~runstore.services.agents.MessageStore`."""

    def append(
        self,
        thread_id: str,
        *,
        role: str,
        content: JsonValue,
        run_id: str | None = None,
        usage: TokenUsage | None = None,
        cost: Decimal | None = None,
        at: datetime | int | None = None,
    ) -> Result[Message, AgentError]:
        """Append one message (see ``MessageStore.append_many``)."""
        message = NewMessage(
            role=role,
            content=content,
            run_id=run_id,
            usage=TokenUsage() if usage is None else usage,
            cost=cost,
            at=at,
        )
        return self.append_many(thread_id, (message,)).map(lambda stored: stored[0])

    def append_many(
        self, thread_id: str, messages: Sequence[NewMessage]
    ) -> Result[tuple[Message, ...], AgentError]:
        """Append messages with consecutive sequence numbers (see ``MessageStore.append_many``)."""
        checked = check_id("thread_id", thread_id)
        if isinstance(checked, Failure):
            return checked
        drafts = check_messages(messages, self._clock)
        if isinstance(drafts, Failure):
            return drafts
        now = self._clock.now_ms()
        return self._db.transact(
            "append messages", lambda: self._append(thread_id, drafts.unwrap(), now)
        )

    def _append(
        self, thread_id: str, drafts: tuple[MessageDraft, ...], now: int
    ) -> Result[tuple[Message, ...], AgentError]:
        count = len(drafts)
        db = self._db
        if count == 0:
            exists = db.scalar("SELECT 1 FROM agent_threads WHERE id = ?", (thread_id,))
            return Success(()) if exists else Failure(NotFound("thread", thread_id))
        # Take the sequence numbers from the counter row first: one statement finds the thread,
        # bumps its counters and returns the range. Any failure below rolls all of it back.
        bumped = db.one(
            "UPDATE agent_threads SET head_seq = head_seq + ?, message_count = message_count + ?,"
            " last_message_at_ms = ?, updated_at_ms = ? WHERE id = ? AND status = 'open'"
            " RETURNING key, head_seq",
            (count, count, drafts[-1].at_ms, now, thread_id),
        )
        if bumped is None:
            status = db.scalar("SELECT status FROM agent_threads WHERE id = ?", (thread_id,))
            if status is None:
                return Failure(NotFound("thread", thread_id))
            return Failure(Conflict("thread", thread_id, "thread is archived"))
        thread_key, head = bumped
        first = head - count + 1
        run_keys: dict[str, int] = {}
        for draft in drafts:
            if draft.run_id is None or draft.run_id in run_keys:
                continue
            run = self._run_in_thread(draft.run_id, thread_id)
            if isinstance(run, Failure):
                return run
            run_keys[draft.run_id] = run.unwrap()[0]
        headers = [
            (
                thread_key,
                first + index,
                draft.role,
                None if draft.run_id is None else run_keys[draft.run_id],
                draft.usage.input,
                draft.usage.output,
                draft.usage.cache_read,
                draft.usage.cache_write,
                draft.cost_text,
                draft.at_ms,
            )
            for index, draft in enumerate(drafts)
        ]
        base = thread_key * BODY_STRIDE
        bodies = [(base + first + index, draft.content_json) for index, draft in enumerate(drafts)]
        insert_header = (
            "INSERT INTO agent_messages (thread_key, seq, role, run_key, input_tokens,"
            " output_tokens, cache_read_tokens, cache_write_tokens, cost, created_at_ms)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        insert_body = "INSERT INTO agent_message_bodies (id, content) VALUES (?, ?)"
        if count == 1:
            db.execute(insert_header, headers[0])
            db.execute(insert_body, bodies[0])
        else:
            db.executemany(insert_header, headers)
            db.executemany(insert_body, bodies)
        return Success(
            tuple(
                Message(
                    thread_id=ThreadId(thread_id),
                    seq=first + index,
                    role=draft.role,
                    content=decode_json(draft.content_json),
                    run_id=None if draft.run_id is None else AgentRunId(draft.run_id),
                    usage=draft.usage,
                    cost=decode_cost(draft.cost_text),
                    created_at_ms=draft.at_ms,
                )
                for index, draft in enumerate(drafts)
            )
        )

    def get(self, thread_id: str, seq: int) -> Result[Message, AgentError]:
        """Return one message (see ``MessageStore.get``)."""
        checked = check_id("thread_id", thread_id)
        if isinstance(checked, Failure):
            return checked
        checked_seq = check_seq(seq)
        if isinstance(checked_seq, Failure):
            return checked_seq

        def read() -> Result[Message, AgentError]:
            key = self._thread_key(thread_id)
            if key is None:
                return Failure(NotFound("thread", thread_id))
            header = self._db.one(
                f"SELECT {_HEADER_COLUMNS} FROM agent_messages m"
                " LEFT JOIN agent_runs r ON r.key = m.run_key"
                " WHERE m.thread_key = ? AND m.seq = ?",
                (key, seq),
            )
            if header is None:
                return Failure(NotFound("message", f"{thread_id}#{seq}"))
            content = self._db.scalar(
                "SELECT content FROM agent_message_bodies WHERE id = ?", (key * BODY_STRIDE + seq,)
            )
            return Success(_message(ThreadId(thread_id), header, content))

        return self._db.read("get message", read)

    def list(
        self,
        thread_id: str,
        *,
        after_seq: int | None = None,
        before_seq: int | None = None,
        roles: Collection[str] | None = None,
        limit: int = 50,
    ) -> Result[Page[Message], AgentError]:
        """Return one page of messages in ascending seq (see ``MessageStore.list``)."""
        query = check_list_query(after_seq, before_seq, roles, limit)
        if isinstance(query, Failure):
            return query
        checked = check_id("thread_id", thread_id)
        if isinstance(checked, Failure):
            return checked
        try:
            return self._list(thread_id, query.unwrap())
        except apsw.Error as exc:
            return Failure(from_apsw(exc, operation="list messages", table="agent_messages"))

    def _list(self, thread_id: str, query: ListQuery) -> Result[Page[Message], AgentError]:
        # One statement per page: it is its own consistent snapshot, so no transaction.
        sql, params = page_query(thread_id, query)
        rows = self._db.execute(sql, params)
        if not rows:
            if self._thread_key(thread_id) is None:
                return Failure(NotFound("thread", thread_id))
            return Success(Page(items=(), has_more=False))
        if not query.forward:
            rows.reverse()
        typed_id = ThreadId(thread_id)
        items = tuple(_message(typed_id, row, row[10]) for row in rows)
        if rows[0][11] is None:
            return Success(Page(items=items, has_more=False))
        cursor = str(items[-1].seq if query.forward else items[0].seq)
        return Success(Page(items=items, has_more=True, next_cursor=cursor))

    def delete_by_run(self, thread_id: str, run_id: str) -> Result[int, AgentError]:
        """Delete the run's messages and recompute counters (see ``MessageStore.delete_by_run``)."""
        for field, value in (("thread_id", thread_id), ("run_id", run_id)):
            checked = check_id(field, value)
            if isinstance(checked, Failure):
                return checked
        now = self._clock.now_ms()

        def unit() -> Result[int, AgentError]:
            db = self._db
            key = self._thread_key(thread_id)
            if key is None:
                return Failure(NotFound("thread", thread_id))
            run = self._run_in_thread(run_id, thread_id)
            if isinstance(run, Failure):
                return run
            deleted = len(
                db.execute(
                    "DELETE FROM agent_messages WHERE run_key = ? AND thread_key = ? RETURNING seq",
                    (run.unwrap()[0], key),
                )
            )
            if deleted:
                db.execute(
                    "UPDATE agent_threads SET message_count = message_count - ?,"
                    " last_message_at_ms = (SELECT created_at_ms FROM agent_messages"
                    "  WHERE thread_key = ? ORDER BY seq DESC LIMIT 1),"
                    " updated_at_ms = ? WHERE key = ?",
                    (deleted, key, now, key),
                )
            return Success(deleted)

        return self._db.transact("delete messages by run", unit)


def page_query(thread_id: str, query: ListQuery) -> tuple[str, dict[str, Any]]:
    """The one statement that reads a page: its headers, their bodies, and ``has_more``.

    The thread's key comes from the unique index on ``agent_threads.id``; headers come from
    ``agent_messages`` through its clustered ``(thread_key, seq)`` key, in page order, and
    stop after ``limit`` rows. The body column is a correlated subquery, evaluated only for
    the rows returned (rows the role filter drops never reach it), so no other body is read.
    ``has_more`` is one more probe of the headers: whether a ``limit + 1``-th row matches.
    Exposed for the query-plan test.
    """
    where = ["m.thread_key = (SELECT key FROM agent_threads WHERE id = :thread)"]
    params: dict[str, Any] = {"thread": thread_id, "limit": query.limit}
    if query.after_seq is not None:
        where.append("m.seq > :after")
        params["after"] = query.after_seq
    if query.before_seq is not None:
        where.append("m.seq < :before")
        params["before"] = query.before_seq
    if query.roles is not None:
        names = []
        for index, role in enumerate(sorted(query.roles)):
            names.append(f":role{index}")
            params[f"role{index}"] = role
        where.append(f"m.role IN ({', '.join(names)})")
    order = "ASC" if query.forward else "DESC"
    condition = " AND ".join(where)
    sql = (
        f"SELECT {_HEADER_COLUMNS},"
        " (SELECT b.content FROM agent_message_bodies b"
        f"   WHERE b.id = m.thread_key * {BODY_STRIDE} + m.seq),"
        f" (SELECT 1 FROM agent_messages m WHERE {condition}"
        f"   ORDER BY m.seq {order} LIMIT 1 OFFSET :limit)"
        " FROM agent_messages m LEFT JOIN agent_runs r ON r.key = m.run_key"
        f" WHERE {condition} ORDER BY m.seq {order} LIMIT :limit"
    )
    return sql, params


class SqliteCheckpointStore(_Base):
    """Checkpoints in ``agent_checkpoints``; see
    :class:`~runstore.services.agents.CheckpointStore`."""

    def create(
        self,
        checkpoint_id: str,
        *,
        thread_id: str,
        run_id: str,
        summary: str,
        through_seq: int,
        observed_head_seq: int,
        expected_latest_id: str | None,
        at: datetime | int | None = None,
    ) -> Result[ContextCheckpoint, AgentError]:
        """Create a checkpoint by compare-and-swap (see ``CheckpointStore.create``)."""
        checked = check_checkpoint(
            checkpoint_id,
            thread_id,
            run_id,
            summary,
            through_seq,
            observed_head_seq,
            expected_latest_id,
            at,
            self._clock,
        )
        if isinstance(checked, Failure):
            return checked
        draft = checked.unwrap()
        return self._db.transact("create checkpoint", lambda: self._create(draft))

    def _create(self, draft: CheckpointDraft) -> Result[ContextCheckpoint, AgentError]:
        db = self._db
        thread = db.one(
            "SELECT key, head_seq, checkpoint_count FROM agent_threads WHERE id = ?",
            (draft.thread_id,),
        )
        if thread is None:
            return Failure(NotFound("thread", draft.thread_id))
        thread_key, head_seq, count = thread
        run = self._run_in_thread(draft.run_id, draft.thread_id)
        if isinstance(run, Failure):
            return run
        run_row = run.unwrap()
        mine = db.one(
            f"SELECT {_CHECKPOINT_COLUMNS} FROM agent_checkpoints c"
            " JOIN agent_threads t ON t.key = c.thread_key JOIN agent_runs r ON r.key = c.run_key"
            " WHERE c.run_key = ?",
            (run_row[0],),
        )
        if mine is not None:
            stored = _checkpoint(mine)
            if (
                stored.id == draft.checkpoint_id
                and stored.summary == draft.summary
                and stored.through_seq == draft.through_seq
                and stored.observed_head_seq == draft.observed_head_seq
                and stored.previous_id == draft.expected_latest_id
            ):
                return Success(stored)
            return Failure(
                Conflict(
                    "checkpoint",
                    draft.checkpoint_id,
                    "run already created a different checkpoint",
                    actual=stored.id,
                )
            )
        if run_row[5] != AgentRunStatus.RUNNING:
            return Failure(
                Conflict("agent_run", draft.run_id, "run is not running", actual=run_row[5])
            )
        if db.scalar("SELECT 1 FROM agent_checkpoints WHERE id = ?", (draft.checkpoint_id,)):
            return Failure(Conflict("checkpoint", draft.checkpoint_id, "checkpoint id taken"))
        latest = db.one(
            "SELECT id, through_seq FROM agent_checkpoints WHERE thread_key = ? AND number = ?",
            (thread_key, count),
        )
        latest_id = None if latest is None else latest[0]
        if latest_id != draft.expected_latest_id:
            return Failure(
                Conflict(
                    "thread",
                    draft.thread_id,
                    "latest checkpoint changed",
                    expected=draft.expected_latest_id or "",
                    actual=latest_id or "",
                )
            )
        if head_seq != draft.observed_head_seq:
            return Failure(
                Conflict(
                    "thread",
                    draft.thread_id,
                    "head moved",
                    expected=str(draft.observed_head_seq),
                    actual=str(head_seq),
                )
            )
        if latest is not None and draft.through_seq <= latest[1]:
            return Failure(
                Conflict(
                    "thread",
                    draft.thread_id,
                    "checkpoint does not advance",
                    expected=f"> {latest[1]}",
                    actual=str(draft.through_seq),
                )
            )
        number = count + 1
        db.execute(
            "INSERT INTO agent_checkpoints (id, thread_key, number, run_key, previous_id, summary,"
            " through_seq, observed_head_seq, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                draft.checkpoint_id,
                thread_key,
                number,
                run_row[0],
                draft.expected_latest_id,
                draft.summary,
                draft.through_seq,
                draft.observed_head_seq,
                draft.at_ms,
            ),
        )
        db.execute(
            "UPDATE agent_threads SET checkpoint_count = ? WHERE key = ?", (number, thread_key)
        )
        return Success(
            ContextCheckpoint(
                id=CheckpointId(draft.checkpoint_id),
                thread_id=ThreadId(draft.thread_id),
                run_id=AgentRunId(draft.run_id),
                number=number,
                previous_id=None
                if draft.expected_latest_id is None
                else CheckpointId(draft.expected_latest_id),
                summary=draft.summary,
                through_seq=draft.through_seq,
                observed_head_seq=draft.observed_head_seq,
                created_at_ms=draft.at_ms,
            )
        )

    def latest(self, thread_id: str) -> Result[ContextCheckpoint | None, AgentError]:
        """Return the newest checkpoint or None (see ``CheckpointStore.latest``)."""
        checked = check_id("thread_id", thread_id)
        if isinstance(checked, Failure):
            return checked

        def read() -> Result[ContextCheckpoint | None, AgentError]:
            thread = self._db.one(
                "SELECT key, checkpoint_count FROM agent_threads WHERE id = ?", (thread_id,)
            )
            if thread is None:
                return Failure(NotFound("thread", thread_id))
            row = self._db.one(
                f"SELECT {_CHECKPOINT_COLUMNS} FROM agent_checkpoints c"
                " JOIN agent_threads t ON t.key = c.thread_key"
                " JOIN agent_runs r ON r.key = c.run_key"
                " WHERE c.thread_key = ? AND c.number = ?",
                (thread[0], thread[1]),
            )
            return Success(None if row is None else _checkpoint(row))

        return self._db.read("latest checkpoint", read)


class SqliteAgentStorage:
    """The four live agent stores on one database; see
    :class:`~runstore.services.agents.AgentStorage`.

    ``executions`` is the ledger runs are checked against; give it the
    ``ExecutionStorage`` of the same container so the check joins the run's unit of work.
    """

    def __init__(self, db: SqliteDatabase, clock: Clock, executions: ExecutionStorage) -> None:
        self._threads = SqliteThreadStore(db, clock)
        self._runs = SqliteAgentRunStore(db, clock, executions)
        self._messages = SqliteMessageStore(db, clock)
        self._checkpoints = SqliteCheckpointStore(db, clock)

    @property
    def threads(self) -> SqliteThreadStore:
        """The thread store."""
        return self._threads

    @property
    def runs(self) -> SqliteAgentRunStore:
        """The run store."""
        return self._runs

    @property
    def messages(self) -> SqliteMessageStore:
        """The message store."""
        return self._messages

    @property
    def checkpoints(self) -> SqliteCheckpointStore:
        """The checkpoint store."""
        return self._checkpoints


def _typed(db: SqliteDatabase, clock: Clock, executions: ExecutionStorage) -> AgentStorage:
    """Checked by mypy: the live layer satisfies the Protocol."""
    return SqliteAgentStorage(db, clock, executions)


def sqlite_agent_storage() -> Layer:
    """A layer providing :class:`~runstore.services.agents.AgentStorage` on the container's
    :class:`SqliteDatabase`; requires it, a ``Clock`` and the ``ExecutionStorage`` of the same
    database (runs are checked against it inside their own unit of work)."""

    def factory(c: Container) -> AgentStorage:
        return _typed(c.get(SqliteDatabase), c.get(Clock), c.get(ExecutionStorage))

    return Layer.service(
        AgentStorage,  # type: ignore[type-abstract]
        factory,
        requires=(SqliteDatabase, Clock, ExecutionStorage),
    )
