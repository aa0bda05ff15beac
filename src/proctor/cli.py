"""
The ``proctor`` command.

Exit codes of ``proctor run`` say how the run ended (see :data:`EXIT_CODES`);
2 is bad input everywhere; 1 is an unexpected error.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import time
import tomllib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import attrs
import click
import structlog
from rich.console import Console

from proctor import (
    ConfigError,
    ProctorError,
    RunEndedError,
    RunNotFoundError,
    TranscriptError,
)
from proctor.runtime import (
    HEARTBEAT_SECONDS,
    TRANSCRIPT_FORMATS,
    ActorSpec,
    Decision,
    Disposition,
    OperatorReply,
    Stopper,
    TraceRecord,
    diff_replays,
    export_trajectory,
    import_transcript,
    load_hosted_task,
    load_task,
    open_journal,
    parse_trajectory,
    pid_alive,
    read_trajectory,
    replay,
    wait_reply,
)
from proctor.runtime import run as run_task

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


class _LiveLine:
    """
    The live line: the step running now (or the one the actor is thinking
    about), how long it has run, the run's time and what is left. Rendered
    anew at every refresh, so its clocks move while a tool runs.
    """

    def __init__(self) -> None:
        import time

        self._clock = time.monotonic
        self.started = self._clock()
        self.since = self.started
        self.step = 1
        self.doing = "the actor is thinking"
        self.left = ""

    def running(self, step: int, what: str) -> None:
        self.step, self.doing, self.since = step, what, self._clock()

    def finished(self, step: int, left: str) -> None:
        self.step, self.doing, self.since = step + 1, "the actor is thinking", self._clock()
        self.left = left

    def __rich__(self) -> str:
        now = self._clock()
        left = f"  left: {self.left}" if self.left else ""
        return (
            f"step {self.step:>3}  {self.doing}  {now - self.since:.1f}s"
            f"  (run {now - self.started:.0f}s){left}"
        )


def _live(console: Console) -> tuple[Any, Any, Any]:
    """
    The live line and a line per step on a terminal, a line per step on a pipe.

    Returns the status (or None), the step callback and the call callback.
    """
    from proctor.runtime import action_text, clip, format_spend

    line = _LiveLine()
    status = console.status(line, spinner="dots") if console.is_terminal else None
    last = [line.started]

    def on_call(step: int, call: Any) -> None:
        event = {"type": "action", "tool": call.tool, "args": call.args}
        line.running(step, clip(action_text("action", event, None), 60))

    def on_step(record: TraceRecord) -> None:
        import time

        took = time.monotonic() - last[0]
        last[0] = time.monotonic()
        left = format_spend(record.remaining) if record.remaining else "unlimited"
        action = clip(action_text(record.kind, record.event, record.action), 56)
        text = f"step {record.step:>3}  {took:5.1f}s  {action:<56}  {record.decision.value:<8}"
        text += f"  left: {left}"
        style = {
            Decision.REFUSE: "bold yellow",
            Decision.STOP: "bold",
            Decision.NUDGE: "cyan",
        }.get(record.decision, "")
        # What a person said (a question, an answer, a retune, an amendment) keeps its words.
        said = record.kind in ("question", "user", "retune", "amend")
        shown = record.decision is not Decision.CONTINUE or said
        reason = f"  ({record.reason})" if shown else ""
        console.print(text + reason, style=style, markup=False, soft_wrap=True)
        line.finished(record.step, left)

    return status, on_step, on_call


def _find_python_first() -> None:
    # Commands the agent and the checks run find this Python environment first.
    here = os.path.dirname(sys.executable)
    os.environ["PATH"] = here + os.pathsep + os.environ.get("PATH", "")


def _report(go: Any, console: Console, status: Any, as_json: bool) -> None:
    """Run ``go`` under the live line, print the outcome, exit with the disposition's code."""
    if status is not None:
        status.start()
    try:
        result = anyio.run(go)
    except ProctorError as exc:
        _fail(str(exc))
        return
    finally:
        if status is not None:
            status.stop()
    if as_json:
        click.echo(json.dumps(result.summary(), indent=2))
    else:
        from proctor.runtime import handoff_lines

        console.print()
        console.print(handoff_lines(attrs.asdict(result.handoff)), soft_wrap=True)
        console.print(f"run:         {result.run_id}  (journal {result.journal})", markup=False)
    if result.disposition is Disposition.STOPPED:
        click.echo(
            f"proctor: run {result.run_id} stopped; resume it with: proctor resume {result.run_id}",
            err=True,
        )
    raise SystemExit(EXIT_CODES[result.disposition])


