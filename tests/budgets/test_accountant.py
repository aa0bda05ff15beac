from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager

import anyio
import attrs
import pytest
from anyio.abc import ObjectSendStream, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream
from structlog.testing import capture_logs

from proctor.budgets import _accountant
from proctor.budgets._accountant import (
    AccountantReply,
    AccountantRequest,
    CloseLease,
    Deadline,
    Denied,
    Granted,
    Inspect,
    Inspected,
    LeaseClosed,
    LeaseGranted,
    LegacySpendSink,
    OpenLease,
    Pause,
    Rejected,
    Release,
    Reserve,
    Resume,
    Retuned,
    RetuneLimit,
    Settle,
    Settled,
    SpendSink,
    child_cpu_seconds,
    run_accountant,
)
from proctor.budgets._budget import Budget, Exhaustion, LeaseSettlement, Ledger


def test_all_names_exist_and_are_documented() -> None:
    assert isinstance(_accountant.__all__, tuple)
    for name in _accountant.__all__:
        assert hasattr(_accountant, name), name
    for name in _accountant.__all__:
        if name in ("AccountantReply", "AccountantRequest", "LegacySpendSink", "TIME_DIMENSIONS"):
            continue
        assert getattr(_accountant, name).__doc__, name
    assert run_accountant.__doc__


@attrs.define
class FakeClock:
    """A monotonic clock the test moves by hand."""

    now: float = 0.0

    def __call__(self) -> float:
        return self.now


@attrs.define
class Journal:
    """Collects what the accountant journals."""

    calls: list[tuple[dict[str, float], str]] = attrs.field(factory=list)
    notes: list[str] = attrs.field(factory=list)

    async def __call__(self, amounts: Mapping[str, float], kind: str, note: str = "") -> None:
        self.calls.append((dict(amounts), kind))
        self.notes.append(note)


@attrs.define
class Books:
    """The controller's side of a running accountant."""

    requests: ObjectSendStream[AccountantRequest]
    replies: MemoryObjectReceiveStream[AccountantReply]
    journal: Journal
    done: anyio.Event

    async def ask(self, request: AccountantRequest) -> AccountantReply:
        await self.requests.send(request)
        with anyio.fail_after(2):
            return await self.replies.receive()

    async def close(self) -> None:
        """Close the request side and wait for the accountant to finish."""
        await self.requests.aclose()
        with anyio.fail_after(2):
            await self.done.wait()


