"""The one pagination contract every listing method of every layer follows.

- ``limit`` is the page size in rows: ``1 <= limit <= MAX_PAGE_SIZE``. Zero, a negative
  value or more than the maximum is ``InvalidInput("limit", ...)`` (``InvalidQuery`` in the
  agent services), never an empty page.
- ``cursor`` is opaque to callers: pass back the ``next_cursor`` of the previous page to get
  the next one; ``None`` starts at the beginning. A cursor that no layer could have produced
  is ``InvalidInput("cursor", ...)``, and so is one of another listing or an edited one (see
  :class:`CursorCodec`).
- Each listing method documents its order (for example "newest first"); a page never
  overlaps the previous one, even when rows are added between calls.
- ``has_more`` is True exactly when at least one more row follows this page, and then
  ``next_cursor`` is set; otherwise ``next_cursor`` is None.
- A method that returns "the newest N" of an ordered stream (such as messages) returns them
  in ascending order.
"""

from __future__ import annotations

import re
from binascii import crc32
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

import attrs
from returns.result import Failure, Result, Success

from runstore.services.errors import InvalidInput

__all__ = ["CURSOR_VERSION", "MAX_PAGE_SIZE", "CursorCodec", "Page", "check_limit", "page_of"]

T = TypeVar("T")

MAX_PAGE_SIZE = 1_000
"""The largest ``limit`` any listing accepts (rows)."""


@attrs.frozen
class Page(Generic[T]):
    """One page of a listing: ``items`` in the method's documented order, whether more rows
    follow (``has_more``), and the opaque ``next_cursor`` to fetch them (None when none)."""

    items: tuple[T, ...]
    has_more: bool
    next_cursor: str | None = None


def check_limit(limit: int, *, field: str = "limit") -> Result[int, InvalidInput]:
    """Return ``limit`` when ``1 <= limit <= MAX_PAGE_SIZE``, else ``InvalidInput(field, ...)``.

    ``bool`` is refused as well (``True`` is an ``int`` in Python).
    """
    if isinstance(limit, bool) or not isinstance(limit, int):
        return Failure(InvalidInput(field, f"must be an integer, got {type(limit).__name__}"))
    if limit < 1:
        return Failure(InvalidInput(field, f"must be at least 1, got {limit}"))
    if limit > MAX_PAGE_SIZE:
        return Failure(InvalidInput(field, f"must be at most {MAX_PAGE_SIZE}, got {limit}"))
    return Success(limit)


def page_of(rows: Sequence[T], limit: int, cursor_after: Callable[[T], str]) -> Page[T]:
    """Return the page of the first ``limit`` of ``rows``, fetched as ``limit + 1`` rows.

    ``has_more`` is whether a row beyond ``limit`` was fetched; ``next_cursor`` is then
    ``cursor_after(last kept row)``.
    """
    if len(rows) > limit:
        kept = tuple(rows[:limit])
        return Page(kept, True, cursor_after(kept[-1]))
    return Page(tuple(rows), False, None)


CURSOR_VERSION = 1
"""The version every cursor carries; a cursor of another version is refused."""

_KIND = re.compile(r"[a-z][a-z0-9_]{0,15}")
_MIN_KEY = -(2**63)
_MAX_KEY = 2**63 - 1
_MAX_CURSOR_CHARS = 200


@attrs.frozen
class CursorCodec:
    """The one opaque cursor format: a listing's position as integer keys, kind-tagged.

    ``kind`` names the listing (``[a-z][a-z0-9_]{0,15}``, e.g. ``"executions"``); ``arity`` is
    how many keys a position has (e.g. 2 for ``(started_at_ms, id)``), each a signed 64-bit
    integer. :meth:`encode` writes ``<kind>.<version>.<key>...<check>`` where ``check`` is the
    CRC-32 (8 hex digits) of the rest, so a cursor of another listing, of another version, or
    one edited by hand is refused by :meth:`decode`. The check makes a cursor tamper-evident,
    not secret: a cursor is a position, never a permission.

    Raises:
        ValueError: a ``kind`` or ``arity`` outside the rules above (a programmer error).
    """

    kind: str
    arity: int = 1

    def __attrs_post_init__(self) -> None:
        if not _KIND.fullmatch(self.kind):
            raise ValueError(f"cursor kind {self.kind!r} is not [a-z][a-z0-9_]{{0,15}}")
        if not 1 <= self.arity <= 4:
            raise ValueError(f"cursor arity must be 1..4, got {self.arity}")

    def encode(self, *keys: int) -> str:
        """Return the cursor of the position ``keys`` (``arity`` signed 64-bit integers).

        Raises:
            ValueError: the wrong number of keys, or a key that is not such an integer.
        """
        if len(keys) != self.arity or not all(
            type(key) is int and _MIN_KEY <= key <= _MAX_KEY for key in keys
        ):
            raise ValueError(f"a {self.kind} cursor holds {self.arity} int64 keys, got {keys!r}")
        body = ".".join((self.kind, str(CURSOR_VERSION), *map(str, keys)))
        return f"{body}.{crc32(body.encode('ascii')):08x}"

    def decode(
        self, cursor: object, field: str = "cursor"
    ) -> Result[tuple[int, ...] | None, InvalidInput]:
        """Return the position ``cursor`` names (None for a ``None`` cursor: the start).

        ``InvalidInput(field, ...)`` for anything :meth:`encode` of this codec did not
        produce: another type, another listing's or version's cursor, a changed key or check.
        """
        if cursor is None:
            return Success(None)
        if type(cursor) is not str:
            return Failure(
                InvalidInput(field, f"must be text or None, got {type(cursor).__name__}")
            )
        parts = cursor.split(".") if len(cursor) <= _MAX_CURSOR_CHARS else []
        if len(parts) == self.arity + 3 and parts[0] == self.kind:
            try:
                keys = tuple(int(part) for part in parts[2:-1])
            except ValueError:
                keys = ()
            # Re-encoding refuses every non-canonical spelling ("+1", "01", " 1", "1_0").
            in_range = keys and all(_MIN_KEY <= key <= _MAX_KEY for key in keys)
            if in_range and self.encode(*keys) == cursor:
                return Success(keys)
        return Failure(InvalidInput(field, f"not a cursor of this listing ({self.kind})"))
