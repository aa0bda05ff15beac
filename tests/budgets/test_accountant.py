from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager

import anyio
import attrs
import pytest
from anyio.abc import ObjectReceiveStream, ObjectSendStream

from proctor.budgets import _accountant
from proctor.budgets._accountant import (
    AccountantReply,
    AccountantRequest,
    Deadline,
    Denied,
    Granted,
    Release,
    Reserve,
    Settle,
    Settled,
    run_accountant,
)
from proctor.budgets._budget import Budget, Exhaustion, Ledger


def test_all_names_exist_and_are_documented() -> None:
    assert isinstance(_accountant.__all__, tuple)
    for name in _accountant.__all__:
        assert hasattr(_accountant, name), name
    for name in ("Deadline", "Denied", "Granted", "Release", "Reserve", "Settle", "Settled"):
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

    async def __call__(self, amounts: Mapping[str, float], kind: str) -> None:
        self.calls.append((dict(amounts), kind))


@attrs.define
class Books:
    """The controller's side of a running accountant."""

    requests: ObjectSendStream[AccountantRequest]
    replies: ObjectReceiveStream[AccountantReply]
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
    ledger: Ledger, clock: Callable[[], float] | None = None
) -> AsyncIterator[Books]:
    req_tx, req_rx = anyio.create_memory_object_stream[AccountantRequest](16)
    rep_tx, rep_rx = anyio.create_memory_object_stream[AccountantReply](16)
    journal = Journal()
    done = anyio.Event()

    async def serve() -> None:
        try:
            await run_accountant(ledger, req_rx, rep_tx, journal, clock=clock or FakeClock())
        finally:
            done.set()

    async with anyio.create_task_group() as tg, rep_rx:
        tg.start_soon(serve)
        # The accountant reads its clock when it starts: let it start first.
        await anyio.wait_all_tasks_blocked()
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
        assert books.journal.calls == [({"steps": 1.0, "wall_seconds": 2.5}, "settle")]


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
