from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from proctor._errors import ConfigError
from proctor.runtime._records import ToolResult, ToolStatus
from proctor.runtime._tools.process import GroupInfo, ProcessGroups, group_alive, run_command


def running(pid: int) -> bool:
    """Tell whether process ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:  # pragma: no cover - no /proc here
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat[stat.rindex(")") + 2] not in "ZX"


class Recorder:
    """The callbacks of a ProcessGroups, recorded."""

    def __init__(self) -> None:
        self.starts: list[tuple[int, str]] = []
        self.ends: list[tuple[int, str]] = []
        self.started = anyio.Event()

    async def on_start(self, pgid: int, command: str) -> None:
        self.starts.append((pgid, command))
        self.started.set()

    async def on_end(self, pgid: int, how: str) -> None:
        self.ends.append((pgid, how))

    def groups(self) -> ProcessGroups:
        return ProcessGroups(on_start=self.on_start, on_end=self.on_end)


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


async def read_fifo(path: Path) -> str:
    """Wait for a command to write a line into ``path``; it blocks until we read."""
    with anyio.fail_after(5):
        return await anyio.to_thread.run_sync(path.read_text, abandon_on_cancel=True)


async def run(cmd: str | list[str], cwd: Path, **kwargs: Any) -> ToolResult:
    kwargs.setdefault("time_limit", 30)
    with anyio.fail_after(20):
        return await run_command(cmd, cwd=cwd, **kwargs)


async def test_exit_zero_is_ok_with_merged_output(tmp_path: Path) -> None:
    result = await run("echo out; echo err >&2; echo out2", tmp_path)
    assert result.status is ToolStatus.OK
    assert result.exit_code == 0
    assert result.output == "out\nerr\nout2\n"
    assert result.duration > 0


async def test_nonzero_exit_is_an_error(tmp_path: Path) -> None:
    result = await run("echo bad; exit 3", tmp_path)
    assert result.status is ToolStatus.ERROR
    assert result.exit_code == 3
    assert result.output == "bad\n"


async def test_a_sequence_runs_without_a_shell(tmp_path: Path) -> None:
    result = await run(["printf", "%s|", "a b", "$HOME"], tmp_path)
    assert result.output == "a b|$HOME|"


async def test_a_missing_program_is_an_error(tmp_path: Path) -> None:
    result = await run(["/no/such/program"], tmp_path)
    assert result.status is ToolStatus.ERROR
    assert "could not start" in result.output
    empty = await run([], tmp_path)
    assert empty.status is ToolStatus.ERROR


async def test_stdin_is_dev_null(tmp_path: Path) -> None:
    result = await run("cat", tmp_path)
    assert result.status is ToolStatus.OK
    assert result.output == ""


async def test_cwd_and_env(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "GREETING": "hello"}
    result = await run('pwd; echo "$GREETING"', tmp_path, env=env)
    assert result.output.splitlines() == [str(tmp_path), "hello"]


async def test_output_is_decoded_with_replacement(tmp_path: Path) -> None:
    result = await run(r"printf '\377ok'", tmp_path)
    assert result.output == "\ufffdok"


async def test_chatty_output_is_truncated_keeping_head_and_tail(tmp_path: Path) -> None:
    # 200 kB is well past a pipe's buffer: the command only ends if we keep reading.
    cmd = r"printf START; head -c 200000 /dev/zero | tr '\0' a; printf END"
    result = await run(cmd, tmp_path, output_limit=1000)
    assert result.status is ToolStatus.OK
    assert result.output.startswith("START" + "a" * 495 + "\n[... 199008 bytes")
    assert result.output.endswith("]\n" + "a" * 497 + "END")
    assert "bytes of output omitted" in result.output


async def test_output_within_the_limit_is_whole(tmp_path: Path) -> None:
    result = await run("printf 0123456789", tmp_path, output_limit=10)
    assert result.output == "0123456789"


async def test_death_by_signal_is_an_error_that_says_so(tmp_path: Path) -> None:
    result = await run("kill -9 $$", tmp_path)
    assert result.status is ToolStatus.ERROR
    assert result.exit_code == -9
    assert "killed by SIGKILL" in result.output


async def test_time_limit_kills_the_group_and_is_uncertain(tmp_path: Path) -> None:
    rec = Recorder()
    groups = rec.groups()
    result = await run("sleep 100 & echo $!; sleep 100", tmp_path, time_limit=0.3, groups=groups)
    assert result.status is ToolStatus.UNCERTAIN
    assert result.exit_code is None
    assert result.output.endswith("[time limit of 0.3 s reached; process group killed]")
    grandchild = int(result.output.splitlines()[0])
    assert not running(grandchild)
    [(pgid, command)] = rec.starts
    assert command == "sleep 100 & echo $!; sleep 100"
    assert not group_alive(pgid)
    assert rec.ends == [(pgid, "terminated")]
    assert groups.live() == ()


async def test_time_limit_escalates_to_sigkill(tmp_path: Path) -> None:
    # An ignored SIGTERM is inherited by the children, so only SIGKILL ends them.
    rec = Recorder()
    result = await run(
        "trap '' TERM; sleep 100 & echo $!; sleep 100",
        tmp_path,
        time_limit=0.3,
        groups=rec.groups(),
    )
    assert result.status is ToolStatus.UNCERTAIN
    assert not running(int(result.output.splitlines()[0]))
    [(pgid, how)] = rec.ends
    assert how == "killed"
    assert not group_alive(pgid)


async def test_background_children_are_killed_after_a_normal_exit(tmp_path: Path) -> None:
    rec = Recorder()
    result = await run("sleep 100 & echo $!", tmp_path, groups=rec.groups())
    assert result.status is ToolStatus.OK
    assert not running(int(result.output))
    [(pgid, how)] = rec.ends
    assert how == "killed"
    assert not group_alive(pgid)


async def test_a_clean_exit_reports_exited(tmp_path: Path) -> None:
    rec = Recorder()
    await run("true", tmp_path, groups=rec.groups())
    assert [how for _, how in rec.ends] == ["exited"]


async def test_cancelling_the_caller_kills_the_group(tmp_path: Path, fifo: Path) -> None:
    rec = Recorder()
    groups = rec.groups()
    outcome: list[str] = []

    async def caller() -> None:
        try:
            await run_command(
                f"sleep 100 & echo $! > {fifo}; wait", cwd=tmp_path, time_limit=60, groups=groups
            )
        except anyio.get_cancelled_exc_class():
            outcome.append("cancelled")
            raise
        outcome.append("returned")  # pragma: no cover - a failure

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(caller)
            grandchild = int(await read_fifo(fifo))
            await rec.started.wait()
            assert running(grandchild)
            tg.cancel_scope.cancel()
    assert outcome == ["cancelled"]
    assert not running(grandchild)
    [(pgid, _)] = rec.starts
    assert not group_alive(pgid)
    assert rec.ends == [(pgid, "terminated")]
    assert groups.live() == ()


async def test_terminate_all_ends_a_live_group(tmp_path: Path, fifo: Path) -> None:
    rec = Recorder()
    groups = rec.groups()
    results: list[ToolResult] = []

    async def caller() -> None:
        results.append(
            await run_command(
                f"sleep 100 & echo $! > {fifo}; wait", cwd=tmp_path, time_limit=60, groups=groups
            )
        )

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(caller)
            grandchild = int(await read_fifo(fifo))
            await rec.started.wait()
            [info] = groups.live()
            assert isinstance(info, GroupInfo)
            assert group_alive(info.pgid)
            assert await groups.terminate_all() == [(info.pgid, "terminated")]
    assert not group_alive(info.pgid)
    assert not running(grandchild)
    assert groups.live() == ()
    [result] = results
    assert result.status is ToolStatus.ERROR
    assert result.exit_code == -15
    assert "killed by SIGTERM" in result.output


async def test_terminate_all_kills_a_group_that_ignores_sigterm(tmp_path: Path, fifo: Path) -> None:
    rec = Recorder()
    groups = rec.groups()
    results: list[ToolResult] = []

    async def caller() -> None:
        cmd = f"trap '' TERM; sleep 100 & echo $! > {fifo}; wait"
        results.append(await run_command(cmd, cwd=tmp_path, time_limit=60, groups=groups))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(caller)
            grandchild = int(await read_fifo(fifo))
            await rec.started.wait()
            [(pgid, _)] = rec.starts
            assert await groups.terminate_all(grace=0.1) == [(pgid, "killed")]
            assert not group_alive(pgid)
            assert not running(grandchild)
            assert groups.live() == ()
    [result] = results
    assert result.exit_code == -9


async def test_terminate_all_reports_groups_already_gone(tmp_path: Path) -> None:
    rec = Recorder()
    await run("true", tmp_path, groups=rec.groups())
    [(pgid, _)] = rec.starts
    groups = ProcessGroups()
    groups.add(pgid, "true")
    assert await groups.terminate_all() == [(pgid, "exited")]
    assert groups.live() == ()


def test_process_groups_tracking() -> None:
    groups = ProcessGroups()
    groups.add(10, "a")
    groups.add(11, "b")
    assert [(g.pgid, g.command) for g in groups.live()] == [(10, "a"), (11, "b")]
    assert all(g.started_at > 0 for g in groups.live())
    groups.discard(10)
    groups.discard(12)
    assert [g.pgid for g in groups.live()] == [11]


async def test_group_alive(tmp_path: Path) -> None:
    assert group_alive(os.getpgrp())
    rec = Recorder()
    await run("true", tmp_path, groups=rec.groups())
    [(pgid, _)] = rec.starts
    assert not group_alive(pgid)


@pytest.mark.parametrize("limit", [0, -1, float("nan")])
async def test_time_limit_must_be_positive(tmp_path: Path, limit: float) -> None:
    with pytest.raises(ConfigError, match="time_limit"):
        await run_command("true", cwd=tmp_path, time_limit=limit)


async def test_output_limit_must_not_be_negative(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="output_limit"):
        await run_command("true", cwd=tmp_path, time_limit=5, output_limit=-1)
