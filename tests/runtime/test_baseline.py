"""What a run starts from: a start note that is a digest, a baseline read back checked."""

from __future__ import annotations

import base64
import json
import sys
import tempfile
import zlib
from pathlib import Path

import pytest

from proctor import (
    CommandCheck,
    Completion,
    Disposition,
    FileCheck,
    ScriptedActor,
    Task,
    ToolCall,
    run,
)
from proctor._errors import ConfigError
from proctor.runtime import open_journal
from proctor.runtime._control.history import read_start
from proctor.runtime._records import NoteKind
from proctor.verifiers._index import Manifest

PY = sys.executable
PYTEST = (PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
FIX = ToolCall("write_file", {"path": "calc.py", "content": "def add(a, b):\n    return a + b\n"})


def _project(root: Path, files: int = 300) -> Path:
    (root / "tests").mkdir(parents=True)
    (root / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "tests" / "test_calc.py").write_text(
        "import os, sys\nsys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))\n"
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    )
    for i in range(files):
        (root / "pkg" / f"m{i % 10}").mkdir(parents=True, exist_ok=True)
        (root / "pkg" / f"m{i % 10}" / f"module_{i}.py").write_text(f"VALUE = {i}\n")
    return root


def _left(where: Path) -> list[str]:
    made = ("proctor-candidate-", "proctor-check-")
    return [p.name for p in where.iterdir() if p.name.startswith(made)]


@pytest.fixture
def own_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # Snapshots go to the temporary directory (the same file system): this test's own.
    where = tmp_path / "tmp"
    where.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    return where


async def test_the_start_note_is_a_digest_and_the_baseline_reads_back(
    tmp_path: Path, own_temporary: Path
) -> None:
    root = _project(tmp_path / "p")
    task = Task(
        goal="fix add",
        workspace=root,
        checks=(CommandCheck("tests", PYTEST),),
        protected=("tests/**",),
    )
    result = await run(task, ScriptedActor([FIX, Completion()]), tmp_path / "j")
    assert result.disposition is Disposition.COMPLETED
    async with open_journal(tmp_path / "j") as journal:
        note = await journal.latest_note(result.run_id, NoteKind.START)
        assert note is not None
        assert len(json.dumps(note["body"])) < 4096
        start = await read_start(journal, result.run_id)
    assert start is not None
    baseline = start["baseline"]
    assert isinstance(baseline, Manifest)
    assert baseline.digest == start["digest"] == note["body"]["digest"]
    assert len(baseline) == 302
    assert "tests/test_calc.py" in set(baseline.paths())
    assert "tests/test_calc.py" in start["baseline_files"]
    assert start["baseline_tests"]["tests"] == {"tests/test_calc.py::test_add": "failed"}
    # Every snapshot and every check's copy was removed, their directories too.
    assert _left(own_temporary) == []


async def test_no_manifest_is_journaled_where_no_check_compares_with_it(tmp_path: Path) -> None:
    root = _project(tmp_path / "p", files=3)
    task = Task(goal="look", workspace=root, checks=(FileCheck("calc", ("calc.py",)),))
    result = await run(task, ScriptedActor([]), tmp_path / "j")
    async with open_journal(tmp_path / "j") as journal:
        extra = await journal.latest_note(result.run_id, NoteKind.BASELINE)
        start = await read_start(journal, result.run_id)
    assert extra is not None
    assert "manifest" not in extra["body"]
    assert start is not None
    assert start["baseline"] == {}


async def test_a_changed_manifest_is_refused_and_an_old_start_note_still_reads(
    tmp_path: Path,
) -> None:
    root = _project(tmp_path / "p", files=3)
    checks = (FileCheck("calc", ("calc.py",)),)
    task = Task(goal="look", workspace=root, checks=checks, protected=("tests/**",))
    result = await run(task, ScriptedActor([]), tmp_path / "j")
    async with open_journal(tmp_path / "j") as journal:
        extra = await journal.latest_note(result.run_id, NoteKind.BASELINE)
        assert extra is not None
        raw = zlib.decompress(base64.b64decode(extra["body"]["manifest"]))
        forged = raw.replace(b"calc.py", b"calc.px")
        body = dict(extra["body"], manifest=base64.b64encode(zlib.compress(forged)).decode())
        await journal.add_note(result.run_id, NoteKind.BASELINE, body)
        with pytest.raises(ConfigError, match="does not match"):
            await read_start(journal, result.run_id)
        # What earlier versions journaled: the file map in the start note itself.
        old = {"digest": "d", "baseline": {"a.py": "1"}, "baseline_files": {}}
        await journal.add_note(result.run_id, NoteKind.START, old)
        start = await read_start(journal, result.run_id)
    assert start is not None
    assert start["baseline"] == {"a.py": "1"}
