"""
Interactive agents' session files: Claude Code, Codex CLI and gemini-cli.
"""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from pathlib import Path
from typing import Any

from proctor.runtime._importers.base import (
    Converted,
    TranscriptError,
    args_json,
    get,
    header,
    load_json,
    load_jsonl,
    make_action,
    make_message,
    make_outcome,
    req,
    set_rounds,
    shell_may_change,
    text_of,
    trim,
)

__all__ = ("import_claude", "import_codex", "import_gemini")

# --------------------------------------------------------------------------
# Claude Code session JSONL
# --------------------------------------------------------------------------


def _claude_tool(name: str, inp: dict[str, Any]) -> list[tuple[str, dict[str, Any], bool]]:
    """-> list of (tool, args, changed)."""
    if name == "Bash":
        c = inp.get("command", "")
        return [("run_command", {"cmd": c}, shell_may_change(c))]
    if name == "Read":
        return [("read_file", {"path": inp.get("file_path", "")}, False)]
    if name == "Write":
        return [
            (
                "write_file",
                {"path": inp.get("file_path", ""), "content": inp.get("content", "")},
                False,
            )
        ]
    if name == "Edit":
        if inp.get("replace_all"):
            return [
                (
                    "edit_file_all",
                    {
                        "path": inp.get("file_path", ""),
                        "old": inp.get("old_string", ""),
                        "new": inp.get("new_string", ""),
                    },
                    True,
                )
            ]
        return [
            (
                "edit_file",
                {
                    "path": inp.get("file_path", ""),
                    "old": inp.get("old_string", ""),
                    "new": inp.get("new_string", ""),
                },
                False,
            )
        ]
    if name == "MultiEdit":
        return [
            (
                "edit_file",
                {
                    "path": inp.get("file_path", ""),
                    "old": e.get("old_string", ""),
                    "new": e.get("new_string", ""),
                },
                bool(e.get("replace_all")),
            )
            for e in inp.get("edits", [])
            if isinstance(e, dict)
        ]
    if name == "NotebookEdit":
        return [("notebook_edit", dict(inp), True)]
    if name == "WebFetch":
        return [("fetch", {"url": inp.get("url", "")}, False)]
    if name == "WebSearch":
        return [("search", {"query": inp.get("query", "")}, False)]
    return [(name, dict(inp), False)]


_CLAUDE_NOISE = re.compile(
    r"^\s*<(command-name|command-message|local-command-stdout|system-reminder|local-command-caveat)>"
)


