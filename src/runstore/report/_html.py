"""Render a :class:`~runstore.report.ReportData` as one self-contained HTML page.

The page is the Jinja2 template ``templates/report.html.j2`` with autoescaping on: every
text that came from a store (node ids, messages, tracebacks, paths, commits) is escaped
there, and every value written also passes :func:`visible` (control characters, lone
surrogates and bidirectional overrides written as escapes, ANSI colour sequences
removed), so any text a test produced reads as text. The page loads nothing: its style is
inline, its fonts the system's, its charts inline SVG (``runstore.report._svg``), and it
reads fully without JavaScript.

Long texts arrive cut by the collector (``MAX_REPORT_MESSAGE_CHARS``,
``MAX_REPORT_TEXT_CHARS``, ``MAX_REPORT_FRAMES``); the page says where something was cut or
left out (the ``*_omitted`` counts, ``text_truncated``).
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Iterable
from datetime import UTC, datetime
from functools import cache, lru_cache
from typing import Any

import jinja2
from markupsafe import Markup, escape

from runstore.report._model import MatrixCell, ReportData, RunPoint, StripEntry
from runstore.report._svg import (
    CHART_HEIGHT,
    CHART_WIDTH,
    STACK_ORDER,
    line_chart,
    runs_chart,
    sparkline,
)
from runstore.services._primitives import named_error
from runstore.services.test_runs import (
    FAILING_OUTCOMES,
    Classification,
    Outcome,
    RunId,
    RunStatus,
)

__all__ = ["LETTERS", "format_ms", "nodeid_anchor", "render_html", "shell_word", "visible"]

LETTERS: dict[str, str] = {
    Outcome.PASSED: "P",
    Outcome.FAILED: "F",
    Outcome.ERROR: "E",
    Outcome.SKIPPED: "S",
    Outcome.XFAILED: "x",
    Outcome.XPASSED: "X",
}
"""The letter a cell shows for each outcome, so no outcome is told by colour alone."""

_CLASSES: dict[str, str] = {
    Outcome.PASSED: "p",
    Outcome.FAILED: "f",
    Outcome.ERROR: "e",
    Outcome.SKIPPED: "s",
    Outcome.XFAILED: "xf",
    Outcome.XPASSED: "xp",
}

_ANSI = re.compile(r"\x1b\[(?:<[a-z]+>|[0-?])*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
"""ANSI CSI sequences (colours, cursor moves) and OSC sequences (hyperlinks, titles). A
parameter may be a signature's mask (``\x1b[<num>m``, a colour whose number was masked
in a normalised message): the whole sequence goes, not ``\x1b[<n`` leaving ``um>m``."""

_HIDDEN = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_BLOCK_HIDDEN = re.compile(f"[{_HIDDEN}\u2028\u2029]")
_PLAIN = re.compile(f"[^{_HIDDEN}\x1b\r\t\n\u2028\u2029]*")
_LINE_HIDDEN = re.compile(f"[{_HIDDEN}\t\n\u2028\u2029]")


def _escape_char(match: re.Match[str]) -> str:
    return repr(match.group())[1:-1]


def visible(text: str, *, lines: bool = True) -> str:
    """``text`` as a page may show it: ANSI escape sequences removed, ``\\r\\n`` read as a
    line break, and every other control character, lone surrogate (text that was not
    UTF-8) and bidirectional formatting character written as ``repr`` writes it
    (``\\x1b``, ``\\udcff``, ``\\u202e``). With ``lines`` False, line breaks and tabs are
    written so too (one line of text)."""
    if _PLAIN.fullmatch(text) is not None:
        return text
    text = _ANSI.sub("", text)
    if lines:
        return _BLOCK_HIDDEN.sub(_escape_char, text.replace("\r\n", "\n"))
    return _LINE_HIDDEN.sub(_escape_char, text)


def nodeid_anchor(nodeid: str) -> str:
    """The id of a failing test's section: ``test-`` and the first 12 hex digits of the
    SHA-1 of the node id in UTF-8 (a lone surrogate as ``surrogatepass`` writes it)."""
    return "test-" + _digest(nodeid)


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def format_ms(ms: float) -> str:
    """A duration in milliseconds as a person reads it: ``0 ms``, ``0.42 ms``, ``37 ms``,
    ``4.20 s``, ``12.3 s``, ``3 min 07 s``, ``2 h 05 min``."""
    if ms == 0:
        return "0 ms"
    if ms < 1:
        return f"{ms:.2f} ms"
    if ms < 10:
        return f"{ms:.1f} ms"
    if ms < 1_000:
        return f"{ms:.0f} ms"
    if ms < 10_000:
        return f"{ms / 1000:.2f} s"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    seconds = round(ms / 1000)
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


@lru_cache(maxsize=4096)
def _when(at_ms: int) -> str:
    return datetime.fromtimestamp(at_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _counts_line(counts: dict[str, int], collection_errors: int) -> str:
    parts = [f"{counts[o]} {o}" for o in LETTERS if counts.get(o)]
    if collection_errors:
        parts.append(f"{collection_errors} collection error{'s' if collection_errors > 1 else ''}")
    return ", ".join(parts) or "no items"


def _failing(run: RunPoint) -> int:
    """Failed and errored items of ``run`` and its collection errors."""
    return sum(run.counts.get(o, 0) for o in FAILING_OUTCOMES) + run.collection_errors


def _has_failures(run: RunPoint) -> bool:
    return bool(run.failing or run.failing_omitted or _failing(run))


_UNFINISHED = frozenset({RunStatus.INTERRUPTED, RunStatus.ABORTED, RunStatus.RUNNING})
"""Runs whose bar gets a dashed outline: their items are only those recorded before the run
stopped (or so far), so a short green bar must not read as a clean, whole run."""


def _bar_title(run: RunPoint) -> str:
    lines = [f"run {run.run_id} · {run.status} · {_when(run.started_at_ms)}",
             _counts_line(run.counts, run.collection_errors)]
    tail = [format_ms(run.duration_ms) if run.duration_ms is not None else "not finished"]
    if run.percent_covered is not None:
        tail.append(f"{run.percent_covered:.1f} % covered")
    if run.git_commit:
        tail.append(f"commit {run.git_commit[:12]}")
    lines.append(" · ".join(tail))
    return "\n".join(lines)


def _cells(run_ids: tuple[RunId, ...], cells: tuple[MatrixCell | None, ...]) -> Markup:
    """One matrix row's cells as markup: per cell its class (the colour), its letter (the
    outcome without colour; a raised number: the attempts when more than one) and a tooltip
    naming the run, the duration and the attempts. Built here rather than in the template
    because a full matrix has thousands of cells; only numbers and outcome names go in, and
    those through ``escape`` all the same."""
    parts: list[str] = []
    for run_id, cell in zip(run_ids, cells, strict=True):
        if cell is None:
            parts.append('<td class="n">·</td>')
            continue
        title = f"run {int(run_id)}, {format_ms(cell.duration_ms)}"
        letter = LETTERS[cell.outcome]
        if cell.attempts > 1:
            title += f", {cell.attempts} attempts"
            letter += f"<sup>{cell.attempts}</sup>"
        parts.append(f'<td class="{_CLASSES[cell.outcome]}" title="{escape(title)}">'
                     f"{letter}</td>")
    return Markup("".join(parts))


def _strip(history: tuple[StripEntry, ...]) -> Markup:
    """A failing test's history strip as markup: one lettered cell per entry, oldest first,
    its tooltip naming the run (or when a pruned run recorded it) and the duration (see
    :func:`_cells`)."""
    parts: list[str] = []
    for entry in history:
        where = (f"a pruned run of {_when(entry.recorded_at_ms)}" if entry.run_id is None
                 else f"run {int(entry.run_id)}")
        title = escape(f"{where}, {format_ms(entry.duration_ms)}")
        parts.append(f'<i class="{_CLASSES[entry.outcome]}" title="{title}">'
                     f"{LETTERS[entry.outcome]}</i>")
    return Markup("".join(parts))


def by_file(nodeids: Iterable[str]) -> list[tuple[str, list[tuple[str, str]]]]:
    """``nodeids`` grouped by their file (the part before the first ``::``), in their order,
    a group per run of one file: ``(file, [(nodeid, rest)])`` where ``rest`` is the node id
    from its first ``::`` (the whole id, file ``""``, when it has none). A run's failing
    tests often share a few files; naming each file once keeps a long list short."""
    groups: list[tuple[str, list[tuple[str, str]]]] = []
    for nodeid in nodeids:
        path, sep, rest = nodeid.partition("::")
        path, rest = (path, sep + rest) if sep else ("", nodeid)
        if not groups or groups[-1][0] != path:
            groups.append((path, []))
        groups[-1][1].append((nodeid, rest))
    return groups


def error_parts(exception_type: str, message: str) -> tuple[str, str]:
    """An error as (its type, the rest of its message) naming the type once: pytest's crash
    message may already start with it (``ValueError: boom``), qualified or not
    (:func:`~runstore.services._primitives.named_error`)."""
    if exception_type and message and named_error(exception_type, message) == message:
        head, _, rest = message.partition(":")
        return head, rest.lstrip(" ")
    return exception_type, message


def shell_word(text: str) -> str:
    """``text`` as one word a POSIX shell reads back as it is (``shlex.quote``), after
    ``--`` when it starts with ``-`` so that a command takes it as an argument, not an
    option: ``'tests/t.py::test_x[a b]'``, ``-- -x``."""
    quoted = shlex.quote(text)
    return f"-- {quoted}" if text.startswith("-") else quoted


def _finalize(value: Any) -> Any:
    """Every value the template writes: text made :func:`visible` (markup passes as is)."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return visible(value)
    return value


