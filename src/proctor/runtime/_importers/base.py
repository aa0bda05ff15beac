"""
What every importer shares: the error, loading JSON and JSON Lines, trimming,
the events a trajectory holds, the ``changed`` rule for shell commands, the
mapping of editor tools, and SWE-bench harness reports.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from proctor._errors import TranscriptError

__all__ = (
    "FORMATS",
    "MAX_OUTPUT",
    "Converted",
    "TranscriptError",
    "args_json",
    "dump_jsonl",
    "editor_action",
    "find_report",
    "get",
    "header",
    "load_json",
    "load_jsonl",
    "make_action",
    "make_message",
    "make_outcome",
    "make_shell",
    "req",
    "set_rounds",
    "shell_may_change",
    "swebench_verdict",
    "text_of",
    "trim",
)

#: The format names ``proctor import`` and :func:`detect_format` use.
FORMATS = ("sweagent", "mini", "openhands", "claude", "codex", "gemini", "inspect")

#: A converted transcript: the trajectory header and its events (format v1).
Converted = tuple[dict[str, Any], list[dict[str, Any]]]

# Tool outputs are trimmed to keep converted files small.  The same rule everywhere:
# keep the first and last MAX_OUTPUT//2 characters, join with a marker.
MAX_OUTPUT = 2000


# --------------------------------------------------------------------------
# common helpers
# --------------------------------------------------------------------------


def trim(value: Any, limit: int | None = None) -> str:
    """
    Return a text no longer than ``limit`` (default :data:`MAX_OUTPUT`; 0 keeps all):
    its first and last halves with a marker that says how much was left out.
    Deterministic: equal texts stay equal.
    """
    limit = MAX_OUTPUT if limit is None else limit
    if value is None:
        return ""
    text: str
    if isinstance(value, str):
        text = value
    else:
        text = (
            json.dumps(value, ensure_ascii=False)
            if not isinstance(value, bytes)
            else value.decode("utf-8", "replace")
        )
    if limit and len(text) > limit:
        h = limit // 2
        return (
            text[:h]
            + f"\n[... {len(text) - 2 * h} characters trimmed by importer ...]\n"
            + text[-h:]
        )
    return text


def header(kind: str = "build", checks: Sequence[str] | None = None) -> dict[str, Any]:
    task: dict[str, Any] = {"kind": kind}
    if checks:
        task["checks"] = list(checks)
    return {"format": "proctor.trajectory", "version": 1, "task": task}


def req(cond: object, path: str | Path, where: str, expected: str) -> None:
    if not cond:
        raise TranscriptError(path, where, expected)


def get(
    d: Any,
    key: str,
    typ: type | tuple[type, ...] | None,
    path: str | Path,
    where: str,
    default: Any = ...,
    what: str | None = None,
) -> Any:
    """d[key] checked for type; raises TranscriptError when missing / wrong."""
    if not isinstance(d, dict):
        raise TranscriptError(path, where, f"a JSON object (got {type(d).__name__})")
    if key not in d or d[key] is None:
        if default is not ...:
            return default
        raise TranscriptError(path, where, f"field {key!r}" + (f" ({what})" if what else ""))
    v = d[key]
    if typ is not None and not isinstance(v, typ):
        names = typ.__name__ if isinstance(typ, type) else "/".join(t.__name__ for t in typ)
        raise TranscriptError(
            path, where, f"field {key!r} of type {names} (got {type(v).__name__})"
        )
    return v


def load_json(path: str | Path) -> Any:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise TranscriptError(path, "file", f"a readable file ({e.strerror})") from None
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise TranscriptError(path, f"byte {e.start}", "UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise TranscriptError(
            path, f"line {e.lineno} column {e.colno}", f"valid JSON ({e.msg})"
        ) from None


def load_jsonl(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise TranscriptError(path, "file", f"a readable file ({e.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TranscriptError(path, f"byte {e.start}", "UTF-8 text") from None
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append((n, json.loads(line)))
        except json.JSONDecodeError as e:
            raise TranscriptError(
                path, f"line {n}", f"one JSON value per line ({e.msg} at column {e.colno})"
            ) from None
        if not isinstance(rows[-1][1], dict):
            raise TranscriptError(path, f"line {n}", "a JSON object")
    return rows


def args_json(s: Any, path: str | Path, where: str) -> dict[str, Any]:
    if isinstance(s, dict):
        return s
    if s is None or s == "":
        return {}
    if not isinstance(s, str):
        raise TranscriptError(path, where, "tool arguments as a JSON object or JSON string")
    try:
        v = json.loads(s)
    except json.JSONDecodeError:
        return {"raw": s}
    return v if isinstance(v, dict) else {"value": v}


def dump_jsonl(hdr: dict[str, Any], events: Sequence[dict[str, Any]], out: str | Path) -> None:
    with open(out, "w", encoding="utf-8") as f:
        f.write(json.dumps(hdr, ensure_ascii=False) + "\n")
        for e in events:
            f.write(json.dumps(e, ensure_ascii=False) + "\n")


# --------------------------------------------------------------------------
# the `changed` heuristic for shell commands
# --------------------------------------------------------------------------

_WRITE_CMDS = {
    "mv",
    "cp",
    "rm",
    "rmdir",
    "touch",
    "mkdir",
    "ln",
    "chmod",
    "chown",
    "patch",
    "truncate",
    "install",
    "unzip",
    "rsync",
    "shred",
    "tee",
    "dd",
}
_GIT_WRITE = {
    "apply",
    "checkout",
    "reset",
    "restore",
    "stash",
    "am",
    "cherry-pick",
    "revert",
    "merge",
    "rebase",
    "pull",
    "clean",
    "mv",
    "rm",
    "switch",
}
_FORMATTERS = {"black", "isort", "gofmt", "autopep8", "yapf", "prettier", "rustfmt"}
PY_WRITE = re.compile(
    r"""open\([^)]*['"][wax]b?\+?['"]|\.write_text\(|\.write_bytes\(|\.write\(|shutil\.(copy|move|rmtree)|os\.(remove|unlink|rename|replace|makedirs|mkdir)"""
)
_REDIRECT = re.compile(r"(?<![<>&\d])(?:\d|&)?>>?\|?\s*(?!&)([^\s;&|<>()]+)")


