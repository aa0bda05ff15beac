"""The runtime: the four tasks, channels, records, controller policy, tools, journal."""

# Imported on first use (PEP 562): the MCP stack takes a second to import, and
# `proctor hook`, run on every tool call of a hosted agent, needs little of the rest.
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from proctor.runtime._actors.base import Actor as Actor
    from proctor.runtime._actors.base import FunctionActor as FunctionActor
    from proctor.runtime._actors.base import ScriptedActor as ScriptedActor
    from proctor.runtime._actors.base import load_script as load_script
    from proctor.runtime._actors.openai import OpenAIActor as OpenAIActor
    from proctor.runtime._actors.process import ProcessActor as ProcessActor
    from proctor.runtime._control.run import Stopper as Stopper
    from proctor.runtime._control.run import run as run
    from proctor.runtime._hosting.gateway import GatewayActor as GatewayActor
    from proctor.runtime._hosting.gateway import load_gateway_task as load_gateway_task
    from proctor.runtime._hosting.gateway import serve_gateway as serve_gateway
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
    from proctor.runtime._progress.trajectory import parse_trajectory as parse_trajectory
    from proctor.runtime._progress.trajectory import read_trajectory as read_trajectory
    from proctor.runtime._progress.trajectory import replay as replay
    from proctor.runtime._records import Claim as Claim
    from proctor.runtime._records import Completion as Completion
    from proctor.runtime._records import Decision as Decision
    from proctor.runtime._records import Disposition as Disposition
    from proctor.runtime._records import Message as Message
    from proctor.runtime._records import MessageKind as MessageKind
    from proctor.runtime._records import Observation as Observation
    from proctor.runtime._records import ObservationKind as ObservationKind
    from proctor.runtime._records import Proposal as Proposal
    from proctor.runtime._records import Round as Round
    from proctor.runtime._records import StopReason as StopReason
    from proctor.runtime._records import ToolCall as ToolCall
    from proctor.runtime._records import ToolResult as ToolResult
    from proctor.runtime._records import ToolStatus as ToolStatus
    from proctor.runtime._records import TraceRecord as TraceRecord
    from proctor.runtime._task import Approval as Approval
    from proctor.runtime._task import Task as Task
    from proctor.runtime._task import load_task as load_task
    from proctor.runtime._tools.registry import Tool as Tool
    from proctor.runtime._tools.registry import ToolContext as ToolContext
    from proctor.runtime._tools.registry import ToolRegistry as ToolRegistry
    from proctor.runtime._tools.spec import Effect as Effect
    from proctor.runtime._tools.spec import ToolSpec as ToolSpec

_LAZY: dict[str, tuple[str, str]] = {
    "Actor": ("proctor.runtime._actors.base", "Actor"),
    "FunctionActor": ("proctor.runtime._actors.base", "FunctionActor"),
    "ScriptedActor": ("proctor.runtime._actors.base", "ScriptedActor"),
    "load_script": ("proctor.runtime._actors.base", "load_script"),
    "OpenAIActor": ("proctor.runtime._actors.openai", "OpenAIActor"),
    "ProcessActor": ("proctor.runtime._actors.process", "ProcessActor"),
    "Stopper": ("proctor.runtime._control.run", "Stopper"),
    "run": ("proctor.runtime._control.run", "run"),
    "resume": ("proctor.runtime._hosting.resume", "resume"),
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
    "parse_trajectory": ("proctor.runtime._progress.trajectory", "parse_trajectory"),
    "read_trajectory": ("proctor.runtime._progress.trajectory", "read_trajectory"),
    "replay": ("proctor.runtime._progress.trajectory", "replay"),
    "Claim": ("proctor.runtime._records", "Claim"),
    "Completion": ("proctor.runtime._records", "Completion"),
    "Decision": ("proctor.runtime._records", "Decision"),
    "Disposition": ("proctor.runtime._records", "Disposition"),
    "Message": ("proctor.runtime._records", "Message"),
    "MessageKind": ("proctor.runtime._records", "MessageKind"),
    "Observation": ("proctor.runtime._records", "Observation"),
    "ObservationKind": ("proctor.runtime._records", "ObservationKind"),
    "Proposal": ("proctor.runtime._records", "Proposal"),
    "Round": ("proctor.runtime._records", "Round"),
    "StopReason": ("proctor.runtime._records", "StopReason"),
    "ToolCall": ("proctor.runtime._records", "ToolCall"),
    "ToolResult": ("proctor.runtime._records", "ToolResult"),
    "ToolStatus": ("proctor.runtime._records", "ToolStatus"),
    "TraceRecord": ("proctor.runtime._records", "TraceRecord"),
    "Approval": ("proctor.runtime._task", "Approval"),
    "Task": ("proctor.runtime._task", "Task"),
    "load_task": ("proctor.runtime._task", "load_task"),
    "Tool": ("proctor.runtime._tools.registry", "Tool"),
    "ToolContext": ("proctor.runtime._tools.registry", "ToolContext"),
    "ToolRegistry": ("proctor.runtime._tools.registry", "ToolRegistry"),
    "Effect": ("proctor.runtime._tools.spec", "Effect"),
    "ToolSpec": ("proctor.runtime._tools.spec", "ToolSpec"),
    "GatewayActor": ("proctor.runtime._hosting.gateway", "GatewayActor"),
    "load_gateway_task": ("proctor.runtime._hosting.gateway", "load_gateway_task"),
    "serve_gateway": ("proctor.runtime._hosting.gateway", "serve_gateway"),
}


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(where[0]), where[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = (
    "Actor",
    "Amendment",
    "Approval",
    "Candidate",
    "Claim",
    "Claimed",
    "Completion",
    "Decision",
    "Disposition",
    "Effect",
    "FunctionActor",
    "GatewayActor",
    "Handoff",
    "Journal",
    "JournalLike",
    "Judge",
    "Message",
    "MessageKind",
    "Observation",
    "ObservationKind",
    "OpenAIActor",
    "OperatorReply",
    "Policy",
    "ProcessActor",
    "Proposal",
    "Round",
    "RunResult",
    "ScriptedActor",
    "StopReason",
    "Stopper",
    "Task",
    "TRANSCRIPT_FORMATS",
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
    "detect_format",
    "import_transcript",
    "answer",
    "approve",
    "deny",
    "load_gateway_task",
    "load_script",
    "load_task",
    "open_journal",
    "parse_trajectory",
    "read_trajectory",
    "replay",
    "resume",
    "retune",
    "run",
    "serve_gateway",
    "shell_may_change",
    "stop",
    "submit",
    "wait_reply",
    "work",
)
