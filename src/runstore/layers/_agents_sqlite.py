"""The live agent stores: threads, runs, messages and checkpoints in SQLite (migrations 0004
and 0008).

Every write is one unit of work on the container's :class:`SqliteDatabase` (``BEGIN
IMMEDIATE``), so the thread's counter row, the messages and the checks between them commit
together or not at all, across threads and processes alike. Message headers and bodies are
apart: listing reads headers through the clustered ``(thread_key, seq)`` key and then the
bodies of exactly the rows it returns, each by a rowid computed from its header.

Claims are safe across processes for the same reason: a ``claim``, ``reclaim`` or fenced
write reads the run's status and token and writes under the unit's write lock, and tokens and
the creation orders come from the ``agent_counters`` rows (one ``UPDATE ... RETURNING``
each), so two workers never get the same token and a stale one is refused by whichever unit
comes second. A retried append finds its client id through the unique
``(thread_key, client_id)`` index before it takes sequence numbers.

This layer keeps no in-process cache: counters live in the thread row and in
``agent_counters``, and another process may change them at any moment, so every unit reads
what it needs under its own lock. The method skeletons are :mod:`._agents_shared`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeVar

import apsw
from returns.result import Failure, Result, Success

from runstore.layers._agents_shared import (
    AgentRunStoreBase,
    CheckpointStoreBase,
    MessageRemovalBase,
    ThreadStoreBase,
)
from runstore.layers._layer import Container, Layer
from runstore.layers._sqlite_database import SqliteDatabase
from runstore.layers._sqlite_errors import from_apsw
from runstore.layers._tags import AGENT_STORAGE
from runstore.services import _agents_rules as rules
from runstore.services.agents import (
    AgentError,
    AgentRunStatus,
    AgentStorage,
    ContextCheckpoint,
    Message,
    NewMessage,
    ThreadId,
    ThreadStatus,
    TokenUsage,
)
from runstore.services.clock import Clock
from runstore.services.errors import NotFound
from runstore.services.ledger import ExecutionStorage
from runstore.services.pagination import Page

__all__ = [
    "SqliteAgentRunStore",
    "SqliteAgentStorage",
    "SqliteCheckpointStore",
    "SqliteMessageStore",
    "SqliteThreadStore",
    "sqlite_agents",
]

Row = tuple[Any, ...]
R = TypeVar("R")
T = TypeVar("T")
Keyed = tuple[int, R]
"""A row of the rules module with the integer key its table gives it."""

BODY_STRIDE = 2**32
"""A body's rowid is ``thread_key * BODY_STRIDE + seq`` (migration 0004 bounds both)."""

_THREAD_COLUMNS = (
    "t.key, t.id, t.project_id, t.seq, t.agent_id, t.owner_id, t.title, t.metadata, t.status,"
    " (SELECT r.id FROM agent_runs r WHERE r.thread_key = t.key AND r.status = 'running'),"
    " t.head_seq, t.message_count, t.last_message_at_ms, t.checkpoint_count,"
    " t.created_at_ms, t.updated_at_ms"
)

_RUN_COLUMNS = (
    "r.key, r.id, t.id, t.project_id, r.execution_id, r.seq, r.status, r.owner,"
    " r.lease_expires_at_ms, r.fencing_token, r.attempts, r.failure, r.queued_at_ms,"
    " r.started_at_ms, r.finished_at_ms"
)
_RUNS = f"SELECT {_RUN_COLUMNS} FROM agent_runs r JOIN agent_threads t ON t.key = r.thread_key"

_CHECKPOINT_COLUMNS = (
    "c.id, t.id, r.id, c.number, c.previous_id, c.summary, c.through_seq,"
    " c.observed_head_seq, c.created_at_ms, c.reason, c.format_version, c.tokens_before,"
    " c.tokens_after, c.summary_model"
)

_HEADER_COLUMNS = (
    "m.seq, m.role, r.id, m.input_tokens, m.output_tokens, m.cache_read_tokens,"
    " m.cache_write_tokens, m.cost, m.created_at_ms, m.thread_key, m.client_id"
)
PAGE_CONTENT, PAGE_METADATA, PAGE_HAS_MORE = 11, 12, 13
"""Where a page row has the body's content and metadata and the ``has_more`` probe."""


