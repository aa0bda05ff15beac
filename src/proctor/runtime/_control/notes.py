"""
The controller's people in the loop: operators' notes, questions, approvals, stops.

:class:`OperatorNotes` is the part of the
:class:`~proctor.runtime._control.controller.Controller` that a person reaches
while a run goes on: the journaled amendments of the contract and changes of
its limits (applied before the next step, each answered), a question the actor
asked and the answer it waits for, the approval a matching tool call waits for,
and a stop (a signal, or ``proctor stop``). The watcher task beats for the host
and wakes the controller when a note arrives. Only the controller inherits it;
the attributes and the steps it journals are the controller's own.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import Any

import anyio
import attrs
from anyio.abc import ObjectSendStream

from proctor import _channels as channels
from proctor._errors import ProctorError
from proctor._logging import get_logger
from proctor.budgets._accountant import (
    Deadline,
    Pause,
    Rejected,
    Resume,
    Retuned,
    RetuneLimit,
)
from proctor.runtime._control.parts import ControllerParts, Inbound, StopRequest, Wake
from proctor.runtime._control.trace import _claim_event
from proctor.runtime._operator import apply_amendment
from proctor.runtime._progress.judge import Ruling
from proctor.runtime._records import (
    Claim,
    Decision,
    NoteKind,
    ObservationKind,
    SignalEvent,
    StopReason,
    ToolCall,
    UserEvent,
)

__all__ = ("OPERATOR_NOTES", "OperatorNotes")

log = get_logger()


#: The notes a person writes to a running run.
OPERATOR_NOTES = ("stop", "amend", "retune-request", "answer", "approval")


class OperatorNotes(ControllerParts):
    """The controller's methods that read, wait for and answer what people write."""

    async def _retune(self, note_id: int, body: Mapping[str, Any]) -> None:
        """Hand an operator's change of limits to the accountant, one limit at a time."""
        reasons: list[str] = []
        applied = False
        below: StopReason | None = None
        for dimension, limit in body["limits"].items():
            ref = self._next_ref()
            await self.to_accountant.send(
                RetuneLimit(
                    ref,
                    dimension,
                    float(limit),
                    body["who"],
                    body["why"],
                    below_spent=bool(body.get("below_spent", False)),
                )
            )
            reply = await self._reply(ref, (Retuned, Rejected))
            if isinstance(reply, Retuned):
                applied = True
                self.remaining = reply.remaining
                old = reply.retune.old
                was = "no limit" if old is None else f"{old:g}"
                reason = (
                    f"{body['who']} set the {dimension} limit from {was} to "
                    f"{reply.retune.new:g}: {body['why']}"
                )
                left = reply.remaining.get(dimension)
                if left is not None and left <= 0 and below is None:
                    below = StopReason(
                        code=f"limit:{dimension}",
                        message=f"budget exhausted: {body['who']} lowered the {dimension} limit "
                        f"to {reply.retune.new:g}, at or below what is spent: {body['why']}",
                        owner="operator",
                        limit=dimension,
                        bound=reply.retune.new,
                        scope="task",
                    )
            else:
                reason = f"the {dimension} limit was not changed: {reply.reason}"
            await self._record("retune", Ruling(Decision.CONTINUE, False, reason))
            reasons.append(reason)
            self._note = reason
        await self._answer_note(note_id, applied, "; ".join(reasons))
        if below is not None:
            exhausted = below
            await self._wrap_up(
                lambda: self.judge.exhausted(exhausted), SignalEvent(name="deadline")
            )

    async def _answer_note(
        self, note_id: int, applied: bool, message: str, step: int | None = None
    ) -> None:
        """Tell the operator who wrote note ``note_id`` what became of it (at ``step``)."""
        await self.journal.add_note(
            self.run_id,
            "reply",
            {
                "to": note_id,
                "outcome": "applied" if applied else "refused",
                "step": self.step if step is None else step,
                "message": message,
            },
        )

    async def _amendments(self) -> None:
        """
        Apply the operator's journaled amendments of the contract, in order.

        The notes are read only when the last step's write reported a note the
        controller has not seen (or before the first step): an operator's note
        is applied before the step after the one that revealed it.
        """
        newest = self._notes_newest
        if newest is not None and newest <= self._notes_seen:
            return
        kinds = (NoteKind.AMEND, NoteKind.RETUNE_REQUEST)
        notes = await self.journal.notes(self.run_id, after=self._notes_seen, kinds=kinds)
        # Notes up to the step's newest were all read, operators' or not.
        self._notes_seen = max(self._notes_seen, newest or 0)
        if newest is None:
            self._notes_newest = self._notes_seen
        for note in notes:
            self._notes_seen = max(self._notes_seen, note["id"])
            body = note["body"]
            if self.judge.terminal:
                await self._answer_note(note["id"], False, "the run has ended")
                continue
            if note["kind"] == NoteKind.RETUNE_REQUEST:
                await self._retune(note["id"], body)
                continue
            if note["kind"] != NoteKind.AMEND:
                continue
            try:
                self.task = apply_amendment(self.task, body)
            except ProctorError as exc:
                await self._answer_note(note["id"], False, str(exc))
                continue
            self.judge.amend(self.task.facts(self.registry.specs()), self.task.contract_version)
            await self.journal.put_task(
                self.task_id, self.task.goal, self.task.describe(), self.task.contract_version
            )
            reason = (
                f"the contract was amended by {body.get('who', 'an operator')}: "
                f"{body.get('why', '')}; earlier evidence is stale"
            )
            await self._record("amend", Ruling(Decision.CONTINUE, False, reason))
            self._note = reason
            await self._answer_note(note["id"], True, reason)

    def _signal(self, message: StopRequest | Wake) -> None:
        """Take a stop request or a wake-up that arrived while waiting for something else."""
        if isinstance(message, Wake):
            self._notes_newest = None  # read the notes before the next step
            return
        # The design's precedence: an explicit stop signal outranks a user's stop.
        if self._stop is None or (self._stop.name == "user_stop" and message.name == "stop_signal"):
            self._stop = message

    def interrupt(self, request: StopRequest) -> None:
        """
        Stop the run: the call in flight (a long command) is interrupted and its
        effect left uncertain; the controller ends the run ``stopped`` before its
        next step. Safe to call from any task of the run's event loop.
        """
        self._signal(request)
        if self._call_scope is not None:
            self._call_scope.cancel()

    async def _stopped(self, request: StopRequest) -> None:
        """End the run ``stopped``, journaled with who stopped it and why."""
        why, who = request.why.strip(), request.who.strip()
        if who:
            why = f"{why} ({who})" if why else f"by {who}"
        ruling = self.judge.signal(request.name, why)
        await self._record("ended", ruling, event=SignalEvent(name=request.name))

    async def watch(self, inbox: ObjectSendStream[Inbound]) -> None:
        """
        Beat for the run's host and read the operators' notes, until cancelled.

        Every ``heartbeat_seconds`` the journal hears that the host is alive (and
        what the run waits for); every ``poll_seconds`` the run's new operator
        notes are read: a stop interrupts the call in flight, any other note
        wakes the controller if it waits for the actor, an answer or an approval.
        """
        async with inbox:
            beat_due = time.monotonic() + self.heartbeat_seconds
            while True:
                await anyio.sleep(min(self.poll_seconds, max(0.0, beat_due - time.monotonic())))
                try:
                    if time.monotonic() >= beat_due:
                        beat_due = time.monotonic() + self.heartbeat_seconds
                        await self.journal.heartbeat(self.run_id, self.epoch, waiting=self._waiting)
                    notes = await self.journal.notes(
                        self.run_id, after=self._watch_seen, kinds=OPERATOR_NOTES
                    )
                except ProctorError as exc:
                    log.warning("controller.watch_failed", error=str(exc))
                    continue
                for note in notes:
                    self._watch_seen = max(self._watch_seen, note["id"])
                    if note["kind"] == "stop":
                        body = note["body"]
                        request = StopRequest(
                            "user_stop", str(body.get("who", "")), str(body.get("why", ""))
                        )
                        self.interrupt(request)
                        await inbox.send(request)
                    else:
                        await inbox.send(Wake())

    async def _beat(self) -> None:
        """Say now what the run waits for (the heartbeat would say it later)."""
        with contextlib.suppress(ProctorError):
            await self.journal.heartbeat(self.run_id, self.epoch, waiting=self._waiting)

    async def _wait_for(
        self, kind: str, after: int, seconds: float, why: str
    ) -> Mapping[str, Any] | None:
        """
        Wait, working time paused, for an operator's note of ``kind`` after note
        ``after``; None when ``seconds`` passed, the run was stopped or the wall
        clock ran out first (the controller then acts on that).
        """
        self._waiting = kind
        await self._beat()
        await channels.send(self.to_accountant, Pause(self._next_ref(), why))
        try:
            with anyio.move_on_after(seconds):
                while True:
                    found = await self.journal.notes(self.run_id, after=after, kinds=(kind,))
                    if found:
                        return found[0]
                    message = await channels.receive(self.inbox)
                    if isinstance(message, Deadline):
                        self._deadline = message
                        return None
                    if isinstance(message, StopRequest):
                        self._signal(message)
                        return None
                    if isinstance(message, Wake):
                        # An amendment or a retune is applied while the run waits.
                        self._notes_newest = None
                        await self._amendments()
                        if self.judge.terminal:
                            return None
                    else:
                        self._stash.append(message)
            return None
        finally:
            with anyio.move_on_after(5, shield=True):
                self._waiting = None
                await channels.send(self.to_accountant, Resume(self._next_ref()))
                await self._beat()

    async def _ask(self, claim: Claim) -> None:
        """
        A ``needs_input`` claim that names what it must: journal the question and
        wait for a person's answer; past the task's ``answer_wait`` the run ends
        ``needs_input`` as the claim asked.
        """
        question = claim.condition.strip()
        ruling = Ruling(
            Decision.CONTINUE,
            False,
            f"waiting up to {self.task.answer_wait:g} s for an answer: {question}",
        )
        # No trajectory event: a recorded trajectory holds the answer (a user event)
        # or, past the wait, the claim that ended the run.
        await self._record("question", ruling, event=None)
        asked = await self.journal.add_note(
            self.run_id,
            "question",
            {
                "condition": question,
                "evidence": list(claim.evidence),
                "reason": claim.reason,
                "step": self.step,
            },
        )
        log.warning(
            "controller.waiting_for_answer",
            question=question,
            answer=f'proctor answer {self.run_id} "..."',
            wait_seconds=self.task.answer_wait,
        )
        note = await self._wait_for("answer", asked, self.task.answer_wait, f"answer: {question}")
        if note is None:
            if self._stop is not None or self._deadline is not None or self.judge.terminal:
                return
            ruling = self.judge.claim(claim)
            await self._record("claim", ruling, event=_claim_event(claim))
            return
        body = note["body"]
        text, who = str(body.get("text", "")), str(body.get("who", "") or "a person")
        ruling = attrs.evolve(self.judge.user(text), reason=f"{who} answered: {text}")
        await self._record("user", ruling, event=UserEvent(text=text))
        await self._answer_note(note["id"], True, "delivered to the actor")
        await self._observe(
            ObservationKind.ANSWER, f"{who} answered your question ({question}):\n{text}"
        )

    def _approval_needed(self, call: ToolCall) -> bool:
        if not self.task.approvals:
            return False
        return any(rule.matches(call.tool, self._target(call)) for rule in self.task.approvals)

    def _target(self, call: ToolCall) -> str | None:
        """What an approval pattern is matched against: the call's target argument."""
        try:
            spec = self.registry.spec(call.tool)
        except (KeyError, ProctorError):
            return None
        for name in (*spec.targets, *spec.paths, *((spec.source,) if spec.source else ())):
            value = call.args.get(name)
            if isinstance(value, str):
                return value
        return None

    async def _approval(self, call: ToolCall) -> str | None:
        """Wait for a person to approve ``call``; the reason it is refused, or None."""
        target = self._target(call)
        shown = f"{call.tool} {target}" if target is not None else call.tool
        request = await self.journal.add_note(
            self.run_id,
            "approval-request",
            {"tool": call.tool, "args": call.args, "target": target, "step": self.step + 1},
        )
        # A warning: the person at the host's terminal sees it at the default level.
        log.warning(
            "controller.waiting_for_approval",
            call=shown,
            approve=f"proctor approve {self.run_id}",
            deny=f"proctor deny {self.run_id} --why ...",
        )
        note = await self._wait_for(
            "approval", request, self.task.approval_wait, f"approval: {shown}"
        )
        if note is None:
            if self._stop is not None or self._deadline is not None or self.judge.terminal:
                return f"approval: the run is ending; {shown} was not sent"
            return (
                f"approval: no one approved {shown} within {self.task.approval_wait:g} s; "
                "the call was not sent"
            )
        body = note["body"]
        who = str(body.get("who", "") or "an operator")
        if body.get("approved"):
            await self._answer_note(note["id"], True, f"{shown} runs", self.step + 1)
            return None
        why = str(body.get("why", "")).strip() or "no reason given"
        await self._answer_note(
            note["id"], True, f"{shown} was not sent; the actor is told why", self.step + 1
        )
        return f"denied by {who}: {why}; {shown} was not sent"
