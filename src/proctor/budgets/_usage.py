"""
Model usage: what a call spent, and what to reserve before making it.

A model call is reserved before it is sent (:func:`estimate`: the prompt's
tokens and the most the reply may take) and settled after with what the
provider reported (:meth:`Usage.amounts`).
"""

from __future__ import annotations

import math

import attrs

from proctor._errors import BudgetError, ConfigError
from proctor.budgets._prices import PriceTable

__all__ = ("Usage", "estimate")


def _count(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"a token count must be an integer >= 0, got {value!r}")
    return value


def _cost(value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ConfigError(f"a reported cost must be a number >= 0 (USD), got {value!r}")
    if not math.isfinite(value):
        raise ConfigError(f"a reported cost must be finite, got {value!r}")
    return float(value)


@attrs.frozen
class Usage:
    """
    What one model call spent, as the provider reported it.

    Args:
        tokens_in: input (prompt) tokens.
        tokens_out: output (completion) tokens.
        model: the model, to price the tokens when no cost is reported.
        cost_usd: the cost the provider reported; it wins over the price table.
    """

    tokens_in: int = attrs.field(default=0, converter=_count)
    tokens_out: int = attrs.field(default=0, converter=_count)
    model: str | None = None
    cost_usd: float | None = attrs.field(default=None, converter=_cost)

    def amounts(self, prices: PriceTable | None = None) -> dict[str, float]:
        """
        Return the spend to settle: ``tokens_in``, ``tokens_out`` and ``cost_usd``.

        The cost is the reported one if there is one, else the tokens priced by
        ``prices`` (default: the built-in table).

        Raises:
            BudgetError: tokens were spent but there is no cost to charge for
                them: the model has no price, or no model was named.
        """
        if self.cost_usd is not None:
            cost = self.cost_usd
        elif self.model is not None:
            cost = (prices or PriceTable()).cost(self.model, self.tokens_in, self.tokens_out)
        elif self.tokens_in or self.tokens_out:
            raise BudgetError(
                f"usage of {self.tokens_in} input and {self.tokens_out} output tokens names "
                "no model and reports no cost: name the model (and declare its price) or "
                "report cost_usd"
            )
        else:
            cost = 0.0
        return {
            "tokens_in": float(self.tokens_in),
            "tokens_out": float(self.tokens_out),
            "cost_usd": cost,
        }


def estimate(
    model: str,
    prompt_tokens: int,
    max_output_tokens: int,
    prices: PriceTable | None = None,
) -> dict[str, float]:
    """
    Return what to reserve before calling ``model``: the most the call can spend.

    The reply may take up to ``max_output_tokens``; the reservation holds all of
    them, and the settlement replaces it by what was used.

    Args:
        model: the model to be called.
        prompt_tokens: the prompt's tokens (counted or estimated by the caller).
        max_output_tokens: the call's output limit.
        prices: the price table (default: the built-in one).

    Raises:
        BudgetError: ``model`` has no price.
        ConfigError: a token count is not an integer >= 0.
    """
    return Usage(prompt_tokens, max_output_tokens, model).amounts(prices)
