"""
What the controller writes about a step: trajectory events, descriptions, the handoff.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from proctor._digest import canonical_json
from proctor.budgets._text import format_amount
from proctor.runtime._effects.ledger import EffectLedger, EffectState
from proctor.runtime._outcome import Handoff
from proctor.runtime._progress.judge import Judge
from proctor.runtime._records import (
    ActionEvent,
    ActionResult,
    Claim,
    ClaimEvent,
    Disposition,
    Message,
    MessageEvent,
    ToolCall,
    ToolResult,
    ToolStatus,
)
from proctor.verifiers._evidence import Evidence

__all__ = ("briefing",)

if TYPE_CHECKING:
    from proctor.runtime._task import Task

_TRAJECTORY_STATUS: dict[ToolStatus, Literal["ok", "error", "timeout"]] = {
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
) -> ActionEvent:
    return ActionEvent(
        tool=call.tool,
        args=call.args,
        result=ActionResult(
            status=_TRAJECTORY_STATUS.get(result.status, "error"),
            exit_code=result.exit_code,
            output=result.output,
        ),
        round=round_id,
        poll=call.poll,
        # The workspace's digest after the action, exactly: a replay needs no model.
        candidate=candidate,
    )


def _claim_event(claim: Claim) -> ClaimEvent:
    return ClaimEvent(
        status=claim.status,
        condition=claim.condition,
        evidence=claim.evidence,
        reason=claim.reason,
    )


def _message_event(message: Message) -> MessageEvent:
    return MessageEvent(
        kind=message.kind,
        text=message.text,
        sources=message.sources,
        blockers=message.blockers,
    )


def _tests_text(ev: Evidence) -> str:
    if not ev.tests:
        return ""
    passed = sum(1 for _, outcome in ev.tests if outcome == "passed")
    return f"{passed}/{len(ev.tests)} tests passed, "


def _baseline_line(name: str, ev: Evidence) -> str:
    failing = [t for t, outcome in ev.tests if outcome in ("failed", "error")]
    passing = sum(1 for _, outcome in ev.tests if outcome == "passed")
    shown = ", ".join(failing[:5]) + (f" (+{len(failing) - 5} more)" if len(failing) > 5 else "")
    return (
        f"{name} at baseline {ev.candidate_digest[:12]}: {len(failing)} failing"
        + (f" ({shown})" if failing else "")
        + f", {passing} passing"
    )


def briefing(task: Task, tools: Sequence[str]) -> str:
    """
    The first observation's text: the goal, the tools, the checks that decide,
    the protected paths and the budget, so an actor knows the rules from step one.

    The goal comes first and the tools second, on lines of their own.
    """
    lines = [f"Goal: {task.goal}", f"Tools: {', '.join(tools)}"]
    checks = []
    for check in task.all_checks():
        run = getattr(check, "run", None)
        command = run if isinstance(run, str) else " ".join(run) if run else ""
        label = f"{check.name} ({command})" if command else check.name
        checks.append(label if check.required else f"{label}, optional")
    if checks:
        lines.append(
            "Checks (run by the verifier on a frozen copy of the workspace; they alone "
            f"decide when the work is done): {'; '.join(checks)}"
        )
    if task.protected:
        lines.append(f"Protected paths (a change to them is refused): {', '.join(task.protected)}")
    limits = task.budget.limits
    if limits:

        def named(amounts: dict[str, float]) -> str:
            return ", ".join(f"{k} {format_amount(k, v)}" for k, v in sorted(amounts.items()))

        budget = named(limits)
        reserve = task.budget.reserve
        kept = f" (of which the controller keeps {named(reserve)} to wrap up)"
        lines.append(f"Budget: {budget}{kept if reserve else ''}")
    return "\n".join(lines)


def _handoff(
    run_id: str,
    judge: Judge,
    effects: EffectLedger,
    spend: dict[str, float],
    current: str,
    evidence: Sequence[Evidence],
    *,
    sandboxed: bool = True,
    answer: str = "",
    cited: Sequence[str] = (),
    answer_task: bool = False,
) -> Handoff:
    # Kept whole: every field of the handoff is read off the same sorted evidence, effects and
    # spend, in one pass; apart, each piece would sort them again.
    assert judge.disposition is not None
    latest: dict[str, Evidence] = {}
    version = judge.contract_version
    at_baseline: dict[str, Evidence] = {}
    for ev in sorted(evidence, key=lambda e: e.at):
        if ev.baseline:
            at_baseline[ev.check] = ev
        elif ev.candidate_digest == current and ev.contract_version == version:
            latest[ev.check] = ev
    lines = tuple(
        _baseline_line(name, ev) for name, ev in sorted(at_baseline.items()) if ev.tests
    ) + tuple(
        f"{name}: {'passed' if ev.passed else 'failed'} on {ev.candidate_digest[:12]}"
        + (f" (exit {ev.exit_code}, " if ev.exit_code is not None else " (")
        + _tests_text(ev)
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
    escalated = [r for r in effects.records() if r.state is EffectState.ESCALATED]
    findings += [
        f"escalated: effect {r.key} ({r.tool} {r.target.text}) has an outcome nothing can "
        "look up; an operator must check whether it happened"
        for r in escalated
    ]
    if not sandboxed:
        findings.append(
            'unsandboxed: [sandbox] mode = "off": the commands and checks of this run ran on'
            " the host, with its file system and network"
        )
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
            f'resume with the answer: proctor resume {run_id} --answer "..."',
            "user",
        ),
        Disposition.BUDGET_EXHAUSTED: (
            "raise the limit or narrow the task, then resume",
            "operator",
        ),
        Disposition.NO_PROGRESS: ("change the approach or the task, then resume", "operator"),
        Disposition.STOPPED: (f"resume when ready: proctor resume {run_id}", "operator"),
        Disposition.FAILED: ("inspect the failure in the trace, then resume", "operator"),
    }
    next_step, owner = nexts[disposition]
    if reason is not None and reason.owner != "none" and disposition is not Disposition.COMPLETED:
        owner = reason.owner
    if escalated and owner == "none":
        owner = "operator"
    sources: tuple[str, ...] = ()
    if answer_task:
        sources = tuple(cited) + tuple(sorted(judge.fetched - set(cited)))
    failing = [ev for _, ev in sorted(latest.items()) if not ev.passed and ev.required]
    return Handoff(
        answer=answer,
        sources=sources,
        disposition=disposition,
        stop_reason=reason,
        candidate_digest=current,
        evidence=lines,
        open_findings=tuple(findings),
        spend=spend,
        next_step=next_step,
        owner=owner,
        failing_output=_tail_lines(failing[0].excerpt) if failing else "",
    )


#: The most lines of a failing check's output a handoff keeps (its end says why).
FAILING_LINES = 20


def _tail_lines(text: str) -> str:
    lines = text.rstrip().splitlines()
    return "\n".join(lines[-FAILING_LINES:])
