"""
The run report: one self-contained HTML file, its charts drawn by uPlot.

uPlot (MIT, one 51 kB script, no dependencies) is vendored as package data and
inlined into every report, so a report opens with no network and draws 10,000
steps quickly (it draws on a canvas). The run's data goes in once, as JSON in a
``<script type="application/json">`` element whose ``<`` are escaped: nothing
the actor wrote can close it. The page's script puts every text from the run in
with ``textContent``; the parts written here are escaped with :func:`html.escape`.
"""

from __future__ import annotations

import datetime
import hashlib
import html
import json
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

from proctor.budgets._text import format_spend
from proctor.runtime._report.view import RunView

__all__ = ("OUTPUT_LIMIT", "render_comparison", "render_report")

#: The most characters of one failing output a report keeps (its tail is the
#: part that says why).
OUTPUT_LIMIT = 4000
#: The most characters of one action summary a report keeps.
_ACTION_LIMIT = 240
#: The most characters of failing outputs a report keeps in all; identical
#: outputs are kept once. Past it, later outputs are left out (and say so).
_OUTPUTS_BUDGET = 1_500_000


def render_report(view: RunView) -> str:
    """Return the HTML report of one run."""
    body = [
        _summary(view),
        '<section><h2>Budget</h2><div id="budget" class="charts"></div></section>',
        '<section><h2>Progress</h2><div id="progress" class="charts"></div></section>',
        _handoff(view),
        _candidates(view),
        _effects(view),
        '<section><h2>Timeline</h2><div id="timeline-0"></div></section>',
    ]
    return _page(f"proctor run {view.run.run_id[:12]}", body, [_run_data(view, "run")])


def render_comparison(a: RunView, b: RunView) -> str:
    """Return an HTML report that sets two runs side by side (A and B)."""
    rows = [
        ("run", a.run.run_id[:12], b.run.run_id[:12]),
        ("status", a.run.status, b.run.status),
        ("stop reason", _reason(a), _reason(b)),
        ("policy version", a.run.policy_version, b.run.policy_version),
        ("steps", str(len(a.steps)), str(len(b.steps))),
        ("duration", _seconds(a.duration), _seconds(b.duration)),
        ("spent", format_spend(a.spent), format_spend(b.spent)),
        ("nudges", str(_count(a, "nudge")), str(_count(b, "nudge"))),
        ("refusals", str(_count(a, "refuse")), str(_count(b, "refuse"))),
        ("final candidate", _short(a.run.candidate_digest), _short(b.run.candidate_digest)),
    ]
    table = "".join(
        f"<tr><th>{_e(name)}</th><td>{_e(x)}</td><td>{_e(y)}</td></tr>" for name, x, y in rows
    )
    body = [
        f"<header><h1>proctor: two runs</h1><p>A: {_e(a.run.goal)}</p>"
        f"<p>B: {_e(b.run.goal)}</p></header>",
        f'<section><table class="kv"><tr><th></th><th>A</th><th>B</th></tr>{table}</table>'
        "</section>",
        '<section><h2>Budget</h2><div id="budget" class="charts"></div></section>',
        '<section><h2>Progress</h2><div id="progress" class="charts"></div></section>',
        '<section><h2>Timeline A</h2><div id="timeline-0"></div></section>',
        '<section><h2>Timeline B</h2><div id="timeline-1"></div></section>',
    ]
    title = f"proctor runs {a.run.run_id[:8]} and {b.run.run_id[:8]}"
    return _page(title, body, [_run_data(a, "A"), _run_data(b, "B")])


def _asset(name: str) -> str:
    return resources.files("proctor.runtime._report").joinpath("assets", name).read_text("utf-8")


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _short(digest: str | None) -> str:
    return digest[:12] if digest else "-"


