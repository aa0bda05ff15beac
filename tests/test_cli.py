from __future__ import annotations

import io
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "build_rescue" / "task.toml"

INVARIANT_9 = (
    "trace_id",
    "step",
    "action",
    "tool_status",
    "result_fingerprint",
    "state_version",
    "state_delta",
    "remaining",
    "decision",
    "stop_reason",
    "policy_version",
)


def proctor(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proctor", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def example_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    journal = tmp_path_factory.mktemp("cli") / "proctor.db"
    done = proctor("run", str(EXAMPLE), "--journal", str(journal))
    assert done.returncode == 0, done.stdout + done.stderr
    rows = proctor("runs", "--journal", str(journal), "--json")
    run_id = json.loads(rows.stdout)[0]["run_id"]
    return journal, run_id, done.stdout


def test_the_example_completes_and_shows_the_refused_write(
    example_run: tuple[Path, str, str],
) -> None:
    _, _, out = example_run
    assert "disposition: completed" in out
    assert "evidence:    tests: passed" in out
    refused = [line for line in out.splitlines() if "refuse" in line]
    assert any("write_file" in line and "fence" in line for line in refused)


def test_the_journal_has_one_full_trace_record_per_step(
    example_run: tuple[Path, str, str],
) -> None:
    journal, run_id, _ = example_run
    with sqlite3.connect(journal) as db:
        db.row_factory = sqlite3.Row
        rows = db.execute(
            "SELECT * FROM steps WHERE run_id = ? ORDER BY step", (run_id,)
        ).fetchall()
    assert [r["step"] for r in rows] == list(range(1, len(rows) + 1))
    actions = [r for r in rows if r["kind"] == "action"]
    assert len(actions) >= 10
    for row in actions:
        for field in INVARIANT_9:
            if field == "stop_reason":
                continue
            assert row[field] is not None, (row["step"], field)
    stops = [r for r in rows if r["decision"] == "stop"]
    assert len(stops) == 1
    assert json.loads(stops[0]["stop_reason"])["code"] == "checks_passed"


def test_show_prints_the_trace_and_the_handoff(example_run: tuple[Path, str, str]) -> None:
    journal, run_id, _ = example_run
    shown = proctor("show", run_id[:8], "--journal", str(journal))
    assert shown.returncode == 0, shown.stderr
    assert "handoff" in shown.stdout
    assert "checks_passed" in shown.stdout
    as_json = json.loads(proctor("show", run_id, "--journal", str(journal), "--json").stdout)
    assert as_json["status"] == "completed"
    assert as_json["handoff"]["owner"] == "none"
    assert as_json["steps"][0]["step"] == 1


def test_export_replays_to_the_same_decisions(
    example_run: tuple[Path, str, str], tmp_path: Path
) -> None:
    journal, run_id, _ = example_run
    out = tmp_path / "run.jsonl"
    exported = proctor("export", run_id, "--journal", str(journal), "-o", str(out))
    assert exported.returncode == 0, exported.stderr
    replayed = proctor("replay", str(out), "--json")
    assert replayed.returncode == 0, replayed.stderr
    document = json.loads(replayed.stdout)
    assert document["disposition"] == "completed"
    shown = json.loads(proctor("show", run_id, "--journal", str(journal), "--json").stdout)
    live = [(s["decision"], bool(s["progress"])) for s in shown["steps"] if s["event"] is not None]
    offline = [(s["decision"], s["progress"]) for s in document["steps"]]
    assert offline == live
    # Every action names the workspace's digest after it, as the live run measured it;
    # the last is the candidate the run completed with.
    events = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()[1:]]
    actions = [e for e in events if e["type"] == "action"]
    assert actions
    assert all(isinstance(e.get("candidate"), str) and e["candidate"] for e in actions)
    assert len({e["candidate"] for e in actions}) >= 2
    assert actions[-1]["candidate"] == shown["handoff"]["candidate_digest"]


def test_unknown_run_is_a_clear_error(example_run: tuple[Path, str, str]) -> None:
    journal, _, _ = example_run
    shown = proctor("show", "nosuchrun", "--journal", str(journal))
    assert shown.returncode == 2
    assert "nosuchrun" in shown.stderr


