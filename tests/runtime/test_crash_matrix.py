"""
The crash matrix: the host dies at every journal boundary of a run, then the task is resumed.

The scenario (``tests/support/crash_scenario.py``) first runs once untouched,
tracing the journal boundaries it passes: that list is the matrix. Then, for
each boundary n, a fresh journal and workspace: the scenario runs in a
subprocess with ``PROCTOR_CRASH_AT=n`` until the journal's crash hook kills it
with SIGKILL there, then runs again without the variable, resuming the task,
until it finishes. One more point, n = the number of boundaries + 1, must
finish without a crash. After every recovery the invariants are checked
against the real journal, the real workspace and the real HTTP service the
POSTs went to (see :func:`check_point`).

Points run as many at a time as there are CPUs (at least two), each with its
own task id so that the service's counters stay apart. The summary is printed
and written to ``benchmarks/results/crash_matrix.json``.

The matrix fails on any violation. Four points once broke an invariant (a key
reused for a step a dead host lost, a completion lost with its host, a call the
dead host made left uncharged, the dead host's children left running); each has
a minimal reproduction below that now guards its fix.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import platform
import signal
import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import attrs
import pytest
from tests.support import crash_scenario as scenario
from tests.support.pg import fresh_schema
from tests.support.service import Service, service_fixture  # noqa: F401 - the fixture

from proctor.runtime import open_journal
from proctor.runtime._effects.ledger import args_hash
from proctor.runtime._journal import EffectRow, ProcessRow, RunRow
from proctor.runtime._tools.process import group_alive

PY = sys.executable
SCRIPT = Path(scenario.__file__)
RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "crash_matrix.json"

#: States of an effect known to have been applied.
APPLIED = frozenset({"confirmed", "reconciled_applied"})
#: States an effect may be left in once its task is recovered.
SETTLED = frozenset(
    {"confirmed", "failed", "reconciled_applied", "reconciled_not_applied", "escalated"}
)

#: Violations the matrix once found (the check that failed, and why); each is now guarded.
KEY_REUSE = (
    "each_post_applied_once",
    "a resumed run reuses the idempotency key of an effect whose step was not journaled",
)
LOST_COMPLETION = (
    "post_completion_write_refused",
    "a completion decided before the host died is lost: the resumed run goes on writing",
)
UNCHARGED = (
    "applied_calls_charged",
    "a call the dead host made is not charged: its reservation is dropped on resume",
)


@attrs.frozen
class Point:
    """
    What one point of the matrix found.

    Args:
        n: the boundary the host died at (past the last one: it did not die).
        label: the boundary's label, as the crash hook logged it.
        crashed: whether the host died.
        checks: how many times each invariant was checked.
        violations: the invariants that did not hold, with the details.
        recovered: how the effects a reconciliation settled ended, as ``tool:state``.
        seconds: how long the point took, crash, recovery and checks.
    """

    n: int
    label: str | None
    crashed: bool
    checks: collections.Counter[str]
    violations: tuple[str, ...]
    recovered: tuple[str, ...]
    seconds: float

    def failed(self) -> set[str]:
        """Return the names of the invariants that did not hold."""
        return {v.split(":", 1)[0] for v in self.violations}


@attrs.define(eq=False)
class _Checker:
    """Counts the invariants checked at one point and keeps those that do not hold."""

    checks: collections.Counter[str] = attrs.field(factory=collections.Counter)
    violations: list[str] = attrs.field(factory=list)

    def __call__(self, name: str, ok: bool, detail: Callable[[], str] | str = "") -> None:
        self.checks[name] += 1
        if not ok:
            text = detail() if callable(detail) else detail
            self.violations.append(f"{name}: {text}" if text else name)


@attrs.frozen
class Backend:
    """The journal backend a matrix runs on: SQLite files, or schemas of a PostgreSQL server."""

    name: str
    #: For PostgreSQL, the URL of the server the points create their schemas on.
    admin_url: str | None = None

    @contextlib.asynccontextmanager
    async def journal(self, root: Path) -> AsyncIterator[str]:
        """A fresh, empty journal for one point: a file under ``root``, or a new schema."""
        if self.admin_url is None:
            yield str(root / "j.db")
            return
        async with fresh_schema(self.admin_url) as url:
            yield url


SQLITE = Backend("sqlite")


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "sqlite":
        return SQLITE
    # Asked for here, not as an argument: SQLite's points start no server.
    admin_url: str = request.getfixturevalue("pg_url")
    return Backend("postgresql", admin_url)


@attrs.frozen
class _Site:
    """Where one point runs: its journal, workspace and task, and the scenario's flags."""

    root: Path
    journal: str
    workspace: Path
    task_id: str
    service: Service
    hold: bool = False

    @classmethod
    @contextlib.asynccontextmanager
    async def make(
        cls, base: Path, name: str, service: Service, backend: Backend, hold: bool = False
    ) -> AsyncIterator[_Site]:
        root = base / name
        (root / "w").mkdir(parents=True)
        async with backend.journal(root) as journal:
            yield cls(root, journal, root / "w", f"crash-{name}", service, hold)

    async def scenario(
        self, *, crash: int | None = None, trace: Path | None = None
    ) -> tuple[int, str]:
        """Run the scenario once; return its exit code and its standard error."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PROCTOR_CRASH_")}
        if crash is not None:
            env["PROCTOR_CRASH_AT"] = str(crash)
            env["PROCTOR_CRASH_LOG"] = str(self.crash_log)
        argv = [PY, str(SCRIPT), "--journal", str(self.journal)]
        argv += ["--workspace", str(self.workspace), "--service", self.service.url]
        argv += ["--task-id", self.task_id]
        argv += ["--hold"] if self.hold else []
        argv += ["--trace", str(trace)] if trace is not None else []
        done = await anyio.run_process(argv, env=env, check=False)
        return done.returncode, done.stderr.decode(errors="replace")

    @property
    def crash_log(self) -> Path:
        return self.root / "crash.log"


async def trace_boundaries(base: Path, service: Service, backend: Backend = SQLITE) -> list[str]:
    """Run the scenario untouched once; return the labels of the boundaries it passed."""
    trace = base / "trace.txt"
    async with _Site.make(base, "trace", service, backend) as site:
        code, err = await site.scenario(trace=trace)
    assert code == 0, err[-3000:]
    return trace.read_text().split()


async def run_point(
    n: int, base: Path, service: Service, hold: bool = False, backend: Backend = SQLITE
) -> Point:
    """Kill the scenario's host at boundary ``n``, resume the task, check every invariant."""
    async with _Site.make(base, f"p{n}", service, backend, hold) as site:
        return await _run_point(n, site)


