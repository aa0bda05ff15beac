"""
Attacks on a candidate verified in place: what the candidate's own code can try
from inside a check (it runs there), what an actor can leave in the workspace
for the overlay to show differently from a copy, and what the pin must not be
stalled or fooled by.

Each test makes the attack and asserts that it fails: the check sees what a
copy would hold, the workspace is unchanged, nothing is left behind.
"""

from __future__ import annotations

import base64
import os
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from proctor.runtime._tools import sandbox as sb
from proctor.verifiers._candidate import TreeHasher, _timestamp_window
from proctor.verifiers._checks import CommandCheck
from proctor.verifiers._evidence import Evidence
from proctor.verifiers._more_checks import CheckContext
from proctor.verifiers._pin import Pin, pin_tree, pinned_digest
from proctor.verifiers._verifier import verify_snapshot

PY = sys.executable
IGNORE = ("__pycache__", "*.pyc", "node_modules")

needs_overlay = pytest.mark.skipif(
    sb.overlay_available() is not None, reason=f"no overlay here: {sb.overlay_available()}"
)


def _workspace(root: Path, name: str = "ws") -> Path:
    ws = root / name
    (ws / "tests").mkdir(parents=True)
    (ws / "app.py").write_text("VALUE = 1\n")
    (ws / "tests" / "test_app.py").write_text("def test_it():\n    assert True\n")
    return ws


def _settle(ws: Path) -> None:
    """Move every timestamp of the tree out of the racy window (no waiting)."""
    past = time.time_ns() - 10 * 10**9
    for top, dirs, files in os.walk(ws, topdown=False):
        for name in [*dirs, *files]:
            os.utime(os.path.join(top, name), ns=(past, past), follow_symlinks=False)
    os.utime(ws, ns=(past, past))


def _pinned(ws: Path, ignore: tuple[str, ...] = IGNORE) -> Pin:
    pin = pin_tree(ws, ignore)
    assert pin is not None
    return pin


def _context(ws: Path, **extra: Any) -> CheckContext:
    spec = sb.SandboxSpec(writable=ws, ro_binds=sb.python_binds(PY))
    return CheckContext(sandbox=spec, ignore=IGNORE, **extra)


def _snapshot(ws: Path) -> dict[str, Any]:
    """Every entry of the tree with its type, mode, owner, content and xattrs."""
    found: dict[str, Any] = {}
    for top, dirs, files in os.walk(os.fsencode(ws)):
        for name in [*dirs, *files]:
            path = os.path.join(top, name)
            st = os.lstat(path)
            content: Any = None
            if stat.S_ISREG(st.st_mode):
                content = Path(os.fsdecode(path)).read_bytes()
            elif stat.S_ISLNK(st.st_mode):
                content = os.readlink(path)
            found[os.fsdecode(os.path.relpath(path, os.fsencode(ws)))] = (
                st.st_mode,
                st.st_uid,
                st.st_ino,
                st.st_mtime_ns,
                st.st_ctime_ns,
                content,
                sorted(os.listxattr(path, follow_symlinks=False)),
            )
    return found


def _leftovers() -> set[str]:
    return {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("proctor-check-")}


def _overlay_mounts() -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line for line in f if "proctor-check-" in line]


async def _judge(
    ws: Path, script: str, pin: Pin | None = None, **context: Any
) -> tuple[Pin, Evidence]:
    pin = pin if pin is not None else _pinned(ws)
    check = CommandCheck(name="attack", run=[PY, "-c", script])
    _, evidence = await verify_snapshot(ws, "v", (check,), _context(ws, **context), pin=pin)
    return pin, evidence[0]


# --------------------------------------------------------------------------- the pin itself


def test_a_timestamp_in_the_future_does_not_stall_the_pin(tmp_path: Path) -> None:
    # An actor's `touch -d 2100-01-01 app.py`: the tree looks "just written"
    # for 75 years. The pin waits the racy window out once, never longer, and
    # then gives up (the candidate is copied instead).
    ws = _workspace(tmp_path)
    future = int(time.mktime((2100, 1, 1, 0, 0, 0, 0, 0, -1))) * 10**9
    os.utime(ws / "app.py", ns=(future, future))
    waited: list[float] = []
    digest, pin = pinned_digest(TreeHasher(ws, IGNORE), sleep=waited.append)
    assert pin is None
    assert digest == TreeHasher(ws, IGNORE).digest()
    window = _timestamp_window(os.fspath(ws))
    assert sum(waited) <= window + 0.02, waited


def test_a_directory_timestamp_in_the_future_does_not_stall_the_pin(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    future = time.time_ns() + 10**18
    os.utime(ws / "tests", ns=(future, future))
    waited: list[float] = []
    assert pinned_digest(TreeHasher(ws, IGNORE), sleep=waited.append)[1] is None
    assert sum(waited) <= _timestamp_window(os.fspath(ws)) + 0.02, waited
