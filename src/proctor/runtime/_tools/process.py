"""
Child processes: commands run in their own process group, and always end with it.

Every command gets its own session and process group (``start_new_session``), so
that the command, its children and its grandchildren can be signalled as one.
A command's group is gone when :func:`run_command` returns or raises, however it
ended:

- the command exits: whatever it left running in its group (``sleep 100 &``) is
  killed with SIGKILL right after it exits, so nothing is orphaned and nothing
  keeps writing to the workspace after the call reported its result;
- its time limit is reached: the group gets SIGTERM, then SIGKILL after a short
  grace; the result is ``uncertain``, since the command's effect is unknown;
- the caller is cancelled: the same, in shielded and bounded cleanup, and the
  cancellation propagates.

A process that leaves its group on purpose (``setsid``) escapes the group, but
not the sandbox: given a :class:`~proctor.runtime._tools.sandbox.SandboxSpec`,
the command runs under bubblewrap in its own PID namespace, and every process it
started dies with it.

:class:`ProcessGroups` tracks the groups alive in a run, so that ending the run
can end them (:meth:`ProcessGroups.terminate_all`) and a journal can record them.

Commands and the sandboxes made ahead start through
:func:`~proctor.runtime._tools.spawn.open_child`: in a worker thread, and reaped
by proctor itself through a pidfd.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from pathlib import Path
from typing import Literal

import anyio
import attrs
from anyio.abc import Process

from proctor._errors import ConfigError, ProctorError
from proctor._logging import get_logger
from proctor.runtime._records import ToolResult, ToolStatus
from proctor.runtime._tools.sandbox import (
    SHELL,
    Launch,
    SandboxSpec,
    command_dir,
    command_line,
    launch,
    limit_note,
    prestart,
)
from proctor.runtime._tools.spawn import Child, open_child, owns_children

__all__ = (
    "GroupEnd",
    "GroupInfo",
    "ProcessGroups",
    "end_groups",
    "group_alive",
    "kill_group",
    "pid_alive",
    "run_command",
)

log = get_logger()

GroupEnd = Literal["exited", "terminated", "killed"]
"""
How a process group ended: it was already gone (``exited``), it went away after
SIGTERM (``terminated``) or it needed SIGKILL (``killed``).
"""

# Time a group gets between SIGTERM and SIGKILL when a command's time limit hits.
_TERM_GRACE = 0.5
# Spares kept made ahead, per sandbox and launcher environment. Two: the one made
# as a command starts serves the command after next, so that making it (an exec,
# a sandbox) has a whole step to finish in; with one, back-to-back commands waited.
_SPARES_AHEAD = 2
# Time to read what is left in the pipe once the command's group is gone.
_DRAIN_GRACE = 1.0
# Bound of the shielded cleanup that runs when the caller is cancelled.
_CLEANUP_LIMIT = 10.0
# Time processes get to vanish after SIGKILL (it cannot be caught, but dying takes a moment).
_KILL_WAIT = 3.0
# How often to look whether a signalled group has gone away.
_POLL_INTERVAL = 0.01


def _proc_usable() -> bool:
    # /proc may be absent (not Linux) or belong to another pid namespace.
    return Path(f"/proc/{os.getpid()}/stat").exists()


def _has_running_member(pgid: int) -> bool:
    """Tell whether some member of group ``pgid`` is not a zombie, from /proc."""
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue  # the process went away while we looked
            # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                return True
    return False


def pid_alive(pid: int) -> bool:
    """
    Tell whether process ``pid`` on this machine still runs (a zombie does not).

    Args:
        pid: a process id.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, but belongs to someone else
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            stat = f.read()
    except OSError:
        return True  # no /proc: the signal test is all there is
    return stat[stat.rindex(")") + 2 :].split()[0] not in ("Z", "X")


