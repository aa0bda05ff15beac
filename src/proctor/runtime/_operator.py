"""
Operator actions on a run: explicit, journaled, attributed.

Each action is a note in the run's journal, written from any terminal or host
that can open the journal: ``stop``, ``answer`` (to a ``needs_input`` question),
``approve`` / ``deny`` (a call that waits for approval), ``amend`` (the
acceptance contract) and ``retune`` (the budget's limits). The running
controller reads its notes within a step, or within a second while it waits (a
command, the actor, an answer), acts on them, and answers each with a
``reply`` note that :func:`wait_reply` reads: applied at step N, or refused and
why. An action on a run that has ended is refused before anything is written.

An amendment of the acceptance contract makes every piece of evidence gathered
under the old contract stale. The actor cannot amend anything: only the task's
author or an operator can, from outside.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import anyio
import attrs

from proctor._errors import ConfigError, RunEndedError
from proctor.runtime._journal import JournalLike, open_journal
from proctor.runtime._journal.base import RUNNING, RunRow
from proctor.runtime._task import Task
from proctor.verifiers._checks import CommandCheck

__all__ = (
    "Amendment",
    "OperatorReply",
    "amend",
    "answer",
    "apply_amendment",
    "approve",
    "deny",
    "retune",
    "stop",
    "wait_reply",
)

#: How often :func:`wait_reply` reads the journal.
REPLY_POLL = 0.1


@attrs.frozen
class OperatorReply:
    """
    What became of an operator's note.

    Args:
        run_id: the run's full id.
        note: the note's id in the journal.
        outcome: ``journaled`` (not answered yet), ``applied``, ``refused``, or
            ``ended`` (the run ended before it answered, or because of it: a stop).
        step: the step at which the controller answered (or the run's last step).
        message: what happened, for a person.
    """

    run_id: str
    note: int
    outcome: Literal["journaled", "applied", "refused", "ended"]
    step: int | None = None
    message: str = ""


def _who(who: str | None) -> str:
    if who is not None and who.strip():
        return who.strip()
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "an operator"


async def _running(j: JournalLike, run_id: str, what: str) -> RunRow:
    """The run, if it is still running; refused with how it ended otherwise."""
    run = await j.get_run(run_id)
    if run.status != RUNNING:
        raise RunEndedError(
            f"{what}: run {run.run_id} has ended ({run.status}"
            + (f": {run.stop_reason.get('message', '')}" if run.stop_reason else "")
            + "); nothing was journaled"
        )
    return run


async def _note(
    journal: str | os.PathLike[str], run_id: str, what: str, kind: str, body: dict[str, Any]
) -> OperatorReply:
    async with open_journal(journal) as j:
        run = await _running(j, run_id, what)
        note = await j.add_note(run.run_id, kind, body)
    return OperatorReply(run.run_id, note, "journaled", None, f"{what}: journaled")


async def wait_reply(journal: str | os.PathLike[str], reply: OperatorReply) -> OperatorReply:
    """
    Wait until the controller answers an operator's note, or the run ends.

    Callers bound the wait (``anyio.move_on_after``): a run whose host died
    answers nothing until it is resumed.

    Args:
        journal: the journal's path or URL.
        reply: what :func:`stop`, :func:`answer`, :func:`approve`, :func:`deny`,
            :func:`amend` or :func:`retune` returned.

    Returns:
        The answer: ``applied`` or ``refused`` with the step and why, or
        ``ended`` with the run's disposition.
    """
    async with open_journal(journal) as j:
        while True:
            for note in await j.notes(reply.run_id, after=reply.note, kinds=("reply",)):
                body = note["body"]
                if body.get("to") == reply.note:
                    outcome: Literal["applied", "refused"] = (
                        "applied" if body.get("outcome") == "applied" else "refused"
                    )
                    return attrs.evolve(
                        reply,
                        outcome=outcome,
                        step=body.get("step"),
                        message=str(body.get("message", "")),
                    )
            run = await j.get_run(reply.run_id)
            if run.status != RUNNING:
                reason = (run.stop_reason or {}).get("message", "")
                return attrs.evolve(
                    reply,
                    outcome="ended",
                    step=run.steps,
                    message=f"the run has ended: {run.status} at step {run.steps}"
                    + (f" ({reason})" if reason else ""),
                )
            await anyio.sleep(REPLY_POLL)


async def stop(
    journal: str | os.PathLike[str], run_id: str, *, why: str = "", who: str | None = None
) -> OperatorReply:
    """
    Stop a running run from any terminal or host: it ends ``stopped`` (``user_stop``).

    The controller sees the note within a step, or within a second of waiting; a
    command in flight is interrupted (its effect uncertain), the run's children
    end and its handoff is journaled. :func:`wait_reply` waits for the end.

    Args:
        journal: the journal's path or URL.
        run_id: the run (a unique prefix of 6 characters or more is enough).
        why: said in the stop reason.
        who: who stops it (default: this user's login name).

    Raises:
        RunNotFoundError: no such run.
        RunEndedError: the run has ended already.
    """
    body = {"who": _who(who), "why": why}
    return await _note(journal, run_id, "stop", "stop", body)


async def answer(
    journal: str | os.PathLike[str], run_id: str, text: str, *, who: str | None = None
) -> OperatorReply:
    """
    Answer the question a run waits on (a ``needs_input`` claim): the actor gets
    it as a ``user`` event and the run goes on.

    For a run that already ended ``needs_input``, resume it with the answer
    instead (``resume(..., answer=TEXT)``, ``proctor resume RUN --answer TEXT``).

    Raises:
        ConfigError: an empty answer, or a run that waits for no answer.
        RunNotFoundError: no such run.
        RunEndedError: the run has ended.
    """
    if not text.strip():
        raise ConfigError("answer: the answer is empty; say what the run needs to know")
    async with open_journal(journal) as j:
        run = await _running(j, run_id, "answer")
        if run.waiting != "answer":
            raise ConfigError(
                f"answer: run {run.run_id} is not waiting for an answer"
                + (f" (it waits for {run.waiting})" if run.waiting else "")
            )
        note = await j.add_note(run.run_id, "answer", {"who": _who(who), "text": text})
    return OperatorReply(run.run_id, note, "journaled", None, "answer: journaled")


async def _decide(
    journal: str | os.PathLike[str], run_id: str, approved: bool, who: str | None, why: str
) -> OperatorReply:
    what = "approve" if approved else "deny"
    async with open_journal(journal) as j:
        run = await _running(j, run_id, what)
        if run.waiting != "approval":
            raise ConfigError(f"{what}: run {run.run_id} has no call waiting for approval")
        body = {"who": _who(who), "approved": approved, "why": why}
        note = await j.add_note(run.run_id, "approval", body)
    return OperatorReply(run.run_id, note, "journaled", None, f"{what}: journaled")


async def approve(
    journal: str | os.PathLike[str], run_id: str, *, who: str | None = None, why: str = ""
) -> OperatorReply:
    """
    Let the call a run waits on (an ``[approve]`` pattern) run.

    Raises:
        ConfigError: no call of the run waits for approval.
        RunNotFoundError: no such run.
        RunEndedError: the run has ended.
    """
    return await _decide(journal, run_id, True, who, why)


async def deny(
    journal: str | os.PathLike[str], run_id: str, *, why: str, who: str | None = None
) -> OperatorReply:
    """
    Refuse the call a run waits on: it is not sent, and the actor is told ``why``.

    Raises:
        ConfigError: no reason, or no call of the run waits for approval.
        RunNotFoundError: no such run.
        RunEndedError: the run has ended.
    """
    if not why.strip():
        raise ConfigError("deny: say why (--why): the actor is told")
    return await _decide(journal, run_id, False, who, why)


@attrs.frozen
class Amendment:
    """
    A change to a run's acceptance contract.

    Args:
        who: the operator making it.
        why: the reason, for the journal and the actor.
        protect: glob patterns to add to the protected paths.
        unprotect: glob patterns to remove from them.
        scope: the new allowed scope (None leaves it as it is).
        add_checks: command checks to add, as ``(name, command)``.
        drop_checks: names of checks to remove.
    """

    who: str
    why: str
    protect: tuple[str, ...] = ()
    unprotect: tuple[str, ...] = ()
    scope: tuple[str, ...] | None = None
    add_checks: tuple[tuple[str, str], ...] = ()
    drop_checks: tuple[str, ...] = ()

    def body(self) -> dict[str, Any]:
        """The amendment as the journal stores it."""
        return {
            "who": self.who,
            "why": self.why,
            "protect": list(self.protect),
            "unprotect": list(self.unprotect),
            "scope": None if self.scope is None else list(self.scope),
            "add_checks": [{"name": n, "run": r} for n, r in self.add_checks],
            "drop_checks": list(self.drop_checks),
        }


def apply_amendment(task: Task, body: Mapping[str, Any]) -> Task:
    """
    Return the task with an amendment (as journaled) applied to its contract.

    Raises:
        ConfigError: the amendment drops a check that does not exist, or leaves a
            build with no required check.
    """
    names = {c.name for c in task.checks}
    for name in body.get("drop_checks", []):
        if name not in names:
            raise ConfigError(f"amend: no check named {name!r}; checks: {', '.join(sorted(names))}")
    checks = [c for c in task.checks if c.name not in set(body.get("drop_checks", []))]
    checks += [CommandCheck(c["name"], c["run"]) for c in body.get("add_checks", [])]
    protected = [p for p in task.protected if p not in set(body.get("unprotect", []))]
    protected += [p for p in body.get("protect", []) if p not in protected]
    scope = body.get("scope")
    return attrs.evolve(
        task,
        checks=tuple(checks),
        protected=tuple(protected),
        scope=task.scope if scope is None else tuple(scope),
    )


async def amend(
    journal: str | os.PathLike[str],
    run_id: str,
    amendment: Amendment,
) -> OperatorReply:
    """
    Journal an amendment of a run's contract. A running controller applies it
    before its next step (or at once, if it waits for the actor); earlier
    evidence becomes stale. :func:`wait_reply` says when it was applied.

    Args:
        journal: the journal's path.
        run_id: the run (a unique prefix of 6 characters or more is enough).
        amendment: the change, with who makes it and why.

    Returns:
        The journaled note (``outcome`` ``journaled``).

    Raises:
        RunNotFoundError: no such run.
        RunEndedError: the run has ended.
        ConfigError: an empty reason or operator, an amendment that changes
            nothing, or one that does not apply.
    """
    if not amendment.who.strip() or not amendment.why.strip():
        raise ConfigError("amend: say who amends the contract and why (--who, --why)")
    body = amendment.body()
    if not any(body[k] for k in ("protect", "unprotect", "add_checks", "drop_checks")) and (
        body["scope"] is None
    ):
        raise ConfigError(
            "amend: the amendment changes nothing; give --protect, --unprotect, --scope, "
            "--check NAME=COMMAND or --drop-check NAME"
        )
    async with open_journal(journal) as j:
        run = await _running(j, run_id, "amend")
        task = await j.get_task(run.task_id)
        _check_applies(task.get("spec") or {}, body)
        note = await j.add_note(run.run_id, "amend", body)
    return OperatorReply(run.run_id, note, "journaled", None, "amend: journaled")


async def retune(
    journal: str | os.PathLike[str],
    run_id: str,
    limits: Mapping[str, float],
    *,
    who: str,
    why: str,
    below_spent: bool = False,
) -> OperatorReply:
    """
    Journal a change of budget limits for a run. A running controller hands it to
    the accountant before its next step; the accountant journals the change with
    who and why, or refuses it (a limit below what is spent, a reserve that no
    longer fits). :func:`wait_reply` says which.

    Args:
        journal: the journal's path.
        run_id: the run (a unique prefix of 6 characters or more is enough).
        limits: dimension -> new limit.
        who: the operator.
        why: the reason.
        below_spent: allow a limit at or below what is spent: the run then ends
            ``budget_exhausted``, with the retune as its reason.

    Returns:
        The journaled note (``outcome`` ``journaled``).

    Raises:
        ConfigError: no limits, an unknown dimension, or no who or why.
        RunEndedError: the run has ended.
    """
    from proctor.budgets._budget import Budget

    if not who.strip() or not why.strip():
        raise ConfigError("retune: say who changes the limits and why (--who, --why)")
    if not limits:
        raise ConfigError("retune: name at least one limit, such as steps=80")
    Budget(dict(limits))  # the same validation as a task file's [budget]
    body = {"limits": dict(limits), "who": who, "why": why, "below_spent": below_spent}
    return await _note(journal, run_id, "retune", "retune-request", body)


def _check_applies(spec: Mapping[str, Any], body: Mapping[str, Any]) -> None:
    names = {c.get("name") for c in (spec.get("contract") or {}).get("checks", [])}
    missing = [n for n in body.get("drop_checks", []) if n not in names]
    if missing:
        raise ConfigError(
            f"amend: no check named {', '.join(map(repr, missing))}; "
            f"checks: {', '.join(sorted(str(n) for n in names))}"
        )
    added: Sequence[Mapping[str, str]] = body.get("add_checks", [])
    for check in added:
        if check["name"] in names and check["name"] not in body.get("drop_checks", []):
            raise ConfigError(f"amend: a check named {check['name']!r} exists already")
