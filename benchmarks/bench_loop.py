"""
The durable loop: proctor's controller and SQLite journal driving an N-step actor/tool loop.

One step is what a hosted agent does between two model calls: the actor proposes
a tool call, the controller reserves budget for it, checks it against the fence
and the progress policy, runs the tool, settles the spend, journals the trace
record in the SQLite journal (a real file in a temporary directory) and sends
the actor its observation. The tool is ``noop`` (a read that returns ``ok``) and
each call has its own arguments, so the default progress policy sees new work
at every step and lets the loop run its N steps; then the actor stops proposing.

Two rates come from each run: over the whole :func:`proctor.run` call (opening
the journal, the run's set-up, N steps, the end of the run), and the steady
state, between the first and the last step's trace records. The workspace is
empty, or holds a tree of small source files (the run hashes it at its start,
and journals its file list as the baseline of the scope check).

The helpers here (the ``noop`` tool, its task, the counting actor, quiet logs)
are shared by the other benchmarks. Run it through ``python benchmarks/run.py
--only loop``, side by side with LangGraph on the same work
(:mod:`benchmarks.bench_langgraph`).
"""

from __future__ import annotations

import collections
import inspect
import logging
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import anyio
import attrs
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
from proctor.runtime._control.run import start_run
from proctor.runtime._journal import Journal, JournalLike

__all__ = (
    "NOOP_SPEC",
    "LoopRate",
    "counting_actor",
    "journal_calls",
    "journal_calls_at",
    "noop_registry",
    "noop_task",
    "proctor_loop",
    "proctor_loop_at",
    "quiet_logs",
    "source_tree",
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


@attrs.frozen
class LoopRate:
    """
    The rates of one loop, in tool steps per second.

    Args:
        whole: over the whole ``run`` call.
        steady: between the first and the last step's trace records.
    """

    whole: float
    steady: float


def source_tree(workspace: Path, files: int) -> None:
    """Fill ``workspace`` with ``files`` small Python files in 50 packages."""
    for i in range(files):
        package = workspace / f"pkg{i % 50}"
        package.mkdir(exist_ok=True)
        (package / f"mod_{i}.py").write_text(f"VALUE = {i}\n", encoding="utf-8")


async def proctor_loop_at(
    steps: int, root: Path, journal: str | Path | None = None, files: int = 0
) -> LoopRate:
    """
    Run the loop once under ``root``.

    Args:
        steps: tool steps in the loop.
        root: an empty directory for the workspace and (by default) the journal.
        journal: where to journal instead (a PostgreSQL URL, for one).
        files: small files in the workspace.

    Raises:
        RuntimeError: the run did not take the N steps (the policy stopped it).
    """
    workspace = root / "workspace"
    workspace.mkdir()
    source_tree(workspace, files)
    target = root / "journal.db" if journal is None else journal
    stamps: list[float] = []
    start = time.perf_counter()
    result = await run(
        noop_task(workspace),
        counting_actor(steps),
        target,
        tools=noop_registry(),
        on_step=lambda record: stamps.append(time.perf_counter()),
    )
    elapsed = time.perf_counter() - start
    # N action steps, then the step that records the actor's end.
    if result.steps != steps + 1:
        raise RuntimeError(
            f"the loop ran {result.steps} steps, not {steps + 1}: {result.disposition} "
            f"({result.stop_reason})"
        )
    return LoopRate(steps / elapsed, (steps - 1) / (stamps[steps - 1] - stamps[0]))


class _CountingJournal:
    """A journal that counts the calls made to it, by method (spend by kind)."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.calls: collections.Counter[str] = collections.Counter()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.journal, name)
        if not inspect.iscoroutinefunction(attribute):
            return attribute

        async def counted(*args: Any, **kwargs: Any) -> Any:
            label = name
            if name == "add_spend":
                label += ":" + str(kwargs.get("kind", args[3] if len(args) > 3 else None))
                if kwargs.get("defer"):
                    # Kept for the next operation's transaction: no round trip.
                    label += " (deferred)"
            self.calls[label] += 1
            return await attribute(*args, **kwargs)

        return counted


async def journal_calls_at(steps: int, root: Path) -> dict[str, float]:
    """
    Run the loop once on a counting journal; return the journal calls per step, by method.

    Calls made once per run (creating it, ending it) are left out: those whose
    count is below the number of steps. Deferred spend is counted apart: it is
    written by the next call's transaction, at no round trip of its own.
    """
    workspace = root / "workspace"
    workspace.mkdir()
    async with await Journal.open(root / "journal.db") as journal:
        counting = _CountingJournal(journal)
        await start_run(
            noop_task(workspace),
            counting_actor(steps),
            cast(JournalLike, counting),
            tools=noop_registry(),
        )
    return {name: n / steps for name, n in sorted(counting.calls.items()) if n >= steps}


def journal_calls(steps: int) -> dict[str, float]:
    """Count the journal calls per step of one loop, in a fresh temporary directory."""
    with tempfile.TemporaryDirectory(prefix="proctor-bench-") as tmp:
        return anyio.run(journal_calls_at, steps, Path(tmp), backend="asyncio")


def proctor_loop(steps: int, files: int = 0) -> LoopRate:
    """Run the loop once in a fresh temporary directory."""
    with tempfile.TemporaryDirectory(prefix="proctor-bench-") as tmp:
        return anyio.run(proctor_loop_at, steps, Path(tmp), None, files, backend="asyncio")
