"""
Where proctor's structured logs go: stderr, never stdout.

stdout belongs to the program that uses proctor (a CLI's JSON, a parent process
reading a child's lines). structlog's own default prints to stdout, so unless
the application configured structlog itself, proctor sends structlog's output
to stderr as soon as any module of proctor's that logs is imported (using any
public name of ``proctor`` or ``proctor.runtime`` does). The level is left
alone: the application (the CLI's ``--log-level``) decides it.
"""

from __future__ import annotations

import sys
from typing import Any

import structlog

__all__ = ("get_logger", "stderr_logger", "use_stderr_by_default")


def stderr_logger(*args: Any) -> structlog.PrintLogger:
    """
    Return a logger that prints to the current ``sys.stderr``.

    A logger factory for ``structlog.configure(logger_factory=...)``: resolving
    ``sys.stderr`` at each call keeps logs flowing when a test runner or a
    caller swaps the stream (a stream bound once would go stale or closed).
    """
    return structlog.PrintLogger(sys.stderr)


def get_logger(*args: Any, **initial: Any) -> Any:
    """
    Return structlog's logger, with structlog sent to stderr first.

    Every module of proctor's that logs takes its logger here, so importing any
    of them applies :func:`use_stderr_by_default` before it can log; nothing
    else of proctor's imports structlog (``proctor hook`` answered by a hook
    server never loads it).
    """
    return structlog.get_logger(*args, **initial)


def use_stderr_by_default() -> None:
    """Send structlog's output to stderr unless the application configured structlog."""
    if not structlog.is_configured():
        structlog.configure(logger_factory=stderr_logger)


use_stderr_by_default()
