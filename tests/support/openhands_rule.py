"""
OpenHands' stuck detector on trajectory events: the baseline proctor's
no-progress policy is scored against on the real set (docs/progress.md).

The rule of the OpenHands software-agent-sdk ``StuckDetector``
(openhands-sdk/openhands/sdk/conversation/stuck_detector.py at
OpenHands/software-agent-sdk 611629e6999a, MIT), read from its source: over
the last 20 events, cut after the last user message, the run is stuck when

1. the last 4 actions are equal and the last 4 observations are equal;
2. the last 3 actions are equal and each ended in an error (the SDK at HEAD
   first nudges at 3 and stops at the 4th; ``error_stop_at`` picks the older
   stop at 3, the default here);
3. the last 3 events are agent messages (a monologue);
4. the last 6 actions and observations alternate between two (a[i] == a[i+2]).

Actions are compared by tool and arguments (the SDK also compares the model's
``thought``, which trajectories do not carry, so this baseline fires at least
as often as OpenHands would); observations by tool, status, exit code and
output; errors by their text. An action is an error event when its result is
not ``ok`` and it is not a shell command that ran (a non-zero exit code is an
ordinary observation in OpenHands); a timeout is an observation. A
``final_answer`` is a finish action with its observation; other messages are
agent messages; verdicts, signals and claims are not agent events.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ("agent_events", "is_stuck", "stuck_analysis")

AgentEvent = tuple[int, str, tuple[Any, ...]]


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def agent_events(events: Sequence[Mapping[str, Any]]) -> list[AgentEvent]:
    """Trajectory events as (event index, kind, key), kind one of action, obs, error, msg, user."""
    out: list[AgentEvent] = []
    for i, e in enumerate(events, 1):
        kind = e.get("type")
        if kind == "action":
            tool, args = e.get("tool"), e.get("args") or {}
            out.append((i, "action", ("A", tool, _canon(args))))
            r = e.get("result") or {}
            status = r.get("status")
            shell_ran = tool == "run_command" and r.get("exit_code") is not None
            if status not in ("ok", "timeout") and not shell_ran:
                out.append((i, "error", ("E", r.get("output", ""))))
            else:
                out.append((i, "obs", ("O", tool, status, r.get("exit_code"), r.get("output", ""))))
        elif kind == "message":
            if e.get("kind") == "final_answer":
                out.append((i, "action", ("A", "finish", e.get("text", ""))))
                out.append((i, "obs", ("O", "finish")))
            else:
                out.append((i, "msg", ("M", e.get("text", ""))))
        elif kind == "user":
            out.append((i, "user", ("U", e.get("text", ""))))
    return out


def is_stuck(
    history: Sequence[AgentEvent],
    window: int = 20,
    ao: int = 4,
    ae: int = 3,
    mono: int = 3,
    alt: int = 6,
    error_stop_at: int | None = 3,
) -> str | None:
    """Return the loop the detector sees at the end of ``history``, or None."""
    ev = list(history[-window:] if window else history)
    last_user = max((k for k, h in enumerate(ev) if h[1] == "user"), default=-1)
    ev = ev[last_user + 1 :]
    if len(ev) < min(ao, ae, mono):
        return None
    need_err = ae + 1 if error_stop_at is None else error_stop_at
    needed = max(ao, need_err)
    acts: list[AgentEvent] = []
    obs: list[AgentEvent] = []
    for h in reversed(ev):
        if h[1] == "action" and len(acts) < needed:
            acts.append(h)
        elif h[1] in ("obs", "error") and len(obs) < needed:
            obs.append(h)
        if len(acts) >= needed and len(obs) >= needed:
            break
    if (
        len(acts) >= ao
        and len(obs) >= ao
        and all(a[2] == acts[0][2] for a in acts[:ao])
        and all(o[1] == obs[0][1] and o[2] == obs[0][2] for o in obs[:ao])
    ):
        return "repeating_action_observation"
    streak = 0
    for a, o in zip(acts, obs, strict=False):
        if a[2] != acts[0][2] or o[1] != "error":
            break
        streak += 1
    if streak >= need_err:
        return "repeating_action_error"
    trailing = 0
    for h in reversed(ev):
        if h[1] != "msg":
            break
        trailing += 1
    if len(ev) >= mono and trailing >= mono:
        return "monologue"
    if len(ev) >= alt:
        a6: list[AgentEvent] = []
        o6: list[AgentEvent] = []
        for h in reversed(ev):
            if h[1] == "action" and len(a6) < alt:
                a6.append(h)
            elif h[1] in ("obs", "error") and len(o6) < alt:
                o6.append(h)
            if len(a6) == alt and len(o6) == alt:
                break
        if (
            len(a6) == alt
            and len(o6) == alt
            and all(a6[i][2] == a6[i + 2][2] for i in range(alt - 2))
            and all(o6[i][1:] == o6[i + 2][1:] for i in range(alt - 2))
        ):
            return "repeating_action_observation_pattern"
    return None


def stuck_analysis(
    events: Sequence[Mapping[str, Any]], error_stop_at: int | None = 3
) -> tuple[int | None, str | None]:
    """
    Return the (1-based) event after which the detector first fires and the loop it
    names, or (None, None). The controller checks after every agent event.
    """
    history = agent_events(events)
    n = 0
    for index in range(1, len(events) + 1):
        while n < len(history) and history[n][0] <= index:
            n += 1
        if events[index - 1].get("type") not in ("action", "message"):
            continue
        loop = is_stuck(history[:n], error_stop_at=error_stop_at)
        if loop:
            return index, loop
    return None, None