def _strip_quotes(cmd: str) -> str:
    """Remove quoted strings (so `grep '>' f` is not a redirection)."""
    out, i, n = [], 0, len(cmd)
    while i < n:
        c = cmd[i]
        if c in "'\"":
            j = cmd.find(c, i + 1)
            if j < 0:
                break
            out.append("Q")
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def shell_may_change(cmd: object) -> bool:
    """True when a shell command may change files in the workspace.

    A conservative syntactic rule (see NOTES.md): output redirections to
    paths outside /dev, heredocs written into files, in-place editors
    (sed -i, perl -i), file-manipulating commands (mv cp rm touch mkdir tee
    patch ...), git subcommands that rewrite the work tree, formatters in
    write mode, and `python -c` / heredoc python whose code writes files.
    Read-only commands (cat grep ls find head tail ...) are not marked.
    """
    if not isinstance(cmd, str) or not cmd.strip():
        return False
    bare = _strip_quotes(cmd)
    # redirections: > file, >> file, &> file; not 2>&1, not > /dev/null
    for m in _REDIRECT.finditer(bare):
        target = m.group(1)
        if target.startswith("/dev/") or (False):
            continue
        return True
    # heredoc python / -c code writing files
    if (
        re.search(r"\bpython[\d.]*\b", cmd)
        and (" -c" in cmd or "<<" in cmd)
        and PY_WRITE.search(cmd)
    ):
        return True
    for seg in re.split(r"&&|\|\||[;|\n]", bare):
        words = seg.strip().split()
        while words and (
            re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0])
            or words[0] in ("sudo", "env", "time", "nohup", "command", "xargs", "timeout")
            or re.match(r"^\d+[smh]?$", words[0])
        ):
            words = words[1:]
        if not words:
            continue
        w0 = os.path.basename(words[0])
        rest = words[1:]
        if w0 in _WRITE_CMDS:
            if w0 == "tee" and all(a.startswith(("/dev/", "-")) for a in rest):
                continue
            if w0 == "dd" and not any(a.startswith("of=") for a in rest):
                continue
            return True
        if w0 in ("sed", "perl") and any(
            a == "-i"
            or a.startswith(("-i", "--in-place"))
            or (a.startswith("-") and not a.startswith("--") and "i" in a[1:])
            for a in rest
        ):
            return True
        if w0 == "git" and rest:
            sub = [a for a in rest if not a.startswith("-")]
            if sub and sub[0] in _GIT_WRITE:
                return True
        if w0 == "tar" and rest and re.match(r"^-?[a-zA-Z]*x", rest[0]):
            return True
        checking = any(a in ("--check", "--diff", "-l", "--list") for a in rest)
        if (
            w0 in _FORMATTERS
            and not checking
            and (w0 != "prettier" or any(a in ("--write", "-w") for a in rest))
        ):
            return True
        if (w0 == "ruff" and "--fix" in rest) or (w0 == "ruff" and rest[:1] == ["format"]):
            return True
        if (
            w0 in ("npm", "yarn", "pnpm")
            and rest[:1]
            and rest[0] in ("install", "i", "add", "remove", "uninstall", "ci")
        ):
            return True
    return False


