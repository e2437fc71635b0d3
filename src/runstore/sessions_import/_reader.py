"""Reading a JSONL transcript line by line, without ever holding more than one line.

Each physical line becomes zero or more :class:`Parsed` objects: none for a blank line, one
for a well-formed line, two or more for a line on which a crash fused several objects
(``}{``), and a :class:`Unreadable` for anything else. JSON is read as RFC 8259 says: the
constants ``NaN`` and ``Infinity`` are refused, and the text must be UTF-8. A line nested
deeper than Python's JSON reader can follow (it recurses once a level, so about a thousand
levels) is :class:`Unreadable` too, never a ``RecursionError``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, NamedTuple

__all__ = ["LineReader", "Parsed", "Unreadable"]


class _NotJson(ValueError):
    """A JSON constant (NaN, Infinity) that RFC 8259 does not allow."""


def _reject_constant(name: str) -> Any:
    raise _NotJson(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)

_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]
"""``raw_decode`` without its wrapper (one call less per line); StopIteration: not JSON."""

_JSON_SPACE = " \t\n\r"
"""The white space JSON allows around a value (RFC 8259); a raw object is kept without it."""


class Parsed(NamedTuple):
    """One JSON object of line ``line``; ``raw`` is its text; ``fused`` counts the objects
    that shared the line (1 for a normal line)."""

    line: int
    value: dict[str, Any]
    raw: str
    fused: int = 1


class Unreadable(NamedTuple):
    """Line ``line`` holds no usable JSON object, for ``reason``; ``too_deep`` when that is
    nesting deeper than the reader follows."""

    line: int
    reason: str
    too_deep: bool = False


TOO_DEEP = "nested too deeply: lists and objects inside each other beyond what can be read"


def _split_fused(text: str) -> list[tuple[dict[str, Any], str]] | None:
    """Split a line holding several JSON objects one after the other, or return None."""
    pieces: list[tuple[dict[str, Any], str]] = []
    index, end = 0, len(text)
    while index < end:
        while index < end and text[index] in " \t":
            index += 1
        if index == end:
            break
        try:
            value, stop = _DECODER.raw_decode(text, index)
        except (ValueError, RecursionError):
            return None
        if not isinstance(value, dict):
            return None
        pieces.append((value, text[index:stop]))
        index = stop
    return pieces if len(pieces) > 1 else None


class LineReader:
    """Iterate over the non-blank lines of ``source`` as :class:`Parsed` / :class:`Unreadable`.

    Lines end at ``\\n`` (a ``\\r`` before it and a byte-order mark at the very start are
    dropped). ``lines`` counts the physical lines read so far and ``consumed`` their bytes.
    Memory held: the current line only.
    """

    def __init__(self, source: BinaryIO) -> None:
        self._source = source
        self.lines = 0
        self.consumed = 0

    def __iter__(self) -> Iterator[Parsed | Unreadable]:
        scan = _SCAN
        make = tuple.__new__
        for raw_line in self._source:
            self.lines += 1
            self.consumed += len(raw_line)
            line = raw_line.rstrip(b"\r\n")
            if self.lines == 1 and line.startswith(b"\xef\xbb\xbf"):
                line = line[3:]
            # The common case first: one UTF-8 JSON object filling the line.
            text = ""
            try:
                text = line.decode("utf-8")
                value, end = scan(text, 0) if text[:1] == "{" else (None, -1)
            except (ValueError, StopIteration, RecursionError):  # _parse says why
                value, end = None, -1
            if end == len(text) and type(value) is dict:
                yield make(Parsed, (self.lines, value, text, 1))
            elif line.strip():
                yield from _parse(self.lines, line)


def _parse(number: int, line: bytes) -> Iterator[Parsed | Unreadable]:
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        yield Unreadable(number, f"not UTF-8 text ({exc.reason} at byte {exc.start})")
        return
    try:
        value = _DECODER.decode(text)
    except RecursionError:
        yield Unreadable(number, TOO_DEEP, too_deep=True)
        return
    except _NotJson as exc:
        yield Unreadable(number, str(exc))
        return
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":
            pieces = _split_fused(text)
            if pieces is not None:
                for piece, raw in pieces:
                    yield Parsed(number, piece, raw, fused=len(pieces))
                return
        # An unterminated string, or an error at the very end, means the line stops inside
        # a value: a write that was cut off (a crash while writing).
        cut = exc.msg.startswith("Unterminated string") or exc.pos >= len(text.rstrip()) - 1
        yield Unreadable(
            number,
            "cut off: the line ends inside a JSON value"
            if cut
            else f"not JSON: {exc.msg} (column {exc.colno})",
        )
        return
    if not isinstance(value, dict):
        yield Unreadable(number, f"a JSON {type(value).__name__}, not an object")
        return
    yield Parsed(number, value, text.strip(_JSON_SPACE))
