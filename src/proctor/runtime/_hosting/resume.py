"""Resume an interrupted or ended task: a new run that inherits the task's history."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import attrs

from proctor._errors import ConfigError, FencedError
from proctor.runtime._actors.base import Actor
from proctor.runtime._control.controller import CallCallback, StepCallback
from proctor.runtime._control.history import proposals_made
from proctor.runtime._control.run import HEARTBEAT_SECONDS, Stopper, holder_alive, start_run
from proctor.runtime._journal import JournalLike, RunRow, open_journal
from proctor.runtime._outcome import RunResult
from proctor.runtime._progress.policy import Policy
from proctor.runtime._records import Disposition
from proctor.runtime._task import ActorSpec, Task
from proctor.runtime._tools.registry import ToolRegistry

__all__ = ("resume", "task_of_run")


async def _close_actorless(journal: JournalLike, run: RunRow) -> bool:
    """
    Close a run whose host died before it journaled the run's actor: nothing can
    make that actor again, so the run would stay ``running`` for ever. Returns
    whether it was closed now.
    """
    if run.status != "running":
        return False
    holder = await journal.task_holder(run.task_id)
    if holder is not None and holder.run_id == run.run_id and holder_alive(holder.holder):
        return False  # its host is alive, and about to journal it
    reason = {
        "code": "actor_never_journaled",
        "message": "the run's host died before it journaled the run's actor; "
        "resume the task with an actor given again (--script)",
        "owner": "operator",
    }
    try:
        await journal.end_run(
            run.run_id,
            run.epoch,
            disposition=Disposition.FAILED.value,
            stop_reason=reason,
            candidate_digest=None,
            handoff=None,
        )
    except FencedError:
        return False
    return True


async def resume(
    run_id: str,
    actor: Actor | None,
    journal: str | os.PathLike[str] = "proctor.db",
    *,
    task: Task | None = None,
    tools: ToolRegistry | None = None,
    on_step: StepCallback | None = None,
    actor_spec: Mapping[str, Any] | None = None,
    answer: str | None = None,
    stopper: Stopper | None = None,
    heartbeat_seconds: float = HEARTBEAT_SECONDS,
    on_call: CallCallback | None = None,
) -> RunResult:
    """
    Start a new run of the task of run ``run_id``, inheriting its history.

    The new run inherits the attempt history of every earlier run of the task
    (distinct work, failure signatures, candidate digests seen, evidence), its
    spend (the budget is the task's, not the run's), its policy and its starting
    candidate (for the scope check). The workspace is taken as it stands: a
    template is not laid again. The actor's first observation summarizes that
    history, built from the journal, not from the actor's notes.

    Args:
        run_id: any earlier run of the task (a unique prefix of 6+ characters).
        actor: the actor for the new run; None makes the actor the run was
            journaled with again, and a scripted one goes on after the proposals
            the task's runs with it already made (not from its first line).
        journal: the journal's path.
        task: the task, when it holds checks that live in code (Python checks,
            judges); by default it is rebuilt from the journal.
        tools: the tools on offer.
        on_step: called with each trace record.
        on_call: called just before each admitted tool call runs (see :func:`run`).
        actor_spec: how to make the actor again, journaled for the next resume.
        answer: a person's answer to the question ``run_id`` ended on
            (``needs_input``): journaled as a ``user`` event and told to the actor
            before anything else.
        stopper: stops the new run from this process (see :class:`Stopper`).
        heartbeat_seconds: how often the host says it is alive.

    Raises:
        RunNotFoundError: no such run.
        ConfigError: the task cannot be rebuilt from the journal (pass ``task``),
            or an empty answer; or ``actor`` is None and the run has no
            journaled actor (a run left ``running`` so by a dead host is closed
            ``failed`` first, reason ``actor_never_journaled``).
        RunHeld: another live host holds the task.
        WorkspaceBusyError: a live run holds the workspace.
    """
    # Kept whole: its docstring, the public reference, is most of it; the code is thirty lines.
    if answer is not None and not answer.strip():
        raise ConfigError("resume: the answer is empty; say what the run needs to know")
    async with open_journal(journal, create=False) as j:
        parent = await j.get_run(run_id)
        if actor is None:
            note = await j.latest_note(parent.run_id, "actor")
            if note is None:
                closed = await _close_actorless(j, parent)
                raise ConfigError(
                    f"run {parent.run_id} has no journaled actor"
                    + (", and its host is gone: it is now closed failed" if closed else "")
                    + "; pass the actor again (proctor resume --script FILE)"
                )
            spec = ActorSpec.from_description(note["body"])
            actor_spec = spec.describe()
            actor = spec.make(already=await proposals_made(j, parent.task_id, actor_spec))
        task = await _task_of(j, parent, task)
        return await start_run(
            task,
            actor,
            j,
            tools=tools,
            on_step=on_step,
            parent_run_id=parent.run_id,
            actor_spec=actor_spec,
            answer=answer,
            stopper=stopper,
            heartbeat_seconds=heartbeat_seconds,
            on_call=on_call,
        )


async def _task_of(journal: JournalLike, parent: RunRow, task: Task | None) -> Task:
    """The task a resume of ``parent`` runs: ``task`` or the journaled one, under its policy."""
    if task is None:
        stored = await journal.get_task(parent.task_id)
        task = Task.from_description(stored["spec"], task_id=parent.task_id)
    return attrs.evolve(task, task_id=parent.task_id, policy=Policy.from_mapping(parent.policy))


async def task_of_run(run_id: str, journal: str | os.PathLike[str] = "proctor.db") -> Task:
    """
    Return the task of run ``run_id`` as the journal holds it, under the run's
    policy: what a resume of that run would run.

    Args:
        run_id: the run (a unique prefix of 6+ characters).
        journal: the journal's path or URL.

    Raises:
        RunNotFoundError: no such run.
        ConfigError: the task holds checks that live in code and cannot be rebuilt.
    """
    async with open_journal(journal, create=False) as j:
        return await _task_of(j, await j.get_run(run_id), None)
