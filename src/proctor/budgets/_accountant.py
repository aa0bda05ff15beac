"""
The budget accountant task.

It keeps the ledger outside the model: the controller asks it to reserve an
estimate before any spend and to settle the actual spend after; it grants or
refuses, journals every reservation and settlement, and announces deadlines
on its own.

Requests and their replies (each request carries a ``ref`` the reply echoes)::

    Reserve     -> Granted | Denied | Rejected
    Settle      -> Settled                       (reservation=None: late usage)
    Release     -> (none)
    Pause       -> (none)                        working time stops
    Resume      -> (none)                        working time runs again
    OpenLease   -> LeaseGranted | Denied | Rejected
    CloseLease  -> LeaseClosed | Rejected
    RetuneLimit -> Retuned | Rejected
    Inspect     -> Inspected | Rejected
    (on its own)   Deadline                      wall or working time is up

Requests are served in order, so a request without a reply is done once the
reply to any later request arrives.
"""

from __future__ import annotations

import inspect
import math
import resource
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol, cast

import anyio
import attrs
from anyio.abc import ObjectReceiveStream, ObjectSendStream, TaskGroup, TaskStatus

from proctor import _channels as channels
from proctor._errors import BudgetError, ConfigError
from proctor._logging import get_logger
from proctor.budgets._budget import (
    Exhaustion,
    Lease,
    LeaseSettlement,
    Ledger,
    LedgerStatistics,
    Retune,
)

__all__ = (
    "TIME_DIMENSIONS",
    "AccountantReply",
    "AccountantRequest",
    "CloseLease",
    "Deadline",
    "Denied",
    "Granted",
    "Inspect",
    "Inspected",
    "LeaseClosed",
    "LeaseGranted",
    "LegacySpendSink",
    "OpenLease",
    "Pause",
    "Rejected",
    "Release",
    "Reserve",
    "Resume",
    "RetuneLimit",
    "Retuned",
    "Settle",
    "Settled",
    "SpendSink",
    "child_cpu_seconds",
    "run_accountant",
)

log = get_logger()

#: The dimensions the accountant measures itself, as time passes.
TIME_DIMENSIONS = ("wall_seconds", "working_seconds", "child_cpu_seconds")

# Deadlines are announced for these, as their limits are reached.
_CLOCKED = ("wall_seconds", "working_seconds")


# -- requests ------------------------------------------------------------------------


@attrs.frozen
class Reserve:
    """
    Ask to hold ``amounts`` before spending them.

    ``controller`` may draw on the reserve; ``lease`` reserves inside a lease.
    ``charge`` spends them at once if they fit, as a :class:`Settle` of the
    grant with the same amounts would (one round trip instead of two): the
    :class:`Granted` reply's ``remaining`` is after the charge, and its
    reservation is no longer held.
    """

    ref: int
    amounts: dict[str, float]
    controller: bool = False
    lease: int | None = None
    charge: bool = False


@attrs.frozen
class Settle:
    """
    Replace reservation ``reservation`` by the actual spend.

    ``reservation=None`` reconciles late usage (reported after its reservation
    was settled): the spend is added, nothing held is touched. Settling an id
    that is no longer held (already settled or released) does the same. Spend
    settled in a closed lease is charged to its lender.
    """

    ref: int
    reservation: int | None
    actual: dict[str, float]
    lease: int | None = None


@attrs.frozen
class Release:
    """Drop a reservation that was not spent. No reply."""

    ref: int
    reservation: int
    lease: int | None = None


@attrs.frozen
class Pause:
    """Stop working time: the run waits for a person (``reason`` says for what). No reply."""

    ref: int
    reason: str


@attrs.frozen
class Resume:
    """Start working time again after a :class:`Pause`. No reply."""

    ref: int


@attrs.frozen
class OpenLease:
    """
    Lend a slice of the budget to a sub-agent or the verifier.

    ``controller``: the slice may come out of the reserve. ``lease``: lend from
    that lease instead of from the task (leases nest).
    """

    ref: int
    amounts: dict[str, float]
    controller: bool = False
    lease: int | None = None


@attrs.frozen
class CloseLease:
    """Charge the lender what lease ``lease`` spent and take back the rest."""

    ref: int
    lease: int


