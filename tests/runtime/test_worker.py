"""Workers, leases and the epoch fence, on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from tests.support.pg import fresh_schema

from proctor import CommandCheck, Disposition, FencedError, Observation, Proposal, Task
from proctor.runtime import FunctionActor, ToolCall, open_journal
from proctor.runtime._control.run import start_run
from proctor.runtime._hosting.worker import submit, work

PY = sys.executable


@pytest.fixture(params=["sqlite", "postgresql"])
async def journal_target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "j.db")
        return
    # A schema of its own: a worker claims whatever the journal holds, and a run
    # another test left queued or unfinished must not be one of them.
    async with fresh_schema(request.getfixturevalue("pg_url")) as url:
        yield url


def _task(root: Path, task_id: str) -> Task:
    root.mkdir(exist_ok=True)
    return Task(
        goal="append three lines, wait, then finish",
        workspace=root,
        checks=(CommandCheck("lines", "test -f log.txt"),),
        task_id=task_id,
    )


def _command(cmd: str) -> dict[str, object]:
    return {"type": "action", "tool": "run_command", "args": {"cmd": cmd}}


def _script(path: Path, calls: list[dict[str, object]]) -> Path:
    path.write_text("\n".join(json.dumps(c) for c in calls) + "\n")
    return path


async def test_a_killed_worker_s_run_is_taken_over_without_repeating_its_effects(
    tmp_path: Path, journal_target: str
) -> None:
    script = _script(
        tmp_path / "agent.jsonl",
        [
            *(_command(f"echo {i} >> log.txt") for i in range(3)),
            # Long the first time only: a replaying actor does not wait again.
            {
                "type": "action",
                "tool": "run_command",
                "args": {"cmd": "test -f slept || { touch slept; sleep 30; }"},
            },
            {"type": "complete", "summary": "done"},
        ],
    )
    task = _task(tmp_path / "w", "takeover")
    run_id = await submit(task, journal_target, {"kind": "scripted", "script": str(script)})
    argv = [PY, "-m", "proctor", "worker", "--journal", journal_target, "--id", "A"]
    async with await anyio.open_process([*argv, "--lease", "1", "--once"]) as worker_a:
        with anyio.fail_after(60):
            # Worker A is in the long command, its intent journaled: kill it there.
            while True:
                async with open_journal(journal_target) as j:
                    effects = await j.effects(run_id=run_id)
                if any(e.state == "dispatched" and "sleep" in e.target for e in effects):
                    break
                await anyio.sleep(0.05)
            worker_a.send_signal(signal.SIGKILL)
            await worker_a.wait()
    async with open_journal(journal_target) as j:
        before = await j.spend_totals("takeover")
        steps_a = await j.steps(run_id)
    # Worker B claims the run once A's (one-second) lease expires, and finishes it.
    # B's own lease is long: on a loaded machine a short one could lapse between
    # two renewals, and B would lose the run it is finishing.
    with anyio.fail_after(90):
        stats = await work(
            journal_target, worker="B", lease_seconds=60, poll_seconds=0.1, max_runs=1
        )
    assert [r.run_id for r in stats.finished] == [run_id]
    assert stats.finished[0].disposition is Disposition.COMPLETED
    async with open_journal(journal_target) as j:
        run = await j.get_run(run_id)
        steps = await j.steps(run_id)
        effects = await j.effects(run_id=run_id)
        after = await j.spend_totals("takeover")
    assert run.epoch == 2
    # Step numbers go on across the takeover; spend is the task's, continuous.
    assert [s["step"] for s in steps] == list(range(1, len(steps) + 1))
    assert len(steps) > len(steps_a)
    assert after["steps"] > before["steps"]
    # The command that was running when A died was never re-run blindly: it is
    # escalated (nothing can look a command up), and no key was dispatched twice.
    sleeping = [e for e in effects if "sleep" in e.target]
    assert sleeping[0].state == "escalated"
    assert len({e.key for e in effects}) == len(effects)
    assert "dispatched" not in {e.state for e in effects}
    assert (tmp_path / "w" / "log.txt").exists()


async def test_a_zombie_worker_cannot_write_after_losing_its_lease(
    tmp_path: Path, journal_target: str
) -> None:
    root = tmp_path / "w"
    task = _task(root, "zombie")
    run_id = await submit(task, journal_target, {"kind": "scripted", "script": "unused"})
    async with open_journal(journal_target) as j:
        zombie = await j.claim_run("A", 0)  # a lease that has already expired
        assert zombie is not None
    taken_over = anyio.Event()

    async def propose(observation: Observation) -> Proposal | None:
        await taken_over.wait()
        return ToolCall("write_file", {"path": "zombie.txt", "content": "late"})

    async def take_over() -> None:
        async with open_journal(journal_target) as j:
            claimed = await j.claim_run("B", 30)
            while claimed is None:
                # On PostgreSQL a claim skips a row another transaction holds
                # (FOR UPDATE SKIP LOCKED): the zombie's own write of the moment.
                await anyio.sleep(0.01)
                claimed = await j.claim_run("B", 30)
        assert claimed.run_id == run_id
        assert claimed.epoch == zombie.epoch + 1
        taken_over.set()

    fenced: list[FencedError] = []
    with anyio.fail_after(30):
        async with open_journal(journal_target) as j, anyio.create_task_group() as tg:
            tg.start_soon(take_over)
            try:
                await start_run(task, FunctionActor(propose), j, claimed=zombie)
            except FencedError as exc:
                fenced.append(exc)
    assert fenced
    assert "epoch" in str(fenced[0])
    # The zombie's write never reached the workspace, and nothing of it was journaled.
    assert not (root / "zombie.txt").exists()
    async with open_journal(journal_target) as j:
        assert await j.effects(run_id=run_id) == []
        run = await j.get_run(run_id)
    assert run.owner == "B"


async def test_workers_share_a_queue_without_running_a_run_twice(
    tmp_path: Path, journal_target: str
) -> None:
    script = _script(tmp_path / "agent.jsonl", [{"type": "complete"}])
    ids = []
    for n in range(6):
        root = tmp_path / f"w{n}"
        root.mkdir()
        (root / "log.txt").write_text("ready\n")
        task = _task(root, f"queue-{n}")
        ids.append(await submit(task, journal_target, {"kind": "scripted", "script": str(script)}))
    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            results: list[list[str]] = []

            async def one(name: str) -> None:
                stats = await work(journal_target, worker=name, once=True)
                results.append([r.run_id for r in stats.finished])

            for name in ("A", "B"):
                tg.start_soon(one, name)
    done = [run for worker in results for run in worker]
    assert sorted(done) == sorted(ids)
    async with open_journal(journal_target) as j:
        for run_id in ids:
            assert (await j.get_run(run_id)).status == "completed"
