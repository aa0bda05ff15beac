from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    # aiosqlite and structlog's async methods are asyncio-only.
    return "asyncio"
