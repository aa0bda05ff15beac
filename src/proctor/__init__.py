"""
proctor hosts an AI agent and owns the decision of when it stops.

The actor proposes; the controller decides, journals and terminates; an
external verifier judges a frozen candidate; a budget accountant keeps spend
outside the model.
"""

# Imported on first use (PEP 562): `proctor hook` runs on every tool call of a hosted
# agent and must not pay for the whole runtime, the CLI's rich and click, or httpx.
from typing import TYPE_CHECKING, Any

# Imported before anything logs: the library never writes to stdout (see _logging).
from proctor import _logging as _logging

if TYPE_CHECKING:
    from proctor._errors import ActorError as ActorError
    from proctor._errors import BudgetError as BudgetError
    from proctor._errors import ConfigError as ConfigError
    from proctor._errors import EffectError as EffectError
    from proctor._errors import FencedError as FencedError
    from proctor._errors import JournalError as JournalError
    from proctor._errors import ProctorError as ProctorError
    from proctor._errors import RunEndedError as RunEndedError
    from proctor._errors import RunNotFoundError as RunNotFoundError
    from proctor._errors import SchemaError as SchemaError
    from proctor._errors import SnapshotRefused as SnapshotRefused
    from proctor._errors import TrajectoryError as TrajectoryError
    from proctor._errors import TranscriptError as TranscriptError
    from proctor._errors import WorkspaceBusyError as WorkspaceBusyError
    from proctor._errors import WorkspaceError as WorkspaceError
    from proctor.budgets import Budget as Budget
    from proctor.runtime import Actor as Actor
    from proctor.runtime import Amendment as Amendment
    from proctor.runtime import Approval as Approval
    from proctor.runtime import Claim as Claim
    from proctor.runtime import Completion as Completion
    from proctor.runtime import Decision as Decision
    from proctor.runtime import Disposition as Disposition
    from proctor.runtime import FunctionActor as FunctionActor
    from proctor.runtime import Message as Message
    from proctor.runtime import MessageKind as MessageKind
    from proctor.runtime import Observation as Observation
    from proctor.runtime import ObservationKind as ObservationKind
    from proctor.runtime import OpenAIActor as OpenAIActor
    from proctor.runtime import OperatorReply as OperatorReply
    from proctor.runtime import Policy as Policy
    from proctor.runtime import ProcessActor as ProcessActor
    from proctor.runtime import Proposal as Proposal
    from proctor.runtime import Round as Round
    from proctor.runtime import RunResult as RunResult
    from proctor.runtime import ScriptedActor as ScriptedActor
    from proctor.runtime import Stopper as Stopper
    from proctor.runtime import Task as Task
    from proctor.runtime import ToolCall as ToolCall
    from proctor.runtime import ToolResult as ToolResult
    from proctor.runtime import amend as amend
    from proctor.runtime import answer as answer
    from proctor.runtime import approve as approve
    from proctor.runtime import deny as deny
    from proctor.runtime import load_task as load_task
    from proctor.runtime import replay as replay
    from proctor.runtime import resume as resume
    from proctor.runtime import retune as retune
    from proctor.runtime import run as run
    from proctor.runtime import stop as stop
    from proctor.runtime import wait_reply as wait_reply
    from proctor.verifiers import CommandCheck as CommandCheck
    from proctor.verifiers import Evidence as Evidence
    from proctor.verifiers import FileCheck as FileCheck
    from proctor.verifiers import JudgeCheck as JudgeCheck
    from proctor.verifiers import JudgeFindings as JudgeFindings
    from proctor.verifiers import PythonCheck as PythonCheck

