"""Tree-shaped agent sessions: the transcripts of a coding agent, kept as trees of entries.

The model is the session format of the pi coding agent (JSONL files, format version 3; seed
004 is its SQLite backend). Two services:

- :class:`SessionRepository`: the sessions of a store. ``create``, ``get``, ``list`` (newest
  first), ``open`` (returns a :class:`SessionStorage`), ``delete`` and ``fork``.
- :class:`SessionStorage`: one session. ``append`` / ``append_many`` add immutable entries,
  ``set_leaf`` and ``move_to`` move the active leaf (a ``leaf`` entry in the log), and the
  tree is read with ``entry``, ``children``, ``path_to_root``, ``path_to_root_or_compaction``,
  ``entries`` and ``build_context``.

Rules shared by every layer:

- An entry has an ``id`` unique in its session (chosen by the caller, any non-empty text up to
  :data:`MAX_ID_CHARS` characters), a ``parent_id`` that names an entry already in the
  session (or ``None`` for a root), a ``seq`` from the session's counter (dense: 1, 2, 3, ...,
  in append order), a ``type``, a timestamp (epoch ms UTC at rest) and a JSON ``payload``:
  every field of the format's entry except the envelope ``type``, ``id``, ``parentId`` and
  ``timestamp``. Entries of unknown types are kept as :class:`UnknownEntry`.
- Appending moves the active leaf to the new entry, except a ``leaf`` entry (the pi agent's
  harness writes one for every leaf move), which moves it to its ``targetId``: an entry of
  the session or None (``BadReference`` otherwise). ``set_leaf`` and ``move_to`` append such
  an entry, so every leaf move is in the log, numbered like any entry.
- A compaction's ``firstKeptEntryId`` must name an ancestor of the compaction (its parent or
  one of the parent's ancestors), unless the batch is appended with
  ``strict_compactions=False`` (the pi agent itself accepts any id there; an importer keeps
  such files as they are). A compaction with a ``retainedTail`` (a list of messages, seed
  004) carries the messages it keeps itself and may omit ``firstKeptEntryId``.
- The path walk (``path_to_root_or_compaction``, ``build_context``) is seed 004's
  ``getPathToRootOrCompaction``: from the entry towards the root, it stops at a compaction
  with a ``retainedTail`` (included), or else at the first kept entry of the newest
  compaction passed (included), or at the root when that entry is not on the path.
- The :class:`SessionSummary` of a session is updated in the same unit of work as the append
  (see :func:`fold_summary` for its counting rules).
- The checks of a write happen in this order, identically in every layer: arguments
  (``InvalidInput``), existence of the session (``NotFound``), then, entry by entry, the
  entry's own shape (``InvalidInput``), its id (``DuplicateEntry``), its references
  (``BadReference``). A failed write changes nothing: rows, counters, summary, caches and the
  leaf stay exactly as they were.

Every method returns a ``Result`` whose failure is one :data:`SessionError`. The rules
themselves (validators, the tree decisions, the summary fold, the context) live once, in
:mod:`runstore.services._sessions_rules`, shared by every layer; their public names are
served from here too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    NewType,
    Protocol,
    TypeAlias,
    TypeVar,
    runtime_checkable,
)

import attrs
from returns.result import Result

from runstore.services.errors import (
    Busy,
    Conflict,
    InvalidInput,
    NotFound,
    StorageFailure,
)
from runstore.services.pagination import Page
from runstore.services.search import EntryHit

if TYPE_CHECKING:  # served by __getattr__ below at run time
    from runstore.services._sessions_rules import (
        SummaryBuilder,
        ValidEntry,
        as_result,
        assemble_context,
        dump_json,
        empty_summary,
        fold_summary,
        iso_from_ms,
        make_entry,
        ms_from_iso,
        new_session_fields,
        next_state,
        payload_from_body,
        to_epoch_ms,
        validate_entry,
        validate_json_object,
        validate_session_id,
    )

__all__ = [
    "DEFAULT_THINKING_LEVEL",
    "ENVELOPE_KEYS",
    "MAX_ID_CHARS",
    "ROOT_STATE",
    "BadReference",
    "BranchMove",
    "BranchSummaryEntry",
    "CompactionEntry",
    "ContextMessage",
    "CustomEntry",
    "CustomMessageEntry",
    "DuplicateEntry",
    "Entry",
    "EntryId",
    "EntryState",
    "EntryType",
    "LabelEntry",
    "LeafEntry",
    "MessageEntry",
    "ModelChangeEntry",
    "ModelRef",
    "NewEntry",
    "NewSession",
    "SessionContext",
    "SessionError",
    "SessionId",
    "SessionInfoEntry",
    "SessionRecord",
    "SessionRepository",
    "SessionStorage",
    "SessionSummary",
    "SummaryBuilder",
    "ThinkingLevelChangeEntry",
    "UnknownEntry",
    "ValidEntry",
    "as_result",
    "assemble_context",
    "dump_json",
    "empty_summary",
    "fold_summary",
    "iso_from_ms",
    "make_entry",
    "ms_from_iso",
    "new_session_fields",
    "next_state",
    "payload_from_body",
    "to_epoch_ms",
    "validate_entry",
    "validate_json_object",
    "validate_session_id",
]

T = TypeVar("T")
E = TypeVar("E")

SessionId = NewType("SessionId", str)
"""Identifies one session in a store (the ``id`` of the format's ``session`` header)."""

EntryId = NewType("EntryId", str)
"""Identifies one entry within its session."""

MAX_ID_CHARS = 256
"""Longest session or entry id (characters)."""

DEFAULT_THINKING_LEVEL = "off"
"""The thinking level before any ``thinking_level_change`` (the format's default)."""

ENVELOPE_KEYS = frozenset({"type", "id", "parentId", "timestamp"})
"""Keys of a JSONL entry that are columns, not payload."""


class EntryType(StrEnum):
    """The entry types of the format (version 3). Any other type is kept as unknown."""

    MESSAGE = "message"
    THINKING_LEVEL_CHANGE = "thinking_level_change"
    MODEL_CHANGE = "model_change"
    COMPACTION = "compaction"
    BRANCH_SUMMARY = "branch_summary"
    CUSTOM = "custom"
    CUSTOM_MESSAGE = "custom_message"
    LABEL = "label"
    SESSION_INFO = "session_info"
    LEAF = "leaf"


# -- errors --------------------------------------------------------------------------------------


@attrs.frozen
class DuplicateEntry:
    """``entry_id`` is already in session ``session_id`` (entries are immutable).

    ``position`` is the index of the refused entry in the ``append_many`` batch (0 for
    ``append``). Nothing was written.
    """

    session_id: str
    entry_id: str
    position: int = 0

    def __str__(self) -> str:
        return f"entry {self.entry_id!r} already exists in session {self.session_id!r}"


@attrs.frozen
class BadReference:
    """Entry ``entry_id`` refers through ``field`` to ``target_id``, which is not allowed.

    ``field`` is ``parentId`` or ``targetId`` (a ``leaf`` entry's; no such entry in the
    session) or ``firstKeptEntryId`` (not an ancestor of the compaction). ``position`` is the
    index in the ``append_many`` batch. Nothing was written.
    """

    session_id: str
    entry_id: str
    field: str
    target_id: str
    position: int = 0

    def __str__(self) -> str:
        if self.field in ("parentId", "targetId"):
            what = "parent" if self.field == "parentId" else "leaf target"
            return (
                f"entry {self.entry_id!r}: {what} {self.target_id!r} is not in "
                f"session {self.session_id!r}"
            )
        return (
            f"entry {self.entry_id!r}: {self.field} {self.target_id!r} is not an ancestor "
            f"in session {self.session_id!r}"
        )


SessionError: TypeAlias = (
    NotFound | Conflict | InvalidInput | DuplicateEntry | BadReference | Busy | StorageFailure
)
"""Every failure a sessions service returns.

- ``NotFound("session", id)`` / ``NotFound("entry", id)``: no such session or entry.
- ``Conflict("session", id, ...)``: a session with that id exists already.
- ``InvalidInput(field, reason)``: a malformed argument; nothing written.
- ``DuplicateEntry`` / ``BadReference``: a tree rule refused an entry; nothing written.
- ``Busy`` / ``StorageFailure``: the store could not do it; nothing written. A call on a
  repository (or a storage opened from it) whose container was closed returns
  ``StorageFailure`` of kind ``closed``, in every layer.
"""


# -- records -------------------------------------------------------------------------------------


@attrs.frozen
class ModelRef:
    """A model as the format names it: ``provider`` and ``model_id`` (``anthropic``,
    ``claude-sonnet-4-5``)."""

    provider: str
    model_id: str

    def __str__(self) -> str:
        return f"{self.provider}/{self.model_id}"


@attrs.frozen(kw_only=True)
class _EntryBase:
    """Fields every stored entry has. ``payload`` is the format's entry without the envelope."""

    id: EntryId
    parent_id: EntryId | None
    seq: int
    timestamp_ms: int
    payload: Mapping[str, Any] = attrs.field(eq=True, hash=False)


@attrs.frozen(kw_only=True)
class MessageEntry(_EntryBase):
    """A message (``payload["message"]``): user, assistant (with usage), tool result, bash
    execution, custom, branch summary or compaction summary message."""

    type: ClassVar[str] = EntryType.MESSAGE.value

    @property
    def message(self) -> Mapping[str, Any]:
        """The message object (``role``, ``content``, ...)."""
        message: Mapping[str, Any] = self.payload["message"]
        return message

    @property
    def role(self) -> str:
        """The message's role (``user``, ``assistant``, ``toolResult``, ``bashExecution``, ...)."""
        return str(self.message["role"])


@attrs.frozen(kw_only=True)
class ThinkingLevelChangeEntry(_EntryBase):
    """The thinking level changed (``off``, ``low``, ``medium``, ``high``, ...)."""

    type: ClassVar[str] = EntryType.THINKING_LEVEL_CHANGE.value

    @property
    def thinking_level(self) -> str:
        """The new thinking level."""
        return str(self.payload["thinkingLevel"])


@attrs.frozen(kw_only=True)
class ModelChangeEntry(_EntryBase):
    """The model changed."""

    type: ClassVar[str] = EntryType.MODEL_CHANGE.value

    @property
    def model(self) -> ModelRef:
        """The new model."""
        return ModelRef(str(self.payload["provider"]), str(self.payload["modelId"]))


@attrs.frozen(kw_only=True)
class CompactionEntry(_EntryBase):
    """Older context was summarized: the context continues with ``summary``, then the path
    from ``first_kept_entry_id`` on."""

    type: ClassVar[str] = EntryType.COMPACTION.value

    @property
    def summary(self) -> str:
        """The summary that replaces the compacted messages."""
        return str(self.payload["summary"])

    @property
    def first_kept_entry_id(self) -> EntryId | None:
        """The first entry (an ancestor) whose messages stay in the context (None when a
        compaction with a retained tail leaves it out)."""
        value = self.payload.get("firstKeptEntryId")
        return None if value is None else EntryId(str(value))

    @property
    def retained_tail(self) -> tuple[Mapping[str, Any], ...] | None:
        """The messages the compaction keeps itself (seed 004's ``retainedTail``), put in the
        context right after its summary; None for a compaction without one."""
        tail = self.payload.get("retainedTail")
        return None if not isinstance(tail, list) else tuple(tail)

    @property
    def tokens_before(self) -> int | float:
        """The context size before compaction (tokens)."""
        value: int | float = self.payload["tokensBefore"]
        return value


@attrs.frozen(kw_only=True)
class BranchSummaryEntry(_EntryBase):
    """A branch was left: ``summary`` of the abandoned branch that ended at ``from_id``."""

    type: ClassVar[str] = EntryType.BRANCH_SUMMARY.value

    @property
    def from_id(self) -> str:
        """The entry the abandoned branch ended at."""
        return str(self.payload["fromId"])

    @property
    def summary(self) -> str:
        """The summary of the abandoned branch."""
        return str(self.payload["summary"])


@attrs.frozen(kw_only=True)
class CustomEntry(_EntryBase):
    """Extension state (``custom_type``, ``data``); never part of the context."""

    type: ClassVar[str] = EntryType.CUSTOM.value

    @property
    def custom_type(self) -> str:
        """Which extension wrote it."""
        return str(self.payload["customType"])

    @property
    def data(self) -> Any:
        """The extension's data (None when absent)."""
        return self.payload.get("data")


@attrs.frozen(kw_only=True)
class CustomMessageEntry(_EntryBase):
    """A message an extension put into the context (``content``: text or content blocks)."""

    type: ClassVar[str] = EntryType.CUSTOM_MESSAGE.value

    @property
    def custom_type(self) -> str:
        """Which extension wrote it."""
        return str(self.payload["customType"])

    @property
    def content(self) -> Any:
        """A string or a list of content blocks."""
        return self.payload["content"]

    @property
    def display(self) -> bool:
        """Whether a user interface shows it."""
        return bool(self.payload.get("display", False))


@attrs.frozen(kw_only=True)
class LabelEntry(_EntryBase):
    """Sets (``label`` text) or clears (``label`` None or empty) the label of ``target_id``."""

    type: ClassVar[str] = EntryType.LABEL.value

    @property
    def target_id(self) -> EntryId:
        """The labelled entry."""
        return EntryId(str(self.payload["targetId"]))

    @property
    def label(self) -> str | None:
        """The label, or None when this entry clears it."""
        value = self.payload.get("label")
        return value if isinstance(value, str) and value else None


@attrs.frozen(kw_only=True)
class SessionInfoEntry(_EntryBase):
    """Session information: the session's display ``name``."""

    type: ClassVar[str] = EntryType.SESSION_INFO.value

    @property
    def name(self) -> str | None:
        """The name as written (None when absent)."""
        value = self.payload.get("name")
        return value if isinstance(value, str) else None


@attrs.frozen(kw_only=True)
class LeafEntry(_EntryBase):
    """The active leaf moved to ``target_id`` (None: before the first entry).

    The pi agent's harness (seed 004) writes one for every leaf move; its ``parent_id`` is
    the leaf before the move. It is never part of a context.
    """

    type: ClassVar[str] = EntryType.LEAF.value

    @property
    def target_id(self) -> EntryId | None:
        """Where the leaf moved."""
        value = self.payload.get("targetId")
        return None if value is None else EntryId(str(value))


@attrs.frozen(kw_only=True)
class UnknownEntry(_EntryBase):
    """An entry of a type this version does not know; kept as it came."""

    type: str


Entry: TypeAlias = (
    MessageEntry
    | ThinkingLevelChangeEntry
    | ModelChangeEntry
    | CompactionEntry
    | BranchSummaryEntry
    | CustomEntry
    | CustomMessageEntry
    | LabelEntry
    | SessionInfoEntry
    | LeafEntry
    | UnknownEntry
)
"""One stored entry, as the record of its type."""


@attrs.frozen(kw_only=True)
class NewEntry:
    """An entry to append.

    ``timestamp`` is an aware datetime or epoch ms. ``payload`` holds the format's fields of
    the entry besides the envelope (for a message: ``{"message": {...}}``): a mapping whose
    values are JSON values (``dict``, ``list``, ``str``, ``int``, finite ``float``, ``bool``,
    None: no tuples, no NaN), stored as JSON and read back equal. The class methods build the
    format's entry types.

    ``raw`` is for entries that arrive already serialized (an importer's JSONL line): the
    entry's JSON text (RFC 8259, no NaN), an object whose members besides the envelope are
    exactly ``payload``. It is then stored as it is instead of serializing ``payload`` again;
    keeping the two equal is the caller's promise (runstore does not parse ``raw`` back).
    """

    id: str
    parent_id: str | None
    type: str
    timestamp: datetime | int
    payload: Mapping[str, Any] = attrs.field(factory=dict, hash=False)
    raw: str | None = attrs.field(default=None, repr=False)

    @classmethod
    def message(
        cls,
        id: str,
        parent_id: str | None,
        message: Mapping[str, Any],
        *,
        timestamp: datetime | int,
    ) -> NewEntry:
        """A ``message`` entry holding ``message`` (with its ``role``)."""
        return cls(
            id=id,
            parent_id=parent_id,
            type="message",
            timestamp=timestamp,
            payload={"message": dict(message)},
        )

    @classmethod
    def thinking_level_change(
        cls, id: str, parent_id: str | None, thinking_level: str, *, timestamp: datetime | int
    ) -> NewEntry:
        """A ``thinking_level_change`` entry."""
        return cls(
            id=id,
            parent_id=parent_id,
            type="thinking_level_change",
            timestamp=timestamp,
            payload={"thinkingLevel": thinking_level},
        )

    @classmethod
    def model_change(
        cls,
        id: str,
        parent_id: str | None,
        provider: str,
        model_id: str,
        *,
        timestamp: datetime | int,
    ) -> NewEntry:
        """A ``model_change`` entry."""
        return cls(
            id=id,
            parent_id=parent_id,
            type="model_change",
            timestamp=timestamp,
            payload={"provider": provider, "modelId": model_id},
        )

    @classmethod
    def compaction(
        cls,
        id: str,
        parent_id: str | None,
        summary: str,
        first_kept_entry_id: str | None,
        tokens_before: int,
        *,
        timestamp: datetime | int,
        retained_tail: Sequence[Mapping[str, Any]] | None = None,
    ) -> NewEntry:
        """A ``compaction`` entry; ``first_kept_entry_id`` must be an ancestor.

        ``retained_tail``: the messages the compaction keeps itself (seed 004); with one,
        ``first_kept_entry_id`` may be None and the path walk stops at this compaction.
        """
        payload: dict[str, Any] = {"summary": summary}
        if first_kept_entry_id is not None:
            payload["firstKeptEntryId"] = first_kept_entry_id
        payload["tokensBefore"] = tokens_before
        if retained_tail is not None:
            payload["retainedTail"] = [dict(message) for message in retained_tail]
        return cls(
            id=id, parent_id=parent_id, type="compaction", timestamp=timestamp, payload=payload
        )

    @classmethod
    def leaf(
        cls, id: str, parent_id: str | None, target_id: str | None, *, timestamp: datetime | int
    ) -> NewEntry:
        """A ``leaf`` entry: the leaf moves to ``target_id`` (None: before the first entry).

        ``parent_id`` is the leaf before the move, as the pi agent's harness writes it.
        """
        return cls(
            id=id,
            parent_id=parent_id,
            type="leaf",
            timestamp=timestamp,
            payload={"targetId": target_id},
        )

    @classmethod
    def branch_summary(
        cls,
        id: str,
        parent_id: str | None,
        from_id: str,
        summary: str,
        *,
        timestamp: datetime | int,
    ) -> NewEntry:
        """A ``branch_summary`` entry."""
        return cls(
            id=id,
            parent_id=parent_id,
            type="branch_summary",
            timestamp=timestamp,
            payload={"fromId": from_id, "summary": summary},
        )

    @classmethod
    def custom(
        cls,
        id: str,
        parent_id: str | None,
        custom_type: str,
        data: Any = None,
        *,
        timestamp: datetime | int,
    ) -> NewEntry:
        """A ``custom`` entry (extension state, not in the context)."""
        payload: dict[str, Any] = {"customType": custom_type}
        if data is not None:
            payload["data"] = data
        return cls(id=id, parent_id=parent_id, type="custom", timestamp=timestamp, payload=payload)

    @classmethod
    def custom_message(
        cls,
        id: str,
        parent_id: str | None,
        custom_type: str,
        content: str | Sequence[Any],
        *,
        display: bool = True,
        timestamp: datetime | int,
    ) -> NewEntry:
        """A ``custom_message`` entry (in the context)."""
        return cls(
            id=id,
            parent_id=parent_id,
            type="custom_message",
            timestamp=timestamp,
            payload={
                "customType": custom_type,
                "content": content if isinstance(content, str) else list(content),
                "display": display,
            },
        )

    @classmethod
    def label(
        cls,
        id: str,
        parent_id: str | None,
        target_id: str,
        label: str | None,
        *,
        timestamp: datetime | int,
    ) -> NewEntry:
        """A ``label`` entry: set (text) or clear (None) the label of ``target_id``."""
        return cls(
            id=id,
            parent_id=parent_id,
            type="label",
            timestamp=timestamp,
            payload={"targetId": target_id, "label": label},
        )

    @classmethod
    def session_info(
        cls, id: str, parent_id: str | None, name: str, *, timestamp: datetime | int
    ) -> NewEntry:
        """A ``session_info`` entry naming the session."""
        return cls(
            id=id,
            parent_id=parent_id,
            type="session_info",
            timestamp=timestamp,
            payload={"name": name},
        )


# -- context state per entry ---------------------------------------------------------------------


@attrs.frozen
class EntryState:
    """What holds at an entry on its whole path from the root (kept per entry by the layers).

    ``model`` and ``thinking_level`` follow the format's context rules over that path (a
    model change or an assistant message sets the model; a thinking-level change sets the
    level), as the pi coding agent's ``buildSessionContext`` reads them to resume a session.
    """

    model: ModelRef | None
    thinking_level: str


ROOT_STATE = EntryState(None, DEFAULT_THINKING_LEVEL)


# -- summary -------------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class SessionSummary:
    """The materialized summary of one session, over every entry on every branch.

    - ``name``: the latest non-empty ``session_info`` name, trimmed (None when none).
    - ``entry_count``: entries appended (= the newest ``seq``).
    - ``message_count``: ``message`` entries.
    - ``cached_tokens``, ``uncached_tokens``, ``total_tokens``, ``cost``: sums over the
      ``usage`` of assistant messages (and of compaction and branch-summary entries that carry
      one, as the format's SQLite backend counts them, seed 004): cached = ``cacheRead``,
      uncached = ``input + cacheWrite``, total = ``input + output + cacheRead + cacheWrite``,
      cost = ``cost.total`` as an exact ``Decimal`` (each JSON number read as the decimal
      text of the double it denotes).
      ``output_tokens`` (``output``) is what ``total_tokens`` holds besides the other two, so
      that cached + uncached + output = total.
    - ``model`` and ``thinking_level``: the latest model (model change or assistant message)
      and thinking level appended, on any branch (``off`` before any change). This is not
      what a session resumes with: that is the state at its leaf (``build_context``).
    - ``labels``: entry id -> label, from ``label`` entries in append order (an empty label
      clears).
    """

    name: str | None = None
    entry_count: int = 0
    message_count: int = 0
    cached_tokens: int = 0
    uncached_tokens: int = 0
    total_tokens: int = 0
    cost: Decimal = Decimal(0)
    model: ModelRef | None = None
    thinking_level: str = DEFAULT_THINKING_LEVEL
    labels: Mapping[str, str] = attrs.field(factory=dict, hash=False)

    @property
    def output_tokens(self) -> int:
        """Tokens the model wrote (the ``output`` of each usage counted)."""
        return self.total_tokens - self.cached_tokens - self.uncached_tokens


# -- sessions ------------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class NewSession:
    """A session to create.

    ``id``: chosen by the caller (a fresh UUID when None). ``cwd``: the working directory
    (empty when unknown). ``parent_session``: the session this one came from (free text: the
    format stores a file path, runstore's ``fork`` the source id). ``metadata``: a JSON
    object. ``created``: an aware datetime or epoch ms (the clock's time when None).
    """

    id: str | None = None
    cwd: str = ""
    parent_session: str | None = None
    metadata: Mapping[str, Any] = attrs.field(factory=dict, hash=False)
    created: datetime | int | None = None


@attrs.frozen(kw_only=True)
class SessionRecord:
    """One session: identity, where it ran, where it came from, its active leaf and summary.

    ``created_ms`` is epoch ms UTC; ``leaf_id`` is None for a session without entries (or
    whose leaf was reset to before the first entry).
    """

    id: SessionId
    cwd: str
    parent_session: str | None
    metadata: Mapping[str, Any] = attrs.field(hash=False)
    created_ms: int
    leaf_id: EntryId | None
    summary: SessionSummary


@attrs.frozen
class ContextMessage:
    """One message of a context and the entry it came from.

    ``message`` is the format's agent message: the stored message of a ``message`` entry, or
    the one the format builds for a compaction (role ``compactionSummary``), a branch summary
    (``branchSummary``) or a custom message (``custom``).
    """

    entry_id: EntryId
    message: Mapping[str, Any] = attrs.field(hash=False)

    @property
    def role(self) -> str:
        """The message's role."""
        return str(self.message.get("role"))


@attrs.frozen(kw_only=True)
class SessionContext:
    """What an LLM gets at ``leaf_id``: the ``messages``, the ``model`` and the thinking level."""

    leaf_id: EntryId | None
    messages: tuple[ContextMessage, ...]
    model: ModelRef | None
    thinking_level: str


@attrs.frozen(kw_only=True)
class BranchMove:
    """The branch summary :meth:`SessionStorage.move_to` writes where the leaf moved to.

    ``summary``: the summary of the branch left behind. ``id``: the entry's id (generated
    when None). ``details``, ``usage`` (a usage object, counted in the session summary) and
    ``from_hook``: written as the pi agent's ``details``, ``usage`` and ``fromHook`` when
    given (JSON values).
    """

    summary: str
    id: str | None = None
    details: Any = None
    usage: Mapping[str, Any] | None = attrs.field(default=None, hash=False)
    from_hook: bool | None = None


# -- the services --------------------------------------------------------------------------------


@runtime_checkable
class SessionStorage(Protocol):
    """The storage of one session (from :meth:`SessionRepository.open`).

    Every method returns ``NotFound("session", id)`` once the session has been deleted, and
    ``StorageFailure`` of kind ``closed`` once the repository's container was closed.
    """

    @property
    def session_id(self) -> SessionId:
        """The session this storage belongs to."""
        ...

    def info(self) -> Result[SessionRecord, SessionError]:
        """Return the session's record (with its summary and active leaf)."""
        ...

    def summary(self) -> Result[SessionSummary, SessionError]:
        """Return the session's materialized summary."""
        ...

    def leaf(self) -> Result[EntryId | None, SessionError]:
        """Return the active leaf (None before the first entry or after a reset)."""
        ...

    def append(self, entry: NewEntry) -> Result[Entry, SessionError]:
        """Append one entry and make it the active leaf; return the stored record.

        A ``leaf`` entry moves the leaf to its ``targetId`` instead. Failures:
        ``InvalidInput`` (see :func:`validate_entry`), ``DuplicateEntry`` (the id exists),
        ``BadReference`` (unknown parent; a ``leaf`` entry's unknown target; a compaction's
        first kept entry that is not an ancestor), ``NotFound`` (session deleted). Nothing
        is written on failure.
        """
        ...

    def append_many(
        self, entries: Sequence[NewEntry], *, strict_compactions: bool = True
    ) -> Result[int, SessionError]:
        """Append ``entries`` in order in one unit of work; return how many were appended.

        Each entry may name earlier entries of the same batch as parent. The last one sets
        the active leaf (itself, or a ``leaf`` entry's target). Failures as for
        :meth:`append`, for the first refused entry (its ``position`` in the batch;
        ``InvalidInput`` fields start with ``entries[i].``); then nothing of the batch is
        written. ``strict_compactions=False`` stores a compaction whose ``firstKeptEntryId``
        is not an ancestor as the pi agent loads it (its path walk goes on to the root, its
        context keeps no entry before it) instead of refusing it.
        """
        ...

    def set_leaf(self, entry_id: str | None) -> Result[EntryId | None, SessionError]:
        """Move the active leaf to ``entry_id`` (None: before the first entry); return it.

        The move is a ``leaf`` entry appended to the log (seed 004's ``setLeafId``): id
        ``leaf-<seq>`` (``leaf-<seq>-2``, ... when taken), parent the leaf before the move,
        ``targetId`` the new leaf, the clock's time. Failures: ``NotFound("entry", id)``;
        nothing written.
        """
        ...

    def move_to(
        self, entry_id: str | None, summary: BranchMove | None = None
    ) -> Result[Entry | None, SessionError]:
        """Move the leaf to ``entry_id`` and, with ``summary``, start a branch there with a
        ``branch_summary``, in one unit of work (seed 004's ``moveTo``).

        Appends the ``leaf`` entry of :meth:`set_leaf`, then, when ``summary`` is given, a
        ``branch_summary`` child of ``entry_id`` (``fromId`` = ``entry_id``, or ``"root"``
        for None; id ``summary.id`` or ``summary-<seq>``), which becomes the leaf. Returns
        the branch summary's record, or None without ``summary``. Failures:
        ``NotFound("entry", id)``, ``InvalidInput`` (a summary the format refuses, its
        field named), ``DuplicateEntry`` (``summary.id`` taken); nothing written.
        """
        ...

    def entry(self, entry_id: str) -> Result[Entry, SessionError]:
        """Return one entry. Failures: ``NotFound("entry", id)``."""
        ...

    def children(self, entry_id: str | None) -> Result[tuple[Entry, ...], SessionError]:
        """Return the children of ``entry_id`` (the roots for None), in ``seq`` order.

        Failures: ``NotFound("entry", id)``.
        """
        ...

    def path_to_root(self, entry_id: str) -> Result[tuple[Entry, ...], SessionError]:
        """Return the entries from the root to ``entry_id`` (root first, the entry last).

        Failures: ``NotFound("entry", id)``.
        """
        ...

    def path_to_root_or_compaction(self, entry_id: str) -> Result[tuple[Entry, ...], SessionError]:
        """Return the path to ``entry_id`` starting at the first kept entry of the newest
        compaction on it (the whole path to the root when there is none).

        Failures: ``NotFound("entry", id)``.
        """
        ...

    def entries(self, after_seq: int = 0, limit: int = 100) -> Result[Page[Entry], SessionError]:
        """Return up to ``limit`` entries with ``seq > after_seq``, in ``seq`` order.

        Follows the pagination contract (``runstore.services.pagination``): ``limit`` 1..1000,
        ``has_more`` when more follow; ``next_cursor`` is then the decimal ``seq`` to pass as
        the next ``after_seq``. Failures: ``InvalidInput`` (``after_seq`` negative, bad limit).
        """
        ...

    def build_context(self, leaf: str | None = None) -> Result[SessionContext, SessionError]:
        """Return the context at ``leaf`` (the active leaf when None) by the format's rules.

        Reads only the path from the leaf up to its newest compaction's first kept entry (see
        :func:`assemble_context`). A session without a leaf gives no messages, no model and
        thinking level ``off``. Failures: ``NotFound("entry", id)``.
        """
        ...


@runtime_checkable
class SessionRepository(Protocol):
    """The sessions of one store."""

    def create(self, new: NewSession) -> Result[SessionRecord, SessionError]:
        """Create an empty session. Failures: ``InvalidInput`` (id, cwd, metadata, created),
        ``Conflict`` (the id exists)."""
        ...

    def get(self, session_id: str) -> Result[SessionRecord, SessionError]:
        """Return one session's record. Failures: ``NotFound("session", id)``."""
        ...

    def list(
        self, cwd: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> Result[Page[SessionRecord], SessionError]:
        """Return sessions newest first by creation time (``created_ms``; among equal times
        the one created later in this store first), optionally only those of ``cwd``,
        following the pagination contract. Failures: ``InvalidInput`` (limit, cursor).
        """
        ...

    def open(self, session_id: str) -> Result[SessionStorage, SessionError]:
        """Return the storage of one session. Failures: ``NotFound("session", id)``."""
        ...

    def delete(self, session_id: str) -> Result[int, SessionError]:
        """Delete a session and every row of it in one unit of work; return how many entries
        went. Failures: ``NotFound("session", id)``."""
        ...

    def fork(
        self,
        source: str,
        *,
        at_entry: str | None = None,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        cwd: str | None = None,
    ) -> Result[SessionRecord, SessionError]:
        """Create a session holding the path from the root to ``at_entry`` of ``source``.

        ``at_entry`` None means the source's active leaf (an empty fork when it has none).
        The new session keeps the entries' ids, parents, types, timestamps and payloads
        (numbered 1..n), has ``at_entry`` as its leaf, ``cwd`` (the source's when None),
        ``parent_session`` = the source id, and ``metadata`` (the source's when None), as
        seed 004's ``fork(source, {cwd, id, metadata})``. All in one unit of work: a failure
        leaves no new session. Failures: ``NotFound`` (source or entry), ``Conflict``
        (``session_id`` exists), ``InvalidInput`` (``metadata``, ``session_id``, ``cwd``).
        """
        ...

    def search(
        self,
        text: str,
        *,
        cwd: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> Result[Page[EntryHit], SessionError]:
        """The entries of every session (only sessions of ``cwd`` when given) whose text holds
        every term of ``text``, best first, then later session, then later entry, by the
        rules and the order of ``runstore.services.search``; paged per
        ``runstore.services.pagination``. Every entry of a session is searched, on every
        branch (not only the active path).

        Failures: ``InvalidInput("text", ...)`` for query text that is not ``str``, too long,
        holding a lone surrogate, with no term or too many terms; ``InvalidInput`` for a cwd
        that is not ``str`` or None, a bad limit or a foreign cursor; ``Busy``;
        ``StorageFailure``.
        """
        ...

    def atomic(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        """Run ``fn`` (which calls this repository's methods) as one unit of work.

        ``Success`` keeps everything ``fn`` wrote; ``Failure`` or an exception undoes all of
        it (calls inside run as nested units). ``operation`` names the unit in errors.
        """
        ...


def __getattr__(name: str) -> Any:
    """Serve the rules of :mod:`runstore.services._sessions_rules` under their old names.

    They are imported on first use because that module imports the records of this one;
    :data:`__all__` names them (and the ``TYPE_CHECKING`` import above, for type checkers).
    """
    if name in __all__:
        from runstore.services import _sessions_rules

        return getattr(_sessions_rules, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
