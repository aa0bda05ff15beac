"""
The real agents, offline, governed by proctor through their hooks: Claude Code,
Codex CLI and gemini-cli each talk to a fake model server that replays a script,
really run their tools, and really call ``proctor hook`` (installed by
``proctor hooks install``). Each scenario is checked in the journal.

Outside CI a missing binary skips with the reason; in CI (CI=true) it fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests.support.coding_agents import AgentRun, missing, run_agent
from tests.support.fake_models import (
    FakeServer,
    ToolCall,
    serve_anthropic,
    serve_gemini,
    serve_responses,
)

from proctor.runtime import open_journal
from proctor.runtime._hosting.hooks.server import serve_hooks

AGENTS = ("claude", "codex", "gemini")
SERVE: dict[str, Callable[[list[Any]], FakeServer]] = {
    "claude": serve_anthropic,
    "codex": serve_responses,
    "gemini": serve_gemini,
}
BROKEN = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TEST = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
CHEAT = "def test_add():\n    assert True\n"


@pytest.fixture(params=AGENTS)
def agent(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    why = missing(name)
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{name} must run in CI: {why}")
        pytest.skip(why)
    return name


def shell(agent: str, command: str) -> ToolCall:
    if agent == "codex":
        return ToolCall("exec_command", {"cmd": command})
    name = "Bash" if agent == "claude" else "run_shell_command"
    return ToolCall(name, {"command": command, "description": "run it"})


def write(agent: str, path: Path, content: str) -> ToolCall:
    if agent == "claude":
        return ToolCall("Write", {"file_path": str(path), "content": content})
    if agent == "gemini":
        return ToolCall("write_file", {"file_path": str(path), "content": content})
    return shell(agent, f"cat > {path} <<'PROCTOR_EOF'\n{content}PROCTOR_EOF")


def project(tmp_path: Path, budget: str = "") -> tuple[Path, Path, Path]:
    work = tmp_path / "project"
    (work / "tests").mkdir(parents=True)
    (work / "calc.py").write_text(BROKEN)
    (work / "tests" / "test_calc.py").write_text(TEST)
    task = tmp_path / "task.toml"
    task.write_text(
        '[task]\ngoal = "Make the test suite pass without changing tests/"\n\n'
        '[[checks]]\nname = "tests"\n'
        f"run = [{json.dumps(sys.executable)}, '-m', 'pytest', '-q', '-p', 'no:cacheprovider']\n\n"
        '[contract]\nprotected = ["tests/**"]\n' + budget
    )
    return work, task, tmp_path / "proctor.db"


def ended(journal: Path) -> dict[str, Any]:
    """The one run in the journal: its row and steps."""

    async def read() -> dict[str, Any]:
        async with open_journal(journal) as j:
            (row,) = await j.list_runs()
            steps = await j.steps(row.run_id)
            spend = await j.spend_totals(row.task_id)
        return {"row": row, "steps": steps, "spend": spend}

    return anyio.run(read)


def told(srv: FakeServer) -> str:
    """Everything the agent sent its model: proctor's answers reach it there."""
    return json.dumps([r["body"] for r in srv.requests])


def go(
    agent: str, script: list[Any], work: Path, task: Path, journal: Path
) -> tuple[AgentRun, FakeServer]:
    with SERVE[agent](script) as srv:
        run = run_agent(
            agent, srv, work, "Fix calc.py so the tests pass.", task=task, journal=journal
        )
    assert run.proc.returncode == 0, run.proc.stderr[-3000:]
    return run, srv


