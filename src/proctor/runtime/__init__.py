"""The runtime: the four tasks, channels, records, controller policy, tools, journal."""

from __future__ import annotations

# The public names are imported on first use (PEP 562): the MCP stack takes a
# second to import, and `proctor hook`, run on every tool call of a hosted agent,
# needs little of the rest.
# Not imported from typing, which takes longer to import than the rest of a hook
# call answered by a server; mypy takes any name TYPE_CHECKING as true.
TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Any as _Any

    from proctor.runtime._actors.base import Actor as Actor
    from proctor.runtime._actors.base import FunctionActor as FunctionActor
    from proctor.runtime._actors.base import ScriptedActor as ScriptedActor
    from proctor.runtime._actors.base import load_script as load_script
    from proctor.runtime._actors.openai import OpenAIActor as OpenAIActor
    from proctor.runtime._actors.process import ProcessActor as ProcessActor
    from proctor.runtime._control.run import HEARTBEAT_SECONDS as HEARTBEAT_SECONDS
    from proctor.runtime._control.run import Stopper as Stopper
    from proctor.runtime._control.run import run as run
    from proctor.runtime._effects.declared import DeclaredTool as DeclaredTool
    from proctor.runtime._effects.http import IDEMPOTENCY_HEADER as IDEMPOTENCY_HEADER
    from proctor.runtime._effects.http import HttpReconciler as HttpReconciler
    from proctor.runtime._effects.http import http_reconcilers as http_reconcilers
    from proctor.runtime._effects.http import http_tools as http_tools
    from proctor.runtime._effects.http import lookup_url as lookup_url
    from proctor.runtime._effects.ledger import CommandProbe as CommandProbe
    from proctor.runtime._effects.ledger import EffectLedger as EffectLedger
    from proctor.runtime._effects.ledger import EffectRecord as EffectRecord
    from proctor.runtime._effects.ledger import EffectState as EffectState
    from proctor.runtime._effects.ledger import FileReconciler as FileReconciler
    from proctor.runtime._effects.ledger import Reconciler as Reconciler
    from proctor.runtime._effects.ledger import Target as Target
    from proctor.runtime._effects.ledger import current_effect_key as current_effect_key
    from proctor.runtime._effects.ledger import file_digests as file_digests
    from proctor.runtime._effects.ledger import reconcile as reconcile
    from proctor.runtime._effects.ledger import reconciler_for as reconciler_for
    from proctor.runtime._effects.ledger import retry_with_backoff as retry_with_backoff
    from proctor.runtime._effects.ledger import verdict_state as verdict_state
    from proctor.runtime._effects.sources import Allowlist as Allowlist
    from proctor.runtime._effects.sources import FetchConfig as FetchConfig
    from proctor.runtime._effects.sources import HttpSearch as HttpSearch
    from proctor.runtime._effects.sources import SearchConfig as SearchConfig
    from proctor.runtime._effects.sources import SearchHit as SearchHit
    from proctor.runtime._effects.sources import SearchProvider as SearchProvider
    from proctor.runtime._hosting.export import export_trajectory as export_trajectory
    from proctor.runtime._hosting.export import journaled_actor as journaled_actor
    from proctor.runtime._hosting.gateway import GatewayActor as GatewayActor
    from proctor.runtime._hosting.gateway import load_gateway_task as load_gateway_task
    from proctor.runtime._hosting.gateway import serve_gateway as serve_gateway
    from proctor.runtime._hosting.hooks.command import hook_main as hook_main
    from proctor.runtime._hosting.hooks.install import install as install_hooks
    from proctor.runtime._hosting.hooks.install import uninstall as uninstall_hooks
    from proctor.runtime._hosting.hooks.server import serve_hooks as serve_hooks
    from proctor.runtime._hosting.resume import resume as resume
    from proctor.runtime._hosting.resume import task_of_run as task_of_run
    from proctor.runtime._hosting.worker import WorkerStats as WorkerStats
    from proctor.runtime._hosting.worker import submit as submit
    from proctor.runtime._hosting.worker import work as work
    from proctor.runtime._importers import FORMATS as TRANSCRIPT_FORMATS
    from proctor.runtime._importers import detect_format as detect_format
    from proctor.runtime._importers import import_file as import_transcript
    from proctor.runtime._importers import shell_may_change as shell_may_change
    from proctor.runtime._journal import Claimed as Claimed
    from proctor.runtime._journal import Journal as Journal
    from proctor.runtime._journal import JournalLike as JournalLike
    from proctor.runtime._journal import open_journal as open_journal
    from proctor.runtime._operator import Amendment as Amendment
    from proctor.runtime._operator import OperatorReply as OperatorReply
    from proctor.runtime._operator import amend as amend
    from proctor.runtime._operator import answer as answer
    from proctor.runtime._operator import approve as approve
    from proctor.runtime._operator import deny as deny
    from proctor.runtime._operator import retune as retune
    from proctor.runtime._operator import stop as stop
    from proctor.runtime._operator import wait_reply as wait_reply
    from proctor.runtime._outcome import Candidate as Candidate
    from proctor.runtime._outcome import Handoff as Handoff
    from proctor.runtime._outcome import RunResult as RunResult
    from proctor.runtime._progress.judge import Judge as Judge
    from proctor.runtime._progress.judge import TaskFacts as TaskFacts
    from proctor.runtime._progress.policy import Policy as Policy
    from proctor.runtime._progress.trajectory import diff_replays as diff_replays
    from proctor.runtime._progress.trajectory import parse_trajectory as parse_trajectory
    from proctor.runtime._progress.trajectory import read_trajectory as read_trajectory
    from proctor.runtime._progress.trajectory import replay as replay
    from proctor.runtime._records import ActionEvent as ActionEvent
    from proctor.runtime._records import ActionResult as ActionResult
    from proctor.runtime._records import Claim as Claim
    from proctor.runtime._records import ClaimEvent as ClaimEvent
    from proctor.runtime._records import Completion as Completion
    from proctor.runtime._records import Decision as Decision
    from proctor.runtime._records import Disposition as Disposition
    from proctor.runtime._records import Message as Message
    from proctor.runtime._records import MessageEvent as MessageEvent
    from proctor.runtime._records import MessageKind as MessageKind
    from proctor.runtime._records import NoteKind as NoteKind
    from proctor.runtime._records import Observation as Observation
    from proctor.runtime._records import ObservationKind as ObservationKind
    from proctor.runtime._records import Proposal as Proposal
    from proctor.runtime._records import RefusedEvent as RefusedEvent
    from proctor.runtime._records import Round as Round
    from proctor.runtime._records import SignalEvent as SignalEvent
    from proctor.runtime._records import StopReason as StopReason
    from proctor.runtime._records import ToolCall as ToolCall
    from proctor.runtime._records import ToolResult as ToolResult
    from proctor.runtime._records import ToolStatus as ToolStatus
    from proctor.runtime._records import TraceRecord as TraceRecord
    from proctor.runtime._records import TrajectoryEvent as TrajectoryEvent
    from proctor.runtime._records import UserEvent as UserEvent
    from proctor.runtime._records import VerdictEvent as VerdictEvent
    from proctor.runtime._report import CandidateView as CandidateView
    from proctor.runtime._report import EvidenceView as EvidenceView
    from proctor.runtime._report import RunView as RunView
    from proctor.runtime._report import SpanRecord as SpanRecord
    from proctor.runtime._report import StepView as StepView
    from proctor.runtime._report import action_text as action_text
    from proctor.runtime._report import call_text as call_text
    from proctor.runtime._report import clip as clip
    from proctor.runtime._report import emit_spans as emit_spans
    from proctor.runtime._report import format_spend as format_spend
    from proctor.runtime._report import handoff_lines as handoff_lines
    from proctor.runtime._report import load_run_view as load_run_view
    from proctor.runtime._report import otlp_json as otlp_json
    from proctor.runtime._report import render_comparison as render_comparison
    from proctor.runtime._report import render_report as render_report
    from proctor.runtime._report import run_spans as run_spans
    from proctor.runtime._report import runs_table as runs_table
    from proctor.runtime._report import show_renderable as show_renderable
    from proctor.runtime._report import step_text as step_text
    from proctor.runtime._report import trace_table as trace_table
    from proctor.runtime._task import ActorSpec as ActorSpec
    from proctor.runtime._task import Approval as Approval
    from proctor.runtime._task import Task as Task
    from proctor.runtime._task import live_policy as live_policy
    from proctor.runtime._task import load_hosted_task as load_hosted_task
    from proctor.runtime._task import load_task as load_task
    from proctor.runtime._tools.process import pid_alive as pid_alive
    from proctor.runtime._tools.registry import Tool as Tool
    from proctor.runtime._tools.registry import ToolContext as ToolContext
    from proctor.runtime._tools.registry import ToolRegistry as ToolRegistry
    from proctor.runtime._tools.spec import Effect as Effect
    from proctor.runtime._tools.spec import ToolSpec as ToolSpec