_LAZY: dict[str, tuple[str, str]] = {
    "ActorError": ("proctor._errors", "ActorError"),
    "BudgetError": ("proctor._errors", "BudgetError"),
    "ConfigError": ("proctor._errors", "ConfigError"),
    "EffectError": ("proctor._errors", "EffectError"),
    "FencedError": ("proctor._errors", "FencedError"),
    "JournalError": ("proctor._errors", "JournalError"),
    "ProctorError": ("proctor._errors", "ProctorError"),
    "RunEndedError": ("proctor._errors", "RunEndedError"),
    "RunNotFoundError": ("proctor._errors", "RunNotFoundError"),
    "SchemaError": ("proctor._errors", "SchemaError"),
    "SnapshotRefused": ("proctor._errors", "SnapshotRefused"),
    "TrajectoryError": ("proctor._errors", "TrajectoryError"),
    "TranscriptError": ("proctor._errors", "TranscriptError"),
    "WorkspaceBusyError": ("proctor._errors", "WorkspaceBusyError"),
    "WorkspaceError": ("proctor._errors", "WorkspaceError"),
    "Budget": ("proctor.budgets", "Budget"),
    "Actor": ("proctor.runtime", "Actor"),
    "Amendment": ("proctor.runtime", "Amendment"),
    "Approval": ("proctor.runtime", "Approval"),
    "Claim": ("proctor.runtime", "Claim"),
    "Completion": ("proctor.runtime", "Completion"),
    "Decision": ("proctor.runtime", "Decision"),
    "Disposition": ("proctor.runtime", "Disposition"),
    "FunctionActor": ("proctor.runtime", "FunctionActor"),
    "Message": ("proctor.runtime", "Message"),
    "MessageKind": ("proctor.runtime", "MessageKind"),
    "Observation": ("proctor.runtime", "Observation"),
    "ObservationKind": ("proctor.runtime", "ObservationKind"),
    "OpenAIActor": ("proctor.runtime", "OpenAIActor"),
    "OperatorReply": ("proctor.runtime", "OperatorReply"),
    "Policy": ("proctor.runtime", "Policy"),
    "ProcessActor": ("proctor.runtime", "ProcessActor"),
    "Proposal": ("proctor.runtime", "Proposal"),
    "Round": ("proctor.runtime", "Round"),
    "RunResult": ("proctor.runtime", "RunResult"),
    "ScriptedActor": ("proctor.runtime", "ScriptedActor"),
    "Stopper": ("proctor.runtime", "Stopper"),
    "Task": ("proctor.runtime", "Task"),
    "ToolCall": ("proctor.runtime", "ToolCall"),
    "ToolResult": ("proctor.runtime", "ToolResult"),
    "amend": ("proctor.runtime", "amend"),
    "answer": ("proctor.runtime", "answer"),
    "approve": ("proctor.runtime", "approve"),
    "deny": ("proctor.runtime", "deny"),
    "load_task": ("proctor.runtime", "load_task"),
    "replay": ("proctor.runtime", "replay"),
    "resume": ("proctor.runtime", "resume"),
    "retune": ("proctor.runtime", "retune"),
    "run": ("proctor.runtime", "run"),
    "stop": ("proctor.runtime", "stop"),
    "wait_reply": ("proctor.runtime", "wait_reply"),
    "CommandCheck": ("proctor.verifiers", "CommandCheck"),
    "Evidence": ("proctor.verifiers", "Evidence"),
    "FileCheck": ("proctor.verifiers", "FileCheck"),
    "JudgeCheck": ("proctor.verifiers", "JudgeCheck"),
    "JudgeFindings": ("proctor.verifiers", "JudgeFindings"),
    "PythonCheck": ("proctor.verifiers", "PythonCheck"),
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


__version__ = "0.1.0"

__all__ = (
    "Actor",
    "ActorError",
    "Amendment",
    "Approval",
    "Budget",
    "BudgetError",
    "Claim",
    "CommandCheck",
    "Completion",
    "ConfigError",
    "Decision",
    "Disposition",
    "EffectError",
    "Evidence",
    "FencedError",
    "FileCheck",
    "FunctionActor",
    "JournalError",
    "JudgeCheck",
    "JudgeFindings",
    "Message",
    "MessageKind",
    "Observation",
    "ObservationKind",
    "OpenAIActor",
    "OperatorReply",
    "Policy",
    "ProcessActor",
    "ProctorError",
    "Proposal",
    "PythonCheck",
    "Round",
    "RunEndedError",
    "RunNotFoundError",
    "RunResult",
    "SchemaError",
    "ScriptedActor",
    "SnapshotRefused",
    "Stopper",
    "Task",
    "ToolCall",
    "ToolResult",
    "TrajectoryError",
    "TranscriptError",
    "WorkspaceBusyError",
    "WorkspaceError",
    "__version__",
    "amend",
    "answer",
    "approve",
    "deny",
    "load_task",
    "replay",
    "resume",
    "retune",
    "run",
    "stop",
    "wait_reply",
)
