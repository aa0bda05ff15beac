from __future__ import annotations

import math
import sys
from pathlib import Path

import anyio
import pytest

from proctor import CommandCheck, Completion, Disposition, Task, ToolCall, run
from proctor._errors import ActorError, ConfigError
from proctor.budgets import Price, PriceTable
from proctor.budgets._usage import Usage
from proctor.runtime import Observation, ObservationKind, ToolResult, ToolStatus, open_journal
from proctor.runtime._actors.process import (
    ProcessActor,
    observation_message,
    parse_agent_line,
)
from proctor.runtime._tools.process import group_alive

PY = sys.executable
AGENTS = Path(__file__).resolve().parent.parent / "support" / "agents"

START = Observation(0, ObservationKind.START, "Goal: make the tests pass")
ENDED = Observation(
    4, ObservationKind.ENDED, "the run has ended", disposition=Disposition.COMPLETED
)


def _agent(name: str, *args: str, **kw: float) -> ProcessActor:
    return ProcessActor([PY, str(AGENTS / f"{name}.py"), *args], **kw)  # type: ignore[arg-type]


def _result(step: int, output: str) -> Observation:
    return Observation(
        step, ObservationKind.RESULT, output, (ToolResult(ToolStatus.OK, output, None),)
    )


async def test_a_well_behaved_agent_proposes_reports_usage_and_exits_at_the_end() -> None:
    async with _agent("good") as actor:
        with anyio.fail_after(10):
            first = await actor.propose(START)
            second = await actor.propose(_result(1, "def add(a, b):\n    return a - b\n"))
            third = await actor.propose(_result(2, "edited calc.py"))
        assert first == ToolCall("read_file", {"path": "calc.py"})
        assert second == ToolCall("edit_file", {"path": "calc.py", "old": "a - b", "new": "a + b"})
        assert third == Completion("add() adds now")
        assert actor.take_usage() == Usage(300, 30, "local-model")
        assert actor.take_usage() is None
        pid = actor.pid
        assert pid is not None
        assert group_alive(pid)

        with anyio.fail_after(10):
            assert await actor.propose(ENDED) is None
        # It read the end, saw its stdin close, and exited by itself.
        assert actor.returncode == 0
        assert not group_alive(pid)
        assert "agent: step 2 (result)" in actor.stderr_tail()
        assert "the run ended: completed" in actor.stderr_tail()
        # Nothing more is asked of it.
        assert await actor.propose(_result(5, "late")) is None


async def test_a_crashing_agent_fails_with_its_exit_code_and_stderr() -> None:
    actor = _agent("crash")
    with anyio.fail_after(10), pytest.raises(ActorError) as caught:
        await actor.propose(START)
    message = str(caught.value)
    assert "exited with code 3" in message
    assert "boom: the model key is missing" in message
    assert actor.pid is not None
    assert not group_alive(actor.pid)
    # A failed agent stays failed.
    with pytest.raises(ActorError, match="exited with code 3"):
        await actor.propose(_result(1, "x"))
    await actor.aclose()


@pytest.mark.parametrize(
    ("garbage", "detail"),
    [
        ("Sure! I will now read calc.py.", "not JSON"),
        ('{"type": "action", "args": {}}', "not a proposal"),
        ('["read_file"]', "not a JSON object"),
        ('{"type": "usage", "tokens_in": -1}', "bad usage line"),
    ],
)
async def test_an_agent_that_writes_garbage_fails_quoting_the_line(
    garbage: str, detail: str
) -> None:
    async with _agent("garbage", garbage) as actor:
        with anyio.fail_after(10), pytest.raises(ActorError) as caught:
            await actor.propose(START)
        message = str(caught.value)
        assert repr(garbage) in message
        assert detail in message
        assert actor.pid is not None
        assert not group_alive(actor.pid)


async def test_a_hanging_agent_fails_after_the_time_limit_and_its_group_is_gone() -> None:
    async with _agent("hang", response_time_limit=1.0) as actor:
        with anyio.fail_after(10), pytest.raises(ActorError) as caught:
            await actor.propose(START)
        message = str(caught.value)
        assert "no proposal within the response time limit of 1 s" in message
        assert 'unfinished line (no newline: flush after each line): \'{"type": "action", \'' in (
            message
        )
        assert "thinking" in message  # its stderr
        pid = actor.pid
        assert pid is not None
        # The agent and the child it started in its group are gone.
        assert not group_alive(pid)


async def test_a_cancelled_proposal_ends_the_agent() -> None:
    actor = _agent("hang")
    with anyio.move_on_after(0.5) as scope:
        await actor.propose(START)
    assert scope.cancelled_caught
    assert actor.pid is not None
    assert not group_alive(actor.pid)
    await actor.aclose()


async def test_an_agent_that_exits_cleanly_has_nothing_more_to_propose() -> None:
    async with ProcessActor([PY, "-c", "import sys; sys.stdin.readline()"]) as actor:
        with anyio.fail_after(10):
            assert await actor.propose(START) is None
        assert actor.returncode == 0
        assert await actor.propose(START) is None


async def test_an_agent_that_cannot_start_fails_clearly(tmp_path: Path) -> None:
    actor = ProcessActor([str(tmp_path / "no-such-agent")])
    with pytest.raises(ActorError, match="could not start the agent"):
        await actor.propose(START)
    await actor.aclose()


