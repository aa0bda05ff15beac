"""A resumed task inherits its history, its spend and its starting candidate."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from proctor import (
    Budget,
    CommandCheck,
    Completion,
    Disposition,
    FunctionActor,
    Observation,
    ObservationKind,
    Policy,
    Proposal,
    ScriptedActor,
    Task,
    ToolCall,
    run,
)
from proctor.runtime import open_journal, resume

PY = sys.executable
PYTEST = (PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
FAIL = ToolCall("run_command", {"cmd": f"{PY} -m pytest -q -p no:cacheprovider tests"})
FIX = ToolCall("edit_file", {"path": "calc.py", "old": "a - b", "new": "a + b"})


def _project(root: Path) -> Path:
    (root / "tests").mkdir(parents=True)
    (root / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "tests" / "test_calc.py").write_text(
        "import os, sys\nsys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))\n"
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    )
    return root


def _task(root: Path, **kw: object) -> Task:
    values: dict[str, object] = {
        "goal": "make the tests pass",
        "workspace": root,
        "checks": (CommandCheck("tests", PYTEST),),
        "protected": ("tests/**",),
        "task_id": "calc-fix",
    }
    values.update(kw)
    return Task(**values)  # type: ignore[arg-type]


async def test_a_resumed_run_inherits_the_dead_ends_it_already_met(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    journal = tmp_path / "j.db"
    first = await run(_task(root), ScriptedActor([FAIL] * 10), journal)
    assert first.disposition is Disposition.NO_PROGRESS
    assert first.stop_reason is not None
    assert first.stop_reason.code == "repeated_failure"
    # The same dead end, once more, after a resume: it buys no time at all.
    again = await resume(first.run_id, ScriptedActor([FAIL] * 10), journal)
    assert again.disposition is Disposition.NO_PROGRESS
    async with open_journal(journal) as j:
        steps = await j.steps(again.run_id)
        row = await j.get_run(again.run_id)
    assert row.parent_run_id == first.run_id
    decisions = [s["decision"] for s in steps if s["kind"] == "action"]
    # Stopped at its first step; what the actor proposed after that was fenced.
    assert decisions[0] == "stop"
    assert set(decisions[1:]) <= {"refuse"}
    # New work goes on as usual, and the fix completes the task.
    fixed = await resume(again.run_id, ScriptedActor([FIX, Completion()]), journal)
    assert fixed.disposition is Disposition.COMPLETED
    assert fixed.task_id == first.task_id == "calc-fix"


async def test_the_first_observation_summarizes_the_journaled_history(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    journal = tmp_path / "j.db"
    first = await run(_task(root), ScriptedActor([FAIL, Completion()]), journal)
    actor = ScriptedActor([FIX, Completion()])
    await resume(first.run_id, actor, journal)
    greeting = actor.observations[0]
    assert greeting.kind is ObservationKind.RESUME
    assert "1 earlier run(s)" in greeting.text
    assert "tests failed" in greeting.text


async def test_spend_is_the_task_s_across_runs(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    journal = tmp_path / "j.db"
    task = _task(root, budget=Budget({"steps": 6}), policy=Policy(stall_threshold=0))
    reads = [ToolCall("list_files", {"path": "."})] * 4
    first = await run(task, ScriptedActor(reads), journal)
    # The actor stopped after 4 steps; the resumed run has 2 left, not 6.
    second = await resume(first.run_id, ScriptedActor(reads), journal)
    assert second.disposition is Disposition.BUDGET_EXHAUSTED
    assert second.stop_reason is not None
    assert second.stop_reason.limit == "steps"
    async with open_journal(journal) as j:
        spent = await j.spend_totals("calc-fix")
        second_steps = await j.steps(second.run_id)
    assert spent["steps"] == 6
    ran = [s for s in second_steps if s["kind"] == "action" and s["tool_status"] != "refused"]
    assert len(ran) == 2


async def test_the_scope_check_compares_with_the_task_s_first_candidate(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    journal = tmp_path / "j.db"
    cheat = ToolCall(
        "run_command", {"cmd": "printf 'def test_add():\\n    pass\\n' > tests/test_calc.py"}
    )
    first = await run(
        _task(root, policy=Policy(stall_threshold=0)), ScriptedActor([cheat]), journal
    )
    assert first.disposition is not Disposition.COMPLETED
    # Resumed on the tampered workspace: the baseline is still the original one.
    second = await resume(first.run_id, ScriptedActor([Completion()]), journal)
    assert second.disposition is not Disposition.COMPLETED
    # The candidate was judged already (in the first run): its evidence is inherited.
    assert "scope fails" in second.handoff.open_findings


SCENARIO = textwrap.dedent(
    """
    import sys, anyio
    from proctor import Task, CommandCheck, ScriptedActor, ToolCall, Policy, run

    async def main() -> None:
        task = Task(
            goal="slow", workspace=sys.argv[1], task_id="killed",
            checks=(CommandCheck("ok", "true"),), policy=Policy(stall_threshold=0),
        )
        calls = [ToolCall("run_command", {"cmd": f"echo step{i} >> log.txt"}) for i in range(3)]
        calls.append(ToolCall("run_command", {"cmd": "echo sleeping; sleep 60"}))
        show = lambda record: print(record.step, flush=True)
        await run(task, ScriptedActor(calls), sys.argv[2], on_step=show)

    anyio.run(main)
    """
)


async def _dispatched(journal: Path) -> bool:
    async with open_journal(journal) as j:
        return any(e.state == "dispatched" for e in await j.effects(task_id="killed"))


async def test_resume_after_sigkill_inherits_history_and_spend(tmp_path: Path) -> None:
    root = tmp_path / "w"
    root.mkdir()
    journal = tmp_path / "j.db"
    script = tmp_path / "scenario.py"
    script.write_text(SCENARIO)
    argv = [PY, str(script), str(root), str(journal)]
    async with await anyio.open_process(argv, stderr=subprocess.DEVNULL) as proc:
        assert proc.stdout is not None
        with anyio.fail_after(60):
            # stdout carries only the scenario's step numbers: proctor logs to stderr.
            lines = BufferedByteReceiveStream(proc.stdout)
            seen = [await lines.receive_until(b"\n", 100) for _ in range(3)]
            assert seen == [b"1", b"2", b"3"]
            # The fourth call's intent is journaled and it is running: kill the host.
            while not await _dispatched(journal):  # noqa: ASYNC110 - another process
                await anyio.sleep(0.05)
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
    async with open_journal(journal) as j:
        killed = (await j.runs_of_task("killed"))[0]
        assert killed.status == "running"
        before = await j.steps(killed.run_id)
        spent = await j.spend_totals("killed")
    assert len(before) == 3
    assert spent.get("steps", 0) >= 3
    again = [ToolCall("run_command", {"cmd": "echo step0 >> log.txt"})]
    resumed = await resume(killed.run_id, ScriptedActor(again), journal)
    async with open_journal(journal) as j:
        after = await j.spend_totals("killed")
        effects = await j.effects(task_id="killed")
        assert await j.integrity_check() == "ok"
    assert after["steps"] >= spent["steps"] + 1
    # The command that was running when the host died: uncertain, and nothing can look
    # a command up: escalated, never left dispatched, never re-run blindly.
    assert "dispatched" not in {e.state for e in effects}
    assert any(e.state == "escalated" for e in effects)
    assert resumed.disposition is Disposition.COMPLETED
    assert any("escalated" in f for f in resumed.handoff.open_findings)


@pytest.mark.parametrize("prefix", [6, 32])
async def test_resume_accepts_a_run_id_prefix(tmp_path: Path, prefix: int) -> None:
    root = _project(tmp_path / "p")
    journal = tmp_path / "j.db"
    first = await run(_task(root), ScriptedActor([Completion()]), journal)
    second = await resume(first.run_id[:prefix], ScriptedActor([FIX, Completion()]), journal)
    assert second.disposition is Disposition.COMPLETED


async def test_an_operator_retunes_a_running_run_on_the_record(tmp_path: Path) -> None:
    from proctor.runtime import retune

    root = _project(tmp_path / "p")
    journal = tmp_path / "j.db"
    script: list[Proposal] = [ToolCall("list_files", {"path": "."}), FIX, Completion()]

    async def propose(observation: Observation) -> Proposal | None:
        if len(script) == 2:
            async with open_journal(journal) as j:
                run_id = (await j.list_runs(1))[0].run_id
            await retune(journal, run_id, {"steps": 10}, who="ops", why="the fix is close")
        return script.pop(0) if script else None

    task = _task(root, budget=Budget({"steps": 3}, {"steps": 1}))
    result = await run(task, FunctionActor(propose), journal)
    # Two steps were left for the actor; the raised limit let it finish.
    assert result.disposition is Disposition.COMPLETED
    async with open_journal(journal) as j:
        steps = await j.steps(result.run_id)
        notes = await j.notes(result.run_id)
    retuned = [s for s in steps if s["kind"] == "retune"]
    assert len(retuned) == 1
    assert retuned[0]["reason"] == "ops set the steps limit from 3 to 10: the fix is close"
    assert any(n["kind"] == "retune" and "ops" in n["body"]["note"] for n in notes)