def group_alive(pgid: int) -> bool:
    """
    Tell whether process group ``pgid`` still has a running member.

    The test is ``os.killpg(pgid, 0)``. Where ``/proc`` is available, a group
    whose members are all zombies counts as gone: they run no code and hold no
    files, they only wait for their parent to collect them, and some container
    init processes never collect orphans.

    Args:
        pgid: a process group id.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, but belongs to someone else
    if _proc_usable():
        return _has_running_member(pgid)
    return True


def _signal_group(pgid: int, signum: int) -> bool:
    """Send ``signum`` to group ``pgid``; return False when the group is gone."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    except PermissionError:
        # Some systems refuse to signal a group whose only members are zombies.
        return False
    return True


def kill_group(pgid: int) -> bool:
    """
    SIGKILL process group ``pgid`` now, without waiting; return whether it was there.

    For a group whose leader was just reaped or must not outlive a ``finally``
    (a check's command); :func:`end_groups` gives groups time to exit first.

    Args:
        pgid: the group's id.
    """
    return _signal_group(pgid, signal.SIGKILL)


async def end_groups(pgids: Sequence[int], grace: float = 2.0) -> dict[int, GroupEnd]:
    """
    End process groups: SIGTERM, then SIGKILL for those still there after ``grace``.

    The one way proctor ends groups it did not just reap: a run's tracked groups
    at its end, and the groups a dead host left behind.

    Args:
        pgids: the groups' ids.
        grace: seconds the groups get to exit after SIGTERM.

    Returns:
        How each ended: ``exited`` (gone before the signal), ``terminated`` or ``killed``.
    """
    ended: dict[int, GroupEnd] = {}
    signalled: list[int] = []
    for pgid in pgids:
        if group_alive(pgid) and _signal_group(pgid, signal.SIGTERM):
            signalled.append(pgid)
        else:
            ended[pgid] = "exited"
    with anyio.move_on_after(grace):
        await _wait_gone(signalled)
    killed = await _kill(signalled)
    for pgid in signalled:
        ended[pgid] = "killed" if pgid in killed else "terminated"
    return ended


async def _wait_gone(pgids: Sequence[int]) -> None:
    """Return once none of ``pgids`` has a running member (callers bound the wait)."""
    # Polling, because nothing signals the end of processes that are not our
    # children (a command's grandchildren), so there is no event to wait on.
    while any(group_alive(pgid) for pgid in pgids):  # noqa: ASYNC110
        await anyio.sleep(_POLL_INTERVAL)


@attrs.frozen
class GroupInfo:
    """
    A live process group of a run.

    Args:
        pgid: its process group id (the id of its leader).
        command: the command that started it.
        started_at: wall-clock time it started (seconds since the epoch).
    """

    pgid: int
    command: str
    started_at: float