def test_build_rescue_completes_only_after_checks_pass(agent: str, tmp_path: Path) -> None:
    work, task, journal = project(tmp_path)
    script = ["All done, the tests pass.", write(agent, work / "calc.py", FIXED), "Fixed it."]
    _, srv = go(agent, script, work, task, journal)
    # The premature stop was blocked with the failing test's own text.
    assert "assert -1 == 5" in told(srv)
    assert (work / "calc.py").read_text() == FIXED
    found = ended(journal)
    assert found["row"].disposition == "completed", found["row"]
    kinds = [s["kind"] for s in found["steps"]]
    assert kinds.count("completion") == 2
    # Each call the agent ran is journaled with the workspace's digest after it, as
    # a live run's are: the write moved the candidate off the broken baseline.
    candidates = [s["event"].get("candidate") for s in found["steps"] if s["kind"] == "action"]
    assert candidates, found["steps"]
    assert all(candidates), found["steps"]
    assert found["row"].candidate_digest == candidates[-1]
    assert found["spend"].get("steps", 0) >= 3
    if agent != "codex":
        # Claude Code and gemini-cli write token usage to their transcripts.
        assert found["spend"].get("tokens_in", 0) > 0
    # The session is a run like any other for the CLI.
    cli = [sys.executable, "-m", "proctor"]
    listed = subprocess.run(
        [*cli, "runs", "--journal", str(journal), "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    (row,) = json.loads(listed.stdout)
    assert row["status"] == "completed"
    assert row["steps"] == len(found["steps"])
    shown = subprocess.run(
        [*cli, "show", row["run_id"][:8], "--journal", str(journal), "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert json.loads(shown.stdout)["handoff"]["disposition"] == "completed"


def test_write_to_protected_test_refused(agent: str, tmp_path: Path) -> None:
    work, task, journal = project(tmp_path)
    script = [write(agent, work / "tests" / "test_calc.py", CHEAT), "Done."]
    _, srv = go(agent, script, work, task, journal)
    found = ended(journal)
    assert found["row"].disposition != "completed"
    if agent == "codex":
        # A shell write cannot be judged before it runs: the candidate that touched
        # the protected test is what is refused, at every stop.
        assert "protected: tests/test_calc.py" in told(srv)
    else:
        assert (work / "tests" / "test_calc.py").read_text() == TEST
        assert "tests/test_calc.py is protected" in told(srv)


def test_same_failing_command_retried_until_proctor_ends_it(agent: str, tmp_path: Path) -> None:
    work, task, journal = project(tmp_path)
    marker = work.parent / "runs.log"
    command = f"echo x >> {marker}; {sys.executable} -m pytest -q -p no:cacheprovider"
    script = [shell(agent, command) for _ in range(12)] + ["Done."]
    go(agent, script, work, task, journal)
    found = ended(journal)
    assert found["row"].disposition == "no_progress", found["row"]
    ran = len(marker.read_text().splitlines())
    assert 2 <= ran <= 5, ran


def test_budget_limit_ends_the_session(agent: str, tmp_path: Path) -> None:
    work, task, journal = project(tmp_path, "\n[budget]\nsteps = 3\n")
    script = [shell(agent, f"echo {n} > {work.parent}/f{n}.txt") for n in range(6)] + ["Done."]
    go(agent, script, work, task, journal)
    found = ended(journal)
    assert found["row"].disposition == "budget_exhausted", found["row"]
    assert found["row"].stop_reason["limit"] == "steps"
    ran = sorted(p.name for p in work.parent.glob("f*.txt"))
    assert ran == ["f0.txt", "f1.txt", "f2.txt"]


def test_build_rescue_with_a_hook_server(tmp_path: Path) -> None:
    why = missing("claude")
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"claude must run in CI: {why}")
        pytest.skip(why)
    work, task, journal = project(tmp_path)
    stop, ready = threading.Event(), threading.Event()
    server = threading.Thread(
        target=serve_hooks,
        args=(str(journal),),
        kwargs={"ready": lambda _: ready.set(), "stop": stop},
    )
    server.start()
    try:
        assert ready.wait(60)
        script = ["All done.", write("claude", work / "calc.py", FIXED), "Fixed it."]
        _, srv = go("claude", script, work, task, journal)
    finally:
        stop.set()
        server.join(60)
    assert "assert -1 == 5" in told(srv)
    assert ended(journal)["row"].disposition == "completed"
