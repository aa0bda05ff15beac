"""
Many concurrent runs in one process: throughput, and the memory of an idle run.

1,000 :func:`proctor.run` calls in one task group, each with its own workspace
directory and its own journal file (one SQLite connection, hence one writer
thread, per run: runs never wait on each other's write lock). For comparison,
the same runs can all journal in one file (``shared_file``: still a connection
each, as ``run`` opens its journal), or all run on one open journal, one
connection for every run (``one_connection``, through the controller's
``start_run``, which :func:`proctor.resume` also uses). Each actor parks
at its first observation, waiting on an event, as an agent waits on its model:
when all runs are parked, the process's resident memory (RSS) is read and
compared with the RSS before the runs started; the difference over the number of
runs is the memory of an idle run, everything included (the Python objects of
its four tasks, its channels, its SQLite connection, cache and thread).
Then the event is set and every actor proposes its few ``noop`` steps and
stops; the total tool steps over the time from the release to the last run's
end is the throughput (the runs' ends, each a durable commit, are included).

Each repetition is a fresh child process (``python -m benchmarks.bench_concurrency``)
so that no repetition inherits the memory or threads of another. With
``--tracemalloc`` the child also traces Python allocations, for the Python heap
of an idle run alone (tracing slows everything: its throughput is not reported).

Run it through ``python benchmarks/run.py --only concurrency``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any, Literal

import anyio
from benchmarks.bench_loop import counting_actor, noop_registry, noop_task, quiet_logs

from proctor import FunctionActor, Observation, Proposal, Task, ToolCall, run
from proctor.runtime import Journal, ToolRegistry

__all__ = ("LAYOUTS", "Layout", "concurrent_runs", "main", "measure_in_child")

_ROOT = Path(__file__).resolve().parent.parent

Layout = Literal["file_per_run", "shared_file", "one_connection"]
LAYOUTS: tuple[Layout, ...] = ("file_per_run", "shared_file", "one_connection")


def _rss() -> int:
    """This process's resident set size, in bytes."""
    with open("/proc/self/statm", encoding="ascii") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


async def concurrent_runs(
    runs: int,
    steps: int,
    root: Path,
    *,
    layout: Layout = "file_per_run",
    trace: bool = False,
    window: contextlib.AbstractContextManager[object] | None = None,
) -> dict[str, Any]:
    """
    Start ``runs`` runs under ``root``, park them, measure, release them, time their steps.

    Args:
        runs: how many runs.
        steps: ``noop`` steps each run takes once released.
        root: an empty directory.
        layout: ``file_per_run`` (:func:`proctor.run` with a journal file each),
            ``shared_file`` (:func:`proctor.run`, all with the same file: a
            connection each) or ``one_connection`` (every run on one open
            journal, through the controller's ``start_run``).
        trace: trace Python allocations while the runs start.
        window: entered at the release, left when the last run ended (a profiler).

    Returns:
        ``start_s`` (until all are parked), ``rss_per_run`` and ``heap_per_run``
        (bytes, heap only when traced), ``steps_per_s`` (until the last run
        ended), ``steady_steps_per_s`` (until every run had journaled its steps,
        before the runs' ends), and the CPU time
        (``steps_cpu_s``, ``steps_main_cpu_s`` for the event loop's thread) and
        wall time (``steps_wall_s``) from the release to the end of the last run.
    """
    registry = noop_registry()
    parked = 0
    all_parked = anyio.Event()
    release = anyio.Event()
    stepped_at = 0.0

    def actor() -> FunctionActor:
        proposed = 0

        async def propose(observation: Observation) -> Proposal | None:
            nonlocal parked, proposed, stepped_at
            if proposed == 0:
                parked += 1
                if parked == runs:
                    all_parked.set()
                await release.wait()
            if proposed >= steps:
                # Asked again: its steps are journaled; what is left is its end.
                stepped_at = max(stepped_at, time.perf_counter())
                return None
            proposed += 1
            return ToolCall("noop", {"i": proposed})

        return FunctionActor(propose)

    # Warm up: everything a run loads or caches on first use is loaded now.
    (root / "warm").mkdir()
    await run(noop_task(root / "warm"), counting_actor(2), root / "warm.db", tools=registry)
    tasks = []
    for k in range(runs):
        workspace = root / f"w{k}"
        workspace.mkdir()
        journal = root / ("journal.db" if layout == "shared_file" else f"journal-{k}.db")
        tasks.append((noop_task(workspace), actor(), journal))
    stack = contextlib.AsyncExitStack()
    shared: Journal | None = None
    if layout == "one_connection":
        shared = await stack.enter_async_context(await Journal.open(root / "journal.db"))
    gc.collect()
    if trace:
        tracemalloc.start()
    heap_before = tracemalloc.get_traced_memory()[0] if trace else 0
    rss_before = _rss()
    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for task, act, journal in tasks:
            tg.start_soon(_one, task, act, shared or journal, registry)
        await all_parked.wait()
        parked_at = time.perf_counter()
        rss = _rss() - rss_before
        heap = tracemalloc.get_traced_memory()[0] - heap_before if trace else 0
        if trace:
            tracemalloc.stop()
        if window is not None:
            stack.enter_context(window)
        cpu, main_cpu = time.process_time(), time.thread_time()
        release.set()
    done_at = time.perf_counter()
    cpu, main_cpu = time.process_time() - cpu, time.thread_time() - main_cpu
    await stack.aclose()
    return {
        "runs": runs,
        "steps": steps,
        "layout": layout,
        "start_s": parked_at - start,
        "rss_per_run": rss / runs,
        "heap_per_run": heap / runs,
        "steps_per_s": runs * steps / (done_at - parked_at),
        "steady_steps_per_s": runs * steps / (stepped_at - parked_at) if steps else 0.0,
        "steps_cpu_s": cpu,
        "steps_main_cpu_s": main_cpu,
        "steps_wall_s": done_at - parked_at,
    }


async def _one(
    task: Task, actor: FunctionActor, journal: Path | Journal, registry: ToolRegistry
) -> None:
    await run(task, actor, journal, tools=registry)


def measure_in_child(
    runs: int, steps: int, *, layout: Layout = "file_per_run", trace: bool = False
) -> dict[str, Any]:
    """Run :func:`concurrent_runs` in a fresh child process; return its results."""
    argv = [sys.executable, "-m", "benchmarks.bench_concurrency", str(runs), str(steps)]
    argv += ["--layout", layout]
    if trace:
        argv.append("--tracemalloc")
    done = subprocess.run(argv, cwd=_ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the concurrency child failed ({done.returncode}):\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> None:
    """The child: measure once, print the results as one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1] if __doc__ else None)
    parser.add_argument("runs", type=int)
    parser.add_argument("steps", type=int)
    parser.add_argument("--layout", choices=LAYOUTS, default="file_per_run")
    parser.add_argument("--tracemalloc", action="store_true", help="trace Python allocations")
    args = parser.parse_args(argv)
    quiet_logs()
    with tempfile.TemporaryDirectory(prefix="proctor-bench-") as tmp:
        result = anyio.run(
            lambda: concurrent_runs(
                args.runs, args.steps, Path(tmp), layout=args.layout, trace=args.tracemalloc
            ),
            backend="asyncio",
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
