"""Resume an interrupted or ended task: a new run that inherits the task's history."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import attrs

from proctor._errors import ConfigError
from proctor.runtime._actors.base import Actor
from proctor.runtime._control.controller import StepCallback
from proctor.runtime._control.run import HEARTBEAT_SECONDS, Stopper, start_run
from proctor.runtime._journal import open_journal
from proctor.runtime._outcome import RunResult
from proctor.runtime._progress.policy import Policy
from proctor.runtime._task import Task
from proctor.runtime._tools.registry import ToolRegistry

__all__ = ("resume",)


async def resume(
    run_id: str,
    actor: Actor,
    journal: str | os.PathLike[str] = "proctor.db",
    *,
    task: Task | None = None,
    tools: ToolRegistry | None = None,
    on_step: StepCallback | None = None,
    actor_spec: Mapping[str, Any] | None = None,
    answer: str | None = None,
    stopper: Stopper | None = None,
    heartbeat_seconds: float = HEARTBEAT_SECONDS,
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
        actor: the actor for the new run.
        journal: the journal's path.
        task: the task, when it holds checks that live in code (Python checks,
            judges); by default it is rebuilt from the journal.
        tools: the tools on offer.
        on_step: called with each trace record.
        actor_spec: how to make the actor again, journaled for the next resume.
        answer: a person's answer to the question ``run_id`` ended on
            (``needs_input``): journaled as a ``user`` event and told to the actor
            before anything else.
        stopper: stops the new run from this process (see :class:`Stopper`).
        heartbeat_seconds: how often the host says it is alive.

    Raises:
        RunNotFoundError: no such run.
        ConfigError: the task cannot be rebuilt from the journal (pass ``task``),
            or an empty answer.
        WorkspaceBusyError: a live run holds the workspace.
    """
    if answer is not None and not answer.strip():
        raise ConfigError("resume: the answer is empty; say what the run needs to know")
    async with open_journal(journal) as j:
        parent = await j.get_run(run_id)
        stored = await j.get_task(parent.task_id)
        if task is None:
            task = Task.from_description(stored["spec"], task_id=parent.task_id)
        task = attrs.evolve(task, task_id=parent.task_id, policy=Policy.from_mapping(parent.policy))
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
        )
