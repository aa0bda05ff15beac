from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import attrs
import pytest
from anyio.abc import ObjectReceiveStream, ObjectSendStream

from proctor._errors import ConfigError
from proctor.runtime._actors import base as _actor
from proctor.runtime._actors.base import (
    Actor,
    ActorCrashed,
    ActorFinished,
    ActorSpend,
    FunctionActor,
    ScriptedActor,
    load_script,
    run_actor,
)
from proctor.runtime._records import (
    Claim,
    Completion,
    Message,
    MessageKind,
    Observation,
    ObservationKind,
    Proposal,
    Round,
    ToolCall,
)

Outbound = Proposal | ActorFinished | ActorCrashed | ActorSpend


def test_all_names_exist_and_are_documented() -> None:
    assert isinstance(_actor.__all__, tuple)
    for name in _actor.__all__:
        assert getattr(_actor, name).__doc__, name


def observation(step: int = 0, kind: ObservationKind = ObservationKind.RESULT) -> Observation:
    return Observation(step, kind, text=f"step {step}")


# -- ScriptedActor ----------------------------------------------------------------------


async def test_scripted_actor_proposes_in_order_then_none() -> None:
    script: list[Proposal] = [ToolCall("read_file", {"path": "a.py"}), Completion("done")]
    actor = ScriptedActor(script)
    first = observation(0, ObservationKind.START)
    assert await actor.propose(first) == ToolCall("read_file", {"path": "a.py"})
    assert await actor.propose(observation(1)) == Completion("done")
    assert await actor.propose(observation(2)) is None
    assert await actor.propose(observation(3)) is None
    assert [o.step for o in actor.observations] == [0, 1, 2, 3]
    assert actor.observations[0] is first


async def test_an_empty_script_proposes_nothing() -> None:
    assert await ScriptedActor([]).propose(observation()) is None


def test_actors_satisfy_the_protocol() -> None:
    async def nothing(observation: Observation) -> Proposal | None:
        return None

    assert isinstance(ScriptedActor([]), Actor)
    assert isinstance(FunctionActor(nothing), Actor)


async def test_scripted_actor_from_file(tmp_path: Path) -> None:
    path = tmp_path / "agent.jsonl"
    path.write_text('{"type": "action", "tool": "list_dir"}\n{"type": "complete"}\n')
    actor = ScriptedActor.from_file(path)
    assert actor.proposals == [ToolCall("list_dir"), Completion()]


# -- FunctionActor -------------------------------------------------------------------------


async def test_function_actor_calls_its_function() -> None:
    seen: list[Observation] = []

    async def fn(obs: Observation) -> Proposal | None:
        seen.append(obs)
        return Message(MessageKind.CHECKPOINT, f"at {obs.step}") if obs.step < 2 else None

    actor = FunctionActor(fn)
    assert await actor.propose(observation(1)) == Message(MessageKind.CHECKPOINT, "at 1")
    assert await actor.propose(observation(2)) is None
    assert [o.step for o in seen] == [1, 2]


# -- load_script ------------------------------------------------------------------------------

EVERY_KIND = """\
# A script: one proposal per line.

{"type": "action", "tool": "write_file", "args": {"path": "a.py", "content": "x = 1\\n"}}
{"type": "action", "tool": "run_command", "args": {"command": ["make"]}, "poll": true}
   # an indented comment
{"type": "round", "calls": [{"tool": "read_file", "args": {"path": "a"}}, {"tool": "list_dir"}]}
{"type": "message", "kind": "checkpoint", "text": "halfway"}
{"type": "message", "kind": "final_answer", "text": "42", "sources": ["https://example.org/a"]}
{"type": "message", "kind": "failure_report", "blockers": ["no network"]}

{"type": "complete", "summary": "tests pass"}
{"type": "claim", "status": "blocked", "condition": "no key", "evidence": ["e1"], "reason": "r"}
{"type": "claim", "status": "needs_input"}
"""


def test_load_script_reads_every_proposal_type(tmp_path: Path) -> None:
    path = tmp_path / "agent.jsonl"
    path.write_text(EVERY_KIND, encoding="utf-8")
    assert load_script(path) == [
        ToolCall("write_file", {"path": "a.py", "content": "x = 1\n"}),
        ToolCall("run_command", {"command": ["make"]}, poll=True),
        Round((ToolCall("read_file", {"path": "a"}), ToolCall("list_dir"))),
        Message(MessageKind.CHECKPOINT, "halfway"),
        Message(MessageKind.FINAL_ANSWER, "42", sources=("https://example.org/a",)),
        Message(MessageKind.FAILURE_REPORT, blockers=("no network",)),
        Completion("tests pass"),
        Claim("blocked", "no key", ("e1",), "r"),
        Claim("needs_input"),
    ]


def test_load_script_takes_lines_instead_of_a_file() -> None:
    lines = ["", "# nothing", '{"type": "complete"}']
    assert load_script("inline.jsonl", lines) == [Completion()]


def test_load_script_of_only_comments_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("# nothing yet\n\n   \n")
    assert load_script(path) == []


def test_load_script_names_file_and_line_for_bad_json(tmp_path: Path) -> None:
    path = tmp_path / "agent.jsonl"
    path.write_text('# header\n{"type": "complete"}\n{"type": "action", "tool": \n')
    with pytest.raises(ConfigError) as info:
        load_script(path)
    assert str(info.value).startswith(f"{path}:3: not valid JSON (")


