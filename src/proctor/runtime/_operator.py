"""
Operator actions on a run: explicit, journaled, attributed.

An amendment of the acceptance contract is written to the journal with who made
it and why. A running controller applies it before its next step; every piece
of evidence gathered under the old contract becomes stale. The actor cannot
amend anything: only the task's author or an operator can, from outside.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from proctor._errors import ConfigError
from proctor.runtime._journal import open_journal
from proctor.runtime._task import Task
from proctor.verifiers._checks import CommandCheck

__all__ = ("Amendment", "amend", "apply_amendment", "retune")


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
) -> str:
    """
    Journal an amendment of a run's contract. A running controller applies it
    before its next step; earlier evidence becomes stale.

    Args:
        journal: the journal's path.
        run_id: the run (a unique prefix of 6 characters or more is enough).
        amendment: the change, with who makes it and why.

    Returns:
        The run's full id.

    Raises:
        RunNotFoundError: no such run.
        ConfigError: an empty reason or operator, or an amendment that does not apply.
    """
    if not amendment.who.strip() or not amendment.why.strip():
        raise ConfigError("amend: say who amends the contract and why (--who, --why)")
    async with open_journal(journal) as j:
        run = await j.get_run(run_id)
        task = await j.get_task(run.task_id)
        _check_applies(task.get("spec") or {}, amendment.body())
        await j.add_note(run.run_id, "amend", amendment.body())
        return run.run_id


async def retune(
    journal: str | os.PathLike[str],
    run_id: str,
    limits: Mapping[str, float],
    *,
    who: str,
    why: str,
) -> str:
    """
    Journal a change of budget limits for a run. A running controller hands it to
    the accountant before its next step; the accountant journals the change with
    who and why, or refuses it (a limit below what is spent, a reserve that no
    longer fits).

    Args:
        journal: the journal's path.
        run_id: the run (a unique prefix of 6 characters or more is enough).
        limits: dimension -> new limit.
        who: the operator.
        why: the reason.

    Returns:
        The run's full id.

    Raises:
        ConfigError: no limits, an unknown dimension, or no who or why.
    """
    from proctor.budgets._budget import Budget

    if not who.strip() or not why.strip():
        raise ConfigError("retune: say who changes the limits and why (--who, --why)")
    if not limits:
        raise ConfigError("retune: name at least one limit, such as steps=80")
    Budget(dict(limits))  # the same validation as a task file's [budget]
    async with open_journal(journal) as j:
        run = await j.get_run(run_id)
        await j.add_note(
            run.run_id, "retune-request", {"limits": dict(limits), "who": who, "why": why}
        )
        return run.run_id


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
