"""
Docs that run: every fenced block of README.md and docs/*.md marked in its info
string is executed, in the order it appears (sqlite-utils' docs tests are the
model).

The marks, after the block's language:

- ``file=PATH``: the block is a file the example needs; it is written to PATH.
- ``runnable``: the block is run: ``sh`` with bash (``set -e``), ``python`` with
  this interpreter. It must exit 0.
- ``dir=NAME``: where (default: the document's own scratch directory); blocks of
  one document share it, so a later block sees what an earlier one wrote.

Each document runs in a fresh directory holding a copy of ``examples/``, with
this environment's ``bin`` first on PATH (``proctor`` is the one under test).
A block that talks to a model server on ``http://127.0.0.1:11434/v1`` talks to
the test suite's fake one instead (tests/support/chat_server.py), scripted to
read ``calc.py``, fix it and claim completion.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
from tests.support.chat_server import ChatServer, call, completion, running_chat_server

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: The model server the documented examples name, replaced by the fake one.
MODEL_URL = "http://127.0.0.1:11434/v1"
_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```\s*$", re.S | re.M)


@attrs.frozen
class Block:
    document: Path
    line: int
    language: str
    marks: dict[str, str]
    text: str


def blocks(document: Path) -> list[Block]:
    """The marked blocks of ``document``, in order."""
    source = document.read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(source):
        words = match[1].split()
        if not words:
            continue
        marks = {}
        for word in words[1:]:
            key, _, value = word.partition("=")
            marks[key] = value
        if "runnable" in marks or "file" in marks:
            line = source.count("\n", 0, match.start()) + 1
            found.append(Block(document, line, words[0], marks, match[2]))
    return found


def _marked() -> list[Path]:
    return [d for d in DOCUMENTS if blocks(d)]


def test_the_marks_are_found() -> None:
    # The docs test must not pass by finding nothing.
    assert len(_marked()) >= 2
    assert sum(len(blocks(d)) for d in DOCUMENTS) >= 8


def _script(chat: ChatServer, runs: int) -> None:
    for _ in range(runs):
        chat.script(
            completion(call("read_file", {"path": "calc.py"})),
            completion(call("edit_file", {"path": "calc.py", "old": "a - b", "new": "a + b"})),
            completion(call("complete", {"summary": "add() adds"})),
        )


@pytest.mark.parametrize("document", _marked(), ids=lambda d: d.name)
def test_the_documented_examples_run(document: Path, tmp_path: Path) -> None:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    env = {
        **os.environ,
        "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
    }
    env.pop("PROCTOR_JOURNAL", None)
    with running_chat_server() as chat:
        # The directories whose files name the model server.
        talks: set[Path] = set()
        for block in blocks(document):
            where = tmp_path / block.marks.get("dir", ".")
            where.mkdir(parents=True, exist_ok=True)
            text = block.text.replace(MODEL_URL, chat.url)
            label = f"{document.name}:{block.line}"
            if "file" in block.marks:
                target = where / block.marks["file"]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")
                if chat.url in text:
                    talks.add(where)
            if "runnable" not in block.marks:
                continue
            if chat.url in text or where in talks:
                # Every run of the block asks the fake model for one repair.
                _script(chat, max(1, text.count("proctor run") + text.count("python host")))
            if block.language in ("sh", "bash", "console"):
                argv = ["bash", "-e", "-c", text]
            elif block.language == "python":
                argv = [sys.executable, "-c", text]
            else:
                pytest.fail(f"{label}: cannot run a {block.language} block")
            done = subprocess.run(
                argv, cwd=where, env=env, capture_output=True, text=True, timeout=300, check=False
            )
            assert done.returncode == 0, f"{label}:\n{done.stdout}\n{done.stderr}"
            assert "Traceback" not in done.stderr, f"{label}:\n{done.stderr}"
