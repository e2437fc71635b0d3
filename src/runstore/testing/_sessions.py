"""The contract every sessions layer must meet, shipped for third parties.

- **Strategies** (:func:`sessions_json_values`, :func:`entry_payloads`) for the payloads of
  every entry type of the pi session format, unknown types included.
- **The state machine** (:class:`SessionsMachine`, bound to a layer by
  :func:`sessions_state_machine`): a hypothesis ``RuleBasedStateMachine`` that grows random
  trees (appends, batches, ``leaf`` entries, leaf moves with and without a branch summary,
  compactions with and without a retained tail or with a first kept entry off the path,
  forks into another cwd, sessions created at equal and earlier times, deletes, appends
  that fail half way inside one unit of work) on the layer under test and on the in-memory
  layer (the model), compares the whole ``Result`` of every call, and after every step
  compares every session's record and summary and checks that sequence numbers are dense.
- **The contract class** (:class:`SessionsContract`): pytest example tests of the
  documented semantics plus the state machine. Subclass it and say how to make the layer::

      class TestSqliteSessions(SessionsContract):
          def make_layer(self) -> Layer:
              return sqlite(":memory:")

  or override the ``layer_factory`` fixture when the factory needs other fixtures
  (``tmp_path`` for a file). The factory is called once per test and once per hypothesis
  example; it must return a layer providing ``SessionRepository`` on a fresh, empty store.
  The contract puts its own ``FixedClock`` on top.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, ClassVar, TypeVar

import attrs
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from returns.result import Failure, Result, Success

from runstore.layers import CLOCK, Layer, build, in_memory_database, merge
from runstore.layers._sessions_memory import in_memory_sessions
from runstore.services.clock import FixedClock
from runstore.services.errors import (
    Conflict,
    InvalidInput,
    NotFound,
    StorageFailure,
    StorageFailureKind,
)
from runstore.services.pagination import Page
from runstore.services.sessions import (
    BadReference,
    BranchMove,
    BranchSummaryEntry,
    CompactionEntry,
    DuplicateEntry,
    Entry,
    LeafEntry,
    ModelRef,
    NewEntry,
    NewSession,
    SessionError,
    SessionRecord,
    SessionRepository,
    SessionStorage,
)
from runstore.testing._shared import LayerFactory

__all__ = [
    "ENTRY_TYPES",
    "T0_MS",
    "SessionsContract",
    "SessionsContractViolation",
    "SessionsMachine",
    "entry_payloads",
    "sessions_json_values",
    "sessions_model_layer",
    "sessions_state_machine",
]

T = TypeVar("T")

T0_MS = 1_764_500_000_000
"""The contract clock's start (2025-11-30T10:53:20Z), epoch ms."""


ENTRY_TYPES = (
    "message",
    "thinking_level_change",
    "model_change",
    "compaction",
    "branch_summary",
    "custom",
    "custom_message",
    "label",
    "session_info",
    "leaf",
)
"""The entry types of the format (version 3, and the harness's ``leaf`` moves of seed 004)."""


class SessionsContractViolation(AssertionError):
    """The layer under test and the model disagreed (or an invariant failed)."""


def sessions_model_layer() -> Layer:
    """The model: the in-memory sessions layer on its own unit of work."""
    return merge(in_memory_database(), in_memory_sessions())


# -- strategies ----------------------------------------------------------------------------------

_texts = st.text(max_size=12)


def sessions_json_values(max_leaves: int = 8) -> st.SearchStrategy[Any]:
    """JSON values as the format stores them: null, booleans, integers, finite floats, any
    Unicode text, lists and objects (string keys), nested."""
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**63), max_value=2**63 - 1)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(st.characters(exclude_categories=["Cs"]), max_size=10)
    )
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.text(st.characters(exclude_categories=["Cs"]), max_size=5), inner, max_size=3
            )
        ),
        max_leaves=max_leaves,
    )


_PROVIDERS = st.sampled_from(
    [("anthropic", "claude-sonnet-4-5"), ("openai", "gpt-5"), ("google", "gemini")]
)
_LEVELS = st.sampled_from(["off", "low", "medium", "high"])


def _usage() -> st.SearchStrategy[dict[str, Any]]:
    tokens = st.integers(min_value=0, max_value=200_000)
    cost = st.integers(min_value=0, max_value=10**6).map(lambda n: n / 1_000_000) | st.integers(
        0, 3
    )
    return st.fixed_dictionaries(
        {"input": tokens, "output": tokens, "cacheRead": tokens, "cacheWrite": tokens},
        optional={"cost": st.fixed_dictionaries({"total": cost}), "totalTokens": tokens},
    )


def _message() -> st.SearchStrategy[dict[str, Any]]:
    text = st.text(max_size=20)
    blocks = st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": text}), max_size=2)
    user = st.fixed_dictionaries({"role": st.just("user"), "content": text | blocks})
    assistant = st.builds(
        lambda model, content, usage: {
            "role": "assistant",
            "content": content,
            "provider": model[0],
            "model": model[1],
            "usage": usage,
            "stopReason": "stop",
        },
        _PROVIDERS,
        blocks,
        _usage(),
    )
    tool = st.fixed_dictionaries(
        {
            "role": st.just("toolResult"),
            "toolCallId": text,
            "content": blocks,
            "isError": st.booleans(),
        }
    )
    bash = st.fixed_dictionaries(
        {
            "role": st.just("bashExecution"),
            "command": text,
            "output": text,
            "exitCode": st.integers(0, 2),
        }
    )
    other = st.fixed_dictionaries(
        {"role": st.sampled_from(["custom", "hookMessage"]), "content": text}
    )
    return user | assistant | tool | bash | other


def entry_payloads(
    entry_type: str, ancestors: Sequence[str] = (), targets: Sequence[str] = ()
) -> st.SearchStrategy[dict[str, Any]]:
    """Valid payloads of ``entry_type``; ``ancestors`` are the ids a compaction may keep from,
    ``targets`` those a label may name (unknown types get any JSON object)."""
    text = st.text(max_size=20)
    usage: st.SearchStrategy[dict[str, Any]] = st.just({}) | _usage().map(lambda u: {"usage": u})
    target = st.sampled_from(list(targets)) if targets else st.just("nowhere")
    if entry_type == "message":
        return _message().map(lambda m: {"message": m})
    if entry_type == "thinking_level_change":
        return _LEVELS.map(lambda level: {"thinkingLevel": level})
    if entry_type == "model_change":
        return _PROVIDERS.map(lambda m: {"provider": m[0], "modelId": m[1]})
    if entry_type == "compaction":
        kept = st.sampled_from(list(ancestors)) if ancestors else st.just("nowhere")
        tail: st.SearchStrategy[dict[str, Any]] = st.just({}) | st.lists(
            _message(), max_size=2
        ).map(lambda t: {"retainedTail": t})
        return st.builds(
            lambda s, k, n, u, t, omit: {
                "summary": s,
                **({} if omit and t else {"firstKeptEntryId": k}),
                "tokensBefore": n,
                **u,
                **t,
            },
            text,
            kept,
            st.integers(0, 10**6),
            usage,
            tail,
            st.booleans(),
        )
    if entry_type == "leaf":
        return (st.none() | target).map(lambda t: {"targetId": t})
    if entry_type == "branch_summary":
        return st.builds(lambda s, f, u: {"summary": s, "fromId": f, **u}, text, target, usage)
    if entry_type == "custom":
        return st.fixed_dictionaries(
            {"customType": text}, optional={"data": sessions_json_values()}
        )
    if entry_type == "custom_message":
        return st.fixed_dictionaries(
            {"customType": text, "content": text, "display": st.booleans()},
            optional={"details": sessions_json_values()},
        )
    if entry_type == "label":
        return st.fixed_dictionaries({"targetId": target, "label": st.none() | st.just("") | text})
    if entry_type == "session_info":
        return st.fixed_dictionaries({}, optional={"name": st.none() | text})
    return st.dictionaries(
        st.text(max_size=6).filter(lambda k: k not in ("type", "id", "parentId", "timestamp")),
        sessions_json_values(),
        max_size=3,
    )


