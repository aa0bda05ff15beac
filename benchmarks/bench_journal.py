"""
What a step costs in the journal: effectful steps at long effect histories, command
steps against a bare spawn, bytes per step, and the loop against a bare transaction.

- ``resume_seconds(history)``: the same history, resumed: the time from
  ``resume`` to the actor's first observation.
- ``effect_step_ms(history)``: a task whose journal already holds ``history``
  settled effects (a real run's first effect, then rows added with ``sqlite3``
  in one transaction: its effect, its effect note, as the controller writes
  them), resumed with an actor that makes ``STEPS`` do-nothing effectful calls
  (``touch``, each on a target of its own); the median time between two steps'
  trace records.
- ``command_step_ms()``: a run of ``run_command true`` steps in an empty
  workspace, sandboxed as every command is, and with the sandbox off (what the
  journal and the controller add, without bubblewrap's start-up);
  ``runner_ms()`` the same command through ``run_command`` alone, with no run
  and no journal (what of the gap is the process runner's);
  ``bare_step_ms()`` the floor it is
  held to: ``sh -c true`` spawned with asyncio, then one durable (FULL) commit
  of a row through aiosqlite; ``bare_step_ms(sandboxed=True)`` the same spawn
  in a sandbox made for it (``launch``: the command's bubblewrap sandbox, pids
  cgroup and limits), the floor of one sandbox a command.
- ``bytes_per_step(kind)``: a run of ``command``, ``read`` or ``write`` steps
  with 2 KB payloads (a command's output, a file read, a file written, each
  different: text like source or a log, from a seeded generator, which zlib
  compresses about 2.5x), its journal compacted with ``VACUUM INTO``; the growth from
  ``BYTES_FROM`` to ``BYTES_STEPS`` steps, per step, over the 2,048 bytes each step records.
- ``floor_step_us()``: the transaction a noop step writes, written bare through
  aiosqlite (a 2.2 KB step row and its spend record, the step's charge, one row
  with its amounts as JSON; ``synchronous=NORMAL``),
  against which ``bench_loop``'s steady step is held.
- ``inline_floor_step_us()``: the same transaction through ``sqlite3`` in the
  caller's thread, with no hop to another (what the journal's inline
  connection does for an ordinary commit): what SQLite itself costs.

Run it through ``python benchmarks/run.py --only journal``, or alone:
``python -m benchmarks.bench_journal``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiosqlite
import anyio
from benchmarks.bench_loop import quiet_logs

from proctor import FunctionActor, Observation, Policy, Proposal, Task, ToolCall, resume, run
from proctor.runtime import (
    Effect,
    Tool,
    ToolContext,
    ToolRegistry,
    ToolResult,
    ToolSpec,
    ToolStatus,
)
from proctor.runtime._tools.process import run_command
from proctor.runtime._tools.sandbox import SandboxSettings, launch

__all__ = (
    "BYTES_STEPS",
    "HISTORIES",
    "KINDS",
    "STEPS",
    "bare_step_ms",
    "bytes_per_step",
    "command_step_ms",
    "effect_step_ms",
    "floor_step_us",
    "inline_floor_step_us",
    "main",
    "resume_seconds",
    "runner_ms",
)

HISTORIES = (100, 1_000, 10_000, 100_000)
STEPS = 200
BYTES_STEPS = 1_010
# The growth is measured from this many steps: SQLite's tables and indexes grow by
# whole 4 KiB pages, so a window of a hundred steps mis-states each by up to 41 bytes a step.
BYTES_FROM = 110
KINDS = ("command", "read", "write")
PAYLOAD = 2_048

TOUCH_SPEC = ToolSpec(
    "touch",
    Effect.WRITE,
    "Do nothing, with an effect on a target.",
    {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
        "additionalProperties": False,
    },
    targets=("name",),
)


async def _touch(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    return ToolResult(ToolStatus.OK, "ok")


def _registry() -> ToolRegistry:
    registry = ToolRegistry.builtin()
    registry.register(Tool(TOUCH_SPEC, _touch))
    return registry


def _task(workspace: Path, *, sandboxed: bool = True) -> Task:
    # No stall detection: every step is new work anyway; a long run must not stop.
    return Task(
        goal="touch things",
        workspace=workspace,
        kind="answer",
        policy=Policy(stall_threshold=0),
        sandbox=SandboxSettings() if sandboxed else SandboxSettings.from_mapping({"mode": "off"}),
    )


def _actor(calls: list[ToolCall]) -> FunctionActor:
    queue = list(calls)

    async def propose(observation: Observation) -> Proposal | None:
        return queue.pop(0) if queue else None

    return FunctionActor(propose)


def _add_history(journal: Path, task_id: str, run_id: str, effects: int) -> None:
    """Add ``effects`` settled effects of the task, as the controller journals them."""
    now = time.time()
    with sqlite3.connect(journal) as db:
        db.executemany(
            "INSERT INTO effects (key, run_id, task_id, step, tool, target, args_hash, state,"
            " created_at, updated_at, outcome) VALUES (?, ?, ?, 1, 'touch', ?, 'h', 'confirmed',"
            ' ?, ?, \'{"status":"ok"}\')',
            ((f"old-{i}", run_id, task_id, f"touch:h{i}", now, now) for i in range(effects)),
        )
        db.executemany(
            "INSERT INTO notes (run_id, kind, body, at) VALUES (?, 'effect', ?, ?)",
            (
                (
                    run_id,
                    json.dumps(
                        {
                            "key": f"old-{i}",
                            "tool": "touch",
                            "args": {"name": f"h{i}"},
                            "target": f"touch:h{i}",
                            "before": None,
                            "intended": None,
                        }
                    ),
                    now,
                )
                for i in range(effects)
            ),
        )
    db.close()


async def _effect_steps(root: Path, history: int) -> float:
    workspace = root / "w"
    workspace.mkdir()
    journal = root / "j.db"
    first = await run(
        _task(workspace), _actor([ToolCall("touch", {"name": "first"})]), journal, tools=_registry()
    )
    _add_history(journal, first.task_id, first.run_id, history - 1)
    stamps: list[float] = []
    calls = [ToolCall("touch", {"name": f"n{i}"}) for i in range(STEPS)]
    again = await resume(
        first.run_id,
        _actor(calls),
        journal,
        task=_task(workspace),
        tools=_registry(),
        on_step=lambda record: stamps.append(time.perf_counter()),
    )
    if again.steps < STEPS:
        raise RuntimeError(f"the resumed run took {again.steps} steps: {again.stop_reason}")
    gaps = [b - a for a, b in itertools.pairwise(stamps[:STEPS])]
    return statistics.median(gaps) * 1e3


async def _resume_first(root: Path, history: int) -> float:
    workspace = root / "w"
    workspace.mkdir()
    journal = root / "j.db"
    first = await run(
        _task(workspace), _actor([ToolCall("touch", {"name": "first"})]), journal, tools=_registry()
    )
    _add_history(journal, first.task_id, first.run_id, history - 1)
    seen: list[float] = []

    async def propose(observation: Observation) -> Proposal | None:
        seen.append(time.perf_counter())
        return None

    start = time.perf_counter()
    await resume(
        first.run_id, FunctionActor(propose), journal, task=_task(workspace), tools=_registry()
    )
    return seen[0] - start


def resume_seconds(history: int) -> float:
    """Seconds from ``resume`` to the first observation, at ``history`` settled effects."""
    with tempfile.TemporaryDirectory(prefix="proctor-bench-") as tmp:
        return anyio.run(_resume_first, Path(tmp), history, backend="asyncio")


def effect_step_ms(history: int) -> float:
    """The median milliseconds of an effectful step at ``history`` effects of history."""
    with tempfile.TemporaryDirectory(prefix="proctor-bench-") as tmp:
        return anyio.run(_effect_steps, Path(tmp), history, backend="asyncio")


async def _command_steps(root: Path, steps: int, sandboxed: bool) -> float:
    workspace = root / "w"
    workspace.mkdir()
    stamps: list[float] = []
    calls = [ToolCall("run_command", {"cmd": f"true {i}"}) for i in range(steps)]
    await run(
        _task(workspace, sandboxed=sandboxed),
        _actor(calls),
        root / "j.db",
        on_step=lambda record: stamps.append(time.perf_counter()),
    )
    gaps = [b - a for a, b in itertools.pairwise(stamps[:steps])]
    return statistics.median(gaps) * 1e3


def command_step_ms(steps: int = 50, *, sandboxed: bool = True) -> float:
    """
    The median milliseconds of a ``run_command true`` step in an empty workspace,
    in the sandbox (bubblewrap) or, with ``sandboxed=False``, with it off.
    """
    with tempfile.TemporaryDirectory(prefix="proctor-bench-") as tmp:
        return anyio.run(_command_steps, Path(tmp), steps, sandboxed, backend="asyncio")


async def _runner_steps(root: Path, steps: int) -> float:
    samples = []
    for _ in range(steps):
        start = time.perf_counter()
        await run_command("true", cwd=root, time_limit=60)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def runner_ms(steps: int = 50) -> float:
    """The median milliseconds of ``run_command("true")`` alone: no run, no journal."""
    with tempfile.TemporaryDirectory(prefix="proctor-bench-") as tmp:
        return anyio.run(_runner_steps, Path(tmp), steps, backend="asyncio")


async def _bare_steps(root: Path, steps: int, sandboxed: bool) -> float:
    samples = []
    workspace = root / "w"
    workspace.mkdir()
    spec = SandboxSettings().spec(workspace)
    async with aiosqlite.connect(root / "bare.db", isolation_level=None) as db:
        await db.executescript(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;"
            "CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT);"
        )
        for _ in range(steps):
            start = time.perf_counter()
            if sandboxed:
                # The same bubblewrap sandbox, cgroup and limits as a command's,
                # made for it: what one sandbox per command costs at the least.
                made = launch(["/bin/sh", "-c", "true"], spec)
                proc = await asyncio.create_subprocess_exec(
                    *made.argv, env=made.env, cwd=made.cwd, stdin=asyncio.subprocess.DEVNULL
                )
                await proc.wait()
                await made.wait_empty()
                made.release()
            else:
                proc = await asyncio.create_subprocess_exec("sh", "-c", "true")
                await proc.wait()
            await db.execute("BEGIN IMMEDIATE")
            await db.execute("INSERT INTO t (body) VALUES (?)", ("x" * 500,))
            await db.commit()
            samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def bare_step_ms(steps: int = 50, *, sandboxed: bool = False) -> float:
    """
    The median milliseconds of a bare ``sh -c true`` spawn and one durable commit;
    with ``sandboxed``, spawned in a bubblewrap sandbox made for it, as a command's.
    """
    with tempfile.TemporaryDirectory(prefix="proctor-bench-") as tmp:
        return anyio.run(_bare_steps, Path(tmp), steps, sandboxed, backend="asyncio")


_WORDS = [
    "def",
    "return",
    "self",
    "import",
    "from",
    "class",
    "if",
    "else",
    "for",
    "in",
    "while",
    "try",
    "except",
    "raise",
    "with",
    "as",
    "None",
    "True",
    "False",
    "value",
    "result",
    "path",
    "name",
    "data",
    "items",
    "index",
    "count",
    "error",
    "test",
    "check",
    "assert",
    "open",
    "read",
    "write",
    "close",
    "list",
    "dict",
    "set",
    "tuple",
    "str",
    "int",
    "float",
    "len",
    "range",
    "print",
    "config",
    "options",
    "args",
    "kwargs",
    "status",
    "output",
    "input",
    "buffer",
    "line",
    "file",
    "module",
    "package",
]


def payload(seed: int) -> str:
    """2,048 characters of text like a source file or a log: words, numbers, lines."""
    rng = random.Random(seed)
    lines: list[str] = []
    size = 0
    while size < PAYLOAD:
        words = [rng.choice(_WORDS) for _ in range(rng.randint(3, 9))]
        line = f"{'    ' * rng.randint(0, 3)}{' '.join(words)} = {rng.randint(0, 99_999)}\n"
        lines.append(line)
        size += len(line)
    return "".join(lines)[: PAYLOAD - 1] + "\n"


def _calls(kind: str, steps: int, workspace: Path) -> list[ToolCall]:
    calls = []
    for i in range(steps):
        text = payload(i)
        if kind == "write":
            calls.append(ToolCall("write_file", {"path": f"f{i}.txt", "content": text}))
        elif kind == "read":
            (workspace / f"f{i}.txt").write_text(text, encoding="utf-8")
            calls.append(ToolCall("read_file", {"path": f"f{i}.txt"}))
        else:
            (workspace / f"f{i}.txt").write_text(text, encoding="utf-8")
            calls.append(ToolCall("run_command", {"cmd": f"cat f{i}.txt"}))
    return calls


async def _journal_size(root: Path, kind: str, steps: int) -> int:
    workspace = root / f"w-{steps}"
    workspace.mkdir()
    journal = root / f"j-{steps}.db"
    await run(_task(workspace), _actor(_calls(kind, steps, workspace)), journal)
    compact = root / f"c-{steps}.db"
    with sqlite3.connect(journal) as db:
        db.execute("VACUUM INTO ?", (str(compact),))
    db.close()
    return compact.stat().st_size


def bytes_per_step(kind: str) -> float:
    """The journal's growth per ``kind`` step with a 2 KB payload, in bytes."""
    with tempfile.TemporaryDirectory(prefix="proctor-bench-") as tmp:
        small = anyio.run(_journal_size, Path(tmp), kind, BYTES_FROM, backend="asyncio")
        large = anyio.run(_journal_size, Path(tmp), kind, BYTES_STEPS, backend="asyncio")
    return (large - small) / (BYTES_STEPS - BYTES_FROM)


