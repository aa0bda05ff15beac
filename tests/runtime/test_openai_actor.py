from __future__ import annotations

import contextlib
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests.support.chat_server import (  # noqa: F401 - the fixture
    MODEL,
    ChatServer,
    call,
    chat_server_fixture,
    completion,
    error,
    late,
    malformed,
)

from proctor import Budget, CommandCheck, Disposition, Task, run
from proctor._errors import ActorError, BudgetError, ConfigError
from proctor.budgets import Price, PriceTable
from proctor.budgets._usage import Usage
from proctor.runtime import (
    Claim,
    Completion,
    Message,
    MessageKind,
    Observation,
    ObservationKind,
    Proposal,
    Round,
    ToolCall,
    ToolResult,
    ToolStatus,
    open_journal,
)
from proctor.runtime._actors.openai import (
    DEFAULT_SYSTEM,
    SPECIAL_TOOLS,
    OpenAIActor,
    tool_result_text,
)
from proctor.runtime._tools.registry import ToolRegistry
from proctor.runtime._tools.spec import ToolSpec

PY = sys.executable
KEY = "PROCTOR_TEST_API_KEY"
GOAL = "Goal: make the tests pass\nTools: read_file, edit_file"
START = Observation(0, ObservationKind.START, GOAL)
SOURCE = "def add(a, b):\n    return a - b\n"


@pytest.fixture(autouse=True)
def _no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY, raising=False)


def _actor(chat: ChatServer, **kw: Any) -> OpenAIActor:
    return _actor_at(chat.url, **kw)


def _actor_at(url: str, **kw: Any) -> OpenAIActor:
    settings: dict[str, Any] = {
        "base_url": url,
        "api_key_env": KEY,
        "backoff_base": 0.001,
        "backoff_cap": 0.01,
        "request_time_limit": 10.0,
        # The tests below read the conversation from its first message.
        "system": None,
    }
    settings.update(kw)
    return OpenAIActor(MODEL, **settings)


def _result(
    step: int, *outputs: str, kind: ObservationKind = ObservationKind.RESULT
) -> Observation:
    results = tuple(ToolResult(ToolStatus.OK, output) for output in outputs)
    return Observation(step, kind, "\n".join(outputs), results)


def _note(step: int, text: str, kind: ObservationKind = ObservationKind.NOTE) -> Observation:
    return Observation(step, kind, text)


async def _propose(actor: OpenAIActor, observation: Observation) -> Proposal | None:
    with anyio.fail_after(10):
        return await actor.propose(observation)


async def test_tool_calls_become_proposals_and_results_go_back_as_tool_messages(
    chat: ChatServer,
) -> None:
    chat.script(
        completion(call("read_file", {"path": "calc.py"}, "c1"), content="Let me look."),
        completion(
            call("read_file", {"path": "a.py"}, "c2"), call("list_files", {"path": "."}, "c3")
        ),
    )
    async with _actor(chat, system="You fix builds.") as actor:
        first = await _propose(actor, START)
        second = await _propose(actor, _result(1, SOURCE))
        assert first == ToolCall("read_file", {"path": "calc.py"})
        assert second == Round(
            (ToolCall("read_file", {"path": "a.py"}), ToolCall("list_files", {"path": "."}))
        )

    requests = chat.received()
    assert [r.path for r in requests] == ["/v1/chat/completions"] * 2
    body = requests[0].body
    assert body["model"] == MODEL
    assert body["max_tokens"] == 4096
    assert "temperature" not in body
    assert body["messages"] == [
        {"role": "system", "content": "You fix builds."},
        {"role": "user", "content": GOAL},
    ]
    names = [tool["function"]["name"] for tool in body["tools"]]
    builtin = ToolRegistry.builtin().specs()
    assert names == [s.name for s in builtin] + [t["function"]["name"] for t in SPECIAL_TOOLS]
    read_file = body["tools"][0]["function"]
    assert read_file["parameters"] == builtin[0].parameters
    assert read_file["description"] == builtin[0].description
    # The reply is echoed, then answered by a tool message with the call's id.
    assert requests[1].body["messages"][2:] == [
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "calc.py"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": f"status: ok\n{SOURCE}"},
    ]