@pytest.mark.parametrize(
    ("line", "detail"),
    [
        ('{"type": "nope"}', "'nope'"),
        ('{"tool": "read_file"}', "'type'"),
        ('{"type": "action"}', "required field missing @ $.tool"),
        ('{"type": "action", "tool": "x", "extra": 1}', "extra fields found (extra) @ $"),
        ('{"type": "message", "kind": "shout"}', "expected MessageKind @ $.kind"),
        ('{"type": "claim", "status": "maybe"}', "@ $.status"),
        ('{"type": "action", "tool": "x", "args": [1]}', "expected a mapping @ $.args"),
        ('{"type": "round", "calls": [{"tool": "a", "zzz": 1}]}', "@ $.calls[0]"),
    ],
)
def test_load_script_names_file_and_line_for_a_non_proposal(
    tmp_path: Path, line: str, detail: str
) -> None:
    path = tmp_path / "agent.jsonl"
    path.write_text('{"type": "complete"}\n\n' + line + "\n")
    with pytest.raises(ConfigError) as info:
        load_script(path)
    message = str(info.value)
    assert message.startswith(f"{path}:3: not a proposal (")
    assert detail in message
    assert '"type": "action" | "round" | "message" | "complete" | "claim"' in message


@pytest.mark.parametrize("line", ["3", '"complete"', "null", '[{"type": "complete"}]'])
def test_load_script_refuses_json_that_is_not_an_object(tmp_path: Path, line: str) -> None:
    path = tmp_path / "agent.jsonl"
    path.write_text('{"type": "complete"}\n\n' + line + "\n")
    with pytest.raises(ConfigError) as info:
        load_script(path)
    assert str(info.value) == (
        f"{path}:3: a proposal is a JSON object with "
        f'"type": "action" | "round" | "message" | "complete" | "claim", got {line}'
    )


def test_load_script_names_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "missing.jsonl"
    with pytest.raises(ConfigError, match=r"cannot read the actor script") as info:
        load_script(path)
    assert str(info.value).startswith(str(path))
    assert isinstance(info.value.__cause__, OSError)


def test_load_script_round_trips_what_json_dumps_writes(tmp_path: Path) -> None:
    call = {"type": "action", "tool": "edit", "args": {"path": "ü.py", "n": [1, 2.5, None]}}
    path = tmp_path / "agent.jsonl"
    path.write_text(json.dumps(call, ensure_ascii=False) + "\n", encoding="utf-8")
    assert load_script(path) == [ToolCall("edit", {"path": "ü.py", "n": [1, 2.5, None]})]


# -- run_actor -------------------------------------------------------------------------------


@attrs.define
class Channels:
    observations: ObjectSendStream[Observation]
    proposals: ObjectReceiveStream[Outbound]
    done: anyio.Event

    async def exchange(self, obs: Observation) -> Outbound:
        await self.observations.send(obs)
        with anyio.fail_after(2):
            return await self.proposals.receive()

    async def wait_done(self) -> None:
        with anyio.fail_after(2):
            await self.done.wait()


@asynccontextmanager
async def hosted(actor: Actor) -> AsyncIterator[Channels]:
    obs_tx, obs_rx = anyio.create_memory_object_stream[Observation](1)
    prop_tx, prop_rx = anyio.create_memory_object_stream[Outbound](1)
    done = anyio.Event()

    async def task() -> None:
        try:
            await run_actor(actor, obs_rx, prop_tx)
        finally:
            done.set()

    async with anyio.create_task_group() as tg, obs_tx, prop_rx:
        tg.start_soon(task)
        yield Channels(obs_tx, prop_rx, done)
        await obs_tx.aclose()
        with anyio.fail_after(2):
            await done.wait()


async def test_run_actor_answers_each_observation_then_finishes() -> None:
    actor = ScriptedActor([ToolCall("list_dir"), Completion()])
    async with hosted(actor) as channels:
        assert await channels.exchange(observation(0, ObservationKind.START)) == ToolCall(
            "list_dir"
        )
        assert await channels.exchange(observation(1)) == Completion()
        assert await channels.exchange(observation(2)) == ActorFinished()
        await channels.wait_done()
        # The actor closed its side: nothing more comes.
        with pytest.raises(anyio.EndOfStream):
            await channels.proposals.receive()
    assert [o.step for o in actor.observations] == [0, 1, 2]


async def test_run_actor_reports_a_crash_instead_of_raising() -> None:
    async def crash(obs: Observation) -> Proposal | None:
        if obs.step == 1:
            raise RuntimeError("model endpoint gone")
        return Message(MessageKind.CHECKPOINT, "fine")

    async with hosted(FunctionActor(crash)) as channels:
        assert await channels.exchange(observation(0)) == Message(MessageKind.CHECKPOINT, "fine")
        reply = await channels.exchange(observation(1))
        assert reply == ActorCrashed("RuntimeError: model endpoint gone")
        await channels.wait_done()
        with pytest.raises(anyio.EndOfStream):
            await channels.proposals.receive()


async def test_run_actor_ends_when_the_observations_close() -> None:
    actor = ScriptedActor([Completion()])
    async with hosted(actor) as channels:
        await channels.observations.aclose()
        await channels.wait_done()
        with pytest.raises(anyio.EndOfStream):
            await channels.proposals.receive()
    assert actor.observations == []


async def test_run_actor_lets_cancellation_through() -> None:
    started = anyio.Event()

    async def hang(obs: Observation) -> Proposal | None:
        started.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    obs_tx, obs_rx = anyio.create_memory_object_stream[Observation](1)
    prop_tx, prop_rx = anyio.create_memory_object_stream[Outbound](1)
    async with obs_tx, prop_rx:
        with anyio.fail_after(2):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run_actor, FunctionActor(hang), obs_rx, prop_tx)
                await obs_tx.send(observation())
                await started.wait()
                tg.cancel_scope.cancel()
        # Cancelled, not crashed: nothing was reported, and the actor's side is closed.
        with pytest.raises(anyio.EndOfStream):
            prop_rx.receive_nowait()
