"""
The budget accountant task.

It keeps the ledger outside the model: the controller asks it to reserve an
estimate before any spend and to settle the actual spend after; it grants or
refuses, journals every settlement, and announces deadlines on its own.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping

import anyio
import attrs
import structlog
from anyio.abc import ObjectReceiveStream, ObjectSendStream

from proctor.budgets._budget import Exhaustion, Ledger

__all__ = (
    "AccountantReply",
    "AccountantRequest",
    "Deadline",
    "Denied",
    "Granted",
    "Release",
    "Reserve",
    "Settle",
    "Settled",
    "run_accountant",
)

log = structlog.get_logger()


@attrs.frozen
class Reserve:
    """Ask to hold ``amounts`` before spending them. ``controller`` may draw on the reserve."""

    ref: int
    amounts: dict[str, float]
    controller: bool = False


@attrs.frozen
class Settle:
    """Replace reservation ``reservation`` (or nothing) by the actual spend."""

    ref: int
    reservation: int | None
    actual: dict[str, float]


@attrs.frozen
class Release:
    """Drop a reservation that was not spent."""

    ref: int
    reservation: int


@attrs.frozen
class Granted:
    """The reservation fits and is held."""

    ref: int
    reservation: int
    remaining: dict[str, float]


@attrs.frozen
class Denied:
    """The reservation does not fit; nothing was held."""

    ref: int
    exhaustion: Exhaustion


@attrs.frozen
class Settled:
    """The spend was recorded (and journaled)."""

    ref: int
    remaining: dict[str, float]


@attrs.frozen
class Deadline:
    """
    A time limit was reached.

    ``hard`` is False when only the reserve is left (the actor's discretionary
    work stops) and True when the whole limit is gone.
    """

    exhaustion: Exhaustion
    hard: bool = False


AccountantRequest = Reserve | Settle | Release
AccountantReply = Granted | Denied | Settled | Deadline

SpendSink = Callable[[Mapping[str, float], str], Awaitable[None]]


async def run_accountant(
    ledger: Ledger,
    requests: ObjectReceiveStream[AccountantRequest],
    replies: ObjectSendStream[AccountantReply],
    record: SpendSink,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """
    Serve the controller's requests until it closes its side.

    Wall time is charged as it passes, at every settlement, so a run killed
    mid-way leaves its spend in the journal up to its last step.

    Args:
        ledger: the books, with the task's inherited spend.
        requests: the controller's requests.
        replies: where grants, refusals and deadlines go.
        record: journals spend: ``await record(amounts, kind)``.
        clock: a monotonic clock.
    """
    mark = clock()

    def elapsed() -> dict[str, float]:
        nonlocal mark
        now = clock()
        spent, mark = now - mark, now
        return {"wall_seconds": spent}

    async def deadlines() -> None:
        limit = ledger.budget.limits.get("wall_seconds")
        if limit is None:
            return
        reserve = ledger.budget.reserve.get("wall_seconds", 0.0)
        # Without a reserve the first deadline is the whole limit: it is hard.
        stages = ((False, limit - reserve), (True, limit)) if reserve else ((True, limit),)
        for hard, bound in stages:
            left = bound - ledger.spent.get("wall_seconds", 0.0) - (clock() - mark)
            await anyio.sleep(max(0.0, left))
            spent = ledger.spent.get("wall_seconds", 0.0) + (clock() - mark)
            log.info("budget.deadline", limit="wall_seconds", hard=hard, bound=bound)
            await replies.send(Deadline(Exhaustion("wall_seconds", spent, bound), hard))

    async with replies, requests:
        async with anyio.create_task_group() as tg:
            tg.start_soon(deadlines)
            await _serve(ledger, requests, replies, record, elapsed)
            tg.cancel_scope.cancel()
        # The last stretch of wall time belongs to the task too.
        with anyio.move_on_after(5, shield=True):
            await record(elapsed(), "settle")


async def _serve(
    ledger: Ledger,
    requests: ObjectReceiveStream[AccountantRequest],
    replies: ObjectSendStream[AccountantReply],
    record: SpendSink,
    elapsed: Callable[[], dict[str, float]],
) -> None:
    async for request in requests:
        if isinstance(request, Reserve):
            outcome = ledger.reserve(dict(request.amounts), request.controller)
            if isinstance(outcome, Exhaustion):
                log.info("budget.refused", limit=outcome.limit, value=outcome.value)
                await replies.send(Denied(request.ref, outcome))
            else:
                remaining = ledger.remaining(request.controller)
                await replies.send(Granted(request.ref, outcome, remaining))
        elif isinstance(request, Settle):
            actual = {**request.actual}
            for key, value in elapsed().items():
                actual[key] = actual.get(key, 0.0) + value
            ledger.settle(request.reservation, actual)
            await record(actual, "settle")
            await replies.send(Settled(request.ref, ledger.remaining()))
        else:
            ledger.release(request.reservation)