async def _run_point(n: int, site: _Site) -> Point:
    started = time.monotonic()
    check = _Checker()
    code, err = await site.scenario(crash=n)
    labels = site.crash_log.read_text().split() if site.crash_log.exists() else []
    crashed = code == -signal.SIGKILL
    check(
        "host_died_at_one_boundary",
        (crashed and len(labels) == 1) or (code == 0 and not labels),
        lambda: f"exit {code}, labels {labels}: {err[-3000:]}",
    )
    before = await _spend(site)
    if crashed:
        code, err = await site.scenario()
        check("recovery_ran", code == 0, lambda: f"exit {code}: {err[-3000:]}")
    try:
        recovered = await check_point(check, site, before)
    finally:
        await _end_leftovers(site)
    return Point(
        n=n,
        label=labels[0] if labels else None,
        crashed=crashed,
        checks=check.checks,
        violations=tuple(check.violations),
        recovered=recovered,
        seconds=time.monotonic() - started,
    )


async def _migrated(journal: str) -> bool:
    """Tell whether the journal has its schema, without migrating it as opening it would."""
    if journal.startswith("postgresql://"):
        pg = await asyncpg.connect(journal)
        try:
            return await pg.fetchval("SELECT to_regclass('proctor_schema')") is not None
        finally:
            await pg.close()
    if not await anyio.Path(journal).exists():
        return False
    with contextlib.closing(sqlite3.connect(f"file:{journal}?mode=ro", uri=True)) as db:
        return int(db.execute("PRAGMA user_version").fetchone()[0]) > 0


async def _spend(site: _Site) -> dict[str, float]:
    """Return the task's spend as the dead host left it; leave an unmigrated journal alone."""
    if not await _migrated(site.journal):
        return {}
    async with open_journal(site.journal) as j:
        return await j.spend_totals(site.task_id)


async def _processes(site: _Site) -> list[ProcessRow]:
    async with open_journal(site.journal) as j:
        return [p for r in await j.runs_of_task(site.task_id) for p in await j.processes(r.run_id)]


