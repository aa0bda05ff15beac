"""
One proctor run per agent session, driven one hook call at a time.

Each hook call is a short process (or one request to ``proctor hooks serve``):
it opens the journal, finds the run of the agent's session (the run id is
derived from the agent and its session id; the first call of a session, of
any event, opens it), restores the decision core from the run's snapshot,
wires a :class:`~proctor.runtime._control.controller.Controller` to a budget
accountant and a verifier exactly as a live run does, lets the controller
decide, journals the step and the new snapshot, and answers.

The controller's own machinery decides: the completion fence, protected
paths, the budget (the accountant's reservations and limits), the progress
ladder (``Judge``), verification of a frozen candidate, the wrap-up when the
budget runs out, the handoff and the end of the run. What differs from a
live run is only who runs the tools: the agent does, so proctor admits or
refuses a call before it runs and observes its result after.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import attrs

from proctor._digest import canonical_json
from proctor._digest import digest as digest_of
from proctor._errors import BudgetError, ConfigError, RunNotFoundError
from proctor.budgets._accountant import AccountantRequest, run_accountant
from proctor.budgets._budget import Ledger
from proctor.runtime._control.controller import Controller, Inbound, StopRequest
from proctor.runtime._control.history import read_start, save_snapshot
from proctor.runtime._control.run import (
    baseline_context,
    capture_baseline,
    require_sandbox,
    run_sandbox,
)
from proctor.runtime._hosting.hooks.agents import Answer, HookEvent
from proctor.runtime._hosting.hooks.client import hooks_dir
from proctor.runtime._hosting.hooks.mapping import Mapped, map_call, map_result
from proctor.runtime._hosting.hooks.spend import read_spend
from proctor.runtime._journal import JournalLike, open_journal
from proctor.runtime._records import (
    Observation,
    StopReason,
)
from proctor.runtime._task import Task, load_hosted_task
from proctor.runtime._tools.registry import ToolContext, ToolRegistry
from proctor.runtime._tools.workspace import Workspace
from proctor.verifiers._candidate import TreeHasher, matches
from proctor.verifiers._verifier import VerifierInbound, run_verifier

__all__ = (
    "HOOK_PROTECTED",
    "MAX_STOP_BLOCKS",
    "handle",
    "handle_sync",
    "load_hook_task",
    "run_id_for",
)

#: Stops blocked in a row before the run ends: Claude Code ends the turn on its
#: own after 8, so proctor ends the run (and lets the agent stop) at the 7th.
#: Codex and gemini-cli have no such cap; the same bound keeps them from looping.
MAX_STOP_BLOCKS = 7

#: The agents' own settings, where their hooks are configured: protected in every
#: hook run, so the agent cannot unhook proctor through its file tools.
HOOK_PROTECTED: tuple[str, ...] = (".claude/**", ".codex/**", ".gemini/**")

_NAMESPACE = uuid.UUID("6f0b6a9e-4f0e-4d0a-9a57-2f3c1f0c7e11")


def run_id_for(agent: str, session_id: str) -> str:
    """The run of an agent's session: the same for every hook call of the session."""
    return uuid.uuid5(_NAMESPACE, f"{agent}:{session_id}").hex


def load_hook_task(path: str | Path, cwd: str) -> Task:
    """
    Load a task file for a hook run: its workspace is the agent's working
    directory unless the file names one, and the agents' settings are protected.

    Raises:
        ConfigError: the file cannot be read or is not a valid task file.
    """
    loaded = load_hosted_task(path, workspace=cwd)
    extra = list(HOOK_PROTECTED)
    # The task file itself, if the agent can reach it through its file tools.
    with contextlib.suppress(ValueError):
        extra.append(
            Path(os.path.realpath(path)).relative_to(os.path.realpath(loaded.workspace)).as_posix()
        )
    protected = loaded.protected + tuple(p for p in extra if p not in loaded.protected)
    return attrs.evolve(loaded, protected=protected)


@contextlib.contextmanager
def _session_lock(journal: str, run_id: str) -> Iterator[None]:
    """
    One hook call of a session at a time: agents run hooks of parallel tool calls
    at once, and each call reads and replaces the decision core's snapshot.
    """
    base = hooks_dir(journal)
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    with (base / f"{run_id}.lock").open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@attrs.define(eq=False)
class _Session:
    """What one hook call knows of its run, before the controller is wired."""

    task: Task
    journal: JournalLike
    run_id: str
    task_id: str
    epoch: int
    steps: int
    judge_snapshot: dict[str, Any] | None
    #: The run's start note: the baseline tree, and what the checks restore and
    #: compare against (see :func:`capture_baseline`).
    start: dict[str, Any]
    state: dict[str, Any]
    hasher: TreeHasher
    digest: str


