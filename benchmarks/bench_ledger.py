"""
Per-step cost of the effect ledger as a task's effect history grows.

A step plans one effect on a fresh target, marks it dispatched and settles it
(what the controller does for every effectful call), on a ledger that already
holds 100, 10,000 or 100,000 settled effects. Admission looks up what holds a
target in an index, so the cost should not grow with the history.

Run: ``python benchmarks/bench_ledger.py``. Prints median microseconds per step.
"""

from __future__ import annotations

import statistics
import time

from proctor.runtime._effects.ledger import EffectLedger, EffectState, Target

__all__ = ("SIZES", "main", "time_steps")

SIZES = (100, 10_000, 100_000)
STEPS = 2_000


def _ledger(size: int) -> EffectLedger:
    ledger = EffectLedger()
    for i in range(size):
        key = f"k{i}"
        ledger.plan(key, "write_file", {"path": f"f{i}"}, Target("file", f"f{i}"))
        ledger.dispatched(key)
        ledger.outcome(key, EffectState.CONFIRMED)
    return ledger


def time_steps(size: int, steps: int = STEPS) -> list[float]:
    """Return the microseconds of each of ``steps`` plan/dispatch/settle steps at ``size``."""
    ledger = _ledger(size)
    samples: list[float] = []
    for i in range(size, size + steps):
        key = f"k{i}"
        target = Target("file", f"f{i % 50}")
        start = time.perf_counter_ns()
        ledger.blocks(target, key)
        ledger.plan(key, "write_file", {"path": target.identity}, target)
        ledger.dispatched(key)
        ledger.outcome(key, EffectState.CONFIRMED)
        _ = len(ledger)
        samples.append((time.perf_counter_ns() - start) / 1000)
    return samples


def main() -> None:
    for size in SIZES:
        print(f"{size:>8,} effects of history: {statistics.median(time_steps(size)):8.2f} µs/step")


if __name__ == "__main__":
    main()
