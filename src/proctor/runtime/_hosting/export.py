"""
A journaled run as a recorded trajectory (format v1), and the actor it ran with.

``proctor export`` and ``proctor resume`` are thin over these: the journal is
read here, the CLI only prints.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from proctor._errors import ConfigError
from proctor._wire import event_to_json, step_event
from proctor.runtime._journal import JournalLike, open_journal
from proctor.runtime._progress.trajectory import FORMAT, VERSION
from proctor.runtime._records import NoteKind
from proctor.runtime._task import ActorSpec

__all__ = ("export_trajectory", "journaled_actor", "trajectory_lines", "latest_actor")


def trajectory_lines(
    task: Mapping[str, Any], policy: Mapping[str, Any], steps: Sequence[Mapping[str, Any]]
) -> list[str]:
    """
    Turn a journaled run into trajectory lines: the header, then one event per step.

    Steps with no event (a crash, refusals after the end) are left out.

    Args:
        task: the run's task row (``JournalLike.get_task``).
        policy: the run's policy settings.
        steps: the run's trace records (``JournalLike.steps``).
    """
    spec = task.get("spec") or {}
    contract = spec.get("contract") or {}
    header = {
        "format": FORMAT,
        "version": VERSION,
        "task": {
            "kind": contract.get("kind", "build"),
            "checks": [c["name"] for c in contract.get("checks", []) if c.get("required", True)],
            "required_files": contract.get("required_files", []),
            "protected": contract.get("protected", []),
        },
        "policy": dict(policy),
    }
    lines = [json.dumps(header, separators=(",", ":"))]
    for step in steps:
        event = step_event(step)
        if event is not None:
            lines.append(
                json.dumps(event_to_json(event), separators=(",", ":"), ensure_ascii=False)
            )
    return lines


async def export_trajectory(
    run_id: str, journal: str | os.PathLike[str] | JournalLike = "proctor.db"
) -> str:
    """
    Return a recorded run as a trajectory (format v1) that replays to the same decisions.

    Args:
        run_id: the run (a unique prefix of 6+ characters).
        journal: the journal's path or URL, or an open journal.

    Raises:
        RunNotFoundError: no such run.
    """
    if not isinstance(journal, str | os.PathLike):
        return await _export(journal, run_id)
    # A read: a journal that does not exist is an error, not a new empty file.
    async with open_journal(journal, create=False) as j:
        return await _export(j, run_id)


async def _export(journal: JournalLike, run_id: str) -> str:
    run = await journal.get_run(run_id)
    task = await journal.get_task(run.task_id)
    steps = await journal.steps(run.run_id)
    return "\n".join(trajectory_lines(task, run.policy, steps)) + "\n"


async def latest_actor(journal: JournalLike, run_id: str) -> ActorSpec | None:
    """
    Return the actor run ``run_id`` was started with, or None when none was journaled.

    Args:
        journal: an open journal.
        run_id: the run's full id.
    """
    note = await journal.latest_note(run_id, NoteKind.ACTOR)
    return None if note is None else ActorSpec.from_description(note["body"])


async def journaled_actor(
    run_id: str, journal: str | os.PathLike[str] | JournalLike = "proctor.db"
) -> ActorSpec:
    """
    Return how to make the actor a run was started with again (for a resume).

    Args:
        run_id: the run (a unique prefix of 6+ characters).
        journal: the journal's path or URL, or an open journal.

    Raises:
        RunNotFoundError: no such run.
        ConfigError: the run journaled no actor (it was started from code).
    """
    if not isinstance(journal, str | os.PathLike):
        return await _journaled_actor(journal, run_id)
    async with open_journal(journal) as j:
        return await _journaled_actor(j, run_id)


async def _journaled_actor(journal: JournalLike, run_id: str) -> ActorSpec:
    run = await journal.get_run(run_id)
    spec = await latest_actor(journal, run.run_id)
    if spec is None:
        raise ConfigError(f"run {run.run_id} has no journaled actor")
    return spec