def _seconds(value: float | None) -> str:
    return "running" if value is None else f"{value:,.1f}s"


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    moment = datetime.datetime.fromtimestamp(ts, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _reason(view: RunView) -> str:
    reason = view.run.stop_reason or {}
    if not reason:
        return "-"
    return f"{reason.get('code')}: {reason.get('message')}"


def _count(view: RunView, decision: str) -> int:
    return sum(1 for s in view.steps if s.decision == decision)


def _empty(title: str, text: str) -> str:
    return f"<section><h2>{_e(title)}</h2><p class='muted'>{_e(text)}</p></section>"


def _summary(view: RunView) -> str:
    run = view.run
    rows = [
        ("status", run.status),
        ("stop reason", _reason(view)),
        ("task", run.task_id),
        ("started", _when(run.started_at)),
        ("ended", _when(run.ended_at)),
        ("duration", _seconds(view.duration)),
        ("steps", str(len(view.steps))),
        ("spent", format_spend(view.spent)),
        ("limits", format_spend(view.limits) if view.limits else "none"),
        ("reserve", format_spend(view.reserve) if view.reserve else "none"),
        ("policy version", run.policy_version),
        ("final candidate", run.candidate_digest or "-"),
    ]
    table = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    status = _e(run.status)
    return (
        f"<header><h1>proctor run {_e(run.run_id)} "
        f'<span class="badge s-{status}">{status}</span></h1>'
        f'<p class="goal">{_e(run.goal)}</p></header>'
        f'<section><table class="kv">{table}</table></section>'
    )


def _handoff(view: RunView) -> str:
    handoff = view.run.handoff
    if not handoff:
        return _empty("Handoff", "No handoff yet: the run has not ended.")
    lines = [
        ("disposition", handoff.get("disposition")),
        ("next step", handoff.get("next_step")),
        ("owner", handoff.get("owner")),
        ("spend", format_spend(handoff.get("spend") or {})),
    ]
    table = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in lines)
    items = "".join(f"<li>{_e(line)}</li>" for line in handoff.get("evidence") or [])
    findings = "".join(f"<li>{_e(line)}</li>" for line in handoff.get("open_findings") or [])
    failing = view.failing_excerpt
    excerpt = (
        f"<h3>Why the last check failed</h3><pre class='fail'>{_e(_tail(failing))}</pre>"
        if failing
        else ""
    )
    return (
        f'<section><h2>Handoff</h2><table class="kv">{table}</table>'
        f"<h3>Evidence</h3><ul>{items or '<li>none</li>'}</ul>"
        f"<h3>Open findings</h3><ul>{findings or '<li>none</li>'}</ul>{excerpt}</section>"
    )


def _tail(text: str, limit: int = OUTPUT_LIMIT) -> str:
    if len(text) <= limit:
        return text
    return "\u2026 " + text[-limit:]