@main.command("run")
@click.argument("task_file", type=click.Path(dir_okay=False, path_type=Path))
@_JOURNAL
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@_HEARTBEAT
def run_command(task_file: Path, journal: str, as_json: bool, heartbeat: float) -> None:
    """
    Run the task in TASK_FILE until the controller decides it is over.

    Ctrl-C (SIGINT) or SIGTERM ends the run `stopped` (exit 15); a second Ctrl-C
    exits at once.
    """
    try:
        loaded = load_task(task_file)
        actor = loaded.make_actor()
    except ConfigError as exc:
        _fail(str(exc))
        return
    _find_python_first()
    console = Console(stderr=as_json, highlight=False)
    status, on_step, on_call = _live(console)
    spec = loaded.actor.describe()

    async def go(stopper: Stopper) -> Any:
        return await run_task(
            loaded.task,
            actor,
            journal,
            on_step=on_step,
            actor_spec=spec,
            stopper=stopper,
            heartbeat_seconds=heartbeat,
            on_call=on_call,
        )

    _report(lambda: _stoppable(go), console, status, as_json)


@main.command("resume")
@click.argument("run_id")
@_JOURNAL
@click.option(
    "--script",
    type=click.Path(dir_okay=False, path_type=Path),
    help="An actor script for the new run (default: the actor the task was run with).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@click.option(
    "--answer",
    "answer_text",
    help="The answer to the question RUN ended on (needs_input): told to the actor first.",
)
@_HEARTBEAT
def resume_command(
    run_id: str,
    journal: str,
    script: Path | None,
    as_json: bool,
    answer_text: str | None,
    heartbeat: float,
) -> None:
    """Start a new run of RUN's task that inherits its history, spend and open effects."""
    from proctor.runtime import resume

    actor: Any = None
    spec: ActorSpec | None = None
    if script is not None:
        # An actor given again starts its script from its first line.
        spec = ActorSpec("scripted", script)
        try:
            actor = spec.make()
        except ConfigError as exc:
            _fail(str(exc))
            return
    _find_python_first()
    console = Console(stderr=as_json, highlight=False)
    status, on_step, on_call = _live(console)

    if answer_text is not None and not answer_text.strip():
        _fail("--answer is empty: say what the run needs to know")

    async def go(stopper: Stopper) -> Any:
        # Without --script, the journaled actor, going on after its proposals.
        return await resume(
            run_id,
            actor,
            journal,
            on_step=on_step,
            actor_spec=spec.describe() if spec is not None else None,
            answer=answer_text,
            stopper=stopper,
            heartbeat_seconds=heartbeat,
            on_call=on_call,
        )

    _report(lambda: _stoppable(go), console, status, as_json)


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


def _guard(fn: Any) -> Any:
    try:
        return anyio.run(fn)
    except RunNotFoundError as exc:
        _fail(str(exc))
    except ProctorError as exc:
        _fail(str(exc))
    return None


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