#: Each public name: the module it is imported from on first use, and its name there.
_LAZY: dict[str, tuple[str, str]] = {
    "hook_main": ("proctor.runtime._hosting.hooks.command", "hook_main"),
    "install_hooks": ("proctor.runtime._hosting.hooks.install", "install"),
    "uninstall_hooks": ("proctor.runtime._hosting.hooks.install", "uninstall"),
    "serve_hooks": ("proctor.runtime._hosting.hooks.server", "serve_hooks"),
    "Actor": ("proctor.runtime._actors.base", "Actor"),
    "FunctionActor": ("proctor.runtime._actors.base", "FunctionActor"),
    "ScriptedActor": ("proctor.runtime._actors.base", "ScriptedActor"),
    "load_script": ("proctor.runtime._actors.base", "load_script"),
    "OpenAIActor": ("proctor.runtime._actors.openai", "OpenAIActor"),
    "ProcessActor": ("proctor.runtime._actors.process", "ProcessActor"),
    "HEARTBEAT_SECONDS": ("proctor.runtime._control.run", "HEARTBEAT_SECONDS"),
    "Stopper": ("proctor.runtime._control.run", "Stopper"),
    "run": ("proctor.runtime._control.run", "run"),
    "DeclaredTool": ("proctor.runtime._effects.declared", "DeclaredTool"),
    "HttpReconciler": ("proctor.runtime._effects.http", "HttpReconciler"),
    "IDEMPOTENCY_HEADER": ("proctor.runtime._effects.http", "IDEMPOTENCY_HEADER"),
    "http_reconcilers": ("proctor.runtime._effects.http", "http_reconcilers"),
    "http_tools": ("proctor.runtime._effects.http", "http_tools"),
    "lookup_url": ("proctor.runtime._effects.http", "lookup_url"),
    "CommandProbe": ("proctor.runtime._effects.ledger", "CommandProbe"),
    "EffectLedger": ("proctor.runtime._effects.ledger", "EffectLedger"),
    "EffectRecord": ("proctor.runtime._effects.ledger", "EffectRecord"),
    "EffectState": ("proctor.runtime._effects.ledger", "EffectState"),
    "FileReconciler": ("proctor.runtime._effects.ledger", "FileReconciler"),
    "Reconciler": ("proctor.runtime._effects.ledger", "Reconciler"),
    "Target": ("proctor.runtime._effects.ledger", "Target"),
    "current_effect_key": ("proctor.runtime._effects.ledger", "current_effect_key"),
    "file_digests": ("proctor.runtime._effects.ledger", "file_digests"),
    "reconcile": ("proctor.runtime._effects.ledger", "reconcile"),
    "reconciler_for": ("proctor.runtime._effects.ledger", "reconciler_for"),
    "retry_with_backoff": ("proctor.runtime._effects.ledger", "retry_with_backoff"),
    "verdict_state": ("proctor.runtime._effects.ledger", "verdict_state"),
    "Allowlist": ("proctor.runtime._effects.sources", "Allowlist"),
    "FetchConfig": ("proctor.runtime._effects.sources", "FetchConfig"),
    "HttpSearch": ("proctor.runtime._effects.sources", "HttpSearch"),
    "SearchConfig": ("proctor.runtime._effects.sources", "SearchConfig"),
    "SearchHit": ("proctor.runtime._effects.sources", "SearchHit"),
    "SearchProvider": ("proctor.runtime._effects.sources", "SearchProvider"),
    "export_trajectory": ("proctor.runtime._hosting.export", "export_trajectory"),
    "journaled_actor": ("proctor.runtime._hosting.export", "journaled_actor"),
    "GatewayActor": ("proctor.runtime._hosting.gateway", "GatewayActor"),
    "load_gateway_task": ("proctor.runtime._hosting.gateway", "load_gateway_task"),
    "serve_gateway": ("proctor.runtime._hosting.gateway", "serve_gateway"),
    "resume": ("proctor.runtime._hosting.resume", "resume"),
    "task_of_run": ("proctor.runtime._hosting.resume", "task_of_run"),
    "WorkerStats": ("proctor.runtime._hosting.worker", "WorkerStats"),
    "submit": ("proctor.runtime._hosting.worker", "submit"),
    "work": ("proctor.runtime._hosting.worker", "work"),
    "TRANSCRIPT_FORMATS": ("proctor.runtime._importers", "FORMATS"),
    "detect_format": ("proctor.runtime._importers", "detect_format"),
    "import_transcript": ("proctor.runtime._importers", "import_file"),
    "shell_may_change": ("proctor.runtime._importers", "shell_may_change"),
    "Claimed": ("proctor.runtime._journal", "Claimed"),
    "Journal": ("proctor.runtime._journal", "Journal"),
    "JournalLike": ("proctor.runtime._journal", "JournalLike"),
    "open_journal": ("proctor.runtime._journal", "open_journal"),
    "Amendment": ("proctor.runtime._operator", "Amendment"),
    "OperatorReply": ("proctor.runtime._operator", "OperatorReply"),
    "amend": ("proctor.runtime._operator", "amend"),
    "answer": ("proctor.runtime._operator", "answer"),
    "approve": ("proctor.runtime._operator", "approve"),
    "deny": ("proctor.runtime._operator", "deny"),
    "retune": ("proctor.runtime._operator", "retune"),
    "stop": ("proctor.runtime._operator", "stop"),
    "wait_reply": ("proctor.runtime._operator", "wait_reply"),
    "Candidate": ("proctor.runtime._outcome", "Candidate"),
    "Handoff": ("proctor.runtime._outcome", "Handoff"),
    "RunResult": ("proctor.runtime._outcome", "RunResult"),
    "Judge": ("proctor.runtime._progress.judge", "Judge"),
    "TaskFacts": ("proctor.runtime._progress.judge", "TaskFacts"),
    "Policy": ("proctor.runtime._progress.policy", "Policy"),
    "diff_replays": ("proctor.runtime._progress.trajectory", "diff_replays"),
    "parse_trajectory": ("proctor.runtime._progress.trajectory", "parse_trajectory"),
    "read_trajectory": ("proctor.runtime._progress.trajectory", "read_trajectory"),
    "replay": ("proctor.runtime._progress.trajectory", "replay"),
    "ActionEvent": ("proctor.runtime._records", "ActionEvent"),
    "ActionResult": ("proctor.runtime._records", "ActionResult"),
    "ClaimEvent": ("proctor.runtime._records", "ClaimEvent"),
    "MessageEvent": ("proctor.runtime._records", "MessageEvent"),
    "RefusedEvent": ("proctor.runtime._records", "RefusedEvent"),
    "SignalEvent": ("proctor.runtime._records", "SignalEvent"),
    "TrajectoryEvent": ("proctor.runtime._records", "TrajectoryEvent"),
    "UserEvent": ("proctor.runtime._records", "UserEvent"),
    "VerdictEvent": ("proctor.runtime._records", "VerdictEvent"),
    "Claim": ("proctor.runtime._records", "Claim"),
    "Completion": ("proctor.runtime._records", "Completion"),
    "Decision": ("proctor.runtime._records", "Decision"),
    "Disposition": ("proctor.runtime._records", "Disposition"),
    "Message": ("proctor.runtime._records", "Message"),
    "MessageKind": ("proctor.runtime._records", "MessageKind"),
    "NoteKind": ("proctor.runtime._records", "NoteKind"),
    "Observation": ("proctor.runtime._records", "Observation"),
    "ObservationKind": ("proctor.runtime._records", "ObservationKind"),
    "Proposal": ("proctor.runtime._records", "Proposal"),
    "Round": ("proctor.runtime._records", "Round"),
    "StopReason": ("proctor.runtime._records", "StopReason"),
    "ToolCall": ("proctor.runtime._records", "ToolCall"),
    "ToolResult": ("proctor.runtime._records", "ToolResult"),
    "ToolStatus": ("proctor.runtime._records", "ToolStatus"),
    "TraceRecord": ("proctor.runtime._records", "TraceRecord"),
    "CandidateView": ("proctor.runtime._report", "CandidateView"),
    "EvidenceView": ("proctor.runtime._report", "EvidenceView"),
    "RunView": ("proctor.runtime._report", "RunView"),
    "SpanRecord": ("proctor.runtime._report", "SpanRecord"),
    "StepView": ("proctor.runtime._report", "StepView"),
    "action_text": ("proctor.runtime._report", "action_text"),
    "call_text": ("proctor.runtime._report", "call_text"),
    "step_text": ("proctor.runtime._report", "step_text"),
    "clip": ("proctor.runtime._report", "clip"),
    "emit_spans": ("proctor.runtime._report", "emit_spans"),
    "format_spend": ("proctor.runtime._report", "format_spend"),
    "handoff_lines": ("proctor.runtime._report", "handoff_lines"),
    "load_run_view": ("proctor.runtime._report", "load_run_view"),
    "otlp_json": ("proctor.runtime._report", "otlp_json"),
    "render_comparison": ("proctor.runtime._report", "render_comparison"),
    "render_report": ("proctor.runtime._report", "render_report"),
    "run_spans": ("proctor.runtime._report", "run_spans"),
    "runs_table": ("proctor.runtime._report", "runs_table"),
    "show_renderable": ("proctor.runtime._report", "show_renderable"),
    "trace_table": ("proctor.runtime._report", "trace_table"),
    "ActorSpec": ("proctor.runtime._task", "ActorSpec"),
    "Approval": ("proctor.runtime._task", "Approval"),
    "Task": ("proctor.runtime._task", "Task"),
    "live_policy": ("proctor.runtime._task", "live_policy"),
    "load_hosted_task": ("proctor.runtime._task", "load_hosted_task"),
    "load_task": ("proctor.runtime._task", "load_task"),
    "pid_alive": ("proctor.runtime._tools.process", "pid_alive"),
    "Tool": ("proctor.runtime._tools.registry", "Tool"),
    "ToolContext": ("proctor.runtime._tools.registry", "ToolContext"),
    "ToolRegistry": ("proctor.runtime._tools.registry", "ToolRegistry"),
    "Effect": ("proctor.runtime._tools.spec", "Effect"),
    "ToolSpec": ("proctor.runtime._tools.spec", "ToolSpec"),
}


