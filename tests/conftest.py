from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest
from tests.support import pg


@pytest.fixture
def anyio_backend() -> str:
    # aiosqlite, asyncpg and structlog's async methods are asyncio-only.
    return "asyncio"


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """
    The URL of a PostgreSQL server the tests may create databases and schemas on.

    $PROCTOR_TEST_PG_URL when set; otherwise a server started from the machine's
    packages for the session and stopped after it (tests/support/pg.py). Fails,
    rather than skips, when neither is possible.
    """
    existing = os.environ.get(pg.URL_ENV)
    if existing:
        yield existing
        return
    with contextlib.ExitStack() as stack:
        try:
            url = stack.enter_context(pg.running_server())
        except pg.PgUnavailable as exc:
            unavailable = str(exc)
        else:
            yield url
            return
    pytest.fail(unavailable, pytrace=False)
