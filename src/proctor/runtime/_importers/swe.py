"""
SWE-agent ``.traj`` files and mini-swe-agent ``.traj.json`` files.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

from proctor.runtime._importers.base import (
    Converted,
    args_json,
    editor_action,
    find_report,
    get,
    header,
    load_json,
    make_action,
    make_message,
    make_outcome,
    make_shell,
    req,
    shell_may_change,
    swebench_verdict,
)

__all__ = ("import_mini", "import_sweagent")

# --------------------------------------------------------------------------
# mini-swe-agent
# --------------------------------------------------------------------------

_MINI_BLOCK = re.compile(r"```(?:bash|mswea_bash_command)\s*\n(.*?)\n```", re.S)
_MINI_SUBMIT = ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "MINI_SWE_AGENT_FINAL_OUTPUT")
_LIMIT_EXITS = (
    "limitsexceeded",
    "timeexceeded",
    "costlimit",
    "exit_cost",
    "steplimit",
    "exit_step",
    "budget",
    "exit_total_execution_time",
    "exit_command_timeout",
)


def _mini_obs(text: str) -> tuple[int | None, str]:
    m = re.search(r"<returncode>\s*(-?\d+)\s*</returncode>", text)
    code = int(m.group(1)) if m else None
    out = re.sub(
        r"</?(returncode|output|output_head|output_tail|elided_chars|warning)>",
        "",
        re.sub(r"<returncode>.*?</returncode>", "", text, flags=re.S),
    )
    return code, out.strip()


def _mini_actions(m: dict[str, Any], path: str | Path, where: str) -> list[str]:
    """Commands of one assistant message: extra.actions (v2), tool_calls
    (v2 tool-calling models), else the single ```bash block (v1)."""
    extra: Any = m.get("extra") if isinstance(m.get("extra"), dict) else {}
    acts = extra.get("actions")
    if isinstance(acts, list) and acts:
        return [a.get("command", "") if isinstance(a, dict) else str(a) for a in acts]
    tcs = m.get("tool_calls") or []
    req(isinstance(tcs, list), path, where + ".tool_calls", "a list")
    if tcs:
        out = []
        for j, tc in enumerate(tcs):
            fn = get(tc, "function", dict, path, f"{where}.tool_calls[{j}]")
            a = args_json(fn.get("arguments"), path, f"{where}.tool_calls[{j}].arguments")
            out.append(a.get("command", a.get("cmd", "")))
        return out
    content = m.get("content", "")
    if isinstance(content, list):
        content = "\n".join(c.get("text", "") for c in content if isinstance(c, dict))
    blocks = _MINI_BLOCK.findall(content)
    return blocks if len(blocks) == 1 else []


def import_mini(path: str | Path, report: str | Path | None = None) -> Converted:
    # Kept whole: one pass over the transcript's records, in order, keeping the state the next
    # record needs (the open call, the round).
    data = load_json(path)
    info: Any = {}
    if isinstance(data, list):
        msgs = data
    else:
        msgs = get(data, "messages", list, path, "top level", what="the message list")
        info = data.get("info") or {}
        req(isinstance(info, dict), path, "info", "an object")
    events = []
    exit_status = str(info.get("exit_status") or "")
    i = 0
    while i < len(msgs):
        m = msgs[i]
        where = f"messages[{i}]"
        role = get(m, "role", str, path, where)
        content = m.get("content", "")
        if isinstance(content, list):
            content = "\n".join(c.get("text", "") for c in content if isinstance(c, dict))
        req(isinstance(content, str), path, where + ".content", "a string or a list of text parts")
        if role == "exit":
            ex = m.get("extra") if isinstance(m.get("extra"), dict) else {}
            exit_status = exit_status or str(ex.get("exit_status") or content)
            i += 1
            continue
        if role != "assistant":
            i += 1
            continue
        cmds = _mini_actions(m, path, where)
        if not cmds:
            events.append(make_message("checkpoint", content))  # a format error follows
            i += 1
            continue
        rnd = f"m{i}" if len(cmds) > 1 else None
        i += 1
        for cmd in cmds:
            obs = (
                msgs[i]
                if i < len(msgs)
                and isinstance(msgs[i], dict)
                and msgs[i].get("role") in ("user", "tool")
                else None
            )
            text = ""
            code = None
            if obs is not None:
                text = obs.get("content", "")
                if isinstance(text, list):
                    text = "\n".join(c.get("text", "") for c in text if isinstance(c, dict))
                req(
                    isinstance(text, str),
                    path,
                    f"messages[{i}].content",
                    "a string or a list of text parts",
                )
                ex = obs.get("extra") if isinstance(obs.get("extra"), dict) else {}
                code, out = _mini_obs(text)
                if isinstance(ex.get("returncode"), int):
                    code = ex["returncode"]
                i += 1
            if any(sv in cmd for sv in _MINI_SUBMIT):
                events.append(make_message("final_answer", text or "submitted"))
                continue
            if obs is None:
                res = make_outcome("error", "no observation recorded")
            elif code is None:
                res = make_outcome(
                    "timeout" if re.search(r"timed out|TimeoutExpired", text[:600]) else "error",
                    out,
                )
            else:
                res = make_outcome("ok" if code == 0 else "error", out, code)
            events.append(make_shell(cmd, res, rnd=rnd))
    if any(k in exit_status.lower().replace(" ", "") for k in _LIMIT_EXITS):
        events.append({"type": "signal", "name": "deadline"})
    iid = data.get("instance_id") if isinstance(data, dict) else None
    rep = report or find_report(path, iid)
    checks = None
    if rep:
        events.append(swebench_verdict(rep, iid))
        checks = ["swebench"]
    return header("build", checks), events


# --------------------------------------------------------------------------
# SWE-agent .traj
# --------------------------------------------------------------------------

_SWEA_READ = {
    "open",
    "goto",
    "scroll_up",
    "scroll_down",
    "search_file",
    "search_dir",
    "find_file",
    "filemap",
}
_SWEA_ERR = re.compile(
    r"^(Traceback \(most recent call last\)|Usage: |Error: |bash: .*: command not found"
    r"|.*: No such file or directory|Your proposed edit has introduced new syntax error)",
    re.M,
)


def _swea_action(
    action: str, path: str | Path, where: str
) -> tuple[str, dict[str, Any], bool, bool]:
    """SWE-agent action string -> (tool, args, changed, is_submit)."""
    a = action.strip()
    if not a:
        return "noop", {}, False, False
    first = a.split(None, 1)[0]
    rest = a[len(first) :].strip()
    if first == "submit":
        return "submit", {}, False, True
    if first in ("str_replace_editor", "str_replace_based_edit_tool"):
        try:
            toks = shlex.split(rest)
        except ValueError:
            return "str_replace_editor", {"raw": rest}, True, False
        args = {}
        if toks:
            args["command"] = toks[0]
        if len(toks) > 1:
            args["path"] = toks[1]
        k = None
        for t in toks[2:]:
            if t.startswith("--"):
                k = t[2:]
                args[k] = ""
            elif k:
                args[k] = t
                k = None
        tool, targs, ch = editor_action(args)
        return tool, targs, ch, False
    if first == "create":
        return "write_file", {"path": rest.split("\n")[0].strip(), "content": ""}, False, False
    if first == "edit":
        return "edit_lines", {"spec": rest}, True, False
    if first in ("insert", "append"):
        return "edit_lines", {"op": first, "text": rest}, True, False
    if first in _SWEA_READ:
        return first, {"args": rest}, False, False
    return "run_command", {"cmd": a}, shell_may_change(a), False


def import_sweagent(path: str | Path, report: str | Path | None = None) -> Converted:
    data = load_json(path)
    req(isinstance(data, dict), path, "top level", "a JSON object with 'trajectory' and 'info'")
    traj = get(data, "trajectory", list, path, "top level")
    info = get(data, "info", dict, path, "top level", default={})
    events = []
    for i, st in enumerate(traj):
        where = f"trajectory[{i}]"
        act = get(st, "action", str, path, where)
        obs = st.get("observation", "")
        if not isinstance(obs, str):
            obs = json.dumps(obs)
        thought = st.get("thought") or st.get("response") or ""
        tool, args, changed, is_submit = _swea_action(act, path, where)
        if is_submit:
            events.append(make_message("final_answer", thought or "submit"))
            continue
        if tool == "noop":
            events.append(make_message("checkpoint", thought))
            continue
        timeout = bool(re.search(r"timed out|EXECUTION TIMED OUT", obs[:500]))
        status = "timeout" if timeout else ("error" if _SWEA_ERR.search(obs[:2000]) else "ok")
        events.append(make_action(tool, args, make_outcome(status, obs), changed=changed))
    es = str(info.get("exit_status") or "")
    if any(k in es.lower() for k in _LIMIT_EXITS) or "exit_context" in es:
        events.append({"type": "signal", "name": "deadline"})
    rep = report or find_report(path, info.get("instance_id"))
    checks = None
    if rep:
        events.append(swebench_verdict(rep))
        checks = ["swebench"]
    return header("build", checks), events
