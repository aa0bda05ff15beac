from __future__ import annotations

import functools
import json
import shlex
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp import Client, StdioServerParameters, types
from mcp.client.stdio import stdio_client

from proctor import Budget, CommandCheck, Disposition, Task, ToolCall
from proctor._errors import ConfigError
from proctor.runtime import ObservationKind, RunResult, ToolStatus, open_journal, run
from proctor.runtime._hosting.gateway import (
    GATEWAY_TOOLS,
    START_URI,
    GatewayActor,
    load_gateway_task,
    serve_gateway,
)

PY = sys.executable
PYTEST = f"{shlex.quote(PY)} -m pytest -q -p no:cacheprovider"
BUILTIN = {"read_file", "write_file", "edit_file", "delete_file", "list_files", "run_command"}
TEST_FILE = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


def _project(root: Path) -> Path:
    """A small project whose test fails: add() subtracts."""
    (root / "tests").mkdir(parents=True)
    (root / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "tests" / "test_calc.py").write_text(TEST_FILE)
    (root / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    return root


def _task(root: Path) -> Task:
    return Task(
        goal="Make the test suite pass without changing tests/",
        workspace=root,
        checks=[CommandCheck("tests", [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"])],
        protected=["tests/**"],
    )


def _text(result: types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))


def _structured(result: types.CallToolResult) -> dict[str, Any]:
    assert isinstance(result.structured_content, dict)
    return result.structured_content


@asynccontextmanager
async def _http_gateway(
    task: Task, journal: Path, outcome: list[RunResult]
) -> AsyncIterator[Client]:
    """Serve ``task`` over HTTP and connect the official MCP client to it."""
    stop = anyio.Event()
    urls: list[str] = []
    listening = anyio.Event()

    def ready(url: str) -> None:
        urls.append(url)
        listening.set()

    async def serve() -> None:
        outcome.append(await serve_gateway(task, journal, transport="http", ready=ready, stop=stop))

    async with anyio.create_task_group() as tg:
        tg.start_soon(serve)
        await listening.wait()
        assert urls[0].startswith("http://127.0.0.1:")
        async with Client(urls[0]) as client:
            yield client
        stop.set()


async def test_an_mcp_client_over_http_repairs_a_project_under_the_controller(
    tmp_path: Path,
) -> None:
    root = _project(tmp_path / "p")
    journal = tmp_path / "j.db"
    outcome: list[RunResult] = []
    with anyio.fail_after(60):
        async with _http_gateway(_task(root), journal, outcome) as client:
            assert client.instructions is not None
            assert "Make the test suite pass" in client.instructions
            assert "tests/**" in client.instructions
            listed = await client.list_tools()
            assert {t.name for t in listed.tools} == BUILTIN | set(GATEWAY_TOOLS)
            read = next(t for t in listed.tools if t.name == "read_file")
            assert read.input_schema["required"] == ["path"]

            first = await client.call_tool("read_file", {"path": "calc.py"})
            assert not first.is_error
            # The run's first observation opens the first result.
            assert _text(first).startswith("Goal: Make the test suite pass")
            assert "return a - b" in _text(first)
            assert "status: ok" in _text(first)

            protected = await client.call_tool(
                "write_file", {"path": "tests/test_calc.py", "content": "def test_add(): pass\n"}
            )
            assert protected.is_error
            assert "protected" in _text(protected)
            assert _structured(protected)["status"] == "refused"
            assert (root / "tests" / "test_calc.py").read_text() == TEST_FILE

            edit = await client.call_tool(
                "edit_file", {"path": "calc.py", "old": "a - b", "new": "a + b"}
            )
            assert not edit.is_error, _text(edit)
            tests = await client.call_tool("run_command", {"cmd": PYTEST})
            assert not tests.is_error, _text(tests)
            assert "exit code 0" in _text(tests)
            assert "1 passed" in _text(tests)

            submitted = await client.call_tool("submit", {"summary": "add() adds"})
            assert not submitted.is_error, _text(submitted)
            assert "the run has ended: completed" in _text(submitted)
            assert _structured(submitted)["disposition"] == "completed"

            # After the end: the fence, at once, and nothing is written.
            late = await client.call_tool("write_file", {"path": "calc.py", "content": "oops\n"})
            assert late.is_error
            assert "fence: the run has ended: completed" in _text(late)
            assert (root / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"

            start = await client.read_resource(START_URI)
            content = start.contents[0]
            assert isinstance(content, types.TextResourceContents)
            assert content.text.startswith("Goal: Make the test suite pass")

    result = outcome[0]
    assert result.disposition is Disposition.COMPLETED
    async with open_journal(journal) as j:
        row = await j.get_run(result.run_id)
        steps = await j.steps(result.run_id)
    assert row.disposition == "completed"
    actions = [(s["action"], s["tool_status"]) for s in steps if s["kind"] == "action"]
    assert [status for _, status in actions] == ["ok", "refused", "ok", "ok"]
    assert "write_file" in (actions[1][0] or "")
    assert [s["kind"] for s in steps].count("completion") == 1
    assert steps[-1]["disposition"] == "completed"


async def test_a_client_that_repeats_itself_is_refused_then_stopped_with_no_progress(
    tmp_path: Path,
) -> None:
    root = _project(tmp_path / "p")
    journal = tmp_path / "j.db"
    outcome: list[RunResult] = []
    answers: list[types.CallToolResult] = []
    with anyio.fail_after(60):
        async with _http_gateway(_task(root), journal, outcome) as client:
            for _ in range(10):
                answer = await client.call_tool("read_file", {"path": "calc.py"})
                answers.append(answer)
                if _structured(answer)["disposition"] is not None:
                    break
            late = await client.call_tool("list_files", {"path": "."})

    last = answers[-1]
    # The policy steered first, then refused the repeat as it stopped the run.
    assert any("[proctor]" in _text(a) and not a.is_error for a in answers[:-1])
    assert last.is_error
    assert "refused: repeat: this exact call made no progress" in _text(last)
    assert "the run has ended: no_progress" in _text(last)
    assert _structured(last)["status"] == "refused"
    assert late.is_error
    assert "fence: the run has ended: no_progress" in _text(late)

    result = outcome[0]
    assert result.disposition is Disposition.NO_PROGRESS
    assert result.stop_reason is not None
    assert result.stop_reason.code == "stall"
    async with open_journal(journal) as j:
        assert (await j.get_run(result.run_id)).disposition == "no_progress"


#: A gateway process: ``python -c SERVER WORKSPACE JOURNAL TRANSPORT``. It prints the
#: HTTP URL when it listens, and how the run ended when it returns.
SERVER = """
import functools, sys
import anyio, structlog
structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
from proctor import CommandCheck, Task
from proctor.runtime._hosting.gateway import serve_gateway
workspace, journal, transport = sys.argv[1:4]
task = Task(
    goal="Make the test suite pass without changing tests/",
    workspace=workspace,
    checks=[CommandCheck("tests", [sys.executable, "-m", "pytest", "-q"])],
    protected=["tests/**"],
)
out = sys.stderr if transport == "stdio" else sys.stdout
serve = functools.partial(
    serve_gateway, task, journal, transport=transport, handle_signals=True,
    ready=lambda url: print(url, file=out, flush=True),
)
result = anyio.run(serve)
print("ended", result.disposition.value, result.stop_reason.code, file=out, flush=True)
"""


async def test_an_mcp_client_over_stdio_drives_a_gateway_process(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    journal = tmp_path / "j.db"
    params = StdioServerParameters(
        command=PY, args=["-c", SERVER, str(root), str(journal), "stdio"], cwd=str(tmp_path)
    )
    errlog = tmp_path / "gateway.log"
    with anyio.fail_after(60), errlog.open("w") as log:
        async with Client(stdio_client(params, errlog=log)) as client:
            listed = await client.list_tools()
            assert {t.name for t in listed.tools} == BUILTIN | set(GATEWAY_TOOLS)
            edit = await client.call_tool(
                "edit_file", {"path": "calc.py", "old": "a - b", "new": "a + b"}
            )
            assert not edit.is_error, _text(edit)
            assert "Goal: Make the test suite pass" in _text(edit)
            submitted = await client.call_tool("submit", {})
            assert not submitted.is_error, _text(submitted)
            assert "the run has ended: completed" in _text(submitted)
            late = await client.call_tool("delete_file", {"path": "calc.py"})
            assert late.is_error
            assert "fence: the run has ended: completed" in _text(late)
    # The client closed the gateway's stdin, and the gateway returned the run's result.
    assert "ended completed checks_passed" in errlog.read_text()
    assert (root / "calc.py").is_file()
    async with open_journal(journal) as j:
        runs = await j.list_runs()
    assert [r.disposition for r in runs] == ["completed"]


async def test_an_http_gateway_stops_by_itself_once_the_grace_period_is_over(
    tmp_path: Path,
) -> None:
    root = _project(tmp_path / "p")
    urls: list[str] = []
    listening = anyio.Event()
    outcome: list[RunResult] = []

    def ready(url: str) -> None:
        urls.append(url)
        listening.set()

    async def serve() -> None:
        outcome.append(
            await serve_gateway(
                _task(root), tmp_path / "j.db", transport="http", ready=ready, grace=0
            )
        )

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve)
            await listening.wait()
            async with Client(urls[0]) as client:
                premature = await client.call_tool("escalate", {"status": "needs_input"})
                assert premature.is_error
                assert "claim refused: nothing was tried yet" in _text(premature)
                tests = await client.call_tool("run_command", {"cmd": PYTEST})
                assert tests.is_error
                assert "exit code 1" in _text(tests)
                vague = await client.call_tool(
                    "escalate", {"status": "blocked", "condition": "no network", "reason": "x"}
                )
                assert vague.is_error
                assert "claim refused: it must name evidence" in _text(vague)
                odd = await client.call_tool("escalate", {"status": "stuck"})
                assert odd.is_error
                assert "status must be 'blocked' or 'needs_input'" in _text(odd)
                claim = {
                    "status": "blocked",
                    "condition": "the package index is unreachable",
                    "evidence": ["pip: connection refused"],
                    "reason": "no tool reaches the network",
                }
                blocked = await client.call_tool("escalate", claim)
                assert not blocked.is_error, _text(blocked)
                assert "the run has ended: blocked" in _text(blocked)
            # Nothing sets stop: the server ends after the grace period by itself.
    assert outcome[0].disposition is Disposition.BLOCKED


async def test_a_signal_stops_an_http_gateway_and_the_run_ends_on_the_record(
    tmp_path: Path,
) -> None:
    root = _project(tmp_path / "p")
    journal = tmp_path / "j.db"
    command = [PY, "-c", SERVER, str(root), str(journal), "http"]
    with anyio.fail_after(60):
        async with await anyio.open_process(command, stderr=subprocess.DEVNULL) as process:
            assert process.stdout is not None
            out = BufferedByteReceiveStream(process.stdout)
            url = (await out.receive_until(b"\n", 1000)).decode()
            async with Client(url) as client:
                read = await client.call_tool("read_file", {"path": "calc.py"})
                assert not read.is_error
            process.send_signal(signal.SIGINT)
            # A person stopped it: the run ends stopped, on the record.
            line = (await out.receive_until(b"\n", 1000)).decode()
            assert line == "ended stopped user_stop"
            assert await process.wait() == 0
    async with open_journal(journal) as j:
        runs = await j.list_runs()
    assert [r.disposition for r in runs] == ["stopped"]


async def test_concurrent_calls_are_proposed_one_at_a_time_in_arrival_order(
    tmp_path: Path,
) -> None:
    root = _project(tmp_path / "p")
    for name in "abc":
        (root / f"{name}.txt").write_text(f"file {name}\n")
    actor = GatewayActor()
    answers: dict[str, str] = {}

    async def read(name: str) -> None:
        observation = await actor.call(ToolCall("read_file", {"path": f"{name}.txt"}))
        answers[name] = observation.results[0].output

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            outcome: list[RunResult] = []

            async def go() -> None:
                outcome.append(
                    await run(_task(root), actor, tmp_path / "j.db", on_step=actor.on_step)
                )

            tg.start_soon(go)
            for name in "cab":
                tg.start_soon(read, name)
                # Each call arrives before the next one is made.
                await anyio.wait_all_tasks_blocked()
            await actor.wait_started()
            while len(answers) < 3:
                await anyio.wait_all_tasks_blocked()
            assert answers == {n: f"file {n}\n" for n in "abc"}
            actor.disconnect()
    # The client left: the candidate was verified as it stands, and fails.
    result = outcome[0]
    assert result.disposition is Disposition.FAILED
    assert result.stop_reason is not None
    assert result.stop_reason.code == "actor_finished"
    async with open_journal(tmp_path / "j.db") as j:
        steps = await j.steps(result.run_id)
    reads = [s["action"] for s in steps if s["kind"] == "action"]
    assert [next(n for n in "abc" if f"{n}.txt" in (a or "")) for a in reads] == ["c", "a", "b"]
    # After the end, a call is answered at once by the fence.
    with anyio.fail_after(1):
        fenced = await actor.call(ToolCall("read_file", {"path": "a.txt"}))
    assert fenced.kind is ObservationKind.REFUSAL
    assert fenced.disposition is Disposition.FAILED
    assert fenced.results[0].status is ToolStatus.REFUSED
    assert fenced.text.startswith("fence: the run has ended: failed")


async def test_a_run_that_ends_between_calls_fences_the_next_call_at_once(
    tmp_path: Path,
) -> None:
    root = _project(tmp_path / "p")
    task = attrs.evolve(_task(root), budget=Budget.of(wall_seconds=0.5))
    actor = GatewayActor()
    with anyio.fail_after(10):
        # Nobody calls: the wall-clock deadline ends the run while the gateway
        # waits, and the gateway does not wait for a call to find out.
        result = await run(task, actor, tmp_path / "j.db", on_step=actor.on_step)
        fenced = await actor.call(ToolCall("write_file", {"path": "calc.py", "content": ""}))
    assert result.disposition is Disposition.BUDGET_EXHAUSTED
    assert actor.closed
    assert fenced.disposition is Disposition.BUDGET_EXHAUSTED
    assert fenced.text.startswith("fence: the run has ended: budget_exhausted")
    assert fenced.results[0].status is ToolStatus.REFUSED
    assert (root / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"


def test_a_task_file_without_an_actor_table_loads_for_the_gateway(tmp_path: Path) -> None:
    _project(tmp_path / "p")
    path = tmp_path / "task.toml"
    path.write_text(
        '[task]\ngoal = "fix it"\nworkspace = "p"\n\n[[checks]]\nname = "tests"\n'
        'run = ["python", "-m", "pytest"]\n\n[contract]\nprotected = ["tests/**"]\n'
    )
    task = load_gateway_task(path)
    assert task.goal == "fix it"
    assert task.workspace == (tmp_path / "p").resolve()
    assert task.protected == ("tests/**",)
    path.write_text('[task]\ngoal = "fix it"\nworkspace = "p"\nbogus = 1\n')
    with pytest.raises(ConfigError, match=r"task\.toml:4: task\.bogus: unknown key"):
        load_gateway_task(path)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"transport": "http", "host": "0.0.0.0"}, "loopback address only"),
        ({"transport": "ws"}, "transport must be 'stdio' or 'http'"),
    ],
)
async def test_the_gateway_refuses_what_it_cannot_serve_safely(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    serve: Callable[..., Any] = functools.partial(serve_gateway, _task(_project(tmp_path / "p")))
    with pytest.raises(ConfigError, match=message):
        await serve(tmp_path / "j.db", **kwargs)
    assert not (tmp_path / "j.db").exists()


GATEWAY_TASK = """
[task]
goal = "Make the test suite pass without changing tests/"
workspace = "{root}"

[[checks]]
name = "tests"
run = [{py}, "-m", "pytest", "-q", "-p", "no:cacheprovider"]

[contract]
protected = ["tests/**"]
"""


def _gateway(tmp_path: Path, *args: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=PY, args=["-m", "proctor", "gateway", *args], cwd=str(tmp_path)
    )


async def test_a_needs_input_run_resumes_through_the_gateway_with_its_answer(
    tmp_path: Path,
) -> None:
    root = _project(tmp_path / "p")
    journal = str(tmp_path / "j.db")
    task_file = tmp_path / "task.toml"
    task_file.write_text(GATEWAY_TASK.format(root=root, py=json.dumps(PY)))
    question = {
        "status": "needs_input",
        "condition": "may calc.py change its public signature?",
        "evidence": ["tests/test_calc.py calls add(a, b)"],
        "reason": "only the maintainer can say",
    }
    with anyio.fail_after(120), (tmp_path / "first.log").open("w") as log:
        params = _gateway(tmp_path, str(task_file), "--journal", journal)
        async with Client(stdio_client(params, errlog=log)) as client:
            looked = await client.call_tool("list_files", {"path": "."})
            assert not looked.is_error, _text(looked)
            asked = await client.call_tool("escalate", question)
            assert "the run has ended: needs_input" in _text(asked)
    async with open_journal(journal) as j:
        (first,) = await j.list_runs()
        spent_before = await j.spend_totals(first.task_id)
    assert first.disposition == "needs_input"
    # No task file: the journal holds the task. The answer opens the first result.
    with anyio.fail_after(120), (tmp_path / "second.log").open("w") as log:
        params = _gateway(
            tmp_path, "--journal", journal, "--resume", first.run_id, "--answer", "yes, it may"
        )
        async with Client(stdio_client(params, errlog=log)) as client:
            edit = await client.call_tool(
                "edit_file", {"path": "calc.py", "old": "a - b", "new": "a + b"}
            )
            assert not edit.is_error, _text(edit)
            assert "yes, it may" in _text(edit)
            submitted = await client.call_tool("submit", {})
            assert "the run has ended: completed" in _text(submitted), _text(submitted)
    async with open_journal(journal) as j:
        runs = {r.run_id: r for r in await j.list_runs()}
        spent_after = await j.spend_totals(first.task_id)
    (second,) = [r for r in runs.values() if r.run_id != first.run_id]
    assert second.parent_run_id == first.run_id
    assert second.task_id == first.task_id
    assert second.disposition == "completed"
    # The task's spend carries on from the first run's.
    assert spent_after["steps"] > spent_before["steps"] > 0


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ((), "give a TASK_FILE to serve, or --resume RUN"),
        (("task.toml", "--answer", "x"), "--answer goes with --resume RUN"),
        (("--resume", "abcdef123456"), "journal"),
    ],
)
def test_the_gateway_command_refuses_what_it_cannot_resume(
    tmp_path: Path, args: tuple[str, ...], said: str
) -> None:
    done = subprocess.run(
        [PY, "-m", "proctor", "gateway", "--journal", str(tmp_path / "none.db"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert said in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "none.db").exists()