@asynccontextmanager
async def accountant(
    ledger: Ledger,
    clock: Callable[[], float] | None = None,
    *,
    cpu: Callable[[], float] = child_cpu_seconds,
    record: SpendSink | LegacySpendSink | None = None,
) -> AsyncIterator[Books]:
    req_tx, req_rx = anyio.create_memory_object_stream[AccountantRequest](16)
    rep_tx, rep_rx = anyio.create_memory_object_stream[AccountantReply](16)
    journal = Journal()
    done = anyio.Event()

    async def serve(*, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        try:
            await run_accountant(
                ledger,
                req_rx,
                rep_tx,
                journal if record is None else record,
                clock=clock or FakeClock(),
                cpu=cpu,
                task_status=task_status,
            )
        finally:
            done.set()

    async with anyio.create_task_group() as tg, rep_rx:
        # The accountant reads its clocks when it starts: let it start first.
        await tg.start(serve)
        async with req_tx:
            yield Books(req_tx, rep_rx, journal, done)
        with anyio.fail_after(2):
            await done.wait()


# -- requests and replies ----------------------------------------------------------------


async def test_a_reservation_that_fits_is_granted() -> None:
    ledger = Ledger(Budget.of(reserve={"steps": 1}, steps=5))
    async with accountant(ledger) as books:
        reply = await books.ask(Reserve(1, {"steps": 1.0}))
        assert isinstance(reply, Granted)
        assert reply.ref == 1
        assert reply.remaining == {"steps": 3.0}
        assert ledger.reserved == {reply.reservation: {"steps": 1.0}}


async def test_a_controller_grant_reports_the_controllers_remaining() -> None:
    ledger = Ledger(Budget.of(reserve={"steps": 2}, steps=5), spent={"steps": 3.0})
    async with accountant(ledger) as books:
        refused = await books.ask(Reserve(1, {"steps": 1.0}))
        assert isinstance(refused, Denied)
        reply = await books.ask(Reserve(2, {"steps": 1.0}, controller=True))
        assert isinstance(reply, Granted)
        assert reply.ref == 2
        assert reply.remaining == {"steps": 1.0}


async def test_a_reservation_that_does_not_fit_is_denied_and_nothing_is_held() -> None:
    ledger = Ledger(Budget.of(steps=2), spent={"steps": 2.0})
    async with accountant(ledger) as books:
        reply = await books.ask(Reserve(7, {"steps": 1.0}))
        assert reply == Denied(7, Exhaustion("steps", 2.0, 2.0, "task", 1.0))
        assert ledger.reserved == {}
    assert books.journal.calls == [({"wall_seconds": 0.0}, "settle")]


async def test_settle_replaces_the_reservation_and_journals_the_spend() -> None:
    clock = FakeClock(100.0)
    ledger = Ledger(Budget.of(steps=10, wall_seconds=600), spent={"steps": 4.0})
    async with accountant(ledger, clock) as books:
        grant = await books.ask(Reserve(1, {"steps": 1.0}))
        assert isinstance(grant, Granted)
        clock.now = 102.5
        reply = await books.ask(Settle(2, grant.reservation, {"steps": 1.0}))
        assert reply == Settled(2, {"steps": 5.0, "wall_seconds": 597.5})
        assert ledger.reserved == {}
        assert ledger.spent == {"steps": 5.0, "wall_seconds": 2.5}
        # The reservation is journaled too, as one record.
        assert books.journal.calls == [
            ({"steps": 1.0}, "reserve"),
            ({"steps": 1.0, "wall_seconds": 2.5}, "settle"),
        ]


async def test_a_charged_reservation_is_granted_and_settled_in_one_round_trip() -> None:
    clock = FakeClock(100.0)
    ledger = Ledger(Budget.of(reserve={"steps": 1}, steps=10, wall_seconds=600))
    async with accountant(ledger, clock) as books:
        clock.now = 101.0
        reply = await books.ask(Reserve(1, {"steps": 1.0, "tool_calls": 1.0}, charge=True))
        assert isinstance(reply, Granted)
        # As a Settle with the same amounts would have it: spent, nothing held,
        # the time charged, what is left for the actor.
        assert reply.remaining == {"steps": 8.0, "wall_seconds": 599.0}
        assert ledger.reserved == {}
        assert ledger.spent == {"steps": 1.0, "tool_calls": 1.0, "wall_seconds": 1.0}
        # One record: held and spent at once, what was spent with the time since.
        assert books.journal.calls == [
            ({"steps": 1.0, "tool_calls": 1.0, "wall_seconds": 1.0}, "charge"),
        ]
        # A charge that does not fit is denied, and nothing is spent.
        ledger.spent["steps"] = 9.0
        denied = await books.ask(Reserve(2, {"steps": 1.0}, charge=True))
        assert isinstance(denied, Denied)
        assert ledger.spent["steps"] == 9.0
        # The controller may draw on the reserve.
        granted = await books.ask(Reserve(3, {"steps": 1.0}, controller=True, charge=True))
        assert isinstance(granted, Granted)
        assert ledger.spent["steps"] == 10.0


async def test_wall_time_is_charged_once_per_stretch() -> None:
    clock = FakeClock()
    ledger = Ledger(Budget.of(wall_seconds=600))
    async with accountant(ledger, clock) as books:
        clock.now = 3.0
        await books.ask(Settle(1, None, {}))
        clock.now = 4.0
        await books.ask(Settle(2, None, {"wall_seconds": 0.5}))
        clock.now = 10.0
        await books.close()
    assert books.journal.calls == [
        ({"wall_seconds": 3.0}, "settle"),
        ({"wall_seconds": 1.5}, "settle"),
        ({"wall_seconds": 6.0}, "settle"),
    ]
    assert ledger.spent == {"wall_seconds": 4.5}


async def test_release_drops_the_reservation_without_a_reply() -> None:
    ledger = Ledger(Budget.of(steps=1))
    async with accountant(ledger) as books:
        grant = await books.ask(Reserve(1, {"steps": 1.0}))
        assert isinstance(grant, Granted)
        assert isinstance(await books.ask(Reserve(2, {"steps": 1.0})), Denied)
        await books.requests.send(Release(3, grant.reservation))
        # Requests are served in order: the next reply comes after the release.
        again = await books.ask(Reserve(4, {"steps": 1.0}))
        assert isinstance(again, Granted)
        assert again.ref == 4
        assert ledger.spent == {}


async def test_closing_the_requests_ends_the_accountant_and_journals_the_last_stretch() -> None:
    clock = FakeClock(50.0)
    ledger = Ledger(Budget.of(steps=3))
    async with accountant(ledger, clock) as books:
        clock.now = 58.0
        await books.close()
        assert books.done.is_set()
        assert books.journal.calls == [({"wall_seconds": 8.0}, "settle")]
        # The reply side is closed too: the controller's inbox sees the end.
        with pytest.raises(anyio.EndOfStream):
            await books.replies.receive()


# -- deadlines --------------------------------------------------------------------------


async def receive_deadline(books: Books) -> Deadline:
    with anyio.fail_after(2):
        reply = await books.replies.receive()
    assert isinstance(reply, Deadline)
    return reply


async def tell(books: Books, request: AccountantRequest) -> None:
    """Send a request that has no reply, and wait until the accountant has served it."""
    await books.requests.send(request)
    # Requests are served in order: once a later one is answered, this one is done.
    assert isinstance(await books.ask(Inspect(-1)), Inspected)


async def receive(
    books: Books, count: int, request: AccountantRequest
) -> dict[type, AccountantReply]:
    """Send a request and take ``count`` messages, whatever their order, by type."""
    await books.requests.send(request)
    got: dict[type, AccountantReply] = {}
    with anyio.fail_after(2):
        for _ in range(count):
            message = await books.replies.receive()
            got[type(message)] = message
    return got


async def test_no_wall_limit_means_no_deadline() -> None:
    ledger = Ledger(Budget.of(steps=3))
    async with accountant(ledger) as books:
        await anyio.wait_all_tasks_blocked()
        await books.close()
        with pytest.raises(anyio.EndOfStream):
            await books.replies.receive()


async def test_inherited_wall_time_brings_both_deadlines_at_once() -> None:
    ledger = Ledger(
        Budget.of(reserve={"wall_seconds": 4}, wall_seconds=10), spent={"wall_seconds": 10.0}
    )
    async with accountant(ledger, FakeClock(5.0)) as books:
        soft = await receive_deadline(books)
        assert soft == Deadline(Exhaustion("wall_seconds", 10.0, 6.0), hard=False)
        hard = await receive_deadline(books)
        assert hard == Deadline(Exhaustion("wall_seconds", 10.0, 10.0), hard=True)


async def test_only_the_soft_deadline_while_the_reserve_is_left() -> None:
    ledger = Ledger(
        Budget.of(reserve={"wall_seconds": 400}, wall_seconds=1000),
        spent={"wall_seconds": 700.0},
    )
    async with accountant(ledger) as books:
        soft = await receive_deadline(books)
        assert soft == Deadline(Exhaustion("wall_seconds", 700.0, 600.0), hard=False)
        # The hard deadline is 300 s away: the accountant still serves requests.
        reply = await books.ask(Reserve(1, {"steps": 1.0}))
        assert isinstance(reply, Granted)
        await books.close()
        # Closing the requests cancels the pending deadline.
        with pytest.raises(anyio.EndOfStream):
            await books.replies.receive()


async def test_deadlines_arrive_on_their_own_as_time_passes() -> None:
    # A tiny limit on the real clock: the deadlines come without any request.
    ledger = Ledger(Budget.of(reserve={"wall_seconds": 0.01}, wall_seconds=0.02))
    async with accountant(ledger, time.monotonic) as books:
        soft = await receive_deadline(books)
        hard = await receive_deadline(books)
        assert not soft.hard
        assert hard.hard
        assert soft.exhaustion.limit == hard.exhaustion.limit == "wall_seconds"
        assert soft.exhaustion.bound == pytest.approx(0.01)
        assert hard.exhaustion.bound == pytest.approx(0.02)
        await books.close()
    [(last, kind)] = books.journal.calls
    assert kind == "settle"
    assert set(last) == {"wall_seconds"}


async def test_without_a_reserve_the_limit_is_a_single_hard_deadline() -> None:
    # With no reserve to wrap up in, the limit itself is the end: no soft deadline first.
    ledger = Ledger(Budget.of(wall_seconds=10), spent={"wall_seconds": 10.0})
    async with accountant(ledger) as books:
        deadline = await receive_deadline(books)
        assert deadline == Deadline(Exhaustion("wall_seconds", 10.0, 10.0), hard=True)
        # Nothing else is on its way.
        await anyio.wait_all_tasks_blocked()
        await books.close()
        with pytest.raises(anyio.EndOfStream):
            await books.replies.receive()


async def test_without_a_reserve_the_hard_deadline_arrives_on_its_own() -> None:
    ledger = Ledger(Budget.of(wall_seconds=0.01))
    async with accountant(ledger, time.monotonic) as books:
        deadline = await receive_deadline(books)
        assert deadline.hard
        assert deadline.exhaustion.limit == "wall_seconds"
        assert deadline.exhaustion.bound == pytest.approx(0.01)
        await anyio.wait_all_tasks_blocked()
        await books.close()
        with pytest.raises(anyio.EndOfStream):
            await books.replies.receive()


# -- reservations and late usage ------------------------------------------------------------


async def test_a_denied_reservation_is_not_journaled() -> None:
    ledger = Ledger(Budget.of(steps=1), spent={"steps": 1.0})
    async with accountant(ledger) as books:
        assert isinstance(await books.ask(Reserve(1, {"steps": 1.0})), Denied)
        assert books.journal.calls == []


async def test_a_controller_reservation_is_journaled_once() -> None:
    ledger = Ledger(Budget.of(reserve={"steps": 1}, steps=1))
    async with accountant(ledger) as books:
        grant = await books.ask(Reserve(1, {"steps": 1.0}, controller=True))
        assert isinstance(grant, Granted)
        assert books.journal.calls == [({"steps": 1.0}, "reserve")]
        assert books.journal.notes == [""]


async def test_late_usage_is_reconciled_and_the_next_reservation_sees_it() -> None:
    clock = FakeClock()
    ledger = Ledger(Budget.of(tokens_in=1000))
    async with accountant(ledger, clock) as books:
        grant = await books.ask(Reserve(1, {"tokens_in": 500.0}))
        assert isinstance(grant, Granted)
        await books.ask(Settle(2, grant.reservation, {"tokens_in": 400.0}))
        # The provider reports more usage after the call was settled.
        late = await books.ask(Settle(3, None, {"tokens_in": 300.0}))
        assert late == Settled(3, {"tokens_in": 300.0})
        refused = await books.ask(Reserve(4, {"tokens_in": 400.0}))
        assert refused == Denied(4, Exhaustion("tokens_in", 700.0, 1000.0, "task", 400.0))
    assert ({"tokens_in": 300.0, "wall_seconds": 0.0}, "settle") in books.journal.calls


async def test_settling_a_settled_reservation_again_releases_nothing_more() -> None:
    ledger = Ledger(Budget.of(steps=10))
    async with accountant(ledger) as books:
        first = await books.ask(Reserve(1, {"steps": 2.0}))
        second = await books.ask(Reserve(2, {"steps": 3.0}))
        assert isinstance(first, Granted)
        assert isinstance(second, Granted)
        await books.ask(Settle(3, first.reservation, {"steps": 2.0}))
        again = await books.ask(Settle(4, first.reservation, {"steps": 1.0}))
        assert isinstance(again, Settled)
        # The second reservation is still held; the late step counts.
        assert ledger.reserved == {second.reservation: {"steps": 3.0}}
        assert again.remaining == {"steps": 4.0}


# -- leases ----------------------------------------------------------------------------------


async def open_lease(books: Books, ref: int, amounts: dict[str, float], **kw: object) -> int:
    reply = await books.ask(OpenLease(ref, amounts, **kw))  # type: ignore[arg-type]
    assert isinstance(reply, LeaseGranted), reply
    return reply.lease


async def test_a_lease_is_granted_spent_in_and_closed_over_the_channels() -> None:
    clock = FakeClock()
    ledger = Ledger(Budget.of(steps=10, tool_calls=10))
    async with accountant(ledger, clock) as books:
        granted = await books.ask(OpenLease(1, {"steps": 4.0}))
        assert granted == LeaseGranted(1, 1, {"steps": 4.0})
        grant = await books.ask(Reserve(2, {"steps": 1.0, "tool_calls": 1.0}, lease=1))
        assert isinstance(grant, Granted)
        assert grant.remaining == {"steps": 3.0}
        clock.now = 2.0
        settled = await books.ask(
            Settle(3, grant.reservation, {"steps": 1.0, "tool_calls": 1.0}, 1)
        )
        assert settled == Settled(3, {"steps": 3.0})
        # Tool calls are not leased: the task is charged at once; so is the time.
        assert ledger.spent == {"tool_calls": 1.0, "wall_seconds": 2.0}
        closed = await books.ask(CloseLease(4, 1))
        assert closed == LeaseClosed(
            4, LeaseSettlement(1, {"steps": 1.0}, {"steps": 3.0}), {"steps": 9.0, "tool_calls": 9.0}
        )
        assert ledger.spent == {"tool_calls": 1.0, "wall_seconds": 2.0, "steps": 1.0}
        assert ledger.reserved == {}
    assert books.journal.calls[:3] == [
        ({"steps": 4.0}, "reserve"),
        ({"steps": 1.0, "tool_calls": 1.0}, "reserve"),
        ({"steps": 1.0, "tool_calls": 1.0, "wall_seconds": 2.0}, "settle"),
    ]
    assert books.journal.notes[:3] == ["lease:1", "lease:1", "lease:1"]


async def test_a_lease_that_does_not_fit_is_denied() -> None:
    ledger = Ledger(Budget.of(reserve={"steps": 2}, steps=5))
    async with accountant(ledger) as books:
        reply = await books.ask(OpenLease(1, {"steps": 4.0}))
        assert reply == Denied(1, Exhaustion("steps", 0.0, 3.0, "task", 4.0))
        # The verifier's lease may use the reserve.
        assert await open_lease(books, 2, {"steps": 4.0}, controller=True) == 1


async def test_a_reservation_beyond_the_lease_is_denied_in_its_scope() -> None:
    ledger = Ledger(Budget.of(steps=10))
    async with accountant(ledger) as books:
        lease = await open_lease(books, 1, {"steps": 1.0})
        assert isinstance(await books.ask(Reserve(2, {"steps": 1.0}, lease=lease)), Granted)
        refused = await books.ask(Reserve(3, {"steps": 1.0}, lease=lease))
        assert refused == Denied(3, Exhaustion("steps", 1.0, 1.0, f"lease:{lease}", 1.0))


async def test_leases_nest_over_the_channels() -> None:
    ledger = Ledger(Budget.of(steps=10))
    async with accountant(ledger) as books:
        outer = await open_lease(books, 1, {"steps": 6.0})
        inner = await open_lease(books, 2, {"steps": 4.0}, lease=outer)
        await books.ask(Settle(3, None, {"steps": 3.0}, inner))
        closed = await books.ask(CloseLease(4, outer))
        assert isinstance(closed, LeaseClosed)
        assert closed.settlement.spent == {"steps": 3.0}
        assert closed.remaining == {"steps": 7.0}
        # The inner lease was closed with it.
        assert isinstance(await books.ask(CloseLease(5, inner)), Rejected)


async def test_late_usage_in_a_closed_lease_is_charged_to_its_lender() -> None:
    ledger = Ledger(Budget.of(steps=10))
    async with accountant(ledger) as books:
        lease = await open_lease(books, 1, {"steps": 3.0})
        await books.ask(CloseLease(2, lease))
        settled = await books.ask(Settle(3, None, {"steps": 2.0}, lease))
        assert settled == Settled(3, {"steps": 8.0})


async def test_a_lease_reservation_settled_after_the_close_touches_no_task_hold() -> None:
    ledger = Ledger(Budget.of(steps=10))
    async with accountant(ledger) as books:
        held = await books.ask(Reserve(1, {"steps": 2.0}))
        assert isinstance(held, Granted)
        lease = await open_lease(books, 2, {"steps": 3.0})
        inner = await books.ask(Reserve(3, {"steps": 1.0}, lease=lease))
        assert isinstance(inner, Granted)
        # The lease's reservation id is the same number as the task's.
        assert inner.reservation == held.reservation
        await books.ask(CloseLease(4, lease))
        await books.ask(Settle(5, inner.reservation, {"steps": 1.0}, lease))
        # The task's own reservation is still held; the late step counts.
        assert ledger.reserved == {held.reservation: {"steps": 2.0}}
        assert ledger.spent == {"steps": 1.0, "wall_seconds": 0.0}


async def test_spend_in_an_unknown_lease_is_still_charged_to_the_task() -> None:
    ledger = Ledger(Budget.of(steps=10))
    async with accountant(ledger) as books:
        settled = await books.ask(Settle(1, None, {"steps": 2.0}, lease=42))
        assert settled == Settled(1, {"steps": 8.0})


async def test_bad_lease_requests_are_rejected_and_change_nothing() -> None:
    ledger = Ledger(Budget.of(steps=10))
    async with accountant(ledger) as books:
        for request in (
            Reserve(1, {"steps": 1.0}, lease=7),
            OpenLease(2, {"steps": 1.0}, lease=7),
            OpenLease(3, {"stepz": 1.0}),
            CloseLease(4, 7),
            Inspect(5, lease=7),
        ):
            reply = await books.ask(request)
            assert isinstance(reply, Rejected), reply
            assert reply.ref == request.ref
        # A release in an unknown lease has nothing to release.
        await books.requests.send(Release(6, 1, lease=7))
        assert isinstance(await books.ask(Reserve(7, {"steps": 10.0})), Granted)
        assert books.journal.calls == [({"steps": 10.0}, "reserve")]


async def test_a_release_inside_a_lease_frees_it() -> None:
    ledger = Ledger(Budget.of(steps=10))
    async with accountant(ledger) as books:
        lease = await open_lease(books, 1, {"steps": 1.0})
        grant = await books.ask(Reserve(2, {"steps": 1.0}, lease=lease))
        assert isinstance(grant, Granted)
        await books.requests.send(Release(3, grant.reservation, lease=lease))
        assert isinstance(await books.ask(Reserve(4, {"steps": 1.0}, lease=lease)), Granted)


# -- retuning ---------------------------------------------------------------------------------


async def test_a_retune_is_journaled_with_who_and_why() -> None:
    ledger = Ledger(Budget.of(steps=10), spent={"steps": 4.0})
    async with accountant(ledger) as books:
        reply = await books.ask(RetuneLimit(1, "steps", 20.0, who="ops", why="slow suite"))
        assert isinstance(reply, Retuned)
        assert reply.retune.old == 10.0
        assert reply.retune.new == 20.0
        assert reply.retune.who == "ops"
        assert reply.retune.why == "slow suite"
        assert reply.remaining == {"steps": 16.0}
        assert books.journal.calls == [({"steps": 20.0}, "retune")]
        assert books.journal.notes == ["steps: 10 -> 20 by ops: slow suite"]
        assert ledger.retunes == [reply.retune]


async def test_an_invalid_retune_is_rejected_and_not_journaled() -> None:
    ledger = Ledger(Budget.of(reserve={"steps": 2}, steps=10), spent={"steps": 6.0})
    async with accountant(ledger) as books:
        below = await books.ask(RetuneLimit(1, "steps", 5.0, who="ops", why="stop"))
        assert isinstance(below, Rejected)
        assert "below_spent=True" in below.reason
        reserve = await books.ask(RetuneLimit(2, "steps", 1.0, "ops", "x", below_spent=True))
        assert isinstance(reserve, Rejected)
        assert "reserve" in reserve.reason
        assert books.journal.calls == []
        explicit = await books.ask(RetuneLimit(3, "steps", 5.0, "ops", "stop", below_spent=True))
        assert isinstance(explicit, Retuned)
        assert explicit.retune.below_spent
        assert ledger.exhausted() == Exhaustion("steps", 6.0, 3.0)


async def test_a_retune_adding_a_time_limit_brings_its_deadline() -> None:
    clock = FakeClock()
    ledger = Ledger(Budget.of(steps=10))
    async with accountant(ledger, clock) as books:
        clock.now = 5.0
        await books.ask(RetuneLimit(1, "working_seconds", 5.0, who="ops", why="cap it"))
        got = await receive(books, 2, Settle(2, None, {}))
        assert got[Deadline] == Deadline(Exhaustion("working_seconds", 5.0, 5.0), hard=True)


async def test_a_retune_moves_the_wall_deadline() -> None:
    clock = FakeClock()
    ledger = Ledger(Budget.of(wall_seconds=10), spent={"wall_seconds": 10.0})
    async with accountant(ledger, clock) as books:
        assert (await receive_deadline(books)).hard
        await books.ask(RetuneLimit(1, "wall_seconds", 20.0, who="ops", why="more time"))
        # Ten more seconds: nothing is due yet.
        await anyio.wait_all_tasks_blocked()
        with pytest.raises(anyio.WouldBlock):
            books.replies.receive_nowait()
        clock.now = 10.0
        replies = await receive(books, 2, Settle(2, None, {}))
        assert replies[Deadline] == Deadline(Exhaustion("wall_seconds", 20.0, 20.0), hard=True)


# -- working time --------------------------------------------------------------------------------


async def test_working_time_stops_while_paused_and_wall_time_does_not() -> None:
    clock = FakeClock()
    ledger = Ledger(Budget.of(working_seconds=100, wall_seconds=1000))
    async with accountant(ledger, clock) as books:
        clock.now = 3.0
        await tell(books, Pause(1, "waiting for a reviewer"))
        clock.now = 50.0
        inspected = await books.ask(Inspect(2))
        assert isinstance(inspected, Inspected)
        assert inspected.paused
        assert inspected.running["wall_seconds"] == 50.0
        assert inspected.running["working_seconds"] == 3.0
        await books.ask(Settle(3, None, {}))
        assert ledger.spent == {"wall_seconds": 50.0, "working_seconds": 3.0}
        # Still paused: a settlement while paused charges no working time.
        clock.now = 60.0
        await books.ask(Settle(4, None, {}))
        assert ledger.spent == {"wall_seconds": 60.0, "working_seconds": 3.0}
        await tell(books, Resume(5))
        clock.now = 65.0
        await books.ask(Settle(6, None, {}))
        assert ledger.spent == {"wall_seconds": 65.0, "working_seconds": 8.0}
        # A second pause and resume between two settlements.
        clock.now = 66.0
        await tell(books, Pause(7, "needs input"))
        clock.now = 90.0
        await tell(books, Resume(8))
        clock.now = 92.0
        await books.ask(Settle(9, None, {}))
        assert ledger.spent == {"wall_seconds": 92.0, "working_seconds": 11.0}
        clock.now = 93.0
    assert books.journal.calls[-1] == ({"wall_seconds": 1.0, "working_seconds": 1.0}, "settle")


async def test_pausing_twice_and_resuming_twice_is_harmless() -> None:
    clock = FakeClock()
    ledger = Ledger(Budget.of(working_seconds=100))
    async with accountant(ledger, clock) as books:
        clock.now = 1.0
        await tell(books, Pause(1, "a"))
        clock.now = 2.0
        await tell(books, Pause(2, "b"))
        clock.now = 5.0
        await tell(books, Resume(3))
        await tell(books, Resume(4))
        clock.now = 6.0
        inspected = await books.ask(Inspect(5))
        assert isinstance(inspected, Inspected)
        assert not inspected.paused
        assert inspected.running["working_seconds"] == 2.0


async def test_no_working_deadline_while_paused_and_it_is_rescheduled_on_resume() -> None:
    clock = FakeClock()
    ledger = Ledger(Budget.of(reserve={"working_seconds": 2}, working_seconds=10))
    async with accountant(ledger, clock) as books:
        clock.now = 5.0
        await tell(books, Pause(1, "waiting for a person"))
        clock.now = 500.0
        settled = await books.ask(Settle(2, None, {}))
        assert isinstance(settled, Settled)
        await anyio.wait_all_tasks_blocked()
        with pytest.raises(anyio.WouldBlock):
            books.replies.receive_nowait()
        # Resumed: three more working seconds reach the soft deadline (8 of 10).
        await tell(books, Resume(3))
        clock.now = 503.0
        soft = await receive(books, 2, Settle(4, None, {}))
        assert soft[Deadline] == Deadline(Exhaustion("working_seconds", 8.0, 8.0), hard=False)
        clock.now = 505.0
        hard = await receive(books, 2, Settle(5, None, {}))
        assert hard[Deadline] == Deadline(Exhaustion("working_seconds", 10.0, 10.0), hard=True)


async def test_a_pause_does_not_stop_the_wall_deadline() -> None:
    clock = FakeClock()
    ledger = Ledger(Budget.of(wall_seconds=10, working_seconds=10))
    async with accountant(ledger, clock) as books:
        await tell(books, Pause(1, "waiting"))
        clock.now = 10.0
        got = await receive(books, 2, Settle(2, None, {}))
        assert got[Deadline] == Deadline(Exhaustion("wall_seconds", 10.0, 10.0), hard=True)
        await anyio.wait_all_tasks_blocked()
        with pytest.raises(anyio.WouldBlock):
            books.replies.receive_nowait()


async def test_an_inherited_working_deadline_waits_for_the_resume() -> None:
    ledger = Ledger(Budget.of(working_seconds=10), spent={"working_seconds": 10.0})
    async with accountant(ledger) as books:
        # The limit is gone already: it is announced at once.
        assert await receive_deadline(books) == Deadline(
            Exhaustion("working_seconds", 10.0, 10.0), hard=True
        )


async def test_working_deadlines_arrive_on_their_own_on_the_real_clock() -> None:
    ledger = Ledger(Budget.of(reserve={"working_seconds": 0.01}, working_seconds=0.02))
    async with accountant(ledger, time.monotonic) as books:
        soft = await receive_deadline(books)
        hard = await receive_deadline(books)
        assert (soft.hard, hard.hard) == (False, True)
        assert soft.exhaustion.limit == hard.exhaustion.limit == "working_seconds"
        await books.close()


# -- child CPU ------------------------------------------------------------------------------------

BUSY = "x = 0\nfor i in range(500_000):\n    x += i * i\n"


async def test_child_cpu_is_measured_after_a_real_child_runs() -> None:
    ledger = Ledger(Budget.of(child_cpu_seconds=3600))
    async with accountant(ledger) as books:
        done = await anyio.run_process([sys.executable, "-c", BUSY])
        assert done.returncode == 0
        settled = await books.ask(Settle(1, None, {}))
        assert isinstance(settled, Settled)
        assert ledger.spent["child_cpu_seconds"] > 0
        assert settled.remaining["child_cpu_seconds"] < 3600
    [(amounts, kind)] = books.journal.calls[:1]
    assert kind == "settle"
    assert amounts["child_cpu_seconds"] > 0


def test_child_cpu_seconds_counts_reaped_children() -> None:
    import subprocess

    before = child_cpu_seconds()
    subprocess.run([sys.executable, "-c", BUSY], check=True)
    assert child_cpu_seconds() > before


async def test_child_cpu_is_charged_in_deltas() -> None:
    readings = iter([1.0, 1.5, 4.0, 4.0])
    ledger = Ledger(Budget.of(child_cpu_seconds=100))
    async with accountant(ledger, cpu=lambda: next(readings)) as books:
        await books.ask(Settle(1, None, {}))
        await books.ask(Settle(2, None, {}))
        assert ledger.spent["child_cpu_seconds"] == 3.0


async def test_unlimited_working_time_and_child_cpu_are_not_charged() -> None:
    readings: list[float] = []

    def cpu() -> float:
        readings.append(1.0)
        return float(len(readings))

    clock = FakeClock()
    ledger = Ledger(Budget.of(steps=3))
    async with accountant(ledger, clock, cpu=cpu) as books:
        clock.now = 2.0
        await books.ask(Settle(1, None, {"steps": 1.0}))
    assert books.journal.calls[0] == ({"steps": 1.0, "wall_seconds": 2.0}, "settle")
    assert ledger.spent == {"steps": 1.0, "wall_seconds": 2.0}
    # Read once, at the start; never at a settlement without a limit.
    assert len(readings) == 1


# -- statistics ------------------------------------------------------------------------------------


async def test_inspect_reports_the_books() -> None:
    clock = FakeClock()
    ledger = Ledger(Budget.of(reserve={"steps": 1}, steps=5), spent={"steps": 1.0})
    async with accountant(ledger, clock, cpu=lambda: 0.0) as books:
        grant = await books.ask(Reserve(1, {"steps": 2.0}))
        assert isinstance(grant, Granted)
        lease = await open_lease(books, 2, {"steps": 1.0})
        clock.now = 4.0
        reply = await books.ask(Inspect(3))
        assert isinstance(reply, Inspected)
        stats = reply.statistics
        assert stats.scope == "task"
        assert stats.spent == {"steps": 1.0}
        assert stats.held == {"steps": 3.0}
        assert stats.remaining == {"steps": 0.0}
        assert stats.remaining_controller == {"steps": 1.0}
        assert stats.leases == (lease,)
        assert reply.running == {
            "wall_seconds": 4.0,
            "working_seconds": 4.0,
            "child_cpu_seconds": 0.0,
        }
        assert not reply.paused
        inner = await books.ask(Inspect(4, lease=lease))
        assert isinstance(inner, Inspected)
        assert inner.statistics.scope == f"lease:{lease}"
        # Inspecting charges nothing.
        assert ledger.spent == {"steps": 1.0}


# -- the journal callback --------------------------------------------------------------------------


async def test_a_callback_without_notes_is_accepted() -> None:
    calls: list[tuple[dict[str, float], str]] = []

    async def record(amounts: Mapping[str, float], kind: str) -> None:
        calls.append((dict(amounts), kind))

    ledger = Ledger(Budget.of(steps=10))
    with capture_logs() as logs:
        async with accountant(ledger, record=record) as books:
            await books.ask(Reserve(1, {"steps": 1.0}))
            await books.ask(RetuneLimit(2, "steps", 12.0, who="ops", why="x"))
    assert calls == [
        ({"steps": 1.0}, "reserve"),
        ({"steps": 12.0}, "retune"),
        ({"wall_seconds": 0.0}, "settle"),
    ]
    assert any(e["event"] == "budget.note" and "by ops" in e["note"] for e in logs)
