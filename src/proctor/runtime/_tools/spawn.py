"""
Child processes that proctor reaps itself, through a pidfd.

``anyio.open_process`` on asyncio (Python 3.11) starts the child on the event
loop, which stays blocked until the child has exec'd (``vfork``), then starts a
thread that waits for that one child and waits until the thread runs. On a
loaded host each of these takes milliseconds, all of them the loop's.
:func:`open_child` starts the child in a worker thread instead (the loop goes
on), reads and writes its pipes without blocking, and learns of its exit from a
pidfd that the loop polls: no thread a child.

Nothing else reaps the child, so until :meth:`Child.wait` has collected it its
pid cannot be given to another process: what is done to the pid from outside
(``resource.prlimit``, writing it into a cgroup) reaches the child or fails,
never a stranger.

Where pidfds are missing (not Linux, a kernel before 5.3, a seccomp filter that
refuses ``pidfd_open``), :func:`open_child` falls back to ``anyio.open_process``;
:func:`owns_children` says which.
"""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from signal import SIGKILL, SIGTERM, Signals, pidfd_send_signal
from typing import IO, Any

import anyio
import anyio.lowlevel
from anyio.abc import ByteReceiveStream, ByteSendStream, Process

from proctor._logging import get_logger

__all__ = ("Child", "open_child", "owns_children")

log = get_logger()

# The exit code of a child whose status was collected by someone else (a process
# that ignores SIGCHLD has its children reaped by the kernel): not a success.
_STATUS_LOST = 255


@functools.cache
def owns_children() -> bool:
    """Tell whether :func:`open_child` reaps its children itself (pidfds work here)."""
    try:
        fd = os.pidfd_open(os.getpid())
    except (AttributeError, OSError):
        return False
    os.close(fd)
    return True


class _PipeEnd:
    """One end of a child's pipe, made non-blocking; closing it wakes its waiters."""

    def __init__(self, file: IO[bytes]) -> None:
        self._file = file
        self._fd = file.fileno()
        os.set_blocking(self._fd, False)

    def close(self) -> None:
        if not self._file.closed:
            anyio.notify_closing(self._fd)
            self._file.close()

    async def aclose(self) -> None:
        self.close()
        await anyio.lowlevel.checkpoint()


class _PipeReceive(_PipeEnd, ByteReceiveStream):
    """The reading end of a child's pipe, read without blocking the loop."""

    async def receive(self, max_bytes: int = 65536) -> bytes:
        while True:
            if self._file.closed:
                raise anyio.ClosedResourceError
            await anyio.lowlevel.checkpoint_if_cancelled()
            try:
                data = os.read(self._fd, max_bytes)
            except BlockingIOError:
                await anyio.wait_readable(self._fd)
                continue
            # What was read is returned: no cancellation may come between.
            await anyio.lowlevel.cancel_shielded_checkpoint()
            if not data:
                raise anyio.EndOfStream
            return data


class _PipeSend(_PipeEnd, ByteSendStream):
    """The writing end of a child's pipe, written without blocking the loop."""

    async def send(self, item: bytes) -> None:
        view = memoryview(item)
        while True:
            if self._file.closed:
                raise anyio.ClosedResourceError
            await anyio.lowlevel.checkpoint_if_cancelled()
            try:
                view = view[os.write(self._fd, view) :]
            except BlockingIOError:
                await anyio.wait_writable(self._fd)
                continue
            except BrokenPipeError as exc:
                raise anyio.BrokenResourceError from exc
            if not view:
                await anyio.lowlevel.cancel_shielded_checkpoint()
                return


