"""
The same durable loop in LangGraph: a two-node graph checkpointed in SQLite at every step.

The graph is ``agent -> tool -> agent -> ...``: the agent node proposes a call of
the same trivial tool (``noop`` with its own ``i``, returning ``ok``), the tool
node runs it, and a conditional edge ends the graph after N tool steps. The
state is three small fields (step, call, result), so a checkpoint does not grow
with the history: this favours LangGraph over the usual message-list state.
Every super-step is checkpointed in a SQLite file in a temporary directory.

Three configurations:

- ``matched``: ``AsyncSqliteSaver`` and ``ainvoke`` with ``durability="sync"``
  (each checkpoint is written before the next step runs, as proctor journals a
  step before it reports it) on a connection with ``PRAGMA synchronous=NORMAL``
  (the level of proctor's journal for ordinary steps);
- ``default``: ``AsyncSqliteSaver`` with LangGraph's defaults
  (``durability="async"``: a checkpoint is written while the next step runs;
  SQLite's default ``synchronous=FULL``);
- ``sync_api``: the synchronous ``SqliteSaver`` and ``invoke``, as ``matched``
  otherwise. It blocks the event loop of an async host while it runs.

The time is that of the whole run: opening the connection, setting up the
tables, compiling the graph, N steps, closing. Run it through
``python benchmarks/run.py --only loop``.
"""

from __future__ import annotations

import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypedDict

import aiosqlite
import anyio
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Durability

__all__ = ("CONFIGS", "langgraph_loop")

Config = Literal["matched", "default", "sync_api"]
CONFIGS: tuple[Config, ...] = ("matched", "default", "sync_api")


class State(TypedDict):
    """The graph's state: the step count, the proposed call, the tool's result."""

    step: int
    call: dict[str, Any]
    result: str


def _noop(args: dict[str, Any]) -> str:
    return "ok"


def _graph(steps: int, saver: BaseCheckpointSaver[Any]) -> CompiledStateGraph[Any]:
    def agent(state: State) -> dict[str, Any]:
        return {"call": {"tool": "noop", "args": {"i": state["step"] + 1}}}

    def tool(state: State) -> dict[str, Any]:
        return {"result": _noop(state["call"]["args"]), "step": state["step"] + 1}

    def route(state: State) -> str:
        return END if state["step"] >= steps else "agent"

    graph = StateGraph(State)
    graph.add_node("agent", agent)
    graph.add_node("tool", tool)
    graph.add_edge(START, "agent")
    graph.add_edge("agent", "tool")
    graph.add_conditional_edges("tool", route, ["agent", END])
    return graph.compile(checkpointer=saver)


def _settings(steps: int) -> RunnableConfig:
    # Two super-steps per tool step, and a margin.
    return {"configurable": {"thread_id": "bench"}, "recursion_limit": 2 * steps + 10}


_START: dict[str, Any] = {"step": 0, "call": {}, "result": ""}


def _check(out: dict[str, Any], steps: int) -> None:
    if out["step"] != steps:
        raise RuntimeError(f"the graph ran {out['step']} tool steps, not {steps}")


async def _async_loop(steps: int, path: Path, durability: Durability, sync: str | None) -> float:
    start = time.perf_counter()
    async with aiosqlite.connect(path) as conn:
        if sync is not None:
            await conn.execute(f"PRAGMA synchronous = {sync}")
        saver = AsyncSqliteSaver(conn)
        await saver.setup()
        out = await _graph(steps, saver).ainvoke(_START, _settings(steps), durability=durability)
    elapsed = time.perf_counter() - start
    _check(out, steps)
    return steps / elapsed


def _sync_loop(steps: int, path: Path) -> float:
    start = time.perf_counter()
    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        conn.execute("PRAGMA synchronous = NORMAL")
        saver = SqliteSaver(conn)
        saver.setup()
        out = _graph(steps, saver).invoke(_START, _settings(steps), durability="sync")
    finally:
        conn.close()
    elapsed = time.perf_counter() - start
    _check(out, steps)
    return steps / elapsed


def _runner(config: Config, steps: int, path: Path) -> Callable[[], float]:
    if config == "matched":
        return lambda: anyio.run(_async_loop, steps, path, "sync", "NORMAL", backend="asyncio")
    if config == "default":
        return lambda: anyio.run(_async_loop, steps, path, "async", None, backend="asyncio")
    return lambda: _sync_loop(steps, path)


def langgraph_loop(steps: int, config: Config) -> float:
    """
    Run the graph once in a fresh temporary directory; return tool steps per second.

    Args:
        steps: tool steps (each is an agent super-step and a tool super-step).
        config: one of :data:`CONFIGS`.
    """
    with tempfile.TemporaryDirectory(prefix="langgraph-bench-") as tmp:
        return _runner(config, steps, Path(tmp) / "checkpoints.db")()
