"""Importing a pi session transcript (JSONL, format versions 1, 2 and 3) into a store.

The importer is a client of the public :class:`~runstore.services.SessionRepository`: it
creates the session and appends its entries in batches, all inside one unit of work
(``repo.atomic``), so a file is imported whole or not at all. It streams: it holds the
current line and one batch (at most ``batch_entries`` entries and about ``batch_bytes``
bytes of JSON), never the file. The store itself finds repeated ids and missing parents,
so the importer keeps no index of the ids it has seen.

Format versions (the pi session manager's migrations): version 1 files (no ``version`` in
the header) have no ids; each entry gets the id ``f"{index:08x}"`` (its index among the
file's JSON objects, the header being index 0) and the previous entry as parent, and a
compaction's ``firstKeptEntryIndex`` (counted the same way) becomes ``firstKeptEntryId``.
Versions 1 and 2 name custom messages ``hookMessage``; they become role ``custom``.

Two modes. ``strict`` refuses the file at the first bad line with :class:`BadLine` (naming
it and its :class:`LineProblem`); nothing is written. ``lenient`` follows what the pi agent
itself loads and reports, by line number, every line it skipped, repaired or kept although
the format's rules say otherwise (:class:`LineIssue`):

- unreadable lines (not UTF-8, not JSON, cut off, not an object, nested deeper than the JSON
  reader follows) and entries nested deeper than the store keeps (``MAX_JSON_DEPTH``
  levels, as for any payload): skipped;
- a line holding several objects written together (``}{``): split, each imported (repaired);
- a lone UTF-16 surrogate in text (``"\\ud83d"`` without its pair: pi's own output cut
  writes these): U+FFFD in its place, the entry imported (repaired);
- a repeated id: the last line with that id is the entry, as pi's id map (a JavaScript
  ``Map`` filled in file order) resolves it; the earlier lines are skipped, and entries
  that name the id as parent before the last line hang under the last one. An identical
  repeat is simply skipped. (A file whose repeats differ is read twice: the second pass
  knows which line wins; only then are the ids of the file held in memory.)
- a compaction whose first kept entry is not an ancestor: kept as it is (pi keeps it; its
  context keeps no entry before it and its path walk goes on to the root);
- a second session header, an entry without a type or an id, an entry of a known type with
  the wrong shape, a ``leaf`` entry whose target is in no line before it: skipped (children
  of a skipped entry are attached to its parent, and reported);
- no header: a session is made up with a new id (repaired); a missing ``parentId`` or a
  parent that is in no line of the file: the entry becomes a root (repaired); a bad
  timestamp: the previous entry's time (repaired).

The header's ``id``, ``timestamp``, ``cwd`` and ``parentSession`` become the session's;
its other members (a version-1 header's ``provider``, ``modelId``, ``thinkingLevel``, and
the members of a ``metadata`` object) become the session's metadata; ``leafId`` (written by
runstore's exporter when the active leaf is not the last entry) sets the leaf. Otherwise the
last entry imported is the leaf. The source file is only ever opened for reading.
"""

from __future__ import annotations

import gc
import os
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from enum import StrEnum
from functools import partial
from typing import Any, BinaryIO, TypeAlias

import attrs
from returns.result import Failure, Result, Success

from runstore.services._primitives import MAX_EPOCH_MS
from runstore.services._sessions_rules import ms_from_iso
from runstore.services.errors import InvalidInput, NotFound
from runstore.services.sessions import (
    MAX_ID_CHARS,
    BadReference,
    DuplicateEntry,
    Entry,
    EntryId,
    NewEntry,
    NewSession,
    SessionError,
    SessionId,
    SessionRepository,
    SessionStorage,
)
from runstore.sessions_import._reader import LineReader, Parsed, Unreadable

