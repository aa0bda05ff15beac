"""
OpenTelemetry spans of a run with an OpenAI-actor model call, collected by the
SDK's in-memory exporter, and the same run as an OTLP/JSON file from the CLI.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.support.chat_server import (  # noqa: F401 - the fixture
    MODEL,
    ChatServer,
    call,
    chat_server_fixture,
    completion,
)

from proctor import Budget, CommandCheck, Disposition, Task, run
from proctor.budgets import Price, PriceTable
from proctor.runtime import OpenAIActor, emit_spans, load_run_view, open_journal, otlp_json

PY = sys.executable


def _project(root: Path) -> Path:
    root.mkdir()
    (root / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "test_calc.py").write_text(
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    )
    return root


async def _model_run(chat: ChatServer, tmp_path: Path) -> tuple[Path, str]:
    root = _project(tmp_path / "p")
    task = Task(
        goal="make the tests pass",
        workspace=root,
        checks=[CommandCheck("tests", [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"])],
        protected=["test_calc.py"],
        prices=PriceTable().with_prices({MODEL: Price(2.0, 8.0)}),
        budget=Budget({"steps": 20, "tokens_in": 100_000}),
    )
    chat.script(
        completion(call("read_file", {"path": "missing.py"}, "c1"), usage=(120, 30)),
        completion(
            call("edit_file", {"path": "calc.py", "old": "a - b", "new": "a + b"}, "c2"),
            usage=(200, 40),
        ),
        completion(call("complete", {"summary": "add() adds"}, "c3"), usage=(260, 10)),
    )
    journal = tmp_path / "j.db"
    actor = OpenAIActor(MODEL, base_url=chat.url, api_key_env="PROCTOR_TEST_NO_KEY")
    async with actor:
        with anyio.fail_after(60):
            result = await run(task, actor, journal, actor_spec={"kind": "openai", "model": MODEL})
    assert result.disposition is Disposition.COMPLETED
    return journal, result.run_id


async def test_spans_follow_the_genai_conventions(chat: ChatServer, tmp_path: Path) -> None:
    journal, run_id = await _model_run(chat, tmp_path)
    async with open_journal(journal) as j:
        view = await load_run_view(j, run_id)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    emit_spans(view, provider.get_tracer("test"))
    spans = exporter.get_finished_spans()
    by_name: dict[str, list[object]] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    (root,) = [s for s in spans if s.name == "invoke_agent"]
    assert root.parent is None
    assert root.attributes is not None
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["proctor.status"] == "completed"
    assert root.attributes["proctor.stop_reason"] == "checks_passed"
    assert root.attributes["proctor.policy_version"] == view.run.policy_version
    assert "proctor.remaining.steps" in root.attributes
    # Every other span is the run's child, in the run's trace, within its time.
    for span in spans:
        assert span.context is not None
        assert root.context is not None
        assert span.context.trace_id == root.context.trace_id
        if span is not root:
            assert span.parent is not None
            assert span.parent.span_id == root.context.span_id
            assert span.start_time is not None
            assert root.start_time is not None
            assert span.end_time is not None
            assert root.end_time is not None
            assert root.start_time <= span.start_time <= span.end_time <= root.end_time
    chats = [s for s in spans if s.name == f"chat {MODEL}"]
    assert len(chats) == 3
    usage = sorted(
        (s.attributes["gen_ai.usage.input_tokens"], s.attributes["gen_ai.usage.output_tokens"])
        for s in chats
        if s.attributes is not None
    )
    assert usage == [(120, 30), (200, 40), (260, 10)]
    for s in chats:
        assert s.attributes is not None
        assert s.attributes["gen_ai.operation.name"] == "chat"
        assert s.attributes["gen_ai.request.model"] == MODEL
    (read,) = [s for s in spans if s.name == "execute_tool read_file"]
    assert read.attributes is not None
    assert read.attributes["gen_ai.tool.name"] == "read_file"
    assert read.attributes["gen_ai.tool.call.id"]
    assert read.attributes["error.type"] == "error"
    assert read.attributes["proctor.decision"] == "continue"
    (edit,) = [s for s in spans if s.name == "execute_tool edit_file"]
    assert edit.attributes is not None
    assert "error.type" not in edit.attributes
    assert edit.attributes["proctor.progress"] is True
    assert any(s.name == "proctor verdict" for s in spans)


def test_export_writes_the_spans_as_otlp_json(chat: ChatServer, tmp_path: Path) -> None:
    journal, run_id = anyio.run(_model_run, chat, tmp_path, backend="asyncio")
    out = tmp_path / "spans.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "proctor",
            "export",
            run_id,
            "--journal",
            str(journal),
            "--otlp",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    document = json.loads(out.read_text())
    spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    root = spans[0]
    assert root["name"] == "invoke_agent"
    assert "parentSpanId" not in root
    assert len(root["traceId"]) == 32
    assert all(s["parentSpanId"] == root["spanId"] for s in spans[1:])
    assert len({s["spanId"] for s in spans}) == len(spans)
    chat_span = next(s for s in spans if s["name"] == f"chat {MODEL}")
    attributes = {a["key"]: a["value"] for a in chat_span["attributes"]}
    assert attributes["gen_ai.usage.input_tokens"] == {"intValue": "120"}
    for span in spans:
        assert int(span["startTimeUnixNano"]) <= int(span["endTimeUnixNano"])


def test_otlp_json_needs_no_sdk() -> None:
    # The document is built from plain records: the module imports no OpenTelemetry.
    import proctor.runtime._report.otel as module

    assert "opentelemetry" not in module.__dict__
    assert callable(otlp_json)
