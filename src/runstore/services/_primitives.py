"""The primitives every domain's rules share: epoch ms, text, JSON, and one validation style.

Validation style: a validator is a function ``check_<thing>(value, field, ...)`` that returns
``Result[T, InvalidInput]``: ``Success`` with the checked value (as the type the domain keeps,
e.g. a plain ``str`` for a ``str`` subclass), or ``Failure(InvalidInput(field, reason))`` where
``field`` names the path of the offending value (``metadata['a'][0]``, ``messages[3].content``).
Validators compose with :func:`first_failure` (checks that only refuse) and :func:`within`
(name a nested value's path under its parent's field). Nothing here consults storage.

Everything is pure and cheap to import: the command line pays for it on every call.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any, TypeAlias, TypeVar

from returns.result import Failure, Result, Success

from runstore.services.errors import InvalidInput

__all__ = [
    "MAX_EPOCH_MS",
    "MAX_INT64",
    "MAX_JSON_DEPTH",
    "MIN_INT64",
    "JsonValue",
    "and_then",
    "check_callable",
    "check_int",
    "check_json",
    "check_optional",
    "check_text",
    "decode_json",
    "describe",
    "encode_json",
    "first_failure",
    "iso_from_ms",
    "member_of",
    "named_error",
    "text_problem",
    "to_epoch_ms",
    "type_problem",
    "type_refusal",
    "within",
]

T = TypeVar("T")
U = TypeVar("U")
E = TypeVar("E")
M = TypeVar("M", bound=Enum)

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
"""A JSON value as Python holds it: ``None``, ``bool``, ``int``, finite ``float``, ``str``,
``list`` and ``dict`` with ``str`` keys (exact types: no subclasses, no tuples)."""

MAX_INT64 = 2**63 - 1
"""Largest integer SQLite stores in an ``INTEGER`` column."""

MIN_INT64 = -(2**63)
"""Smallest integer SQLite stores in an ``INTEGER`` column."""

MAX_EPOCH_MS = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z in epoch milliseconds (the last instant ``datetime`` can name)."""

