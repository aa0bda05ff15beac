"""
Resume of a run with a long history: the time until the actor's first observation.

The history is one run of 100,000 steps, written with the journal's own API:
the task and its run, the start note, the steps in batches
(``Journal.append_steps``), shaped as the controller writes them (each is a
real trace record of a ``noop`` call, taken from a real run, with its own
step, arguments, action and time), one settlement of spend per step (steps,
tool calls, wall and working time: five rows, as the accountant writes them),
and every 1,000 steps a file write's effect (its note, its durable dispatch,
its settlement). A decision core is fed every step as it is written, and the
snapshots of it a controller journals are journaled by the controller's own
code (``save_snapshot``): one every ``SNAPSHOT_EVERY`` steps, and one when the
run ends. Then the run ends, as a real run ends.

A second history is the same run, as a host that died left it: cut halfway
between two periodic snapshots (at ``steps - SNAPSHOT_EVERY / 2`` steps), still
``running``, with no end snapshot. Its resume ends the dead run, restores the
latest periodic snapshot and replays the steps after it.

A repetition copies a journal, calls :func:`proctor.resume` on the run with an
actor that notes the time of its first ``propose`` and stops, and reports the
time from the call to that first observation: opening the journal, reading the
task, rebuilding the history (the latest snapshot of the decision core, and the
steps after it), the effect ledger and the spend, and starting the new run. The
copy keeps every repetition's history the same.

Run it through ``python benchmarks/run.py --only resume``, or on its own
(``python -m benchmarks.bench_resume [STEPS]``) for both histories.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import attrs
from benchmarks.bench_loop import counting_actor, noop_registry, noop_task

from proctor import FunctionActor, Observation, Proposal, ToolCall, resume, run
from proctor._wire import to_jsonable
from proctor.runtime import Journal, TraceRecord
from proctor.runtime._control.history import SNAPSHOT_EVERY, save_snapshot, snapshot_due
from proctor.runtime._effects.ledger import args_hash, idempotency_key
from proctor.runtime._progress.judge import Act, Judge, normalized_action
from proctor.runtime._records import NoteKind, ToolResult, ToolStatus
from proctor.verifiers._candidate import TreeHasher

__all__ = (
    "History",
    "build",
    "build_history",
    "main",
    "resume_seconds",
    "temporary_root",
    "time_resume",
)

#: Steps per ``append_steps`` transaction.
BATCH = 1_000
#: One effect every this many steps.
EFFECT_EVERY = 1_000


@attrs.frozen
class History:
    """
    A journal holding one ended run with a long history.

    Args:
        root: the directory it is in.
        journal: the journal file.
        run_id: the run.
        steps: how many steps it has.
        build_seconds: how long writing it took (both histories).
        died: the same run as a host that died left it, between two snapshots.
    """

    root: Path
    journal: Path
    run_id: str
    steps: int
    build_seconds: float
    died: History | None = None

    def copy(self, name: str) -> Path:
        """Return a fresh copy of the journal file."""
        target = self.root / f"{name}.db"
        shutil.copyfile(self.journal, target)
        return target


async def _template(root: Path) -> dict[str, Any]:
    """A real trace record of a ``noop`` call, as the controller journals it."""
    records: list[TraceRecord] = []
    workspace = root / "template-workspace"
    workspace.mkdir()
    await run(
        noop_task(workspace),
        counting_actor(1),
        root / "template.db",
        tools=noop_registry(),
        on_step=records.append,
    )
    action = next(r for r in records if r.kind == "action")
    record: dict[str, Any] = to_jsonable(action)
    return record


def _steps(template: dict[str, Any], run_id: str, steps: int) -> Iterator[dict[str, Any]]:
    trace_id = uuid.uuid4().hex
    at = time.time() - steps
    event = template["event"]
    for i in range(1, steps + 1):
        call = ToolCall("noop", {"i": i})
        yield {
            **template,
            "trace_id": trace_id,
            "run_id": run_id,
            "step": i,
            "action": normalized_action(call),
            "state_version": i,
            "at": at + i,
            "event": {**event, "args": {"i": i}},
        }


async def build_history(root: Path, steps: int) -> History:
    """
    Write a journal under ``root`` holding one ended run of ``steps`` steps, and a copy
    of it as a host that died left it (:attr:`History.died`).

    Args:
        root: an empty directory.
        steps: how many steps the run has.
    """
    start = time.perf_counter()
    template = await _template(root)
    died_at = steps - min(SNAPSHOT_EVERY, steps) // 2
    died_path = root / "died.db"
    workspace = root / "workspace"
    workspace.mkdir()
    task = noop_task(workspace)
    task_id = f"history-{uuid.uuid4().hex}"
    run_id = uuid.uuid4().hex
    path = root / "history.db"
    settle = {
        "steps": 1.0,
        "tool_calls": 1.0,
        "tool_calls:noop": 1.0,
        "wall_seconds": 0.0011,
        "working_seconds": 0.0011,
    }
    # The decision core, fed each step as the controller would have (the same
    # call and result the step's event holds), for the snapshots.
    result = template["event"]["result"]
    outcome = ToolResult(ToolStatus.OK, result["output"], result["exit_code"])
    journal = await Journal.open(path)
    try:
        await journal.put_task(task_id, task.goal, task.describe(), task.contract_version)
        epoch = await journal.create_run(
            run_id,
            task_id,
            policy=task.policy.settings(),
            policy_version=task.policy.version,
            host="bench",
        )
        hasher = TreeHasher(workspace, task.ignore)
        # The facts a live run of this task holds: its registry's tool declarations
        # included, or the resume refuses the snapshots and replays every step.
        judge = Judge(
            task.facts(noop_registry().specs()),
            task.policy,
            hasher.digest(),
            contract_version=task.contract_version,
        )
        await journal.add_note(
            run_id, NoteKind.START, {"digest": hasher.digest(), "baseline": hasher.files()}
        )
        batch: list[dict[str, Any]] = []
        snapshot_step = 0
        for record in _steps(template, run_id, steps):
            step = record["step"]
            call = ToolCall("noop", {"i": step})
            judge.round([Act(call, outcome, judge.digest, judge.digest)])
            batch.append(record)
            await journal.add_spend(task_id, run_id, settle, "settle")
            if len(batch) == BATCH or step == died_at or snapshot_due(step, snapshot_step):
                await journal.append_steps(run_id, epoch, batch)
                batch = []
            if snapshot_due(step, snapshot_step):
                snapshot_step = step
                await save_snapshot(journal, run_id, judge, step)
            if step == died_at:
                # The host dies here: what it left is the journal as it stands.
                await journal.close()
                shutil.copyfile(path, died_path)
                journal = await Journal.open(path)
            if step % EFFECT_EVERY == 0:
                key = idempotency_key(task_id, step, 1)
                args = {"path": f"out/{step}.txt", "content": f"step {step}\n"}
                target = f"file:out/{step}.txt"
                body = {
                    "key": key,
                    "tool": "write_file",
                    "args": args,
                    "target": target,
                    "before": None,
                    "intended": None,
                }
                await journal.add_note(run_id, NoteKind.EFFECT, body)
                await journal.record_dispatch(
                    run_id=run_id,
                    epoch=epoch,
                    key=key,
                    task_id=task_id,
                    step=step,
                    tool="write_file",
                    target=target,
                    args_hash=args_hash(args),
                )
                await journal.settle_effect(key, "confirmed", {"status": "ok"})
        await journal.append_steps(run_id, epoch, batch)
        judge.signal("user_stop")
        await save_snapshot(journal, run_id, judge, steps, final=True)
        await journal.end_run(
            run_id,
            epoch,
            disposition="stopped",
            stop_reason={"code": "user_stop", "message": "stopped", "owner": "operator"},
            candidate_digest=hasher.digest(),
            handoff=None,
        )
    finally:
        await journal.close()
    died = History(root, died_path, run_id, died_at, 0.0)
    return History(root, path, run_id, steps, time.perf_counter() - start, died)


async def time_resume(history: History, journal: Path) -> float:
    """
    Resume the history's run from ``journal``; return seconds until the first observation.

    Raises:
        RuntimeError: the first observation does not summarize the whole history.
    """
    first: float | None = None
    text = ""

    async def propose(observation: Observation) -> Proposal | None:
        nonlocal first, text
        if first is None:
            first = time.perf_counter()
            text = observation.text
        return None

    start = time.perf_counter()
    await resume(history.run_id, FunctionActor(propose), journal, tools=noop_registry())
    if first is None or f"{history.steps} step(s) journaled" not in text:
        raise RuntimeError(f"the resumed run did not summarize its history: {text!r}")
    return first - start


def build(steps: int, root: Path) -> History:
    """Build a history under ``root`` (synchronously)."""
    return anyio.run(build_history, root, steps, backend="asyncio")


def resume_seconds(history: History, name: str) -> float:
    """Time one resume of a fresh copy of the history (synchronously)."""
    return anyio.run(time_resume, history, history.copy(name), backend="asyncio")


def temporary_root() -> tempfile.TemporaryDirectory[str]:
    """A temporary directory for a history."""
    return tempfile.TemporaryDirectory(prefix="proctor-bench-")


def main(argv: list[str] | None = None) -> None:
    """
    Time 3 resumes of each history (ended; died between snapshots) and print them.

    Args:
        argv: ``[STEPS]``, the history's length (100,000 by default).
    """
    args = sys.argv[1:] if argv is None else argv
    steps = int(args[0]) if args else 100_000
    with temporary_root() as tmp:
        history = build(steps, Path(tmp))
        assert history.died is not None
        print(f"built {steps:,} steps (and the died copy) in {history.build_seconds:.1f} s")
        for what, one in (("ended", history), ("died", history.died)):
            values = [resume_seconds(one, f"{what}-{rep}") for rep in range(3)]
            print(
                f"{what:>5}: {one.steps:,} steps, resume {statistics.median(values):.3f} s "
                f"(min {min(values):.3f}, max {max(values):.3f})"
            )


if __name__ == "__main__":
    main()
