"""The quarantine file: tests whose failures do not fail a recorded pytest session.

A team keeps it in the repository, beside the code, as ``.runstore-quarantine.toml`` at the
project's root (pytest's rootdir; for the command line, the folder holding the database's
``.runstore`` folder, else the current one): not inside ``.runstore/``, whose ``.gitignore``
of ``*`` would hide it from git. ``[tool.runstore] quarantine_file = "path"`` in the root's
``pyproject.toml`` names another file (relative to the root). One ``[[quarantine]]`` table
per entry::

    # Tests that may fail without failing CI, each with an owner and an end date.
    [[quarantine]]
    nodeid = "tests/test_cache.py::test_warm"   # exactly one of nodeid and pattern
    owner = "alice"
    reason = "races the cache warmer (#123)"
    expires = 2026-12-31                       # a TOML date: the last day it applies
    added = 2026-12-01                         # optional

- ``nodeid`` is a pytest node id, matched exactly; ``pattern`` is matched over node ids with
  :func:`fnmatch.fnmatchcase` (case-sensitive; ``*`` matches any run of characters, ``/``
  and ``::`` included, ``?`` one character, ``[abc]`` one of those, so a literal ``[`` of a
  parametrized id is written ``[[]``).
- ``owner`` and ``reason`` are required, non-blank text. ``expires`` is required: an entry
  without an end stays forever, which Trunk's and Datadog's quarantines both avoid by
  time-boxing it. An entry applies up to and including its ``expires`` day (the local
  date); from the next day it is *expired*: it no longer applies and the plugin reports it.
- A ``pattern`` made only of wildcards and separators (``*``, ``**``, ``*::*``) would match
  every test and is refused. ``expires`` may lie at most :data:`MAX_DAYS` days after today
  and ``added`` not after today (a day of slack for both, for another time zone's today),
  the limits ``runstore quarantine add`` applies.
- No other key is allowed, in an entry or at the top level (a misspelt ``expire`` would
  otherwise make an entry that never ends); an entry's ``nodeid`` or ``pattern`` may not
  appear twice.

Reading uses :mod:`tomllib`. :func:`add_entry` and :func:`remove_entry` change only the
lines of the entry they add or remove, so every comment and the layout of the rest stay
byte for byte; the new text is read back and must hold exactly the entries expected before
it replaces the file atomically (a temporary file in the same folder, then
``os.replace``): a refused change writes nothing. An edit holds an advisory lock
(``fcntl.flock``, exclusive) on the file's folder from reading the file to replacing it,
so edits made at once by several processes each see the one before and none is lost; the
lock needs no file of its own, and is released when the edit ends or its process dies.
Where :mod:`fcntl` is missing (Windows), edits are not serialized: two made at the same
instant may keep only one of them. (No TOML writer is needed: entries are
flat tables of strings and dates, which ``json.dumps`` and ``date.isoformat`` spell as TOML
does.) Every expected failure is a
:class:`QuarantineFileError` value naming the file, the entry (1-based, in file order) and
the key.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from datetime import date, timedelta
from fnmatch import fnmatchcase
from typing import Any, Literal, TypeAlias

import attrs
from returns.result import Failure, Result, Success

__all__ = [
    "MAX_DAYS",
    "QUARANTINE_FILE",
    "Quarantine",
    "QuarantineEntry",
    "QuarantineFileError",
    "QuarantineMatch",
    "add_entry",
    "load_quarantine",
    "pattern_problem",
    "quarantine_path",
    "remove_entry",
    "text_problem",
    "today",
]

MAX_DAYS = 3_650
"""The furthest ``expires`` may lie from today (ten years): a quarantine is meant to end."""

_CLOCK_SLACK = timedelta(days=1)
"""What reading allows beyond today for ``added`` and beyond ``MAX_DAYS`` for ``expires``:
an entry added where the date is already tomorrow (another time zone) still reads."""

QUARANTINE_FILE = ".runstore-quarantine.toml"
"""The quarantine file's name at the project root (see the module docstring)."""

