from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proctor._errors import BudgetError, ConfigError
from proctor._wire import converter
from proctor.budgets import _prices, _usage
from proctor.budgets._prices import BUILTIN_PRICES, Price, PriceTable
from proctor.budgets._usage import Usage, estimate


@pytest.mark.parametrize("module", [_prices, _usage])
def test_all_names_exist_and_are_documented(module: Any) -> None:
    assert isinstance(module.__all__, tuple)
    for name in module.__all__:
        assert hasattr(module, name), name
        assert getattr(module, name).__doc__ or name.isupper(), name


# -- Price -------------------------------------------------------------------------------


def test_a_price_is_per_million_tokens() -> None:
    price = Price(2.5, 10.0)
    assert price.cost(1_000_000, 0) == 2.5
    assert price.cost(0, 1_000_000) == 10.0
    assert price.cost(2_000, 500) == pytest.approx(0.005 + 0.005)


@pytest.mark.parametrize("bad", [-1, "1", True, float("nan"), float("inf")])
def test_a_bad_price_is_refused(bad: Any) -> None:
    with pytest.raises(ConfigError, match="USD per million tokens"):
        Price(bad, 1.0)


# -- PriceTable --------------------------------------------------------------------------


def test_the_default_table_is_the_builtin_one() -> None:
    table = PriceTable()
    assert table.prices == BUILTIN_PRICES
    for model in ("gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini", "o3-mini"):
        assert model in table
    for model in ("claude-sonnet-4", "claude-3-5-haiku"):
        assert model in table


def test_cost_prices_input_and_output_apart() -> None:
    table = PriceTable.empty().with_prices({"m": Price(1.0, 3.0)})
    assert table.cost("m", 1_000_000, 1_000_000) == 4.0
    assert table.cost("m", 0, 0) == 0.0


def test_an_unknown_model_is_an_error_naming_it_and_how_to_declare_a_price() -> None:
    with pytest.raises(BudgetError) as info:
        PriceTable().cost("my-model", 10, 10)
    message = str(info.value)
    assert "'my-model'" in message
    assert "[prices]" in message
    assert "my-model = { input = " in message
    assert "PriceTable.with_prices" in message


def test_an_unknown_model_is_never_a_silent_zero() -> None:
    with pytest.raises(BudgetError):
        PriceTable.empty().cost("gpt-4o", 0, 0)


def test_a_declared_price_is_used() -> None:
    table = PriceTable().with_prices({"my-model": Price(0.5, 1.5)})
    assert table.cost("my-model", 2_000_000, 1_000_000) == 2.5
    # The built-in prices are still there.
    assert table.cost("gpt-4o", 1_000_000, 0) == BUILTIN_PRICES["gpt-4o"].input_per_mtok


def test_a_declared_price_overrides_a_builtin_one() -> None:
    table = PriceTable().with_prices({"gpt-4o": Price(1.0, 2.0)})
    assert table.cost("gpt-4o", 1_000_000, 1_000_000) == 3.0
    # The table it came from is unchanged.
    assert PriceTable().price("gpt-4o") == BUILTIN_PRICES["gpt-4o"]


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("claude-sonnet-4-20250514", "claude-sonnet-4"),
        ("claude-3-5-haiku-latest", "claude-3-5-haiku"),
    ],
)
def test_a_snapshot_is_priced_as_its_family(model: str, family: str) -> None:
    assert PriceTable().price(model) == BUILTIN_PRICES[family]
    assert model in PriceTable()


def test_an_exact_entry_wins_over_its_family() -> None:
    table = PriceTable().with_prices({"gpt-4o-2024-08-06": Price(9.0, 9.0)})
    assert table.price("gpt-4o-2024-08-06") == Price(9.0, 9.0)


def test_a_near_name_is_not_guessed() -> None:
    with pytest.raises(BudgetError, match="'gpt-4o-turbo'"):
        PriceTable().price("gpt-4o-turbo")


def test_with_prices_wants_prices() -> None:
    with pytest.raises(ConfigError, match="must be a Price"):
        PriceTable().with_prices({"m": (1.0, 2.0)})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match="non-empty string"):
        PriceTable().with_prices({"": Price(1.0, 1.0)})


# -- PriceTable.from_mapping -----------------------------------------------------------


def test_from_mapping_extends_the_builtin_table() -> None:
    table = PriceTable.from_mapping({"my-model": {"input": 0.5, "output": 1.5}})
    assert table.price("my-model") == Price(0.5, 1.5)
    assert "gpt-4o" in table


def test_from_mapping_of_nothing_is_the_builtin_table() -> None:
    assert PriceTable.from_mapping({}) == PriceTable()


def refusal(data: Any) -> str:
    with pytest.raises(ConfigError) as info:
        PriceTable.from_mapping(data)
    return str(info.value)