async def test_each_result_of_a_round_answers_its_own_call(chat: ChatServer) -> None:
    chat.script(
        completion(
            call("run_command", {"cmd": "make"}, "a"), call("run_command", {"cmd": "ls"}, "b")
        ),
        completion(content="thinking"),
    )
    async with _actor(chat) as actor:
        await _propose(actor, START)
        results = (
            ToolResult(ToolStatus.ERROR, "make: *** no rule", 2),
            ToolResult(ToolStatus.OK, "calc.py", 0),
        )
        await _propose(actor, Observation(1, ObservationKind.RESULT, "ran two", results))
    tool_messages = [m for m in chat.received()[1].body["messages"] if m["role"] == "tool"]
    assert tool_messages == [
        {
            "role": "tool",
            "tool_call_id": "a",
            "content": "status: error, exit code 2\nmake: *** no rule",
        },
        {"role": "tool", "tool_call_id": "b", "content": "status: ok, exit code 0\ncalc.py"},
    ]


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        (
            "final_answer",
            {"text": "42", "sources": ["https://example.org/a"]},
            Message(MessageKind.FINAL_ANSWER, "42", ("https://example.org/a",)),
        ),
        ("checkpoint", {"text": "half way"}, Message(MessageKind.CHECKPOINT, "half way")),
        ("complete", {"summary": "fixed add"}, Completion("fixed add")),
        (
            "escalate",
            {
                "status": "needs_input",
                "condition": "which currency?",
                "evidence": ["spec.md is silent"],
                "reason": "no tool can decide it",
            },
            Claim(
                "needs_input", "which currency?", ("spec.md is silent",), "no tool can decide it"
            ),
        ),
        (
            "report_failure",
            {"text": "cannot build", "blockers": ["no compiler"]},
            Message(MessageKind.FAILURE_REPORT, "cannot build", blockers=("no compiler",)),
        ),
    ],
)
async def test_proctors_own_tools_become_typed_proposals(
    chat: ChatServer, name: str, args: dict[str, Any], expected: Proposal
) -> None:
    chat.script(completion(call(name, args, "s1")), completion(content="ok"))
    async with _actor(chat) as actor:
        assert await _propose(actor, START) == expected
        # The controller's answer to it is the tool message of that call.
        await _propose(actor, _note(2, "the checks failed: 1 test", ObservationKind.VERDICT))
    messages = chat.received()[1].body["messages"]
    assert messages[-1] == {
        "role": "tool",
        "tool_call_id": "s1",
        "content": "the checks failed: 1 test",
    }


async def test_a_reply_with_only_text_is_a_checkpoint(chat: ChatServer) -> None:
    chat.script(completion(content="I think the bug is in add()."), completion(content="..."))
    async with _actor(chat) as actor:
        proposal = await _propose(actor, START)
        assert proposal == Message(MessageKind.CHECKPOINT, "I think the bug is in add().")
        await _propose(actor, _note(1, "noted; keep going"))
    assert chat.received()[1].body["messages"][1:] == [
        {"role": "assistant", "content": "I think the bug is in add()."},
        {"role": "user", "content": "noted; keep going"},
    ]


