"""
Queued runs and the workers that claim them.

``submit`` puts a task in the journal as a queued run. A worker claims runs one
at a time with a lease it renews while it works; every journal write of the run
is fenced by the claim's epoch. A worker that dies (or stalls past its lease)
loses the run: another worker claims it under a new epoch and goes on with
resume semantics (the run's own history, its spend, its open effects reconciled
first), and whatever the old worker still tries to write is refused.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping
from typing import Any

import anyio
import attrs
import structlog

from proctor._errors import ConfigError, FencedError, RunHeld
from proctor._logging import get_logger
from proctor.runtime._control.controller import StepCallback
from proctor.runtime._control.history import proposals_made
from proctor.runtime._control.run import Stopper, start_run
from proctor.runtime._hosting.export import latest_actor
from proctor.runtime._journal import Claimed, JournalLike, open_journal
from proctor.runtime._outcome import RunResult
from proctor.runtime._records import NoteKind
from proctor.runtime._task import Task

__all__ = ("WorkerStats", "submit", "work")

log = get_logger()


async def submit(
    task: Task,
    journal: str | os.PathLike[str],
    actor_spec: Mapping[str, Any],
    *,
    run_id: str | None = None,
) -> str:
    """
    Queue a run of ``task`` for a worker.

    Args:
        task: the task; its id is kept (or made) so that spend and history gather.
        journal: where the workers look (a ``postgresql://`` URL for many hosts).
        actor_spec: how a worker makes the actor (an ``[actor]`` table, with
            absolute paths).
        run_id: the run's id (default: a new one).

    Returns:
        The queued run's id.
    """
    run_id = run_id or uuid.uuid4().hex
    task_id = task.task_id or uuid.uuid4().hex
    async with open_journal(journal) as j:
        await j.put_task(task_id, task.goal, task.describe(), task.contract_version)
        await j.submit_run(
            run_id, task_id, policy=task.policy.settings(), policy_version=task.policy.version
        )
        await j.add_note(run_id, NoteKind.ACTOR, dict(actor_spec))
    return run_id


@attrs.define(eq=False)
class WorkerStats:
    """What a worker did: the runs it finished, and those it lost to another worker."""

    finished: list[RunResult] = attrs.field(factory=list)
    lost: list[str] = attrs.field(factory=list)


async def _one(
    journal: JournalLike,
    claimed: Claimed,
    lease_seconds: float,
    on_step: StepCallback | None,
    stopper: Stopper | None = None,
) -> RunResult | None:
    """Run one claimed run, renewing its lease; None when the lease was lost."""
    stored = await journal.get_task(claimed.task_id)
    run = await journal.get_run(claimed.run_id)
    task = Task.from_description(stored["spec"], task_id=claimed.task_id)
    task = attrs.evolve(task, policy=type(task.policy).from_mapping(run.policy))
    spec = await latest_actor(journal, claimed.run_id)
    if spec is None:
        raise ConfigError(f"queued run {claimed.run_id} has no journaled actor")
    # A run taken over goes on: its scripted actor after the proposals it made.
    made = 0
    if claimed.previous_epoch > 0:
        made = await proposals_made(
            journal, claimed.task_id, spec.describe(), run_id=claimed.run_id
        )
    actor = spec.make(already=made)
    lost = False
    result: RunResult | None = None
    async with anyio.create_task_group() as tg:

        async def renew() -> None:
            nonlocal lost
            while True:
                await anyio.sleep(lease_seconds / 3)
                if not await journal.renew_lease(claimed.run_id, claimed.epoch, lease_seconds):
                    lost = True
                    log.warning("worker.lease_lost", run_id=claimed.run_id, epoch=claimed.epoch)
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(renew)
        try:
            result = await start_run(
                task, actor, journal, on_step=on_step, claimed=claimed, stopper=stopper
            )
        except FencedError as exc:
            # Another worker took the run over: this one's writes are refused.
            log.warning("worker.fenced", run_id=claimed.run_id, error=str(exc))
            lost = True
        except RunHeld as exc:
            # Another live host runs the task: the run is claimed again once this
            # worker's lease on it runs out.
            log.warning("worker.task_held", run_id=claimed.run_id, holder=exc.holder)
            lost = True
        tg.cancel_scope.cancel()
    if lost:
        return None
    if result is not None:
        await journal.release_run(claimed.run_id, claimed.epoch)
    return result


async def work(
    journal: str | os.PathLike[str],
    *,
    worker: str | None = None,
    lease_seconds: float = 30.0,
    poll_seconds: float = 1.0,
    once: bool = False,
    max_runs: int | None = None,
    on_step: StepCallback | None = None,
    stopper: Stopper | None = None,
) -> WorkerStats:
    """
    Claim queued runs (or runs whose lease expired) and run them, one at a time.

    Args:
        journal: the shared journal (a ``postgresql://`` URL for many hosts; a
            SQLite file works for several workers on one host).
        worker: this worker's name (default: ``host:pid``).
        lease_seconds: how long a claim lasts unless renewed (renewed every third).
        poll_seconds: how long to wait when there is nothing to claim.
        once: return when there is nothing to claim instead of waiting.
        max_runs: return after this many runs.
        on_step: called with every trace record.
        stopper: stops the run in hand (``stopped``) and the worker with it.
    """
    name = worker or f"{socket.gethostname()}:{os.getpid()}"
    stats = WorkerStats()
    structlog.contextvars.bind_contextvars(worker=name)
    try:
        async with open_journal(journal) as j:
            while max_runs is None or len(stats.finished) + len(stats.lost) < max_runs:
                if stopper is not None and stopper.stopped:
                    break
                claimed = await j.claim_run(name, lease_seconds)
                if claimed is None:
                    if once:
                        break
                    with anyio.move_on_after(poll_seconds):
                        if stopper is not None:
                            await stopper.wait()
                        else:
                            await anyio.sleep(poll_seconds)
                    continue
                log.info("worker.claimed", run_id=claimed.run_id, epoch=claimed.epoch)
                result = await _one(j, claimed, lease_seconds, on_step, stopper)
                if result is None:
                    stats.lost.append(claimed.run_id)
                else:
                    stats.finished.append(result)
    finally:
        structlog.contextvars.unbind_contextvars("worker")
    return stats
