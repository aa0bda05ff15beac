"""
The SQLite journal's plumbing: a transaction in the connection's thread, a batch of steps, paths.

What :class:`~proctor.runtime._journal.sqlite.Journal` does with ``sqlite3``
below aiosqlite: one hop to the connection's thread for a whole transaction,
the fate of each step in a batch written together, a migration script split
into statements, and the checks a journal path passes before SQLite sees it.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator, Sequence
from typing import Any, TypeVar, cast

import aiosqlite
import anyio
import attrs

from proctor._errors import ConfigError, JournalError, SchemaError
from proctor._logging import get_logger
from proctor.runtime._journal.crash import crash_point
from proctor.runtime._journal.schema import SCHEMA_VERSION, SQLITE_MIGRATIONS, SqliteMigration
from proctor.runtime._journal.sqlite_sql import Sql

__all__ = (
    "INLINE_TURN",
    "Inline",
    "Settle",
    "apply_migration",
    "schema_version",
    "setup",
    "sqlite_errors",
    "transaction",
    "StepWrite",
    "check_journal_path",
    "duplicate_step",
    "in_thread",
    "is_duplicate",
    "nothing",
    "prefix_query",
    "put_blobs",
    "read_blobs",
    "statements",
    "write_steps",
    "write_inline",
    "write_with_spend",
)

_T = TypeVar("_T")

log = get_logger()


@attrs.define(eq=False)
class StepWrite:
    """One step waiting to be written, and what became of it."""

    params: dict[str, Any]
    written: bool | None = None
    newest: int = 0
    duplicate: sqlite3.IntegrityError | None = None
    # The run's (status, epoch) when the write was fenced; None: no such run.
    fence: tuple[str, int] | None = None

    def reset(self) -> None:
        """Forget a fate its rolled-back transaction undid."""
        self.written, self.newest, self.duplicate, self.fence = None, 0, None, None


@attrs.frozen
class Settle:
    """An effect's settlement waiting for the journal's next transaction."""

    sql: str
    params: dict[str, Any]


def write_with_spend(
    rows: Sequence[tuple[Any, ...]],
    settles: Sequence[Settle],
    body: Callable[[sqlite3.Connection], _T],
    level: str | None,
    conn: sqlite3.Connection,
) -> _T:
    """
    One write transaction in the connection's thread: the deferred spend ``rows``
    and effect ``settles``, then ``body``; committed with ``synchronous=FULL`` when
    ``level`` (the level to go back to) is given.
    """
    if level is not None:
        conn.execute(Sql.synchronous("FULL"))
    try:
        conn.execute(Sql.begin)
        return _write_begun(rows, settles, body, conn)
    finally:
        if level is not None:
            conn.execute(Sql.synchronous(level))


#: Every this many ordinary commits, one goes to the writer thread instead of
#: the inline connection: the writer's commits checkpoint the WAL once it holds
#: 1,000 pages (the inline connection never does: a checkpoint syncs).
INLINE_TURN = 64

#: A durable commit is made inline while the last one synced in less than this
#: many seconds: the event loop's thread waits on the disk meanwhile, where the
#: trip to the writer thread and back costs it about 0.3 ms. A slower disk's
#: syncs go to the writer thread, the loop free while they wait.
INLINE_SYNC_LIMIT = 0.002

# The start of the WAL index (the ``-shm`` file, in the machine's byte order) as
# SQLite's file format has it: the header's version (at 0) and mxFrame, the last
# valid frame (at 16); the checkpoint's nBackfill, the frames copied back into
# the database (at 96).
_WAL_INDEX = struct.Struct("=I12xI76xI")
_WAL_INDEX_VERSION = 3007000


@attrs.define(eq=False)
class Inline:
    """
    A journal's inline connection: ordinary commits in the event loop's thread.

    An ordinary commit in WAL mode at ``synchronous=NORMAL`` syncs nothing: a
    trip to the writer thread and back costs more than the transaction. This
    connection makes it in the caller's thread when the file's write lock is
    free (it has no busy timeout: it never waits; when another connection
    holds the lock it writes nothing, and the writer thread waits instead);
    it does not checkpoint (every ``INLINE_TURN``-th commit is left to the
    writer thread, whose commits do). A durable commit is made here too while
    the disk syncs fast (``sync_seconds``, the last durable commit's, within
    ``INLINE_SYNC_LIMIT``), ``synchronous=FULL`` for its transaction.

    The one ordinary commit that syncs is the first after a checkpoint copied
    every frame back (the writer thread's, or another process's): it starts the
    WAL over and syncs its header, even at ``NORMAL``. Before each commit the
    WAL index says whether it is that one (one ``pread``); if it is, or the
    index cannot be read, it goes to the writer thread. The commit after an
    operation the writer thread ran goes there as well (``follow``): behind
    what that operation sent there.
    """

    conn: sqlite3.Connection
    # The WAL index, read only; None where it cannot be opened (every commit
    # then goes to the writer thread).
    shm: int | None = None
    writes: int = 0
    follow: bool = False
    sync_seconds: float = 0.0

    @classmethod
    def open(cls, name: str, synchronous: str) -> Inline | None:
        """Open it (foreign keys on, ``synchronous``); None if SQLite will not."""
        try:
            conn = sqlite3.connect(name, timeout=0, isolation_level=None, check_same_thread=False)
        except sqlite3.Error:
            return None
        try:
            for pragma in ("PRAGMA foreign_keys = ON", Sql.synchronous(synchronous)):
                conn.execute(pragma)
            conn.execute("PRAGMA wal_autocheckpoint = 0").fetchall()
            # Outside WAL mode a commit takes an exclusive lock (and syncs): not here.
            (mode,) = conn.execute("PRAGMA journal_mode").fetchone()
        except sqlite3.Error:
            conn.close()
            return None
        if str(mode).lower() != "wal":
            conn.close()
            return None
        try:
            shm: int | None = os.open(f"{name}-shm", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            shm = None
        return cls(conn, shm)

    def close(self) -> None:
        """Close the connection and the WAL index."""
        self.conn.close()
        if self.shm is not None:
            os.close(self.shm)
            self.shm = None

    def used_thread(self, durable_since: float | None = None) -> None:
        """
        A commit was made in the writer thread: what it follows is behind it. A
        durable one's time (since ``durable_since``, the trip's too) says where
        the next is made.
        """
        self.follow = False
        if durable_since is not None:
            self.sync_seconds = time.monotonic() - durable_since

    def restart_due(self) -> bool:
        """
        Whether the next write transaction starts the WAL over (a checkpoint copied
        every frame back): True as well when the WAL index does not tell.
        """
        if self.shm is None:
            return True
        try:
            data = os.pread(self.shm, _WAL_INDEX.size, 0)
        except OSError:
            return True
        if len(data) < _WAL_INDEX.size:
            return True
        version, last, backfilled = _WAL_INDEX.unpack(data)
        return bool(version != _WAL_INDEX_VERSION or (backfilled > 0 and backfilled >= last))

    def write(
        self,
        rows: Sequence[tuple[Any, ...]],
        settles: Sequence[Settle],
        body: Callable[[sqlite3.Connection], _T],
        *,
        durable: bool = False,
        level: str | None = None,
    ) -> tuple[bool, _T | None]:
        """
        :func:`write_inline`, unless it is the writer thread's turn: ``(False, None)``.

        Args:
            durable: commit with ``synchronous=FULL`` (when ``level``, the level to go
                back to, is given; without it, the connection's level syncs).
        """
        self.writes += 1
        if self.follow or self.writes % INLINE_TURN == 0 or self.restart_due():
            return False, None
        if not durable:
            return write_inline(rows, settles, body, self.conn)
        if self.sync_seconds > INLINE_SYNC_LIMIT:
            return False, None
        start = time.monotonic()
        if level is not None:
            self.conn.execute(Sql.synchronous("FULL"))
        try:
            return write_inline(rows, settles, body, self.conn)
        finally:
            if level is not None:
                self.conn.execute(Sql.synchronous(level))
            self.sync_seconds = time.monotonic() - start


def write_inline(
    rows: Sequence[tuple[Any, ...]],
    settles: Sequence[Settle],
    body: Callable[[sqlite3.Connection], _T],
    conn: sqlite3.Connection,
) -> tuple[bool, _T | None]:
    """
    :func:`write_with_spend` on the inline connection, in the caller's thread,
    if the journal's write lock is free: ``(False, None)`` when another
    connection holds it (nothing was written; the caller waits in the writer
    thread instead). The inline connection has no busy timeout, so this never
    waits for a lock; it syncs only when :meth:`Inline.write` makes it durable.
    """
    try:
        conn.execute(Sql.begin)
    except sqlite3.OperationalError as exc:
        # The primary code: SQLITE_BUSY_RECOVERY and the like are busy too.
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            return False, None
        raise
    return True, _write_begun(rows, settles, body, conn)


def _write_begun(
    rows: Sequence[tuple[Any, ...]],
    settles: Sequence[Settle],
    body: Callable[[sqlite3.Connection], _T],
    conn: sqlite3.Connection,
) -> _T:
    """The spend ``rows``, the ``settles`` and ``body`` in the begun transaction; commit."""
    try:
        if rows:
            crash_point("add_spend:before")
            conn.executemany(Sql.add_spend, rows)
        for settle in settles:
            crash_point("settle_effect:before")
            conn.execute(settle.sql, settle.params)
        result = body(conn)
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    if rows:
        crash_point("add_spend:after")
    for _ in settles:
        crash_point("settle_effect:after")
    return result


def write_steps(batch: Sequence[StepWrite], conn: sqlite3.Connection) -> None:
    """
    Write steps inside the caller's transaction; note each one's fate.

    A refused insert (a duplicate step) undoes only its own statement, so one
    run's refusal costs the others nothing.
    """
    for step in batch:
        run_id = step.params["run_id"]
        crash_point("append_step:before")
        try:
            step.written = conn.execute(Sql.append_step, step.params).rowcount == 1
        except sqlite3.IntegrityError as exc:
            step.written, step.duplicate = False, exc
        if step.written:
            put_blobs(conn, step.params["blobs"])
            step.newest = int(conn.execute(Sql.newest_note, (run_id,)).fetchone()[0] or 0)
        elif step.duplicate is None:
            step.fence = conn.execute(Sql.run_fence, (run_id,)).fetchone()


def put_blobs(conn: sqlite3.Connection, blobs: Sequence[tuple[str, bytes]]) -> None:
    """Write blobs (digest, contents) inside the caller's transaction, each once."""
    if blobs:
        conn.executemany(Sql.put_blob, blobs)


async def read_blobs(db: aiosqlite.Connection, digests: Collection[str]) -> dict[str, Any]:
    """Read the blobs with these digests: their stored contents, by digest."""
    if not digests:
        return {}
    rows = await db.execute_fetchall(Sql.blobs, (json.dumps(sorted(digests)),))
    return {str(key): body for key, body in rows}


if not callable(getattr(aiosqlite.Connection, "_execute", None)):  # pragma: no cover
    raise ImportError(
        f"proctor's journal runs a transaction in aiosqlite's thread through "
        f"aiosqlite.Connection._execute, which aiosqlite {aiosqlite.__version__} lacks: "
        "install an aiosqlite from 0.20 to 0.22 (pip install 'aiosqlite>=0.20,<0.23')"
    )


async def in_thread(db: aiosqlite.Connection, fn: Callable[[sqlite3.Connection], _T]) -> _T:
    """
    Call ``fn`` with the connection, in the connection's own thread.

    aiosqlite sends each statement to its thread and back; this sends a whole
    transaction at once. It goes through the same queue as every statement
    (``Connection._execute``, the function aiosqlite's own methods call), so it
    is ordered with them.
    """
    execute = cast(Callable[..., Awaitable[_T]], db._execute)
    return await execute(fn, db._conn)


def nothing(conn: sqlite3.Connection) -> None:
    """A transaction's body that adds nothing to it (only the deferred spend)."""


def statements(script: str) -> Iterator[str]:
    """Split an SQL script into its statements (``executescript`` would commit first)."""
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            yield pending.strip()
            pending = ""
    if pending.strip():
        raise AssertionError(f"an incomplete statement ends a migration: {pending!r}")


def is_duplicate(exc: sqlite3.IntegrityError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code in (sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, sqlite3.SQLITE_CONSTRAINT_UNIQUE)


def duplicate_step(path: str, what: str, exc: sqlite3.IntegrityError) -> JournalError:
    """Say why a step (``what``: ``append step 3 of run R``) could not be written."""
    why = "that step number is already journaled" if is_duplicate(exc) else str(exc)
    return JournalError(f"journal {path}: could not {what}: {why}")


def prefix_query(prefix: str) -> tuple[str, dict[str, str]]:
    """Return the statement and parameters that find the runs whose id starts with ``prefix``."""
    last = ord(prefix[-1])
    # The successor of the prefix bounds an index range; where it cannot be
    # spelled (the last code point, or a surrogate next), scan instead.
    if last < 0x10FFFF and not 0xD800 <= last + 1 <= 0xDFFF:
        return Sql.runs_by_prefix, {"low": prefix, "high": prefix[:-1] + chr(last + 1)}
    return Sql.runs_by_prefix_scan, {"low": prefix}


def check_journal_path(name: str, *, create: bool) -> None:
    # Before SQLite sees the path: it would make an empty journal of a mistyped
    # name, and say only "unable to open database file" of a missing directory.
    folder = os.path.dirname(os.path.abspath(name))
    if not os.path.isdir(folder):
        raise ConfigError(
            f"journal {name}: the directory {folder} does not exist "
            "(give the path of a journal file in an existing directory)"
        )
    if os.path.isdir(name):
        raise ConfigError(f"journal {name}: is a directory, not a journal file")
    if not create and not os.path.exists(name):
        raise ConfigError(
            f"journal {name}: no such file (give --journal the file a run "
            "wrote, such as proctor.db, or set PROCTOR_JOURNAL)"
        )


@contextlib.contextmanager
def sqlite_errors(path: str, what: str) -> Iterator[None]:
    """Translate ``sqlite3`` errors into :class:`JournalError` naming the journal's path."""
    try:
        yield
    except sqlite3.Error as exc:
        raise JournalError(f"journal {path}: could not {what}: {exc}") from exc
    except UnicodeDecodeError as exc:
        # SQLite's own message quoting a damaged schema, in bytes that are not UTF-8.
        raise JournalError(
            f"journal {path}: could not {what}: the file is damaged "
            f"(SQLite reported text that is not UTF-8: {exc.reason})"
        ) from exc


@contextlib.asynccontextmanager
async def transaction(db: aiosqlite.Connection) -> AsyncIterator[None]:
    """Run the body in one write transaction, rolled back if the body raises."""
    # Every statement is queued to the connection's thread before the await
    # that may be cancelled, so BEGIN and COMMIT sit inside the try: after a
    # cancellation the rollback is queued behind them (and is a no-op when no
    # transaction is open).
    try:
        await db.execute(Sql.begin)
        yield
        await db.commit()
    except BaseException:
        with anyio.CancelScope(shield=True):
            await db.rollback()
        raise


async def schema_version(db: aiosqlite.Connection, path: str) -> int:
    """The journal's schema version, refused when a newer proctor wrote it."""
    rows = await db.execute_fetchall(Sql.user_version)
    version = int(next(iter(rows))[0])
    if version > SCHEMA_VERSION:
        raise SchemaError(
            f"journal {path} has schema version {version}, but this proctor "
            f"knows versions up to {SCHEMA_VERSION}: open it with a newer proctor"
        )
    return version


async def setup(db: aiosqlite.Connection, path: str, synchronous: str) -> None:
    """Set the connection up (WAL, foreign keys, ``synchronous``); migrate the file."""
    await db.executescript(Sql.setup + Sql.synchronous(synchronous))
    version = await schema_version(db, path)
    if version < SCHEMA_VERSION:
        crash_point("migrate:before")
        async with transaction(db):
            # Read again under the write lock: another process may have
            # migrated the journal since.
            version = await schema_version(db, path)
            for migration in SQLITE_MIGRATIONS[version:]:
                await apply_migration(db, migration)
            if version < SCHEMA_VERSION:
                await db.execute(Sql.set_user_version(SCHEMA_VERSION))
        crash_point("migrate:after")
        if version < SCHEMA_VERSION:
            log.info("journal.migrated", path=path, from_version=version, to_version=SCHEMA_VERSION)


async def apply_migration(db: aiosqlite.Connection, migration: SqliteMigration) -> None:
    """Apply one migration inside the caller's transaction, skipping what is there."""
    for table, column, declaration in migration.columns:
        present = {row[1] for row in await db.execute_fetchall(Sql.table_info(table))}
        if column not in present:
            await db.execute(Sql.add_column(table, column, declaration))
    for statement in statements(migration.script):
        await db.execute(statement)
