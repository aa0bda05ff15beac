"""
A real HTTP service on 127.0.0.1 that honours idempotency keys and can misbehave on demand.

- ``POST /items`` with an ``Idempotency-Key`` header applies the write once per
  key (a new item); a repeat of the key gets the first reply and applies nothing.
- ``GET /effects/{key}``: 200 with the record when the key was applied, 404 otherwise.
- ``GET /items``: every item applied, as JSON.

Faults are queued per test with :meth:`Service.fault` and hit the next POSTs:
``apply_then_drop`` applies, then closes the connection without a reply;
``hang`` applies or not, then waits past the client's time limit (until the
service stops, at most :data:`HANG_LIMIT` seconds); ``fail_5xx`` replies with a
5xx status and applies nothing.

The server runs in a thread; it stops, its handler threads joined, when the
``with`` block (:func:`running_service`) or the fixture ends. Import the fixture
into a test module with ``from tests.support.service import service_fixture``;
tests then ask for ``service``.
"""

from __future__ import annotations

import collections
import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

import attrs
import pytest

__all__ = ("HANG_LIMIT", "Fault", "Service", "running_service", "service_fixture")

Fault = Literal["apply_then_drop", "hang", "fail_5xx"]

#: The longest a hanging request waits before the service gives up on it.
HANG_LIMIT = 10.0


@attrs.frozen
class _Plan:
    mode: Fault
    apply: bool
    status: int


@attrs.define(eq=False)
class Service:
    """
    The state of a running service: what it applied and what it received.

    Args:
        url: its base URL, ``http://127.0.0.1:{port}``.
        lookup_status: when set, ``GET /effects/{key}`` answers this status
            instead (a lookup service that is down).
    """

    url: str = ""
    lookup_status: int | None = None
    released: threading.Event = attrs.field(factory=threading.Event)
    _lock: threading.Lock = attrs.field(factory=threading.Lock)
    _applied: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    _replies: dict[str, tuple[int, bytes]] = attrs.field(factory=dict)
    _applications: collections.Counter[str] = attrs.field(factory=collections.Counter)
    _posts: collections.Counter[str] = attrs.field(factory=collections.Counter)
    _faults: collections.deque[_Plan] = attrs.field(factory=collections.deque)
    _hanging: threading.Event = attrs.field(factory=threading.Event)

    def fault(self, mode: Fault, *, times: int = 1, apply: bool = True, status: int = 500) -> None:
        """
        Make the next ``times`` POSTs misbehave.

        Args:
            mode: apply_then_drop, hang or fail_5xx.
            times: how many POSTs.
            apply: for ``hang``, whether the write is applied before the wait.
            status: for ``fail_5xx``, the status to reply with.
        """
        with self._lock:
            self._faults.extend(_Plan(mode, apply, status) for _ in range(times))

    def applications(self, key: str) -> int:
        """Return how many times the write with ``key`` was applied."""
        with self._lock:
            return self._applications[key]

    def posts(self, key: str) -> int:
        """Return how many POSTs with ``key`` arrived."""
        with self._lock:
            return self._posts[key]

    def items(self) -> list[dict[str, Any]]:
        """Return the items applied, in order."""
        with self._lock:
            return list(self._applied.values())

    def wait_hanging(self, limit: float = 5.0) -> bool:
        """Wait until a request is hanging; return whether one is."""
        return self._hanging.wait(limit)

    # -- used by the handler --------------------------------------------------------

    def _next_fault(self) -> _Plan | None:
        with self._lock:
            return self._faults.popleft() if self._faults else None

    def _apply(self, key: str, body: bytes) -> tuple[int, bytes]:
        """Apply the write with ``key`` unless it was; return its (first) reply."""
        with self._lock:
            self._posts[key] += 1
            known = self._replies.get(key)
            if known is not None:
                return known
            try:
                parsed: Any = json.loads(body) if body else None
            except ValueError:
                parsed = body.decode("utf-8", errors="replace")
            record = {"id": len(self._applied) + 1, "key": key, "body": parsed}
            self._applied[key] = record
            self._applications[key] += 1
            reply = (201, json.dumps(record).encode())
            self._replies[key] = reply
            return reply

    def _count(self, key: str) -> None:
        with self._lock:
            self._posts[key] += 1

    def _lookup(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            return self._applied.get(key)


class _Server(ThreadingHTTPServer):
    # Handler threads are joined when the server closes: nothing outlives a test.
    daemon_threads = False
    service: Service

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (a hang, a drop) leaves a broken pipe behind: expected here.
        pass


class _Handler(BaseHTTPRequestHandler):
    # A socket that stays silent this long ends its handler: every wait is bounded.
    timeout = HANG_LIMIT

    @property
    def service(self) -> Service:
        server = self.server
        assert isinstance(server, _Server)
        return server.service

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the tests read the service's counters, not its log

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        status = self.service.lookup_status
        if self.path.startswith("/effects/") and status is not None:
            self._reply(status, b'{"error": "lookup unavailable"}')
        elif self.path.startswith("/effects/"):
            record = self.service._lookup(self.path.removeprefix("/effects/"))
            if record is None:
                self._reply(404, b'{"error": "no such effect"}')
            else:
                self._reply(200, json.dumps(record).encode())
        elif self.path == "/items":
            self._reply(200, json.dumps(self.service.items()).encode())
        else:
            self._reply(404, b'{"error": "not found"}')

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != "/items":
            self._reply(404, b'{"error": "not found"}')
            return
        key = self.headers.get("Idempotency-Key")
        if not key:
            self._reply(400, b'{"error": "Idempotency-Key required"}')
            return
        service = self.service
        plan = service._next_fault()
        if plan is None:
            self._reply(*service._apply(key, body))
        elif plan.mode == "fail_5xx":
            service._count(key)
            self._reply(plan.status, b'{"error": "injected failure"}')
        elif plan.mode == "apply_then_drop":
            service._apply(key, body)
            self.close_connection = True  # and no reply: the client sees the connection end
        else:
            if plan.apply:
                service._apply(key, body)
            else:
                service._count(key)
            service._hanging.set()
            service.released.wait(HANG_LIMIT)
            # The client has given up by now; it may still be there, or not.
            with contextlib.suppress(OSError):
                self._reply(503, b'{"error": "gave up"}')


@contextlib.contextmanager
def running_service() -> Iterator[Service]:
    """Run a service for the body of a ``with``; stop it and join its threads after."""
    server = _Server(("127.0.0.1", 0), _Handler)
    state = Service(url=f"http://127.0.0.1:{server.server_address[1]}")
    server.service = state
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield state
    finally:
        state.released.set()  # hanging handlers return
        server.shutdown()
        server.server_close()  # joins the handler threads
        thread.join(HANG_LIMIT)


# Named apart from its fixture name, so that a test module imports it without
# its ``service`` parameters shadowing the import.
@pytest.fixture(name="service")
def service_fixture() -> Iterator[Service]:
    """Provide a running :class:`Service` as ``service``, stopped at the end of the test."""
    with running_service() as state:
        yield state
