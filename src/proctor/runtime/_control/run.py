"""
Running a task: wire the four tasks, start or resume a run, close what an earlier host left.
"""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import anyio
import attrs
import structlog
from anyio.abc import ObjectSendStream
from anyio.streams.memory import MemoryObjectSendStream

from proctor._errors import (
    ConfigError,
    FencedError,
    ProctorError,
    RunHeld,
    SandboxUnavailableError,
    WorkspaceBusyError,
)
from proctor._fs import remove_tree
from proctor._logging import get_logger
from proctor._wire import to_jsonable
from proctor.budgets._accountant import (
    AccountantRequest,
    run_accountant,
)
from proctor.budgets._budget import Ledger
from proctor.runtime._actors.base import Actor, run_actor
from proctor.runtime._control.controller import (
    CallCallback,
    Controller,
    Inbound,
    StepCallback,
    StopRequest,
)
from proctor.runtime._control.history import load_effects, load_history, read_start
from proctor.runtime._control.trace import _leaves
from proctor.runtime._effects.ledger import (
    EffectLedger,
)
from proctor.runtime._journal import Claimed, JournalLike, open_journal
from proctor.runtime._journal.base import RUNNING, STALE, RunRow
from proctor.runtime._outcome import Candidate, RunResult
from proctor.runtime._progress.judge import Judge, missing_files
from proctor.runtime._records import (
    Disposition,
    NoteKind,
    Observation,
    ObservationKind,
    fence_breach_finding,
)
from proctor.runtime._task import Task, prepare_workspace
from proctor.runtime._tools.process import ProcessGroups, end_groups, pid_alive
from proctor.runtime._tools.registry import ToolContext, ToolRegistry
from proctor.runtime._tools.sandbox import (
    SandboxSpec,
    python_binds,
    sandbox_available,
)
from proctor.runtime._tools.workspace import Workspace
from proctor.verifiers._candidate import (
    TreeHasher,
    changed_paths,
    freeze_known,
    snapshot_directory,
)
from proctor.verifiers._checks import CommandCheck
from proctor.verifiers._evidence import Evidence
from proctor.verifiers._harness import collect_files
from proctor.verifiers._index import Manifest
from proctor.verifiers._more_checks import CheckContext, ScopeCheck
from proctor.verifiers._pin import CandidateMoved, in_place, pinned_digest
from proctor.verifiers._verifier import VerifierInbound, run_verifier, verify_snapshot

__all__ = (
    "HEARTBEAT_SECONDS",
    "Stopper",
    "baseline_context",
    "capture_baseline",
    "command_sandbox",
    "holder_alive",
    "holder_token",
    "own_paths",
    "require_sandbox",
    "run",
    "run_sandbox",
    "start_run",
)

log = get_logger()

#: How often, by default, a run's host says in the journal that it is alive.
HEARTBEAT_SECONDS = 5.0

# The runs this process hosts now: a run of this process that is not here is dead,
# whatever its heartbeat says (its host raised, or a test simulated a crash).
_HOSTED: set[str] = set()


