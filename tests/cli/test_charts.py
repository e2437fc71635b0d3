"""The chart functions of ``runstore.cli._charts``: sparklines, outcome strips, stacked
bars, the character sets and their choice by encoding, and the colours."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from rich.console import Console

from runstore.cli._charts import (
    ASCII,
    UNICODE,
    Glyphs,
    apportion,
    bar_counts,
    glyphs_for,
    outcome_strip,
    sparkline,
    stacked_bar,
    styled,
)
from runstore.services.test_runs import Outcome

GLYPHS = st.sampled_from([UNICODE, ASCII])
VALUES = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**400), max_value=10**400),
)
FINITE = st.floats(allow_nan=False, allow_infinity=False)
COUNTS = st.lists(st.integers(min_value=0, max_value=10**6), min_size=1, max_size=6)


def _finite(value: float | None) -> bool:
    if value is None:
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an int beyond the largest float
        return False


def _level(glyphs: Glyphs, cell: str) -> int:
    return glyphs.levels.index(cell)


@pytest.mark.parametrize("glyphs", [UNICODE, ASCII], ids=["unicode", "ascii"])
def test_every_character_set_draws_distinct_characters_one_column_wide(glyphs: Glyphs) -> None:
    assert len(set(glyphs.levels)) == len(glyphs.levels) == 8
    assert glyphs.gap not in glyphs.levels
    assert set(glyphs.outcomes) == set(Outcome)
    assert len(set(glyphs.outcomes.values())) == len(Outcome)
    assert len(set(glyphs.bar)) == 3
    assert all(len(c) == 1 for c in [*glyphs.outcomes.values(), *glyphs.bar])
    chart = glyphs.levels + "".join(glyphs.outcomes.values()) + "".join(glyphs.bar)
    assert Console().measure(chart).maximum == len(chart)


def test_the_ascii_set_is_ascii_and_the_unicode_set_uses_block_elements() -> None:
    assert ASCII.characters().isascii()
    assert UNICODE.levels == "▁▂▃▄▅▆▇█"
    assert not UNICODE.characters().isascii()


@pytest.mark.parametrize(("encoding", "expected"), [
    ("utf-8", UNICODE), ("UTF-8", UNICODE), ("utf-16", UNICODE), ("ascii", ASCII),
    ("ANSI_X3.4-1968", ASCII), ("latin-1", ASCII), ("cp1252", ASCII), (None, ASCII),
    ("no-such-codec", ASCII),
])
def test_the_unicode_set_only_where_the_encoding_writes_all_of_it(
    encoding: str | None, expected: Glyphs
) -> None:
    assert glyphs_for(encoding) is expected


@given(st.lists(VALUES, max_size=40), GLYPHS)
def test_a_sparkline_has_one_character_per_value_and_gaps_where_none_is(
    values: list[float | int | None], glyphs: Glyphs
) -> None:
    line = sparkline(values, glyphs)
    assert len(line) == len(values)
    for value, cell in zip(values, line, strict=True):
        assert (cell == glyphs.gap) == (not _finite(value))
        assert cell == glyphs.gap or cell in glyphs.levels


@given(st.lists(FINITE, min_size=2, max_size=40), GLYPHS)
def test_a_sparkline_spans_from_the_lowest_level_to_the_highest(
    values: list[float], glyphs: Glyphs
) -> None:
    assume(min(values) < max(values))
    line = sparkline(values, glyphs)
    assert line[values.index(max(values))] == glyphs.levels[-1]
    assert line[values.index(min(values))] == glyphs.levels[0]


@given(st.lists(FINITE, min_size=1, max_size=40), GLYPHS)
def test_a_sparkline_is_monotone_in_the_value(values: list[float], glyphs: Glyphs) -> None:
    line = sparkline(values, glyphs)
    pairs = sorted(zip(values, (_level(glyphs, c) for c in line), strict=True))
    levels = [level for _, level in pairs]
    assert levels == sorted(levels)


@given(FINITE, st.integers(min_value=1, max_value=30), GLYPHS)
def test_a_constant_series_is_flat(value: float, size: int, glyphs: Glyphs) -> None:
    assert sparkline([value] * size, glyphs) == glyphs.levels[0] * size


def test_a_sparkline_in_examples() -> None:
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == "▁▂▃▄▅▆▇█"
    assert sparkline([1, None, 3, math.nan, math.inf, -math.inf, 2]) == "▁ █   ▅"
    assert sparkline([]) == ""
    assert sparkline([None, None]) == "  "
    assert sparkline([-1e308, 1e308, 0.0]) == "▁█▅"
    assert sparkline([0, 5, 10], ASCII) == "_=#"


@given(st.lists(st.sampled_from(list(Outcome)), max_size=60), GLYPHS)
def test_the_strip_maps_every_outcome_to_its_own_character(
    outcomes: list[Outcome], glyphs: Glyphs
) -> None:
    strip = outcome_strip(outcomes, glyphs)
    assert len(strip) == len(outcomes)
    back = {c: o for o, c in glyphs.outcomes.items()}
    assert [back[c] for c in strip] == outcomes


def test_the_strip_in_examples() -> None:
    outcomes = [Outcome.PASSED, Outcome.FAILED, Outcome.ERROR, Outcome.SKIPPED,
                Outcome.XFAILED, Outcome.XPASSED]
    assert outcome_strip(outcomes) == "✓✗EsxX"
    assert outcome_strip(outcomes, ASCII) == ".FEsxX"


@given(COUNTS, st.integers(min_value=0, max_value=200))
def test_apportioned_cells_sum_to_the_width_and_show_every_nonzero_count(
    counts: list[int], width: int
) -> None:
    cells = apportion(counts, width)
    assert len(cells) == len(counts)
    assert all(c >= 0 for c in cells)
    if sum(counts) == 0:
        assert cells == (0,) * len(counts)
        return
    assert sum(cells) == width
    assert all(cell == 0 for count, cell in zip(counts, cells, strict=True) if count == 0)
    nonzero = [cell for count, cell in zip(counts, cells, strict=True) if count > 0]
    if len(nonzero) <= width:
        assert all(cell >= 1 for cell in nonzero)


@given(COUNTS, st.integers(min_value=1, max_value=200))
def test_apportioned_cells_stay_within_one_cell_of_the_exact_share_plus_the_minimums(
    counts: list[int], width: int
) -> None:
    """Rounding and the one-cell minimums move a share by at most the number of counts."""
    assume(sum(counts) > 0)
    cells = apportion(counts, width)
    for count, cell in zip(counts, cells, strict=True):
        assert abs(cell - count * width / sum(counts)) <= len(counts)


def test_apportion_in_examples() -> None:
    assert apportion([1, 1, 1], 20) == (7, 7, 6)
    assert apportion([1000, 1, 0], 20) == (19, 1, 0)
    assert apportion([5, 3, 2], 10) == (5, 3, 2)
    assert apportion([1, 1, 1], 2) == (1, 1, 0)
    with pytest.raises(ValueError, match="at least 0"):
        apportion([1, -1], 20)


@given(st.tuples(*[st.integers(min_value=0, max_value=10**6)] * 3),
       st.integers(min_value=0, max_value=80), GLYPHS)
def test_a_stacked_bar_is_its_width_and_its_segments_in_order(
    counts: tuple[int, int, int], width: int, glyphs: Glyphs
) -> None:
    bar = stacked_bar(counts, width, glyphs)
    assert len(bar) == width
    if sum(counts) == 0:
        assert bar == " " * width
        return
    cells = apportion(counts, width)
    assert bar == "".join(c * n for c, n in zip(glyphs.bar, cells, strict=True))


def test_a_stacked_bar_in_examples() -> None:
    assert stacked_bar((3, 1, 1), 10) == "██████✗✗░░"
    assert stacked_bar((3, 1, 1), 10, ASCII) == "######FF--"
    assert stacked_bar((0, 0, 0)) == " " * 20
    assert stacked_bar((999, 1, 0)) == "█" * 19 + "✗"


def test_bar_counts_group_outcomes_as_pytest_reports_them() -> None:
    counts = {"passed": 5, "xpassed": 1, "failed": 2, "error": 3, "skipped": 4, "xfailed": 6}
    assert bar_counts(counts) == (6, 5, 10)
    assert bar_counts({}) == (0, 0, 0)


@pytest.mark.parametrize("glyphs", [UNICODE, ASCII], ids=["unicode", "ascii"])
def test_colours_reach_a_terminal_only_and_keep_the_characters(glyphs: Glyphs) -> None:
    chart = outcome_strip(list(Outcome), glyphs) + " " + stacked_bar((2, 1, 1), 4, glyphs)
    text = styled(chart, glyphs)
    assert text.plain == chart
    terminal = Console(force_terminal=True, color_system="standard", width=100)
    with terminal.capture() as seen:
        terminal.print(text)
    assert "\x1b[31m" in seen.get() or "\x1b[1;31m" in seen.get()  # failing in red
    assert "\x1b[32m" in seen.get()  # passed in green
    plain = Console(force_terminal=False, width=100)
    with plain.capture() as piped:
        plain.print(text)
    assert piped.get() == chart + "\n"