async def test_a_mixed_reply_proposes_the_calls_first_and_the_claim_next(
    chat: ChatServer,
) -> None:
    chat.script(
        completion(
            call("edit_file", {"path": "calc.py", "old": "-", "new": "+"}, "e1"),
            call("complete", {"summary": "done"}, "k1"),
        ),
        completion(content="waiting"),
    )
    async with _actor(chat) as actor:
        assert await _propose(actor, START) == ToolCall(
            "edit_file", {"path": "calc.py", "old": "-", "new": "+"}
        )
        edited = _result(1, "edited calc.py")
        # Nothing needs reserving: the completion is already there.
        assert actor.estimate(edited) == Usage(0, 0, MODEL)
        assert await _propose(actor, edited) == Completion("done")
        assert len(chat.received()) == 1  # no request for it
        await _propose(actor, _note(3, "verdict: tests failed", ObservationKind.VERDICT))
    messages = chat.received()[1].body["messages"]
    assert [(m["role"], m.get("tool_call_id")) for m in messages] == [
        ("user", None),
        ("assistant", None),
        ("tool", "e1"),
        ("tool", "k1"),
    ]
    assert messages[2]["content"] == "status: ok\nedited calc.py"
    assert messages[3]["content"] == "verdict: tests failed"


async def test_a_nudge_reaches_the_model_in_words(chat: ChatServer) -> None:
    chat.script(completion(call("read_file", {"path": "a.py"}, "r")), completion(content="ok"))
    async with _actor(chat) as actor:
        await _propose(actor, START)
        nudge = Observation(
            1,
            ObservationKind.NUDGE,
            "read_file -> ok\nyou have read a.py 3 times without a change",
            (ToolResult(ToolStatus.OK, "x = 1"),),
        )
        await _propose(actor, nudge)
    messages = chat.received()[1].body["messages"]
    assert messages[-2] == {"role": "tool", "tool_call_id": "r", "content": "status: ok\nx = 1"}
    assert messages[-1] == {"role": "user", "content": nudge.text}


async def test_arguments_that_are_not_json_are_not_run(chat: ChatServer) -> None:
    chat.script(
        completion(call("read_file", '{"path": "calc.py"', "bad")),
        completion(call("read_file", "[1]", "bad2"), call("read_file", {"path": "ok.py"}, "good")),
        completion(content="done"),
    )
    async with _actor(chat) as actor:
        first = await _propose(actor, START)
        assert isinstance(first, Message)
        assert first.kind is MessageKind.CHECKPOINT
        assert "read_file: the arguments were not valid JSON" in first.text
        second = await _propose(actor, _note(1, "noted"))
        assert second == ToolCall("read_file", {"path": "ok.py"})
        await _propose(actor, _result(2, "print('ok')"))
    requests = chat.received()
    # The unreadable call is echoed as it came and answered as not run.
    echoed = requests[1].body["messages"][1]["tool_calls"][0]["function"]["arguments"]
    assert echoed == '{"path": "calc.py"'
    answer = requests[1].body["messages"][2]
    assert answer["tool_call_id"] == "bad"
    assert answer["content"].startswith("not run: read_file: the arguments were not valid JSON")
    tools = {
        m["tool_call_id"]: m["content"]
        for m in requests[2].body["messages"][4:]
        if m["role"] == "tool"
    }
    assert tools["good"] == "status: ok\nprint('ok')"
    assert "a JSON list, not a JSON object" in tools["bad2"]


async def test_usage_accumulates_until_taken(chat: ChatServer) -> None:
    chat.script(
        completion(call("read_file", {"path": "a"}, "1"), usage=(100, 20)),
        completion(call("read_file", {"path": "b"}, "2"), usage=(150, 30)),
        completion(content="x" * 400, usage=None),
    )
    async with _actor(chat, max_tokens=512) as actor:
        assert actor.take_usage() is None
        estimate = actor.estimate(START)
        assert estimate.tokens_out == 512
        assert estimate.tokens_in >= len(GOAL) // 4
        assert estimate.model == MODEL
        await _propose(actor, START)
        await _propose(actor, _result(1, "a"))
        assert actor.take_usage() == Usage(250, 50, MODEL)
        assert actor.take_usage() is None
        # The conversation grew: so does the estimate.
        assert actor.estimate(_result(2, "b")).tokens_in > estimate.tokens_in
        await _propose(actor, _result(2, "b"))
        # A server that reports no usage is charged an estimate, never nothing.
        usage = actor.take_usage()
        assert usage is not None
        assert usage.tokens_in > 0
        assert usage.tokens_out >= 100


