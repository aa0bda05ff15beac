"""
The commands a person writes to a running run with: ``proctor amend``, ``retune``, ``stop``,
``answer``, ``approve``, ``deny``.

Each journals an operator's note and waits (``--wait``) for the controller's
reply: applied (exit 0), refused or ended (exit 1), or not answered in time.
"""

from __future__ import annotations

from typing import Any

import anyio
import click

from proctor import ProctorError, RunEndedError
from proctor.cli.base import _JOURNAL, _WAIT, _fail, _guard, main
from proctor.runtime import OperatorReply, wait_reply

__all__ = (
    "amend_command",
    "answer_command",
    "approve_command",
    "deny_command",
    "retune_command",
    "stop_command",
)


@main.command("amend")
@click.argument("run_id")
@_JOURNAL
@click.option("--who", required=True, help="Who amends the contract.")
@click.option("--why", required=True, help="Why: journaled, and told to the actor.")
@click.option("--protect", multiple=True, help="A glob pattern to protect (repeatable).")
@click.option("--unprotect", multiple=True, help="A protected pattern to drop (repeatable).")
@click.option(
    "--scope", multiple=True, help="The allowed scope, replacing the old one (repeatable)."
)
@click.option("--check", "checks", multiple=True, help="Add a command check: NAME=COMMAND.")
@click.option("--drop-check", multiple=True, help="Remove a check by name (repeatable).")
@_WAIT
def amend_command(
    run_id: str,
    journal: str,
    who: str,
    why: str,
    protect: tuple[str, ...],
    unprotect: tuple[str, ...],
    scope: tuple[str, ...],
    checks: tuple[str, ...],
    drop_check: tuple[str, ...],
    wait: float,
) -> None:
    """Amend a run's acceptance contract: journaled, and earlier evidence goes stale."""
    from proctor.runtime import Amendment, amend

    added = []
    for spec in checks:
        name, sep, command = spec.partition("=")
        if not sep or not name.strip() or not command.strip():
            _fail(f"--check {spec!r}: expected NAME=COMMAND, such as tests='pytest -q'")
        added.append((name.strip(), command.strip()))
    amendment = Amendment(
        who=who,
        why=why,
        protect=protect,
        unprotect=unprotect,
        scope=scope or None,
        add_checks=tuple(added),
        drop_checks=drop_check,
    )

    async def go() -> OperatorReply:
        return await amend(journal, run_id, amendment)

    _answered(_operator_guard(go), journal, wait, "amendment")


