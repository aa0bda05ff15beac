"""
``proctor hooks serve``: a long-lived process that answers the hook calls of
every session of one journal, so that a hook call pays neither the runtime's
imports nor their start-up: the hook command (:mod:`.client`) hands its input
over a Unix socket and prints the answer.

The socket is in a directory only its owner may enter (mode 0700): whoever can
connect can have the task's checks run. A call is decided exactly as a hook
process decides it (:func:`~.command.hook_main`), one session's calls one at a
time; calls of different sessions are served in parallel threads.
"""

from __future__ import annotations

import contextlib
import os
import socketserver
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from proctor._errors import ConfigError
from proctor._logging import get_logger
from proctor.runtime._hosting.hooks.agents import AGENTS, fail_closed
from proctor.runtime._hosting.hooks.client import (
    decode_request,
    encode_answer,
    hooks_dir,
    socket_path,
)
from proctor.runtime._hosting.hooks.command import hook_main

__all__ = ("serve_hooks",)

log = get_logger()

#: The longest request read (a hook input is a few kilobytes; a Write's content more).
MAX_REQUEST = 64 * 1024 * 1024


def _answer(raw: bytes, journal: str) -> tuple[str, str, int]:
    try:
        request = decode_request(raw)
        agent, task, text = request.get("agent"), request.get("task"), request.get("text")
        if agent not in AGENTS or not task or text is None:
            raise ValueError("agent, task and text are required")
        if os.path.abspath(request.get("journal") or journal) != os.path.abspath(journal):
            raise ValueError(f"this server answers for the journal {journal} only")
    except ValueError as exc:
        return fail_closed(f"the hook server could not read the request: {exc}")
    return hook_main(agent, task, journal, text)


class _Handler(socketserver.StreamRequestHandler):
    journal: str

    def handle(self) -> None:
        raw = self.rfile.read(MAX_REQUEST)
        self.wfile.write(encode_answer(*_answer(raw, self.journal)))


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True


@contextlib.contextmanager
def _listening(journal: str, path: Path | None) -> Iterator[tuple[_Server, Path]]:
    where = path or socket_path(journal)
    where.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if where.parent == hooks_dir(journal):
        os.chmod(where.parent, 0o700)
    if where.exists():
        import socket

        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(where))
        except OSError:
            where.unlink()  # a dead server's socket
        else:
            raise ConfigError(f"a hook server already listens on {where}")
        finally:
            probe.close()
    handler = type("Handler", (_Handler,), {"journal": journal})
    server = _Server(str(where), handler)
    os.chmod(where, 0o600)
    try:
        yield server, where
    finally:
        server.server_close()
        with contextlib.suppress(FileNotFoundError):
            where.unlink()


def serve_hooks(
    journal: str,
    *,
    path: Path | None = None,
    ready: Callable[[Path], None] | None = None,
    stop: threading.Event | None = None,
) -> None:
    """
    Answer hook calls for ``journal`` until ``stop`` is set (or the process ends).

    Args:
        journal: the journal whose sessions it serves.
        path: the socket (default: where the hook command looks for it).
        ready: called with the socket's path once it accepts connections.
        stop: set it to stop serving.

    Raises:
        ConfigError: another server already listens there.
    """
    # Warm: the first call should not pay for the imports either.
    import proctor.runtime._hosting.hooks.session  # noqa: F401

    with _listening(journal, path) as (server, where):
        log.info("hooks.serving", socket=str(where), journal=journal)
        if ready is not None:
            ready(where)
        if stop is None:
            server.serve_forever()
            return
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1})
        thread.start()
        try:
            stop.wait()
        finally:
            server.shutdown()
            thread.join()
