"""
A real chat completions server on 127.0.0.1 that answers from a script.

``POST /v1/chat/completions`` takes the next reply of the script queued with
:meth:`ChatServer.script`: a completion (:func:`completion`, with tool calls
made by :func:`call`), an error status (:func:`error`), a body that is not a
completion (:func:`malformed`), or a reply held back past the client's time
limit (:func:`late`). A request that finds the script empty gets HTTP 400, so a
test that asks more than it scripted fails at once instead of retrying. Every
request is recorded (:meth:`ChatServer.received`): path, headers and body.

The server runs in a thread; it stops, its handler threads joined, when the
``with`` block or the fixture ends. A held-back reply waits until then, at most
:data:`HANG_LIMIT` seconds.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs
import pytest

__all__ = (
    "HANG_LIMIT",
    "MODEL",
    "ChatServer",
    "Received",
    "Reply",
    "call",
    "chat_server_fixture",
    "completion",
    "error",
    "late",
    "malformed",
    "running_chat_server",
)

#: The longest a held-back reply waits before the server sends it anyway.
HANG_LIMIT = 10.0
#: The model name the scripted completions report.
MODEL = "test-model"

_ids = itertools.count(1)


@attrs.frozen
class Reply:
    """
    One scripted reply.

    Args:
        status: the HTTP status.
        body: the body, as sent.
        headers: more headers.
        late: hold the reply back until the server stops (past the client's limit).
    """

    status: int = 200
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    late: bool = False


@attrs.frozen
class Received:
    """
    One request the server received.

    Args:
        path: its path.
        headers: its headers, names in lower case.
        body: its body, parsed from JSON (None if it was not JSON).
    """

    path: str
    headers: dict[str, str]
    body: Any


def call(name: str, args: dict[str, Any] | str, call_id: str | None = None) -> dict[str, Any]:
    """
    Return one tool call of a completion.

    Args:
        name: the function's name.
        args: its arguments: an object (sent as its JSON text) or raw text, sent as is.
        call_id: the call's id (default: a new one).
    """
    return {
        "id": call_id or f"call_{next(_ids)}",
        "type": "function",
        "function": {
            "name": name,
            "arguments": args if isinstance(args, str) else json.dumps(args),
        },
    }


def completion(
    *calls: dict[str, Any],
    content: str | None = None,
    usage: tuple[int, int] | None = (10, 5),
) -> Reply:
    """
    Return a chat completion with ``calls`` (from :func:`call`) and ``content``.

    Args:
        calls: the tool calls.
        content: the assistant's text.
        usage: (prompt_tokens, completion_tokens), or None to report no usage.
    """
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = list(calls)
    data: dict[str, Any] = {
        "id": f"chatcmpl-{next(_ids)}",
        "object": "chat.completion",
        "created": 0,
        "model": MODEL,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
        ],
    }
    if usage is not None:
        data["usage"] = {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": sum(usage),
        }
    return Reply(200, json.dumps(data).encode())


def error(status: int, message: str = "injected failure", retry_after: str | None = None) -> Reply:
    """
    Return an error reply.

    Args:
        status: its status (429, 500, 400, ...).
        message: the error's message.
        retry_after: a ``Retry-After`` header, if any.
    """
    headers = (("Retry-After", retry_after),) if retry_after is not None else ()
    body = json.dumps({"error": {"message": message, "type": "test"}}).encode()
    return Reply(status, body, headers)


def malformed(body: bytes = b"<html>upstream hiccup</html>") -> Reply:
    """Return a 200 reply whose body is not a chat completion."""
    return Reply(200, body)


def late(reply: Reply | None = None) -> Reply:
    """Return ``reply`` (default: an empty completion), held back past the client's limit."""
    inner = reply or completion(content="too late")
    return attrs.evolve(inner, late=True)


@attrs.define(eq=False)
class ChatServer:
    """
    The state of a running server: its script and what it received.

    Args:
        url: its API base URL, ``http://127.0.0.1:{port}/v1``.
    """

    url: str = ""
    released: threading.Event = attrs.field(factory=threading.Event)
    _lock: threading.Lock = attrs.field(factory=threading.Lock)
    _script: collections.deque[Reply] = attrs.field(factory=collections.deque)
    _received: list[Received] = attrs.field(factory=list)

    def script(self, *replies: Reply) -> None:
        """Queue ``replies``, answered in order by the next requests."""
        with self._lock:
            self._script.extend(replies)

    def received(self) -> list[Received]:
        """Return the requests received so far, in order."""
        with self._lock:
            return list(self._received)

    def left(self) -> int:
        """Return how many scripted replies are still unsent."""
        with self._lock:
            return len(self._script)

    def _take(self, received: Received) -> Reply | None:
        with self._lock:
            self._received.append(received)
            return self._script.popleft() if self._script else None


class _Server(ThreadingHTTPServer):
    # Handler threads are joined when the server closes: nothing outlives a test.
    daemon_threads = False
    chat: ChatServer


class _Handler(BaseHTTPRequestHandler):
    # A socket that stays silent this long ends its handler: every wait is bounded.
    timeout = HANG_LIMIT

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the tests read what the server received, not its log

    def _send(self, reply: Reply) -> None:
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply.body)))
        for name, value in reply.headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(reply.body)

    def do_POST(self) -> None:
        server = self.server
        assert isinstance(server, _Server)
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = None
        headers = {name.lower(): value for name, value in self.headers.items()}
        reply = server.chat._take(Received(self.path, headers, body))
        if self.path != "/v1/chat/completions":
            self._send(error(404, f"no such path {self.path}"))
        elif reply is None:
            self._send(error(400, "the test's script has no reply left"))
        elif reply.late:
            server.chat.released.wait(HANG_LIMIT)
            # The client has given up by now; it may still be there, or not.
            with contextlib.suppress(OSError):
                self._send(reply)
        else:
            self._send(reply)


@contextlib.contextmanager
def running_chat_server() -> Iterator[ChatServer]:
    """Run a server for the body of a ``with``; stop it and join its threads after."""
    server = _Server(("127.0.0.1", 0), _Handler)
    state = ChatServer(url=f"http://127.0.0.1:{server.server_address[1]}/v1")
    server.chat = state
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01})
    thread.start()
    try:
        yield state
    finally:
        state.released.set()  # held-back replies go out
        server.shutdown()
        server.server_close()  # joins the handler threads
        thread.join(HANG_LIMIT)


# Named apart from its fixture name, so that a test module imports it without
# its ``chat`` parameters shadowing the import.
@pytest.fixture(name="chat")
def chat_server_fixture() -> Iterator[ChatServer]:
    """Provide a running :class:`ChatServer` as ``chat``, stopped at the end of the test."""
    with running_chat_server() as state:
        yield state