def import_claude(path: str | Path) -> Converted:
    # Kept whole: one pass over the transcript's records, in order, keeping the state the next
    # record needs (the open call, the round).
    rows = load_jsonl(path)
    results: dict[str, tuple[int, Any, Any]] = {}
    for n, r in rows:
        if r.get("type") == "user":
            msg: Any = r.get("message")
            if isinstance(msg, dict) and isinstance(msg.get("content"), list):
                for b in msg["content"]:
                    if isinstance(b, dict) and b.get("type") == "tool_result":
                        req(
                            isinstance(b.get("tool_use_id"), str),
                            path,
                            f"line {n}",
                            "tool_result with a string 'tool_use_id'",
                        )
                        results[b["tool_use_id"]] = (n, b, r.get("toolUseResult"))
    events: list[dict[str, Any]] = []
    seen = False
    saw_any = False
    for n, r in rows:
        t = r.get("type")
        if t not in ("user", "assistant"):
            continue
        saw_any = True
        msg = r.get("message")
        req(isinstance(msg, dict), path, f"line {n}", f"a 'message' object in a {t} record")
        content = msg.get("content")
        req(
            isinstance(content, (str, list)),
            path,
            f"line {n}",
            "message.content as a string or a list of blocks",
        )
        if t == "user":
            if isinstance(content, list) and any(
                isinstance(b, dict) and b.get("type") == "tool_result" for b in content
            ):
                continue
            if r.get("isMeta") or r.get("isCompactSummary"):
                continue
            text = text_of(content)
            if not text.strip() or _CLAUDE_NOISE.match(text):
                continue
            if seen:
                events.append({"type": "user", "text": trim(text, 4000)})
            continue
        # assistant
        seen = True
        mid = msg.get("id") or r.get("requestId") or r.get("uuid")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for k, b in enumerate(content):
            req(
                isinstance(b, dict) and isinstance(b.get("type"), str),
                path,
                f"line {n} content[{k}]",
                "a content block with 'type'",
            )
            if b["type"] == "text" and b.get("text", "").strip():
                events.append(make_message("checkpoint", b["text"]))
            elif b["type"] == "tool_use":
                req(
                    isinstance(b.get("id"), str) and isinstance(b.get("name"), str),
                    path,
                    f"line {n} content[{k}]",
                    "tool_use with string 'id' and 'name'",
                )
                inp = b.get("input") or {}
                req(isinstance(inp, dict), path, f"line {n} content[{k}].input", "an object")
                _rn, res, tur = results.get(b["id"], (None, None, None))
                if res is None:
                    result = make_outcome("error", "no tool_result recorded")
                else:
                    out = text_of(res.get("content"))
                    code = None
                    m = re.search(r"(?:^|\n)(?:Error: )?Exit code (\d+)", out)
                    if m:
                        code = int(m.group(1))
                    if isinstance(tur, dict) and tur.get("interrupted"):
                        status = "timeout"
                    elif res.get("is_error"):
                        status = (
                            "timeout"
                            if re.search(r"timed out|Command timed out", out[:300], re.I)
                            else "error"
                        )
                    else:
                        status = "ok"
                    if b["name"] == "Bash" and status == "ok" and code is None:
                        code = 0
                    if b["name"] == "Bash" and status == "error" and code is None:
                        code = None
                    result = make_outcome(status, out, code if b["name"] == "Bash" else None)
                acts = [
                    make_action(tool, a, dict(result), changed=ch)
                    for tool, a, ch in _claude_tool(b["name"], inp)
                ]
                for a in acts:
                    a["_grp"] = mid
                events.extend(acts)
    req(saw_any, path, "file", "Claude Code 'user'/'assistant' records")
    _group_rounds(events)
    return header("build"), events


def _group_rounds(events: list[dict[str, Any]]) -> None:
    """Actions sharing a _grp (one model response) that are consecutive
    (text blocks between them allowed) form one round."""
    i = 0
    while i < len(events):
        g = events[i].get("_grp")
        if events[i]["type"] != "action" or g is None:
            i += 1
            continue
        k = i
        idx = [i]
        while (
            k + 1 < len(events)
            and events[k + 1]["type"] == "action"
            and events[k + 1].get("_grp") == g
        ):
            k += 1
            idx.append(k)
        if len(idx) > 1:
            for j in idx:
                events[j]["round"] = f"g{i}"
        i = k + 1
    for e in events:
        e.pop("_grp", None)


# --------------------------------------------------------------------------
# Codex CLI rollout JSONL
# --------------------------------------------------------------------------


def _codex_output(out: Any) -> tuple[str, int | None, str, bool]:
    """function_call_output.output -> (status, exit_code, text)."""
    success = None
    if isinstance(out, dict):
        success = out.get("success")
        out = out.get("content", out.get("output", ""))
        if isinstance(out, list):
            out = "\n".join(c.get("text", "") for c in out if isinstance(c, dict))
    if isinstance(out, list):
        out = "\n".join(c.get("text", "") for c in out if isinstance(c, dict))
    if not isinstance(out, str):
        out = json.dumps(out)
    code = None
    s = out.strip()
    if s.startswith("{"):
        try:
            j = json.loads(s)
            if isinstance(j, dict) and isinstance(j.get("metadata"), dict):
                code = j["metadata"].get("exit_code")
                out = j.get("output", out)
        except json.JSONDecodeError:
            pass
    m = re.search(r"(?:Process exited with code|Exit code:)\s*(-?\d+)", out)
    if m and code is None:
        code = int(m.group(1))
    running = "Process running with session ID" in out
    if re.search(r"timed out|command timed out", out[:500], re.I) and code in (None, 124, -1):
        return "timeout", code, out, running
    if code is not None:
        return ("ok" if code == 0 else "error"), code, out, running
    if success is False or re.match(r"^(error|failed|apply_patch verification failed)", s, re.I):
        return "error", None, out, running
    return "ok", None, out, running


