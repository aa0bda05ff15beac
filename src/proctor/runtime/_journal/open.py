"""
Open a journal: the only module that knows both backends.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import (
    AsyncIterator,
)

import anyio

from proctor._errors import (
    ConfigError,
)
from proctor.runtime._journal.base import JournalLike, Synchronous
from proctor.runtime._journal.sqlite import Journal

__all__ = (
    "is_postgres_url",
    "open_journal",
)


#: The URL schemes that select the PostgreSQL journal.
_POSTGRES_SCHEMES: tuple[str, ...] = ("postgresql://", "postgres://")


def is_postgres_url(target: str | os.PathLike[str]) -> bool:
    """Return whether ``target`` names a PostgreSQL journal (a ``postgresql://`` URL)."""
    return os.fspath(target).lower().startswith(_POSTGRES_SCHEMES)


@contextlib.asynccontextmanager
async def open_journal(
    target: str | os.PathLike[str], *, synchronous: Synchronous = "NORMAL", create: bool = True
) -> AsyncIterator[JournalLike]:
    """
    Open a journal for the body of an ``async with`` and close it after.

    Args:
        target: a ``postgresql://`` (or ``postgres://``) URL for the PostgreSQL
            journal (:class:`~proctor.runtime._journal.postgres.PgJournal`); anything else
            is the path of a SQLite file (:class:`Journal`).
        synchronous: as for :meth:`Journal.open` and ``PgJournal.open``.
        create: as for :meth:`Journal.open` (a SQLite file that does not exist is
            an error when False); a PostgreSQL database must exist either way.

    Raises:
        ConfigError: a PostgreSQL URL, and asyncpg is not installed; a SQLite
            file whose directory does not exist, or that does not exist and
            ``create`` is False.
    """
    journal: JournalLike
    if is_postgres_url(target):
        # Imported here: asyncpg is loaded only by those who use PostgreSQL.
        try:
            from proctor.runtime._journal.postgres import PgJournal
        except ModuleNotFoundError as exc:
            if exc.name != "asyncpg":
                raise
            raise ConfigError(
                "a postgresql:// journal needs the asyncpg package: "
                "pip install 'proctor[postgresql]' (or asyncpg)"
            ) from exc
        journal = await PgJournal.open(os.fspath(target), synchronous=synchronous)
    else:
        # Shielded, as the close below: a connection half made by a cancelled
        # caller would leave its worker thread behind the closed event loop.
        with anyio.CancelScope(shield=True):
            journal = await Journal.open(target, synchronous=synchronous, create=create)
    try:
        yield journal
    finally:
        # Shielded: a caller that gave up waiting (a cancelled scope) must not
        # leave the connection's worker thread behind its closed event loop.
        with anyio.CancelScope(shield=True):
            await journal.close()