class Child(Process):
    """
    A child process started by :func:`open_child`, reaped by proctor alone.

    Its exit is waited for on a pidfd; signals go through the pidfd too, so they
    never reach a process that was given its pid later.
    """

    def __init__(self, popen: subprocess.Popen[bytes], pidfd: int) -> None:
        self._popen = popen
        self._pidfd: int | None = pidfd
        self._code: int | None = None
        self._watching: anyio.Event | None = None
        self._stdin = _PipeSend(popen.stdin) if popen.stdin is not None else None
        self._stdout = _PipeReceive(popen.stdout) if popen.stdout is not None else None
        self._stderr = _PipeReceive(popen.stderr) if popen.stderr is not None else None

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._poll()

    @property
    def stdin(self) -> ByteSendStream | None:
        return self._stdin

    @property
    def stdout(self) -> ByteReceiveStream | None:
        return self._stdout

    @property
    def stderr(self) -> ByteReceiveStream | None:
        return self._stderr

    def _poll(self) -> int | None:
        """Collect the child's status if it has exited; return its exit code or None."""
        if self._code is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                log.warning("process.status_lost", pid=self.pid)
                self._exited(_STATUS_LOST)
            else:
                if pid:
                    self._exited(os.waitstatus_to_exitcode(status))
        return self._code

    def _exited(self, code: int) -> None:
        self._code = code
        self._popen.returncode = code  # so that Popen does not wait for it again

    async def wait(self) -> int:
        while (code := self._poll()) is None:
            watching = self._watching
            if watching is not None:  # another task waits on the pidfd already
                await watching.wait()
                continue
            assert self._pidfd is not None  # closed only once the status is collected
            watching = self._watching = anyio.Event()
            try:
                await anyio.wait_readable(self._pidfd)
            except anyio.ClosedResourceError:
                pass  # its status is collected by whoever closed it: look again
            finally:
                self._watching = None
                watching.set()
        await anyio.lowlevel.checkpoint()
        return code

    def send_signal(self, signal: Signals) -> None:
        if self._pidfd is None or self._poll() is not None:
            return  # collected: the pid may name another process now
        with contextlib.suppress(ProcessLookupError):  # exited, not yet collected
            pidfd_send_signal(self._pidfd, signal)

    def terminate(self) -> None:
        self.send_signal(SIGTERM)

    def kill(self) -> None:
        self.send_signal(SIGKILL)

    async def aclose(self) -> None:
        """Close the pipes and wait for the child (killed if this is cancelled)."""
        for stream in (self._stdin, self._stdout, self._stderr):
            if stream is not None:
                stream.close()
        try:
            await self.wait()
        except BaseException:
            self.kill()
            with anyio.CancelScope(shield=True):
                await self.wait()
            raise
        finally:
            if self._pidfd is not None and self._code is not None:
                fd, self._pidfd = self._pidfd, None
                anyio.notify_closing(fd)
                os.close(fd)


def _spawn(
    argv: Sequence[str],
    stdin: int,
    stdout: int,
    stderr: int,
    cwd: Path,
    env: Mapping[str, str] | None,
    start_new_session: bool,
    admit: Callable[[int], None] | None,
) -> Child:
    popen = subprocess.Popen(
        list(argv),
        bufsize=0,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        cwd=cwd,
        env=env,
        start_new_session=start_new_session,
    )
    pidfd: int | None = None
    try:
        pidfd = os.pidfd_open(popen.pid)
        if admit is not None:
            admit(popen.pid)
    except BaseException:
        popen.kill()
        popen.wait()
        for pipe in (popen.stdin, popen.stdout, popen.stderr):
            if pipe is not None:
                pipe.close()
        if pidfd is not None:
            os.close(pidfd)
        raise
    return Child(popen, pidfd)


async def open_child(
    argv: Sequence[str],
    *,
    stdin: int,
    stdout: int,
    stderr: int,
    cwd: Path,
    env: Mapping[str, str] | None,
    start_new_session: bool = True,
    admit: Callable[[int], None] | None = None,
) -> Process:
    """
    Start ``argv`` as a child process; like ``anyio.open_process``, with these arguments.

    Started in a worker thread: the event loop is not held while the child forks
    and execs. Where :func:`owns_children` is false, ``anyio.open_process`` starts it.

    Args:
        argv: the program and its arguments.
        stdin: ``subprocess.PIPE``, ``subprocess.DEVNULL`` or a file descriptor.
        stdout: likewise.
        stderr: likewise, or ``subprocess.STDOUT``.
        cwd: the working directory.
        env: the whole environment; None inherits this process's.
        start_new_session: give the child a session (and process group) of its own.
        admit: called with the child's pid before this returns, in the worker
            thread, while nothing can have reaped it (a cgroup to join, limits to
            set); when it raises, the child is killed and collected and the error
            propagates. Only where :func:`owns_children` is true.

    Raises:
        OSError: the program could not be started.
        ValueError: ``admit`` where :func:`owns_children` is false.
    """
    if not owns_children():
        if admit is not None:
            raise ValueError("admit needs children this process alone reaps (owns_children())")
        return await anyio.open_process(
            argv,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            cwd=cwd,
            env=env,
            start_new_session=start_new_session,
        )
    spawn: Callable[[], Any] = functools.partial(
        _spawn, argv, stdin, stdout, stderr, cwd, env, start_new_session, admit
    )
    child: Child = await anyio.to_thread.run_sync(spawn)
    return child