async def test_a_429_is_retried_after_its_retry_after(chat: ChatServer) -> None:
    chat.script(error(429, "slow down", retry_after="0"), completion(content="hello"))
    async with _actor(chat) as actor:
        assert await _propose(actor, START) == Message(MessageKind.CHECKPOINT, "hello")
        assert actor.retries == 1
        assert actor.take_retries() == 1
        assert actor.take_retries() == 0
    requests = chat.received()
    assert len(requests) == 2
    assert requests[0].body == requests[1].body


async def test_a_500_is_retried(chat: ChatServer) -> None:
    chat.script(error(500), error(503), completion(content="back"))
    async with _actor(chat) as actor:
        assert await _propose(actor, START) == Message(MessageKind.CHECKPOINT, "back")
        assert actor.retries == 2
    assert len(chat.received()) == 3


async def test_a_request_past_its_time_limit_is_retried(chat: ChatServer) -> None:
    chat.script(late(), completion(content="in time"))
    async with _actor(chat, request_time_limit=0.3) as actor:
        assert await _propose(actor, START) == Message(MessageKind.CHECKPOINT, "in time")
        assert actor.take_retries() == 1
    assert len(chat.received()) == 2


async def test_when_the_retries_are_spent_the_actor_fails(chat: ChatServer) -> None:
    chat.script(error(500, "overloaded"), error(502), error(500, "still overloaded"))
    actor = _actor(chat, max_retries=2)
    with pytest.raises(ActorError) as caught:
        await _propose(actor, START)
    message = str(caught.value)
    assert "failed 3 times" in message
    assert "HTTP 500" in message
    assert "still overloaded" in message
    assert actor.retries == 2
    assert len(chat.received()) == 3


async def test_a_malformed_reply_is_retried_once(chat: ChatServer) -> None:
    chat.script(malformed(), malformed(b'{"choices": []}'), completion(content="unused"))
    actor = _actor(chat)
    with pytest.raises(ActorError, match=r"not a chat completion \(the body has no choices\)"):
        await _propose(actor, START)
    assert actor.retries == 1
    assert len(chat.received()) == 2
    assert chat.left() == 1


async def test_a_malformed_reply_then_a_good_one_goes_on(chat: ChatServer) -> None:
    chat.script(malformed(), completion(content="fine"))
    async with _actor(chat) as actor:
        assert await _propose(actor, START) == Message(MessageKind.CHECKPOINT, "fine")
        assert actor.retries == 1


async def test_a_refused_request_is_not_retried(chat: ChatServer) -> None:
    chat.script(error(400, "context length exceeded"), completion(content="unused"))
    actor = _actor(chat)
    with pytest.raises(ActorError, match=r"HTTP 400: .*context length exceeded"):
        await _propose(actor, START)
    assert actor.retries == 0
    assert len(chat.received()) == 1


