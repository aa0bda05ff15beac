"""
What the sandbox costs: a sandboxed ``run_command true`` against a plain spawn,
and a sandboxed pytest check against the same check on the host.

The variants are interleaved round-robin in one process, so a change in the
machine's load hits them alike. The figures are medians of wall-clock time.

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
from proctor.runtime._tools.process import run_command
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


async def command_round(ws: Path, rounds: int) -> dict[str, list[float]]:
    """Time ``true``: a plain spawn, ``run_command`` on the host, ``run_command`` sandboxed."""
    spec = _spec(ws)
    samples: dict[str, list[float]] = {"plain": [], "run_command": [], "sandboxed": []}

    async def plain() -> None:
        await anyio.run_process(["true"], check=False)

    async def host() -> None:
        await run_command(["true"], cwd=ws, time_limit=30)

    async def sandboxed() -> None:
        await run_command(["true"], cwd=ws, time_limit=30, sandbox=spec)

    await sandboxed()  # the probe and the support files, once
    for _ in range(rounds):
        samples["plain"].append(await _timed(plain))
        samples["run_command"].append(await _timed(host))
        samples["sandboxed"].append(await _timed(sandboxed))
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
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    if sb.sandbox_available() is not None:
        sys.exit(f"no sandbox here: {sb.sandbox_available()}")
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        commands = anyio.run(command_round, ws, rounds, backend="asyncio")
        checks = anyio.run(check_round, ws, max(3, rounds // 10), backend="asyncio")
    rows = {f"command.{k}": statistics.median(v) for k, v in commands.items()}
    rows |= {f"check.{k}": statistics.median(v) for k, v in checks.items()}
    rows["command.added"] = rows["command.sandboxed"] - rows["command.plain"]
    rows["check.added"] = rows["check.sandboxed"] - rows["check.host"]
    for key, value in rows.items():
        print(f"{key:<22} {value:9.1f} ms")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(
        json.dumps({"machine": platform.platform(), "rounds": rounds, "median_ms": rows}, indent=2)
        + "\n"
    )


if __name__ == "__main__":
    main()
