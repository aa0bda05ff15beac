"""
The journal's interface and its records: what every backend promises.
"""

from __future__ import annotations

from collections.abc import (
    Callable,
    Mapping,
    Sequence,
)
from typing import Any, Literal, Protocol, Self

import attrs

__all__ = (
    "CLOSE_LIMIT",
    "Claimed",
    "DURABLE",
    "EFFECT_STATES",
    "EffectRow",
    "HolderRow",
    "JournalLike",
    "MIN_PREFIX",
    "ProcessRow",
    "QUEUED",
    "RUNNING",
    "RunRow",
    "STALE",
    "WAITING",
    "SPEND_KINDS",
    "SYNCHRONOUS",
    "SpendRow",
    "Synchronous",
)


#: The states of an effect in the ledger, in the order an effect may pass through them.
EFFECT_STATES: tuple[str, ...] = (
    "planned",
    "dispatched",
    "confirmed",
    "failed",
    "uncertain",
    "reconciled_applied",
    "reconciled_not_applied",
    "escalated",
)

#: The kinds of spend rows: a reservation before spend, its settlement or
#: release after, and a direct charge with no reservation.
SPEND_KINDS: tuple[str, ...] = ("reserve", "settle", "release", "charge")

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
SYNCHRONOUS: tuple[str, ...] = ("OFF", "NORMAL", "FULL", "EXTRA")
#: The levels at which every commit is already durable.
DURABLE: tuple[str, ...] = ("FULL", "EXTRA")


#: The shortest run-id prefix :meth:`Journal.get_run` accepts.
MIN_PREFIX = 6

#: The longest a close waits for an operation in flight to finish.
CLOSE_LIMIT = 30.0

RUNNING = "running"
QUEUED = "queued"
#: A running run whose host stopped beating.
STALE = "stale"
#: A running run that waits for a person.
WAITING = "waiting"


# --------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------


@attrs.frozen
class RunRow:
    """
    One run as the journal holds it.

    Args:
        run_id: the run.
        task_id: the task it works on.
        parent_run_id: the run it resumes, if any.
        epoch: its ownership epoch; writes from another epoch are fenced.
        status: ``running``, or the terminal disposition.
        disposition: the terminal disposition, or None while running.
        stop_reason: the unstructured stop reason, once ended.
        policy: the policy's settings.
        policy_version: the policy's version.
        host: the host that runs it.
        started_at: when it started (seconds since the epoch).
        ended_at: when it ended, or None.
        candidate_digest: the digest of the final candidate, if any.
        handoff: what the run hands to whoever recovers it.
        goal: the task's goal.
        steps: how many steps are journaled.
        owner: the worker that holds or last held its lease, if it was claimed.
        lease_until: when that lease expires (seconds since the epoch, by the
            database's clock), or None when the run holds no lease.
        pid: the process that runs it, on ``host``.
        heartbeat_at: when that process last said it is alive, or None.
        heartbeat_every: how often it says so (seconds).
        waiting: what the run waits for (``answer``, ``approval``), or None.
        waiting_since: since when it waits.
        workspace: the workspace it holds while it runs.
    """

    run_id: str
    task_id: str
    parent_run_id: str | None
    epoch: int
    status: str
    disposition: str | None
    stop_reason: dict[str, Any] | None
    policy: dict[str, Any]
    policy_version: str
    host: str
    started_at: float
    ended_at: float | None
    candidate_digest: str | None
    handoff: dict[str, Any] | None
    goal: str
    steps: int
    owner: str | None = None
    lease_until: float | None = None
    pid: int | None = None
    heartbeat_at: float | None = None
    heartbeat_every: float | None = None
    waiting: str | None = None
    waiting_since: float | None = None
    workspace: str | None = None

    def liveness(self, now: float, *, host: str, alive: Callable[[int], bool]) -> tuple[str, float]:
        """
        Say whether the run is alive, and since when.

        An ended run is its status, since it ended. A running run is ``stale`` when
        its host missed two heartbeats, or when it runs on ``host`` (this machine)
        and its process is gone (``alive(pid)`` is false); else ``waiting`` (for an
        answer or an approval) or ``running``.

        Args:
            now: the time (seconds since the epoch).
            host: this machine's name.
            alive: whether a process id on this machine is alive.

        Returns:
            The state and since when (seconds since the epoch).
        """
        if self.status != RUNNING:
            return self.status, self.ended_at or self.started_at
        beat = self.heartbeat_at
        if self.pid is not None and self.host == host and not alive(self.pid):
            return STALE, beat or self.started_at
        if beat is not None and self.heartbeat_every and now - beat > 2 * self.heartbeat_every:
            return STALE, beat
        if self.waiting:
            return f"{WAITING} ({self.waiting})", self.waiting_since or self.started_at
        return RUNNING, self.started_at


