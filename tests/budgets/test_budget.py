from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
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
from proctor._errors import BudgetError, ConfigError
from proctor._wire import converter
from proctor.budgets import _budget
from proctor.budgets._budget import (
    DIMENSIONS,
    Budget,
    Exhaustion,
    Lease,
    LeaseSettlement,
    Ledger,
    LedgerStatistics,
    Retune,
)

# Sums are compared with the same slack the ledger allows itself.
EPSILON = 1e-9


@pytest.mark.parametrize("module", [_budget, budgets])
def test_all_names_exist_and_are_documented(module: Any) -> None:
    assert isinstance(module.__all__, tuple)
    for name in module.__all__:
        assert hasattr(module, name), name
    for name in ("Budget", "Exhaustion", "Ledger"):
        assert getattr(module, name).__doc__, name


def test_the_new_names_are_documented() -> None:
    for name in ("Lease", "LeaseSettlement", "LedgerStatistics", "Retune"):
        assert name in _budget.__all__
        assert getattr(_budget, name).__doc__, name


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


def test_exhaustion_in_a_lease_says_so() -> None:
    assert Exhaustion("steps", 3, 3, "lease:2", 1).describe() == (
        "steps: 3 of 3 spent in lease:2, 1 more requested"
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


# -- Ledger: late usage ------------------------------------------------------------------


def test_settle_says_whether_it_replaced_a_held_reservation() -> None:
    ledger = Ledger(Budget.of(steps=10))
    grant = ledger.reserve({"steps": 1})
    assert isinstance(grant, int)
    assert ledger.settle(grant, {"steps": 1}) is True
    assert ledger.settle(None, {"steps": 1}) is False


def test_settling_twice_records_the_spend_but_releases_nothing_more() -> None:
    ledger = Ledger(Budget.of(steps=10))
    first = ledger.reserve({"steps": 2})
    second = ledger.reserve({"steps": 3})
    assert isinstance(first, int)
    assert isinstance(second, int)
    ledger.settle(first, {"steps": 2})
    # Late usage for the first call, reported under its (settled) id.
    assert ledger.settle(first, {"steps": 1}) is False
    assert ledger.reserved == {second: {"steps": 3.0}}
    assert ledger.spent == {"steps": 3.0}
    assert ledger.remaining() == {"steps": 4.0}


def test_settling_a_released_or_unknown_reservation_still_records_the_spend() -> None:
    ledger = Ledger(Budget.of(steps=10))
    grant = ledger.reserve({"steps": 2})
    assert isinstance(grant, int)
    ledger.release(grant)
    assert ledger.settle(grant, {"steps": 1}) is False
    assert ledger.settle(99, {"steps": 1}) is False
    assert ledger.spent == {"steps": 2.0}
    assert ledger.reserved == {}


def test_late_usage_is_reconciled_and_the_next_reservation_sees_it() -> None:
    ledger = Ledger(Budget.of(tokens_in=1000))
    grant = ledger.reserve({"tokens_in": 500})
    assert isinstance(grant, int)
    ledger.settle(grant, {"tokens_in": 400})
    ledger.reconcile({"tokens_in": 300})
    assert ledger.spent == {"tokens_in": 700.0}
    refusal = ledger.reserve({"tokens_in": 400})
    assert refusal == Exhaustion("tokens_in", 700.0, 1000.0, "task", 400)
    assert isinstance(ledger.reserve({"tokens_in": 300}), int)


def test_exhausted_counts_what_is_held() -> None:
    ledger = Ledger(Budget.of(steps=3))
    assert isinstance(ledger.reserve({"steps": 1}), int)
    ledger.settle(None, {"steps": 2})
    assert ledger.exhausted() == Exhaustion("steps", 3.0, 3.0)
    assert ledger.check({"steps": 0.5}) == Exhaustion("steps", 3.0, 3.0, "task", 0.5)


# -- Ledger: statistics -----------------------------------------------------------------


def test_statistics_are_a_frozen_record_of_the_books() -> None:
    ledger = Ledger(Budget.of(reserve={"steps": 1}, steps=5), spent={"steps": 1.0})
    grant = ledger.reserve({"steps": 2, "tokens_in": 10})
    assert isinstance(grant, int)
    stats = ledger.statistics()
    assert stats == LedgerStatistics(
        scope="task",
        spent={"steps": 1.0},
        held={"steps": 2.0, "tokens_in": 10.0},
        remaining={"steps": 1.0},
        remaining_controller={"steps": 2.0},
        leases=(),
    )
    with pytest.raises(AttributeError):
        stats.scope = "x"  # type: ignore[misc]


# -- Ledger: leases ------------------------------------------------------------------------


def lease_of(ledger: Ledger, amounts: Mapping[str, float], controller: bool = False) -> Lease:
    lease = ledger.lease(amounts, controller)
    assert isinstance(lease, Lease), lease
    return lease


def test_a_lease_carves_a_slice_held_in_the_parent() -> None:
    ledger = Ledger(Budget.of(steps=10, tool_calls=20))
    lease = lease_of(ledger, {"steps": 4})
    assert lease.scope == "lease:1"
    assert ledger.remaining() == {"steps": 6.0, "tool_calls": 20.0}
    assert ledger.statistics().leases == (lease.id,)
    assert lease.ledger.budget.limits == {"steps": 4.0}
    assert lease.ledger.remaining() == {"steps": 4.0}
    assert lease.ledger.spent == {}


def test_a_lease_that_does_not_fit_is_refused_and_nothing_is_held() -> None:
    ledger = Ledger(Budget.of(steps=10), spent={"steps": 8.0})
    refusal = ledger.lease({"steps": 3})
    assert refusal == Exhaustion("steps", 8.0, 10.0, "task", 3)
    assert ledger.reserved == {}
    assert ledger.statistics().leases == ()


def test_an_actor_lease_leaves_the_reserve_and_a_controller_lease_may_use_it() -> None:
    ledger = Ledger(Budget.of(reserve={"steps": 2}, steps=5), spent={"steps": 3.0})
    assert isinstance(ledger.lease({"steps": 1}), Exhaustion)
    verifier = lease_of(ledger, {"steps": 2}, controller=True)
    assert verifier.controller
    assert ledger.remaining(controller=True) == {"steps": 0.0}


def test_a_lease_refuses_what_exceeds_its_slice_with_its_scope() -> None:
    ledger = Ledger(Budget.of(steps=10))
    lease = lease_of(ledger, {"steps": 2})
    assert isinstance(lease.ledger.reserve({"steps": 2}), int)
    refusal = lease.ledger.reserve({"steps": 1})
    assert refusal == Exhaustion("steps", 2.0, 2.0, "lease:1", 1)
    assert "in lease:1" in refusal.describe()


def test_closing_a_lease_charges_what_it_spent_and_returns_the_rest() -> None:
    ledger = Ledger(Budget.of(steps=10, tool_calls=10))
    lease = lease_of(ledger, {"steps": 4, "tool_calls": 3})
    grant = lease.ledger.reserve({"steps": 1, "tool_calls": 1})
    assert isinstance(grant, int)
    lease.ledger.settle(grant, {"steps": 1, "tool_calls": 1})
    settlement = ledger.close_lease(lease)
    assert settlement == LeaseSettlement(
        lease.id, {"steps": 1.0, "tool_calls": 1.0}, {"steps": 3.0, "tool_calls": 2.0}
    )
    assert lease.closed
    assert ledger.spent == {"steps": 1.0, "tool_calls": 1.0}
    assert ledger.reserved == {}
    assert ledger.remaining() == {"steps": 9.0, "tool_calls": 9.0}
    assert ledger.statistics().leases == ()


def test_closing_a_lease_releases_what_it_still_held() -> None:
    ledger = Ledger(Budget.of(steps=10))
    lease = lease_of(ledger, {"steps": 4})
    assert isinstance(lease.ledger.reserve({"steps": 3}), int)
    assert ledger.close_lease(lease).returned == {"steps": 4.0}
    assert ledger.remaining() == {"steps": 10.0}


def test_a_lease_that_overspent_charges_all_it_spent() -> None:
    ledger = Ledger(Budget.of(tokens_in=1000))
    lease = lease_of(ledger, {"tokens_in": 100})
    grant = lease.ledger.reserve({"tokens_in": 100})
    assert isinstance(grant, int)
    lease.ledger.settle(grant, {"tokens_in": 150})
    settlement = ledger.close_lease(lease)
    assert settlement.spent == {"tokens_in": 150.0}
    assert settlement.returned == {"tokens_in": 0.0}
    assert ledger.spent == {"tokens_in": 150.0}


def test_dimensions_a_lease_does_not_limit_pass_through_to_the_parent() -> None:
    ledger = Ledger(Budget.of(steps=10, cost_usd=1.0))
    lease = lease_of(ledger, {"steps": 5})
    # The lease does not limit cost: the parent's limit does.
    refusal = lease.ledger.reserve({"steps": 1, "cost_usd": 2.0})
    assert refusal == Exhaustion("cost_usd", 0.0, 1.0, "task", 2.0)
    grant = lease.ledger.reserve({"steps": 1, "cost_usd": 0.5})
    assert isinstance(grant, int)
    assert ledger.remaining() == {"steps": 5.0, "cost_usd": 0.5}
    lease.ledger.settle(grant, {"steps": 1, "cost_usd": 0.25})
    # Cost is charged to the parent at once, steps when the lease closes.
    assert ledger.spent == {"cost_usd": 0.25}
    assert ledger.remaining() == {"steps": 5.0, "cost_usd": 0.75}
    ledger.close_lease(lease)
    assert ledger.spent == {"cost_usd": 0.25, "steps": 1.0}
    assert ledger.reserved == {}


def test_a_released_pass_through_reservation_is_released_in_the_parent() -> None:
    ledger = Ledger(Budget.of(steps=10, cost_usd=1.0))
    lease = lease_of(ledger, {"steps": 5})
    grant = lease.ledger.reserve({"steps": 1, "cost_usd": 1.0})
    assert isinstance(grant, int)
    assert ledger.remaining()["cost_usd"] == 0.0
    lease.ledger.release(grant)
    assert ledger.remaining()["cost_usd"] == 1.0


def test_leases_nest() -> None:
    ledger = Ledger(Budget.of(steps=10))
    outer = lease_of(ledger, {"steps": 6})
    inner = lease_of(outer.ledger, {"steps": 4})
    assert inner.scope == "lease:2"
    assert inner.lender is outer.ledger
    assert outer.ledger.remaining() == {"steps": 2.0}
    assert ledger.remaining() == {"steps": 4.0}
    assert isinstance(inner.ledger.lease({"steps": 5}), Exhaustion)
    grant = inner.ledger.reserve({"steps": 3})
    assert isinstance(grant, int)
    inner.ledger.settle(grant, {"steps": 3})
    assert outer.ledger.close_lease(inner).returned == {"steps": 1.0}
    assert outer.ledger.spent == {"steps": 3.0}
    assert ledger.spent == {}
    assert ledger.close_lease(outer).spent == {"steps": 3.0}
    assert ledger.spent == {"steps": 3.0}
    assert ledger.remaining() == {"steps": 7.0}


def test_closing_a_lease_closes_the_leases_it_granted() -> None:
    ledger = Ledger(Budget.of(steps=10))
    outer = lease_of(ledger, {"steps": 6})
    inner = lease_of(outer.ledger, {"steps": 4})
    inner.ledger.settle(None, {"steps": 2})
    settlement = ledger.close_lease(outer)
    assert inner.closed
    assert settlement.spent == {"steps": 2.0}
    assert ledger.spent == {"steps": 2.0}
    assert ledger.reserved == {}


def test_a_lease_is_closed_once_and_by_its_lender() -> None:
    ledger = Ledger(Budget.of(steps=10))
    outer = lease_of(ledger, {"steps": 6})
    inner = lease_of(outer.ledger, {"steps": 2})
    with pytest.raises(BudgetError, match="granted by lease:1, not task"):
        ledger.close_lease(inner)
    outer.ledger.close_lease(inner)
    with pytest.raises(BudgetError, match="closed already"):
        outer.ledger.close_lease(inner)


def test_a_closed_lease_takes_no_reservation_and_forwards_late_usage() -> None:
    ledger = Ledger(Budget.of(steps=10))
    lease = lease_of(ledger, {"steps": 3})
    ledger.close_lease(lease)
    with pytest.raises(BudgetError, match="lease:1 is closed"):
        lease.ledger.reserve({"steps": 1})
    lease.ledger.settle(None, {"steps": 2})
    assert ledger.spent == {"steps": 2.0}


def test_a_lease_of_an_unknown_dimension_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"lease\.stepz: unknown dimension"):
        Ledger(Budget.of(steps=3)).lease({"stepz": 1})


