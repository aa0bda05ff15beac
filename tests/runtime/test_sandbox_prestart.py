"""
Sandboxes made ahead: each command still gets a sandbox of its own, the spare
never outlives its process groups, and a command line reaches the sandbox intact.

tests/runtime/test_sandbox.py runs every boundary test both ways (a sandbox made
for the command, and one made ahead); these are about the spares themselves.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proctor.runtime._records import ToolStatus
from proctor.runtime._tools import sandbox as sb
from proctor.runtime._tools.process import ProcessGroups, pid_alive, run_command

needs_sandbox = pytest.mark.skipif(
    sb.sandbox_available() is not None, reason=str(sb.sandbox_available())
)

PY = sys.executable


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    d = tmp_path / "ws"
    d.mkdir()
    return d


@pytest.fixture
def token() -> str:
    return f"tok-{uuid.uuid4().hex}"


@pytest.fixture
async def groups() -> AsyncIterator[ProcessGroups]:
    made = ProcessGroups(prestart=True)
    try:
        yield made
    finally:
        await made.terminate_all()


def spec_for(ws: Path) -> sb.SandboxSpec:
    return sb.SandboxSpec(writable=ws, ro_binds=sb.python_binds(PY))


def marked(token: str) -> list[int]:
    """The host pids whose environment holds ``PROCTOR_RUN=token``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"PROCTOR_RUN={token}".encode() in environ:
            found.append(int(entry))
    return found


def replace_directory(d: Path) -> None:
    d.rename(d.with_name(d.name + "-old"))
    d.mkdir()
    (d / "new-file").write_text("")


def launchers(groups: ProcessGroups) -> list[int]:
    """The pids of the spares' launchers (read from the groups: a launcher just
    spawned may be between two execs, when /proc shows no environment)."""
    return [spare.process.pid for spare in groups._spares.values()]


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


async def sh(script: str, ws: Path, groups: ProcessGroups, token: str) -> str:
    done = await run_command(
        ["sh", "-c", script],
        cwd=ws,
        time_limit=30,
        env={"PROCTOR_RUN": token},
        groups=groups,
        sandbox=spec_for(ws),
    )
    assert done.status is ToolStatus.OK, done.output
    return done.output


# --------------------------------------------------------------------------- the command line


TEXT = st.text(st.characters(blacklist_characters="\0", blacklist_categories=["Cs"]), max_size=40)


