"""
Sending and receiving on the channels between a run's tasks, without a
scheduling pass when nothing needs to wait.

anyio's ``send`` and ``receive`` yield to the event loop once before they look
at the channel, whether or not the item could go or come at once. A step
crosses the channels several times (a proposal, a grant, an observation), so
those passes were a fifth of a step's CPU time. These helpers take an item that
is already waiting, or put one where there is room, at once, and wait (yielding,
and so open to cancellation) only when they must. Every task of a run still
waits at every step, for its peer or for the journal: none can starve the
others.
"""

from __future__ import annotations

from typing import TypeVar

import anyio
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

__all__ = ("receive", "send")

_T = TypeVar("_T")


async def receive(stream: ObjectReceiveStream[_T]) -> _T:
    """
    Receive the next item: the one waiting, at once, or the next to come.

    Raises:
        anyio.EndOfStream: the sending side is closed and nothing is left.
    """
    if isinstance(stream, MemoryObjectReceiveStream):
        try:
            item: _T = stream.receive_nowait()
        except anyio.WouldBlock:
            pass
        else:
            return item
    return await stream.receive()


async def send(stream: ObjectSendStream[_T], item: _T) -> None:
    """
    Send ``item``: at once if the channel has room, else when it has.

    Raises:
        anyio.BrokenResourceError: the receiving side is closed.
        anyio.ClosedResourceError: this side is closed.
    """
    if isinstance(stream, MemoryObjectSendStream):
        try:
            stream.send_nowait(item)
        except anyio.WouldBlock:
            pass
        else:
            return
    await stream.send(item)
