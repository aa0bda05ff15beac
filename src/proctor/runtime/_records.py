"""
The records that cross channels, reach the journal or leave the process.

Messages and facts are frozen attrs classes. Everything here is serialized by the
one converter in :mod:`proctor._wire`.

The proposal vocabulary follows the recorded-trajectory format (``docs/trajectory.md``):
an actor's script is a trajectory without results.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Literal

import attrs

__all__ = (
    "fence_breach_finding",
    "ActionEvent",
    "ActionResult",
    "Claim",
    "ClaimEvent",
    "Completion",
    "Decision",
    "Disposition",
    "Message",
    "MessageEvent",
    "MessageKind",
    "NoteKind",
    "Observation",
    "ObservationKind",
    "Proposal",
    "RefusedEvent",
    "Round",
    "SignalEvent",
    "StopReason",
    "ToolCall",
    "ToolResult",
    "ToolStatus",
    "TraceRecord",
    "TrajectoryEvent",
    "UserEvent",
    "VerdictEvent",
)


class Disposition(enum.StrEnum):
    """How a run ended. ``continue`` is not one: a run that goes on has no disposition."""

    COMPLETED = "completed"
    PARTIAL = "partial"
    BLOCKED = "blocked"
    NEEDS_INPUT = "needs_input"
    BUDGET_EXHAUSTED = "budget_exhausted"
    NO_PROGRESS = "no_progress"
    STOPPED = "stopped"
    FAILED = "failed"


class Decision(enum.StrEnum):
    """What the controller decided at one step."""

    CONTINUE = "continue"
    NUDGE = "nudge"
    REFUSE = "refuse"
    STOP = "stop"


class ToolStatus(enum.StrEnum):
    """
    The outcome of one tool call.

    ``uncertain`` means the effect is unknown (a time limit, a cancellation, a
    crash): it is never reported as ``error``. ``refused`` means the controller
    never let the call run.
    """

    OK = "ok"
    ERROR = "error"
    UNCERTAIN = "uncertain"
    REFUSED = "refused"


class MessageKind(enum.StrEnum):
    """The typed messages an actor may send."""

    CHECKPOINT = "checkpoint"
    PARTIAL_ANSWER = "partial_answer"
    FINAL_ANSWER = "final_answer"
    FAILURE_REPORT = "failure_report"


class NoteKind(enum.StrEnum):
    """
    What a journal note records (the ``kind`` of ``JournalLike.add_note``).

    ``start``: the run's first candidate (its tree digest); ``baseline``: what the
    checks compare against and restore (the tree's manifest when a scope check
    needs it, the protected and harness files, the per-test results at the
    baseline); ``actor``: how to make the
    actor again; ``effect``: what an effect's reconciliation needs, journaled before
    it is dispatched; ``amend``: an operator's amendment of the contract;
    ``retune-request``: an operator asked for new limits; ``retune``: the
    accountant applied them; ``fence_breach``: the workspace changed after the
    run ended (see :func:`fence_breach_finding`).
    """

    START = "start"
    BASELINE = "baseline"
    ACTOR = "actor"
    EFFECT = "effect"
    AMEND = "amend"
    RETUNE_REQUEST = "retune-request"
    RETUNE = "retune"
    FENCE_BREACH = "fence_breach"


def fence_breach_finding(body: Mapping[str, Any]) -> str:
    """
    The handoff's open finding for a ``fence_breach`` note: what changed after the
    run ended, against the candidate it ended with.
    """
    at_end, now = str(body.get("at_end", "")), str(body.get("now", ""))
    changed = [str(p) for p in body.get("changed") or ()]
    more = f" (+{len(changed) - 10} more)" if len(changed) > 10 else ""
    shown = ", ".join(changed[:10]) + more
    return (
        f"fence breach: the workspace changed after the run ended (candidate {at_end[:12]},"
        f" now {now[:12]}): {shown or 'the tree differs'}"
    )


class ObservationKind(enum.StrEnum):
    """Why the controller sent an observation."""

    START = "start"
    RESUME = "resume"
    RESULT = "result"
    REFUSAL = "refusal"
    NUDGE = "nudge"
    VERDICT = "verdict"
    NOTE = "note"
    ANSWER = "answer"
    ENDED = "ended"


@attrs.frozen
class ToolCall:
    """
    A proposal to call one tool.

    Args:
        tool: the tool's registered name.
        args: its arguments, a JSON object.
        poll: the call waits on outside state (a CI job, a long build) and may
            repeat while its outcome succeeds, within the policy's ``poll_limit``.
    """

    tool: str
    args: dict[str, Any] = attrs.field(factory=dict)
    poll: bool = False


@attrs.frozen
class Round:
    """Several tool calls issued in one turn; they count as one iteration."""

    calls: tuple[ToolCall, ...]


@attrs.frozen
class Message:
    """
    A typed message. Only the controller decides what a message means for the run.

    Args:
        kind: checkpoint, partial_answer, final_answer or failure_report.
        text: the message itself.
        sources: URLs the message rests on (an answer's grounding).
        blockers: what stands in the way (a failure report's substance).
    """

    kind: MessageKind
    text: str = ""
    sources: tuple[str, ...] = ()
    blockers: tuple[str, ...] = ()


@attrs.frozen
class Completion:
    """The actor's claim that the work is done: it asks for verification, nothing more."""

    summary: str = ""


@attrs.frozen
class Claim:
    """
    An escalation claim: the actor says it is blocked or needs input.

    It ends the run only when it names the unmet condition, the evidence already
    obtained, and the reason no permitted action can resolve it.
    """

    status: Literal["blocked", "needs_input"]
    condition: str = ""
    evidence: tuple[str, ...] = ()
    reason: str = ""


Proposal = ToolCall | Round | Message | Completion | Claim


@attrs.frozen
class ToolResult:
    """
    What one tool call returned.

    Args:
        status: ok, error, uncertain (effect unknown) or refused (never ran).
        output: the tool's text output, as the actor sees it.
        exit_code: a command's exit code, when it has one.
        duration: seconds spent in the tool.
    """

    status: ToolStatus
    output: str = ""
    exit_code: int | None = None
    duration: float = 0.0


@attrs.frozen
class StopReason:
    """
    The machine-readable reason a run stopped.

    Args:
        code: a stable identifier (``checks_passed``, ``stall``, ``limit:steps``, ...).
        message: the same for a person.
        owner: who owns recovery: ``none``, ``actor``, ``operator`` or ``user``.
        evidence: what supports the decision (evidence ids, signatures, events).
        limit: for budget exhaustion, the dimension that ran out.
        value: its spent value.
        bound: its limit.
        scope: ``task`` or ``run``: what the limit applied to.
    """

    code: str
    message: str = ""
    owner: str = "none"
    evidence: tuple[str, ...] = ()
    limit: str | None = None
    value: float | None = None
    bound: float | None = None
    scope: str | None = None


@attrs.frozen
class Observation:
    """
    What the controller tells the actor.

    Args:
        step: the step this observation answers.
        kind: why it was sent.
        text: a summary written for the agent.
        results: the results of the calls of the step, in order.
        remaining: what is left of each budget limit, so the agent can pace itself.
        disposition: set when the run has ended.
    """

    step: int
    kind: ObservationKind
    text: str = ""
    results: tuple[ToolResult, ...] = ()
    remaining: dict[str, float] = attrs.field(factory=dict)
    disposition: Disposition | None = None


# -- trajectory events ---------------------------------------------------------------
#
# The events of a recorded trajectory (docs/trajectory.md), as records: the live
# controller writes them into the journal, and replay, resume, the gateway, the
# reports and the CLI read them back. proctor._wire turns them into the format's
# JSON and back (``event_to_json`` / ``event_from_json``), so the key order and the
# keys left out by default are decided in one place.


@attrs.frozen(kw_only=True)
class ActionResult:
    """
    What the world answered an action: ``status`` ok, error or timeout.

    Args:
        status: ok, error or timeout (the trajectory format's vocabulary).
        exit_code: a command's exit code, when it has one.
        output: the tool's text output.
    """

    status: Literal["ok", "error", "timeout"]
    exit_code: int | None = None
    output: str = ""


@attrs.frozen(kw_only=True)
class ActionEvent:
    """
    A tool call and its result.

    Args:
        tool: the tool's name.
        args: its arguments.
        result: what it returned.
        round: the parallel round it belongs to (one iteration), if any.
        poll: the call waits on outside state (see :class:`ToolCall`).
        changed: the call changed the workspace in a way no write shows (a shell edit).
        candidate: the workspace's digest after the call, when it is known exactly.
    """

    type: Literal["action"] = "action"
    tool: str
    args: dict[str, Any] = attrs.field(factory=dict)
    result: ActionResult
    round: int | str | None = None
    poll: bool = False
    changed: bool = False
    candidate: str | None = None


@attrs.frozen(kw_only=True)
class MessageEvent:
    """A typed message of the agent (see :class:`Message`)."""

    type: Literal["message"] = "message"
    kind: MessageKind
    text: str = ""
    sources: tuple[str, ...] = ()
    blockers: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class VerdictEvent:
    """
    An external check's verdict.

    Args:
        check: the check's name.
        passed: whether it passed.
        of_event: the event whose candidate it judged (0: the start); None: the
            event before it.
        output: the check's output (an excerpt).
    """

    type: Literal["verdict"] = "verdict"
    check: str
    passed: bool
    of_event: int | None = None
    output: str = ""


@attrs.frozen(kw_only=True)
class SignalEvent:
    """An outside signal: ``user_stop``, ``stop_signal`` or ``deadline``."""

    type: Literal["signal"] = "signal"
    name: Literal["user_stop", "stop_signal", "deadline"]


@attrs.frozen(kw_only=True)
class UserEvent:
    """A person's instruction or answer: it opens a fresh progress window."""

    type: Literal["user"] = "user"
    text: str = ""


@attrs.frozen(kw_only=True)
class ClaimEvent:
    """An escalation claim of the agent (see :class:`Claim`)."""

    type: Literal["claim"] = "claim"
    status: Literal["blocked", "needs_input"]
    condition: str = ""
    evidence: tuple[str, ...] = ()
    reason: str = ""


@attrs.frozen(kw_only=True)
class RefusedEvent:
    """A proposal refused at the controller's boundary, before any tool ran."""

    type: Literal["refused"] = "refused"
    reason: str = ""


#: One event of a recorded trajectory; its ``type`` names which.
TrajectoryEvent = (
    ActionEvent | MessageEvent | VerdictEvent | SignalEvent | UserEvent | ClaimEvent | RefusedEvent
)


@attrs.frozen
class TraceRecord:
    """
    One step of a run, as journaled before the controller reports it.

    Args:
        trace_id: the run's trace id, shared by all its steps.
        run_id: the run.
        step: 1-based, contiguous within a run.
        kind: what the step was: ``action``, ``message``, ``verdict``, ``claim``,
            ``completion``, ``signal``, ``user``, ``ended``, ``refused`` (a
            proposal refused at the controller's boundary).
        action: the normalized action (canonical JSON), or None.
        tool_status: the tool's status, or None when no tool ran.
        result_fingerprint: fingerprint of the normalized result, or None.
        state_version: counts the changes of run state (candidate, evidence, work).
        state_delta: what changed at this step.
        remaining: what is left of each budget limit after the step.
        decision: the controller's decision.
        progress: whether the step made progress.
        reason: why the controller decided so, for a person.
        stop_reason: set on the step that ended the run.
        disposition: set on the step that ended the run.
        policy_version: the version of the policy that decided.
        at: wall-clock time of the step (seconds since the epoch).
        event: the step as a recorded-trajectory event (what was proposed and what
            the world answered), so a run can be exported and replayed.
    """

    trace_id: str
    run_id: str
    step: int
    kind: str
    action: str | None
    tool_status: ToolStatus | None
    result_fingerprint: str | None
    state_version: int
    state_delta: dict[str, Any]
    remaining: dict[str, float]
    decision: Decision
    progress: bool
    reason: str
    stop_reason: StopReason | None
    disposition: Disposition | None
    policy_version: str
    at: float
    event: TrajectoryEvent | None = None
