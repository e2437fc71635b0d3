"""A cart holds lines; its total applies the best single discount code."""

from __future__ import annotations

from dataclasses import dataclass, field

from shopcart.pricing import apply_discount

CODES = {"WELCOME10": 10, "SPRING25": 25}


@dataclass(frozen=True)
class Line:
    """One product in the cart: its SKU, unit price in cents and quantity."""

    sku: str
    unit_cents: int
    quantity: int = 1

    @property
    def cents(self) -> int:
        return self.unit_cents * self.quantity


@dataclass
class Cart:
    """Lines by SKU, and the discount codes entered."""

    lines: dict[str, Line] = field(default_factory=dict)
    codes: list[str] = field(default_factory=list)

    def add(self, sku: str, unit_cents: int, quantity: int = 1) -> None:
        if quantity < 1:
            raise ValueError("quantity must be at least 1")
        current = self.lines.get(sku)
        if current is not None:
            quantity += current.quantity
        self.lines[sku] = Line(sku, unit_cents, quantity)

    def remove(self, sku: str) -> None:
        del self.lines[sku]

    def enter_code(self, code: str) -> None:
        if code.upper() not in CODES:
            raise KeyError(f"unknown discount code {code!r}")
        self.codes.append(code.upper())

    @property
    def subtotal(self) -> int:
        return sum(line.cents for line in self.lines.values())

    @property
    def total(self) -> int:
        best = max((CODES[c] for c in self.codes), default=0)
        return apply_discount(self.subtotal, best)
