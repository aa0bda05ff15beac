"""
A run as people look at it: its steps with durations and spend, its budget,
its candidates and their evidence, its effects and its handoff, read once from
the journal into frozen records that the terminal tables and the HTML report
both draw.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from proctor._wire import step_event
from proctor.runtime._journal.base import EffectRow, JournalLike, RunRow, SpendRow
from proctor.runtime._records import (
    ActionEvent,
    ClaimEvent,
    MessageEvent,
    NoteKind,
    SignalEvent,
    TrajectoryEvent,
    UserEvent,
    VerdictEvent,
    fence_breach_finding,
)

__all__ = (
    "CandidateView",
    "EvidenceView",
    "RunView",
    "StepView",
    "action_text",
    "call_text",
    "step_text",
    "build_view",
    "load_run_view",
)

#: The spend kinds that are actual spend (a reservation is not).
_SPENT = ("settle", "charge")
#: Time is settled with the step after the one it passed in: a step's own time
#: is its duration, not its spend rows.
_TIME = ("wall_seconds", "working_seconds")


@attrs.frozen
class StepView:
    """
    One step of a run, with what it took.

    Args:
        step: the step's number (1-based).
        kind: ``action``, ``message``, ``verdict``, ``completion``, ``claim``, ...
        action: a one-line summary of what was proposed (tool and target, or the
            message's kind and text).
        tool_status: the tool's status, or None when no tool ran.
        decision: the controller's decision.
        progress: whether the step made progress.
        reason: why the controller decided so.
        started_at: when the step began: the previous step's record, or the run's
            start for the first (seconds since the epoch).
        ended_at: when the step's record was journaled.
        spend: what was settled or charged during the step, per dimension (time
            excepted: a step's time is its :attr:`duration`).
        remaining: what was left of each limited dimension after the step.
        stall: steps without progress in a row, counting this one (0 after a step
            that made progress).
        output: the failing tool's or check's output, when the step failed.
    """

    step: int
    kind: str
    action: str
    tool_status: str | None
    decision: str
    progress: bool
    reason: str
    started_at: float
    ended_at: float
    spend: Mapping[str, float]
    remaining: Mapping[str, float]
    stall: int
    output: str | None

    @property
    def duration(self) -> float:
        """Seconds from the step's start to its record."""
        return max(0.0, self.ended_at - self.started_at)


@attrs.frozen
class EvidenceView:
    """
    One check's verdict on one candidate.

    Args:
        check: the check's name.
        passed: whether it passed.
        excerpt: what the check printed (its failing output when it failed).
        exit_code: the check command's exit code, when it ran a command.
        contract_version: the contract it was judged under.
        at: when it was recorded.
        failing_tests: the tests that failed, when the check could tell.
    """

    check: str
    passed: bool
    excerpt: str
    exit_code: int | None
    contract_version: str
    at: float
    failing_tests: tuple[str, ...]


@attrs.frozen
class CandidateView:
    """
    A frozen candidate and the evidence bound to its digest.

    Args:
        digest: the candidate's tree digest.
        evidence: the verdicts bound to it, oldest first.
        final: whether it is the run's final candidate.
    """

    digest: str
    evidence: tuple[EvidenceView, ...]
    final: bool


@attrs.frozen
class RunView:
    """
    A run read from the journal, ready to be drawn.

    Args:
        run: the run's row.
        limits: the task's budget limits per dimension.
        reserve: the part of each limit only the controller may draw on.
        stall_threshold: steps without progress that end the run (0: never).
        steps: the steps, in order.
        spent: what the run settled or charged, per dimension, final settlement
            included.
        candidates: the candidates the verifier judged, in the order first judged.
        effects: the effects the run dispatched.
        actor: the actor the run was started with, as journaled (``kind`` and its
            options, such as ``model``), or empty when none was journaled.
    """

    run: RunRow
    limits: Mapping[str, float]
    reserve: Mapping[str, float]
    stall_threshold: int
    steps: tuple[StepView, ...]
    spent: Mapping[str, float]
    candidates: tuple[CandidateView, ...]
    effects: tuple[EffectRow, ...]
    actor: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def duration(self) -> float | None:
        """Seconds from the run's start to its end, or None while it runs."""
        if self.run.ended_at is None:
            return None
        return max(0.0, self.run.ended_at - self.run.started_at)

    @property
    def failing_excerpt(self) -> str | None:
        """The output of the last failed check on the final candidate, if one failed."""
        for candidate in reversed(self.candidates):
            for evidence in reversed(candidate.evidence):
                if not evidence.passed:
                    return evidence.excerpt
            if candidate.final:
                break
        return None


def call_text(tool: str, args: Mapping[str, Any]) -> str:
    """Summarize a tool call on one line: the tool and its target (path, command, URL, query)."""
    target = args.get("path") or args.get("cmd") or args.get("url") or args.get("query")
    if target is None and args:
        target = json.dumps(args, ensure_ascii=False, sort_keys=True)
    return _one_line(f"{tool} {target or ''}".strip())


def action_text(kind: str, event: TrajectoryEvent | None, action: str | None) -> str:
    """
    Summarize what a step proposed on one line.

    Args:
        kind: the step's kind.
        event: the step as a trajectory event, if it has one.
        action: the step's normalized action (canonical JSON), if any.
    """
    if isinstance(event, ActionEvent):
        return call_text(event.tool, event.args)
    if isinstance(event, VerdictEvent):
        return f"verdict {event.check}: {'pass' if event.passed else 'fail'}"
    if isinstance(event, MessageEvent):
        return _one_line(f"{event.kind.value}: {event.text}")
    if isinstance(event, ClaimEvent):
        return _one_line(f"claim {event.status}: {event.condition}")
    if isinstance(event, SignalEvent):
        return f"signal {event.name}"
    if isinstance(event, UserEvent):
        return _one_line(f"user {event.text}".strip())
    if action:
        try:
            parsed = json.loads(action)
        except ValueError:
            return _one_line(action)
        if isinstance(parsed, dict) and isinstance(parsed.get("tool"), str):
            # A refused call's step has no event; its action names the same target.
            args = parsed.get("args")
            return call_text(parsed["tool"], args if isinstance(args, dict) else {})
        return _one_line(action)
    return kind


def step_text(step: Mapping[str, Any]) -> str:
    """:func:`action_text` of a journaled step (a row of ``JournalLike.steps``)."""
    return action_text(str(step["kind"]), step_event(step), step.get("action"))


def _one_line(text: str) -> str:
    return " ".join(text.split())


async def load_run_view(journal: JournalLike, run_id: str) -> RunView:
    """
    Read a run, its steps, spend, evidence and effects from ``journal``.

    Args:
        journal: an open journal.
        run_id: the run, or a unique prefix of at least six characters.

    Raises:
        RunNotFoundError: no run, or more than one, matches ``run_id``.
    """
    run = await journal.get_run(run_id)
    task = await journal.get_task(run.task_id)
    steps = await journal.steps(run.run_id)
    spend = await journal.spend_rows(run.run_id)
    evidence = await journal.evidence(run_id=run.run_id)
    effects = await journal.effects(run_id=run.run_id)
    actor = await journal.latest_note(run.run_id, "actor")
    breach = await journal.latest_note(run.run_id, NoteKind.FENCE_BREACH)
    if breach is not None and run.handoff is not None:
        # Found after the handoff was journaled: shown with it, as the run's result has it.
        finding = fence_breach_finding(breach["body"])
        found = list(run.handoff.get("open_findings") or ())
        if finding not in found:
            handoff = {**run.handoff, "open_findings": [*found, finding]}
            run = attrs.evolve(run, handoff=handoff)
    view = build_view(run, task, steps, spend, evidence, effects)
    return attrs.evolve(view, actor=dict((actor or {}).get("body") or {}))


def build_view(
    run: RunRow,
    task: Mapping[str, Any],
    steps: Sequence[Mapping[str, Any]],
    spend: Sequence[SpendRow],
    evidence: Sequence[Mapping[str, Any]],
    effects: Sequence[EffectRow],
) -> RunView:
    """Assemble a :class:`RunView` from the journal's rows (pure: no I/O)."""
    spec = task.get("spec") or {}
    budget = spec.get("budget") or {}
    policy = {**(spec.get("policy") or {}), **(run.policy or {})}
    spent_rows = [row for row in spend if row.kind in _SPENT]
    views: list[StepView] = []
    previous = run.started_at
    stall = 0
    cursor = 0
    for record in steps:
        at = float(record["at"])
        step_spend: dict[str, float] = {}
        # A step's spend rows are journaled with it, a moment before its record.
        while cursor < len(spent_rows) and spent_rows[cursor].at <= at:
            row = spent_rows[cursor]
            cursor += 1
            if row.dimension in _TIME:
                continue
            step_spend[row.dimension] = step_spend.get(row.dimension, 0.0) + row.amount
        progress = bool(record["progress"])
        counted = record["kind"] in ("action", "message", "completion", "claim")
        stall = 0 if progress else stall + (1 if counted else 0)
        event = step_event(record)
        views.append(
            StepView(
                step=int(record["step"]),
                kind=str(record["kind"]),
                action=action_text(record["kind"], event, record.get("action")),
                tool_status=record.get("tool_status"),
                decision=str(record["decision"]),
                progress=progress,
                reason=str(record.get("reason") or ""),
                started_at=min(previous, at),
                ended_at=at,
                spend=step_spend,
                remaining=dict(record.get("remaining") or {}),
                stall=stall,
                output=_failing_output(event),
            )
        )
        previous = at
    totals: dict[str, float] = {}
    for row in spent_rows:
        totals[row.dimension] = totals.get(row.dimension, 0.0) + row.amount
    return RunView(
        run=run,
        limits={str(k): float(v) for k, v in (budget.get("limits") or {}).items()},
        reserve={str(k): float(v) for k, v in (budget.get("reserve") or {}).items()},
        stall_threshold=int(policy.get("stall_threshold", 4) or 0),
        steps=tuple(views),
        spent=totals,
        candidates=_candidates(evidence, run.candidate_digest),
        effects=tuple(effects),
    )


def _failing_output(event: TrajectoryEvent | None) -> str | None:
    if isinstance(event, ActionEvent) and event.result.status != "ok":
        return event.result.output
    if isinstance(event, VerdictEvent) and not event.passed:
        return event.output
    return None


def _candidates(
    evidence: Sequence[Mapping[str, Any]], final: str | None
) -> tuple[CandidateView, ...]:
    grouped: dict[str, list[EvidenceView]] = {}
    for record in evidence:
        digest = str(record.get("candidate_digest") or "")
        exit_code = record.get("exit_code")
        grouped.setdefault(digest, []).append(
            EvidenceView(
                check=str(record.get("check") or ""),
                passed=bool(record.get("passed")),
                excerpt=str(record.get("excerpt") or ""),
                exit_code=int(exit_code) if isinstance(exit_code, int) else None,
                contract_version=str(record.get("contract_version") or ""),
                at=float(record.get("at") or 0.0),
                failing_tests=tuple(str(t) for t in record.get("failing_tests") or ()),
            )
        )
    return tuple(
        CandidateView(digest=digest, evidence=tuple(items), final=digest == final)
        for digest, items in grouped.items()
    )
