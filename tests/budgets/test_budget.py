from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    rule,
)

from proctor import budgets
from proctor._errors import ConfigError
from proctor.budgets import _budget
from proctor.budgets._budget import DIMENSIONS, Budget, Exhaustion, Ledger

# Sums are compared with the same slack the ledger allows itself.
EPSILON = 1e-9


@pytest.mark.parametrize("module", [_budget, budgets])
def test_all_names_exist_and_are_documented(module: Any) -> None:
    assert isinstance(module.__all__, tuple)
    for name in module.__all__:
        assert hasattr(module, name), name
    for name in ("Budget", "Exhaustion", "Ledger"):
        assert getattr(module, name).__doc__, name


# -- Budget: limits ---------------------------------------------------------------


def test_every_dimension_is_accepted() -> None:
    budget = Budget(dict.fromkeys(DIMENSIONS, 1))
    assert set(budget.limits) == set(DIMENSIONS)


def test_limits_become_floats() -> None:
    budget = Budget({"steps": 60, "cost_usd": 2.5})
    assert budget.limits == {"steps": 60.0, "cost_usd": 2.5}
    assert all(type(v) is float for v in budget.limits.values())


def test_an_empty_budget_limits_nothing() -> None:
    assert Budget().limits == {}
    assert Budget().reserve == {}


def test_a_per_tool_dimension_is_accepted() -> None:
    budget = Budget({"tool_calls:run_command": 3})
    assert budget.limits == {"tool_calls:run_command": 3.0}


def test_an_unknown_dimension_is_named_with_the_known_ones() -> None:
    with pytest.raises(ConfigError) as info:
        Budget({"stepz": 3})
    message = str(info.value)
    assert "'stepz'" in message
    for name in DIMENSIONS:
        assert name in message
    assert "tool_calls:TOOL" in message


def test_a_per_tool_dimension_needs_a_tool_name() -> None:
    with pytest.raises(ConfigError, match="unknown dimension 'tool_calls:'"):
        Budget({"tool_calls:": 3})


def refusal(limits: Mapping[str, Any], reserve: Mapping[str, Any] | None = None) -> str:
    """The message of the ConfigError that building the budget raises."""
    with pytest.raises(ConfigError) as info:
        Budget(dict(limits), dict(reserve or {}))
    return str(info.value)


@pytest.mark.parametrize("amount", [-1, -0.5])
def test_a_negative_limit_is_refused(amount: float) -> None:
    assert refusal({"steps": amount}) == f"budget.steps: must be a number >= 0, got {amount}"


@pytest.mark.parametrize("amount", [True, False])
def test_a_bool_limit_is_refused(amount: bool) -> None:
    assert refusal({"steps": amount}) == f"budget.steps: must be a number >= 0, got {amount}"


def test_a_string_limit_is_refused() -> None:
    assert refusal({"steps": "60"}) == "budget.steps: must be a number >= 0, got '60'"


def test_a_bad_per_tool_limit_names_its_dimension() -> None:
    assert refusal({"tool_calls:run_command": -2}) == (
        "budget.tool_calls:run_command: must be a number >= 0, got -2"
    )


def test_a_zero_limit_is_accepted() -> None:
    assert Budget({"retries": 0}).limits == {"retries": 0.0}


# -- Budget: reserve --------------------------------------------------------------


def test_a_reserve_is_carved_from_its_limit() -> None:
    budget = Budget({"steps": 10}, {"steps": 3})
    assert budget.reserve == {"steps": 3.0}


def test_a_reserve_may_be_the_whole_limit() -> None:
    assert Budget({"steps": 3}, {"steps": 3}).reserve == {"steps": 3.0}


def test_a_reserve_without_a_limit_is_refused() -> None:
    assert refusal({"tool_calls": 10}, {"steps": 3}) == (
        "budget.reserve.steps: a reserve needs a limit on steps to be carved from"
    )


def test_a_reserve_larger_than_its_limit_is_refused() -> None:
    assert refusal({"steps": 4}, {"steps": 5}) == (
        "budget.reserve.steps: 5 is larger than the limit 4"
    )


def test_a_reserve_on_an_unknown_dimension_is_refused() -> None:
    with pytest.raises(ConfigError, match="unknown dimension 'stepz'"):
        Budget({"steps": 4}, {"stepz": 1})


@pytest.mark.parametrize(("amount", "shown"), [(-1, "-1"), (True, "True"), ("1", "'1'")])
def test_a_bad_reserve_amount_names_the_reserve_field(amount: Any, shown: str) -> None:
    assert refusal({"steps": 4}, {"steps": amount}) == (
        f"budget.reserve.steps: must be a number >= 0, got {shown}"
    )


# -- Budget.of ------------------------------------------------------------------------


