"""
What people look at: a run read from the journal (``view``), amounts written
for a person (``text``), the terminal tables (``terminal``), the
self-contained HTML report (``html``) and OpenTelemetry spans (``otel``).
"""

from proctor.budgets._text import format_amount as format_amount
from proctor.budgets._text import format_spend as format_spend
from proctor.runtime._report.html import render_comparison as render_comparison
from proctor.runtime._report.html import render_report as render_report
from proctor.runtime._report.otel import SpanRecord as SpanRecord
from proctor.runtime._report.otel import emit_spans as emit_spans
from proctor.runtime._report.otel import otlp_json as otlp_json
from proctor.runtime._report.otel import run_spans as run_spans
from proctor.runtime._report.terminal import clip as clip
from proctor.runtime._report.terminal import handoff_lines as handoff_lines
from proctor.runtime._report.terminal import runs_table as runs_table
from proctor.runtime._report.terminal import show_renderable as show_renderable
from proctor.runtime._report.terminal import trace_table as trace_table
from proctor.runtime._report.view import CandidateView as CandidateView
from proctor.runtime._report.view import EvidenceView as EvidenceView
from proctor.runtime._report.view import RunView as RunView
from proctor.runtime._report.view import StepView as StepView
from proctor.runtime._report.view import action_text as action_text
from proctor.runtime._report.view import call_text as call_text
from proctor.runtime._report.view import load_run_view as load_run_view
from proctor.runtime._report.view import step_text as step_text

__all__ = (
    "CandidateView",
    "EvidenceView",
    "RunView",
    "SpanRecord",
    "StepView",
    "action_text",
    "call_text",
    "step_text",
    "clip",
    "emit_spans",
    "format_amount",
    "format_spend",
    "handoff_lines",
    "load_run_view",
    "otlp_json",
    "render_comparison",
    "render_report",
    "run_spans",
    "runs_table",
    "show_renderable",
    "trace_table",
)
