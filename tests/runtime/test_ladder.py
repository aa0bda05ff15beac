"""
The escalation ladder as docs/progress.md states it, live and in replay.

With ``stall_threshold = T``: steps 1 .. T-3 without progress are observed, the
(T-2)-th is a nudge, an exact repeat at the (T-1)-th is refused (not run), the
T-th stops the run. Each rung is pinned at its step for T = 3, 4 and 6, for a
recorded trajectory and for a live run of the same calls; ``refuse_repeats =
false`` turns the refusal into an ordinary step.

Rescues: a live build whose required files are still missing is rescued once (by
default, when it declares required files) before its ``no_progress`` stop.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from proctor import CommandCheck, Disposition, Policy, ScriptedActor, Task, ToolCall, run
from proctor.runtime import open_journal
from proctor.runtime._progress.trajectory import parse_trajectory, replay
from proctor.runtime._task import LIVE_RESCUE_LIMIT, parse_task

PY = sys.executable
READ = {"tool": "read_file", "args": {"path": "notes.txt"}}


def _ladder(threshold: int, refuse: bool = True) -> list[str]:
    """The decisions of T+1 identical reads: the first is new work, then the ladder."""
    idle = ["continue"] * (threshold - 3) + ["nudge", "refuse" if refuse else "continue", "stop"]
    return ["continue", *idle]


def _trajectory(threshold: int, refuse: bool, calls: int) -> list[str]:
    header = {
        "format": "proctor.trajectory",
        "version": 1,
        "task": {"kind": "build", "checks": ["tests"]},
        "policy": {"stall_threshold": threshold, "refuse_repeats": refuse},
    }
    event = {**READ, "type": "action", "result": {"status": "ok", "output": "hello\n"}}
    return [json.dumps(header)] + [json.dumps(event)] * calls


@pytest.mark.parametrize("refuse", [True, False])
@pytest.mark.parametrize("threshold", [3, 4, 6])
def test_replay_climbs_each_rung_at_its_step(threshold: int, refuse: bool) -> None:
    outcome = replay(parse_trajectory(_trajectory(threshold, refuse, threshold + 5)))
    assert [s.decision.value for s in outcome.steps] == _ladder(threshold, refuse)
    assert (outcome.disposition, outcome.stop_reason) == ("no_progress", "stall")
    assert outcome.stopped_at == threshold + 1


def test_refuse_repeats_false_changes_a_decision() -> None:
    on = replay(parse_trajectory(_trajectory(4, True, 6)))
    off = replay(parse_trajectory(_trajectory(4, False, 6)))
    differ = [a.index for a, b in zip(on.steps, off.steps, strict=True) if a.decision != b.decision]
    assert differ == [4]
    assert on.policy_version != off.policy_version


def test_a_different_call_at_the_refuse_rung_runs() -> None:
    lines = _trajectory(4, True, 3)
    other = {
        "type": "action",
        "tool": "read_file",
        "args": {"path": "other.txt"},
        "result": {"status": "ok", "output": "new\n"},
    }
    lines.append(json.dumps(other))
    outcome = replay(parse_trajectory(lines))
    assert [s.decision.value for s in outcome.steps] == [
        "continue",
        "continue",
        "nudge",
        "continue",
    ]
    assert outcome.steps[-1].progress is True


def test_an_exact_repeat_of_a_failure_stops_at_its_threshold_occurrence() -> None:
    # The refused repeat's outcome is known (the same failure every time): it counts
    # as that failure again, so the stop lands where the repeated-failure rule says.
    header = {
        "format": "proctor.trajectory",
        "version": 1,
        "task": {"kind": "build"},
        "policy": {"stall_threshold": 4},
    }
    fail = {
        "type": "action",
        "tool": "run_command",
        "args": {"cmd": "make"},
        "result": {"status": "error", "exit_code": 2, "output": "error: missing header\n"},
    }
    outcome = replay(parse_trajectory([json.dumps(header)] + [json.dumps(fail)] * 6))
    assert (outcome.stop_reason, outcome.stopped_at) == ("repeated_failure", 4)


def _project(root: Path) -> Path:
    root.mkdir()
    (root / "notes.txt").write_text("hello\n")
    return root


def _task(root: Path, **kw: Any) -> Task:
    defaults: dict[str, Any] = {
        "goal": "read the notes",
        "workspace": root,
        "checks": (CommandCheck("tests", [PY, "-c", "raise SystemExit(1)"]),),
    }
    return Task(**(defaults | kw))


async def _decisions(journal: Path, run_id: str) -> list[dict[str, Any]]:
    """The action steps up to the stop (what the actor still sent after it was refused)."""
    async with open_journal(journal) as j:
        steps = [s for s in await j.steps(run_id) if s["kind"] == "action"]
    stops = [i for i, s in enumerate(steps) if s["decision"] == "stop"]
    return steps[: stops[0] + 1] if stops else steps


@pytest.mark.parametrize("refuse", [True, False])
@pytest.mark.parametrize("threshold", [3, 4, 6])
async def test_a_live_run_climbs_the_same_rungs(
    tmp_path: Path, threshold: int, refuse: bool
) -> None:
    policy = Policy(stall_threshold=threshold, refuse_repeats=refuse)
    calls = [ToolCall("read_file", {"path": "notes.txt"})] * (threshold + 5)
    result = await run(
        _task(_project(tmp_path / "p"), policy=policy), ScriptedActor(calls), tmp_path / "j"
    )
    assert result.disposition is Disposition.NO_PROGRESS
    steps = await _decisions(tmp_path / "j", result.run_id)
    assert [s["decision"] for s in steps] == _ladder(threshold, refuse)
    statuses = [s["tool_status"] for s in steps]
    if refuse:
        # Neither the refused repeat nor the one that stopped the run was run.
        assert statuses[-2:] == ["refused", "refused"]
        assert "not run" in str(steps[-2]["reason"])
    else:
        assert statuses[-2] == "ok"


async def test_a_live_build_missing_a_required_file_is_rescued_once(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    task = _task(root, required_files=("report.md",))
    assert task.policy.rescue_limit == LIVE_RESCUE_LIMIT == 1
    calls = [ToolCall("read_file", {"path": "notes.txt"})] * 20
    result = await run(task, ScriptedActor(calls), tmp_path / "j")
    assert result.disposition is Disposition.NO_PROGRESS
    steps = await _decisions(tmp_path / "j", result.run_id)
    rescues = [s for s in steps if "rescue" in str(s["reason"])]
    assert len(rescues) == 1
    assert rescues[0]["decision"] == "nudge"
    assert "report.md" in str(rescues[0]["reason"])
    # The rescue came where the stop would have (the 4th step without progress);
    # the counters started again, so the stop came four such steps later.
    assert steps.index(rescues[0]) == 4
    assert [s["decision"] for s in steps].count("stop") == 1
    assert len(steps) == 9


async def test_no_rescue_when_the_required_files_exist(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    (root / "report.md").write_text("done\n")
    task = _task(root, required_files=("report.md",))
    calls = [ToolCall("read_file", {"path": "notes.txt"})] * 20
    result = await run(task, ScriptedActor(calls), tmp_path / "j")
    steps = await _decisions(tmp_path / "j", result.run_id)
    assert not [s for s in steps if "rescue" in str(s["reason"])]
    assert len(steps) == 5


TOML = """
[task]
goal = "g"
workspace = "."
[[checks]]
name = "t"
run = "true"
"""


@pytest.mark.parametrize(
    ("extra", "limit"),
    [
        ('[contract]\nrequired_files = ["a.py"]\n', LIVE_RESCUE_LIMIT),
        ('[contract]\nrequired_files = ["a.py"]\n[policy]\nrescue_limit = 0\n', 0),
        ('[contract]\nrequired_files = ["a.py"]\n[policy]\nstall_threshold = 5\n', 1),
        ("", 0),
    ],
)
def test_a_task_file_rescues_by_default_when_it_names_required_files(
    tmp_path: Path, extra: str, limit: int
) -> None:
    (tmp_path / "agent.jsonl").write_text("")
    text = TOML + extra + '[actor]\nscript = "agent.jsonl"\n'
    loaded = parse_task(text, tmp_path / "task.toml")
    assert loaded.task.policy.rescue_limit == limit