@attrs.frozen
class RetuneLimit:
    """
    Change one of the task's limits, saying who and why (journaled as ``retune``).

    ``below_spent`` allows a limit below what is spent: it exhausts the dimension.
    """

    ref: int
    dimension: str
    limit: float
    who: str
    why: str
    below_spent: bool = False


@attrs.frozen
class Inspect:
    """Ask for the books of the task (or of lease ``lease``)."""

    ref: int
    lease: int | None = None


# -- replies ---------------------------------------------------------------------------


@attrs.frozen
class Granted:
    """The reservation fits and is held."""

    ref: int
    reservation: int
    remaining: dict[str, float]


@attrs.frozen
class Denied:
    """The reservation (or lease) does not fit; nothing was held."""

    ref: int
    exhaustion: Exhaustion


@attrs.frozen
class Settled:
    """The spend was recorded (and journaled)."""

    ref: int
    remaining: dict[str, float]


@attrs.frozen
class LeaseGranted:
    """The slice is held; spend inside it names ``lease``."""

    ref: int
    lease: int
    remaining: dict[str, float]


@attrs.frozen
class LeaseClosed:
    """The lease is closed: what it spent was charged, the rest taken back."""

    ref: int
    settlement: LeaseSettlement
    remaining: dict[str, float]


@attrs.frozen
class Retuned:
    """The limit was changed and journaled."""

    ref: int
    retune: Retune
    remaining: dict[str, float]


@attrs.frozen
class Inspected:
    """
    The books.

    Args:
        ref: the request's ref.
        statistics: spent, held and remaining.
        running: time passed since the last settlement, not yet charged.
        paused: working time is stopped.
    """

    ref: int
    statistics: LedgerStatistics
    running: dict[str, float]
    paused: bool


@attrs.frozen
class Rejected:
    """The request makes no sense (an unknown lease, an invalid retune): nothing changed."""

    ref: int
    reason: str


@attrs.frozen
class Deadline:
    """
    A time limit was reached.

    ``hard`` is False when only the reserve is left (the actor's discretionary
    work stops) and True when the whole limit is gone.
    """

    exhaustion: Exhaustion
    hard: bool = False


AccountantRequest = (
    Reserve | Settle | Release | Pause | Resume | OpenLease | CloseLease | RetuneLimit | Inspect
)
AccountantReply = (
    Granted
    | Denied
    | Settled
    | LeaseGranted
    | LeaseClosed
    | Retuned
    | Inspected
    | Rejected
    | Deadline
)


class SpendSink(Protocol):
    """
    Journals what the accountant records: ``await record(amounts, kind, note)``.

    ``kind`` is ``reserve``, ``settle`` or ``retune``; ``note`` says which lease
    the amounts belong to (``lease:3``), or what a retune changed, who and why.
    """

    def __call__(self, amounts: Mapping[str, float], kind: str, note: str, /) -> Awaitable[None]:
        """Journal ``amounts`` of ``kind``."""
        ...


#: A journal callback without notes: ``await record(amounts, kind)``.
LegacySpendSink = Callable[[Mapping[str, float], str], Awaitable[None]]


def _noted(record: SpendSink | LegacySpendSink) -> SpendSink:
    """Take a callback with or without a ``note`` parameter; return one that takes it."""
    try:
        inspect.signature(record).bind({}, "settle", "")
    except TypeError:
        legacy = cast(LegacySpendSink, record)

        async def without_note(amounts: Mapping[str, float], kind: str, note: str, /) -> None:
            if note:
                log.info("budget.note", kind=kind, note=note)
            await legacy(amounts, kind)

        return without_note
    except ValueError:  # pragma: no cover - a callable without a signature
        pass
    return cast(SpendSink, record)


