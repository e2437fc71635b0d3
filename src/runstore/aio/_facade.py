"""The async façade: every async service method is one forwarded call to the runner.

``await store.begin_run(start)`` is ``await runner.call("write", lambda c:
c.get(DATA_STORE).begin_run(start))``: the sync service does the work, on the runner's
side, and its ``Result`` comes back unchanged. :data:`SERVICES` is the one table of what is
forwarded: per async service, its sync twin's tag, each method's :data:`Access` (``"read"``
may go to a reader connection, ``"write"`` goes to the writer) and its nested stores
(``AsyncAgentStorage.threads`` ...). A test holds the table to the async Protocols, which a
test holds to the sync ones.

Two methods are not plain forwards. ``AsyncSessionRepository.open`` checks the session on
the runner and returns an :class:`~runstore.aio.AsyncSessionStorage` bound to its id, whose
every call opens the session again on the container that runs it (a sync storage belongs to
one container, and a runner may run each call on another one); a session deleted meanwhile
answers each call with the ``NotFound`` of ``open``. ``AsyncSessionRepository.atomic`` runs
its sync function on the writer with the sync repository.

After the container closed, a call raises the runner's
:class:`~runstore.exceptions.ContainerClosed`, except on the session repository and its
storages, whose contract answers ``StorageFailure`` of kind ``closed`` (as the sync layers'
closed session stores do).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import attrs
from returns.result import Failure, Result

from runstore.aio import _tags
from runstore.aio._runner import Access, Runner
from runstore.exceptions import ContainerClosed
from runstore.layers import _tags as sync_tags
from runstore.layers._layer import Container, Tag

if TYPE_CHECKING:
    from runstore.services.errors import Busy, StorageFailure
    from runstore.services.sessions import SessionError, SessionRepository

__all__ = ["SERVICES", "Forward", "Service", "Shape", "facade"]

_SERVICES = "runstore.aio._services"

T = TypeVar("T")
E = TypeVar("E")


@attrs.frozen
class Shape:
    """What one async service forwards: each method's access, and its nested stores."""

    methods: Mapping[str, Access]
    stores: Mapping[str, Shape] = attrs.field(factory=dict)


@attrs.frozen
class Service:
    """An async service of the container: its key, its sync twin's tag and its shape."""

    key: Tag[Any]
    sync: Tag[Any]
    shape: Shape


def _methods(reads: str, writes: str) -> dict[str, Access]:
    table: dict[str, Access] = dict.fromkeys(writes.split(), "write")
    table.update(dict.fromkeys(reads.split(), "read"))
    return table


_DATA_STORE = Shape(_methods(
    "",
    "begin_run record_results record_collection_errors finish_run record_selection"
    " abort_stale_runs write_coverage prune_runs plan_prune write_test_coverage"
    " mark_quarantined record_fix_check",
))
_DATA_READER = Shape(_methods(
    "latest_run get_run list_runs projects tests test_detail failures classify flaky_tests"
    " history find_tests slowest coverage coverage_trend compare tests_for search_failures"
    " search_tests classify_unstable failure_signatures quarantined fix_checks known_tests"
    " run_cells",
    "",
))
_EXECUTIONS = Shape(_methods("get list", "create claim renew finish cancel"))
_ACTION_RUNS = Shape(_methods(
    "get list", "queue requeue start record_writeback record_effects finish"
))
_AGENTS = Shape({}, {
    "threads": Shape(_methods("get list", "create update delete")),
    "runs": Shape(_methods(
        "get get_many list", "queue start claim renew reclaim finish cancel"
    )),
    "messages": Shape(_methods("get list", "append append_many delete_by_run pop clear")),
    "checkpoints": Shape(_methods("latest for_run", "create")),
})
SESSION_STORAGE = Shape(_methods(
    "info summary leaf entry children path_to_root path_to_root_or_compaction entries"
    " build_context",
    "append append_many set_leaf move_to",
))
"""The methods of :class:`~runstore.aio.AsyncSessionStorage` (``session_id`` is an attribute)."""
_SESSIONS = Shape(_methods("get list search open", "create delete fork atomic"))
_HEALTH = Shape(_methods("readiness quick_check status check", ""))
_GRAPHS = Shape(_methods(
    "get list", "put put_writes delete_thread delete_for_runs copy_thread prune"
))

SERVICES: Mapping[str, Service] = {
    service.key.key: service
    for service in (
        Service(_tags.DATA_STORE, sync_tags.DATA_STORE, _DATA_STORE),
        Service(_tags.DATA_READER, sync_tags.DATA_READER, _DATA_READER),
        Service(_tags.EXECUTION_STORAGE, sync_tags.EXECUTION_STORAGE, _EXECUTIONS),
        Service(_tags.ACTION_RUN_STORAGE, sync_tags.ACTION_RUN_STORAGE, _ACTION_RUNS),
        Service(_tags.AGENT_STORAGE, sync_tags.AGENT_STORAGE, _AGENTS),
        Service(_tags.SESSION_REPOSITORY, sync_tags.SESSION_REPOSITORY, _SESSIONS),
        Service(_tags.DATABASE_HEALTH, sync_tags.DATABASE_HEALTH, _HEALTH),
        Service(_tags.GRAPH_CHECKPOINTS, sync_tags.GRAPH_CHECKPOINTS, _GRAPHS),
    )
}
"""Every async service, by the name of its key (an async Protocol's ``module.qualname``)."""