def test_leases_are_found_by_id() -> None:
    ledger = Ledger(Budget.of(steps=10))
    outer = lease_of(ledger, {"steps": 6})
    inner = lease_of(outer.ledger, {"steps": 2})
    assert ledger.get_lease(inner.id) is inner
    assert ledger.for_lease(None) is ledger
    assert ledger.for_lease(inner.id) is inner.ledger
    outer.ledger.close_lease(inner)
    with pytest.raises(BudgetError, match="no open lease 2"):
        ledger.for_lease(inner.id)
    # Late usage of a closed lease goes where its spend went.
    assert ledger.for_lease(inner.id, closed=True) is outer.ledger
    ledger.close_lease(outer)
    assert ledger.for_lease(inner.id, closed=True) is ledger
    with pytest.raises(BudgetError, match="no lease 9"):
        ledger.for_lease(9, closed=True)


# -- Ledger: retuning --------------------------------------------------------------------------


def test_retune_changes_a_limit_and_says_who_and_why() -> None:
    ledger = Ledger(Budget.of(steps=10), spent={"steps": 4.0})
    retune = ledger.retune("steps", 20, who="ops", why="the suite is slow", at=123.0)
    assert retune == Retune("steps", 10.0, 20.0, "ops", "the suite is slow", 123.0)
    assert retune.note() == "steps: 10 -> 20 by ops: the suite is slow"
    assert ledger.budget.limits == {"steps": 20.0}
    assert ledger.remaining() == {"steps": 16.0}
    assert ledger.retunes == [retune]