# The floors' file: a noop step's row (2.2 KB) and its spend record (one charge).
_FLOOR_SCHEMA = (
    "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"
    "CREATE TABLE steps (id INTEGER PRIMARY KEY, body TEXT);"
    "CREATE TABLE spend (id INTEGER PRIMARY KEY, kind TEXT, amounts TEXT);"
)
_FLOOR_STEP = ("INSERT INTO steps (body) VALUES (?)", ("x" * 2_200,))
_FLOOR_SPEND = (
    "INSERT INTO spend (kind, amounts) VALUES (?, ?)",
    [
        (
            "charge",
            json.dumps(
                {"steps": 1.0, "tool_calls": 1.0, "tool_calls:noop": 1.0, "wall_seconds": 0.1}
            ),
        ),
    ],
)


async def _floor(root: Path, steps: int) -> float:
    async with aiosqlite.connect(root / "floor.db", isolation_level=None) as db:
        await db.executescript(_FLOOR_SCHEMA)
        start = time.perf_counter()
        for _ in range(steps):
            await db.execute("BEGIN IMMEDIATE")
            await db.execute(*_FLOOR_STEP)
            await db.executemany(*_FLOOR_SPEND)
            await db.commit()
        return (time.perf_counter() - start) / steps * 1e6


def _inline_floor(root: Path, steps: int) -> float:
    db = sqlite3.connect(root / "inline.db", isolation_level=None)
    try:
        db.executescript(_FLOOR_SCHEMA)
        start = time.perf_counter()
        for _ in range(steps):
            db.execute("BEGIN IMMEDIATE")
            db.execute(*_FLOOR_STEP)
            db.executemany(*_FLOOR_SPEND)
            db.execute("COMMIT")
        return (time.perf_counter() - start) / steps * 1e6
    finally:
        db.close()


