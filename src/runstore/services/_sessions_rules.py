"""The rules of the sessions domain, shared by every layer: pure, no I/O.

A layer method reads the same way in every backend::

    validate (here) -> unit of work -> load facts (backend) -> decide (here)
                    -> apply (backend) -> row to record (here)

What lives here: the validators of every argument (:func:`validate_entry`,
:func:`validate_batch`, :func:`new_session_fields`, :func:`check_fork`,
:func:`check_entries_page`, :func:`check_listing`), the decisions over facts a backend loaded
(:func:`decide_append` for the tree rules of :mod:`runstore.services.sessions`,
:func:`decide_create`, :func:`decide_fork`, :func:`decide_leaf`), the summary fold
(:class:`SummaryBuilder`, :func:`label_change`), the context state and the context itself
(:func:`next_state`, :func:`walk_step` / :func:`walk_path`, :func:`assemble_context`), the
leaf moves (:func:`decide_leaf`, :func:`leaf_after`), and every row -> record conversion
(:func:`make_entry`, :func:`entry_from_row`, :func:`session_record`,
:func:`summary_from_row`, :func:`state_from_columns`). A backend keeps only its storage and
its query strategy.

The public names are also re-exported by :mod:`runstore.services.sessions`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Context, Decimal, localcontext
from typing import Any, NamedTuple, Protocol, TypeGuard, TypeVar

import attrs
from returns.result import Failure, Result, Success

from runstore.services._primitives import (
    MAX_EPOCH_MS,
    MAX_JSON_DEPTH,
    check_optional,
    check_text,
    decode_json,
    describe,
    encode_json,
    iso_from_ms,
    to_epoch_ms,
)
from runstore.services.errors import Conflict, InvalidInput, NotFound
from runstore.services.pagination import CursorCodec, Page, check_limit
from runstore.services.sessions import (
    ENVELOPE_KEYS,
    MAX_ID_CHARS,
    ROOT_STATE,
    BadReference,
    BranchMove,
    BranchSummaryEntry,
    CompactionEntry,
    ContextMessage,
    CustomEntry,
    CustomMessageEntry,
    DuplicateEntry,
    Entry,
    EntryId,
    EntryState,
    LabelEntry,
    LeafEntry,
    MessageEntry,
    ModelChangeEntry,
    ModelRef,
    NewEntry,
    NewSession,
    SessionContext,
    SessionError,
    SessionId,
    SessionInfoEntry,
    SessionRecord,
    SessionSummary,
    ThinkingLevelChangeEntry,
    UnknownEntry,
)

__all__ = [
    "FRESH_HEAD",
    "SESSIONS_CURSOR",
    "AppendPlan",
    "ForkFields",
    "Head",
    "ListingKey",
    "Node",
    "PlannedEntry",
    "SessionFields",
    "SummaryBuilder",
    "TreeFacts",
    "ValidBatch",
    "ValidEntry",
    "as_result",
    "assemble_context",
    "batch_references",
    "check_entries_page",
    "check_fork",
    "check_listing",
    "decide_append",
    "decide_create",
    "decide_fork",
    "decide_leaf",
    "dump_json",
    "empty_summary",
    "entries_page",
    "entries_window",
    "entry_from_row",
    "entry_record",
    "fold_entries",
    "fold_summary",
    "generated_id",
    "iso_from_ms",
    "label_change",
    "leaf_after",
    "listing_page",
    "make_entry",
    "ms_from_iso",
    "new_session_fields",
    "next_state",
    "no_entry",
    "no_session",
    "payload_from_body",
    "session_record",
    "state_columns",
    "state_from_columns",
    "summary_columns",
    "summary_from_row",
    "to_epoch_ms",
    "validate_batch",
    "validate_entry",
    "validate_json_object",
    "validate_session_id",
    "walk_path",
    "walk_step",
]

T = TypeVar("T")

# Exact decimal arithmetic for costs: 80 significant digits hold any sum of JSON doubles a
# transcript can carry without rounding.
_EXACT = Context(prec=80)


# -- time ----------------------------------------------------------------------------------------

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")

_make = tuple.__new__  # builds a NamedTuple from a tuple without its Python-level __new__

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)


def ms_from_iso(text: str) -> int | None:
    """Parse the format's ISO 8601 timestamp (``2025-11-30T10:53:21.000Z``) to epoch ms.

    A timestamp without a zone is read as UTC (JavaScript's ``Date`` writes ``Z``). Returns
    None when ``text`` is not such a timestamp or names a time outside epoch ms 0 to
    ``MAX_EPOCH_MS`` (before 1970 or after 9999), which ``to_epoch_ms`` would refuse.
    """
    try:
        parsed = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    # The arithmetic of ``to_epoch_ms`` without its Result: this runs once per imported line.
    ms = (parsed - _EPOCH) // _ONE_MS
    return ms if 0 <= ms <= MAX_EPOCH_MS else None


# -- JSON and text -------------------------------------------------------------------------------


def dump_json(value: Any) -> str:
    """Serialize ``value`` (a :data:`JsonValue`) as compact JSON text (see ``encode_json``).

    Raises ``ValueError`` for what JSON cannot hold exactly; callers validate first.
    """
    encoded = encode_json(value, "value")
    if isinstance(encoded, Failure):
        raise ValueError(str(encoded.failure()))
    return encoded.unwrap()


def payload_from_body(body: str) -> dict[str, Any]:
    """Read a stored entry body back: its members besides the envelope keys."""
    value: dict[str, Any] = decode_json(body)  # type: ignore[assignment]
    if not ENVELOPE_KEYS.isdisjoint(value):
        return {k: v for k, v in value.items() if k not in ENVELOPE_KEYS}
    return value


def validate_json_object(value: object, field: str) -> Result[str, InvalidInput]:
    """Return ``value``, a mapping whose keys are ``str`` and whose values are
    :data:`JsonValue`, as JSON text (``encode_json``), or ``InvalidInput`` naming the path."""
    if type(value) is not dict:
        if not isinstance(value, Mapping):
            return Failure(
                InvalidInput(
                    field, f"must be a JSON object (a mapping), not {type(value).__name__}"
                )
            )
        value = dict(value)
    return encode_json(value, field)


def _check_text(
    value: object, field: str, *, max_chars: int | None = None
) -> Result[str, InvalidInput]:
    """The text policy of sessions: ids 1..``max_chars`` characters, other text any length
    (empty included); NUL is kept; a lone surrogate is refused (``check_text``)."""
    return check_text(
        value, field, max_chars=max_chars, allow_empty=max_chars is None, allow_nul=True
    )


def validate_session_id(value: object, field: str = "session_id") -> Result[str, InvalidInput]:
    """Return ``value`` when it is usable as a session id (1..MAX_ID_CHARS characters)."""
    return _check_text(value, field, max_chars=MAX_ID_CHARS)


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
        LeafEntry,
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
        tail = payload.get("retainedTail")
        problem = need_text("summary")
        if problem is None and not (
            tail is not None and payload.get("firstKeptEntryId") is None
        ):
            problem = need_text("firstKeptEntryId")
        if problem is None and not _is_number(payload.get("tokensBefore")):
            return "tokensBefore", "must be a number"
        if problem is None and tail is not None:
            if not isinstance(tail, list):
                return "retainedTail", "must be a list of messages"
            for index, message in enumerate(tail):
                if not isinstance(message, Mapping) or type(message.get("role")) is not str:
                    return f"retainedTail[{index}]", "must be a message with a string role"
        return problem
    if entry_type == "leaf":
        if "targetId" not in payload:
            return "targetId", "must be given (an entry id, or null)"
        if payload["targetId"] is not None and not isinstance(payload["targetId"], str):
            return "targetId", "must be a string or null"
        return None
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


def _shallow_raw(raw: object, payload: Mapping[str, Any]) -> TypeGuard[str]:
    """Whether entry text with many brackets may still be stored as it came: its payload
    nests no deeper than ``MAX_JSON_DEPTH`` (the rule ``encode_json`` applies to a payload
    without raw text), walked without recursion. Other checks of raw text come first."""
    if (
        type(raw) is not str
        or raw[:1] != "{"
        or not (raw.isascii() or _fast_text(raw, len(raw)))
        or ("\\u" in raw and _SURROGATE_ESCAPE.search(raw) is not None)
    ):
        return False
    stack: list[tuple[Any, int]] = [(payload, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return False
        children = value.values() if isinstance(value, dict) else value
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return True


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


def validate_entry(new: NewEntry, prefix: str = "") -> Result[ValidEntry, InvalidInput]:
    """Check ``new`` on its own (not against the tree) and return it ready to store.

    ``prefix`` is put before field names in the ``InvalidInput`` (``"entries[3]."`` for a
    batch). Refused: an id or parent id that is not 1..MAX_ID_CHARS characters, an empty
    type or the header type ``session``, a timestamp ``to_epoch_ms`` refuses (a naive
    datetime, not an int, before 1970 or after 9999), a payload that is not a mapping with
    string keys, holds an envelope key (``type``, ``id``, ``parentId``, ``timestamp``), does
    not fit its known type (for example a ``model_change`` without a string ``provider``, a
    ``leaf`` entry without a ``targetId`` that is a string or null, a compaction without a
    string ``firstKeptEntryId`` and without a ``retainedTail``, a ``retainedTail`` that is
    not a list of messages with a string ``role``) or
    holds what ``encode_json`` refuses (the field then names its path), text UTF-8 cannot
    hold (a lone surrogate).
    """
    checked = _validate_entry(new, prefix)
    if type(checked) is InvalidInput:
        return Failure(checked)
    return Success(checked)  # type: ignore[arg-type]


def _validate_entry(new: NewEntry, prefix: str) -> ValidEntry | InvalidInput:
    """:func:`validate_entry` without the ``Result`` (the loop over a batch runs this)."""
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
        plain: list[str | None] = []
        for field, value in (("id", entry_id), ("parent_id", parent_id), ("type", entry_type)):
            if value is None and field == "parent_id":
                plain.append(None)
                continue
            text = _check_text(value, prefix + field, max_chars=MAX_ID_CHARS)
            if isinstance(text, Failure):
                refused: InvalidInput = text.failure()
                return refused
            plain.append(text.unwrap())
        entry_id, parent_id, entry_type = plain  # type: ignore[assignment]
    if entry_type == "session":
        return InvalidInput(prefix + "type", "'session' is the header, not an entry")
    timestamp = new.timestamp
    if type(timestamp) is int and 0 <= timestamp <= MAX_EPOCH_MS:
        timestamp_ms = timestamp
    else:
        converted = to_epoch_ms(timestamp, prefix + "timestamp")
        if isinstance(converted, Failure):
            bad_time: InvalidInput = converted.failure()
            return bad_time
        timestamp_ms = converted.unwrap()
    payload = new.payload
    if type(payload) is not dict:
        if not isinstance(payload, Mapping):
            return InvalidInput(
                prefix + "payload", f"must be a mapping, not {type(payload).__name__}"
            )
        payload = dict(payload)
    raw = new.raw
    # Keys parsed from raw JSON text are strings; only the envelope needs looking for then.
    if raw is None or not ENVELOPE_KEYS.isdisjoint(payload):
        for key in payload:
            if type(key) is not str:
                return InvalidInput(
                    prefix + "payload", f"keys must be strings, got {describe(key)}"
                )
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
    if (
        type(raw) is str
        and raw[:1] == "{"
        and (raw.isascii() or _fast_text(raw, len(raw)))
        and ("\\u" not in raw or _SURROGATE_ESCAPE.search(raw) is None)
        and (raw.count("{") + raw.count("[") <= MAX_JSON_DEPTH)
    ) or _shallow_raw(raw, payload):
        body = raw
    else:
        # Without raw text, when it escapes UTF-16 surrogates (which may be unpaired and so
        # not storable as UTF-8), or when it may nest deeper than encode_json allows,
        # serialize the payload itself and check that.
        encoded = encode_json(payload, prefix + "payload")
        if isinstance(encoded, Failure):
            not_json: InvalidInput = encoded.failure()
            return not_json
        body = encoded.unwrap()
    return _make(ValidEntry, (entry_id, parent_id, entry_type, timestamp_ms, payload, body))


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
                return EntryState(ModelRef(provider, model), state.thinking_level)
        return state
    if entry_type == "model_change":
        return EntryState(ModelRef(payload["provider"], payload["modelId"]), state.thinking_level)
    if entry_type == "thinking_level_change":
        return EntryState(state.model, payload["thinkingLevel"])
    return state


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
        "_float_costs",
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
        self._float_costs: list[float] = []  # added to ``cost`` in one pass by ``build``

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
            if type(total) is float:
                self._float_costs.append(total)
            elif total:
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
        if self._float_costs:
            # Each double as the decimal text it denotes, summed exactly, in C loops.
            with localcontext(_EXACT):
                self.cost = sum(
                    map(Decimal, map(repr, filter(math.isfinite, self._float_costs))), self.cost
                )
            self._float_costs.clear()
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


def walk_step(
    entry_id: str, entry_type: str, payload: Mapping[str, Any], pending: str | None
) -> tuple[bool, str | None]:
    """One step of the path walk towards the root, at an entry (seed 004's
    ``getPathToRootOrCompaction``).

    ``pending`` is the entry the walk looks for (the first kept entry of the newest
    compaction passed, None before any). Returns whether the walk stops at this entry (it
    is then the first of the path) and what it looks for further up: it stops at
    ``pending``; at a compaction with a ``retainedTail``; at a compaction without one it
    looks for that compaction's ``firstKeptEntryId`` instead (the walk reaches the root when
    that entry is not on the path).
    """
    if pending is not None and entry_id == pending:
        return True, None
    if entry_type == "compaction":
        if payload.get("retainedTail") is not None:
            return True, None
        first_kept: str | None = payload.get("firstKeptEntryId")
        return False, first_kept
    return False, pending


def walk_path(
    start: str, lookup: Callable[[str], Entry | None], *, to_root: bool
) -> list[Entry] | None:
    """The path to ``start``, root first: the whole path when ``to_root``, else from where
    :func:`walk_step` stops. ``lookup`` gives a stored entry with its payload (None: no such
    entry). Returns None when ``start`` is not stored. A backend that walks in its own query
    language follows the same steps."""
    current = lookup(start)
    if current is None:
        return None
    path = [current]
    pending: str | None = None
    while True:
        if not to_root:
            done, pending = walk_step(current.id, current.type, current.payload, pending)
            if done:
                break
        parent = current.parent_id
        if parent is None:
            break
        found = lookup(parent)
        if found is None:
            break
        current = found
        path.append(current)
    path.reverse()
    return path


def assemble_context(
    leaf_id: EntryId | None, path: Sequence[Entry], state: EntryState
) -> SessionContext:
    """Build the context from ``path`` (root-first, ending at the leaf, from where the path
    walk stops: :func:`walk_step`) and the leaf's ``state``.

    The format's rules (the harness's ``buildContextEntries`` and the coding agent's
    ``buildSessionContext``): with a compaction on the path, the newest one's summary comes
    first; then its ``retainedTail`` messages when it has one, else the entries from its
    first kept entry up to it (none when that entry is not on the path); then the entries
    after it. Without one, every entry of the path. ``message`` entries go in as stored;
    branch summaries (with a non-empty summary) and custom messages are converted;
    everything else (custom entries, labels, leaf moves, model and thinking changes, session
    info, unknown types) is left out. The model and thinking level are the leaf's ``state``
    (over the whole path from the root, as the coding agent resumes a session).
    """
    messages: list[ContextMessage] = []
    compaction_at = -1
    for index in range(len(path) - 1, -1, -1):
        if path[index].type == "compaction":
            compaction_at = index
            break
    if compaction_at >= 0:
        compaction = path[compaction_at]
        payload = compaction.payload
        messages.append(
            ContextMessage(
                compaction.id,
                {
                    "role": "compactionSummary",
                    "summary": payload["summary"],
                    "tokensBefore": payload["tokensBefore"],
                    "timestamp": compaction.timestamp_ms,
                },
            )
        )
        tail = payload.get("retainedTail")
        if tail is not None:
            messages.extend(ContextMessage(compaction.id, message) for message in tail)
            selected = list(path[compaction_at + 1 :])
        else:
            first_kept = payload.get("firstKeptEntryId")
            kept_from = next(
                (i for i in range(compaction_at) if path[i].id == first_kept), compaction_at
            )
            selected = [*path[kept_from:compaction_at], *path[compaction_at + 1 :]]
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


def new_session_fields(
    new: NewSession, now_ms: int, generated_id: str
) -> Result[SessionFields, InvalidInput]:
    """Validate ``new`` (``now_ms`` when it has no ``created``, ``generated_id`` when no id).

    ``InvalidInput`` for, in this order: ``id`` (not 1..MAX_ID_CHARS characters), ``cwd`` and
    ``parent_session`` (not text UTF-8 can store), ``metadata`` (not a JSON object),
    ``created`` (see ``to_epoch_ms``).
    """
    created: Result[int, InvalidInput] = (
        Success(now_ms) if new.created is None else to_epoch_ms(new.created, "created")
    )
    return validate_session_id(new.id if new.id is not None else generated_id, "id").bind(
        lambda session_id: _check_text(new.cwd, "cwd").bind(
            lambda cwd: check_optional(new.parent_session, "parent_session", _check_text).bind(
                lambda parent: validate_json_object(new.metadata, "metadata").bind(
                    lambda metadata: created.map(
                        lambda ms: SessionFields(session_id, cwd, parent, metadata, ms)
                    )
                )
            )
        )
    )


SESSIONS_CURSOR = CursorCodec("sessions", arity=2)
"""The cursor of ``SessionRepository.list``: the :data:`ListingKey` of the last session of a
page."""


def as_result(value: T | InvalidInput) -> Result[T, InvalidInput]:
    """Wrap a checked value (or its ``InvalidInput``) in a ``Result``."""
    if isinstance(value, InvalidInput):
        return Failure(value)
    return Success(value)


# -- refusals ------------------------------------------------------------------------------------


def no_session(session_id: object) -> NotFound:
    """``NotFound("session", id)``: no session ``session_id`` in the store."""
    return NotFound("session", str(session_id))


def no_entry(entry_id: object) -> NotFound:
    """``NotFound("entry", id)``: no entry ``entry_id`` in the session."""
    return NotFound("entry", str(entry_id))


# -- sessions ------------------------------------------------------------------------------------


class SessionFields(NamedTuple):
    """A :class:`NewSession` that passed :func:`new_session_fields`: ``metadata`` is JSON text,
    ``created_ms`` epoch ms UTC."""

    id: str
    cwd: str
    parent_session: str | None
    metadata: str
    created_ms: int


class Head(NamedTuple):
    """A session's entry counter and active leaf: ``next_seq`` is the ``seq`` the next entry
    gets (1 for a session without entries), ``leaf_id`` the active leaf (None: none)."""

    next_seq: int
    leaf_id: str | None

    @property
    def entry_count(self) -> int:
        """How many entries the session has (its newest ``seq``)."""
        return self.next_seq - 1


FRESH_HEAD = Head(1, None)
"""The head of a new session."""


def decide_create(fields: SessionFields, exists: bool) -> Result[SessionFields, SessionError]:
    """Refuse to create ``fields.id`` when a session of that id ``exists``: ``Conflict``."""
    if exists:
        return Failure(Conflict("session", fields.id, "a session with this id exists"))
    return Success(fields)


class ForkFields(NamedTuple):
    """The checked arguments of ``fork``: metadata JSON text and cwd (None: the source's),
    and the new session's id."""

    metadata: str | None
    session_id: str
    cwd: str | None


def check_fork(
    metadata: object, session_id: object, generated_id: str, cwd: str | None = None
) -> Result[ForkFields, InvalidInput]:
    """Validate the arguments of ``fork`` (``generated_id`` is the id when ``session_id`` is
    None).

    ``InvalidInput("metadata", ...)`` (not a JSON object) comes before ``InvalidInput(
    "session_id", ...)`` (not 1..MAX_ID_CHARS characters), then ``InvalidInput("cwd", ...)``
    (not text UTF-8 can store).
    """
    kept: Result[str | None, InvalidInput] = (
        Success(None) if metadata is None else validate_json_object(metadata, "metadata")
    )
    return kept.bind(
        lambda metadata_text: validate_session_id(
            session_id if session_id is not None else generated_id
        ).bind(
            lambda new_id: check_optional(cwd, "cwd", _check_text).map(
                lambda new_cwd: ForkFields(metadata_text, new_id, new_cwd)
            )
        )
    )


def decide_fork(
    source: Head,
    at_entry: str | None,
    has_entry: Callable[[str], bool],
    new_id: str,
    new_exists: Callable[[str], bool],
) -> Result[str | None, SessionError]:
    """Decide a fork of a session with head ``source``: return the entry the fork ends at
    (None: an empty fork).

    Facts: whether the source ``has_entry`` an id, whether a session ``new_exists``.
    Failures, in this order: ``NotFound("entry")`` (``at_entry``, or the source's leaf when
    ``at_entry`` is None, is not in the source), ``Conflict`` (``new_id`` is taken).
    """
    target = source.leaf_id if at_entry is None else at_entry
    if target is not None and not has_entry(target):
        return Failure(no_entry(target))
    if new_exists(new_id):
        return Failure(Conflict("session", new_id, "a session with this id exists"))
    return Success(target)


def generated_id(prefix: str, seq: int, taken: Callable[[str], bool]) -> str:
    """The id runstore gives an entry it writes itself at ``seq``: ``<prefix>-<seq>``, or
    ``<prefix>-<seq>-2``, ``-3``, ... while ``taken``; the same in every layer."""
    candidate = f"{prefix}-{seq}"
    suffix = 1
    while taken(candidate):
        suffix += 1
        candidate = f"{prefix}-{seq}-{suffix}"
    return candidate


def decide_leaf(
    head: Head,
    entry_id: str | None,
    has_entry: Callable[[str], bool],
    now_ms: int,
    summary: BranchMove | None = None,
) -> Result[tuple[NewEntry, ...], SessionError]:
    """Plan a leaf move of a session with ``head`` to ``entry_id`` (None: before the first
    entry): the entries to append (seed 004's ``setLeafId`` and ``moveTo``).

    A ``leaf`` entry (id :func:`generated_id` ``leaf``, parent the current leaf, target
    ``entry_id``, time ``now_ms``) and, with ``summary``, a ``branch_summary`` child of
    ``entry_id`` (``fromId`` ``entry_id`` or ``"root"``). ``has_entry`` tells whether the
    session holds an id. Failure: ``NotFound("entry")`` when it has no ``entry_id``.
    """
    if entry_id is not None and not has_entry(entry_id):
        return Failure(no_entry(entry_id))
    seq = head.next_seq
    moves = [
        NewEntry.leaf(
            generated_id("leaf", seq, has_entry), head.leaf_id, entry_id, timestamp=now_ms
        )
    ]
    if summary is not None:
        payload: dict[str, Any] = {
            "fromId": entry_id if entry_id is not None else "root",
            "summary": summary.summary,
        }
        for key, value in (
            ("details", summary.details),
            ("usage", summary.usage),
            ("fromHook", summary.from_hook),
        ):
            if value is not None:
                payload[key] = value
        summary_id = summary.id
        if summary_id is None:
            summary_id = generated_id("summary", seq + 1, has_entry)
        moves.append(
            NewEntry(
                id=summary_id,
                parent_id=entry_id,
                type="branch_summary",
                timestamp=now_ms,
                payload=payload,
            )
        )
    return Success(tuple(moves))


def fold_entries(entries: Iterable[tuple[str, Mapping[str, Any]]]) -> SessionSummary:
    """The summary of a session holding ``entries`` ((type, payload) pairs in ``seq`` order)."""
    builder = SummaryBuilder(empty_summary())
    for entry_type, payload in entries:
        builder.add(entry_type, payload)
    return builder.build()


# -- appending: the tree rules -------------------------------------------------------------------


class ValidBatch(NamedTuple):
    """The entries of an append that passed :func:`validate_entry`, up to the first refused
    one, and that refusal (None when every entry passed)."""

    entries: tuple[ValidEntry, ...]
    refused: InvalidInput | None


def validate_batch(entries: object, *, batch: bool) -> Result[ValidBatch, InvalidInput]:
    """Check each entry of an append on its own (:func:`validate_entry`).

    ``InvalidInput("entries", ...)`` when ``entries`` is not a sequence. A refused entry
    stops the check; its refusal is kept in the :class:`ValidBatch` (fields named
    ``entries[i].`` when ``batch``), to be returned after the tree checks of the entries
    before it (see :func:`decide_append`), as if the entries were appended one by one.
    """
    if isinstance(entries, str | bytes) or not isinstance(entries, Sequence):
        return Failure(InvalidInput("entries", "must be a sequence of NewEntry"))
    valid: list[ValidEntry] = []
    append = valid.append
    for position, new in enumerate(entries):
        checked = (
            _validate_entry(new, "")
            if type(new) is NewEntry
            else InvalidInput("entry", "must be a NewEntry")
        )
        if type(checked) is InvalidInput:
            return Success(
                ValidBatch(tuple(valid), _in_batch(checked, position) if batch else checked)
            )
        append(checked)  # type: ignore[arg-type]
    return Success(ValidBatch(tuple(valid), None))


def _in_batch(refused: InvalidInput, position: int) -> InvalidInput:
    """The refusal of the entry at ``position`` of a batch, its field named ``entries[i].``."""
    field = (
        f"entries[{position}]"
        if refused.field == "entry"
        else f"entries[{position}].{refused.field}"
    )
    return InvalidInput(field, refused.reason)


class Node(NamedTuple):
    """What the tree rules need of a stored entry: its parent and its context state."""

    parent_id: str | None
    state: EntryState


class TreeFacts(Protocol):
    """The stored entries of one session, as a backend loads them for :func:`decide_append`."""

    def node(self, entry_id: str) -> Node | None:
        """The stored entry ``entry_id`` (asked only for the ids and parent ids of the batch),
        or None."""
        ...

    def reaches(self, start: str, candidate: str) -> bool:
        """Whether ``candidate`` is the stored entry ``start`` or one of its ancestors."""
        ...


class PlannedEntry(NamedTuple):
    """An entry :func:`decide_append` accepted: as validated, its ``seq`` and its state."""

    valid: ValidEntry
    seq: int
    state: EntryState


@attrs.frozen
class AppendPlan:
    """What an accepted append writes: the entries, the new head and summary, and the label
    changes (target id -> label, None for a cleared one) for a backend that stores labels
    apart."""

    entries: tuple[PlannedEntry, ...]
    head: Head
    summary: SessionSummary
    label_changes: Mapping[str, str | None]

    def records(self) -> tuple[Entry, ...]:
        """The records of the planned entries, as stored (payloads read back from JSON)."""
        return tuple(entry_record(planned) for planned in self.entries)


def decide_append(
    session_id: str,
    head: Head,
    summary: SessionSummary,
    batch: ValidBatch,
    facts: TreeFacts,
    *,
    strict_compactions: bool = True,
) -> Result[AppendPlan, SessionError]:
    """Apply the tree rules to ``batch``, appended to a session with ``head`` and ``summary``.

    Entry by entry, in order (an entry may name earlier entries of the batch): its id must
    be new (``DuplicateEntry``), its ``parentId`` an entry of the session (``BadReference``,
    field ``parentId``), a ``leaf`` entry's ``targetId`` an entry or null (``BadReference``,
    field ``targetId``), a compaction's ``firstKeptEntryId``, when it has one and
    ``strict_compactions``, the parent or one of its ancestors (``BadReference``, field
    ``firstKeptEntryId``); ``position`` is the index in the batch. Then the batch's own
    refusal, if any (``InvalidInput``). On success, the plan numbers the entries from
    ``head.next_seq``, sets the leaf after the last one (:func:`leaf_after`) and folds them
    into the summary (see :class:`SummaryBuilder`).
    """
    local: dict[str, Node] = {}
    planned: list[PlannedEntry] = []
    labels: dict[str, str | None] = {}
    builder = SummaryBuilder(summary)
    add = builder.add
    node = facts.node
    make = _make
    seq = head.next_seq
    for position, valid in enumerate(batch.entries):
        entry_id, parent_id, entry_type, _, payload, _ = valid
        if entry_id in local or node(entry_id) is not None:
            return Failure(DuplicateEntry(session_id, entry_id, position))
        parent_state: EntryState | None = None
        if parent_id is not None:
            parent = local.get(parent_id) or node(parent_id)
            if parent is None:
                return Failure(BadReference(session_id, entry_id, "parentId", parent_id, position))
            parent_state = parent[1]
        if entry_type == "compaction":
            first_kept = payload.get("firstKeptEntryId")
            if (
                strict_compactions
                and first_kept is not None
                and not _reaches(local, facts, parent_id, first_kept)
            ):
                return Failure(
                    BadReference(session_id, entry_id, "firstKeptEntryId", first_kept, position)
                )
        elif entry_type == "leaf":
            target = payload["targetId"]
            if target is not None and target not in local and node(target) is None:
                return Failure(BadReference(session_id, entry_id, "targetId", target, position))
        elif entry_type == "label":
            target, label = label_change(payload)
            labels[target] = label
        state = next_state(parent_state, entry_type, payload)
        local[entry_id] = make(Node, (parent_id, state))
        planned.append(make(PlannedEntry, (valid, seq, state)))
        seq += 1
        add(entry_type, payload)
    if batch.refused is not None:
        return Failure(batch.refused)
    if not planned:
        return Success(AppendPlan((), head, summary, {}))
    last = planned[-1].valid
    return Success(
        AppendPlan(tuple(planned), Head(seq, leaf_after(last.type, last.id, last.payload)),
                   builder.build(), labels)
    )


def leaf_after(entry_type: str, entry_id: str, payload: Mapping[str, Any]) -> str | None:
    """The active leaf once an entry is appended: a ``leaf`` entry's target, else the entry
    itself (the harness's ``leafIdAfterEntry``, seed 004)."""
    if entry_type == "leaf":
        target: str | None = payload["targetId"]
        return target
    return entry_id


def batch_references(batch: ValidBatch) -> set[str]:
    """Every stored id :func:`decide_append` may ask :meth:`TreeFacts.node` about for
    ``batch``: its ids, parent ids and ``leaf`` targets."""
    wanted = {v.id for v in batch.entries}
    wanted.update(v.parent_id for v in batch.entries if v.parent_id is not None)
    wanted.update(
        v.payload["targetId"]
        for v in batch.entries
        if v.type == "leaf" and v.payload["targetId"] is not None
    )
    return wanted


def _reaches(
    local: Mapping[str, Node], facts: TreeFacts, start: str | None, candidate: str
) -> bool:
    """Whether ``candidate`` is ``start`` or an ancestor: through the batch, then the store."""
    current = start
    while current is not None and current in local:
        if current == candidate:
            return True
        current = local[current].parent_id
    return current is not None and facts.reaches(current, candidate)


def label_change(payload: Mapping[str, Any]) -> tuple[str, str | None]:
    """The target of a (validated) ``label`` entry and the label it sets (None: it clears the
    label, being None or empty)."""
    label = payload.get("label")
    return payload["targetId"], label if isinstance(label, str) and label else None


# -- pages ---------------------------------------------------------------------------------------


def check_entries_page(after_seq: object, limit: int) -> Result[int, InvalidInput]:
    """Validate the arguments of ``entries``: return ``after_seq``.

    ``InvalidInput("limit")`` (see ``check_limit``), then ``InvalidInput("after_seq")`` for a
    negative or non-integer one.
    """
    checked = check_limit(limit)
    if isinstance(checked, Failure):
        return Failure(checked.failure())
    if isinstance(after_seq, bool) or not isinstance(after_seq, int) or after_seq < 0:
        return Failure(
            InvalidInput("after_seq", f"must be an integer >= 0, got {describe(after_seq)}")
        )
    return Success(after_seq)


def entries_window(head: Head, after_seq: int, limit: int) -> tuple[int, bool]:
    """The last ``seq`` of the page after ``after_seq`` of a session with ``head``, and whether
    more follow."""
    last = head.entry_count
    stop = min(last, after_seq + limit)
    return stop, stop < last


def entries_page(items: tuple[Entry, ...], stop: int, has_more: bool) -> Page[Entry]:
    """The page of ``entries`` ending at ``seq`` ``stop``: its cursor is that seq in decimal."""
    return Page(items=items, has_more=has_more, next_cursor=str(stop) if has_more else None)


ListingKey = tuple[int, int]
"""Where a session stands in ``list``: (created ms, store key); listed descending."""


def check_listing(limit: int, cursor: str | None) -> Result[ListingKey | None, InvalidInput]:
    """Validate the arguments of ``list``: return the :data:`ListingKey` to list after
    (None: from the newest). ``InvalidInput("limit")``, then ``InvalidInput("cursor")``."""
    checked = check_limit(limit)
    if isinstance(checked, Failure):
        return Failure(checked.failure())
    return SESSIONS_CURSOR.decode(cursor).map(
        lambda keys: None if keys is None else (keys[0], keys[1])
    )


def listing_page(
    rows: Sequence[tuple[ListingKey, SessionRecord]], limit: int
) -> Page[SessionRecord]:
    """The page of ``list`` from up to ``limit + 1`` (listing key, record) rows, newest
    first."""
    has_more = len(rows) > limit
    kept = rows[:limit]
    return Page(
        items=tuple(record for _, record in kept),
        has_more=has_more,
        next_cursor=SESSIONS_CURSOR.encode(*kept[-1][0]) if has_more else None,
    )


# -- rows to records -----------------------------------------------------------------------------


def session_record(
    session_id: str,
    cwd: str,
    parent_session: str | None,
    metadata: str,
    created_ms: int,
    head: Head,
    summary: SessionSummary,
) -> SessionRecord:
    """The record of a stored session (``metadata``: its JSON text)."""
    leaf_id = head.leaf_id
    return SessionRecord(
        id=SessionId(session_id),
        cwd=cwd,
        parent_session=parent_session,
        metadata=decode_json(metadata),  # type: ignore[arg-type]
        created_ms=created_ms,
        leaf_id=None if leaf_id is None else EntryId(leaf_id),
        summary=summary,
    )


def summary_columns(summary: SessionSummary) -> tuple[Any, ...]:
    """A summary as stored: (name, message_count, cached_tokens, uncached_tokens,
    total_tokens, cost as decimal text, model provider, model id, thinking level)."""
    model = summary.model
    return (
        summary.name,
        summary.message_count,
        summary.cached_tokens,
        summary.uncached_tokens,
        summary.total_tokens,
        str(summary.cost),
        None if model is None else model.provider,
        None if model is None else model.model_id,
        summary.thinking_level,
    )


def summary_from_row(
    row: Sequence[Any], entry_count: int, labels: Mapping[str, str]
) -> SessionSummary:
    """The summary from its :func:`summary_columns`, the entry count and the labels."""
    name, messages, cached, uncached, total, cost, provider, model_id, thinking = row
    return SessionSummary(
        name=name,
        entry_count=entry_count,
        message_count=messages,
        cached_tokens=cached,
        uncached_tokens=uncached,
        total_tokens=total,
        cost=Decimal(cost),
        model=ModelRef(provider, model_id) if provider is not None else None,
        thinking_level=thinking,
        labels=dict(labels),
    )


def state_columns(state: EntryState) -> tuple[str | None, str | None, str]:
    """An entry's context state as stored: (model provider, model id, thinking level)."""
    model = state.model
    return (
        None if model is None else model.provider,
        None if model is None else model.model_id,
        state.thinking_level,
    )


def state_from_columns(row: Sequence[Any]) -> EntryState:
    """The context state from its :func:`state_columns`."""
    provider, model_id, thinking = row
    model = ModelRef(provider, model_id) if provider is not None else None
    return EntryState(model, thinking)


def entry_from_row(row: Sequence[Any]) -> Entry:
    """The record of a stored entry from (id, parent id, seq, type, timestamp ms, body JSON
    text or None when the body was not read: then the payload is empty)."""
    entry_id, parent_id, seq, entry_type, timestamp_ms, body = row
    payload = payload_from_body(body) if body is not None else {}
    return make_entry(entry_type, entry_id, parent_id, seq, timestamp_ms, payload)


def entry_record(planned: PlannedEntry) -> Entry:
    """The record of an entry as :func:`decide_append` planned it."""
    valid = planned.valid
    return make_entry(
        valid.type,
        valid.id,
        valid.parent_id,
        planned.seq,
        valid.timestamp_ms,
        payload_from_body(valid.body),
    )