__all__ = [
    "DEFAULT_BATCH_BYTES",
    "DEFAULT_BATCH_ENTRIES",
    "BadLine",
    "EmptySource",
    "ImportFailure",
    "ImportMode",
    "ImportReport",
    "LineIssue",
    "LineProblem",
    "SourceUnreadable",
    "import_jsonl",
]

DEFAULT_BATCH_ENTRIES = 256
"""Entries per batch appended in one call (one savepoint)."""

DEFAULT_BATCH_BYTES = 1 << 20
"""A batch is cut once its lines hold this many bytes of JSON (1 MiB)."""

_ABSENT: Any = object()
"""Marks an envelope member the line does not have."""

_HEADER_KEYS = frozenset(
    {"type", "version", "id", "timestamp", "cwd", "parentSession", "metadata", "leafId"}
)


class ImportMode(StrEnum):
    """``strict``: refuse the file at its first bad line. ``lenient``: import what is valid,
    report the rest."""

    STRICT = "strict"
    LENIENT = "lenient"


class LineProblem(StrEnum):
    """What is wrong with a line (of :class:`BadLine` and :class:`LineIssue`)."""

    UNREADABLE = "unreadable"  # not UTF-8, not JSON, cut off, not an object
    TOO_DEEP = "too_deep"  # nested deeper than the JSON reader follows
    FUSED = "fused"  # several objects on one line
    LONE_SURROGATE = "lone_surrogate"  # half of a UTF-16 pair in text
    DUPLICATE_ID = "duplicate_id"  # an id an earlier line has
    FIRST_KEPT_NOT_ANCESTOR = "first_kept_not_ancestor"  # a compaction's firstKeptEntryId
    LEAF_TARGET_MISSING = "leaf_target_missing"  # a leaf entry's targetId
    PARENT_MISSING = "parent_missing"  # a parentId in no line before it
    HEADER = "header"  # no header, a second one, or a header value that is no use
    ENTRY = "entry"  # an entry without a type or id, or of the wrong shape or time


@attrs.frozen
class LineIssue:
    """What the lenient importer did with line ``line``: ``skipped``, ``repaired`` or
    ``kept`` it (kept as the pi agent keeps it, against a rule of the format), and why."""

    line: int
    action: str
    reason: str
    problem: LineProblem = LineProblem.ENTRY

    def __str__(self) -> str:
        return f"line {self.line}: {self.action}: {self.reason}"


@attrs.frozen(kw_only=True)
class ImportReport:
    """The outcome of one import.

    ``version`` is the format version the file was read as; ``lines`` and ``bytes`` what was
    read of it; ``entries`` how many entries were imported; ``issues`` every line skipped or
    repaired, in line order (always empty in strict mode).
    """

    source: str
    session_id: SessionId
    mode: ImportMode
    version: int
    lines: int
    bytes: int
    entries: int
    leaf_id: EntryId | None
    issues: tuple[LineIssue, ...]

    @property
    def skipped(self) -> tuple[LineIssue, ...]:
        """The lines left out."""
        return tuple(i for i in self.issues if i.action == "skipped")

    @property
    def repaired(self) -> tuple[LineIssue, ...]:
        """The lines imported after a repair."""
        return tuple(i for i in self.issues if i.action == "repaired")

    @property
    def kept(self) -> tuple[LineIssue, ...]:
        """The lines imported as they are although a rule of the format says otherwise."""
        return tuple(i for i in self.issues if i.action == "kept")


@attrs.frozen
class EmptySource:
    """``source`` holds nothing to import (``detail`` says what was found); nothing created."""

    source: str
    detail: str

    def __str__(self) -> str:
        return f"{self.source} is empty: {self.detail}"


@attrs.frozen
class BadLine:
    """Strict mode refused ``source`` at line ``line`` (1-based) for ``reason`` (a
    :class:`LineProblem`, ``problem``); nothing written."""

    source: str
    line: int
    reason: str
    problem: LineProblem = LineProblem.ENTRY

    def __str__(self) -> str:
        return f"{self.source}, line {self.line}: {self.reason}"


