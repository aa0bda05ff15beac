"""
The commands that look at the journal: ``proctor runs``, ``show`` (``--follow``: step by step
as the run goes), ``report``.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import anyio
import click
from rich.console import Console

from proctor.cli.base import _JOURNAL, _fail, _guard, _write_text, main
from proctor.runtime import Disposition, open_journal, pid_alive

__all__ = (
    "FOLLOW_EVERY",
    "report_command",
    "runs_command",
    "show_command",
)


@main.command("runs")
@_JOURNAL
@click.option(
    "--limit",
    type=click.IntRange(1, 1_000_000),
    default=50,
    show_default=True,
    help="How many runs to list.",
)
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(["queued", "running", *(d.value for d in Disposition)]),
    help="Only runs with this status (repeatable).",
)
@click.option(
    "--since",
    help="Only runs started since: an ISO date or time (2026-12-01, 2026-12-01T09:30), "
    "or an age such as 30m, 2h, 7d.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def runs_command(
    journal: str, limit: int, statuses: tuple[str, ...], since: str | None, as_json: bool
) -> None:
    """List the runs in the journal, newest first: status, steps, times and cost."""
    from proctor.runtime import runs_table

    try:
        after = _since(since) if since is not None else None
    except ValueError as exc:
        _fail(f"--since {since!r}: {exc}")
        return

    async def go() -> tuple[list[Any], dict[str, dict[str, float]]]:
        async with open_journal(journal, create=False) as j:
            # Filters need more than `limit` rows to find `limit` matches.
            rows = await j.list_runs(limit if not (statuses or after) else 1_000_000)
            rows = [
                r
                for r in rows
                if (not statuses or r.status in statuses)
                and (after is None or r.started_at >= after)
            ][:limit]
            costs: dict[str, dict[str, float]] = {}
            for r in rows:
                spent: dict[str, float] = {}
                for row in await j.spend_rows(r.run_id):
                    if row.kind in ("settle", "charge"):
                        spent[row.dimension] = spent.get(row.dimension, 0.0) + row.amount
                costs[r.run_id] = spent
            return rows, costs

    rows, costs = _guard(go)
    if as_json:
        click.echo(
            json.dumps(
                [_row(r) | {"cost_usd": costs[r.run_id].get("cost_usd", 0.0)} for r in rows],
                indent=2,
            )
        )
        return
    console = Console(highlight=False)
    states = {r.run_id: _state(r)[0] for r in rows}
    console.print(runs_table(rows, costs, width=console.width, states=states))


def _since(text: str) -> float:
    """A moment from an ISO date or time, or an age (``30m``, ``2h``, ``7d``)."""
    import datetime
    import re
    import time

    age = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if age:
        unit = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[age[2]]
        return time.time() - float(age[1]) * unit
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            "expected an ISO date or time (2026-12-01, 2026-12-01T09:30) "
            "or an age such as 30m, 2h, 7d"
        ) from None
    return moment.timestamp()


def _state(r: Any) -> tuple[str, float]:
    """running, waiting (for what), stale (its host stopped beating), or how it ended."""
    state, since = r.liveness(time.time(), host=socket.gethostname(), alive=pid_alive)
    return str(state), float(since)


def _row(r: Any) -> dict[str, Any]:
    state, since = _state(r)
    return {
        "run_id": r.run_id,
        "task_id": r.task_id,
        "status": r.status,
        "state": state.split(" ")[0],
        "since": since,
        "waiting": r.waiting,
        "disposition": r.disposition,
        "steps": r.steps,
        "started_at": r.started_at,
        "ended_at": r.ended_at,
        "host": r.host,
        "pid": r.pid,
        "heartbeat_at": r.heartbeat_at,
        "goal": r.goal,
    }


def _when(ts: float | None) -> str:
    import datetime

    if ts is None:
        return "-"
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


@main.command("show")
@click.argument("run_id")
@_JOURNAL
@click.option(
    "--json", "as_json", is_flag=True, help="Print the run, its trace and handoff as JSON."
)
@click.option("--wide", is_flag=True, help="Wrap long cells instead of cutting them with '…'.")
@click.option(
    "--follow",
    is_flag=True,
    help="Print each step as it is journaled, from any terminal, until the run ends.",
)
def show_command(run_id: str, journal: str, as_json: bool, wide: bool, follow: bool) -> None:
    """Print a run's trace as a table (time and cost per step), and its handoff."""
    from proctor.runtime import load_run_view, show_renderable

    if follow:
        _follow(run_id, journal, wide)
        return

    async def go() -> tuple[Any, list[dict[str, Any]]]:
        async with open_journal(journal, create=False) as j:
            if as_json:
                run = await j.get_run(run_id)
                return run, await j.steps(run.run_id)
            return await load_run_view(j, run_id), []

    found, steps = _guard(go)
    if as_json:
        run = found
        click.echo(
            json.dumps(
                {
                    **_row(run),
                    "stop_reason": run.stop_reason,
                    "handoff": run.handoff,
                    "candidate": run.candidate_digest,
                    "policy_version": run.policy_version,
                    "steps": steps,
                },
                indent=2,
            )
        )
        return
    console = Console(highlight=False)
    state, since = _state(found.run)
    head = (
        f"run {found.run.run_id}  task {found.run.task_id}  status {state} since {_when(since)}"
        + (f"  host {found.run.host} pid {found.run.pid}" if found.run.pid is not None else "")
    )
    console.print(show_renderable(found, width=console.width, wide=wide, status_line=head))