def child_cpu_seconds() -> float:
    """
    Return the CPU time (user + system) of this process's reaped children.

    ``resource.getrusage(RUSAGE_CHILDREN)`` counts a child once it has exited and
    been waited for, and counts every such child of this process, whoever
    started it.
    """
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@attrs.define(eq=False)
class _Timekeeper:
    """The time the task spends: wall, working (wall less pauses) and child CPU."""

    ledger: Ledger
    clock: Callable[[], float]
    cpu: Callable[[], float]
    mark: float = attrs.field(init=False)
    cpu_mark: float = attrs.field(init=False)
    # Working time accrues from ``working_from``; None while paused. What accrued
    # since the last charge, before the current stretch, is in ``working_banked``.
    working_from: float | None = attrs.field(init=False)
    working_banked: float = 0.0

    def __attrs_post_init__(self) -> None:
        self.mark = self.working_from = self.clock()
        self.cpu_mark = self.cpu()

    @property
    def paused(self) -> bool:
        return self.working_from is None

    def _working(self, now: float) -> float:
        running = 0.0 if self.working_from is None else now - self.working_from
        return self.working_banked + running

    def running(self) -> dict[str, float]:
        """Time passed since the last charge, not yet charged."""
        now = self.clock()
        return {
            "wall_seconds": now - self.mark,
            "working_seconds": self._working(now),
            "child_cpu_seconds": max(0.0, self.cpu() - self.cpu_mark),
        }

    def pending(self, dimension: str) -> float:
        """One dimension of :meth:`running` (without the others' system calls)."""
        now = self.clock()
        return now - self.mark if dimension == "wall_seconds" else self._working(now)

    def charge(self) -> dict[str, float]:
        """
        Return the time to charge since the last charge, and start a new stretch.

        Wall time is always charged; working time and child CPU only while the
        budget limits them.
        """
        now = self.clock()
        out = {"wall_seconds": now - self.mark}
        limits = self.ledger.budget.limits
        if "working_seconds" in limits:
            out["working_seconds"] = self._working(now)
        self.working_banked = 0.0
        if self.working_from is not None:
            self.working_from = now
        if "child_cpu_seconds" in limits:
            cpu = self.cpu()
            out["child_cpu_seconds"] = max(0.0, cpu - self.cpu_mark)
            self.cpu_mark = cpu
        self.mark = now
        return out

    def pause(self) -> None:
        if self.working_from is not None:
            self.working_banked += self.clock() - self.working_from
            self.working_from = None

    def resume(self) -> None:
        if self.working_from is None:
            self.working_from = self.clock()


@attrs.define(eq=False)
class _Watch:
    """The deadlines of one clocked dimension."""

    dimension: str
    fired: set[bool] = attrs.field(factory=set)
    scope: anyio.CancelScope | None = None


