"""Coercing untrusted values from a test run into text that can always be stored."""

from __future__ import annotations

from typing import Any

__all__ = ["clean_text", "safe_str"]


def clean_text(value: str) -> str:
    """Return ``value`` as storable text: lone surrogates become ``\\udcff``-style escapes
    and NUL characters ``\\x00``; anything else is returned unchanged (no copy when clean)."""
    if "\x00" in value:
        value = value.replace("\x00", "\\x00")
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def safe_str(value: Any) -> str:
    """Render any object as clean text, never raising (an object whose ``__str__`` and
    ``__repr__`` both raise becomes ``<unprintable TYPE>``)."""
    if isinstance(value, str):
        return clean_text(value)
    try:
        return clean_text(str(value))
    except Exception:
        try:
            return clean_text(repr(value))
        except Exception:
            return f"<unprintable {type(value).__name__}>"
