"""The charts' geometry: bars, segments, lines and sparklines inside their frames."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runstore.report._svg import (
    CHART_HEIGHT,
    CHART_WIDTH,
    line_chart,
    nice_ceiling,
    runs_chart,
    sparkline,
)


def _numbers(text: str) -> list[float]:
    return [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", text)]


def _rects(path: str) -> list[tuple[float, float, float, float]]:
    """(x, y, width, height) of each ``M x y h w v h h -w z`` rectangle of a path."""
    found = re.findall(r"M(-?[\d.]+) (-?[\d.]+)h([\d.]+)[vV](-?[\d.]+)h-[\d.]+z", path)
    return [(float(x), float(y), float(w), float(h)) for x, y, w, h in found]


@pytest.mark.parametrize(("value", "top"), [(0, 1), (-5, 1), (1, 1), (3, 5), (7, 10),
                                             (11, 20), (2001, 2500), (0.03, 0.05)])
def test_an_axis_top_is_a_round_number_at_least_the_value(value: float, top: float) -> None:
    assert nice_ceiling(value) == pytest.approx(top)


def test_each_run_gets_a_bar_and_its_outcomes_stack_inside_the_plot() -> None:
    counts = [{"passed": 10, "failed": 0}, {"passed": 5, "failed": 5, "skipped": 2}]
    chart = runs_chart(counts, [1000.0, 2000.0], [0, 5])
    assert [b.index for b in chart.bars] == [0, 1]
    segments = dict(chart.segments)
    assert set(segments) == {"passed", "failed", "skipped"}  # no path for an absent outcome
    failed = _rects(segments["failed"])
    assert len(failed) == 1
    x, y, _, h = failed[0]
    assert y + h == pytest.approx(chart.frame.bottom, abs=0.1)  # failures sit on the axis
    assert x > chart.bars[1].x
    for _, path in chart.segments:
        for _, y, _, h in _rects(path):
            assert chart.frame.top - 0.1 <= y <= y + h <= chart.frame.bottom + 0.1
    assert chart.bars[-1].x + chart.bars[-1].width <= chart.frame.right + 0.01
    assert chart.frame.bottom < chart.band.top < chart.band.bottom <= CHART_HEIGHT


@pytest.mark.parametrize(("items", "labels"), [
    (1, ["0", "1"]), (3, ["0", "5"]), (8, ["0", "5", "10"]), (25, ["0", "25"]),
    (40, ["0", "25", "50"]),
])
def test_the_count_axis_names_whole_items_only(items: int, labels: list[str]) -> None:
    chart = runs_chart([{"passed": items}], [1000.0], [0])
    assert [t.label for t in chart.count_ticks] == labels


def test_one_failure_among_thousands_still_shows() -> None:
    chart = runs_chart([{"passed": 5000, "failed": 1}], [None], [1])
    (failed,) = _rects(dict(chart.segments)["failed"])
    assert failed[3] >= 1.5
    # and the band under the bars shows it full height on its own scale
    (band,) = _rects(chart.failing_path)
    assert band[1] == pytest.approx(chart.band.top, abs=0.1)


def test_a_run_without_a_duration_breaks_the_line() -> None:
    chart = runs_chart([{"passed": 1}] * 4, [10.0, None, 20.0, 30.0], [0] * 4)
    assert len(chart.duration_lines) == 2
    assert len(chart.duration_lines[1].split()) == 2
    assert chart.duration_ticks[-1].label == "50 ms"
    assert runs_chart([{"passed": 1}], [None], [0]).duration_ticks == ()


def test_the_sequences_must_agree() -> None:
    with pytest.raises(ValueError, match="one duration"):
        runs_chart([{"passed": 1}], [1.0, 2.0], [0])


def test_no_runs_draw_nothing() -> None:
    chart = runs_chart([], [], [])
    assert (chart.bars, chart.segments, chart.duration_lines, chart.x_ticks) == ((), (), (), ())


@given(st.lists(st.one_of(st.none(), st.floats(0, 100)), max_size=60))
def test_a_line_chart_stays_inside_its_frame(values: list[float | None]) -> None:
    chart = line_chart(values)
    assert len(chart.points) == sum(v is not None for v in values)
    for point in chart.points:
        assert chart.frame.left <= point.x <= chart.frame.right
        assert chart.frame.top - 1e-6 <= point.y <= chart.frame.bottom + 1e-6
    for line in chart.lines:
        xs = _numbers(line)[::2]
        assert xs == sorted(xs)
        assert all(0 <= x <= CHART_WIDTH for x in xs)


def test_a_line_chart_axis_starts_near_its_lowest_value() -> None:
    chart = line_chart([92.0, 95.5])
    assert [t.label for t in chart.ticks] == ["90", "95", "100"]
    assert line_chart([100.0]).ticks[0].label == "90"


@given(st.lists(st.floats(0, 1e9), max_size=60))
def test_a_sparkline_fits_its_box(values: list[float]) -> None:
    points = sparkline(values, 120, 22)
    if not values:
        assert points == ""
        return
    numbers = _numbers(points)
    xs, ys = numbers[::2], numbers[1::2]
    assert len(xs) == max(len(values), 2)
    assert all(0 <= x <= 120 for x in xs)
    assert all(0 <= y <= 22 for y in ys)


def test_a_sparkline_puts_the_largest_value_on_top_and_a_flat_one_in_the_middle() -> None:
    ys = _numbers(sparkline([1.0, 3.0, 2.0], 120, 22))[1::2]
    assert ys.index(min(ys)) == 1
    assert set(_numbers(sparkline([5.0, 5.0], 120, 22))[1::2]) == {11.0}


@pytest.mark.parametrize("runs", [1, 2, 4, 12, 100, 500])
def test_few_or_many_runs_spread_over_the_whole_width(runs: int) -> None:
    chart = runs_chart([{"passed": 3}] * runs, [10.0] * runs, [0] * runs)
    width = chart.frame.right - chart.frame.left
    assert chart.bars[0].x == pytest.approx(chart.frame.left)
    assert chart.bars[-1].x + chart.bars[-1].width == pytest.approx(chart.frame.right)
    rects = _rects(dict(chart.segments)["passed"])
    assert all(0 < w <= 48 for _, _, w, _ in rects)  # a handful of runs are no slabs
    centres = [x + w / 2 for x, _, w, _ in rects]
    assert centres[-1] - centres[0] >= width * (1 - 1 / runs) - 0.5
    points = line_chart([50.0] * runs).points
    assert points[-1].x - points[0].x >= width * (1 - 1 / runs) - 0.5
