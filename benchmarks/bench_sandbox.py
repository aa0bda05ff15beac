"""
What the sandbox costs: a sandboxed ``run_command true`` against the same call on
the host and a plain spawn, and a sandboxed pytest check against the same check
on the host.

The command variants are interleaved round-robin in one process, so a change in
the machine's load hits them alike, with a pause after each call (``PAUSE``): a
run's commands come one a step, between model calls, and the pause lets each
variant start from a quiet machine (a prestarted sandbox is made in it). The
figures are medians of wall-clock time:

- ``sh``: ``sh -c true`` spawned with ``anyio.run_process``;
- ``bwrap``: ``bwrap --unshare-all --die-with-parent --ro-bind / / true``, the
  floor of any sandbox bubblewrap makes for a command;
- ``host``: ``run_command(["true"])`` on the host;
- ``cold``: ``run_command`` in the sandbox, made for the command (a call
  without a run's process groups, and every check);
- ``sandboxed``: ``run_command`` in the sandbox the way a run's commands run:
  handed to a sandbox made ahead (``ProcessGroups(prestart=True)`` with
  ``keep_spares`` running).

Run: ``python benchmarks/bench_sandbox.py [ROUNDS]``. Prints a table and writes
benchmarks/results/sandbox.json.
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from proctor.runtime._tools import sandbox as sb
from proctor.runtime._tools.process import ProcessGroups, run_command
from proctor.verifiers._checks import CommandCheck
from proctor.verifiers._more_checks import CheckContext

__all__ = ("check_round", "command_round", "main")

RESULTS = Path(__file__).resolve().parent / "results" / "sandbox.json"
TESTS = 20


def _spec(ws: Path) -> sb.SandboxSpec:
    return sb.SandboxSpec(ws, ro_binds=sb.python_binds(sys.executable))


async def _timed(fn: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await fn()
    return (time.perf_counter() - start) * 1000


PAUSE = 0.05
"""Seconds between two calls."""

BWRAP = ("bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "true")


async def command_round(ws: Path, rounds: int) -> dict[str, list[float]]:
    """Time ``true`` every way the module's docstring lists, interleaved."""
    spec = _spec(ws)
    groups = ProcessGroups(prestart=True)
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "sh": lambda: anyio.run_process(["sh", "-c", "true"], check=False),
        "bwrap": lambda: anyio.run_process(list(BWRAP), check=False),
        "host": lambda: run_command(["true"], cwd=ws, time_limit=30),
        "cold": lambda: run_command(["true"], cwd=ws, time_limit=30, sandbox=spec),
        "sandboxed": lambda: run_command(
            ["true"], cwd=ws, time_limit=30, sandbox=spec, groups=groups
        ),
    }
    samples: dict[str, list[float]] = {name: [] for name in calls}
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(groups.keep_spares)
            for call in calls.values():  # the probe, the support files, the first spare
                await call()
            for _ in range(rounds):
                for name, call in calls.items():
                    await anyio.sleep(PAUSE)
                    samples[name].append(await _timed(call))
            tg.cancel_scope.cancel()
    finally:
        await groups.terminate_all()
    return samples


async def check_round(ws: Path, rounds: int) -> dict[str, list[float]]:
    """Time a pytest check of ``TESTS`` tests, on the host and sandboxed."""
    (ws / "tests").mkdir(exist_ok=True)
    (ws / "tests" / "test_many.py").write_text(
        f"import pytest\n\n\n@pytest.mark.parametrize('i', range({TESTS}))\n"
        "def test_it(i):\n    assert i >= 0\n"
    )
    check = CommandCheck("tests", [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"])
    host = CheckContext()
    boxed = CheckContext(sandbox=_spec(ws))
    samples: dict[str, list[float]] = {"host": [], "sandboxed": []}
    for _ in range(rounds):
        samples["host"].append(await _timed(lambda: check.run_check(ws, "d", "v", host)))
        samples["sandboxed"].append(await _timed(lambda: check.run_check(ws, "d", "v", boxed)))
    return samples


def main() -> None:
    """Run the benchmark, print the table and write the JSON results."""
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    if sb.sandbox_available() is not None:
        sys.exit(f"no sandbox here: {sb.sandbox_available()}")
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        commands = anyio.run(command_round, ws, rounds, backend="asyncio")
        checks = anyio.run(check_round, ws, max(3, rounds // 20), backend="asyncio")
    rows = {f"command.{k}": statistics.median(v) for k, v in commands.items()}
    rows |= {f"check.{k}": statistics.median(v) for k, v in checks.items()}
    for base in ("host", "sh"):
        for variant in ("sandboxed", "cold", "bwrap"):
            rows[f"added.{variant}-{base}"] = statistics.median(
                s - b for s, b in zip(commands[variant], commands[base], strict=True)
            )
    rows["check.added"] = rows["check.sandboxed"] - rows["check.host"]
    for key, value in rows.items():
        print(f"{key:<24} {value:9.2f} ms")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "machine": platform.platform(),
                "rounds": rounds,
                "pause_s": PAUSE,
                "median_ms": rows,
                "samples_ms": commands,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
