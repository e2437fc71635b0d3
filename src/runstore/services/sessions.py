"""Tree-shaped agent sessions: the transcripts of a coding agent, kept as trees of entries.

The model is the session format of the pi coding agent (JSONL files, format version 3; seed
004 is its SQLite backend). Two services:

- :class:`SessionRepository`: the sessions of a store. ``create``, ``get``, ``list`` (newest
  first), ``open`` (returns a :class:`SessionStorage`), ``delete`` and ``fork``.
- :class:`SessionStorage`: one session. ``append`` / ``append_many`` add immutable entries,
  ``set_leaf`` moves the active leaf, and the tree is read with ``entry``, ``children``,
  ``path_to_root``, ``path_to_root_or_compaction``, ``entries`` and ``build_context``.

Rules shared by every layer:

- An entry has an ``id`` unique in its session (chosen by the caller, any non-empty text up to
  :data:`MAX_ID_CHARS` characters), a ``parent_id`` that names an entry already in the
  session (or ``None`` for a root), a ``seq`` from the session's counter (dense: 1, 2, 3, ...,
  in append order), a ``type``, a timestamp (epoch ms UTC at rest) and a JSON ``payload``:
  every field of the format's entry except the envelope ``type``, ``id``, ``parentId`` and
  ``timestamp``. Entries of unknown types are kept as :class:`UnknownEntry`.
- Appending moves the active leaf to the new entry; ``set_leaf`` moves it explicitly and the
  move is stored.
- A compaction's ``firstKeptEntryId`` must name an ancestor of the compaction (its parent or
  one of the parent's ancestors), so that ``path_to_root_or_compaction`` and
  ``build_context`` can stop there.
- The :class:`SessionSummary` of a session is updated in the same unit of work as the append
  (see :func:`fold_summary` for its counting rules).
- The checks of a write happen in this order, identically in every layer: arguments
  (``InvalidInput``), existence of the session (``NotFound``), then, entry by entry, the
  entry's own shape (``InvalidInput``), its id (``DuplicateEntry``), its references
  (``BadReference``). A failed write changes nothing: rows, counters, summary, caches and the
  leaf stay exactly as they were.

Every method returns a ``Result`` whose failure is one :data:`SessionError`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Context, Decimal
from enum import StrEnum
from typing import (
    Any,
    ClassVar,
    NamedTuple,
    NewType,
    Protocol,
    TypeAlias,
    TypeVar,
    runtime_checkable,
)

import attrs
from returns.result import Failure, Result, Success

from runstore.services.errors import (
    Busy,
    Conflict,
    InvalidInput,
    NotFound,
    StorageFailure,
)
from runstore.services.pagination import Page

__all__ = [
    "DEFAULT_THINKING_LEVEL",
    "ENVELOPE_KEYS",
    "MAX_ID_CHARS",
    "ROOT_STATE",
    "BadReference",
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
    "decode_session_cursor",
    "dump_json",
    "empty_summary",
    "encode_session_cursor",
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

# Exact decimal arithmetic for costs: 80 significant digits hold any sum of JSON doubles a
# transcript can carry without rounding.
_EXACT = Context(prec=80)


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

    ``field`` is ``parentId`` (no such entry in the session) or ``firstKeptEntryId`` (not an
    ancestor of the compaction). ``position`` is the index in the ``append_many`` batch.
    Nothing was written.
    """

    session_id: str
    entry_id: str
    field: str
    target_id: str
    position: int = 0

    def __str__(self) -> str:
        if self.field == "parentId":
            return (
                f"entry {self.entry_id!r}: parent {self.target_id!r} is not in "
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
- ``Busy`` / ``StorageFailure``: the store could not do it; nothing written.
"""


# -- time ----------------------------------------------------------------------------------------

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def to_epoch_ms(value: datetime | int, field: str) -> int | InvalidInput:
    """Return ``value`` (an aware datetime or epoch ms) as integer epoch ms UTC.

    A naive datetime, a ``bool`` or anything else is ``InvalidInput(field, ...)``.
    """
    if isinstance(value, bool):
        return InvalidInput(field, "must be an aware datetime or epoch milliseconds, not a bool")
    if isinstance(value, int):
        return value
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            return InvalidInput(field, "naive datetime: give a timezone (UTC)")
        return (value - _EPOCH) // _MS
    return InvalidInput(
        field, f"must be an aware datetime or epoch milliseconds, not {type(value).__name__}"
    )


def ms_from_iso(text: str) -> int | None:
    """Parse the format's ISO 8601 timestamp (``2025-11-30T10:53:21.000Z``) to epoch ms.

    A timestamp without a zone is read as UTC (JavaScript's ``Date`` writes ``Z``). Returns
    None when ``text`` is not such a timestamp.
    """
    try:
        parsed = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return (parsed - _EPOCH) // _MS


def iso_from_ms(ms: int) -> str:
    """Format epoch ms as the format writes timestamps: ``YYYY-MM-DDTHH:MM:SS.mmmZ`` (UTC)."""
    moment = _EPOCH + timedelta(milliseconds=ms)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{moment.microsecond // 1000:03d}Z"


# -- JSON ----------------------------------------------------------------------------------------


def dump_json(value: Any) -> str:
    """Serialize ``value`` as compact JSON text (UTF-8 characters kept, no NaN).

    Raises ``TypeError``/``ValueError`` for what JSON cannot hold; callers validate first.
    """
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _dump_checked(value: Any, field: str) -> str | InvalidInput:
    try:
        text = dump_json(value)
    except (TypeError, ValueError, RecursionError) as exc:
        return InvalidInput(field, f"not storable as JSON: {exc}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return InvalidInput(field, "holds a lone surrogate, which UTF-8 cannot store")
    return text


def payload_from_body(body: str) -> dict[str, Any]:
    """Read a stored entry body back: its members besides the envelope keys."""
    value: dict[str, Any] = json.loads(body)
    if not ENVELOPE_KEYS.isdisjoint(value):
        return {k: v for k, v in value.items() if k not in ENVELOPE_KEYS}
    return value


def validate_json_object(value: object, field: str) -> str | InvalidInput:
    """Return ``value`` (a mapping with ``str`` keys) as JSON text, or ``InvalidInput``."""
    if not isinstance(value, Mapping):
        return InvalidInput(field, f"must be a JSON object (a mapping), not {type(value).__name__}")
    for key in value:
        if not isinstance(key, str):
            return InvalidInput(field, f"keys must be strings, got {key!r}")
    return _dump_checked(dict(value), field)


def _check_text(value: object, field: str, *, max_chars: int | None = None) -> str | InvalidInput:
    if not isinstance(value, str):
        return InvalidInput(field, f"must be a string, not {type(value).__name__}")
    if max_chars is not None and not 1 <= len(value) <= max_chars:
        return InvalidInput(field, f"must be 1 to {max_chars} characters, got {len(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return InvalidInput(field, "holds a lone surrogate, which UTF-8 cannot store")
    return value


def validate_session_id(value: object, field: str = "session_id") -> str | InvalidInput:
    """Return ``value`` when it is usable as a session id (1..MAX_ID_CHARS characters)."""
    return _check_text(value, field, max_chars=MAX_ID_CHARS)


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
    def first_kept_entry_id(self) -> EntryId:
        """The first entry (an ancestor) whose messages stay in the context."""
        return EntryId(str(self.payload["firstKeptEntryId"]))

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
    | UnknownEntry
)
"""One stored entry, as the record of its type."""

_KNOWN: dict[str, type[Any]] = {
    cls.type: cls
    for cls in (
        MessageEntry,
        ThinkingLevelChangeEntry,
        ModelChangeEntry,
        CompactionEntry,
        BranchSummaryEntry,
        CustomEntry,
        CustomMessageEntry,
        LabelEntry,
        SessionInfoEntry,
    )
}


def make_entry(
    entry_type: str,
    entry_id: str,
    parent_id: str | None,
    seq: int,
    timestamp_ms: int,
    payload: Mapping[str, Any],
) -> Entry:
    """Build the record of a stored (already validated) entry of ``entry_type``."""
    cls = _KNOWN.get(entry_type)
    if cls is None:
        return UnknownEntry(
            id=EntryId(entry_id),
            parent_id=None if parent_id is None else EntryId(parent_id),
            seq=seq,
            timestamp_ms=timestamp_ms,
            payload=payload,
            type=entry_type,
        )
    entry: Entry = cls(
        id=EntryId(entry_id),
        parent_id=None if parent_id is None else EntryId(parent_id),
        seq=seq,
        timestamp_ms=timestamp_ms,
        payload=payload,
    )
    return entry


@attrs.frozen(kw_only=True)
class NewEntry:
    """An entry to append.

    ``timestamp`` is an aware datetime or epoch ms. ``payload`` holds the format's fields of
    the entry besides the envelope (for a message: ``{"message": {...}}``); it is stored as
    JSON and comes back as JSON (lists, string keys). The class methods build the format's
    entry types.

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
        first_kept_entry_id: str,
        tokens_before: int,
        *,
        timestamp: datetime | int,
    ) -> NewEntry:
        """A ``compaction`` entry; ``first_kept_entry_id`` must be an ancestor."""
        return cls(
            id=id,
            parent_id=parent_id,
            type="compaction",
            timestamp=timestamp,
            payload={
                "summary": summary,
                "firstKeptEntryId": first_kept_entry_id,
                "tokensBefore": tokens_before,
            },
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


class ValidEntry(NamedTuple):
    """A :class:`NewEntry` that passed :func:`validate_entry`: the timestamp in epoch ms, the
    payload, and the JSON text that is stored (``raw`` when given, else the payload's)."""

    id: str
    parent_id: str | None
    type: str
    timestamp_ms: int
    payload: Mapping[str, Any]
    body: str


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _shape_problem(entry_type: str, payload: Mapping[str, Any]) -> tuple[str, str] | None:
    """Return (field, reason) when ``payload`` does not fit the format's ``entry_type``."""

    if entry_type == "message":
        message = payload.get("message")
        if type(message) is not dict and not isinstance(message, Mapping):
            return "message", "must be a JSON object"
        if type(message.get("role")) is not str:
            return "message.role", "must be a string"
        return None

    def need_text(key: str) -> tuple[str, str] | None:
        if not isinstance(payload.get(key), str):
            return key, "must be a string"
        return None

    if entry_type == "thinking_level_change":
        return need_text("thinkingLevel")
    if entry_type == "model_change":
        return need_text("provider") or need_text("modelId")
    if entry_type == "compaction":
        problem = need_text("summary") or need_text("firstKeptEntryId")
        if problem is None and not _is_number(payload.get("tokensBefore")):
            return "tokensBefore", "must be a number"
        return problem
    if entry_type == "branch_summary":
        return need_text("fromId") or need_text("summary")
    if entry_type == "custom":
        return need_text("customType")
    if entry_type == "custom_message":
        problem = need_text("customType")
        if problem is None and not isinstance(payload.get("content"), str | list):
            return "content", "must be a string or a list of content blocks"
        if problem is None and "display" in payload and not isinstance(payload["display"], bool):
            return "display", "must be a boolean"
        return problem
    if entry_type == "label":
        problem = need_text("targetId")
        if (
            problem is None
            and payload.get("label") is not None
            and not isinstance(payload["label"], str)
        ):
            return "label", "must be a string or null"
        return problem
    if entry_type == "session_info":
        if payload.get("name") is not None and not isinstance(payload["name"], str):
            return "name", "must be a string or null"
        return None
    return None


def _fast_text(value: object, max_chars: int) -> bool:
    """Whether ``value`` is storable text of 1..max_chars characters (the quick check)."""
    if type(value) is not str or not 0 < len(value) <= max_chars:
        return False
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def validate_entry(new: NewEntry, prefix: str = "") -> ValidEntry | InvalidInput:
    """Check ``new`` on its own (not against the tree) and return it ready to store.

    ``prefix`` is put before field names in the ``InvalidInput`` (``"entries[3]."`` for a
    batch). Refused: an id or parent id that is not 1..MAX_ID_CHARS characters, an empty
    type or the header type ``session``, a naive datetime or non-integer timestamp, a payload
    that is not a JSON object with string keys, holds an envelope key (``type``, ``id``,
    ``parentId``, ``timestamp``) or does not fit its known type (for example a
    ``model_change`` without a string ``provider``), text UTF-8 cannot hold (a lone
    surrogate).
    """
    entry_id, parent_id, entry_type = new.id, new.parent_id, new.type
    # The common case in one expression: ASCII ids and type of sensible length.
    if not (
        type(entry_id) is str
        and type(entry_type) is str
        and 0 < len(entry_id) <= MAX_ID_CHARS
        and 0 < len(entry_type) <= MAX_ID_CHARS
        and entry_id.isascii()
        and entry_type.isascii()
        and (
            parent_id is None
            or (
                type(parent_id) is str
                and 0 < len(parent_id) <= MAX_ID_CHARS
                and parent_id.isascii()
            )
        )
    ):
        for field, value in (("id", entry_id), ("parent_id", parent_id), ("type", entry_type)):
            if (value is not None or field != "parent_id") and not _fast_text(value, MAX_ID_CHARS):
                return _refusal(
                    _check_text(value, prefix + field, max_chars=MAX_ID_CHARS), prefix + field
                )
    if entry_type == "session":
        return InvalidInput(prefix + "type", "'session' is the header, not an entry")
    timestamp = new.timestamp
    if type(timestamp) is int:
        timestamp_ms = timestamp
    else:
        converted = to_epoch_ms(timestamp, prefix + "timestamp")
        if isinstance(converted, InvalidInput):
            return converted
        timestamp_ms = converted
    payload = new.payload
    if type(payload) is not dict and not isinstance(payload, Mapping):
        return InvalidInput(prefix + "payload", f"must be a mapping, not {type(payload).__name__}")
    for key in payload:
        if type(key) is not str:
            return InvalidInput(prefix + "payload", f"keys must be strings, got {key!r}")
        if key in ENVELOPE_KEYS:
            return InvalidInput(
                prefix + "payload", f"{key!r} belongs to the envelope, not the payload"
            )
    if entry_type == "message":  # the common case, checked inline
        message = payload.get("message")
        problem = (
            None
            if (type(message) is dict or isinstance(message, Mapping))
            and type(message.get("role")) is str
            else _shape_problem(entry_type, payload)
        )
    else:
        problem = _shape_problem(entry_type, payload)
    if problem is not None:
        return InvalidInput(
            f"{prefix}payload.{problem[0]}", f"{problem[1]} in a {entry_type} entry"
        )
    raw = new.raw
    if (
        type(raw) is str
        and raw
        and (raw.isascii() or _fast_text(raw, len(raw)))
        and ("\\u" not in raw or _SURROGATE_ESCAPE.search(raw) is None)
    ):
        body: str | InvalidInput = raw
    else:
        # Without raw text, or when it escapes UTF-16 surrogates (which may be unpaired and
        # so not storable as UTF-8), serialize the payload itself and check that.
        body = _dump_checked(payload, prefix + "payload")
    if isinstance(body, InvalidInput):
        return body
    return ValidEntry(entry_id, parent_id, entry_type, timestamp_ms, payload, body)


def _refusal(checked: str | InvalidInput, field: str) -> InvalidInput:
    if isinstance(checked, InvalidInput):
        return checked
    return InvalidInput(field, "must be text of 1 to 256 characters")  # pragma: no cover


# -- context state per entry ---------------------------------------------------------------------


@attrs.frozen
class EntryState:
    """What holds at an entry on its path from the root (kept per entry by the layers).

    ``model`` and ``thinking_level`` follow the format's context rules (a model change or an
    assistant message sets the model; a thinking-level change sets the level); ``anchor_id``
    is the first kept entry of the newest compaction on the path (None when there is none).
    """

    model: ModelRef | None
    thinking_level: str
    anchor_id: str | None


ROOT_STATE = EntryState(None, DEFAULT_THINKING_LEVEL, None)


def next_state(
    parent: EntryState | None, entry_type: str, payload: Mapping[str, Any]
) -> EntryState:
    """Return the state at an entry of ``entry_type`` whose parent has state ``parent``."""
    state = parent if parent is not None else ROOT_STATE
    if entry_type == "message":
        message = payload["message"]
        if message.get("role") == "assistant":
            provider, model = message.get("provider"), message.get("model")
            if type(provider) is str and type(model) is str:
                current = state.model
                if (
                    current is not None
                    and current.provider == provider
                    and current.model_id == model
                ):
                    return state
                return EntryState(ModelRef(provider, model), state.thinking_level, state.anchor_id)
        return state
    if entry_type == "model_change":
        return EntryState(
            ModelRef(payload["provider"], payload["modelId"]), state.thinking_level, state.anchor_id
        )
    if entry_type == "thinking_level_change":
        return EntryState(state.model, payload["thinkingLevel"], state.anchor_id)
    if entry_type == "compaction":
        return EntryState(state.model, state.thinking_level, payload["firstKeptEntryId"])
    return state


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
    - ``model`` and ``thinking_level``: the latest model (model change or assistant message)
      and thinking level appended, on any branch (``off`` before any change).
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


def empty_summary() -> SessionSummary:
    """The summary of a session without entries."""
    return SessionSummary()


def _tokens(value: object) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return 0


def _cost(value: object) -> Decimal:
    if isinstance(value, bool):
        return Decimal(0)
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float) and math.isfinite(value):
        return Decimal(repr(value))
    return Decimal(0)


class SummaryBuilder:
    """Folds entries into a :class:`SessionSummary` (mutable, for loops over many entries)."""

    __slots__ = (
        "cached_tokens",
        "cost",
        "entry_count",
        "labels",
        "message_count",
        "model",
        "name",
        "thinking_level",
        "total_tokens",
        "uncached_tokens",
    )

    def __init__(self, summary: SessionSummary) -> None:
        self.name = summary.name
        self.entry_count = summary.entry_count
        self.message_count = summary.message_count
        self.cached_tokens = summary.cached_tokens
        self.uncached_tokens = summary.uncached_tokens
        self.total_tokens = summary.total_tokens
        self.cost = summary.cost
        self.model = summary.model
        self.thinking_level = summary.thinking_level
        self.labels = dict(summary.labels)

    def _usage(self, usage: object) -> None:
        if type(usage) is not dict and not isinstance(usage, Mapping):
            return
        inp, out = usage.get("input", 0), usage.get("output", 0)
        read, write = usage.get("cacheRead", 0), usage.get("cacheWrite", 0)
        if not (type(inp) is int and type(out) is int and type(read) is int and type(write) is int):
            inp, out, read, write = _tokens(inp), _tokens(out), _tokens(read), _tokens(write)
        self.cached_tokens += read
        self.uncached_tokens += inp + write
        self.total_tokens += inp + out + read + write
        cost = usage.get("cost")
        if type(cost) is dict or isinstance(cost, Mapping):
            total = cost.get("total")
            if total:
                self.cost = _EXACT.add(self.cost, _cost(total))

    def add(self, entry_type: str, payload: Mapping[str, Any]) -> None:
        """Count one more (validated) entry of ``entry_type``; see :class:`SessionSummary`."""
        self.entry_count += 1
        if entry_type == "message":
            message = payload["message"]
            self.message_count += 1
            if message.get("role") == "assistant":
                self._usage(message.get("usage"))
                provider, model = message.get("provider"), message.get("model")
                if isinstance(provider, str) and isinstance(model, str):
                    current = self.model
                    if current is None or current.provider != provider or current.model_id != model:
                        self.model = ModelRef(provider, model)
        elif entry_type in ("compaction", "branch_summary"):
            self._usage(payload.get("usage"))
        elif entry_type == "model_change":
            self.model = ModelRef(payload["provider"], payload["modelId"])
        elif entry_type == "thinking_level_change":
            self.thinking_level = payload["thinkingLevel"]
        elif entry_type == "session_info":
            name = payload.get("name")
            if isinstance(name, str) and name.strip():
                self.name = name.strip()
        elif entry_type == "label":
            target, label = payload["targetId"], payload.get("label")
            if isinstance(label, str) and label:
                self.labels[target] = label
            else:
                self.labels.pop(target, None)

    def build(self) -> SessionSummary:
        """The summary of everything added so far."""
        return SessionSummary(
            name=self.name,
            entry_count=self.entry_count,
            message_count=self.message_count,
            cached_tokens=self.cached_tokens,
            uncached_tokens=self.uncached_tokens,
            total_tokens=self.total_tokens,
            cost=self.cost,
            model=self.model,
            thinking_level=self.thinking_level,
            labels=dict(self.labels),
        )


def fold_summary(
    summary: SessionSummary, entry_type: str, payload: Mapping[str, Any]
) -> SessionSummary:
    """Return ``summary`` with one more (validated) entry of ``entry_type`` counted.

    The rules are those of the format's own backends (seed 004; the pi session list for the
    name): see :class:`SessionSummary`.
    """
    builder = SummaryBuilder(summary)
    builder.add(entry_type, payload)
    return builder.build()


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


def assemble_context(
    leaf_id: EntryId | None, path: Sequence[Entry], state: EntryState
) -> SessionContext:
    """Build the context from ``path`` (root-first, ending at the leaf, starting at the leaf's
    anchor when it has one) and the leaf's ``state``.

    The format's rules (pi ``buildSessionContext``): with a compaction on the path, its
    summary comes first, then the entries from its first kept entry up to it, then those after
    it; otherwise every entry of the path. ``message`` entries go in as stored; branch
    summaries (with a non-empty summary) and custom messages are converted; everything else
    (custom entries, labels, model and thinking changes, session info, unknown types) is left
    out.
    """
    messages: list[ContextMessage] = []
    compaction_at = -1
    for index in range(len(path) - 1, -1, -1):
        if path[index].type == "compaction":
            compaction_at = index
            break
    if compaction_at >= 0:
        compaction = path[compaction_at]
        messages.append(
            ContextMessage(
                compaction.id,
                {
                    "role": "compactionSummary",
                    "summary": compaction.payload["summary"],
                    "tokensBefore": compaction.payload["tokensBefore"],
                    "timestamp": compaction.timestamp_ms,
                },
            )
        )
        selected = [*path[:compaction_at], *path[compaction_at + 1 :]]
    else:
        selected = list(path)
    for entry in selected:
        converted = _context_message(entry)
        if converted is not None:
            messages.append(converted)
    return SessionContext(
        leaf_id=leaf_id,
        messages=tuple(messages),
        model=state.model,
        thinking_level=state.thinking_level,
    )


def _context_message(entry: Entry) -> ContextMessage | None:
    if isinstance(entry, MessageEntry):
        return ContextMessage(entry.id, entry.payload["message"])
    if isinstance(entry, CustomMessageEntry):
        message: dict[str, Any] = {
            "role": "custom",
            "customType": entry.payload["customType"],
            "content": entry.payload["content"],
            "display": entry.display,
        }
        if "details" in entry.payload:
            message["details"] = entry.payload["details"]
        message["timestamp"] = entry.timestamp_ms
        return ContextMessage(entry.id, message)
    if isinstance(entry, BranchSummaryEntry) and entry.payload["summary"]:
        return ContextMessage(
            entry.id,
            {
                "role": "branchSummary",
                "summary": entry.payload["summary"],
                "fromId": entry.payload["fromId"],
                "timestamp": entry.timestamp_ms,
            },
        )
    return None


# -- the services --------------------------------------------------------------------------------


@runtime_checkable
class SessionStorage(Protocol):
    """The storage of one session (from :meth:`SessionRepository.open`).

    Every method returns ``NotFound("session", id)`` once the session has been deleted.
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

        Failures: ``InvalidInput`` (see :func:`validate_entry`), ``DuplicateEntry`` (the id
        exists), ``BadReference`` (unknown parent; a compaction's first kept entry that is not
        an ancestor), ``NotFound`` (session deleted). Nothing is written on failure.
        """
        ...

    def append_many(self, entries: Sequence[NewEntry]) -> Result[int, SessionError]:
        """Append ``entries`` in order in one unit of work; return how many were appended.

        Each entry may name earlier entries of the same batch as parent. The last one becomes
        the active leaf. Failures as for :meth:`append`, for the first refused entry (its
        ``position`` in the batch; ``InvalidInput`` fields start with ``entries[i].``); then
        nothing of the batch is written.
        """
        ...

    def set_leaf(self, entry_id: str | None) -> Result[EntryId | None, SessionError]:
        """Move the active leaf to ``entry_id`` (None: before the first entry) and store it.

        Failures: ``NotFound("entry", id)``.
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
        """Return sessions newest first (by creation in this store), optionally only those of
        ``cwd``, following the pagination contract. Failures: ``InvalidInput`` (limit, cursor).
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
    ) -> Result[SessionRecord, SessionError]:
        """Create a session holding the path from the root to ``at_entry`` of ``source``.

        ``at_entry`` None means the source's active leaf (an empty fork when it has none).
        The new session keeps the entries' ids, parents, types, timestamps and payloads
        (numbered 1..n), has ``at_entry`` as its leaf, the source's ``cwd``, ``parent_session``
        = the source id, and ``metadata`` (the source's when None). All in one unit of work: a
        failure leaves no new session. Failures: ``NotFound`` (source or entry),
        ``Conflict`` (``session_id`` exists), ``InvalidInput``.
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


def new_session_fields(
    new: NewSession, now_ms: int, generated_id: str
) -> tuple[str, str, str | None, str, int] | InvalidInput:
    """Validate ``new``: return (id, cwd, parent_session, metadata JSON, created ms)."""
    session_id = validate_session_id(new.id if new.id is not None else generated_id, "id")
    if isinstance(session_id, InvalidInput):
        return session_id
    cwd = _check_text(new.cwd, "cwd")
    if isinstance(cwd, InvalidInput):
        return cwd
    parent = new.parent_session
    if parent is not None:
        checked = _check_text(parent, "parent_session")
        if isinstance(checked, InvalidInput):
            return checked
    metadata = validate_json_object(new.metadata, "metadata")
    if isinstance(metadata, InvalidInput):
        return metadata
    created = now_ms if new.created is None else to_epoch_ms(new.created, "created")
    if isinstance(created, InvalidInput):
        return created
    return session_id, cwd, parent, metadata, created


def encode_session_cursor(key: int) -> str:
    """The opaque cursor of ``list`` that continues after the session numbered ``key``."""
    return f"s{key}"


def decode_session_cursor(cursor: str | None) -> int | InvalidInput | None:
    """Read a ``list`` cursor back (None starts at the newest), or ``InvalidInput("cursor")``."""
    if cursor is None:
        return None
    if isinstance(cursor, str) and len(cursor) > 1 and cursor[0] == "s" and cursor[1:].isdigit():
        key = int(cursor[1:])
        if key >= 1 and cursor[1] != "0":
            return key
    return InvalidInput("cursor", f"not a cursor of this listing: {cursor!r}")


def as_result(value: T | InvalidInput) -> Result[T, InvalidInput]:
    """Wrap a checked value (or its ``InvalidInput``) in a ``Result``."""
    if isinstance(value, InvalidInput):
        return Failure(value)
    return Success(value)
