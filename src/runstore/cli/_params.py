"""Argument types shared by the commands: what no store could hold is a usage error (exit 2).

A value that can never name anything (a blank name, text holding NUL or bytes that are not
UTF-8, an id beyond SQLite's 64-bit integers) is refused while the command line is parsed,
naming the argument, instead of reaching a store and coming back as "not found" (exit 1).
"""

from __future__ import annotations

from typing import Any

import click

from runstore.services._test_runs_rules import session_id_problem

__all__ = ["MAX_ID", "RUN_SESSION_ID", "TEXT", "RunSessionId", "Text", "check_text"]

MAX_ID = 2**63 - 1
"""The largest id any store holds: SQLite's largest integer (a signed 64-bit value)."""


def check_text(value: str, max_chars: int | None = None) -> str | None:
    """Why ``value`` cannot be a name or id given on the command line, or None when it can.

    Refused: blank (empty or only white space), longer than ``max_chars`` characters, NUL,
    and lone surrogates (the way Python decodes command-line bytes that are not UTF-8).
    """
    if not value.strip():
        return "must not be blank"
    if max_chars is not None and len(value) > max_chars:
        return f"is longer than {max_chars} characters"
    if "\x00" in value:
        return "must not hold NUL"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not UTF-8 text"
    return None


class Text(click.ParamType[str]):
    """A name or id: non-blank UTF-8 text without NUL of at most ``max_chars`` characters
    (see :func:`check_text`)."""

    name = "TEXT"

    def __init__(self, max_chars: int | None = None) -> None:
        self.max_chars = max_chars

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        reason = check_text(text, self.max_chars)
        if reason is not None:
            self.fail(f"{_shown(text)} {reason}", param, ctx)
        return text


TEXT = Text()


def _shown(text: str) -> str:
    """``text`` quoted for a message: cut at 60 characters, control characters and lone
    surrogates escaped by ``repr`` (never written raw to the terminal)."""
    return repr(text if len(text) <= 60 else text[:59] + "…")


class RunSessionId(click.ParamType[str]):
    """The agent session id a run may carry, by the service's own rule
    (:func:`runstore.services._test_runs_rules.session_id_problem`: 1 to
    ``MAX_SESSION_ID_CHARS`` characters, not blank, no control character or lone
    surrogate), so an id no run can carry is a usage error rather than an empty answer."""

    name = "TEXT"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        problem = session_id_problem(text, "session id")
        if problem is not None:
            self.fail(f"{_shown(text)} {problem.reason}", param, ctx)
        return text


RUN_SESSION_ID = RunSessionId()