def _codex_patch_actions(patch: str) -> list[tuple[str, dict[str, Any], bool]]:
    """apply_patch text -> list of (tool, args, changed)."""
    acts: list[tuple[str, dict[str, Any], bool]] = []
    cur: str | None = None
    op: str | None = None
    lines: list[str] = []

    def flush() -> None:
        if cur is None:
            return
        if op == "Add":
            acts.append(
                (
                    "write_file",
                    {
                        "path": cur,
                        "content": "\n".join(ln[1:] for ln in lines if ln.startswith("+")) + "\n",
                    },
                    False,
                )
            )
        elif op == "Delete":
            acts.append(("delete_file", {"path": cur}, False))
        else:
            hunks: list[list[str]] = []
            h: list[str] = []
            for ln in lines:
                if ln.startswith("@@"):
                    if h:
                        hunks.append(h)
                    h = []
                elif ln.startswith("*** Move to:"):
                    acts.append(
                        ("move_file", {"path": cur, "to": ln.split(":", 1)[1].strip()}, True)
                    )
                elif ln[:1] in ("+", "-", " "):
                    h.append(ln)
            if h:
                hunks.append(h)
            for h in hunks:
                old = "\n".join(ln[1:] for ln in h if ln[:1] in ("-", " "))
                new = "\n".join(ln[1:] for ln in h if ln[:1] in ("+", " "))
                acts.append(("edit_file", {"path": cur, "old": old, "new": new}, False))
            if not hunks:
                acts.append(("apply_patch", {"path": cur}, True))

    for ln in patch.splitlines():
        m = re.match(r"^\*\*\* (Add|Update|Delete) File: (.+)$", ln)
        if m:
            flush()
            op, cur, lines = m.group(1), m.group(2).strip(), []
        elif ln.startswith(("*** End Patch", "*** Begin Patch")):
            continue
        elif cur is not None:
            lines.append(ln)
    flush()
    return acts or [("apply_patch", {"patch": trim(patch)}, True)]


def _codex_shell_cmd(name: str, a: dict[str, Any]) -> str:
    c = a.get("command", a.get("cmd"))
    if isinstance(c, list):
        if (
            len(c) >= 3
            and c[0] in ("bash", "sh", "zsh", "/bin/bash", "/bin/sh")
            and c[1] in ("-lc", "-c")
        ):
            return str(c[2])
        return shlex.join(str(x) for x in c)
    return c if isinstance(c, str) else ""


_CODEX_NOISE = re.compile(
    r"^\s*(<environment_context>|<user_instructions>|# AGENTS\.md|<permissions instructions>"
    r"|<turn_aborted>|<user_shell_command>)"
)


