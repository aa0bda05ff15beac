"""
The controller's steps for an actor that runs its own tools: a hooked agent.

Claude Code, Codex or gemini-cli run their tools themselves; proctor sees each
call in a hook before it runs and after. :class:`OwnCalls` is the part of the
:class:`~proctor.runtime._control.controller.Controller` that decides those
calls: it charges and admits a call before it runs (the task's fences,
approvals, budgets; a refusal journaled as the call's step), journals the call
and its result after, and ends the run on what the agent itself cannot see (a
budget, a deadline, a stop, the session's end). The hook session
(:mod:`proctor.runtime._hosting.hooks.session`) drives a controller through
these methods and its public attributes only.
"""

from __future__ import annotations

from proctor.budgets._budget import Exhaustion
from proctor.runtime._control.parts import ControllerParts, StopRequest, call_amounts
from proctor.runtime._control.trace import _action_event
from proctor.runtime._progress.judge import Act, Refused, Ruling, normalized_action
from proctor.runtime._records import (
    Completion,
    SignalEvent,
    StopReason,
    ToolCall,
    ToolResult,
    ToolStatus,
)

__all__ = ("OwnCalls",)


class OwnCalls(ControllerParts):
    """Decide the calls of an actor that runs its own tools (a hooked agent)."""

    async def admit_own_call(
        self, call: ToolCall, refusal: str | None = None
    ) -> tuple[str, Ruling] | None:
        """
        Charge a step and decide whether the actor may run ``call`` itself.

        In order: the step is charged (a budget that ran out ends the run); the
        caller's ``refusal`` (a fence only it can see) or the decision core's; an
        approval the task asks for (the call waits for a person; a stop meanwhile
        ends the run); the call's own spend; a deadline that came meanwhile.

        Returns:
            None when the call may run, or when the run ended instead (see
            ``judge.terminal``); otherwise the refusal and its ruling, journaled
            as the call's step.
        """
        charged = await self._reserve({"steps": 1.0}, charge=True)
        if isinstance(charged, Exhaustion):
            await self._exhausted(charged)
            return None
        refusal = refusal or self.judge.admit(call)
        if refusal is None and self._approval_needed(call):
            # The agent waits in its hook, as it would at its own permission prompt.
            refusal = await self._approval(call)
            if self._stop is not None:
                await self._stopped(self._stop)
                return None
        if refusal is None:
            paid = await self._reserve(call_amounts(call), charge=True)
            if isinstance(paid, Exhaustion):
                refusal = f"budget: {paid.describe()}; the call was not sent"
        if refusal is None:
            await self.check_deadline()
            return None
        (ruling,) = self.judge.round([Refused(call, refusal)])
        result = ToolResult(ToolStatus.REFUSED, f"refused: {refusal}")
        await self._journal_call(call, result, ruling, self.judge.digest)
        return refusal, ruling

    async def settle_own_call(self, call: ToolCall, result: ToolResult) -> Ruling:
        """Journal a call the actor ran itself, with its result and the workspace after it."""
        before = self.judge.digest
        after = await self._digest()
        (ruling,) = self.judge.round([Act(call, result, before, after)])
        await self._journal_call(call, result, ruling, after)
        return ruling

    async def _journal_call(
        self, call: ToolCall, result: ToolResult, ruling: Ruling, candidate: str
    ) -> None:
        # The workspace's digest after the call, as a live run's steps have it: an
        # export of a hooked session replays on the real tree's candidates.
        event = _action_event(call, result, None, candidate)
        await self._record(
            "action", ruling, action=normalized_action(call), result=result, event=event
        )

    async def claim_done(self, summary: str) -> None:
        """The actor says it is done: verify the candidate as for any completion."""
        await self._proposal(Completion(summary))

    async def check_deadline(self) -> bool:
        """End the run if the accountant announced a deadline meanwhile; True if it ended."""
        deadline = self._deadline
        if deadline is not None and not self.judge.terminal:
            await self._on_deadline(deadline)
        return self.judge.terminal

    async def exhaust(self, reason: StopReason) -> None:
        """End the run on a limit only the host counts (verified first, as any exhaustion)."""
        await self._wrap_up(lambda: self.judge.exhausted(reason), SignalEvent(name="deadline"))

    async def actor_gone(self) -> None:
        """The actor's session ended before the run had a disposition: verify, else fail."""
        if not self.judge.terminal:
            await self._wrap_up(
                lambda: self.judge.fail(
                    "actor_finished",
                    "the agent's session ended before the run reached a disposition",
                )
            )

    async def fail_run(self, code: str, message: str) -> None:
        """End the run ``failed`` (a price the host could not charge, say)."""
        await self._record("ended", self.judge.fail(code, message))

    async def stop_run(self, request: StopRequest) -> None:
        """End the run ``stopped``, as a signal or ``proctor stop`` would."""
        await self._stopped(request)

    async def end_run(self) -> None:
        """Journal the end of a run the decision core has ended: handoff, snapshot, fence."""
        await self._end()