today: Callable[[], date] = date.today
"""The local date entries are judged on (``date.today`` as imported, so a test that fakes
``datetime`` cannot move it; a test of the quarantine replaces this name itself)."""

_TABLE = "quarantine"
_ENTRY_KEYS = ("nodeid", "pattern", "owner", "reason", "expires", "added")

ErrorKind: TypeAlias = Literal["unreadable", "syntax", "invalid", "duplicate", "not_found"]
"""The kinds of :class:`QuarantineFileError`."""


@attrs.frozen
class QuarantineFileError:
    """Why a quarantine file could not be read or changed; nothing was written.

    ``kind``: ``unreadable`` (the file cannot be read or written: ``reason`` holds the OS
    error), ``syntax`` (not TOML), ``invalid`` (a missing, unknown or ill-typed key, a blank
    text, a bad date), ``duplicate`` (an entry's ``nodeid`` or ``pattern`` given twice, or
    added again), ``not_found`` (:func:`remove_entry` of a node id or pattern no entry
    has). ``entry`` is the entry's 1-based position in the file (None for the file as a
    whole), ``key`` the key at fault (None when none is).
    """

    path: str
    kind: ErrorKind
    reason: str
    entry: int | None = None
    key: str | None = None

    def __str__(self) -> str:
        where = self.path
        if self.entry is not None:
            where += f", entry {self.entry}"
        if self.key is not None:
            where += f", key {self.key!r}"
        return f"{where}: {self.reason}"


@attrs.frozen
class QuarantineEntry:
    """One entry: exactly one of ``nodeid`` (exact) and ``pattern`` (fnmatch), who owns it,
    why, the last day it applies (``expires``) and when it was added (None: not said)."""

    owner: str
    reason: str
    expires: date
    nodeid: str | None = None
    pattern: str | None = None
    added: date | None = None

    @property
    def key(self) -> str:
        """What names the entry: its node id or its pattern."""
        return self.nodeid if self.nodeid is not None else str(self.pattern)

    def matches(self, nodeid: str) -> bool:
        """Whether the entry names ``nodeid`` (whatever its expiry)."""
        if self.nodeid is not None:
            return nodeid == self.nodeid
        return self.pattern is not None and fnmatchcase(nodeid, self.pattern)

    def is_active(self, today: date) -> bool:
        """Whether the entry applies on ``today``: up to and including ``expires``."""
        return today <= self.expires


@attrs.frozen
class QuarantineMatch:
    """What the quarantine says of one node id on one day: the entry that applies (None:
    none) and the expired entries that name it (they no longer apply)."""

    active: QuarantineEntry | None
    expired: tuple[QuarantineEntry, ...] = ()


@attrs.frozen
class Quarantine:
    """The entries of one quarantine file, in file order (``path`` as given; a missing file
    is an empty quarantine)."""

    path: str
    entries: tuple[QuarantineEntry, ...] = ()

    def match(self, nodeid: str, today: date) -> QuarantineMatch:
        """The entry that applies to ``nodeid`` on ``today`` (a ``nodeid`` entry before a
        pattern, else the first matching pattern in file order), and the expired ones
        naming it."""
        named = [e for e in self.entries if e.matches(nodeid)]
        active = [e for e in named if e.is_active(today)]
        active.sort(key=lambda e: e.nodeid is None)  # stable: exact entries first
        return QuarantineMatch(
            active[0] if active else None, tuple(e for e in named if not e.is_active(today))
        )

    def find(self, key: str) -> QuarantineEntry | None:
        """The entry whose node id or pattern is ``key``, else None."""
        return next((e for e in self.entries if e.key == key), None)


# -- where the file is --------------------------------------------------------------------------


