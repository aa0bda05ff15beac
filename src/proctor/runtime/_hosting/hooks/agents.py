"""
The three agents' hook protocols: what each sends on a hook's standard input,
and how each wants an answer. Standard library only, and no I/O: the hook
command parses with :func:`parse` and answers with :func:`render`.

Every fact here was observed with the agents' own binaries (Claude Code
2.1.332, Codex CLI 0.171.0, gemini-cli 0.61.0); docs/hosting-agents.md says
what each one means for a person.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = (
    "AGENTS",
    "Agent",
    "Answer",
    "HookEvent",
    "HookInputError",
    "Kind",
    "fail_closed",
    "parse",
    "render",
)

Agent = Literal["claude", "codex", "gemini"]
#: The agents ``proctor hook`` answers for.
AGENTS: tuple[Agent, ...] = ("claude", "codex", "gemini")

#: What an event is to proctor: the start of a session, a prompt, a tool call
#: about to run, one that ran, a wish to stop, the end, or something else.
Kind = Literal["start", "prompt", "pre_tool", "post_tool", "stop", "end", "other"]

_KINDS: dict[str, dict[str, Kind]] = {
    "claude": {
        "SessionStart": "start",
        "UserPromptSubmit": "prompt",
        "PreToolUse": "pre_tool",
        "PostToolUse": "post_tool",
        "PostToolUseFailure": "post_tool",
        "Stop": "stop",
        "SubagentStop": "stop",
        "SessionEnd": "end",
    },
    "codex": {
        "SessionStart": "start",
        "UserPromptSubmit": "prompt",
        "PreToolUse": "pre_tool",
        "PostToolUse": "post_tool",
        "Stop": "stop",
        "SubagentStop": "stop",
    },
    "gemini": {
        "SessionStart": "start",
        "BeforeAgent": "prompt",
        "BeforeTool": "pre_tool",
        "AfterTool": "post_tool",
        "AfterAgent": "stop",
        "SessionEnd": "end",
    },
}


class HookInputError(ValueError):
    """The hook's standard input is not an event of the agent's protocol."""


@dataclass(frozen=True)
class HookEvent:
    """
    One hook call, as proctor needs it, whichever agent sent it.

    Args:
        agent: the agent.
        name: the agent's own event name (``PreToolUse``, ``BeforeTool``, ...).
        kind: what it is to proctor.
        session_id: the agent's session: one proctor run.
        cwd: the agent's working directory.
        transcript_path: the agent's transcript file, if it names one.
        tool_name: the tool, for tool events.
        tool_input: its arguments.
        tool_response: what it returned (after it ran); None when it failed.
        error: the failure's text, when the agent reports one separately.
        stop_hook_active: the agent stops again after a blocked stop.
        subagent: the stop is a subagent's.
        text: the prompt, or the agent's last message at a stop.
        raw: the whole input.
    """

    agent: Agent
    name: str
    kind: Kind
    session_id: str
    cwd: str
    transcript_path: str | None = None
    tool_name: str = ""
    tool_input: dict[str, Any] = field(default_factory=dict)
    tool_response: Any = None
    error: str | None = None
    stop_hook_active: bool = False
    subagent: bool = False
    text: str = ""
    raw: dict[str, Any] = field(default_factory=dict)


def _text(data: Mapping[str, Any], key: str, *, required: bool = False) -> str:
    value = data.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise HookInputError(f"field {key!r} must be a non-empty string, got {value!r:.80}")
    return value


def parse(agent: Agent, text: str) -> HookEvent:
    """
    Parse a hook's standard input.

    Raises:
        HookInputError: not JSON, not an object, a field missing or of the wrong
            type; the message says which.
    """
    if agent not in _KINDS:
        raise HookInputError(f"unknown agent {agent!r}; known: {', '.join(AGENTS)}")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise HookInputError(f"the hook input is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise HookInputError(f"the hook input is a JSON {type(data).__name__}, not an object")
    name = _text(data, "hook_event_name", required=True)
    session = _text(data, "session_id", required=True)
    cwd = _text(data, "cwd", required=True)
    transcript = data.get("transcript_path")
    if transcript is not None and not isinstance(transcript, str):
        raise HookInputError(f"field 'transcript_path' must be a string, got {transcript!r:.80}")
    kind = _KINDS[agent].get(name, "other")
    tool_name = ""
    tool_input: dict[str, Any] = {}
    if kind in ("pre_tool", "post_tool"):
        tool_name = _text(data, "tool_name", required=True)
        raw_input = data.get("tool_input", {})
        if not isinstance(raw_input, dict):
            raise HookInputError(f"field 'tool_input' must be an object, got {raw_input!r:.80}")
        tool_input = raw_input
    error = data.get("error")
    if error is not None and not isinstance(error, str):
        error = json.dumps(error)
    active = data.get("stop_hook_active", False)
    if not isinstance(active, bool):
        raise HookInputError(f"field 'stop_hook_active' must be true or false, got {active!r:.80}")
    text_key = {"prompt": "prompt", "stop": "last_assistant_message"}.get(kind, "")
    if agent == "gemini" and kind == "stop":
        text_key = "prompt_response"
    return HookEvent(
        agent=agent,
        name=name,
        kind=kind,
        session_id=session,
        cwd=cwd,
        transcript_path=transcript or None,
        tool_name=tool_name,
        tool_input=tool_input,
        tool_response=data.get("tool_response"),
        error=error,
        stop_hook_active=active,
        subagent=name == "SubagentStop",
        text=_text(data, text_key) if text_key else "",
        raw=data,
    )


#: What proctor answers: let it be (``proceed``: no opinion; ``allow``: the tool
#: may run), ``deny`` the tool with a reason, ``halt`` the whole session, or
#: ``block`` a stop (the agent goes on working, shown ``reason``).
Verb = Literal["proceed", "allow", "deny", "halt", "block"]


@dataclass(frozen=True)
class Answer:
    """
    proctor's answer to one hook call.

    Args:
        verb: what to do.
        reason: what the agent (and a person) is told, for ``deny``, ``halt`` and ``block``.
        context: feedback for the model after a tool ran (a nudge), or at a
            stop that is let through.
    """

    verb: Verb
    reason: str = ""
    context: str = ""


def _specific(event: HookEvent, **fields: Any) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": event.name, **fields}}


def _claude(event: HookEvent, answer: Answer) -> dict[str, Any] | None:
    verb, reason = answer.verb, answer.reason
    if event.kind == "pre_tool":
        if verb == "allow":
            # In -p mode Write and Edit are refused unless a hook allows them.
            return _specific(event, permissionDecision="allow")
        if verb in ("deny", "halt"):
            out = _specific(event, permissionDecision="deny", permissionDecisionReason=reason)
            if verb == "halt":
                out |= {"continue": False, "stopReason": reason}
            return out
    if event.kind == "post_tool":
        if verb == "halt":
            return {"continue": False, "stopReason": reason}
        if answer.context:
            return _specific(event, additionalContext=answer.context)
    if event.kind == "stop" and verb == "block":
        return {"decision": "block", "reason": reason}
    if verb == "halt":
        return {"continue": False, "stopReason": reason}
    return {}


def _codex(event: HookEvent, answer: Answer) -> dict[str, Any] | None:
    verb, reason = answer.verb, answer.reason
    if event.kind == "pre_tool":
        # "allow" without updatedInput, and continue:false, are refused by Codex
        # as unsupported (and the hook then counts as failed, so the tool runs):
        # no output allows; a halt is a deny (the stop that follows is let through).
        if verb in ("deny", "halt"):
            return _specific(event, permissionDecision="deny", permissionDecisionReason=reason)
        return None
    if event.kind == "post_tool":
        if verb == "halt":
            return {"decision": "block", "reason": reason}
        if answer.context:
            return _specific(event, additionalContext=answer.context)
        return None
    if event.kind == "stop" and verb == "block":
        return {"decision": "block", "reason": reason}
    if event.kind in ("prompt", "stop") and verb == "halt":
        return {"continue": False, "stopReason": reason}
    return None


def _gemini(event: HookEvent, answer: Answer) -> dict[str, Any] | None:
    verb, reason = answer.verb, answer.reason
    if event.kind == "pre_tool":
        if verb == "allow":
            return {"decision": "allow"}
        if verb == "deny":
            return {"decision": "deny", "reason": reason}
        if verb == "halt":
            return {"decision": "deny", "reason": reason, "continue": False, "stopReason": reason}
    if event.kind == "post_tool":
        if verb == "halt":
            return {"continue": False, "stopReason": reason}
        if answer.context:
            return _specific(event, additionalContext=answer.context)
    if event.kind == "stop" and verb == "block":
        # AfterAgent's block is "deny": the reason becomes the agent's next prompt.
        return {"decision": "deny", "reason": reason}
    if verb == "halt":
        return {"continue": False, "stopReason": reason}
    return {}


_RENDER = {"claude": _claude, "codex": _codex, "gemini": _gemini}


def render(event: HookEvent, answer: Answer) -> str:
    """Return what the hook writes on its standard output (may be empty), exit code 0."""
    out = _RENDER[event.agent](event, answer)
    return "" if out is None else json.dumps(out)


def fail_closed(reason: str) -> tuple[str, str, int]:
    """
    The answer to a hook call proctor could not judge: exit code 2 with the reason
    on standard error, which all three agents take as a refusal (a denied tool, a
    blocked stop). Any other failure (a traceback, exit code 1) they take as no
    opinion, and go on.

    Returns:
        (stdout, stderr, exit code)
    """
    text = " ".join(reason.split()) or "proctor could not judge this call"
    return "", f"proctor: {text}\n", 2
