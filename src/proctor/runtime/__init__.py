"""The runtime: the four tasks, channels, records, controller policy, tools, journal."""

from typing import TYPE_CHECKING, Any

from proctor.runtime._actors.base import Actor as Actor
from proctor.runtime._actors.base import FunctionActor as FunctionActor
from proctor.runtime._actors.base import ScriptedActor as ScriptedActor
from proctor.runtime._actors.base import load_script as load_script
from proctor.runtime._actors.openai import OpenAIActor as OpenAIActor
from proctor.runtime._actors.process import ProcessActor as ProcessActor
from proctor.runtime._control.run import Stopper as Stopper
from proctor.runtime._control.run import run as run
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

if TYPE_CHECKING:
    from proctor.runtime._hosting.gateway import GatewayActor as GatewayActor
    from proctor.runtime._hosting.gateway import load_gateway_task as load_gateway_task
    from proctor.runtime._hosting.gateway import serve_gateway as serve_gateway

# The MCP stack takes a second to import: only the gateway's users pay for it.
_LAZY = {
    "GatewayActor": "proctor.runtime._hosting.gateway",
    "load_gateway_task": "proctor.runtime._hosting.gateway",
    "serve_gateway": "proctor.runtime._hosting.gateway",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
