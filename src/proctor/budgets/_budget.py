"""
Budget limits and the spend ledger.

Spend belongs to the task, not the run: a resumed task starts with what it
already spent. The ledger grants a reservation only when it fits *before* any
spend, and keeps a reserve that only the controller may draw on.

A ledger may lend a slice of itself to a sub-agent or the verifier (a
:class:`Lease`): the slice is held in the lender, the borrower gets a ledger of
its own whose limits are the slice, and closing the lease charges the lender
what was spent and takes back the rest. Leases nest.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import attrs

from proctor._errors import BudgetError, ConfigError
from proctor._logging import get_logger

__all__ = (
    "DIMENSIONS",
    "Budget",
    "Exhaustion",
    "Lease",
    "LeaseSettlement",
    "Ledger",
    "LedgerStatistics",
    "Retune",
)

log = get_logger()

# Sums of floats are compared with this much slack.
_EPSILON = 1e-9

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
    "fetches",
    "searches",
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
        value: what is spent (and held by open reservations) of it.
        bound: its limit (for the actor, the limit less the reserve).
        scope: ``task``: the task's limits, across all its runs; ``lease:ID``:
            the limits of a lease (a slice lent to a sub-agent or the verifier).
        requested: what the refused request asked for.
    """

    limit: str
    value: float
    bound: float
    scope: str = "task"
    requested: float = 0.0

    def describe(self) -> str:
        """Say it for a person: ``steps: 3 of 3 spent in lease:2, 1 more requested``."""
        where = "" if self.scope == "task" else f" in {self.scope}"
        return f"{self.limit}: {self.value:g} of {self.bound:g} spent{where}" + (
            f", {self.requested:g} more requested" if self.requested else ""
        )


@attrs.frozen
class Retune:
    """
    A limit changed while the task runs, and who changed it and why.

    Args:
        dimension: the limit's dimension.
        old: the limit before (None: it was unlimited).
        new: the limit after.
        who: who changed it (an operator, a policy).
        why: why, for the journal.
        at: when (seconds since the epoch).
        scope: the ledger's scope (``task``).
        below_spent: the new limit is below what was already spent and held:
            the dimension is exhausted on purpose.
    """

    dimension: str
    old: float | None
    new: float
    who: str
    why: str
    at: float
    scope: str = "task"
    below_spent: bool = False

    def note(self) -> str:
        """Say it for the journal: ``steps: 60 -> 80 by ops: the suite is slow``."""
        old = "unlimited" if self.old is None else f"{self.old:g}"
        end = " (below what is spent: exhausted)" if self.below_spent else ""
        return f"{self.dimension}: {old} -> {self.new:g} by {self.who}: {self.why}{end}"


@attrs.frozen
class LeaseSettlement:
    """
    What closing a lease charged the lender, and what it took back.

    Args:
        lease: the lease's id.
        spent: what the borrower spent of each leased dimension.
        returned: what was left of the slice and went back to the lender.
    """

    lease: int
    spent: dict[str, float]
    returned: dict[str, float]


@attrs.frozen
class LedgerStatistics:
    """
    A ledger's books at one moment.

    Args:
        scope: ``task`` or ``lease:ID``.
        spent: spend per dimension.
        held: what open reservations (and open leases) hold, per dimension.
        remaining: what is left of each limit for the actor (less the reserve).
        remaining_controller: what is left of each limit for the controller.
        leases: the ids of the open leases this ledger granted.
    """

    scope: str
    spent: dict[str, float]
    held: dict[str, float]
    remaining: dict[str, float]
    remaining_controller: dict[str, float]
    leases: tuple[int, ...] = ()


@attrs.define(eq=False)
class _Leases:
    """The leases of one tree of ledgers, by id (ids are unique in the tree)."""

    last: int = 0
    open: dict[int, Lease] = attrs.field(factory=dict)
    granted: dict[int, Lease] = attrs.field(factory=dict)