@attrs.define(eq=False)
class _Accountant:
    ledger: Ledger
    requests: ObjectReceiveStream[AccountantRequest]
    replies: ObjectSendStream[AccountantReply]
    record: SpendSink
    time: _Timekeeper
    watches: dict[str, _Watch] = attrs.field(factory=dict)
    tasks: TaskGroup | None = None

    def start_watches(self) -> None:
        """Watch each clocked dimension that has a limit (once)."""
        assert self.tasks is not None
        for dimension in _CLOCKED:
            if dimension in self.ledger.budget.limits and dimension not in self.watches:
                self.watches[dimension] = watch = _Watch(dimension)
                self.tasks.start_soon(self.watch, watch)

    # -- deadlines ------------------------------------------------------------------

    def _stage(self, watch: _Watch) -> tuple[bool, float] | None:
        """The next deadline of ``watch`` not yet announced: (hard, bound)."""
        limit = self.ledger.budget.limits.get(watch.dimension)
        if limit is None:
            return None
        reserve = self.ledger.budget.reserve.get(watch.dimension, 0.0)
        # Without a reserve the first deadline is the whole limit: it is hard.
        stages = ((False, limit - reserve), (True, limit)) if reserve else ((True, limit),)
        return next((s for s in stages if s[0] not in watch.fired), None)

    def _used(self, dimension: str) -> float:
        return self.ledger.spent.get(dimension, 0.0) + self.time.pending(dimension)

    def _due(self, watch: _Watch, stage: tuple[bool, float] | None) -> float:
        """When (on anyio's clock) the stage's bound is reached; inf if it is not running."""
        if stage is None or (watch.dimension == "working_seconds" and self.time.paused):
            return math.inf
        return anyio.current_time() + max(0.0, stage[1] - self._used(watch.dimension))

    def reschedule(self) -> None:
        """Move every pending deadline to match the books and the clocks now."""
        for watch in self.watches.values():
            if watch.scope is not None:
                watch.scope.deadline = self._due(watch, self._stage(watch))

    async def watch(self, watch: _Watch) -> None:
        while True:
            with anyio.CancelScope(deadline=self._due(watch, self._stage(watch))) as scope:
                watch.scope = scope
                await anyio.sleep_forever()
            watch.scope = None
            # The deadline may have moved (a pause, a retune): check it is reached.
            stage = self._stage(watch)
            if self._due(watch, stage) > anyio.current_time() or stage is None:
                continue
            hard, bound = stage
            watch.fired.add(hard)
            spent = self._used(watch.dimension)
            log.info("budget.deadline", limit=watch.dimension, hard=hard, bound=bound)
            await self.replies.send(Deadline(Exhaustion(watch.dimension, spent, bound), hard))

    # -- requests ----------------------------------------------------------------------

    async def serve(self) -> None:
        while True:
            try:
                request = await channels.receive(self.requests)
            except anyio.EndOfStream:
                return
            if isinstance(request, Reserve):
                await self._reserve(request)
            elif isinstance(request, Settle):
                await self._settle(request)
            elif isinstance(request, Release):
                self._release(request)
            elif isinstance(request, Pause):
                self.time.pause()
                log.info("budget.paused", reason=request.reason)
                self.reschedule()
            elif isinstance(request, Resume):
                self.time.resume()
                log.info("budget.resumed")
                self.reschedule()
            elif isinstance(request, OpenLease):
                await self._open_lease(request)
            elif isinstance(request, CloseLease):
                await self._close_lease(request)
            elif isinstance(request, RetuneLimit):
                await self._retune(request)
            elif isinstance(request, Inspect):
                await self._inspect(request)
            else:  # pragma: no cover - not a request
                log.warning("budget.unknown_request", request=repr(request))

    async def _reject(self, ref: int, reason: str) -> None:
        log.warning("budget.rejected", ref=ref, reason=reason)
        await self.replies.send(Rejected(ref, reason))

    async def _reserve(self, request: Reserve) -> None:
        try:
            target = self.ledger.for_lease(request.lease)
        except BudgetError as exc:
            await self._reject(request.ref, str(exc))
            return
        outcome = target.reserve(request.amounts, request.controller)
        if isinstance(outcome, Exhaustion):
            log.info("budget.refused", limit=outcome.limit, value=outcome.value)
            await channels.send(self.replies, Denied(request.ref, outcome))
            return
        if request.charge:
            # As the Settle that would follow: what is left after it, for the actor.
            # Journaled as one record, a charge: held and spent at once.
            remaining = await self._charge(outcome, request.amounts, request.lease, "charge")
        else:
            await self.record(request.amounts, "reserve", _note(request.lease))
            remaining = target.remaining(request.controller)
        await channels.send(self.replies, Granted(request.ref, outcome, remaining))

    async def _settle(self, request: Settle) -> None:
        remaining = await self._charge(request.reservation, request.actual, request.lease)
        await channels.send(self.replies, Settled(request.ref, remaining))

    async def _charge(
        self,
        reservation: int | None,
        actual_spend: Mapping[str, float],
        lease: int | None,
        kind: str = "settle",
    ) -> dict[str, float]:
        """
        Settle a reservation with what was spent and the time that passed; journal
        it as a record of ``kind``.
        """
        elapsed = self.time.charge()
        try:
            target = self.ledger.for_lease(lease)
        except BudgetError:
            # A closed lease released what it held: its spend is late usage, charged
            # where the lease's spend went. Spend is spent: an unknown lease's goes
            # to the task.
            reservation = None
            try:
                target = self.ledger.for_lease(lease, closed=True)
            except BudgetError as exc:
                log.warning("budget.unknown_lease", lease=lease, reason=str(exc))
                target = self.ledger
        actual = {**actual_spend}
        if target is self.ledger:
            for key, value in elapsed.items():
                actual[key] = actual.get(key, 0.0) + value
            target.settle(reservation, actual)
        else:
            target.settle(reservation, actual_spend)
            self.ledger.settle(None, elapsed)
            for key, value in elapsed.items():
                actual[key] = actual.get(key, 0.0) + value
        await self.record(actual, kind, _note(lease))
        self.reschedule()
        return target.remaining()

    def _release(self, request: Release) -> None:
        try:
            target = self.ledger.for_lease(request.lease)
        except BudgetError:
            # Closing a lease released what it held.
            return
        target.release(request.reservation)

    async def _open_lease(self, request: OpenLease) -> None:
        try:
            lender = self.ledger.for_lease(request.lease)
            outcome = lender.lease(request.amounts, request.controller)
        except (BudgetError, ConfigError) as exc:
            await self._reject(request.ref, str(exc))
            return
        if isinstance(outcome, Exhaustion):
            log.info("budget.lease_refused", limit=outcome.limit, value=outcome.value)
            await self.replies.send(Denied(request.ref, outcome))
            return
        await self.record(outcome.amounts, "reserve", outcome.scope)
        remaining = outcome.ledger.remaining()
        await self.replies.send(LeaseGranted(request.ref, outcome.id, remaining))

    async def _close_lease(self, request: CloseLease) -> None:
        try:
            lease: Lease = self.ledger.get_lease(request.lease)
        except BudgetError as exc:
            await self._reject(request.ref, str(exc))
            return
        settlement = lease.lender.close_lease(lease)
        remaining = lease.lender.remaining(lease.controller)
        await self.replies.send(LeaseClosed(request.ref, settlement, remaining))

    async def _retune(self, request: RetuneLimit) -> None:
        try:
            retune = self.ledger.retune(
                request.dimension,
                request.limit,
                who=request.who,
                why=request.why,
                below_spent=request.below_spent,
            )
        except ConfigError as exc:
            await self._reject(request.ref, str(exc))
            return
        await self.record({retune.dimension: retune.new}, "retune", retune.note())
        watch = self.watches.get(retune.dimension)
        if watch is not None:
            # New bounds: their deadlines are announced afresh.
            watch.fired.clear()
        self.start_watches()
        self.reschedule()
        await self.replies.send(Retuned(request.ref, retune, self.ledger.remaining()))

    async def _inspect(self, request: Inspect) -> None:
        try:
            target = self.ledger.for_lease(request.lease)
        except BudgetError as exc:
            await self._reject(request.ref, str(exc))
            return
        running = self.time.running()
        reply = Inspected(request.ref, target.statistics(), running, self.time.paused)
        await self.replies.send(reply)


