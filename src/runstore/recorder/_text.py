"""Coercing untrusted values from a test run into text that can always be stored."""

from __future__ import annotations

from typing import Any

__all__ = ["clean_identifier", "clean_text", "safe_str"]


def clean_text(value: str) -> str:
    """Return ``value`` as storable text: lone surrogates (which UTF-8 cannot hold) become
    ``\\udcff``-style escapes, so two different node ids stay different; everything else,
    NUL included, is kept exactly (no copy when clean)."""
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def clean_identifier(value: str) -> str:
    """Return ``value`` as a storable identifier (node id, module path, project, file path):
    as :func:`clean_text`, and NUL (which the store refuses in identifiers) written as the
    four characters ``\\x00``, as pytest itself escapes parametrize ids."""
    text = clean_text(value)
    return text.replace("\x00", "\\x00") if "\x00" in text else text


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
