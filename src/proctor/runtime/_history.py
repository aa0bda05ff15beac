"""
A task's history, rebuilt from the journal for a resumed run.

The decision core is fed every journaled step of the task's earlier runs, in
order, with the candidate digests the journal recorded: the resumed run starts
with the distinct work, failure signatures, candidate digests seen and evidence
of every run before it. It never gets a blank allowance: what was done before
buys no new time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from proctor.runtime._effects import EffectLedger, EffectRecord, EffectState, Target
from proctor.runtime._journal import JournalLike
from proctor.runtime._judge import Judge
from proctor.runtime._records import ToolCall, ToolResult
from proctor.runtime._trajectory import Candidates, Event, drive

__all__ = ("History", "load_effects", "load_history")


@attrs.frozen
class History:
    """
    What a resumed run inherits, besides its spend (which the journal sums).

    Args:
        baseline: the files of the task's first starting candidate (for the scope check).
        initial_digest: that candidate's digest.
        runs: the earlier runs, oldest first: (run id, disposition, stop reason).
        steps: how many steps they journaled.
        summary: the resume observation for the actor, built from the journal.
    """

    baseline: dict[str, str]
    initial_digest: str
    runs: tuple[tuple[str, str | None, dict[str, Any] | None], ...]
    steps: int
    summary: str


def _replay_run(judge: Judge, records: Sequence[Mapping[str, Any]]) -> None:
    by_index: dict[int, Mapping[str, Any]] = {}
    events: list[Event] = []
    for record in records:
        event = record.get("event")
        if not event:
            continue
        index = int(record["step"])
        data = dict(event)
        delta = record.get("state_delta") or {}
        if data.get("type") == "verdict":
            data["contract"] = delta.get("contract", "")
        by_index[index] = record
        events.append(Event(index, str(data["type"]), data))

    def admit(call: ToolCall, event: Event) -> str | None:
        record = by_index[event.index]
        return str(record["reason"]) if record.get("tool_status") == "refused" else None

    def apply(call: ToolCall, result: ToolResult, event: Event) -> str:
        delta = by_index[event.index].get("state_delta") or {}
        return str(delta.get("candidate", judge.digest))

    def judged(event: Event) -> str:
        delta = by_index[event.index].get("state_delta") or {}
        return str(delta.get("digest", judge.digest))

    for _ in drive(judge, events, Candidates(admit, apply, judged)):
        pass
    judge.reopen()


async def load_effects(journal: JournalLike, task_id: str) -> EffectLedger:
    """
    Rebuild the effect ledger of a task from the journal: every effect of every
    run, with the arguments and digests journaled before it was dispatched.
    """
    details: dict[str, Mapping[str, Any]] = {}
    for row in await journal.runs_of_task(task_id):
        for note in await journal.notes(row.run_id):
            if note["kind"] == "effect":
                details[note["body"]["key"]] = note["body"]
    records = []
    for effect in await journal.effects(task_id=task_id):
        extra = details.get(effect.key, {})
        records.append(
            EffectRecord(
                key=effect.key,
                tool=effect.tool,
                args=dict(extra.get("args", {})),
                target=Target.parse(effect.target),
                args_hash=effect.args_hash,
                before_digest=extra.get("before"),
                state=EffectState(effect.state),
                intended_digest=extra.get("intended"),
            )
        )
    return EffectLedger.from_records(records)


async def load_history(
    journal: JournalLike, task_id: str, run_id: str | None, judge: Judge
) -> History:
    """
    Feed the task's earlier runs to ``judge`` and describe them for the actor.

    Args:
        journal: the journal.
        task_id: the task.
        run_id: the new run (left out of the history); None keeps every run (a run
            taken over from another worker goes on with its own history).
        judge: a fresh decision core for the task; it is fed the history.
    """
    current = judge.digest
    version = judge.contract_version
    runs = sorted(
        (r for r in await journal.runs_of_task(task_id) if r.run_id != run_id),
        key=lambda r: r.started_at,
    )
    baseline: dict[str, str] = {}
    initial = current
    total = 0
    for number, row in enumerate(runs):
        if number == 0:
            for note in await journal.notes(row.run_id):
                if note["kind"] == "start":
                    baseline = dict(note["body"].get("baseline", {}))
                    initial = str(note["body"].get("digest", current))
            judge.digest = initial
            judge.reopen()
        records = await journal.steps(row.run_id)
        total += len(records)
        _replay_run(judge, records)
    judge.contract_version = version
    judge.observe_candidate(current)
    last = runs[-1] if runs else None
    lines = [
        f"This task is resumed: {len(runs)} earlier run(s), {total} step(s) journaled.",
    ]
    if last is not None:
        reason = (last.stop_reason or {}).get("message", "")
        lines.append(f"The last run ended {last.disposition or last.status}: {reason}".rstrip(": "))
    lines.append(f"Distinct work so far: {judge.work_items} item(s); repeating it buys no time.")
    verdicts = judge.evidence.get((current, version), {})
    if verdicts:
        lines.append(
            "Evidence for the candidate as it stands: "
            + ", ".join(f"{k} {'passed' if v else 'failed'}" for k, v in sorted(verdicts.items()))
        )
    else:
        lines.append("No evidence yet for the candidate as it stands.")
    return History(
        baseline=baseline,
        initial_digest=initial,
        runs=tuple((r.run_id, r.disposition, r.stop_reason) for r in runs),
        steps=total,
        summary="\n".join(lines),
    )