def _write_text(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        _fail(f"{path}: cannot write: {exc.strerror} (give -o a file in an existing directory)")


#: How often ``show --follow`` looks for new steps, in seconds.
FOLLOW_EVERY = 0.5


def _follow(run_id: str, journal: str, wide: bool) -> None:
    """Tail a run's steps until it ends, then print its handoff."""
    from proctor.runtime import action_text, format_spend, handoff_lines

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
                    action = action_text(s["kind"], s.get("event"), s.get("action"))
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


def _policy_file(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    table = data.get("policy", data)
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [policy] must be a table")
    return table


@main.command("replay")
@click.argument("trajectory", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the replay document as JSON.")
@click.option(
    "--policy",
    "policy_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A TOML file with policy settings ([policy] table) that replace the header's.",
)
@click.option("--diff", is_flag=True, help="With --policy: show where the two policies differ.")
@click.option(
    "--explain",
    "explain_stop",
    is_flag=True,
    help="For a stop: the rule that fired, the events it counted, what would have reset it.",
)
def replay_command(
    trajectory: Path, as_json: bool, policy_path: Path | None, diff: bool, explain_stop: bool
) -> None:
    """Decide, offline, what the controller would have done with a recorded trajectory."""
    if diff and policy_path is None:
        _fail("--diff needs --policy OTHER.toml to compare with")
    try:
        overrides = _policy_file(policy_path) if policy_path else None
        base = read_trajectory(trajectory)
        other = read_trajectory(trajectory, overrides) if overrides is not None else None
    except ConfigError as exc:
        _fail(f"{trajectory}: {exc}" if "line" in str(exc)[:5] else str(exc))
        return
    if diff:
        assert other is not None
        a, b = replay(base), replay(other)
        changes = diff_replays(a, b)
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "a": a.to_json() | {"steps": None},
                        "b": b.to_json() | {"steps": None},
                        "differences": changes,
                    },
                    indent=2,
                )
            )
            return
        click.echo(f"a: {a.policy_version}  {a.disposition} at {a.stopped_at}")
        click.echo(f"b: {b.policy_version}  {b.disposition} at {b.stopped_at}")
        if not changes:
            click.echo("the two policies decide every event alike")
        for c in changes:
            click.echo(
                f"event {c['index']}: {c['a']} -> {c['b']}  ({c['b_reason'] or c['a_reason']})"
            )
        return
    result = replay(other or base)
    if as_json:
        document = result.to_json()
        if explain_stop:
            document["explain"] = result.explanation
        click.echo(json.dumps(document))
        return
    click.echo(f"disposition: {result.disposition}")
    if result.stop_reason:
        click.echo(f"stop reason: {result.stop_reason} ({result.message})")
    click.echo(f"stopped at:  {result.stopped_at}  of {result.events} events")
    click.echo(f"policy:      {result.policy_version}")
    for s in result.steps:
        if s.decision is not Decision.CONTINUE:
            click.echo(f"  event {s.index}: {s.decision.value}  {s.reason}")
    if explain_stop:
        _print_explanation(result.explanation)


def _print_explanation(explanation: dict[str, Any] | None) -> None:
    if explanation is None:
        click.echo("explain:     the controller did not stop; nothing to explain")
        return
    click.echo(f"explain:     rule {explanation['rule']}: {explanation['message']}")
    if explanation.get("threshold") is not None:
        window = explanation.get("failure_window")
        extra = (
            f", failure window {window or 'none (0)'}" if "failure_window" in explanation else ""
        )
        click.echo(f"  threshold {explanation['threshold']}{extra}")
    click.echo("  counted:")
    for item in explanation["counted"]:
        click.echo(f"    event {item['event']} ({item['decision']}): {item['what']}")
        click.echo(f"      {item['reason']}")
    if explanation["would_reset"]:
        click.echo("  would have reset it:")
        for text in explanation["would_reset"]:
            click.echo(f"    - {text}")


@main.command("import")
@click.argument("first", metavar="[FORMAT]")
@click.argument("second", metavar="FILE", required=False)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", *TRANSCRIPT_FORMATS]),
    help="The transcript's format (the same as the FORMAT argument); default auto.",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write here.")