@attrs.frozen
class HolderRow:
    """
    Who holds a task: the one live host that runs its runs.

    Args:
        task_id: the task.
        run_id: the run the holder runs.
        holder: the holder's token (``HOST:PID:START:RUN``, see
            :func:`proctor.runtime._control.run.holder_token`).
        since: when it took the task (seconds since the epoch).
    """

    task_id: str
    run_id: str
    holder: str
    since: float


@attrs.frozen
class Claimed:
    """
    A run a worker has claimed: it now owns the run under ``epoch`` until its lease expires.

    Args:
        run_id: the run.
        task_id: its task.
        epoch: the worker's epoch: every fenced write passes it.
        previous_epoch: the run's epoch before the claim: 0 for a queued run never
            claimed before, otherwise the epoch of the owner whose lease expired
            or who released it (the run is being resumed).
    """

    run_id: str
    task_id: str
    epoch: int
    previous_epoch: int


@attrs.frozen
class EffectRow:
    """
    One effect in the ledger.

    Args:
        key: its idempotency key.
        run_id: the run that last dispatched it.
        task_id: its task.
        step: the step that last dispatched it.
        tool: the tool.
        target: what it acts on (a path, a URL, a resource).
        args_hash: the digest of its arguments.
        state: one of :data:`EFFECT_STATES`.
        created_at: when it was first recorded.
        updated_at: when its state last changed.
        outcome: what settled it, if anything did.
    """

    key: str
    run_id: str
    task_id: str
    step: int
    tool: str
    target: str
    args_hash: str
    state: str
    created_at: float
    updated_at: float
    outcome: dict[str, Any] | None


@attrs.frozen
class SpendRow:
    """
    One dimension of one record of a run's spend ledger.

    Args:
        dimension: what was spent (``steps``, ``tokens_in``, ``cost_usd``,
            ``tool_calls:NAME``, ...).
        amount: how much.
        kind: one of :data:`SPEND_KINDS`.
        at: when it was recorded (seconds since the epoch).
    """

    dimension: str
    amount: float
    kind: str
    at: float


@attrs.frozen
class ProcessRow:
    """
    One child process group of a run.

    Args:
        run_id: the run.
        pgid: its process group id.
        command: the command it runs.
        started_at: when it started.
        ended_at: when it ended, or None while it may still run.
        how: how it ended (``exited``, ``terminated``, ``killed``, ...).
    """

    run_id: str
    pgid: int
    command: str
    started_at: float
    ended_at: float | None
    how: str | None


# --------------------------------------------------------------------------------------
# The interface both backends implement
# --------------------------------------------------------------------------------------