def _thread_row(row: Row) -> rules.ThreadRow:
    """The thread of a row of ``_THREAD_COLUMNS`` (its key first)."""
    return rules.ThreadRow(
        row[1], row[2], row[3], row[4], row[5], row[6], row[7], ThreadStatus(row[8]), row[9],
        row[10], row[11], row[12], row[13], row[14], row[15],
    )


def _run_row(row: Row) -> rules.RunRow:
    """The run of a row of ``_RUN_COLUMNS`` (its key first)."""
    return rules.RunRow(
        row[1], row[2], row[3], row[4], row[5], AgentRunStatus(row[6]), row[7], row[8], row[9],
        row[10], row[11], row[12], row[13], row[14],
    )


def _facts(found: Keyed[R] | None) -> R | None:
    return None if found is None else found[1]


def _usage(header: Row) -> TokenUsage:
    counts = header[3:7]
    return rules.NO_USAGE if counts == (0, 0, 0, 0) else TokenUsage(*counts)


def _message(thread_id: ThreadId, header: Row, content: str, metadata: str | None) -> Message:
    # seq, role, run id, the four token counts, cost, created_at_ms, thread key, client id
    # (_HEADER_COLUMNS); the hot path of every listing, so the usage is one shared value for
    # zeros.
    return rules.message_record(
        thread_id,
        header[0],
        header[1],
        content,
        header[2],
        _usage(header),
        header[7],
        header[8],
        header[10],
        metadata,
    )


class _Base:
    """What every store of one :class:`SqliteAgentStorage` shares: finding rows."""

    def __init__(self, db: SqliteDatabase, clock: Clock) -> None:
        self._db = db
        self._clock = clock

    def _thread(self, thread_id: str) -> Keyed[rules.ThreadRow] | None:
        row = self._db.one(
            f"SELECT {_THREAD_COLUMNS} FROM agent_threads t WHERE t.id = ?", (thread_id,)
        )
        return None if row is None else (row[0], _thread_row(row))

    def _thread_key(self, thread_id: str) -> int | None:
        key: int | None = self._db.scalar(
            "SELECT key FROM agent_threads WHERE id = ?", (thread_id,)
        )
        return key

    def _run(self, run_id: str) -> Keyed[rules.RunRow] | None:
        row = self._db.one(f"{_RUNS} WHERE r.id = ?", (run_id,))
        return None if row is None else (row[0], _run_row(row))

    def _next(self, name: str) -> int:
        """Take the next value of counter ``name`` (see ``rules.Counter``)."""
        value: int = self._db.execute(
            "UPDATE agent_counters SET value = value + 1 WHERE name = ? RETURNING value", (name,)
        )[0][0]
        return value

    def _checkpoint(self, where: str, params: tuple[Any, ...]) -> ContextCheckpoint | None:
        row = self._db.one(
            f"SELECT {_CHECKPOINT_COLUMNS} FROM agent_checkpoints c"
            " JOIN agent_threads t ON t.key = c.thread_key JOIN agent_runs r ON r.key = c.run_key"
            f" WHERE {where}",
            params,
        )
        return None if row is None else ContextCheckpoint(*row)


class SqliteThreadStore(_Base, ThreadStoreBase):
    """Threads in ``agent_threads``; see :class:`~runstore.services.agents.ThreadStore`."""

    _db: SqliteDatabase

    def _thread_rows(self, query: rules.ThreadListing) -> list[rules.ThreadRow]:
        return [_thread_row(row) for row in self._db.execute(*thread_page_query(query))]

    def _thread_row(self, thread_id: str) -> rules.ThreadRow | None:
        return _facts(self._thread(thread_id))

    def _insert_thread(self, row: rules.ThreadRow) -> None:
        self._db.execute(
            "INSERT INTO agent_threads (id, project_id, seq, agent_id, owner_id, title,"
            " metadata, status, created_at_ms, updated_at_ms)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                row.id,
                row.project_id,
                row.seq,
                row.agent_id,
                row.owner_id,
                row.title,
                row.metadata_json,
                str(row.status),
                row.created_at_ms,
                row.updated_at_ms,
            ),
        )

    def _update_thread(self, row: rules.ThreadRow) -> None:
        self._db.execute(
            "UPDATE agent_threads SET title = ?, metadata = ?, status = ?, updated_at_ms = ?"
            " WHERE id = ?",
            (row.title, row.metadata_json, str(row.status), row.updated_at_ms, row.id),
        )

    def _delete_thread(self, thread_id: str) -> bool:
        # The schema cascades to runs, messages (and by trigger their bodies), checkpoints.
        gone = self._db.execute(
            "DELETE FROM agent_threads WHERE id = ? RETURNING key", (thread_id,)
        )
        return bool(gone)