async def test_the_agent_runs_in_its_directory_with_its_environment(tmp_path: Path) -> None:
    script = (
        "import json, os, sys\n"
        "sys.stdin.readline()\n"
        "text = os.getcwd() + '|' + os.environ['AGENT_NOTE']\n"
        "print(json.dumps({'type': 'message', 'kind': 'checkpoint', 'text': text}), flush=True)\n"
        "sys.stdin.read()\n"
    )
    env = {"AGENT_NOTE": "hello", "PATH": "/usr/bin:/bin"}
    where = await anyio.Path(tmp_path).resolve()
    async with ProcessActor([PY, "-c", script], cwd=tmp_path, env=env) as actor:
        with anyio.fail_after(10):
            proposal = await actor.propose(START)
    assert getattr(proposal, "text", None) == f"{where}|hello"


async def test_an_end_before_the_start_starts_nothing() -> None:
    actor = _agent("good")
    assert await actor.propose(ENDED) is None
    assert actor.pid is None
    await actor.aclose()


def test_observations_are_sent_as_one_json_object() -> None:
    observation = Observation(
        3,
        ObservationKind.RESULT,
        "ran",
        (ToolResult(ToolStatus.ERROR, "1 failed", 1, 0.5),),
        {"steps": 57.0, "wall_seconds": math.inf},
    )
    assert observation_message(observation) == {
        "type": "observation",
        "step": 3,
        "kind": "result",
        "text": "ran",
        "results": [{"status": "error", "output": "1 failed", "exit_code": 1}],
        "remaining": {"steps": 57.0, "wall_seconds": None},
        "disposition": None,
    }
    assert observation_message(ENDED)["disposition"] == "completed"


def test_agent_lines_parse_as_proposals_or_usage() -> None:
    assert parse_agent_line('{"type": "complete", "summary": "ok"}') == Completion("ok")
    usage = '{"type": "usage", "tokens_in": 5, "tokens_out": 2, "model": "m", "cost_usd": 0.1}'
    assert parse_agent_line(usage) == Usage(5, 2, "m", 0.1)
    with pytest.raises(ConfigError, match="unknown key 'tokens'"):
        parse_agent_line('{"type": "usage", "tokens": 5}')


def test_from_options_builds_the_actor_of_a_task_file(tmp_path: Path) -> None:
    (tmp_path / "agent").mkdir()
    actor = ProcessActor.from_options(
        {"kind": "process", "command": ["python", "agent.py"], "cwd": "agent"},
        "task.toml",
        base=tmp_path,
    )
    assert actor.argv == ("python", "agent.py")
    assert actor.cwd == tmp_path / "agent"
    assert actor.response_time_limit == 300.0
    split = ProcessActor.from_options({"command": "node 'my agent.js'"}, base=tmp_path)
    assert split.argv == ("node", "my agent.js")
    assert split.cwd == tmp_path


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({}, "actor.command"),
        ({"command": []}, "actor.command"),
        ({"command": ["ok", 3]}, "actor.command"),
        ({"command": ["a"], "cwd": "missing"}, "actor.cwd"),
        ({"command": ["a"], "response_time_limit": 0}, "actor.response_time_limit"),
        ({"command": ["a"], "response_time_limit": "5"}, "actor.response_time_limit"),
        ({"command": ["a"], "script": "x.jsonl"}, "actor.script"),
        ({"kind": "openai", "command": ["a"]}, "actor.kind"),
    ],
)
def test_from_options_names_the_bad_field(
    tmp_path: Path, options: dict[str, object], field: str
) -> None:
    with pytest.raises(ConfigError, match=rf"^task\.toml: {field}: "):
        ProcessActor.from_options(options, "task.toml", base=tmp_path)


def test_bad_arguments_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="non-empty list"):
        ProcessActor([])
    with pytest.raises(ConfigError, match="not a string"):
        ProcessActor("python agent.py")
    with pytest.raises(ConfigError, match="response_time_limit"):
        ProcessActor(["a"], response_time_limit=-1)


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


async def test_a_process_agent_fixes_a_project_end_to_end(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    task = Task(
        goal="make the tests pass",
        workspace=root,
        checks=[CommandCheck("tests", [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"])],
        protected=["tests/**"],
        prices=PriceTable().with_prices({"local-model": Price(1.0, 2.0)}),
    )
    async with _agent("good") as actor:
        with anyio.fail_after(60):
            result = await run(task, actor, tmp_path / "j.db")
        assert result.disposition is Disposition.COMPLETED
        assert "a + b" in (root / "calc.py").read_text()
        # The run ended the agent: it was told, and exited.
        assert actor.returncode == 0
        assert actor.pid is not None
        assert not group_alive(actor.pid)
        # What the agent reported was settled by the accountant and journaled.
        assert actor.take_usage() is None
    async with open_journal(tmp_path / "j.db") as j:
        spent = await j.spend_totals(result.task_id)
    assert spent["tokens_in"] == 300
    assert spent["tokens_out"] == 30
    assert spent["cost_usd"] == pytest.approx((300 * 1.0 + 30 * 2.0) / 1e6)


async def test_a_crashing_agent_fails_the_run_with_its_reason(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    task = Task(
        goal="make the tests pass",
        workspace=root,
        checks=[CommandCheck("tests", [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"])],
    )
    async with _agent("crash") as actor:
        with anyio.fail_after(60):
            result = await run(task, actor, tmp_path / "j.db")
    assert result.disposition is Disposition.FAILED
    assert result.stop_reason is not None
    assert result.stop_reason.code == "actor_crashed"
    assert "exited with code 3" in result.stop_reason.message
    assert "boom" in result.stop_reason.message
