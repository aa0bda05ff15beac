"""
People in the loop, with real processes: ``proctor run`` in a subprocess, stopped
by a signal or by ``proctor stop`` from another process, answered, approved,
denied, retuned; a host killed with -9 shows as stale.

Every wait synchronizes on the journal (a process journaled, a run waiting, a
run ended), polled under a bounded guard; never on a child's output or a sleep.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from proctor import (
    CommandCheck,
    Completion,
    Disposition,
    FunctionActor,
    Observation,
    Proposal,
    RunEndedError,
    ScriptedActor,
    Stopper,
    Task,
    ToolCall,
    run,
    stop,
)
from proctor.runtime import open_journal
from proctor.runtime._control.run import _groups_of
from proctor.runtime._journal.base import RunRow

#: The longest any wait on the journal may take before the test fails.
GUARD = 60.0

TASK = """
[task]
goal = "do the thing"
workspace = "ws"
{extra_task}

[[checks]]
name = "ok"
run = ["true"]

[actor]
kind = "scripted"
script = "agent.jsonl"
{extra}
"""


UNSANDBOXED = '\n[sandbox]\nmode = "off"\n'


def _write_task(
    root: Path, proposals: list[dict[str, Any]], *, extra_task: str = "", extra: str = ""
) -> Path:
    (root / "ws").mkdir(parents=True, exist_ok=True)
    (root / "agent.jsonl").write_text(
        "".join(json.dumps(p) + "\n" for p in proposals), encoding="utf-8"
    )
    path = root / "task.toml"
    path.write_text(TASK.format(extra_task=extra_task, extra=extra), encoding="utf-8")
    return path


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proctor", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=GUARD,
        check=False,
    )


class Host:
    """A ``proctor`` process started in the background, its output in files."""

    def __init__(self, root: Path, *args: str) -> None:
        self.root = root
        self.out = open(root / "out.txt", "w+", encoding="utf-8")  # noqa: SIM115
        self.err = open(root / "err.txt", "w+", encoding="utf-8")  # noqa: SIM115
        env = {**os.environ, "PROCTOR_HEARTBEAT_SECONDS": "0.3"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "proctor", *args],
            cwd=root,
            stdout=self.out,
            stderr=self.err,
            env=env,
            start_new_session=True,
        )

    def wait(self) -> int:
        return self.proc.wait(timeout=GUARD)

    def output(self) -> str:
        self.out.seek(0)
        self.err.seek(0)
        return self.out.read() + self.err.read()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=GUARD)
        self.out.close()
        self.err.close()


@pytest.fixture
def hosts() -> Iterator[Callable[..., Host]]:
    started: list[Host] = []

    def start(root: Path, *args: str) -> Host:
        host = Host(root, *args)
        started.append(host)
        return host

    yield start
    for host in started:
        host.close()


async def _until(journal: Path, check: Callable[[list[RunRow]], Any]) -> Any:
    """Poll the journal's runs until ``check`` returns something true; bounded."""
    with anyio.fail_after(GUARD):
        while True:
            if await anyio.Path(journal).exists():
                async with open_journal(journal) as j:
                    found = check(await j.list_runs(10))
                if found:
                    return found
            await anyio.sleep(0.05)


async def _eventually(predicate: Callable[[], bool]) -> None:
    """Poll ``predicate`` until it holds; bounded."""
    with anyio.fail_after(GUARD):
        while True:
            if predicate():
                return
            await anyio.sleep(0.05)


async def _command_running(journal: Path) -> RunRow:
    """The run, once its command's process group is journaled as started."""
    with anyio.fail_after(GUARD):
        while True:
            if await anyio.Path(journal).exists():
                async with open_journal(journal) as j:
                    for row in await j.list_runs(10):
                        groups = await j.processes(row.run_id)
                        if row.status == "running" and any(g.ended_at is None for g in groups):
                            return row
            await anyio.sleep(0.05)


def _waiting(what: str) -> Callable[[list[RunRow]], RunRow | None]:
    def check(rows: list[RunRow]) -> RunRow | None:
        return next((r for r in rows if r.waiting == what), None)

    return check


SLEEP = {"type": "action", "tool": "run_command", "args": {"cmd": "sleep 60"}}
COMPLETE = {"type": "complete"}
READ = {"type": "action", "tool": "list_files", "args": {"path": "."}}
QUESTION = {
    "type": "claim",
    "status": "needs_input",
    "condition": "which port should the server use?",
    "evidence": ["the README names none"],
    "reason": "no file says; only a person knows",
}