@attrs.define(eq=False)
class ProcessGroups:
    """
    The process groups alive in one run.

    :func:`run_command` adds each group it starts and discards it once the group
    is gone, calling ``on_start`` and ``on_end`` around it.

    With ``prestart``, a sandboxed command is handed to a sandbox made ahead
    (:func:`~proctor.runtime._tools.sandbox.prestart`), and the next one is made
    at once: two spares per sandbox and launcher environment (the one made after a
    command serves the command after next), each used for one command only. The
    spares are made by :meth:`keep_spares` when a task runs it (a run does), off
    the command's path; else before the command's call returns.
    Whoever sets ``prestart`` must call :meth:`terminate_all` when the run ends:
    it ends the spares, and none is kept after it.

    Args:
        on_start: awaited with ``(pgid, command)`` once a group has started.
        on_end: awaited with ``(pgid, how)`` once a group is gone, ``how`` being
            ``exited``, ``terminated`` or ``killed``.
        prestart: keep a sandbox made ahead for the next sandboxed command.
    """

    on_start: Callable[[int, str], Awaitable[None]] | None = None
    on_end: Callable[[int, str], Awaitable[None]] | None = None
    prestart: bool = False
    _live: dict[int, GroupInfo] = attrs.field(factory=dict, init=False)
    _spares: dict[Hashable, list[_Spare]] = attrs.field(factory=dict, init=False)
    _wanted: dict[Hashable, tuple[SandboxSpec, Mapping[str, str] | None]] = attrs.field(
        factory=dict, init=False
    )
    _making: dict[Hashable, anyio.Event] = attrs.field(factory=dict, init=False)
    _used: list[Launch] = attrs.field(factory=list, init=False)
    _wake: anyio.Event | None = attrs.field(default=None, init=False)
    _closed: bool = attrs.field(default=False, init=False)

    def add(self, pgid: int, command: str) -> None:
        """
        Track group ``pgid``, started by ``command``.

        Args:
            pgid: the group's id.
            command: the command, for people reading the journal.
        """
        self._live[pgid] = GroupInfo(pgid, command, time.time())

    def discard(self, pgid: int) -> None:
        """
        Stop tracking group ``pgid``; do nothing if it is not tracked.

        Args:
            pgid: the group's id.
        """
        self._live.pop(pgid, None)

    def live(self) -> tuple[GroupInfo, ...]:
        """Return the tracked groups, oldest first."""
        return tuple(self._live.values())

    async def terminate_all(self, grace: float = 2.0) -> list[tuple[int, str]]:
        """
        End every tracked group: SIGTERM, then SIGKILL for those still there after ``grace``.

        The groups are no longer tracked afterwards.

        Args:
            grace: seconds the groups get to exit after SIGTERM.

        Returns:
            ``(pgid, how)`` for each group, ``how`` being ``exited`` (gone before
            the signal), ``terminated`` or ``killed``.
        """
        self._closed = True
        await self.close_spares()
        await self._tidy()
        groups = self.live()
        ended = await end_groups([info.pgid for info in groups], grace)
        for info in groups:
            self.discard(info.pgid)
            log.info("process.group_ended", pgid=info.pgid, how=ended[info.pgid])
        return [(info.pgid, ended[info.pgid]) for info in groups]

    async def close_spares(self) -> None:
        """End the sandboxes made ahead that no command has taken."""
        while self._spares:
            _, spares = self._spares.popitem()
            for spare in spares:
                await _discard(spare.launched, spare.process)

    async def keep_spares(self) -> None:
        """
        Make the spares :meth:`start_sandboxed` asks for, until cancelled.

        Run in a task of the run's (its cancellation is the run's end); while it
        runs, a command does not wait for the next command's sandbox to be made.
        """
        wake = self._wake = anyio.Event()
        if self._wanted:
            wake.set()  # asked for before this task ran (prepare)
        try:
            while True:
                await wake.wait()
                wake = self._wake = anyio.Event()
                while self._wanted and not self._closed:
                    key, (sandbox, marker_env) = self._wanted.popitem()
                    await self._replenish(key, sandbox, marker_env)
                await self._tidy()
        finally:
            self._wake = None

    async def _tidy(self) -> None:
        """
        Remove the private homes of the commands that have ended, in a worker thread;
        the newest homes (one a spare) are kept for the next spares instead, until
        the groups are closed. A spare takes one only if it was left as made
        (:meth:`_empty_home`); one that was not goes once newer ones have come.
        """
        kept = 0
        for used in reversed(self._used.copy()):  # the newest first
            if not self._closed and kept < _SPARES_AHEAD and used.has_home:
                kept += 1
                continue
            # Taken off the list once removed: a cancellation before the thread runs
            # leaves it to the next tidy (terminate_all's at the latest).
            if used.has_home:
                await anyio.to_thread.run_sync(used.remove_home)
            with contextlib.suppress(ValueError):  # a concurrent tidy took it first
                self._used.remove(used)

    def _empty_home(self, sandbox: SandboxSpec) -> str | None:
        """
        A private home an ended command left as it was made, taken for the next
        spare (mode ``off``): no directory made and removed on the disk a command.
        """
        if sandbox.mode != "off":
            return None
        for used in reversed(self._used):
            home = used.take_empty_home()
            if home is not None:
                return home
        return None

    def prepare(self, sandbox: SandboxSpec, marker_env: Mapping[str, str] | None = None) -> None:
        """
        Ask for a spare of ``sandbox`` ahead of the first command (with ``prestart``;
        :meth:`keep_spares` makes it).

        Args:
            sandbox: the sandbox the commands will run in.
            marker_env: the launcher's variables, as the commands will give them.
        """
        if not self.prestart or self._closed:
            return
        self._wanted[_spare_key(sandbox, marker_env)] = (sandbox, marker_env)
        if self._wake is not None:
            self._wake.set()

    async def _replenish(
        self, key: Hashable, sandbox: SandboxSpec, marker_env: Mapping[str, str] | None
    ) -> None:
        if key in self._making:
            return
        while not self._closed and len(self._spares.get(key, ())) < _SPARES_AHEAD:
            # One event a spare: a command waiting for one goes as soon as it is made.
            made = self._making[key] = anyio.Event()
            try:
                with anyio.CancelScope(shield=True):  # a spare half made would have no owner
                    try:
                        spare = await _start_spare(sandbox, marker_env, self._empty_home(sandbox))
                    except (OSError, ProctorError) as exc:
                        log.info("process.prestart_failed", error=str(exc))
                        return
                    spares = self._spares.setdefault(key, [])
                    if self._closed or len(spares) >= _SPARES_AHEAD:
                        await _discard(spare.launched, spare.process)
                    else:
                        spares.append(spare)
            finally:
                del self._making[key]
                made.set()

    async def start_sandboxed(
        self, sandbox: SandboxSpec, marker_env: Mapping[str, str] | None, line: bytes
    ) -> tuple[Launch, Process]:
        """
        Hand the command ``line`` to a sandbox made ahead (waited for while it is
        being made; made now when there is none); return the sandbox and its
        launcher. Its replacement is asked of :meth:`keep_spares` at once; without
        that task, :meth:`replace_spare` makes it once the command has ended.

        Args:
            sandbox: the sandbox.
            marker_env: the launcher's variables.
            line: the command, from :func:`~proctor.runtime._tools.sandbox.command_line`.

        Raises:
            OSError: the launcher could not be started.
            SandboxUnavailableError: bubblewrap cannot be used here.
        """
        key = _spare_key(sandbox, marker_env)
        for attempt in (1, 2):
            making = self._making.get(key)
            if making is not None and not self._spares.get(key):
                # Started before this command came: ready no later than one made now.
                await making.wait()
            spare = None
            spares = self._spares.get(key, [])
            while spares and spare is None:
                spare = spares.pop(0)  # the oldest first
                if not spare.usable(sandbox):
                    await _discard(spare.launched, spare.process)
                    spare = None
            if spare is None:
                spare = await _start_spare(sandbox, marker_env, self._empty_home(sandbox))
            launched, process = spare.launched, spare.process
            assert process.stdin is not None
            try:
                await process.stdin.send(line)
                await process.stdin.aclose()
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                await _discard(launched, process)
                if attempt == 2:
                    raise OSError("the prestarted sandbox ended before its command") from None
                continue
            break
        # Its replacement is made while the command runs (by keep_spares): a spare's
        # exec then shares the host with the command, not with the dispatch's commit
        # (whose thread it made wait for the interpreter), nor with the next step.
        self._ask(key, sandbox, marker_env)
        return launched, process

    def _ask(
        self, key: Hashable, sandbox: SandboxSpec, marker_env: Mapping[str, str] | None
    ) -> bool:
        """Have :meth:`keep_spares` make spares of ``key``; False if it does not run."""
        if self._wake is None or self._closed:
            return False
        self._wanted[key] = (sandbox, marker_env)
        self._wake.set()
        return True

    def leave(self, used: Launch) -> None:
        """
        Take the sandbox a command ran in, released but for its private home, and
        deal with the home off the command's path: passed on to a later spare if
        it was left as made, else removed (by :meth:`_tidy`, at
        :meth:`terminate_all` at the latest); removed now, once the groups are closed.

        Args:
            used: the command's sandbox.
        """
        if self._closed:
            used.remove_home()
        else:
            self._used.append(used)

    async def replace_spare(
        self, sandbox: SandboxSpec, marker_env: Mapping[str, str] | None
    ) -> None:
        """
        Once a command that took a spare has ended: have the spares made up and
        what is left of the used sandboxes removed (:meth:`leave`), by
        :meth:`keep_spares` when it runs, else now.

        Args:
            sandbox: the sandbox.
            marker_env: the launcher's variables.
        """
        key = _spare_key(sandbox, marker_env)
        if self._ask(key, sandbox, marker_env):
            return
        if not self._closed:
            await self._replenish(key, sandbox, marker_env)
        await self._tidy()


