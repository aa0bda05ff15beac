"""
The real set (tests/real): every run is what proctor's importers make of its source,
``proctor replay`` accepts every one, and the no-progress policy is scored on them.

The runs that succeeded must not be stopped before their last action or message,
except the ones listed in :data:`KNOWN_FALSE_STOPS`, each with the reason the stop
stands (docs/progress.md, "On real runs"); a change of policy that stops another
succeeded run, or no longer stops one of these, fails here and must be looked at.
No public run ended by a peer's loop detector could be found; the looped side is
constructed from real runs' own actions (tests/real/constructed, labelled so), and
every one of them must be stopped inside its loop, as the OpenHands rule stops them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import deque
from pathlib import Path
from typing import Any

import pytest
from tests.real.score import score

from proctor.runtime._importers import import_file
from proctor.runtime._progress.trajectory import read_trajectory, replay

REAL = Path(__file__).resolve().parents[1] / "real"

SET = REAL / "set"
CONSTRUCTED = REAL / "constructed"
INDEX: list[dict[str, Any]] = json.loads((SET / "index.json").read_text(encoding="utf-8"))
LOOPS: list[dict[str, Any]] = json.loads((CONSTRUCTED / "index.json").read_text(encoding="utf-8"))

MONOLOGUE = "format errors: four replies in a row without exactly one command, no action"
REAPPLY = "a revert, the same failure again, the same edits re-applied: nothing new"
RECHECK = "the same checks re-run after restoring a state already checked: nothing new"
KNOWN_FALSE_STOPS: dict[str, tuple[str, str]] = {
    "mini/django__django-11299.jsonl": ("stall", MONOLOGUE),
    "mini/django__django-14349.jsonl": ("stall", MONOLOGUE),
    "mini/sphinx-doc__sphinx-10466.jsonl": ("stall", MONOLOGUE),
    "mini/django__django-11433.jsonl": ("stall", REAPPLY),
    "mini/pytest-dev__pytest-6202.jsonl": ("stall", REAPPLY),
    "mini/pydata__xarray-3305.jsonl": ("stall", REAPPLY),
    "mini/sphinx-doc__sphinx-8056.jsonl": ("stall", REAPPLY),
    "mini/django__django-15741.jsonl": ("stall", RECHECK),
    "mini/sympy__sympy-13647.jsonl": ("stall", RECHECK),
    "mini/sympy__sympy-15976.jsonl": ("stall", "a real loop: one no-op `sed -i` four times"),
}


@pytest.fixture(scope="module")
def scored() -> dict[str, Any]:
    return {"set": score(SET), "constructed": score(CONSTRUCTED)}


def test_the_set_is_small_and_every_run_names_its_source() -> None:
    size = sum(p.stat().st_size for p in REAL.rglob("*") if p.is_file())
    assert size < 6_000_000
    assert len(INDEX) >= 100
    for entry in INDEX:
        assert (SET / entry["file"]).is_file()
        assert set(entry["source"]) == {"repo", "path", "commit", "licence"}
        assert len(entry["source"]["commit"]) == 40
        assert entry["outcome"] in ("succeeded", "looped", "other")
    sources = (REAL / "SOURCES.md").read_text(encoding="utf-8")
    assert all(entry["file"] in sources for entry in INDEX)


def _kept() -> list[dict[str, Any]]:
    return [e for e in INDEX if (REAL / "raw" / e["raw"]).is_file()]


@pytest.mark.parametrize("entry", _kept(), ids=lambda e: e["file"])
def test_a_run_is_what_the_importers_make_of_its_source(entry: dict[str, Any]) -> None:
    options = {"index": entry["run_index"]} if "run_index" in entry else {}
    header, events = import_file(REAL / "raw" / entry["raw"], entry["format"], **options)
    lines = [json.dumps(header, ensure_ascii=False)]
    lines += [json.dumps(e, ensure_ascii=False) for e in events]
    assert (SET / entry["file"]).read_text(encoding="utf-8") == "\n".join(lines) + "\n"


def test_every_format_has_runs_in_the_set() -> None:
    formats = {e["format"] for e in INDEX}
    assert formats == {"sweagent", "mini", "openhands", "claude", "codex", "gemini", "inspect"}


def test_every_run_is_a_valid_trajectory() -> None:
    paths = sorted(SET.rglob("*.jsonl")) + sorted(CONSTRUCTED.glob("*.jsonl"))
    assert len(paths) == len(INDEX) + len(LOOPS)
    for path in paths:
        trajectory = read_trajectory(path)
        assert replay(trajectory).events == len(trajectory.events)


def _one_of_each() -> list[Path]:
    """One run of each format, and one constructed loop of each shape."""
    picked: dict[str, Path] = {}
    for entry in INDEX:
        picked.setdefault(entry["format"], SET / entry["file"])
    for entry in LOOPS:
        picked.setdefault(entry["loop"], CONSTRUCTED / entry["file"])
    return sorted(picked.values())


def test_proctor_replay_accepts_runs_of_every_format() -> None:
    # The command is the library's replay (test_every_run_is_a_valid_trajectory covers
    # every run); here the command itself, once per format and loop shape.
    paths = _one_of_each()
    assert len(paths) >= 9
    running: deque[tuple[Path, subprocess.Popen[str]]] = deque()
    failures: list[str] = []

    def finish() -> None:
        path, proc = running.popleft()
        out, err = proc.communicate(timeout=120)
        if proc.returncode != 0:
            failures.append(f"{path}: {err}")
            return
        document = json.loads(out)
        lines = path.read_text(encoding="utf-8").splitlines()
        if document["events"] != len(lines) - 1:
            failures.append(f"{path}: {document['events']} events")

    for path in paths:
        if len(running) >= 2 * (os.cpu_count() or 1):
            finish()
        args = [sys.executable, "-m", "proctor", "replay", str(path), "--json"]
        running.append(
            (
                path,
                subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
            )
        )
    while running:
        finish()
    assert failures == []


def test_succeeded_runs_are_not_stopped_early_but_the_known_ones(scored: dict[str, Any]) -> None:
    runs = scored["set"]["runs"]
    stopped = {
        file: run["proctor"]
        for file, run in runs.items()
        if run["outcome"] == "succeeded" and run["proctor"] is not None
    }
    assert stopped == {file: rule for file, (rule, _) in KNOWN_FALSE_STOPS.items()}
    succeeded = [r for r in runs.values() if r["outcome"] == "succeeded"]
    assert len(succeeded) >= 70


def test_the_contract_additions_keep_runs_the_first_version_stopped() -> None:
    # Stopped by the first version (a repeated failure: four different searches that
    # found nothing, or the same failure before and after a `sed -i`); now completed.
    for name in ("django__django-11734", "sympy__sympy-13031", "sympy__sympy-23262"):
        result = replay(read_trajectory(SET / "mini" / f"{name}.jsonl"))
        assert (result.disposition, result.stop_reason) == ("completed", "checks_passed"), name


@pytest.mark.parametrize("entry", LOOPS, ids=lambda e: e["file"])
def test_every_constructed_loop_is_stopped_inside_it(
    entry: dict[str, Any], scored: dict[str, Any]
) -> None:
    run = scored["constructed"]["runs"][entry["file"]]
    assert run["proctor"] is not None, "not stopped"
    assert entry["loop_starts"] <= run["proctor_at"] < entry["events"]
    # The peer's rule agrees that these are loops.
    assert run["openhands"] is not None


def test_the_scoring_table_in_the_docs_has_these_figures(scored: dict[str, Any]) -> None:
    figures = scored["set"]["figures"]
    loops = scored["constructed"]["figures"]["looped"]
    doc = (Path(__file__).resolve().parents[2] / "docs" / "progress.md").read_text("utf-8")
    succeeded, other = figures["succeeded"], figures["other"]
    # The "before" columns are the first version's figures, measured once.
    row = (
        rf"\| tests/real \({succeeded['runs'] + other['runs']} runs\) "
        rf"\| {succeeded['runs']} \| \d+ \| {succeeded['proctor']} \| {succeeded['openhands']} "
        rf"\| {other['runs']} \| \d+ \| {other['proctor']} \| {other['openhands']} "
        rf"\| {loops['runs']} \| \d+ \| {loops['proctor']} \| {loops['openhands']} \|"
    )
    assert re.search(row, doc), row