_BAD_PAYLOADS: dict[str, dict[str, Any]] = {
    "message": {"message": {"content": "no role"}},
    "model_change": {"provider": "p"},
    "thinking_level_change": {"thinkingLevel": 3},
    "label": {"label": "no target"},
    "custom": {"customType": "x", "id": "envelope"},
    "compaction": {"summary": "s", "firstKeptEntryId": "x", "tokensBefore": "many"},
    "leaf": {"targetId": 7},
}


def _timestamps() -> st.SearchStrategy[datetime | int]:
    ms = st.integers(min_value=0, max_value=4_000_000_000_000)
    return ms | ms.map(lambda m: datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=m))


# -- the state machine ---------------------------------------------------------------------------


def _same(what: str, got: Result[Any, Any], want: Result[Any, Any]) -> None:
    if got != want:
        raise SessionsContractViolation(f"{what}: the layer returned {got!r}, the model {want!r}")


@attrs.define
class _Side:
    repo: SessionRepository
    clock: FixedClock


class SessionsMachine(RuleBasedStateMachine):
    """Random session trees on the layer under test and on the model, compared call by call."""

    layer_factory: ClassVar[Callable[[], Layer]]
    model_factory: ClassVar[Callable[[], Layer]] = staticmethod(sessions_model_layer)

    SESSION_IDS: ClassVar[tuple[str, ...]] = ("s-a", "s-b", "s-c", "s-d", "s-e")
    CWDS: ClassVar[tuple[str, ...]] = ("/work", "/tmp/x", "")

    def __init__(self) -> None:
        super().__init__()
        self._stack = ExitStack()
        self.subject = self._side(type(self).layer_factory)
        self.model = self._side(type(self).model_factory)
        self.entry_ids: dict[str, list[str]] = {}
        self.counter = 0

    def _side(self, factory: Callable[[], Layer]) -> _Side:
        clock = FixedClock(T0_MS)
        container = self._stack.enter_context(build(merge(factory(), Layer.value(CLOCK, clock))))
        return _Side(container.get(SessionRepository), clock)

    def teardown(self) -> None:
        self._stack.close()

    # -- helpers ---------------------------------------------------------------------------------

    def both(
        self, what: str, call: Callable[[SessionRepository], Result[T, Any]]
    ) -> Result[T, Any]:
        """Make ``call`` on both sides, insist on equal Results, return the model's."""
        want = call(self.model.repo)
        got = call(self.subject.repo)
        _same(what, got, want)
        return want

    def on_storage(
        self, what: str, session_id: str, call: Callable[[SessionStorage], Result[T, Any]]
    ) -> Result[T, Any]:
        def run(repo: SessionRepository) -> Result[T, Any]:
            opened = repo.open(session_id)
            if isinstance(opened, Failure):
                return opened
            return call(opened.unwrap())

        return self.both(what, run)

    def fresh_id(self) -> str:
        self.counter += 1
        return f"e{self.counter:04d}"

    def sessions(self) -> list[str]:
        return sorted(self.entry_ids)

    def refresh(self, session_id: str) -> None:
        """Re-read the ids of a session's entries from the model."""
        opened = self.model.repo.open(session_id)
        if isinstance(opened, Failure):
            self.entry_ids.pop(session_id, None)
            return
        ids: list[str] = []
        after = 0
        storage = opened.unwrap()
        while True:
            page = storage.entries(after_seq=after, limit=1000).unwrap()
            ids.extend(e.id for e in page.items)
            if not page.has_more:
                break
            after = page.items[-1].seq
        self.entry_ids[session_id] = ids

    def ancestors(self, session_id: str, entry_id: str | None) -> list[str]:
        if entry_id is None:
            return []
        opened = self.model.repo.open(session_id).unwrap()
        path = opened.path_to_root(entry_id)
        return [e.id for e in path.unwrap()] if isinstance(path, Success) else []

    def draw_entry(
        self, data: st.DataObject, session_id: str, parent: str | None, ids: Sequence[str]
    ) -> NewEntry:
        """A valid entry (usually) or, one time in eight, one that some rule refuses."""
        entry_type = data.draw(st.sampled_from([*ENTRY_TYPES, "x-future-type"]), label="type")
        known = list(ids)
        ancestors = (
            [*self.ancestors(session_id, parent)]
            if parent in self.entry_ids.get(session_id, [])
            else []
        )
        if parent is not None and parent not in ancestors and parent in known:
            ancestors.append(parent)
        payload = data.draw(
            entry_payloads(entry_type, ancestors, known or ["nowhere"]), label="payload"
        )
        entry_id = self.fresh_id()
        fault = data.draw(st.integers(0, 7), label="fault") == 0
        if fault:
            kind = data.draw(
                st.sampled_from(["duplicate", "parent", "shape", "time", "kept"]), label="kind"
            )
            if kind == "duplicate" and known:
                entry_id = data.draw(st.sampled_from(known))
            elif kind == "parent":
                parent = "missing-parent"
            elif kind == "shape":
                entry_type = data.draw(st.sampled_from(sorted(_BAD_PAYLOADS)))
                payload = _BAD_PAYLOADS[entry_type]
            elif kind == "time":
                return NewEntry(
                    id=entry_id,
                    parent_id=parent,
                    type=entry_type,
                    payload=payload,
                    timestamp=datetime(2025, 1, 1),
                )  # naive: refused
            elif kind == "kept" and known:
                entry_type = "compaction"
                payload = {
                    "summary": "s",
                    "firstKeptEntryId": data.draw(st.sampled_from(known)),
                    "tokensBefore": 1,
                }
        timestamp = data.draw(_timestamps(), label="timestamp")
        return NewEntry(
            id=entry_id, parent_id=parent, type=entry_type, timestamp=timestamp, payload=payload
        )

    def pick_session(self, data: st.DataObject) -> str:
        known = self.sessions()
        return data.draw(
            st.sampled_from([*known, "s-missing"]) if known else st.just("s-missing"),
            label="session",
        )

    def pick_entry(
        self, data: st.DataObject, session_id: str, *, allow_none: bool = True
    ) -> str | None:
        ids = self.entry_ids.get(session_id, [])
        choices: list[str | None] = [*ids, "missing-entry"]
        if allow_none:
            choices.append(None)
        return data.draw(st.sampled_from(choices), label="entry")

    # -- rules -----------------------------------------------------------------------------------

    @initialize()
    def start(self) -> None:
        got = self.both(
            "create", lambda r: r.create(NewSession(id="s-a", cwd="/work", metadata={"k": 1}))
        )
        if isinstance(got, Success):
            self.entry_ids["s-a"] = []

    @rule(
        session_id=st.sampled_from(SESSION_IDS),
        cwd=st.sampled_from(CWDS),
        metadata=st.dictionaries(st.text(max_size=4), sessions_json_values(4), max_size=2),
        parent=st.none() | st.just("elsewhere.jsonl"),
        created=st.none() | st.sampled_from([T0_MS - 5_000, T0_MS, T0_MS + 5_000]),
    )
    def create(
        self,
        session_id: str,
        cwd: str,
        metadata: dict[str, Any],
        parent: str | None,
        created: int | None,
    ) -> None:
        new = NewSession(
            id=session_id, cwd=cwd, metadata=metadata, parent_session=parent, created=created
        )
        if isinstance(self.both("create", lambda r: r.create(new)), Success):
            self.entry_ids[session_id] = []

    @rule(data=st.data())
    def append(self, data: st.DataObject) -> None:
        session_id = self.pick_session(data)
        ids = self.entry_ids.get(session_id, [])
        leaf = self.leaf(session_id)
        parent = data.draw(
            st.sampled_from([leaf, *ids, None]) if ids else st.just(None), label="parent"
        )
        entry = self.draw_entry(data, session_id, parent, ids)
        if isinstance(self.on_storage("append", session_id, lambda s: s.append(entry)), Success):
            self.entry_ids[session_id].append(entry.id)

    @rule(data=st.data())
    def append_as_pi_loads(self, data: st.DataObject) -> None:
        """A compaction whose first kept entry may be off its path, stored as pi keeps it."""
        session_id = self.pick_session(data)
        ids = self.entry_ids.get(session_id, [])
        parent = self.leaf(session_id)
        kept = data.draw(st.sampled_from([*ids, "nowhere"]), label="kept")
        entry = NewEntry.compaction(self.fresh_id(), parent, "s", kept, 9, timestamp=T0_MS)
        got = self.on_storage(
            "append_many(strict_compactions=False)",
            session_id,
            lambda s: s.append_many([entry], strict_compactions=False),
        )
        if isinstance(got, Success):
            self.entry_ids[session_id].append(entry.id)

    @rule(data=st.data(), size=st.integers(1, 6), fail_at_end=st.booleans())
    def append_batch(self, data: st.DataObject, size: int, fail_at_end: bool) -> None:
        session_id = self.pick_session(data)
        ids = list(self.entry_ids.get(session_id, []))
        parent = self.leaf(session_id)
        batch: list[NewEntry] = []
        for _ in range(size):
            entry = self.draw_entry(data, session_id, parent, ids)
            batch.append(entry)
            ids.append(entry.id)
            parent = data.draw(st.sampled_from([entry.id, parent]), label="next parent")
        if fail_at_end and batch:
            batch.append(attrs.evolve(batch[0], parent_id="missing-parent", id=self.fresh_id()))
        got = self.on_storage("append_many", session_id, lambda s: s.append_many(batch))
        if isinstance(got, Success):
            self.entry_ids[session_id].extend(entry.id for entry in batch)

    @rule(data=st.data(), size=st.integers(1, 4))
    def append_then_fail_in_one_unit(self, data: st.DataObject, size: int) -> None:
        """Valid appends, then one refused append, in one unit of work: nothing may stay."""
        session_id = self.pick_session(data)
        ids = list(self.entry_ids.get(session_id, []))
        parent = self.leaf(session_id)
        batch: list[NewEntry] = []
        for _ in range(size):
            entry = attrs.evolve(self.draw_entry(data, session_id, parent, ids), timestamp=T0_MS)
            if entry.id in ids or entry.parent_id == "missing-parent":
                continue
            batch.append(entry)
            ids.append(entry.id)
            parent = entry.id
        duplicate = ids[0] if ids else "missing-parent"
        bad = NewEntry.custom(duplicate, "missing-parent", "late", timestamp=T0_MS)

        def unit(storage: SessionStorage) -> Result[Entry, SessionError]:
            return storage.append_many(batch).bind(lambda _: storage.append(bad))

        def run(repo: SessionRepository) -> Result[Entry, Any]:
            opened = repo.open(session_id)
            if isinstance(opened, Failure):
                return opened
            storage = opened.unwrap()
            return repo.atomic("append then fail", lambda: unit(storage))

        got = self.both("append then fail in one unit", run)
        if isinstance(got, Success):  # pragma: no cover - the last append is always refused
            raise SessionsContractViolation("an append that must fail succeeded")

    @rule(data=st.data())
    def set_leaf(self, data: st.DataObject) -> None:
        session_id = self.pick_session(data)
        target = self.pick_entry(data, session_id)
        moved = self.on_storage("set_leaf", session_id, lambda s: s.set_leaf(target))
        if isinstance(moved, Success):
            self.refresh(session_id)

    @rule(data=st.data(), summary=st.text(max_size=8), give_id=st.booleans())
    def move_to(self, data: st.DataObject, summary: str, give_id: bool) -> None:
        session_id = self.pick_session(data)
        target = self.pick_entry(data, session_id)
        ids = self.entry_ids.get(session_id, [])
        wanted = (
            data.draw(st.sampled_from([self.fresh_id(), *ids]), label="summary id")
            if give_id
            else None
        )
        move = BranchMove(summary=summary, id=wanted, usage={"input": 2, "output": 1})
        got = self.on_storage("move_to", session_id, lambda s: s.move_to(target, move))
        if isinstance(got, Success):
            self.refresh(session_id)

    @rule(
        data=st.data(),
        new_id=st.sampled_from(SESSION_IDS),
        metadata=st.none() | st.just({"forked": True}),
    )
    def fork(self, data: st.DataObject, new_id: str, metadata: dict[str, Any] | None) -> None:
        source = self.pick_session(data)
        at_entry = self.pick_entry(data, source)
        cwd = data.draw(st.none() | st.sampled_from(self.CWDS), label="cwd")
        got = self.both(
            "fork",
            lambda r: r.fork(
                source, at_entry=at_entry, session_id=new_id, metadata=metadata, cwd=cwd
            ),
        )
        if isinstance(got, Success):
            self.refresh(new_id)

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        session_id = self.pick_session(data)
        self.both("delete", lambda r: r.delete(session_id))
        self.entry_ids.pop(session_id, None)

    @rule(ms=st.integers(0, 10_000))
    def tick(self, ms: int) -> None:
        self.subject.clock.advance(ms)
        self.model.clock.advance(ms)

    # -- queries ---------------------------------------------------------------------------------

    @rule(data=st.data())
    def read_tree(self, data: st.DataObject) -> None:
        session_id = self.pick_session(data)
        entry_id = self.pick_entry(data, session_id, allow_none=False) or "missing-entry"
        self.on_storage("entry", session_id, lambda s: s.entry(entry_id))
        self.on_storage("children", session_id, lambda s: s.children(entry_id))
        self.on_storage("roots", session_id, lambda s: s.children(None))
        self.on_storage("path_to_root", session_id, lambda s: s.path_to_root(entry_id))
        self.on_storage(
            "path_to_root_or_compaction",
            session_id,
            lambda s: s.path_to_root_or_compaction(entry_id),
        )

    @rule(data=st.data())
    def build_context(self, data: st.DataObject) -> None:
        session_id = self.pick_session(data)
        leaf = self.pick_entry(data, session_id)
        self.on_storage("build_context", session_id, lambda s: s.build_context(leaf))

    @rule(data=st.data(), after=st.integers(-1, 12), limit=st.integers(0, 5))
    def page_entries(self, data: st.DataObject, after: int, limit: int) -> None:
        session_id = self.pick_session(data)
        self.on_storage("entries", session_id, lambda s: s.entries(after_seq=after, limit=limit))

    @rule(cwd=st.none() | st.sampled_from(CWDS), limit=st.integers(1, 3))
    def list_sessions(self, cwd: str | None, limit: int) -> None:
        cursor: str | None = None
        for _ in range(10):
            page = self.both("list", self._lister(cwd, limit, cursor))
            if isinstance(page, Failure) or not page.unwrap().has_more:
                return
            cursor = page.unwrap().next_cursor

    @staticmethod
    def _lister(
        cwd: str | None, limit: int, cursor: str | None
    ) -> Callable[[SessionRepository], Result[Page[SessionRecord], SessionError]]:
        return lambda repo: repo.list(cwd=cwd, limit=limit, cursor=cursor)

    # -- invariants ------------------------------------------------------------------------------

    def leaf(self, session_id: str) -> str | None:
        got = self.model.repo.get(session_id)
        return got.unwrap().leaf_id if isinstance(got, Success) else None

    @invariant()
    def records_agree_and_seqs_are_dense(self) -> None:
        for session_id in (*self.SESSION_IDS, "s-missing"):
            want = self.both(f"get {session_id}", self._getter(session_id))
            if isinstance(want, Success):
                count = want.unwrap().summary.entry_count
                ids = self.entry_ids.get(session_id)
                if ids is not None and len(ids) != count:
                    raise SessionsContractViolation(
                        f"{session_id}: {len(ids)} entries appended, the summary counts {count}"
                    )
                # The newest entry has seq == count and nothing follows it.
                self.on_storage(f"tail of {session_id}", session_id, _tail(max(count - 1, 0)))

    @staticmethod
    def _getter(
        session_id: str,
    ) -> Callable[[SessionRepository], Result[SessionRecord, SessionError]]:
        return lambda repo: repo.get(session_id)


