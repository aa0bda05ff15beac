from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from proctor import _channels as channels
from proctor.runtime._actors.base import ActorFinished, run_actor
from proctor.runtime._records import Observation, ObservationKind, Proposal, ToolCall


async def test_a_waiting_item_is_received_without_letting_another_task_run() -> None:
    tx, rx = anyio.create_memory_object_stream[int](4)
    ran: list[str] = []
    async with tx, rx, anyio.create_task_group() as tg:
        tg.start_soon(lambda: _note(ran))
        tx.send_nowait(1)
        assert await channels.receive(rx) == 1
        await channels.send(tx, 2)
        assert ran == []  # neither call yielded: the other task has not run yet
        assert await channels.receive(rx) == 2
        # Nothing waiting: receive waits, and the other task runs meanwhile.
        tg.start_soon(_send_later, tx.clone(), 3)
        assert await channels.receive(rx) == 3
        assert ran == ["ran"]


async def test_a_full_channel_makes_send_wait_and_a_closed_one_raises() -> None:
    tx, rx = anyio.create_memory_object_stream[int](1)
    async with anyio.create_task_group() as tg:
        await channels.send(tx, 1)
        tg.start_soon(channels.send, tx, 2)  # waits for room
        await anyio.wait_all_tasks_blocked()
        assert await channels.receive(rx) == 1
        assert await channels.receive(rx) == 2
    await rx.aclose()
    with pytest.raises(anyio.BrokenResourceError):
        await channels.send(tx, 3)
    await tx.aclose()
    with pytest.raises(anyio.ClosedResourceError):
        await channels.receive(rx)


async def test_end_of_stream_is_raised_once_the_sender_is_gone() -> None:
    tx, rx = anyio.create_memory_object_stream[int](1)
    async with rx:
        tx.send_nowait(1)
        await tx.aclose()
        assert await channels.receive(rx) == 1
        with pytest.raises(anyio.EndOfStream):
            await channels.receive(rx)


async def test_the_actor_task_ends_quietly_when_the_controller_stopped_listening() -> None:
    obs_tx, obs_rx = anyio.create_memory_object_stream[Observation](4)
    prop_tx, prop_rx = anyio.create_memory_object_stream[Proposal | ActorFinished](4)
    closed: list[bool] = []

    class Actor:
        async def propose(self, observation: Observation) -> Proposal | None:
            return ToolCall("noop", {})

        async def aclose(self) -> None:
            closed.append(True)

    await prop_rx.aclose()  # the run is over
    async with obs_tx:
        obs_tx.send_nowait(Observation(step=0, kind=ObservationKind.START))
        with anyio.fail_after(5):
            await run_actor(Actor(), obs_rx, prop_tx)  # type: ignore[arg-type]
    assert closed == [True]


async def _note(ran: list[str]) -> None:
    ran.append("ran")


async def _send_later(tx: anyio.abc.ObjectSendStream[int], item: int) -> None:
    async with tx:
        await anyio.lowlevel.checkpoint()
        await tx.send(item)