async def _end_leftovers(site: _Site) -> None:
    """End the held command a dead host left running: nothing outlives a test."""
    if not site.hold:
        return  # a command that is not held ends on its own, in milliseconds
    for process in await _processes(site):
        if group_alive(process.pgid):
            os.killpg(process.pgid, signal.SIGKILL)


def _uncertain_spans(effects: Iterable[EffectRow]) -> list[tuple[EffectRow, float, float]]:
    """Return the effects a reconciliation settled, with the span they were unsettled in."""
    return [
        (e, e.created_at, e.updated_at)
        for e in effects
        if e.outcome is not None and "verdict" in e.outcome
    ]


async def check_point(check: _Checker, site: _Site, before: Mapping[str, float]) -> tuple[str, ...]:
    """
    Check every invariant of a recovered task.

    Args:
        check: counts the checks, keeps the violations.
        site: the point.
        before: the task's spend as the dead host left it.

    Returns:
        How the effects a reconciliation settled ended, as ``tool:state``.
    """
    async with open_journal(site.journal) as j:
        runs = await j.runs_of_task(site.task_id)
        effects = await j.effects(task_id=site.task_id)
        steps = {r.run_id: await j.steps(r.run_id) for r in runs}
        notes = {r.run_id: await j.notes(r.run_id) for r in runs}
        processes = [p for r in runs for p in await j.processes(r.run_id)]
        spend = await j.spend_totals(site.task_id)
        integrity = await j.integrity_check()
    workspace = site.workspace
    by_key = {e.key: e for e in effects}
    # Every effect's plan, journaled before its dispatch: key -> (at, target, run, args).
    planned = {
        n["body"]["key"]: (n["at"], str(n["body"]["target"]), n["run_id"], n["body"]["args"])
        for run_notes in notes.values()
        for n in run_notes
        if n["kind"] == "effect"
    }
    last: RunRow | None = runs[-1] if runs else None
    check(
        "task_completed",
        last is not None and last.status == "completed",
        lambda: f"the task's last run is {last.status if last else 'missing'}",
    )

    # Invariant 5: a key is applied at most once, and nothing is applied that
    # was not journaled first.
    items = [i for i in site.service.items() if isinstance(i["body"], dict)]
    mine = [i for i in items if i["body"].get("task") == site.task_id]
    http_keys = {e.key for e in effects if e.tool == "http_request"}
    for key in sorted(http_keys | {i["key"] for i in mine}):
        check("key_applied_at_most_once", site.service.applications(key) <= 1, key)
    for item in mine:
        check("applied_only_if_journaled", item["key"] in by_key, f"item {item}")
    log_file = workspace / scenario.LOG_FILE
    lines = log_file.read_text().splitlines() if log_file.exists() else []
    commands = [e for e in effects if e.tool == "run_command"]
    check(
        "applied_only_if_journaled",
        not lines or bool(commands),
        f"{scenario.LOG_FILE} holds {lines}, but no command effect is journaled",
    )

    # The work, done once: every POST body applied once, every file as the script
    # left it, the line appended once (at most once when its effect was escalated:
    # nobody could tell whether it ran, and nothing sends it again).
    for body in scenario.post_bodies(site.task_id):
        count = sum(1 for i in mine if i["body"] == body)
        check("each_post_applied_once", count == 1, f"{body} applied {count} times")
    for name, content in scenario.FILE_CONTENT.items():
        path = workspace / name
        now = path.read_text() if path.exists() else None
        check("each_file_as_written", now == content, f"{name} holds {now!r}")
    states = sorted({e.state for e in commands})
    expected = {0, 1} if "escalated" in states else {1}
    check(
        "line_appended_once",
        lines.count(scenario.LINE) in expected and set(lines) <= {scenario.LINE},
        lambda: f"{scenario.LOG_FILE} holds {lines}; command effects {states}",
    )

    # Invariant 5: no effect is left dispatched (or otherwise open).
    for effect in effects:
        check(
            "no_effect_left_open",
            effect.state in SETTLED,
            f"effect {effect.key} ({effect.tool}) is {effect.state}",
        )

    # Invariant 5: nothing else was planned or sent to a target while an effect
    # on it was unsettled: it was reconciled first.
    for held, since, until in _uncertain_spans(effects):
        for key, (at, target, _, _) in planned.items():
            if key == held.key or target != held.target:
                continue
            other = by_key.get(key)
            sent = other.created_at if other is not None else at
            check(
                "no_replacement_while_uncertain",
                not (since < at < until or since < sent < until),
                f"{key} went to {target} while {held.key} was unsettled "
                f"({since:.6f}..{until:.6f}; planned {at:.6f}, sent {sent:.6f})",
            )

    # Invariant 6: spend is the task's: it never goes down, and a resumed run
    # starts from what was spent, not from a blank allowance.
    for dimension, amount in before.items():
        check(
            "spend_never_decreases",
            spend.get(dimension, 0.0) >= amount,
            f"{dimension}: {amount} before the recovery, {spend.get(dimension)} after",
        )
    for tool in sorted({e.tool for e in effects}):
        applied = [e for e in effects if e.tool == tool and e.state in APPLIED]
        charged = spend.get(f"tool_calls:{tool}", 0.0)
        check(
            "applied_calls_charged",
            charged >= len(applied),
            f"{len(applied)} {tool} call(s) applied, {charged:g} charged",
        )
    for run in runs:
        if run.parent_run_id is None:
            continue
        first = steps[run.run_id][0] if steps[run.run_id] else None
        left = first["remaining"].get("steps") if first is not None else None
        allowed = scenario.STEP_LIMIT - before.get("steps", 0.0)
        check(
            "spend_inherited",
            left is not None and left <= allowed,
            f"run {run.run_id} began with {left} steps left; at most {allowed} were",
        )

    # Invariant 4: nothing is planned or dispatched by a run after its end, and
    # the write proposed after the completion is refused, never applied.
    ended = {r.run_id: r.ended_at for r in runs if r.ended_at is not None}
    for key, (at, _, run_id, _) in planned.items():
        end = ended.get(run_id)
        check("no_effect_after_end", end is None or at <= end, f"{key} planned after the end")
    for effect in effects:
        end = ended.get(effect.run_id)
        check(
            "no_effect_after_end",
            end is None or effect.created_at <= end,
            f"{effect.key} dispatched after run {effect.run_id} ended",
        )
    late = [k for k, (*_, args) in planned.items() if args.get("path") == scenario.POST_COMPLETION]
    check(
        "post_completion_write_refused",
        not late and not (workspace / scenario.POST_COMPLETION).exists(),
        f"{scenario.POST_COMPLETION} was planned as {late}",
    )
    late_hash = args_hash({"path": scenario.POST_COMPLETION, "content": "too late\n"})
    for run_id, run_steps in steps.items():
        for record in run_steps:
            event = record.get("event") or {}
            if event.get("type") == "action" and args_hash(event.get("args", {})) == late_hash:
                check(
                    "post_completion_write_refused",
                    record["tool_status"] == "refused",
                    f"run {run_id} step {record['step']}: {record['tool_status']}",
                )

    # Invariant 8: nothing runs on in a process group a run recorded.
    for process in processes:
        check(
            "no_orphan_process_group",
            not group_alive(process.pgid),
            f"group {process.pgid} ({process.command}) of run {process.run_id} is alive",
        )

    # The journal: sound, and every run's steps numbered 1..n without a gap.
    check("integrity_ok", integrity == "ok", integrity)
    for run_id, run_steps in steps.items():
        numbers = [s["step"] for s in run_steps]
        check(
            "steps_contiguous",
            numbers == list(range(1, len(numbers) + 1)),
            f"run {run_id}: {numbers}",
        )
    return tuple(f"{e.tool}:{e.state}" for e, _, _ in _uncertain_spans(effects))


