"""
``[[tools]]``: command templates and HTTP endpoints a task file declares, their
boundary (no shell, no option injection, no path out of the workspace, no host
change), their task-file errors, and a live run that uses them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.support.service import Service, service_fixture

from proctor import Disposition, Task, run
from proctor._errors import ConfigError
from proctor.runtime import open_journal
from proctor.runtime._effects.declared import parse_tools
from proctor.runtime._records import ToolStatus
from proctor.runtime._task import parse_task
from proctor.runtime._tools.registry import ToolContext, ToolRegistry, call_tool
from proctor.runtime._tools.spec import Effect
from proctor.runtime._tools.workspace import Workspace

__all__ = ("service_fixture",)

PY = sys.executable
ECHO = {
    "name": "show",
    "run": [PY, "-c", "import sys; print(sys.argv[1:])", "{word}", "--label={label}"],
    "args": {"word": "string", "label": "string"},
}
CAT = {
    "name": "peek",
    "run": [PY, "-c", "import sys; print(open(sys.argv[1]).read())", "{path}"],
    "args": {"path": "string"},
    "paths": ["path"],
}


def _registry(*raw: dict[str, Any]) -> ToolRegistry:
    registry = ToolRegistry()
    for declared in parse_tools(list(raw)):
        registry.register(declared.tool())
    return registry


async def _call(tmp_path: Path, raw: dict[str, Any], args: dict[str, Any]) -> Any:
    ctx = ToolContext(workspace=Workspace.at(tmp_path), command_time_limit=30)
    return await call_tool(_registry(raw), ctx, raw["name"], args)


async def test_a_command_template_runs_without_a_shell(tmp_path: Path) -> None:
    result = await _call(tmp_path, ECHO, {"word": "$(touch pwned); ls", "label": "a b"})
    assert result.status is ToolStatus.OK
    assert "['$(touch pwned); ls', '--label=a b']" in result.output
    assert not (tmp_path / "pwned").exists()


async def test_a_value_that_would_be_an_option_is_refused(tmp_path: Path) -> None:
    result = await _call(tmp_path, ECHO, {"word": "--help", "label": "-x"})
    assert result.status is ToolStatus.ERROR
    assert "may not begin with '-'" in result.output


async def test_a_nul_in_a_value_is_refused(tmp_path: Path) -> None:
    result = await _call(tmp_path, ECHO, {"word": "a\0b", "label": "x"})
    assert result.status is ToolStatus.ERROR
    assert "NUL" in result.output


async def test_a_path_argument_stays_in_the_workspace(tmp_path: Path) -> None:
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "a.txt").write_text("inside\n")
    (tmp_path / "secret.txt").write_text("outside\n")
    ctx = ToolContext(workspace=Workspace.at(tmp_path / "w"), command_time_limit=30)
    registry = _registry(CAT)
    ok = await call_tool(registry, ctx, "peek", {"path": "./a.txt"})
    assert ok.status is ToolStatus.OK
    assert "inside" in ok.output
    for escape in ("../secret.txt", str(tmp_path / "secret.txt")):
        bad = await call_tool(registry, ctx, "peek", {"path": escape})
        assert bad.status is ToolStatus.ERROR
        assert "outside" not in bad.output


async def test_arguments_are_checked_against_the_declaration(tmp_path: Path) -> None:
    result = await _call(tmp_path, ECHO, {"word": "a", "label": "b", "extra": 1})
    assert result.status is ToolStatus.ERROR
    assert "unknown argument 'extra'" in result.output


async def test_an_endpoint_read_quotes_its_values(tmp_path: Path, service: Service) -> None:
    raw = {"name": "item", "url": service.url + "/effects/{key}", "args": {"key": "string"}}
    result = await _call(tmp_path, raw, {"key": "../items"})
    # The value stayed one path segment: /effects/..%2Fitems is not /items.
    assert result.status is ToolStatus.ERROR
    assert "404" in result.output


async def test_an_endpoint_write_runs_through_the_effect_ledger(
    tmp_path: Path, service: Service
) -> None:
    task_file = tmp_path / "task.toml"
    (tmp_path / "w").mkdir()
    (tmp_path / "agent.jsonl").write_text(
        '{"type": "action", "tool": "new_item", "args": {"name": "first"}}\n'
    )
    task_file.write_text(
        f"""
[task]
goal = "file an item"
kind = "answer"
workspace = "w"

[[tools]]
name = "new_item"
description = "File an item."
effect = "write"
url = "{service.url}/items"
method = "POST"
args = {{ name = "string" }}
targets = ["name"]

