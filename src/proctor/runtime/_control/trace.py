"""
What the controller writes about a step: trajectory events, descriptions, the handoff.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from proctor.runtime._effects.ledger import (
    EffectState,
)
from proctor.runtime._outcome import Handoff
from proctor.runtime._progress.normalize import canonical_json
from proctor.runtime._records import (
    Disposition,
    Message,
    ToolCall,
    ToolResult,
    ToolStatus,
)
from proctor.verifiers._evidence import Evidence

__all__ = ()

if TYPE_CHECKING:
    from proctor.runtime._control.controller import Controller

_TRAJECTORY_STATUS = {
    ToolStatus.OK: "ok",
    ToolStatus.ERROR: "error",
    ToolStatus.UNCERTAIN: "timeout",
}


def _excerpt(text: str, limit: int = 4000) -> str:
    return text if len(text) <= limit else "…" + text[-limit:]


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        found.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return found


def _describe(call: ToolCall, result: ToolResult) -> str:
    head = f"{call.tool} {canonical_json(call.args)[:200]} -> {result.status.value}"
    if result.exit_code is not None:
        head += f" (exit {result.exit_code})"
    return f"{head}\n{_excerpt(result.output)}" if result.output else head


def _action_event(
    call: ToolCall, result: ToolResult, round_id: str | None, candidate: str | None = None
) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "action",
        "tool": call.tool,
        "args": call.args,
        "result": {
            "status": _TRAJECTORY_STATUS.get(result.status, "error"),
            "exit_code": result.exit_code,
            "output": result.output,
        },
    }
    if round_id is not None:
        event["round"] = round_id
    if call.poll:
        event["poll"] = True
    if candidate is not None:
        # The workspace's digest after the action, exactly: a replay needs no model.
        event["candidate"] = candidate
    return event


def _message_event(message: Message) -> dict[str, Any]:
    return {
        "type": "message",
        "kind": message.kind.value,
        "text": message.text,
        "sources": list(message.sources),
        "blockers": list(message.blockers),
    }


def _handoff(
    controller: Controller, spend: dict[str, float], current: str, evidence: Sequence[Evidence]
) -> Handoff:
    judge = controller.judge
    assert judge.disposition is not None
    latest: dict[str, Evidence] = {}
    version = controller.task.contract_version
    for ev in sorted(evidence, key=lambda e: e.at):
        if ev.candidate_digest == current and ev.contract_version == version:
            latest[ev.check] = ev
    lines = tuple(
        f"{name}: {'passed' if ev.passed else 'failed'} on {ev.candidate_digest[:12]}"
        + (f" (exit {ev.exit_code}, " if ev.exit_code is not None else " (")
        + f"contract {ev.contract_version[:12]})"
        for name, ev in sorted(latest.items())
    )
    findings: list[str] = []
    for name, ev in sorted(latest.items()):
        tests = f": {', '.join(ev.failing_tests)}" if ev.failing_tests else ""
        if not ev.passed:
            # Optional checks do not block completion: what they found is a suggestion.
            findings.append(
                f"{name} fails{tests}" if ev.required else f"suggestion: {name} fails{tests}"
            )
        findings += [
            f"suggestion: {f.removeprefix('suggest: ')}"
            for f in ev.findings
            if f.startswith("suggest: ")
        ]
    escalated = [r for r in controller.effects.records() if r.state is EffectState.ESCALATED]
    findings += [
        f"escalated: effect {r.key} ({r.tool} {r.target.text}) has an outcome nothing can "
        "look up; an operator must check whether it happened"
        for r in escalated
    ]
    reason = judge.stop_reason
    disposition = judge.disposition
    nexts = {
        Disposition.COMPLETED: ("nothing: the candidate was accepted", "none"),
        Disposition.PARTIAL: ("review the partial answer and decide what is missing", "user"),
        Disposition.BLOCKED: (
            "resolve the blocker named in the stop reason, then resume",
            "operator",
        ),
        Disposition.NEEDS_INPUT: (
            f'resume with the answer: proctor resume {controller.run_id} --answer "..."',
            "user",
        ),
        Disposition.BUDGET_EXHAUSTED: (
            "raise the limit or narrow the task, then resume",
            "operator",
        ),
        Disposition.NO_PROGRESS: ("change the approach or the task, then resume", "operator"),
        Disposition.STOPPED: (f"resume when ready: proctor resume {controller.run_id}", "operator"),
        Disposition.FAILED: ("inspect the failure in the trace, then resume", "operator"),
    }
    next_step, owner = nexts[disposition]
    if reason is not None and reason.owner != "none" and disposition is not Disposition.COMPLETED:
        owner = reason.owner
    if escalated and owner == "none":
        owner = "operator"
    return Handoff(
        disposition=disposition,
        stop_reason=reason,
        candidate_digest=current,
        evidence=lines,
        open_findings=tuple(findings),
        spend=spend,
        next_step=next_step,
        owner=owner,
    )
