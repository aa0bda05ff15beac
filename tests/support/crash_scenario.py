"""
The crash-matrix scenario: one task whose actor makes several effectful calls.

Run as a program, in a subprocess of its own::

    python tests/support/crash_scenario.py --journal J --workspace W --service URL --task-id T
        [--hold] [--trace FILE]

It starts task ``T``, or, when the journal already holds a run of ``T`` that is
still ``running`` (its host died), resumes that run. When the task's latest run
has ended, there is nothing to do and it says so. It prints one line of JSON:
``{"action": "started" | "resumed" | "nothing", "run_id": ..., "disposition": ...}``.

The actor (:class:`~proctor.ScriptedActor`) proposes :func:`script`: file writes
(two of them to one file), two POSTs to the test service (one target), a command
that appends a line to a file, a completion, then one write after the
completion, which must be refused. A resumed actor (:class:`ResumingActor`)
reads the journal at its first observation, once the run has reconciled the
effects its predecessor left open, and leaves out every call whose effect
happened or may have happened (:func:`remaining`): confirmed, found applied by
a reconciliation, or escalated to an operator. A call whose effect a
reconciliation found not applied is proposed again, under a new key.

``--trace FILE`` appends the label of every journal boundary the process
passes to FILE, in order: the crash points a run offers. ``--hold`` makes the
command keep running after it appended its line, so that a host killed while
it runs leaves a live child behind.

The harness imports this module for the script; run as a program it imports
nothing from the tests.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import anyio
import attrs
import structlog

from proctor import (
    Budget,
    CommandCheck,
    Completion,
    Observation,
    Policy,
    Proposal,
    ScriptedActor,
    Task,
)
from proctor import ToolCall as ToolCall
from proctor.runtime import open_journal, resume, run
from proctor.runtime._effects.http import http_tools
from proctor.runtime._effects.ledger import args_hash
from proctor.runtime._journal import EffectRow
from proctor.runtime._tools.registry import ToolRegistry

__all__ = (
    "DONE_STATES",
    "FILE_CONTENT",
    "HOLD_SECONDS",
    "LINE",
    "LOG_FILE",
    "POST_COMPLETION",
    "STEP_LIMIT",
    "ResumingActor",
    "command",
    "main",
    "post_bodies",
    "remaining",
    "script",
    "task_for",
)

#: The step limit of the task: a resumed run must inherit what was spent of it.
STEP_LIMIT = 60

#: Effect states after which a call is not proposed again: it happened, or it may
#: have and an operator decides.
DONE_STATES: frozenset[str] = frozenset({"confirmed", "reconciled_applied", "escalated"})

#: What the scenario's files hold once it has run: a.txt is written twice.
FILE_CONTENT: dict[str, str] = {"a.txt": "alpha 2\n", "b.txt": "bravo\n"}

#: The file the command appends to, and the line it appends.
LOG_FILE = "log.txt"
LINE = "appended-once"

#: The write proposed after the completion: it must be refused, never applied.
POST_COMPLETION = "after.txt"

#: How long a held command runs (see :func:`command`): far longer than any recovery.
HOLD_SECONDS = 60


def post_bodies(task_id: str) -> list[dict[str, str]]:
    """Return the bodies of the scenario's POSTs for ``task_id``, in order."""
    return [{"task": task_id, "item": "widget"}, {"task": task_id, "item": "gadget"}]


def command(hold: bool = False) -> str:
    """
    Return the scenario's command: it appends :data:`LINE` to :data:`LOG_FILE`.

    Args:
        hold: then it keeps running for :data:`HOLD_SECONDS` (a child that is
            still there when its host dies).
    """
    line = f"echo {LINE} >> {LOG_FILE}"
    return f"{line}; sleep {HOLD_SECONDS}" if hold else line


def script(service: str, task_id: str, hold: bool = False) -> list[Proposal]:
    """
    Return the whole script of task ``task_id``, its effectful calls each distinct.

    Args:
        service: the test service's base URL.
        task_id: the task; the POST bodies name it.
        hold: the command keeps running (see :func:`command`).
    """
    widget, gadget = post_bodies(task_id)
    url = f"{service}/items"
    return [
        ToolCall("write_file", {"path": "a.txt", "content": "alpha 1\n"}),
        ToolCall("http_request", {"method": "POST", "url": url, "body": widget}),
        ToolCall("run_command", {"cmd": command(hold)}),
        ToolCall("write_file", {"path": "b.txt", "content": FILE_CONTENT["b.txt"]}),
        ToolCall("http_request", {"method": "POST", "url": url, "body": gadget}),
        ToolCall("write_file", {"path": "a.txt", "content": FILE_CONTENT["a.txt"]}),
        Completion("every file written, every item posted"),
        ToolCall("write_file", {"path": POST_COMPLETION, "content": "too late\n"}),
    ]