def __getattr__(name: str) -> _Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    # Before anything of proctor's can log: the library never writes to stdout.
    importlib.import_module("proctor._logging")
    value = getattr(importlib.import_module(where[0]), where[1])
    globals()[name] = value
    return value


del TYPE_CHECKING


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = (
    "hook_main",
    "install_hooks",
    "uninstall_hooks",
    "serve_hooks",
    "Actor",
    "ActorSpec",
    "Allowlist",
    "Amendment",
    "Approval",
    "Candidate",
    "CandidateView",
    "ActionEvent",
    "ActionResult",
    "ClaimEvent",
    "MessageEvent",
    "RefusedEvent",
    "SignalEvent",
    "TrajectoryEvent",
    "UserEvent",
    "VerdictEvent",
    "Claim",
    "Claimed",
    "CommandProbe",
    "Completion",
    "Decision",
    "DeclaredTool",
    "Disposition",
    "Effect",
    "EffectLedger",
    "EffectRecord",
    "EffectState",
    "EvidenceView",
    "FetchConfig",
    "FileReconciler",
    "FunctionActor",
    "GatewayActor",
    "HEARTBEAT_SECONDS",
    "Handoff",
    "HttpReconciler",
    "HttpSearch",
    "IDEMPOTENCY_HEADER",
    "Journal",
    "JournalLike",
    "Judge",
    "Message",
    "MessageKind",
    "NoteKind",
    "Observation",
    "ObservationKind",
    "OpenAIActor",
    "OperatorReply",
    "Policy",
    "ProcessActor",
    "Proposal",
    "Reconciler",
    "Round",
    "RunResult",
    "RunView",
    "ScriptedActor",
    "SearchConfig",
    "SearchHit",
    "SearchProvider",
    "SpanRecord",
    "StepView",
    "StopReason",
    "Stopper",
    "TRANSCRIPT_FORMATS",
    "Target",
    "Task",
    "TaskFacts",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "ToolStatus",
    "TraceRecord",
    "WorkerStats",
    "action_text",
    "call_text",
    "step_text",
    "amend",
    "answer",
    "approve",
    "clip",
    "current_effect_key",
    "deny",
    "detect_format",
    "diff_replays",
    "emit_spans",
    "export_trajectory",
    "file_digests",
    "format_spend",
    "handoff_lines",
    "http_reconcilers",
    "http_tools",
    "import_transcript",
    "journaled_actor",
    "live_policy",
    "load_gateway_task",
    "load_run_view",
    "load_script",
    "load_hosted_task",
    "load_task",
    "lookup_url",
    "open_journal",
    "otlp_json",
    "parse_trajectory",
    "pid_alive",
    "read_trajectory",
    "reconcile",
    "reconciler_for",
    "render_comparison",
    "render_report",
    "replay",
    "resume",
    "task_of_run",
    "retry_with_backoff",
    "retune",
    "run",
    "run_spans",
    "runs_table",
    "serve_gateway",
    "shell_may_change",
    "show_renderable",
    "stop",
    "submit",
    "trace_table",
    "verdict_state",
    "wait_reply",
    "work",
)
