"""
examples/answer end to end through ``proctor run``: the local site the example
starts, an agent that fetches the same pages in a cycle (``no_progress``) and one
that grounds its answer (``completed``), with the sources in the handoff.

The example's files name port 8765; the test serves the site on a free port and
runs copies of the files that name that port instead, so that runs of the suite
side by side never share a server.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "answer"


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    spec = importlib.util.spec_from_file_location("answer_example_server", EXAMPLE / "server.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    server = module.serve(0)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    copy = tmp_path_factory.mktemp("answer") / "answer"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for path in [*copy.glob("*.toml"), *copy.glob("*.jsonl")]:
        path.write_text(path.read_text().replace("http://127.0.0.1:8765", base))
    try:
        yield copy, base
    finally:
        server.shutdown()
        server.server_close()


def _run(task: Path, journal: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proctor", "run", str(task), "--journal", str(journal), *extra],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _lines(out: str, label: str) -> list[str]:
    return [line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith(label)]


def test_the_cycling_agent_is_stopped_no_progress(
    example: tuple[Path, str], tmp_path: Path
) -> None:
    copy, base = example
    proc = _run(copy / "cycle.toml", tmp_path / "j")
    assert proc.returncode == 14, proc.stderr
    assert "disposition: no_progress" in proc.stdout
    assert "stop reason: stall - 4 iterations in a row made no progress (a cycle of period 2)" in (
        proc.stdout
    )
    assert _lines(proc.stdout, "source:") == [f"{base}/whatsnew", f"{base}/zoneinfo"]
    # The final answer at the end of its script was never reached.
    assert "answer:" not in proc.stdout


def test_the_grounding_agent_completes_with_its_source(
    example: tuple[Path, str], tmp_path: Path
) -> None:
    copy, base = example
    proc = _run(copy / "grounded.toml", tmp_path / "j")
    assert proc.returncode == 0, proc.stderr
    assert "disposition: completed" in proc.stdout
    assert "stop reason: grounded_answer" in proc.stdout
    assert _lines(proc.stdout, "answer:") == [
        "The zoneinfo module was added in Python 3.9 (PEP 615, Python-Version: 3.9)."
    ]
    assert _lines(proc.stdout, "source:") == [f"{base}/pep-615"]


def test_the_grounded_run_refused_the_page_off_its_allowlist(
    example: tuple[Path, str], tmp_path: Path
) -> None:
    copy, base = example
    proc = _run(copy / "grounded.toml", tmp_path / "j", "--json")
    summary: dict[str, Any] = json.loads(proc.stdout)
    assert summary["disposition"] == "completed"
    assert summary["sources"] == [f"{base}/pep-615"]
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "proctor",
            "show",
            summary["run_id"],
            "--journal",
            str(tmp_path / "j"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert f"source:      {base}/pep-615" in shown.stdout
    export = subprocess.run(
        [
            sys.executable,
            "-m",
            "proctor",
            "export",
            summary["run_id"],
            "--journal",
            str(tmp_path / "j"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    events = [json.loads(line) for line in export.stdout.splitlines()[1:]]
    fetches = [e for e in events if e.get("tool") == "fetch"]
    assert fetches[0]["result"]["status"] == "error"
    assert "allowlist" in fetches[0]["result"]["output"]
    assert fetches[1]["result"]["status"] == "ok"
    # The exported run replays to the same ending: live and replay agree.
    trajectory = tmp_path / "run.jsonl"
    trajectory.write_text(export.stdout)
    replayed = subprocess.run(
        [sys.executable, "-m", "proctor", "replay", str(trajectory), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    doc = json.loads(replayed.stdout)
    assert (doc["disposition"], doc["stop_reason"]) == ("completed", "grounded_answer")


def test_the_cycle_replays_to_the_same_stop(example: tuple[Path, str], tmp_path: Path) -> None:
    copy, _ = example
    summary = json.loads(_run(copy / "cycle.toml", tmp_path / "j", "--json").stdout)
    export = subprocess.run(
        [
            sys.executable,
            "-m",
            "proctor",
            "export",
            summary["run_id"],
            "--journal",
            str(tmp_path / "j"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    trajectory = tmp_path / "run.jsonl"
    trajectory.write_text(export.stdout)
    replayed = subprocess.run(
        [sys.executable, "-m", "proctor", "replay", str(trajectory), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    doc = json.loads(replayed.stdout)
    assert (doc["disposition"], doc["stop_reason"], doc["stopped_at"]) == (
        "no_progress",
        "stall",
        7,
    )
