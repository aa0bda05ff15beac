"""
The controller task, and :func:`run`, which wires the four tasks of a run.

The controller is the only writer of run state and the only owner of
termination. It admits or refuses every proposal, reserves budget before any
spend, journals the intent of an effectful call before the tool runs, journals
every step before it reports it, asks the verifier, and decides the
disposition (through the decision core, :class:`~proctor.runtime._progress.judge.Judge`).

Channels (bounded memory-object streams)::

    actor ── proposals ──> controller inbox <── evidence ── verifier
    actor <── observations ── controller ── verify requests ──> verifier
                 controller ── reserve/settle ──> accountant ── grants, deadlines ──> inbox
"""

from __future__ import annotations

import contextlib
import functools
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import attrs
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from anyio.streams.memory import MemoryObjectSendStream

from proctor import _channels as channels
from proctor._boundary import Limits, check_plain
from proctor._errors import (
    BudgetError,
    CandidateTooLarge,
    EffectError,
    FencedError,
    InputRefused,
    WorkspaceError,
)
from proctor._fs import remove_tree
from proctor._logging import get_logger
from proctor._wire import to_jsonable
from proctor.budgets._accountant import (
    AccountantRequest,
    Deadline,
    Denied,
    Granted,
    Release,
    Reserve,
    Settle,
    Settled,
)
from proctor.budgets._bucket import backoff
from proctor.budgets._budget import Exhaustion
from proctor.budgets._usage import Usage
from proctor.runtime._actors.base import ActorCrashed, ActorFinished, ActorSpend
from proctor.runtime._effects.ledger import (
    EffectLedger,
    EffectState,
    Target,
    args_hash,
    effect_key,
    file_digests,
    idempotency_key,
    reconcile,
    reconciler_for,
    target_of,
    verdict_state,
)
from proctor.runtime._journal import JournalLike
from proctor.runtime._outcome import Handoff
from proctor.runtime._progress.judge import Act, Judge, Refused, Ruling, Verdict
from proctor.runtime._progress.normalize import fingerprint, prepare
from proctor.runtime._records import (
    Claim,
    Completion,
    Decision,
    Message,
    MessageKind,
    Observation,
    ObservationKind,
    Proposal,
    RefusedEvent,
    Round,
    ToolCall,
    ToolResult,
    ToolStatus,
    TraceRecord,
    TrajectoryEvent,
    UserEvent,
    VerdictEvent,
)
from proctor.runtime._task import Task
from proctor.runtime._tools.registry import ToolContext, ToolRegistry, call_tool, check_call
from proctor.runtime._tools.spec import ToolSpec
from proctor.verifiers._candidate import TreeHasher, freeze_known, snapshot_directory
from proctor.verifiers._evidence import Evidence
from proctor.verifiers._index import Manifest, Node
from proctor.verifiers._more_checks import CheckContext
from proctor.verifiers._pin import in_place as verifiable_in_place
from proctor.verifiers._pin import pinned_digest
from proctor.verifiers._verifier import AbandonVerify, VerifierInbound, VerifyRequest, VerifyResult

__all__ = (
    "CallCallback",
    "Controller",
    "Inbound",
    "StepCallback",
    "StopRequest",
    "Wake",
    "proposal_refusal",
)

from proctor.runtime._control.endings import Endings
from proctor.runtime._control.notes import OperatorNotes
from proctor.runtime._control.own_calls import OwnCalls
from proctor.runtime._control.parts import Inbound, StopRequest, Wake, call_amounts
from proctor.runtime._control.trace import (
    _action_event,
    _claim_event,
    _describe,
    _excerpt,
    _message_event,
    briefing,
)

log = get_logger()

StepCallback = Callable[[TraceRecord], None]

#: Called with the step number and the call just before a tool call runs (a live view).
CallCallback = Callable[[int, ToolCall], None]

#: How often a write found not applied is sent again (with the same key).
MAX_EFFECT_RETRIES = 3


def _plain(proposal: Proposal) -> dict[str, Any]:
    """A proposal as the plain data its fields hold, for the boundary's check."""
    if isinstance(proposal, ToolCall):
        return {"tool": proposal.tool, "args": proposal.args, "poll": proposal.poll}
    if isinstance(proposal, Round):
        return {"calls": [_plain(call) for call in proposal.calls]}
    if isinstance(proposal, Message):
        return {
            "text": proposal.text,
            "sources": list(proposal.sources),
            "blockers": list(proposal.blockers),
        }
    if isinstance(proposal, Completion):
        return {"summary": proposal.summary}
    return {
        "condition": proposal.condition,
        "evidence": list(proposal.evidence),
        "reason": proposal.reason,
    }


