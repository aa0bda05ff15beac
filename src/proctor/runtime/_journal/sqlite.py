"""
The journal: the durable record of tasks, runs, steps, effects, evidence, spend and children.

This is the embedded backend, one SQLite file in WAL mode written through
aiosqlite. One :class:`Journal` holds one aiosqlite connection, hence one
writer thread, and an inline connection for ordinary commits in the event
loop's thread (``sqlite_io.Inline``); the controller is the only writer of run
state. Every public method runs its statements in one transaction, and two
commits are made durable (``PRAGMA synchronous=FULL``) whatever the configured
level: an effect's dispatch, which must be on disk before the effect leaves
the process, and the end of a run.

Writes that belong to a run are fenced by the run's epoch: a write from a stale
owner, or a dispatch after the run ended, raises :class:`~proctor.FencedError`.

Runs may be queued and claimed under a lease (:meth:`Journal.submit_run`,
:meth:`Journal.claim_run`): each claim gives the run a new epoch, which fences
out the owner that lost it. Lease times are SQLite's ``julianday('now')``.

All SQL lives in ``sqlite_sql.Sql`` and :data:`SQLITE_MIGRATIONS`; the PostgreSQL
backend implements the same :class:`JournalLike` with its own SQL, and
:func:`open_journal` picks the backend from the target. ``sqlite3`` errors
become :class:`~proctor.JournalError` naming the path, chained to the original.

A test hook simulates a host that dies at a journal boundary: every write
passes one before and after its commit (see :mod:`~proctor.runtime._journal.crash`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Self, TypeVar, cast

import aiosqlite
import anyio
import attrs

from proctor._errors import (
    ConfigError,
    EffectError,
    FencedError,
    JournalError,
    ProctorError,
    RunNotFoundError,
)
from proctor._logging import get_logger
from proctor.runtime._journal.base import (
    CLOSE_LIMIT,
    DURABLE,
    MIN_PREFIX,
    RUNNING,
    SYNCHRONOUS,
    Claimed,
    EffectRow,
    HolderRow,
    ProcessRow,
    RunRow,
    SpendRow,
    Synchronous,
)
from proctor.runtime._journal.crash import crash_point
from proctor.runtime._journal.rows import (
    DISPOSITIONS,
    SpendRecord,
    check_lease,
    check_worker,
    clean,
    dump,
    dump_opt,
    effect_row,
    fenced_error,
    key_needles,
    load,
    note_params,
    note_records,
    note_refs,
    of_keys,
    record_field,
    run_row,
    settle_fence,
    spend_record,
    spend_rows_of,
    step_params,
    step_record,
    step_refs,
    task_record,
)
from proctor.runtime._journal.sqlite_io import (
    Inline,
    Settle,
    StepWrite,
    check_journal_path,
    duplicate_step,
    in_thread,
    is_duplicate,
    nothing,
    prefix_query,
    put_blobs,
    read_blobs,
    setup,
    sqlite_errors,
    transaction,
    write_steps,
    write_with_spend,
)
from proctor.runtime._journal.sqlite_sql import Sql

__all__ = ("Journal",)

log = get_logger()

_T = TypeVar("_T")

# --------------------------------------------------------------------------------------
# The journal
# --------------------------------------------------------------------------------------


@attrs.define(eq=False)
class Journal:
    """
    The SQLite journal. Open it with :meth:`open` or :func:`open_journal`.

    One journal holds one connection (and an inline one for ordinary commits)
    and serializes its operations: each public method is one transaction.
    """

    _path: str
    _db: aiosqlite.Connection | None
    _synchronous: Synchronous
    _lock: anyio.Lock = attrs.field(factory=lambda: anyio.Lock(fast_acquire=True), init=False)
    # Spend records (a row each) written with the journal's next operation.
    _deferred: list[SpendRecord] = attrs.field(factory=list, init=False)
    # Effect settlements and process ends written with the journal's next operation.
    _settles: list[Settle] = attrs.field(factory=list, init=False)
    # Steps waiting for the lock, written together by the first to get it.
    _steps: list[StepWrite] = attrs.field(factory=list, init=False)
    # Ordinary commits in the event loop's thread; None for ``:memory:`` and durable levels.
    _inline: Inline | None = attrs.field(default=None, init=False)

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "NORMAL",
        create: bool = True,
    ) -> Journal:
        """
        Open the journal at ``path``, creating and migrating it as needed.

        Args:
            path: the SQLite file. Its directory must exist.
            synchronous: SQLite's ``synchronous`` level for ordinary commits. Effect
                dispatches and run ends are always committed with ``FULL``.
            create: create the file when it does not exist; when False, a missing
                file is an error (what a command that only reads wants).

        Raises:
            ConfigError: ``synchronous`` is not OFF, NORMAL, FULL or EXTRA; the
                file's directory does not exist; ``create`` is False and the file
                does not exist.
            SchemaError: the journal was written by a newer proctor.
            JournalError: the file could not be opened or is not a journal.
        """
        name = os.fspath(path)
        if synchronous not in SYNCHRONOUS:
            raise ConfigError(
                f"journal synchronous level must be one of {', '.join(SYNCHRONOUS)}, "
                f"got {synchronous!r}"
            )
        if name != ":memory:":
            check_journal_path(name, create=create)
        try:
            db = await aiosqlite.connect(name, isolation_level=None)
        except sqlite3.Error as exc:
            raise JournalError(f"journal {name}: could not open: {exc}") from exc
        journal = cls(name, db, synchronous)
        try:
            with journal._errors("open"):
                await setup(db, name, synchronous)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await db.close()
            raise
        if name != ":memory:" and synchronous not in DURABLE:
            journal._inline = Inline.open(name, synchronous)
        return journal

    @property
    def path(self) -> str:
        """The journal's file."""
        return self._path

    async def close(self) -> None:
        """
        Close the journal, after the operation in flight if any, writing the
        deferred spend first. Closing twice is fine.
        """
        db, self._db = self._db, None
        if db is None:
            return
        inline, self._inline = self._inline, None
        if inline is not None:
            inline.close()
        with anyio.move_on_after(CLOSE_LIMIT, shield=True) as scope:
            async with self._lock:
                if self._deferred or self._settles:
                    try:
                        await self._write(db, nothing)
                    except sqlite3.Error as exc:
                        # Closing still closes: what could not be written is said.
                        log.error("journal.deferred_spend_lost", path=self._path, error=str(exc))
                await db.close()
        if scope.cancelled_caught:
            # The operation in flight did not finish in time: let the connection's
            # thread close it once its queue drains, rather than leave it open.
            db.stop()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- plumbing ---------------------------------------------------------------------

    def _errors(self, what: str) -> contextlib.AbstractContextManager[None]:
        """Translate ``sqlite3`` errors into :class:`JournalError` naming the path."""
        return sqlite_errors(self._path, what)

    def _connected(self, what: str) -> aiosqlite.Connection:
        """Return the connection, or raise if the journal is closed (hold the lock)."""
        if self._db is None:
            raise JournalError(f"journal {self._path} is closed: could not {what}")
        return self._db

    @contextlib.asynccontextmanager
    async def _use(self, what: str) -> AsyncIterator[aiosqlite.Connection]:
        """
        Hold the connection for one operation, translating its errors. Deferred
        spend is written first, so that every operation sees it.
        """
        async with self._lock:
            db = self._connected(what)
            try:
                with self._errors(what):
                    if self._deferred or self._settles:
                        await self._write(db, nothing)
                    yield db
            finally:
                # The next commit goes to the thread too: behind what this sent
                # there (a statement cancelled while it waited still runs).
                if self._inline is not None:
                    self._inline.follow = True

    async def _locked_write(
        self, what: str, body: Callable[[sqlite3.Connection], _T], *, durable: bool = False
    ) -> _T:
        """:meth:`_write` ``body`` under the lock, its errors saying ``what`` was not done."""
        async with self._lock:
            with self._errors(what):
                return await self._write(self._connected(what), body, durable=durable)

    async def _write(
        self,
        db: aiosqlite.Connection,
        body: Callable[[sqlite3.Connection], _T],
        *,
        durable: bool = False,
        inline: bool = True,
    ) -> _T:
        """
        Run ``body`` in one transaction after the deferred spend (kept if it fails): by
        :class:`Inline` if it can (``inline``), else in the thread, shielded (done or not).
        """
        rows, self._deferred = self._deferred, []
        settles, self._settles = self._settles, []
        level = None if not durable or self._synchronous in DURABLE else self._synchronous
        write = functools.partial(write_with_spend, rows, settles, body, level)
        try:
            if inline and self._inline is not None:
                done, value = self._inline.write(rows, settles, body, durable=durable, level=level)
                if done:
                    return cast(_T, value)
            with anyio.CancelScope(shield=True):
                start = time.monotonic() if durable else None
                try:
                    result = await in_thread(db, write)
                finally:
                    if self._inline is not None:
                        self._inline.used_thread(start)
        except Exception:
            self._deferred[:0] = rows
            self._settles[:0] = settles
            raise
        return result

    async def _diagnose_run(
        self, db: aiosqlite.Connection, run_id: str, what: str
    ) -> tuple[str, int]:
        """Return the run's status and epoch, or raise RunNotFoundError."""
        rows = list(await db.execute_fetchall(Sql.run_fence, (run_id,)))
        if not rows:
            raise RunNotFoundError(f"journal {self._path}: no run {run_id!r} ({what})")
        status, current = rows[0]
        return str(status), int(current)

    def _refused(
        self, run_id: str, epoch: int, fence: Sequence[Any] | None, what: str
    ) -> ProctorError:
        """Why a fenced write wrote nothing, from the run's (status, epoch) row or its absence."""
        if fence is None:
            return RunNotFoundError(f"journal {self._path}: no run {run_id!r} ({what})")
        return self._fenced(run_id, epoch, str(fence[0]), int(fence[1]), what)

    def _fenced(self, run_id: str, epoch: int, status: str, current: int, what: str) -> FencedError:
        return fenced_error(self._path, run_id, epoch, status, current, what)

    # -- tasks --------------------------------------------------------------------------

    async def put_task(
        self, task_id: str, goal: str, spec: dict[str, Any], contract_version: str
    ) -> None:
        """
        Record a task, or update the spec and contract version of a known one.

        Args:
            task_id: the task.
            goal: its goal (kept from the first record).
            spec: the task's specification as plain data.
            contract_version: the version of its acceptance contract.
        """
        params = {
            "task_id": task_id,
            "goal": goal,
            "spec": dump(spec),
            "contract_version": contract_version,
            "now": time.time(),
        }
        async with self._use(f"record task {task_id}") as db:
            crash_point("put_task:before")
            await db.execute(Sql.put_task, params)
            crash_point("put_task:after")

    async def get_task(self, task_id: str) -> dict[str, Any]:
        """
        Return a task as ``{task_id, goal, spec, contract_version, created_at}``.

        Raises:
            JournalError: no such task.
        """
        async with self._use(f"read task {task_id}") as db:
            rows = list(await db.execute_fetchall(Sql.get_task, (task_id,)))
        if not rows:
            raise JournalError(f"journal {self._path}: no task {task_id!r}")
        return task_record(rows[0])

    # -- runs ---------------------------------------------------------------------------

    async def create_run(
        self,
        run_id: str,
        task_id: str,
        *,
        policy: dict[str, Any],
        policy_version: str,
        host: str,
        parent_run_id: str | None = None,
    ) -> int:
        """
        Record a new running run of a known task and return its epoch.

        A task's first run has epoch 1; each later run of the task gets one more
        than the highest so far.

        Raises:
            JournalError: the run id is taken, or the task or parent run is unknown.
        """
        params = {
            "run_id": run_id,
            "task_id": task_id,
            "parent_run_id": parent_run_id,
            "policy": dump(policy),
            "policy_version": policy_version,
            "host": host,
            "now": time.time(),
        }
        what = f"create run {run_id}"
        async with self._use(what) as db:
            try:
                crash_point("create_run:before")
                rows = list(await db.execute_fetchall(Sql.create_run, params))
                crash_point("create_run:after")
            except sqlite3.IntegrityError as exc:
                if is_duplicate(exc):
                    why = f"run {run_id!r} already exists"
                else:
                    why = f"task {task_id!r} or parent run {parent_run_id!r} is not in the journal"
                raise JournalError(f"journal {self._path}: could not {what}: {why}") from exc
        return int(rows[0][0])

    async def end_run(
        self,
        run_id: str,
        epoch: int,
        *,
        disposition: str,
        stop_reason: dict[str, Any] | None,
        candidate_digest: str | None,
        handoff: dict[str, Any] | None,
    ) -> None:
        """
        End a running run, durably.

        Args:
            run_id: the run.
            epoch: the writer's epoch.
            disposition: a terminal disposition (``completed``, ``partial``, ...).
            stop_reason: the unstructured stop reason.
            candidate_digest: the digest of the final candidate, if any.
            handoff: what the run hands to whoever recovers it.

        Raises:
            ConfigError: ``disposition`` is not a terminal disposition.
            FencedError: the run has ended or its epoch is not ``epoch``.
            RunNotFoundError: no such run.
        """
        if disposition not in DISPOSITIONS:
            raise ConfigError(
                f"disposition must be one of {', '.join(DISPOSITIONS)}, got {disposition!r}"
            )
        params = {
            "run_id": run_id,
            "epoch": epoch,
            "disposition": disposition,
            "stop_reason": dump_opt(stop_reason),
            "candidate_digest": candidate_digest,
            "handoff": dump_opt(handoff),
            "now": time.time(),
        }
        what = "end"

        def write(conn: sqlite3.Connection) -> tuple[bool, Any]:
            """End it; or, when nothing was written, return the run's status and epoch."""
            crash_point("end_run:before")
            if conn.execute(Sql.end_run, params).rowcount == 1:
                return True, None
            return False, conn.execute(Sql.run_fence, (run_id,)).fetchone()

        ended, fence = await self._locked_write(f"end run {run_id}", write, durable=True)
        if ended:
            crash_point("end_run:after")
            return
        raise self._refused(run_id, epoch, fence, what)

    async def get_run(self, run_id: str) -> RunRow:
        """
        Return a run by its id, or by a unique prefix of at least 6 characters.

        Raises:
            RunNotFoundError: no run has that id, or the prefix is short or ambiguous.
        """
        async with self._use(f"read run {run_id}") as db:
            rows = list(await db.execute_fetchall(Sql.get_run, (run_id,)))
            if not rows and len(run_id) >= MIN_PREFIX:
                rows = list(await db.execute_fetchall(*prefix_query(run_id)))
        if len(rows) == 1:
            return run_row(rows[0])
        if rows:
            ids = ", ".join(str(row[0]) for row in rows)
            raise RunNotFoundError(
                f"journal {self._path}: run id prefix {run_id!r} is ambiguous "
                f"(matches {ids}, ...): give more characters"
            )
        hint = "" if len(run_id) >= MIN_PREFIX else f" (a prefix needs {MIN_PREFIX}+ characters)"
        raise RunNotFoundError(f"journal {self._path}: no run {run_id!r}{hint}")

    async def list_runs(self, limit: int = 50) -> list[RunRow]:
        """Return up to ``limit`` runs, newest first."""
        async with self._use("list runs") as db:
            rows = await db.execute_fetchall(Sql.list_runs, (limit,))
        return [run_row(row) for row in rows]

    async def runs_of_task(self, task_id: str) -> list[RunRow]:
        """Return a task's runs, oldest epoch first."""
        async with self._use(f"list runs of task {task_id}") as db:
            rows = await db.execute_fetchall(Sql.runs_of_task, (task_id,))
        return [run_row(row) for row in rows]

    # -- leases -------------------------------------------------------------------------

    async def heartbeat(
        self,
        run_id: str,
        epoch: int,
        *,
        waiting: str | None = None,
        pid: int | None = None,
        workspace: str | None = None,
        every: float | None = None,
    ) -> bool:
        """
        Say that the host of a running run is alive, and what the run waits for.

        Args:
            run_id: the run.
            epoch: the writer's epoch: a host that lost the run changes nothing.
            waiting: what the run waits for now (``answer``, ``approval``), or None.
            pid: the process that runs it (kept as it was when None).
            workspace: the workspace it holds (kept as it was when None).
            every: how often the host beats, in seconds (kept as it was when None).

        Returns:
            True when recorded; False, changing nothing, when the run is not
            running under ``epoch``.
        """
        params = {
            "run_id": run_id,
            "epoch": epoch,
            "now": time.time(),
            "waiting": waiting,
            "pid": pid,
            "workspace": workspace,
            "every": every,
        }
        # No crash boundary: a heartbeat comes when the clock says, not at a fixed
        # point of the run, and it writes nothing a recovery reads.
        async with self._use(f"beat for run {run_id}") as db:
            cursor = await db.execute(Sql.heartbeat, params)
            return bool(cursor.rowcount == 1)

    async def live_runs(self, workspace: str | None = None) -> list[RunRow]:
        """
        Return the runs still ``running``, oldest first, whether their host lives or not.

        Args:
            workspace: only the runs that hold this workspace.
        """
        async with self._use("list running runs") as db:
            if workspace is None:
                rows = await db.execute_fetchall(Sql.live_runs)
            else:
                rows = await db.execute_fetchall(Sql.live_runs_at, (workspace,))
        return [run_row(row) for row in rows]

    async def submit_run(
        self, run_id: str, task_id: str, *, policy: dict[str, Any], policy_version: str
    ) -> None:
        """
        Queue a run of a known task, for a worker to claim: status ``queued``, epoch 0.

        Raises:
            JournalError: the run id is taken, the task is unknown, or the task
                already has a queued run.
        """
        params = {
            "run_id": run_id,
            "task_id": task_id,
            "policy": dump(policy),
            "policy_version": policy_version,
            "now": time.time(),
        }
        what = f"submit run {run_id}"
        async with self._use(what) as db:
            try:
                crash_point("submit_run:before")
                await db.execute(Sql.submit_run, params)
                crash_point("submit_run:after")
            except sqlite3.IntegrityError as exc:
                if not is_duplicate(exc):
                    why = f"task {task_id!r} is not in the journal"
                elif await db.execute_fetchall(Sql.run_fence, (run_id,)):
                    why = f"run {run_id!r} already exists"
                else:
                    # (task_id, epoch 0) is taken.
                    why = f"task {task_id!r} already has a queued run"
                raise JournalError(f"journal {self._path}: could not {what}: {why}") from exc

    async def claim_run(self, worker: str, lease_seconds: float) -> Claimed | None:
        """
        Claim the oldest run that is queued, or running under an expired lease.

        The claim is one durable transaction: the run becomes ``running``, owned by
        ``worker`` until ``lease_seconds`` from now (by the database's clock), under
        a new epoch that fences out every earlier owner. A lease of 0 seconds
        expires at once.

        Args:
            worker: who claims it (a host name, ``host:pid``, ...).
            lease_seconds: how long the lease lasts unless renewed.

        Returns:
            The claimed run, or None when no run can be claimed.

        Raises:
            ConfigError: ``worker`` is empty or ``lease_seconds`` is negative or not finite.
        """
        check_worker(worker)
        check_lease(lease_seconds)

        def claim(conn: sqlite3.Connection) -> Claimed | None:
            crash_point("claim_run:before")
            picked = conn.execute(Sql.claim_pick).fetchone()
            if picked is None:
                return None
            run_id, previous = picked
            params = {"run_id": run_id, "worker": worker, "lease_seconds": float(lease_seconds)}
            # Every row of an UPDATE ... RETURNING is read before the commit.
            ((task_id, epoch),) = conn.execute(Sql.claim_take, params).fetchall()
            return Claimed(run_id, task_id, int(epoch), int(previous))

        claimed = await self._locked_write("claim a run", claim, durable=True)
        if claimed is None:
            return None
        crash_point("claim_run:after")
        run_id = claimed.run_id
        log.info("journal.claimed", run_id=run_id, worker=worker, epoch=claimed.epoch)
        return claimed

    async def renew_lease(self, run_id: str, epoch: int, lease_seconds: float) -> bool:
        """
        Extend the lease of a run this worker owns to ``lease_seconds`` from now.

        Returns:
            True when renewed; False, changing nothing, when the run is no longer
            running under ``epoch`` (another worker took it over, or it ended).

        Raises:
            ConfigError: ``lease_seconds`` is negative or not finite.
            RunNotFoundError: no such run.
        """
        check_lease(lease_seconds)
        params = {"run_id": run_id, "epoch": epoch, "lease_seconds": float(lease_seconds)}
        what = "renew the lease"
        async with self._use(f"{what} of run {run_id}") as db:
            crash_point("renew_lease:before")
            cursor = await db.execute(Sql.renew_lease, params)
            crash_point("renew_lease:after")
            if cursor.rowcount == 1:
                return True
            await self._diagnose_run(db, run_id, what)
        return False

    async def release_run(self, run_id: str, epoch: int) -> None:
        """
        Give up the lease on a run. A run still running may be claimed at once.

        Nothing changes when the run's epoch is no longer ``epoch``: the lease was
        already lost.

        Raises:
            RunNotFoundError: no such run.
        """
        what = "release"
        async with self._use(f"{what} run {run_id}") as db:
            crash_point("release_run:before")
            cursor = await db.execute(Sql.release_run, {"run_id": run_id, "epoch": epoch})
            crash_point("release_run:after")
            if cursor.rowcount != 1:
                await self._diagnose_run(db, run_id, what)

    # -- holders ------------------------------------------------------------------------

    async def hold_task(
        self, task_id: str, run_id: str, holder: str, *, replacing: str | None = None
    ) -> HolderRow | None:
        """
        Take the task for ``holder`` if no one holds it, or ``replacing`` does; return
        None when taken, else who holds it (see :meth:`JournalLike.hold_task`).

        Raises:
            JournalError: the task is not in the journal.
        """
        params = {
            "task_id": task_id,
            "run_id": run_id,
            "holder": holder,
            "now": time.time(),
            "replacing": replacing,
        }
        what = f"hold task {task_id}"
        async with self._use(what) as db:
            try:
                crash_point("hold_task:before")
                taken = list(await db.execute_fetchall(Sql.hold_task, params))
                crash_point("hold_task:after")
            except sqlite3.IntegrityError as exc:
                raise JournalError(
                    f"journal {self._path}: could not {what}: the task is not in the journal"
                ) from exc
            if taken:
                return None
            rows = list(await db.execute_fetchall(Sql.task_holder, (task_id,)))
        # Released between the two statements: nobody holds it now, but not us either.
        return HolderRow(*rows[0]) if rows else HolderRow(task_id, "", "", 0.0)

    async def release_task(self, task_id: str, holder: str) -> None:
        """Let go of the task if ``holder`` holds it (see :meth:`JournalLike.release_task`)."""
        async with self._use(f"release task {task_id}") as db:
            crash_point("release_task:before")
            await db.execute(Sql.release_task, (task_id, holder))
            crash_point("release_task:after")

    async def task_holder(self, task_id: str) -> HolderRow | None:
        """Return who holds the task, or None (see :meth:`JournalLike.task_holder`)."""
        async with self._use(f"read the holder of task {task_id}") as db:
            rows = list(await db.execute_fetchall(Sql.task_holder, (task_id,)))
        return HolderRow(*rows[0]) if rows else None

    # -- steps --------------------------------------------------------------------------

    async def append_step(self, run_id: str, epoch: int, record: Mapping[str, Any]) -> int:
        """
        Journal one step: an unstructured :class:`~proctor.runtime.TraceRecord`.

        The run may have ended (a refusal after the end is still a step), but the
        writer's epoch must be the run's. The deferred spend is written in the
        same transaction.

        Returns:
            The id of the run's newest note (0 when it has none), read in the
            same transaction: a writer that polls the run's notes need not read
            them again while it has not changed.

        Raises:
            ConfigError: the record lacks a field or belongs to another run.
            FencedError: the run's epoch is not ``epoch``.
            RunNotFoundError: no such run.
            JournalError: the step number is already journaled.
        """
        params = step_params(run_id, epoch, record)
        what = f"append step {params['step']}"
        mine = StepWrite(params)
        self._steps.append(mine)
        try:
            await self._lock.acquire()
        except BaseException:
            # Cancelled while waiting: not written, unless a batch in flight has it.
            if mine in self._steps:
                self._steps.remove(mine)
            raise
        try:
            # Group commit: whoever holds the lock first writes every step then
            # waiting, of every run, in one transaction; the others find theirs done.
            if mine.written is None:
                db = self._connected(f"{what} of run {run_id}")
                batch, self._steps = self._steps, []
                with self._errors(f"{what} of run {run_id}"):
                    try:
                        await self._write(
                            db, functools.partial(write_steps, batch), inline=len(batch) == 1
                        )
                    except BaseException:
                        # Rolled back: the others waiting try again under the lock.
                        others = [w for w in batch if w is not mine]
                        for waiting in others:
                            waiting.reset()
                        self._steps[:0] = others
                        raise
        finally:
            self._lock.release()
        if mine.written:
            crash_point("append_step:after")
            return mine.newest
        if mine.duplicate is not None:
            raise duplicate_step(
                self._path, f"{what} of run {run_id}", mine.duplicate
            ) from mine.duplicate
        raise self._refused(run_id, epoch, mine.fence, what)

    async def append_steps(
        self, run_id: str, epoch: int, records: Sequence[Mapping[str, Any]]
    ) -> None:
        """
        Journal several steps in one transaction: all of them, or none.

        Raises:
            ConfigError: a record lacks a field or belongs to another run.
            FencedError: the run's epoch is not ``epoch``.
            RunNotFoundError: no such run.
            JournalError: a step number is already journaled.
        """
        if not records:
            return
        params = [step_params(run_id, epoch, record) for record in records]
        what = f"append steps {params[0]['step']}..{params[-1]['step']}"
        async with self._use(f"{what} of run {run_id}") as db:
            try:
                crash_point("append_steps:before")
                async with transaction(db):
                    cursor = await db.executemany(Sql.append_step, params)
                    if cursor.rowcount != len(params):
                        status, current = await self._diagnose_run(db, run_id, what)
                        raise self._fenced(run_id, epoch, status, current, what)
                    await db.executemany(Sql.put_blob, [b for p in params for b in p["blobs"]])
                crash_point("append_steps:after")
            except sqlite3.IntegrityError as exc:
                raise duplicate_step(self._path, f"{what} of run {run_id}", exc) from exc

    async def steps(self, run_id: str, *, after: int = 0) -> list[dict[str, Any]]:
        """
        Return a run's steps in order, shaped as they were appended.

        Args:
            run_id: the run.
            after: only the steps numbered above it (what a replay has not seen).
        """
        async with self._use(f"read steps of run {run_id}") as db:
            rows = list(await db.execute_fetchall(Sql.steps, (run_id, after)))
            blobs = await read_blobs(db, step_refs(rows))
        return [step_record(row, blobs) for row in rows]

    async def ending_step(self, run_id: str) -> dict[str, Any] | None:
        """
        Return the last step of a run that carries a disposition (the step that
        ended it, or a later one), or None when none does. Reads one step.
        """
        async with self._use(f"read the ending step of run {run_id}") as db:
            rows = list(await db.execute_fetchall(Sql.ending_step, (run_id,)))
            blobs = await read_blobs(db, step_refs(rows))
        return step_record(rows[0], blobs) if rows else None

    # -- effects ------------------------------------------------------------------------

    async def record_dispatch(
        self,
        *,
        run_id: str,
        epoch: int,
        key: str,
        task_id: str,
        step: int,
        tool: str,
        target: str,
        args_hash: str,
        note: Mapping[str, Any] | None = None,
    ) -> int | None:
        """
        Record, durably, that an effect is about to be dispatched.

        One transaction checks that the run is running under ``epoch`` and that a
        known ``key`` was recorded with the same arguments, then marks the effect
        ``dispatched``; the commit is on disk before this returns. A refusal writes
        nothing. With ``note``, the run's ``effect`` note is journaled in the same
        transaction (when the dispatch is), and its id returned.

        Raises:
            FencedError: the run has ended or its epoch is not ``epoch``.
            RunNotFoundError: no such run.
            EffectError: ``key`` was recorded with other arguments.
        """
        params = {
            "run_id": run_id,
            "epoch": epoch,
            "key": key,
            "task_id": task_id,
            "step": step,
            "tool": tool,
            "target": target,
            "args_hash": args_hash,
            "now": time.time(),
        }
        what = f"dispatch of effect {key}"
        noted = None if note is None else note_params(dict(note))

        def write(conn: sqlite3.Connection) -> list[Any] | int | None:
            """Dispatch it (and note it); or, when nothing was written, say why."""
            crash_point("record_dispatch:before")
            if conn.execute(Sql.record_dispatch, params).rowcount != 1:
                return list(conn.execute(Sql.dispatch_check, params).fetchall())
            if noted is None:
                return None
            text, packed, blobs = noted
            row = conn.execute(Sql.add_note, (run_id, "effect", text, params["now"], packed))
            put_blobs(conn, blobs)
            return int(row.fetchone()[0])

        rows = await self._locked_write(f"record {what}", write, durable=True)
        if not isinstance(rows, list):
            crash_point("record_dispatch:after")
            return rows
        if not rows:
            raise RunNotFoundError(f"journal {self._path}: no run {run_id!r} ({what})")
        status, current, known_hash = rows[0]
        if status != RUNNING or current != epoch:
            raise self._fenced(run_id, epoch, str(status), int(current), what)
        raise EffectError(
            f"idempotency key {key} reused with other arguments "
            f"(recorded {known_hash}, now {args_hash}): give the new call its own key"
        )

    async def settle_effect(
        self,
        key: str,
        state: str,
        outcome: dict[str, Any] | None,
        *,
        run_id: str | None = None,
        epoch: int | None = None,
        defer: bool = False,
    ) -> None:
        """
        Set an effect's state and outcome.

        With ``defer``, it is written in the transaction of the journal's next
        operation (the step), and a refusal by its fence raises nothing (see
        ``JournalLike.settle_effect``).

        Args:
            key: the effect's idempotency key.
            state: one of :data:`EFFECT_STATES`.
            outcome: what settled it, if anything.
            run_id: the writer's run; with ``epoch``, the write is fenced like a step.
            epoch: the writer's epoch.

        Raises:
            ConfigError: ``state`` is not one of :data:`EFFECT_STATES`, or only one of
                ``run_id`` and ``epoch`` is given.
            FencedError: ``run_id``'s epoch is not ``epoch``.
            RunNotFoundError: no run ``run_id``.
            EffectError: no effect has that key.
        """
        fenced = settle_fence(state, run_id, epoch)
        params = {
            "key": key,
            "state": state,
            "outcome": dump_opt(outcome),
            "now": time.time(),
            "run_id": run_id,
            "epoch": epoch,
        }
        what = f"settle effect {key}"
        sql = Sql.settle_effect_fenced if fenced else Sql.settle_effect
        if defer:
            self._settles.append(Settle(sql, params))
            return
        async with self._use(what) as db:
            crash_point("settle_effect:before")
            cursor = await db.execute(sql, params)
            crash_point("settle_effect:after")
            if cursor.rowcount == 1:
                return
            known = list(await db.execute_fetchall(Sql.effect_exists, (key,)))
            if known and run_id is not None and epoch is not None:
                status, current = await self._diagnose_run(db, run_id, what)
                raise self._fenced(run_id, epoch, status, current, what)
        raise EffectError(f"journal {self._path}: no effect with idempotency key {key!r}")

    async def effects(
        self,
        *,
        task_id: str | None = None,
        run_id: str | None = None,
        states: Sequence[str] | None = None,
    ) -> list[EffectRow]:
        """Return the effects that match every filter given, oldest first."""
        params: dict[str, Any] = {"task_id": task_id, "run_id": run_id}
        present = [name for name in ("task_id", "run_id") if params[name] is not None]
        if states is not None:
            params["states"] = json.dumps(list(states))
            present.append("states")
        sql = Sql.filtered(Sql.effects, Sql.effects_filters, present, Sql.effects_order)
        async with self._use("read effects") as db:
            rows = await db.execute_fetchall(sql, params)
        return [effect_row(row) for row in rows]

    async def count_effects(self, task_id: str) -> int:
        """Return how many effects the task has journaled, in every state."""
        async with self._use(f"count effects of task {task_id}") as db:
            rows = list(await db.execute_fetchall(Sql.count_effects, (task_id,)))
        return int(rows[0][0])

    async def effect_notes(self, run_id: str, keys: Sequence[str]) -> list[dict[str, Any]]:
        """Return the run's effect notes of these keys, in order (see ``JournalLike``)."""
        if not keys:
            return []
        needles = json.dumps(key_needles(keys))
        async with self._use(f"read effect notes of run {run_id}") as db:
            rows = await db.execute_fetchall(Sql.effect_notes, (run_id, needles))
            blobs = await read_blobs(db, note_refs(rows))
        return of_keys(note_records(rows, blobs), keys)

    # -- evidence -----------------------------------------------------------------------

    async def add_evidence(self, run_id: str, task_id: str, record: Mapping[str, Any]) -> None:
        """
        Journal one piece of evidence: an unstructured evidence record.

        Args:
            run_id: the run that asked for it.
            task_id: its task.
            record: the evidence, with at least ``candidate_digest``,
                ``contract_version``, ``check``, ``passed`` and ``at``.

        Raises:
            ConfigError: the record lacks one of those fields.
        """
        params = {
            "run_id": run_id,
            "task_id": task_id,
            "candidate_digest": record_field(record, "candidate_digest", "evidence"),
            "contract_version": record_field(record, "contract_version", "evidence"),
            "check_name": record_field(record, "check", "evidence"),
            "passed": bool(record_field(record, "passed", "evidence")),
            "at": record_field(record, "at", "evidence"),
            "record": dump(record),
        }
        async with self._use(f"add evidence to run {run_id}") as db:
            crash_point("add_evidence:before")
            await db.execute(Sql.add_evidence, params)
            crash_point("add_evidence:after")

    async def evidence(
        self, *, run_id: str | None = None, task_id: str | None = None
    ) -> list[dict[str, Any]]:
        """Return the evidence records that match every filter given, oldest first."""
        params = {"run_id": run_id, "task_id": task_id}
        present = [name for name in ("task_id", "run_id") if params[name] is not None]
        sql = Sql.filtered(Sql.evidence, Sql.evidence_filters, present, Sql.evidence_order)
        async with self._use("read evidence") as db:
            rows = await db.execute_fetchall(sql, params)
        return [load(row[0]) for row in rows]

    # -- spend --------------------------------------------------------------------------

    async def add_spend(
        self,
        task_id: str,
        run_id: str,
        amounts: Mapping[str, float],
        kind: str,
        note: str = "",
        *,
        defer: bool = False,
    ) -> None:
        """
        Journal spend: one row, all its dimensions' amounts in one column.

        Args:
            task_id: the task the spend is charged to.
            run_id: the run that spent it.
            amounts: the amount per dimension (``steps``, ``tokens_in``, ``cost_usd``, ...).
            kind: one of :data:`SPEND_KINDS`.
            note: why, for a person.
            defer: write the rows in the same transaction as this journal's next
                operation (a step, an effect's dispatch, a read, or the close)
                instead of one of their own. In order, and before anything that
                operation writes or reads; a host that dies before that
                operation loses them. The controller defers its accountant's
                rows: the step that follows is written with them.

        Raises:
            ConfigError: ``kind`` is not one of :data:`SPEND_KINDS`, a dimension is
                not a name (valid text without U+0000), or an amount is not finite.
        """
        record = spend_record(task_id, run_id, amounts, kind, note)
        if record is None:
            return
        self._deferred.append(record)
        if defer:
            return
        async with self._use(f"add spend of run {run_id}"):
            pass  # _use wrote it

    async def spend_totals(
        self, task_id: str, kinds: Sequence[str] = ("settle", "charge")
    ) -> dict[str, float]:
        """Return a task's spend per dimension, summed over the rows of ``kinds``."""
        async with self._use(f"read spend of task {task_id}") as db:
            rows = await db.execute_fetchall(Sql.spend_totals, (task_id, json.dumps(list(kinds))))
        return {str(dimension): float(total) for dimension, total in rows}

    async def spend_rows(self, run_id: str) -> list[SpendRow]:
        """Return a run's spend rows (every kind) in the order they were written."""
        async with self._use(f"read spend of run {run_id}") as db:
            rows = await db.execute_fetchall(Sql.spend_rows, {"run_id": run_id})
        return spend_rows_of(rows)

    # -- processes ----------------------------------------------------------------------

    async def record_process(self, run_id: str, pgid: int, command: str) -> None:
        """Journal a child process group the run started."""
        params = (run_id, pgid, clean(command), time.time())

        def write(conn: sqlite3.Connection) -> None:
            crash_point("record_process:before")
            conn.execute(Sql.record_process, params)

        await self._locked_write(f"record process group {pgid} of run {run_id}", write)
        crash_point("record_process:after")

    async def end_process(self, run_id: str, pgid: int, how: str, *, defer: bool = False) -> None:
        """
        Mark the latest open record of a process group as ended; nothing if none is
        open. With ``defer``, with the next operation (``JournalLike.end_process``).
        """
        params = {"run_id": run_id, "pgid": pgid, "how": how, "now": time.time()}
        if defer:
            self._settles.append(Settle(Sql.end_process, params))
            return

        def write(conn: sqlite3.Connection) -> None:
            crash_point("end_process:before")
            conn.execute(Sql.end_process, params)

        await self._locked_write(f"end process group {pgid} of run {run_id}", write)
        crash_point("end_process:after")

    async def processes(self, run_id: str) -> list[ProcessRow]:
        """Return a run's process groups in the order they started."""
        async with self._use(f"read processes of run {run_id}") as db:
            rows = await db.execute_fetchall(Sql.processes, (run_id,))
        return [ProcessRow(*row) for row in rows]

    # -- notes --------------------------------------------------------------------------

    async def add_note(self, run_id: str, kind: str, body: dict[str, Any]) -> int:
        """
        Journal a miscellaneous event of a run (an amendment, a retuning, ...).

        Returns:
            The note's id: notes of a run are ordered by it.
        """
        text, packed, blobs = note_params(body)

        def write(conn: sqlite3.Connection) -> int:
            crash_point("add_note:before")
            row = conn.execute(Sql.add_note, (run_id, kind, text, time.time(), packed)).fetchone()
            put_blobs(conn, blobs)
            return int(row[0])

        note = await self._locked_write(f"add note to run {run_id}", write)
        crash_point("add_note:after")
        return note

    async def notes(
        self, run_id: str, *, after: int = 0, kinds: Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
        """
        Return a run's notes in order, as ``{id, run_id, kind, body, at}``.

        Args:
            run_id: the run.
            after: only notes with a larger id (what a poller has not seen yet).
            kinds: only notes of these kinds.
        """
        async with self._use(f"read notes of run {run_id}") as db:
            if kinds is None:
                rows = await db.execute_fetchall(Sql.notes, (run_id, after))
            else:
                rows = await db.execute_fetchall(
                    Sql.notes_of_kinds, (run_id, after, json.dumps(list(kinds)))
                )
            blobs = await read_blobs(db, note_refs(rows))
        return note_records(rows, blobs)

    async def latest_note(self, run_id: str, kind: str) -> dict[str, Any] | None:
        """
        Return a run's newest note of ``kind`` (shaped as :meth:`notes` shapes it), or
        None when it has none. Only that note's body is read, however many notes
        the run has.
        """
        async with self._use(f"read the latest {kind} note of run {run_id}") as db:
            rows = await db.execute_fetchall(Sql.latest_note, (run_id, kind))
            blobs = await read_blobs(db, note_refs(rows))
        found = note_records(rows, blobs)
        return found[0] if found else None

    async def put_snapshot(self, run_id: str, step: int, body: dict[str, Any]) -> None:
        """
        Keep a snapshot of a run's decision core, covering its steps up to
        ``step``; it replaces the run's earlier one (a snapshot is derived from
        the steps, not history of its own).
        """
        params = (run_id, step, dump(body), time.time())
        async with self._use(f"keep a snapshot of run {run_id}") as db:
            crash_point("put_snapshot:before")
            await db.execute(Sql.put_snapshot, params)
            crash_point("put_snapshot:after")

    async def snapshot(self, run_id: str) -> dict[str, Any] | None:
        """Return the body of a run's snapshot, or None when it has none."""
        async with self._use(f"read the snapshot of run {run_id}") as db:
            rows = list(await db.execute_fetchall(Sql.snapshot, (run_id,)))
        return load(rows[0][0]) if rows else None

    # -- maintenance --------------------------------------------------------------------

    async def integrity_check(self) -> str:
        """Run SQLite's integrity check; return ``"ok"`` when the file is sound."""
        async with self._use("check integrity") as db:
            rows = await db.execute_fetchall(Sql.integrity_check)
        return "\n".join(str(row[0]) for row in rows)