def remaining(proposals: Sequence[Proposal], effects: Iterable[EffectRow]) -> list[Proposal]:
    """
    Leave out of ``proposals`` the calls whose effect is done (see :data:`DONE_STATES`).

    A call is matched to its effects by the hash of its arguments: every call of
    the script has its own arguments.
    """
    done = {e.args_hash for e in effects if e.state in DONE_STATES}
    return [p for p in proposals if not (isinstance(p, ToolCall) and args_hash(p.args) in done)]


@attrs.define(eq=False)
class ResumingActor:
    """
    The actor of a resumed run: at its first observation, once the run has
    recovered the effects its predecessor left open, it reads the journal and
    proposes what remains of the script.

    Args:
        proposals: the whole script.
        journal: the journal.
        task_id: the task.
    """

    proposals: list[Proposal]
    journal: str
    task_id: str
    _script: ScriptedActor | None = None

    async def propose(self, observation: Observation) -> Proposal | None:
        """Return the next proposal of what remains."""
        if self._script is None:
            async with open_journal(self.journal) as j:
                effects = await j.effects(task_id=self.task_id)
            self._script = ScriptedActor(remaining(self.proposals, effects))
        return await self._script.propose(observation)


def task_for(workspace: Path, task_id: str, hold: bool = False) -> Task:
    """Return the scenario's task, working in ``workspace``; a held command may run long."""
    return Task(
        goal="write the files, post the items, append the line",
        workspace=workspace,
        checks=(CommandCheck("ok", ["true"]),),
        budget=Budget({"steps": STEP_LIMIT}),
        policy=Policy(stall_threshold=0),
        task_id=task_id,
        command_time_limit=HOLD_SECONDS * 2 if hold else 30.0,
    )


def _registry() -> ToolRegistry:
    registry = ToolRegistry.builtin()
    for tool in http_tools(time_limit=10.0, lookup_time_limit=10.0, trust_env=False):
        registry.register(tool)
    return registry


async def _main(
    journal: str, workspace: Path, service: str, task_id: str, hold: bool
) -> dict[str, object]:
    task = task_for(workspace, task_id, hold)
    whole = script(service, task_id, hold)
    async with open_journal(journal) as j:
        runs = await j.runs_of_task(task_id)
    if not runs:
        result = await run(task, ScriptedActor(whole), journal, tools=_registry())
        action = "started"
    elif runs[-1].status != "running":
        return {"action": "nothing", "run_id": runs[-1].run_id, "disposition": runs[-1].status}
    else:
        actor = ResumingActor(whole, journal, task_id)
        result = await resume(runs[-1].run_id, actor, journal, task=task, tools=_registry())
        action = "resumed"
    return {"action": action, "run_id": result.run_id, "disposition": result.disposition.value}


def main(argv: Sequence[str] | None = None) -> None:
    """Run the scenario once (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1] if __doc__ else None)
    parser.add_argument("--journal", required=True, help="a SQLite file or a postgresql:// URL")
    parser.add_argument("--workspace", type=Path, required=True)
    parser.add_argument("--service", required=True)
    parser.add_argument("--task-id", default="crash-scenario")
    parser.add_argument("--hold", action="store_true", help="the command keeps running")
    parser.add_argument("--trace", type=Path, help="append every journal boundary's label here")
    args = parser.parse_args(argv)
    # The journal read the crash hook's variables when it was imported: the
    # children of this process (commands, checks) must not inherit them.
    os.environ.pop("PROCTOR_CRASH_AT", None)
    os.environ.pop("PROCTOR_CRASH_LOG", None)
    if args.trace is not None:
        _trace_boundaries(args.trace)
    # Warnings and errors only: the harness reads the outcome, not the log.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    outcome = anyio.run(_main, args.journal, args.workspace, args.service, args.task_id, args.hold)
    print(json.dumps(outcome), flush=True)


def _trace_boundaries(path: Path) -> None:
    """Record the label of every journal boundary this process passes, in order, in ``path``."""
    from proctor.runtime._journal import crash

    def traced(label: str) -> None:
        with path.open("a", encoding="utf-8") as out:
            out.write(label + "\n")

    crash.tracer = traced


if __name__ == "__main__":
    main()
