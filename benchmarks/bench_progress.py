"""
Per-step cost of the controller's progress check, against a naive one.

A step is one action decided by the decision core (`Judge.round`): normalize
it, fingerprint its result, update the distinct-work set, the failure counts,
the candidate history and the loop shapes, and decide. The history already
holds 100, 10,000 or 100,000 steps of distinct work. The naive check keeps the
same facts as sorted sets and re-serializes them to JSON and hashes them at
every step, as a checkpoint-everything framework would.

Run: ``python benchmarks/bench_progress.py``. Prints a table of median
microseconds per step and writes benchmarks/results/progress.json.
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from pathlib import Path

from proctor._digest import digest
from proctor.runtime._progress.judge import Act, Judge, TaskFacts
from proctor.runtime._progress.normalize import fingerprint
from proctor.runtime._progress.policy import Policy
from proctor.runtime._records import ToolCall, ToolResult, ToolStatus

__all__ = ("main",)

SIZES = (100, 10_000, 100_000)
STEPS = 2_000
NAIVE_STEPS = {100: 200, 10_000: 20, 100_000: 4}
RESULTS = Path(__file__).resolve().parent / "results" / "progress.json"


def _act(i: int) -> Act:
    call = ToolCall("run_command", {"cmd": f"pytest -q tests/test_{i % 97}.py -k case_{i}"})
    output = f"1 passed in 0.{i % 90:02d}s at 2026-11-30T01:{i % 60:02d}:00Z (case {i})"
    return Act(call, ToolResult(ToolStatus.OK, output, 0), "d0", "d0")


def _judge(history: int) -> Judge:
    judge = Judge(TaskFacts(), Policy(stall_threshold=0), "d0")
    for i in range(history):
        judge.round([_act(i)])
    return judge


def _time_judge(history: int) -> list[float]:
    judge = _judge(history)
    samples = []
    for i in range(history, history + STEPS):
        act = _act(i)
        start = time.perf_counter_ns()
        judge.round([act])
        samples.append((time.perf_counter_ns() - start) / 1000)
    return samples


class _Naive:
    """The same facts, re-serialized and hashed whole at every step."""

    def __init__(self) -> None:
        self.work: set[tuple[str, ...]] = set()
        self.digests: set[str] = {"d0"}

    def step(self, act: Act) -> str:
        key = json.dumps({"tool": act.call.tool, "args": act.call.args}, sort_keys=True)
        self.work.add(("tool", key, fingerprint(act.result.output)))
        self.digests.add(act.after)
        state = {"work": sorted(self.work), "digests": sorted(self.digests)}
        return digest(json.dumps(state, sort_keys=True))


def _time_naive(history: int) -> list[float]:
    naive = _Naive()
    for i in range(history):
        naive.work.add(("tool", str(i), digest(str(i))))
    samples = []
    for i in range(history, history + NAIVE_STEPS[history]):
        act = _act(i)
        start = time.perf_counter_ns()
        naive.step(act)
        samples.append((time.perf_counter_ns() - start) / 1000)
    return samples


def main() -> None:
    """Run the benchmark, print the table, write the JSON."""
    rows = []
    for size in SIZES:
        ours = _time_judge(size)
        naive = _time_naive(size)
        rows.append(
            {
                "history": size,
                "judge_median_us": round(statistics.median(ours), 2),
                "judge_p90_us": round(statistics.quantiles(ours, n=10)[-1], 2),
                "naive_median_us": round(statistics.median(naive), 1),
            }
        )
    base = rows[0]["judge_median_us"]
    for row in rows:
        row["judge_ratio_to_100"] = round(row["judge_median_us"] / base, 3)
    print(f"{'history':>9} {'judge us/step':>14} {'p90':>8} {'ratio':>7} {'naive us/step':>15}")
    for row in rows:
        print(
            f"{row['history']:>9,} {row['judge_median_us']:>14.2f} {row['judge_p90_us']:>8.2f} "
            f"{row['judge_ratio_to_100']:>7.3f} {row['naive_median_us']:>15,.1f}"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "benchmark": "progress",
                "python": platform.python_version(),
                "machine": platform.machine(),
                "argv": sys.argv,
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