def test_from_mapping_names_a_bad_rate() -> None:
    assert refusal({"my-model": {"input": -1, "output": 1}}) == (
        "prices.my-model.input: must be a number >= 0 (USD per million input tokens), got -1"
    )


def test_from_mapping_quotes_a_model_name_that_is_no_bare_key() -> None:
    assert refusal({"gpt-4.2": {"input": 1, "output": "2"}}).startswith(
        'prices."gpt-4.2".output: must be a number'
    )


def test_from_mapping_names_a_missing_rate() -> None:
    assert (
        refusal({"m": {"input": 1}}) == "prices.m.output: missing (USD per million output tokens)"
    )


def test_from_mapping_names_an_unknown_key() -> None:
    assert refusal({"m": {"input": 1, "output": 2, "cached": 0.1}}) == (
        "prices.m.cached: unknown key; known: input, output"
    )


def test_from_mapping_wants_a_table_per_model() -> None:
    assert refusal({"m": 1.5}).startswith("prices.m: must be a table { input = ")


def test_from_mapping_wants_a_table() -> None:
    assert refusal([1, 2]).startswith("prices: must be a table")


def test_from_mapping_names_its_table() -> None:
    with pytest.raises(ConfigError, match=r"^task\.prices\.m\.input"):
        PriceTable.from_mapping({"m": {"input": True, "output": 1}}, where="task.prices")


# -- Usage ---------------------------------------------------------------------------------


def test_usage_amounts_price_the_tokens() -> None:
    table = PriceTable.empty().with_prices({"m": Price(1.0, 2.0)})
    usage = Usage(tokens_in=1_000, tokens_out=500, model="m")
    assert usage.amounts(table) == {"tokens_in": 1000.0, "tokens_out": 500.0, "cost_usd": 0.002}


def test_usage_amounts_use_the_builtin_table_by_default() -> None:
    usage = Usage(1_000_000, 0, "gpt-4o")
    assert usage.amounts()["cost_usd"] == BUILTIN_PRICES["gpt-4o"].input_per_mtok


def test_a_reported_cost_wins_over_the_price() -> None:
    usage = Usage(1_000, 500, model="unknown-model", cost_usd=0.25)
    assert usage.amounts(PriceTable.empty()) == {
        "tokens_in": 1000.0,
        "tokens_out": 500.0,
        "cost_usd": 0.25,
    }


def test_usage_of_an_unpriced_model_is_an_error() -> None:
    with pytest.raises(BudgetError, match="'local-llama'"):
        Usage(10, 10, "local-llama").amounts()


def test_usage_without_a_model_or_a_cost_is_an_error() -> None:
    with pytest.raises(BudgetError, match="names no model and reports no cost"):
        Usage(10, 0).amounts()


def test_no_usage_costs_nothing() -> None:
    assert Usage().amounts() == {"tokens_in": 0.0, "tokens_out": 0.0, "cost_usd": 0.0}


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
def test_a_bad_token_count_is_refused(bad: Any) -> None:
    with pytest.raises(ConfigError, match="token count"):
        Usage(tokens_in=bad)


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf"), "0.1"])
def test_a_bad_reported_cost_is_refused(bad: Any) -> None:
    with pytest.raises(ConfigError, match="reported cost"):
        Usage(cost_usd=bad)


def test_estimate_holds_the_prompt_and_the_most_output() -> None:
    table = PriceTable.empty().with_prices({"m": Price(1.0, 4.0)})
    assert estimate("m", 2_000, 1_000, table) == {
        "tokens_in": 2000.0,
        "tokens_out": 1000.0,
        "cost_usd": pytest.approx(0.006),
    }


def test_estimate_of_an_unpriced_model_is_an_error() -> None:
    with pytest.raises(BudgetError, match="'nope'"):
        estimate("nope", 10, 10)


@given(
    prompt=st.integers(0, 10**6),
    used=st.integers(0, 10**5),
    limit=st.integers(0, 10**5),
    model=st.sampled_from(sorted(BUILTIN_PRICES)),
)
def test_an_estimate_covers_any_usage_within_its_output_limit(
    prompt: int, used: int, limit: int, model: str
) -> None:
    held = estimate(model, prompt, max(used, limit))
    spent = Usage(prompt, used, model).amounts()
    for key, amount in spent.items():
        assert amount <= held[key] + 1e-12


# -- wire ------------------------------------------------------------------------------------

_rate = st.floats(min_value=0, max_value=1e4, allow_nan=False)


@given(st.builds(Price, _rate, _rate))
def test_price_round_trips(price: Price) -> None:
    assert converter.structure(converter.unstructure(price), Price) == price


@given(
    st.builds(
        Usage,
        st.integers(0, 10**9),
        st.integers(0, 10**9),
        st.none() | st.text(max_size=20),
        st.none() | _rate,
    )
)
def test_usage_round_trips(usage: Usage) -> None:
    assert converter.structure(converter.unstructure(usage), Usage) == usage