@attrs.frozen
class SourceUnreadable:
    """``source`` could not be read (``reason`` from the operating system); nothing written."""

    source: str
    reason: str

    def __str__(self) -> str:
        return f"cannot read {self.source}: {self.reason}"


ImportFailure: TypeAlias = EmptySource | BadLine | SourceUnreadable | SessionError
"""Why an import wrote nothing."""


def import_jsonl(
    repo: SessionRepository,
    source: str | os.PathLike[str],
    *,
    mode: ImportMode | str = ImportMode.STRICT,
    session_id: str | None = None,
    batch_entries: int = DEFAULT_BATCH_ENTRIES,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    progress: Callable[[int], None] | None = None,
) -> Result[ImportReport, ImportFailure]:
    """Import the transcript at ``source`` as one session (see the module doc for the rules).

    ``session_id`` replaces the header's id (to import a file twice). ``progress`` is called
    with the bytes read so far after every batch. Returns the :class:`ImportReport`, or:
    ``SourceUnreadable`` (cannot open or read), ``EmptySource`` (nothing to import),
    ``BadLine`` (strict mode), ``Conflict`` (a session with that id exists), ``InvalidInput``
    (a header value the store refuses), ``Busy`` / ``StorageFailure``. On any failure nothing
    is written.

    Raises ``ValueError`` for an unknown ``mode`` or a batch size below 1 (programmer errors).
    """
    chosen = ImportMode(mode)
    if batch_entries < 1 or batch_bytes < 1:
        raise ValueError("batch sizes must be at least 1")
    name = os.fspath(source)
    winners: dict[str, tuple[int, int]] | None = None
    while True:
        try:
            handle = open(name, "rb")  # noqa: SIM115 - closed below; read only, never written
        except OSError as exc:
            return Failure(SourceUnreadable(name, exc.strerror or str(exc)))
        with handle, _collector_paused():
            run = _Import(
                repo, name, chosen, session_id, batch_entries, batch_bytes, progress, winners
            )
            done = repo.atomic("import session", partial(run.run, handle))
        if not (isinstance(done, Failure) and isinstance(done.failure(), _ReadAgain)):
            return done  # type: ignore[return-value]  # _ReadAgain never gets here
        winners = _last_lines(name)
        if winners is None:
            return Failure(SourceUnreadable(name, "the file could not be read again"))


@attrs.frozen
class _ReadAgain:
    """An id repeats with other content: the import is undone and the file read again,
    knowing which line of each id wins."""