@pytest.mark.parametrize("command", ["runs", "show", "export", "report"])
def test_a_missing_journal_is_an_error_not_a_new_file(command: str, tmp_path: Path) -> None:
    typo = tmp_path / "proctr.db"
    args = [command] if command == "runs" else [command, "abcdef123456"]
    done = proctor(*args, "--journal", str(typo))
    assert done.returncode == 2
    assert f"journal {typo}: no such file" in done.stderr
    assert "Traceback" not in done.stderr
    assert not typo.exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["runs", "--journal", "/nonexistent/dir/x.db"], "the directory /nonexistent/dir does not"),
        (["run", "task.toml", "--journal", "/nonexistent/dir/x.db"], "/nonexistent/dir"),
        (["runs", "--limit", "99999999999999999999"], "--limit"),
        (["runs", "--limit", "0"], "--limit"),
    ],
)
def test_bad_arguments_get_a_message_and_exit_2(
    args: list[str], says: str, example_run: tuple[Path, str, str]
) -> None:
    journal, _, _ = example_run
    if "--journal" not in args:
        args = [*args, "--journal", str(journal)]
    if "task.toml" in args:
        args[args.index("task.toml")] = str(EXAMPLE)
    done = proctor(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stderr
    assert "Traceback" not in done.stderr
    assert "Event loop is closed" not in done.stderr


def test_export_to_a_missing_directory_says_so(
    example_run: tuple[Path, str, str],
) -> None:
    journal, run_id, _ = example_run
    done = proctor("export", run_id, "--journal", str(journal), "-o", "/nonexistent/dir/o.jsonl")
    assert done.returncode == 2
    assert "/nonexistent/dir/o.jsonl: cannot write" in done.stderr
    assert "Traceback" not in done.stderr


def test_version_prints_the_package_version() -> None:
    import proctor as package

    done = proctor("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"proctor {package.__version__}"


def test_a_malformed_task_file_names_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "task.toml"
    bad.write_text('[task]\ngoal = "x"\nkind = "bulid"\n')
    done = proctor("run", str(bad), "--journal", str(tmp_path / "j.db"))
    assert done.returncode == 2
    assert "task.kind" in done.stderr
    assert "task.toml:3" in done.stderr
    assert "'build' or 'answer'" in done.stderr


def test_resume_starts_a_new_run_that_inherits_the_task(
    example_run: tuple[Path, str, str], tmp_path: Path
) -> None:
    journal, run_id, _ = example_run
    script = tmp_path / "agent.jsonl"
    script.write_text('{"type": "complete", "summary": "still done"}\n')
    done = proctor("resume", run_id, "--journal", str(journal), "--script", str(script), "--json")
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["disposition"] == "completed"
    assert outcome["run_id"] != run_id
    shown = json.loads(
        proctor("show", outcome["run_id"], "--journal", str(journal), "--json").stdout
    )
    assert (
        shown["task_id"]
        == json.loads(proctor("show", run_id, "--journal", str(journal), "--json").stdout)[
            "task_id"
        ]
    )


def test_show_follow_tails_a_run_until_it_ends(tmp_path: Path) -> None:
    import shutil

    shutil.copytree(EXAMPLE.parent, tmp_path / "example")
    journal = tmp_path / "j.db"
    submitted = proctor(
        "submit", str(tmp_path / "example" / "task.toml"), "--journal", str(journal)
    )
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.strip()
    # Follow the run before it has started: it is queued, then a worker runs it.
    follow = subprocess.Popen(
        [sys.executable, "-m", "proctor", "show", run_id, "--journal", str(journal), "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        worker = proctor("worker", "--journal", str(journal), "--once")
        assert worker.returncode == 0, worker.stderr
        out, err = follow.communicate(timeout=60)
    finally:
        follow.kill()
        follow.wait()
    assert follow.returncode == 0, err
    steps = [line for line in out.splitlines() if line.startswith("step ")]
    assert len(steps) >= 14
    assert any("stop" in line for line in steps)
    assert "ended: completed" in out
    assert "disposition: completed" in out


def test_the_live_line_names_the_step_running_now() -> None:
    from rich.console import Console

    from proctor.cli import _live
    from proctor.runtime import ToolCall

    console = Console(file=io.StringIO(), force_terminal=True, width=120)
    status, _, on_call = _live(console)
    assert status is not None
    on_call(7, ToolCall("run_command", {"cmd": "pytest -q"}))
    text = "".join(segment.text for segment in console.render(status.renderable))
    assert "step   7  run_command pytest -q" in text
    assert "(run " in text