@attrs.define(eq=False)
class Stopper:
    """
    Stop the runs of this process from outside them: a signal handler, a supervisor.

    Pass it to :func:`run` (or ``resume``, ``work``): :meth:`stop` ends the run
    ``stopped``, the call in flight interrupted (its effect uncertain), its
    children ended, its handoff journaled. Once stopped it stays stopped: a
    worker takes no more runs, and a run started with it stops at once.
    """

    _requests: list[StopRequest] = attrs.field(factory=list, init=False)
    _event: anyio.Event | None = attrs.field(default=None, init=False)

    def stop(self, name: Literal["user_stop", "stop_signal"] = "user_stop", why: str = "") -> None:
        """
        Ask the runs to stop; returns at once.

        Args:
            name: ``user_stop`` (a person: SIGINT) or ``stop_signal`` (the host
                is told to stop: SIGTERM), which outranks it.
            why: said in the stop reason.
        """
        self._requests.append(StopRequest(name, "", why))
        if self._event is not None:
            self._event.set()

    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` was called."""
        return bool(self._requests)

    async def wait(self) -> StopRequest:
        """Wait until :meth:`stop` is called; return the strongest request."""
        if not self._requests:
            if self._event is None:
                self._event = anyio.Event()
            await self._event.wait()
        named = [r for r in self._requests if r.name == "stop_signal"]
        return named[0] if named else self._requests[0]


async def _hold_workspace(
    journal: JournalLike, task: Task, run_id: str, *, resuming_task: str | None
) -> None:
    """
    Refuse a run on a workspace that a live run holds; close the stale runs that
    hold it (their host stopped beating, or died on this machine).

    Args:
        resuming_task: for a resume, the task's id: its own stale runs are closed
            by :func:`_close_interrupted`, which names the successor.

    Raises:
        WorkspaceBusyError: a live run holds the workspace.
    """
    host = socket.gethostname()
    for row in await journal.live_runs(str(task.workspace)):
        if row.run_id == run_id:
            break  # the runs after this one came later: they yield to it
        state, since = _liveness(row, host)
        if state == STALE:
            if row.owner is None and row.task_id != resuming_task:
                await _close_stale(journal, row, since, host)
            continue
        raise WorkspaceBusyError(
            f"run {row.run_id} holds the workspace {task.workspace} ({state} on "
            f"{row.host or 'an unknown host'}, pid {row.pid}, since {_iso(since)}): stop it "
            f"(proctor stop {row.run_id}) or wait for it to end"
        )


def _liveness(row: RunRow, host: str) -> tuple[str, float]:
    """Whether a running run lives: exact for this process's runs, else by pid and heartbeat."""
    mine = row.host == host and row.pid == os.getpid() and row.status == RUNNING
    if mine and row.run_id not in _HOSTED:
        return STALE, row.heartbeat_at or row.started_at
    return row.liveness(time.time(), host=host, alive=pid_alive)


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


async def _close_stale(journal: JournalLike, row: RunRow, since: float, host: str) -> None:
    """End a run whose host stopped beating, and the children it left on this machine."""
    reason = {
        "code": "interrupted",
        "message": f"the run's host stopped ({row.host}, pid {row.pid}; last heartbeat "
        f"{_iso(since)}); it was closed when the workspace was opened again",
        "owner": "operator",
    }
    ended = await journal.ending_step(row.run_id)
    disposition = Disposition.FAILED.value
    if ended is not None:
        disposition, reason = str(ended["disposition"]), ended.get("stop_reason") or reason
    with contextlib.suppress(FencedError):
        await journal.end_run(
            row.run_id,
            row.epoch,
            disposition=disposition,
            stop_reason=reason,
            candidate_digest=None,
            handoff=None,
        )
    log.warning("run.closed_stale", run_id=row.run_id, host=row.host, pid=row.pid)
    if row.host != host:
        return  # its process groups are on another machine
    for group in await journal.processes(row.run_id):
        if group.ended_at is None:
            how = (await end_groups([group.pgid]))[group.pgid]
            await journal.end_process(row.run_id, group.pgid, how)
    await end_groups(sorted(await anyio.to_thread.run_sync(_groups_of, row.run_id)))


async def _close_interrupted(journal: JournalLike, task_id: str, successor: str) -> None:
    """
    End the task's runs whose host died (still ``running``): with the disposition
    their journal recorded, if they had reached one, else as interrupted; and end
    whatever their children left running. From then on the journal refuses their
    effect dispatches.
    """
    for row in await journal.runs_of_task(task_id):
        if row.status != "running" or row.run_id == successor:
            continue
        ended = await journal.ending_step(row.run_id)
        if ended is not None:
            disposition, reason = str(ended["disposition"]), ended.get("stop_reason")
        else:
            disposition = Disposition.FAILED.value
            reason = {
                "code": "interrupted",
                "message": f"the run's host died; run {successor} resumed the task",
                "owner": "operator",
            }
        with contextlib.suppress(FencedError):
            await journal.end_run(
                row.run_id,
                row.epoch,
                disposition=disposition,
                stop_reason=reason,
                candidate_digest=None,
                handoff=None,
            )
        for group in await journal.processes(row.run_id):
            if group.ended_at is not None:
                continue
            how = (await end_groups([group.pgid]))[group.pgid]
            await journal.end_process(row.run_id, group.pgid, how)
        await end_groups(sorted(await anyio.to_thread.run_sync(_groups_of, row.run_id)))


def _groups_of(run_id: str) -> set[int]:
    """
    The process groups still running whose environment names ``run_id``: every
    command a run starts carries ``PROCTOR_RUN``, so even a group its host died
    before journaling is found.
    """
    marker = f"PROCTOR_RUN={run_id}".encode()
    found: set[int] = set()
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    found.add(os.getpgid(int(entry.name)))
        except (OSError, ProcessLookupError):
            continue
    found.discard(os.getpgrp())
    return found


def own_paths(
    task: Task, journal: JournalLike, actor_spec: Mapping[str, Any] | None
) -> dict[str, Path]:
    """
    Return proctor's own files for a run, by what they are: the journal (a file
    journal), the task file and the actor's script. None of them may lie inside
    the workspace, and none is visible from a command.
    """
    own: dict[str, Path] = {}
    where = journal.path
    if where and "://" not in where:
        own["journal"] = Path(where).resolve()
    if task.source is not None:
        own["task file"] = Path(task.source).resolve()
    script = (actor_spec or {}).get("script")
    if isinstance(script, str) and script:
        own["actor script"] = Path(script).resolve()
    return own


def _refuse_inside(task: Task, own: Mapping[str, Path]) -> None:
    """Refuse a run whose journal, task file or actor script lies inside the workspace."""
    root = Path(task.workspace).resolve()
    for what, given in own.items():
        path = given.resolve()
        if path == root or root in path.parents:
            fix = {
                "journal": "give --journal a path outside the workspace",
                "task file": (
                    "move the task file out of the workspace, or set [task] workspace to a"
                    " directory that does not contain it (an omitted workspace is the task"
                    " file's own directory)"
                ),
                "actor script": "move the actor's script out of the workspace",
            }[what]
            raise ConfigError(
                f"the {what} {path} lies inside the workspace {root}: the actor's commands"
                f" could read or rewrite it; {fix}"
            )


def command_sandbox(task: Task, hide: tuple[Path, ...]) -> SandboxSpec:
    """
    Return the sandbox the actor's commands run in: the workspace writable, the
    interpreter proctor runs in read-only (checks written as ``python -m pytest``
    need it), proctor's own files covered.
    """
    workspace = Path(task.workspace).resolve()
    return task.sandbox.spec(
        workspace,
        ro_binds=python_binds(sys.executable, skip_under=[workspace]),
        hide=hide,
    )


def _proctor_package() -> Path:
    # proctor's own code, wherever it is installed: never visible to a command.
    return Path(__file__).resolve().parent.parent.parent


async def _baseline_evidence(
    task: Task,
    journal: JournalLike,
    run_id: str,
    task_id: str,
    sandbox: SandboxSpec,
    files: Mapping[str, Mapping[str, Any]],
    baseline: Manifest,
    hasher: TreeHasher,
) -> dict[str, dict[str, str]]:
    """
    Run the checks that report per-test results on the baseline, before the actor's
    first step; journal their evidence and return each one's test outcomes.
    """
    checks = tuple(c for c in task.checks if isinstance(c, CommandCheck) and c.runs_pytest)
    if not checks:
        return {}
    context = CheckContext(
        baseline=baseline,
        protected=task.protected,
        ignore=task.ignore,
        sandbox=sandbox,
        baseline_files=files,
    )
    evidence: tuple[Evidence, ...] = ()
    pin = None
    if in_place(task.workspace, checks, sandbox):
        # In place, as a candidate is: walked again to take the pin, and judged
        # on a copy if the tree is no longer the baseline or moves meanwhile.
        digest, pin = await anyio.to_thread.run_sync(pinned_digest, hasher)
        if digest != baseline.digest:
            pin = None
    if pin is not None:
        try:
            _, evidence = await verify_snapshot(
                task.workspace, task.contract_version, checks, context, baseline=True, pin=pin
            )
        except CandidateMoved:
            pin = None
    if pin is None:
        snapshot = await anyio.to_thread.run_sync(snapshot_directory, task.workspace) / "tree"
        try:
            known = await anyio.to_thread.run_sync(
                freeze_known, task.workspace, snapshot, task.ignore, None, baseline
            )
            _, evidence = await verify_snapshot(
                snapshot,
                task.contract_version,
                checks,
                context,
                baseline=True,
                known=known,
                consume=True,
            )
        finally:
            with anyio.move_on_after(30, shield=True):
                await anyio.to_thread.run_sync(remove_tree, snapshot.parent)
    found: dict[str, dict[str, str]] = {}
    for ev in evidence:
        await journal.add_evidence(run_id, task_id, to_jsonable(ev))
        if ev.tests:
            found[ev.check] = dict(ev.tests)
        log.info("run.baseline", check=ev.check, tests=len(ev.tests), failing=ev.failing_tests)
    return found


async def capture_baseline(
    task: Task,
    journal: JournalLike,
    run_id: str,
    task_id: str,
    sandbox: SandboxSpec,
    hasher: TreeHasher,
    digest: str,
) -> dict[str, Any]:
    """
    Capture what a task's first run starts from and journal it: the start note
    holds the tree's digest; a baseline note the protected and harness files the
    checks restore, each per-test check's results on the untouched workspace
    (their evidence is journaled too) and, when a scope check will compare a
    candidate with the baseline, the tree's manifest (compressed, and checked
    against the digest when it is read back: see :func:`read_start`). Returns
    what :func:`read_start` returns for it.
    """
    manifest = hasher.manifest()
    files = await anyio.to_thread.run_sync(
        collect_files,
        task.workspace,
        (*task.protected, *task.harness()),
        task.ignore,
        manifest.paths(),
    )
    tests = await _baseline_evidence(
        task, journal, run_id, task_id, sandbox, files, manifest, hasher
    )
    extra: dict[str, Any] = {"files": files, "tests": tests}
    if any(isinstance(check, ScopeCheck) for check in task.all_checks()):
        packed = await anyio.to_thread.run_sync(manifest.to_bytes)
        extra["manifest"] = base64.b64encode(packed).decode("ascii")
    await journal.add_note(run_id, NoteKind.BASELINE, extra)
    await journal.add_note(run_id, NoteKind.START, {"digest": digest, "files": len(manifest)})
    return {
        "digest": digest,
        "baseline": manifest,
        "baseline_files": files,
        "baseline_tests": tests,
    }


def baseline_context(task: Task, sandbox: SandboxSpec, start: Mapping[str, Any]) -> CheckContext:
    """The checks' context for a task whose first run's start note is ``start``."""
    return CheckContext(
        harness=task.harness(),
        sandbox=sandbox,
        baseline_tests=dict(start.get("baseline_tests", {})),
        baseline_files=dict(start.get("baseline_files", {})),
    )


async def _inherited_start(journal: JournalLike, task_id: str) -> dict[str, Any]:
    """The start note of the task's first run (what its checks' baseline was)."""
    runs = sorted(await journal.runs_of_task(task_id), key=lambda r: r.started_at)
    for row in runs:
        start = await read_start(journal, row.run_id)
        if start is not None:
            return start
    return {}


def run_sandbox(
    task: Task, journal: JournalLike, actor_spec: Mapping[str, Any] | None
) -> SandboxSpec:
    """
    Return the sandbox a run's commands and checks run in, with proctor's own files
    (the journal, the task file, the actor's script, proctor's code) covered.
    """
    own = own_paths(task, journal, actor_spec)
    return command_sandbox(task, (*own.values(), _proctor_package()))


async def require_sandbox(task: Task) -> None:
    """
    Refuse a task whose ``[sandbox] mode`` is ``auto`` on a machine that cannot
    sandbox.

    Raises:
        SandboxUnavailableError: it says why, and how to fix it.
    """
    if task.sandbox.mode == "auto":
        reason = await anyio.to_thread.run_sync(sandbox_available)
        if reason is not None:
            raise SandboxUnavailableError(f"the task's [sandbox] mode is 'auto', but {reason}")


async def _fence_breach(
    journal: JournalLike, run_id: str, hasher: TreeHasher, at_end: str
) -> str | None:
    """
    Compare the workspace, once every process of the run is gone, with the candidate
    the run ended on: a difference was written after the end, and is journaled.
    """
    if not at_end:
        return None
    before = hasher.manifest()
    hasher.invalidate("")
    try:
        now = await anyio.to_thread.run_sync(hasher.digest)
    except OSError:
        return None
    if now == at_end:
        return None
    changed = changed_paths(before, hasher.manifest())
    log.warning("run.fence_breach", at_end=at_end, now=now, changed=changed[:20])
    body = {"at_end": at_end, "now": now, "changed": list(changed)}
    await journal.add_note(run_id, NoteKind.FENCE_BREACH, body)
    return fence_breach_finding(body)


def _start_time(pid: int) -> str | None:
    """A process's start time (clock ticks since boot), or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return None
    except OSError:
        stat = b""
    if stat:
        # The command name (field 2) may hold spaces and parentheses: split after it.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 19:
            return fields[19].decode()
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return "?"


def holder_token(run_id: str) -> str:
    """
    This process's name as the holder of a task, running ``run_id``:
    ``HOST:PID:START:RUN``. The start time tells this process from a later one
    that was given the same pid.
    """
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_time(pid) or '?'}:{run_id}"


def _holder_name(token: str) -> str:
    try:
        host, pid, _, run_id = token.rsplit(":", 3)
    except ValueError:
        return token or "an unknown host"
    return f"host {host} pid {pid} (run {run_id[:12]})"


def holder_alive(token: str) -> bool:
    """
    Whether the holder named by ``token`` is alive: its process still runs with
    the start time it had. A holder on another host cannot be looked at from
    here, and counts as alive.
    """
    try:
        host, pid_text, start, _ = token.rsplit(":", 3)
        pid = int(pid_text)
    except ValueError:
        return False
    if host != socket.gethostname():
        return True
    if pid == os.getpid():
        return True
    started = _start_time(pid)
    return started is not None and (started == start or "?" in (started, start))


async def _hold(journal: JournalLike, task_id: str, run_id: str, *, takeover: bool) -> str:
    """
    Take the task for this process for the run's life: one live host at a time.

    A holder that is dead (its process is gone) is replaced; so is the holder of
    the very run a worker takes over (the journal's lease says it lost the run).

    Raises:
        RunHeld: another live host holds the task.
    """
    token = holder_token(run_id)
    for _ in range(3):
        held = await journal.hold_task(task_id, run_id, token)
        if held is None:
            return token
        if not held.holder:
            continue  # released in between: try again
        replaceable = not holder_alive(held.holder) or (takeover and held.run_id == run_id)
        if not replaceable:
            break
        held = await journal.hold_task(task_id, run_id, token, replacing=held.holder)
        if held is None:
            log.info("run.holder_replaced", task_id=task_id)
            return token
    assert held is not None
    raise RunHeld(
        f"task {task_id} is held by {_holder_name(held.holder)}, which is alive: one host "
        "runs a task at a time; wait for it to end, or stop it first",
        holder=_holder_name(held.holder),
        run_id=held.run_id,
    )


async def run(
    task: Task,
    actor: Actor,
    journal: str | os.PathLike[str] | JournalLike = "proctor.db",
    *,
    tools: ToolRegistry | None = None,
    on_step: StepCallback | None = None,
    run_id: str | None = None,
    actor_spec: Mapping[str, Any] | None = None,
    stopper: Stopper | None = None,
    heartbeat_seconds: float = HEARTBEAT_SECONDS,
    on_call: CallCallback | None = None,
) -> RunResult:
    """
    Run ``actor`` on ``task`` until the controller decides it is over.

    The run is one task group of four tasks (actor, controller, verifier, budget
    accountant) that talk only over bounded channels. Everything is journaled in
    ``journal`` (by default a SQLite file, created if needed).

    Args:
        task: the task and its contract.
        actor: what proposes the steps.
        journal: the journal: a SQLite file's path or a ``postgresql://`` URL,
            opened for the run and closed after it; or an open journal, left
            open. Runs of one process that share an open journal share its
            connection: a host of many runs should (see docs/performance.md).
        tools: the tools on offer (default: ``task.registry()``, the built-in workspace
            tools and the fetch, search and declared tools the task opted into).
        on_step: called with each trace record after it is journaled.
        on_call: called with the step number and the call just before an admitted
            tool call runs (what a live view shows as running).
        run_id: the run's id (default: a new one).
        actor_spec: how to make the actor again (a task file's ``[actor]`` table),
            journaled so that ``proctor resume`` can.
        stopper: stops the run from this process (see :class:`Stopper`); from
            another process or host, :func:`~proctor.runtime.stop`.
        heartbeat_seconds: how often the host says in the journal that it is
            alive; a run that missed two heartbeats is ``stale``.

    Returns:
        The run's outcome: disposition, stop reason, candidate, evidence, handoff.

    Raises:
        WorkspaceBusyError: a live run holds the task's workspace.
    """
    options: dict[str, Any] = {
        "tools": tools,
        "on_step": on_step,
        "run_id": run_id,
        "actor_spec": actor_spec,
        "stopper": stopper,
        "heartbeat_seconds": heartbeat_seconds,
        "on_call": on_call,
    }
    if not isinstance(journal, str | os.PathLike):
        return await start_run(task, actor, journal, **options)
    if "://" not in os.fspath(journal):
        # Before the file exists: a journal the actor could write is never made.
        _refuse_inside(task, {"journal": Path(journal)})
    async with open_journal(journal) as j:
        return await start_run(task, actor, j, **options)


async def start_run(
    task: Task,
    actor: Actor,
    journal: JournalLike,
    *,
    tools: ToolRegistry | None = None,
    on_step: StepCallback | None = None,
    run_id: str | None = None,
    parent_run_id: str | None = None,
    actor_spec: Mapping[str, Any] | None = None,
    claimed: Claimed | None = None,
    stopper: Stopper | None = None,
    heartbeat_seconds: float = HEARTBEAT_SECONDS,
    answer: str | None = None,
    on_call: CallCallback | None = None,
) -> RunResult:
    """
    Run ``actor`` on ``task`` with an open journal; see :func:`run`.

    Args:
        parent_run_id: set for a resumed run: the workspace is taken as it stands
            and the task's history is inherited from the journal.
        claimed: a queued run a worker claimed: the run goes on under the claim's
            epoch. A run taken over from another worker (``previous_epoch`` > 0)
            inherits its own history as well as the task's, like a resume.
        answer: for a resumed run, a person's answer to the question its
            parent ended on (``needs_input``): delivered to the actor first.
    """
    if claimed is not None:
        run_id = claimed.run_id
    registry = tools if tools is not None else task.registry()
    run_id = run_id or uuid.uuid4().hex
    task_id = task.task_id or uuid.uuid4().hex
    structlog.contextvars.bind_contextvars(run_id=run_id, task_id=task_id)
    try:
        await journal.put_task(task_id, task.goal, task.describe(), task.contract_version)
        # Before anything changes: the workspace, the journal's runs, anyone's processes.
        holder = await _hold(journal, task_id, run_id, takeover=claimed is not None)
        try:
            return await _run(
                task,
                actor,
                journal,
                registry,
                on_step,
                run_id,
                task_id,
                parent_run_id,
                actor_spec,
                claimed,
                stopper,
                heartbeat_seconds,
                answer,
                on_call,
            )
        finally:
            with anyio.move_on_after(5, shield=True), contextlib.suppress(ProctorError):
                await journal.release_task(task_id, holder)
    finally:
        _HOSTED.discard(run_id)
        structlog.contextvars.unbind_contextvars("run_id", "task_id")


async def _run(
    task: Task,
    actor: Actor,
    journal: JournalLike,
    registry: ToolRegistry,
    on_step: StepCallback | None,
    run_id: str,
    task_id: str,
    parent_run_id: str | None = None,
    actor_spec: Mapping[str, Any] | None = None,
    claimed: Claimed | None = None,
    stopper: Stopper | None = None,
    heartbeat_seconds: float = HEARTBEAT_SECONDS,
    answer: str | None = None,
    on_call: CallCallback | None = None,
) -> RunResult:
    # Kept whole: it makes the four tasks' channels and hands each end to its one owner; split, the
    # ends would travel through helpers and their ownership blur.
    takeover = claimed is not None and claimed.previous_epoch > 0
    inherits = parent_run_id is not None or takeover
    estimate = getattr(actor, "estimate", None)
    if estimate is not None:
        # A model with no known or declared price fails here, before anything is
        # journaled: no run is left `running` with no step.
        estimate(Observation(step=0, kind=ObservationKind.START)).amounts(task.prices)
    _refuse_inside(task, own_paths(task, journal, actor_spec))
    await require_sandbox(task)
    resuming_task = task_id if inherits else None
    _HOSTED.add(run_id)
    await _hold_workspace(journal, task, run_id, resuming_task=resuming_task)
    if not inherits:
        await anyio.to_thread.run_sync(prepare_workspace, task)
    if claimed is not None:
        epoch = claimed.epoch
    else:
        epoch = await journal.create_run(
            run_id,
            task_id,
            policy=task.policy.settings(),
            policy_version=task.policy.version,
            host=socket.gethostname(),
            parent_run_id=parent_run_id,
        )
    await journal.heartbeat(
        run_id, epoch, pid=os.getpid(), workspace=str(task.workspace), every=heartbeat_seconds
    )
    try:
        # Two runs that started at once on one workspace: the older one keeps it.
        await _hold_workspace(journal, task, run_id, resuming_task=resuming_task)
    except WorkspaceBusyError as exc:
        await journal.end_run(
            run_id,
            epoch,
            disposition=Disposition.FAILED.value,
            stop_reason={"code": "workspace_busy", "message": str(exc), "owner": "operator"},
            candidate_digest=None,
            handoff=None,
        )
        raise
    spent = await journal.spend_totals(task_id)
    ledger = Ledger(task.budget, dict(spent))

    async def record_spend(amounts: Mapping[str, float], kind: str, note: str = "") -> None:
        if kind == "retune":
            # A retuned limit is a journaled event with who and why, not spend.
            await journal.add_note(run_id, NoteKind.RETUNE, {"limits": dict(amounts), "note": note})
        else:
            # Written with the step that follows (or the effect's dispatch): one
            # transaction a step, not one per reservation and settlement.
            await journal.add_spend(task_id, run_id, amounts, kind, note, defer=True)

    async def group_started(pgid: int, command: str) -> None:
        await journal.record_process(run_id, pgid, command)

    async def group_ended(pgid: int, how: str) -> None:
        # With the command's step (or whatever the journal writes next): a host that
        # dies before it leaves the group open, and its successor ends it again.
        await journal.end_process(run_id, pgid, how, defer=True)

    # Each sandboxed command finds its sandbox made ahead (by spares_task, below);
    # the run's end (terminate_all) ends the spare.
    groups = ProcessGroups(on_start=group_started, on_end=group_ended, prestart=True)
    if task.sandbox.mode == "off":
        log.warning("run.unsandboxed", workspace=str(task.workspace))
        await journal.add_note(run_id, "sandbox", {"mode": "off"})
    context = ToolContext(
        workspace=Workspace.at(task.workspace),
        command_time_limit=task.command_time_limit,
        groups=groups,
        # Marks every launcher, so a successor can find what a dead host left running.
        env={"PROCTOR_RUN": run_id, "PROCTOR_TASK": task_id},
        sandbox=run_sandbox(task, journal, actor_spec),
        protected=task.protected,
        limits=task.limits,
    )
    if context.sandbox is not None and "run_command" in registry:
        # The first command's sandbox too, when the run offers commands at all.
        groups.prepare(context.sandbox, context.env)
    # Watched: a step learns what changed from the kernel instead of walking the tree.
    hasher = TreeHasher(task.workspace, task.ignore, watch=True)
    judge = Judge(
        task=task.facts(registry.specs()),
        policy=task.policy,
        digest=await anyio.to_thread.run_sync(hasher.digest),
        # The live controller knows which files exist: the hasher's view, as of the
        # digest taken after the last call that could change the workspace.
        missing_files=lambda: missing_files(task.required_files, hasher.paths()),
        contract_version=task.contract_version,
    )
    greeting = ""
    effects = EffectLedger()
    step_base = 0
    if inherits and not takeover:
        await _close_interrupted(journal, task_id, run_id)
    sandbox = context.sandbox
    assert sandbox is not None
    if not inherits:
        start = await capture_baseline(
            task, journal, run_id, task_id, sandbox, hasher, judge.digest
        )
    else:
        history = await load_history(journal, task_id, None if takeover else run_id, judge)
        baseline, greeting = history.baseline, history.summary
        effects = await load_effects(journal, task_id)
        step_base = history.steps
        start = await _inherited_start(journal, task_id)
    if not inherits:
        baseline = start["baseline"]
    check_context = baseline_context(task, sandbox, start)
    if actor_spec is not None:
        await journal.add_note(run_id, NoteKind.ACTOR, dict(actor_spec))

    inbox_tx, inbox_rx = anyio.create_memory_object_stream[Inbound](16)
    obs_tx, obs_rx = anyio.create_memory_object_stream[Observation](1)
    ver_tx, ver_rx = anyio.create_memory_object_stream[VerifierInbound](1)
    acc_tx, acc_rx = anyio.create_memory_object_stream[AccountantRequest](16)
    actor_scope = anyio.CancelScope()
    controller = Controller(
        task=task,
        run_id=run_id,
        task_id=task_id,
        epoch=epoch,
        journal=journal,
        judge=judge,
        registry=registry,
        context=context,
        hasher=hasher,
        inbox=inbox_rx,
        to_actor=obs_tx,
        to_verifier=ver_tx,
        to_accountant=acc_tx,
        actor_scope=actor_scope,
        on_step=on_step,
        on_call=on_call,
        estimate=getattr(actor, "estimate", None),
        baseline=baseline,
        effects=effects,
        step_base=step_base,
        heartbeat_seconds=heartbeat_seconds,
        poll_seconds=min(0.5, heartbeat_seconds),
        check_context=check_context,
    )
    controller.remaining = ledger.remaining()
    if takeover:
        # The same run goes on under a new epoch: its step numbers go on too.
        controller.step = len(await journal.steps(run_id))

    async def actor_task(proposals: ObjectSendStream[Inbound]) -> None:
        with actor_scope:
            await run_actor(actor, obs_rx, proposals)

    watch_scope = anyio.CancelScope()
    spares_scope = anyio.CancelScope()

    async def spares_task() -> None:
        with spares_scope:
            await groups.keep_spares()

    async def watch_task(inbox: MemoryObjectSendStream[Inbound]) -> None:
        with watch_scope, contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            async with anyio.create_task_group() as watchers:
                if stopper is not None:
                    watchers.start_soon(relay, inbox.clone())
                await controller.watch(inbox)

    async def relay(inbox: ObjectSendStream[Inbound]) -> None:
        assert stopper is not None
        async with inbox:
            request = await stopper.wait()
            controller.interrupt(request)
            await inbox.send(request)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(actor_task, inbox_tx.clone())
            tg.start_soon(run_verifier, ver_rx, inbox_tx.clone())
            tg.start_soon(run_accountant, ledger, acc_rx, inbox_tx.clone(), record_spend)
            tg.start_soon(watch_task, inbox_tx.clone())
            tg.start_soon(spares_task)
            inbox_tx.close()
            try:
                async with inbox_rx, obs_tx, ver_tx, acc_tx:
                    await controller.run(greeting, answer=answer)
            finally:
                watch_scope.cancel()
                spares_scope.cancel()
                # Ending a run ends its children: nothing is orphaned. Then
                # whatever still carries the run's marker (a sandbox's inner
                # processes outlive their launcher's group by a moment).
                with anyio.move_on_after(10, shield=True):
                    await groups.terminate_all()
                    await end_groups(sorted(await anyio.to_thread.run_sync(_groups_of, run_id)))
                actor_scope.cancel()
                # Closing an inotify instance waits for the kernel's grace period
                # (milliseconds, with no CPU spent): off the event loop, where the
                # other runs of this process go on meanwhile.
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(hasher.close)
    except BaseExceptionGroup as group:
        # One proctor error (a lost lease's fence, a broken journal) is the run's
        # error: the caller sees it as such, not wrapped in a group.
        leaves = _leaves(group)
        if len(leaves) == 1 and isinstance(leaves[0], ProctorError):
            raise leaves[0] from group
        raise

    handoff = controller.handoff
    assert judge.disposition is not None
    assert handoff is not None
    current = controller.final_digest
    breach = await _fence_breach(journal, run_id, hasher, current)
    if breach is not None:
        handoff = attrs.evolve(handoff, open_findings=(*handoff.open_findings, breach))
    log.info("run.ended", disposition=judge.disposition.value, steps=controller.step)
    return RunResult(
        run_id=run_id,
        task_id=task_id,
        disposition=judge.disposition,
        stop_reason=judge.stop_reason,
        candidate=Candidate(current),
        evidence=tuple(controller.evidence),
        handoff=handoff,
        steps=controller.step,
        journal=str(journal.path),
    )
