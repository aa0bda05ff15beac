"""
The hook command's side of ``proctor hooks serve``: standard library only, so
that a hook call that a server answers costs an interpreter's start and one
round trip, not the runtime's imports.

The server listens on a Unix socket in a private directory beside the journal
(``.proctor-hooks/serve-DIGEST``, one per journal; for a PostgreSQL journal, a directory in the
temporary directory named by the URL's digest). One request per connection:
one JSON line ``{"agent", "task", "journal", "text"}``, answered with one JSON
line ``{"out", "err", "code"}``.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import tempfile
from pathlib import Path
from typing import Any

__all__ = ("SOCKET_NAME", "ServerLost", "ask", "hooks_dir", "socket_path")

SOCKET_NAME = "serve"


class ServerLost(Exception):
    """The server took the request and gave no answer: it may have acted on it."""


def hooks_dir(journal: str) -> Path:
    """The private directory of a journal's hook state (locks, the server's socket)."""
    if "://" in journal:
        name = hashlib.sha256(journal.encode()).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"proctor-hooks-{name}"
    return Path(os.path.abspath(journal)).parent / ".proctor-hooks"


def socket_path(journal: str) -> Path:
    """Where the server of ``journal`` listens (one per journal, named by its path)."""
    key = journal if "://" in journal else os.path.abspath(journal)
    return hooks_dir(journal) / f"{SOCKET_NAME}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def ask(path: Path, request: dict[str, Any]) -> dict[str, Any] | None:
    """
    Send one request to the server at ``path``.

    Returns:
        Its answer, or None when no server listens there (nothing was sent).

    Raises:
        ServerLost: the request was sent and no whole answer came back.
    """
    if not path.exists():
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            conn.connect(str(path))
        except OSError:
            return None  # a socket a dead server left: nobody took the request
        try:
            conn.sendall(json.dumps(request).encode() + b"\n")
            conn.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := conn.recv(65536):
                chunks.append(chunk)
        except OSError as exc:
            raise ServerLost(f"the hook server at {path} failed: {exc}") from None
    finally:
        conn.close()
    try:
        answer = json.loads(b"".join(chunks))
    except ValueError:
        raise ServerLost(f"the hook server at {path} gave no answer") from None
    if not isinstance(answer, dict) or not isinstance(answer.get("code"), int):
        raise ServerLost(f"the hook server at {path} gave a malformed answer")
    return answer