def _last_lines(source: str) -> dict[str, tuple[int, int]] | None:
    """The (object index, line) of the last object of each id that appears more than once
    (indexes count JSON objects as the import does); None when the file cannot be read."""
    seen: dict[str, tuple[int, int]] = {}
    repeated: set[str] = set()
    try:
        with open(source, "rb") as handle:
            for index, item in enumerate(i for i in LineReader(handle) if isinstance(i, Parsed)):
                entry_id = item.value.get("id")
                if isinstance(entry_id, str) and item.value.get("type") != "session":
                    if entry_id in seen:
                        repeated.add(entry_id)
                    seen[entry_id] = (index, item.line)
    except OSError:
        return None
    return {entry_id: seen[entry_id] for entry_id in repeated}


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a file imports, then restore it.

    A batch keeps thousands of freshly parsed dicts alive, so the collector would run again
    and again over them (about a fifth of the import time on large-session.jsonl) to find
    nothing: entries hold no reference cycles. Reference counting still frees everything.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _Import:
    """The state of one import while the file streams by."""

    def __init__(
        self,
        repo: SessionRepository,
        source: str,
        mode: ImportMode,
        session_id: str | None,
        batch_entries: int,
        batch_bytes: int,
        progress: Callable[[int], None] | None,
        winners: Mapping[str, tuple[int, int]] | None = None,
    ) -> None:
        self.repo = repo
        self.source = source
        self.strict = mode is ImportMode.STRICT
        self.mode = mode
        self.session_id = session_id
        self.batch_entries = batch_entries
        self.batch_bytes = batch_bytes
        self.progress = progress
        self.storage: SessionStorage | None = None
        self.version: int | None = None
        self.header_line = 0
        self.header_leaf: tuple[bool, Any] = (False, None)
        self.index = -1  # index of the current JSON object among all objects (format v1)
        self.unmapped: set[int] = set()  # v1 indexes that name no imported entry
        self.prev_id: str | None = None  # v1: the entry the next one chains to
        self.last_ts: int | None = None
        self.skipped_parents: dict[str, str | None] = {}
        self.issues: list[LineIssue] = []
        self.batch: list[tuple[int, NewEntry]] = []
        self.batch_size = 0
        self.imported = 0
        self.reported_fused: set[int] = set()
        # Repeated ids (second pass only): id -> (index, line) of the line that wins; ids
        # whose winner is still to come, and the entries waiting for them as parent.
        self.winners: Mapping[str, tuple[int, int]] = winners or {}
        self.awaited: set[str] = set()
        self.waiting: dict[str, list[tuple[int, NewEntry, int]]] = {}

    # -- outcomes of a line ----------------------------------------------------------------------

    def bad(
        self, line: int, reason: str, kind: LineProblem = LineProblem.ENTRY
    ) -> ImportFailure | None:
        """Refuse the file (strict) or skip the line and report it (lenient)."""
        if self.strict:
            return BadLine(self.source, line, reason, kind)
        self.issues.append(LineIssue(line, "skipped", reason, kind))
        return None

    def repair(
        self, line: int, problem: str, fix: str, kind: LineProblem = LineProblem.ENTRY
    ) -> ImportFailure | None:
        """Refuse the file for ``problem`` (strict) or note its repair, ``fix`` (lenient)."""
        if self.strict:
            return BadLine(self.source, line, problem, kind)
        self.issues.append(LineIssue(line, "repaired", f"{problem}; {fix}", kind))
        return None

    # -- the stream ------------------------------------------------------------------------------

    def run(self, handle: BinaryIO) -> Result[ImportReport, ImportFailure | _ReadAgain]:
        reader = LineReader(handle)
        stop: ImportFailure | _ReadAgain | None
        try:
            for item in reader:
                stop = (
                    self.bad(
                        item.line,
                        item.reason,
                        LineProblem.TOO_DEEP if item.too_deep else LineProblem.UNREADABLE,
                    )
                    if isinstance(item, Unreadable)
                    else self.parsed(item)
                )
                if stop is not None:
                    return Failure(stop)
                if len(self.batch) >= self.batch_entries or self.batch_size >= self.batch_bytes:
                    stop = self.flush()
                    if stop is not None:
                        return Failure(stop)
                    if self.progress is not None:
                        self.progress(reader.consumed)
        except OSError as exc:
            return Failure(SourceUnreadable(self.source, exc.strerror or str(exc)))
        if self.storage is None:
            detail = (
                "no lines" if reader.lines == 0 else "no line holds a session header or an entry"
            )
            return Failure(EmptySource(self.source, detail))
        for waiting in self.waiting.values():  # their parent's winning line was skipped
            self.batch.extend((line, entry) for line, entry, _ in waiting)
        self.waiting.clear()
        stop = self.flush() or self.finish_leaf()
        if stop is not None:
            return Failure(stop)
        if self.progress is not None:
            self.progress(reader.consumed)
        storage = self.storage
        return storage.leaf().map(
            lambda leaf_id: ImportReport(
                source=self.source,
                session_id=storage.session_id,
                mode=self.mode,
                version=self.version or 3,
                lines=reader.lines,
                bytes=reader.consumed,
                entries=self.imported,
                leaf_id=leaf_id,
                issues=tuple(sorted(self.issues, key=lambda issue: issue.line)),
            )
        )

    def parsed(self, item: Parsed) -> ImportFailure | None:
        self.index += 1
        if item.fused > 1 and item.line not in self.reported_fused:
            self.reported_fused.add(item.line)
            fixed = self.repair(
                item.line,
                f"{item.fused} JSON objects written on one line",
                "split and imported",
                LineProblem.FUSED,
            )
            if fixed is not None:
                return fixed
        value = item.value
        if value.get("type") == "session":
            self.unmapped.add(self.index)
            if self.storage is not None:
                return self.bad(item.line, "a second session header", LineProblem.HEADER)
            return self.header(item.line, value)
        if self.storage is None:
            fixed = self.repair(
                item.line,
                "no session header before the first entry",
                "a session was made up",
                LineProblem.HEADER,
            )
            if fixed is not None:
                return fixed
            started = self.start(item.line, {})
            if started is not None:
                return started
        return self.entry(item)

    # -- the header ------------------------------------------------------------------------------

    def header(self, line: int, header: Mapping[str, Any]) -> ImportFailure | None:
        self.header_line = line
        version = header.get("version", 1)
        if isinstance(version, int) and not isinstance(version, bool) and 1 <= version <= 3:
            self.version = version
        else:
            fixed = self.repair(line, f"unknown format version {version!r}", "read by its entries")
            if fixed is not None:
                return fixed
        return self.start(line, header)

    def start(self, line: int, header: Mapping[str, Any]) -> ImportFailure | None:
        session_id = self.session_id
        if session_id is None:
            candidate = header.get("id")
            if isinstance(candidate, str) and 1 <= len(candidate) <= MAX_ID_CHARS:
                session_id = candidate
            else:
                session_id = str(uuid.uuid4())
                if header:
                    fixed = self.repair(
                        line, "the header has no usable id", f"the session is {session_id}"
                    )
                    if fixed is not None:
                        return fixed
        created: int | None = None
        if header:
            stamp = header.get("timestamp")
            created = ms_from_iso(stamp) if isinstance(stamp, str) else None
            if created is None:
                fixed = self.repair(
                    line, f"the header timestamp {stamp!r} is not a time", "now is used"
                )
                if fixed is not None:
                    return fixed
        cwd = header.get("cwd", "")
        if not isinstance(cwd, str):
            fixed = self.repair(line, f"the header cwd {cwd!r} is not text", "left empty")
            if fixed is not None:
                return fixed
            cwd = ""
        parent = header.get("parentSession")
        if parent is not None and not isinstance(parent, str):
            parent = str(parent)
        metadata = {k: v for k, v in header.items() if k not in _HEADER_KEYS}
        nested = header.get("metadata")
        if isinstance(nested, Mapping):
            metadata.update(nested)
        elif "metadata" in header:
            metadata["metadata"] = nested
        if "leafId" in header:
            self.header_leaf = (True, header["leafId"])
        created_session = self.repo.create(
            NewSession(
                id=session_id, cwd=cwd, parent_session=parent, metadata=metadata, created=created
            )
        )
        if isinstance(created_session, Failure):
            refusal: SessionError = created_session.failure()
            return refusal
        opened = self.repo.open(session_id)
        if isinstance(opened, Failure):
            not_opened: SessionError = opened.failure()
            return not_opened
        self.storage = opened.unwrap()
        return None

    # -- entries ---------------------------------------------------------------------------------

    def entry(self, item: Parsed) -> ImportFailure | None:
        line = item.line
        # The parsed object is this entry's alone: its envelope is taken out of it, and what
        # is left is the payload (cheaper than copying the rest into a new dict).
        payload = item.value
        pop = payload.pop
        entry_type = pop("type", _ABSENT)
        candidate = pop("id", _ABSENT)
        parent = pop("parentId", _ABSENT)
        stamp = pop("timestamp", None)
        if type(entry_type) is not str or not entry_type:
            self.unmapped.add(self.index)
            return self.bad(line, "an entry without a type")
        if self.version is None:
            self.version = 3 if candidate is not _ABSENT else 1
        raw: str | None = item.raw
        if self.version == 1:
            entry_id: str = f"{self.index:08x}"
            parent_id = self.prev_id
            if entry_type == "compaction" and "firstKeptEntryIndex" in payload:
                kept = payload.pop("firstKeptEntryIndex")
                raw = None
                if (
                    not isinstance(kept, int)
                    or isinstance(kept, bool)
                    or not 0 <= kept < self.index
                    or kept in self.unmapped
                ):
                    self.unmapped.add(self.index)
                    return self.bad(line, f"firstKeptEntryIndex {kept!r} names no earlier entry")
                payload["firstKeptEntryId"] = f"{kept:08x}"
        else:
            if not isinstance(candidate, str) or not candidate:
                return self.bad(line, "an entry without an id")
            entry_id = candidate
            winner = self.winners.get(entry_id)
            if winner is not None and winner[0] != self.index:
                self.awaited.add(entry_id)
                return self.bad(
                    line,
                    f"entry id {entry_id!r} appears again at line {winner[1]}; the last one is"
                    " the entry, as pi's id map keeps it",
                    LineProblem.DUPLICATE_ID,
                )
            if parent is _ABSENT:
                fixed = self.repair(
                    line, f"entry {entry_id!r} has no parentId", "imported as a root"
                )
                if fixed is not None:
                    return fixed
                parent = None
            if parent is not None and not isinstance(parent, str):
                self.skipped_parents[entry_id] = None
                return self.bad(line, f"entry {entry_id!r} has a parentId that is not text")
            parent_id = parent
        if "\\u" in item.raw and _SURROGATE_ESCAPE.search(item.raw) is not None:
            scrubbed, where = _scrub_surrogates(payload)
            if where is not None:
                fixed = self.repair(
                    line,
                    f"a lone UTF-16 surrogate in {where}",
                    "replaced by U+FFFD",
                    LineProblem.LONE_SURROGATE,
                )
                if fixed is not None:
                    return fixed
                payload, raw = scrubbed, None
        if self.version < 3 and entry_type == "message":
            message = payload.get("message")
            if type(message) is dict and message.get("role") == "hookMessage":
                payload["message"] = {**message, "role": "custom"}
                raw = None
        timestamp = (
            ms_from_iso(stamp)
            if type(stamp) is str
            else stamp
            if type(stamp) is int and 0 <= stamp <= MAX_EPOCH_MS
            else None
        )
        if timestamp is None:
            fallback = self.last_ts if self.last_ts is not None else 0
            fixed = self.repair(
                line, f"timestamp {stamp!r} is not a time", "the previous entry's is used"
            )
            if fixed is not None:
                return fixed
            timestamp = fallback
        if self.skipped_parents and parent_id in self.skipped_parents:
            resolved = self.resolve(parent_id)
            fixed = self.repair(
                line, f"parent {parent_id!r} was skipped", f"attached to {resolved!r} instead"
            )
            if fixed is not None:
                return fixed
            parent_id = resolved
        new = NewEntry(
            id=entry_id,
            parent_id=parent_id,
            type=entry_type,
            timestamp=timestamp,
            payload=payload,
            raw=raw,
        )
        self.last_ts = timestamp
        if self.version == 1:
            self.prev_id = entry_id
        if parent_id is not None and parent_id in self.awaited:
            # Its parent is an id whose winning line is still to come: it waits for it.
            self.waiting.setdefault(parent_id, []).append((line, new, len(item.raw)))
            self.awaited.add(entry_id)
            return None
        self.queue(line, new, len(item.raw))
        return None

    def queue(self, line: int, new: NewEntry, size: int) -> None:
        """Put an entry in the batch, then the entries that waited for it as parent."""
        # The store checks the entry itself (shape, id, parent) when the batch is appended.
        pending = [(line, new, size)]
        while pending:
            line, new, size = pending.pop(0)
            self.awaited.discard(new.id)
            self.batch.append((line, new))
            self.batch_size += size
            pending.extend(self.waiting.pop(new.id, ()))

    def resolve(self, parent_id: str | None) -> str | None:
        seen: set[str] = set()
        while parent_id is not None and parent_id in self.skipped_parents and parent_id not in seen:
            seen.add(parent_id)
            parent_id = self.skipped_parents[parent_id]
        return parent_id

    def flush(self) -> ImportFailure | _ReadAgain | None:
        """Append the batch; in lenient mode take refused entries out (or repair them) and go on."""
        pending, self.batch, self.batch_size = self.batch, [], 0
        storage = self.storage
        assert storage is not None
        while pending:
            appended = storage.append_many(
                [entry for _, entry in pending], strict_compactions=True
            )
            if isinstance(appended, Success):
                self.imported += len(pending)
                return None
            error = appended.failure()
            if isinstance(error, InvalidInput):
                refused = _batch_position(error)
                if refused is None:
                    return error
                position, error = refused
            elif isinstance(error, DuplicateEntry | BadReference):
                position = error.position
            else:
                return error
            line, entry = pending[position]
            kind = _problem(error)
            if self.strict:
                return BadLine(self.source, line, _reason(entry.id, error), kind)
            if isinstance(error, DuplicateEntry) and not self.winners:
                stored = storage.entry(entry.id)
                if isinstance(stored, Success) and not _same_entry(stored.unwrap(), entry):
                    return _ReadAgain()  # the last line must win: read the file again
            if position:
                head = storage.append_many([e for _, e in pending[:position]])
                if isinstance(head, Failure):
                    refusal: SessionError = head.failure()
                    return refusal
                self.imported += position
            rest = pending[position + 1 :]
            if isinstance(error, DuplicateEntry):
                self.issues.append(LineIssue(line, "skipped", _reason(entry.id, error), kind))
            elif isinstance(error, BadReference) and error.field == "parentId":
                self.issues.append(
                    LineIssue(
                        line,
                        "repaired",
                        f"parent {error.target_id!r} is in no line before; imported as a root",
                        kind,
                    )
                )
                rest = [(line, attrs.evolve(entry, parent_id=None)), *rest]
            elif isinstance(error, BadReference) and error.field == "firstKeptEntryId":
                kept = storage.append_many([entry], strict_compactions=False)
                if isinstance(kept, Failure):
                    not_kept: SessionError = kept.failure()
                    return not_kept
                self.imported += 1
                self.issues.append(
                    LineIssue(
                        line,
                        "kept",
                        f"{_reason(entry.id, error)}; kept as pi keeps it (its context keeps"
                        " no entry before the compaction)",
                        kind,
                    )
                )
            else:
                self.issues.append(LineIssue(line, "skipped", _reason(entry.id, error), kind))
                self.skipped_parents[entry.id] = entry.parent_id
                rest = [self.reattach(line_no, e) for line_no, e in rest]
            pending = rest
        return None

    def reattach(self, line: int, entry: NewEntry) -> tuple[int, NewEntry]:
        if entry.parent_id is None or entry.parent_id not in self.skipped_parents:
            return line, entry
        resolved = self.resolve(entry.parent_id)
        self.issues.append(
            LineIssue(
                line,
                "repaired",
                f"parent {entry.parent_id!r} was skipped; attached to {resolved!r}",
            )
        )
        return line, attrs.evolve(entry, parent_id=resolved)

    def finish_leaf(self) -> ImportFailure | None:
        given, leaf = self.header_leaf
        storage = self.storage
        if not given or storage is None:
            return None
        if leaf is not None and not isinstance(leaf, str):
            return self.repair(
                self.header_line, f"leafId {leaf!r} is not text", "the last entry is the leaf"
            )
        moved = storage.set_leaf(leaf)
        if isinstance(moved, Failure):
            error: SessionError = moved.failure()
            if isinstance(error, NotFound):
                return self.repair(
                    self.header_line,
                    f"leafId {leaf!r} names no imported entry",
                    "the last entry is the leaf",
                )
            return error
        return None