def _typed(proposal: Proposal) -> str | None:
    """What is wrong with the types of a proposal's fields (a Python actor may send anything)."""
    calls: Sequence[Any] = ()
    if isinstance(proposal, ToolCall):
        calls = (proposal,)
    elif isinstance(proposal, Round):
        if not isinstance(proposal.calls, tuple | list) or not proposal.calls:
            return "a round must hold at least one tool call"
        calls = proposal.calls
        if not all(isinstance(call, ToolCall) for call in calls):
            return "a round holds only tool calls"
    for call in calls:
        if not isinstance(call.tool, str) or not call.tool:
            return f"a tool call names its tool by a non-empty string, not {call.tool!r}"
        if not isinstance(call.args, dict):
            return f"a tool call's arguments are a JSON object, not {type(call.args).__name__}"
        if not isinstance(call.poll, bool):
            return "a tool call's poll is true or false"
    texts: dict[str, Any] = {}
    if isinstance(proposal, Message):
        texts = {"text": proposal.text, "sources": proposal.sources, "blockers": proposal.blockers}
    elif isinstance(proposal, Completion):
        texts = {"summary": proposal.summary}
    elif isinstance(proposal, Claim):
        texts = {"condition": proposal.condition, "evidence": proposal.evidence}
        texts["reason"] = proposal.reason
    for name, value in texts.items():
        if isinstance(value, str):
            continue
        if not isinstance(value, tuple | list) or not all(isinstance(v, str) for v in value):
            return f"{name} must be text (or a list of texts), not {type(value).__name__}"
    return None


def proposal_refusal(proposal: Proposal, registry: ToolRegistry, limits: Limits) -> str | None:
    """
    Why a proposal cannot cross the controller's boundary, or None.

    Whatever the actor (any kind: scripted, a function, a model, a process, an
    MCP client) sent is checked before anything uses it: field types, plain data
    (finite numbers, 64-bit integers, no lone surrogates, bounded nesting and
    size), and the limits of its tool (command length, file size).

    Args:
        proposal: what the actor sent.
        registry: the tools on offer (their declarations).
        limits: the size limits.
    """
    problem = _typed(proposal)
    if problem is not None:
        return f"refused: {problem}"
    try:
        check_plain(_plain(proposal), limits, "proposal")
    except InputRefused as exc:
        return f"refused: {exc}"
    calls: Sequence[ToolCall] = ()
    if isinstance(proposal, ToolCall):
        calls = (proposal,)
    elif isinstance(proposal, Round):
        calls = proposal.calls
    for call in calls:
        problem = check_call(registry.spec(call.tool), call.args, limits)
        if problem is not None:
            return f"refused: {call.tool}: {problem}"
    return None


