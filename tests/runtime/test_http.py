from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from tests.support.service import Service, service_fixture  # noqa: F401 - the fixture

from proctor._errors import ConfigError, EffectError
from proctor.runtime._effects.http import (
    HTTP_GET_SPEC,
    HTTP_REQUEST_SPEC,
    HttpReconciler,
    HttpRequest,
    http_reconcilers,
    http_tools,
    lookup_url,
)
from proctor.runtime._effects.ledger import (
    EffectLedger,
    EffectRecord,
    EffectState,
    Target,
    args_hash,
    effect_key,
    idempotency_key,
    reconcile,
    reconciler_for,
    target_of,
    verdict_state,
)
from proctor.runtime._records import ToolResult, ToolStatus
from proctor.runtime._tools.registry import ToolContext, ToolRegistry, call_tool
from proctor.runtime._tools.spec import Effect
from proctor.runtime._tools.workspace import Workspace

S = EffectState

_STATE_OF = {
    ToolStatus.OK: S.CONFIRMED,
    ToolStatus.ERROR: S.FAILED,
    ToolStatus.UNCERTAIN: S.UNCERTAIN,
}


@attrs.define(eq=False)
class Run:
    """The part of a controller that dispatches effects: ledger, registry, context."""

    ctx: ToolContext
    registry: ToolRegistry
    ledger: EffectLedger = attrs.field(factory=EffectLedger)

    async def write(self, key: str, args: dict[str, Any]) -> ToolResult:
        """Plan, mark dispatched, send under the key, record the outcome."""
        target = target_of(self.registry.spec("http_request"), args)
        self.ledger.plan(key, "http_request", args, target)
        self.ledger.dispatched(key)
        with anyio.fail_after(20), effect_key(key):
            result = await call_tool(self.registry, self.ctx, "http_request", args)
        self.ledger.outcome(key, _STATE_OF[result.status])
        return result

    async def reconcile(self, key: str) -> str:
        """Settle an uncertain effect with the tool's own reconciler."""
        effect = self.ledger.get(key)
        assert effect is not None
        rec = reconciler_for("http_request", self.registry.get("http_request"))
        with anyio.fail_after(20):
            verdict = await reconcile(effect, rec, self.ctx)
        self.ledger.outcome(key, verdict_state(verdict))
        return verdict


def _run(tmp_path: Path, time_limit: float = 10.0) -> Run:
    registry = ToolRegistry()
    for tool in http_tools(time_limit=time_limit, trust_env=False):
        registry.register(tool)
    return Run(ToolContext(Workspace.at(tmp_path)), registry)


def _post(service: Service, body: Any = None) -> dict[str, Any]:
    args: dict[str, Any] = {"method": "POST", "url": f"{service.url}/items"}
    if body is not None:
        args["body"] = body
    return args


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# --- declarations --------------------------------------------------------------------


def test_specs() -> None:
    assert HTTP_REQUEST_SPEC.effect is Effect.WRITE
    assert HTTP_REQUEST_SPEC.targets == ("method", "url")
    assert HTTP_GET_SPEC.effect is Effect.READ
    assert HTTP_GET_SPEC.source == "url"
    tools = http_tools()
    assert [tool.spec for tool in tools] == [HTTP_REQUEST_SPEC, HTTP_GET_SPEC]
    assert isinstance(reconciler_for("http_request", tools[0]), HttpReconciler)
    assert reconciler_for("http_get", tools[1]) is None
    assert http_reconcilers("http://h/x") == {"http_request": HttpReconciler("http://h/x")}
    with pytest.raises(ConfigError, match="time_limit must be a positive number"):
        http_tools(time_limit=0)
    with pytest.raises(ConfigError, match="time_limit must be a positive number"):
        http_tools(lookup_time_limit=-1)


def test_lookup_url() -> None:
    args = {"method": "POST", "url": "https://api.example.com:8443/v1/items?x=1"}
    effect = EffectRecord("pk-a/b", "http_request", args, Target("http", ""), args_hash(args))
    assert lookup_url(effect) == "https://api.example.com:8443/effects/pk-a%2Fb"
    assert lookup_url(effect, "http://l/keys/") == "http://l/keys/pk-a%2Fb"


# --- writes against the real service ---------------------------------------------------


async def test_write_is_confirmed_and_carries_the_key(tmp_path: Path, service: Service) -> None:
    run = _run(tmp_path)
    key = idempotency_key("task", 1, 0)
    result = await run.write(key, _post(service, {"name": "widget"}))
    assert result.status is ToolStatus.OK
    assert "-> 201 Created" in result.output
    assert '"name": "widget"' in result.output
    assert service.applications(key) == 1
    assert service.items() == [{"id": 1, "key": key, "body": {"name": "widget"}}]
    record = run.ledger.get(key)
    assert record is not None
    assert record.state is S.CONFIRMED
    assert record.target == Target("http", f"POST {service.url}/items")


