"""The geometry of the report's inline SVG charts: pure functions from numbers to coordinates.

Nothing here writes markup: each function returns plain records (numbers, SVG path data and
point lists made only of digits, spaces, commas, dots and path letters) that the template
draws, so every text that came from a store is escaped in one place, the template. The
charts use a fixed ``viewBox`` (``CHART_WIDTH`` x ``CHART_HEIGHT`` user units) and scale to
the page's width.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import attrs

__all__ = [
    "CHART_HEIGHT",
    "CHART_WIDTH",
    "STACK_ORDER",
    "Bar",
    "ColumnTick",
    "Frame",
    "LineChart",
    "Point",
    "RunsChart",
    "Tick",
    "line_chart",
    "nice_ceiling",
    "runs_chart",
    "sparkline",
]

CHART_WIDTH = 960
CHART_HEIGHT = 300
_LEFT, _RIGHT, _TOP, _BOTTOM = 44.0, 56.0, 10.0, 26.0
_BAND = 56.0
"""Height of the failing band under the runs chart's bars (user units)."""
_BAND_GAP = 18.0
_MAX_BAR = 48.0
"""Widest bar drawn in a run's column (user units): the columns share the whole plot width,
but a handful of runs do not become slabs."""
_MIN_SEGMENT = 1.5
"""Least height of a non-zero segment, so 1 failure among 5,000 passes still shows."""

STACK_ORDER = ("failed", "error", "xpassed", "passed", "xfailed", "skipped")
"""Outcomes stacked in a run's bar, bottom up: failures sit on the axis where the eye
starts."""


@attrs.frozen
class Tick:
    """One axis label at ``y`` (or ``x``) with its ``label``."""

    at: float
    label: str


@attrs.frozen
class ColumnTick:
    """A label under column ``index`` (a run), centred at ``at``."""

    at: float
    index: int


@attrs.frozen
class Frame:
    """The plot area inside the ``viewBox``: left, top, right and bottom edges."""

    left: float
    top: float
    right: float
    bottom: float


@attrs.frozen
class Bar:
    """One run's column: ``x`` and ``width`` of its hit area, ``index`` into the runs."""

    index: int
    x: float
    width: float


@attrs.frozen
class RunsChart:
    """The runs-over-time chart: one :class:`Bar` per run, the stacked segments as one path
    per outcome (``segments``: ``(outcome, path data)``, outcomes of :data:`STACK_ORDER` that
    occur), the duration line as polylines (one per stretch of runs with a duration),
    ``count_ticks`` on the left axis, ``duration_ticks`` on the right (``durations_ms``
    values, labelled by ``format_ms``) and ``x_ticks`` (runs to name) under the bars.

    Under the bars, in ``band``, the failing items of each run on a scale of their own
    (``failing_path``, ``failing_ticks``): one failure among thousands of passes is a sliver
    of a bar but a full column there."""

    frame: Frame
    band: Frame
    failing_path: str
    failing_ticks: tuple[Tick, ...]
    bars: tuple[Bar, ...]
    segments: tuple[tuple[str, str], ...]
    duration_lines: tuple[str, ...]
    count_ticks: tuple[Tick, ...]
    duration_ticks: tuple[Tick, ...]
    x_ticks: tuple[ColumnTick, ...]


@attrs.frozen
class Point:
    """One value of a line chart at (``x``, ``y``); ``index`` into the values."""

    index: int
    x: float
    y: float


@attrs.frozen
class LineChart:
    """A line over runs: ``lines`` (polyline points, one per stretch of known values),
    ``points`` (one per known value), the left axis ``ticks`` and ``x_ticks``."""

    frame: Frame
    lines: tuple[str, ...]
    points: tuple[Point, ...]
    ticks: tuple[Tick, ...]
    x_ticks: tuple[ColumnTick, ...]


