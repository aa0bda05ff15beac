"""
The SQLite journal's inline connection: ordinary commits made in the event
loop's thread when the file's write lock is free, the writer thread otherwise;
durable commits inline too while the disk syncs fast; no inline commit starts
the WAL over; the WAL still checkpointed.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.runtime.test_journal import TASK, dispatch, new_run, step

from proctor.runtime._journal import Journal, sqlite_io
from proctor.runtime._journal import sqlite as journal_sqlite
from proctor.runtime._journal.sqlite_io import Inline, write_inline

pytestmark = pytest.mark.anyio


def count_inline(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record whether each inline attempt wrote (True) or found the file busy."""
    attempts: list[bool] = []

    def counted(*args: Any) -> tuple[bool, Any]:
        done, value = write_inline(*args)
        attempts.append(done)
        return done, value

    monkeypatch.setattr(sqlite_io, "write_inline", counted)
    return attempts


async def opened(path: Path, synchronous: Any = "NORMAL") -> Journal:
    journal = await Journal.open(path, synchronous=synchronous)
    await journal.put_task(TASK, "goal", {"kind": "build"}, "c1")
    return journal


def test_write_inline_writes_nothing_while_another_connection_holds_the_lock(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    with sqlite3.connect(path, isolation_level=None) as setup:
        setup.execute("PRAGMA journal_mode = WAL")
        setup.execute("CREATE TABLE t (x)")
    opened = Inline.open(str(path), "NORMAL")
    assert opened is not None
    inline = opened.conn
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:

        def body(conn: sqlite3.Connection) -> int:
            return conn.execute("INSERT INTO t VALUES (1)").rowcount

        assert write_inline([], [], body, inline) == (False, None)
        assert not inline.in_transaction
    finally:
        holder.rollback()
    assert write_inline([], [], body, inline) == (True, 1)
    assert holder.execute("SELECT x FROM t").fetchall() == [(1,)]
    holder.close()
    opened.close()


async def test_a_step_waits_in_the_writer_thread_for_another_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "j.db"
    attempts = count_inline(monkeypatch)
    in_thread = sqlite_io.in_thread
    handed: anyio.Event | None = None

    async def handing(db: Any, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        if handed is not None:
            handed.set()
        return await in_thread(db, fn)

    monkeypatch.setattr(journal_sqlite, "in_thread", handing)
    async with await opened(path) as journal:
        epoch = await new_run(journal, "run-a")
        for n in (1, 2):
            await journal.append_step("run-a", epoch, step("run-a", n))
        assert attempts == [True]
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")
        handed = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(journal.append_step, "run-a", epoch, step("run-a", 3))
            await handed.wait()
            # The inline attempt found the file busy and wrote nothing; the
            # writer thread waits for the lock, which is given up now.
            assert attempts[-1] is False
            holder.commit()
        holder.close()
        assert [s["step"] for s in await journal.steps("run-a")] == [1, 2, 3]


async def test_a_durable_commit_goes_inline_at_full_until_a_sync_is_slow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts = count_inline(monkeypatch)
    async with await opened(tmp_path / "normal.db") as journal:
        epoch = await new_run(journal, "run-a")
        for n in (1, 2):
            await journal.append_step("run-a", epoch, step("run-a", n))
        assert attempts == [True]
        assert journal._inline is not None
        said: list[str] = []
        journal._inline.conn.set_trace_callback(said.append)
        await dispatch(journal, "run-a", epoch, "k1")
        assert attempts == [True, True]
        # Committed at FULL (it syncs), the connection's own level back after it.
        assert said[0] == "PRAGMA synchronous = FULL"
        assert said[-2:] == ["COMMIT", "PRAGMA synchronous = NORMAL"]
        said.clear()
        await journal.append_step("run-a", epoch, step("run-a", 3))
        assert "PRAGMA synchronous = FULL" not in said
        # Every sync slower than the limit: the durable commit after one is the
        # writer thread's, whose time says where the one after it goes.
        monkeypatch.setattr(sqlite_io, "INLINE_SYNC_LIMIT", -1.0)
        await dispatch(journal, "run-a", epoch, "k2")
        await dispatch(journal, "run-a", epoch, "k3")
        assert attempts == [True, True, True]
        monkeypatch.setattr(sqlite_io, "INLINE_SYNC_LIMIT", 60.0)
        await dispatch(journal, "run-a", epoch, "k4")
        assert attempts == [True, True, True, True]
        assert [e.key for e in await journal.effects(task_id=TASK)] == ["k1", "k2", "k3", "k4"]
    attempts.clear()
    async with await opened(tmp_path / "full.db", "FULL") as journal:
        epoch = await new_run(journal, "run-a")
        for n in range(1, 4):
            await journal.append_step("run-a", epoch, step("run-a", n))
        assert len(await journal.steps("run-a")) == 3
    assert attempts == []


async def test_a_commit_goes_inline_unless_it_starts_the_wal_over_or_follows_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The commit after a checkpoint that copied every frame back (here another
    # connection's) starts the WAL over and syncs its header: it goes to the
    # writer thread, as does the one after an operation there; the others inline,
    # a durable commit and its next included.
    path = tmp_path / "j.db"
    async with await opened(path) as journal:
        epoch = await new_run(journal, "run-a")  # the writer thread's
        await journal.append_step("run-a", epoch, step("run-a", 1))
        attempts = count_inline(monkeypatch)
        await dispatch(journal, "run-a", epoch, "k1")  # durable, and inline
        await journal.append_step("run-a", epoch, step("run-a", 2))
        assert attempts == [True, True]  # nothing was checkpointed: inline
        other = sqlite3.connect(path)
        try:
            other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        finally:
            other.close()
        await journal.append_step("run-a", epoch, step("run-a", 3))  # starts it over: not inline
        assert attempts == [True, True]
        await journal.append_step("run-a", epoch, step("run-a", 4))
        assert attempts == [True, True, True]
        assert len(await journal.steps("run-a")) == 4  # the writer thread's
        await journal.append_step("run-a", epoch, step("run-a", 5))  # behind it: there too
        assert attempts == [True, True, True]
        await journal.append_step("run-a", epoch, step("run-a", 6))
        assert attempts == [True, True, True, True]


def _salt(path: Path) -> bytes:
    """The WAL header's salt: a new one each time the WAL starts over."""
    with open(f"{path}-wal", "rb") as wal:
        return wal.read(24)[16:24]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(script=st.lists(st.sampled_from(["step", "dispatch", "read", "checkpoint"]), max_size=40))
async def test_no_inline_commit_starts_the_wal_over(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, script: list[str]
) -> None:
    # Whatever the order of commits, reads and checkpoints (by this journal's
    # writer thread or another connection), the commit that starts the WAL over
    # (and syncs) is never made in the event loop's thread.
    path = tmp_path_factory.mktemp("wal") / "j.db"
    inline: list[tuple[bytes, bytes]] = []

    def watched(*args: Any) -> tuple[bool, Any]:
        before = _salt(path)
        done, value = write_inline(*args)
        if done:
            inline.append((before, _salt(path)))
        return done, value

    monkeypatch.setattr(sqlite_io, "write_inline", watched)
    restarts = 0
    async with await opened(path) as journal:
        epoch = await new_run(journal, "run-a")
        steps = keys = 0
        for what in script:
            salt = _salt(path)
            if what == "step":
                steps += 1
                await journal.append_step("run-a", epoch, step("run-a", steps))
            elif what == "dispatch":
                keys += 1
                await dispatch(journal, "run-a", epoch, f"k{keys}")
            elif what == "read":
                assert len(await journal.steps("run-a")) == steps
            else:
                other = sqlite3.connect(path)
                try:
                    other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                finally:
                    other.close()
            restarts += _salt(path) != salt
    assert all(before == after for before, after in inline), inline
    if "checkpoint" in script and script.count("step") + script.count("dispatch") > 1:
        # The control: the WAL did start over here, in the writer thread.
        last = len(script) - 1 - script[::-1].index("checkpoint")
        if any(w in ("step", "dispatch") for w in script[last + 1 :]):
            assert restarts > 0


def test_no_inline_connection_outside_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode = DELETE")
        db.execute("CREATE TABLE t (x)")
    assert Inline.open(str(path), "NORMAL") is None


async def test_a_memory_journal_has_no_inline_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    attempts = count_inline(monkeypatch)
    async with await Journal.open(":memory:") as journal:
        await journal.put_task(TASK, "goal", {"kind": "build"}, "c1")
        epoch = await new_run(journal, "run-a")
        await journal.append_step("run-a", epoch, step("run-a", 1))
        assert len(await journal.steps("run-a")) == 1
    assert attempts == []


@pytest.mark.parametrize("turns", [True, False])
async def test_the_wal_is_checkpointed_when_most_commits_are_inline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, turns: bool
) -> None:
    # With the writer thread's turn, the WAL stays near SQLite's 1,000-page
    # checkpoint; without it (the control), nothing checkpoints and it grows.
    if not turns:
        monkeypatch.setattr(sqlite_io, "INLINE_TURN", 10**9)
    path = tmp_path / "j.db"
    async with await opened(path) as journal:
        epoch = await new_run(journal, "run-a")
        for n in range(1, 1_501):
            await journal.append_step("run-a", epoch, step("run-a", n, reason="x" * 3_000))
        wal = os.stat(f"{path}-wal").st_size
        assert len(await journal.steps("run-a")) == 1_500
    pages = wal // 4_096
    if turns:
        assert pages < 1_600, pages
    else:
        assert pages > 2_500, pages


async def test_a_cancelled_operation_is_done_before_the_next_commit(tmp_path: Path) -> None:
    # A heartbeat waits in the writer thread for another process's lock and is
    # cancelled there; the step after it must not land first (inline, at once).
    path = tmp_path / "j.db"
    async with await opened(path) as journal:
        epoch = await new_run(journal, "run-a")
        log = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        log.executescript(
            """
            CREATE TABLE order_log (n INTEGER PRIMARY KEY, what TEXT);
            CREATE TRIGGER o1 AFTER UPDATE ON runs
                BEGIN INSERT INTO order_log (what) VALUES ('heartbeat'); END;
            CREATE TRIGGER o2 AFTER INSERT ON steps
                BEGIN INSERT INTO order_log (what) VALUES ('step'); END;
            """
        )
        for n in (1, 2):  # the second one inline: the next would be too
            await journal.append_step("run-a", epoch, step("run-a", n))
        log.execute("BEGIN IMMEDIATE")
        async with anyio.create_task_group() as tg:
            tg.start_soon(journal.heartbeat, "run-a", epoch)
            # Every other task waits: the heartbeat's statement is in the thread.
            await anyio.wait_all_tasks_blocked()
            tg.cancel_scope.cancel()
            log.commit()
        await journal.append_step("run-a", epoch, step("run-a", 3))
        order = [what for (what,) in log.execute("SELECT what FROM order_log ORDER BY n")]
        log.close()
    assert order == ["step", "step", "heartbeat", "step"]
