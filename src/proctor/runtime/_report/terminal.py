"""
A run in the terminal: the trace table and the handoff, laid out for the
console's width.

Under :data:`NARROW` columns the table drops the columns a person can do
without (progress, what is left) and keeps step, action, status, decision,
time, cost and reason; a cell that does not fit ends in an ellipsis, never
mid-word without one. ``wide`` wraps cells instead of cutting them.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from proctor.budgets._text import format_amount, format_spend
from proctor.runtime._journal.base import RunRow
from proctor.runtime._report.view import RunView, StepView

__all__ = ("NARROW", "clip", "handoff_lines", "runs_table", "show_renderable", "trace_table")

#: Below this many columns, the narrow layout.
NARROW = 120


def _cost(spend: Mapping[str, float]) -> str:
    value = spend.get("cost_usd")
    return format_amount("cost_usd", value) if value else "-"


def _tokens(spend: Mapping[str, float]) -> str:
    tokens_in, tokens_out = spend.get("tokens_in", 0.0), spend.get("tokens_out", 0.0)
    if not tokens_in and not tokens_out:
        return "-"
    return f"{_short_count(tokens_in)}/{_short_count(tokens_out)}"


def _short_count(value: float) -> str:
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    if value >= 1_000:
        return f"{value / 1000:.1f}k"
    return f"{value:.0f}"


def _left(step: StepView) -> str:
    shown = {k: v for k, v in step.remaining.items() if ":" not in k}
    return format_spend(shown) if shown else "unlimited"


def _cell(text: str, style: str = "") -> Text:
    return Text(text, style=style)


def clip(text: str, width: int) -> str:
    """
    Cut ``text`` to ``width`` cells: at a word's end where one is near, always
    with an ellipsis, never silently mid-word.
    """
    if len(text) <= width:
        return text
    if width <= 1:
        return "\u2026"[:width]
    cut = text[: width - 1]
    space = cut.rfind(" ")
    if space >= width // 2:
        cut = cut[:space]
    return cut.rstrip() + "\u2026"


#: The cells between two columns.
_GAP = 2
#: The narrowest a flexible column gets.
_FLEX_MIN = 8


def _table(
    headers: Sequence[tuple[str, int | None, bool]],
    rows: Sequence[Sequence[Text]],
    *,
    width: int,
    wide: bool,
) -> Table:
    """
    A borderless table whose fixed columns are as wide as their longest cell and
    whose flexible columns (a ratio) share what is left of ``width``, their cells
    cut by :func:`clip`. ``wide``: flexible cells wrap instead.
    """
    longest = [
        max([len(name), *(row[index].cell_len for row in rows)])
        for index, (name, _, _) in enumerate(headers)
    ]
    fixed = sum(w for w, (_, ratio, _) in zip(longest, headers, strict=True) if ratio is None)
    ratios = [ratio for _, ratio, _ in headers if ratio is not None]
    room = width - fixed - _GAP * (len(headers) - 1)
    widths: list[int | None] = []
    for w, (_, ratio, _) in zip(longest, headers, strict=True):
        if ratio is None:
            widths.append(w)
        elif wide:
            widths.append(None)
        else:
            share = max(_FLEX_MIN, room * ratio // max(1, sum(ratios)))
            widths.append(min(w, share))
    # A flexible column that needs less than its share gives the rest to the others.
    if not wide:
        spare = room - sum(
            w or 0 for w, (_, r, _) in zip(widths, headers, strict=True) if r is not None
        )
        for index, (_, ratio, _) in enumerate(headers):
            now = widths[index]
            if ratio is not None and now is not None and spare > 0:
                grown = min(longest[index], now + spare)
                spare -= grown - now
                widths[index] = grown
    table = Table(box=None, pad_edge=False, show_edge=False, padding=(0, _GAP // 2))
    for (name, ratio, right), size in zip(headers, widths, strict=True):
        table.add_column(
            clip(name, size) if size else name,
            justify="right" if right else "left",
            no_wrap=not (wide and ratio is not None),
            overflow="fold" if wide else "ellipsis",
            width=size,
        )
    for row in rows:
        cells = []
        for cell, size, (_, ratio, _) in zip(row, widths, headers, strict=True):
            fits = ratio is None or size is None or cell.cell_len <= size
            cells.append(cell if fits else Text(clip(cell.plain, size or 0), style=cell.style))
        table.add_row(*cells)
    return table


def trace_table(view: RunView, *, width: int, wide: bool = False) -> Table:
    """
    The run's steps as a table for a console ``width`` columns wide.

    Args:
        view: the run.
        width: the console's width.
        wide: wrap long cells instead of cutting them with an ellipsis.
    """
    narrow = width < NARROW and not wide
    with_tokens = not narrow or any(s.spend.get("tokens_in") for s in view.steps)
    headers: list[tuple[str, int | None, bool]] = [
        ("step", None, True),
        ("action", 3, False),
        ("status", None, False),
        ("decision", None, False),
    ]
    if not narrow:
        headers.append(("progress", None, False))
    headers.append(("time", None, True))
    if with_tokens:
        headers.append(("tokens", None, True))
    headers += [("cost", None, True), ("reason", 2, False)]
    if not narrow:
        headers.append(("left", 2, False))
    styles = {"refuse": "yellow", "stop": "bold", "nudge": "cyan"}
    rows: list[list[Text]] = []
    for step in view.steps:
        cells = [
            _cell(str(step.step)),
            _cell(step.action),
            _cell(step.tool_status or ""),
            _cell(step.decision, styles.get(step.decision, "")),
        ]
        if not narrow:
            cells.append(_cell("yes" if step.progress else ""))
        cells.append(_cell(f"{step.duration:.1f}s"))
        if with_tokens:
            cells.append(_cell(_tokens(step.spend)))
        cells.append(_cell(_cost(step.spend)))
        # Narrow: a reason only where the controller did more than continue.
        cells.append(_cell(step.reason if step.decision != "continue" or not narrow else ""))
        if not narrow:
            cells.append(_cell(_left(step)))
        rows.append(cells)
    return _table(headers, rows, width=width, wide=wide)


def handoff_lines(handoff: Mapping[str, Any], spent: Mapping[str, float] | None = None) -> Text:
    """
    The handoff as aligned lines: disposition, stop reason, candidate, evidence,
    open findings, the failing check's output, spend and next step.

    Args:
        handoff: the handoff as journaled (or as :meth:`RunResult.summary` writes it).
        spent: the run's own spend, shown beside the task's when given.
    """
    out = Text()

    def line(label: str, value: str, style: str = "") -> None:
        out.append(f"{label:<13}", style="bold" if label.strip() == "disposition:" else "")
        out.append(value + "\n", style=style)

    line("disposition:", str(handoff.get("disposition")), "bold")
    reason = handoff.get("stop_reason") or {}
    if reason:
        line("stop reason:", f"{reason.get('code')} - {reason.get('message')}")
    line("candidate:", str(handoff.get("candidate_digest") or "-"))
    if handoff.get("answer"):
        line("answer:", str(handoff["answer"]))
    for source in handoff.get("sources") or ():
        line("source:", str(source))
    for item in handoff.get("evidence") or ():
        line("evidence:", str(item))
    for item in handoff.get("open_findings") or ():
        line("open:", str(item), "yellow")
    failing = str(handoff.get("failing_output") or "")
    if failing:
        out.append("why it failed (the check's last lines):\n", style="bold")
        for text in failing.splitlines():
            out.append(f"  {text}\n", style="red")
    task_spend = format_spend(handoff.get("spend") or {})
    if spent is not None:
        line("spent:", f"{format_spend(spent)} (this run); {task_spend} (the task)")
    else:
        line("spent:", task_spend)
    line("next:", f"{handoff.get('next_step')} (owner: {handoff.get('owner')})")
    out.rstrip()
    return out


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def show_renderable(
    view: RunView, *, width: int, wide: bool = False, status_line: str | None = None
) -> RenderableType:
    """
    Everything ``proctor show`` prints about a run, for a console ``width`` wide.

    Args:
        view: the run.
        width: the console's width.
        wide: wrap long cells instead of cutting them.
        status_line: the first line, in place of the run, its task and status
            (a caller that knows the run's liveness says it there).
    """
    run = view.run
    head = Text()
    if status_line is not None:
        head.append(status_line)
    else:
        head.append(f"run {run.run_id}  task {run.task_id}  status ")
        head.append(run.status, style="bold")
    head.append(f"\ngoal: {run.goal}\n")
    duration = "running" if view.duration is None else f"{view.duration:.1f}s"
    head.append(f"started {_when(run.started_at)}  ended {_when(run.ended_at)}  ({duration})\n")
    head.append(f"spent: {format_spend(view.spent)}")
    parts: list[RenderableType] = [head, trace_table(view, width=width, wide=wide)]
    if run.handoff:
        parts.append(Text("\nhandoff", style="bold"))
        handoff = dict(run.handoff)
        if not handoff.get("failing_output") and view.failing_excerpt:
            # Journaled before handoffs carried it: the evidence still has it.
            tail = view.failing_excerpt.rstrip().splitlines()[-20:]
            handoff["failing_output"] = "\n".join(tail)
        parts.append(handoff_lines(handoff, view.spent))
    return Group(*parts)


def runs_table(
    rows_in: Sequence[RunRow],
    costs: Mapping[str, Mapping[str, float]],
    *,
    width: int,
    states: Mapping[str, str] | None = None,
) -> Table:
    """
    Runs as a table: id, status, steps, started, ended, duration, cost, goal.

    Args:
        rows_in: the runs.
        costs: each run's own spend, by run id.
        width: the console's width.
        states: what to show as each run's status, by run id (its liveness:
            running, waiting, stale); by default its status.
    """
    narrow = width < NARROW
    headers: list[tuple[str, int | None, bool]] = [
        ("run", None, False),
        ("status", None, False),
        ("steps", None, True),
        ("started", None, False),
    ]
    if not narrow:
        headers.append(("ended", None, False))
    headers += [("time", None, True), ("cost", None, True), ("goal", 1, False)]
    rows: list[list[Text]] = []
    for r in rows_in:
        duration = "-" if r.ended_at is None else f"{r.ended_at - r.started_at:.1f}s"
        status = (states or {}).get(r.run_id, r.status)
        cells = [r.run_id[:12], status, str(r.steps), _when(r.started_at)]
        if not narrow:
            cells.append(_when(r.ended_at))
        cells += [duration, _cost(costs.get(r.run_id, {})), r.goal]
        rows.append([Text(c) for c in cells])
    return _table(headers, rows, width=width, wide=False)
