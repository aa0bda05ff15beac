"""
Invalid trajectories, through ``proctor replay`` and through the Python API; the
human summary and ``--policy OTHER.toml --diff``.

The contract: exit code 2 for invalid input, with a message that names the line
(and the key, when a key is unknown); exit code 0 for any valid trajectory.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from proctor._errors import ConfigError, TrajectoryError
from proctor.runtime._progress.trajectory import parse_trajectory, read_trajectory

TRAJECTORIES = Path(__file__).resolve().parents[1] / "trajectories"

HEADER: dict[str, Any] = {"format": "proctor.trajectory", "version": 1, "task": {"kind": "build"}}
ACTION: dict[str, Any] = {
    "type": "action",
    "tool": "run_command",
    "args": {"cmd": "pytest -q"},
    "result": {"status": "error", "exit_code": 1, "output": "1 failed, 3 passed in 0.12s"},
}


def _header(**changes: Any) -> dict[str, Any]:
    return {**HEADER, **changes}


def _action(**changes: Any) -> dict[str, Any]:
    return {**ACTION, **changes}


def _line(obj: Any) -> str:
    return json.dumps(obj)


class Bad(NamedTuple):
    """An invalid trajectory, the line its error belongs to, and words the message holds."""

    lines: Sequence[str]
    line: int
    words: Sequence[str] = ()


BAD: dict[str, Bad] = {
    "empty_file": Bad([], 1),
    "bad_json_on_line_3": Bad(
        [_line(HEADER), _line(ACTION), '{"type": "action", "tool": "run_command", "args": {'], 3
    ),
    "header_not_an_object": Bad(['["proctor.trajectory", 1]'], 1),
    "unknown_header_key": Bad([_line(_header(agent="codex"))], 1, ["agent"]),
    "unknown_task_key": Bad(
        [_line(_header(task={"kind": "build", "timeout_seconds": 900}))], 1, ["timeout_seconds"]
    ),
    "task_without_kind": Bad([_line(_header(task={"checks": ["tests"]}))], 1, ["kind"]),
    "task_kind_unknown": Bad([_line(_header(task={"kind": "chat"}))], 1),
    "wrong_format": Bad([_line(_header(format="proctor.trace"))], 1),
    "wrong_version": Bad([_line(_header(version=2))], 1),
    "policy_key_unknown": Bad(
        [_line(_header(policy={"max_steps": 40})), _line(ACTION)], 1, ["max_steps"]
    ),
    "identical_response_threshold_1": Bad(
        [_line(_header(policy={"identical_response_threshold": 1})), _line(ACTION)],
        1,
        ["identical_response_threshold"],
    ),
    "unknown_event_type": Bad(
        [_line(HEADER), _line({"type": "thought", "text": "let me think"})], 2
    ),
    "event_not_an_object": Bad([_line(HEADER), _line(ACTION), '["action"]'], 3),
    "unknown_key_in_action": Bad(
        [_line(HEADER), _line(ACTION), _line(ACTION), _line(_action(cwd="/repo"))], 4, ["cwd"]
    ),
    "unknown_key_in_result": Bad(
        [_line(HEADER), _line(_action(result={"status": "ok", "stdout": "3 passed"}))],
        2,
        ["stdout"],
    ),
    "unknown_key_in_message": Bad(
        [_line(HEADER), _line({"type": "message", "kind": "checkpoint", "role": "assistant"})],
        2,
        ["role"],
    ),
    "action_without_result": Bad(
        [_line(HEADER), _line({k: v for k, v in ACTION.items() if k != "result"})], 2, ["result"]
    ),
    "result_without_status": Bad(
        [_line(HEADER), _line(_action(result={"exit_code": 0, "output": ""}))], 2, ["status"]
    ),
    "bad_status_value": Bad(
        [_line(HEADER), _line(_action(result={"status": "failed", "exit_code": 1}))], 2
    ),
    "args_not_an_object": Bad([_line(HEADER), _line(_action(args="pytest -q"))], 2, ["args"]),
    "of_event_points_forward": Bad(
        [
            _line(HEADER),
            _line(ACTION),
            _line({"type": "verdict", "check": "tests", "passed": True, "of_event": 5}),
            _line(ACTION),
        ],
        3,
    ),
    "of_event_is_the_verdict_itself": Bad(
        [
            _line(HEADER),
            _line({"type": "verdict", "check": "tests", "passed": True, "of_event": 1}),
        ],
        2,
    ),
    "unknown_message_kind": Bad(
        [_line(HEADER), _line({"type": "message", "kind": "thought", "text": "hmm"})], 2
    ),
    "unknown_signal": Bad(
        [_line(HEADER), _line(ACTION), _line({"type": "signal", "name": "sigterm"})], 3
    ),
    "claim_status_unknown": Bad(
        [_line(HEADER), _line({"type": "claim", "status": "done", "condition": "c"})], 2
    ),
    "changed_not_a_boolean": Bad(
        [_line(HEADER), _line(ACTION), _line(_action(changed="yes"))], 3, ("changed",)
    ),
    "candidate_not_a_string": Bad(
        [_line(HEADER), _line(_action(candidate=7))], 2, ("candidate", "string")
    ),
    "candidate_empty": Bad(
        [_line(HEADER), _line(_action(candidate=""))], 2, ("candidate", "digest")
    ),
    "failure_window_negative": Bad(
        [_line(_header(policy={"failure_window": -1})), _line(ACTION)], 1, ("failure_window",)
    ),
    "failure_window_not_a_number": Bad(
        [_line(_header(policy={"failure_window": "20"})), _line(ACTION)],
        1,
        ("failure_window", "whole number"),
    ),
}


# The cases also run through the command (each start of the command costs a fresh
# interpreter, so the rest go through the API only).
CLI_CASES = (
    "empty_file",
    "bad_json_on_line_3",
    "unknown_header_key",
    "wrong_format",
    "wrong_version",
    "policy_key_unknown",
    "identical_response_threshold_1",
    "unknown_event_type",
    "unknown_key_in_action",
    "unknown_key_in_result",
    "action_without_result",
    "result_without_status",
    "bad_status_value",
    "args_not_an_object",
    "of_event_points_forward",
)


def _run_all(jobs: dict[str, list[str]], width: int) -> dict[str, subprocess.CompletedProcess[str]]:
    """Run each job's command line, ``width`` at a time."""
    done: dict[str, subprocess.CompletedProcess[str]] = {}
    running: deque[tuple[str, subprocess.Popen[str]]] = deque()

    def finish() -> None:
        name, proc = running.popleft()
        out, err = proc.communicate(timeout=60)
        done[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    for name, args in jobs.items():
        if len(running) >= width:
            finish()
        running.append(
            (
                name,
                subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
            )
        )
    while running:
        finish()
    return done


def _proctor(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "proctor", *(str(a) for a in args)]


def _write(path: Path, lines: Sequence[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def bad_runs(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, subprocess.CompletedProcess[str]]:
    root = tmp_path_factory.mktemp("bad")
    jobs = {
        name: _proctor("replay", _write(root / f"{name}.jsonl", bad.lines), "--json")
        for name, bad in BAD.items()
        if name in CLI_CASES
    }
    return _run_all(jobs, width=2 * (os.cpu_count() or 1))


@pytest.mark.parametrize("name", CLI_CASES)
def test_cli_rejects_invalid_input(
    bad_runs: dict[str, subprocess.CompletedProcess[str]], name: str
) -> None:
    bad = BAD[name]
    proc = bad_runs[name]
    assert proc.returncode == 2, proc.stdout
    assert proc.stdout == ""
    assert re.search(rf"\bline {bad.line}\b", proc.stderr), proc.stderr
    for word in bad.words:
        assert word in proc.stderr


@pytest.mark.parametrize("name", list(BAD))
def test_api_rejects_invalid_input(name: str) -> None:
    bad = BAD[name]
    with pytest.raises(TrajectoryError) as info:
        parse_trajectory(bad.lines)
    assert info.value.line == bad.line
    assert f"line {bad.line}" in str(info.value)
    for word in bad.words:
        assert word in str(info.value)
    # The one error tree: a bad trajectory is bad configuration input.
    assert isinstance(info.value, ConfigError)


def test_api_reads_files_with_the_same_checks(tmp_path: Path) -> None:
    bad = BAD["unknown_key_in_action"]
    path = _write(tmp_path / "t.jsonl", bad.lines)
    with pytest.raises(TrajectoryError) as info:
        read_trajectory(path)
    assert info.value.line == bad.line
    assert "cwd" in str(info.value)


def test_api_accepts_lines_with_or_without_line_ends() -> None:
    lines = [_line(HEADER), _line(ACTION), _line({"type": "signal", "name": "deadline"})]
    bare = parse_trajectory(lines)
    ended = parse_trajectory([f"{line}\n" for line in lines])
    assert len(bare.events) == len(ended.events) == 2
    assert [e.index for e in bare.events] == [1, 2]
    assert [e.type for e in bare.events] == ["action", "signal"]


def test_api_policy_overrides_are_validated() -> None:
    with pytest.raises(TrajectoryError) as info:
        parse_trajectory([_line(HEADER)], {"identical_response_threshold": 1})
    assert info.value.line == 1


def test_cli_missing_file_is_invalid_input(tmp_path: Path) -> None:
    proc = subprocess.run(
        _proctor("replay", tmp_path / "absent.jsonl", "--json"),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "absent.jsonl" in proc.stderr


# -- the human summary and policy comparison ----------------------------------------


@pytest.fixture(scope="module")
def other_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("policy") / "strict.toml"
    path.write_text("[policy]\nstall_threshold = 2\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def summary_runs(other_policy: Path) -> dict[str, subprocess.CompletedProcess[str]]:
    # The same URL fetched ten times: with the default stall_threshold (4) the run
    # stops at event 5; with 2 it stops at event 3.
    same_url = TRAJECTORIES / "fetch_same_url_10.jsonl"
    jobs = {
        "human": _proctor("replay", same_url),
        "open": _proctor("replay", TRAJECTORIES / "fetch_new_urls.jsonl"),
        "other": _proctor("replay", same_url, "--policy", other_policy, "--json"),
        "diff": _proctor("replay", same_url, "--policy", other_policy, "--diff"),
        "diff_json": _proctor("replay", same_url, "--policy", other_policy, "--diff", "--json"),
    }
    return _run_all(jobs, width=2 * (os.cpu_count() or 1))


def _not_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return True
    return False


def test_human_summary(summary_runs: dict[str, subprocess.CompletedProcess[str]]) -> None:
    proc = summary_runs["human"]
    assert proc.returncode == 0, proc.stderr
    assert _not_json(proc.stdout)
    assert "no_progress" in proc.stdout
    assert "stall" in proc.stdout
    assert re.search(r"\b5\b", proc.stdout)


def test_human_summary_of_an_open_run(
    summary_runs: dict[str, subprocess.CompletedProcess[str]],
) -> None:
    proc = summary_runs["open"]
    assert proc.returncode == 0, proc.stderr
    assert _not_json(proc.stdout)
    assert "open" in proc.stdout


def test_policy_file_replaces_the_header_policy(
    summary_runs: dict[str, subprocess.CompletedProcess[str]],
) -> None:
    proc = summary_runs["other"]
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["disposition"], doc["stop_reason"], doc["stopped_at"]) == (
        "no_progress",
        "stall",
        3,
    )
    assert [s["index"] for s in doc["steps"]] == [1, 2, 3]


def test_diff_lists_the_events_decided_differently(
    summary_runs: dict[str, subprocess.CompletedProcess[str]],
) -> None:
    # Events 1-2 are decided alike; at 3 one policy stops; 4-5 are processed only
    # under the default policy, which stops at 5; 6-10 are processed by neither.
    proc = summary_runs["diff"]
    assert proc.returncode == 0, proc.stderr
    listed = {int(n) for n in re.findall(r"\bevent (\d+)", proc.stdout)}
    assert listed == {3, 4, 5}


def test_diff_as_json(summary_runs: dict[str, subprocess.CompletedProcess[str]]) -> None:
    proc = summary_runs["diff_json"]
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [d["index"] for d in doc["differences"]] == [3, 4, 5]
    assert doc["a"]["stopped_at"] == 5
    assert doc["b"]["stopped_at"] == 3
    assert doc["a"]["policy_version"] != doc["b"]["policy_version"]


def test_diff_needs_a_policy() -> None:
    proc = subprocess.run(
        _proctor("replay", TRAJECTORIES / "header_only.jsonl", "--diff"),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "--policy" in proc.stderr