@click.option(
    "--index",
    type=click.IntRange(min=0),
    help="Which run of a file that holds several (OpenHands output.jsonl, Inspect logs).",
)
def import_command(
    first: str, second: str | None, fmt: str | None, output: Path | None, index: int | None
) -> None:
    """
    Convert another agent's transcript (FORMAT: auto, sweagent, mini, openhands, claude, codex,
    gemini or inspect) into a trajectory that `proctor replay` reads.
    """
    if second is None:
        path, chosen = Path(first), fmt or "auto"
    else:
        if first not in ("auto", *TRANSCRIPT_FORMATS):
            _fail(f"FORMAT {first!r}: expected one of auto, {', '.join(TRANSCRIPT_FORMATS)}")
        if fmt is not None and fmt != first:
            _fail(f"FORMAT {first!r} and --format {fmt!r} disagree: give one of them")
        path, chosen = Path(second), first
    try:
        header, events = import_transcript(
            path, chosen, **({} if index is None else {"index": index})
        )
    except TranscriptError as exc:
        _fail(str(exc))
        return
    lines = [json.dumps(header, ensure_ascii=False)]
    lines += [json.dumps(event, ensure_ascii=False) for event in events]
    try:
        # What an importer writes must be a trajectory the replay reads.
        parse_trajectory(lines)
    except ConfigError as exc:  # pragma: no cover - a defect of an importer
        _fail(f"{path}: the conversion is not a valid trajectory ({exc}); please report it")
    text = "\n".join(lines) + "\n"
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")


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


@main.command("gateway")
@click.argument("task_file", type=click.Path(dir_okay=False, path_type=Path), required=False)
@_JOURNAL
@click.option(
    "--resume",
    "resume_run",
    metavar="RUN",
    help="Resume RUN (its history and spend) with the MCP client as the actor; TASK_FILE"
    " may then be left out (the journal holds the task).",
)
@click.option(
    "--answer",
    metavar="TEXT",
    help="With --resume: the answer to the question RUN ended on (needs_input).",
)
@click.option(
    "--transport",
    type=click.Choice(["stdio", "http"]),
    default="stdio",
    show_default=True,
    help="stdio: standard input and output; http: streamable HTTP on a loopback address.",
)
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="For http: the loopback address."
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="For http: the port (0: a free one). The URL is printed on standard output.",
)
@click.option(
    "--grace",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="For http: seconds the server keeps answering (with the fence) after the run ended.",
)
@_HEARTBEAT
def gateway_command(
    task_file: Path | None,
    journal: str,
    resume_run: str | None,
    answer: str | None,
    transport: str,
    host: str,
    port: int,
    grace: float,
    heartbeat: float,
) -> None:
    """
    Serve the task in TASK_FILE over MCP: the MCP client is the run's actor.

    With --resume RUN, the run resumes RUN instead (with --answer, answering the
    question it ended on). SIGINT or SIGTERM ends the run `stopped` (exit 15) and
    stops serving; a second SIGINT exits at once.
    """
    # Imported here: the MCP stack takes a second to import, and only this command needs it.
    from proctor.runtime import load_gateway_task, serve_gateway, task_of_run

    if task_file is None and resume_run is None:
        _fail("gateway: give a TASK_FILE to serve, or --resume RUN to serve a run's task again")
        return
    if answer is not None and resume_run is None:
        _fail("gateway: --answer goes with --resume RUN (the run whose question it answers)")
        return
    if answer is not None and not answer.strip():
        _fail("gateway: the answer is empty; say what the run needs to know")
        return
    if task_file is not None:
        try:
            task = load_gateway_task(task_file)
        except ConfigError as exc:
            _fail(str(exc))
            return
    else:
        assert resume_run is not None
        run_of = resume_run

        async def journaled() -> Any:
            return await task_of_run(run_of, journal)

        task = _guard(journaled)
    _find_python_first()
    # Standard output is the MCP wire over stdio: everything else goes to stderr.
    console = Console(stderr=True, highlight=False)

    async def go() -> Any:
        return await serve_gateway(
            task,
            journal,
            transport="http" if transport == "http" else "stdio",
            host=host,
            port=port,
            grace=grace,
            ready=click.echo,
            handle_signals=True,
            heartbeat_seconds=heartbeat,
            resume_run=resume_run,
            answer=answer,
        )

    _report(go, console, None, False)


