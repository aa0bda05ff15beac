"""
The crash-point hook both journal backends pass at every write boundary.

Every write method of either backend passes a boundary immediately before and
immediately after its commit (``put_task:before``, ``put_task:after``,
``record_dispatch:before``, ...). When the environment variable
``PROCTOR_CRASH_AT`` holds an integer n at import, the n-th boundary this
process passes appends its label to the file named by ``PROCTOR_CRASH_LOG``
(when set) and kills the process with SIGKILL. The variables are read once, at
import; unset, a boundary costs a None check. A test may also set
:data:`tracer` to see every label. Nothing but tests uses either.
"""

from __future__ import annotations

import functools
import itertools
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from proctor._errors import (
    ConfigError,
)

__all__ = (
    "boundaries",
    "crash_point",
    "tracer",
)


_F = TypeVar("_F", bound=Callable[..., Awaitable[Any]])

#: Called with every boundary's label when set (tests only).
tracer: Callable[[str], None] | None = None


def _crash_at_from_env() -> int | None:
    value = os.environ.get("PROCTOR_CRASH_AT")
    if value is None or not value.strip():
        return None
    try:
        return int(value)
    except ValueError:
        raise ConfigError(
            f"PROCTOR_CRASH_AT must be an integer (the journal boundary to die at), got {value!r}"
        ) from None


_CRASH_AT = _crash_at_from_env()
_CRASH_LOG = os.environ.get("PROCTOR_CRASH_LOG")
_crash_count = itertools.count(1)


def crash_point(label: str) -> None:
    """Pass a journal boundary: at the one ``PROCTOR_CRASH_AT`` names, die as a host would."""
    if tracer is not None:
        tracer(label)
    if _CRASH_AT is None:
        return
    if next(_crash_count) != _CRASH_AT:
        return
    if _CRASH_LOG:
        with open(_CRASH_LOG, "a", encoding="utf-8") as log_file:
            log_file.write(label + "\n")
            log_file.flush()
            os.fsync(log_file.fileno())
    os.kill(os.getpid(), signal.SIGKILL)


def boundaries(label: str) -> Callable[[_F], _F]:
    """
    Pass ``label:before`` when the decorated write starts and ``label:after`` once it returns.

    The PostgreSQL backend's writes are one statement each (the statement is the
    commit), so the boundaries stand around the whole method; the SQLite backend
    passes its own around each commit.
    """

    def decorate(method: _F) -> _F:
        @functools.wraps(method)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            crash_point(label + ":before")
            result = await method(*args, **kwargs)
            crash_point(label + ":after")
            return result

        return cast(_F, wrapper)

    return decorate