@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGINT, "user_stop"), (signal.SIGTERM, "stop_signal")]
)
async def test_a_signal_stops_the_run_and_ends_its_children(
    tmp_path: Path, hosts: Callable[..., Host], signum: int, code: str
) -> None:
    task = _write_task(tmp_path, [SLEEP, COMPLETE])
    journal = tmp_path / "j.db"
    host = hosts(tmp_path, "run", str(task), "--journal", str(journal))
    row = await _command_running(journal)
    host.proc.send_signal(signum)
    assert host.wait() == 15
    out = host.output()
    assert row.run_id in out
    assert f"proctor resume {row.run_id}" in out
    async with open_journal(journal) as j:
        ended = await j.get_run(row.run_id)
        steps = await j.steps(row.run_id)
        groups = await j.processes(row.run_id)
    assert ended.status == "stopped"
    assert ended.stop_reason is not None
    assert ended.stop_reason["code"] == code
    assert ended.handoff is not None
    assert ended.handoff["disposition"] == "stopped"
    # The command in flight was interrupted: its step says its effect is uncertain.
    assert steps[0]["tool_status"] == "uncertain"
    assert all(g.ended_at is not None for g in groups)
    # Nothing the run started is left in the process table.
    assert _groups_of(row.run_id) == set()


async def test_sigterm_to_a_worker_stops_the_run_in_hand_and_the_worker(
    tmp_path: Path, hosts: Callable[..., Host]
) -> None:
    task = _write_task(tmp_path, [SLEEP, COMPLETE])
    journal = tmp_path / "j.db"
    queued = _cli("submit", str(task), "--journal", str(journal), cwd=tmp_path)
    assert queued.returncode == 0, queued.stderr
    run_id = queued.stdout.strip()
    worker = hosts(tmp_path, "worker", "--journal", str(journal), "--once")
    row = await _command_running(journal)
    assert row.run_id == run_id
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.wait() == 15
    assert f"proctor resume {run_id}" in worker.output()
    async with open_journal(journal) as j:
        ended = await j.get_run(run_id)
    assert ended.stop_reason is not None
    assert ended.stop_reason["code"] == "stop_signal"
    assert _groups_of(run_id) == set()


async def test_a_second_sigint_exits_at_once_and_the_next_open_closes_the_run(
    tmp_path: Path, hosts: Callable[..., Host]
) -> None:
    # The run cannot end after the first SIGINT while the test holds the
    # journal's write lock (its ending step waits for it), so the second SIGINT
    # is what ends the process. The check says when the run is under way.
    marker = tmp_path / "checking"
    # Off: the check signals through a file outside the workspace, which the
    # sandbox would not let it write.
    task = _write_task(tmp_path, [READ, COMPLETE], extra=UNSANDBOXED)
    text = task.read_text(encoding="utf-8").replace(
        'run = ["true"]', f'run = ["sh", "-c", "touch {marker}; exec sleep 30"]'
    )
    task.write_text(text, encoding="utf-8")
    journal = tmp_path / "j.db"
    host = hosts(tmp_path, "run", str(task), "--journal", str(journal))
    await _eventually(marker.exists)
    lock = sqlite3.connect(journal, timeout=GUARD, isolation_level=None)
    try:
        lock.execute("BEGIN EXCLUSIVE")
        host.proc.send_signal(signal.SIGINT)
        # The host's own message (not a log line): it took the first SIGINT.
        await _eventually(lambda: "stopping the run" in host.output())
        host.proc.send_signal(signal.SIGINT)
        assert host.wait() == 130
    finally:
        lock.rollback()
        lock.close()
    assert "exiting now" in host.output()
    (row,) = await _until(journal, lambda rows: rows)
    assert row.status == "running"
    # The next run on the workspace closes the dead host's run.
    (tmp_path / "agent.jsonl").write_text("", encoding="utf-8")
    task.write_text(text.replace(f"touch {marker}; exec sleep 30", "true"), encoding="utf-8")
    _cli("run", str(task), "--journal", str(journal), cwd=tmp_path)
    async with open_journal(journal) as j:
        closed = await j.get_run(row.run_id)
    assert closed.status == "failed"
    assert closed.stop_reason is not None
    assert closed.stop_reason["code"] == "interrupted"