def _refuse_journal_inside(task: Task, journal: JournalLike) -> None:
    """
    Refuse a session whose journal file lies inside the workspace: the agent runs
    its own commands, and one of them could rewrite the record that decides it.
    """
    where = journal.path
    if not where or "://" in where:
        return
    path, root = Path(where).resolve(), Path(task.workspace).resolve()
    if path == root or root in path.parents:
        raise ConfigError(
            f"the journal {path} lies inside the workspace {root}: the agent's commands"
            " could read or rewrite it; give `proctor hooks install` (and `proctor hook`)"
            " a --journal outside the workspace"
        )


def _task_digest(task: Task) -> str:
    return digest_of(canonical_json(task.describe()))


async def _open(journal: JournalLike, task: Task, event: HookEvent) -> _Session:
    """Find the session's run, or open it."""
    run_id = run_id_for(event.agent, event.session_id)
    try:
        row = await journal.get_run(run_id)
    except RunNotFoundError:
        row = None
    if row is None or row.run_id != run_id:
        _refuse_journal_inside(task, journal)
        await require_sandbox(task)
        hasher = TreeHasher(task.workspace, task.ignore)
        digest = await anyio.to_thread.run_sync(hasher.digest)
        task_id = task.task_id or uuid.uuid5(_NAMESPACE, f"task:{run_id}").hex
        await journal.put_task(task_id, task.goal, task.describe(), task.contract_version)
        epoch = await journal.create_run(
            run_id,
            task_id,
            policy=task.policy.settings(),
            policy_version=task.policy.version,
            host=os.uname().nodename,
        )
        start = await capture_baseline(
            task, journal, run_id, task_id, run_sandbox(task, journal, None), hasher, digest
        )
        state: dict[str, Any] = {
            "agent": event.agent,
            "session_id": event.session_id,
            "at": time.time(),
            "tokens_in": 0,
            "tokens_out": 0,
            "cost_usd": 0.0,
            "stop_blocks": 0,
            # The session's task as it began: the task file is read at every call,
            # and an agent that can write it must not change what decides success.
            "workspace": str(task.workspace),
            "task": _task_digest(task),
        }
        await journal.add_note(run_id, "hook", state)
        return _Session(
            task, journal, run_id, task_id, epoch, 0, None, start, state, hasher, digest
        )
    snapshot = await journal.snapshot(run_id)
    start_note = await read_start(journal, run_id)
    hook = await journal.latest_note(run_id, "hook")
    if snapshot is None or start_note is None or hook is None:
        raise RunNotFoundError(
            f"run {run_id} of {event.agent} session {event.session_id} has no hook state in "
            f"{journal.path}: it was not opened by proctor hook"
        )
    state = dict[str, Any](hook["body"])
    # The workspace is the one the session began in, wherever the agent is now.
    task = attrs.evolve(task, workspace=Path(state["workspace"]))
    if state.get("task") != _task_digest(task):
        raise ConfigError(
            f"the task file changed since {event.agent} session {event.session_id} began "
            f"(run {run_id}): a session is judged under the task it began with; start a "
            "new session to use the new one"
        )
    hasher = TreeHasher(task.workspace, task.ignore)
    digest = await anyio.to_thread.run_sync(hasher.digest)
    return _Session(
        task,
        journal,
        run_id,
        row.task_id,
        row.epoch,
        row.steps,
        snapshot["snapshot"],
        start_note,
        state,
        hasher,
        digest,
    )


async def _charge_outside(session: _Session, event: HookEvent) -> str | None:
    """
    Charge what the session spent outside proctor's view since the last call: the
    tokens its transcript records and the wall time. Returns why the cost cannot
    be charged, if the task limits cost and the model has no price.
    """
    state = session.state
    now = time.time()
    amounts: dict[str, float] = {"wall_seconds": max(0.0, now - float(state.get("at", now)))}
    spend = read_spend(event.agent, event.transcript_path, event.raw.get("model"))
    d_in = max(0, spend.tokens_in - int(state.get("tokens_in", 0)))
    d_out = max(0, spend.tokens_out - int(state.get("tokens_out", 0)))
    problem = None
    if d_in or d_out:
        amounts["tokens_in"], amounts["tokens_out"] = float(d_in), float(d_out)
    if spend.cost_usd is not None:
        d_cost = max(0.0, spend.cost_usd - float(state.get("cost_usd", 0.0)))
        if d_cost:
            amounts["cost_usd"] = d_cost
        state["cost_usd"] = max(spend.cost_usd, float(state.get("cost_usd", 0.0)))
    elif d_in or d_out:
        try:
            if spend.model is None:
                raise BudgetError("the transcript names no model")
            amounts["cost_usd"] = session.task.prices.cost(spend.model, d_in, d_out)
            state["cost_usd"] = float(state.get("cost_usd", 0.0)) + amounts["cost_usd"]
        except BudgetError as exc:
            if "cost_usd" in session.task.budget.limits:
                problem = f"the session's tokens cannot be priced: {exc}; declare it in [prices]"
    state["tokens_in"] = max(spend.tokens_in, int(state.get("tokens_in", 0)))
    state["tokens_out"] = max(spend.tokens_out, int(state.get("tokens_out", 0)))
    state["at"] = now
    amounts = {k: v for k, v in amounts.items() if v}
    if amounts:
        await session.journal.add_spend(
            session.task_id, session.run_id, amounts, "charge", f"hook: {event.name}"
        )
    return problem


