"""Charts a line of text can hold: sparklines, outcome strips and stacked outcome bars.

Pure functions from numbers and outcomes to strings of one character per cell, drawn with
one of two character sets (:class:`Glyphs`): :data:`UNICODE` (block elements and check
marks) or :data:`ASCII`, the fallback for an output whose encoding cannot write the Unicode
ones (``PYTHONIOENCODING=ascii``; :func:`glyphs_for` decides). Every cell of every chart is
one terminal column wide. Each outcome and bar segment has a character of its own, so a
chart reads the same without colour; :func:`styled` adds colour as rich styles, which rich
writes only to a terminal. rich is imported only by :func:`styled`.

``runstore trends`` and ``runstore history`` draw these in text mode (JSON is unchanged).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from runstore.services.test_runs import FAILING_OUTCOMES, Outcome

if TYPE_CHECKING:
    from rich.text import Text

__all__ = [
    "ASCII",
    "BAR_WIDTH",
    "UNICODE",
    "Glyphs",
    "apportion",
    "bar_counts",
    "glyphs_for",
    "outcome_strip",
    "sparkline",
    "stacked_bar",
    "styled",
]

BAR_WIDTH = 20
"""Cells of the stacked outcome bar of one run in ``runstore trends`` (5% a cell), fewer on
a terminal too narrow for the table and a bar this wide."""


@attrs.frozen
class Glyphs:
    """One character set for the charts; every string is of characters one column wide.

    ``levels``: the sparkline's eight levels, lowest first. ``gap``: a sparkline cell without
    a value. ``outcomes``: the strip's character of each outcome. ``bar``: the stacked bar's
    characters of its passed, failing and skipped segments (:func:`bar_counts`).
    ``arrow``: "leads to", as in "oldest → newest".
    """

    levels: str
    gap: str
    outcomes: Mapping[Outcome, str]
    bar: tuple[str, str, str]
    arrow: str

    def characters(self) -> str:
        """Every character this set draws with."""
        return (self.levels + self.gap + "".join(self.outcomes.values()) + "".join(self.bar)
                + self.arrow)


_STRIP_ORDER = (Outcome.PASSED, Outcome.FAILED, Outcome.ERROR, Outcome.SKIPPED,
                Outcome.XFAILED, Outcome.XPASSED)


def _by_outcome(characters: str) -> dict[Outcome, str]:
    """``characters`` as the strip's characters of passed, failed, error, skipped, xfailed
    and xpassed, in that order."""
    return dict(zip(_STRIP_ORDER, characters, strict=True))


UNICODE = Glyphs(
    levels="▁▂▃▄▅▆▇█",
    gap=" ",
    outcomes=_by_outcome("✓✗EsxX"),
    bar=("█", "✗", "░"),
    arrow="→",
)
"""Block elements U+2581..U+2588 for sparklines; a check mark and a ballot X for passed and
failed, and pytest's progress letters for the rest (``E`` error, ``s`` skipped, ``x``
xfailed, ``X`` xpassed); a bar of full blocks (passed), ballot Xs (failing) and light shade
(skipped)."""

ASCII = Glyphs(
    levels="_.:-=+*#",
    gap=" ",
    outcomes=_by_outcome(".FEsxX"),
    bar=("#", "F", "-"),
    arrow="->",
)
"""The fallback: sparkline levels ``_ . : - = + * #``, the strip in pytest's own progress
characters (``.`` passed, ``F`` failed, ``E`` error, ``s`` skipped, ``x`` xfailed, ``X``
xpassed), a bar of ``#`` (passed), ``F`` (failing) and ``-`` (skipped)."""


def glyphs_for(encoding: str | None) -> Glyphs:
    """:data:`UNICODE` when text in ``encoding`` (a codec name, as ``sys.stdout.encoding``)
    can hold every character it draws with, else :data:`ASCII` (also for an unknown codec
    and for None, a stream that names no encoding)."""
    if encoding is None:
        return ASCII
    try:
        UNICODE.characters().encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return ASCII
    return UNICODE


def _finite(value: float | None) -> float | None:
    """``value`` as a finite float, else None (None, NaN, infinities, an int too big for a
    float)."""
    if value is None:
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _share(value: float, low: float, high: float) -> float:
    """Where ``value`` lies from ``low`` (0.0) to ``high`` (1.0), for ``low < high``; halves
    keep a span wider than the largest float finite, and the share is monotone in
    ``value``."""
    span = high - low
    if math.isinf(span):
        return (value / 2 - low / 2) / (high / 2 - low / 2)
    return (value - low) / span


