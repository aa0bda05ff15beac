"""The runtime: the four tasks, channels, records, controller policy, tools, journal."""

from typing import TYPE_CHECKING as _TYPE_CHECKING
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
from proctor.runtime._hosting.resume import resume as resume
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
from proctor.runtime._records import Claim as Claim
from proctor.runtime._records import Completion as Completion
from proctor.runtime._records import Decision as Decision
from proctor.runtime._records import Disposition as Disposition
from proctor.runtime._records import Message as Message
from proctor.runtime._records import MessageKind as MessageKind
from proctor.runtime._records import NoteKind as NoteKind
from proctor.runtime._records import Observation as Observation
from proctor.runtime._records import ObservationKind as ObservationKind
from proctor.runtime._records import Proposal as Proposal
from proctor.runtime._records import Round as Round
from proctor.runtime._records import StopReason as StopReason
from proctor.runtime._records import ToolCall as ToolCall
from proctor.runtime._records import ToolResult as ToolResult
from proctor.runtime._records import ToolStatus as ToolStatus
from proctor.runtime._records import TraceRecord as TraceRecord
from proctor.runtime._report import CandidateView as CandidateView
from proctor.runtime._report import EvidenceView as EvidenceView
from proctor.runtime._report import RunView as RunView
from proctor.runtime._report import SpanRecord as SpanRecord
from proctor.runtime._report import StepView as StepView
from proctor.runtime._report import action_text as action_text
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
from proctor.runtime._report import trace_table as trace_table
from proctor.runtime._task import ActorSpec as ActorSpec
from proctor.runtime._task import Approval as Approval
from proctor.runtime._task import Task as Task
from proctor.runtime._task import live_policy as live_policy
from proctor.runtime._task import load_task as load_task
from proctor.runtime._tools.process import pid_alive as pid_alive
from proctor.runtime._tools.registry import Tool as Tool
from proctor.runtime._tools.registry import ToolContext as ToolContext
from proctor.runtime._tools.registry import ToolRegistry as ToolRegistry
from proctor.runtime._tools.spec import Effect as Effect
from proctor.runtime._tools.spec import ToolSpec as ToolSpec

if _TYPE_CHECKING:
    from proctor.runtime._hosting.gateway import GatewayActor as GatewayActor
    from proctor.runtime._hosting.gateway import load_gateway_task as load_gateway_task
    from proctor.runtime._hosting.gateway import serve_gateway as serve_gateway

# The MCP stack takes a second to import: only the gateway's users pay for it.
_LAZY = {
    "GatewayActor": "proctor.runtime._hosting.gateway",
    "load_gateway_task": "proctor.runtime._hosting.gateway",
    "serve_gateway": "proctor.runtime._hosting.gateway",
}


def __getattr__(name: str) -> _Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = (
    "HEARTBEAT_SECONDS",
    "IDEMPOTENCY_HEADER",
    "TRANSCRIPT_FORMATS",
    "clip",
    "run_spans",
    "otlp_json",
    "emit_spans",
    "SpanRecord",
    "action_text",
    "trace_table",
    "show_renderable",
    "runs_table",
    "handoff_lines",
    "render_report",
    "render_comparison",
    "load_run_view",
    "format_spend",
    "StepView",
    "RunView",
    "EvidenceView",
    "CandidateView",
    "Actor",
    "ActorSpec",
    "Allowlist",
    "Amendment",
    "Approval",
    "Candidate",
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
    "FileReconciler",
    "FunctionActor",
    "GatewayActor",
    "Handoff",
    "HttpReconciler",
    "FetchConfig",
    "HttpSearch",
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
    "ScriptedActor",
    "SearchConfig",
    "SearchHit",
    "SearchProvider",
    "StopReason",
    "Stopper",
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
    "amend",
    "answer",
    "approve",
    "current_effect_key",
    "deny",
    "detect_format",
    "diff_replays",
    "export_trajectory",
    "file_digests",
    "http_reconcilers",
    "http_tools",
    "import_transcript",
    "journaled_actor",
    "live_policy",
    "load_gateway_task",
    "load_script",
    "load_task",
    "lookup_url",
    "open_journal",
    "parse_trajectory",
    "pid_alive",
    "read_trajectory",
    "reconcile",
    "reconciler_for",
    "replay",
    "resume",
    "retry_with_backoff",
    "retune",
    "run",
    "serve_gateway",
    "shell_may_change",
    "stop",
    "submit",
    "verdict_state",
    "wait_reply",
    "work",
)
