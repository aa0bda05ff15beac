"""
Model prices: what a token costs, so that cost is known before and after a call.

Prices change, and the built-in table is only a starting point: a task declares
the prices it relies on (a task file's ``[prices]`` table, or
:meth:`PriceTable.with_prices`). A model without a price is an error, never a
silent zero: a zero would let spend go unseen.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs

from proctor._errors import BudgetError, ConfigError

__all__ = ("BUILTIN_PRICES", "Price", "PriceTable")

# A million tokens: prices are quoted per million.
_MTOK = 1_000_000

# Provider suffixes that name a snapshot of a model the table knows by its family
# name: ``gpt-4o-2024-08-06``, ``claude-sonnet-4-20250514``, ``claude-3-5-haiku-latest``.
_SNAPSHOT = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{8}|latest)$")

# A TOML bare key; anything else is quoted when an error names it.
_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def _rate(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ConfigError(f"a price must be a number >= 0 (USD per million tokens), got {value!r}")
    if value == float("inf"):
        raise ConfigError("a price must be finite (USD per million tokens), got inf")
    return float(value)


@attrs.frozen
class Price:
    """
    What one model's tokens cost.

    Args:
        input_per_mtok: USD per million input (prompt) tokens.
        output_per_mtok: USD per million output (completion) tokens.
    """

    input_per_mtok: float = attrs.field(converter=_rate)
    output_per_mtok: float = attrs.field(converter=_rate)

    def cost(self, tokens_in: int, tokens_out: int) -> float:
        """Return the cost in USD of ``tokens_in`` input and ``tokens_out`` output tokens."""
        return (tokens_in * self.input_per_mtok + tokens_out * self.output_per_mtok) / _MTOK


#: Prices in USD per million tokens as the providers listed them in 2025. They
#: change: declare the prices a task relies on rather than trusting these.
BUILTIN_PRICES: Mapping[str, Price] = {
    "gpt-4o": Price(2.50, 10.00),
    "gpt-4o-mini": Price(0.15, 0.60),
    "gpt-4.1": Price(2.00, 8.00),
    "gpt-4.1-mini": Price(0.40, 1.60),
    "gpt-4.1-nano": Price(0.10, 0.40),
    "o3-mini": Price(1.10, 4.40),
    "o4-mini": Price(1.10, 4.40),
    "claude-sonnet-4": Price(3.00, 15.00),
    "claude-opus-4": Price(15.00, 75.00),
    "claude-3-5-haiku": Price(0.80, 4.00),
}


def _copy(prices: Mapping[str, Price]) -> dict[str, Price]:
    return dict(prices)


def _key(model: str) -> str:
    return model if _BARE.match(model) else f'"{model}"'


def _declare_hint(model: str) -> str:
    return (
        f"declare it in the task file's [prices] table ({_key(model)} = "
        "{ input = USD per million input tokens, output = USD per million output tokens }) "
        f"or with PriceTable.with_prices({{{model!r}: Price(input, output)}})"
    )


@attrs.frozen
class PriceTable:
    """
    Prices by model name.

    ``PriceTable()`` is the built-in table (:data:`BUILTIN_PRICES`). A model is
    looked up by its exact name first, then without a snapshot suffix
    (``gpt-4o-2024-08-06`` is priced as ``gpt-4o``; an exact entry wins).

    Args:
        prices: model name -> price.
    """

    prices: dict[str, Price] = attrs.field(factory=lambda: dict(BUILTIN_PRICES), converter=_copy)

    @classmethod
    def empty(cls) -> PriceTable:
        """Return a table that knows no model: every price must be declared."""
        return cls({})

    def with_prices(self, mapping: Mapping[str, Price]) -> PriceTable:
        """Return a copy of this table with ``mapping``'s prices added or overriding."""
        for model, price in mapping.items():
            if not isinstance(model, str) or not model:
                raise ConfigError(f"a model name must be a non-empty string, got {model!r}")
            if not isinstance(price, Price):
                raise ConfigError(f"the price of {model!r} must be a Price, got {price!r}")
        return PriceTable({**self.prices, **mapping})

    def price(self, model: str) -> Price:
        """
        Return the price of ``model``.

        Raises:
            BudgetError: no price is known for ``model``.
        """
        found = self.prices.get(model)
        if found is None:
            found = self.prices.get(_SNAPSHOT.sub("", model))
        if found is None:
            raise BudgetError(f"no price for model {model!r}: {_declare_hint(model)}")
        return found

    def __contains__(self, model: object) -> bool:
        if not isinstance(model, str):
            return False
        return model in self.prices or _SNAPSHOT.sub("", model) in self.prices

    def cost(self, model: str, tokens_in: int, tokens_out: int) -> float:
        """
        Return the cost in USD of a call to ``model``.

        Raises:
            BudgetError: no price is known for ``model``.
        """
        return self.price(model).cost(tokens_in, tokens_out)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], where: str = "prices") -> PriceTable:
        """
        Build the table of a task file's ``[prices]``: the built-in table, extended.

        ``data`` looks like ``{"my-model": {"input": 0.5, "output": 1.5}}``.

        Args:
            data: model name -> ``{input, output}`` in USD per million tokens.
            where: the table's name in error messages.

        Raises:
            ConfigError: naming the field that is wrong (``prices.my-model.input``).
        """
        if not isinstance(data, Mapping):
            raise ConfigError(
                f"{where}: must be a table of model = {{ input = ..., output = ... }}"
            )
        declared: dict[str, Price] = {}
        for model, entry in data.items():
            field = f"{where}.{_key(str(model))}"
            if not isinstance(entry, Mapping):
                raise ConfigError(
                    f"{field}: must be a table {{ input = USD per million input tokens, "
                    f"output = USD per million output tokens }}, got {entry!r}"
                )
            unknown = sorted(set(entry) - {"input", "output"})
            if unknown:
                raise ConfigError(f"{field}.{unknown[0]}: unknown key; known: input, output")
            rates: dict[str, float] = {}
            for key in ("input", "output"):
                if key not in entry:
                    raise ConfigError(f"{field}.{key}: missing (USD per million {key} tokens)")
                try:
                    rates[key] = _rate(entry[key])
                except ConfigError:
                    raise ConfigError(
                        f"{field}.{key}: must be a number >= 0 (USD per million {key} tokens), "
                        f"got {entry[key]!r}"
                    ) from None
            declared[str(model)] = Price(rates["input"], rates["output"])
        return cls().with_prices(declared)