MAX_JSON_DEPTH = 64
"""Default deepest nesting of lists and objects :func:`encode_json` accepts (levels)."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)


# -- composing validators ---------------------------------------------------------------------


def first_failure(*results: Result[object, InvalidInput]) -> Result[None, InvalidInput]:
    """Return the first ``Failure`` among ``results`` (in argument order), else ``Success(None)``.

    The checks are evaluated before the call, so use it for cheap checks whose order alone
    decides which error a caller sees.
    """
    for result in results:
        if isinstance(result, Failure):
            return Failure(result.failure())
    return Success(None)


def and_then(
    checked: Result[T, InvalidInput], then: Callable[[T], Result[U, E]]
) -> Result[U, E | InvalidInput]:
    """Return ``then(value)`` for a ``Success(value)``, else the ``InvalidInput`` unchanged.

    How a layer method runs its unit of work on checked arguments, e.g.
    ``and_then(check_renew(...), lambda renew: db.transact("renew", lambda: ...))``.
    """
    if isinstance(checked, Failure):
        return Failure(checked.failure())
    return then(checked.unwrap())


def within(prefix: str, result: Result[T, InvalidInput]) -> Result[T, InvalidInput]:
    """Name a nested value's failure under ``prefix``: ``within("messages[3]", ...)`` turns
    ``InvalidInput("content", r)`` into ``InvalidInput("messages[3].content", r)``."""
    if isinstance(result, Failure):
        error = result.failure()
        return Failure(InvalidInput(f"{prefix}.{error.field}", error.reason))
    return result


def type_problem(
    value: object, field: str, kind: type | tuple[type | None, ...]
) -> InvalidInput | None:
    """Why ``value`` is not of ``kind`` (a class, or a tuple of classes and None), or None.

    ``bool`` is no ``int`` unless ``bool`` is named. The message names what was expected
    and what came, never the value itself: ``InvalidInput("entry_id", "must be text or
    None, got list")``. The type check only: each domain judges the value afterwards.
    """
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if value is None:
        if None in kinds:
            return None
    else:
        classes = tuple(k for k in kinds if k is not None)
        if isinstance(value, classes) and (
            not isinstance(value, bool) or bool in classes or int not in classes
        ):
            return None
    expected = " or ".join(_KIND_NAMES.get(k, f"a {getattr(k, '__name__', k)}") for k in kinds)
    return InvalidInput(field, f"must be {expected}, got {type(value).__name__}")


def member_of(kind: type[M], value: object) -> M | None:
    """The member of the string enum ``kind`` that ``value`` is, or whose value it is as a
    ``str``; None for anything else. Never calls ``str()`` or ``repr()`` of ``value`` (a
    caller's object may raise from either, or overflow the stack)."""
    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        try:
            return kind(value)
        except ValueError:
            return None
    return None


_KIND_NAMES: dict[type | None, str] = {str: "text", int: "an integer", None: "None"}


def type_refusal(
    kind: type | tuple[type | None, ...], /, **arguments: object
) -> Failure[InvalidInput] | None:
    """``Failure(InvalidInput(name, ...))`` for the first of ``arguments`` (``name=value``,
    in order) whose value is not of ``kind`` (see :func:`type_problem`), or None.

    The one line a layer method starts with for arguments it only looks up by
    (``if (refused := type_refusal(str, session_id=session_id)) is not None: return
    refused``), so a wrong-typed id is ``InvalidInput`` on every layer instead of a
    ``TypeError`` in one and a ``NotFound`` in another.
    """
    for name, value in arguments.items():
        problem = type_problem(value, name, kind)
        if problem is not None:
            return Failure(problem)
    return None


def check_callable(value: T, field: str) -> Result[T, InvalidInput]:
    """Return ``Success(value)`` for None or a callable (a callback such as ``progress``),
    else ``InvalidInput(field, "must be callable or None, got TYPE")``."""
    if value is None or callable(value):
        return Success(value)
    return Failure(InvalidInput(field, f"must be callable or None, got {type(value).__name__}"))


def check_optional(
    value: T | None, field: str, check: Callable[[T, str], Result[T, InvalidInput]]
) -> Result[T | None, InvalidInput]:
    """Return ``Success(None)`` for ``None``, else what ``check(value, field)`` returns."""
    if value is None:
        return Success(None)
    return check(value, field)


# -- describing a value in a message ----------------------------------------------------------


def describe(value: object, *, limit: int = 60) -> str:
    """A short ``repr``-like text of ``value`` for an error message; never raises.

    For messages that quote what a caller passed: ``repr`` itself overflows the stack on a
    deeply nested list and raises whatever a careless ``__repr__`` raises. Here nesting is
    cut after six levels (``[[[[[[[...]]]]]]]``), long texts and containers are elided in
    the middle to about ``limit`` characters (``reprlib``'s rules), and a value whose
    ``repr`` raises is ``<TYPE object>``. Plain ``str``, ``int``, ``bool`` and ``None`` read
    as their ``repr`` when short.
    """
    if value is None or type(value) in (bool, int) or (type(value) is str and len(value) <= limit):
        text = repr(value)
        if len(text) <= limit:
            return text
    return _describer(limit).repr(value)


@functools.cache
def _describer(limit: int) -> _Describer:
    return _Describer(limit)


class _Describer:
    """``reprlib.Repr`` with a bounded, never-raising ``repr`` of other objects (``reprlib``
    is imported on first use: only a refusal needs it)."""

    def __init__(self, limit: int) -> None:
        import reprlib

        class Bounded(reprlib.Repr):
            def repr_instance(self, x: object, level: int) -> str:
                try:
                    text = repr(x)
                except Exception:
                    return f"<{type(x).__name__} object>"
                if len(text) > self.maxother:
                    half = max(0, (self.maxother - 3) // 2)
                    text = text[:half] + "..." + text[len(text) - half :]
                return text

        self._repr = Bounded()
        self._repr.maxstring = self._repr.maxother = self._repr.maxlong = limit

    def repr(self, value: object) -> str:
        try:
            return self._repr.repr(value)
        except Exception:  # a container whose own machinery raises (a broken __len__)
            return f"<{type(value).__name__} object>"


# -- numbers and time -------------------------------------------------------------------------


def check_int(
    value: object, field: str, *, minimum: int = MIN_INT64, maximum: int | None = MAX_INT64
) -> Result[int, InvalidInput]:
    """Return ``value`` as a plain ``int`` when it is an integer in ``minimum..maximum``
    (``maximum`` None: no upper bound).

    ``bool`` is refused (``True`` is an ``int`` in Python), as is any other type:
    ``InvalidInput(field, ...)``.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        return Failure(InvalidInput(field, f"must be an integer, got {type(value).__name__}"))
    if value < minimum or (maximum is not None and value > maximum):
        return Failure(InvalidInput(field, f"must be in {minimum}..{maximum}, got {value}"))
    return Success(int(value))


def to_epoch_ms(
    value: object, field: str, *, minimum: int = 0, maximum: int = MAX_EPOCH_MS
) -> Result[int, InvalidInput]:
    """Return ``value`` as integer epoch milliseconds UTC.

    Takes an aware ``datetime`` (floored to the millisecond) or an ``int`` of epoch ms. The
    result must lie in ``minimum..maximum`` ms (default 1970-01-01 to the end of year 9999).
    ``InvalidInput(field, ...)`` for a naive ``datetime`` (it names no instant), a ``bool``,
    any other type, or a time out of range.
    """
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            return Failure(InvalidInput(field, "naive datetime: pass an aware one (e.g. UTC)"))
        ms = (value - _EPOCH) // _ONE_MS
    elif isinstance(value, int) and not isinstance(value, bool):
        ms = int(value)
    else:
        return Failure(
            InvalidInput(
                field, f"must be an aware datetime or epoch ms, got {type(value).__name__}"
            )
        )
    if ms < minimum or ms > maximum:
        return Failure(InvalidInput(field, f"epoch ms {ms} is outside {minimum}..{maximum}"))
    return Success(ms)


def iso_from_ms(ms: int) -> str:
    """Format epoch ms as ``YYYY-MM-DDTHH:MM:SS.mmmZ`` (UTC, milliseconds kept)."""
    moment = _EPOCH + timedelta(milliseconds=ms)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{moment.microsecond // 1000:03d}Z"


# -- text -------------------------------------------------------------------------------------


_SURROGATES = re.compile("[\ud800-\udfff]")


def _surrogate_at(text: str) -> int | None:
    """Index of the first lone surrogate in ``text`` (UTF-8 cannot store one), or None."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def check_text(
    value: object,
    field: str,
    *,
    max_chars: int | None,
    allow_empty: bool = False,
    allow_nul: bool = False,
    replace_surrogates: bool = False,
) -> Result[str, InvalidInput]:
    """Return ``value`` as a plain ``str`` when it is text the policy accepts.

    The policy: at most ``max_chars`` characters (None: any length), non-empty unless
    ``allow_empty``, no NUL (U+0000) unless ``allow_nul``. A lone surrogate (UTF-8, and so
    SQLite, cannot store it) is refused, or with ``replace_surrogates`` replaced by U+FFFD,
    one for one (for free text that is kept whatever it holds, such as a captured message).
    ``InvalidInput(field, ...)`` for a non-``str`` or text the policy refuses; a ``str``
    subclass comes back as a plain ``str`` copy.
    """
    problem = text_problem(
        value,
        field,
        max_chars=max_chars,
        allow_empty=allow_empty,
        allow_nul=allow_nul,
        replace_surrogates=replace_surrogates,
    )
    if problem is not None:
        return Failure(problem)
    text: str = value if type(value) is str else value[:]  # type: ignore[index]
    if replace_surrogates and _surrogate_at(text) is not None:
        text = _SURROGATES.sub("\ufffd", text)
    return Success(text)


def text_problem(
    value: object,
    field: str,
    *,
    max_chars: int | None,
    allow_empty: bool = False,
    allow_nul: bool = False,
    replace_surrogates: bool = False,
) -> InvalidInput | None:
    """Why :func:`check_text` refuses ``value`` (the same policy), or None when it accepts it.

    For loops over many values that only need the verdict (no ``Result`` per value).
    """
    if type(value) is not str:
        if not isinstance(value, str):
            return InvalidInput(field, f"must be text, got {type(value).__name__}")
        value = value[:]  # a plain str, without calling the subclass's methods
    if not value and not allow_empty:
        return InvalidInput(field, "must not be empty")
    if max_chars is not None and len(value) > max_chars:
        return InvalidInput(field, f"must be at most {max_chars} characters, got {len(value)}")
    if not allow_nul and "\x00" in value:
        return InvalidInput(field, "must not contain NUL characters")
    if replace_surrogates:
        return None
    at = _surrogate_at(value)
    if at is not None:
        return InvalidInput(field, f"contains a lone surrogate at index {at}")
    return None


def named_error(exception_type: str, message: str) -> str:
    """An error's message naming its exception type once: ``ValueError: boom`` for the
    message ``boom`` and for ``ValueError: boom`` (pytest's crash message already starts
    with the type, qualified or not), the type alone for an empty message, the message
    alone for an empty type."""
    if not message or not exception_type:
        return message or exception_type
    head = message.partition(":")[0]
    if " " not in head and head.rsplit(".", 1)[-1] == exception_type.rsplit(".", 1)[-1]:
        return message
    return f"{exception_type}: {message}"


# -- JSON -------------------------------------------------------------------------------------


def _path(where: str, depth: int, step: object) -> str:
    """Name a nested value for error messages, eliding the path below eight levels."""
    if depth < 8:
        return f"{where}[{step!r}]"
    return where if where.endswith("[...]") else f"{where}[...]"


def _shape_problem(value: object, field: str, max_depth: int) -> InvalidInput | None:
    """Why ``value`` is not a :data:`JsonValue` of at most ``max_depth`` levels (strings are
    not looked into: see :func:`_surrogate_problem`), or None."""
    stack: list[tuple[object, int, str]] = [(value, 0, field)]
    while stack:
        item, depth, where = stack.pop()
        kind = type(item)
        if item is None or kind is str or kind is int or kind is bool:
            continue
        if kind is float and isinstance(item, float):
            if not math.isfinite(item):
                return InvalidInput(where, f"{item!r} is not a JSON number")
            continue
        if kind is list and isinstance(item, list):
            if depth >= max_depth:
                return InvalidInput(where, f"nests deeper than {max_depth} levels")
            for index, child in enumerate(item):
                stack.append((child, depth + 1, _path(where, depth, index)))
            continue
        if kind is dict and isinstance(item, dict):
            if depth >= max_depth:
                return InvalidInput(where, f"nests deeper than {max_depth} levels")
            for key, child in item.items():
                if type(key) is not str:
                    return InvalidInput(where, f"object key {key!r} is not text")
                stack.append((child, depth + 1, _path(where, depth, key)))
            continue
        return InvalidInput(where, f"{kind.__name__} is not a JSON value")
    return None


def _surrogate_problem(value: JsonValue, field: str) -> InvalidInput:
    """Locate the string or key holding a lone surrogate (the text of ``value`` has one)."""
    stack: list[tuple[JsonValue, int, str]] = [(value, 0, field)]
    while stack:
        item, depth, where = stack.pop()
        if isinstance(item, str):
            at = _surrogate_at(item)
            if at is not None:
                return InvalidInput(where, f"contains a lone surrogate at index {at}")
        elif isinstance(item, list):
            stack.extend((c, depth + 1, _path(where, depth, i)) for i, c in enumerate(item))
        elif isinstance(item, dict):
            for key, child in item.items():
                at = _surrogate_at(key)
                if at is not None:
                    return InvalidInput(where, f"object key has a lone surrogate at index {at}")
                stack.append((child, depth + 1, _path(where, depth, key)))
    return InvalidInput(field, "contains a lone surrogate")


def encode_json(
    value: object,
    field: str,
    *,
    max_depth: int = MAX_JSON_DEPTH,
    max_bytes: int | None = None,
) -> Result[str, InvalidInput]:
    """Return ``value`` as compact JSON text that :func:`decode_json` reads back exactly.

    Exactly: equal, with the same types (``1`` stays an ``int``, ``1.0`` a ``float``, ``-0.0``
    keeps its sign) and the same key order. ``InvalidInput(path, ...)``, naming the path of the
    offending value under ``field``, for anything that would not survive that: NaN or an
    infinity, a tuple, set, bytes or any other type (subclasses of ``str``, ``int``, ``dict``
    included), an object key that is not a ``str``, a lone surrogate in a string or key,
    nesting deeper than ``max_depth`` levels, an integer too long for Python's int/str
    conversion limit, or text longer than ``max_bytes`` UTF-8 bytes (None: no limit).
    """
    problem = _shape_problem(value, field, max_depth)
    if problem is not None:
        return Failure(problem)
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except ValueError as exc:  # an int beyond sys.get_int_max_str_digits()
        return Failure(InvalidInput(field, f"has no exact JSON text: {exc}"))
    if _surrogate_at(text) is not None:
        return Failure(_surrogate_problem(value, field))  # type: ignore[arg-type]
    if max_bytes is not None and len(text) > max_bytes // 4:
        size = len(text.encode("utf-8"))
        if size > max_bytes:
            return Failure(InvalidInput(field, f"is {size} bytes as JSON, more than {max_bytes}"))
    return Success(text)


def check_json(
    value: object, field: str, *, max_depth: int = MAX_JSON_DEPTH
) -> Result[JsonValue, InvalidInput]:
    """Return ``value`` when :func:`encode_json` accepts it (same rules and failures)."""
    checked = encode_json(value, field, max_depth=max_depth)
    if isinstance(checked, Failure):
        return Failure(checked.failure())
    return Success(value)  # type: ignore[arg-type]  # the walk proved it a JsonValue


_SCAN_JSON: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def decode_json(text: str) -> JsonValue:
    """Return the value whose text :func:`encode_json` produced (stored text, trusted).

    Calls the decoder's scanner directly: ``json.loads`` would also match whitespace around
    the value with a regular expression, which costs as much again for small documents.

    Raises:
        ValueError: ``text`` is not JSON (only when something other than :func:`encode_json`
            wrote it: a programmer error or a damaged store).
    """
    try:
        value: JsonValue = _SCAN_JSON(text, 0)[0]
    except StopIteration as exc:
        raise ValueError(f"not JSON text: {text[:40]!r}") from exc
    return value
