"""
Hook latency: a cold ``proctor hook claude`` process per call, as Claude Code runs
it, side by side with a no-op hook command (the interpreter reading stdin and
printing ``{}``), on a small repository.

    python benchmarks/bench_hooks.py [--calls 20]

Each sample is one process: PreToolUse (admit, journal), PostToolUse (tree
digest, judge, journal), and the no-op; then the same two hook calls answered by
a hook server (``proctor hooks serve``, here in a thread of this process).
Prints p50 and p90 in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import structlog

from proctor.runtime._hosting.hooks.server import serve_hooks

PAYLOAD = {
    "hook_event_name": "PreToolUse",
    "session_id": "bench",
    "tool_name": "Bash",
    "permission_mode": "default",
}


def _repo(root: Path) -> Path:
    work = root / "project"
    (work / "tests").mkdir(parents=True)
    for n in range(40):
        (work / f"mod{n}.py").write_text(f"def f{n}(x):\n    return x + {n}\n")
    (work / "tests" / "test_mod.py").write_text("def test_ok():\n    assert True\n")
    (root / "task.toml").write_text(
        '[task]\ngoal = "g"\n\n[[checks]]\nname = "t"\nrun = ["true"]\n\n'
        '[contract]\nprotected = ["tests/**"]\n'
    )
    return work


def _time(args: list[str], stdin: str) -> float:
    start = time.perf_counter()
    done = subprocess.run(args, input=stdin, capture_output=True, text=True, check=False)
    elapsed = (time.perf_counter() - start) * 1000
    if done.returncode != 0:
        raise SystemExit(f"{args[:4]} failed: {done.stderr[-500:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20)
    calls = parser.parse_args().calls
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    root = Path(tempfile.mkdtemp(prefix="bench-hooks-"))
    work = _repo(root)
    hook = [sys.executable, "-m", "proctor", "hook", "claude", "--task", str(root / "task.toml")]
    hook += ["--journal", str(root / "j.db")]
    noop = [sys.executable, "-c", "import sys; sys.stdin.read(); print('{}')"]
    names = ("no-op hook", "PreToolUse", "PostToolUse", "PreToolUse, server", "PostToolUse, server")
    samples: dict[str, list[float]] = {name: [] for name in names}
    stop = threading.Event()
    ready = threading.Event()
    server = threading.Thread(
        target=serve_hooks,
        args=(str(root / "j2.db"),),
        kwargs={"ready": lambda _: ready.set(), "stop": stop},
    )
    server.start()
    ready.wait(60)
    served = [*hook[:-1], str(root / "j2.db")]
    try:
        for n in range(calls):
            tool = {"command": f"echo {n}", "description": "bench"}
            pre = PAYLOAD | {"cwd": str(work), "tool_input": tool}
            post = pre | {"hook_event_name": "PostToolUse", "tool_response": {"stdout": f"{n}\n"}}
            samples["no-op hook"].append(_time(noop, json.dumps(pre)))
            samples["PreToolUse"].append(_time(hook, json.dumps(pre)))
            samples["PostToolUse"].append(_time(hook, json.dumps(post)))
            samples["PreToolUse, server"].append(_time(served, json.dumps(pre)))
            samples["PostToolUse, server"].append(_time(served, json.dumps(post)))
    finally:
        stop.set()
        server.join()
    print(f"{calls} calls each, cold processes, {sys.executable}")
    for name, values in samples.items():
        values.sort()
        p90 = values[int(0.9 * (len(values) - 1))]
        print(f"{name:20} p50 {statistics.median(values):7.1f} ms   p90 {p90:7.1f} ms")


if __name__ == "__main__":
    main()
