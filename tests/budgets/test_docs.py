"""The budget guide's examples are real: its task-file tables parse."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from proctor.budgets._budget import DIMENSIONS, Budget
from proctor.budgets._prices import Price, PriceTable

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "budgets.md"


def _toml_blocks() -> list[str]:
    return re.findall(r"```toml\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)


def test_the_example_budget_and_prices_parse() -> None:
    [block] = _toml_blocks()
    data = tomllib.loads(block)
    table = data["budget"]
    budget = Budget({k: v for k, v in table.items() if k != "reserve"}, table["reserve"])
    for name in (
        "steps",
        "tool_calls",
        "tool_calls:run_command",
        "tokens_in",
        "tokens_out",
        "cost_usd",
        "wall_seconds",
        "working_seconds",
        "retries",
    ):
        assert name in budget.limits, name
    assert budget.reserve
    prices = PriceTable.from_mapping(data["prices"])
    assert prices.price("my-model") == Price(0.5, 1.5)
    assert prices.price("gpt-4o") == Price(2.5, 10.0)


def test_every_dimension_is_in_the_guide() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    for name in DIMENSIONS:
        assert f"`{name}`" in text, name


def test_the_builtin_prices_are_in_the_guide() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    for model, price in PriceTable().prices.items():
        row = f"| `{model}` | {price.input_per_mtok:.2f} | {price.output_per_mtok:.2f} |"
        assert row in text, row


def test_the_benchmark_numbers_are_filled_in() -> None:
    assert "BENCH_" not in GUIDE.read_text(encoding="utf-8")
