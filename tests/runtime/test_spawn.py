"""
Children proctor reaps itself: pipes, exit codes, signals, and what is done to a
child before it runs.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process
from structlog.testing import capture_logs

from proctor.runtime._tools import spawn
from proctor.runtime._tools.spawn import Child, open_child, owns_children

needs_pidfd = pytest.mark.skipif(not owns_children(), reason="pidfds are not usable here")


@pytest.fixture(params=["pidfd", "anyio"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test both ways: children reaped here, and anyio's fallback."""
    if request.param == "pidfd" and not owns_children():
        pytest.skip("pidfds are not usable here")
    if request.param == "anyio":
        monkeypatch.setattr(spawn, "owns_children", lambda: False)
    return str(request.param)


async def start(argv: list[str], tmp_path: Path, **kw: int) -> Process:
    return await open_child(
        argv,
        stdin=kw.get("stdin", subprocess.DEVNULL),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"], "X": "1"},
    )


async def output(process: Process) -> bytes:
    assert process.stdout is not None
    chunks = [chunk async for chunk in process.stdout]
    return b"".join(chunks)


def collected(pid: int) -> bool:
    """Whether child ``pid`` was waited for already (there is nothing left to wait for)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


@pytest.fixture
async def sleeper(tmp_path: Path) -> AsyncIterator[Process]:
    process = await start(["sleep", "30"], tmp_path)
    try:
        yield process
    finally:
        process.kill()
        with anyio.fail_after(5):
            await process.aclose()


async def test_output_exit_code_cwd_and_environment(tmp_path: Path, way: str) -> None:
    process = await start(["sh", "-c", "pwd; echo $X; echo err >&2; exit 3"], tmp_path)
    with anyio.fail_after(10):
        out = await output(process)
        assert await process.wait() == 3
        await process.aclose()
    assert out.decode().split() == [str(tmp_path), "1", "err"]
    assert process.returncode == 3
    assert isinstance(process, Child) is (way == "pidfd")


async def test_a_large_output_arrives_whole(tmp_path: Path, way: str) -> None:
    process = await start(["sh", "-c", "head -c 3000000 /dev/zero"], tmp_path)
    with anyio.fail_after(10):
        assert len(await output(process)) == 3_000_000
        await process.aclose()
    assert process.returncode == 0


async def test_standard_input_is_a_pipe(tmp_path: Path, way: str) -> None:
    process = await start(["sh", "-c", "read -r a; echo got $a"], tmp_path, stdin=subprocess.PIPE)
    assert process.stdin is not None
    with anyio.fail_after(10):
        await process.stdin.send(b"word\n")
        await process.stdin.aclose()
        assert await output(process) == b"got word\n"
        await process.aclose()


async def test_writing_to_a_child_that_is_gone_is_a_broken_resource(
    tmp_path: Path, way: str
) -> None:
    process = await start(["true"], tmp_path, stdin=subprocess.PIPE)
    assert process.stdin is not None
    with anyio.fail_after(10):
        await process.wait()
        with pytest.raises(anyio.BrokenResourceError):
            await process.stdin.send(b"x" * 200_000)
        await process.aclose()


async def test_a_signal_is_a_negative_exit_code(sleeper: Process, way: str) -> None:
    sleeper.terminate()
    with anyio.fail_after(10):
        assert await sleeper.wait() == -signal.SIGTERM
    sleeper.kill()  # collected: nothing is signalled any more
    assert sleeper.returncode == -signal.SIGTERM


@needs_pidfd
async def test_two_tasks_can_wait(sleeper: Process) -> None:
    codes: list[int] = []

    async def wait() -> None:
        codes.append(await sleeper.wait())

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            tg.start_soon(wait)
            await anyio.wait_all_tasks_blocked()
            assert sleeper.returncode is None
            sleeper.kill()
    assert codes == [-signal.SIGKILL, -signal.SIGKILL]


@needs_pidfd
async def test_closing_a_cancelled_wait_kills_the_child(sleeper: Process) -> None:
    with anyio.move_on_after(0):  # already cancelled: aclose kills, then collects
        await sleeper.aclose()
    assert sleeper.returncode == -signal.SIGKILL


@needs_pidfd
async def test_a_status_collected_elsewhere_is_not_a_success(tmp_path: Path) -> None:
    process = await start(["true"], tmp_path)
    # Collected behind its back, as in a process that ignores SIGCHLD.
    await anyio.to_thread.run_sync(os.waitpid, process.pid, 0)
    with capture_logs() as logs:
        with anyio.fail_after(10):
            await process.aclose()
    assert process.returncode == 255
    assert [entry["event"] for entry in logs] == ["process.status_lost"]


@needs_pidfd
async def test_admit_reaches_the_child_before_it_runs(tmp_path: Path) -> None:
    seen: list[int] = []

    def admit(pid: int) -> None:
        seen.append(pid)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (64, 64))

    process = await open_child(
        ["sh", "-c", "read -r _; ulimit -n; ulimit -Hn"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
        env=None,
        admit=admit,
    )
    assert seen == [process.pid]
    assert process.stdin is not None
    with anyio.fail_after(10):
        await process.stdin.send(b"go\n")
        assert (await output(process)).split() == [b"64", b"64"]
        await process.aclose()


@needs_pidfd
async def test_a_child_admit_refused_is_gone(tmp_path: Path) -> None:
    pids: list[int] = []

    def admit(pid: int) -> None:
        pids.append(pid)
        raise PermissionError("refused")

    with pytest.raises(PermissionError, match="refused"):
        await open_child(
            ["sleep", "30"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            env=None,
            admit=admit,
        )
    assert collected(pids[0])


async def test_admit_needs_children_reaped_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spawn, "owns_children", lambda: False)
    with pytest.raises(ValueError, match="owns_children"):
        await open_child(
            ["true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=tmp_path,
            env=None,
            admit=lambda pid: None,
        )


async def test_a_missing_program_is_an_os_error(tmp_path: Path, way: str) -> None:
    with pytest.raises(FileNotFoundError):
        await start([str(tmp_path / "no-such-program")], tmp_path)