def _spare_key(sandbox: SandboxSpec, marker_env: Mapping[str, str] | None) -> Hashable:
    return (sandbox, tuple(sorted((marker_env or {}).items())))


def _identity(directory: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(directory)
    except OSError:
        return None
    return st.st_dev, st.st_ino


@attrs.frozen
class _Spare:
    """A sandbox made ahead: its launcher, and the writable directory it bound."""

    launched: Launch
    process: Process
    bound: tuple[int, int] | None

    def usable(self, sandbox: SandboxSpec) -> bool:
        """Whether it still waits, and binds the directory that is the writable one now."""
        # A Child that has exited is collected by returncode (nothing else reaps it):
        # None means it runs. Another process may be a zombie that /proc tells apart.
        if self.process.returncode is not None or (
            not isinstance(self.process, Child) and not pid_alive(self.process.pid)
        ):
            return False  # ended while it waited (a sweep, a signal)
        return self.bound is not None and self.bound == _identity(sandbox.writable)


async def _start_spare(
    sandbox: SandboxSpec, marker_env: Mapping[str, str] | None, home: str | None = None
) -> _Spare:
    bound = _identity(sandbox.writable)  # before bubblewrap binds it
    # With the sandbox off and children reaped here alone, the spare is its waiting
    # sh, joined to its cgroup and limited from here before it is handed its line.
    outside = owns_children()
    launched = prestart(sandbox, marker_env, outside=outside, home=home)
    try:
        process = await open_child(
            launched.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=launched.cwd,
            env=launched.env,
            admit=launched.admit if outside else None,
        )
    except OSError:
        launched.release()
        raise
    return _Spare(launched, process, bound)


async def _discard(launched: Launch, process: Process) -> None:
    """End a sandbox that ran no command, and give back what it held."""
    with anyio.move_on_after(_CLEANUP_LIMIT, shield=True):
        kill_group(process.pid)
        await process.aclose()
        await launched.wait_empty()
    launched.release()


@attrs.define(eq=False)
class _Capture:
    """The output of a command, bounded: its head and its tail, and how much was dropped."""

    limit: int
    head: bytearray = attrs.field(factory=bytearray)
    tail: bytearray = attrs.field(factory=bytearray)
    total: int = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.limit // 2 - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            excess = len(self.tail) - (self.limit - self.limit // 2)
            if excess > 0:
                del self.tail[:excess]

    def text(self) -> str:
        if self.total <= self.limit:
            return bytes(self.head + self.tail).decode("utf-8", errors="replace")
        omitted = self.total - len(self.head) - len(self.tail)
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        return f"{head}\n[... {omitted} bytes of output omitted ...]\n{tail}"


async def _drain(process: Process, capture: _Capture, done: anyio.Event | None = None) -> None:
    """Read the command's output into ``capture`` until the pipe ends."""
    try:
        if process.stdout is not None:
            async for chunk in process.stdout:
                capture.feed(chunk)
    finally:
        if done is not None:
            done.set()


async def _kill(pgids: Sequence[int]) -> list[int]:
    """SIGKILL the groups that are still alive, wait a moment for them to vanish, return them."""
    killed = [pgid for pgid in pgids if group_alive(pgid) and kill_group(pgid)]
    if killed:
        with anyio.move_on_after(_KILL_WAIT):
            await _wait_gone(killed)
    return killed


async def _kill_leftovers(pgid: int, command: str) -> GroupEnd:
    """Kill what an exited command left running in its group."""
    # The leader has exited, but its id cannot be handed out again while its
    # group still has members, so the group id still names this command's group.
    if await _kill([pgid]):
        log.info("process.leftovers_killed", pgid=pgid, command=command)
        return "killed"
    return "exited"


async def _stop_group(process: Process, pgid: int, grace: float) -> GroupEnd:
    """SIGTERM the group, SIGKILL it after ``grace``, and reap its leader."""
    how: GroupEnd = "exited"
    if _signal_group(pgid, signal.SIGTERM):
        how = "terminated"
        with anyio.move_on_after(grace):
            await process.wait()
            await _wait_gone([pgid])
        if await _kill([pgid]):
            how = "killed"
    await process.wait()
    return how


def _argv(cmd: str | Sequence[str]) -> tuple[list[str], str]:
    if isinstance(cmd, str):
        return [SHELL, "-c", cmd], cmd
    argv = list(cmd)
    return argv, shlex.join(argv)


def _with_note(text: str, note: str) -> str:
    if text and not text.endswith("\n"):
        text += "\n"
    return f"{text}[{note}]"


async def run_command(
    cmd: str | Sequence[str],
    *,
    cwd: Path,
    time_limit: float,
    env: Mapping[str, str] | None = None,
    groups: ProcessGroups | None = None,
    output_limit: int = 64_000,
    sandbox: SandboxSpec | None = None,
) -> ToolResult:
    """
    Run ``cmd`` in its own process group and return its merged output.

    A string runs through ``/bin/sh -c`` (in a run's prestarted sandbox, by the
    waiting ``/bin/sh -c`` itself, whose error messages then name ``eval``: see
    docs/security.md); a sequence runs directly. Standard input
    is ``/dev/null``; standard output and error share one pipe, so their lines
    keep their order. The output is read while the command runs, so a command
    that writes much never blocks on a full pipe.

    When the command exits, anything it left running in its group is killed.
    When ``time_limit`` is reached, the group gets SIGTERM, then SIGKILL half a
    second later, and the result is ``uncertain``. When the caller is cancelled,
    the group is ended the same way before the cancellation propagates.

    Args:
        cmd: a shell command line, or a program and its arguments.
        cwd: the working directory.
        time_limit: seconds the command may run (a tool setting; ``math.inf``
            for none).
        env: the command's whole environment; None inherits this process's. With
            a sandbox, these variables mark only the launcher (a successor finds
            what a dead host left by them); the command's own environment is the
            sandbox's allowlist.
        groups: where to track the command's process group.
        output_limit: bytes of output kept; beyond it, the first and last halves
            are kept around a marker saying how much was left out.
        sandbox: run the command in this sandbox (``cwd`` is then the working
            directory as seen inside it); None runs it on the host as it is.

    Returns:
        ``ok`` for exit code 0; ``error`` with the exit code otherwise (negative:
        the number of the signal that killed it); ``uncertain`` when the time
        limit was reached; ``error`` when the command could not be started.

    Raises:
        ConfigError: ``time_limit`` is not positive or ``output_limit`` is negative.
        SandboxUnavailableError: the sandbox's mode is ``auto`` and bubblewrap
            cannot be used here.
    """
    # Kept whole: starting, draining, the time limit and ending one process group are one state
    # machine over one process.
    if not time_limit > 0:
        raise ConfigError(f"time_limit must be a positive number of seconds, not {time_limit!r}")
    if output_limit < 0:
        raise ConfigError(f"output_limit must be a number of bytes >= 0, not {output_limit!r}")
    argv, label = _argv(cmd)
    started = time.monotonic()
    if not argv:
        return ToolResult(ToolStatus.ERROR, "empty command: give a program to run")
    launched: Launch | None = None
    spawn_cwd: Path = cwd
    # A run's commands go to a sandbox made ahead (ProcessGroups.prestart), with the
    # sandbox off too: its launcher then runs on the host, set up as launch() sets it.
    line = None
    if sandbox is not None and groups is not None and groups.prestart:
        line = command_line(argv, command_dir(sandbox, cwd))
    if sandbox is not None and line is None:
        launched = launch(argv, sandbox, cwd, marker_env=env)
        argv, env, spawn_cwd = launched.argv, launched.env, launched.cwd
    try:
        # Shielded: a start cancelled halfway would leave a child that nobody
        # holds a handle to, and so nobody ends. Starting a process is quick.
        with anyio.CancelScope(shield=True):
            if line is not None and groups is not None and sandbox is not None:
                launched, process = await groups.start_sandboxed(sandbox, env, line)
            else:
                process = await open_child(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    cwd=spawn_cwd,
                    env=env,
                )
    except OSError as exc:
        if launched is not None:
            launched.release()
        return ToolResult(
            ToolStatus.ERROR,
            f"could not start {label!r}: {exc.strerror or exc}",
            duration=time.monotonic() - started,
        )
    pgid = process.pid  # a session leader leads its own group
    forks_refused = False
    capture = _Capture(output_limit)
    how: GroupEnd | None = None
    leader_exited = False
    drained = anyio.Event()
    log.debug("process.started", pgid=pgid, command=label)
    try:
        if groups is not None:
            groups.add(pgid, label)
            if groups.on_start is not None:
                await groups.on_start(pgid, label)
        with anyio.move_on_after(time_limit) as limit:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_drain, process, capture, drained)
                await process.wait()
                leader_exited = True
                how = await _kill_leftovers(pgid, label)
                # The group is gone, so the pipe reaches its end unless a
                # process that left the group still holds it: do not wait on that.
                with anyio.move_on_after(_DRAIN_GRACE):
                    await drained.wait()
                if not drained.is_set():
                    tg.cancel_scope.cancel()
    finally:
        with anyio.move_on_after(_CLEANUP_LIMIT, shield=True):
            if how is None:
                how = await _stop_group(process, pgid, _TERM_GRACE)
                with anyio.move_on_after(_DRAIN_GRACE):
                    await _drain(process, capture)
            await process.aclose()
            if launched is not None:
                # Nothing of the sandbox outlives the call: wait for its namespace to go.
                await launched.wait_empty()
            log.debug("process.ended", pgid=pgid, how=how, returncode=process.returncode)
        if groups is not None:
            # In a scope of its own: a cleanup that ran out of time (a loaded host)
            # must not lose the journal's record of how the group ended.
            with anyio.move_on_after(_CLEANUP_LIMIT, shield=True):
                groups.discard(pgid)
                if groups.on_end is not None:
                    await groups.on_end(pgid, how if how is not None else "killed")
        if launched is not None:
            # Given back however the call ends, a cancellation too. A prestarted
            # sandbox's home is left to the groups, which remove it off this path.
            forks_refused = launched.release(keep_home=groups is not None and line is not None)
            if groups is not None and line is not None:
                groups.leave(launched)
    duration = time.monotonic() - started
    if line is not None and groups is not None and sandbox is not None:
        # Without keep_spares, after the command, not while it runs: making a sandbox
        # takes the event loop for a millisecond or two, which a short command would
        # wait for. With it, this only has the used home removed off the path.
        await groups.replace_spare(sandbox, env)
    output = capture.text()
    if limit.cancelled_caught and not leader_exited:
        log.info("process.time_limit", pgid=pgid, command=label, time_limit=time_limit)
        note = f"time limit of {time_limit:g} s reached; process group killed"
        return ToolResult(ToolStatus.UNCERTAIN, _with_note(output, note), None, duration)
    code = process.returncode
    if code is None:  # the cleanup's bound ran out: the process would not die
        note = "the command could not be stopped; its process group may still run"
        return ToolResult(ToolStatus.UNCERTAIN, _with_note(output, note), None, duration)
    reached = limit_note(code, launched is not None and launched.sandboxed, forks_refused)
    if reached is not None:
        output = _with_note(output, reached)
    elif code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        output = _with_note(output, f"killed by {name}")
    return ToolResult(ToolStatus.OK if code == 0 else ToolStatus.ERROR, output, code, duration)