async def test_proctor_stop_from_another_process_interrupts_a_long_command(
    tmp_path: Path, hosts: Callable[..., Host]
) -> None:
    task = _write_task(tmp_path, [SLEEP, COMPLETE])
    journal = tmp_path / "j.db"
    host = hosts(tmp_path, "run", str(task), "--journal", str(journal))
    row = await _command_running(journal)
    stopped = _cli(
        "stop", row.run_id[:8], "--journal", str(journal), "--why", "wrong branch", cwd=tmp_path
    )
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "stopped" in stopped.stdout
    assert f"proctor resume {row.run_id}" in stopped.stdout
    # The 60 s command did not run out: the host ended well inside the guard.
    assert host.wait() == 15
    async with open_journal(journal) as j:
        ended = await j.get_run(row.run_id)
        steps = await j.steps(row.run_id)
    assert ended.stop_reason is not None
    assert ended.stop_reason["code"] == "user_stop"
    assert "wrong branch" in ended.stop_reason["message"]
    assert steps[0]["tool_status"] == "uncertain"
    assert _groups_of(row.run_id) == set()
    # Stopping it again: it has ended, nothing is journaled, exit non-zero.
    again = _cli("stop", row.run_id, "--journal", str(journal), cwd=tmp_path)
    assert again.returncode == 1
    assert "has ended (stopped" in again.stderr
    async with open_journal(journal) as j:
        notes = [n for n in await j.notes(row.run_id) if n["kind"] == "stop"]
    assert len(notes) == 1


