"""
Per-step cost of the distinct-work fingerprint: WorkSet against naive recomputation.

A step adds one new work item and reads the fingerprint of all work so far. The
history already holds 100, 10,000 or 100,000 items. WorkSet keeps a running,
order-independent sum of item hashes; the naive way sorts and hashes the whole
history at every step, so only a few of its steps are timed at each size.

Run: ``python benchmarks/bench_workset.py``. Prints a table of median
nanoseconds per step and writes benchmarks/results/workset.json.
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from pathlib import Path

from proctor.runtime._progress.workset import WorkSet, naive_fingerprint

__all__ = ("main",)

SIZES = (100, 10_000, 100_000)
WORKSET_STEPS = 2_000
NAIVE_STEPS = {100: 200, 10_000: 20, 100_000: 5}
RESULTS = Path(__file__).resolve().parent / "results" / "workset.json"


def _item(i: int) -> tuple[str, str, str]:
    return ("command", f"pytest -q tests/test_{i % 97}.py -k case_{i}", str(i % 3))


def _time_workset(size: int) -> list[int]:
    work = WorkSet()
    for i in range(size):
        work.add(*_item(i))
    samples: list[int] = []
    for i in range(size, size + WORKSET_STEPS):
        parts = _item(i)
        start = time.perf_counter_ns()
        work.add(*parts)
        _ = work.fingerprint
        samples.append(time.perf_counter_ns() - start)
    return samples


def _time_naive(size: int) -> list[int]:
    history: list[tuple[str, ...]] = [_item(i) for i in range(size)]
    samples: list[int] = []
    for i in range(size, size + NAIVE_STEPS[size]):
        parts = _item(i)
        start = time.perf_counter_ns()
        history.append(parts)
        _ = naive_fingerprint(history)
        samples.append(time.perf_counter_ns() - start)
    return samples


def main() -> None:
    """Run the benchmark, print the table and write the JSON results."""
    rows: list[dict[str, object]] = []
    for size in SIZES:
        workset = statistics.median(_time_workset(size))
        naive = statistics.median(_time_naive(size))
        rows.append(
            {
                "history": size,
                "workset_median_ns": round(workset),
                "workset_steps": WORKSET_STEPS,
                "naive_median_ns": round(naive),
                "naive_steps": NAIVE_STEPS[size],
                "speedup": round(naive / workset, 1),
            }
        )

    print(f"{'history':>9}  {'WorkSet ns/step':>16}  {'naive ns/step':>15}  {'speedup':>9}")
    for row in rows:
        print(
            f"{row['history']:>9,}  {row['workset_median_ns']:>16,}  "
            f"{row['naive_median_ns']:>15,}  {row['speedup']:>8}x"
        )

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "workset",
        "unit": "median ns per step (add one item, read the fingerprint)",
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "machine": platform.machine(),
        "rows": rows,
    }
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