# --------------------------------------------------------------------------
# shared tool mapping
# --------------------------------------------------------------------------


def editor_action(a: dict[str, Any], path: str | None = None) -> tuple[str, dict[str, Any], bool]:
    """str_replace_editor / str_replace_based_edit_tool / text_editor args ->
    (tool, args, changed)."""
    cmd = a.get("command")
    p = a.get("path") or a.get("file_path") or path or ""
    if cmd == "create":
        return "write_file", {"path": p, "content": a.get("file_text", "") or ""}, False
    if cmd == "str_replace":
        return (
            "edit_file",
            {"path": p, "old": a.get("old_str", "") or "", "new": a.get("new_str", "") or ""},
            False,
        )
    if cmd == "view":
        args = {"path": p}
        if a.get("view_range"):
            return "view_file", {"path": p, "view_range": a.get("view_range")}, False
        return "read_file", args, False
    if cmd == "insert":
        return (
            "insert_text",
            {"path": p, "line": a.get("insert_line"), "text": a.get("new_str", a.get("text", ""))},
            True,
        )
    if cmd == "undo_edit":
        return "undo_edit", {"path": p}, True
    return "str_replace_editor", dict(a), True


def make_outcome(status: str, output: Any, exit_code: int | None = None) -> dict[str, Any]:
    r: dict[str, Any] = {"status": status, "output": trim(output)}
    if exit_code is not None:
        r["exit_code"] = exit_code
    return r


def make_action(
    tool: str,
    args: dict[str, Any],
    result: dict[str, Any],
    changed: bool = False,
    rnd: str | int | None = None,
    poll: bool = False,
) -> dict[str, Any]:
    e: dict[str, Any] = {"type": "action", "tool": tool, "args": args, "result": result}
    if rnd is not None:
        e["round"] = rnd
    if changed:
        e["changed"] = True
    if poll:
        e["poll"] = True
    return e


def make_shell(cmd: str, result: dict[str, Any], rnd: str | int | None = None) -> dict[str, Any]:
    return make_action("run_command", {"cmd": cmd}, result, changed=shell_may_change(cmd), rnd=rnd)


def make_message(kind: str, text: Any) -> dict[str, Any]:
    return {"type": "message", "kind": kind, "text": trim(text, 4000)}


def set_rounds(actions: list[dict[str, Any]], rid: str) -> list[dict[str, Any]]:
    """Give a round id to a group only when it has more than one action."""
    if len(actions) > 1:
        for a in actions:
            a["round"] = rid
    return actions


def find_report(path: str | Path, iid: str | None = None) -> str | None:
    """A SWE-bench harness report beside a trajectory: <stem>.report.json,
    report.json, or ../logs/<iid>/report.json."""
    d = os.path.dirname(os.path.abspath(path))
    base = os.path.basename(path)
    stem = base.split(".traj")[0]
    for c in (os.path.join(d, stem + ".report.json"), os.path.join(d, "report.json")):
        if os.path.exists(c):
            return c
    if iid:
        c = os.path.join(d, "..", "..", "logs", iid, "report.json")
        if os.path.exists(c):
            return c
    return None


def swebench_verdict(report_path: str | Path, iid: str | None = None) -> dict[str, Any]:
    """Verdict event from a SWE-bench harness report.json."""
    rep = load_json(report_path)
    req(isinstance(rep, dict) and rep, report_path, "top level", "an object keyed by instance id")
    if "resolved" in rep:  # per-instance report without the id key
        r = rep
        iid = iid or "instance"
    else:
        if iid is None or iid not in rep:
            iid = next(iter(rep))
        r = rep[iid]
    resolved = get(r, "resolved", bool, report_path, f"instance {iid}")
    fails = []
    ts = r.get("tests_status") or {}
    for k in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        fails += [f"{k} failed: {t}" for t in (ts.get(k) or {}).get("failure", [])]
    out = (
        "resolved"
        if resolved
        else (
            "\n".join(fails)
            or (
                "patch not applied"
                if not r.get("patch_successfully_applied", True)
                else "unresolved"
            )
        )
    )
    return {"type": "verdict", "check": "swebench", "passed": resolved, "output": trim(out)}


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(c.get("text", "") if isinstance(c, dict) else str(c) for c in content)
    return ""