def _clip(text: str, limit: int = _ACTION_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _candidates(view: RunView) -> str:
    if not view.candidates:
        return _empty("Candidates and evidence", "The verifier judged no candidate.")
    parts = []
    for candidate in view.candidates:
        rows = []
        for ev in candidate.evidence:
            verdict = "pass" if ev.passed else "fail"
            detail = f"exit {ev.exit_code}" if ev.exit_code is not None else ""
            output = (
                f"<details{' open' if not ev.passed else ''}><summary>output</summary>"
                f"<pre>{_e(_tail(ev.excerpt))}</pre></details>"
                if ev.excerpt
                else ""
            )
            failing = (
                "<ul>" + "".join(f"<li>{_e(t)}</li>" for t in ev.failing_tests) + "</ul>"
                if ev.failing_tests
                else ""
            )
            rows.append(
                f"<tr class='v-{verdict}'><td>{_e(ev.check)}</td><td>{verdict}</td>"
                f"<td>{_e(detail)}</td><td>{_e(ev.contract_version[:12])}</td>"
                f"<td>{_e(_when(ev.at))}</td><td>{failing}{output}</td></tr>"
            )
        final = " (final)" if candidate.final else ""
        parts.append(
            f"<h3>candidate {_e(_short(candidate.digest))}{final}</h3>"
            "<table class='grid'><tr><th>check</th><th>verdict</th><th></th><th>contract</th>"
            f"<th>at</th><th>output</th></tr>{''.join(rows)}</table>"
        )
    return f"<section><h2>Candidates and evidence</h2>{''.join(parts)}</section>"


def _effects(view: RunView) -> str:
    if not view.effects:
        return (
            "<section><h2>Effects</h2><p class='muted'>The run dispatched no effect.</p></section>"
        )
    rows = "".join(
        f"<tr class='e-{_e(e.state)}'><td class='num'>{e.step}</td><td>{_e(e.tool)}</td>"
        f"<td>{_e(_clip(e.target))}</td><td>{_e(e.state)}</td><td>{_e(e.key)}</td></tr>"
        for e in view.effects
    )
    return (
        "<section><h2>Effects</h2><table class='grid'><tr><th>step</th><th>tool</th>"
        f"<th>target</th><th>state</th><th>key</th></tr>{rows}</table></section>"
    )


def _run_data(view: RunView, label: str) -> dict[str, Any]:
    reasons: dict[str, int] = {}
    outputs: dict[str, int] = {}
    texts: list[str] = []
    budget = _OUTPUTS_BUDGET
    columns: dict[str, list[Any]] = {
        k: []
        for k in (
            "step",
            "action",
            "status",
            "decision",
            "progress",
            "reason",
            "duration",
            "stall",
            "spend",
            "output",
        )
    }
    remaining: dict[str, list[float | None]] = {d: [] for d in view.limits}
    cumulative: dict[str, list[float]] = {}
    totals: dict[str, float] = {}
    for index, step in enumerate(view.steps):
        columns["step"].append(step.step)
        columns["action"].append(_clip(step.action))
        columns["status"].append(step.tool_status)
        columns["decision"].append(step.decision)
        columns["progress"].append(1 if step.progress else 0)
        columns["reason"].append(reasons.setdefault(step.reason, len(reasons)))
        columns["duration"].append(round(step.duration, 3))
        columns["stall"].append(step.stall)
        columns["spend"].append(_step_spend(step.spend))
        slot = -1
        if step.output is not None:
            text = _tail(step.output)
            key = hashlib.blake2b(text.encode(), digest_size=12).hexdigest()
            if key in outputs:
                slot = outputs[key]
            elif budget >= len(text):
                budget -= len(text)
                slot = outputs[key] = len(outputs)
                texts.append(text)
        columns["output"].append(slot)
        for dim in remaining:
            value = step.remaining.get(dim)
            remaining[dim].append(round(value, 6) if value is not None else None)
        for dim, amount in step.spend.items():
            if ":" in dim:
                continue
            totals[dim] = totals.get(dim, 0.0) + amount
        for dim, total in totals.items():
            cumulative.setdefault(dim, [0.0] * index).append(round(total, 6))
    return {
        "label": label,
        "limits": dict(view.limits),
        "reserve": dict(view.reserve),
        "stall_threshold": view.stall_threshold,
        "remaining": remaining,
        "cumulative": cumulative,
        "steps": columns,
        "reasons": list(reasons),
        "outputs": texts,
    }


def _step_spend(spend: Mapping[str, float]) -> str:
    shown = {k: v for k, v in spend.items() if k != "steps" and ":" not in k}
    return format_spend(shown) if shown else ""


def _page(title: str, body: Sequence[str], runs: Sequence[dict[str, Any]]) -> str:
    data = json.dumps({"runs": list(runs)}, separators=(",", ":"), ensure_ascii=False)
    # Inside <script>, only "</" (and "<!--") can end the element early: escape every "<".
    data = data.replace("<", "\\u003c")
    return (
        "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        # No request may leave the page: everything it needs is inline.
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; "
        "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">"
        f"<title>{_e(title)}</title>"
        f"<style>{_asset('uPlot.min.css')}\n{_STYLE}</style></head><body>"
        + "".join(body)
        + f'<script type="application/json" id="proctor-data">{data}</script>'
        f"<script>{_asset('uPlot.iife.min.js')}</script>"
        f"<script>{_asset('report.js')}</script>"
        "</body></html>\n"
    )


_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1100px;
       padding: 16px 24px; color: #111827; }
h1 { font-size: 20px; margin: 8px 0; } h2 { font-size: 17px; margin: 24px 0 8px;
border-bottom: 1px solid #e5e7eb; } h3 { font-size: 14px; margin: 12px 0 4px; }
.goal { color: #374151; margin: 0 0 8px; }
.badge { font-size: 13px; padding: 2px 8px; border-radius: 10px; background: #e5e7eb; }
.s-completed { background: #d1fae5; } .s-failed, .s-no_progress, .s-budget_exhausted
{ background: #fee2e2; } .s-running { background: #dbeafe; }
table { border-collapse: collapse; } .kv th { text-align: left; padding: 2px 16px 2px 0;
color: #4b5563; font-weight: 500; vertical-align: top; }
.grid, .steps { width: 100%; font-size: 13px; }
.grid th, .grid td, .steps th, .steps td { border-bottom: 1px solid #f3f4f6;
padding: 3px 6px; text-align: left; vertical-align: top; }
.steps td.action { max-width: 420px; overflow-wrap: anywhere; }
.num { text-align: right; font-variant-numeric: tabular-nums; }
.d-nudge { background: #ecfeff; } .d-refuse { background: #fffbeb; } .d-stop { background: #f0fdf4;
font-weight: 600; } .v-fail td, .e-uncertain td, .e-escalated td { background: #fef2f2; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; background: #f9fafb; padding: 8px;
max-height: 320px; overflow: auto; font-size: 12px; } pre.fail { border-left: 3px solid #dc2626; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(460px, 1fr)); gap: 12px; }
.chart { min-width: 0; overflow: hidden; } .chart h3 { margin: 4px 0; font-weight: 500; }
.muted { color: #6b7280; }
"""
