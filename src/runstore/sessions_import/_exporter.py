"""Exporting a session as a pi transcript (JSONL, format version 3).

The file has exactly one header line, then one line per entry in ``seq`` order (parents
before children). Entry lines are the format's: ``type``, ``id``, ``parentId``,
``timestamp`` (ISO 8601, ms, UTC) and the payload's members. The header carries the
session's ``id``, ``timestamp`` (creation), ``cwd``, ``parentSession`` (when set), the
session's ``metadata`` (when not empty) and, when the active leaf is not the one the last
line sets (the last entry itself, or a ``leaf`` entry's target: leaf moves are entries, so
this happens only for sessions stored before they were), ``leafId``: members the pi agent
ignores and runstore's importer reads back, so that an exported session imports to an equal
one.
"""

from __future__ import annotations

from typing import Any, TextIO

import attrs
from returns.result import Failure, Result, Success

from runstore.services._sessions_rules import dump_json, iso_from_ms, leaf_after
from runstore.services.sessions import (
    Entry,
    EntryId,
    SessionError,
    SessionId,
    SessionRecord,
    SessionRepository,
)

__all__ = ["ExportReport", "entry_line", "export_jsonl", "header_line"]

_PAGE = 1_000


@attrs.frozen(kw_only=True)
class ExportReport:
    """What was written: the session, how many entries, and its leaf."""

    session_id: SessionId
    entries: int
    leaf_id: EntryId | None


def header_line(
    record: SessionRecord, last_entry_id: str | None, *, has_entries: bool | None = None
) -> str:
    """The version-3 header of ``record`` (``last_entry_id``: the leaf its newest entry sets;
    ``has_entries``: whether it has any, by default whether ``last_entry_id`` is given)."""
    header: dict[str, Any] = {
        "type": "session",
        "version": 3,
        "id": record.id,
        "timestamp": iso_from_ms(record.created_ms),
        "cwd": record.cwd,
    }
    if record.parent_session is not None:
        header["parentSession"] = record.parent_session
    if record.metadata:
        header["metadata"] = dict(record.metadata)
    if (last_entry_id is not None if has_entries is None else has_entries) and (
        record.leaf_id != last_entry_id
    ):
        header["leafId"] = record.leaf_id
    return dump_json(header)


def entry_line(entry: Entry) -> str:
    """One entry as the format writes it."""
    return dump_json(
        {
            "type": entry.type,
            "id": entry.id,
            "parentId": entry.parent_id,
            "timestamp": iso_from_ms(entry.timestamp_ms),
            **entry.payload,
        }
    )


def export_jsonl(
    repo: SessionRepository, session_id: str, out: TextIO
) -> Result[ExportReport, SessionError]:
    """Write session ``session_id`` to ``out`` as a version-3 transcript, a page at a time.

    The entries written are those the session had when the export began (entries are
    immutable, so later appends are simply not included). Failures: ``NotFound`` (no such
    session), ``Busy`` / ``StorageFailure``. Errors writing to ``out`` propagate.
    """
    got = repo.get(session_id)
    if isinstance(got, Failure):
        return Failure(got.failure())
    record = got.unwrap()
    opened = repo.open(session_id)
    if isinstance(opened, Failure):
        return Failure(opened.failure())
    storage = opened.unwrap()
    count = record.summary.entry_count
    last_id: str | None = None
    if count:
        last = storage.entries(after_seq=count - 1, limit=1)
        if isinstance(last, Failure):
            return Failure(last.failure())
        newest = last.unwrap().items[0]
        last_id = leaf_after(newest.type, newest.id, newest.payload)
    out.write(header_line(record, last_id, has_entries=count > 0) + "\n")
    after = 0
    while after < count:
        page = storage.entries(after_seq=after, limit=min(_PAGE, count - after))
        if isinstance(page, Failure):
            return Failure(page.failure())
        items = page.unwrap().items
        out.write("".join(entry_line(entry) + "\n" for entry in items))
        after = items[-1].seq
    return Success(ExportReport(session_id=record.id, entries=count, leaf_id=record.leaf_id))