def _num(value: float) -> str:
    """``value`` as SVG wants it: at most one decimal, no trailing ``.0``."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten that is at least ``value`` (1 for
    ``value`` <= 0): an axis top a person reads at a glance."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        if step * power >= value * (1 - 1e-9):
            return step * power
    return 10.0 * power  # pragma: no cover - the loop always returns


def _frame(height: float = CHART_HEIGHT) -> Frame:
    return Frame(_LEFT, _TOP, CHART_WIDTH - _RIGHT, height - _BOTTOM)


def _slots(count: int, frame: Frame) -> float:
    """The width each of ``count`` columns gets: the plot's width shared evenly, so one
    run or 500 use all of it."""
    return (frame.right - frame.left) / max(count, 1)


def _x_ticks(count: int, frame: Frame, slot: float, most: int = 6) -> tuple[ColumnTick, ...]:
    """Up to ``most`` evenly spread columns (the first and the last included), each at its
    centre; the template names the run of each."""
    if count == 0:
        return ()
    step = max(1, math.ceil((count - 1) / max(most - 1, 1)))
    indexes = sorted({*range(0, count, step), count - 1})
    if len(indexes) > 1 and indexes[-1] - indexes[-2] < step / 2:
        del indexes[-2]  # the last tick would crowd its neighbour
    return tuple(ColumnTick(frame.left + slot * (i + 0.5), i) for i in indexes)


def _stack(counts: dict[str, int], scale: float) -> list[tuple[str, float]]:
    """Heights of one bar's non-zero segments in :data:`STACK_ORDER`; each at least
    ``_MIN_SEGMENT``, the difference taken from the tallest so the bar keeps its height."""
    heights = [(name, counts.get(name, 0) * scale) for name in STACK_ORDER
               if counts.get(name, 0) > 0]
    if len(heights) < 2:
        return heights
    grown = [(name, max(h, _MIN_SEGMENT)) for name, h in heights]
    extra = sum(g for _, g in grown) - sum(h for _, h in heights)
    tallest = max(range(len(grown)), key=lambda i: grown[i][1])
    name, height = grown[tallest]
    grown[tallest] = (name, max(height - extra, _MIN_SEGMENT))
    return grown


def _polylines(points: Sequence[tuple[float, float] | None]) -> tuple[str, ...]:
    """``points`` as polylines, a new one after every gap (None); a lone point is drawn as a
    short level stroke so it stays visible."""
    lines: list[str] = []
    stretch: list[tuple[float, float]] = []
    for point in (*points, None):
        if point is not None:
            stretch.append(point)
            continue
        if len(stretch) == 1:
            x, y = stretch[0]
            stretch = [(x - 2, y), (x + 2, y)]
        if stretch:
            lines.append(" ".join(f"{_num(x)},{_num(y)}" for x, y in stretch))
        stretch = []
    return tuple(lines)


def runs_chart(
    counts: Sequence[dict[str, int]],
    durations_ms: Sequence[float | None],
    failing: Sequence[int],
    format_ms: Callable[[float], str] = lambda ms: f"{ms:g} ms",
) -> RunsChart:
    """The geometry of the runs-over-time chart for runs oldest first: ``counts[i]`` the
    items of run ``i`` by outcome, ``durations_ms[i]`` its duration (None: unknown, a gap in
    the line), ``failing[i]`` its failing items (the band under the bars). Bars share one
    count scale (the tallest run fills the plot), the line its own (the longest run at the
    top), the band a third. ``format_ms`` labels the right axis.

    Raises:
        ValueError: the three sequences differ in length (a programmer error).
    """
    if not len(counts) == len(durations_ms) == len(failing):
        raise ValueError("one duration and one failing count per run")
    label = format_ms
    whole = _frame()
    frame = Frame(whole.left, whole.top, whole.right, whole.bottom - _BAND - _BAND_GAP)
    band = Frame(whole.left, whole.bottom - _BAND, whole.right, whole.bottom)
    height = frame.bottom - frame.top
    slot = _slots(len(counts), frame)
    drawn = min(slot - min(slot * 0.2, 4.0), _MAX_BAR)
    gap = slot - drawn
    top_count = nice_ceiling(max((sum(c.values()) for c in counts), default=0))
    known = [d for d in durations_ms if d is not None and math.isfinite(d)]
    top_ms = nice_ceiling(max(known, default=0.0))
    paths: dict[str, list[str]] = {name: [] for name in STACK_ORDER}
    bars: list[Bar] = []
    line: list[tuple[float, float] | None] = []
    for i, (run_counts, duration) in enumerate(zip(counts, durations_ms, strict=True)):
        x = frame.left + slot * i
        bars.append(Bar(i, x, slot))
        y = frame.bottom
        for name, h in _stack(run_counts, height / top_count):
            y -= h
            paths[name].append(f"M{_num(x + gap / 2)} {_num(y)}h{_num(drawn)}v{_num(h)}"
                               f"h-{_num(drawn)}z")
        if duration is None or not math.isfinite(duration):
            line.append(None)
        else:
            line.append((x + slot / 2, frame.bottom - height * duration / top_ms))
    top_failing = nice_ceiling(max(failing, default=0))
    band_scale = (band.bottom - band.top) / top_failing
    failing_path = "".join(
        f"M{_num(bar.x + gap / 2)} {_num(band.bottom - n * band_scale)}h{_num(drawn)}"
        f"V{_num(band.bottom)}h-{_num(drawn)}z"
        for bar, n in zip(bars, failing, strict=True) if n > 0)
    failing_ticks = (Tick(band.bottom, "0"), Tick(band.top, f"{top_failing:g}"))
    count_ticks = tuple(Tick(frame.bottom - height * f, f"{top_count * f:g}")
                        for f in (0.0, 0.5, 1.0)
                        if (top_count * f).is_integer())  # no half an item (0.5, 12.5)
    duration_ticks = tuple(Tick(frame.bottom - height * f, str(label(top_ms * f)))
                           for f in (0.0, 0.5, 1.0)) if known else ()
    return RunsChart(
        frame=frame,
        band=band,
        failing_path=failing_path,
        failing_ticks=failing_ticks,
        bars=tuple(bars),
        segments=tuple((name, "".join(paths[name])) for name in STACK_ORDER if paths[name]),
        duration_lines=_polylines(line),
        count_ticks=count_ticks,
        duration_ticks=duration_ticks,
        x_ticks=_x_ticks(len(counts), band, slot),
    )


def line_chart(values: Sequence[float | None], *, low: float = 0.0, high: float = 100.0,
               height: float = 180.0) -> LineChart:
    """The geometry of a line over runs oldest first (coverage percentages): values between
    ``low`` and ``high`` (clamped), None a gap. The axis starts at the lowest known value
    rounded down to a multiple of 10 (so 92-95 % is not a flat line at the top), never
    below ``low``."""
    frame = _frame(height)
    slot = _slots(len(values), frame)
    known = [v for v in values if v is not None and math.isfinite(v)]
    bottom = max(low, math.floor(min(known, default=low) / 10.0) * 10.0)
    if bottom >= high:
        bottom = max(low, high - 10.0)
    span = frame.bottom - frame.top
    points: list[Point] = []
    line: list[tuple[float, float] | None] = []
    for i, value in enumerate(values):
        if value is None or not math.isfinite(value):
            line.append(None)
            continue
        clamped = min(max(value, bottom), high)
        point = Point(i, frame.left + slot * (i + 0.5),
                      frame.bottom - span * (clamped - bottom) / (high - bottom))
        points.append(point)
        line.append((point.x, point.y))
    ticks = tuple(Tick(frame.bottom - span * f, f"{bottom + (high - bottom) * f:g}")
                  for f in (0.0, 0.5, 1.0))
    return LineChart(frame, _polylines(line), tuple(points), ticks,
                     _x_ticks(len(values), frame, slot))


def sparkline(values: Sequence[float], width: float = 120.0, height: float = 22.0) -> str:
    """Polyline points of ``values`` (oldest first) in a ``width`` x ``height`` box, the
    smallest at the bottom and the largest at the top (a flat series is a level line
    through the middle); ``""`` without values."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return ""
    if len(finite) == 1:
        finite = finite * 2
    low, high = min(finite), max(finite)
    pad = 2.0
    step = (width - 2 * pad) / (len(finite) - 1)
    span = height - 2 * pad

    def y(v: float) -> float:
        return height / 2 if high == low else height - pad - span * (v - low) / (high - low)
    return " ".join(f"{_num(pad + step * i)},{_num(y(v))}" for i, v in enumerate(finite))
