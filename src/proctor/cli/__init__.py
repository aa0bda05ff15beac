"""
The ``proctor`` command.

Exit codes of ``proctor run`` say how the run ended (see :data:`EXIT_CODES`);
2 is bad input everywhere; 1 is an unexpected error.

Here: running and resuming a run (with its live line), replay, import, the
gateway, the queue (``submit``, ``worker``) and ``export``. What every command
shares is in ``base``; the journal's views (``runs``, ``show``, ``report``) in
``show``; the operators' notes (``amend``, ``retune``, ``stop``, ``answer``,
``approve``, ``deny``) in ``operators``; agents' hooks in ``hooks``.
"""

from __future__ import annotations

import json
import os
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import anyio
import attrs
import click
from rich.console import Console

from proctor import ConfigError, ProctorError, TranscriptError

# The commands of these modules join the group as they are imported.
from proctor.cli import hooks as hooks
from proctor.cli import operators as operators
from proctor.cli import show as show
from proctor.cli.base import (
    _HEARTBEAT,
    _JOURNAL,
    EXIT_CODES,
    _fail,
    _guard,
    _stoppable,
    _write_text,
    main,
)
from proctor.runtime import (
    TRANSCRIPT_FORMATS,
    ActorSpec,
    Decision,
    Disposition,
    Stopper,
    TraceRecord,
    diff_replays,
    export_trajectory,
    import_transcript,
    load_task,
    open_journal,
    parse_trajectory,
    read_trajectory,
    replay,
)
from proctor.runtime import run as run_task

__all__ = ("EXIT_CODES", "main")


class _LiveLine:
    """
    The live line: the step running now (or the one the actor is thinking
    about), how long it has run, the run's time and what is left. Rendered
    anew at every refresh, so its clocks move while a tool runs.
    """

    def __init__(self) -> None:

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
    from proctor.runtime import action_text, call_text, clip, format_spend

    line = _LiveLine()
    status = console.status(line, spinner="dots") if console.is_terminal else None
    last = [line.started]

    def on_call(step: int, call: Any) -> None:
        line.running(step, clip(call_text(call.tool, call.args), 60))

    def on_step(record: TraceRecord) -> None:

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
