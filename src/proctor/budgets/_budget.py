"""
Budget limits and the spend ledger.

Spend belongs to the task, not the run: a resumed task starts with what it
already spent. The ledger grants a reservation only when it fits *before* any
spend, and keeps a reserve that only the controller may draw on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from proctor._errors import ConfigError

__all__ = ("DIMENSIONS", "Budget", "Exhaustion", "Ledger")

#: The dimensions a budget may limit. ``tool_calls:NAME`` limits one tool.
DIMENSIONS = (
    "steps",
    "tool_calls",
    "tokens_in",
    "tokens_out",
    "cost_usd",
    "wall_seconds",
    "working_seconds",
    "retries",
    "child_cpu_seconds",
)


def _amounts(value: Mapping[str, float | int], where: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, amount in value.items():
        name = key if key in DIMENSIONS else None
        if key.startswith("tool_calls:") and len(key) > len("tool_calls:"):
            name = key
        if name is None:
            raise ConfigError(
                f"{where}.{key}: unknown dimension {key!r}; known: {', '.join(DIMENSIONS)}, "
                "or tool_calls:TOOL for one tool"
            )
        if isinstance(amount, bool) or not isinstance(amount, int | float) or not amount >= 0:
            raise ConfigError(f"{where}.{key}: must be a number >= 0, got {amount!r}")
        out[name] = float(amount)
    return out


def _limits(value: Mapping[str, float | int]) -> dict[str, float]:
    return _amounts(value, "budget")


def _reserve(value: Mapping[str, float | int]) -> dict[str, float]:
    return _amounts(value, "budget.reserve")


@attrs.frozen
class Budget:
    """
    The limits of a task.

    Args:
        limits: dimension -> limit (``steps``, ``tool_calls``, ``tool_calls:run_command``,
            ``wall_seconds``, ...). A dimension not named is unlimited.
        reserve: dimension -> the slice of its limit only the controller may use,
            to freeze, verify and write the handoff.
    """

    limits: dict[str, float] = attrs.field(factory=dict, converter=_limits)
    reserve: dict[str, float] = attrs.field(factory=dict, converter=_reserve)

    def __attrs_post_init__(self) -> None:
        for key, amount in self.reserve.items():
            if key not in self.limits:
                raise ConfigError(
                    f"budget.reserve.{key}: a reserve needs a limit on {key} to be carved from"
                )
            if amount > self.limits[key]:
                limit = self.limits[key]
                raise ConfigError(
                    f"budget.reserve.{key}: {amount:g} is larger than the limit {limit:g}"
                )

    @classmethod
    def of(cls, reserve: Mapping[str, float] | None = None, **limits: float) -> Budget:
        """Build a budget from keyword limits: ``Budget.of(steps=60, wall_seconds=900)``."""
        return cls(dict(limits), dict(reserve or {}))


@attrs.frozen
class Exhaustion:
    """
    A limit that a request does not fit.

    Args:
        limit: the dimension.
        value: what is spent (and reserved) of it.
        bound: its limit (for the actor, the limit less the reserve).
        scope: ``task``: limits apply to the task across all its runs.
        requested: what the refused request asked for.
    """

    limit: str
    value: float
    bound: float
    scope: str = "task"
    requested: float = 0.0

    def describe(self) -> str:
        """Say it for a person."""
        return f"{self.limit}: {self.value:g} of {self.bound:g} spent" + (
            f", {self.requested:g} more requested" if self.requested else ""
        )


@attrs.define(eq=False)
class Ledger:
    """
    The accountant's books: spent, reserved, and what is left.

    Args:
        budget: the limits.
        spent: what the task had spent before this run (inherited).
    """

    budget: Budget
    spent: dict[str, float] = attrs.field(factory=dict)
    reserved: dict[int, dict[str, float]] = attrs.field(factory=dict)
    _next: int = 0

    def _held(self, dimension: str) -> float:
        return sum(r.get(dimension, 0.0) for r in self.reserved.values())

    def check(self, amounts: Mapping[str, float], controller: bool = False) -> Exhaustion | None:
        """Return the first limit the amounts would break, or None when they fit."""
        for dimension, amount in amounts.items():
            limit = self.budget.limits.get(dimension)
            if limit is None:
                continue
            bound = limit if controller else limit - self.budget.reserve.get(dimension, 0.0)
            used = self.spent.get(dimension, 0.0) + self._held(dimension)
            if used + amount > bound + 1e-9:
                return Exhaustion(dimension, used, bound, "task", amount)
        return None

    def reserve(self, amounts: Mapping[str, float], controller: bool = False) -> int | Exhaustion:
        """Hold the amounts if they fit; return the reservation's id, or what broke."""
        refusal = self.check(amounts, controller)
        if refusal is not None:
            return refusal
        self._next += 1
        self.reserved[self._next] = dict(amounts)
        return self._next

    def settle(self, reservation: int | None, actual: Mapping[str, float]) -> None:
        """Replace a reservation by the actual spend (which may differ from the estimate)."""
        if reservation is not None:
            self.reserved.pop(reservation, None)
        for dimension, amount in actual.items():
            self.spent[dimension] = self.spent.get(dimension, 0.0) + amount

    def release(self, reservation: int) -> None:
        """Drop a reservation that was not spent."""
        self.reserved.pop(reservation, None)

    def remaining(self, controller: bool = False) -> dict[str, float]:
        """What is left of each limit (for the actor, less the reserve)."""
        out = {}
        for dimension, limit in self.budget.limits.items():
            bound = limit if controller else limit - self.budget.reserve.get(dimension, 0.0)
            used = self.spent.get(dimension, 0.0) + self._held(dimension)
            out[dimension] = max(0.0, bound - used)
        return out

    def exhausted(self, controller: bool = False) -> Exhaustion | None:
        """The first limit with nothing left, if any."""
        for dimension, left in self.remaining(controller).items():
            if left <= 1e-9:
                limit = self.budget.limits[dimension]
                bound = limit if controller else limit - self.budget.reserve.get(dimension, 0.0)
                return Exhaustion(dimension, self.spent.get(dimension, 0.0), bound)
        return None

    def snapshot(self) -> dict[str, Any]:
        """Plain data for the journal and the handoff."""
        return {"spent": dict(self.spent), "remaining": self.remaining()}
