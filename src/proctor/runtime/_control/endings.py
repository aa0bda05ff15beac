"""
The controller's endings: a wrap-up verification, exhausted budgets, the end of a run.

:class:`Endings` is the part of the
:class:`~proctor.runtime._control.controller.Controller` that ends a run: a
budget or a deadline that ran out (verified with the controller's reserve
first, when the task has checks), and the end itself: the handoff, the final
snapshot, the fence in the journal, the actor told, and whatever it still sends
refused. Only the controller inherits it; the attributes and the steps it
journals are the controller's own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import anyio

from proctor._wire import converter, to_jsonable
from proctor.budgets._accountant import Deadline
from proctor.budgets._budget import Exhaustion
from proctor.runtime._actors.base import ActorCrashed, ActorFinished
from proctor.runtime._control.history import save_snapshot, snapshot_due
from proctor.runtime._control.parts import ControllerParts, Inbound
from proctor.runtime._control.trace import _handoff
from proctor.runtime._progress.judge import Refused, Ruling, normalized_action
from proctor.runtime._records import (
    ActionEvent,
    Claim,
    Completion,
    Decision,
    Message,
    Observation,
    ObservationKind,
    Round,
    SignalEvent,
    StopReason,
    ToolCall,
    ToolResult,
    ToolStatus,
    TraceRecord,
    TrajectoryEvent,
)
from proctor.verifiers._evidence import Evidence

__all__ = ("AFTER_END_LIMIT", "AFTER_END_WAIT", "Endings")

#: How many proposals an actor may still send after the run ended; each is refused.
AFTER_END_LIMIT = 16
#: How long the controller waits for each of them.
AFTER_END_WAIT = 2.0


class Endings(ControllerParts):
    """The controller's methods that end a run."""

    async def _wrap_up(
        self, otherwise: Callable[[], Ruling], event: TrajectoryEvent | None = None
    ) -> None:
        """Verify the candidate with the controller's reserve; end otherwise if it fails."""
        if self.task.kind == "build" and self.task.checks:
            await self._verify(report=False)
        # A stop during that verification ends the run stopped instead.
        if not self.judge.terminal and self._stop is None:
            await self._record("ended", otherwise(), event=event)

    async def _exhausted(self, exhaustion: Exhaustion) -> None:
        reason = StopReason(
            code=f"limit:{exhaustion.limit}",
            message=f"budget exhausted: {exhaustion.describe()}",
            owner="operator",
            limit=exhaustion.limit,
            value=exhaustion.value,
            bound=exhaustion.bound,
            scope=exhaustion.scope,
        )
        await self._wrap_up(lambda: self.judge.exhausted(reason), SignalEvent(name="deadline"))

    async def _on_deadline(self, deadline: Deadline) -> None:
        self._deadline = None
        if deadline.hard:
            reason = StopReason(
                code=f"limit:{deadline.exhaustion.limit}",
                message=f"deadline: {deadline.exhaustion.describe()}",
                owner="operator",
                limit=deadline.exhaustion.limit,
                value=deadline.exhaustion.value,
                bound=deadline.exhaustion.bound,
                scope=deadline.exhaustion.scope,
            )
            await self._record(
                "ended", self.judge.exhausted(reason), event=SignalEvent(name="deadline")
            )
            return
        await self._exhausted(deadline.exhaustion)

    async def _end(self) -> None:
        """Fence the run, tell the actor, refuse whatever it still sends."""
        assert self.judge.disposition is not None
        self.final_digest = await self._digest(full=True)
        # Charge the time since the last settlement first: the handoff's spend is
        # the run's whole spend, not what it was at the last step.
        await self._settle(None, {})
        spend = await self.journal.spend_totals(self.task_id)
        # The task's evidence, from every run: a resumed run hands off what it inherited.
        records = await self.journal.evidence(task_id=self.task_id)
        evidence = [converter.structure(r, Evidence) for r in records]
        self.handoff = _handoff(
            self.run_id,
            self.judge,
            self.effects,
            spend,
            self.final_digest,
            evidence,
            sandboxed=self.task.sandbox.mode != "off",
            answer=self.answer,
            cited=tuple(self.cited),
            answer_task=self.task.kind == "answer",
        )
        await self._snapshot()
        # From here on the journal itself refuses effect dispatches for this run.
        await self.journal.end_run(
            self.run_id,
            self.epoch,
            disposition=self.judge.disposition.value,
            stop_reason=to_jsonable(self.judge.stop_reason) if self.judge.stop_reason else None,
            candidate_digest=self.final_digest,
            handoff=to_jsonable(self.handoff),
        )
        ended = Observation(
            step=self.step,
            kind=ObservationKind.ENDED,
            text=f"the run has ended: {self.judge.disposition.value}"
            + (f" ({self.judge.stop_reason.message})" if self.judge.stop_reason else ""),
            remaining=dict(self.remaining),
            disposition=self.judge.disposition,
        )
        # An actor still busy with an earlier observation is not waited for.
        with contextlib.suppress(
            anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError
        ):
            self.to_actor.send_nowait(ended)
        with anyio.move_on_after(AFTER_END_WAIT * AFTER_END_LIMIT):
            # A stopped run does not wait for the actor: a person asked it to end now.
            drain = 0 if self._actor_done or self._stop is not None else AFTER_END_LIMIT
            for _ in range(drain):
                with anyio.move_on_after(AFTER_END_WAIT) as scope:
                    message = await self._receive()
                if scope.cancelled_caught or isinstance(message, ActorFinished | ActorCrashed):
                    break
                await self._refuse_after_end(message)
        self.actor_scope.cancel()

    async def _refuse_after_end(self, message: Inbound) -> None:
        """Refuse a proposal the actor sent after the run ended (anything else is dropped)."""
        bad = (
            self._refusal(message)
            if isinstance(message, ToolCall | Round | Message | Completion | Claim)
            else None
        )
        if bad is not None:
            ruling = Ruling(Decision.REFUSE, False, f"the run has ended; {bad}")
            await self._record("refused", ruling, event=None)
            await self._observe(ObservationKind.REFUSAL, ruling.reason)
        elif isinstance(message, ToolCall | Round):
            calls = (message,) if isinstance(message, ToolCall) else message.calls
            for call in calls:
                refused = await self._dispatch(call)
                assert isinstance(refused, Refused)
                ruling = Ruling(Decision.REFUSE, False, refused.reason)
                result = ToolResult(ToolStatus.REFUSED, f"refused: {refused.reason}")
                await self._record(
                    "action",
                    ruling,
                    action=normalized_action(call),
                    result=result,
                    event=None,
                )
                await self._observe(ObservationKind.REFUSAL, refused.reason, [result])
        elif isinstance(message, Message | Completion | Claim):
            ruling = Ruling(Decision.REFUSE, False, "the run has ended")
            await self._record("message", ruling, event=None)
            await self._observe(ObservationKind.REFUSAL, "the run has ended")

    async def _snapshot(self, record: TraceRecord | None = None) -> None:
        """
        Journal the decision core for a later resume: at the end of the run (no
        ``record``), and every ``SNAPSHOT_EVERY`` steps (``record``: the step just
        journaled) until it has a disposition (the end's snapshot covers the rest).
        """
        if record is None:
            await save_snapshot(self.journal, self.run_id, self.judge, self.step, final=True)
        elif not self.judge.terminal and snapshot_due(self.step, self._snapshot_step):
            self._snapshot_step = self.step
            round_id = record.event.round if isinstance(record.event, ActionEvent) else None
            await save_snapshot(self.journal, self.run_id, self.judge, self.step, round_id=round_id)