_BATCH_FIELD = re.compile(r"entries\[(\d+)\]\.")


def _batch_position(error: InvalidInput) -> tuple[int, InvalidInput] | None:
    """The batch position an ``append_many`` refusal names, and the refusal without it."""
    match = _BATCH_FIELD.match(error.field)
    if match is None:
        return None
    return int(match.group(1)), InvalidInput(error.field[match.end() :], error.reason)


def _reason(entry_id: str, error: DuplicateEntry | BadReference | InvalidInput) -> str:
    if isinstance(error, InvalidInput):
        return f"entry {entry_id!r}: {error}"
    if isinstance(error, DuplicateEntry):
        return f"entry id {error.entry_id!r} is the id of an earlier line (the same entry)"
    if error.field == "parentId":
        return f"entry {error.entry_id!r}: parent {error.target_id!r} is in no line before it"
    if error.field == "targetId":
        return f"leaf entry {error.entry_id!r}: target {error.target_id!r} is in no line before it"
    return f"entry {error.entry_id!r}: {error.field} {error.target_id!r} is not an ancestor"


def _problem(error: DuplicateEntry | BadReference | InvalidInput) -> LineProblem:
    if isinstance(error, DuplicateEntry):
        return LineProblem.DUPLICATE_ID
    if isinstance(error, InvalidInput):
        if "nests deeper" in error.reason:  # encode_json's depth rule (MAX_JSON_DEPTH)
            return LineProblem.TOO_DEEP
        surrogate = "surrogate" in error.reason
        return LineProblem.LONE_SURROGATE if surrogate else LineProblem.ENTRY
    return {
        "parentId": LineProblem.PARENT_MISSING,
        "targetId": LineProblem.LEAF_TARGET_MISSING,
    }.get(error.field, LineProblem.FIRST_KEPT_NOT_ANCESTOR)