@contextlib.asynccontextmanager
async def _wired(
    session: _Session,
) -> AsyncIterator[tuple[Controller, Callable[[], list[Observation]]]]:
    """A controller for one hook call, with its accountant and verifier, as a live run has."""
    # Kept whole: it wires one hook call's judge, ledger, channels, accountant, verifier and
    # controller as a live run's wiring does, and yields inside their task group; split, the
    # channels' ends would travel through helpers.
    from proctor.runtime._progress.judge import Judge

    task, journal = session.task, session.journal
    registry = ToolRegistry.builtin()
    judge = Judge(
        task=task.facts(registry.specs()),
        policy=task.policy,
        digest=session.digest,
        contract_version=task.contract_version,
    )
    if session.judge_snapshot is not None:
        judge.restore(session.judge_snapshot)
    spent = await journal.spend_totals(session.task_id)
    ledger = Ledger(task.budget, dict(spent))

    async def record_spend(amounts: Any, kind: str, note: str = "") -> None:
        if kind != "retune":
            # No step may follow in this process: written at once, not deferred.
            await journal.add_spend(session.task_id, session.run_id, amounts, kind, note)

    inbox_tx, inbox_rx = anyio.create_memory_object_stream[Inbound](16)
    obs_tx, obs_rx = anyio.create_memory_object_stream[Observation](64)
    ver_tx, ver_rx = anyio.create_memory_object_stream[VerifierInbound](1)
    acc_tx, acc_rx = anyio.create_memory_object_stream[AccountantRequest](16)
    controller = Controller(
        task=task,
        run_id=session.run_id,
        task_id=session.task_id,
        epoch=session.epoch,
        journal=journal,
        judge=judge,
        registry=registry,
        context=ToolContext(workspace=Workspace.at(task.workspace)),
        # The checks run as a live run's do: sandboxed, on the candidate with the
        # protected and harness files of the baseline restored.
        check_context=baseline_context(task, run_sandbox(task, journal, None), session.start),
        hasher=session.hasher,
        inbox=inbox_rx,
        to_actor=obs_tx,
        to_verifier=ver_tx,
        to_accountant=acc_tx,
        actor_scope=anyio.CancelScope(),
        baseline=session.start.get("baseline") or {},
        trace_id=session.run_id,
        # The agent is its own actor: there is nothing to drain when the run ends.
        actor_done=True,
    )
    controller.step = session.steps
    controller.remaining = ledger.remaining()

    def told() -> list[Observation]:
        """What the controller told the actor since the last look."""
        out = []
        while True:
            try:
                out.append(obs_rx.receive_nowait())
            except anyio.WouldBlock:
                return out

    watch_scope = anyio.CancelScope()

    async def watch(inbox: Any) -> None:
        # Operators' notes while a call takes long (a check, a wait for approval):
        # a stop abandons the checks, an approval wakes the wait.
        with watch_scope:
            await controller.watch(inbox)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_verifier, ver_rx, inbox_tx.clone())
        tg.start_soon(run_accountant, ledger, acc_rx, inbox_tx.clone(), record_spend)
        tg.start_soon(watch, inbox_tx.clone())
        inbox_tx.close()
        try:
            async with inbox_rx, obs_tx, obs_rx, ver_tx, acc_tx:
                yield controller, told
        finally:
            watch_scope.cancel()


def _ended(controller: Controller) -> str:
    judge = controller.judge
    assert judge.disposition is not None
    why = f": {judge.stop_reason.message}" if judge.stop_reason is not None else ""
    return f"proctor ended this session ({judge.disposition.value}{why})"


async def _end(controller: Controller) -> str:
    if controller.handoff is None and not await _run_ended(controller):
        await controller.end_run()
    return _ended(controller)


async def _run_ended(controller: Controller) -> bool:
    row = await controller.journal.get_run(controller.run_id)
    return row.status != "running"


async def _stop_requested(controller: Controller) -> StopRequest | None:
    """The first stop an operator asked for (``proctor stop``), if any."""
    notes = await controller.journal.notes(controller.run_id, kinds=("stop",))
    if not notes:
        return None
    body = notes[0]["body"]
    return StopRequest("user_stop", str(body.get("who", "")), str(body.get("why", "")))


