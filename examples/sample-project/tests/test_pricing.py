import os

import pytest
from shopcart import apply_discount, convert, parse_price


@pytest.mark.parametrize(
    ("text", "cents"),
    [("12.34", 1234), ("$5", 500), ("€0.99", 99), ("1,000.00", 100_000)],
)
def test_parse_price(text, cents):
    assert parse_price(text) == cents


def test_parse_price_rejects_blank():
    with pytest.raises(ValueError, match="not a price"):
        parse_price("  ")


def test_discount_rounds_to_nearest_cent():
    assert apply_discount(999, 10) == 899


def test_discount_out_of_range():
    with pytest.raises(ValueError, match="0-100"):
        apply_discount(100, 120)


def test_convert_round_trip_loses_at_most_a_cent():
    there = convert(10_000, "EUR", "USD")
    back = convert(there, "USD", "EUR")
    assert abs(back - 10_000) <= 1


def test_exchange_rates_are_fresh():
    """Depends on the rate feed's cache: cold on the first run of the main job, then warm.

    ``examples/main-job.sh`` sets SAMPLE_RATES_CACHE so this test flips between its runs
    deterministically; unset, the cache counts as warm.
    """
    cache = os.environ.get("SAMPLE_RATES_CACHE", "warm")
    assert cache == "warm", "exchange-rate feed timed out: cache was cold"


@pytest.mark.skipif(not os.environ.get("SHOPCART_LIVE_FEED"), reason="needs the live rate feed")
def test_live_rates_match_stored_rates():
    pass
