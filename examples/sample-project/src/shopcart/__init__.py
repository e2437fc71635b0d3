"""A tiny shop cart: lines of products, prices in cents, discounts and currency conversion."""

from shopcart.cart import Cart, Line
from shopcart.pricing import apply_discount, convert, parse_price

__all__ = ["Cart", "Line", "apply_discount", "convert", "parse_price"]
