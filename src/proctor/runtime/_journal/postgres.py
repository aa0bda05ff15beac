"""
The PostgreSQL journal: the SQLite journal's interface, for many hosts on one database.

:class:`PgJournal` has the same methods, arguments, results, errors and fences as
:class:`~proctor.runtime._journal.sqlite.Journal`; both satisfy
:class:`~proctor.runtime._journal.sqlite.JournalLike`, and
:func:`~proctor.runtime._journal.sqlite.open_journal` picks this one for a
``postgresql://`` URL. It talks to the server through an asyncpg pool (asyncpg is
asyncio-only, like aiosqlite). Each public method is one transaction, most of them
one statement.

How it keeps the SQLite journal's semantics:

- JSON columns are ``text``: what comes back is exactly what went in (key order,
  number spelling), and a NUL inside a JSON string is escaped. Times are
  ``double precision`` seconds since the epoch. Identifier columns use the ``"C"``
  collation, so runs sort (and prefixes match) by code point, as in SQLite.
- A fenced write checks the run's epoch (and status) in the same statement and
  locks the run's row ``FOR SHARE`` while doing so: a concurrent claim, which
  updates that row, either commits first (and the write sees the new epoch and
  writes nothing) or waits for the write to commit.
- Claims pick a run with ``FOR UPDATE SKIP LOCKED``, so concurrent workers never
  claim the same run and never wait for each other. Lease times are read from the
  server's clock (``now()``), the one clock every host shares.
- Effect dispatches, run ends and claims are never committed with
  ``synchronous_commit`` off, whatever the session's setting.
- The schema version is kept in the table ``proctor_schema``; migrations run in
  one transaction under an advisory lock, and every statement is idempotent.

One limit of PostgreSQL shows through: a ``text`` column cannot hold the character
U+0000. A plain text field that contains it (a step's ``reason``, a goal, ...)
is refused with :class:`~proctor.JournalError`; JSON fields are unaffected.

asyncpg errors never leave this module: they become
:class:`~proctor.JournalError` naming the journal's URL (without its password),
chained to the original.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import anyio
import asyncpg
import attrs

from proctor._errors import (
    ConfigError,
    EffectError,
    FencedError,
    JournalError,
    ProctorError,
    RunNotFoundError,
    SchemaError,
)
from proctor._logging import get_logger
from proctor.runtime._journal.base import (
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
from proctor.runtime._journal.crash import boundaries
from proctor.runtime._journal.postgres_sql import STEP_ORDER, TABLES, Sql
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
from proctor.runtime._journal.schema import PG_MIGRATIONS, SCHEMA_VERSION

if TYPE_CHECKING:
    from asyncpg.pool import PoolConnectionProxy

    _Conn = PoolConnectionProxy[asyncpg.Record]
    _Pool = asyncpg.Pool[asyncpg.Record]

__all__ = ("DEFAULT_POOL_SIZE", "PgJournal")

log = get_logger()

#: The most connections one :class:`PgJournal` opens at once, unless told otherwise.
DEFAULT_POOL_SIZE = 10

#: The longest a close waits for the operations in flight to finish.
CLOSE_LIMIT = 30.0

#: How often a write that computes a task's next epoch is retried when a
#: concurrent one took that epoch first.
_EPOCH_RETRIES = 20

#: The key of the advisory lock that serializes migrations (``proctor`` in ASCII).
_MIGRATION_LOCK = 0x70726F63746F72

# --------------------------------------------------------------------------------------
# The journal
# --------------------------------------------------------------------------------------


@attrs.define(eq=False)
class PgJournal:
    """
    The PostgreSQL journal. Open it with :meth:`open`, or with ``open_journal(URL)``.

    One journal holds a pool of connections: operations from concurrent tasks run
    concurrently, each in its own transaction. The methods and their contracts are
    those of :class:`~proctor.runtime._journal.sqlite.Journal`.
    """

    _url: str
    _pool: _Pool | None
    _durable_set: bool = False
    # Spend records (a row each) written with the journal's next operation.
    _deferred: list[SpendRecord] = attrs.field(factory=list, init=False)
    # Effect settlements and process ends (statement, arguments) written with the
    # next operation.
    _settles: list[tuple[str, tuple[Any, ...]]] = attrs.field(factory=list, init=False)

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        synchronous: Synchronous = "NORMAL",
        pool_size: int = DEFAULT_POOL_SIZE,
    ) -> PgJournal:
        """
        Connect to the journal at ``url``, creating and migrating its schema as needed.

        Args:
            url: ``postgresql://USER:PASSWORD@HOST:PORT/DATABASE``; query parameters
                that asyncpg does not know are sent as server settings (for example
                ``?search_path=proctor`` to keep the tables in a schema of their own).
            synchronous: ``OFF`` and ``NORMAL`` (the default) commit ordinary
                writes with ``synchronous_commit = off``, as SQLite's ``NORMAL``
                does: a write survives the death of the process that made it, and
                the server's last writes may be lost only if the server's machine
                crashes. ``FULL`` and ``EXTRA`` keep the server's setting. Effect
                dispatches, run ends and claims are never committed with
                ``synchronous_commit`` off.
            pool_size: the most connections the journal opens at once.

        Raises:
            ConfigError: ``synchronous`` is not OFF, NORMAL, FULL or EXTRA, or
                ``pool_size`` is below 1.
            SchemaError: the journal was written by a newer proctor.
            JournalError: the server could not be reached or refused the connection.
        """
        if synchronous not in SYNCHRONOUS:
            raise ConfigError(
                f"journal synchronous level must be one of {', '.join(SYNCHRONOUS)}, "
                f"got {synchronous!r}"
            )
        if pool_size < 1:
            raise ConfigError(f"a journal's pool needs at least 1 connection, got {pool_size}")
        shown = _redact(url)
        # NORMAL means what it means for SQLite: durable against the writer's death.
        off = synchronous in ("OFF", "NORMAL")
        settings = {"synchronous_commit": "off"} if off else None
        try:
            pool = await asyncpg.create_pool(
                url,
                min_size=1,
                max_size=pool_size,
                server_settings=settings,
                reset=_keep_session,
            )
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, ValueError) as exc:
            raise JournalError(f"journal {shown}: could not open: {_describe(exc)}") from exc
        journal = cls(shown, pool)
        try:
            await journal._setup()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await journal.close()
            raise
        return journal

    async def _setup(self) -> None:
        async with self._use("open") as conn:
            probe = await conn.fetchrow(Sql.probe)
            assert probe is not None  # a SELECT without FROM returns one row
            exists, sync_default = probe
            # Durable commits need synchronous_commit raised only where the
            # session's default is off (the server's setting, or ours for OFF).
            self._durable_set = sync_default == "off"
            version = await self._schema_version(conn) if exists else 0
            if version == SCHEMA_VERSION:
                return
            async with self._transaction(conn):
                await conn.execute(Sql.migration_lock, _MIGRATION_LOCK)
                await conn.execute(Sql.schema_table)
                # Read again under the lock: another host may have migrated since.
                version = await self._schema_version(conn)
                for script in PG_MIGRATIONS[version:]:
                    await conn.execute(script)
                if version < SCHEMA_VERSION:
                    await conn.execute(Sql.record_version, SCHEMA_VERSION)
            if version < SCHEMA_VERSION:
                log.info(
                    "journal.migrated",
                    path=self._url,
                    from_version=version,
                    to_version=SCHEMA_VERSION,
                )

    async def _schema_version(self, conn: _Conn) -> int:
        version = int(await conn.fetchval(Sql.schema_version))
        if version > SCHEMA_VERSION:
            raise SchemaError(
                f"journal {self._url} has schema version {version}, but this proctor "
                f"knows versions up to {SCHEMA_VERSION}: open it with a newer proctor"
            )
        return version

    @property
    def path(self) -> str:
        """The journal's URL, without its password."""
        return self._url

    async def close(self) -> None:
        """
        Close the pool, after the operations in flight, writing the deferred
        spend first. Closing twice is fine.
        """
        if self._pool is not None and (self._deferred or self._settles):
            try:
                async with self._use("write deferred spend"):
                    pass
            except JournalError as exc:
                # Closing still closes: what could not be written is said.
                log.error("journal.deferred_spend_lost", journal=self._url, error=str(exc))
        pool, self._pool = self._pool, None
        if pool is None:
            return
        with anyio.move_on_after(CLOSE_LIMIT, shield=True) as scope:
            await pool.close()
        if scope.cancelled_caught:
            pool.terminate()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- plumbing ---------------------------------------------------------------------

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """Translate asyncpg's errors into :class:`JournalError` naming the URL."""
        try:
            yield
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            raise JournalError(f"journal {self._url}: could not {what}: {_describe(exc)}") from exc

    @contextlib.asynccontextmanager
    async def _use(self, what: str, *, flush: bool = True) -> AsyncIterator[_Conn]:
        """
        Hold a connection of the pool for one operation, translating its errors;
        write the deferred spend first unless the operation writes it itself.
        """
        pool = self._pool
        if pool is None:
            raise JournalError(f"journal {self._url} is closed: could not {what}")
        with self._errors(what):
            conn = await pool.acquire()
            try:
                if flush and (self._deferred or self._settles):
                    await self._flush(conn)
                yield conn
            finally:
                await self._release(pool, conn)

    async def _flush(self, conn: _Conn) -> None:
        """Write the deferred spend rows; keep them for the next operation if that fails."""
        rows, self._deferred = self._deferred, []
        settles, self._settles = self._settles, []
        try:
            with anyio.CancelScope(shield=True):
                async with self._transaction(conn):
                    if rows:
                        await conn.execute(Sql.add_spend_rows, *_spend_arrays(rows))
                    for sql, args in settles:
                        await conn.execute(sql, *args)
        except BaseException:
            self._deferred[:0] = rows
            self._settles[:0] = settles
            raise

    @staticmethod
    async def _release(pool: _Pool, conn: _Conn) -> None:
        """
        Give a connection back, settling whatever it was doing first.

        After a cancellation, asyncpg waits for the server to acknowledge the
        cancelled statement, then rolls back any open transaction. Waiting for
        that here, shielded, means a cancelled operation has either happened or
        not by the time the cancellation reaches the caller, as with SQLite.
        """
        with anyio.move_on_after(CLOSE_LIMIT, shield=True) as scope:
            try:
                await pool.release(conn)
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
                # asyncpg has closed a connection it could not reset; the pool
                # opens another when needed.
                log.warning("journal.connection_dropped", error=str(exc))
        if scope.cancelled_caught:
            conn.terminate()

    @contextlib.asynccontextmanager
    async def _transaction(self, conn: _Conn, *, durable: bool = False) -> AsyncIterator[None]:
        """Run the body in one transaction, committed durably if asked."""
        await conn.execute(Sql.begin_durable if durable and self._durable_set else Sql.begin)
        try:
            yield
        except (asyncpg.PostgresError, ProctorError):
            # If even the rollback fails, _release settles the connection; the
            # error worth reporting is the first one.
            with (
                anyio.CancelScope(shield=True),
                contextlib.suppress(asyncpg.PostgresError, asyncpg.InterfaceError, OSError),
            ):
                await conn.execute(Sql.rollback)
            raise
        # Anything else (a cancellation) is left to _release, which waits for
        # the connection to settle and rolls the transaction back.
        await conn.execute(Sql.commit)

    @contextlib.asynccontextmanager
    async def _durable(self, conn: _Conn) -> AsyncIterator[None]:
        """Commit the body's one statement durably: in a transaction only if needed."""
        if not self._durable_set:
            yield
            return
        async with self._transaction(conn, durable=True):
            yield

    async def _diagnose_run(self, conn: _Conn, run_id: str, what: str) -> tuple[str, int]:
        """Return the run's status and epoch, or raise RunNotFoundError."""
        row = await conn.fetchrow(Sql.run_fence, run_id)
        if row is None:
            raise RunNotFoundError(f"journal {self._url}: no run {run_id!r} ({what})")
        return str(row[0]), int(row[1])

    def _fenced(self, run_id: str, epoch: int, status: str, current: int, what: str) -> FencedError:
        return fenced_error(self._url, run_id, epoch, status, current, what)

    # -- tasks --------------------------------------------------------------------------

    @boundaries("put_task")
    async def put_task(
        self, task_id: str, goal: str, spec: dict[str, Any], contract_version: str
    ) -> None:
        """Record a task, or update the spec and contract version of a known one."""
        async with self._use(f"record task {task_id}") as conn:
            await conn.execute(
                Sql.put_task, task_id, goal, dump(spec), contract_version, time.time()
            )

    async def get_task(self, task_id: str) -> dict[str, Any]:
        """
        Return a task as ``{task_id, goal, spec, contract_version, created_at}``.

        Raises:
            JournalError: no such task.
        """
        async with self._use(f"read task {task_id}") as conn:
            row = await conn.fetchrow(Sql.get_task, task_id)
        if row is None:
            raise JournalError(f"journal {self._url}: no task {task_id!r}")
        return task_record(row)

    # -- runs ---------------------------------------------------------------------------

    @boundaries("create_run")
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

        Raises:
            JournalError: the run id is taken, or the task or parent run is unknown.
        """
        args = (run_id, task_id, parent_run_id, dump(policy), policy_version, host)
        what = f"create run {run_id}"
        async with self._use(what) as conn:
            for _ in range(_EPOCH_RETRIES):
                try:
                    epoch = await conn.fetchval(Sql.create_run, *args, time.time())
                except asyncpg.UniqueViolationError as exc:
                    if exc.constraint_name == "runs_task_epoch":
                        continue  # a concurrent run of the task took that epoch
                    why = f"run {run_id!r} already exists"
                    raise JournalError(f"journal {self._url}: could not {what}: {why}") from exc
                except asyncpg.ForeignKeyViolationError as exc:
                    why = f"task {task_id!r} or parent run {parent_run_id!r} is not in the journal"
                    raise JournalError(f"journal {self._url}: could not {what}: {why}") from exc
                return int(epoch)
        raise JournalError(
            f"journal {self._url}: could not {what}: {_EPOCH_RETRIES} concurrent runs of "
            f"task {task_id!r} took the next epoch first"
        )

    @boundaries("end_run")
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

        Raises:
            ConfigError: ``disposition`` is not a terminal disposition.
            FencedError: the run has ended or its epoch is not ``epoch``.
            RunNotFoundError: no such run.
        """
        if disposition not in DISPOSITIONS:
            raise ConfigError(
                f"disposition must be one of {', '.join(DISPOSITIONS)}, got {disposition!r}"
            )
        args = (
            run_id,
            epoch,
            disposition,
            dump_opt(stop_reason),
            time.time(),
            candidate_digest,
            dump_opt(handoff),
        )
        what = "end"
        async with self._use(f"end run {run_id}") as conn:
            async with self._durable(conn):
                status = await conn.execute(Sql.end_run, *args)
            if _count(status) != 1:
                status, current = await self._diagnose_run(conn, run_id, what)
                raise self._fenced(run_id, epoch, status, current, what)

    async def get_run(self, run_id: str) -> RunRow:
        """
        Return a run by its id, or by a unique prefix of at least 6 characters.

        Raises:
            RunNotFoundError: no run has that id, or the prefix is short or ambiguous.
        """
        async with self._use(f"read run {run_id}") as conn:
            rows = await conn.fetch(Sql.get_run, run_id)
            if not rows and len(run_id) >= MIN_PREFIX:
                rows = await conn.fetch(*_prefix_query(run_id))
        if len(rows) == 1:
            return run_row(rows[0])
        if rows:
            ids = ", ".join(str(row[0]) for row in rows)
            raise RunNotFoundError(
                f"journal {self._url}: run id prefix {run_id!r} is ambiguous "
                f"(matches {ids}, ...): give more characters"
            )
        hint = "" if len(run_id) >= MIN_PREFIX else f" (a prefix needs {MIN_PREFIX}+ characters)"
        raise RunNotFoundError(f"journal {self._url}: no run {run_id!r}{hint}")

    async def list_runs(self, limit: int = 50) -> list[RunRow]:
        """Return up to ``limit`` runs, newest first."""
        async with self._use("list runs") as conn:
            rows = await conn.fetch(Sql.list_runs, limit)
        return [run_row(row) for row in rows]

    async def runs_of_task(self, task_id: str) -> list[RunRow]:
        """Return a task's runs, oldest epoch first."""
        async with self._use(f"list runs of task {task_id}") as conn:
            rows = await conn.fetch(Sql.runs_of_task, task_id)
        return [run_row(row) for row in rows]

    # No crash boundary: see Journal.heartbeat.
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
        """Say that a running run's host is alive (see :meth:`Journal.heartbeat`)."""
        async with self._use(f"beat for run {run_id}") as conn:
            status = await conn.execute(
                Sql.heartbeat,
                run_id,
                epoch,
                time.time(),
                waiting,
                pid,
                workspace,
                None if every is None else float(every),
            )
        return _count(status) == 1

    async def live_runs(self, workspace: str | None = None) -> list[RunRow]:
        """Return the runs still ``running``, oldest first (see :meth:`Journal.live_runs`)."""
        async with self._use("list running runs") as conn:
            if workspace is None:
                rows = await conn.fetch(Sql.live_runs)
            else:
                rows = await conn.fetch(Sql.live_runs_at, workspace)
        return [run_row(row) for row in rows]

    # -- leases -------------------------------------------------------------------------

    @boundaries("submit_run")
    async def submit_run(
        self, run_id: str, task_id: str, *, policy: dict[str, Any], policy_version: str
    ) -> None:
        """
        Queue a run of a known task, for a worker to claim: status ``queued``, epoch 0.

        Raises:
            JournalError: the run id is taken, the task is unknown, or the task
                already has a queued run.
        """
        what = f"submit run {run_id}"
        async with self._use(what) as conn:
            try:
                await conn.execute(
                    Sql.submit_run, run_id, task_id, dump(policy), policy_version, time.time()
                )
            except asyncpg.UniqueViolationError as exc:
                if await conn.fetchrow(Sql.run_fence, run_id) is not None:
                    why = f"run {run_id!r} already exists"
                else:
                    # (task_id, epoch 0) is taken.
                    why = f"task {task_id!r} already has a queued run"
                raise JournalError(f"journal {self._url}: could not {what}: {why}") from exc
            except asyncpg.ForeignKeyViolationError as exc:
                why = f"task {task_id!r} is not in the journal"
                raise JournalError(f"journal {self._url}: could not {what}: {why}") from exc

    @boundaries("claim_run")
    async def claim_run(self, worker: str, lease_seconds: float) -> Claimed | None:
        """
        Claim the oldest run that is queued, or running under an expired lease.

        Returns:
            The claimed run, or None when no run can be claimed.

        Raises:
            ConfigError: ``worker`` is empty or ``lease_seconds`` is negative or not finite.
        """
        check_worker(worker)
        check_lease(lease_seconds)
        async with self._use("claim a run") as conn:
            for _ in range(_EPOCH_RETRIES):
                try:
                    async with self._durable(conn):
                        row = await conn.fetchrow(Sql.claim_run, worker, float(lease_seconds))
                except asyncpg.UniqueViolationError as exc:
                    if exc.constraint_name != "runs_task_epoch":
                        raise
                    continue  # a concurrent claim of the same task took that epoch
                break
            else:
                raise JournalError(
                    f"journal {self._url}: could not claim a run: {_EPOCH_RETRIES} "
                    "concurrent claims of the same task took the next epoch first"
                )
        if row is None:
            return None
        run_id, task_id, epoch, previous = row
        claimed = Claimed(run_id, task_id, int(epoch), int(previous))
        log.info("journal.claimed", run_id=run_id, worker=worker, epoch=claimed.epoch)
        return claimed

    @boundaries("renew_lease")
    async def renew_lease(self, run_id: str, epoch: int, lease_seconds: float) -> bool:
        """
        Extend the lease of a run this worker owns to ``lease_seconds`` from now.

        Returns:
            True when renewed; False, changing nothing, when the run is no longer
            running under ``epoch``.

        Raises:
            ConfigError: ``lease_seconds`` is negative or not finite.
            RunNotFoundError: no such run.
        """
        check_lease(lease_seconds)
        what = "renew the lease"
        async with self._use(f"{what} of run {run_id}") as conn:
            status = await conn.execute(Sql.renew_lease, run_id, epoch, float(lease_seconds))
            if _count(status) == 1:
                return True
            await self._diagnose_run(conn, run_id, what)
        return False

    @boundaries("release_run")
    async def release_run(self, run_id: str, epoch: int) -> None:
        """
        Give up the lease on a run. A run still running may be claimed at once.

        Raises:
            RunNotFoundError: no such run.
        """
        what = "release"
        async with self._use(f"{what} run {run_id}") as conn:
            status = await conn.execute(Sql.release_run, run_id, epoch)
            if _count(status) != 1:
                await self._diagnose_run(conn, run_id, what)

    # -- holders ------------------------------------------------------------------------

    @boundaries("hold_task")
    async def hold_task(
        self, task_id: str, run_id: str, holder: str, *, replacing: str | None = None
    ) -> HolderRow | None:
        """
        Take the task for ``holder`` if no one holds it, or ``replacing`` does; return
        None when taken, else who holds it (see :meth:`JournalLike.hold_task`).

        Raises:
            JournalError: the task is not in the journal.
        """
        what = f"hold task {task_id}"
        async with self._use(what) as conn:
            try:
                taken = await conn.fetch(
                    Sql.hold_task, task_id, run_id, holder, time.time(), replacing
                )
            except asyncpg.ForeignKeyViolationError as exc:
                raise JournalError(
                    f"journal {self.path}: could not {what}: the task is not in the journal"
                ) from exc
            if taken:
                return None
            rows = await conn.fetch(Sql.task_holder, task_id)
        # Released between the two statements: nobody holds it now, but not us either.
        return HolderRow(*rows[0]) if rows else HolderRow(task_id, "", "", 0.0)

    @boundaries("release_task")
    async def release_task(self, task_id: str, holder: str) -> None:
        """Let go of the task if ``holder`` holds it (see :meth:`JournalLike.release_task`)."""
        async with self._use(f"release task {task_id}") as conn:
            await conn.execute(Sql.release_task, task_id, holder)

    async def task_holder(self, task_id: str) -> HolderRow | None:
        """Return who holds the task, or None (see :meth:`JournalLike.task_holder`)."""
        async with self._use(f"read the holder of task {task_id}") as conn:
            rows = await conn.fetch(Sql.task_holder, task_id)
        return HolderRow(*rows[0]) if rows else None

    # -- steps --------------------------------------------------------------------------

    @boundaries("append_step")
    async def append_step(self, run_id: str, epoch: int, record: Mapping[str, Any]) -> int:
        """
        Journal one step, with the deferred spend, in one statement; return the
        id of the run's newest note (see :meth:`Journal.append_step`).

        Raises:
            ConfigError: the record lacks a field or belongs to another run.
            FencedError: the run's epoch is not ``epoch``.
            RunNotFoundError: no such run.
            JournalError: the step number is already journaled.
        """
        params = step_params(run_id, epoch, record)
        what = f"append step {params['step']}"
        async with self._use(f"{what} of run {run_id}", flush=False) as conn:
            rows, self._deferred = self._deferred, []
            settles, self._settles = self._settles, []
            try:
                # The deferred settlements and the step share one transaction.
                async with contextlib.AsyncExitStack() as stack:
                    if settles:
                        await stack.enter_async_context(self._transaction(conn))
                    for sql, args in settles:
                        await conn.execute(sql, *args)
                    row = await conn.fetchrow(
                        Sql.append_step_with_spend,
                        *_step_args(params),
                        epoch,
                        *_spend_arrays(rows),
                        *_blob_arrays(params["blobs"]),
                    )
            except asyncpg.UniqueViolationError as exc:
                # The statement wrote nothing: the spend waits for the next operation.
                self._deferred[:0] = rows
                self._settles[:0] = settles
                raise self._duplicate_step(run_id, what) from exc
            except BaseException:
                self._deferred[:0] = rows
                self._settles[:0] = settles
                raise
            assert row is not None  # a SELECT without FROM returns one row
            if row[0] == 1:
                return int(row[1] or 0)
            status, current = await self._diagnose_run(conn, run_id, what)
            raise self._fenced(run_id, epoch, status, current, what)

    @boundaries("append_steps")
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
        async with self._use(f"{what} of run {run_id}") as conn:
            try:
                async with self._transaction(conn):
                    # The run's row stays locked until the commit: no claim can
                    # move its epoch under the batch.
                    row = await conn.fetchrow(Sql.run_fence_locked, run_id)
                    if row is None:
                        raise RunNotFoundError(f"journal {self._url}: no run {run_id!r} ({what})")
                    status, current = str(row[0]), int(row[1])
                    if current != epoch or status == "queued":
                        raise self._fenced(run_id, epoch, status, current, what)
                    await conn.executemany(Sql.insert_step, [_step_args(p) for p in params])
                    blobs = dict(b for p in params for b in p["blobs"])
                    if blobs:
                        await conn.execute(Sql.put_blobs, *_blob_arrays(sorted(blobs.items())))
            except asyncpg.UniqueViolationError as exc:
                raise self._duplicate_step(run_id, what) from exc

    def _duplicate_step(self, run_id: str, what: str) -> JournalError:
        why = "that step number is already journaled"
        return JournalError(f"journal {self._url}: could not {what} of run {run_id}: {why}")

    async def steps(self, run_id: str, *, after: int = 0) -> list[dict[str, Any]]:
        """Return a run's steps in order (see :meth:`Journal.steps`)."""
        async with self._use(f"read steps of run {run_id}") as conn:
            rows = await conn.fetch(Sql.steps, run_id, after)
            blobs = await _read_blobs(conn, step_refs(rows))
        return [step_record(row, blobs) for row in rows]

    async def ending_step(self, run_id: str) -> dict[str, Any] | None:
        """Return the last step with a disposition (see :meth:`Journal.ending_step`)."""
        async with self._use(f"read the ending step of run {run_id}") as conn:
            row = await conn.fetchrow(Sql.ending_step, run_id)
            blobs = {} if row is None else await _read_blobs(conn, step_refs([row]))
        return None if row is None else step_record(row, blobs)

    # -- effects ------------------------------------------------------------------------

    @boundaries("record_dispatch")
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
        Record, durably, that an effect is about to be dispatched; with ``note``,
        journal the run's ``effect`` note in the same transaction and return its
        id (see :meth:`Journal.record_dispatch`).

        Raises:
            FencedError: the run has ended or its epoch is not ``epoch``.
            RunNotFoundError: no such run.
            EffectError: ``key`` was recorded with other arguments.
        """
        args = (run_id, epoch, key, task_id, step, tool, target, args_hash, time.time())
        what = f"dispatch of effect {key}"
        async with self._use(f"record {what}") as conn:
            if note is None:
                async with self._durable(conn):
                    status = await conn.execute(Sql.record_dispatch, *args)
                if _count(status) == 1:
                    return None
            else:
                text, packed, blobs = note_params(dict(note))
                async with self._transaction(conn, durable=self._durable_set):
                    status = await conn.execute(Sql.record_dispatch, *args)
                    if _count(status) == 1:
                        return int(
                            await conn.fetchval(
                                Sql.add_note,
                                run_id,
                                "effect",
                                text,
                                args[-1],
                                packed,
                                *_blob_arrays(blobs),
                            )
                        )
            row = await conn.fetchrow(Sql.dispatch_check, run_id, key)
        if row is None:
            raise RunNotFoundError(f"journal {self._url}: no run {run_id!r} ({what})")
        status, current, known_hash = row
        if status != RUNNING or current != epoch:
            raise self._fenced(run_id, epoch, str(status), int(current), what)
        raise EffectError(
            f"idempotency key {key} reused with other arguments "
            f"(recorded {known_hash}, now {args_hash}): give the new call its own key"
        )

    @boundaries("settle_effect")
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
        Set an effect's state and outcome, fenced by ``run_id`` and ``epoch`` if
        given; with ``defer``, with the next operation (see :meth:`Journal.settle_effect`).

        Raises:
            ConfigError: ``state`` is not one of the effect states, or only one of
                ``run_id`` and ``epoch`` is given.
            FencedError: ``run_id``'s epoch is not ``epoch``.
            RunNotFoundError: no run ``run_id``.
            EffectError: no effect has that key.
        """
        fenced = settle_fence(state, run_id, epoch)
        args: tuple[Any, ...] = (key, state, dump_opt(outcome), time.time())
        what = f"settle effect {key}"
        if defer:
            if fenced:
                self._settles.append((Sql.settle_effect_fenced, (*args, run_id, epoch)))
            else:
                self._settles.append((Sql.settle_effect, args))
            return
        async with self._use(what) as conn:
            if fenced:
                status = await conn.execute(Sql.settle_effect_fenced, *args, run_id, epoch)
            else:
                status = await conn.execute(Sql.settle_effect, *args)
            if _count(status) == 1:
                return
            known = await conn.fetchval(Sql.effect_exists, key)
            if known is not None and run_id is not None and epoch is not None:
                status, current = await self._diagnose_run(conn, run_id, what)
                raise self._fenced(run_id, epoch, status, current, what)
        raise EffectError(f"journal {self._url}: no effect with idempotency key {key!r}")

    async def effects(
        self,
        *,
        task_id: str | None = None,
        run_id: str | None = None,
        states: Sequence[str] | None = None,
    ) -> list[EffectRow]:
        """Return the effects that match every filter given, oldest first."""
        given: dict[str, Any] = {"task_id": task_id, "run_id": run_id}
        if states is not None:
            given["states"] = list(states)
        present = [name for name, value in given.items() if value is not None]
        sql = Sql.filtered(Sql.effects, Sql.effects_filters, present, Sql.effects_order)
        async with self._use("read effects") as conn:
            rows = await conn.fetch(sql, *(given[name] for name in present))
        return [effect_row(row) for row in rows]

    # -- evidence -----------------------------------------------------------------------

    @boundaries("add_evidence")
    async def count_effects(self, task_id: str) -> int:
        """Return how many effects the task has journaled, in every state."""
        async with self._use(f"count effects of task {task_id}") as conn:
            return int(await conn.fetchval(Sql.count_effects, task_id))

    async def effect_notes(self, run_id: str, keys: Sequence[str]) -> list[dict[str, Any]]:
        """Return the run's effect notes of these keys, in order (see ``JournalLike``)."""
        if not keys:
            return []
        async with self._use(f"read effect notes of run {run_id}") as conn:
            rows = await conn.fetch(Sql.effect_notes, run_id, key_needles(keys))
            blobs = await _read_blobs(conn, note_refs(rows))
        return of_keys(note_records(rows, blobs), keys)

    async def add_evidence(self, run_id: str, task_id: str, record: Mapping[str, Any]) -> None:
        """
        Journal one piece of evidence: an unstructured evidence record.

        Raises:
            ConfigError: the record lacks ``candidate_digest``, ``contract_version``,
                ``check``, ``passed`` or ``at``.
        """
        args = (
            run_id,
            task_id,
            record_field(record, "candidate_digest", "evidence"),
            record_field(record, "contract_version", "evidence"),
            record_field(record, "check", "evidence"),
            bool(record_field(record, "passed", "evidence")),
            dump(record),
            record_field(record, "at", "evidence"),
        )
        async with self._use(f"add evidence to run {run_id}") as conn:
            await conn.execute(Sql.add_evidence, *args)

    async def evidence(
        self, *, run_id: str | None = None, task_id: str | None = None
    ) -> list[dict[str, Any]]:
        """Return the evidence records that match every filter given, oldest first."""
        given = {"task_id": task_id, "run_id": run_id}
        present = [name for name, value in given.items() if value is not None]
        sql = Sql.filtered(Sql.evidence, Sql.evidence_filters, present, Sql.evidence_order)
        async with self._use("read evidence") as conn:
            rows = await conn.fetch(sql, *(given[name] for name in present))
        return [load(row[0]) for row in rows]

    # -- spend --------------------------------------------------------------------------

    @boundaries("add_spend")
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
        Journal spend: one row, its amounts in one column; deferred,
        with the journal's next operation (see :meth:`Journal.add_spend`).

        Raises:
            ConfigError: ``kind`` is not a spend kind, a dimension is not a name, or an
                amount is not finite.
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
        async with self._use(f"read spend of task {task_id}") as conn:
            rows = await conn.fetch(Sql.spend_totals, task_id, list(kinds))
        return {str(dimension): float(total) for dimension, total in rows}

    async def spend_rows(self, run_id: str) -> list[SpendRow]:
        """Return a run's spend rows (every kind) in the order they were written."""
        async with self._use(f"read spend of run {run_id}") as conn:
            rows = await conn.fetch(Sql.spend_rows, run_id)
        return spend_rows_of(rows)

    # -- processes ----------------------------------------------------------------------

    @boundaries("record_process")
    async def record_process(self, run_id: str, pgid: int, command: str) -> None:
        """Journal a child process group the run started."""
        async with self._use(f"record process group {pgid} of run {run_id}") as conn:
            await conn.execute(Sql.record_process, run_id, pgid, clean(command), time.time())

    @boundaries("end_process")
    async def end_process(self, run_id: str, pgid: int, how: str, *, defer: bool = False) -> None:
        """
        Mark the latest open record of a process group as ended; nothing if none is
        open. With ``defer``, with the next operation (``JournalLike.end_process``).
        """
        if defer:
            self._settles.append((Sql.end_process, (run_id, pgid, how, time.time())))
            return
        async with self._use(f"end process group {pgid} of run {run_id}") as conn:
            await conn.execute(Sql.end_process, run_id, pgid, how, time.time())

    async def processes(self, run_id: str) -> list[ProcessRow]:
        """Return a run's process groups in the order they started."""
        async with self._use(f"read processes of run {run_id}") as conn:
            rows = await conn.fetch(Sql.processes, run_id)
        return [ProcessRow(*row) for row in rows]

    # -- notes --------------------------------------------------------------------------

    @boundaries("add_note")
    async def add_note(self, run_id: str, kind: str, body: dict[str, Any]) -> int:
        """Journal a miscellaneous event of a run; return its id (see :meth:`Journal.add_note`)."""
        text, packed, blobs = note_params(body)
        async with self._use(f"add note to run {run_id}") as conn:
            return int(
                await conn.fetchval(
                    Sql.add_note, run_id, kind, text, time.time(), packed, *_blob_arrays(blobs)
                )
            )

    async def notes(
        self, run_id: str, *, after: int = 0, kinds: Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
        """Return a run's notes in order (see :meth:`Journal.notes`)."""
        async with self._use(f"read notes of run {run_id}") as conn:
            if kinds is None:
                rows = await conn.fetch(Sql.notes, run_id, after)
            else:
                rows = await conn.fetch(Sql.notes_of_kinds, run_id, after, list(kinds))
            blobs = await _read_blobs(conn, note_refs(rows))
        return note_records(rows, blobs)

    async def latest_note(self, run_id: str, kind: str) -> dict[str, Any] | None:
        """Return a run's newest note of ``kind``, or None (see :meth:`Journal.latest_note`)."""
        async with self._use(f"read the latest {kind} note of run {run_id}") as conn:
            rows = await conn.fetch(Sql.latest_note, run_id, kind)
            blobs = await _read_blobs(conn, note_refs(rows))
        found = note_records(rows, blobs)
        return found[0] if found else None

    @boundaries("put_snapshot")
    async def put_snapshot(self, run_id: str, step: int, body: dict[str, Any]) -> None:
        """Keep a run's snapshot, replacing its earlier one (see :meth:`Journal.put_snapshot`)."""
        async with self._use(f"keep a snapshot of run {run_id}") as conn:
            await conn.execute(Sql.put_snapshot, run_id, step, dump(body), time.time())

    async def snapshot(self, run_id: str) -> dict[str, Any] | None:
        """Return the body of a run's snapshot, or None (see :meth:`Journal.snapshot`)."""
        async with self._use(f"read the snapshot of run {run_id}") as conn:
            body = await conn.fetchval(Sql.snapshot, run_id)
        return None if body is None else load(body)

    # -- maintenance --------------------------------------------------------------------

    async def integrity_check(self) -> str:
        """Check that every table is there at the current schema version; ``"ok"`` if so."""
        async with self._use("check integrity") as conn:
            missing = [str(row[0]) for row in await conn.fetch(Sql.tables, list(TABLES))]
            version = None if missing else int(await conn.fetchval(Sql.schema_version))
        problems = [f"table {name} is missing" for name in missing]
        if version is not None and version != SCHEMA_VERSION:
            problems.append(f"schema version is {version}, expected {SCHEMA_VERSION}")
        return "\n".join(problems) or "ok"


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def _step_args(params: Mapping[str, Any]) -> tuple[Any, ...]:
    """The parameters of a step row, in the order of ``postgres_sql.STEP_ORDER``."""
    return tuple(params[name] for name in STEP_ORDER)


async def _keep_session(conn: asyncpg.Connection) -> None:
    """
    Reset nothing when a connection goes back to the pool.

    asyncpg rolls back an open transaction itself; the journal leaves no other
    session state (it listens to nothing, takes no advisory lock, and its
    settings are the connection's own or ``SET LOCAL``), so asyncpg's default
    reset (``RESET ALL``, ``UNLISTEN *``, ...) would be a round trip to the
    server after every operation for nothing.
    """


def _blob_arrays(blobs: Sequence[tuple[str, bytes]]) -> tuple[list[str], list[bytes]]:
    """The two arrays (digests, contents) of ``postgres_sql._put_blobs``."""
    return [key for key, _ in blobs], [body for _, body in blobs]


async def _read_blobs(conn: _Conn, digests: set[str]) -> dict[str, Any]:
    """Read the blobs with these digests: their stored contents, by digest."""
    if not digests:
        return {}
    rows = await conn.fetch(Sql.blobs, sorted(digests))
    return {str(key): body for key, body in rows}


def _spend_arrays(rows: Sequence[tuple[Any, ...]]) -> tuple[list[Any], ...]:
    """The six arrays of ``postgres_sql.spend_rows`` (columns) from spend records."""
    if not rows:
        return ([], [], [], [], [], [])
    return tuple(list(column) for column in zip(*rows, strict=True))


def _count(status: str) -> int:
    """The number of rows a command touched, from its status (``UPDATE 1``, ``INSERT 0 1``)."""
    return int(status.rsplit(" ", 1)[-1])


def _prefix_query(prefix: str) -> tuple[str, str] | tuple[str, str, str]:
    """Return the statement and arguments that find the runs whose id starts with ``prefix``."""
    last = ord(prefix[-1])
    if last < 0x10FFFF and not 0xD800 <= last + 1 <= 0xDFFF:
        return Sql.runs_by_prefix, prefix, prefix[:-1] + chr(last + 1)
    return Sql.runs_by_prefix_scan, prefix


def _describe(exc: BaseException) -> str:
    """Say what went wrong, adding what a person can do where PostgreSQL is terse."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, asyncpg.CharacterNotInRepertoireError) and "0x00" in text:
        return f"{text} (PostgreSQL text cannot hold the character U+0000)"
    return text


def _redact(url: str) -> str:
    """Return ``url`` with its password, if any, replaced by ``***``."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, hosts = netloc.rsplit("@", 1)
        if ":" in userinfo:
            userinfo = userinfo.split(":", 1)[0] + ":***"
        netloc = f"{userinfo}@{hosts}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode(
            [(name, "***" if name == "password" else value) for name, value in pairs], safe="*"
        )
    return urlunsplit(parts._replace(netloc=netloc, query=query))
