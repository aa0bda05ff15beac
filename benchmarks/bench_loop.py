"""
The durable loop: proctor's controller and SQLite journal driving an N-step actor/tool loop.

One step is what a hosted agent does between two model calls: the actor proposes
a tool call, the controller reserves budget for it, checks it against the fence
and the progress policy, runs the tool, settles the spend, journals the trace
record in the SQLite journal (a real file in a temporary directory) and sends
the actor its observation. The tool is ``noop`` (a read that returns ``ok``) and
each call has its own arguments, so the default progress policy sees new work
at every step and lets the loop run its N steps; then the actor stops proposing.

The time is that of the whole :func:`proctor.run` call: opening the journal,
the run's set-up, N steps and the end of the run.

The helpers here (the ``noop`` tool, its task, the counting actor, quiet logs)
are shared by the other benchmarks. Run it through ``python benchmarks/run.py
--only loop``, side by side with LangGraph on the same work
(:mod:`benchmarks.bench_langgraph`).
"""

from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import structlog

from proctor import FunctionActor, Observation, Proposal, Task, ToolCall, run
from proctor.runtime import (
    Effect,
    Tool,
    ToolContext,
    ToolRegistry,
    ToolResult,
    ToolSpec,
    ToolStatus,
)

__all__ = (
    "NOOP_SPEC",
    "counting_actor",
    "noop_registry",
    "noop_task",
    "proctor_loop",
    "proctor_loop_at",
    "quiet_logs",
)

NOOP_SPEC = ToolSpec(
    "noop",
    Effect.READ,
    "Return ok.",
    {
        "type": "object",
        "properties": {"i": {"type": "integer"}},
        "required": ["i"],
        "additionalProperties": False,
    },
)


async def _noop(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    return ToolResult(ToolStatus.OK, "ok")


def quiet_logs() -> None:
    """Drop log events below warnings, as a production host would (one line per step else)."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


def noop_registry() -> ToolRegistry:
    """Return a registry that offers only the ``noop`` tool."""
    registry = ToolRegistry()
    registry.register(Tool(NOOP_SPEC, _noop))
    return registry


def noop_task(workspace: Path) -> Task:
    """Return an answer task (no checks to run) in ``workspace``, with the default policy."""
    return Task(goal="call noop", workspace=workspace, kind="answer")


def counting_actor(steps: int) -> FunctionActor:
    """Return an actor that proposes ``noop`` with i = 1..steps, then nothing more."""
    proposed = 0

    async def propose(observation: Observation) -> Proposal | None:
        nonlocal proposed
        if proposed >= steps:
            return None
        proposed += 1
        return ToolCall("noop", {"i": proposed})

    return FunctionActor(propose)


async def proctor_loop_at(steps: int, root: Path, journal: str | Path | None = None) -> float:
    """
    Run the loop once under ``root``; return steps per second.

    Args:
        steps: tool steps in the loop.
        root: an empty directory for the workspace and (by default) the journal.
        journal: where to journal instead (a PostgreSQL URL, for one).

    Raises:
        RuntimeError: the run did not take the N steps (the policy stopped it).
    """
    workspace = root / "workspace"
    workspace.mkdir()
    target = root / "journal.db" if journal is None else journal
    start = time.perf_counter()
    result = await run(noop_task(workspace), counting_actor(steps), target, tools=noop_registry())
    elapsed = time.perf_counter() - start
    # N action steps, then the step that records the actor's end.
    if result.steps != steps + 1:
        raise RuntimeError(
            f"the loop ran {result.steps} steps, not {steps + 1}: {result.disposition} "
            f"({result.stop_reason})"
        )
    return steps / elapsed


def proctor_loop(steps: int) -> float:
    """Run the loop once in a fresh temporary directory; return steps per second."""
    with tempfile.TemporaryDirectory(prefix="proctor-bench-") as tmp:
        return anyio.run(proctor_loop_at, steps, Path(tmp), backend="asyncio")
