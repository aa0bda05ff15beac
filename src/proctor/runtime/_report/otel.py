"""
A run as OpenTelemetry spans, after the GenAI semantic conventions.

One span per run (``invoke_agent``), one per step that ran a tool
(``execute_tool {tool}``, with ``gen_ai.tool.name``, ``gen_ai.tool.call.id``
and the tool's failure as ``error.type``), one per other step
(``proctor {kind}``: a message, a verdict, a claim), and one per model call
(``chat {model}``, with ``gen_ai.usage.input_tokens`` and
``gen_ai.usage.output_tokens``). proctor's own fields (decision, progress,
reason, stop reason, policy version, what is left of each limit) are under
``proctor.*``.

The spans are built once as plain records (:func:`run_spans`), then either
written as an OTLP/JSON document (:func:`otlp_json`, no dependency) or
emitted through an OpenTelemetry tracer (:func:`emit_spans`, the ``otel``
extra), keeping their times and their parent/child structure.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from proctor.runtime._report.view import RunView, StepView

__all__ = ("SpanRecord", "emit_spans", "otlp_json", "run_spans")

_NS = 1_000_000_000


@attrs.frozen
class SpanRecord:
    """
    One span, before it is exported.

    Args:
        name: the span's name.
        span_id: 16 hex digits, derived from the run and the step (stable).
        parent_id: the parent span's id, or None for the run's span.
        start: when it started (seconds since the epoch).
        end: when it ended.
        attributes: its attributes.
        error: the ``error.type`` of a span that failed, or None.
    """

    name: str
    span_id: str
    parent_id: str | None
    start: float
    end: float
    attributes: Mapping[str, str | int | float | bool]
    error: str | None = None


def _span_id(*parts: object) -> str:
    text = "/".join(str(p) for p in parts)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _trace_id(view: RunView) -> str:
    return hashlib.blake2b(view.run.run_id.encode(), digest_size=16).hexdigest()


def _remaining(remaining: Mapping[str, float]) -> dict[str, float]:
    return {f"proctor.remaining.{k}": float(v) for k, v in sorted(remaining.items())}


def _tool(step: StepView) -> str | None:
    if step.kind != "action" or step.tool_status is None:
        return None
    return step.action.split(" ", 1)[0] or None


def run_spans(view: RunView) -> list[SpanRecord]:
    """
    The spans of a run: the run's first, then each step's (a model call before
    the step it proposed).
    """
    # Kept whole: the run's span and its steps' are built in one pass over the steps, each step's
    # span parented to the run's and timed from the step before it.
    run = view.run
    model = str(view.actor.get("model") or "unknown")
    root = _span_id(run.run_id)
    end = run.ended_at or (view.steps[-1].ended_at if view.steps else run.started_at)
    last = view.steps[-1].remaining if view.steps else {}
    reason = run.stop_reason or {}
    root_attributes: dict[str, str | int | float | bool] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "proctor",
        "gen_ai.agent.id": run.task_id,
        "gen_ai.conversation.id": run.run_id,
        "proctor.run_id": run.run_id,
        "proctor.task_id": run.task_id,
        "proctor.status": run.status,
        "proctor.policy_version": run.policy_version,
        "proctor.steps": len(view.steps),
        **_remaining(last),
    }
    if reason:
        root_attributes["proctor.stop_reason"] = str(reason.get("code"))
    if run.candidate_digest:
        root_attributes["proctor.candidate"] = run.candidate_digest
    spans = [
        SpanRecord(
            "invoke_agent",
            root,
            None,
            run.started_at,
            end,
            root_attributes,
            error=run.status if run.status == "failed" else None,
        )
    ]
    for step in view.steps:
        common: dict[str, str | int | float | bool] = {
            "proctor.step": step.step,
            "proctor.kind": step.kind,
            "proctor.decision": step.decision,
            "proctor.progress": step.progress,
            "proctor.reason": step.reason,
            "proctor.policy_version": run.policy_version,
            **_remaining(step.remaining),
        }
        tokens_in = step.spend.get("tokens_in", 0.0)
        tokens_out = step.spend.get("tokens_out", 0.0)
        if tokens_in or tokens_out:
            chat: dict[str, str | int | float | bool] = {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": str(view.actor.get("kind") or "openai"),
                "gen_ai.request.model": model,
                "gen_ai.usage.input_tokens": int(tokens_in),
                "gen_ai.usage.output_tokens": int(tokens_out),
                "proctor.step": step.step,
            }
            if "cost_usd" in step.spend:
                chat["proctor.cost_usd"] = step.spend["cost_usd"]
            spans.append(
                SpanRecord(
                    f"chat {model}",
                    _span_id(run.run_id, step.step, "chat"),
                    root,
                    step.started_at,
                    step.ended_at,
                    chat,
                )
            )
        tool = _tool(step)
        if tool is not None:
            attributes = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
                "gen_ai.tool.call.id": f"{run.run_id}:{step.step}",
                "proctor.tool_status": step.tool_status or "",
                **common,
            }
            failed = step.tool_status not in ("ok", None)
            spans.append(
                SpanRecord(
                    f"execute_tool {tool}",
                    _span_id(run.run_id, step.step),
                    root,
                    step.started_at,
                    step.ended_at,
                    attributes,
                    error=step.tool_status if failed else None,
                )
            )
        else:
            spans.append(
                SpanRecord(
                    f"proctor {step.kind}",
                    _span_id(run.run_id, step.step),
                    root,
                    step.started_at,
                    step.ended_at,
                    common,
                )
            )
    return spans


def _value(value: str | int | float | bool) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    return {"stringValue": value}


def otlp_json(view: RunView, spans: Sequence[SpanRecord] | None = None) -> dict[str, Any]:
    """
    The run's spans as one OTLP/JSON ``TracesData`` document (what an OTLP/HTTP
    collector accepts with ``Content-Type: application/json``).
    """
    trace_id = _trace_id(view)
    encoded = []
    for span in spans if spans is not None else run_spans(view):
        attributes = dict(span.attributes)
        if span.error is not None:
            attributes["error.type"] = span.error
        item: dict[str, Any] = {
            "traceId": trace_id,
            "spanId": span.span_id,
            "name": span.name,
            # SPAN_KIND_INTERNAL, and SPAN_KIND_CLIENT for a call to a model server.
            "kind": 3 if span.name.startswith("chat ") else 1,
            "startTimeUnixNano": str(int(span.start * _NS)),
            "endTimeUnixNano": str(int(max(span.end, span.start) * _NS)),
            "attributes": [{"key": k, "value": _value(v)} for k, v in attributes.items()],
            # STATUS_CODE_ERROR or STATUS_CODE_UNSET.
            "status": {"code": 2, "message": span.error} if span.error else {},
        }
        if span.parent_id is not None:
            item["parentSpanId"] = span.parent_id
        encoded.append(item)
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [
                        {"key": "service.name", "value": {"stringValue": "proctor"}},
                    ]
                },
                "scopeSpans": [{"scope": {"name": "proctor"}, "spans": encoded}],
            }
        ]
    }


def emit_spans(view: RunView, tracer: Any, spans: Sequence[SpanRecord] | None = None) -> None:
    """
    Emit the run's spans through an OpenTelemetry ``tracer`` (the ``otel`` extra),
    with their own start and end times and the run's span as every other's parent.

    Args:
        view: the run.
        tracer: an ``opentelemetry.trace.Tracer``.
        spans: the spans (default: :func:`run_spans` of ``view``).

    Raises:
        ConfigError: the OpenTelemetry API is not installed.
    """
    try:
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind, Status, StatusCode
    except ModuleNotFoundError as exc:
        from proctor._errors import ConfigError

        raise ConfigError(
            "OpenTelemetry export needs the opentelemetry packages: pip install 'proctor[otel]'"
        ) from exc
    records = list(spans if spans is not None else run_spans(view))
    if not records:
        return
    started: dict[str, Any] = {}
    for record in records:
        parent = started.get(record.parent_id) if record.parent_id else None
        context = trace.set_span_in_context(parent) if parent is not None else None
        attributes = dict(record.attributes)
        if record.error is not None:
            attributes["error.type"] = record.error
        span = tracer.start_span(
            record.name,
            context=context,
            kind=SpanKind.CLIENT if record.name.startswith("chat ") else SpanKind.INTERNAL,
            attributes=attributes,
            start_time=int(record.start * _NS),
        )
        if record.error is not None:
            span.set_status(Status(StatusCode.ERROR, record.error))
        started[record.span_id] = span
        if record.parent_id is not None:
            span.end(end_time=int(max(record.end, record.start) * _NS))
    # The run's span ends last, after its children.
    root = records[0]
    started[root.span_id].end(end_time=int(max(root.end, root.start) * _NS))