def test_retune_may_add_a_limit() -> None:
    ledger = Ledger(Budget.of(steps=10))
    retune = ledger.retune("cost_usd", 2.5, who="ops", why="cap spend")
    assert retune.old is None
    assert "unlimited -> 2.5" in retune.note()
    assert ledger.budget.limits == {"steps": 10.0, "cost_usd": 2.5}


def test_retune_below_what_is_spent_must_be_explicit() -> None:
    ledger = Ledger(Budget.of(steps=10), spent={"steps": 6.0})
    with pytest.raises(ConfigError, match=r"below what is spent and held \(6\)"):
        ledger.retune("steps", 5, who="ops", why="stop it")
    assert ledger.budget.limits == {"steps": 10.0}
    retune = ledger.retune("steps", 5, who="ops", why="stop it", below_spent=True)
    assert retune.below_spent
    assert "exhausted" in retune.note()
    assert ledger.exhausted() == Exhaustion("steps", 6.0, 5.0)


def test_retune_counts_what_is_held_as_spent() -> None:
    ledger = Ledger(Budget.of(steps=10))
    assert isinstance(ledger.reserve({"steps": 4}), int)
    with pytest.raises(ConfigError, match="below what is spent"):
        ledger.retune("steps", 3, who="ops", why="x")


def test_retune_keeps_the_reserve() -> None:
    ledger = Ledger(Budget.of(reserve={"steps": 3}, steps=10))
    with pytest.raises(ConfigError, match="does not hold the reserve 3"):
        ledger.retune("steps", 2, who="ops", why="x", below_spent=True)
    assert ledger.retune("steps", 3, who="ops", why="x").new == 3.0
    assert ledger.budget.reserve == {"steps": 3.0}


