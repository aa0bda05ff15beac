"""
Cost of one budget reservation round trip over the accountant's channels.

One round trip is what the controller pays around every step: send Reserve,
receive Granted, send Settle, receive Settled. The accountant runs as its own
task in the same process and event loop (asyncio), over bounded memory-object
streams, journaling through a no-op callback (so the numbers are the
accountant's, not the journal's: the journal's writes are measured with it).

Three budgets:
- ``counts``: steps, tool calls, tokens and cost;
- ``clocks``: the same, plus wall and working time with a reserve (two deadline
  watchers, moved at every settlement) and child CPU time (a ``getrusage``
  call at every settlement);
- ``lease``: the ``counts`` budget, the round trip made inside a lease (the
  reservation checks the lease and its lender).

For scale, ``echo`` is the same four channel operations against a task that
answers at once, as the accountant does with its channels, and keeps no books:
the floor the event loop sets.

Run: ``python benchmarks/bench_budget.py``. Prints a table of median and p90
microseconds per round trip and writes benchmarks/results/budget.json.
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from proctor import _channels as channels
from proctor.budgets._accountant import (
    AccountantReply,
    AccountantRequest,
    Granted,
    LeaseGranted,
    OpenLease,
    Reserve,
    Settle,
    Settled,
    run_accountant,
)
from proctor.budgets._budget import Budget, Ledger

__all__ = ("main",)

ROUND_TRIPS = 10_000
WARMUP = 500
RESULTS = Path(__file__).resolve().parent / "results" / "budget.json"

_COUNTS = {
    "steps": 1e9,
    "tool_calls": 1e9,
    "tokens_in": 1e12,
    "tokens_out": 1e12,
    "cost_usd": 1e9,
}
_CLOCKS = {
    **_COUNTS,
    "wall_seconds": 1e9,
    "working_seconds": 1e9,
    "child_cpu_seconds": 1e9,
}
_RESERVE = {"steps": 3.0, "wall_seconds": 60.0, "working_seconds": 60.0}
_ESTIMATE = {"steps": 1.0, "tool_calls": 1.0, "tokens_in": 2000.0, "tokens_out": 1000.0}
_ACTUAL = {"steps": 1.0, "tool_calls": 1.0, "tokens_in": 1800.0, "tokens_out": 250.0}


async def _no_record(amounts: Mapping[str, float], kind: str, note: str) -> None:
    return None


async def _round_trips(budget: Budget, in_lease: bool) -> list[float]:
    """Time ``ROUND_TRIPS`` reservation round trips; return microseconds each."""
    ledger = Ledger(budget)
    req_tx, req_rx = anyio.create_memory_object_stream[AccountantRequest](16)
    rep_tx, rep_rx = anyio.create_memory_object_stream[AccountantReply](16)
    samples: list[float] = []
    async with anyio.create_task_group() as tg, rep_rx:
        await tg.start(run_accountant, ledger, req_rx, rep_tx, _no_record)
        async with req_tx:
            lease = None
            if in_lease:
                await req_tx.send(OpenLease(0, {"steps": 1e8, "tokens_in": 1e11}))
                opened = await rep_rx.receive()
                assert isinstance(opened, LeaseGranted)
                lease = opened.lease
            ref = 0
            for i in range(WARMUP + ROUND_TRIPS):
                start = time.perf_counter_ns()
                ref += 1
                await req_tx.send(Reserve(ref, _ESTIMATE, lease=lease))
                grant = await rep_rx.receive()
                assert isinstance(grant, Granted)
                ref += 1
                await req_tx.send(Settle(ref, grant.reservation, _ACTUAL, lease=lease))
                settled = await rep_rx.receive()
                assert isinstance(settled, Settled)
                if i >= WARMUP:
                    samples.append((time.perf_counter_ns() - start) / 1000)
    return samples


async def _echo(
    requests: MemoryObjectReceiveStream[AccountantRequest],
    replies: MemoryObjectSendStream[AccountantReply],
) -> None:
    # The accountant's own way with its channels (proctor._channels).
    async with requests, replies:
        while True:
            try:
                request = await channels.receive(requests)
            except anyio.EndOfStream:
                return
            if isinstance(request, Reserve):
                await channels.send(replies, Granted(request.ref, 1, {}))
            else:
                await channels.send(replies, Settled(request.ref, {}))


async def _echo_round_trips() -> list[float]:
    """The same round trips against a task that keeps no books."""
    req_tx, req_rx = anyio.create_memory_object_stream[AccountantRequest](16)
    rep_tx, rep_rx = anyio.create_memory_object_stream[AccountantReply](16)
    samples: list[float] = []
    async with anyio.create_task_group() as tg, rep_rx:
        tg.start_soon(_echo, req_rx, rep_tx)
        async with req_tx:
            for i in range(WARMUP + ROUND_TRIPS):
                start = time.perf_counter_ns()
                await req_tx.send(Reserve(2 * i, _ESTIMATE))
                await rep_rx.receive()
                await req_tx.send(Settle(2 * i + 1, 1, _ACTUAL))
                await rep_rx.receive()
                if i >= WARMUP:
                    samples.append((time.perf_counter_ns() - start) / 1000)
    return samples


def _row(name: str, samples: list[float]) -> dict[str, Any]:
    return {
        "budget": name,
        "round_trips": len(samples),
        "median_us": round(statistics.median(samples), 2),
        "p90_us": round(statistics.quantiles(samples, n=10)[-1], 2),
    }


async def _run() -> list[dict[str, Any]]:
    return [
        _row("counts", await _round_trips(Budget(_COUNTS), in_lease=False)),
        _row("clocks", await _round_trips(Budget(_CLOCKS, _RESERVE), in_lease=False)),
        _row("lease", await _round_trips(Budget(_COUNTS), in_lease=True)),
        _row("echo", await _echo_round_trips()),
    ]


def main() -> None:
    """Run the benchmark, print the table, write the JSON."""
    rows = anyio.run(_run, backend="asyncio")
    print(f"{'budget':>8} {'round trips':>12} {'median us':>10} {'p90 us':>8}")
    for row in rows:
        print(
            f"{row['budget']:>8} {row['round_trips']:>12,} "
            f"{row['median_us']:>10.2f} {row['p90_us']:>8.2f}"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "benchmark": "budget",
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
