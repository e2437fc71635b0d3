"""Prices are integer cents; conversions round half to even like a bank would."""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal

RATES = {("EUR", "USD"): Decimal("1.0850"), ("USD", "EUR"): Decimal("0.9217")}


def parse_price(text: str) -> int:
    """Parse ``"12.34"`` (optionally with a currency sign) into cents."""
    cleaned = text.strip().lstrip("$€").replace(",", "")
    if not cleaned:
        raise ValueError(f"not a price: {text!r}")
    return int((Decimal(cleaned) * 100).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


def apply_discount(cents: int, percent: int) -> int:
    """Take ``percent`` off ``cents`` (0-100), rounding to the nearest cent."""
    if not 0 <= percent <= 100:
        raise ValueError(f"discount must be 0-100 %, got {percent}")
    kept = Decimal(cents) * (100 - percent) / 100
    return int(kept.quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


def convert(cents: int, source: str, target: str) -> int:
    """Convert ``cents`` from ``source`` to ``target`` currency at the stored rate."""
    if source == target:
        return cents
    rate = RATES[(source, target)]
    return int((Decimal(cents) * rate).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))