@pytest.mark.parametrize(
    ("dimension", "limit", "message"),
    [
        ("stepz", 3, "unknown dimension 'stepz'"),
        ("steps", -1, "must be a number >= 0"),
        ("steps", True, "must be a number >= 0"),
    ],
)
def test_retune_validates_the_limit(dimension: str, limit: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Ledger(Budget.of(steps=10)).retune(dimension, limit, who="ops", why="x")


@pytest.mark.parametrize(("who", "why"), [("", "x"), ("ops", " ")])
def test_retune_needs_who_and_why(who: str, why: str) -> None:
    with pytest.raises(ConfigError, match="a retune needs a non-empty"):
        Ledger(Budget.of(steps=10)).retune("steps", 20, who=who, why=why)


def test_a_lease_is_not_retuned() -> None:
    lease = lease_of(Ledger(Budget.of(steps=10)), {"steps": 3})
    with pytest.raises(ConfigError, match="lease:1 is a lease"):
        lease.ledger.retune("steps", 5, who="ops", why="x")


# -- wire ------------------------------------------------------------------------------------

_number = st.floats(min_value=0, max_value=1e9, allow_nan=False)
_book = st.dictionaries(st.sampled_from(DIMENSIONS), _number, max_size=4)


@given(
    st.builds(
        Retune,
        st.sampled_from(DIMENSIONS),
        st.none() | _number,
        _number,
        st.text(max_size=10),
        st.text(max_size=10),
        _number,
        st.just("task"),
        st.booleans(),
    )
)
def test_retune_round_trips(retune: Retune) -> None:
    assert converter.structure(converter.unstructure(retune), Retune) == retune


@given(
    st.builds(Exhaustion, st.sampled_from(DIMENSIONS), _number, _number, st.text(), _number),
    st.builds(LeaseSettlement, st.integers(1, 100), _book, _book),
    st.builds(
        LedgerStatistics,
        st.text(max_size=10),
        _book,
        _book,
        _book,
        _book,
        st.lists(st.integers(1, 9)).map(tuple),
    ),
)
def test_books_round_trip(
    exhaustion: Exhaustion, settlement: LeaseSettlement, stats: LedgerStatistics
) -> None:
    assert converter.structure(converter.unstructure(exhaustion), Exhaustion) == exhaustion
    assert converter.structure(converter.unstructure(settlement), LeaseSettlement) == settlement
    assert converter.structure(converter.unstructure(stats), LedgerStatistics) == stats


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


class LeaseMachine(LedgerMachine):
    """
    The ledger machine, with leases opened, spent in and closed in any order.

    Spend inside a lease is settled with what it reserved; closing a lease charges
    the task what it spent. The task's books (spent plus held) stay within the
    actor's bound whatever the leases do.
    """

    leases = Bundle("leases")

    def __init__(self) -> None:
        super().__init__()
        self.open: dict[int, Lease] = {}
        # What each open lease spent of the dimensions it limits, by the model.
        self.lease_spent: dict[int, dict[str, float]] = {}

    def _ledger_reservations(self, lease: Lease) -> dict[int, dict[str, float]]:
        return {k: dict(v) for k, v in lease.ledger.reserved.items()}

    @rule(target=leases, amounts=_amounts, nested=st.booleans(), data=st.data())
    def lease(self, amounts: dict[str, float], nested: bool, data: st.DataObject) -> int:
        lender = self.ledger
        if nested and self.open:
            lender = self.open[data.draw(st.sampled_from(sorted(self.open)))].ledger
        fits = lender.check(amounts) is None
        outcome = lender.lease(amounts)
        if isinstance(outcome, Exhaustion):
            assert not fits
            return -1
        assert fits
        assert outcome.ledger.budget.limits == amounts
        self.open[outcome.id] = outcome
        self.lease_spent[outcome.id] = {}
        if lender is self.ledger:
            # The slice is held in the task like a reservation.
            self.held[outcome.hold] = dict(amounts)
        return outcome.id

    @rule(lease_id=leases, amounts=_amounts)
    def spend_in_lease(self, lease_id: int, amounts: dict[str, float]) -> None:
        lease = self.open.get(lease_id)
        if lease is None:
            return
        before = self.ledger.statistics()
        grant = lease.ledger.reserve(amounts)
        if isinstance(grant, Exhaustion):
            assert grant.scope in ("task",) or grant.scope.startswith("lease:")
            assert self.ledger.statistics() == before
            return
        lease.ledger.settle(grant, amounts)
        for dim, amount in amounts.items():
            if dim in lease.amounts:
                spent = self.lease_spent[lease_id]
                spent[dim] = spent.get(dim, 0.0) + amount

    @rule(lease_id=consumes(leases))
    def close(self, lease_id: int) -> None:
        lease = self.open.get(lease_id)
        if lease is None:
            return
        before = dict(self.ledger.spent)
        inner = [i for i, x in self.open.items() if x.lender is lease.ledger]
        settlement = lease.lender.close_lease(lease)
        assert lease.closed
        for i, x in list(self.open.items()):
            if x.closed:
                del self.open[i]
        assert lease_id not in self.open
        for i in inner:
            assert i not in self.open
        if lease.lender is self.ledger:
            self.held.pop(lease.hold)
            # Without nested leases, the task is charged exactly what the lease spent.
            if not inner:
                for dim, amount in settlement.spent.items():
                    assert self.ledger.spent.get(dim, 0.0) == pytest.approx(
                        before.get(dim, 0.0) + amount
                    )
        for dim, amount in settlement.returned.items():
            assert amount == max(0.0, lease.amounts[dim] - settlement.spent[dim])

    @invariant()
    def reservations_are_what_was_granted(self) -> None:
        # Pass-through holds of leases are in the task's books too: compare only
        # the reservations the machine made directly.
        for grant, amounts in self.held.items():
            assert self.ledger.reserved[grant] == amounts

    @invariant()
    def leases_stay_within_their_slice(self) -> None:
        for lease in self.open.values():
            for dim, limit in lease.ledger.budget.limits.items():
                used = lease.ledger.spent.get(dim, 0.0) + sum(
                    r.get(dim, 0.0) for r in lease.ledger.reserved.values()
                )
                assert used <= limit + EPSILON, (lease.id, dim, used, limit)

    @invariant()
    def open_leases_are_known(self) -> None:
        for lease_id, lease in self.open.items():
            assert not lease.closed
            assert self.ledger.get_lease(lease_id) is lease


LeaseMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestLeaseMachine = LeaseMachine.TestCase