def test_of_takes_keyword_limits() -> None:
    assert Budget.of(steps=60, wall_seconds=900) == Budget({"steps": 60, "wall_seconds": 900})


def test_of_takes_a_reserve() -> None:
    budget = Budget.of(reserve={"steps": 3}, steps=60)
    assert budget.limits == {"steps": 60.0}
    assert budget.reserve == {"steps": 3.0}


def test_of_validates_like_the_constructor() -> None:
    with pytest.raises(ConfigError, match="unknown dimension 'stepz'"):
        Budget.of(stepz=3)
    with pytest.raises(ConfigError, match="larger than the limit"):
        Budget.of(reserve={"steps": 9}, steps=3)


def test_per_tool_limits_and_reserves_take_the_mapping_form() -> None:
    # A per-tool dimension is no keyword: the constructor takes it by mapping.
    budget = Budget({"tool_calls:run_command": 2}, {"tool_calls:run_command": 1})
    assert budget.limits == {"tool_calls:run_command": 2.0}
    assert budget.reserve == {"tool_calls:run_command": 1.0}


# -- Exhaustion ---------------------------------------------------------------------


def test_exhaustion_describes_itself() -> None:
    assert Exhaustion("steps", 7, 7).describe() == "steps: 7 of 7 spent"
    assert (
        Exhaustion("steps", 6, 7, requested=2).describe() == "steps: 6 of 7 spent, 2 more requested"
    )


# -- Ledger -------------------------------------------------------------------------


def test_a_reservation_that_fits_is_held() -> None:
    ledger = Ledger(Budget.of(steps=10))
    grant = ledger.reserve({"steps": 4})
    assert isinstance(grant, int)
    assert ledger.reserved == {grant: {"steps": 4}}
    assert ledger.remaining() == {"steps": 6.0}
    assert ledger.spent == {}


def test_reservation_ids_are_distinct() -> None:
    ledger = Ledger(Budget.of(steps=10))
    grants = [ledger.reserve({"steps": 1}) for _ in range(3)]
    assert len(set(grants)) == 3


def test_a_reservation_that_does_not_fit_is_refused_and_nothing_is_held() -> None:
    ledger = Ledger(Budget.of(steps=10), spent={"steps": 8.0})
    refusal = ledger.reserve({"steps": 3})
    assert refusal == Exhaustion("steps", 8.0, 10.0, "task", 3)
    assert ledger.reserved == {}
    assert ledger.spent == {"steps": 8.0}
    assert ledger.remaining() == {"steps": 2.0}


def test_a_refusal_names_the_first_limit_that_breaks() -> None:
    ledger = Ledger(Budget.of(steps=10, tool_calls=1))
    refusal = ledger.reserve({"steps": 1, "tool_calls": 2})
    assert isinstance(refusal, Exhaustion)
    assert refusal.limit == "tool_calls"
    assert refusal.requested == 2
    assert ledger.reserved == {}


def test_held_reservations_count_against_new_ones() -> None:
    ledger = Ledger(Budget.of(steps=3))
    assert isinstance(ledger.reserve({"steps": 2}), int)
    refusal = ledger.reserve({"steps": 2})
    assert isinstance(refusal, Exhaustion)
    assert refusal.value == 2.0
    assert isinstance(ledger.reserve({"steps": 1}), int)


def test_a_reservation_may_use_exactly_what_is_left() -> None:
    ledger = Ledger(Budget.of(steps=3))
    assert isinstance(ledger.reserve({"steps": 3}), int)
    assert ledger.remaining() == {"steps": 0.0}


def test_unlimited_dimensions_always_fit() -> None:
    ledger = Ledger(Budget.of(steps=1))
    assert ledger.check({"tokens_in": 1e12}) is None
    assert isinstance(ledger.reserve({"tokens_in": 1e12}), int)
    assert ledger.remaining() == {"steps": 1.0}


def test_the_reserve_is_kept_from_the_actor() -> None:
    ledger = Ledger(Budget.of(reserve={"steps": 2}, steps=5))
    assert ledger.remaining() == {"steps": 3.0}
    assert ledger.remaining(controller=True) == {"steps": 5.0}
    assert isinstance(ledger.reserve({"steps": 3}), int)
    refusal = ledger.reserve({"steps": 1})
    assert refusal == Exhaustion("steps", 3.0, 3.0, "task", 1)


def test_only_the_controller_may_draw_on_the_reserve() -> None:
    ledger = Ledger(Budget.of(reserve={"steps": 2}, steps=5), spent={"steps": 3.0})
    assert ledger.check({"steps": 1}) is not None
    assert ledger.check({"steps": 1}, controller=True) is None
    grant = ledger.reserve({"steps": 2}, controller=True)
    assert isinstance(grant, int)
    refusal = ledger.reserve({"steps": 1}, controller=True)
    assert refusal == Exhaustion("steps", 5.0, 5.0, "task", 1)


