"""
The fuzz suite: Hypothesis makes task files, trajectories, proposals and journal
rows (and damaged journal files), and nothing it makes crashes the runtime.

Bounded for CI (a few hundred cases each); ``benchmarks/fuzz.py`` runs the same
strategies for 100,000 cases and more (docs/robustness.md has the figures).
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support import fuzz

from proctor import Completion, ScriptedActor, Task, ToolCall, run
from proctor.runtime._records import Proposal
from proctor.verifiers._checks import CommandCheck

FAST = settings(
    max_examples=250,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@FAST
@given(fuzz.proposals)
def test_a_proposal_is_refused_with_a_reason_or_taken_by_everything_after(
    proposal: Proposal,
) -> None:
    fuzz.check_proposal(proposal)


@FAST
@given(fuzz.trajectories())
def test_a_trajectory_is_refused_by_line_or_replays(lines: list[str]) -> None:
    fuzz.check_trajectory(lines)


@pytest.fixture(scope="module")
def task_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fuzz.task_home(tmp_path_factory.mktemp("taskfiles"))


@settings(FAST, max_examples=200)
@given(data=fuzz.task_files())
def test_a_task_file_loads_or_is_refused_with_where(task_home: Path, data: bytes) -> None:
    fuzz.check_task_file(task_home, data)


@FAST
@given(fuzz.journal_rows())
def test_a_journal_row_reads_as_written_or_is_a_journal_error(
    case: tuple[str, tuple[object, ...]],
) -> None:
    fuzz.check_journal_row(case)


@pytest.fixture(scope="module")
def journal_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    root = tmp_path_factory.mktemp("journal")
    workspace = root / "w"
    workspace.mkdir()
    (workspace / "a.txt").write_text("a\n")
    task = Task(
        goal="g",
        workspace=workspace,
        checks=(CommandCheck("t", [sys.executable, "-c", "pass"]),),
    )
    actor = ScriptedActor(
        [
            ToolCall("read_file", {"path": "a.txt"}),
            ToolCall("write_file", {"path": "a.txt", "content": "b\n"}),
            Completion(),
        ]
    )
    anyio.run(run, task, actor, root / "j.db")
    return fuzz.plain_journal(root / "j.db")


@settings(FAST, max_examples=40)
@given(st.data())
def test_a_damaged_journal_file_reads_or_is_a_journal_error(
    journal_bytes: bytes, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    flips = data.draw(fuzz.journal_flips(len(journal_bytes)))
    path = tmp_path_factory.mktemp("damaged") / "j.db"
    anyio.run(fuzz.check_journal_file, journal_bytes, flips, path)