async def test_the_key_is_sent_only_when_it_is_set(
    chat: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    chat.script(completion(content="a"), completion(content="b"), error(401, "no key"))
    async with _actor(chat) as actor:
        await _propose(actor, START)
    monkeypatch.setenv(KEY, "sk-test")
    async with _actor(chat) as actor:
        await _propose(actor, START)
    without, with_key = chat.received()
    assert "authorization" not in without.headers
    assert with_key.headers["authorization"] == "Bearer sk-test"

    monkeypatch.delenv(KEY)
    with pytest.raises(ActorError, match=f"needs an API key, and {KEY} is not set"):
        await _propose(_actor(chat), START)


async def test_the_end_of_the_run_asks_nothing(chat: ChatServer) -> None:
    chat.script(completion(content="a"))
    async with _actor(chat) as actor:
        await _propose(actor, START)
        ended = Observation(
            2, ObservationKind.ENDED, "the run has ended", disposition=Disposition.STOPPED
        )
        assert actor.estimate(ended) == Usage(0, 0, MODEL)
        assert await _propose(actor, ended) is None
        assert await _propose(actor, _note(3, "late")) is None
    assert len(chat.received()) == 1


@contextlib.contextmanager
def _nothing_listening() -> Iterator[str]:
    """A URL where nothing listens: a port bound, then closed again."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    yield f"http://127.0.0.1:{port}/v1"


async def test_an_unreachable_server_is_retried_then_fails() -> None:
    with _nothing_listening() as url:
        actor = _actor_at(url, max_retries=1)
        with pytest.raises(ActorError, match="failed 2 times: ConnectError"):
            await _propose(actor, START)
        assert actor.retries == 1


def test_tool_results_read_as_status_exit_code_and_output() -> None:
    assert tool_result_text(ToolResult(ToolStatus.REFUSED, "refused: fence")) == (
        "status: refused\nrefused: fence"
    )
    assert tool_result_text(ToolResult(ToolStatus.UNCERTAIN, exit_code=None)) == "status: uncertain"
    long = tool_result_text(ToolResult(ToolStatus.OK, "x" * 100_000))
    assert len(long) < 50_000
    assert "characters left out" in long


def test_from_options_builds_the_actor_of_a_task_file() -> None:
    tools = ToolRegistry.builtin().specs()
    actor = OpenAIActor.from_options(
        {
            "kind": "openai",
            "model": "qwen2.5-coder",
            "base_url": "http://127.0.0.1:8000/v1",
            "api_key_env": "LOCAL_KEY",
            "max_tokens": 1024,
            "temperature": 0,
            "system": "Be brief.",
            "request_time_limit": 30,
            "max_retries": 2,
        },
        tools,
        "task.toml",
    )
    assert actor.model == "qwen2.5-coder"
    assert actor.base_url == "http://127.0.0.1:8000/v1"
    assert actor.tools == tools
    assert actor.request_time_limit == 30.0
    assert actor.max_retries == 2
    default = OpenAIActor.from_options({"model": "gpt-4o"}, tools)
    assert default.base_url == "https://api.openai.com/v1"
    assert default.api_key_env == "OPENAI_API_KEY"


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({}, "actor.model"),
        ({"model": ""}, "actor.model"),
        ({"model": "m", "base_url": "localhost:8000"}, "actor.base_url"),
        ({"model": "m", "max_tokens": 0}, "actor.max_tokens"),
        ({"model": "m", "max_tokens": "4096"}, "actor.max_tokens"),
        ({"model": "m", "temperature": 3}, "actor.temperature"),
        ({"model": "m", "request_time_limit": -1}, "actor.request_time_limit"),
        ({"model": "m", "max_retries": 1.5}, "actor.max_retries"),
        ({"model": "m", "system": ["x"]}, "actor.system"),
        ({"model": "m", "max_tokens_field": "tokens"}, "actor.max_tokens_field"),
        ({"model": "m", "api_key": "sk-..."}, "actor.api_key"),
        ({"model": "m", "kind": "process"}, "actor.kind"),
    ],
)
def test_from_options_names_the_bad_field(options: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=rf"^task\.toml: {field}: "):
        OpenAIActor.from_options(options, ToolRegistry.builtin().specs(), "task.toml")


def test_a_task_tool_may_not_take_the_name_of_proctors_own() -> None:
    with pytest.raises(ConfigError, match="'complete' is the name of one of proctor's own tools"):
        OpenAIActor(MODEL, tools=[ToolSpec("complete")])


def _project(root: Path) -> Path:
    root.mkdir()
    (root / "calc.py").write_text(SOURCE)
    tests = root / "tests"
    tests.mkdir()
    (tests / "test_calc.py").write_text(
        "import sys, os\nsys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))\n"
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    )
    return root


async def test_a_model_fixes_a_project_end_to_end(chat: ChatServer, tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    task = Task(
        goal="make the tests pass",
        workspace=root,
        checks=[CommandCheck("tests", [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"])],
        protected=["tests/**"],
        prices=PriceTable().with_prices({MODEL: Price(2.0, 8.0)}),
        budget=Budget({"tokens_in": 100_000, "tokens_out": 100_000}),
    )
    chat.script(
        completion(call("read_file", {"path": "calc.py"}, "read")),
        completion(
            call("edit_file", {"path": "calc.py", "old": "a - b", "new": "a + b"}, "edit"),
            content="add() subtracts; fixing it.",
        ),
        completion(call("complete", {"summary": "add() adds"}, "done")),
    )
    async with _actor(chat) as actor:
        with anyio.fail_after(60):
            result = await run(task, actor, tmp_path / "j.db")
    assert result.disposition is Disposition.COMPLETED
    assert "a + b" in (root / "calc.py").read_text()
    requests = chat.received()
    assert len(requests) == 3
    assert requests[0].body["messages"][0]["content"].startswith("Goal: make the tests pass")
    read_answer = requests[1].body["messages"][2]
    assert read_answer["tool_call_id"] == "read"
    assert "return a - b" in read_answer["content"]
    assert requests[2].body["messages"][-1]["tool_call_id"] == "edit"
    # Each turn's usage was settled with the accountant; nothing is left untaken.
    assert actor.take_usage() is None
    async with open_journal(tmp_path / "j.db") as j:
        spent = await j.spend_totals(result.task_id)
        reserved = await j.spend_totals(result.task_id, kinds=("reserve",))
    assert spent["tokens_in"] == 30
    assert spent["tokens_out"] == 15
    # Every model call was reserved before it was made.
    assert reserved["tokens_out"] >= 3 * actor.max_tokens


async def test_the_first_message_carries_the_rules_of_the_run(
    chat: ChatServer, tmp_path: Path
) -> None:
    root = _project(tmp_path / "p")
    task = Task(
        goal="make the tests pass",
        workspace=root,
        checks=[CommandCheck("tests", [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"])],
        protected=["tests/**"],
        prices=PriceTable().with_prices({MODEL: Price(2.0, 8.0)}),
        budget=Budget({"steps": 10, "tokens_in": 100_000}, {"steps": 2}),
    )
    # One reply: the run then fails when the server has no more (what is checked is
    # the first request).
    chat.script(completion(call("complete", {"summary": "done"}, "done")))
    # The default system message: no `system` given.
    actor = OpenAIActor(
        MODEL, base_url=chat.url, api_key_env=KEY, backoff_base=0.001, backoff_cap=0.01
    )
    async with actor:
        with anyio.fail_after(60):
            await run(task, actor, tmp_path / "j.db")
    first = chat.received()[0].body["messages"]
    assert first[0] == {"role": "system", "content": DEFAULT_SYSTEM}
    text = first[1]["content"]
    assert text.startswith("Goal: make the tests pass\nTools: ")
    assert f"tests ({PY} -m pytest -q -p no:cacheprovider)" in text
    assert "scope" in text
    assert "Protected paths (a change to them is refused): tests/**" in text
    assert "Budget: steps 10, tokens_in 100,000 (of which the controller keeps steps 2 " in text


def test_a_task_file_replaces_the_system_message() -> None:
    mine = OpenAIActor.from_options({"model": MODEL, "system": "You fix builds."}, [])
    assert mine.system == "You fix builds."
    none = OpenAIActor.from_options({"model": MODEL, "system": ""}, [])
    assert not none.system
    assert OpenAIActor.from_options({"model": MODEL}, []).system == DEFAULT_SYSTEM


async def test_a_model_without_a_price_fails_before_a_run_is_journaled(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    task = Task(
        goal="make the tests pass",
        workspace=root,
        checks=[CommandCheck("tests", [PY, "-m", "pytest", "-q"])],
    )
    journal = tmp_path / "j.db"
    # Nothing listens there: the price is checked before any request.
    async with OpenAIActor("a-model-nobody-priced", base_url="http://127.0.0.1:9/v1") as actor:
        with pytest.raises(BudgetError, match="no price for model 'a-model-nobody-priced'"):
            await run(task, actor, journal)
    async with open_journal(journal) as j:
        assert await j.list_runs() == []