class Forward:
    """An async service whose methods forward to the sync service ``reach(container)``.

    Methods and nested stores are made on first access from the :class:`Shape` and kept;
    a name the shape lacks is an ``AttributeError``, as on the Protocol. ``protocol`` names
    the async Protocol served (``module.qualname``): a method carries its Protocol method's
    signature (without ``self``) and docstring, for ``help()`` and ``inspect.signature``.
    """

    on_repository: ClassVar[bool] = False
    """Whether ``reach`` gives the session repository (whose ``atomic`` units may call it)."""

    def __init__(
        self, runner: Runner, reach: Callable[[Container], Any], shape: Shape, protocol: str
    ) -> None:
        self._runner = runner
        self._reach = reach
        self._shape = shape
        self._protocol = protocol

    def apply(self, service: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call ``name`` on the sync ``service`` that ``reach`` gave (on the runner's side)."""
        return getattr(service, name)(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        shape = self.__dict__.get("_shape")
        if shape is None or name.startswith("_"):
            raise AttributeError(name)
        access = shape.methods.get(name)
        made: Any
        if access is not None:
            made = self._method(name, access)
        elif name in shape.stores:
            reach = self._reach
            store = inspect.signature(getattr(_protocol(self._protocol), name).fget)
            module = self._protocol.rpartition(".")[0]
            made = Forward(self._runner, lambda c: getattr(reach(c), name), shape.stores[name],
                           f"{module}.{store.return_annotation}")
        else:
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
        self.__dict__[name] = made
        return made

    def _method(self, name: str, access: Access) -> Callable[..., Any]:
        runner, reach, apply = self._runner, self._reach, self.apply
        call = _session_call if self.on_repository else _plain

        async def forward(*args: Any, **kwargs: Any) -> Any:
            return await call(runner, access, lambda c: apply(reach(c), name, args, kwargs), name)

        forward.__name__ = forward.__qualname__ = name
        template = getattr(_protocol(self._protocol), name)
        signature = inspect.signature(template)
        forward.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=tuple(signature.parameters.values())[1:]
        )
        forward.__doc__ = template.__doc__
        return forward

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *self._shape.methods, *self._shape.stores})

    def __repr__(self) -> str:
        return f"<async {type(self).__name__} over {self._runner!r}>"


def _protocol(name: str) -> Any:
    """The async Protocol class named ``name`` (``module.qualname``)."""
    module, _, qualname = name.rpartition(".")
    return getattr(importlib.import_module(module), qualname)


async def _plain(runner: Runner, access: Access, fn: Callable[[Container], T], _: str) -> T:
    return await runner.call(access, fn)


async def _session_call(
    runner: Runner, access: Access, fn: Callable[[Container], Any], operation: str
) -> Any:
    """``runner.call`` for the session services: a closed container's ``ContainerClosed``
    becomes ``Failure(StorageFailure(kind=closed))`` of ``operation``, as their contract
    says."""
    from runstore.services.errors import StorageFailure, StorageFailureKind

    try:
        return await runner.call(access, fn)
    except ContainerClosed:
        return Failure(StorageFailure(
            operation, StorageFailureKind.CLOSED, 0, "the session store was closed", "sessions"
        ))


class SessionStorageForward(Forward):
    """:class:`~runstore.aio.AsyncSessionStorage` of one session: each call opens it again
    on the container that runs it (see the module doc)."""

    on_repository = True

    def __init__(self, runner: Runner, reach: Callable[[Container], Any], session_id: str) -> None:
        super().__init__(runner, reach, SESSION_STORAGE, f"{_SERVICES}.AsyncSessionStorage")
        self._session_id = session_id

    @property
    def session_id(self) -> str:
        """The id of the session, as the sync storage's ``session_id``."""
        return self._session_id

    def apply(self, service: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        repository: SessionRepository = service
        opened: Result[Any, Any] = repository.open(self._session_id)
        return opened.bind(lambda storage: getattr(storage, name)(*args, **kwargs))


class SessionRepositoryForward(Forward):
    """:class:`~runstore.aio.AsyncSessionRepository`: forwards, with ``open`` and ``atomic``
    as the module doc says."""

    on_repository = True

    async def open(self, session_id: str) -> Result[Any, SessionError]:
        """Open ``session_id`` as an :class:`~runstore.aio.AsyncSessionStorage`; the
        failures of the sync ``open`` (``NotFound``, ``InvalidInput``, ``Busy``,
        ``StorageFailure``)."""
        reach = self._reach
        opened: Result[Any, SessionError] = await _session_call(
            self._runner, "read", lambda c: reach(c).open(session_id), "open session"
        )
        return opened.map(lambda _: SessionStorageForward(self._runner, reach, session_id))

    async def atomic(
        self, operation: str, fn: Callable[[SessionRepository], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        """Run ``fn(sync_repository)`` as one unit of work on the writer (see
        :meth:`runstore.aio.AsyncSessionRepository.atomic`)."""
        reach = self._reach

        def unit(c: Container) -> Result[T, E | Busy | StorageFailure]:
            repository: SessionRepository = reach(c)
            return repository.atomic(operation, lambda: fn(repository))

        answer: Result[T, E | Busy | StorageFailure] = await _session_call(
            self._runner, "write", unit, operation
        )
        return answer


def facade(service: Service, runner: Runner) -> Any:
    """The async service ``service`` over ``runner``."""
    tag = service.sync

    def reach(c: Container) -> Any:
        return c.get(tag)

    kind = SessionRepositoryForward if service.key == _tags.SESSION_REPOSITORY else Forward
    return kind(runner, reach, service.shape, service.key.key)
