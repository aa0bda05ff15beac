"""
The commands for agents that run their own tools: ``proctor hook`` and ``proctor hooks``
(``install``, ``serve``, ``uninstall``).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from pathlib import Path

import click
from click.decorators import FC

from proctor import ConfigError
from proctor.cli.base import _JOURNAL, _fail, main
from proctor.runtime import load_hosted_task

__all__ = (
    "hook_command",
    "hooks_group",
    "hooks_install",
    "hooks_serve",
    "hooks_uninstall",
)


_AGENT = click.argument("agent", type=click.Choice(["claude", "codex", "gemini"]))


def _task_option(help_text: str) -> Callable[[FC], FC]:
    return click.option(
        "--task",
        "task_file",
        required=True,
        type=click.Path(dir_okay=False, path_type=Path),
        help=help_text,
    )


@main.command("hook")
@_AGENT
@_task_option("The task file: checks, protected paths, budget, policy.")
@_JOURNAL
def hook_command(agent: str, task_file: Path, journal: str) -> None:
    """Answer one hook call of AGENT (claude, codex, gemini): its JSON on standard input."""
    from proctor.runtime import hook_main

    text = sys.stdin.buffer.read().decode("utf-8", "replace")
    out, err, code = hook_main(agent, str(task_file), journal, text)  # type: ignore[arg-type]
    if out:
        click.echo(out)
    if err:
        click.echo(err, err=True, nl=False)
    raise SystemExit(code)


@main.group("hooks")
def hooks_group() -> None:
    """Configure Claude Code, Codex CLI or gemini-cli to run proctor as their hooks."""


_PROJECT = click.option(
    "--project",
    type=click.Path(file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="The project whose settings to change (Claude Code, gemini-cli).",
)


_CODEX_HOME = click.option(
    "--codex-home",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Codex's home (default: $CODEX_HOME, else ~/.codex).",
)


@hooks_group.command("install")
@_AGENT
@_task_option("The task file each hook call is judged under.")
@_PROJECT
@_CODEX_HOME
@_JOURNAL
def hooks_install(
    agent: str, task_file: Path, project: Path, codex_home: Path | None, journal: str
) -> None:
    """Write AGENT's hook settings so that it runs `proctor hook`, merged with what is there."""
    from proctor.runtime import install_hooks as install

    try:
        load_hosted_task(task_file)
        written = install(
            agent,  # type: ignore[arg-type]
            task_file,
            project=project.resolve(),
            journal=journal,
            codex_home=codex_home,
        )
    except ConfigError as exc:
        _fail(str(exc))
        return
    for path in written:
        click.echo(f"wrote {path}")
    if agent == "codex":
        click.echo(
            "Codex runs hooks of this layer only once they are trusted: review them with "
            "/hooks in codex, or run `codex exec --dangerously-bypass-hook-trust`."
        )
    if agent == "gemini":
        click.echo(
            "gemini-cli reads project settings only in a trusted folder; run it with --yolo "
            "(proctor answers every tool call in BeforeTool)."
        )


@hooks_group.command("serve")
@_JOURNAL
@click.option(
    "--socket",
    "socket_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help=(
        "The Unix socket (default: in .proctor-hooks/ beside the journal, where "
        "`proctor hook` looks; elsewhere, set $PROCTOR_HOOK_SOCKET for the hooks)."
    ),
)
def hooks_serve(journal: str, socket_file: Path | None) -> None:
    """Answer the hook calls of every session of the journal from one long-lived process."""
    import threading

    from proctor.runtime import serve_hooks

    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        serve_hooks(journal, path=socket_file, ready=lambda p: click.echo(str(p)), stop=stop)
    except ConfigError as exc:
        _fail(str(exc))


@hooks_group.command("uninstall")
@_AGENT
@_PROJECT
@_CODEX_HOME
def hooks_uninstall(agent: str, project: Path, codex_home: Path | None) -> None:
    """Take proctor's hooks out of AGENT's settings, keeping everything else."""
    from proctor.runtime import uninstall_hooks as uninstall

    try:
        changed = uninstall(
            agent,  # type: ignore[arg-type]
            project=project.resolve(),
            codex_home=codex_home,
        )
    except ConfigError as exc:
        _fail(str(exc))
        return
    click.echo(f"removed proctor's hooks from {changed}" if changed else "no proctor hooks found")
