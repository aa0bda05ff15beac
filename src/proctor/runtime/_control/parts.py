"""
What the controller's parts share: its inbox's messages and, for the type checker,
the attributes and steps its mixins use.

The controller is one class made of parts (:class:`~.notes.OperatorNotes`, the
people in the loop; :class:`~.endings.Endings`, how a run ends). Each part uses
attributes and steps the controller defines; :class:`ControllerParts` declares
them once, so that the parts and the controller agree on one signature of each.
At run time it is an empty class.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import anyio
import attrs
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from anyio.streams.memory import MemoryObjectSendStream

from proctor.budgets._accountant import AccountantReply, AccountantRequest, Deadline
from proctor.budgets._budget import Exhaustion
from proctor.runtime._actors.base import ActorCrashed, ActorFinished, ActorSpend
from proctor.runtime._effects.ledger import EffectLedger
from proctor.runtime._journal import JournalLike
from proctor.runtime._outcome import Handoff
from proctor.runtime._progress.judge import Act, Judge, Refused, Ruling
from proctor.runtime._records import (
    Observation,
    ObservationKind,
    Proposal,
    ToolCall,
    ToolResult,
    TraceRecord,
    TrajectoryEvent,
)
from proctor.runtime._task import Task
from proctor.runtime._tools.registry import ToolRegistry
from proctor.runtime._tools.spec import ToolSpec
from proctor.verifiers._verifier import VerifyResult

__all__ = ("ControllerParts", "Inbound", "StopRequest", "Wake", "call_amounts")


@attrs.frozen
class StopRequest:
    """
    End the run ``stopped``: a signal to the host (``stop_signal``: SIGTERM) or a
    person (``user_stop``: SIGINT, ``proctor stop``).
    """

    name: Literal["stop_signal", "user_stop"]
    who: str = ""
    why: str = ""


@attrs.frozen
class Wake:
    """An operator's note is in the journal: read the notes before going on."""


Inbound = (
    Proposal
    | ActorFinished
    | ActorCrashed
    | ActorSpend
    | VerifyResult
    | AccountantReply
    | StopRequest
    | Wake
)


def call_amounts(call: ToolCall, spec: ToolSpec | None = None) -> dict[str, float]:
    """What one tool call costs: a call in all, one of its tool, one of its own dimension."""
    amounts = {"tool_calls": 1.0, f"tool_calls:{call.tool}": 1.0}
    if spec is not None and spec.charge is not None:
        amounts[spec.charge] = 1.0
    return amounts


class ControllerParts:
    """The controller's attributes and steps that its parts use, declared once."""

    if not TYPE_CHECKING:
        # The controller is slotted: no instance dictionary through its bases either.
        # (Hidden from mypy, which would then refuse the controller's fields.)
        __slots__ = ()

    if TYPE_CHECKING:
        task: Task
        run_id: str
        task_id: str
        epoch: int
        journal: JournalLike
        judge: Judge
        registry: ToolRegistry
        inbox: ObjectReceiveStream[Inbound]
        to_actor: MemoryObjectSendStream[Observation]
        to_accountant: ObjectSendStream[AccountantRequest]
        actor_scope: anyio.CancelScope
        step: int
        remaining: dict[str, float]
        final_digest: str
        effects: EffectLedger
        handoff: Handoff | None
        answer: str
        cited: tuple[str, ...]
        heartbeat_seconds: float
        poll_seconds: float
        _stash: deque[Inbound]
        _deadline: Deadline | None
        _stop: StopRequest | None
        _actor_done: bool
        _snapshot_step: int
        _notes_seen: int
        _notes_newest: int | None
        _note: str
        _call_scope: anyio.CancelScope | None
        _waiting: str | None
        _watch_seen: int

        def _next_ref(self) -> int: ...

        async def _receive(self) -> Inbound: ...

        async def _reply(
            self,
            ref: int,
            kinds: tuple[type, ...],
            on_stop: Callable[[], Awaitable[None]] | None = None,
        ) -> Any: ...

        async def _settle(self, reservation: int | None, actual: dict[str, float]) -> None: ...

        async def _digest(self, *, full: bool = False) -> str: ...

        async def _record(
            self,
            kind: str,
            ruling: Ruling,
            *,
            action: str | None = None,
            result: ToolResult | None = None,
            event: TrajectoryEvent | None = None,
        ) -> TraceRecord: ...

        async def _observe(
            self,
            kind: ObservationKind,
            text: str,
            results: Sequence[ToolResult] = (),
        ) -> None: ...

        async def _verify(self, report: bool = True) -> None: ...

        def _refusal(self, proposal: Proposal) -> str | None: ...

        async def _dispatch(self, call: ToolCall, *, charged: bool = False) -> Act | Refused: ...

        async def _reserve(
            self, amounts: dict[str, float], controller: bool = False, *, charge: bool = False
        ) -> int | Exhaustion: ...

        async def _exhausted(self, exhaustion: Exhaustion) -> None: ...

        async def _on_deadline(self, deadline: Deadline) -> None: ...

        async def _end(self) -> None: ...

        async def _stopped(self, request: StopRequest) -> None: ...

        def _approval_needed(self, call: ToolCall) -> bool: ...

        async def _approval(self, call: ToolCall) -> str | None: ...

        async def _proposal(self, proposal: Proposal) -> None: ...

        async def _wrap_up(
            self, otherwise: Callable[[], Ruling], event: TrajectoryEvent | None = None
        ) -> None: ...