@main.command("submit")
@click.argument("task_file", type=click.Path(dir_okay=False, path_type=Path))
@_JOURNAL
def submit_command(task_file: Path, journal: str) -> None:
    """Queue the task in TASK_FILE for a worker (`proctor worker`)."""
    from proctor.runtime import submit

    try:
        loaded = load_task(task_file)
    except ConfigError as exc:
        _fail(str(exc))
        return

    async def go() -> str:
        return await submit(loaded.task, journal, loaded.actor.describe())

    click.echo(_guard(go))


@main.command("worker")
@_JOURNAL
@click.option("--id", "worker", help="This worker's name (default: host:pid).")
@click.option(
    "--lease", default=30.0, show_default=True, help="Lease seconds, renewed every third."
)
@click.option("--once", is_flag=True, help="Exit when there is nothing to claim.")
@click.option("--max-runs", type=int, help="Exit after this many runs.")
def worker_command(
    journal: str, worker: str | None, lease: float, once: bool, max_runs: int | None
) -> None:
    """
    Claim queued runs from the journal and run them, one at a time.

    Ctrl-C (SIGINT) or SIGTERM ends the run in hand `stopped` and the worker with
    it (exit 15); a second Ctrl-C exits at once.
    """
    from proctor.runtime import work

    _find_python_first()
    console = Console(highlight=False)
    _, on_step, _ = _live(Console(file=sys.stderr, highlight=False, force_terminal=False))

    async def go(stopper: Stopper) -> Any:
        return await work(
            journal,
            worker=worker,
            lease_seconds=lease,
            once=once,
            max_runs=max_runs,
            on_step=on_step,
            stopper=stopper,
        )

    stats = _guard(lambda: _stoppable(go))
    stopped = [r for r in stats.finished if r.disposition is Disposition.STOPPED]
    for result in stats.finished:
        console.print(f"{result.run_id}  {result.disposition.value}", markup=False)
    for run_id in stats.lost:
        console.print(f"{run_id}  lost (another worker took it over)", markup=False)
    for result in stopped:
        click.echo(
            f"proctor: run {result.run_id} stopped; resume it with: proctor resume {result.run_id}",
            err=True,
        )
    if stopped:
        raise SystemExit(EXIT_CODES[Disposition.STOPPED])


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


@main.command("hook")
@click.argument("agent", type=click.Choice(["claude", "codex", "gemini"]))
@click.option(
    "--task",
    "task_file",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The task file: checks, protected paths, budget, policy.",
)
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
@click.argument("agent", type=click.Choice(["claude", "codex", "gemini"]))
@click.option(
    "--task",
    "task_file",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The task file each hook call is judged under.",
)
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
    import signal
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
@click.argument("agent", type=click.Choice(["claude", "codex", "gemini"]))
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


@main.command("export")
@click.argument("run_id")
@_JOURNAL
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write here.")
@click.option(
    "--otlp",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the run as OpenTelemetry spans, an OTLP/JSON file.",
)
def export_command(run_id: str, journal: str, output: Path | None, otlp: Path | None) -> None:
    """Write a recorded run as a trajectory (format v1) that replays to the same decisions."""
    from proctor.runtime import load_run_view, otlp_json

    async def go() -> tuple[str, Any]:
        text = await export_trajectory(run_id, journal)
        if otlp is None:
            return text, None
        async with open_journal(journal, create=False) as j:
            return text, await load_run_view(j, run_id)

    text, view = _guard(go)
    if otlp is not None:
        _write_text(otlp, json.dumps(otlp_json(view), separators=(",", ":")) + "\n")
        if output is None:
            return
    if output is None:
        click.echo(text, nl=False)
    else:
        _write_text(output, text)
