"""Import and export the JSONL session transcripts of the pi coding agent.

``import_jsonl(repo, path, mode="strict" | "lenient")`` streams a transcript of format
version 1, 2 or 3 into a :class:`~runstore.services.SessionRepository`;
``export_jsonl(repo, session_id, out)`` writes a session back as a version-3 transcript
that imports to an equal session. Both use only the public services.
"""

from __future__ import annotations

from runstore.sessions_import._exporter import ExportReport, export_jsonl
from runstore.sessions_import._importer import (
    DEFAULT_BATCH_BYTES,
    DEFAULT_BATCH_ENTRIES,
    BadLine,
    EmptySource,
    ImportFailure,
    ImportMode,
    ImportReport,
    LineIssue,
    LineProblem,
    SourceUnreadable,
    import_jsonl,
)

__all__ = [
    "DEFAULT_BATCH_BYTES",
    "DEFAULT_BATCH_ENTRIES",
    "BadLine",
    "EmptySource",
    "ExportReport",
    "ImportFailure",
    "ImportMode",
    "ImportReport",
    "LineIssue",
    "LineProblem",
    "SourceUnreadable",
    "export_jsonl",
    "import_jsonl",
]