def _tail(after: int) -> Callable[[SessionStorage], Result[Page[Entry], SessionError]]:
    return lambda storage: storage.entries(after_seq=after, limit=2)


def sessions_state_machine(
    layer_factory: LayerFactory, model_factory: LayerFactory = sessions_model_layer
) -> type[SessionsMachine]:
    """Return a :class:`SessionsMachine` subclass bound to ``layer_factory``.

    Run it with ``hypothesis.stateful.run_state_machine_as_test(machine, settings=...)``; a
    disagreement raises :class:`SessionsContractViolation`.
    """

    class BoundSessionsMachine(SessionsMachine):
        pass

    BoundSessionsMachine.layer_factory = staticmethod(layer_factory)
    BoundSessionsMachine.model_factory = staticmethod(model_factory)
    return BoundSessionsMachine


# -- the contract class --------------------------------------------------------------------------


@attrs.frozen
class Sessions:
    """The repository under test and the clock it reads."""

    repo: SessionRepository
    clock: FixedClock

    def new(self, session_id: str = "s1", **fields: Any) -> SessionStorage:
        """Create a session and open it."""
        self.repo.create(NewSession(id=session_id, **fields)).unwrap()
        storage: SessionStorage = self.repo.open(session_id).unwrap()
        return storage


def _msg(
    entry_id: str, parent: str | None, role: str = "user", text: str = "hi", **extra: Any
) -> NewEntry:
    message: dict[str, Any] = {"role": role, "content": [{"type": "text", "text": text}], **extra}
    return NewEntry.message(entry_id, parent, message, timestamp=T0_MS)


