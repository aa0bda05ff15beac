"""The controller's effect ledger against a real HTTP service on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

from tests.support.service import Service, service_fixture  # noqa: F401 - the fixture

from proctor import Disposition, Policy, ScriptedActor, Task, ToolCall, run
from proctor.runtime import ToolRegistry, open_journal
from proctor.runtime._effects.http import http_tools


def _registry(time_limit: float = 1.0) -> ToolRegistry:
    registry = ToolRegistry.builtin()
    for tool in http_tools(time_limit=time_limit, trust_env=False):
        registry.register(tool)
    return registry


def _task(root: Path) -> Task:
    root.mkdir(exist_ok=True)
    return Task(
        goal="post an item", workspace=root, kind="answer", policy=Policy(stall_threshold=0)
    )


async def _effects(journal: Path, run_id: str) -> list[tuple[str, str]]:
    async with open_journal(journal) as j:
        return [(e.key, e.state) for e in await j.effects(run_id=run_id)]


async def test_a_lost_reply_is_reconciled_by_key_and_never_sent_twice(
    tmp_path: Path, service: Service
) -> None:
    service.fault("apply_then_drop")
    post = ToolCall(
        "http_request", {"method": "POST", "url": f"{service.url}/items", "body": {"n": 1}}
    )
    actor = ScriptedActor([post])
    result = await run(_task(tmp_path / "w"), actor, tmp_path / "j", tools=_registry())
    effects = await _effects(tmp_path / "j", result.run_id)
    assert [state for _, state in effects] == ["reconciled_applied"]
    key = effects[0][0]
    assert service.applications(key) == 1
    assert service.posts(key) == 1
    assert "reconciliation found the effect applied" in actor.observations[1].results[0].output


async def test_a_write_found_not_applied_is_sent_again_with_the_same_key(
    tmp_path: Path, service: Service
) -> None:
    service.fault("hang", apply=False)
    post = ToolCall(
        "http_request", {"method": "POST", "url": f"{service.url}/items", "body": {"n": 2}}
    )
    result = await run(
        _task(tmp_path / "w"), ScriptedActor([post]), tmp_path / "j", tools=_registry()
    )
    service.released.set()
    effects = await _effects(tmp_path / "j", result.run_id)
    assert len(effects) == 1
    key, state = effects[0]
    assert state == "confirmed"
    assert service.posts(key) == 2
    assert service.applications(key) == 1
    async with open_journal(tmp_path / "j") as j:
        spent = await j.spend_totals(result.task_id)
    assert spent["retries"] == 1


async def test_an_effect_nothing_can_look_up_is_escalated_to_an_operator(
    tmp_path: Path, service: Service
) -> None:
    # The lookup service is down: the first write's outcome cannot be known.
    service.lookup_status = 503
    service.fault("apply_then_drop")
    url = f"{service.url}/items"
    first = ToolCall("http_request", {"method": "POST", "url": url, "body": {"n": 3}})
    second = ToolCall("http_request", {"method": "POST", "url": url, "body": {"n": 4}})
    actor = ScriptedActor([first, second])
    result = await run(_task(tmp_path / "w"), actor, tmp_path / "j", tools=_registry())
    effects = await _effects(tmp_path / "j", result.run_id)
    # Escalated: an operator must check; the escalation releases the target.
    assert effects[0][1] == "escalated"
    assert result.handoff.owner == "operator"
    assert any("escalated" in f for f in result.handoff.open_findings)
    assert result.disposition is not Disposition.COMPLETED
