"""
What an agent, a file or a second host sends never crashes or fools the runtime.

Each test here is a reproduction of a crash, a hang or a race that was seen,
tried the way a hostile agent or a careless operator would: the answer is a
typed refusal, a clear error or a bounded result, and no run is left running.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from proctor import (
    Claim,
    CommandCheck,
    Completion,
    Disposition,
    FunctionActor,
    Observation,
    Proposal,
    ScriptedActor,
    Task,
    ToolCall,
    run,
)
from proctor._boundary import Limits
from proctor._errors import CandidateTooLarge, ConfigError, TrajectoryError
from proctor.runtime import open_journal
from proctor.runtime._hosting.resume import resume
from proctor.runtime._progress.trajectory import parse_trajectory, replay
from proctor.runtime._records import ToolResult
from proctor.runtime._task import load_task
from proctor.runtime._tools.registry import Tool, ToolRegistry
from proctor.runtime._tools.spec import ToolSpec
from proctor.verifiers._candidate import freeze

PY = sys.executable
HEADER = json.dumps({"format": "proctor.trajectory", "version": 1, "task": {"kind": "build"}})


def _task(root: Path, **kw: Any) -> Task:
    root.mkdir(exist_ok=True)
    (root / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    check = CommandCheck("sum", [PY, "-c", "import calc, sys; sys.exit(calc.add(2, 3) != 5)"])
    defaults: dict[str, Any] = {"goal": "fix add", "workspace": root, "checks": (check,)}
    return Task(**(defaults | kw))


FIX = ToolCall("edit_file", {"path": "calc.py", "old": "a - b", "new": "a + b"})


async def _steps(journal: Path, run_id: str) -> list[dict[str, Any]]:
    async with open_journal(journal) as j:
        return await j.steps(run_id)


# -- proposals: refused at the boundary, whatever the actor ------------------------------


async def test_a_lone_surrogate_in_written_content_is_refused_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    actor = ScriptedActor(
        [ToolCall("write_file", {"path": "x.txt", "content": "a\ud800b"}), FIX, Completion()]
    )
    result = await run(_task(tmp_path / "w"), actor, tmp_path / "j.db")
    assert result.disposition is Disposition.COMPLETED
    assert not (tmp_path / "w" / "x.txt").exists()
    steps = await _steps(tmp_path / "j.db", result.run_id)
    assert steps[0]["kind"] == "refused"
    assert steps[0]["decision"] == "refuse"
    assert "lone surrogate U+D800" in steps[0]["reason"]
    assert "proposal.args.content" in steps[0]["reason"]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"type":"action","tool":"run_command","args":{"cmd":"true","n":1e999}}', "not a finite"),
        (
            '{"type":"action","tool":"run_command","args":{"cmd":"true","n":Infinity}}',
            "not a finite",
        ),
        ('{"type":"action","tool":"run_command","args":{"cmd":"true","n":NaN}}', "not a finite"),
        (
            '{"type":"action","tool":"run_command","args":{"cmd":"true","n":' + "9" * 30 + "}}",
            "64-bit",
        ),
        ('{"type":"action","tool":"read_file","args":{"p\\udfffath":"x"}}', "lone surrogate"),
        ('{"type":"message","kind":"checkpoint","text":"\\ud800"}', "lone surrogate"),
        (
            '{"type":"action","tool":"t","args":{"a":' + "[" * 100 + "]" * 100 + "}}",
            "levels deep",
        ),
    ],
)
async def test_what_json_allows_and_the_runtime_cannot_carry_is_refused_typed(
    tmp_path: Path, line: str, expected: str
) -> None:
    script = tmp_path / "agent.jsonl"
    script.write_text(line + "\n" + json.dumps({"type": "complete"}) + "\n")
    actor = ScriptedActor.from_file(script)
    result = await run(_task(tmp_path / "w"), actor, tmp_path / "j.db")
    assert result.disposition is Disposition.FAILED  # the check fails; nothing crashed
    steps = await _steps(tmp_path / "j.db", result.run_id)
    assert steps[0]["kind"] == "refused"
    assert expected in steps[0]["reason"]
    async with open_journal(tmp_path / "j.db") as j:
        assert (await j.get_run(result.run_id)).status == "failed"


async def test_a_function_actor_sending_anything_gets_refusals_not_a_crash(tmp_path: Path) -> None:
    bad: list[Any] = [
        ToolCall(3, {}),  # type: ignore[arg-type]
        ToolCall("read_file", ["calc.py"]),  # type: ignore[arg-type]
        ToolCall("read_file", {"path": float("nan")}),
        ToolCall("read_file", {"path": object()}),
        ToolCall("read_file", {1: "x"}),  # type: ignore[dict-item]
    ]

    async def propose(observation: Observation) -> Proposal | None:
        return bad.pop(0) if bad else None

    result = await run(_task(tmp_path / "w"), FunctionActor(propose), tmp_path / "j.db")
    steps = await _steps(tmp_path / "j.db", result.run_id)
    refused = [s for s in steps if s["kind"] == "refused"]
    assert len(refused) == 4 or len(refused) == 5
    assert all(s["decision"] in ("refuse", "stop") for s in refused)
    assert result.disposition in (Disposition.FAILED, Disposition.NO_PROGRESS)


async def test_a_custom_tool_that_raises_gives_a_failed_result_not_an_exception_group(
    tmp_path: Path,
) -> None:
    registry = ToolRegistry.builtin()

    async def boom(ctx: Any, args: dict[str, Any]) -> ToolResult:
        raise RuntimeError("kaboom")

    async def wrong(ctx: Any, args: dict[str, Any]) -> ToolResult:
        return "not a result"  # type: ignore[return-value]

    registry.register(Tool(ToolSpec("boom"), boom))
    registry.register(Tool(ToolSpec("wrong"), wrong))
    actor = ScriptedActor([ToolCall("boom"), ToolCall("wrong"), FIX, Completion()])
    result = await run(_task(tmp_path / "w"), actor, tmp_path / "j.db", tools=registry)
    assert result.disposition is Disposition.COMPLETED
    steps = await _steps(tmp_path / "j.db", result.run_id)
    assert steps[0]["tool_status"] == "error"
    assert "boom raised RuntimeError: kaboom" in steps[0]["event"]["result"]["output"]
    assert "wrong returned a str, not a ToolResult" in steps[1]["event"]["result"]["output"]


async def test_a_file_name_that_is_not_utf8_is_listed_digested_and_journaled_losslessly(
    tmp_path: Path,
) -> None:
    root = tmp_path / "w"
    task = _task(root)
    await anyio.Path(os.fsdecode(os.fsencode(root) + b"/bad\xffname")).write_bytes(b"hello")
    name = os.fsdecode(b"bad\xffname")
    assert name == "bad\udcffname"
    actor = ScriptedActor(
        [
            ToolCall("list_files", {"path": "."}),
            ToolCall("read_file", {"path": name}),
            ToolCall("write_file", {"path": name + "2", "content": "\udcfe\udcff"}),
            FIX,
            Completion(),
        ]
    )
    result = await run(task, actor, tmp_path / "j.db")
    assert result.disposition is Disposition.COMPLETED
    # Written back byte for byte: the name and the content's undecodable bytes.
    written = anyio.Path(os.fsdecode(os.fsencode(root) + b"/bad\xffname2"))
    assert await written.read_bytes() == b"\xfe\xff"
    steps = await _steps(tmp_path / "j.db", result.run_id)
    assert name in steps[0]["event"]["result"]["output"].splitlines()
    assert steps[1]["event"]["result"]["output"] == "hello"
    assert steps[2]["tool_status"] == "ok"


async def test_a_ten_megabyte_command_is_refused_by_its_length_at_once(tmp_path: Path) -> None:
    actor = ScriptedActor([ToolCall("run_command", {"cmd": "echo " + "x" * 10_000_000}), FIX])
    result = await run(_task(tmp_path / "w"), actor, tmp_path / "j.db")
    steps = await _steps(tmp_path / "j.db", result.run_id)
    assert steps[0]["kind"] == "refused"
    # The whole proposal is over the argument size first; a smaller limit names the command.
    assert "limits.argument_chars" in steps[0]["reason"]
    limits = Limits(command_chars=1_000)
    actor = ScriptedActor([ToolCall("run_command", {"cmd": "echo " + "x" * 2_000}), FIX])
    result = await run(_task(tmp_path / "w2", limits=limits), actor, tmp_path / "j.db")
    steps = await _steps(tmp_path / "j.db", result.run_id)
    assert "limits.command_chars" in steps[0]["reason"]


async def test_file_size_and_output_kept_are_bounded(tmp_path: Path) -> None:
    limits = Limits(file_bytes=1_000, output_chars=500)
    root = tmp_path / "w"
    task = _task(root, limits=limits)
    (root / "big.txt").write_text("y" * 10_000)
    actor = ScriptedActor(
        [
            ToolCall("write_file", {"path": "a.txt", "content": "z" * 2_000}),
            ToolCall("write_file", {"path": "a.txt", "content": "z" * 900}),
            ToolCall("edit_file", {"path": "a.txt", "old": "z", "new": "z" * 200}),
            ToolCall("read_file", {"path": "big.txt"}),
        ]
    )
    result = await run(task, actor, tmp_path / "j.db")
    steps = await _steps(tmp_path / "j.db", result.run_id)
    assert steps[0]["kind"] == "refused"
    assert "limits.file_bytes" in steps[0]["reason"]
    assert steps[1]["tool_status"] == "ok"
    assert steps[2]["tool_status"] == "error"
    assert "limits.file_bytes" in steps[2]["event"]["result"]["output"]
    assert (root / "a.txt").read_text() == "z" * 900
    output = steps[3]["event"]["result"]["output"]
    assert len(output) < 600
    assert "characters omitted" in output


def test_a_sparse_file_counts_by_its_apparent_size_and_is_not_frozen(tmp_path: Path) -> None:
    root = tmp_path / "w"
    root.mkdir()
    (root / "sparse.bin").touch()
    os.truncate(root / "sparse.bin", 2 * 1024**3)  # 2 GB that hold no blocks
    dest = tmp_path / "snap"
    with pytest.raises(CandidateTooLarge, match="apparent size"):
        freeze(root, dest, max_bytes=1024**3)
    assert not dest.exists()
    (root / "sparse.bin").unlink()
    (root / "small").write_text("x")
    assert freeze(root, dest, max_bytes=10) == dest


async def test_a_candidate_over_the_snapshot_limit_is_refused_and_the_run_ends(
    tmp_path: Path,
) -> None:
    root = tmp_path / "w"
    task = _task(root, limits=Limits(snapshot_bytes=10_000))
    (root / "sparse.bin").touch()
    os.truncate(root / "sparse.bin", 50_000)
    actor = ScriptedActor([FIX, Completion()] * 3)
    result = await run(task, actor, tmp_path / "j.db")
    steps = await _steps(tmp_path / "j.db", result.run_id)
    refused = [s for s in steps if s["kind"] == "refused"]
    assert refused
    assert "limits.snapshot_bytes" in refused[0]["reason"]
    assert result.disposition is not Disposition.COMPLETED


# -- repeated refusals are no progress ---------------------------------------------------


async def test_the_same_refused_claim_repeated_ends_no_progress_without_a_budget(
    tmp_path: Path,
) -> None:
    claim = Claim("blocked", "no access", ("none",), "cannot")
    proposed = 0

    async def propose(observation: Observation) -> Proposal | None:
        nonlocal proposed
        proposed += 1
        return claim if proposed < 10_000 else None

    result = await run(_task(tmp_path / "w"), FunctionActor(propose), tmp_path / "j.db")
    assert result.disposition is Disposition.NO_PROGRESS
    assert result.stop_reason is not None
    assert result.stop_reason.code == "stall"
    steps = await _steps(tmp_path / "j.db", result.run_id)
    # Stopped at the stall threshold (4), each refusal a step with a refused event;
    # what the actor sends after the end is refused too, a bounded number of times.
    assert [s["decision"] for s in steps[:4]] == ["refuse", "refuse", "refuse", "stop"]
    assert all(s["event"]["type"] == "refused" for s in steps[:4])
    assert proposed <= 4 + 16 + 1


async def test_a_run_of_refusals_replays_to_the_same_decisions(tmp_path: Path) -> None:
    from proctor.runtime._hosting.export import trajectory_lines as export_lines

    proposals: list[Proposal] = [
        ToolCall("write_file", {"path": "x", "content": "\ud800"}),
        Claim("blocked", "c", ("e",), "r"),
        ToolCall("read_file", {"path": "calc.py", "n": float("inf")}),
        ToolCall("read_file", {"path": "calc.py"}),
        ToolCall("run_command", {"cmd": "x" * 70_000}),
        ToolCall("run_command", {"cmd": "y" * 70_000}),
        ToolCall("run_command", {"cmd": "z" * 70_000}),
        ToolCall("run_command", {"cmd": "w" * 70_000}),
    ]
    result = await run(_task(tmp_path / "w"), ScriptedActor(proposals), tmp_path / "j.db")
    assert result.disposition is Disposition.NO_PROGRESS
    async with open_journal(tmp_path / "j.db") as j:
        run_row = await j.get_run(result.run_id)
        task = (await j.get_task(run_row.task_id))["spec"]
        steps = await j.steps(result.run_id)
    lines = export_lines(task, run_row.policy, steps)
    replayed = replay(parse_trajectory(lines))
    live = [(s["decision"], s["progress"]) for s in steps if s["event"] is not None]
    assert [(s.decision.value, s.progress) for s in replayed.steps] == live
    assert replayed.disposition == "no_progress"


def test_refused_events_in_a_trajectory_stop_at_the_stall_threshold() -> None:
    refused = json.dumps({"type": "refused", "reason": "refused: too large"})
    result = replay(parse_trajectory([HEADER, *[refused] * 10]))
    assert result.disposition == "no_progress"
    assert result.stopped_at == 4
    assert [s.decision.value for s in result.steps] == ["refuse", "refuse", "refuse", "stop"]


# -- trajectories --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        ('{"type":"message","kind":"checkpoint","text":"\\ud800"}', "lone surrogate"),
        ('{"type":"message","kind":"checkpoint","text":"x","\\udc00":1}', "lone surrogate"),
        ('{"type":"action","tool":"t","args":{"n":1e999},"result":{"status":"ok"}}', "finite"),
        ('{"type":"action","tool":"t","args":{"n":' + "7" * 5000 + '},"result":{}}', "64-bit"),
        ("[" * 50_000 + "]" * 50_000, "levels deep"),
        ('{"type":"user","text":"a"} trailing', "not JSON"),
    ],
)
def test_a_hostile_trajectory_line_is_a_trajectory_error_naming_its_line(
    event: str, expected: str
) -> None:
    with pytest.raises(TrajectoryError, match=expected) as info:
        parse_trajectory([HEADER, '{"type":"user","text":"ok"}', event])
    assert info.value.line == 3


def test_replay_of_a_hostile_trajectory_exits_2_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(HEADER + "\n" + "[" * 50_000 + "]" * 50_000 + "\n")
    done = subprocess.run(
        [PY, "-m", "proctor", "replay", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "line 2" in done.stderr
    assert "Traceback" not in done.stderr


# -- task files -------------------------------------------------------------------------------

CHECK = '[[checks]]\nname = "t"\nrun = ["true"]\n'


def _task_file(home: Path, text: str) -> Path:
    (home / "project").mkdir(exist_ok=True)
    (home / "agent.jsonl").write_text('{"type": "complete"}\n')
    path = home / "task.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("check", "field", "expected"),
    [
        ("required = {a=1}", "checks[1].required", "true or false"),
        ("name = 1e308", "checks[1].name", "non-empty string"),
        ("name = [[1]]", "checks[1].name", "non-empty string"),
        ('name = "' + "n" * 300 + '"', "checks[1].name", "at most 200"),
        ("expect_exit = 9999999999999999999999", "checks[1].expect_exit", "64-bit"),
        ("expect_exit = 300", "checks[1].expect_exit", "0 to 255"),
        ('run = ["\\u0000"]', "checks[1].run", "NUL"),
        ("time_limit = nan", "checks[1].time_limit", "finite"),
    ],
)
def test_a_bad_check_value_is_refused_at_load_with_its_line(
    tmp_path: Path, check: str, field: str, expected: str
) -> None:
    key = check.split(" =")[0]
    lines = [f"{k} = {v}" for k, v in (("name", '"t"'), ("run", '["true"]')) if k != key]
    text = (
        '[task]\ngoal = "g"\nworkspace = "project"\n\n[[checks]]\n'
        + "\n".join([*lines, check])
        + '\n\n[actor]\nscript = "agent.jsonl"\n'
    )
    path = _task_file(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_task(path)
    number = text.splitlines().index(check) + 1 if key != "name" else None
    message = str(info.value)
    assert f": {field}: " in message
    if number is not None:
        assert message.startswith(f"{path}:{number}: ")
    assert expected in message


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        ('workspace = "/"', "filesystem's root"),
        ('workspace = "../../.."', "holds the task file's own directory"),
        ('workspace = ".."', "holds the task file's own directory"),
        ('workspace = "\\u0000"', "NUL"),
        ('workspace = "project"\ntemplate = "\\u0000"', "NUL"),
        ('workspace = "project"\ntemplate = "' + "t" * 300 + '"', "255 bytes a name"),
    ],
)
def test_a_workspace_or_template_that_would_take_everything_is_refused(
    tmp_path: Path, task: str, expected: str
) -> None:
    home = tmp_path / "a" / "b" / "c"
    home.mkdir(parents=True)
    text = f'[task]\ngoal = "g"\n{task}\n\n{CHECK}\n[actor]\nscript = "agent.jsonl"\n'
    path = _task_file(home, text)
    with pytest.raises(ConfigError, match=expected) as info:
        load_task(path)
    assert str(info.value).startswith(f"{path}:")


def test_a_task_in_python_on_the_root_is_refused() -> None:
    with pytest.raises(ConfigError, match="filesystem's root"):
        Task(goal="g", workspace="/", kind="answer")


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b'[task]\ngoal = "g\xe9"\n', ":2: byte 0xe9 is not UTF-8"),
        (b"[task]\nx = " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested thousands deep"),
        (
            b'[task]\ngoal = "g"\n[actor]\nscript = "agent.jsonl"\nmodel = 07:32:00\n',
            ":5: actor.model",
        ),
        (b'[task]\ngoal = "g"\nwhen = 1979-05-27\n', "task.when"),
    ],
)
def test_a_task_file_that_is_not_text_or_too_deep_is_a_clear_error(
    tmp_path: Path, data: bytes, expected: str
) -> None:
    path = _task_file(tmp_path, "")
    path.write_bytes(data)
    with pytest.raises(ConfigError, match=expected):
        load_task(path)


def test_proctor_run_of_a_hostile_task_file_exits_2_without_a_traceback(tmp_path: Path) -> None:
    path = _task_file(tmp_path, '[task]\ngoal = "g"\nworkspace = "/"\n')
    done = subprocess.run(
        [PY, "-m", "proctor", "run", str(path), "--journal", str(tmp_path / "j.db")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "task.workspace" in done.stderr
    assert "Traceback" not in done.stderr


# -- hosts and resumes --------------------------------------------------------------------


async def _cli(*args: str, cwd: Path | None = None) -> tuple[int, str, str]:
    """Run ``proctor ARGS`` to its end: exit code, stdout, stderr."""
    with anyio.fail_after(120):
        done = await anyio.run_process([PY, "-m", "proctor", *args], cwd=cwd, check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def _proctor(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PY, "-m", "proctor", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _write_task(
    home: Path, script: list[dict[str, Any]], budget: str = "", *, unsandboxed: bool = False
) -> Path:
    (home / "project").mkdir(parents=True, exist_ok=True)
    (home / "project" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (home / "agent.jsonl").write_text("".join(json.dumps(p) + "\n" for p in script))
    text = (
        '[task]\ngoal = "fix add"\nworkspace = "project"\n\n[[checks]]\nname = "sum"\n'
        f'run = ["{PY}", "-c", "import calc, sys; sys.exit(calc.add(2, 3) != 5)"]\n'
        f'\n{budget}\n[actor]\nscript = "agent.jsonl"\n'
        # Off where the test's command leaves its mark outside the workspace, which
        # the sandbox would not let it write.
        + ('\n[sandbox]\nmode = "off"\n' if unsandboxed else "")
    )
    (home / "task.toml").write_text(text)
    return home / "task.toml"


async def test_two_concurrent_resumes_of_one_run_one_proceeds_and_the_command_runs_once(
    tmp_path: Path,
) -> None:
    home = tmp_path / "h"
    task = _write_task(
        home,
        [{"type": "action", "tool": "read_file", "args": {"path": "calc.py"}}],
        unsandboxed=True,
    )
    journal = str(tmp_path / "j.db")
    _, out, _ = await _cli("run", str(task), "--journal", journal, "--json")
    run_id = json.loads(out)["run_id"]
    # The command marks that it ran, then waits for the test's word to finish.
    cmd = "echo ran >> ../ran.log; while [ ! -e ../go ]; do sleep 0.02; done"
    second = home / "second.jsonl"
    second.write_text(
        json.dumps({"type": "action", "tool": "run_command", "args": {"cmd": cmd}}) + "\n"
    )
    args = ("resume", run_id, "--journal", journal, "--script", str(second), "--json")
    a, b = _proctor(*args, cwd=home), _proctor(*args, cwd=home)
    try:
        with anyio.fail_after(60):
            # One of them is refused while the other's command runs.
            while True:
                refused = [p for p in (a, b) if p.poll() is not None]
                if refused and (home / "ran.log").exists():
                    break
                await anyio.sleep(0.02)
        (home / "go").write_text("")
        outs = {p: p.communicate(timeout=60) for p in (a, b)}
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.kill()
    loser, winner = (a, b) if a in refused else (b, a)
    assert loser.returncode == 2
    assert "is held by host" in outs[loser][1]
    assert f"pid {winner.pid}" in outs[loser][1]
    assert winner.returncode != 2, outs[winner][1]
    assert (home / "ran.log").read_text() == "ran\n"
    async with open_journal(journal) as j:
        runs = await j.list_runs()
        assert len(runs) == 2  # the refused host created no run
        won = json.loads(outs[winner][0])["run_id"]
        steps = await j.steps(won)
        # The winner's command was not ended by the other host: it ran to its end.
        assert steps[0]["tool_status"] == "ok"
        assert await j.task_holder(runs[0].task_id) is None


async def test_a_resumed_scripted_actor_goes_on_after_the_proposals_already_made(
    tmp_path: Path,
) -> None:
    home = tmp_path / "h"
    log = "echo once >> ../effects.log"
    script = [
        {"type": "action", "tool": "run_command", "args": {"cmd": log}},
        {"type": "action", "tool": "read_file", "args": {"path": "calc.py"}},
    ]
    task = _write_task(home, script, unsandboxed=True)
    journal = str(tmp_path / "j.db")
    _, out, _ = await _cli("run", str(task), "--journal", journal, "--json")
    outcome = json.loads(out)
    assert outcome["disposition"] == "failed"  # the script ran out; the check fails
    # The operator writes the rest of the script; a resume goes on from there.
    fix = {"path": "calc.py", "old": "a - b", "new": "a + b"}
    with (home / "agent.jsonl").open("a") as f:
        f.write(json.dumps({"type": "action", "tool": "edit_file", "args": fix}) + "\n")
        f.write(json.dumps({"type": "complete"}) + "\n")
    _, out, err = await _cli("resume", outcome["run_id"], "--journal", journal, "--json")
    resumed = json.loads(out)
    assert resumed["disposition"] == "completed", err
    # The command ran once: the resumed actor went on with the edit, not from line 1.
    assert (home / "effects.log").read_text() == "once\n"
    async with open_journal(journal) as j:
        steps = await j.steps(resumed["run_id"])
    actions = [json.loads(s["action"])["tool"] for s in steps if s["kind"] == "action"]
    assert actions == ["edit_file"]
    # And a library resume without an actor does the same: nothing is left to propose.
    again = await resume(resumed["run_id"], None, journal)
    assert again.disposition is Disposition.COMPLETED
    assert (home / "effects.log").read_text() == "once\n"


async def test_a_run_whose_actor_was_never_journaled_is_closed_failed_on_resume(
    tmp_path: Path,
) -> None:
    journal = tmp_path / "j.db"
    async with open_journal(journal) as j:
        await j.put_task("t1", "g", _task(tmp_path / "w").describe(), "c")
        await j.create_run("r-orphan", "t1", policy={}, policy_version="p", host="gone")
    code, _, err = await _cli("resume", "r-orphan", "--journal", str(journal))
    assert code == 2
    assert "no journaled actor" in err
    assert "closed failed" in err
    assert "Traceback" not in err
    async with open_journal(journal) as j:
        row = await j.get_run("r-orphan")
    assert row.status == "failed"
    assert row.stop_reason is not None
    assert row.stop_reason["code"] == "actor_never_journaled"


async def test_a_dead_holder_is_replaced_and_a_live_one_refuses_in_process(
    tmp_path: Path,
) -> None:
    from proctor._errors import RunHeld
    from proctor.runtime._control.run import holder_token

    task = _task(tmp_path / "w", task_id="held")
    journal = tmp_path / "j.db"
    async with open_journal(journal) as j:
        await j.put_task("held", task.goal, task.describe(), task.contract_version)
        # A holder whose process is gone.
        async with await anyio.open_process(["true"]) as gone:
            await gone.wait()
        dead = f"{socket.gethostname()}:{gone.pid}:1:old"
        assert await j.hold_task("held", "old", dead) is None
    result = await run(task, ScriptedActor([FIX, Completion()]), journal)
    assert result.disposition is Disposition.COMPLETED
    async with open_journal(journal) as j:
        assert await j.task_holder("held") is None
        # Held by this very process (another of its runs): refused by name.
        assert await j.hold_task("held", "mine", holder_token("mine")) is None
    with pytest.raises(RunHeld, match="is held by host"):
        await run(task, ScriptedActor([FIX]), journal)
