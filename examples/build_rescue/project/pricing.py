"""Order pricing for a small shop: line totals and the bulk discount."""

from __future__ import annotations

#: Orders with at least this many items get the bulk discount.
BULK_THRESHOLD = 10
#: The bulk discount, in percent.
BULK_DISCOUNT = 10


def order_total(lines: list[tuple[int, int]]) -> int:
    """Return the total in cents of an order given as (price in cents, quantity) lines."""
    subtotal = sum(price * quantity for price, quantity in lines)
    items = sum(quantity for _, quantity in lines)
    if items > BULK_THRESHOLD:
        subtotal -= subtotal * BULK_DISCOUNT // 100
    return subtotal
