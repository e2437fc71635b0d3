"""An OpenAI Agents SDK ``Session`` backed by runstore's agents service.

``RunstoreSession`` implements the SDK's ``Session`` protocol (``openai-agents`` 0.24:
``get_items``, ``add_items``, ``pop_item``, ``clear_session``, ``session_settings``, and a
sync ``close``) over :class:`~runstore.services.agents.AgentStorage` through
:mod:`runstore.aio`, so it swaps in for the SDK's ``SQLiteSession`` in one line::

    session = SQLiteSession("user-42", "conversations.db")   # before
    session = RunstoreSession("user-42", "runstore.db")      # after

and the conversation lives in a migrated runstore database beside the agent's runs and
checkpoints (``runstore`` commands and the agents service read it). A host that already has
an async container passes its agent storage instead:
``RunstoreSession.from_storage("user-42", container.get(aio.AGENT_STORAGE))`` (SQLite,
PostgreSQL or in memory).

What is stored: a session is an agent thread of project ``project_id`` (``"openai-agents"``
unless given), made on the first ``add_items``. A thread id is one across projects, so a
session whose thread exists in another project (another app's ``user-42``, a LangGraph
thread of the same id) is refused, not shared: every call of it raises
:class:`SessionStoreError` carrying a ``Conflict`` that names both projects, and nothing is
read or changed (as ``RunstoreSaver`` refuses a LangGraph thread of another project). An
item is one message whose content is the item as JSON and whose role is the item's
``role`` (``"user"``, ``"assistant"``, ...), else its ``type`` (``"function_call"``,
``"reasoning"``, ...), else ``"item"``, cut to 64 characters. Order is the message's
sequence number.

Semantics copied from ``SQLiteSession`` 0.24 (``agents/memory/sqlite_session.py``), which the
SDK's own session tests check (they run against this class in runstore's frameworks
profile):

- ``get_items(limit)``: the newest ``limit`` items in chronological order; ``limit=None``
  takes ``session_settings.limit`` (``None`` there: every item), ``0`` gives ``[]``, a
  negative limit every item (SQLite's ``LIMIT -1``).
- ``add_items([])`` writes nothing; an item ``json.dumps`` cannot write raises its
  ``TypeError`` before anything is stored; a batch is stored whole or not at all.
- ``pop_item()`` removes and returns the newest item, ``None`` when there is none.
- ``clear_session()`` removes every item (:meth:`MessageStore.clear`); the thread stays, so
  sequence numbers go on after the last one.
- After ``close()`` (sync, idempotent) every method raises ``RuntimeError`` with the SDK's
  text ``"SQLiteSession is closed"``, ``add_items([])`` too.
- Cancelling a task awaiting ``add_items``, ``pop_item`` or ``clear_session`` waits for the
  write's outcome and then raises ``CancelledError``, as the SDK's ``_await_mutation`` does: the
  write was applied once, or not at all, when the caller sees the cancellation.
- Any thread and any event loop may use a session, and several at once: nothing binds a
  loop. Sessions on one file share one writer thread (and its reader threads), opened with
  the first and closed with the last; ``":memory:"`` is a database per session.

Where it differs: the SDK's ``sessions_table``/``messages_table`` arguments do not exist
(runstore's schema is its migrations'); a stored item runstore cannot read back is a
storage error, not skipped (only a damaged file can hold one: writes store checked JSON);
``clear_session`` keeps the thread row. Failures of the store raise: bad input (a NaN in an
item, an item nested deeper than 200 levels of lists and objects
(:data:`runstore.services.agents.MAX_JSON_DEPTH`), an item over 64 MiB as JSON
(:data:`~runstore.services.agents.MAX_CONTENT_BYTES`), a session id over 256 characters,
reported as ``session_id``) :class:`InvalidSessionInput` (a ``ValueError``), a database
that stayed busy :class:`SessionStoreBusy` (a ``TimeoutError``), anything else (a thread of
another project, a storage failure, an archived thread, a clear refused by a checkpoint)
:class:`SessionStoreError`; each carries the store's typed error as ``error``.

This module imports the Agents SDK; nothing else in runstore does. Without it (the
``openai-agents`` extra) importing this module raises
:class:`~runstore.exceptions.MissingExtra` naming the extra.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Awaitable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, TypeVar, cast

import attrs
from returns.result import Failure, Result

from runstore.adapters._loop import LoopThread
from runstore.exceptions import MissingExtra
from runstore.services.agents import MAX_ROLE_CHARS, AgentError, InvalidQuery, NewMessage
from runstore.services.errors import Busy, Conflict, InvalidInput, NotFound
from runstore.services.pagination import MAX_PAGE_SIZE

try:
    from agents.memory.session_settings import (
        SessionSettings,
        coerce_session_settings,
        resolve_session_limit,
    )
except ModuleNotFoundError as exc:  # the SDK is the extra; runstore itself does not need it
    if exc.name is None or exc.name.partition(".")[0] != "agents":
        raise
    raise MissingExtra(
        "runstore.adapters.openai_agents needs the openai-agents extra: "
        "pip install 'runstore[openai-agents]'"
    ) from exc

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

    from runstore.aio import AsyncAgentStorage, AsyncContainer
    from runstore.layers import ConnectionSettings

__all__ = [
    "DEFAULT_PROJECT",
    "InvalidSessionInput",
    "RunstoreSession",
    "SessionStoreBusy",
    "SessionStoreError",
]

T = TypeVar("T")

DEFAULT_PROJECT = "openai-agents"
"""The project of the agent threads a session makes unless it is given another."""

CLOSED_MESSAGE = "SQLiteSession is closed"
"""The text of the ``RuntimeError`` a closed session raises: the SDK session's own, which
code written for ``SQLiteSession`` (and the SDK's tests) match."""


class SessionStoreError(Exception):
    """The agents service refused or failed a session's call; ``error`` is its typed error
    (:data:`~runstore.services.agents.AgentError`)."""

    def __init__(self, error: AgentError) -> None:
        super().__init__(str(error))
        self.error = error


class InvalidSessionInput(SessionStoreError, ValueError):
    """An argument or an item the store cannot keep (``InvalidInput``, ``InvalidQuery``)."""


class SessionStoreBusy(SessionStoreError, TimeoutError):
    """The database stayed busy for the whole retry budget (``Busy``)."""


def _unwrap(result: Result[T, AgentError]) -> T:
    """The value of ``result``, or its failure raised as a :class:`SessionStoreError`."""
    if isinstance(result, Failure):
        error = result.failure()
        if isinstance(error, InvalidInput) and error.field == "thread_id":
            raise InvalidSessionInput(attrs.evolve(error, field="session_id"))
        if isinstance(error, InvalidInput | InvalidQuery):
            raise InvalidSessionInput(error)
        if isinstance(error, Busy):
            raise SessionStoreBusy(error)
        raise SessionStoreError(error)
    return result.unwrap()


def _is_missing(result: Result[Any, AgentError]) -> bool:
    """Whether ``result`` says the session's thread does not exist (yet)."""
    return isinstance(result, Failure) and isinstance(result.failure(), NotFound)


def _role(item: object) -> str:
    """The role an item is stored with (see the module doc)."""
    if isinstance(item, dict):
        for key in ("role", "type"):
            value = item.get(key)
            if isinstance(value, str) and value:
                return value[:MAX_ROLE_CHARS]
    return "item"


async def _await_mutation(awaitable: Awaitable[T]) -> T:
    """Await a write to its outcome however often the caller is cancelled meanwhile, then
    raise the first cancellation (hiding the write's own error then), else return its value.
    The rule and the code of the SDK's ``agents.memory.session._await_mutation`` (0.24)."""
    task = asyncio.ensure_future(awaitable)
    cancellation: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            if cancellation is None:
                cancellation = exc
    try:
        result = task.result()
    except BaseException:
        if cancellation is not None:
            raise cancellation from None
        raise
    if cancellation is not None:
        raise cancellation from None
    return result


# -- databases shared by the sessions on one file ------------------------------------------------


class _Database:
    """One opened :func:`runstore.aio.sqlite` container and the sessions using it; opened and
    closed on a loop thread of its own (a session may be made and closed outside any loop),
    while the sessions await its services on their own loops."""

    def __init__(self, key: tuple[str, ConnectionSettings | None]) -> None:
        from runstore import aio

        self.key = key
        self.users = 0
        self.pid = os.getpid()
        self._loop = LoopThread("runstore-openai-agents")
        self._scope: AbstractAsyncContextManager[AsyncContainer] = aio.build(
            aio.sqlite(key[0], key[1])
        )
        try:
            container = self._loop.run(self._scope.__aenter__())
        except BaseException:
            self._loop.stop()
            raise
        self.container = container
        self.agents: AsyncAgentStorage = container.get(aio.AGENT_STORAGE)

    def close(self) -> None:
        """Close the container (after the calls handed over ran) and end the loop thread;
        nothing in a forked child (they are the parent's)."""
        if os.getpid() != self.pid:
            return
        try:
            self._loop.run(self._scope.__aexit__(None, None, None))
        finally:
            self._loop.stop()


_databases: dict[tuple[str, ConnectionSettings | None], _Database] = {}
_databases_lock = threading.Lock()


def _forget_after_fork() -> None:
    """In a forked child: the parent's databases are not this process's to share (their
    threads stayed behind), so the child's new sessions open their own; a session made in
    the parent raises ``ConnectionUsedAfterFork`` when used here (its runner refuses)."""
    global _databases_lock
    _databases.clear()
    _databases_lock = threading.Lock()  # another thread may have held it at the fork


os.register_at_fork(after_in_child=_forget_after_fork)


def _acquire(path: str | os.PathLike[str], settings: ConnectionSettings | None) -> _Database:
    """The database of ``path`` for one more session (opened for the first; a database of
    its own for ``":memory:"``)."""
    name = os.fspath(path)
    if name == ":memory:":
        own = _Database((name, settings))
        own.users = 1
        return own
    key = (os.path.realpath(name), settings)
    with _databases_lock:
        database = _databases.get(key)
        if database is None:
            database = _databases[key] = _Database(key)
        database.users += 1
        return database


def _release(database: _Database) -> None:
    """One session less on ``database``; the last one closes it."""
    with _databases_lock:
        database.users -= 1
        if database.users:
            return
        if _databases.get(database.key) is database:
            del _databases[database.key]
    database.close()


# -- the session ---------------------------------------------------------------------------------


class RunstoreSession:
    """An Agents SDK ``Session`` on runstore's agents service (see the module doc).

    ``RunstoreSession(session_id, db_path)`` opens the SQLite database at ``db_path``
    (created and migrated when missing; ``":memory:"``, the default, as ``SQLiteSession``'s)
    with the connection ``settings`` given (:class:`~runstore.layers.ConnectionSettings`),
    shared with the other sessions on that file; :meth:`from_storage` uses a host's async
    agent storage. ``session_settings`` (a ``SessionSettings`` or its dict form) gives the
    default ``limit`` of :meth:`get_items`; ``project_id`` is the project of the thread the
    session makes, and the only project whose thread it uses: when ``session_id`` names a
    thread of another project, every call raises :class:`SessionStoreError` with a
    ``Conflict`` (``expected`` this project, ``actual`` the thread's) and changes nothing.

    The first session on a file opens it in the constructor, which waits until the
    database is open and migrated (as ``SQLiteSession``'s constructor makes its tables):
    make sessions of a new file before a latency-sensitive loop runs, or open the container
    yourself and use :meth:`from_storage`.

    Raises ``TypeError`` for settings the SDK refuses (an unknown key), as ``SQLiteSession``
    does, and :class:`~runstore.exceptions.DatabaseOpenError` for a file that cannot be
    opened or migrated.
    """

    session_id: str
    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        db_path: str | os.PathLike[str] = ":memory:",
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        project_id: str = DEFAULT_PROJECT,
        settings: ConnectionSettings | None = None,
    ) -> None:
        self._setup(session_id, session_settings, project_id)
        self._database: _Database | None = _acquire(db_path, settings)
        self._agents = self._database.agents

    @classmethod
    def from_storage(
        cls,
        session_id: str,
        agents: AsyncAgentStorage,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        project_id: str = DEFAULT_PROJECT,
    ) -> RunstoreSession:
        """A session on ``agents``, the async agent storage of a host's
        :class:`runstore.aio.AsyncContainer` (``container.get(aio.AGENT_STORAGE)``): the
        host opens and closes the container; :meth:`close` only closes the session."""
        session = cls.__new__(cls)
        session._setup(session_id, session_settings, project_id)
        session._database = None
        session._agents = agents
        return session

    def _setup(
        self,
        session_id: str,
        session_settings: SessionSettings | dict[str, Any] | None,
        project_id: str,
    ) -> None:
        self.session_id = session_id
        self.session_settings = (
            SessionSettings()
            if session_settings is None
            else coerce_session_settings(session_settings)
        )
        self.project_id = project_id
        self._ours = False  # the thread is known to be project_id's (a thread keeps its project)
        self._closed = False
        self._close_lock = threading.Lock()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(CLOSED_MESSAGE)

    async def _check_project(self) -> None:
        """Raise :class:`SessionStoreError` carrying a ``Conflict`` when the session's thread
        exists in another project than :attr:`project_id` (naming both); asked until the
        thread is found to be this project's, as :class:`RunstoreSaver` refuses a thread of
        another project."""
        if self._ours:
            return
        got = await self._agents.threads.get(self.session_id)
        if _is_missing(got):
            return
        project = _unwrap(got).project_id
        if project != self.project_id:
            raise SessionStoreError(Conflict(
                "session", self.session_id, "its agent thread belongs to another project",
                expected=self.project_id, actual=project,
            ))
        self._ours = True

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The newest ``limit`` items in chronological order (see the module doc for
        ``None``, 0 and negative limits); ``[]`` for a session that has none."""
        self._check_open()
        wanted = resolve_session_limit(limit, self.session_settings)
        if wanted == 0:
            return []
        await self._check_project()
        remaining = None if wanted is None or wanted < 0 else wanted
        pages: list[list[Any]] = []
        cursor: str | None = None
        while True:
            size = MAX_PAGE_SIZE if remaining is None else min(MAX_PAGE_SIZE, remaining)
            listed = await self._agents.messages.list(self.session_id, limit=size, cursor=cursor)
            if _is_missing(listed):
                return []
            page = _unwrap(listed)
            pages.append([message.content for message in page.items])
            if remaining is not None:
                remaining -= len(page.items)
            if not page.has_more or remaining == 0:
                break
            cursor = page.next_cursor
        return [item for items in reversed(pages) for item in items]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` in order, all or none; the session's thread is made by the first.

        Raises the ``TypeError`` of an item ``json.dumps`` cannot write, before anything is
        stored."""
        self._check_open()
        if not items:
            return
        messages = [
            NewMessage(role=_role(item), content=item) for item in json.loads(json.dumps(items))
        ]
        await self._check_project()
        await _await_mutation(self._add(messages))

    async def _add(self, messages: list[NewMessage]) -> None:
        appended = await self._agents.messages.append_many(self.session_id, messages)
        if _is_missing(appended):
            created = await self._agents.threads.create(self.session_id, project_id=self.project_id)
            self._ours = _unwrap(created).project_id == self.project_id
            appended = await self._agents.messages.append_many(self.session_id, messages)
        _unwrap(appended)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item; ``None`` when the session has none."""
        self._check_open()
        await self._check_project()
        popped = await _await_mutation(self._agents.messages.pop(self.session_id))
        if _is_missing(popped):
            return None
        message = _unwrap(popped)
        return None if message is None else cast("TResponseInputItem", message.content)

    async def clear_session(self) -> None:
        """Remove every item of the session (the thread stays; see the module doc)."""
        self._check_open()
        await self._check_project()
        cleared = await _await_mutation(self._agents.messages.clear(self.session_id))
        if not _is_missing(cleared):
            _unwrap(cleared)

    def close(self) -> None:
        """Close the session (sync, idempotent, from any thread); the last session on a file
        closes its database."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            database, self._database = self._database, None
        if database is not None:
            _release(database)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<RunstoreSession {self.session_id!r} ({state})>"

