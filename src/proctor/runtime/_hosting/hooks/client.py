"""
The hook command's side of ``proctor hooks serve``: standard library only, so
that a hook call that a server answers costs an interpreter's start and one
round trip, not the runtime's imports.

The server listens on a Unix socket in a private directory beside the journal
(``.proctor-hooks/serve-DIGEST``, one per journal; for a PostgreSQL journal, a directory in the
temporary directory named by the URL's digest). One request per connection:
the request's fields (agent, task, journal, hook input) NUL-separated, answered
with ``CODE LEN_OUT LEN_ERR`` on a line and the two texts (no JSON: the json
module alone would double what such a call imports).
"""

from __future__ import annotations

# Only what a hook call answered by a server needs, and nothing slow to import:
# no typing, pathlib, tempfile or hashlib (the annotations are never evaluated).
import os
import socket

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

__all__ = (
    "FIELDS",
    "SOCKET_NAME",
    "ServerLost",
    "ask",
    "decode_answer",
    "decode_request",
    "encode_answer",
    "encode_request",
    "hooks_dir",
    "socket_file",
    "socket_path",
)

SOCKET_NAME = "serve"


class ServerLost(Exception):
    """The server took the request and gave no answer: it may have acted on it."""


def _digest(text: str, size: int) -> str:
    """A short stable name for ``text`` (64-bit FNV-1a): a file name, not a secret."""
    h = 0xCBF29CE484222325
    for byte in text.encode():
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"[:size]


def _hooks_dir(journal: str) -> str:
    if "://" in journal:
        import tempfile

        return os.path.join(tempfile.gettempdir(), f"proctor-hooks-{_digest(journal, 16)}")
    return os.path.join(os.path.dirname(os.path.abspath(journal)), ".proctor-hooks")


def socket_file(journal: str) -> str:
    """:func:`socket_path` as a string, without importing pathlib (the hook command's path)."""
    key = journal if "://" in journal else os.path.abspath(journal)
    return os.path.join(_hooks_dir(journal), f"{SOCKET_NAME}-{_digest(key, 12)}")


def hooks_dir(journal: str) -> Path:
    """The private directory of a journal's hook state (locks, the server's socket)."""
    from pathlib import Path

    return Path(_hooks_dir(journal))


def socket_path(journal: str) -> Path:
    """Where the server of ``journal`` listens (one per journal, named by its path)."""
    from pathlib import Path

    return Path(socket_file(journal))


#: The request's fields, in their order on the wire.
FIELDS = ("agent", "task", "journal", "text")


def encode_request(request: dict[str, Any]) -> bytes:
    """A request on the wire: its fields' UTF-8, NUL-separated, the hook input last."""
    # Lone surrogates (undecodable bytes on the hook's stdin) pass, and are
    # replaced on the other side: a hook call must never crash on its input.
    return "\0".join(str(request.get(name, "")) for name in FIELDS).encode("utf-8", "surrogatepass")


def decode_request(raw: bytes) -> dict[str, str]:
    """The request :func:`encode_request` wrote (the hook input may hold anything)."""
    parts = raw.decode("utf-8", errors="replace").split("\0", len(FIELDS) - 1)
    return dict(zip(FIELDS, parts, strict=False))


def encode_answer(out: str, err: str, code: int) -> bytes:
    """An answer on the wire: ``CODE LEN_OUT LEN_ERR\\n`` and the two texts' bytes."""
    o, e = out.encode("utf-8", "surrogatepass"), err.encode("utf-8", "surrogatepass")
    return f"{code} {len(o)} {len(e)}\n".encode() + o + e


def decode_answer(raw: bytes) -> dict[str, Any] | None:
    """The answer :func:`encode_answer` wrote, or None when it is not a whole one."""
    head, sep, body = raw.partition(b"\n")
    fields = head.split()
    if not sep or len(fields) != 3 or not all(f.lstrip(b"-").isdigit() for f in fields):
        return None
    code, n_out, n_err = (int(f) for f in fields)
    if n_out < 0 or n_err < 0 or len(body) != n_out + n_err:
        return None
    out, err = body[:n_out].decode("utf-8", "replace"), body[n_out:].decode("utf-8", "replace")
    return {"out": out, "err": err, "code": code}


def ask(path: str | Path, request: dict[str, Any]) -> dict[str, Any] | None:
    """
    Send one request to the server at ``path``.

    Returns:
        Its answer (``out``, ``err``, ``code``), or None when no server listens
        there (nothing was sent).

    Raises:
        ServerLost: the request was sent and no whole answer came back.
    """
    if not os.path.exists(path):
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            conn.connect(str(path))
        except OSError:
            return None  # a socket a dead server left: nobody took the request
        try:
            conn.sendall(encode_request(request))
            conn.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := conn.recv(65536):
                chunks.append(chunk)
        except OSError as exc:
            raise ServerLost(f"the hook server at {path} failed: {exc}") from None
    finally:
        conn.close()
    answer = decode_answer(b"".join(chunks))
    if answer is None:
        raise ServerLost(f"the hook server at {path} gave no answer")
    return answer
