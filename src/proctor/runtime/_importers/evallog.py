"""
Inspect AI evaluation logs: ``.eval`` archives and ``.json`` logs, read as JSON.
"""

from __future__ import annotations

import json
import zipfile
import zlib
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
    make_action,
    make_message,
    make_outcome,
    make_shell,
    req,
    set_rounds,
    text_of,
    trim,
)

__all__ = ("import_inspect", "inspect_samples")

# --------------------------------------------------------------------------
# Inspect AI eval logs
# --------------------------------------------------------------------------


def inspect_samples(path: str | Path) -> list[Any]:
    """
    Return the samples of an Inspect log (``.eval`` archive or ``.json`` log), in
    the archive's name order.

    Raises:
        TranscriptError: the file is not a readable Inspect log.
    """
    p = str(path)
    if zipfile.is_zipfile(p):
        out: list[Any] = []
        try:
            with zipfile.ZipFile(p) as z:
                names = sorted(
                    n for n in z.namelist() if n.startswith("samples/") and n.endswith(".json")
                )
                for n in names:
                    try:
                        out.append(json.loads(z.read(n).decode("utf-8")))
                    except UnicodeDecodeError:
                        raise TranscriptError(p, n, "UTF-8 JSON") from None
                    except json.JSONDecodeError as e:
                        raise TranscriptError(p, n, f"valid JSON ({e.msg})") from None
        except (zipfile.BadZipFile, EOFError, zlib.error, OSError) as e:
            raise TranscriptError(p, "zip", f"a readable .eval archive ({e})") from None
        return out
    data = load_json(p)
    req(isinstance(data, dict), p, "top level", "an Inspect log object")
    samples: list[Any] = get(data, "samples", list, p, "top level", default=[])
    return samples


def _inspect_passed(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return v >= 1
    if isinstance(v, str):
        return v.upper() in ("C", "CORRECT", "TRUE", "PASS", "PASSED", "1")
    if isinstance(v, dict):
        return all(_inspect_passed(x) for x in v.values()) if v else False
    return False


def import_inspect(path: str | Path, index: int = 0) -> Converted:
    # Kept whole: one pass over the transcript's records, in order, keeping the state the next
    # record needs (the open call, the round).
    samples = inspect_samples(path)
    req(samples, path, "samples", "at least one sample")
    req(0 <= index < len(samples), path, f"sample {index}", f"a sample index below {len(samples)}")
    s = samples[index]
    where0 = (
        f"sample {s.get('id', index)} epoch {s.get('epoch', 1)}"
        if isinstance(s, dict)
        else f"sample {index}"
    )
    msgs = get(s, "messages", list, path, where0)
    results = {}
    for j, m in enumerate(msgs):
        req(isinstance(m, dict), path, f"{where0} messages[{j}]", "a message object")
        if m.get("role") == "tool":
            results[m.get("tool_call_id")] = m
    events, seen = [], False
    for j, m in enumerate(msgs):
        where = f"{where0} messages[{j}]"
        role = get(m, "role", str, path, where)
        content = m.get("content", "")
        text = (
            content
            if isinstance(content, str)
            else text_of([c for c in content if isinstance(c, dict)])
            if isinstance(content, list)
            else ""
        )
        if role == "user":
            if seen and text.strip():
                events.append({"type": "user", "text": trim(text, 4000)})
            continue
        if role != "assistant":
            continue
        seen = True
        tcs = m.get("tool_calls") or []
        req(isinstance(tcs, list), path, where + ".tool_calls", "a list")
        if text.strip() and not tcs:
            events.append(make_message("checkpoint", text))
        acts = []
        for k, tc in enumerate(tcs):
            w = f"{where}.tool_calls[{k}]"
            fn = get(tc, "function", str, path, w)
            a = get(tc, "arguments", dict, path, w, default={})
            r = results.get(tc.get("id"))
            if r is None:
                res = make_outcome("error", "no tool result recorded")
            else:
                err = r.get("error")
                out = r.get("content", "")
                out = (
                    out
                    if isinstance(out, str)
                    else text_of([c for c in out if isinstance(c, dict)])
                )
                if err:
                    et = err.get("type") if isinstance(err, dict) else str(err)
                    res = make_outcome(
                        "timeout" if et == "timeout" else "error",
                        (err.get("message", "") if isinstance(err, dict) else "") + "\n" + out,
                    )
                else:
                    res = make_outcome("ok", out)
            if fn == "submit":
                events.append(make_message("final_answer", a.get("answer", json.dumps(a))))
                continue
            if fn in ("bash", "shell"):
                acts.append(make_shell(a.get("cmd", a.get("command", "")), res))
            elif fn in ("text_editor", "str_replace_editor", "str_replace_based_edit_tool"):
                t, ta, ch = editor_action(a)
                acts.append(make_action(t, ta, res, changed=ch))
            elif fn == "python":
                code = a.get("code", "")
                acts.append(
                    make_action("python", {"code": code}, res, changed=bool(PY_WRITE.search(code)))
                )
            elif fn in ("web_browser_go",) and a.get("url"):
                acts.append(make_action("fetch", {"url": a["url"]}, res))
            elif fn in ("web_search",):
                acts.append(make_action("search", {"query": a.get("query", "")}, res))
            else:
                acts.append(make_action(fn, a, res))
        events.extend(set_rounds(acts, f"a{j}"))
    lim = s.get("limit")
    if lim:
        events.append({"type": "signal", "name": "deadline"})
    scores = s.get("scores") or {}
    req(isinstance(scores, dict), path, where0 + ".scores", "an object")
    checks = []
    for name, sc in scores.items():
        req(
            isinstance(sc, dict) and "value" in sc,
            path,
            f"{where0}.scores.{name}",
            "a score with 'value'",
        )
        v = {"type": "verdict", "check": name, "passed": _inspect_passed(sc["value"])}
        expl = sc.get("explanation") or ("value: " + json.dumps(sc["value"]))
        v["output"] = trim(str(expl))
        events.append(v)
        checks.append(name)
    return header("build", checks or None), events
