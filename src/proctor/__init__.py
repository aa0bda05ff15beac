"""
proctor hosts an AI agent and owns the decision of when it stops.

The actor proposes; the controller decides, journals and terminates; an
external verifier judges a frozen candidate; a budget accountant keeps spend
outside the model.
"""

from __future__ import annotations

# The public names are imported on first use (PEP 562): `proctor hook` runs on
# every tool call of a hosted agent and must not pay for the whole runtime, the
# CLI's rich and click, or httpx.
# Not imported from typing, which takes longer to import than the rest of a hook
# call answered by a server; mypy takes any name TYPE_CHECKING as true.
TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Any as _Any

    from proctor._boundary import Limits as Limits
    from proctor._errors import ActorError as ActorError
    from proctor._errors import BudgetError as BudgetError
    from proctor._errors import CandidateTooLarge as CandidateTooLarge
    from proctor._errors import ConfigError as ConfigError
    from proctor._errors import EffectError as EffectError
    from proctor._errors import FencedError as FencedError
    from proctor._errors import InputRefused as InputRefused
    from proctor._errors import JournalError as JournalError
    from proctor._errors import ProctorError as ProctorError
    from proctor._errors import RunEndedError as RunEndedError
    from proctor._errors import RunHeld as RunHeld
    from proctor._errors import RunNotFoundError as RunNotFoundError
    from proctor._errors import SandboxUnavailableError as SandboxUnavailableError
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

#: Each public name and the module it is imported from on first use.
_LAZY: dict[str, str] = {
    "Limits": "proctor._boundary",
    "ActorError": "proctor._errors",
    "BudgetError": "proctor._errors",
    "CandidateTooLarge": "proctor._errors",
    "ConfigError": "proctor._errors",
    "EffectError": "proctor._errors",
    "FencedError": "proctor._errors",
    "InputRefused": "proctor._errors",
    "JournalError": "proctor._errors",
    "ProctorError": "proctor._errors",
    "RunEndedError": "proctor._errors",
    "RunHeld": "proctor._errors",
    "RunNotFoundError": "proctor._errors",
    "SandboxUnavailableError": "proctor._errors",
    "SchemaError": "proctor._errors",
    "SnapshotRefused": "proctor._errors",
    "TrajectoryError": "proctor._errors",
    "TranscriptError": "proctor._errors",
    "WorkspaceBusyError": "proctor._errors",
    "WorkspaceError": "proctor._errors",
    "Budget": "proctor.budgets",
    "Actor": "proctor.runtime",
    "Amendment": "proctor.runtime",
    "Approval": "proctor.runtime",
    "Claim": "proctor.runtime",
    "Completion": "proctor.runtime",
    "Decision": "proctor.runtime",
    "Disposition": "proctor.runtime",
    "FunctionActor": "proctor.runtime",
    "Message": "proctor.runtime",
    "MessageKind": "proctor.runtime",
    "Observation": "proctor.runtime",
    "ObservationKind": "proctor.runtime",
    "OpenAIActor": "proctor.runtime",
    "OperatorReply": "proctor.runtime",
    "Policy": "proctor.runtime",
    "ProcessActor": "proctor.runtime",
    "Proposal": "proctor.runtime",
    "Round": "proctor.runtime",
    "RunResult": "proctor.runtime",
    "ScriptedActor": "proctor.runtime",
    "Stopper": "proctor.runtime",
    "Task": "proctor.runtime",
    "ToolCall": "proctor.runtime",
    "ToolResult": "proctor.runtime",
    "amend": "proctor.runtime",
    "answer": "proctor.runtime",
    "approve": "proctor.runtime",
    "deny": "proctor.runtime",
    "load_task": "proctor.runtime",
    "replay": "proctor.runtime",
    "resume": "proctor.runtime",
    "retune": "proctor.runtime",
    "run": "proctor.runtime",
    "stop": "proctor.runtime",
    "wait_reply": "proctor.runtime",
    "CommandCheck": "proctor.verifiers",
    "Evidence": "proctor.verifiers",
    "FileCheck": "proctor.verifiers",
    "JudgeCheck": "proctor.verifiers",
    "JudgeFindings": "proctor.verifiers",
    "PythonCheck": "proctor.verifiers",
}


def __getattr__(name: str) -> _Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    # Before anything of proctor's can log: the library never writes to stdout.
    importlib.import_module("proctor._logging")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


del TYPE_CHECKING


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
    "CandidateTooLarge",
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
    "InputRefused",
    "JournalError",
    "JudgeCheck",
    "JudgeFindings",
    "Limits",
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
    "RunHeld",
    "RunNotFoundError",
    "RunResult",
    "SandboxUnavailableError",
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
