"""
Amounts as people read them: money to the cent, seconds to a tenth, counts whole.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ("format_amount", "format_spend")

# Shown first, in this order; any other dimension follows alphabetically.
_ORDER = ("steps", "tool_calls", "tokens_in", "tokens_out", "cost_usd", "wall_seconds")


def format_amount(dimension: str, value: float) -> str:
    """
    Write one amount of ``dimension`` for a person.

    Money is to the cent (``$0.42``); an amount below a cent that is not zero
    keeps four decimals (``$0.0033``), so a cheap run never reads as free.
    Seconds are to a tenth; counts are whole.
    """
    if dimension == "cost_usd":
        if 0 < abs(value) < 0.005:
            return f"${value:.4f}"
        return f"${value:,.2f}"
    if dimension.endswith("seconds"):
        return f"{value:,.1f}s"
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:,.2f}"


def _label(dimension: str) -> str:
    return {
        "cost_usd": "cost",
        "wall_seconds": "wall",
        "working_seconds": "working",
        "tokens_in": "in",
        "tokens_out": "out",
    }.get(dimension, dimension)


def format_spend(amounts: Mapping[str, float], *, detail: bool = False) -> str:
    """
    Write amounts per dimension on one line, the usual dimensions first.

    Args:
        amounts: the amounts.
        detail: also show per-tool counts (``tool_calls:NAME``).
    """
    if not amounts:
        return "-"

    def key(name: str) -> tuple[int, str]:
        return (_ORDER.index(name) if name in _ORDER else len(_ORDER), name)

    parts = [
        f"{_label(name)} {format_amount(name, amounts[name])}"
        for name in sorted(amounts, key=key)
        if detail or ":" not in name
    ]
    return ", ".join(parts) or "-"