def inline_floor_step_us(steps: int = 1_000) -> float:
    """Microseconds per bare ``sqlite3`` transaction of the same rows, in this thread."""
    with tempfile.TemporaryDirectory(prefix="proctor-bench-") as tmp:
        return _inline_floor(Path(tmp), steps)


def floor_step_us(steps: int = 1_000) -> float:
    """Microseconds per bare aiosqlite transaction of a noop step's rows."""
    with tempfile.TemporaryDirectory(prefix="proctor-bench-") as tmp:
        return anyio.run(_floor, Path(tmp), steps, backend="asyncio")


def main() -> None:
    """Print every figure once."""
    quiet_logs()
    for history in HISTORIES:
        print(f"effectful step at {history:>7,} effects: {effect_step_ms(history):.2f} ms")
        print(f"resume at {history:>7,} effects: {resume_seconds(history):.3f} s")
    print(f"command step: {command_step_ms():.2f} ms sandboxed")
    print(f"command step: {command_step_ms(sandboxed=False):.2f} ms with the sandbox off")
    print(f"run_command alone: {runner_ms():.2f} ms")
    print(f"bare spawn + durable commit: {bare_step_ms():.2f} ms")
    print(f"bare sandboxed spawn + durable commit: {bare_step_ms(sandboxed=True):.2f} ms")
    for kind in KINDS:
        print(f"{kind:>8} step: {bytes_per_step(kind):,.0f} bytes for {PAYLOAD:,} recorded")
    print(f"bare transaction floor: {floor_step_us():.0f} µs")
    print(f"the same, sqlite3 in this thread: {inline_floor_step_us():.0f} µs")


if __name__ == "__main__":
    main()