def import_codex(path: str | Path) -> Converted:
    # Kept whole: one pass over the transcript's records, in order, keeping the state the next
    # record needs (the open call, the round).
    rows = load_jsonl(path)
    req(rows, path, "file", "at least one rollout line")
    outs: dict[str, tuple[int, Any]] = {}
    for n, r in rows:
        if "payload" in r and not isinstance(r["payload"], dict):
            raise TranscriptError(path, f"line {n}", "'payload' as an object")
        p = r.get("payload") if "payload" in r else r  # very old rollouts: bare items
        if not isinstance(p, dict):
            continue
        if p.get("type") in ("function_call_output", "custom_tool_call_output"):
            req(
                isinstance(p.get("call_id"), str),
                path,
                f"line {n}",
                f"{p.get('type')} with a string 'call_id'",
            )
            outs[p["call_id"]] = (n, p.get("output"))
    events, seen, rnd = [], False, 0
    in_calls = False
    has_response_items = any(r.get("type") == "response_item" for _, r in rows)
    for n, r in rows:
        typ = r.get("type")
        p = r.get("payload") if "payload" in r else r
        if not isinstance(p, dict):
            raise TranscriptError(path, f"line {n}", "an object payload")
        pt = p.get("type")
        if typ == "event_msg":
            if pt == "turn_aborted":
                events.append({"type": "signal", "name": "user_stop"})
            elif pt == "task_complete" and p.get("last_agent_message"):
                # the turn's closing assistant message was already a checkpoint
                for e in reversed(events):
                    if e["type"] == "message":
                        if e["kind"] == "checkpoint":
                            e["kind"] = "final_answer"
                        break
                    if e["type"] != "signal":
                        break
            continue
        if typ not in ("response_item", None) and has_response_items:
            continue
        if pt in ("function_call", "custom_tool_call", "local_shell_call"):
            if not in_calls:
                rnd += 1
                in_calls = True
            seen = True
            name = p.get("name") or ("shell" if pt == "local_shell_call" else "")
            cid = p.get("call_id") or p.get("id")
            req(isinstance(name, str) and name, path, f"line {n}", f"{pt} with a 'name'")
            if pt == "custom_tool_call":
                a = {"input": p.get("input", "")}
            elif pt == "local_shell_call":
                a = p.get("action") or {}
            else:
                a = args_json(p.get("arguments"), path, f"line {n} arguments")
            out = outs[cid][1] if isinstance(cid, str) and cid in outs else None
            if out is None:
                res = make_outcome("error", "no output recorded")
            else:
                st, code, text, _running = _codex_output(out)
                res = make_outcome(st, text, code)
            if name in ("shell", "container.exec", "shell_command", "exec_command", "local_shell"):
                cmd = _codex_shell_cmd(name, a)
                if "apply_patch" in cmd.split("\n", 1)[0] and "*** Begin Patch" in cmd:
                    for tool, ta, ch in _codex_patch_actions(cmd):
                        events.append(make_action(tool, ta, dict(res), changed=ch, rnd=rnd))
                else:
                    events.append(
                        make_action(
                            "run_command", {"cmd": cmd}, res, changed=shell_may_change(cmd), rnd=rnd
                        )
                    )
            elif name == "apply_patch":
                patch = a.get("input", a.get("patch", ""))
                for tool, ta, ch in _codex_patch_actions(patch if isinstance(patch, str) else ""):
                    events.append(make_action(tool, ta, dict(res), changed=ch, rnd=rnd))
            elif name == "write_stdin":
                chars = a.get("chars", "")
                events.append(
                    make_action(
                        "write_stdin",
                        {"session_id": a.get("session_id"), "chars": chars},
                        res,
                        poll=(chars == ""),
                        rnd=rnd,
                    )
                )
            else:
                events.append(make_action(name, a, res, rnd=rnd))
            continue
        if pt == "web_search_call":
            in_calls = False
            act = p.get("action") or {}
            events.append(
                make_action(
                    "search",
                    {"query": act.get("query", "")},
                    make_outcome("ok" if p.get("status") in (None, "completed") else "error", ""),
                )
            )
            continue
        if pt in ("function_call_output", "custom_tool_call_output", "reasoning"):
            continue
        in_calls = False
        if pt == "message":
            role = p.get("role")
            c = p.get("content")
            text = (
                text_of([x for x in c if isinstance(x, dict)])
                if isinstance(c, list)
                else (c if isinstance(c, str) else "")
            )
            if role == "assistant":
                if text.strip():
                    seen = True
                    events.append(make_message("checkpoint", text))
            elif role == "user" and text.strip() and not _CODEX_NOISE.match(text) and seen:
                events.append({"type": "user", "text": trim(text, 4000)})
    # actions of one round only when more than one action shares it

    cnt = Counter(e.get("round") for e in events if e["type"] == "action")
    for e in events:
        if e["type"] == "action" and "round" in e:
            if cnt[e["round"]] < 2:
                del e["round"]
            else:
                e["round"] = f"t{e['round']}"
    return header("build"), events


# --------------------------------------------------------------------------
# gemini-cli chat recording / checkpoint
# --------------------------------------------------------------------------


def _gemini_tool(name: str, a: dict[str, Any]) -> tuple[str, dict[str, Any], bool]:
    if name in ("run_shell_command", "shell"):
        c = a.get("command", "")
        return "run_command", {"cmd": c}, shell_may_change(c)
    if name == "write_file":
        return (
            "write_file",
            {"path": a.get("file_path", a.get("path", "")), "content": a.get("content", "")},
            False,
        )
    if name in ("replace", "edit"):
        if a.get("expected_replacements", 1) not in (1, None):
            return (
                "edit_file_all",
                {
                    "path": a.get("file_path", ""),
                    "old": a.get("old_string", ""),
                    "new": a.get("new_string", ""),
                },
                True,
            )
        return (
            "edit_file",
            {
                "path": a.get("file_path", ""),
                "old": a.get("old_string", ""),
                "new": a.get("new_string", ""),
            },
            False,
        )
    if name == "read_file":
        return (
            "read_file",
            {"path": a.get("absolute_path", a.get("file_path", a.get("path", "")))},
            False,
        )
    if name == "google_web_search":
        return "search", {"query": a.get("query", "")}, False
    if name == "web_fetch" and a.get("url"):
        return "fetch", {"url": a["url"]}, False
    return name, dict(a), False