@main.command("retune")
@click.argument("run_id")
@_JOURNAL
@click.option(
    "--limit", "limits", multiple=True, required=True, help="DIMENSION=VALUE (repeatable)."
)
@click.option("--who", required=True, help="Who changes the limits.")
@click.option("--why", required=True, help="Why: journaled with the change.")
@click.option(
    "--below-spent",
    is_flag=True,
    help="Allow a limit at or below what is spent: the run then ends budget_exhausted.",
)
@_WAIT
def retune_command(
    run_id: str,
    journal: str,
    limits: tuple[str, ...],
    who: str,
    why: str,
    below_spent: bool,
    wait: float,
) -> None:
    """Change a running run's budget limits: journaled, with who and why."""
    from proctor.runtime import retune

    values: dict[str, float] = {}
    for spec in limits:
        name, sep, value = spec.partition("=")
        try:
            values[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            _fail(f"--limit {spec!r}: expected DIMENSION=NUMBER, such as steps=80")

    async def go() -> OperatorReply:
        return await retune(journal, run_id, values, who=who, why=why, below_spent=below_spent)

    _answered(_operator_guard(go), journal, wait, "retune")


def _answered(reply: OperatorReply, journal: str, wait: float, what: str) -> None:
    """Wait (bounded) for the controller's answer to a note; print it; exit 0 only if applied."""

    async def go() -> OperatorReply:
        with anyio.move_on_after(wait):
            return await wait_reply(journal, reply)
        return reply

    answered: OperatorReply = _guard(go)
    run = answered.run_id
    if answered.outcome == "applied":
        click.echo(f"run {run}: {what} applied at step {answered.step}: {answered.message}")
        return
    if answered.outcome == "refused":
        click.echo(f"proctor: run {run}: {what} refused: {answered.message}", err=True)
        raise SystemExit(1)
    if answered.outcome == "ended":
        click.echo(f"proctor: run {run}: {answered.message}", err=True)
        raise SystemExit(1)
    click.echo(
        f"run {run}: {what} journaled; the run did not answer within {wait:g} s "
        "(it reads it at its next step; `proctor runs` says whether its host is alive)"
    )


def _operator_guard(fn: Any) -> Any:
    """Like :func:`_guard`; a run that has ended is said so, exit 1."""
    try:
        return anyio.run(fn)
    except RunEndedError as exc:
        click.echo(f"proctor: {exc}", err=True)
        raise SystemExit(1) from None
    except ProctorError as exc:
        _fail(str(exc))
    return None


@main.command("stop")
@click.argument("run_id")
@_JOURNAL
@click.option("--why", default="", help="Why: journaled in the stop reason.")
@click.option("--who", help="Who stops it (default: your login name).")
@_WAIT
def stop_command(run_id: str, journal: str, why: str, who: str | None, wait: float) -> None:
    """Stop a running run from any terminal: it ends `stopped`, a command in flight interrupted."""
    from proctor.runtime import stop

    async def go() -> OperatorReply:
        return await stop(journal, run_id, why=why, who=who)

    reply: OperatorReply = _operator_guard(go)

    async def until_ended() -> OperatorReply:
        with anyio.move_on_after(wait):
            return await wait_reply(journal, reply)
        return reply

    ended: OperatorReply = _guard(until_ended)
    if ended.outcome == "ended":
        click.echo(f"run {ended.run_id}: {ended.message.removeprefix('the run has ended: ')}")
        click.echo(f"resume it with: proctor resume {ended.run_id}")
        return
    click.echo(
        f"proctor: run {reply.run_id}: stop journaled, but the run has not ended within "
        f"{wait:g} s (`proctor runs` says whether its host is alive)",
        err=True,
    )
    raise SystemExit(1)


@main.command("answer")
@click.argument("run_id")
@click.argument("text")
@_JOURNAL
@click.option("--who", help="Who answers (default: your login name).")
@_WAIT
def answer_command(run_id: str, text: str, journal: str, who: str | None, wait: float) -> None:
    """Answer the question a waiting run asked (needs_input): the run goes on."""
    from proctor.runtime import answer

    async def go() -> OperatorReply:
        return await answer(journal, run_id, text, who=who)

    _answered(_operator_guard(go), journal, wait, "answer")


@main.command("approve")
@click.argument("run_id")
@_JOURNAL
@click.option("--who", help="Who approves (default: your login name).")
@_WAIT
def approve_command(run_id: str, journal: str, who: str | None, wait: float) -> None:
    """Let the call a run waits on ([approve] in the task file) run."""
    from proctor.runtime import approve

    async def go() -> OperatorReply:
        return await approve(journal, run_id, who=who)

    _answered(_operator_guard(go), journal, wait, "approval")


@main.command("deny")
@click.argument("run_id")
@_JOURNAL
@click.option("--why", required=True, help="Why: the actor is told.")
@click.option("--who", help="Who denies (default: your login name).")
@_WAIT
def deny_command(run_id: str, journal: str, why: str, who: str | None, wait: float) -> None:
    """Refuse the call a run waits on: it is not sent, and the actor is told why."""
    from proctor.runtime import deny

    async def go() -> OperatorReply:
        return await deny(journal, run_id, why=why, who=who)

    _answered(_operator_guard(go), journal, wait, "denial")
