"""
Sandboxes made ahead: each command still gets a sandbox of its own, the spare
never outlives its process groups, and a command line reaches the sandbox intact;
with the sandbox off, a command made ahead is set up as one made for it.

tests/runtime/test_sandbox.py runs every boundary test both ways (a sandbox made
for the command, and one made ahead); these are about the spares themselves.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proctor.runtime._records import ToolStatus
from proctor.runtime._tools import process
from proctor.runtime._tools import sandbox as sb
from proctor.runtime._tools.process import ProcessGroups, pid_alive, run_command
from proctor.runtime._tools.spawn import owns_children

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
    return [spare.process.pid for spares in groups._spares.values() for spare in spares]


def proc_file(pid: int, name: str) -> str:
    return Path(f"/proc/{pid}/{name}").read_text()


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


# Pieces of shell scripts that show what a fresh ``sh -c`` would: its name and
# flags, its arguments, its variables (the trampoline's own must not show), quoting,
# exit codes, errors, standard input, the directory.
_PIECES = st.sampled_from(
    [
        'echo "$0|$-|$#|$*"',
        'echo "${n-no n}|${line-no line}|${OLDPWD-no OLDPWD}"',
        "set | grep -c '^[a-z]' || true",
        "pwd",
        "cat; echo read=$?",
        "false",
        "exit 3",
        "nosuchcommand",
        "if",
        "f() { return 4; }; f",
        'echo "$?"',
        "echo `echo sub` $(echo dollar)",
        "trap",
        "echo $LINENO",
        "shift",
        "readonly r=1; r=2",
        "exec echo replaced",
        "echo err >&2",
    ]
)
_WORDS = st.text(st.characters(blacklist_characters="\0", blacklist_categories=["Cs"]), max_size=12)


# Both shells get the environment a sandbox gives (no OLDPWD, no PWD of the host's).
_CLEAN = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}


def _as_sh_c(script: str, where: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["/bin/sh", "-c", script],
        cwd=where,
        env=_CLEAN,
        stdin=subprocess.DEVNULL,
        capture_output=True,
    )


def _in_trampoline(script: str, where: str) -> subprocess.CompletedProcess[bytes]:
    line = sb.command_line(["/bin/sh", "-c", script], where)
    assert line is not None
    return subprocess.run(
        ["/bin/sh", "-c", sb._TRAMPOLINE], cwd="/", env=_CLEAN, input=line, capture_output=True
    )


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(_PIECES, _WORDS.map(lambda w: "printf '%s|' " + sb._sh_quote(w))), max_size=6
    ),
    st.sampled_from(["; ", "\n", " && ", " || "]),
)
def test_a_shell_command_runs_in_the_trampoline_as_sh_c_runs_it(
    tmp_path_factory: pytest.TempPathFactory, pieces: list[str], joint: str
) -> None:
    # The trampoline runs a shell command line itself, not by a second /bin/sh:
    # what the command sees and says is what sh -c would have, but the name of
    # eval in dash's error messages.
    script = joint.join(pieces)
    where = str(tmp_path_factory.getbasetemp())
    fresh, ran = _as_sh_c(script, where), _in_trampoline(script, where)
    assert (ran.returncode, ran.stdout) == (fresh.returncode, fresh.stdout), script
    assert ran.stderr.replace(b": eval: ", b": ") == fresh.stderr, script


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
    assert len(spares) == process._SPARES_AHEAD, "spares should wait for the next commands"
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
    for launcher in launchers(groups):  # killed as a sweep would kill them
        os.kill(launcher, signal.SIGKILL)
    with anyio.fail_after(30):
        # Polling: nothing reports the death of a spare's launcher to a test.
        while any(map(pid_alive, launchers(groups))):  # noqa: ASYNC110 (zombies until reaped)
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


# --------------------------------------------------------------------------- with the sandbox off

# A run's commands go to a launcher made ahead with the sandbox off too: where
# proctor reaps its children itself, the waiting sh alone, joined to its cgroup
# and limited from outside before it is handed its line.

needs_pidfd = pytest.mark.skipif(not owns_children(), reason="pidfds are not usable here")


def spec_off(ws: Path) -> sb.SandboxSpec:
    return sb.SandboxSpec(
        writable=ws, mode="off", cpu_seconds=33, memory_bytes=3 << 30, max_processes=77
    )


async def sh_off(script: str, ws: Path, groups: ProcessGroups | None, token: str) -> str:
    done = await run_command(
        ["sh", "-c", script],
        cwd=ws / "sub",
        time_limit=30,
        env={"PROCTOR_RUN": token},
        groups=groups,
        sandbox=spec_off(ws),
    )
    assert done.status is ToolStatus.OK, done.output
    return done.output


async def test_off_a_command_made_ahead_is_set_up_as_one_made_for_it(
    ws: Path, groups: ProcessGroups, token: str
) -> None:
    (ws / "sub").mkdir()
    # Everything but the names that differ by design (the private home's, the cgroup's).
    probe = (
        "env | sort | sed 's,proctor-home-[^/]*,HOME,'; ulimit -a; ulimit -Ha; echo $0; pwd;"
        " sed 's,proctor-sandbox-.*,proctor-sandbox,' /proc/self/cgroup | grep pids;"
        " grep -E '^(NSpid|NSsid|NSpgid)' /proc/self/status | sed 's/[0-9]//g'"
    )
    made_for_it = await sh_off(probe, ws, None, token)
    first = await sh_off(probe, ws, groups, token)  # the first spare, made on its path
    second = await sh_off(probe, ws, groups, token)  # one made ahead
    assert first == made_for_it
    assert second == made_for_it
    assert "PROCTOR_RUN=" + token in made_for_it.split()


@needs_pidfd
async def test_off_the_spare_waits_joined_and_limited(ws: Path, token: str) -> None:
    groups = ProcessGroups(prestart=True)
    try:
        groups.prepare(spec_off(ws), {"PROCTOR_RUN": token})
        async with anyio.create_task_group() as tg:
            tg.start_soon(groups.keep_spares)
            with anyio.fail_after(30):
                # Polling: the spares are made in the background, with no event for a test.
                while len(launchers(groups)) < process._SPARES_AHEAD:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
        spare = launchers(groups)[0]
        # Nothing of it runs yet but the trampoline: it has its limits and its cgroup.
        assert cmdline(spare).split(b"\0")[:2] == [b"/bin/sh", b"-c"]
        limits = proc_file(spare, "limits")
        assert any(line.split()[-3:] == ["33", "38", "seconds"] for line in limits.splitlines())
        assert str(3 << 30) in limits
        made = next(iter(groups._spares.values()))[0]
        if made.launched.process_limit == "cgroup":
            assert "proctor-sandbox-" in proc_file(spare, "cgroup")
    finally:
        await groups.terminate_all()
    assert marked(token) == []


async def test_off_the_spare_ends_with_the_groups(ws: Path, token: str) -> None:
    (ws / "sub").mkdir()
    groups = ProcessGroups(prestart=True)
    await sh_off("true", ws, groups, token)
    spares = launchers(groups)
    assert len(spares) == process._SPARES_AHEAD, "spares should wait for the next commands"
    await groups.terminate_all()
    assert not [p for p in spares if pid_alive(p) and cmdline(p)]
    assert marked(token) == []


@pytest.mark.parametrize("ahead", [False, True], ids=["made-on-the-path", "by-its-task"])
async def test_off_the_private_homes_go(ws: Path, token: str, ahead: bool) -> None:
    (ws / "sub").mkdir()
    groups = ProcessGroups(prestart=True)
    homes: list[str] = []
    async with anyio.create_task_group() as tg:
        if ahead:
            tg.start_soon(groups.keep_spares)
        for _ in range(3):
            homes.append((await sh_off("touch $HOME/x; echo $HOME", ws, groups, token)).strip())
        tg.cancel_scope.cancel()
    await groups.terminate_all()
    assert len(set(homes)) == 3  # a home of its own for each command
    assert [h for h in homes if await anyio.Path(h).exists()] == []


@pytest.mark.parametrize("ahead", [False, True], ids=["made-on-the-path", "by-its-task"])
async def test_off_only_a_home_left_as_it_was_made_serves_the_next_command(
    ws: Path, token: str, ahead: bool
) -> None:
    # Making and removing a directory costs this disk milliseconds; a home a command
    # left empty is indistinguishable from a new one, and one it changed is not.
    (ws / "sub").mkdir()
    groups = ProcessGroups(prestart=True)
    changes = {
        ":": True,  # untouched: passed on
        "touch $HOME/.cache": False,  # a file left in it
        "mkdir $HOME/d && rmdir $HOME/d": True,  # emptied again
        "chmod 755 $HOME": False,  # its mode changed
        "rm -r $HOME && mkdir -m 700 $HOME": True,  # another empty directory at its path
        "ln -s / $HOME/root": False,
        "true": True,
    }
    homes: list[str] = []
    async with anyio.create_task_group() as tg:
        if ahead:
            tg.start_soon(groups.keep_spares)
        for change in changes:
            shown = await sh_off(
                f"echo $HOME; stat -c %a $HOME; ls -A $HOME; {change}", ws, groups, token
            )
            home, mode, *inside = shown.split("\n")
            # Whichever home a command gets, it gets it as a new one is made.
            assert (mode, "".join(inside).strip()) == ("700", ""), f"{change!r}: {shown!r}"
            homes.append(home)
            if ahead:
                # As in a run, where the step is journaled before the next command:
                # the spares' task does what the command's end asked of it first.
                await anyio.wait_all_tasks_blocked()
        tg.cancel_scope.cancel()
    await groups.terminate_all()
    # Spares are made as each command ends, from what it left, or (by their task) as
    # the next command starts: a home left as made serves a command two spares later.
    later = process._SPARES_AHEAD + (1 if ahead else 0)
    for i, left_as_made in enumerate(changes.values()):
        passed_on = homes[i] in homes[i + 1 :]
        if left_as_made and i + later < len(homes):
            assert passed_on, (i, homes)
        elif not left_as_made:
            assert not passed_on, (i, homes)
    assert [h for h in set(homes) if await anyio.Path(h).exists()] == []


@needs_pidfd
async def test_off_a_spare_refused_its_limits_runs_nothing(
    ws: Path, groups: ProcessGroups, token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "sub").mkdir()

    def refuse(pid: int, which: int, limits: tuple[int, int]) -> None:
        raise PermissionError("limit refused")

    monkeypatch.setattr(resource, "prlimit", refuse)
    done = await run_command(
        ["sh", "-c", f"touch ran; : {token}"],
        cwd=ws / "sub",
        time_limit=30,
        env={"PROCTOR_RUN": token},
        groups=groups,
        sandbox=spec_off(ws),
    )
    assert done.status is ToolStatus.ERROR
    assert "could not start" in done.output
    assert not (ws / "sub" / "ran").exists()
    assert marked(token) == []


async def test_a_command_waits_for_the_spare_being_made(
    ws: Path, groups: ProcessGroups, token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "sub").mkdir()
    made: list[int] = []
    start_spare = process._start_spare

    async def counted(
        sandbox: sb.SandboxSpec, marker_env: Mapping[str, str] | None, home: str | None = None
    ) -> Any:
        spare = await start_spare(sandbox, marker_env, home)
        made.append(spare.process.pid)
        return spare

    monkeypatch.setattr(process, "_start_spare", counted)
    groups.prepare(spec_off(ws), {"PROCTOR_RUN": token})
    async with anyio.create_task_group() as tg:
        tg.start_soon(groups.keep_spares)
        await anyio.wait_all_tasks_blocked()  # the spare is being made
        pid = int(await sh_off("echo $$", ws, groups, token))
        tg.cancel_scope.cancel()
    assert made[0] == pid  # the command ran in it, and no second one was made for it


async def test_the_spares_are_made_up_while_a_command_runs(
    ws: Path, groups: ProcessGroups, token: str, fifo_path: Path
) -> None:
    # Made while the command runs, a spare's exec does not share the host with the
    # durable commit before the command, nor with the step after it.
    (ws / "sub").mkdir()
    groups.prepare(spec_off(ws), {"PROCTOR_RUN": token})
    said: list[str] = []

    async def command() -> None:
        said.append(await sh_off(f"cat {fifo_path}", ws, groups, token))

    async with anyio.create_task_group() as tg:
        tg.start_soon(groups.keep_spares)
        with anyio.fail_after(30):
            # Polling: the spares are made in the background, with no event for a test.
            while len(launchers(groups)) < process._SPARES_AHEAD:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        ahead = launchers(groups)
        tg.start_soon(command)  # waits on the fifo until it is written
        with anyio.fail_after(30):
            while len(set(launchers(groups)) - set(ahead)) < 1:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        assert len(launchers(groups)) == process._SPARES_AHEAD
        assert not said  # the command still runs
        assert len(groups.live()) == 1
        await anyio.to_thread.run_sync(fifo_path.write_text, "done")
        with anyio.fail_after(30):
            while not said:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert said == ["done"]


@pytest.mark.parametrize("ahead", [False, True], ids=["made-for-it", "made-ahead"])
async def test_off_a_cancelled_command_leaves_no_home(
    ws: Path, token: str, fifo_path: Path, ahead: bool
) -> None:
    # Before, a cancelled call skipped the release: its home (and its pids cgroup) stayed.
    (ws / "sub").mkdir()
    groups = ProcessGroups(prestart=True) if ahead else None
    home: list[str] = []

    async def command() -> None:
        await sh_off(f"echo $HOME > {fifo_path}; sleep 30", ws, groups, token)

    async with anyio.create_task_group() as tg:
        tg.start_soon(command)
        with anyio.fail_after(10):
            home.append((await anyio.to_thread.run_sync(fifo_path.read_text)).strip())
        tg.cancel_scope.cancel()
    if groups is not None:
        await groups.terminate_all()
    assert home[0].startswith(tempfile.gettempdir())
    assert not await anyio.Path(home[0]).exists()
    assert marked(token) == []


@pytest.fixture
def fifo_path(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path