async def test_string_body_and_the_agent_cannot_choose_the_key(
    tmp_path: Path, service: Service
) -> None:
    run = _run(tmp_path)
    args = _post(service, "plain text")
    args["headers"] = {"idempotency-key": "mine", "X-Note": "n"}
    result = await run.write("pk-ours", args)
    assert result.status is ToolStatus.OK
    assert service.applications("pk-ours") == 1
    assert service.posts("mine") == 0
    assert service.items()[0]["body"] == "plain text"


async def test_reply_lost_after_apply_is_uncertain_and_reconciled_by_key(
    tmp_path: Path, service: Service
) -> None:
    run = _run(tmp_path)
    key = idempotency_key("task", 2, 0)
    args = _post(service, {"name": "once"})
    service.fault("apply_then_drop")
    result = await run.write(key, args)
    assert result.status is ToolStatus.UNCERTAIN
    assert key in result.output
    target = target_of(HTTP_REQUEST_SPEC, args)
    assert run.ledger.open_targets() == {target}
    # A replacement write to the same target waits while the first is uncertain.
    with pytest.raises(EffectError, match="held by effect"):
        run.ledger.plan("pk-other", "http_request", _post(service, {"name": "twice"}), target)
    assert await run.reconcile(key) == "applied"
    record = run.ledger.get(key)
    assert record is not None
    assert record.state is S.RECONCILED_APPLIED
    assert run.ledger.blocks(target) is None
    # Found out by reading: the write itself went out once.
    assert service.posts(key) == 1
    assert service.applications(key) == 1


async def test_hang_after_apply_is_uncertain_then_applied(tmp_path: Path, service: Service) -> None:
    run = _run(tmp_path, time_limit=0.5)
    key = idempotency_key("task", 3, 0)
    service.fault("hang", apply=True)
    result = await run.write(key, _post(service, {"n": 1}))
    assert result.status is ToolStatus.UNCERTAIN
    assert await anyio.to_thread.run_sync(service.wait_hanging)
    assert await run.reconcile(key) == "applied"
    assert service.applications(key) == 1
    assert service.posts(key) == 1


async def test_hang_before_apply_is_not_applied_then_retried_with_the_same_key(
    tmp_path: Path, service: Service
) -> None:
    run = _run(tmp_path, time_limit=0.5)
    key = idempotency_key("task", 4, 0)
    args = _post(service, {"n": 2})
    service.fault("hang", apply=False)
    assert (await run.write(key, args)).status is ToolStatus.UNCERTAIN
    assert await anyio.to_thread.run_sync(service.wait_hanging)
    assert await run.reconcile(key) == "not_applied"
    assert service.applications(key) == 0
    # The retry is the same effect: same key, same arguments.
    result = await run.write(key, args)
    assert result.status is ToolStatus.OK
    assert service.applications(key) == 1
    assert service.posts(key) == 2
    record = run.ledger.get(key)
    assert record is not None
    assert record.state is S.CONFIRMED


async def test_cancelled_write_is_uncertain_once_recovered(
    tmp_path: Path, service: Service
) -> None:
    run = _run(tmp_path)
    key = idempotency_key("task", 5, 0)
    args = _post(service, {"n": 9})
    service.fault("hang", apply=True)
    run.ledger.plan(key, "http_request", args, target_of(HTTP_REQUEST_SPEC, args))
    run.ledger.dispatched(key)
    returned: list[ToolResult] = []

    async def send() -> None:
        with effect_key(key):
            returned.append(await call_tool(run.registry, run.ctx, "http_request", args))

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(send)
            assert await anyio.to_thread.run_sync(service.wait_hanging)
            tg.cancel_scope.cancel()
    assert returned == []
    # What a resumed run (or the end of this one) does with an open dispatch.
    assert [r.key for r in run.ledger.recover_open()] == [key]
    assert await run.reconcile(key) == "applied"
    assert service.posts(key) == 1


async def test_server_error_is_an_error(tmp_path: Path, service: Service) -> None:
    run = _run(tmp_path)
    service.fault("fail_5xx")
    result = await run.write("pk-5xx", _post(service, {"n": 3}))
    assert result.status is ToolStatus.ERROR
    assert "-> 500" in result.output
    assert "injected failure" in result.output
    assert service.applications("pk-5xx") == 0
    record = run.ledger.get("pk-5xx")
    assert record is not None
    assert record.state is S.FAILED