def _gemini_result_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    parts = []
    for r in result or []:
        if isinstance(r, dict):
            fr = r.get("functionResponse")
            if isinstance(fr, dict):
                resp = fr.get("response") or {}
                parts.append(
                    resp.get("output", resp.get("error", json.dumps(resp)))
                    if isinstance(resp, dict)
                    else str(resp)
                )
            elif "text" in r:
                parts.append(r["text"])
    return "\n".join(str(p) for p in parts)


def import_gemini(path: str | Path) -> Converted:
    data = load_json(path)
    events = []
    if isinstance(data, list):  # checkpoint: Content[] (role/parts)
        return _import_gemini_checkpoint(path, data)
    msgs = get(data, "messages", list, path, "top level", what="the chat recording's messages")
    seen = False
    for i, m in enumerate(msgs):
        where = f"messages[{i}]"
        t = get(m, "type", str, path, where)
        content = m.get("content", "")
        if isinstance(content, list):
            content = "\n".join(c.get("text", "") for c in content if isinstance(c, dict))
        if t == "user":
            if (
                seen
                and isinstance(content, str)
                and content.strip()
                and not content.lstrip().startswith("/")
            ):
                events.append({"type": "user", "text": trim(content, 4000)})
            continue
        if t not in ("gemini", "model"):
            continue
        seen = True
        if isinstance(content, str) and content.strip():
            events.append(make_message("checkpoint", content))
        tcs = m.get("toolCalls") or []
        req(isinstance(tcs, list), path, where + ".toolCalls", "a list")
        acts = []
        for k, tc in enumerate(tcs):
            w = f"{where}.toolCalls[{k}]"
            name = get(tc, "name", str, path, w)
            a = get(tc, "args", dict, path, w, default={})
            st = tc.get("status")
            text = _gemini_result_text(tc.get("result"))
            code = None
            mm = re.search(r"Exit Code: (-?\d+)", text)
            if mm:
                code = int(mm.group(1))
            if st == "success":
                status = "ok" if code in (None, 0) else "error"
            elif st in ("error", "cancelled"):
                status = "error"
            else:
                raise TranscriptError(path, w + ".status", "'success', 'error' or 'cancelled'")
            tool, ta, ch = _gemini_tool(name, a)
            acts.append(
                make_action(
                    tool,
                    ta,
                    make_outcome(
                        status,
                        text or tc.get("resultDisplay") or "",
                        code if tool == "run_command" else None,
                    ),
                    changed=ch,
                )
            )
        events.extend(set_rounds(acts, f"m{i}"))
    return header("build"), events


def _import_gemini_checkpoint(path: str | Path, data: list[Any]) -> Converted:
    events: list[dict[str, Any]] = []
    pending: dict[Any, dict[str, Any]] = {}
    for i, c in enumerate(data):
        where = f"[{i}]"
        role = get(c, "role", str, path, where)
        parts = get(c, "parts", list, path, where)
        if role == "model":
            acts = []
            for k, p in enumerate(parts):
                if "functionCall" in p:
                    fc = get(p, "functionCall", dict, path, f"{where}.parts[{k}]")
                    tool, ta, ch = _gemini_tool(fc.get("name", ""), fc.get("args") or {})
                    a = make_action(
                        tool, ta, make_outcome("error", "no response recorded"), changed=ch
                    )
                    acts.append(a)
                    pending[fc.get("id") or fc.get("name")] = a
                elif p.get("text") and not p.get("thought"):
                    events.append(make_message("checkpoint", p["text"]))
            events.extend(set_rounds(acts, f"c{i}"))
        elif role == "user":
            for p in parts:
                fr = p.get("functionResponse") if isinstance(p, dict) else None
                if isinstance(fr, dict):
                    a = pending.pop(fr.get("id") or fr.get("name"), {})
                    if a:
                        resp = fr.get("response") or {}
                        err = "error" in resp
                        a["result"] = make_outcome(
                            "error" if err else "ok", resp.get("error", resp.get("output", ""))
                        )
    return header("build"), events
