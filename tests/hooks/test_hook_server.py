"""
``proctor hook`` as a process, answered in-process or by ``proctor hooks serve``
over its Unix socket: the same answers, and a server that fails refuses.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proctor import RunNotFoundError
from proctor.runtime import open_journal
from proctor.runtime._hosting.hooks.client import (
    ServerLost,
    ask,
    decode_answer,
    decode_request,
    encode_answer,
    encode_request,
    socket_path,
)
from proctor.runtime._hosting.hooks.server import serve_hooks
from proctor.runtime._hosting.hooks.session import run_id_for

PAYLOADS = Path(__file__).parent / "payloads"
PROCTOR = (sys.executable, "-m", "proctor")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    work = tmp_path / "project"
    (work / "tests").mkdir(parents=True)
    (work / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (tmp_path / "task.toml").write_text(
        '[task]\ngoal = "g"\n\n[[checks]]\nname = "t"\nrun = ["true"]\n\n'
        '[contract]\nprotected = ["tests/**"]\n'
    )
    return work


def _payload(name: str, work: Path, session: str = "s1", **extra: object) -> str:
    data = json.loads((PAYLOADS / "claude" / f"{name}.json").read_text())
    data |= {"cwd": str(work), "session_id": session, "transcript_path": None} | extra
    return json.dumps(data)


def _hook(
    tmp_path: Path, text: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    args = [
        sys.executable,
        "-m",
        "proctor",
        "hook",
        "claude",
        "--task",
        str(tmp_path / "task.toml"),
    ]
    args += ["--journal", str(tmp_path / "j.db")]
    return subprocess.run(
        args, input=text, capture_output=True, text=True, timeout=120, env=env or dict(os.environ)
    )


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Path]:
    stop, ready = threading.Event(), threading.Event()
    where: list[Path] = []

    def up(path: Path) -> None:
        where.append(path)
        ready.set()

    thread = threading.Thread(
        target=serve_hooks, args=(str(tmp_path / "j.db"),), kwargs={"ready": up, "stop": stop}
    )
    thread.start()
    try:
        assert ready.wait(60)
        yield where[0]
    finally:
        stop.set()
        thread.join(60)
    assert not where[0].exists()


def test_a_protected_write_is_denied_by_a_cold_process(tmp_path: Path, project: Path) -> None:
    tool = {"file_path": str(project / "tests" / "test_x.py"), "content": "x"}
    done = _hook(tmp_path, _payload("PreToolUse", project, tool_name="Write", tool_input=tool))
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)["hookSpecificOutput"]
    assert answer["permissionDecision"] == "deny"
    assert "tests/test_x.py is protected" in answer["permissionDecisionReason"]
    # Nothing but the answer on standard output: the agent parses it.
    assert done.stdout.count("\n") == 1


def test_the_server_answers_as_a_process_does(tmp_path: Path, project: Path, server: Path) -> None:
    assert server == socket_path(str(tmp_path / "j.db"))
    assert oct(server.parent.stat().st_mode & 0o777) == "0o700"
    tool = {"file_path": str(project / "tests" / "test_x.py"), "content": "x"}
    denied = _hook(tmp_path, _payload("PreToolUse", project, tool_name="Write", tool_input=tool))
    allowed = _hook(tmp_path, _payload("PreToolUse", project))
    assert "tests/test_x.py is protected" in denied.stdout
    assert json.loads(allowed.stdout)["hookSpecificOutput"]["permissionDecision"] == "allow"
    bad = _hook(tmp_path, "{not json")
    assert bad.returncode == 2
    assert "not understood" in bad.stderr


def test_a_request_for_another_journal_is_refused(tmp_path: Path, server: Path) -> None:
    answer = ask(server, {"agent": "claude", "task": "t", "journal": "/elsewhere.db", "text": ""})
    assert answer is not None
    assert answer["code"] == 2
    assert "answers for the journal" in answer["err"]


def test_a_dead_servers_socket_falls_back_to_the_process(tmp_path: Path, project: Path) -> None:
    where = socket_path(str(tmp_path / "j.db"))
    where.parent.mkdir(parents=True)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(where))
    dead.close()  # bound, never listening: connections are refused
    done = _hook(tmp_path, _payload("PreToolUse", project))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["hookSpecificOutput"]["permissionDecision"] == "allow"


def test_a_server_that_takes_the_call_and_dies_refuses_it(tmp_path: Path, project: Path) -> None:
    where = tmp_path / "lost.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(where))
    listener.listen(1)

    def take_and_drop() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.close()

    thread = threading.Thread(target=take_and_drop)
    thread.start()
    try:
        with pytest.raises(ServerLost):
            ask(where, {"agent": "claude"})
        thread.join(10)
        thread = threading.Thread(target=take_and_drop)
        thread.start()
        env = dict(os.environ) | {"PROCTOR_HOOK_SOCKET": str(where)}
        done = _hook(tmp_path, _payload("PreToolUse", project), env)
        # It may have acted on the call: fail closed rather than decide it again.
        assert done.returncode == 2
        assert "gave no answer" in done.stderr
    finally:
        thread.join(10)
        listener.close()


def test_a_task_file_changed_during_the_session_is_refused(tmp_path: Path, project: Path) -> None:
    first = _hook(tmp_path, _payload("SessionStart", project))
    assert first.returncode == 0, first.stderr
    task = tmp_path / "task.toml"
    task.write_text(task.read_text().replace('run = ["true"]', 'run = ["false"]'))
    done = _hook(tmp_path, _payload("PreToolUse", project))
    assert (done.stdout, done.returncode) == ("", 2)
    assert "the task file changed since claude session s1 began" in done.stderr


def test_the_task_file_in_the_workspace_is_protected(tmp_path: Path, project: Path) -> None:
    (project / "task.toml").write_text((tmp_path / "task.toml").read_text())
    tool = {"file_path": str(project / "task.toml"), "content": "[task]\\ngoal = 'x'\\n"}
    args = [sys.executable, "-m", "proctor", "hook", "claude", "--task", str(project / "task.toml")]
    done = subprocess.run(
        [*args, "--journal", str(tmp_path / "j.db")],
        input=_payload("PreToolUse", project, tool_name="Write", tool_input=tool),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "task.toml is protected" in done.stdout


def test_a_journal_inside_the_workspace_is_refused(tmp_path: Path, project: Path) -> None:
    # The agent runs its own commands: one of them could rewrite the record that
    # decides it (`rm proctor.db`, a write into it). The session does not open.
    args = [
        sys.executable,
        "-m",
        "proctor",
        "hook",
        "claude",
        "--task",
        str(tmp_path / "task.toml"),
    ]
    done = subprocess.run(
        [*args, "--journal", str(project / "proctor.db")],
        input=_payload("SessionStart", project),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.stdout, done.returncode) == ("", 2)
    assert f"the journal {project / 'proctor.db'} lies inside the workspace" in done.stderr
    assert "--journal outside the workspace" in done.stderr
    assert "Traceback" not in done.stderr


APPROVE = '\n[approve]\nrun_command = ["git push*"]\nwait_seconds = 120\n'


def _journal_run(journal: Path, run_id: str) -> Any:
    async def read() -> Any:
        async with open_journal(journal) as j:
            return await j.get_run(run_id)

    return anyio.run(read)


def _waits_for_approval(journal: Path, run_id: str) -> bool:
    try:
        return bool(_journal_run(journal, run_id).waiting == "approval")
    except RunNotFoundError:
        return False  # the hook has not opened the run yet


def _until_waiting(journal: Path, run_id: str, hook: subprocess.Popen[str]) -> None:
    """Until the run says it waits for approval; bounded, and not past the hook's end."""
    deadline = 600
    for _ in range(deadline * 20):
        assert hook.poll() is None, "the hook ended before the run waited for approval"
        if journal.exists() and _waits_for_approval(journal, run_id):
            return
        threading.Event().wait(0.05)
    raise AssertionError("the run never waited for approval")


