from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from proctor import (
    Budget,
    CommandCheck,
    Completion,
    Disposition,
    FunctionActor,
    Message,
    MessageKind,
    Observation,
    Policy,
    Proposal,
    RunResult,
    ScriptedActor,
    Task,
    ToolCall,
    run,
)
from proctor.runtime import (
    Effect,
    ObservationKind,
    Tool,
    ToolContext,
    ToolRegistry,
    ToolResult,
    ToolSpec,
    ToolStatus,
    open_journal,
)
from proctor.runtime._tools.process import group_alive

PY = sys.executable


def _project(root: Path) -> Path:
    root.mkdir()
    (root / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    tests = root / "tests"
    tests.mkdir()
    (tests / "test_calc.py").write_text(
        "import sys, os\nsys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))\n"
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    )
    return root


def _task(root: Path, **kw: object) -> Task:
    defaults: dict[str, object] = {
        "goal": "make the tests pass",
        "workspace": root,
        "checks": (
            CommandCheck("tests", [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]),
        ),
        "protected": ("tests/**",),
    }
    defaults.update(kw)
    return Task(**defaults)  # type: ignore[arg-type]


FIX = ToolCall("edit_file", {"path": "calc.py", "old": "a - b", "new": "a + b"})


async def _steps(journal: Path, run_id: str) -> list[dict[str, object]]:
    async with open_journal(journal) as j:
        return await j.steps(run_id)


async def test_build_rescue_completes_and_fences_later_writes(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    journal = tmp_path / "j.db"
    late_write = ToolCall("write_file", {"path": "calc.py", "content": "broken = True\n"})
    actor = ScriptedActor(
        [ToolCall("read_file", {"path": "calc.py"}), FIX, Completion("fixed"), late_write]
    )
    result = await run(_task(root), actor, journal)

    assert result.disposition is Disposition.COMPLETED
    assert result.stop_reason is not None
    assert result.stop_reason.code == "checks_passed"
    # The scope check the protected tests imply, judged before any check runs; the tests.
    assert [(e.check, e.passed) for e in result.evidence] == [("scope", True), ("tests", True)]
    assert result.evidence[0].candidate_digest == result.candidate.digest
    # The write after completion was refused by the fence and never ran.
    assert "a + b" in (root / "calc.py").read_text()
    steps = await _steps(journal, result.run_id)
    assert steps[-1]["decision"] == "refuse"
    assert "fence" in str(steps[-1]["reason"])
    async with open_journal(journal) as j:
        effects = await j.effects(run_id=result.run_id)
    assert [e.tool for e in effects] == ["edit_file"]
    assert actor.observations[-1].kind is ObservationKind.REFUSAL


async def test_runs_on_one_open_journal_share_it_and_leave_it_open(tmp_path: Path) -> None:
    results: dict[int, RunResult] = {}
    async with open_journal(tmp_path / "j.db") as j:

        async def one(i: int) -> None:
            actor = ScriptedActor([ToolCall("read_file", {"path": "calc.py"}), FIX, Completion()])
            results[i] = await run(_task(_project(tmp_path / f"p{i}")), actor, j)

        async with anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(one, i)
        # Still open: a run closes only a journal it opened.
        for result in results.values():
            assert result.disposition is Disposition.COMPLETED
            steps = await j.steps(result.run_id)
            kinds = [s["kind"] for s in steps]
            assert kinds == ["action", "action", "completion", "verdict", "verdict"]
            # Every step's spend is in, the last settlement's included.
            spend = await j.spend_totals(result.task_id)
            assert spend["steps"] == 3.0
            assert spend["tool_calls"] == 2.0
            assert spend["wall_seconds"] > 0
        assert len(await j.list_runs()) == 3


async def test_messages_never_end_a_run(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    claims = [
        Message(MessageKind.CHECKPOINT, "looking around"),
        Message(MessageKind.FINAL_ANSWER, "All done, every test passes!"),
        Message(MessageKind.CHECKPOINT, "still here"),
    ]
    result = await run(
        _task(root, policy=Policy(stall_threshold=0)), ScriptedActor(list(claims)), tmp_path / "j"
    )
    # The tests still fail: no message, however confident, completed the run.
    assert result.disposition is Disposition.FAILED
    assert result.stop_reason is not None
    assert result.stop_reason.code == "actor_finished"
    steps = await _steps(tmp_path / "j", result.run_id)
    message_steps = [s for s in steps if s["kind"] == "message"]
    assert len(message_steps) == 3
    assert all(s["decision"] != "stop" for s in message_steps)


async def test_completion_needs_evidence_for_the_candidate_as_it_stands(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    # Verified failing, then fixed, but never verified again: no completion.
    actor = ScriptedActor([Completion("done?"), FIX])
    result = await run(_task(root, policy=Policy(stall_threshold=0)), actor, tmp_path / "j")
    # The wrap-up verification after the actor stopped judges the fixed candidate.
    assert result.disposition is Disposition.COMPLETED
    tests = [e for e in result.evidence if e.check == "tests"]
    assert len({e.candidate_digest for e in tests}) == 2
    assert [e.passed for e in tests] == [False, True]
    assert result.evidence[-1].candidate_digest == result.candidate.digest


async def test_protected_write_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    cheat = ToolCall(
        "write_file", {"path": "tests/test_calc.py", "content": "def test_add():\n    pass\n"}
    )
    result = await run(_task(root), ScriptedActor([cheat, Completion()]), tmp_path / "j")
    assert "assert add(2, 3) == 5" in (root / "tests" / "test_calc.py").read_text()
    assert result.disposition is Disposition.FAILED
    steps = await _steps(tmp_path / "j", result.run_id)
    assert steps[0]["decision"] == "refuse"
    assert "protected" in str(steps[0]["reason"])


@pytest.mark.parametrize("path", ["../outside.txt", "/etc/passwd", "link/secret"])
async def test_paths_outside_the_workspace_are_refused(tmp_path: Path, path: str) -> None:
    root = _project(tmp_path / "p")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("s3cret")
    (root / "link").symlink_to(outside)
    actor = ScriptedActor([ToolCall("read_file", {"path": path})])
    await run(_task(root, policy=Policy(stall_threshold=0)), actor, tmp_path / "j")
    result = actor.observations[1].results[0]
    assert result.status.value == "error"
    assert "refused" in result.output
    assert "s3cret" not in result.output


async def test_timed_out_command_is_uncertain_and_its_group_is_gone(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    journal = tmp_path / "j.db"
    slow = ToolCall("run_command", {"cmd": "sleep 30 & sleep 30"})
    result = await run(
        _task(root, command_time_limit=0.5, policy=Policy(stall_threshold=0)),
        ScriptedActor([slow]),
        journal,
    )
    steps = await _steps(journal, result.run_id)
    assert steps[0]["tool_status"] == "uncertain"
    async with open_journal(journal) as j:
        effects = await j.effects(run_id=result.run_id)
        groups = await j.processes(result.run_id)
    # Uncertain, and nothing can look a command's effect up: escalated, never "failed".
    assert [e.state for e in effects] == ["escalated"]
    assert any("escalated" in f for f in result.handoff.open_findings)
    assert result.handoff.owner == "operator"
    assert len(groups) == 1
    assert groups[0].ended_at is not None
    assert not group_alive(groups[0].pgid)


async def test_every_step_is_journaled_before_it_is_reported(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    journal = tmp_path / "j.db"
    seen: list[tuple[int, int]] = []
    script: list[Proposal] = [
        ToolCall("list_files", {"path": "."}),
        Message(MessageKind.CHECKPOINT, "read next"),
        ToolCall("read_file", {"path": "calc.py"}),
        FIX,
        Completion("fixed"),
    ]

    async def propose(observation: Observation) -> Proposal | None:
        # A second connection sees only what was committed.
        with sqlite3.connect(journal) as db:
            (count,) = db.execute("SELECT count(*) FROM steps").fetchone()
        seen.append((observation.step, count))
        return script.pop(0) if script else None

    result = await run(_task(root), FunctionActor(propose), journal)
    assert result.disposition is Disposition.COMPLETED
    assert len(seen) >= 5
    assert all(count >= step for step, count in seen)


async def test_trace_records_carry_every_invariant_9_field(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    journal = tmp_path / "j.db"
    result = await run(_task(root), ScriptedActor([FIX, Completion()]), journal)
    with sqlite3.connect(journal) as db:
        db.row_factory = sqlite3.Row
        rows = db.execute("SELECT * FROM steps ORDER BY step").fetchall()
    assert [r["step"] for r in rows] == list(range(1, result.steps + 1))
    for row in rows:
        for field in (
            "trace_id",
            "step",
            "state_version",
            "state_delta",
            "remaining",
            "decision",
            "policy_version",
        ):
            assert row[field] is not None, field
    action = rows[0]
    assert action["action"] is not None
    assert action["tool_status"] == "ok"
    assert action["result_fingerprint"] is not None
    last = rows[-1]
    assert last["stop_reason"] is not None
    assert last["decision"] == "stop"


async def test_step_budget_ends_the_run_after_a_wrap_up_verification(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    reads = [ToolCall("read_file", {"path": "calc.py"}), FIX] + [
        ToolCall("list_files", {"path": "."}) for _ in range(10)
    ]
    budget = Budget({"steps": 4}, {"steps": 1})
    result = await run(
        _task(root, budget=budget, policy=Policy(stall_threshold=0)),
        ScriptedActor(reads),
        tmp_path / "j",
    )
    # Only the reserve was left: the controller verified, and the fix passed.
    assert result.disposition is Disposition.COMPLETED
    root2 = _project(tmp_path / "q")
    result2 = await run(
        _task(root2, budget=budget, policy=Policy(stall_threshold=0)),
        ScriptedActor([ToolCall("list_files", {"path": "."})] * 10),
        tmp_path / "j",
    )
    assert result2.disposition is Disposition.BUDGET_EXHAUSTED
    assert result2.stop_reason is not None
    assert result2.stop_reason.limit == "steps"
    assert result2.stop_reason.bound == 3
    assert [e.passed for e in result2.evidence if e.check == "tests"] == [False]


async def test_actor_crash_ends_the_run_failed(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")

    async def propose(observation: Observation) -> Proposal | None:
        raise RuntimeError("model went away")

    result = await run(_task(root), FunctionActor(propose), tmp_path / "j")
    assert result.disposition is Disposition.FAILED
    assert result.stop_reason is not None
    assert "model went away" in result.stop_reason.message


async def test_no_progress_stops_a_looping_actor(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    loop = [ToolCall("read_file", {"path": "calc.py"})] * 20
    result = await run(_task(root), ScriptedActor(list(loop)), tmp_path / "j")
    assert result.disposition is Disposition.NO_PROGRESS
    steps = await _steps(tmp_path / "j", result.run_id)
    decisions = [s["decision"] for s in steps if s["kind"] != "verdict"]
    # The ladder of docs/progress.md: observe, nudge at T-2, refuse the exact repeat
    # at T-1, stop at T.
    assert decisions[:5] == ["continue", "continue", "nudge", "refuse", "stop"]
    # The repeats at the last two rungs were refused, not run: they cost no tool call.
    assert [s["tool_status"] for s in steps[3:5]] == ["refused", "refused"]


async def test_wall_clock_deadline_ends_a_slow_actor(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")

    async def propose(observation: Observation) -> Proposal | None:
        await anyio.sleep(30)
        return None

    budget = Budget({"wall_seconds": 0.5})
    with anyio.fail_after(20):
        result = await run(_task(root, budget=budget), FunctionActor(propose), tmp_path / "j")
    assert result.disposition is Disposition.BUDGET_EXHAUSTED
    assert result.stop_reason is not None
    assert result.stop_reason.limit == "wall_seconds"


async def test_a_custom_effectful_tool_is_refused_on_a_protected_path_at_dispatch(
    tmp_path: Path,
) -> None:
    # The controller and the decision core read one set of declarations: a
    # registered tool that writes a path is fenced like write_file, before it runs.
    root = _project(tmp_path / "p")
    ran: list[dict[str, object]] = []

    async def overwrite(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        ran.append(args)
        target = ctx.workspace.resolve(str(args["path"]))
        target.write_text(str(args["text"]))
        return ToolResult(ToolStatus.OK, "written")

    spec = ToolSpec(
        "overwrite",
        Effect.WRITE,
        parameters={
            "type": "object",
            "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
            "required": ["path", "text"],
        },
        targets=("path",),
        paths=("path",),
        changes_candidate=True,
    )
    registry = ToolRegistry.builtin()
    registry.register(Tool(spec, overwrite))
    cheat = ToolCall("overwrite", {"path": "tests/test_calc.py", "text": "def test_add(): pass\n"})
    builtin = ToolCall("write_file", {"path": "tests/test_calc.py", "content": "x = 1\n"})
    result = await run(
        _task(root), ScriptedActor([cheat, builtin, Completion()]), tmp_path / "j", tools=registry
    )
    assert ran == []
    assert "assert add(2, 3) == 5" in (root / "tests" / "test_calc.py").read_text()
    steps = await _steps(tmp_path / "j", result.run_id)
    assert [s["decision"] for s in steps[:2]] == ["refuse", "refuse"]
    reasons = [str(s["reason"]) for s in steps[:2]]
    assert reasons[0] == reasons[1]
    assert reasons[0].startswith("protected: tests/test_calc.py")
    async with open_journal(tmp_path / "j") as j:
        assert await j.effects(run_id=result.run_id) == []


async def test_live_searches_that_find_nothing_are_different_work(tmp_path: Path) -> None:
    # `grep` finding nothing exits 1 with no output: each different search is its own
    # dead end (the same search repeated is one), and a shell edit is a new candidate
    # the live run measures, so the failure before it and after it are counted apart.
    root = _project(tmp_path / "p")
    searches = [
        ToolCall("run_command", {"cmd": f"grep -rn {word} calc.py"})
        for word in ("subtract", "multiply", "divide", "modulo", "power")
    ]
    pytest_call = ToolCall("run_command", {"cmd": f"{PY} -m pytest -q -p no:cacheprovider tests"})
    edit = ToolCall(
        "run_command", {"cmd": "sed -i 's/# end/# end./' calc.py; echo '# end' >> calc.py"}
    )
    script: list[Proposal] = [
        *searches,
        pytest_call,
        pytest_call,
        pytest_call,
        edit,
        pytest_call,
        FIX,
        Completion("fixed"),
    ]
    result = await run(_task(root), ScriptedActor(script), tmp_path / "j")
    assert result.disposition is Disposition.COMPLETED
    steps = await _steps(tmp_path / "j", result.run_id)
    actions = [s for s in steps if s["kind"] == "action"]
    assert [s["decision"] for s in actions[:5]] == ["continue"] * 5
    candidates = [s["event"]["candidate"] for s in actions]  # type: ignore[index]
    assert len(set(candidates[:8])) == 1
    assert candidates[8] != candidates[7]  # the shell edit, measured


class _NoteReads:
    """A journal that counts how often the run's notes are read."""

    def __init__(self, journal: Any) -> None:
        self.journal = journal
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.journal, name)

    async def notes(self, *args: Any, **kwargs: Any) -> Any:
        self.reads += 1
        return await self.journal.notes(*args, **kwargs)


async def _note_reads(tmp_path: Path, writes: int) -> tuple[int, list[dict[str, Any]]]:
    from proctor.runtime._control.run import start_run
    from proctor.runtime._journal import Journal

    workspace = tmp_path / f"w{writes}"
    workspace.mkdir()
    calls = [ToolCall("write_file", {"path": f"f{i}", "content": "x" * i}) for i in range(writes)]
    async with await Journal.open(tmp_path / f"j{writes}.db") as journal:
        counting = _NoteReads(journal)
        result = await start_run(
            Task(
                goal="write", workspace=workspace, kind="answer", policy=Policy(stall_threshold=0)
            ),
            ScriptedActor(calls),
            counting,
        )
        notes = await journal.notes(result.run_id, kinds=["effect"])
    return counting.reads, notes


async def test_the_controllers_own_effect_notes_do_not_make_it_read_the_notes_again(
    tmp_path: Path,
) -> None:
    few, _ = await _note_reads(tmp_path, 2)
    many, notes = await _note_reads(tmp_path, 8)
    # The notes are read before the first step, not once more per effect.
    assert many == few
    # Each effect's note was journaled (with its dispatch), arguments and all.
    assert [n["body"]["args"]["path"] for n in notes] == [f"f{i}" for i in range(8)]