_INSERT_RUN = (
    "INSERT INTO agent_runs (id, thread_key, seq, execution_id, status, owner,"
    " lease_expires_at_ms, fencing_token, attempts, failure, queued_at_ms, started_at_ms,"
    " finished_at_ms) VALUES (?, (SELECT key FROM agent_threads WHERE id = ?),"
    " ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_UPDATE_RUN = (
    "UPDATE agent_runs SET status = ?, owner = ?, lease_expires_at_ms = ?, fencing_token = ?,"
    " attempts = ?, failure = ?, started_at_ms = ?, finished_at_ms = ? WHERE id = ?"
)


class SqliteAgentRunStore(_Base, AgentRunStoreBase):
    """Runs in ``agent_runs``; see :class:`~runstore.services.agents.AgentRunStore`."""

    _db: SqliteDatabase

    def __init__(self, db: SqliteDatabase, clock: Clock, executions: ExecutionStorage) -> None:
        super().__init__(db, clock)
        self._executions = executions

    def _run_row(self, run_id: str) -> rules.RunRow | None:
        return _facts(self._run(run_id))

    def _thread_row(self, thread_id: str) -> rules.ThreadRow | None:
        return _facts(self._thread(thread_id))

    def _write_run(self, row: rules.RunRow, *, new: bool) -> None:
        if new:
            self._db.execute(
                _INSERT_RUN,
                (
                    row.id,
                    row.thread_id,
                    row.seq,
                    row.execution_id,
                    str(row.status),
                    row.owner,
                    row.lease_expires_at_ms,
                    row.fencing_token,
                    row.attempts,
                    row.failure_json,
                    row.queued_at_ms,
                    row.started_at_ms,
                    row.finished_at_ms,
                ),
            )
            return
        self._db.execute(
            _UPDATE_RUN,
            (
                str(row.status),
                row.owner,
                row.lease_expires_at_ms,
                row.fencing_token,
                row.attempts,
                row.failure_json,
                row.started_at_ms,
                row.finished_at_ms,
                row.id,
            ),
        )

    def _run_rows(self, run_ids: Sequence[str]) -> list[rules.RunRow]:
        if not run_ids:
            return []
        marks = ", ".join("?" * len(run_ids))
        rows = self._db.execute(f"{_RUNS} WHERE r.id IN ({marks})", tuple(run_ids))
        return [_run_row(row) for row in rows]

    def _thread_runs(self, query: rules.RunListing) -> list[rules.RunRow] | None:
        key = self._thread_key(query.thread_id)
        if key is None:
            return None
        return [_run_row(row) for row in self._db.execute(*run_page_query(key, query))]


