"""
A task's history, rebuilt from the journal for a resumed run.

The resumed run starts with the distinct work, failure signatures, candidate
digests seen and evidence of every run before it. It never gets a blank
allowance: what was done before buys no new time.

A controller journals a snapshot of its decision core (one per run, each
replacing the last: :meth:`~proctor.runtime.Journal.put_snapshot`) when its run
ends, and every :data:`SNAPSHOT_EVERY` steps while it runs. A resume restores
the latest snapshot and feeds the decision core only the
journaled steps after it, those of later runs included: its cost follows the
size of the state, not the length of the history. Without a usable snapshot (none
was journaled, or it was taken under another policy, snapshot format or task
facts), the decision core is fed every journaled step of the task's earlier runs,
in order, with the candidate digests the journal recorded.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from proctor._logging import get_logger
from proctor._wire import step_event, step_round
from proctor.runtime._effects.ledger import EffectLedger, EffectRecord, EffectState, Target
from proctor.runtime._journal import JournalLike, RunRow
from proctor.runtime._progress.judge import SNAPSHOT_FORMAT, Judge, SnapshotRefused
from proctor.runtime._progress.trajectory import Candidates, Event, drive
from proctor.runtime._records import NoteKind, ToolCall, ToolResult
from proctor.verifiers._index import Manifest

__all__ = (
    "SNAPSHOT_EVERY",
    "History",
    "count_proposals",
    "load_effects",
    "load_history",
    "proposals_made",
    "read_start",
    "save_snapshot",
    "snapshot_due",
)

log = get_logger()

#: A running controller journals a snapshot of its decision core every this many
#: steps; a resume after its host died replays at most about as many.
SNAPSHOT_EVERY = 5_000


#: The kinds of steps that answer one proposal of the actor (the actions of one
#: round count once).
PROPOSAL_KINDS = frozenset({"action", "message", "completion", "claim", "refused"})


def count_proposals(steps: Sequence[Mapping[str, Any]]) -> int:
    """How many of the actor's proposals a run's journaled steps answer."""
    count = 0
    last_round: object = None
    for step in steps:
        if step.get("kind") not in PROPOSAL_KINDS:
            last_round = None
            continue
        rnd = step_round(step) if step.get("kind") == "action" else None
        if rnd is None or rnd != last_round:
            count += 1
        last_round = rnd
    return count


async def proposals_made(
    journal: JournalLike, task_id: str, actor: Mapping[str, Any], *, run_id: str | None = None
) -> int:
    """
    How many proposals the actor described by ``actor`` (a journaled ``actor``
    note's body) made in the task's runs: those whose actor was that one.

    Args:
        journal: the journal.
        task_id: the task.
        actor: the actor's description.
        run_id: count this run only (a worker's takeover of it).
    """
    total = 0
    for row in await journal.runs_of_task(task_id):
        if run_id is not None and row.run_id != run_id:
            continue
        note = await journal.latest_note(row.run_id, "actor")
        if note is None or note["body"] != dict(actor):
            continue
        total += count_proposals(await journal.steps(row.run_id))
    return total


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

    baseline: Mapping[str, str] | Manifest
    initial_digest: str
    runs: tuple[tuple[str, str | None, dict[str, Any] | None], ...]
    steps: int
    summary: str


def snapshot_due(step: int, last: int) -> bool:
    """
    Whether a periodic snapshot is due at ``step``, the last one having been taken at
    step ``last`` (0: none yet).
    """
    return step - last >= SNAPSHOT_EVERY


async def save_snapshot(
    journal: JournalLike,
    run_id: str,
    judge: Judge,
    step: int,
    *,
    round_id: int | str | None = None,
    final: bool = False,
) -> None:
    """
    Journal a snapshot of ``judge`` as run ``run_id``'s, replacing its earlier one.

    Args:
        journal: the journal.
        run_id: the run.
        judge: the run's decision core, as it stands after step ``step``.
        step: the last step of the run that the snapshot covers.
        round_id: the round of parallel calls ``step`` belongs to, if any: the
            decision core decided the whole round before its first step was
            journaled, so the snapshot covers every step of the round.
        final: the run has ended: no later step of it feeds the decision core (a
            resume reads none of its steps).
    """
    body = {
        "step": step,
        "round": round_id,
        "final": final,
        "policy_version": judge.policy_version,
        "format": SNAPSHOT_FORMAT,
        "snapshot": judge.snapshot(),
    }
    await journal.put_snapshot(run_id, step, body)


def _replay_run(judge: Judge, records: Sequence[Mapping[str, Any]]) -> None:
    by_index: dict[int, Mapping[str, Any]] = {}
    events: list[Event] = []
    for record in records:
        body = step_event(record)
        if body is None:
            continue
        index = int(record["step"])
        by_index[index] = record
        events.append(Event(index, body))

    def admit(call: ToolCall, event: Event) -> str | None:
        record = by_index[event.index]
        return str(record["reason"]) if record.get("tool_status") == "refused" else None

    def apply(call: ToolCall, result: ToolResult, event: Event) -> str:
        delta = by_index[event.index].get("state_delta") or {}
        return str(delta.get("candidate", judge.digest))

    def judged(event: Event) -> str:
        delta = by_index[event.index].get("state_delta") or {}
        return str(delta.get("digest", judge.digest))

    def contract(event: Event) -> str:
        # The contract the verdict's evidence was bound to, as journaled with it.
        delta = by_index[event.index].get("state_delta") or {}
        return str(delta.get("contract", ""))

    for _ in drive(judge, events, Candidates(admit, apply, judged, contract)):
        pass
    if records:
        # The live decision core also counted changes no step records (a candidate
        # observed between steps, an amendment): the journal has its count.
        judge.state_version = int(records[-1]["state_version"])
    judge.reopen()


#: The states of an effect a resume still acts on: in flight or planned (to be
#: found uncertain), uncertain (to be reconciled), escalated (the handoff names it).
OPEN_STATES: tuple[str, ...] = (
    EffectState.PLANNED.value,
    EffectState.DISPATCHED.value,
    EffectState.UNCERTAIN.value,
    EffectState.ESCALATED.value,
)


async def load_effects(journal: JournalLike, task_id: str) -> EffectLedger:
    """
    Rebuild the effect ledger of a task from the journal: the effects that are
    not settled, with the arguments and digests journaled before they were
    dispatched, and the count of the others. What it reads grows with the open
    effects, not with the task's history.
    """
    effects = await journal.effects(task_id=task_id, states=OPEN_STATES)
    keys: dict[str, list[str]] = {}
    for effect in effects:
        keys.setdefault(effect.run_id, []).append(effect.key)
    details: dict[str, Mapping[str, Any]] = {}
    for run_id, of_run in keys.items():
        for note in await journal.effect_notes(run_id, of_run):
            details[note["body"]["key"]] = note["body"]
    records = []
    for effect in effects:
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
    ledger = EffectLedger.from_records(records)
    ledger.earlier = await journal.count_effects(task_id) - len(records)
    return ledger


async def _latest_snapshot(
    journal: JournalLike, runs: Sequence[RunRow], judge: Judge
) -> tuple[int, dict[str, Any]] | None:
    """
    Restore into ``judge`` the latest snapshot of the newest run that has one and
    inherited the runs before it (a resumed run, or the task's first).

    Returns:
        The run's index in ``runs`` and the snapshot's body; None when no run
        has a snapshot or the latest one is refused.
    """
    for index in range(len(runs) - 1, -1, -1):
        if index > 0 and runs[index].parent_run_id is None:
            # A run started afresh on a task that had runs: its decision core did not
            # inherit them, so its snapshots do not cover them.
            continue
        body = await journal.snapshot(runs[index].run_id)
        if body is None:
            continue
        step, round_id = body.get("step"), body.get("round")
        try:
            if isinstance(step, bool) or not isinstance(step, int):
                raise SnapshotRefused(f"a snapshot covering step {step!r}")
            if round_id is not None and not isinstance(round_id, str):
                raise SnapshotRefused(f"a snapshot of round {round_id!r}")
            judge.restore(body.get("snapshot", {}))
        except SnapshotRefused as exc:
            log.info("history.snapshot_refused", run=runs[index].run_id, reason=str(exc))
            return None
        return index, body
    return None


async def load_history(
    journal: JournalLike,
    task_id: str,
    run_id: str | None,
    judge: Judge,
    *,
    snapshots: bool = True,
) -> History:
    """
    Feed the task's earlier runs to ``judge`` and describe them for the actor.

    Args:
        journal: the journal.
        task_id: the task.
        run_id: the new run (left out of the history); None keeps every run (a run
            taken over from another worker goes on with its own history).
        judge: a fresh decision core for the task; it is given the history.
        snapshots: start from the latest usable snapshot of the decision core; False
            feeds it every journaled step (what a resume does without a snapshot).
    """
    # Kept whole: the snapshot, the steps after it and the summary are read in one pass over the
    # task's runs, in order.
    current = judge.digest
    version = judge.contract_version
    runs = sorted(
        (r for r in await journal.runs_of_task(task_id) if r.run_id != run_id),
        key=lambda r: r.started_at,
    )
    baseline: Mapping[str, str] | Manifest = {}
    initial = current
    if runs:
        start = await read_start(journal, runs[0].run_id)
        if start is not None:
            baseline = start["baseline"]
            initial = str(start.get("digest", current))
        found = await _latest_snapshot(journal, runs, judge) if snapshots else None
        if found is None:
            # A fresh decision core, at the task's first candidate.
            fresh = Judge(judge.task, judge.policy, initial, contract_version=version)
            judge.restore(fresh.snapshot())
            first = 0
        else:
            first, body = found
            judge.contract_version = version
            if body.get("final"):
                judge.reopen()
                first += 1
            else:
                covered, covered_round = body["step"], body.get("round")
                records = [
                    r
                    for r in await journal.steps(runs[first].run_id, after=covered)
                    if covered_round is None or step_round(r) != covered_round
                ]
                _replay_run(judge, records)
                first += 1
        for row in runs[first:]:
            _replay_run(judge, await journal.steps(row.run_id))
    total = sum(r.steps for r in runs)
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


async def read_start(journal: JournalLike, run_id: str) -> dict[str, Any] | None:
    """
    Read a run's start note with its baseline: ``digest``, ``baseline`` (the tree's
    :class:`~proctor.verifiers._index.Manifest`, or the file map older journals
    kept, or empty when no check needed it), ``baseline_files`` and
    ``baseline_tests``; None when the run has no start note.

    Raises:
        ConfigError: the journaled manifest is not the tree the start note names.
    """
    note = await journal.latest_note(run_id, NoteKind.START)
    if note is None:
        return None
    body = dict(note["body"])
    if "baseline" in body:
        # Written before the baseline had a note of its own: the file map itself.
        body["baseline"] = dict(body["baseline"])
        return body
    found = await journal.latest_note(run_id, NoteKind.BASELINE)
    extra = dict(found["body"]) if found is not None else {}
    digest = str(body.get("digest", ""))
    packed = extra.get("manifest")
    return {
        "digest": digest,
        "baseline": Manifest.from_bytes(base64.b64decode(packed), digest) if packed else {},
        "baseline_files": dict(extra.get("files") or {}),
        "baseline_tests": dict(extra.get("tests") or {}),
    }
