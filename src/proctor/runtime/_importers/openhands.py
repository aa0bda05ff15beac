"""
OpenHands event streams: V0 event lists, evaluation and resolver outputs, V1 SDK events.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Any

from proctor.runtime._importers.base import (
    PY_WRITE,
    Converted,
    TranscriptError,
    editor_action,
    get,
    header,
    load_json,
    load_jsonl,
    make_action,
    make_message,
    make_outcome,
    make_shell,
    req,
    shell_may_change,
    trim,
)

__all__ = ("import_openhands", "openhands_runs")

# --------------------------------------------------------------------------
# OpenHands
# --------------------------------------------------------------------------

_OH_SKIP_ACTIONS = {
    "system",
    "recall",
    "condensation",
    "change_agent_state",
    "null",
    "agent_state_changed",
    "condensation_request",
}


def openhands_runs(path: str | Path) -> list[dict[str, Any]]:
    """All runs in an OpenHands file: a V0 event list, a V1 event list, or
    an evaluation/resolver output.jsonl (one run per line, `history`)."""
    p = str(path)
    if os.path.isdir(p):  # V1 conversation dir: events/*.json
        d = os.path.join(p, "events") if os.path.isdir(os.path.join(p, "events")) else p
        evs: list[Any] = []
        for n in sorted(os.listdir(d)):
            if n.endswith(".json"):
                evs.append(load_json(os.path.join(d, n)))
        return [{"history": evs}]
    try:
        data = load_json(p)
        if isinstance(data, list):
            return [{"history": data}]
        if isinstance(data, dict) and isinstance(data.get("history"), list):
            return [data]
        if isinstance(data, dict) and isinstance(data.get("events"), list):
            return [{"history": data["events"]}]
        raise TranscriptError(p, "top level", "a list of events, or an object with 'history'")
    except TranscriptError as e:
        if "valid JSON" not in e.expected:
            raise
    runs: list[dict[str, Any]] = []
    rows = load_jsonl(p)
    if rows and all("kind" in r and "history" not in r for _, r in rows):
        return [{"history": [r for _, r in rows]}]  # V1 SDK events, one per line
    for number, row in rows:
        get(row, "history", list, p, f"line {number}", what="the run's event list")
        runs.append(row)
    req(runs, p, "file", "at least one run")
    return runs


def _oh_obs_result(obs: dict[str, Any], path: str | Path, where: str) -> dict[str, Any]:
    kind = obs.get("observation")
    content = obs.get("content", "") or ""
    extras = obs.get("extras") or {}
    if not isinstance(extras, dict):
        raise TranscriptError(path, where + ".extras", "an object")
    if kind == "error":
        return make_outcome("error", content)
    if kind == "run":
        md = extras.get("metadata") or {}
        code = md.get("exit_code", extras.get("exit_code"))
        if code == -1 and ("timed out" in content.lower() or "no output" in content.lower()):
            return make_outcome("timeout", content)
        if code is None:
            return make_outcome("ok", content)
        return make_outcome("ok" if code == 0 else "error", content, code)
    if kind == "browse" and extras.get("error"):
        return make_outcome("error", content)
    if kind == "run_ipython" and re.search(r"^(Traceback|\w+Error:)", content, re.M):
        return make_outcome("error", content)
    return make_outcome("ok", content)


def _oh_v1_event(ev: dict[str, Any]) -> dict[str, Any] | None:
    """Normalise an OpenHands V1 SDK event into a V0-like dict or None."""
    k = ev.get("kind")
    if k == "ActionEvent":
        act = ev.get("action") or {}
        return {
            "_v1": "action",
            "id": ev.get("tool_call_id") or ev.get("id"),
            "tool": ev.get("tool_name"),
            "args": {kk: vv for kk, vv in act.items() if kk != "kind"},
            "resp": ev.get("llm_response_id"),
            "thought": " ".join(
                t.get("text", "") for t in ev.get("thought", []) if isinstance(t, dict)
            ),
        }
    if k == "ObservationEvent":
        obs = ev.get("observation") or {}
        text = obs.get("content")
        if isinstance(text, list):
            text = "\n".join(c.get("text", "") for c in text if isinstance(c, dict))
        return {
            "_v1": "obs",
            "cause": ev.get("tool_call_id") or ev.get("action_id"),
            "exit_code": obs.get("exit_code"),
            "timeout": bool(obs.get("timeout")),
            "error": bool(obs.get("is_error") or obs.get("error")),
            "content": text or obs.get("output") or "",
        }
    if k in ("AgentErrorEvent",):
        return {
            "_v1": "obs",
            "cause": ev.get("tool_call_id"),
            "error": True,
            "content": ev.get("error", ""),
        }
    if k == "MessageEvent":
        msg = ev.get("llm_message") or {}
        c = msg.get("content")
        if isinstance(c, list):
            c = "\n".join(x.get("text", "") for x in c if isinstance(x, dict))
        return {"_v1": "msg", "source": ev.get("source"), "text": c or ""}
    return None


def import_openhands(path: str | Path, index: int = 0) -> Converted:
    # Kept whole: one pass over the transcript's records, in order, keeping the state the next
    # record needs (the open call, the round).
    runs = openhands_runs(path)
    req(0 <= index < len(runs), path, f"run {index}", f"a run index below {len(runs)}")
    run = runs[index]
    hist = run["history"]
    events: list[dict[str, Any]] = []
    where0 = f"run {index}" if len(runs) > 1 else "events"
    if hist and isinstance(hist[0], dict) and "kind" in hist[0]:
        return _import_openhands_v1(path, hist, run)
    obs_by_cause: dict[str, tuple[int, Any]] = {}
    legacy = not any(isinstance(ev, dict) and "cause" in ev for ev in hist)
    for j, ev in enumerate(hist):
        req(isinstance(ev, dict), path, f"{where0}[{j}]", "an event object")
        if "observation" in ev and ev.get("cause") is not None:
            obs_by_cause[str(ev["cause"])] = (j, ev)
    if legacy:  # 2024 resolver/eval output: flat events, observation follows its action
        hist = [dict(ev) for ev in hist]
        for j, ev in enumerate(hist):
            ev.setdefault("id", f"legacy{j}")
            if "action" in ev and "args" not in ev:
                ev["args"] = {k: v for k, v in ev.items() if k not in ("action", "id", "source")}
                ev.setdefault("source", "user" if j == 0 else "agent")
            if "observation" in ev and "extras" not in ev:
                ev["extras"] = {
                    k: v for k, v in ev.items() if k not in ("observation", "content", "id")
                }
                if "exit_code" in ev["extras"]:
                    with contextlib.suppress(TypeError, ValueError):
                        ev["extras"]["exit_code"] = int(ev["extras"]["exit_code"])
        for j, ev in enumerate(hist):
            if "action" in ev and j + 1 < len(hist) and "observation" in hist[j + 1]:
                obs_by_cause[str(ev["id"])] = (j + 1, hist[j + 1])
    seen_agent = False
    for j, ev in enumerate(hist):
        where = f"{where0}[{j}] (id {ev.get('id')})"
        if "action" not in ev:
            if "observation" not in ev:
                raise TranscriptError(path, where, "an 'action' or 'observation' key")
            continue
        kind = ev["action"]
        req(isinstance(kind, str), path, where + ".action", "a string")
        args = ev.get("args") or {}
        req(isinstance(args, dict), path, where + ".args", "an object")
        src = ev.get("source")
        tcm = ev.get("tool_call_metadata") or {}
        resp = ((tcm.get("model_response") or {}).get("id")) if isinstance(tcm, dict) else None
        if kind in _OH_SKIP_ACTIONS:
            continue
        if kind == "message":
            text = args.get("content", ev.get("message", ""))
            if src == "user":
                if seen_agent:
                    events.append({"type": "user", "text": trim(text, 4000)})
            else:
                seen_agent = True
                events.append(make_message("checkpoint", text))
            continue
        seen_agent = True
        if kind == "finish":
            events.append(
                make_message(
                    "final_answer",
                    args.get("final_thought") or args.get("thought") or ev.get("message", ""),
                )
            )
            continue
        if kind == "reject":
            events.append(
                {
                    "type": "message",
                    "kind": "failure_report",
                    "text": trim(args.get("reason", ""), 4000),
                    "blockers": [trim(args.get("reason", "") or "rejected", 400)],
                }
            )
            continue
        j2, obs = obs_by_cause.get(str(ev.get("id")), (None, None))
        result = (
            _oh_obs_result(obs, path, f"{where0}[{j2}]")
            if obs
            else make_outcome("error", "no observation recorded")
        )
        changed = False
        if kind == "run":
            cmd = get(args, "command", str, path, where + ".args")
            tool, targs, changed = "run_command", {"cmd": cmd}, shell_may_change(cmd)
            if args.get("is_input"):
                tool, targs, changed = "send_input", {"input": cmd}, False
        elif kind == "edit":
            ex = (obs or {}).get("extras") or {}
            p = args.get("path", ex.get("path", ""))
            if args.get("command"):
                tool, targs, changed = editor_action(args, p)
            elif ex.get("prev_exist") is False and ex.get("new_content") is not None:
                tool, targs = "write_file", {"path": p, "content": ex["new_content"]}
            elif ex.get("old_content") is not None and ex.get("new_content") is not None:
                tool, targs = (
                    "edit_file",
                    {"path": p, "old": ex["old_content"], "new": ex["new_content"]},
                )
            else:
                tool, targs, changed = "edit", {"path": p, "content": args.get("content", "")}, True
        elif kind == "write":
            tool, targs = (
                "write_file",
                {"path": args.get("path", ""), "content": args.get("content", "")},
            )
        elif kind == "read":
            tool, targs = "read_file", {"path": args.get("path", "")}
        elif kind == "browse":
            tool, targs = "fetch", {"url": args.get("url", "")}
        elif kind == "run_ipython":
            code = args.get("code", "")
            tool, targs, changed = "run_ipython", {"code": code}, bool(PY_WRITE.search(code))
        elif kind == "think":
            tool, targs = "think", {"thought": args.get("thought", "")}
        else:
            tool, targs = (
                kind,
                {
                    k: v
                    for k, v in args.items()
                    if k
                    not in (
                        "thought",
                        "impl_source",
                        "translated_ipython_code",
                        "security_risk",
                        "confirmation_state",
                    )
                },
            )
        a = make_action(tool, targs, result, changed=changed)
        a["_resp"] = resp
        events.append(a)
    # parallel tool calls: consecutive actions from one model response
    i = 0
    while i < len(events):
        k = i
        r = events[i].get("_resp")
        while r and k + 1 < len(events) and events[k + 1].get("_resp") == r:
            k += 1
        if k > i:
            for e in events[i : k + 1]:
                e["round"] = f"r{i}"
        i = k + 1
    for e in events:
        e.pop("_resp", None)
    err = str(run.get("error") or "")
    if re.search(r"maximum iteration|budget|max_budget|cost limit", err, re.I):
        events.append({"type": "signal", "name": "deadline"})
    checks = None
    tr = run.get("test_result")
    if isinstance(tr, dict) and isinstance(tr.get("report"), dict) and "resolved" in tr["report"]:
        events.append(
            {"type": "verdict", "check": "swebench", "passed": bool(tr["report"]["resolved"])}
        )
        checks = ["swebench"]
    elif isinstance(run.get("success"), bool):
        events.append(
            {
                "type": "verdict",
                "check": "resolver",
                "passed": run["success"],
                "output": trim(run.get("result_explanation") or ""),
            }
        )
        checks = ["resolver"]
    return header("build", checks), events


def _import_openhands_v1(path: str | Path, hist: list[Any], run: dict[str, Any]) -> Converted:
    events: list[dict[str, Any]] = []
    norm: list[dict[str, Any]] = []
    for j, ev in enumerate(hist):
        req(
            isinstance(ev, dict) and "kind" in ev,
            path,
            f"events[{j}]",
            "a V1 event object with 'kind'",
        )
        n = _oh_v1_event(ev)
        if n:
            norm.append(n)
    obs = {n["cause"]: n for n in norm if n["_v1"] == "obs" and n.get("cause")}
    seen = False
    for n in norm:
        if n["_v1"] == "msg":
            if n["source"] == "user":
                if seen:
                    events.append({"type": "user", "text": trim(n["text"], 4000)})
            else:
                seen = True
                events.append(make_message("checkpoint", n["text"]))
        elif n["_v1"] == "action":
            seen = True
            o = obs.get(n["id"])
            tool, a = n["tool"] or "", n["args"]
            if tool == "finish":
                events.append(make_message("final_answer", a.get("message", "")))
                continue
            if o is None:
                res = make_outcome("error", "no observation recorded")
            elif o.get("timeout"):
                res = make_outcome("timeout", o["content"])
            elif o.get("exit_code") is not None:
                res = make_outcome(
                    "ok"
                    if o["exit_code"] == 0
                    else ("timeout" if o["exit_code"] == -1 else "error"),
                    o["content"],
                    o["exit_code"],
                )
            else:
                res = make_outcome("error" if o["error"] else "ok", o["content"])
            if tool in ("terminal", "execute_bash", "bash"):
                e = make_shell(a.get("command", ""), res)
            elif tool in ("str_replace_editor", "file_editor"):
                t, ta, ch = editor_action(a)
                e = make_action(t, ta, res, changed=ch)
            else:
                e = make_action(tool, a, res)
            e["_resp"] = n.get("resp")
            events.append(e)
    i = 0
    while i < len(events):
        k = i
        r = events[i].get("_resp")
        while r and k + 1 < len(events) and events[k + 1].get("_resp") == r:
            k += 1
        if k > i:
            for e in events[i : k + 1]:
                e["round"] = f"r{i}"
        i = k + 1
    for e in events:
        e.pop("_resp", None)
    return header("build"), events
