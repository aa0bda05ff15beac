"""
The durable record of one effect: ``Journal.record_dispatch``, then ``settle_effect``.

Before an effectful call (a file write, a POST, a command) leaves the process,
the controller records its dispatch in the journal and the commit is on disk
(``synchronous=FULL`` for that commit, whatever the journal's level); when the
call returns, it settles the effect's state. These two are what durability costs
per effect, on top of the step's own record. Each is timed on its own, on a real
file (a temporary directory on the machine's disk), one effect after another.

With ``PROCTOR_BENCH_PG_URL`` set, the same is timed on the PostgreSQL journal.
Run it through ``python benchmarks/run.py --only dispatch``.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path

import anyio

from proctor.runtime import open_journal

__all__ = ("WARMUP", "dispatch_samples", "dispatch_samples_at")

#: Effects recorded before timing starts (connection, statement cache, file growth).
WARMUP = 20


async def dispatch_samples_at(target: str | Path, effects: int) -> tuple[list[float], list[float]]:
    """
    Record and settle ``effects`` effects of one run in the journal at ``target``.

    Returns:
        Microseconds of each ``record_dispatch``, and of each ``settle_effect``.
    """
    task_id = f"bench-{uuid.uuid4().hex}"
    run_id = uuid.uuid4().hex
    records: list[float] = []
    settles: list[float] = []
    async with open_journal(target) as journal:
        await journal.put_task(task_id, "record effects", {}, "contract-1")
        epoch = await journal.create_run(
            run_id, task_id, policy={}, policy_version="bench", host="bench"
        )
        for i in range(WARMUP + effects):
            key = f"{task_id}:{i}"
            start = time.perf_counter_ns()
            await journal.record_dispatch(
                run_id=run_id,
                epoch=epoch,
                key=key,
                task_id=task_id,
                step=i + 1,
                tool="write_file",
                target=f"file:out/{i}.txt",
                args_hash=f"{i:064x}",
            )
            middle = time.perf_counter_ns()
            await journal.settle_effect(key, "confirmed", {"status": "ok"})
            end = time.perf_counter_ns()
            if i >= WARMUP:
                records.append((middle - start) / 1000)
                settles.append((end - middle) / 1000)
        await journal.end_run(
            run_id,
            epoch,
            disposition="stopped",
            stop_reason=None,
            candidate_digest=None,
            handoff=None,
        )
    return records, settles


def dispatch_samples(effects: int, target: str | None = None) -> tuple[list[float], list[float]]:
    """
    Time ``effects`` effects in a fresh journal file (or at ``target``, a PostgreSQL URL).

    Returns:
        Microseconds of each ``record_dispatch``, and of each ``settle_effect``.
    """
    if target is not None:
        return anyio.run(dispatch_samples_at, target, effects, backend="asyncio")
    with tempfile.TemporaryDirectory(prefix="proctor-bench-") as tmp:
        path = Path(tmp) / "journal.db"
        return anyio.run(dispatch_samples_at, path, effects, backend="asyncio")
