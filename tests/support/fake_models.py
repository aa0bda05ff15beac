"""Scripted fake model servers for running real coding agents offline.

Three APIs, one function each, all stdlib-only:

* ``serve_anthropic(script)`` - Anthropic Messages API (``POST /v1/messages``,
  SSE streaming or plain JSON) for Claude Code (``ANTHROPIC_BASE_URL``).
* ``serve_responses(script)`` - OpenAI Responses API (``POST /v1/responses``,
  SSE) for Codex CLI (custom ``model_providers`` entry, ``wire_api="responses"``).
* ``serve_gemini(script)`` - Gemini API (``:generateContent`` /
  ``:streamGenerateContent?alt=sse`` / ``:countTokens``) for gemini-cli
  (``GOOGLE_GEMINI_BASE_URL``).

Each binds 127.0.0.1 port 0, serves from a daemon thread and returns a
``FakeServer`` handle, which *is* the port (an ``int`` subclass) and also has
``.requests`` (every request seen, parsed), ``.main_requests`` (requests that
consumed a script turn), ``.base_url`` and ``.close()``.

A *script* is a list of model turns.  A turn is either

* a ``str`` (or ``Text``): the model answers with that text and ends its turn;
* a ``ToolCall`` or a list of ``ToolCall``: the model calls those tools.

Only "main" requests (those that offer tools to the model) consume turns;
auxiliary requests the agents make on their own (Claude Code's title / topic
calls, gemini-cli's next-speaker / routing classifiers) get a harmless canned
answer.  When the script runs out the model answers ``"Done."``.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import urlparse

__all__ = [
    "Text",
    "ToolCall",
    "FakeServer",
    "serve_anthropic",
    "serve_responses",
    "serve_gemini",
]

FALLBACK_TEXT = "Done."


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class ToolCall:
    name: str
    input: dict[str, Any]


Turn = Any  # str | Text | ToolCall | list[ToolCall]


def _normalise(turn: Turn) -> tuple[str | None, list[ToolCall]]:
    if isinstance(turn, str):
        return turn, []
    if isinstance(turn, Text):
        return turn.text, []
    if isinstance(turn, ToolCall):
        return None, [turn]
    calls = list(turn)
    if not all(isinstance(c, ToolCall) for c in calls):
        raise TypeError(f"bad turn {turn!r}")
    return None, calls


class FakeServer(int):
    """The port number, plus a handle on the running server."""

    httpd: ThreadingHTTPServer
    thread: threading.Thread
    requests: list[dict[str, Any]]
    main_requests: list[dict[str, Any]]

    def __new__(cls, port: int) -> FakeServer:
        return super().__new__(cls, port)

    @property
    def port(self) -> int:
        return int(self)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{int(self)}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    def __enter__(self) -> FakeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class _State:
    script: list[Turn]
    lock: threading.Lock = field(default_factory=threading.Lock)
    next_turn: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)
    main_requests: list[dict[str, Any]] = field(default_factory=list)

    def pop(self) -> tuple[str | None, list[ToolCall]]:
        with self.lock:
            if self.next_turn < len(self.script):
                turn = self.script[self.next_turn]
                self.next_turn += 1
                return _normalise(turn)
        return FALLBACK_TEXT, []


Route = Callable[["_Handler", _State, str, dict[str, Any] | None], None]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    route: ClassVar[Route]
    state: _State

    def log_message(self, format: str, *args: Any) -> None:  # silence
        pass

    # -- helpers -----------------------------------------------------------
    def _read_body(self) -> dict[str, Any] | None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return None
        enc = (self.headers.get("content-encoding") or "").lower()
        if enc == "gzip":
            import gzip

            raw = gzip.decompress(raw)
        elif enc == "zstd":  # pragma: no cover - codex may compress
            return {"_undecoded": True}
        try:
            data = json.loads(raw)
            return data if isinstance(data, dict) else {"_raw": data}
        except ValueError:
            return {"_raw": raw.decode("utf-8", "replace")}

    def send_json(self, obj: Any, status: int = 200) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_sse(self, events: Iterable[tuple[str | None, Any]]) -> None:
        chunks = []
        for name, payload in events:
            line = ""
            if name:
                line += f"event: {name}\n"
            line += f"data: {json.dumps(payload)}\n\n"
            chunks.append(line)
        data = "".join(chunks).encode()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _dispatch(self, method: str) -> None:
        body = self._read_body() if method in ("POST", "PUT") else None
        rec = {
            "method": method,
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": body,
        }
        with self.state.lock:
            self.state.requests.append(rec)
        type(self).route(self, self.state, method, body)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()


def _start(script: list[Turn], route: Route) -> FakeServer:
    state = _State(script=list(script))
    handler = type("H", (_Handler,), {"route": route, "state": state})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    srv = FakeServer(httpd.server_address[1])
    srv.httpd = httpd
    srv.thread = thread
    srv.requests = state.requests
    srv.main_requests = state.main_requests
    return srv


def _id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def _approx_tokens(body: Any) -> int:
    return max(1, len(json.dumps(body or {})) // 4)


# ---------------------------------------------------------------------------
# Anthropic Messages API (Claude Code)
# ---------------------------------------------------------------------------


def _anthropic_route(h: _Handler, state: _State, method: str, body: dict[str, Any] | None) -> None:
    path = urlparse(h.path).path
    if method == "POST" and path.endswith("/v1/messages/count_tokens"):
        return h.send_json({"input_tokens": _approx_tokens(body)})
    if not (method == "POST" and path.endswith("/v1/messages")):
        return h.send_json(
            {"type": "error", "error": {"type": "not_found_error", "message": path}}, 404
        )
    body = body or {}
    if body.get("tools"):
        with state.lock:
            state.main_requests.append(body)
        text, calls = state.pop()
    else:  # auxiliary call (title, topic, quota probe, ...)
        text, calls = "Fake reply.", []
    model = body.get("model", "claude-fake")
    in_tok = _approx_tokens(body.get("messages"))
    content: list[dict[str, Any]] = []
    if text is not None:
        content.append({"type": "text", "text": text})
    for c in calls:
        content.append({"type": "tool_use", "id": _id("toolu_"), "name": c.name, "input": c.input})
    stop_reason = "tool_use" if calls else "end_turn"
    out_tok = max(1, len(json.dumps(content)) // 4)
    usage = {
        "input_tokens": in_tok,
        "output_tokens": out_tok,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    msg_id = _id("msg_")
    if not body.get("stream"):
        return h.send_json(
            {
                "id": msg_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": stop_reason,
                "stop_sequence": None,
                "usage": usage,
            }
        )
    events: list[tuple[str, Any]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {**usage, "output_tokens": 1},
                },
            },
        )
    ]
    for i, block in enumerate(content):
        if block["type"] == "text":
            events.append(
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": i,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
            )
            events.append(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {"type": "text_delta", "text": block["text"]},
                    },
                )
            )
        else:
            events.append(
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": i,
                        "content_block": {
                            "type": "tool_use",
                            "id": block["id"],
                            "name": block["name"],
                            "input": {},
                        },
                    },
                )
            )
            events.append(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {
                            "type": "input_json_delta",
                            "partial_json": json.dumps(block["input"]),
                        },
                    },
                )
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": out_tok},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    h.send_sse(events)
    return None


def serve_anthropic(script: list[Turn]) -> FakeServer:
    """Fake Anthropic Messages API. Point ``ANTHROPIC_BASE_URL`` at ``.base_url``."""
    return _start(script, _anthropic_route)


# ---------------------------------------------------------------------------
# OpenAI Responses API (Codex CLI)
# ---------------------------------------------------------------------------


def _responses_route(h: _Handler, state: _State, method: str, body: dict[str, Any] | None) -> None:
    path = urlparse(h.path).path
    if method == "GET" and path.endswith("/models"):
        return h.send_json({"object": "list", "data": [], "models": []})
    if not (method == "POST" and path.endswith("/responses")):
        return h.send_json({"error": {"message": f"not found: {path}"}}, 404)
    body = body or {}
    if body.get("tools"):
        with state.lock:
            state.main_requests.append(body)
        text, calls = state.pop()
    else:
        text, calls = "Fake reply.", []
    resp_id = _id("resp_")
    model = body.get("model", "gpt-fake")
    items: list[dict[str, Any]] = []
    if text is not None:
        items.append(
            {
                "type": "message",
                "id": _id("msg_"),
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
    for c in calls:
        items.append(
            {
                "type": "function_call",
                "id": _id("fc_"),
                "call_id": _id("call_"),
                "name": c.name,
                "arguments": json.dumps(c.input),
                "status": "completed",
            }
        )
    in_tok = _approx_tokens(body.get("input"))
    out_tok = max(1, len(json.dumps(items)) // 4)
    usage = {
        "input_tokens": in_tok,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": out_tok,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": in_tok + out_tok,
    }
    base = {
        "id": resp_id,
        "object": "response",
        "model": model,
        "status": "in_progress",
        "output": [],
    }
    events: list[tuple[str, Any]] = [
        ("response.created", {"type": "response.created", "response": base})
    ]
    for i, item in enumerate(items):
        events.append(
            (
                "response.output_item.added",
                {"type": "response.output_item.added", "output_index": i, "item": item},
            )
        )
        if item["type"] == "message":
            events.append(
                (
                    "response.output_text.delta",
                    {
                        "type": "response.output_text.delta",
                        "item_id": item["id"],
                        "output_index": i,
                        "content_index": 0,
                        "delta": item["content"][0]["text"],
                    },
                )
            )
        events.append(
            (
                "response.output_item.done",
                {"type": "response.output_item.done", "output_index": i, "item": item},
            )
        )
    events.append(
        (
            "response.completed",
            {
                "type": "response.completed",
                "response": {**base, "status": "completed", "output": items, "usage": usage},
            },
        )
    )
    h.send_sse(events)
    return None


def serve_responses(script: list[Turn]) -> FakeServer:
    """Fake OpenAI Responses API. Use ``base_url = "<.base_url>/v1"`` in a Codex provider."""
    return _start(script, _responses_route)


# ---------------------------------------------------------------------------
# Gemini API (gemini-cli)
# ---------------------------------------------------------------------------

_GEMINI_AUX_JSON = {
    # next-speaker checker, model router, loop detector ... all ask for JSON.
    "reasoning": "fake server",
    "next_speaker": "user",
    "model_choice": "flash",
    "complexity_score": 1,
    "complexity_reasoning": "fake server",
    "unproductive_state_confidence": 0.0,
    "unproductive_state_analysis": "",
}


def _gemini_route(h: _Handler, state: _State, method: str, body: dict[str, Any] | None) -> None:
    parsed = urlparse(h.path)
    path = parsed.path
    if method == "POST" and path.endswith(":countTokens"):
        return h.send_json({"totalTokens": _approx_tokens(body)})
    if method == "POST" and path.endswith(":embedContent"):
        return h.send_json({"embedding": {"values": [0.0] * 8}})
    stream = path.endswith(":streamGenerateContent")
    if not (method == "POST" and (stream or path.endswith(":generateContent"))):
        return h.send_json(
            {"error": {"code": 404, "message": f"not found: {path}", "status": "NOT_FOUND"}}, 404
        )
    body = body or {}
    gen_cfg = body.get("generationConfig") or {}
    wants_json = gen_cfg.get("responseMimeType") == "application/json"
    if body.get("tools") and not wants_json:
        with state.lock:
            state.main_requests.append(body)
        text, calls = state.pop()
    elif wants_json:
        text, calls = json.dumps(_GEMINI_AUX_JSON), []
    else:
        text, calls = "Fake reply.", []
    parts: list[dict[str, Any]] = []
    if text is not None:
        parts.append({"text": text})
    for c in calls:
        parts.append({"functionCall": {"name": c.name, "args": c.input}})
    in_tok = _approx_tokens(body.get("contents"))
    out_tok = max(1, len(json.dumps(parts)) // 4)
    resp = {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {
            "promptTokenCount": in_tok,
            "candidatesTokenCount": out_tok,
            "totalTokenCount": in_tok + out_tok,
        },
        "modelVersion": path.split("/models/")[-1].split(":")[0],
        "responseId": _id("r"),
    }
    if stream:
        h.send_sse([(None, resp)])
    else:
        h.send_json(resp)
    return None


def serve_gemini(script: list[Turn]) -> FakeServer:
    """Fake Gemini API. Point ``GOOGLE_GEMINI_BASE_URL`` at ``.base_url``."""
    return _start(script, _gemini_route)