def test_inherited_spend_counts() -> None:
    ledger = Ledger(Budget.of(steps=10, wall_seconds=60), spent={"steps": 9.0})
    assert ledger.remaining() == {"steps": 1.0, "wall_seconds": 60.0}
    assert isinstance(ledger.reserve({"steps": 2}), Exhaustion)
    assert isinstance(ledger.reserve({"steps": 1}), int)


def test_inherited_spend_beyond_the_limit_leaves_nothing() -> None:
    ledger = Ledger(Budget.of(steps=10), spent={"steps": 12.0})
    assert ledger.remaining() == {"steps": 0.0}
    assert ledger.exhausted() == Exhaustion("steps", 12.0, 10.0)


def test_settle_replaces_the_reservation_by_the_actual_spend() -> None:
    ledger = Ledger(Budget.of(tokens_in=1000))
    grant = ledger.reserve({"tokens_in": 500})
    assert isinstance(grant, int)
    ledger.settle(grant, {"tokens_in": 120})
    assert ledger.reserved == {}
    assert ledger.spent == {"tokens_in": 120.0}
    assert ledger.remaining() == {"tokens_in": 880.0}


def test_settle_may_spend_more_than_was_reserved() -> None:
    ledger = Ledger(Budget.of(tokens_in=1000))
    grant = ledger.reserve({"tokens_in": 100})
    assert isinstance(grant, int)
    ledger.settle(grant, {"tokens_in": 400, "cost_usd": 0.25})
    assert ledger.spent == {"tokens_in": 400.0, "cost_usd": 0.25}
    assert ledger.remaining() == {"tokens_in": 600.0}


def test_settle_without_a_reservation_adds_spend() -> None:
    ledger = Ledger(Budget.of(wall_seconds=60), spent={"wall_seconds": 10.0})
    ledger.settle(None, {"wall_seconds": 5.0})
    assert ledger.spent == {"wall_seconds": 15.0}


def test_settle_adds_to_inherited_spend() -> None:
    ledger = Ledger(Budget.of(steps=10), spent={"steps": 4.0})
    grant = ledger.reserve({"steps": 1})
    assert isinstance(grant, int)
    ledger.settle(grant, {"steps": 1})
    assert ledger.spent == {"steps": 5.0}


def test_release_drops_a_reservation() -> None:
    ledger = Ledger(Budget.of(steps=2))
    grant = ledger.reserve({"steps": 2})
    assert isinstance(grant, int)
    assert isinstance(ledger.reserve({"steps": 1}), Exhaustion)
    ledger.release(grant)
    assert ledger.reserved == {}
    assert ledger.spent == {}
    assert ledger.remaining() == {"steps": 2.0}
    assert isinstance(ledger.reserve({"steps": 1}), int)


def test_release_of_an_unknown_reservation_is_harmless() -> None:
    ledger = Ledger(Budget.of(steps=2))
    ledger.release(42)
    assert ledger.remaining() == {"steps": 2.0}


def test_per_tool_dimension_is_kept_apart_from_the_total() -> None:
    ledger = Ledger(Budget({"tool_calls": 10, "tool_calls:run_command": 1}))
    first = ledger.reserve({"tool_calls": 1, "tool_calls:run_command": 1})
    assert isinstance(first, int)
    ledger.settle(first, {"tool_calls": 1, "tool_calls:run_command": 1})
    refusal = ledger.reserve({"tool_calls": 1, "tool_calls:run_command": 1})
    assert isinstance(refusal, Exhaustion)
    assert refusal.limit == "tool_calls:run_command"
    # Another tool is limited only by the total.
    other = ledger.reserve({"tool_calls": 1, "tool_calls:read_file": 1})
    assert isinstance(other, int)
    assert ledger.remaining() == {"tool_calls": 8.0, "tool_calls:run_command": 0.0}


def test_exhausted_names_the_first_limit_with_nothing_left() -> None:
    ledger = Ledger(Budget.of(reserve={"steps": 1}, steps=3, tool_calls=5))
    assert ledger.exhausted() is None
    ledger.settle(None, {"steps": 2})
    assert ledger.exhausted() == Exhaustion("steps", 2.0, 2.0)
    assert ledger.exhausted(controller=True) is None
    ledger.settle(None, {"steps": 1})
    assert ledger.exhausted(controller=True) == Exhaustion("steps", 3.0, 3.0)


def test_a_zero_limit_is_exhausted_from_the_start() -> None:
    ledger = Ledger(Budget.of(retries=0))
    assert ledger.exhausted() == Exhaustion("retries", 0.0, 0.0)
    assert isinstance(ledger.reserve({"retries": 1}), Exhaustion)


