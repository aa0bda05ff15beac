"""
Real runs of a small build task, driven by scripted actors that attack the boundary.

Every attack is a task file and a JSON Lines script in a directory of their own,
beside the workspace (never in it), with the journal in a third directory. The
project: ``pricing.py`` has an off-by-one that ``tests/test_pricing.py`` catches.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from proctor._wire import step_event
from proctor.runtime._control.run import run
from proctor.runtime._journal import open_journal
from proctor.runtime._outcome import RunResult
from proctor.runtime._records import ActionEvent, Disposition
from proctor.runtime._task import load_task
from proctor.runtime._tools.sandbox import sandbox_available

BUGGY = "def total(n):\n    return n * 10 if n > 10 else n * 11\n"
FIXED = "def total(n):\n    return n * 10 if n >= 10 else n * 11\n"
TESTS = (
    "from pricing import total\n\n\n"
    "def test_small():\n    assert total(1) == 11\n\n\n"
    "def test_ten_get_the_discount():\n    assert total(10) == 100\n"
)
PY = sys.executable


@attrs.frozen
class Attack:
    """What an attack run left behind."""

    result: RunResult
    workspace: Path
    journal: Path
    outputs: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def disposition(self) -> Disposition:
        return self.result.disposition


def action(tool: str, **args: Any) -> dict[str, Any]:
    return {"type": "action", "tool": tool, "args": args}


def command(cmd: str) -> dict[str, Any]:
    return action("run_command", cmd=cmd)


COMPLETE: dict[str, Any] = {"type": "complete", "summary": "done"}
FIX: dict[str, Any] = action("write_file", path="pricing.py", content=FIXED)


@pytest.fixture
def attack(tmp_path: Path) -> Any:
    """Return ``go(steps, sandbox=..., checks=...)``, which makes the task and runs it."""
    if sandbox_available() is not None:
        pytest.skip(f"no sandbox here: {sandbox_available()}")

    async def go(
        steps: Sequence[dict[str, Any]],
        *,
        sandbox: str = "",
        check: str = f'run = ["{PY}", "-m", "pytest", "-q", "-p", "no:cacheprovider"]',
        extra: str = "",
        setup: Any = None,
        on_step: Any = None,
    ) -> Attack:
        workspace = tmp_path / "ws"
        (workspace / "tests").mkdir(parents=True)
        (workspace / "pricing.py").write_text(BUGGY)
        (workspace / "tests" / "test_pricing.py").write_text(TESTS)
        if setup is not None:
            setup(workspace)
        task_dir = tmp_path / "task"
        task_dir.mkdir()
        script = task_dir / "agent.jsonl"
        script.write_text("".join(json.dumps(s) + "\n" for s in steps))
        (task_dir / "task.toml").write_text(
            f'[task]\ngoal = "fix pricing"\nworkspace = "{workspace}"\ncommand_time_limit = 30\n'
            f'\n[[checks]]\nname = "tests"\n{check}\ntime_limit = 120\n'
            f'\n[contract]\nprotected = ["tests/**"]\n'
            f"\n[budget]\nsteps = {len(steps) + 10}\n"
            f"{extra}\n"
            f'\n[sandbox]\n{sandbox}\n\n[actor]\nkind = "scripted"\nscript = "agent.jsonl"\n'
        )
        loaded = load_task(task_dir / "task.toml")
        journal = tmp_path / "state" / "proctor.db"
        journal.parent.mkdir()
        if on_step is not None:
            on_step.ws = workspace
        result = await run(
            loaded.task,
            loaded.actor.make(),
            journal,
            actor_spec=loaded.actor.describe(),
            on_step=on_step,
        )
        with sqlite3.connect(journal) as db:
            assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        # Read as any reader does, through the journal (large outputs are blobs in it).
        async with open_journal(journal) as j:
            steps = await j.steps(result.run_id)
            notes = tuple(n["kind"] for n in await j.notes(result.run_id))
        events = [step_event(s) for s in steps if s["kind"] == "action"]
        outputs = tuple(e.result.output for e in events if isinstance(e, ActionEvent))
        return Attack(result, workspace, journal, outputs, notes)

    return go


def alive_with(token: str) -> list[int]:
    """The host processes whose command line holds ``token``."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                if token.encode() in f.read():
                    found.append(int(entry.name))
        except OSError:
            continue
    return found