class JournalLike(Protocol):
    """
    What the runtime needs from a journal, whichever database holds it.

    :class:`Journal` (SQLite) and :class:`~proctor.runtime._journal.postgres.PgJournal`
    (PostgreSQL) implement it with the same arguments, results, errors and fences;
    :func:`open_journal` returns one or the other. See :class:`Journal` for each
    method's contract.
    """

    @property
    def path(self) -> str:
        """Where the journal is: a file, or a URL without its password."""
        ...

    async def close(self) -> None: ...
    async def __aenter__(self) -> Self: ...
    async def __aexit__(self, *exc_info: object) -> None: ...

    async def put_task(
        self, task_id: str, goal: str, spec: dict[str, Any], contract_version: str
    ) -> None: ...
    async def get_task(self, task_id: str) -> dict[str, Any]: ...

    async def create_run(
        self,
        run_id: str,
        task_id: str,
        *,
        policy: dict[str, Any],
        policy_version: str,
        host: str,
        parent_run_id: str | None = None,
    ) -> int: ...
    async def end_run(
        self,
        run_id: str,
        epoch: int,
        *,
        disposition: str,
        stop_reason: dict[str, Any] | None,
        candidate_digest: str | None,
        handoff: dict[str, Any] | None,
    ) -> None: ...
    async def get_run(self, run_id: str) -> RunRow: ...
    async def list_runs(self, limit: int = 50) -> list[RunRow]: ...
    async def runs_of_task(self, task_id: str) -> list[RunRow]: ...
    async def heartbeat(
        self,
        run_id: str,
        epoch: int,
        *,
        waiting: str | None = None,
        pid: int | None = None,
        workspace: str | None = None,
        every: float | None = None,
    ) -> bool: ...
    async def live_runs(self, workspace: str | None = None) -> list[RunRow]: ...

    async def submit_run(
        self, run_id: str, task_id: str, *, policy: dict[str, Any], policy_version: str
    ) -> None: ...
    async def claim_run(self, worker: str, lease_seconds: float) -> Claimed | None: ...
    async def renew_lease(self, run_id: str, epoch: int, lease_seconds: float) -> bool: ...
    async def release_run(self, run_id: str, epoch: int) -> None: ...

    async def hold_task(
        self, task_id: str, run_id: str, holder: str, *, replacing: str | None = None
    ) -> HolderRow | None:
        """
        Take the task for ``holder``, who runs ``run_id``, for that run's life.

        The task is taken when no one holds it, or when it is held by exactly
        ``replacing`` (a holder the caller found dead). The take is one atomic
        statement: of two hosts racing, one takes it and the other is told who.

        Returns:
            None when the task is now held by ``holder``; otherwise who holds it.

        Raises:
            JournalError: the task is not in the journal.
        """
        ...

    async def release_task(self, task_id: str, holder: str) -> None:
        """
        Let go of the task, if ``holder`` still holds it; nothing otherwise.
        """
        ...

    async def task_holder(self, task_id: str) -> HolderRow | None:
        """Return who holds the task, or None when no one does."""
        ...

    async def append_step(self, run_id: str, epoch: int, record: Mapping[str, Any]) -> int: ...
    async def append_steps(
        self, run_id: str, epoch: int, records: Sequence[Mapping[str, Any]]
    ) -> None: ...
    async def steps(self, run_id: str, *, after: int = 0) -> list[dict[str, Any]]: ...
    async def ending_step(self, run_id: str) -> dict[str, Any] | None: ...

    async def record_dispatch(
        self,
        *,
        run_id: str,
        epoch: int,
        key: str,
        task_id: str,
        step: int,
        tool: str,
        target: str,
        args_hash: str,
        note: Mapping[str, Any] | None = None,
    ) -> int | None:
        """
        Record, durably, that an effect is about to be dispatched; with ``note``,
        journal the run's ``effect`` note in the same durable transaction (what a
        reconciliation needs: arguments, digests), and return its id.
        """
        ...

    async def settle_effect(
        self,
        key: str,
        state: str,
        outcome: dict[str, Any] | None,
        *,
        run_id: str | None = None,
        epoch: int | None = None,
        defer: bool = False,
    ) -> None:
        """
        Set an effect's state and outcome.

        With ``defer``, the settlement is written in the transaction of the
        journal's next operation (the step the settled call belongs to), after
        the deferred spend; a host that dies before it loses it, and the effect
        is found ``dispatched`` (then ``uncertain``, then reconciled by a read)
        by whoever resumes the task. A deferred settlement that its fence or a
        missing key refuses writes nothing and raises nothing: the step written
        with it is refused by the same fence.
        """
        ...

    async def effects(
        self,
        *,
        task_id: str | None = None,
        run_id: str | None = None,
        states: Sequence[str] | None = None,
    ) -> list[EffectRow]: ...

    async def count_effects(self, task_id: str) -> int:
        """Return how many effects the task has journaled, in every state (an index count)."""
        ...

    async def effect_notes(self, run_id: str, keys: Sequence[str]) -> list[dict[str, Any]]:
        """
        Return the run's ``effect`` notes of these effects' keys (shaped as
        :meth:`notes` shapes them), in order: what a resume needs of its open
        effects, without reading the notes of every effect the run made.
        """
        ...

    async def add_evidence(self, run_id: str, task_id: str, record: Mapping[str, Any]) -> None: ...
    async def evidence(
        self, *, run_id: str | None = None, task_id: str | None = None
    ) -> list[dict[str, Any]]: ...

    async def add_spend(
        self,
        task_id: str,
        run_id: str,
        amounts: Mapping[str, float],
        kind: str,
        note: str = "",
        *,
        defer: bool = False,
    ) -> None: ...
    async def spend_totals(
        self, task_id: str, kinds: Sequence[str] = ("settle", "charge")
    ) -> dict[str, float]: ...

    async def spend_rows(self, run_id: str) -> list[SpendRow]: ...

    async def record_process(self, run_id: str, pgid: int, command: str) -> None: ...
    async def end_process(self, run_id: str, pgid: int, how: str, *, defer: bool = False) -> None:
        """
        Mark the latest open record of process group ``pgid`` as ended (``how``:
        ``exited``, ``terminated`` or ``killed``); nothing if none is open.

        With ``defer``, it is written in the transaction of the journal's next
        operation (a command's step), as a deferred effect settlement is: a host
        that dies before it leaves the group open in the journal, and whoever
        closes the run ends it again (a group that is gone: ``exited``).
        """
        ...

    async def processes(self, run_id: str) -> list[ProcessRow]: ...

    async def add_note(self, run_id: str, kind: str, body: dict[str, Any]) -> int: ...
    async def notes(
        self, run_id: str, *, after: int = 0, kinds: Sequence[str] | None = None
    ) -> list[dict[str, Any]]: ...
    async def latest_note(self, run_id: str, kind: str) -> dict[str, Any] | None: ...
    async def put_snapshot(self, run_id: str, step: int, body: dict[str, Any]) -> None: ...
    async def snapshot(self, run_id: str) -> dict[str, Any] | None: ...

    async def integrity_check(self) -> str: ...