@cache
def _template() -> jinja2.Template:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("runstore.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_finalize,
    )
    environment.filters.update({
        "line": lambda text: visible(text, lines=False),
        "ms": format_ms,
        "shell": shell_word,
        "when": _when,
        "anchor": nodeid_anchor,
        "sig_anchor": lambda signature: "sig-" + _digest(signature),
    })
    return environment.get_template("report.html.j2")


def render_html(data: ReportData) -> str:
    """The report page of ``data``: one HTML document (UTF-8 text), self-contained.

    Sections (their ids): the runs over time (``runs-chart``; each run with failures has
    a section ``run-<id>`` its bar links to; the bar of an interrupted, aborted or running
    run has a dashed outline, class ``unfinished``), the history matrix (``matrix``), failure
    signature groups (``signatures``), the slowest tests (``slowest``), coverage
    (``coverage``) and one section per failing test of the newest run (``failing``, each
    ``test-<12 hex digits>``, :func:`nodeid_anchor`). An empty part says so in a line.
    """
    runs = data.runs
    chart = runs_chart([r.counts | {"error": r.counts.get("error", 0) + r.collection_errors}
                        for r in runs], [r.duration_ms for r in runs],
                       [_failing(r) for r in runs], format_ms)
    covered = [r.percent_covered for r in runs]
    sectioned = {int(r.run_id) for r in runs if _has_failures(r)}
    failing_ids = frozenset(t.nodeid for t in data.failing_tests)
    signature_ids = frozenset(g.signature.signature for g in data.signatures)
    newest = runs[-1] if runs else None
    flaky = sum(1 for row in data.matrix if row.classification is Classification.FLAKY)
    context: dict[str, Any] = {
        "data": data,
        "newest": newest,
        "flaky": flaky,
        "chart": chart,
        "bar_titles": [_bar_title(r) for r in runs],
        "coverage_chart": line_chart(covered) if any(v is not None for v in covered) else None,
        "sectioned": sectioned,
        "unfinished": _UNFINISHED,
        "failing_runs": [r for r in reversed(runs) if int(r.run_id) in sectioned],
        "failing_ids": failing_ids,
        "signature_ids": signature_ids,
        "matrix_cells": [_cells(data.matrix_run_ids, row.cells)
                         for row in data.matrix],
        "sparklines": [sparkline(t.durations_ms) for t in data.slowest],
        "strips": [_strip(t.history) for t in data.failing_tests],
        "stack_order": STACK_ORDER,
        "letters": LETTERS,
        "classes": _CLASSES,
        "width": CHART_WIDTH,
        "height": CHART_HEIGHT,
        "counts_line": _counts_line,
        "by_file": by_file,
        "error_parts": error_parts,
    }
    return _template().render(context)