[actor]
script = "agent.jsonl"
"""
    )
    loaded = parse_task(task_file.read_text(), task_file)
    assert loaded.task.facts().tools["new_item"].effect is Effect.WRITE
    result = await run(loaded.task, loaded.actor.make(), tmp_path / "j")
    assert result.disposition is Disposition.FAILED  # the script ended without an answer
    assert len(service.items()) == 1
    async with open_journal(tmp_path / "j") as j:
        effects = await j.effects(task_id=result.task_id)
    assert [e.state for e in effects] == ["confirmed"]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"name": "read_file", "run": ["x"]}, r"tools\[1\]\.name: 'read_file' is a built-in"),
        ({"name": "t"}, r"tools\[1\]: give run"),
        ({"name": "t", "run": ["x"], "url": "http://a"}, r"tools\[1\]: give run"),
        ({"name": "t", "run": []}, r"tools\[1\]\.run: the program is missing"),
        ({"name": "t", "run": ["{p}"], "args": {"p": "string"}}, "the program itself"),
        ({"name": "t", "run": ["x", "{q}"]}, r"placeholder \{q\} names no argument"),
        ({"name": "t", "run": ["x"], "effect": "delete"}, r"tools\[1\]\.effect: must be one of"),
        ({"name": "t", "run": ["x"], "args": {"a": "list"}}, r"tools\[1\]\.args"),
        ({"name": "t", "run": ["x"], "paths": ["p"]}, r"tools\[1\]\.paths: 'p' is not one"),
        ({"name": "t", "url": "http://{h}/x", "args": {"h": "string"}}, "not the host"),
        ({"name": "t", "url": "http://a/x", "method": "POST"}, r"tools\[1\]\.effect: a GET"),
        ({"name": "t", "url": "http://a/x", "method": "TRACE"}, r"tools\[1\]\.method"),
        ({"name": "t", "run": ["x"], "colour": 1}, r"tools\[1\]\.colour: unknown key"),
    ],
)
def test_a_bad_declaration_is_a_clear_error(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_tools([raw])


def test_a_tool_declared_twice_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"tools\[2\]\.name: 't' is declared twice"):
        parse_tools([{"name": "t", "run": ["x"]}, {"name": "t", "run": ["y"]}])


def test_a_bad_tools_table_exits_2_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "agent.jsonl").write_text("")
    task = tmp_path / "task.toml"
    task.write_text(
        '[task]\ngoal = "g"\nkind = "answer"\n\n[[tools]]\nname = "t"\nrun = []\n\n'
        '[actor]\nscript = "agent.jsonl"\n'
    )
    proc = subprocess.run(
        [PY, "-m", "proctor", "run", str(task), "--journal", str(tmp_path / "j")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert f"{task}:7: tools[1].run: the program is missing" in proc.stderr
    assert "Traceback" not in proc.stderr


async def test_a_live_run_uses_a_declared_command(tmp_path: Path) -> None:
    task_file = tmp_path / "task.toml"
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "a.txt").write_text("hello\n")
    (tmp_path / "agent.jsonl").write_text(
        '{"type": "action", "tool": "peek", "args": {"path": "a.txt"}}\n'
        '{"type": "action", "tool": "peek", "args": {"path": "./a.txt"}}\n'
    )
    cat = '["' + PY + '", "-c", "import sys; print(open(sys.argv[1]).read())", "{path}"]'
    task_file.write_text(
        f"""
[task]
goal = "read"
kind = "answer"
workspace = "w"

[[tools]]
name = "peek"
run = {cat}
args = {{ path = "string" }}
paths = ["path"]

[actor]
script = "agent.jsonl"
"""
    )
    loaded = parse_task(task_file.read_text(), task_file)
    result = await run(loaded.task, loaded.actor.make(), tmp_path / "j")
    async with open_journal(tmp_path / "j") as j:
        steps = [s for s in await j.steps(result.run_id) if s["kind"] == "action"]
    assert [s["tool_status"] for s in steps] == ["ok", "ok"]
    # Its declared path argument is normalized: ./a.txt is the same call, no new work.
    assert [s["progress"] for s in steps] == [True, False]
    # The declaration is journaled with the task, so a resume rebuilds the tool.
    async with open_journal(tmp_path / "j") as j:
        row = await j.get_task(result.task_id)
    rebuilt = Task.from_description(row["spec"])
    assert rebuilt.tools == loaded.task.tools


def test_a_model_actor_from_a_task_file_is_told_of_the_tasks_tools(tmp_path: Path) -> None:
    (tmp_path / "w").mkdir()
    task_file = tmp_path / "task.toml"
    task_file.write_text(
        """
[task]
goal = "answer"
kind = "answer"
workspace = "w"

[fetch]
allow = ["docs.python.org"]

[[tools]]
name = "peek"
run = ["cat", "{path}"]
args = { path = "string" }
paths = ["path"]

[actor]
kind = "openai"
model = "gpt-4o-mini"
"""
    )
    loaded = parse_task(task_file.read_text(), task_file)
    names = {spec.name for spec in loaded.make_actor().tools}
    assert {"fetch", "peek", "read_file"} <= names
    assert "search" not in names