@pytest.mark.parametrize("approved", [True, False])
def test_an_approval_pattern_holds_the_call_until_a_person_decides(
    tmp_path: Path, project: Path, approved: bool
) -> None:
    task = tmp_path / "task.toml"
    task.write_text(task.read_text() + APPROVE)
    journal = tmp_path / "j.db"
    tool = {"command": "git push origin main", "description": "publish"}
    args = [sys.executable, "-m", "proctor", "hook", "claude", "--task", str(task)]
    hook = subprocess.Popen(
        [*args, "--journal", str(journal)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert hook.stdin is not None
        hook.stdin.write(_payload("PreToolUse", project, tool_name="Bash", tool_input=tool))
        hook.stdin.close()
        run_id = run_id_for("claude", "s1")
        _until_waiting(journal, run_id, hook)
        decide = ["approve", run_id] if approved else ["deny", run_id, "--why", "not on a Friday"]
        done = subprocess.run(
            [*PROCTOR, *decide, "--journal", str(journal)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert hook.stdout is not None
        assert hook.stderr is not None
        out, err = hook.stdout.read(), hook.stderr.read()
        hook.wait(timeout=120)
    finally:
        if hook.poll() is None:
            hook.kill()
            hook.wait()
        for stream in (hook.stdout, hook.stderr):
            if stream is not None:
                stream.close()
    assert hook.returncode == 0, err
    answer = json.loads(out)["hookSpecificOutput"]
    if approved:
        assert answer["permissionDecision"] == "allow"
    else:
        assert answer["permissionDecision"] == "deny"
        assert "not on a Friday" in answer["permissionDecisionReason"]
    # A call no pattern names does not wait.
    quick = _hook(tmp_path, _payload("PreToolUse", project))
    assert json.loads(quick.stdout)["hookSpecificOutput"]["permissionDecision"] == "allow"


def test_proctor_stop_between_hook_calls_ends_the_session(tmp_path: Path, project: Path) -> None:
    first = _hook(tmp_path, _payload("SessionStart", project))
    assert first.returncode == 0, first.stderr
    run_id = run_id_for("claude", "s1")
    stopped = subprocess.run(
        [
            *PROCTOR,
            "stop",
            run_id,
            "--journal",
            str(tmp_path / "j.db"),
            "--why",
            "x y",
            "--wait",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # Journaled; the run ends at the session's next hook call, not before.
    assert stopped.returncode == 1, stopped.stdout + stopped.stderr
    assert "stop journaled, but the run has not ended" in stopped.stderr
    assert "Traceback" not in stopped.stderr
    done = _hook(tmp_path, _payload("PreToolUse", project))
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["continue"] is False
    assert "stopped" in answer["stopReason"]
    row = _journal_run(tmp_path / "j.db", run_id)
    assert row.status == "stopped"
    assert row.stop_reason["code"] == "user_stop"
    assert "x y" in row.stop_reason["message"]


#: Any text, lone surrogates included (undecodable bytes on a hook's stdin).
ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()))


def _wire(text: str) -> str:
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


@given(
    st.sampled_from(["claude", "codex", "gemini", ""]),
    ANY_TEXT.map(lambda t: t.replace("\0", "")),
    ANY_TEXT.map(lambda t: t.replace("\0", "")),
    ANY_TEXT,
)
def test_a_request_crosses_the_socket_as_it_was_sent(
    agent: str, task: str, journal: str, text: str
) -> None:
    request = {"agent": agent, "task": task, "journal": journal, "text": text}
    # The hook input, last on the wire, may hold anything, NULs included.
    assert decode_request(encode_request(request)) == {k: _wire(v) for k, v in request.items()}


@given(ANY_TEXT, ANY_TEXT, st.integers(min_value=-(2**31), max_value=2**31))
def test_an_answer_crosses_the_socket_whole_or_not_at_all(out: str, err: str, code: int) -> None:
    raw = encode_answer(out, err, code)
    assert decode_answer(raw) == {"out": _wire(out), "err": _wire(err), "code": code}
    # Cut anywhere, it is not taken for an answer.
    for cut in {0, 1, len(raw) // 2, len(raw) - 1}:
        if cut < len(raw):
            assert decode_answer(raw[:cut]) is None


@pytest.mark.parametrize("served", [False, True])
def test_input_that_is_not_utf8_is_judged_not_crashed_on(
    tmp_path: Path, project: Path, served: bool, request: pytest.FixtureRequest
) -> None:
    # A crashed hook lets the call through: undecodable bytes must be judged.
    if served:
        request.getfixturevalue("server")
    tool = {"file_path": str(project / "tests" / "test_x.py"), "content": "x"}
    text = _payload("PreToolUse", project, tool_name="Write", tool_input=tool)
    raw = text.encode().replace(b'"content": "x"', b'"content": "\xff\xfe"')
    assert b"\xff\xfe" in raw
    args = [*PROCTOR, "hook", "claude", "--task", str(tmp_path / "task.toml")]
    done = subprocess.run(
        [*args, "--journal", str(tmp_path / "j.db")], input=raw, capture_output=True, timeout=120
    )
    assert b"Traceback" not in done.stderr
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)["hookSpecificOutput"]
    assert answer["permissionDecision"] == "deny"