def quarantine_path(root: str) -> Result[str, QuarantineFileError]:
    """The quarantine file of the project at ``root``: ``[tool.runstore] quarantine_file``
    of ``root/pyproject.toml`` (relative to ``root``), else ``root/.runstore-quarantine.toml``.
    The table is read by ``runstore._config.read_config``, runstore's one reader of it
    (imported here only, so importing this module stays cheap).

    Failures: :class:`QuarantineFileError` (``invalid``) naming ``pyproject.toml`` and the
    key when ``read_config`` refuses the file (not TOML, an unknown key of
    ``[tool.runstore]``, a ``quarantine_file`` that is not a non-empty string); the flaky
    policy is not read, so a bad ``[tool.runstore.flaky]`` does not stop the quarantine.
    """
    from runstore._config import CONFIG_FILE, read_config

    found = read_config(os.path.join(root, CONFIG_FILE), flaky=False)
    if isinstance(found, Failure):
        error = found.failure()
        return Failure(QuarantineFileError(error.path, "invalid", error.reason,
                                           key=error.key or None))
    named = found.unwrap().quarantine_file
    return Success(os.path.join(root, QUARANTINE_FILE if named is None else named))


# -- reading ------------------------------------------------------------------------------------


def _os_reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def load_quarantine(path: str) -> Result[Quarantine, QuarantineFileError]:
    """Read and check the quarantine file ``path`` (a missing file: no entries).

    Failures (:class:`QuarantineFileError`): ``unreadable`` (not a readable file),
    ``syntax`` (not UTF-8 TOML; a leading byte order mark is read past), ``invalid`` (a
    top-level key other than ``quarantine``, ``quarantine`` not an array of tables, an
    entry with a missing, unknown, ill-typed or blank key, neither or both of ``nodeid``
    and ``pattern``, a pattern of wildcards only, ``expires``/``added`` not a TOML date or
    beyond the limits of the module docstring), ``duplicate``
    (two entries with one node id or pattern).
    """
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        return Success(Quarantine(path))
    except OSError as exc:
        return Failure(QuarantineFileError(path, "unreadable", _os_reason(exc)))
    return _parse(path, raw)


_BOM = b"\xef\xbb\xbf"
"""The UTF-8 byte order mark some Windows editors open a file with: read past, and kept."""