def sparkline(values: Sequence[float | None], glyphs: Glyphs = UNICODE) -> str:
    """One character per value, in order: a level of ``glyphs.levels`` scaled from the
    series' smallest value (the lowest level) to its largest (the highest), in eight bins of
    equal width.

    Scaled min..max rather than 0..max so that a change stands out against a large constant
    part (durations, coverage); the caller prints the range beside the line. A value that is
    None, NaN or infinite is a gap (``glyphs.gap``); a series whose values are all equal is
    flat at the lowest level.
    """
    numbers = [_finite(v) for v in values]
    present = [n for n in numbers if n is not None]
    if not present:
        return glyphs.gap * len(numbers)
    low, high = min(present), max(present)
    top = len(glyphs.levels) - 1
    cells = []
    for number in numbers:
        if number is None:
            cells.append(glyphs.gap)
        elif low == high:
            cells.append(glyphs.levels[0])
        else:
            level = int(_share(number, low, high) * len(glyphs.levels))
            cells.append(glyphs.levels[min(top, max(0, level))])
    return "".join(cells)


def outcome_strip(outcomes: Iterable[Outcome], glyphs: Glyphs = UNICODE) -> str:
    """One character per outcome, in order (``glyphs.outcomes``)."""
    return "".join(glyphs.outcomes[o] for o in outcomes)


def bar_counts(counts: Mapping[str, int], collection_errors: int = 0) -> tuple[int, int, int]:
    """A run's ``counts`` (outcome value -> items) and its ``collection_errors`` (collectors
    that failed) as the stacked bar's (passed, failing, skipped): failing are
    ``FAILING_OUTCOMES`` (failed, error) and the collection errors, as the ``failing``
    column of ``runstore trends`` and the HTML report count them; xpassed counts as passed
    and xfailed as skipped, as pytest's own reports say (an xfail's report is ``skipped``, a
    non-strict xpass's ``passed``)."""
    def total(*outcomes: Outcome) -> int:
        return sum(counts.get(o.value, 0) for o in outcomes)

    return (total(Outcome.PASSED, Outcome.XPASSED),
            total(*sorted(FAILING_OUTCOMES)) + collection_errors,
            total(Outcome.SKIPPED, Outcome.XFAILED))


def apportion(counts: Sequence[int], width: int) -> tuple[int, ...]:
    """The cells of ``width`` each of ``counts`` gets, in proportion to its share.

    The cells sum to ``width`` when the counts sum to more than 0 (all 0 when they sum to
    0): whole shares first, then a cell each to the largest remainders (the earlier count on
    a tie: the largest remainder method). Every count above 0 then gets at least one cell
    when ``width`` is at least the number of such counts, each taken from the count holding
    the most cells.

    Raises:
        ValueError: a count or ``width`` below 0 (a programmer error).
    """
    if width < 0 or any(c < 0 for c in counts):
        raise ValueError(f"counts and width must be at least 0, got {counts!r}, {width}")
    total = sum(counts)
    if total == 0:
        return tuple(0 for _ in counts)
    cells = [c * width // total for c in counts]
    remainders = [c * width % total for c in counts]
    left = width - sum(cells)
    for i in sorted(range(len(counts)), key=lambda i: (-remainders[i], i))[:left]:
        cells[i] += 1
    shown = [i for i, c in enumerate(counts) if c > 0]
    if len(shown) <= width:
        for i in shown:
            if cells[i] == 0:
                most = max(range(len(cells)), key=lambda k: (cells[k], -k))
                cells[most] -= 1
                cells[i] = 1
    return tuple(cells)


def stacked_bar(counts: Sequence[int], width: int = BAR_WIDTH,
                glyphs: Glyphs = UNICODE) -> str:
    """``counts`` (passed, failing, skipped; :func:`bar_counts`) as ``width`` cells: each
    segment's characters (``glyphs.bar``) over its share (:func:`apportion`), in that order;
    ``width`` spaces when the counts sum to 0 (a run without items or collection errors)."""
    cells = apportion(counts, width)
    if not any(cells):
        return " " * width
    return "".join(char * n for char, n in zip(glyphs.bar, cells, strict=True))


_OUTCOME_STYLES = {
    Outcome.PASSED: "green",
    Outcome.FAILED: "bold red",
    Outcome.ERROR: "bold red",
    Outcome.SKIPPED: "yellow",
    Outcome.XFAILED: "yellow",
    Outcome.XPASSED: "magenta",
}
_BAR_STYLES = ("green", "bold red", "yellow")


def styled(chart: str, glyphs: Glyphs = UNICODE) -> Text:
    """``chart`` (a strip or a bar drawn with ``glyphs``) as rich text, each outcome's and
    each bar segment's character in its colour (passed green, failing red, skipped and
    xfailed yellow, xpassed magenta); other characters plain. rich writes the colours only
    to a terminal."""
    from rich.text import Text

    colours = {glyphs.outcomes[o]: style for o, style in _OUTCOME_STYLES.items()}
    colours.update(zip(glyphs.bar, _BAR_STYLES, strict=True))
    text = Text()
    for char, run in itertools.groupby(chart):
        text.append(char * len(list(run)), colours.get(char))
    return text