def _assistant(
    entry_id: str,
    parent: str | None,
    usage: dict[str, Any],
    model: tuple[str, str] = ("anthropic", "claude-sonnet-4-5"),
) -> NewEntry:
    return _msg(entry_id, parent, "assistant", "ok", provider=model[0], model=model[1], usage=usage)


def _refused_field(result: Result[Any, Any]) -> str:
    """The field an ``InvalidInput`` failure names (fails the test on anything else)."""
    refusal = result.failure() if isinstance(result, Failure) else result
    assert isinstance(refusal, InvalidInput), refusal
    return refusal.field


def _ids(entries: Result[Sequence[Entry], Any]) -> list[str]:
    return [e.id for e in entries.unwrap()]


class SessionsContract:
    """What every sessions layer must do; subclass and define :meth:`make_layer`."""

    state_machine_settings: ClassVar[settings] = settings(
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        stateful_step_count=25,
    )

    def make_layer(self) -> Layer:
        """Return a fresh layer providing ``SessionRepository`` (override this, or the fixture)."""
        raise NotImplementedError("subclass SessionsContract and define make_layer")

    @pytest.fixture
    def layer_factory(self) -> LayerFactory:
        """The factory under test (``make_layer`` unless a subclass overrides this fixture)."""
        return self.make_layer

    @pytest.fixture
    def sessions(self, layer_factory: LayerFactory) -> Iterator[Sessions]:
        """The built layer under test with the contract's clock (starting at ``T0_MS``)."""
        clock = FixedClock(T0_MS)
        with build(merge(layer_factory(), Layer.value(CLOCK, clock))) as container:
            yield Sessions(container.get(SessionRepository), clock)

    # -- the model -------------------------------------------------------------------------------

    def test_state_machine_agrees_with_the_model(self, layer_factory: LayerFactory) -> None:
        run_state_machine_as_test(
            sessions_state_machine(layer_factory), settings=self.state_machine_settings
        )

    # -- sessions --------------------------------------------------------------------------------

    def test_create_get_and_conflict(self, sessions: Sessions) -> None:
        made = sessions.repo.create(NewSession(id="s1", cwd="/w", metadata={"profile": "reviewer"}))
        record = made.unwrap()
        assert (record.id, record.cwd, record.created_ms, record.leaf_id) == (
            "s1",
            "/w",
            T0_MS,
            None,
        )
        assert record.metadata == {"profile": "reviewer"}
        assert record.summary.entry_count == 0
        assert sessions.repo.get("s1") == made
        again = sessions.repo.create(NewSession(id="s1"))
        assert isinstance(again.failure(), Conflict)
        assert sessions.repo.get("nope") == Failure(NotFound("session", "nope"))
        assert sessions.repo.open("nope") == Failure(NotFound("session", "nope"))

    def test_create_refuses_bad_input(self, sessions: Sessions) -> None:
        for new in (
            NewSession(id=""),
            NewSession(id="x" * 257),
            NewSession(id="s", metadata={"bad": float("nan")}),
            NewSession(id="s", created=datetime(2025, 1, 1)),
            NewSession(id="s", cwd="\ud800"),
        ):
            assert isinstance(sessions.repo.create(new).failure(), InvalidInput), new
        assert sessions.repo.list().unwrap().items == ()

    def test_list_is_newest_first_with_cwd_filter_and_cursor(self, sessions: Sessions) -> None:
        for n in range(5):
            sessions.repo.create(NewSession(id=f"s{n}", cwd="/a" if n % 2 else "/b")).unwrap()
        first = sessions.repo.list(limit=2).unwrap()
        assert [r.id for r in first.items] == ["s4", "s3"]
        assert first.has_more
        assert first.next_cursor is not None
        second = sessions.repo.list(limit=2, cursor=first.next_cursor).unwrap()
        assert [r.id for r in second.items] == ["s2", "s1"]
        third = sessions.repo.list(limit=2, cursor=second.next_cursor).unwrap()
        assert ([r.id for r in third.items], third.has_more, third.next_cursor) == (
            ["s0"],
            False,
            None,
        )
        assert [r.id for r in sessions.repo.list(cwd="/a").unwrap().items] == ["s3", "s1"]
        assert isinstance(sessions.repo.list(limit=0).failure(), InvalidInput)
        assert isinstance(sessions.repo.list(cursor="garbage").failure(), InvalidInput)

    def test_delete_removes_everything_in_one_unit(self, sessions: Sessions) -> None:
        storage = sessions.new("s1")
        storage.append_many(
            [_msg("a", None), _msg("b", "a"), NewEntry.label("c", "b", "a", "x", timestamp=1)]
        )
        assert sessions.repo.delete("s1") == Success(3)
        assert sessions.repo.get("s1") == Failure(NotFound("session", "s1"))
        assert storage.entry("a") == Failure(NotFound("session", "s1"))
        assert sessions.repo.delete("s1") == Failure(NotFound("session", "s1"))
        again = sessions.new("s1")
        assert again.info().unwrap().summary.entry_count == 0
        assert again.append(_msg("a", None)).unwrap().seq == 1

    # -- entries ---------------------------------------------------------------------------------

    def test_append_numbers_densely_and_moves_the_leaf(self, sessions: Sessions) -> None:
        storage = sessions.new()
        first = storage.append(_msg("a", None)).unwrap()
        second = storage.append(_msg("b", "a")).unwrap()
        assert (first.seq, second.seq) == (1, 2)
        assert storage.leaf() == Success("b")
        third = storage.append(_msg("c", "a")).unwrap()
        assert third.seq == 3
        assert third.parent_id == "a"
        assert storage.leaf() == Success("c")
        assert storage.entry("b") == Success(second)

    def test_duplicate_id_and_unknown_parent_change_nothing(self, sessions: Sessions) -> None:
        storage = sessions.new()
        storage.append_many(
            [_msg("a", None), _assistant("b", "a", {"input": 5, "output": 1})]
        ).unwrap()
        before = storage.info().unwrap()
        assert storage.append(_msg("a", "b")) == Failure(DuplicateEntry("s1", "a", 0))
        assert storage.append(_msg("z", "nope")) == Failure(
            BadReference("s1", "z", "parentId", "nope", 0)
        )
        refused = storage.append_many(
            [_msg("c", "b"), _assistant("d", "c", {"input": 9}), _msg("c", "d")]
        )
        assert refused == Failure(DuplicateEntry("s1", "c", 2))
        assert storage.info() == Success(before)
        assert storage.entry("c") == Failure(NotFound("entry", "c"))
        assert storage.append(_msg("c", "b")).unwrap().seq == 3

    def test_invalid_entries_are_refused_with_their_field(self, sessions: Sessions) -> None:
        storage = sessions.new()
        naive = NewEntry(
            id="a",
            parent_id=None,
            type="custom",
            timestamp=datetime(2025, 1, 1),
            payload={"customType": "x"},
        )
        refused = storage.append(naive).failure()
        assert isinstance(refused, InvalidInput)
        assert (refused.field, refused.reason.startswith("naive datetime")) == ("timestamp", True)
        cases = [
            NewEntry(
                id="", parent_id=None, type="custom", timestamp=1, payload={"customType": "x"}
            ),
            NewEntry(id="a", parent_id=None, type="session", timestamp=1),
            NewEntry(
                id="a", parent_id=None, type="model_change", timestamp=1, payload={"provider": "p"}
            ),
            NewEntry(
                id="a",
                parent_id=None,
                type="custom",
                timestamp=1,
                payload={"customType": "x", "id": "y"},
            ),
            NewEntry(
                id="a", parent_id=None, type="custom", timestamp=1, payload={"customType": "\ud800"}
            ),
            NewEntry(id="a", parent_id=None, type="x", timestamp=True, payload={}),
        ]
        for case in cases:
            assert isinstance(storage.append(case).failure(), InvalidInput), case
        batch = storage.append_many([_msg("a", None), cases[2]])
        refusal = batch.failure()
        assert isinstance(refusal, InvalidInput)
        assert refusal.field.startswith("entries[1].")
        assert storage.info().unwrap().summary.entry_count == 0

    def test_times_outside_epoch_milliseconds_are_refused(self, sessions: Sessions) -> None:
        """Epoch ms run from 0 (1970) to the end of year 9999; an integer beyond 64 bits
        is no time a store could keep. Every layer refuses them alike and writes nothing."""
        storage = sessions.new()
        for ms in (-1, 253_402_300_800_000, 2**63, 2**70):
            refused = storage.append(NewEntry.custom("a", None, "x", timestamp=ms)).failure()
            assert isinstance(refused, InvalidInput), ms
            assert refused.field == "timestamp"
            created = sessions.repo.create(NewSession(id="t", created=ms)).failure()
            assert isinstance(created, InvalidInput), ms
            assert created.field == "created"
        assert storage.info().unwrap().summary.entry_count == 0
        assert [r.id for r in sessions.repo.list().unwrap().items] == ["s1"]
        assert storage.append(NewEntry.custom("a", None, "x", timestamp=0)).unwrap().seq == 1

    def test_values_json_cannot_hold_exactly_are_refused_by_path(self, sessions: Sessions) -> None:
        """A tuple, a NaN or a non-text key would not read back equal: refused, its path
        named, in payloads and in metadata."""
        storage = sessions.new()
        for data, path in (
            ((1, 2), "payload['data']"),
            ({"k": [float("nan")]}, "payload['data']['k'][0]"),
            ({1: "one"}, "payload['data']"),
        ):
            refused = storage.append(NewEntry.custom("a", None, "x", data, timestamp=1))
            assert _refused_field(refused) == path, data
        made = sessions.repo.create(NewSession(id="t", metadata={"tags": ("a",)}))
        assert _refused_field(made) == "metadata['tags']"
        forked = sessions.repo.fork("s1", session_id="f", metadata={"n": float("inf")})
        assert _refused_field(forked) == "metadata['n']"
        assert storage.info().unwrap().summary.entry_count == 0
        assert [r.id for r in sessions.repo.list().unwrap().items] == ["s1"]

    def test_list_refuses_edited_and_foreign_cursors(self, sessions: Sessions) -> None:
        for n in range(3):
            sessions.repo.create(NewSession(id=f"s{n}")).unwrap()
        cursor = sessions.repo.list(limit=1).unwrap().next_cursor
        assert cursor is not None
        edited = cursor[:-1] + ("1" if cursor[-1] != "1" else "2")
        for bad in (edited, cursor + "0", "s3", "sessions.1.3"):
            assert _refused_field(sessions.repo.list(limit=1, cursor=bad)) == "cursor", bad

    def test_unknown_types_are_kept(self, sessions: Sessions) -> None:
        storage = sessions.new()
        new = NewEntry(
            id="a", parent_id=None, type="x-later", timestamp=5, payload={"k": [1, {"v": None}]}
        )
        entry = storage.append(new).unwrap()
        assert (entry.type, dict(entry.payload)) == ("x-later", {"k": [1, {"v": None}]})
        assert storage.entry("a") == Success(entry)

    def test_set_leaf_is_stored_and_checked(self, sessions: Sessions) -> None:
        storage = sessions.new()
        storage.append_many([_msg("a", None), _msg("b", "a")]).unwrap()
        assert storage.set_leaf("a") == Success("a")
        assert sessions.repo.get("s1").unwrap().leaf_id == "a"
        assert storage.set_leaf("nope") == Failure(NotFound("entry", "nope"))
        assert storage.leaf() == Success("a")
        assert storage.set_leaf(None) == Success(None)
        assert storage.build_context().unwrap().messages == ()

    def test_tree_queries(self, sessions: Sessions) -> None:
        storage = sessions.new()
        storage.append_many(
            [
                _msg("a", None),
                _msg("b", "a"),
                _msg("c", "b"),
                NewEntry.compaction("k", "c", "summary", "b", 100, timestamp=T0_MS),
                _msg("d", "k"),
                _msg("x", "a"),
                _msg("r2", None),
            ]
        ).unwrap()
        assert _ids(storage.children("a")) == ["b", "x"]
        assert _ids(storage.children(None)) == ["a", "r2"]
        assert storage.children("nope") == Failure(NotFound("entry", "nope"))
        assert _ids(storage.path_to_root("d")) == ["a", "b", "c", "k", "d"]
        assert _ids(storage.path_to_root_or_compaction("d")) == ["b", "c", "k", "d"]
        assert _ids(storage.path_to_root_or_compaction("x")) == ["a", "x"]
        assert storage.path_to_root("nope") == Failure(NotFound("entry", "nope"))
        page = storage.entries(after_seq=2, limit=3).unwrap()
        assert ([e.seq for e in page.items], page.has_more, page.next_cursor) == (
            [3, 4, 5],
            True,
            "5",
        )
        rest = storage.entries(after_seq=5, limit=10).unwrap()
        assert ([e.seq for e in rest.items], rest.has_more) == ([6, 7], False)
        assert isinstance(storage.entries(after_seq=-1).failure(), InvalidInput)
        assert isinstance(storage.entries(limit=0).failure(), InvalidInput)

    def test_compaction_must_keep_an_ancestor(self, sessions: Sessions) -> None:
        storage = sessions.new()
        storage.append_many([_msg("a", None), _msg("b", "a"), _msg("x", "a")]).unwrap()
        late = NewEntry.compaction("k", "b", "s", "x", 1, timestamp=T0_MS)
        assert storage.append(late) == Failure(BadReference("s1", "k", "firstKeptEntryId", "x", 0))
        assert (
            storage.append(NewEntry.compaction("k", "b", "s", "b", 1, timestamp=T0_MS)).unwrap().seq
            == 4
        )

    # -- summary and context ---------------------------------------------------------------------

    def test_summary_follows_the_format_backend(self, sessions: Sessions) -> None:
        """The numbers of seed 004's summary test: usage of assistant messages, compactions
        and branch summaries; name trimmed; the latest model and thinking level; labels."""
        storage = sessions.new()
        usage = {
            "input": 100,
            "output": 25,
            "cacheRead": 40,
            "cacheWrite": 10,
            "totalTokens": 175,
            "cost": {"total": 0.37},
        }
        storage.append_many(
            [
                _msg("u", None),
                NewEntry.thinking_level_change("t", "u", "high", timestamp=T0_MS),
                NewEntry.model_change("m", "t", "anthropic", "claude-sonnet-4-5", timestamp=T0_MS),
                _assistant("a", "m", usage),
                NewEntry(
                    id="c",
                    parent_id="a",
                    type="compaction",
                    timestamp=T0_MS,
                    payload={
                        "summary": "summary",
                        "firstKeptEntryId": "u",
                        "tokensBefore": 200,
                        "usage": {
                            "input": 1,
                            "output": 2,
                            "cacheRead": 3,
                            "cacheWrite": 4,
                            "cost": {"total": 0.1},
                        },
                    },
                ),
                NewEntry(
                    id="b",
                    parent_id="u",
                    type="branch_summary",
                    timestamp=T0_MS,
                    payload={
                        "summary": "branch summary",
                        "fromId": "c",
                        "usage": {
                            "input": 5,
                            "output": 6,
                            "cacheRead": 7,
                            "cacheWrite": 8,
                            "cost": {"total": 0.26},
                        },
                    },
                ),
                NewEntry.session_info("n", "b", "  My Session ", timestamp=T0_MS),
                NewEntry.label("l", "n", "u", "checkpoint", timestamp=T0_MS),
            ]
        ).unwrap()
        summary = storage.summary().unwrap()
        assert (summary.name, summary.message_count, summary.entry_count) == ("My Session", 2, 8)
        assert (summary.cached_tokens, summary.uncached_tokens, summary.total_tokens) == (
            50,
            128,
            211,
        )
        assert summary.cost == Decimal("0.73")
        assert (summary.model, summary.thinking_level) == (
            ModelRef("anthropic", "claude-sonnet-4-5"),
            "high",
        )
        assert summary.labels == {"u": "checkpoint"}
        storage.append(NewEntry.label("l2", "l", "u", None, timestamp=T0_MS)).unwrap()
        assert storage.summary().unwrap().labels == {}

    def test_context_follows_compaction_and_branch_rules(self, sessions: Sessions) -> None:
        storage = sessions.new()
        storage.append_many(
            [
                _msg("e1", None),
                _assistant("e2", "e1", {}),
                _msg("e3", "e2", "toolResult"),
                _assistant("e4", "e3", {}),
                NewEntry.thinking_level_change("e5", "e4", "high", timestamp=T0_MS),
                _msg("e6", "e5"),
                _assistant("e7", "e6", {}),
                NewEntry.compaction("e8", "e7", "compacted", "e6", 1200, timestamp=T0_MS),
                _msg("e9", "e8"),
                _assistant("e10", "e9", {}),
                NewEntry.branch_summary("e11", "e4", "e10", "left it", timestamp=T0_MS),
                NewEntry.model_change("e12", "e11", "openai", "gpt-5", timestamp=T0_MS),
                _msg("e13", "e12"),
                _assistant("e14", "e13", {}, ("openai", "gpt-5")),
                NewEntry.label("e15", "e14", "e13", "idea", timestamp=T0_MS),
                NewEntry.session_info("e16", "e15", "name", timestamp=T0_MS),
                NewEntry.custom("e17", "e16", "state", {"x": 1}, timestamp=T0_MS),
                NewEntry.custom_message("e18", "e17", "reminder", "run the tests", timestamp=T0_MS),
            ]
        ).unwrap()
        at_leaf = storage.build_context().unwrap()
        assert [m.entry_id for m in at_leaf.messages] == [
            "e1",
            "e2",
            "e3",
            "e4",
            "e11",
            "e13",
            "e14",
            "e18",
        ]
        assert [m.role for m in at_leaf.messages][-4:] == [
            "branchSummary",
            "user",
            "assistant",
            "custom",
        ]
        assert (at_leaf.model, at_leaf.thinking_level) == (ModelRef("openai", "gpt-5"), "off")
        compacted = storage.build_context("e10").unwrap()
        assert [m.entry_id for m in compacted.messages] == ["e8", "e6", "e7", "e9", "e10"]
        assert compacted.messages[0].message["role"] == "compactionSummary"
        assert compacted.messages[0].message["tokensBefore"] == 1200
        assert (compacted.model, compacted.thinking_level) == (
            ModelRef("anthropic", "claude-sonnet-4-5"),
            "high",
        )
        assert storage.build_context("nope") == Failure(NotFound("entry", "nope"))

    # -- fork and units --------------------------------------------------------------------------

    def test_fork_copies_the_path_in_one_unit(self, sessions: Sessions) -> None:
        storage = sessions.new(cwd="/w", metadata={"profile": "reviewer"})
        storage.append_many(
            [_msg("a", None), _assistant("b", "a", {"input": 3}), _msg("x", "a")]
        ).unwrap()
        sessions.clock.advance(10)
        fork = sessions.repo.fork("s1", at_entry="b", session_id="s2").unwrap()
        assert (fork.parent_session, fork.cwd, fork.metadata, fork.leaf_id) == (
            "s1",
            "/w",
            {"profile": "reviewer"},
            "b",
        )
        assert fork.created_ms == T0_MS + 10
        assert (fork.summary.entry_count, fork.summary.uncached_tokens) == (2, 3)
        copied = sessions.repo.open("s2").unwrap()
        assert [(e.id, e.seq) for e in copied.entries().unwrap().items] == [("a", 1), ("b", 2)]
        other = sessions.repo.fork("s1", session_id="s3", metadata={"profile": "writer"}).unwrap()
        assert (other.leaf_id, other.metadata) == ("x", {"profile": "writer"})
        assert isinstance(sessions.repo.fork("s1", session_id="s2").failure(), Conflict)
        assert sessions.repo.fork("s1", at_entry="nope", session_id="s4") == Failure(
            NotFound("entry", "nope")
        )
        assert sessions.repo.fork("nope", session_id="s4") == Failure(NotFound("session", "nope"))
        assert sessions.repo.get("s4") == Failure(NotFound("session", "s4"))
        empty = sessions.new("s5")
        assert sessions.repo.fork("s5", session_id="s6").unwrap().summary.entry_count == 0
        assert empty.leaf() == Success(None)

    def test_atomic_undoes_every_call_inside(self, sessions: Sessions) -> None:
        storage = sessions.new()
        storage.append(_msg("a", None)).unwrap()
        before = storage.info().unwrap()

        def unit() -> Result[Entry, SessionError]:
            return (
                storage.append_many([_msg("b", "a"), _assistant("c", "b", {"input": 7})])
                .bind(lambda _: storage.set_leaf("a"))
                .bind(lambda _: storage.append(_msg("a", None)))
            )

        assert sessions.repo.atomic("t", unit) == Failure(DuplicateEntry("s1", "a", 0))
        assert storage.info() == Success(before)
        assert storage.entry("b") == Failure(NotFound("entry", "b"))
        assert storage.append(_msg("b", "a")).unwrap().seq == 2

    # -- the pi harness's additions (seed 004) ---------------------------------------------------

    def test_a_compaction_with_a_retained_tail_stops_the_walk(self, sessions: Sessions) -> None:
        """Seed 004: a compaction keeping its own tail needs nothing before it; the walk
        stops there and the context is its summary, its tail, then what follows."""
        storage = sessions.new()
        tail = [{"role": "user", "content": "kept"}, {"role": "assistant", "content": "ok"}]
        storage.append_many(
            [
                _msg("a", None),
                NewEntry.thinking_level_change("t", "a", "high", timestamp=T0_MS),
                _msg("b", "t"),
                NewEntry.compaction("k", "b", "sum", None, 50, timestamp=T0_MS, retained_tail=tail),
                _msg("c", "k"),
                NewEntry.compaction("k2", "c", "again", "c", 60, timestamp=T0_MS),
                _msg("d", "k2"),
            ]
        ).unwrap()
        assert _ids(storage.path_to_root_or_compaction("c")) == ["k", "c"]
        assert _ids(storage.path_to_root_or_compaction("k")) == ["k"]
        assert _ids(storage.path_to_root_or_compaction("d")) == ["c", "k2", "d"]
        assert _ids(storage.path_to_root("c")) == ["a", "t", "b", "k", "c"]
        context = storage.build_context("c").unwrap()
        assert [(m.entry_id, m.role) for m in context.messages] == [
            ("k", "compactionSummary"),
            ("k", "user"),
            ("k", "assistant"),
            ("c", "user"),
        ]
        assert context.thinking_level == "high"  # the state over the whole path
        compacted = storage.entry("k").unwrap()
        assert isinstance(compacted, CompactionEntry)
        assert (compacted.first_kept_entry_id, len(compacted.retained_tail or ())) == (None, 2)
        bad = NewEntry.compaction("k3", "d", "s", None, 1, timestamp=T0_MS)
        assert _refused_field(storage.append(bad)) == "payload.firstKeptEntryId"
        odd = attrs.evolve(bad, payload={**bad.payload, "retainedTail": [{"content": "x"}]})
        assert _refused_field(storage.append(odd)) == "payload.retainedTail[0]"

    def test_leaf_moves_are_entries_of_the_log(self, sessions: Sessions) -> None:
        """Seed 004's setLeafId: a move appends a ``leaf`` entry (parent the old leaf,
        ``targetId`` the new one); an appended ``leaf`` entry moves the leaf to its target."""
        storage = sessions.new()
        storage.append_many([_msg("a", None), _msg("b", "a")]).unwrap()
        sessions.clock.advance(7)
        assert storage.set_leaf("a") == Success("a")
        moved = storage.entries(after_seq=2).unwrap().items
        assert [(e.id, e.type, e.parent_id, e.seq, e.timestamp_ms) for e in moved] == [
            ("leaf-3", "leaf", "b", 3, T0_MS + 7)
        ]
        assert isinstance(moved[0], LeafEntry)
        assert moved[0].target_id == "a"
        assert storage.info().unwrap().summary.entry_count == 3
        assert storage.set_leaf("nope") == Failure(NotFound("entry", "nope"))
        assert storage.info().unwrap().summary.entry_count == 3
        assert storage.set_leaf(None) == Success(None)
        assert storage.leaf() == Success(None)
        assert storage.append(NewEntry.leaf("l", None, "b", timestamp=T0_MS)).unwrap().seq == 5
        assert storage.leaf() == Success("b")  # its target, not the leaf entry
        assert [m.entry_id for m in storage.build_context().unwrap().messages] == ["a", "b"]
        assert storage.append(NewEntry.leaf("m", "b", "zz", timestamp=T0_MS)) == Failure(
            BadReference("s1", "m", "targetId", "zz", 0)
        )
        assert storage.append(NewEntry.leaf("leaf-6", "b", "a", timestamp=T0_MS)).unwrap()
        assert storage.set_leaf("b").unwrap() == "b"  # leaf-7 was free; ids never clash
        assert storage.entries(after_seq=6).unwrap().items[0].id == "leaf-7"

    def test_move_to_writes_the_move_and_its_summary_in_one_unit(self, sessions: Sessions) -> None:
        """Seed 004's moveTo(target, {summary, usage}): the leaf move and a branch summary
        under the target, counted in the summary; a refused summary writes neither."""
        storage = sessions.new()
        storage.append_many([_msg("a", None), _msg("b", "a")]).unwrap()
        usage = {"input": 5, "output": 6, "cacheRead": 7, "cacheWrite": 8, "cost": {"total": 0.26}}
        made = storage.move_to("a", BranchMove(summary="left b", usage=usage)).unwrap()
        assert isinstance(made, BranchSummaryEntry)
        assert (made.id, made.parent_id, made.from_id, made.seq) == ("summary-4", "a", "a", 4)
        assert storage.leaf() == Success("summary-4")
        summary = storage.summary().unwrap()
        assert (summary.entry_count, summary.total_tokens, summary.output_tokens) == (4, 26, 6)
        context = storage.build_context().unwrap()
        assert [(m.entry_id, m.role) for m in context.messages] == [
            ("a", "user"),
            ("summary-4", "branchSummary"),
        ]
        before = storage.info().unwrap()
        taken = storage.move_to("b", BranchMove(summary="x", id="a"))
        assert taken == Failure(DuplicateEntry("s1", "a", 1))
        assert storage.info() == Success(before)  # not even the leaf entry stayed
        assert _refused_field(storage.move_to("b", BranchMove(summary=3))) == "summary.summary"  # type: ignore[arg-type]
        assert storage.info() == Success(before)
        assert (
            storage.move_to(None, BranchMove(summary="from the top"))
            .unwrap()
            .payload[  # type: ignore[union-attr]
                "fromId"
            ]
            == "root"
        )
        assert storage.move_to("b") == Success(None)
        assert storage.leaf() == Success("b")

    def test_list_is_newest_first_by_creation_time(self, sessions: Sessions) -> None:
        for session_id, created in (
            ("old", T0_MS - 9),
            ("new", T0_MS + 9),
            ("mid", T0_MS),
            ("mid2", T0_MS),
        ):
            sessions.repo.create(NewSession(id=session_id, created=created)).unwrap()
        listed = [r.id for r in sessions.repo.list().unwrap().items]
        assert listed == ["new", "mid2", "mid", "old"]  # equal times: created later first
        first = sessions.repo.list(limit=3).unwrap()
        rest = sessions.repo.list(limit=3, cursor=first.next_cursor).unwrap()
        assert [r.id for r in (*first.items, *rest.items)] == listed

    def test_fork_can_set_the_cwd(self, sessions: Sessions) -> None:
        storage = sessions.new(cwd="/w")
        storage.append(_msg("a", None)).unwrap()
        fork = sessions.repo.fork("s1", session_id="s2", cwd="/elsewhere").unwrap()
        assert (fork.cwd, fork.parent_session, fork.leaf_id) == ("/elsewhere", "s1", "a")
        assert [r.id for r in sessions.repo.list(cwd="/elsewhere").unwrap().items] == ["s2"]
        assert _refused_field(sessions.repo.fork("s1", session_id="s3", cwd="\ud800")) == "cwd"
        assert sessions.repo.get("s3") == Failure(NotFound("session", "s3"))

    def test_a_first_kept_entry_off_the_path_is_kept_as_pi_keeps_it(
        self, sessions: Sessions
    ) -> None:
        """With ``strict_compactions=False`` such a compaction is stored; pi's walk looks for
        its first kept entry, never meets it and goes on to the root, and its context keeps
        nothing from before it."""
        storage = sessions.new()
        storage.append_many([_msg("a", None), _msg("b", "a"), _msg("x", "a")]).unwrap()
        odd = NewEntry.compaction("k", "b", "s", "x", 1, timestamp=T0_MS)
        assert storage.append_many([odd]) == Failure(
            BadReference("s1", "k", "firstKeptEntryId", "x", 0)
        )
        assert storage.append_many([odd, _msg("c", "k")], strict_compactions=False) == Success(2)
        assert _ids(storage.path_to_root_or_compaction("c")) == ["a", "b", "k", "c"]
        context = storage.build_context("c").unwrap()
        assert [m.entry_id for m in context.messages] == ["k", "c"]

    def test_nul_in_ids_and_bodies_is_text_like_any_other(self, sessions: Sessions) -> None:
        """NUL (U+0000) may stand anywhere in an id or a body: a compaction whose summary,
        retained tail or first kept entry id holds it is walked and read back as given, and
        the walk stops at the entry that id names exactly, never at one whose id differs
        there (a space, U+FDD0, the six characters of the JSON escape ``\\u0000``)."""
        storage = sessions.new()
        nul, slash = "b\x00", "b\\u0000"
        tail = [{"role": "user", "content": "kept\x00"}]
        compacted_tail = NewEntry.compaction(
            "k2", "c", "\x00", None, 6, timestamp=T0_MS, retained_tail=tail
        )
        storage.append_many(
            [
                _msg("a", None, text="a\x00"),
                _msg(nul, "a"),
                _msg("b ", nul),
                _msg("b\ufdd00", "b "),
                _msg("b\ufdd0", "b\ufdd00"),
                _msg(slash, "b\ufdd0"),
                NewEntry.compaction("k", slash, "sum\x00\ufdd0\\", nul, 5, timestamp=T0_MS),
                _msg("c", "k", text="\\\x00"),
                compacted_tail,
                _msg("d\x00", "k2"),
                NewEntry.compaction("k3", slash, "t", slash, 7, timestamp=T0_MS),
                _msg("f", "k3"),
            ]
        ).unwrap()
        kept = [nul, "b ", "b\ufdd00", "b\ufdd0", slash]
        assert _ids(storage.path_to_root_or_compaction("c")) == [*kept, "k", "c"]
        context = storage.build_context("c").unwrap()
        assert [m.entry_id for m in context.messages] == ["k", *kept, "c"]
        assert context.messages[0].message["summary"] == "sum\x00\ufdd0\\"
        assert context.messages[-1].message["content"] == [{"type": "text", "text": "\\\x00"}]
        assert _ids(storage.path_to_root_or_compaction("d\x00")) == ["k2", "d\x00"]
        tailed = storage.build_context("d\x00").unwrap()
        assert [(m.entry_id, m.message.get("content")) for m in tailed.messages][:2] == [
            ("k2", None),
            ("k2", "kept\x00"),
        ]
        assert tailed.messages[0].message["summary"] == "\x00"
        assert _ids(storage.path_to_root_or_compaction("f")) == [slash, "k3", "f"]
        compacted = storage.entry("k").unwrap()
        assert isinstance(compacted, CompactionEntry)
        assert (compacted.summary, compacted.first_kept_entry_id) == ("sum\x00\ufdd0\\", nul)

    def test_raw_text_may_spell_a_first_kept_entry_id_with_escapes(
        self, sessions: Sessions
    ) -> None:
        """An importer's line is stored as it came: a first kept entry id it spells with
        JSON escapes (``\\u0000``, ``\\uFDD0`` in either case) names the entry whose id is
        the decoded text, as it does when runstore serializes the payload itself."""
        storage = sessions.new()
        storage.append_many(
            [_msg("a", None), _msg("b\ufdd0", "a"), _msg("n\x00", "b\ufdd0")]
        ).unwrap()
        spelled = [
            ("b\ufdd0", r"b\uFDD0"),
            ("b\ufdd0", r"\u0062\ufdd0"),
            ("b\ufdd0", r"b\uFdD0"),
            ("n\x00", r"n\u0000"),
        ]
        for n, (kept, spelling) in enumerate(spelled):
            entry = NewEntry.compaction(f"k{n}", "n\x00", "s", kept, 1, timestamp=T0_MS)
            raw = (
                f'{{"type": "compaction", "id": "k{n}", "summary": "s",'
                f' "firstKeptEntryId": "{spelling}", "tokensBefore": 1}}'
            )
            storage.append(attrs.evolve(entry, raw=raw)).unwrap()
            assert _ids(storage.path_to_root_or_compaction(entry.id))[0] == kept, spelling

    def test_a_closed_store_answers_with_a_typed_failure(self, layer_factory: LayerFactory) -> None:
        with build(merge(layer_factory(), Layer.value(CLOCK, FixedClock(T0_MS)))) as container:
            repo = container.get(SessionRepository)
            repo.create(NewSession(id="s1")).unwrap()
            storage = repo.open("s1").unwrap()
        calls: list[Callable[[], Result[Any, SessionError]]] = [
            lambda: repo.get("s1"),
            lambda: repo.list(),
            lambda: repo.create(NewSession(id="s2")),
            lambda: storage.append(_msg("a", None)),
            lambda: storage.set_leaf(None),
            lambda: storage.build_context(),
            lambda: repo.atomic("t", lambda: Success(1)),
        ]
        for call in calls:
            refused = call()
            assert isinstance(refused, Failure), refused
            failure = refused.failure()
            assert isinstance(failure, StorageFailure), failure
            assert failure.kind is StorageFailureKind.CLOSED