async def run_matrix(
    base: Path, service: Service, labels: Sequence[str], backend: Backend = SQLITE
) -> list[Point]:
    """Run every point of the matrix, and the one past its end."""
    workers = max(2, os.cpu_count() or 2)
    limiter = anyio.CapacityLimiter(workers)
    points: list[Point] = []

    async def one(n: int) -> None:
        async with limiter:
            points.append(await run_point(n, base, service, backend=backend))

    async with anyio.create_task_group() as tg:
        for n in range(1, len(labels) + 2):
            tg.start_soon(one, n)
    return sorted(points, key=lambda p: p.n)


def summarize(points: Sequence[Point], labels: Sequence[str], seconds: float) -> dict[str, Any]:
    """Return the matrix's numbers, for the docs."""
    checks: collections.Counter[str] = collections.Counter()
    for p in points:
        checks.update(p.checks)
    # How a recovery settled what the dead host left open, by the boundary it died at.
    recoveries: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for p in points:
        if p.crashed and p.label is not None and p.recovered:
            recoveries[p.label].update(p.recovered)
    return {
        "benchmark": "crash_matrix",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "sampled": False,
        "boundaries": len(labels),
        "points": len(points),
        "crashed": sum(p.crashed for p in points),
        "boundary_kinds": dict(sorted(collections.Counter(labels).items())),
        "labels_as_traced": sum(p.label == labels[p.n - 1] for p in points if p.crashed),
        "recoveries": {k: dict(sorted(v.items())) for k, v in sorted(recoveries.items())},
        "invariants": dict(sorted(checks.items())),
        "checks": sum(checks.values()),
        "violations": [
            {"n": p.n, "label": p.label, "violations": list(p.violations)}
            for p in points
            if p.violations
        ],
        "duration_seconds": round(seconds, 1),
        "median_point_seconds": round(sorted(p.seconds for p in points)[len(points) // 2], 2),
    }


async def test_the_host_dies_at_every_journal_boundary_and_the_task_recovers(
    tmp_path: Path, service: Service, backend: Backend
) -> None:
    started = time.monotonic()
    labels = await trace_boundaries(tmp_path, service, backend)
    points = await run_matrix(tmp_path, service, labels, backend)
    summary = {"backend": backend.name, **summarize(points, labels, time.monotonic() - started)}
    print(json.dumps(summary, indent=2))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    results = RESULTS.with_name(f"crash_matrix_{backend.name}.json")
    if backend is SQLITE:
        results = RESULTS  # the file docs/effects.md reads its numbers from
    results.write_text(json.dumps(summary, indent=2) + "\n")
    assert len(labels) >= 40
    *crashed, past = points
    assert all(p.crashed for p in crashed), [p.n for p in crashed if not p.crashed]
    assert not past.crashed
    violations = [(p.n, p.label, p.violations) for p in points if p.failed()]
    assert not violations, json.dumps(violations, indent=2)


async def _point_at(
    tmp_path: Path,
    service: Service,
    label: str,
    occurrence: int = 1,
    hold: bool = False,
    after: str | None = None,
) -> Point:
    """
    Run the point at the ``occurrence``-th boundary labelled ``label`` (counted
    from the first boundary labelled ``after``, when given).
    """
    labels = await trace_boundaries(tmp_path, service)
    start = labels.index(after) if after is not None else 0
    at = [n for n, seen in enumerate(labels, start=1) if seen == label and n > start]
    return await run_point(at[occurrence - 1], tmp_path, service, hold)


async def test_a_resumed_run_never_reuses_the_key_of_an_effect_whose_step_was_lost(
    tmp_path: Path, service: Service
) -> None:
    # The first effect (a.txt) is applied; the host dies in the transaction of its
    # step, which holds its settlement: neither is journaled, the effect is left
    # dispatched. The resumed run's first new effect is the widget POST: without
    # the count of the task's effects it would get the same key, (task, step 1,
    # call 1), and be refused as a reuse of that key.
    point = await _point_at(tmp_path, service, "append_step:before", after="record_dispatch:after")
    assert point.violations == ()


async def test_a_completion_decided_before_the_host_died_is_kept(
    tmp_path: Path, service: Service
) -> None:
    # Every check passed and the verdict is journaled (completed); the host dies
    # before the run's end is. The resumed run's completion finds the candidate
    # "already judged" but does not complete it: the write proposed after the
    # completion is applied, and a new candidate is completed.
    point = await _point_at(tmp_path, service, "end_run:before")
    assert point.violations == ()


async def test_a_call_the_dead_host_made_is_charged_to_the_task(
    tmp_path: Path, service: Service
) -> None:
    # The widget POST is applied and confirmed in the journal, with its step (one
    # transaction); the host dies right after. The reservation that covered the
    # call is not inherited: the task made two POSTs and is charged for one.
    point = await _point_at(tmp_path, service, "settle_effect:after", occurrence=2)
    assert point.recovered == ()
    assert "applied_calls_charged" not in point.failed(), point.violations


async def test_a_resumed_run_ends_the_children_of_its_dead_predecessor(
    tmp_path: Path, service: Service
) -> None:
    # The command appended its line and keeps running; the host dies right after
    # journaling its process group. After the recovery the group is still alive.
    point = await _point_at(tmp_path, service, "record_process:after", hold=True)
    assert point.crashed
    assert "no_orphan_process_group" not in point.failed(), point.violations