async def test_client_error_is_an_error(tmp_path: Path, service: Service) -> None:
    run = _run(tmp_path)
    args = {"method": "POST", "url": f"{service.url}/nowhere", "body": "x"}
    result = await run.write("pk-404", args)
    assert result.status is ToolStatus.ERROR
    assert "-> 404" in result.output


async def test_gateway_timeout_is_uncertain(tmp_path: Path, service: Service) -> None:
    run = _run(tmp_path)
    service.fault("fail_5xx", status=504)
    result = await run.write("pk-504", _post(service))
    assert result.status is ToolStatus.UNCERTAIN
    assert "reply 504" in result.output
    assert await run.reconcile("pk-504") == "not_applied"


async def test_refused_connection_is_an_error_nothing_was_sent(tmp_path: Path) -> None:
    run = _run(tmp_path)
    args = {"method": "PUT", "url": f"http://127.0.0.1:{_free_port()}/items/1", "body": {}}
    result = await run.write("pk-refused", args)
    assert result.status is ToolStatus.ERROR
    assert "was not sent" in result.output


async def test_bad_input_is_an_error(tmp_path: Path, service: Service) -> None:
    run = _run(tmp_path)
    ctx, registry = run.ctx, run.registry
    with effect_key("pk-bad"):
        get = await call_tool(registry, ctx, "http_request", {"method": "GET", "url": service.url})
        rel = await call_tool(registry, ctx, "http_request", {"method": "POST", "url": "/items"})
        hdr = await call_tool(
            registry,
            ctx,
            "http_request",
            {"method": "POST", "url": service.url, "headers": {"n": 1}},
        )
        extra = await call_tool(
            registry,
            ctx,
            "http_request",
            {"method": "POST", "url": service.url, "_idempotency_key": "forged"},
        )
    assert get.status is ToolStatus.ERROR
    assert "use http_get to read" in get.output
    assert rel.status is ToolStatus.ERROR
    assert "not an absolute http or https URL" in rel.output
    assert hdr.status is ToolStatus.ERROR
    assert "object of strings" in hdr.output
    assert extra.status is ToolStatus.ERROR
    assert "unknown argument '_idempotency_key'" in extra.output
    assert service.items() == []


async def test_a_write_without_a_key_is_not_sent(tmp_path: Path, service: Service) -> None:
    run = _run(tmp_path)
    result = await call_tool(run.registry, run.ctx, "http_request", _post(service, {"n": 1}))
    assert result.status is ToolStatus.ERROR
    assert "no idempotency key" in result.output
    assert service.items() == []


# --- reads and lookups ------------------------------------------------------------------


async def test_http_get(tmp_path: Path, service: Service) -> None:
    run = _run(tmp_path)
    await run.write("pk-get", _post(service, {"n": 1}))
    with anyio.fail_after(20):
        ok = await call_tool(run.registry, run.ctx, "http_get", {"url": f"{service.url}/items"})
        missing = await call_tool(run.registry, run.ctx, "http_get", {"url": f"{service.url}/x"})
        down = await call_tool(
            run.registry, run.ctx, "http_get", {"url": f"http://127.0.0.1:{_free_port()}/"}
        )
    assert ok.status is ToolStatus.OK
    assert '"key": "pk-get"' in ok.output
    assert missing.status is ToolStatus.ERROR
    assert "-> 404" in missing.output
    assert down.status is ToolStatus.ERROR


async def test_lookup_that_cannot_tell_is_unknown(tmp_path: Path, service: Service) -> None:
    ctx = ToolContext(Workspace.at(tmp_path))
    args = _post(service)
    effect = EffectRecord("pk-x", "http_request", args, Target("http", ""), args_hash(args))
    configured = HttpReconciler(f"{service.url}/effects", trust_env=False)
    derived = HttpReconciler(trust_env=False)
    with anyio.fail_after(20):
        assert await configured.reconcile(effect, ctx) == "not_applied"
        assert await derived.reconcile(effect, ctx) == "not_applied"
        service.lookup_status = 503
        assert await derived.reconcile(effect, ctx) == "unknown"
        service.lookup_status = None
        unreachable = HttpReconciler(f"http://127.0.0.1:{_free_port()}/effects", trust_env=False)
        assert await unreachable.reconcile(effect, ctx) == "unknown"
        assert await HttpReconciler("not a url").reconcile(effect, ctx) == "unknown"


def test_http_request_settings() -> None:
    with pytest.raises(ConfigError, match="time_limit"):
        HttpRequest(time_limit=-1)
    with pytest.raises(ConfigError, match="time_limit"):
        HttpReconciler(time_limit=0)