@attrs.define(eq=False)
class Controller(Endings, OperatorNotes, OwnCalls):
    """
    The controller of one run. Create it through :func:`run`.

    Args:
        task: the task.
        run_id: this run.
        task_id: the task's identity.
        epoch: this run's epoch; every journal write is fenced by it.
        journal: the journal.
        judge: the decision core.
        registry: the tools on offer.
        context: what the tools need.
        hasher: the workspace's incremental tree hasher.
        inbox: everything sent to the controller.
        to_actor: observations for the actor.
        to_verifier: verification requests.
        to_accountant: budget requests.
        actor_scope: cancels the actor's task when the run is over.
        on_step: called with every trace record, after it is journaled.
        on_call: called with the step number and the call, just before an
            admitted tool call runs.
    """

    task: Task
    run_id: str
    task_id: str
    epoch: int
    journal: JournalLike
    judge: Judge
    registry: ToolRegistry
    context: ToolContext
    hasher: TreeHasher
    inbox: ObjectReceiveStream[Inbound]
    to_actor: MemoryObjectSendStream[Observation]
    to_verifier: ObjectSendStream[VerifierInbound]
    to_accountant: ObjectSendStream[AccountantRequest]
    actor_scope: anyio.CancelScope
    on_step: StepCallback | None = None
    on_call: CallCallback | None = None
    trace_id: str = attrs.field(factory=lambda: uuid.uuid4().hex)
    step: int = 0
    remaining: dict[str, float] = attrs.field(factory=dict)
    evidence: list[Evidence] = attrs.field(factory=list)
    _stash: deque[Inbound] = attrs.field(factory=deque)
    _ref: int = 0
    _deadline: Deadline | None = None
    _sequence: int = 0
    final_digest: str = ""
    estimate: Callable[[Observation], Usage] | None = None
    _model_grant: int | None = None
    _short: Exhaustion | None = None
    effects: EffectLedger = attrs.field(factory=EffectLedger)
    step_base: int = 0
    baseline: Mapping[str, str] | Manifest = attrs.field(factory=dict)
    # What the verifier needs besides the baseline's digests: the checks' sandbox,
    # the baseline's protected and harness files, its per-test results.
    check_context: CheckContext = attrs.field(factory=CheckContext)
    # Candidates this controller had judged: a verdict it did not write (an
    # earlier run's, or a forged row) is never enough to complete.
    _judged_here: set[tuple[str, str]] = attrs.field(factory=set)
    _notes_seen: int = 0
    _snapshot_step: int = 0
    # The run's newest note id as the last step's write read it; None: not known.
    _notes_newest: int | None = None
    _note: str = ""
    _actor_done: bool = False
    handoff: Handoff | None = None
    #: How often the host says it is alive, and how often it reads operators' notes.
    heartbeat_seconds: float = 5.0
    poll_seconds: float = 0.5
    _stop: StopRequest | None = None
    _call_scope: anyio.CancelScope | None = None
    _waiting: str | None = None
    _watch_seen: int = 0
    # The answer that ended the run, and the fetched sources it cites.
    answer: str = ""
    cited: tuple[str, ...] = ()

    # -- plumbing ---------------------------------------------------------------

    def _next_ref(self) -> int:
        self._ref += 1
        return self._ref

    async def _receive(self) -> Inbound:
        if self._stash:
            return self._stash.popleft()
        return await channels.receive(self.inbox)

    async def _reply(
        self,
        ref: int,
        kinds: tuple[type, ...],
        on_stop: Callable[[], Awaitable[None]] | None = None,
    ) -> Any:
        """
        Wait for the reply to request ``ref``; keep anything else for later.

        ``on_stop`` is awaited once, when the run is stopped while it waits (to
        ask for a prompt reply: the verifier abandons the checks it runs).
        """
        while True:
            if on_stop is not None and self._stop is not None:
                await on_stop()
                on_stop = None
            message = await channels.receive(self.inbox)
            if isinstance(message, Deadline):
                self._deadline = message
                continue
            if isinstance(message, StopRequest | Wake):
                self._signal(message)
                continue
            if isinstance(message, kinds) and getattr(message, "ref", None) == ref:
                return message
            self._stash.append(message)

    async def _reserve(
        self, amounts: dict[str, float], controller: bool = False, *, charge: bool = False
    ) -> int | Exhaustion:
        """Reserve ``amounts``; with ``charge``, spend them at once if they fit."""
        ref = self._next_ref()
        await channels.send(self.to_accountant, Reserve(ref, amounts, controller, charge=charge))
        reply = await self._reply(ref, (Granted, Denied))
        if isinstance(reply, Denied):
            return reply.exhaustion
        self.remaining = reply.remaining
        return int(reply.reservation)

    async def _settle(self, reservation: int | None, actual: dict[str, float]) -> None:
        ref = self._next_ref()
        await channels.send(self.to_accountant, Settle(ref, reservation, actual))
        reply: Settled = await self._reply(ref, (Settled,))
        self.remaining = reply.remaining

    async def _digest(self, *, full: bool = False) -> str:
        """
        The workspace's digest now: from the kernel's changes, or walked in ``full``.

        A digest that evidence is bound to, or that the end of a run is judged
        by, is always walked: the kernel cannot report every kind of write.
        """
        # Nothing reported and nothing to read again: no thread for it.
        known = None if full else self.hasher.unchanged()
        if known is not None:
            return known
        return await anyio.to_thread.run_sync(functools.partial(self.hasher.digest, full=full))

    # -- journal ------------------------------------------------------------------

    async def _record(
        self,
        kind: str,
        ruling: Ruling,
        *,
        action: str | None = None,
        result: ToolResult | None = None,
        event: TrajectoryEvent | None = None,
    ) -> TraceRecord:
        """Journal one step; only then may it be reported."""
        self.step += 1
        fp = ruling.result_fingerprint
        if fp is None and result is not None:
            fp = fingerprint(result.output)
        record = TraceRecord(
            trace_id=self.trace_id,
            run_id=self.run_id,
            step=self.step,
            kind=kind,
            action=action,
            tool_status=result.status if result is not None else None,
            result_fingerprint=fp,
            state_version=self.judge.state_version,
            state_delta=ruling.delta,
            remaining=dict(self.remaining),
            decision=ruling.decision,
            progress=ruling.progress,
            reason=ruling.reason,
            stop_reason=ruling.stop_reason,
            disposition=ruling.disposition,
            policy_version=self.judge.policy_version,
            at=time.time(),
            event=event,
        )
        self._notes_newest = await self.journal.append_step(
            self.run_id, self.epoch, to_jsonable(record)
        )
        log.info(
            "controller.step",
            step=self.step,
            kind=kind,
            decision=ruling.decision.value,
            reason=ruling.reason,
        )
        if self.on_step is not None:
            self.on_step(record)
        await self._snapshot(record)
        return record

    async def _observe(
        self,
        kind: ObservationKind,
        text: str,
        results: Sequence[ToolResult] = (),
    ) -> None:
        if self.estimate is not None and self.judge.disposition is None:
            # Reserve the actor's next model call before asking for it.
            probe = Observation(step=self.step, kind=kind, text=text, results=tuple(results))
            amounts = self.estimate(probe).amounts(self.task.prices)
            if self._model_grant is not None:
                # The last turn reported no use of what was held for it.
                await self._release(self._model_grant)
                self._model_grant = None
            if any(amounts.values()):
                grant = await self._reserve(dict(amounts))
                if isinstance(grant, Exhaustion):
                    self._short = grant
                    return
                self._model_grant = grant
        if self._note:
            text, self._note = f"{self._note}\n{text}", ""
        observation = Observation(
            step=self.step,
            kind=kind,
            text=text,
            results=tuple(results),
            remaining=dict(self.remaining),
            disposition=self.judge.disposition,
        )
        # If the actor is gone, the controller decides on without it.
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await channels.send(self.to_actor, observation)

    # -- the loop -----------------------------------------------------------------

    async def run(self, greeting: str = "", *, answer: str | None = None) -> None:
        """
        Drive the run until it has a disposition, then fence and drain.

        Args:
            greeting: for a resumed run, the summary of its history.
            answer: for a resumed run, a person's answer to the question its
                parent ended on: journaled as a ``user`` event, told to the actor.
        """
        greeting += await self._recover_effects()
        if answer is not None:
            ruling = attrs.evolve(self.judge.user(answer), reason=f"a person answered: {answer}")
            await self._record("user", ruling, event=UserEvent(text=answer))
            greeting += f"\nA person answered the question the last run ended on:\n{answer}"
        intro = briefing(self.task, self.registry.names())
        await self._observe(
            ObservationKind.RESUME if greeting else ObservationKind.START,
            f"{intro}\n{greeting}" if greeting else intro,
        )
        while not self.judge.terminal:
            if self._stop is not None:
                await self._stopped(self._stop)
                continue
            await self._amendments()
            if self.judge.terminal:
                continue
            if self._deadline is not None:
                await self._on_deadline(self._deadline)
                continue
            if self._short is not None:
                # The actor's next model call does not fit: it was never told to make it.
                short, self._short = self._short, None
                await self._exhausted(short)
                continue
            message = await self._receive()
            if isinstance(message, Deadline):
                self._deadline = message
            elif isinstance(message, ActorFinished):
                self._actor_done = True
                if self._stop is not None:
                    continue  # stopped: the actor went away because of it
                await self._wrap_up(
                    lambda: self.judge.fail(
                        "actor_finished",
                        "the actor stopped proposing before the run reached a disposition",
                    ),
                )
            elif isinstance(message, ActorCrashed):
                self._actor_done = True
                ruling = self.judge.fail("actor_crashed", f"the actor crashed: {message.error}")
                await self._record("ended", ruling, event=None)
            elif isinstance(message, ActorSpend):
                await self._actor_spend(message)
            elif isinstance(message, StopRequest | Wake):
                self._signal(message)
            elif isinstance(message, ToolCall | Round | Message | Completion | Claim):
                await self._proposal(message)
            # Stray replies (none are expected) are dropped.
        await self._end()

    async def _actor_spend(self, spend: ActorSpend) -> None:
        """Settle what the actor's last turn used against what was reserved for it."""
        amounts: dict[str, float] = {}
        if spend.usage is not None:
            try:
                amounts.update(spend.usage.amounts(self.task.prices))
            except BudgetError as exc:
                await self._record("ended", self.judge.fail("unknown_price", str(exc)))
                return
        if spend.retries:
            amounts["retries"] = float(spend.retries)
        grant, self._model_grant = self._model_grant, None
        await self._settle(grant, amounts)

    async def _interruptible(self, call: ToolCall) -> ToolResult:
        """Call a tool; a stop interrupts it, and its outcome is then uncertain."""
        if self._stop is not None:
            return ToolResult(ToolStatus.REFUSED, "refused: the run is stopping")
        with anyio.CancelScope() as scope:
            self._call_scope = scope
            try:
                return await call_tool(self.registry, self.context, call.tool, call.args)
            finally:
                self._call_scope = None
        return ToolResult(
            ToolStatus.UNCERTAIN,
            "interrupted: the run was stopped while the call ran; its effect is uncertain",
        )

    def _refusal(self, proposal: Proposal) -> str | None:
        return proposal_refusal(proposal, self.registry, self.task.limits)

    async def _refuse(self, reason: str) -> None:
        """
        Refuse a proposal at the boundary: a step spent, journaled, and counted by
        the decision core as a step without progress (refusals repeated end the
        run ``no_progress``, budget or not).
        """
        charged = await self._reserve({"steps": 1.0}, charge=True)
        if isinstance(charged, Exhaustion):
            await self._exhausted(charged)
            return
        ruling = self.judge.refusal(reason)
        record = await self._record("refused", ruling, event=RefusedEvent(reason=reason))
        await self._report(record, ruling)

    async def _proposal(self, proposal: Proposal) -> None:
        refusal = self._refusal(proposal)
        if refusal is not None:
            await self._refuse(refusal)
            return
        # A step is charged as soon as it is granted (if the host dies during it,
        # the turn is still spent): one round trip to the accountant. A lone read
        # is charged with it; a call that does not fit is reserved on its own
        # instead, and refused as any other.
        lone = self._lone_read(proposal)
        amounts = {"steps": 1.0} | (
            call_amounts(lone, self.registry.spec(lone.tool)) if lone is not None else {}
        )
        charged = await self._reserve(amounts, charge=True)
        if isinstance(charged, Exhaustion) and lone is not None and charged.limit != "steps":
            lone = None
            charged = await self._reserve({"steps": 1.0}, charge=True)
        if isinstance(charged, Exhaustion):
            await self._exhausted(charged)
            return
        if isinstance(proposal, ToolCall | Round):
            calls = (proposal,) if isinstance(proposal, ToolCall) else proposal.calls
            await self._calls(calls, charged=lone is not None)
        elif isinstance(proposal, Message):
            ruling = self.judge.message(proposal)
            answers = (MessageKind.FINAL_ANSWER, MessageKind.PARTIAL_ANSWER)
            if ruling.decision is Decision.STOP and proposal.kind in answers:
                self.answer = proposal.text
                self.cited = tuple(s for s in proposal.sources if s in self.judge.fetched)
            record = await self._record("message", ruling, event=_message_event(proposal))
            build = self.task.kind == "build"
            if proposal.kind is MessageKind.FINAL_ANSWER and build and not self.judge.terminal:
                await self._verify()
                return
            await self._report(record, ruling)
        elif isinstance(proposal, Completion):
            message = Message(MessageKind.FINAL_ANSWER, proposal.summary)
            ruling = self.judge.message(message)
            record = await self._record("completion", ruling, event=_message_event(message))
            if self.judge.terminal:
                await self._report(record, ruling)
                return
            await self._verify()
        else:
            if self.judge.actions == 0 and self.task.kind == "build" and self.task.checks:
                # Evidence "already obtained" with nothing tried: every permitted path was
                # skipped. Counted as a step without progress; exported as a refused
                # event, so that a replay decides it the same.
                reason = (
                    "claim refused: nothing was tried yet; read the relevant files and run "
                    "the checks first, then claim with the evidence they gave"
                )
                ruling = self.judge.refusal(reason)
                refused = RefusedEvent(reason=reason)
                await self._report(await self._record("claim", ruling, event=refused), ruling)
                return
            if (
                proposal.status == "needs_input"
                and self.task.answer_wait > 0
                and not self.judge.claim_missing(proposal)
            ):
                await self._ask(proposal)
                return
            ruling = self.judge.claim(proposal)
            record = await self._record("claim", ruling, event=_claim_event(proposal))
            await self._report(record, ruling)

    async def _report(self, record: TraceRecord, ruling: Ruling) -> None:
        if ruling.decision is Decision.STOP:
            return  # the end is reported once, by _end
        kind = {
            Decision.NUDGE: ObservationKind.NUDGE,
            Decision.REFUSE: ObservationKind.REFUSAL,
        }.get(ruling.decision, ObservationKind.NOTE)
        await self._observe(kind, ruling.reason)

    # -- tool calls -----------------------------------------------------------------

    def _lone_read(self, proposal: Proposal) -> ToolCall | None:
        """Return the proposal if it is one call that will run and changes nothing."""
        if not isinstance(proposal, ToolCall) or self.judge.admit(proposal) is not None:
            return None
        if self._approval_needed(proposal):
            return None
        return None if self.registry.spec(proposal.tool).effectful else proposal

    async def _calls(self, calls: Sequence[ToolCall], *, charged: bool = False) -> None:
        """Run a turn's calls; a ``charged`` lone call was charged with its step."""
        items: list[Act | Refused] = []
        results: list[ToolResult] = []
        round_id = f"r{self.step + 1}" if len(calls) > 1 else None
        for call in calls:
            item = await self._dispatch(call, charged=charged)
            items.append(item)
            results.append(
                item.result
                if isinstance(item, Act)
                else ToolResult(ToolStatus.REFUSED, f"refused: {item.reason}")
            )
        candidate = self.judge.digest
        rulings = self.judge.round(items)
        last: Ruling | None = None
        for item, result, ruling in zip(items, results, rulings, strict=True):
            action = self.judge.recorded_action(item.call)
            if isinstance(item, Act) and item.after != item.before:
                candidate = item.after
            event = _action_event(item.call, result, round_id, candidate)
            await self._record("action", ruling, action=action, result=result, event=event)
            last = ruling
        if self.judge.terminal:
            return
        notes = [r.reason for r in rulings if r.decision in (Decision.NUDGE, Decision.REFUSE)]
        assert last is not None
        kind = ObservationKind.NUDGE if last.decision is Decision.NUDGE else ObservationKind.RESULT
        text = "\n".join(_describe(i.call, r) for i, r in zip(items, results, strict=True))
        if notes:
            text += "\n" + "\n".join(notes)
        await self._observe(kind, text, results)

    async def _dispatch(self, call: ToolCall, *, charged: bool = False) -> Act | Refused:
        """
        Run one call, or refuse it. The completion fence is checked here, first.
        A ``charged`` call (a lone read) was admitted and charged with its step,
        just before, with nothing decided in between.
        """
        if not charged:
            if self.judge.terminal:
                return Refused(call, f"fence: the run has ended ({self.judge.disposition})")
            refusal = self.judge.admit(call)
            if refusal is not None:
                return Refused(call, refusal)
            if self._approval_needed(call):
                refusal = await self._approval(call)
                if refusal is not None:
                    return Refused(call, refusal)
        spec = self.registry.spec(call.tool)
        amounts = call_amounts(call, spec)
        if self.on_call is not None:
            self.on_call(self.step + 1, call)
        if spec.effectful:
            # Charged when its intent is journaled; not if it is refused before.
            grant = await self._reserve(amounts)
            if isinstance(grant, Exhaustion):
                return Refused(call, f"budget: {grant.describe()}; the call was not sent")
            before = self.judge.digest
            outcome = await self._effect(call, spec, grant, amounts)
        else:
            # A call is charged before it is made: a host that dies during it still paid.
            if not charged:
                paid = await self._reserve(amounts, charge=True)
                if isinstance(paid, Exhaustion):
                    return Refused(call, f"budget: {paid.describe()}; the call was not sent")
            before = self.judge.digest
            outcome = await self._interruptible(call)
        if isinstance(outcome, Refused):
            return outcome
        if len(outcome.output) >= 8_192:
            # Normalizing a large output is CPU work: off the event loop, so that
            # the accountant's deadline is announced while it runs.
            await anyio.to_thread.run_sync(prepare, outcome.output, outcome.exit_code)
        after = before
        if spec.effectful:
            for name in spec.paths:
                if isinstance(call.args.get(name), str):
                    self.hasher.invalidate(str(call.args[name]))
            after = await self._digest()
        return Act(call, outcome, before, after)

    async def _effect(
        self, call: ToolCall, spec: ToolSpec, grant: int, amounts: dict[str, float]
    ) -> ToolResult | Refused:
        """
        Dispatch an effectful call through the effect ledger.

        The intent is journaled durably, and fenced by the run's status and epoch,
        before the call leaves the process. An uncertain outcome is reconciled at
        once by a permitted read; a write found not applied is sent again with the
        same key, within the retry budget. No replacement write goes to a target
        whose effect is uncertain. The call is charged when its intent is journaled;
        a refused call is not.
        """
        # The sequence counts the task's effects (those the ledger holds and those
        # settled before it was loaded): a key is never reused, even for a step a
        # dead host lost.
        self._sequence = max(self._sequence, self.effects.known()) + 1
        key = idempotency_key(self.task_id, self.step_base + self.step + 1, self._sequence)
        refusal = await self._plan_effect(call, spec, key)
        if isinstance(refusal, Refused):
            await self._release(grant)
            return refusal
        target, note = refusal
        await self._settle(grant, amounts)
        attempt = 0
        while True:
            try:
                # The first dispatch carries the effect's note, in its durable commit.
                noted = await self.journal.record_dispatch(
                    run_id=self.run_id,
                    epoch=self.epoch,
                    key=key,
                    task_id=self.task_id,
                    step=self.step + 1,
                    tool=call.tool,
                    target=target.text,
                    args_hash=args_hash(call.args),
                    note=note if attempt == 0 else None,
                )
            except FencedError as exc:
                return Refused(call, f"fence: {exc}")
            self._own_note(noted)
            self.effects.dispatched(key)
            result = await self._send(key, call)
            state = await self._settle_result(key, result)
            if state is not EffectState.UNCERTAIN:
                return result
            if self._stop is not None:
                # Interrupted by a stop: the effect stays uncertain, for a resume to
                # reconcile; nothing is sent again.
                return result
            verdict = await self._reconcile(key)
            if verdict == "applied":
                return attrs.evolve(
                    result,
                    output=f"{result.output}\n[proctor] the outcome was uncertain; "
                    "reconciliation found the effect applied: it was not sent again",
                )
            if verdict == "unknown":
                return attrs.evolve(
                    result,
                    output=f"{result.output}\n[proctor] the outcome is uncertain and nothing can "
                    f"look it up: effect {key} is escalated to an operator",
                )
            attempt += 1
            retry = None
            if attempt <= MAX_EFFECT_RETRIES:
                retry = await self._reserve({"retries": 1.0}, charge=True)
            if not isinstance(retry, int):
                return attrs.evolve(
                    result,
                    output=f"{result.output}\n[proctor] the effect was not applied; "
                    "no retry is left in the budget",
                )
            await anyio.sleep(backoff(attempt - 1))
            self.effects.plan(key, call.tool, call.args, target)

    async def _plan_effect(
        self, call: ToolCall, spec: ToolSpec, key: str
    ) -> tuple[Target, dict[str, Any]] | Refused:
        """
        Plan an effect in the ledger; return its target and the note a later
        reconciliation needs (journaled with the effect's dispatch).
        """
        try:
            target = target_of(spec, call.args, self.context.workspace)
            holder = self.effects.blocks(target, key)
            if holder is not None:
                return Refused(
                    call,
                    f"uncertain: an earlier effect on {target.text} ({holder.key}) has an "
                    "unknown outcome; it must be reconciled before another write goes there",
                )
            before, intended = await file_digests(call.tool, call.args, self.context.workspace)
            self.effects.plan(key, call.tool, call.args, target, before, intended_digest=intended)
        except (EffectError, WorkspaceError) as exc:
            return Refused(call, f"effect: {exc}")
        note = {
            "key": key,
            "tool": call.tool,
            "args": call.args,
            "target": target.text,
            "before": before,
            "intended": intended,
        }
        return target, note

    def _own_note(self, note: int | None) -> None:
        """
        Count a note the controller wrote itself as seen, when no note can lie
        between the last one seen and it: the next step's newest note is then no
        reason to read the run's notes again. Any gap (an operator's note, or
        ids a database skipped) leaves it to the next read.
        """
        newest = self._notes_newest
        if note is None or newest is None:
            return
        if newest <= self._notes_seen and note == self._notes_seen + 1:
            self._notes_seen = self._notes_newest = note

    async def _send(self, key: str, call: ToolCall) -> ToolResult:
        """Call the tool with the effect's key in context; a cancellation leaves it uncertain."""
        try:
            with effect_key(key):
                return await self._interruptible(call)
        except BaseException:
            with anyio.move_on_after(5, shield=True):
                await self._settle_effect(key, EffectState.UNCERTAIN, {"status": "cancelled"})
            raise

    async def _settle_result(self, key: str, result: ToolResult) -> EffectState:
        """
        Settle an effect by its call's result: a known outcome is written with the
        step (one transaction), an unknown one at once (a reconciliation follows).
        """
        state = {
            ToolStatus.OK: EffectState.CONFIRMED,
            ToolStatus.ERROR: EffectState.FAILED,
        }.get(result.status, EffectState.UNCERTAIN)
        known = state is not EffectState.UNCERTAIN
        await self._settle_effect(key, state, {"status": result.status.value}, defer=known)
        return state

    async def _settle_effect(
        self, key: str, state: EffectState, outcome: dict[str, Any], *, defer: bool = False
    ) -> None:
        self.effects.outcome(key, state)
        # Fenced by this run's epoch: a host that lost the run cannot settle its effects.
        await self.journal.settle_effect(
            key, state.value, outcome, run_id=self.run_id, epoch=self.epoch, defer=defer
        )

    async def _recover_effects(self) -> str:
        """
        Before anything else runs: every effect dispatched without an outcome (a
        crash, a killed host) is uncertain, and is reconciled now.
        """
        lines = []
        for record in self.effects.recover_open():
            await self.journal.settle_effect(
                record.key,
                record.state.value,
                {"status": "recovered"},
                run_id=self.run_id,
                epoch=self.epoch,
            )
        for record in self.effects.uncertain():
            verdict = await self._reconcile(record.key)
            lines.append(f"effect {record.key} ({record.tool} {record.target.text}): {verdict}")
        if not lines:
            return ""
        return "\nUncertain effects from before were reconciled:\n" + "\n".join(lines)

    async def _reconcile(self, key: str) -> str:
        """Settle an uncertain effect by a permitted read, never by sending it again."""
        record = self.effects.get(key)
        assert record is not None
        reconciler = reconciler_for(record.tool, self.registry.get(record.tool))
        verdict = await reconcile(record, reconciler, self.context)
        await self._settle_effect(key, verdict_state(verdict), {"verdict": verdict})
        return verdict

    async def _release(self, grant: int) -> None:
        ref = self._next_ref()
        await self.to_accountant.send(Release(ref, grant))

    # -- verification -----------------------------------------------------------------

    async def _verify(self, report: bool = True, *, in_place: bool = True) -> None:
        """
        Freeze the candidate and have the verifier judge it.

        Where it can, the candidate is pinned in place instead of copied
        (:mod:`proctor.verifiers._pin`); a workspace that changed meanwhile is
        judged again from a copy.

        Args:
            report: tell the actor the verdict (it asked for it); a wrap-up
                verification that the actor did not ask for reports nothing.
            in_place: try the pin (False: copy).
        """
        pin = None
        if in_place and verifiable_in_place(
            self.task.workspace, self.task.all_checks(), self.check_context.sandbox
        ):
            # The digest's walk pins the tree: a change after it shows at the pin's check.
            current, pin = await anyio.to_thread.run_sync(pinned_digest, self.hasher)
            limit = self.task.limits.snapshot_bytes
            if pin is not None and limit is not None and pin.size > limit:
                pin = None  # the copy's path refuses it
        else:
            current = await self._digest(full=True)
        self.judge.observe_candidate(current)
        if await self._judged_already(current, report):
            return
        snapshot: Path = self.task.workspace
        known: dict[str, Node] = {}
        if pin is None:
            frozen = await self._freeze(report)
            if frozen is None:
                return
            snapshot, known = frozen
        ref = self._next_ref()
        request = VerifyRequest(
            ref,
            snapshot,
            self.task.contract_version,
            self.task.all_checks(),
            attrs.evolve(
                self.check_context,
                baseline=self.baseline,
                protected=self.task.protected,
                scope=self.task.scope,
                ignore=self.task.ignore,
            ),
            known,
            pin,
        )
        try:
            await self.to_verifier.send(request)
        except BaseException:
            # Never handed over: the verifier will not remove it.
            if pin is None:
                await _remove_snapshot(snapshot)
            raise

        async def abandon() -> None:
            await self.to_verifier.send(AbandonVerify(ref))

        # A stop while the checks run ends them: the run ends stopped, unjudged.
        result: VerifyResult = await self._reply(ref, (VerifyResult,), on_stop=abandon)
        if result.abandoned:
            await self._observe(
                ObservationKind.VERDICT, "verification abandoned: the run is being stopped"
            )
            return
        if result.moved:
            # Something wrote to the workspace while it was judged in place: judge a copy.
            log.info("controller.candidate_moved", candidate=current)
            await self._verify(report, in_place=False)
            return
        await self._bind(result, report)

    async def _freeze(self, report: bool) -> tuple[Path, dict[str, Node]] | None:
        """
        Freeze the workspace for the verifier: the snapshot, and what is known of
        its files; None when it is too large (refused as a step, reported if asked).

        On the workspace's file system, where a freeze can clone files; the
        snapshot's files known by the tree just walked are not read again.
        """
        snapshot = await anyio.to_thread.run_sync(snapshot_directory, self.task.workspace) / "tree"
        try:
            known = await anyio.to_thread.run_sync(
                freeze_known,
                self.task.workspace,
                snapshot,
                self.task.ignore,
                self.task.limits.snapshot_bytes,
                self.hasher.manifest(),
            )
        except BaseException as exc:
            await _remove_snapshot(snapshot)
            if not isinstance(exc, CandidateTooLarge):
                raise
            # Not verified: a step without progress, as any refusal.
            reason = f"verification refused: {exc} (limits.snapshot_bytes)"
            ruling = self.judge.refusal(reason)
            record = await self._record("refused", ruling, event=RefusedEvent(reason=reason))
            if report:
                await self._report(record, ruling)
            return None
        return snapshot, known

    async def _judged_already(self, current: str, report: bool) -> bool:
        """
        Whether this controller already judged candidate ``current`` on every check:
        then it is accepted (or the actor told, if it asked, what failed) unverified.
        """
        known = self.judge.evidence.get((current, self.judge.contract_version), {})
        names = [c.name for c in self.task.all_checks()]
        judged_here = (current, self.judge.contract_version) in self._judged_here
        if not (judged_here and names and all(name in known for name in names)):
            return False
        accepted = self.judge.accept()
        if accepted is not None:
            # Judged already (perhaps by a run whose host died before it ended).
            await self._record("verdict", accepted)
            return True
        failing = [n for n in names if not known[n]]
        if report:
            await self._observe(
                ObservationKind.VERDICT,
                "this candidate was already judged: "
                + (f"failing {', '.join(failing)}" if failing else "every check passed"),
            )
        return True

    async def _bind(self, result: VerifyResult, report: bool) -> None:
        """Journal the verifier's evidence, feed each verdict to the judge, tell the actor."""
        self._judged_here.add((result.digest, self.task.contract_version))
        # Whatever changed while the checks ran makes their evidence stale.
        self.judge.observe_candidate(await self._digest())
        lines = []
        last: Ruling | None = None
        for evidence in result.evidence:
            self.evidence.append(evidence)
            await self.journal.add_evidence(self.run_id, self.task_id, to_jsonable(evidence))
            verdict = Verdict(
                evidence.check,
                evidence.passed,
                result.digest,
                evidence.excerpt,
                evidence.contract_version,
            )
            ruling = self.judge.verdict(verdict)
            # What a resumed run needs to feed this verdict to its decision core again.
            ruling = attrs.evolve(
                ruling,
                delta={**ruling.delta, "digest": result.digest, "contract": verdict.contract},
            )
            event = VerdictEvent(
                check=evidence.check, passed=evidence.passed, output=evidence.excerpt
            )
            await self._record("verdict", ruling, event=event)
            last = ruling
            status = "passed" if evidence.passed else "FAILED"
            detail = ""
            if not evidence.passed:
                # The failing tests by name, and what they printed: the agent needs
                # the assertion to fix it.
                tests = ", ".join(evidence.failing_tests)
                detail = (f" (failing: {tests})" if tests else "") + (
                    f"\n{_excerpt(evidence.excerpt, 1500)}"
                )
            lines.append(f"check {evidence.check} {status} on {result.digest[:12]}{detail}")
        if self.judge.terminal:
            return
        if (last is not None and last.decision is Decision.STOP) or not report:
            return
        await self._observe(ObservationKind.VERDICT, "\n".join(lines))


async def _remove_snapshot(snapshot: Path) -> None:
    """Remove a snapshot's ``proctor-candidate-*`` directory and all in it, shielded."""
    with anyio.move_on_after(30, shield=True):
        await anyio.to_thread.run_sync(remove_tree, snapshot.parent)
