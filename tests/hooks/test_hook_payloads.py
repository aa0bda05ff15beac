"""
The recorded hook payloads of the real agents (tests/hooks/payloads/AGENT/EVENT.json),
parsed, mapped and answered; malformed input fails closed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proctor.runtime._hosting.hooks.agents import (
    Answer,
    HookInputError,
    fail_closed,
    parse,
    render,
)
from proctor.runtime._hosting.hooks.command import hook_main
from proctor.runtime._hosting.hooks.install import install, uninstall
from proctor.runtime._hosting.hooks.mapping import map_call, map_result, patch_paths
from proctor.runtime._hosting.hooks.spend import read_spend
from proctor.runtime._records import ToolStatus

PAYLOADS = Path(__file__).parent / "payloads"
KINDS = {
    "SessionStart": "start",
    "UserPromptSubmit": "prompt",
    "BeforeAgent": "prompt",
    "PreToolUse": "pre_tool",
    "BeforeTool": "pre_tool",
    "PostToolUse": "post_tool",
    "PostToolUseFailure": "post_tool",
    "AfterTool": "post_tool",
    "Stop": "stop",
    "SubagentStop": "stop",
    "AfterAgent": "stop",
    "SessionEnd": "end",
}
ALL = sorted((p.parent.name, p) for p in PAYLOADS.glob("*/*.json"))


def payload(agent: str, name: str) -> str:
    return (PAYLOADS / agent / f"{name}.json").read_text()


@pytest.mark.parametrize(("agent", "path"), ALL, ids=[f"{a}-{p.stem}" for a, p in ALL])
def test_every_recorded_payload_parses_to_its_kind(agent: Any, path: Path) -> None:
    event = parse(agent, path.read_text())
    name = path.stem.split(".")[0]
    assert event.name == name
    assert event.kind == KINDS.get(name, "other")
    assert event.session_id
    assert event.cwd


@pytest.mark.parametrize("agent", ["claude", "codex", "gemini"])
def test_shell_calls_map_to_run_command(agent: Any, tmp_path: Path) -> None:
    name = "BeforeTool" if agent == "gemini" else "PreToolUse"
    event = parse(agent, payload(agent, name))
    mapped = map_call(event, Path(event.cwd))
    assert mapped.call.tool == "run_command"
    assert mapped.call.args == {"cmd": "cat hello.txt"}
    after = parse(agent, payload(agent, "AfterTool" if agent == "gemini" else "PostToolUse"))
    result = map_result(after)
    assert result.status is ToolStatus.OK
    assert "hello world" in result.output
    assert "PGID" not in result.output  # gemini's volatile process group line is dropped


def test_claude_failure_event_is_an_error_with_its_exit_code() -> None:
    event = parse("claude", payload("claude", "PostToolUseFailure"))
    result = map_result(event)
    assert result.status is ToolStatus.ERROR
    assert result.exit_code == 3


def _event(agent: Any, name: str, cwd: Path, tool: str, args: dict[str, Any]) -> Any:
    data = {
        "hook_event_name": name,
        "session_id": "s",
        "cwd": str(cwd),
        "tool_name": tool,
        "tool_input": args,
    }
    return parse(agent, json.dumps(data))


def test_file_tools_map_with_paths_resolved_in_the_workspace(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "tests")
    write = map_call(
        _event("claude", "PreToolUse", tmp_path, "Write", {"file_path": "link/../link/t.py"}),
        tmp_path,
    )
    assert write.call.tool == "write_file"
    # Judged on the file that would really be written, through the symlink.
    assert write.writes == ("tests/t.py",)
    edit = map_call(
        _event(
            "gemini",
            "BeforeTool",
            tmp_path,
            "replace",
            {"file_path": str(tmp_path / "a.py"), "old_string": "x", "new_string": "y"},
        ),
        tmp_path,
    )
    assert edit.call.tool == "edit_file"
    assert edit.call.args == {"path": "a.py", "old": "x", "new": "y"}
    read = map_call(
        _event("claude", "PreToolUse", tmp_path, "Read", {"file_path": "/etc/passwd"}), tmp_path
    )
    assert read.outside == "/etc/passwd"
    fetch = map_call(
        _event("claude", "PreToolUse", tmp_path, "WebFetch", {"url": "https://x.org"}), tmp_path
    )
    assert fetch.call.tool == "fetch"
    other = map_call(_event("claude", "PreToolUse", tmp_path, "Glob", {"pattern": "*"}), tmp_path)
    assert (other.call.tool, other.call.args) == ("Glob", {"pattern": "*"})


def test_apply_patch_names_every_file_it_writes(tmp_path: Path) -> None:
    patch = (
        "*** Begin Patch\n*** Update File: src/a.py\n@@\n-x\n+y\n"
        "*** Add File: tests/test_b.py\n+z\n*** End Patch\n"
    )
    assert patch_paths(patch) == ["src/a.py", "tests/test_b.py"]
    mapped = map_call(
        _event("codex", "PreToolUse", tmp_path, "apply_patch", {"command": patch}), tmp_path
    )
    assert mapped.writes == ("src/a.py", "tests/test_b.py")


def test_answers_in_each_agents_schema() -> None:
    claude = parse("claude", payload("claude", "PreToolUse"))
    codex = parse("codex", payload("codex", "PreToolUse"))
    gemini = parse("gemini", payload("gemini", "BeforeTool"))
    allow = json.loads(render(claude, Answer("allow")))
    assert allow["hookSpecificOutput"]["permissionDecision"] == "allow"
    # Codex refuses "allow" without updatedInput as unsupported (and then runs the tool):
    # nothing at all allows.
    assert render(codex, Answer("allow")) == ""
    assert json.loads(render(gemini, Answer("allow"))) == {"decision": "allow"}
    deny = json.loads(render(codex, Answer("deny", "no")))
    assert deny["hookSpecificOutput"]["permissionDecisionReason"] == "no"
    assert "continue" not in json.loads(render(codex, Answer("halt", "over")))
    halt = json.loads(render(claude, Answer("halt", "over")))
    assert halt["continue"] is False
    assert halt["hookSpecificOutput"]["permissionDecision"] == "deny"
    stop = parse("gemini", payload("gemini", "AfterAgent"))
    assert json.loads(render(stop, Answer("block", "tests fail"))) == {
        "decision": "deny",
        "reason": "tests fail",
    }
    cstop = parse("claude", payload("claude", "Stop"))
    assert json.loads(render(cstop, Answer("block", "r"))) == {"decision": "block", "reason": "r"}
    assert render(cstop, Answer("proceed")) == "{}"
    post = parse("claude", payload("claude", "PostToolUse"))
    nudge = json.loads(render(post, Answer("proceed", context="[proctor] try else")))
    assert nudge["hookSpecificOutput"]["additionalContext"] == "[proctor] try else"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "[]",
        '{"hook_event_name": "PreToolUse"}',
        '{"hook_event_name": "PreToolUse", "session_id": "s", "cwd": "/"}',
        '{"hook_event_name": "PreToolUse", "session_id": "s", "cwd": "/", "tool_name": "Bash",'
        ' "tool_input": "rm -rf /"}',
        '{"hook_event_name": "Stop", "session_id": "s", "cwd": "/", "stop_hook_active": "yes"}',
    ],
)
def test_malformed_input_fails_closed(text: str, tmp_path: Path) -> None:
    out, err, code = hook_main("claude", str(tmp_path / "task.toml"), str(tmp_path / "j.db"), text)
    assert (out, code) == ("", 2)
    assert err.startswith("proctor: the claude hook input was not understood")


def test_a_task_that_cannot_be_read_fails_closed(tmp_path: Path) -> None:
    text = payload("claude", "PreToolUse").replace("/tmp/claude-work-kuo62onh", str(tmp_path))
    out, err, code = hook_main("claude", str(tmp_path / "missing.toml"), str(tmp_path / "j"), text)
    assert (out, code) == ("", 2)
    assert "PreToolUse could not be judged" in err
    assert "cannot read the task file" in err


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "hook_event_name",
                "session_id",
                "cwd",
                "tool_name",
                "tool_input",
                "stop_hook_active",
                "transcript_path",
            ]
        ),
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(),
            st.text(max_size=5),
            st.lists(st.integers(), max_size=2),
            st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
        ),
    )
)
def test_any_object_parses_or_is_refused_with_a_reason(data: dict[str, Any]) -> None:
    for agent in ("claude", "codex", "gemini"):
        refused = ""
        try:
            event = parse(agent, json.dumps(data))
        except HookInputError as exc:
            refused = str(exc)
        else:
            assert event.session_id
            assert event.cwd
        assert refused or "session_id" in data


def test_fail_closed_is_exit_2_with_a_reason() -> None:
    assert fail_closed("") == ("", "proctor: proctor could not judge this call\n", 2)


@pytest.mark.parametrize("agent", ["claude", "codex", "gemini"])
def test_transcripts_give_the_sessions_tokens(agent: Any) -> None:
    spend = read_spend(agent, str(PAYLOADS / agent / "transcript.jsonl"), "gpt-5.1-codex")
    assert spend.tokens_in > 0
    assert spend.tokens_out > 0
    assert spend.model
    assert (spend.cost_usd is not None) == (agent == "claude")
    assert read_spend(agent, None).tokens_in == 0
    assert read_spend(agent, "/nonexistent/file.jsonl").tokens_in == 0


def test_install_merges_and_uninstall_keeps_the_rest(tmp_path: Path) -> None:
    task = tmp_path / "task.toml"
    task.write_text('[task]\ngoal = "g"\n')
    claude = tmp_path / ".claude" / "settings.json"
    claude.parent.mkdir()
    mine = {"type": "command", "command": "my-linter"}
    claude.write_text(json.dumps({"model": "x", "hooks": {"PreToolUse": [{"hooks": [mine]}]}}))
    install("claude", task, project=tmp_path, journal=str(tmp_path / "j.db"))
    install("claude", task, project=tmp_path, journal=str(tmp_path / "j.db"))  # idempotent
    data = json.loads(claude.read_text())
    assert data["model"] == "x"
    assert len(data["hooks"]["PreToolUse"]) == 2
    assert "Stop" in data["hooks"]
    assert uninstall("claude", project=tmp_path) == claude
    assert json.loads(claude.read_text()) == {
        "model": "x",
        "hooks": {"PreToolUse": [{"hooks": [mine]}]},
    }
    assert uninstall("claude", project=tmp_path) is None
    home = tmp_path / "codex"
    home.mkdir()
    (home / "config.toml").write_text('model = "m"\n\n[features]\nother = 1\n')
    written = install("codex", task, project=tmp_path, journal="j.db", codex_home=home)
    assert written == [home / "hooks.json", home / "config.toml"]
    assert "[features]\nhooks = true\nother = 1" in (home / "config.toml").read_text()


_SEGMENT = st.sampled_from(["a", "b", "tests", "..", ".", "c.py"])


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(_SEGMENT, min_size=1, max_size=6))
def test_a_written_path_is_judged_where_it_lands(tmp_path: Path, parts: list[str]) -> None:
    import posixpath

    root = tmp_path / "ws"
    root.mkdir(exist_ok=True)
    relative = "/".join(parts)
    mapped = map_call(
        _event("claude", "PreToolUse", root, "Write", {"file_path": relative, "content": ""}),
        root,
    )
    landed = posixpath.normpath(posixpath.join(str(root), relative))
    if landed == str(root) or landed.startswith(str(root) + "/"):
        assert mapped.outside is None
        assert mapped.writes == (posixpath.relpath(landed, str(root)),)
    else:
        assert mapped.outside == landed


@given(
    st.one_of(
        st.none(), st.text(max_size=40), st.dictionaries(st.text(max_size=8), st.text(max_size=8))
    )
)
def test_any_tool_response_maps_to_a_result(response: Any) -> None:
    event = parse(
        "gemini",
        json.dumps(
            {
                "hook_event_name": "AfterTool",
                "session_id": "s",
                "cwd": "/",
                "tool_name": "run_shell_command",
                "tool_input": {"command": "x"},
                "tool_response": response,
            }
        ),
    )
    result = map_result(event)
    assert result.status in (ToolStatus.OK, ToolStatus.ERROR, ToolStatus.UNCERTAIN)
    assert isinstance(result.output, str)