def _parse(path: str, raw: bytes) -> Result[Quarantine, QuarantineFileError]:
    import tomllib

    try:
        data = tomllib.loads(raw.removeprefix(_BOM).decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        return Failure(QuarantineFileError(path, "syntax", f"not TOML: {exc}"))
    return _entries(path, data)


def _entries(path: str, data: Mapping[str, Any]) -> Result[Quarantine, QuarantineFileError]:
    unknown = sorted(k for k in data if k != _TABLE)
    if unknown:
        return Failure(QuarantineFileError(
            path, "invalid", f"unknown key (only [[{_TABLE}]] tables belong here)",
            key=unknown[0]))
    tables = data.get(_TABLE, [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        return Failure(QuarantineFileError(
            path, "invalid", f"must be an array of tables ([[{_TABLE}]])", key=_TABLE))
    entries: list[QuarantineEntry] = []
    seen: dict[str, int] = {}
    for number, table in enumerate(tables, start=1):
        checked = _entry(path, number, table)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        entry = checked.unwrap()
        if entry.key in seen:
            return Failure(QuarantineFileError(
                path, "duplicate", f"{entry.key!r} is also entry {seen[entry.key]}",
                entry=number, key="nodeid" if entry.nodeid is not None else "pattern"))
        seen[entry.key] = number
        entries.append(entry)
    return Success(Quarantine(path, tuple(entries)))


def _entry(
    path: str, number: int, table: Mapping[str, Any]
) -> Result[QuarantineEntry, QuarantineFileError]:
    def bad(key: str | None, reason: str) -> Result[QuarantineEntry, QuarantineFileError]:
        return Failure(QuarantineFileError(path, "invalid", reason, entry=number, key=key))

    for key in table:
        if key not in _ENTRY_KEYS:
            return bad(key, f"unknown key (an entry has {', '.join(_ENTRY_KEYS)})")
    has = [k for k in ("nodeid", "pattern") if k in table]
    if len(has) != 1:
        return bad(None, "give exactly one of nodeid and pattern"
                   + (" (both given)" if has else ""))
    texts: dict[str, str] = {}
    for key in (has[0], "owner", "reason"):
        if key not in table:
            return bad(key, "missing")
        value = table[key]
        if not isinstance(value, str):
            return bad(key, f"must be a string, got {_toml_type(value)}")
        problem = text_problem(value)
        if problem is not None:
            return bad(key, problem)
        texts[key] = value
    if "pattern" in texts:
        problem = pattern_problem(texts["pattern"])
        if problem is not None:
            return bad("pattern", problem)
    dates: dict[str, date | None] = {}
    for key in ("expires", "added"):
        if key not in table:
            if key == "expires":
                return bad(key, "missing: every entry needs a last day (expires = YYYY-MM-DD)")
            dates[key] = None
            continue
        value = table[key]
        if not isinstance(value, date) or hasattr(value, "hour"):
            return bad(key, f"must be a TOML date (YYYY-MM-DD, unquoted), got {_toml_type(value)}")
        dates[key] = value
    expires, added, now = dates["expires"], dates["added"], today()
    assert expires is not None
    if expires > now + timedelta(days=MAX_DAYS) + _CLOCK_SLACK:
        return bad("expires", f"{expires.isoformat()} is more than {MAX_DAYS} days away "
                   f"(today is {now.isoformat()}): a quarantine is meant to end")
    if added is not None and added > now + _CLOCK_SLACK:
        return bad("added", f"{added.isoformat()} is in the future (today is {now.isoformat()})")
    return Success(QuarantineEntry(
        owner=texts["owner"], reason=texts["reason"], expires=expires,
        nodeid=texts.get("nodeid"), pattern=texts.get("pattern"), added=dates["added"]))


def _toml_type(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return f"the string {value!r}"
    if hasattr(value, "hour"):
        return "a time or date-time"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return type(value).__name__


_FORMATTING = frozenset("\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
"""Line and paragraph separators (U+2028, U+2029) and the bidirectional embeddings,
overrides and isolates (U+202A-U+202E, U+2066-U+2069): they break a line or reorder the
text around them where the entry is shown (Unicode TR9; the "Trojan Source" attack)."""


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be an entry's text (blank; a control character, Unicode
    category ``Cc``: C0, DEL, C1; a line or paragraph separator or a bidirectional control,
    :data:`_FORMATTING`; a lone surrogate: no node id holds one and no reader wants it),
    else None."""
    import unicodedata

    if not value.strip():
        return "must not be blank"
    for char in value:
        if unicodedata.category(char) in ("Cc", "Cs") or char in _FORMATTING:
            return ("must not hold a control character, a line separator, a bidirectional "
                    f"control or a lone surrogate, found U+{ord(char):04X}")
    return None


_WILDCARDS_ONLY = re.compile(r"[*?:/]*")


def pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` cannot be an entry's pattern: made only of wildcards and separators
    (``*``, ``**``, ``*::*``, ``*/*``...), it matches every test of the suite, which would
    quarantine the whole session; else None."""
    if _WILDCARDS_ONLY.fullmatch(pattern):
        return ("matches every test (only wildcards and separators): name a folder, a "
                "file or a test, e.g. tests/net/*")
    return None


# -- writing ------------------------------------------------------------------------------------

_Changed: TypeAlias = "Result[tuple[str, Quarantine], QuarantineFileError]"

_HEADER = re.compile(r"[ \t]*\[\[[ \t]*quarantine[ \t]*\]\][ \t]*(#.*)?\r?\n?")
_ANY_HEADER = re.compile(r"[ \t]*\[")
_COMMENT_OR_BLANK = re.compile(r"[ \t]*(#.*)?\r?\n?")


def _rendered(entry: QuarantineEntry) -> str:
    """``entry`` as one ``[[quarantine]]`` table. A JSON string is a TOML basic string here:
    every escape ``json.dumps`` writes (``\\" \\\\ \\n \\uXXXX``...) is also TOML's, and
    entries hold no control characters."""
    lines = ["[[quarantine]]"]
    for key in _ENTRY_KEYS:
        value = getattr(entry, key)
        if isinstance(value, str):
            lines.append(f"{key} = {json.dumps(value, ensure_ascii=False)}")
        elif isinstance(value, date):
            lines.append(f"{key} = {value.isoformat()}")
    return "\n".join(lines) + "\n"


def add_entry(path: str, entry: QuarantineEntry) -> Result[Quarantine, QuarantineFileError]:
    """Append ``entry`` to the quarantine file ``path`` (created when missing) as a new
    ``[[quarantine]]`` table after a blank line, in the file's line ending (CRLF when it
    has one, else LF), leaving every other byte of the file as it was, and return the
    quarantine it now holds. A missing folder is ``unreadable``, naming it.

    The file as it is must read cleanly (failures of :func:`load_quarantine`); an entry
    with the same node id or pattern is ``duplicate``; an entry the file could not hold
    (a blank or control-character text) or a file whose entries are not ``[[quarantine]]``
    tables (an inline array) is ``invalid``. A failure writes nothing; the file is
    replaced atomically.
    """
    for key in ("owner", "reason", "nodeid" if entry.nodeid is not None else "pattern"):
        value = getattr(entry, key)
        problem = "missing" if value is None else text_problem(value)
        if problem is not None:
            return Failure(QuarantineFileError(path, "invalid", problem, key=key))
    if entry.pattern is not None:
        problem = pattern_problem(entry.pattern)
        if problem is not None:
            return Failure(QuarantineFileError(path, "invalid", problem, key="pattern"))
    if entry.nodeid is not None and entry.pattern is not None:
        return Failure(QuarantineFileError(
            path, "invalid", "give exactly one of nodeid and pattern (both given)"))

    def change(text: str, before: Quarantine) -> _Changed:
        known = before.find(entry.key)
        if known is not None:
            number = before.entries.index(known) + 1
            return Failure(QuarantineFileError(
                path, "duplicate", f"{entry.key!r} is already quarantined (entry {number}); "
                "remove it first", entry=number,
                key="nodeid" if entry.nodeid is not None else "pattern"))
        newline = "\r\n" if "\r\n" in text else "\n"  # the file's own line ending
        if text and not text.endswith("\n"):
            text += newline
        added = _rendered(entry).replace("\n", newline)
        return Success((text + (newline if text.strip() else "") + added,
                        attrs.evolve(before, entries=(*before.entries, entry))))

    return _rewrite(path, change)


def remove_entry(path: str, key: str) -> Result[QuarantineEntry, QuarantineFileError]:
    """Remove the entry whose node id or pattern is ``key`` from the quarantine file
    ``path`` and return it. Only the entry's own lines go: its ``[[quarantine]]`` header,
    the comment lines right above it (unless they open the file) and its keys; blank and
    comment lines after its last key stay, as they introduce what follows.

    Failures: those of :func:`load_quarantine`; ``not_found`` when no entry has ``key``;
    ``invalid`` when the file's entries are not ``[[quarantine]]`` tables (an inline
    array). A failure writes nothing; the file is replaced atomically.
    """
    removed: list[QuarantineEntry] = []

    def change(text: str, before: Quarantine) -> _Changed:
        found = before.find(key)
        if found is None:
            known = ", ".join(repr(e.key) for e in before.entries) or "none"
            return Failure(QuarantineFileError(
                path, "not_found", f"no entry has the node id or pattern {key!r} "
                f"(entries: {known})"))
        removed.append(found)
        expected = attrs.evolve(before, entries=tuple(e for e in before.entries
                                                      if e is not found))
        lines = text.splitlines(keepends=True)
        headers = [n for n, line in enumerate(lines) if _HEADER.fullmatch(line)]
        if len(headers) != len(before.entries):
            return Success((text, expected))  # not tables: _rewrite refuses the unchanged text
        number = before.entries.index(found)
        start = headers[number]
        while start > 0 and lines[start - 1].lstrip().startswith("#"):
            start -= 1
        if start == 0:  # a comment block opening the file is the file's, not the entry's
            start = headers[number]
        end = next((n for n in range(headers[number] + 1, len(lines))
                    if _ANY_HEADER.match(lines[n])), len(lines))
        while end > headers[number] + 1 and _COMMENT_OR_BLANK.fullmatch(lines[end - 1]):
            end -= 1
        if start > 0 and not lines[start - 1].strip() and (
                end == len(lines) or not lines[end].strip()):
            start -= 1  # no double blank line where the entry was
        return Success(("".join(lines[:start] + lines[end:]), expected))

    return _rewrite(path, change).map(lambda _: removed[0])


@contextlib.contextmanager
def _locked(folder: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``folder`` (the quarantine file's) while the body
    runs; without :mod:`fcntl`, no lock. ``os.replace`` gives the file a new inode, so the
    lock is on the folder, which stays."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks (see the module docstring)
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _rewrite(
    path: str,
    change: Callable[[str, Quarantine], _Changed],
) -> Result[Quarantine, QuarantineFileError]:
    """Read ``path`` (missing: empty), let ``change`` give the new text and the quarantine it
    must read as, check that it does, and replace the file atomically, all under the
    folder's lock (:func:`_locked`)."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return Failure(QuarantineFileError(
            path, "unreadable", f"cannot write: its folder {folder} does not exist"))
    try:
        with _locked(folder):
            return _rewrite_locked(path, change)
    except OSError as exc:
        return Failure(QuarantineFileError(path, "unreadable",
                                           f"cannot lock its folder: {_os_reason(exc)}"))


def _rewrite_locked(
    path: str,
    change: Callable[[str, Quarantine], _Changed],
) -> Result[Quarantine, QuarantineFileError]:
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        raw = b""
    except OSError as exc:
        return Failure(QuarantineFileError(path, "unreadable", _os_reason(exc)))
    before = _parse(path, raw)
    if isinstance(before, Failure):
        return before
    bom = _BOM if raw.startswith(_BOM) else b""
    changed = change(raw.removeprefix(bom).decode("utf-8"), before.unwrap())
    if isinstance(changed, Failure):
        return Failure(changed.failure())
    text, expected = changed.unwrap()
    after = _parse(path, text.encode("utf-8"))
    if isinstance(after, Failure) or after.unwrap() != expected:
        return Failure(QuarantineFileError(
            path, "invalid", "runstore edits entries written as [[quarantine]] tables; "
            "this file holds them otherwise (edit it by hand)", key=_TABLE))
    written = _replace(path, bom + text.encode("utf-8"))
    return after if written is None else Failure(written)


def _replace(path: str, data: bytes) -> QuarantineFileError | None:
    """Write ``data`` to ``path`` through a temporary file in its folder and ``os.replace``
    (the file's permission bits kept); None when done."""
    import tempfile  # the write path only: it costs the readers more than this module

    folder = os.path.dirname(os.path.abspath(path))
    try:
        mode = os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o644
    except OSError as exc:
        return QuarantineFileError(path, "unreadable", _os_reason(exc))
    try:
        fd, temporary = tempfile.mkstemp(prefix=".runstore-quarantine.", dir=folder)
    except OSError as exc:
        return QuarantineFileError(path, "unreadable", f"cannot write: {_os_reason(exc)}")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        return QuarantineFileError(path, "unreadable", f"cannot write: {_os_reason(exc)}")
    return None