@main.command("report")
@click.argument("run_ids", metavar="RUN [RUN]", nargs=-1, required=True)
@_JOURNAL
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The HTML file to write (default: proctor-report-RUN.html).",
)
@click.option("--compare", is_flag=True, help="Set two runs side by side (give RUN RUN).")
def report_command(
    run_ids: tuple[str, ...], journal: str, output: Path | None, compare: bool
) -> None:
    """Write a run's report: one self-contained HTML file with its charts, to open offline."""
    from proctor.runtime import load_run_view, render_comparison, render_report

    if compare and len(run_ids) != 2:
        _fail(f"--compare needs two runs, got {len(run_ids)}: proctor report --compare RUN RUN")
    if not compare and len(run_ids) != 1:
        _fail(f"one run at a time, got {len(run_ids)} (to set two side by side: --compare)")

    async def go() -> list[Any]:
        async with open_journal(journal, create=False) as j:
            return [await load_run_view(j, run_id) for run_id in run_ids]

    views = _guard(go)
    page = render_comparison(views[0], views[1]) if compare else render_report(views[0])
    if output is None:
        name = "-".join(v.run.run_id[:12] for v in views)
        output = Path(f"proctor-report-{name}.html")
    _write_text(output, page)
    click.echo(str(output))


#: How often ``show --follow`` looks for new steps, in seconds.
FOLLOW_EVERY = 0.5


def _follow(run_id: str, journal: str, wide: bool) -> None:
    """Tail a run's steps until it ends, then print its handoff."""
    from proctor.runtime import format_spend, handoff_lines, step_text

    console = Console(highlight=False)

    async def go() -> None:
        async with open_journal(journal, create=False) as j:
            run = await j.get_run(run_id)
            console.print(f"run {run.run_id}  goal: {run.goal}", markup=False, soft_wrap=True)
            seen, previous = 0, run.started_at
            while True:
                run = await j.get_run(run.run_id)
                for s in await j.steps(run.run_id, after=seen):
                    seen = s["step"]
                    took = s["at"] - previous
                    previous = s["at"]
                    action = step_text(s)
                    reason = f"  ({s['reason']})" if s["decision"] != "continue" else ""
                    line = f"step {seen:>4}  {took:6.1f}s  {s['decision']:<8}  {action}{reason}"
                    console.print(line, markup=False, no_wrap=not wide, overflow="ellipsis")
                if run.status not in ("running", "queued"):
                    break
                await anyio.sleep(FOLLOW_EVERY)
            spent: dict[str, float] = {}
            for row in await j.spend_rows(run.run_id):
                if row.kind in ("settle", "charge"):
                    spent[row.dimension] = spent.get(row.dimension, 0.0) + row.amount
            console.print(f"\nended: {run.status}  spent: {format_spend(spent)}", markup=False)
            if run.handoff:
                console.print(handoff_lines(run.handoff, spent), soft_wrap=True)

    _guard(go)