@settings(max_examples=300, deadline=None)
@given(st.lists(TEXT, max_size=10))
def test_the_command_line_reaches_the_command_intact(args: list[str]) -> None:
    # The trampoline run on the host, by the same sh: what it execs gets exactly argv.
    line = sb.command_line(["/usr/bin/printf", "%s\\0", "argv:", *args], "/")
    assert line is not None  # at most 10 x 40 characters: within the limit
    ran = subprocess.run(
        ["/bin/sh", "-c", sb._TRAMPOLINE], input=line, capture_output=True, check=False
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split(b"\0")[1:-1] == [a.encode() for a in args]


def test_lines_that_cannot_be_given_are_refused() -> None:
    assert sb.command_line(["echo", "a\0b"], "/tmp") is None
    assert sb.command_line(["echo", "x" * sb.PRESTART_LINE_LIMIT], "/tmp") is None
    assert sb.command_line([], "/tmp") is None
    assert sb.command_line(["echo", "$(id)", "`id`", "'"], "/") is not None


def test_bytes_that_are_not_utf8_pass() -> None:
    arg = os.fsdecode(b"caf\xe9")
    line = sb.command_line(["/usr/bin/printf", "%s", arg], "/")
    assert line is not None
    ran = subprocess.run(["/bin/sh", "-c", sb._TRAMPOLINE], input=line, capture_output=True)
    assert ran.stdout == b"caf\xe9"


# --------------------------------------------------------------------------- one sandbox a command


@needs_sandbox
async def test_each_command_gets_a_fresh_sandbox(
    ws: Path, groups: ProcessGroups, token: str
) -> None:
    probe = "ls -A /tmp; echo sleepers=$(cat /proc/[0-9]*/comm | grep -c '^sleep$')"
    first = await sh(
        f"{probe}; touch /tmp/left; setsid -f sh -c 'exec sleep 30 {token}' >/dev/null 2>&1",
        ws,
        groups,
        token,
    )
    second = await sh(probe, ws, groups, token)
    assert "sleepers=0" in first.split()
    assert "left" not in second.split()  # a new private /tmp
    assert "sleepers=0" in second.split()  # a new PID namespace: the first one's sleeper is gone
    # and so is it on the host: the only processes carrying the marker are the
    # spare made for the next command.
    assert not any(token.encode() in cmdline(p) for p in marked(token))


@needs_sandbox
async def test_the_spare_ends_with_the_groups(ws: Path, token: str) -> None:
    groups = ProcessGroups(prestart=True)
    await sh("true", ws, groups, token)
    spares = launchers(groups)
    assert len(spares) == 1, "a spare should be waiting for the next command"
    await groups.terminate_all()
    # Each is gone, or still finishing its exit with its memory and files released
    # (the kernel takes it out of its cgroup before it is reaped): no code of it runs.
    assert not [p for p in spares if pid_alive(p) and cmdline(p)]
    assert marked(token) == []
    # Once ended, the groups keep no spare: a later command is made for itself.
    await sh("true", ws, groups, token)
    assert marked(token) == []


@needs_sandbox
async def test_a_spare_that_died_is_replaced(ws: Path, groups: ProcessGroups, token: str) -> None:
    await sh("true", ws, groups, token)
    (launcher,) = launchers(groups)  # killed as a sweep would kill it
    os.kill(launcher, signal.SIGKILL)
    with anyio.fail_after(30):
        # Polling: nothing reports the death of the spare's launcher to a test.
        while pid_alive(launcher):  # noqa: ASYNC110 (a zombie until its watcher reaps it)
            await anyio.sleep(0.01)
    assert (await sh("echo still", ws, groups, token)).strip() == "still"


@needs_sandbox
async def test_the_spare_is_made_ahead_by_its_task(
    ws: Path, groups: ProcessGroups, token: str
) -> None:
    spec = spec_for(ws)
    groups.prepare(spec, {"PROCTOR_RUN": token})
    async with anyio.create_task_group() as tg:
        tg.start_soon(groups.keep_spares)
        with anyio.fail_after(30):
            # Polling: the spare is made in the background, with no event for a test.
            while not launchers(groups):  # noqa: ASYNC110 (the first command's, made ahead)
                await anyio.sleep(0.01)
        for i in range(3):
            assert (await sh(f"echo {i}", ws, groups, token)).strip() == str(i)
        tg.cancel_scope.cancel()
    await groups.terminate_all()
    assert marked(token) == []


@needs_sandbox
async def test_a_long_command_gets_a_sandbox_of_its_own(
    ws: Path, groups: ProcessGroups, token: str
) -> None:
    word = "w" * (sb.PRESTART_LINE_LIMIT + 10)
    assert (await sh(f"echo {word} | wc -c", ws, groups, token)).strip() == str(len(word) + 1)


@needs_sandbox
async def test_standard_input_is_empty(ws: Path, groups: ProcessGroups, token: str) -> None:
    assert (await sh("wc -c; readlink /proc/self/fd/0", ws, groups, token)).split() == [
        "0",
        "/dev/null",
    ]


@needs_sandbox
async def test_a_spare_of_a_replaced_workspace_is_not_used(
    ws: Path, groups: ProcessGroups, token: str
) -> None:
    await sh("touch old-file", ws, groups, token)  # the spare now binds this directory
    replace_directory(ws)
    assert (await sh("ls", ws, groups, token)).split() == ["new-file"]