def _running(token: str) -> list[int]:
    """The processes whose command line holds ``token``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if token.encode() in cmdline.split(b"\0"):
                found.append(int(entry.name))
    return found


async def test_proctor_stop_during_a_check_ends_the_check_and_the_run(
    tmp_path: Path, hosts: Callable[..., Host]
) -> None:
    # The check says it started (outside the candidate: the sandbox is off), then
    # runs for a minute. Stopping the run must not wait for it, nor let it pass.
    marker, token = tmp_path / "check-started", f"{60 + (os.getpid() % 1000) / 1000:.3f}"
    task = _write_task(
        tmp_path,
        [READ, COMPLETE],
        extra=UNSANDBOXED,
    )
    task.write_text(
        task.read_text().replace(
            'run = ["true"]', f'run = ["sh", "-c", "echo > {marker}; exec sleep {token}"]'
        )
    )
    journal = tmp_path / "j.db"
    host = hosts(tmp_path, "run", str(task), "--journal", str(journal))
    await _eventually(marker.exists)
    (row,) = await _until(journal, lambda rows: rows)
    stopped = _cli("stop", row.run_id, "--journal", str(journal), "--why", "enough", cwd=tmp_path)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert host.wait() == 15
    async with open_journal(journal) as j:
        ended = await j.get_run(row.run_id)
        evidence = await j.evidence(run_id=row.run_id)
    assert ended.status == "stopped"
    assert ended.stop_reason is not None
    assert ended.stop_reason["code"] == "user_stop"
    # Nothing of the abandoned check is bound as evidence; its command is gone.
    assert [e for e in evidence if e["check"] == "ok"] == []
    assert _running(token) == []


async def test_an_answer_continues_a_waiting_run_that_then_completes(
    tmp_path: Path, hosts: Callable[..., Host]
) -> None:
    task = _write_task(tmp_path, [READ, QUESTION, COMPLETE], extra_task="answer_wait = 120")
    journal = tmp_path / "j.db"
    host = hosts(tmp_path, "run", str(task), "--journal", str(journal))
    row = await _until(journal, _waiting("answer"))
    # A run that waits for an answer has no call waiting for approval.
    wrong = _cli("approve", row.run_id, "--journal", str(journal), cwd=tmp_path)
    assert wrong.returncode == 2
    assert "no call waiting for approval" in wrong.stderr
    answered = _cli("answer", row.run_id, "use port 8080", "--journal", str(journal), cwd=tmp_path)
    assert answered.returncode == 0, answered.stdout + answered.stderr
    assert "answer applied at step" in answered.stdout
    assert host.wait() == 0
    async with open_journal(journal) as j:
        steps = await j.steps(row.run_id)
        ended = await j.get_run(row.run_id)
    assert ended.status == "completed"
    user = [s for s in steps if s["kind"] == "user"]
    assert len(user) == 1
    assert user[0]["event"] == {"type": "user", "text": "use port 8080"}


async def test_resume_with_an_answer_continues_an_ended_needs_input_run_with_its_spend(
    tmp_path: Path,
) -> None:
    task = _write_task(tmp_path, [READ, QUESTION])
    journal = tmp_path / "j.db"
    first = _cli("run", str(task), "--journal", str(journal), cwd=tmp_path)
    assert first.returncode == 12, first.stdout + first.stderr
    assert "--answer" in first.stdout
    async with open_journal(journal) as j:
        (parent,) = await j.list_runs(1)
        spent = await j.spend_totals(parent.task_id)
    assert spent["steps"] == 2
    # The answer is refused where it cannot go: the run has ended.
    late = _cli("answer", parent.run_id, "8080", "--journal", str(journal), cwd=tmp_path)
    assert late.returncode == 1
    assert "has ended (needs_input" in late.stderr
    (tmp_path / "then.jsonl").write_text(json.dumps(COMPLETE) + "\n", encoding="utf-8")
    resumed = _cli(
        "resume",
        parent.run_id,
        "--journal",
        str(journal),
        "--script",
        str(tmp_path / "then.jsonl"),
        "--answer",
        "use port 8080",
        cwd=tmp_path,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    async with open_journal(journal) as j:
        child = (await j.list_runs(1))[0]
        steps = await j.steps(child.run_id)
        total = await j.spend_totals(parent.task_id)
    assert child.parent_run_id == parent.run_id
    assert steps[0]["kind"] == "user"
    assert steps[0]["event"] == {"type": "user", "text": "use port 8080"}
    # The task's spend goes on from the first run's: one more step.
    assert total["steps"] == spent["steps"] + 1
    assert child.handoff is not None
    assert child.handoff["spend"]["steps"] == total["steps"]


APPROVE = """
[approve]
run_command = ["echo hi*"]
"""
ECHO = {"type": "action", "tool": "run_command", "args": {"cmd": "echo hi > made.txt"}}


async def test_an_approval_holds_a_call_until_approve(
    tmp_path: Path, hosts: Callable[..., Host]
) -> None:
    task = _write_task(tmp_path, [READ, ECHO, COMPLETE], extra=APPROVE)
    journal = tmp_path / "j.db"
    host = hosts(tmp_path, "run", str(task), "--journal", str(journal))
    row = await _until(journal, _waiting("approval"))
    # Held: the command has not run.
    assert not (tmp_path / "ws" / "made.txt").exists()
    shown = _cli("runs", "--journal", str(journal), "--json", cwd=tmp_path)
    listed = json.loads(shown.stdout)[0]
    assert (listed["state"], listed["waiting"]) == ("waiting", "approval")
    approved = _cli("approve", row.run_id, "--journal", str(journal), cwd=tmp_path)
    assert approved.returncode == 0, approved.stdout + approved.stderr
    assert "approval applied" in approved.stdout
    assert host.wait() == 0
    assert (tmp_path / "ws" / "made.txt").read_text() == "hi\n"


async def test_deny_refuses_the_call_and_tells_the_actor_why(
    tmp_path: Path, hosts: Callable[..., Host]
) -> None:
    task = _write_task(tmp_path, [READ, ECHO, COMPLETE], extra=APPROVE)
    journal = tmp_path / "j.db"
    host = hosts(tmp_path, "run", str(task), "--journal", str(journal))
    row = await _until(journal, _waiting("approval"))
    reasonless = _cli("deny", row.run_id, "--journal", str(journal), cwd=tmp_path)
    assert reasonless.returncode == 2
    denied = _cli(
        "deny", row.run_id, "--journal", str(journal), "--why", "not on this box", cwd=tmp_path
    )
    assert denied.returncode == 0, denied.stdout + denied.stderr
    assert host.wait() == 0
    assert not (tmp_path / "ws" / "made.txt").exists()
    async with open_journal(journal) as j:
        steps = await j.steps(row.run_id)
    refused = [s for s in steps if s["tool_status"] == "refused"]
    assert len(refused) == 1
    assert "denied by" in refused[0]["reason"]
    assert "not on this box" in refused[0]["reason"]


async def test_a_host_killed_with_9_is_stale_and_the_next_run_closes_it(
    tmp_path: Path, hosts: Callable[..., Host]
) -> None:
    # Off: in the sandbox the command dies with its host (--die-with-parent), and
    # this test is about closing what a dead host left running.
    task = _write_task(tmp_path, [SLEEP, COMPLETE], extra=UNSANDBOXED)
    journal = tmp_path / "j.db"
    host = hosts(tmp_path, "run", str(task), "--journal", str(journal))
    row = await _command_running(journal)
    # A second run on the workspace the live run holds is refused, naming it.
    busy = _cli("run", str(task), "--journal", str(journal), cwd=tmp_path)
    assert busy.returncode == 2
    assert row.run_id in busy.stderr
    assert "holds the workspace" in busy.stderr
    host.proc.kill()
    host.wait()
    with anyio.fail_after(GUARD):
        while True:
            listed = _cli("runs", "--journal", str(journal), "--json", cwd=tmp_path)
            states = {r["run_id"]: r["state"] for r in json.loads(listed.stdout)}
            if states[row.run_id] == "stale":
                break
            await anyio.sleep(0.05)
    # Its command outlived it, until the next run on the workspace closes the run.
    assert _groups_of(row.run_id)
    (tmp_path / "agent.jsonl").write_text(json.dumps(COMPLETE) + "\n", encoding="utf-8")
    after = _cli("run", str(task), "--journal", str(journal), cwd=tmp_path)
    assert after.returncode == 0, after.stdout + after.stderr
    async with open_journal(journal) as j:
        closed = await j.get_run(row.run_id)
    assert closed.status == "failed"
    assert closed.stop_reason is not None
    assert closed.stop_reason["code"] == "interrupted"
    assert "stopped" in closed.stop_reason["message"]
    assert _groups_of(row.run_id) == set()


async def test_retune_says_what_happened_and_below_spent_needs_the_flag(
    tmp_path: Path, hosts: Callable[..., Host]
) -> None:
    task = _write_task(tmp_path, [READ, READ, QUESTION, COMPLETE], extra_task="answer_wait = 120")
    # A failing check: the wrap-up verification cannot turn the exhaustion into success.
    task.write_text(task.read_text().replace('run = ["true"]', 'run = ["false"]'))
    journal = tmp_path / "j.db"
    host = hosts(tmp_path, "run", str(task), "--journal", str(journal))
    row = await _until(journal, _waiting("answer"))
    common = ("--journal", str(journal), "--who", "ops", "--why", "enough")
    empty = _cli("amend", row.run_id, *common, cwd=tmp_path)
    assert empty.returncode == 2
    assert "changes nothing" in empty.stderr
    raised = _cli("retune", row.run_id, "--limit", "steps=50", *common, cwd=tmp_path)
    assert raised.returncode == 0, raised.stdout + raised.stderr
    assert "retune applied at step" in raised.stdout
    # A task file without [budget] has the documented default of 1,000 steps.
    assert "from 1000 to 50" in raised.stdout
    low = _cli("retune", row.run_id, "--limit", "steps=1", *common, cwd=tmp_path)
    assert low.returncode == 1
    assert "refused" in low.stderr
    lowered = _cli(
        "retune", row.run_id, "--limit", "steps=1", "--below-spent", *common, cwd=tmp_path
    )
    assert lowered.returncode == 0, lowered.stdout + lowered.stderr
    assert host.wait() == 13
    async with open_journal(journal) as j:
        ended = await j.get_run(row.run_id)
    assert ended.stop_reason is not None
    assert ended.stop_reason["code"] == "limit:steps"
    assert "ops lowered the steps limit to 1" in ended.stop_reason["message"]
    after = _cli("retune", row.run_id, "--limit", "steps=9", *common, cwd=tmp_path)
    assert after.returncode == 1
    assert "has ended" in after.stderr


# -- in the library -------------------------------------------------------------------


def _library_task(root: Path, **kw: Any) -> Task:
    root.mkdir(parents=True, exist_ok=True)
    return Task(goal="g", workspace=root, checks=[CommandCheck("ok", ["true"])], **kw)


async def test_a_stopper_stops_a_run_from_the_same_process(tmp_path: Path) -> None:
    stopper = Stopper()

    async def propose(observation: Observation) -> Proposal | None:
        stopper.stop("stop_signal", "the supervisor is shutting down")
        return ToolCall("run_command", {"cmd": "sleep 60"})

    result = await run(
        _library_task(tmp_path / "w"), FunctionActor(propose), tmp_path / "j.db", stopper=stopper
    )
    assert result.disposition is Disposition.STOPPED
    assert result.stop_reason is not None
    assert result.stop_reason.code == "stop_signal"
    assert "supervisor" in result.stop_reason.message


async def test_stop_on_an_ended_run_is_refused(tmp_path: Path) -> None:
    result = await run(_library_task(tmp_path / "w"), ScriptedActor([Completion()]), tmp_path / "j")
    with pytest.raises(RunEndedError, match="has ended"):
        await stop(tmp_path / "j", result.run_id, why="too late")
