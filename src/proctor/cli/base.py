"""
What every ``proctor`` command shares: the command group, common options, failing, signals.

The group (:data:`main`) and its logging switch, the ``--journal``,
``--heartbeat`` and ``--wait`` options, :func:`_fail` (a message on stderr,
exit 2), :func:`_guard` (run an async body, its proctor errors said as
failures), and :func:`_stoppable`, with which SIGINT and SIGTERM stop a run.
The commands themselves are in the package's other modules.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import click
import structlog

from proctor import ProctorError, RunNotFoundError
from proctor.runtime import HEARTBEAT_SECONDS, Disposition, Stopper

__all__ = ("EXIT_CODES", "main")


#: ``proctor run``'s exit code for each disposition.
EXIT_CODES: dict[Disposition, int] = {
    Disposition.COMPLETED: 0,
    Disposition.PARTIAL: 10,
    Disposition.BLOCKED: 11,
    Disposition.NEEDS_INPUT: 12,
    Disposition.BUDGET_EXHAUSTED: 13,
    Disposition.NO_PROGRESS: 14,
    Disposition.STOPPED: 15,
    Disposition.FAILED: 16,
}


_JOURNAL = click.option(
    "--journal",
    "journal",
    default=lambda: os.environ.get("PROCTOR_JOURNAL", "proctor.db"),
    show_default="proctor.db, or $PROCTOR_JOURNAL",
    help="The journal: a SQLite file, or a postgresql:// URL.",
)


def _configure_logging(level: str) -> None:
    """Structured logs on stderr: JSON when stderr is not a terminal."""
    renderer: Any = (
        structlog.dev.ConsoleRenderer()
        if sys.stderr.isatty()
        else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        # The logger factory stays proctor's own: stderr (see proctor._logging).
        cache_logger_on_first_use=False,
    )


def _fail(message: str) -> None:
    click.echo(f"proctor: {message}", err=True)
    raise SystemExit(2)


_HEARTBEAT = click.option(
    "--heartbeat",
    "heartbeat",
    type=click.FloatRange(min=0.05),
    default=HEARTBEAT_SECONDS,
    envvar="PROCTOR_HEARTBEAT_SECONDS",
    show_default=True,
    help="Seconds between the host's heartbeats; a run that missed two is stale "
    "(or $PROCTOR_HEARTBEAT_SECONDS).",
)


_WAIT = click.option(
    "--wait",
    "wait",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    help="Seconds to wait for the run's answer.",
)


def _exit_now(signum: int, frame: object) -> None:
    os.write(2, b"proctor: interrupted again: exiting now\n")
    os._exit(130)


async def _on_signals(stopper: Stopper) -> None:
    """
    The first SIGINT stops the run (user_stop), SIGTERM too (stop_signal); a
    second SIGINT exits at once: the run is then closed by the next open of its
    workspace, as a dead host's is.
    """
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
        async for signum in received:
            if signum == signal.SIGINT and stopper.stopped:
                click.echo("proctor: interrupted again: exiting now", err=True)
                os._exit(130)
            click.echo(
                f"proctor: {signal.Signals(signum).name}: stopping the run "
                "(Ctrl-C again exits at once)",
                err=True,
            )
            why = f"{signal.Signals(signum).name} to the host"
            if signum == signal.SIGTERM:
                stopper.stop("stop_signal", why)
            else:
                stopper.stop("user_stop", why)


async def _stoppable(go: Callable[[Stopper], Awaitable[Any]]) -> Any:
    """Run ``go`` with a stopper that SIGINT and SIGTERM trigger."""
    stopper = Stopper()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_on_signals, stopper)
            try:
                return await go(stopper)
            finally:
                tg.cancel_scope.cancel()
                if stopper.stopped:
                    # Past the signal receiver, a second Ctrl-C still exits at once
                    # (not a KeyboardInterrupt in the middle of printing the handoff).
                    signal.signal(signal.SIGINT, _exit_now)
    except BaseExceptionGroup as group:
        # The run's own error (a busy workspace, a broken journal), not wrapped.
        if len(group.exceptions) == 1 and isinstance(group.exceptions[0], ProctorError):
            raise group.exceptions[0] from None
        raise


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="proctor", prog_name="proctor", message="%(prog)s %(version)s")
@click.option(
    "--log-level",
    default="warning",
    type=click.Choice(["debug", "info", "warning", "error"]),
    show_default=True,
    help="Structured logs on stderr at this level and above.",
)
def main(log_level: str) -> None:
    """Host an AI agent and own the decision of when it stops."""
    _configure_logging(log_level)


def _guard(fn: Any) -> Any:
    try:
        return anyio.run(fn)
    except RunNotFoundError as exc:
        _fail(str(exc))
    except ProctorError as exc:
        _fail(str(exc))
    return None


def _write_text(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        _fail(f"{path}: cannot write: {exc.strerror} (give -o a file in an existing directory)")
