"""The one pagination contract every listing method of every layer follows.

- ``limit`` is the page size in rows: ``1 <= limit <= MAX_PAGE_SIZE``. Zero, a negative
  value or more than the maximum is ``InvalidInput("limit", ...)`` (``InvalidQuery`` in the
  agent services), never an empty page.
- ``cursor`` is opaque to callers: pass back the ``next_cursor`` of the previous page to get
  the next one; ``None`` starts at the beginning. A cursor that no layer could have produced
  is ``InvalidInput("cursor", ...)``.
- Each listing method documents its order (for example "newest first"); a page never
  overlaps the previous one, even when rows are added between calls.
- ``has_more`` is True exactly when at least one more row follows this page, and then
  ``next_cursor`` is set; otherwise ``next_cursor`` is None.
- A method that returns "the newest N" of an ordered stream (such as messages) returns them
  in ascending order.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import attrs
from returns.result import Failure, Result, Success

from runstore.services.errors import InvalidInput

__all__ = ["MAX_PAGE_SIZE", "Page", "check_limit"]

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