def _note(lease: int | None) -> str:
    return "" if lease is None else f"lease:{lease}"


async def run_accountant(
    ledger: Ledger,
    requests: ObjectReceiveStream[AccountantRequest],
    replies: ObjectSendStream[AccountantReply],
    record: SpendSink | LegacySpendSink,
    *,
    clock: Callable[[], float] = time.monotonic,
    cpu: Callable[[], float] = child_cpu_seconds,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """
    Serve the controller's requests until it closes its side.

    Start it with ``await tg.start(run_accountant, ...)`` to know that its
    clocks are running (time is counted from then).

    Time is charged as it passes, at every settlement, so a run killed mid-way
    leaves its spend in the journal up to its last step: wall time always,
    working time (wall time less pauses) and the CPU time of reaped child
    processes while the budget limits them.

    Deadlines for ``wall_seconds`` and ``working_seconds`` come on their own: a
    soft one when only the reserve is left, a hard one at the limit (only the
    hard one when there is no reserve). No working-time deadline comes while
    paused; it is moved on resume.

    Args:
        ledger: the books, with the task's inherited spend.
        requests: the controller's requests.
        replies: where grants, refusals and deadlines go.
        record: journals: ``await record(amounts, kind, note)``; a callback
            without ``note`` (``await record(amounts, kind)``) is accepted too.
        clock: a monotonic clock, in seconds.
        cpu: the CPU seconds of reaped child processes (see :func:`child_cpu_seconds`).
        task_status: told once the clocks run.
    """
    sink = _noted(record)
    keeper = _Timekeeper(ledger, clock, cpu)
    accountant = _Accountant(ledger, requests, replies, sink, keeper)
    async with replies, requests:
        async with anyio.create_task_group() as tg:
            accountant.tasks = tg
            accountant.start_watches()
            task_status.started()
            await accountant.serve()
            tg.cancel_scope.cancel()
        # The last stretch of time belongs to the task too.
        with anyio.move_on_after(5, shield=True):
            await sink(keeper.charge(), "settle", "")