def _same_entry(stored: Entry, new: NewEntry) -> bool:
    """Whether a repeated line says what the stored entry of its id says."""
    return (
        stored.type == new.type
        and stored.parent_id == new.parent_id
        and stored.timestamp_ms == new.timestamp
        and dict(stored.payload) == dict(new.payload)
    )


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _scrub_surrogates(payload: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """``payload`` with every lone surrogate in its strings and keys replaced by U+FFFD, and
    where the first one was (a path like ``message.content[0].text``; None: there was none).

    Walks with a stack of its own, not recursion (the reader accepted the nesting).
    """
    first: list[str] = []

    def clean(text: str, path: str) -> str:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            if not first:
                first.append(path)
            return _LONE_SURROGATE.sub("\ufffd", text)
        return text

    root: dict[str, Any] = {}
    stack: list[tuple[Any, Any, str]] = [(payload, root, "")]
    while stack:
        source, target, path = stack.pop()
        items = source.items() if isinstance(source, dict) else enumerate(source)
        for key, value in items:
            if isinstance(key, str):
                key = clean(key, f"{path}.{key}".lstrip("."))
                where = f"{path}.{key}".lstrip(".")
            else:
                where = f"{path}[{key}]"
            if isinstance(value, str):
                value = clean(value, where)
            elif isinstance(value, dict | list):
                copy: Any = {} if isinstance(value, dict) else [None] * len(value)
                stack.append((value, copy, where))
                value = copy
            target[key] = value
    return root, (first[0] if first else None)