@attrs.define(eq=False)
class Ledger:
    """
    The accountant's books: spent, reserved, and what is left.

    Args:
        budget: the limits.
        spent: what the task had spent before this run (inherited).
        reserved: the open reservations, by id.
        scope: ``task``, or ``lease:ID`` for the ledger of a lease.
    """

    budget: Budget
    spent: dict[str, float] = attrs.field(factory=dict)
    reserved: dict[int, dict[str, float]] = attrs.field(factory=dict)
    scope: str = "task"
    _next: int = 0
    #: The limits changed while the task ran, in order.
    retunes: list[Retune] = attrs.field(factory=list, init=False)
    # The lender of a lease's ledger, and whether the lease may use its reserve.
    _parent: Ledger | None = attrs.field(default=None, init=False, repr=False)
    _lease_controller: bool = attrs.field(default=False, init=False, repr=False)
    # A lease's reservation id -> the lender's reservation holding the dimensions
    # the lease does not limit (those pass through to the lender).
    _upstream: dict[int, int] = attrs.field(factory=dict, init=False, repr=False)
    _leases: _Leases = attrs.field(factory=_Leases, init=False, repr=False)
    # A lease's ledger whose lease was closed: its spend now lives in the lender.
    _closed: bool = attrs.field(default=False, init=False, repr=False)

    def _held(self, dimension: str) -> float:
        return sum(r.get(dimension, 0.0) for r in self.reserved.values())

    def _bound(self, dimension: str, controller: bool) -> float:
        limit = self.budget.limits[dimension]
        return limit if controller else limit - self.budget.reserve.get(dimension, 0.0)

    def _uncarved(self, amounts: Mapping[str, float]) -> dict[str, float]:
        """The amounts of dimensions this lease does not limit: the lender's business."""
        return {d: a for d, a in amounts.items() if d not in self.budget.limits}

    def check(self, amounts: Mapping[str, float], controller: bool = False) -> Exhaustion | None:
        """
        Return the first limit the amounts would break, or None when they fit.

        In a lease, a dimension the lease does not limit is checked against the
        lender's limits.
        """
        for dimension, amount in amounts.items():
            limit = self.budget.limits.get(dimension)
            if limit is None:
                continue
            bound = limit if controller else limit - self.budget.reserve.get(dimension, 0.0)
            used = self.spent.get(dimension, 0.0) + self._held(dimension)
            if used + amount > bound + _EPSILON:
                return Exhaustion(dimension, used, bound, self.scope, amount)
        if self._parent is not None:
            rest = self._uncarved(amounts)
            if rest:
                return self._parent.check(rest, self._lease_controller)
        return None

    def reserve(self, amounts: Mapping[str, float], controller: bool = False) -> int | Exhaustion:
        """
        Hold the amounts if they fit; return the reservation's id, or what broke.

        Raises:
            BudgetError: this is the ledger of a closed lease.
        """
        if self._closed:
            raise BudgetError(f"{self.scope} is closed: nothing more may be reserved in it")
        refusal = self.check(amounts, controller)
        if refusal is not None:
            return refusal
        upstream: int | None = None
        if self._parent is not None:
            rest = self._uncarved(amounts)
            if rest:
                held = self._parent.reserve(rest, self._lease_controller)
                if isinstance(held, Exhaustion):  # pragma: no cover - checked above
                    return held
                upstream = held
        self._next += 1
        self.reserved[self._next] = dict(amounts)
        if upstream is not None:
            self._upstream[self._next] = upstream
        return self._next

    def settle(self, reservation: int | None, actual: Mapping[str, float]) -> bool:
        """
        Replace a reservation by the actual spend (which may differ from the estimate).

        The spend is always recorded. The reservation is dropped if it is still
        held; if it is not (``None``, an unknown id, or one already settled or
        released), nothing held is touched: a reservation is never released
        twice, and late usage still counts (see :meth:`reconcile`). Spend
        settled in a closed lease goes to its lender, where the lease's spend went.

        Returns:
            True when a held reservation was replaced.
        """
        if self._closed and self._parent is not None:
            self._parent.settle(None, actual)
            return False
        held = False
        upstream = None
        if reservation is not None:
            held = self.reserved.pop(reservation, None) is not None
            upstream = self._upstream.pop(reservation, None)
            if not held:
                log.info("budget.settled_unheld", reservation=reservation, scope=self.scope)
        for dimension, amount in actual.items():
            self.spent[dimension] = self.spent.get(dimension, 0.0) + amount
        if self._parent is not None:
            rest = self._uncarved(actual)
            if upstream is not None or rest:
                self._parent.settle(upstream, rest)
        return held

    def reconcile(self, actual: Mapping[str, float]) -> None:
        """
        Add spend reported after its reservation was settled (late usage).

        The next reservation sees it. Nothing held is touched.
        """
        self.settle(None, actual)

    def release(self, reservation: int) -> None:
        """Drop a reservation that was not spent (an unknown id is harmless)."""
        self.reserved.pop(reservation, None)
        upstream = self._upstream.pop(reservation, None)
        if upstream is not None and self._parent is not None:
            self._parent.release(upstream)

    def remaining(self, controller: bool = False) -> dict[str, float]:
        """What is left of each limit (for the actor, less the reserve)."""
        out = {}
        for dimension, limit in self.budget.limits.items():
            bound = limit if controller else limit - self.budget.reserve.get(dimension, 0.0)
            used = self.spent.get(dimension, 0.0) + self._held(dimension)
            out[dimension] = max(0.0, bound - used)
        return out

    def exhausted(self, controller: bool = False) -> Exhaustion | None:
        """The first limit with nothing left, if any; its value counts what is held."""
        for dimension in self.budget.limits:
            bound = self._bound(dimension, controller)
            used = self.spent.get(dimension, 0.0) + self._held(dimension)
            if bound - used <= _EPSILON:
                return Exhaustion(dimension, used, bound, self.scope)
        return None

    # -- leases ---------------------------------------------------------------------

    def lease(self, amounts: Mapping[str, float], controller: bool = False) -> Lease | Exhaustion:
        """
        Lend a slice of this ledger to a sub-agent or the verifier.

        The slice is held here like a reservation. The lease's ledger is limited
        to the slice; a dimension the slice does not name is checked against (and
        held in) this ledger as the lease spends it. Close it with
        :meth:`close_lease`.

        Args:
            amounts: dimension -> the slice.
            controller: the slice may come out of the reserve (the controller's
                own work, such as verification).

        Returns:
            The lease, or the limit the slice does not fit (nothing is held).

        Raises:
            ConfigError: an unknown dimension or a negative amount.
        """
        limits = _amounts(amounts, "lease")
        hold = self.reserve(limits, controller)
        if isinstance(hold, Exhaustion):
            return hold
        self._leases.last += 1
        number = self._leases.last
        child = Ledger(Budget(limits), scope=f"lease:{number}")
        child._parent = self
        child._lease_controller = controller
        child._leases = self._leases
        lease = Lease(number, limits, controller, child, self, hold)
        self._leases.open[number] = lease
        self._leases.granted[number] = lease
        log.debug("budget.leased", lease=number, scope=self.scope, amounts=limits)
        return lease

    def close_lease(self, lease: Lease) -> LeaseSettlement:
        """
        Charge this ledger what the lease spent and take back the rest.

        Leases the lease granted are closed first; its open reservations are
        released (they were not spent).

        Raises:
            BudgetError: the lease is closed already, or another ledger granted it.
        """
        if lease.lender is not self:
            raise BudgetError(
                f"lease {lease.id} was granted by {lease.lender.scope}, not {self.scope}: "
                "close it where it was granted"
            )
        if lease.closed:
            raise BudgetError(f"lease {lease.id} is closed already")
        borrower = lease.ledger
        for inner in [x for x in self._leases.open.values() if x.lender is borrower]:
            borrower.close_lease(inner)
        for reservation in list(borrower.reserved):
            borrower.release(reservation)
        spent = {d: borrower.spent.get(d, 0.0) for d in lease.amounts}
        returned = {d: max(0.0, lease.amounts[d] - spent[d]) for d in lease.amounts}
        self.settle(lease.hold, {d: a for d, a in spent.items() if a})
        lease.closed = True
        borrower._closed = True
        del self._leases.open[lease.id]
        log.debug("budget.lease_closed", lease=lease.id, spent=spent, returned=returned)
        return LeaseSettlement(lease.id, spent, returned)

    def get_lease(self, lease_id: int) -> Lease:
        """
        Return an open lease of this ledger's tree (granted here or by any lease of it).

        Raises:
            BudgetError: no open lease has that id.
        """
        found = self._leases.open.get(lease_id)
        if found is None:
            raise BudgetError(f"no open lease {lease_id}: it was never granted or is closed")
        return found

    def for_lease(self, lease_id: int | None, *, closed: bool = False) -> Ledger:
        """
        Return the ledger that spend in lease ``lease_id`` goes to (None: this one).

        Args:
            lease_id: a lease of this ledger's tree, or None.
            closed: accept a closed lease, for late usage: its spend is charged
                to the nearest open lender, where the lease's spend went.

        Raises:
            BudgetError: no lease has that id (or it is closed and ``closed`` is False).
        """
        if lease_id is None:
            return self
        if not closed:
            return self.get_lease(lease_id).ledger
        found = self._leases.granted.get(lease_id)
        if found is None:
            raise BudgetError(f"no lease {lease_id} was ever granted")
        ledger = found.ledger
        while ledger._closed and ledger._parent is not None:
            ledger = ledger._parent
        return ledger

    # -- retuning ---------------------------------------------------------------------

    def retune(
        self,
        dimension: str,
        limit: float,
        *,
        who: str,
        why: str,
        below_spent: bool = False,
        at: float | None = None,
    ) -> Retune:
        """
        Change one limit while the task runs, and say who and why.

        Args:
            dimension: the dimension (a new one adds a limit).
            limit: the new limit.
            who: who changes it.
            why: why.
            below_spent: allow a limit below what is spent and held, which
                exhausts the dimension; without it such a limit is refused.
            at: when (default: now).

        Raises:
            ConfigError: an unknown dimension, a bad limit, an empty ``who`` or
                ``why``, a limit that does not hold its reserve, a limit below
                what is spent without ``below_spent``, or a lease's ledger
                (a lease's limits are its slice: close it and lease again).
        """
        where = f"retune.{dimension}"
        if self._parent is not None:
            raise ConfigError(
                f"{where}: {self.scope} is a lease, limited to its slice; close it and "
                "lease a new slice instead"
            )
        new = _amounts({dimension: limit}, "retune")[dimension]
        for name, value in (("who", who), ("why", why)):
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(f"{where}: a retune needs a non-empty {name!r}")
        reserve = self.budget.reserve.get(dimension, 0.0)
        if reserve > new:
            raise ConfigError(
                f"{where}: the new limit {new:g} does not hold the reserve {reserve:g}; "
                f"a limit must be at least its reserve"
            )
        used = self.spent.get(dimension, 0.0) + self._held(dimension)
        below = new < used - _EPSILON
        if below and not below_spent:
            raise ConfigError(
                f"{where}: the new limit {new:g} is below what is spent and held ({used:g}); "
                "pass below_spent=True (proctor retune --below-spent) to exhaust it on purpose"
            )
        old = self.budget.limits.get(dimension)
        self.budget = Budget({**self.budget.limits, dimension: new}, dict(self.budget.reserve))
        record = Retune(
            dimension, old, new, who, why, time.time() if at is None else at, self.scope, below
        )
        self.retunes.append(record)
        log.info("budget.retuned", dimension=dimension, old=old, new=new, who=who, why=why)
        return record

    # -- reporting ------------------------------------------------------------------------

    def statistics(self) -> LedgerStatistics:
        """Return the books as a frozen record."""
        held: dict[str, float] = {}
        for amounts in self.reserved.values():
            for dimension, amount in amounts.items():
                held[dimension] = held.get(dimension, 0.0) + amount
        leases = tuple(i for i, x in self._leases.open.items() if x.lender is self)
        return LedgerStatistics(
            self.scope,
            dict(self.spent),
            held,
            self.remaining(),
            self.remaining(controller=True),
            leases,
        )

    def snapshot(self) -> dict[str, Any]:
        """Plain data for the journal and the handoff."""
        return {"spent": dict(self.spent), "remaining": self.remaining()}


@attrs.define(eq=False)
class Lease:
    """
    A slice of a ledger lent to a sub-agent or the verifier.

    Args:
        id: the lease's id, unique among the leases of one task's ledger.
        amounts: the slice, dimension -> amount.
        controller: the slice may come out of the lender's reserve.
        ledger: the borrower's ledger, limited to the slice.
        lender: the ledger the slice is held in.
        hold: the lender's reservation that holds the slice.
        closed: the lease was closed (:meth:`Ledger.close_lease`).
    """

    id: int
    amounts: dict[str, float]
    controller: bool
    ledger: Ledger
    lender: Ledger
    hold: int
    closed: bool = False

    @property
    def scope(self) -> str:
        """``lease:ID``, as exhaustions inside the lease name it."""
        return self.ledger.scope