_INSERT_HEADER = (
    "INSERT INTO agent_messages (thread_key, seq, role, run_key, input_tokens,"
    " output_tokens, cache_read_tokens, cache_write_tokens, cost, created_at_ms, client_id)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_BODY = "INSERT INTO agent_message_bodies (id, content, metadata) VALUES (?, ?, ?)"


class SqliteMessageStore(_Base, rules.AppendsOne, MessageRemovalBase[int]):
    """Messages in ``agent_messages`` (headers) and ``agent_message_bodies``; see
    :class:`~runstore.services.agents.MessageStore`."""

    _db: SqliteDatabase

    def append_many(
        self, thread_id: str, messages: Sequence[NewMessage]
    ) -> Result[tuple[Message, ...], AgentError]:
        """Append messages with consecutive sequence numbers (see ``MessageStore.append_many``)."""
        checked = rules.check_append(thread_id, messages, self._clock)
        if isinstance(checked, Failure):
            return checked
        request = checked.unwrap()
        return _intact(
            "append messages",
            lambda: self._db.transact("append messages", lambda: self._append(request)),
        )

    def _head(self, thread_id: str) -> Keyed[rules.ThreadHead] | None:
        row = self._db.one(
            "SELECT key, status, head_seq FROM agent_threads WHERE id = ?", (thread_id,)
        )
        return None if row is None else (row[0], rules.ThreadHead(ThreadStatus(row[1]), row[2]))

    def _known(self, thread_id: str, drafts: Sequence[rules.MessageDraft]) -> rules.Known:
        """The thread's stored messages of the drafts' client ids (one statement; none when
        the batch carries no client id)."""
        ids = rules.client_ids(drafts)
        if not ids:
            return {}
        rows = self._db.execute(
            f"SELECT {_HEADER_COLUMNS}, b.content, b.metadata FROM agent_messages m"
            " LEFT JOIN agent_runs r ON r.key = m.run_key"
            f" JOIN agent_message_bodies b ON b.id = m.thread_key * {BODY_STRIDE} + m.seq"
            " WHERE m.thread_key = (SELECT key FROM agent_threads WHERE id = ?)"
            f" AND m.client_id IN ({', '.join('?' * len(ids))})",
            (thread_id, *ids),
        )
        return {
            row[10]: (
                row[0],
                rules.MessageDraft(
                    row[1], row[2], row[11], _usage(row), row[7], row[8], None, row[10], row[12]
                ),
            )
            for row in rows
        }

    def _append(self, request: rules.Append) -> Result[tuple[Message, ...], AgentError]:
        db, thread_id, drafts = self._db, request.thread_id, request.drafts
        known = self._known(thread_id, drafts)
        fresh = rules.fresh_drafts(drafts, known) if known else drafts
        count = len(fresh)
        # Take the sequence numbers from the counter row first: one statement finds an open
        # thread, bumps its counters and returns the range. A failure below rolls it back.
        bumped = None
        if count:
            bumped = db.one(
                "UPDATE agent_threads SET head_seq = head_seq + ?,"
                " message_count = message_count + ?, last_message_at_ms = ?, updated_at_ms = ?"
                " WHERE id = ? AND status = 'open' RETURNING key, head_seq - ?",
                (count, count, fresh[-1].at_ms, request.now_ms, thread_id, count),
            )
        head: Keyed[rules.ThreadHead] | None = None
        if bumped is not None:
            head = bumped[0], rules.ThreadHead(ThreadStatus.OPEN, bumped[1])
        else:
            head = self._head(thread_id)
        runs = {run_id: self._run(run_id) for run_id in rules.message_run_ids(drafts)}
        decided = rules.decide_append(
            _facts(head), {run_id: _facts(run) for run_id, run in runs.items()}, request, known
        )
        if isinstance(decided, Failure):
            return Failure(decided.failure())
        plan = decided.unwrap()
        if not plan.new:
            return Success(plan.messages)
        assert head is not None
        thread_key = head[0]
        run_keys = {run_id: run[0] for run_id, run in runs.items() if run is not None}
        headers = [
            (
                thread_key,
                seq,
                draft.role,
                None if draft.run_id is None else run_keys[draft.run_id],
                draft.usage.input,
                draft.usage.output,
                draft.usage.cache_read,
                draft.usage.cache_write,
                draft.cost_text,
                draft.at_ms,
                draft.client_id,
            )
            for seq, draft in plan.new
        ]
        base = thread_key * BODY_STRIDE
        bodies = [(base + seq, draft.content_json, draft.metadata_json) for seq, draft in plan.new]
        if count == 1:
            db.execute(_INSERT_HEADER, headers[0])
            db.execute(_INSERT_BODY, bodies[0])
        else:
            db.executemany(_INSERT_HEADER, headers)
            db.executemany(_INSERT_BODY, bodies)
        return Success(plan.messages)

    def get(self, thread_id: str, seq: int) -> Result[Message, AgentError]:
        """Return one message (see ``MessageStore.get``)."""
        checked = rules.check_message_ref(thread_id, seq)
        if isinstance(checked, Failure):
            return Failure(checked.failure())

        def read() -> Result[Message, AgentError]:
            key = self._thread_key(thread_id)
            if key is None:
                return Failure(NotFound("thread", thread_id))
            found = self._stored_message(key, thread_id, seq)
            if found is None:
                return Failure(NotFound("message", f"{thread_id}#{seq}"))
            return Success(found)

        return _intact("get message", lambda: self._db.read("get message", read))

    def _stored_message(self, key: int, thread_id: str, seq: int) -> Message | None:
        """Message ``seq`` of the thread with key ``key`` (None when it is not stored)."""
        header = self._db.one(
            f"SELECT {_HEADER_COLUMNS} FROM agent_messages m"
            " LEFT JOIN agent_runs r ON r.key = m.run_key"
            " WHERE m.thread_key = ? AND m.seq = ?",
            (key, seq),
        )
        if header is None:
            return None
        body = self._db.one(
            "SELECT content, metadata FROM agent_message_bodies WHERE id = ?",
            (key * BODY_STRIDE + seq,),
        )
        assert body is not None  # a header's body is written and deleted with it
        return _message(ThreadId(thread_id), header, body[0], body[1])

    def list(
        self,
        thread_id: str,
        *,
        after_seq: int | None = None,
        before_seq: int | None = None,
        roles: Collection[str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Result[Page[Message], AgentError]:
        """Return one page of messages in ascending seq (see ``MessageStore.list``)."""
        query = rules.check_list(thread_id, after_seq, before_seq, roles, limit, cursor)
        if isinstance(query, Failure):
            return Failure(query.failure())
        try:
            return _intact("list messages", lambda: self._list(thread_id, query.unwrap()))
        except apsw.Error as exc:
            return Failure(from_apsw(exc, operation="list messages", table="agent_messages"))

    def _list(self, thread_id: str, query: rules.ListQuery) -> Result[Page[Message], AgentError]:
        # One statement per page: it is its own consistent snapshot, so no transaction.
        sql, params = page_query(thread_id, query)
        rows = self._db.execute(sql, params)
        if not rows and self._thread_key(thread_id) is None:
            return Failure(NotFound("thread", thread_id))
        if not query.forward:
            rows.reverse()
        typed_id = ThreadId(thread_id)
        items = [_message(typed_id, row, row[PAGE_CONTENT], row[PAGE_METADATA]) for row in rows]
        has_more = bool(rows) and rows[0][PAGE_HAS_MORE] is not None
        return Success(rules.message_page(items, has_more, query))

    def delete_by_run(self, thread_id: str, run_id: str) -> Result[int, AgentError]:
        """Delete the run's messages and recompute counters (see ``MessageStore.delete_by_run``)."""
        checked = rules.check_delete_by_run(thread_id, run_id)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        now = self._clock.now_ms()

        def unit() -> Result[int, AgentError]:
            db = self._db
            key = self._thread_key(thread_id)
            if key is None:
                return Failure(NotFound("thread", thread_id))
            found = self._run(run_id)
            run = rules.check_run_in_thread(_facts(found), run_id, thread_id)
            if isinstance(run, Failure) or found is None:
                return Failure(run.failure())
            deleted = len(
                db.execute(
                    "DELETE FROM agent_messages WHERE run_key = ? AND thread_key = ? RETURNING seq",
                    (found[0], key),
                )
            )
            self._recount(key, deleted, now)
            return Success(deleted)

        return self._db.transact("delete messages by run", unit)

    def _recount(self, key: int, deleted: int, now_ms: int) -> None:
        """Move the counters of the thread with key ``key`` after ``deleted`` of its messages
        were deleted (nothing when none was); ``head_seq`` stays."""
        if deleted:
            self._db.execute(
                "UPDATE agent_threads SET message_count = message_count - ?,"
                " last_message_at_ms = (SELECT created_at_ms FROM agent_messages"
                "  WHERE thread_key = ? ORDER BY seq DESC LIMIT 1),"
                " updated_at_ms = ? WHERE key = ?",
                (deleted, key, now_ms, key),
            )

    def _transcript(self, thread_id: str) -> tuple[rules.Transcript, int | None]:
        found = self._thread(thread_id)
        if found is None:
            return rules.Transcript(None, None, None, None), None
        key = found[0]
        low, high = self._db.execute(
            "SELECT min(seq), max(seq) FROM agent_messages WHERE thread_key = ?", (key,)
        )[0]
        through = self._db.scalar(
            "SELECT max(through_seq) FROM agent_checkpoints WHERE thread_key = ?", (key,)
        )
        return rules.Transcript(found[1], low, high, through), key

    def _message_at(self, thread: int, thread_id: str, seq: int) -> Message | None:
        return self._stored_message(thread, thread_id, seq)

    def _remove_from(self, thread: int, first: int, now_ms: int, *, whole: bool) -> int:
        if whole:
            deleted = len(
                self._db.execute(
                    "DELETE FROM agent_messages WHERE thread_key = ? RETURNING seq", (thread,)
                )
            )
        else:
            self._db.execute(
                "DELETE FROM agent_messages WHERE thread_key = ? AND seq = ?", (thread, first)
            )
            deleted = 1
        self._recount(thread, deleted, now_ms)
        return deleted

    def _removing(
        self, operation: str, unit: Callable[[], Result[T, AgentError]]
    ) -> Result[T, AgentError]:
        return _intact(operation, lambda: self._db.transact(operation, unit))


def _intact(operation: str, call: Callable[[], Result[T, AgentError]]) -> Result[T, AgentError]:
    """``call()``, with a stored message it could not read (``rules.DamagedMessage``, raised
    after its unit of work rolled back) returned as ``StorageFailure(kind=corrupt)``."""
    try:
        return call()
    except rules.DamagedMessage as error:
        return Failure(rules.damaged_message(operation, error))


def thread_page_query(query: rules.ThreadListing) -> tuple[str, tuple[str | int, ...]]:
    """The statement that reads a page of threads (``limit + 1`` rows): a seek on the
    project's ``(project_id, seq)`` index, or its ``(project_id, agent_id, seq)`` or
    ``(project_id, owner_id, seq)`` one when filtered by agent or owner (migration 0008);
    the status is checked row by row. Exposed for the query-plan test."""
    where = ["t.project_id = ?", "t.seq > ?"]
    params: list[str | int] = [query.project_id, query.after_seq]
    for column, value in (
        ("agent_id", query.agent_id),
        ("status", query.status),
        ("owner_id", query.owner_id),
    ):
        if value is not None:
            where.append(f"t.{column} = ?")
            params.append(str(value))
    sql = (
        f"SELECT {_THREAD_COLUMNS} FROM agent_threads t WHERE {' AND '.join(where)}"
        " ORDER BY t.seq LIMIT ?"
    )
    return sql, (*params, query.limit + 1)


def run_page_query(
    thread_key: int, query: rules.RunListing
) -> tuple[str, tuple[str | int, ...]]:
    """The statement that reads a page of a thread's runs (``limit + 1`` rows): a seek on
    ``agent_runs (thread_key, seq)``. Exposed for the query-plan test."""
    where = "r.thread_key = ? AND r.seq > ?"
    params: list[str | int] = [thread_key, query.after_seq]
    if query.status is not None:
        where += " AND r.status = ?"
        params.append(str(query.status))
    return f"{_RUNS} WHERE {where} ORDER BY r.seq LIMIT ?", (*params, query.limit + 1)


def page_query(thread_id: str, query: rules.ListQuery) -> tuple[str, dict[str, Any]]:
    """The one statement that reads a page: its headers, their bodies, and ``has_more``.

    The thread's key comes from the unique index on ``agent_threads.id``; headers come from
    ``agent_messages`` through its clustered ``(thread_key, seq)`` key, in page order, and
    stop after ``limit`` rows. The body's content and metadata are correlated subqueries
    (one rowid lookup each), evaluated only for the rows returned (rows the role filter
    drops never reach them), so no other body is read.
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
    body = f"FROM agent_message_bodies b WHERE b.id = m.thread_key * {BODY_STRIDE} + m.seq"
    sql = (
        f"SELECT {_HEADER_COLUMNS},"
        f" (SELECT b.content {body}), (SELECT b.metadata {body}),"
        f" (SELECT 1 FROM agent_messages m WHERE {condition}"
        f"   ORDER BY m.seq {order} LIMIT 1 OFFSET :limit)"
        " FROM agent_messages m LEFT JOIN agent_runs r ON r.key = m.run_key"
        f" WHERE {condition} ORDER BY m.seq {order} LIMIT :limit"
    )
    return sql, params


class SqliteCheckpointStore(_Base, CheckpointStoreBase):
    """Checkpoints in ``agent_checkpoints``; see
    :class:`~runstore.services.agents.CheckpointStore`."""

    _db: SqliteDatabase

    def _checkpoint_facts(self, draft: rules.CheckpointDraft) -> rules.CheckpointFacts:
        thread = self._thread(draft.thread_id)
        run = self._run(draft.run_id)
        taken = self._db.scalar(
            "SELECT 1 FROM agent_checkpoints WHERE id = ?", (draft.checkpoint_id,)
        )
        return rules.CheckpointFacts(
            thread=_facts(thread),
            run=_facts(run),
            mine=None if run is None else self._checkpoint("c.run_key = ?", (run[0],)),
            id_taken=bool(taken),
            latest=None if thread is None else self._latest(thread),
            first_kept=None if thread is None else self._first_kept(thread[0], draft.through_seq),
        )

    def _store_checkpoint(self, checkpoint: ContextCheckpoint) -> None:
        self._db.execute(
            "INSERT INTO agent_checkpoints (id, thread_key, number, run_key, previous_id,"
            " summary, through_seq, observed_head_seq, created_at_ms, reason, format_version,"
            " tokens_before, tokens_after, summary_model)"
            " VALUES (?, (SELECT key FROM agent_threads WHERE id = ?), ?,"
            " (SELECT key FROM agent_runs WHERE id = ?), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                checkpoint.id,
                checkpoint.thread_id,
                checkpoint.number,
                checkpoint.run_id,
                checkpoint.previous_id,
                checkpoint.summary,
                checkpoint.through_seq,
                checkpoint.observed_head_seq,
                checkpoint.created_at_ms,
                checkpoint.reason,
                checkpoint.format_version,
                checkpoint.tokens_before,
                checkpoint.tokens_after,
                checkpoint.summary_model,
            ),
        )
        self._db.execute(
            "UPDATE agent_threads SET checkpoint_count = ? WHERE id = ?",
            (checkpoint.number, checkpoint.thread_id),
        )

    def _first_kept(self, thread_key: int, through_seq: int) -> tuple[int, str] | None:
        """``(seq, role)`` of the first stored message after ``through_seq`` (one seek)."""
        row = self._db.one(
            "SELECT seq, role FROM agent_messages WHERE thread_key = ? AND seq > ?"
            " ORDER BY seq LIMIT 1",
            (thread_key, through_seq),
        )
        return None if row is None else (row[0], row[1])

    def _latest(self, thread: Keyed[rules.ThreadRow]) -> ContextCheckpoint | None:
        where = "c.thread_key = ? AND c.number = ?"
        return self._checkpoint(where, (thread[0], thread[1].checkpoint_count))

    def _latest_checkpoint(self, thread_id: str) -> Result[ContextCheckpoint | None, AgentError]:
        thread = self._thread(thread_id)
        if thread is None:
            return Failure(NotFound("thread", thread_id))
        return Success(self._latest(thread))

    def _run_checkpoint(self, run_id: str) -> Result[ContextCheckpoint | None, AgentError]:
        run = self._run(run_id)
        if run is None:
            return Failure(NotFound("agent_run", run_id))
        return Success(self._checkpoint("c.run_key = ?", (run[0],)))


class SqliteAgentStorage(
    rules.AgentStores[
        SqliteThreadStore, SqliteAgentRunStore, SqliteMessageStore, SqliteCheckpointStore
    ]
):
    """The four live agent stores on one database; see
    :class:`~runstore.services.agents.AgentStorage`.

    ``executions`` is the ledger runs are checked against; give it the
    ``ExecutionStorage`` of the same container so the check joins the run's unit of work.
    """

    def __init__(self, db: SqliteDatabase, clock: Clock, executions: ExecutionStorage) -> None:
        super().__init__(
            SqliteThreadStore(db, clock),
            SqliteAgentRunStore(db, clock, executions),
            SqliteMessageStore(db, clock),
            SqliteCheckpointStore(db, clock),
        )


def _typed(db: SqliteDatabase, clock: Clock, executions: ExecutionStorage) -> AgentStorage:
    """Checked by mypy: the live layer satisfies the Protocol."""
    return SqliteAgentStorage(db, clock, executions)


def sqlite_agents() -> Layer:
    """A layer providing :class:`~runstore.services.agents.AgentStorage` on the container's
    :class:`SqliteDatabase`; requires it, a ``Clock`` and the ``ExecutionStorage`` of the same
    database (runs are checked against it inside their own unit of work)."""

    def factory(c: Container) -> AgentStorage:
        return _typed(c.get(SqliteDatabase), c.get(Clock), c.get(ExecutionStorage))

    return Layer.service(
        AGENT_STORAGE,
        factory,
        requires=(SqliteDatabase, Clock, ExecutionStorage),
    )