def test_snapshot_is_plain_data() -> None:
    ledger = Ledger(Budget.of(reserve={"steps": 1}, steps=5), spent={"steps": 2.0})
    snapshot = ledger.snapshot()
    assert snapshot == {"spent": {"steps": 2.0}, "remaining": {"steps": 2.0}}
    snapshot["spent"]["steps"] = 99.0
    assert ledger.spent == {"steps": 2.0}


# -- Ledger: state machine -------------------------------------------------------------

_DIMS = ("steps", "tool_calls", "tool_calls:run_command", "wall_seconds")
# Whole and half units add up exactly in floating point.
_amount = st.integers(min_value=0, max_value=8).map(lambda n: n / 2)
_amounts = st.dictionaries(st.sampled_from((*_DIMS, "tokens_in")), _amount, max_size=3)


class LedgerMachine(RuleBasedStateMachine):
    """
    Reserve, settle and release in any order.

    Only grants are settled, each with what it reserved: the actor's view can then
    never go beyond its bound (the limit less the reserve).
    """

    grants = Bundle("grants")

    def __init__(self) -> None:
        super().__init__()
        self.ledger = Ledger(Budget())
        self.held: dict[int, dict[str, float]] = {}
        self.last_spent: dict[str, float] = {}

    @initialize(
        data=st.data(),
        limited=st.sets(st.sampled_from(_DIMS), min_size=1),
    )
    def start(self, data: st.DataObject, limited: set[str]) -> None:
        limits: dict[str, float] = {}
        reserve: dict[str, float] = {}
        spent: dict[str, float] = {}
        for dim in sorted(limited):
            limit = data.draw(st.integers(min_value=0, max_value=12), label=f"limit {dim}")
            share = data.draw(st.integers(min_value=0, max_value=limit), label=f"reserve {dim}")
            inherited = data.draw(
                st.integers(min_value=0, max_value=limit - share), label=f"spent {dim}"
            )
            limits[dim] = limit
            if share:
                reserve[dim] = share
            if inherited:
                spent[dim] = float(inherited)
        self.ledger = Ledger(Budget(limits, reserve), spent=dict(spent))
        self.last_spent = dict(spent)

    @rule(target=grants, amounts=_amounts)
    def reserve(self, amounts: dict[str, float]) -> int:
        before = {k: dict(v) for k, v in self.ledger.reserved.items()}
        fits = self.ledger.check(amounts) is None
        outcome = self.ledger.reserve(amounts)
        if isinstance(outcome, Exhaustion):
            assert not fits
            assert outcome.requested == amounts[outcome.limit]
            # Nothing is held for a refusal.
            assert self.ledger.reserved == before
            return -1
        assert fits
        assert outcome not in self.held
        self.held[outcome] = dict(amounts)
        return outcome

    @rule(grant=consumes(grants))
    def settle(self, grant: int) -> None:
        if grant == -1:
            return
        self.ledger.settle(grant, self.held.pop(grant))

    @rule(grant=consumes(grants))
    def release(self, grant: int) -> None:
        if grant == -1:
            return
        self.held.pop(grant)
        self.ledger.release(grant)

    @invariant()
    def reservations_are_what_was_granted(self) -> None:
        assert self.ledger.reserved == self.held

    @invariant()
    def spent_and_held_stay_within_the_actors_bound(self) -> None:
        budget = self.ledger.budget
        for dim, limit in budget.limits.items():
            bound = limit - budget.reserve.get(dim, 0.0)
            spent = self.ledger.spent.get(dim, 0.0)
            held = sum(r.get(dim, 0.0) for r in self.ledger.reserved.values())
            assert spent + held <= bound + EPSILON, (dim, spent, held, bound)

    @invariant()
    def remaining_is_never_negative(self) -> None:
        for view in (False, True):
            remaining = self.ledger.remaining(controller=view)
            assert set(remaining) == set(self.ledger.budget.limits)
            assert all(left >= 0 for left in remaining.values())

    @invariant()
    def the_controller_always_has_its_reserve(self) -> None:
        budget = self.ledger.budget
        actor = self.ledger.remaining()
        controller = self.ledger.remaining(controller=True)
        for dim in budget.limits:
            assert controller[dim] == pytest.approx(actor[dim] + budget.reserve.get(dim, 0.0))

    @invariant()
    def spent_never_decreases(self) -> None:
        for dim, amount in self.last_spent.items():
            assert self.ledger.spent.get(dim, 0.0) >= amount
        self.last_spent = dict(self.ledger.spent)


LedgerMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
TestLedgerMachine = LedgerMachine.TestCase