def _refusal(session: _Session, mapped: Mapped) -> str | None:
    if mapped.outside is not None:
        return (
            f"outside: {mapped.outside} is outside the workspace {session.task.workspace}; "
            "proctor can neither see nor judge it"
        )
    for path in mapped.writes:
        if matches(path, session.task.protected):
            return f"protected: {path} is protected by the task's contract; it may not be changed"
    return None


async def _pre_tool(c: Controller, session: _Session, event: HookEvent) -> Answer:
    if c.judge.terminal:
        return Answer("halt", await _end(c))
    mapped = map_call(event, session.task.workspace)
    refused = await c.admit_own_call(mapped.call, _refusal(session, mapped))
    if refused is None:
        return Answer("halt", await _end(c)) if c.judge.terminal else Answer("allow")
    refusal, ruling = refused
    if c.judge.terminal:
        return Answer("halt", f"refused: {refusal}\n{await _end(c)}")
    extra = f"\n{ruling.reason}" if ruling.reason != refusal else ""
    return Answer("deny", f"proctor refused this call: {refusal}{extra}")


async def _post_tool(c: Controller, session: _Session, event: HookEvent) -> Answer:
    if c.judge.terminal:
        return Answer("halt", await _end(c))
    ruling = await c.settle_own_call(
        map_call(event, session.task.workspace).call, map_result(event)
    )
    session.state["stop_blocks"] = 0
    if c.judge.terminal or await c.check_deadline():
        return Answer("halt", await _end(c))
    if ruling.decision.value == "nudge":
        return Answer("proceed", context=f"[proctor] {ruling.reason}")
    return Answer("proceed")


async def _stop(
    c: Controller, session: _Session, event: HookEvent, told: Callable[[], list[Observation]]
) -> Answer:
    if c.judge.terminal:
        return Answer("proceed", context=await _end(c))
    blocks = int(session.state.get("stop_blocks", 0))
    if blocks >= MAX_STOP_BLOCKS:
        reason = StopReason(
            code="limit:stop_blocks",
            message=(
                f"the agent asked to stop {blocks + 1} times in a row without passing "
                "evidence for its candidate"
            ),
            owner="operator",
            limit="stop_blocks",
            value=float(blocks),
            bound=float(MAX_STOP_BLOCKS),
        )
        await c.exhaust(reason)
        return Answer("proceed", context=await _end(c))
    await c.claim_done(event.text[:4000])
    if c.judge.terminal or await c.check_deadline():
        return Answer("proceed", context=await _end(c))
    session.state["stop_blocks"] = blocks + 1
    verdict = "\n".join(o.text for o in told() if o.text)
    return Answer(
        "block",
        "proctor: the task is not complete: its checks must pass on the workspace as it "
        f"stands.\n{verdict}\nFix the failure, then stop again.",
    )


async def _session_end(c: Controller) -> Answer:
    await c.actor_gone()
    await _end(c)
    return Answer("proceed")


async def _answer(journal: JournalLike, task: Task, event: HookEvent) -> Answer:
    session = await _open(journal, task, event)
    problem = await _charge_outside(session, event)
    async with _wired(session) as (c, told):
        if problem is not None and not c.judge.terminal:
            await c.fail_run("unknown_price", problem)
        stop = await _stop_requested(c)
        if stop is not None and not c.judge.terminal:
            # `proctor stop` between two hook calls: this call ends the run.
            await c.stop_run(stop)
        if event.kind == "pre_tool":
            answer = await _pre_tool(c, session, event)
        elif event.kind == "post_tool":
            answer = await _post_tool(c, session, event)
        elif event.kind == "stop":
            told()  # what came before the claim is not its verdict
            answer = await _stop(c, session, event, told)
        elif event.kind == "end":
            answer = await _session_end(c)
        elif c.judge.terminal:
            answer = Answer("proceed", context=await _end(c))
        else:
            answer = Answer("proceed")
        if c.judge.terminal and c.handoff is None and not await _run_ended(c):
            await c.end_run()
        await save_snapshot(journal, c.run_id, c.judge, c.step, final=c.judge.terminal)
        await journal.add_note(c.run_id, "hook", session.state)
    return answer


async def handle(event: HookEvent, task: Task, journal: str) -> Answer:
    """
    Decide one hook call: open or resume the session's run in ``journal``, let the
    controller decide, journal the step, and return the answer.

    Args:
        event: the parsed hook input.
        task: the task (see :func:`load_hook_task`).
        journal: a SQLite file's path or a ``postgresql://`` URL.
    """
    async with open_journal(journal) as j:
        return await _answer(j, task, event)


def handle_sync(event: HookEvent, task: Task, journal: str) -> Answer:
    """:func:`handle` for a process of its own: one session's calls one at a time."""
    with _session_lock(journal, run_id_for(event.agent, event.session_id)):
        return anyio.run(handle, event, task, journal)
