"""
From an agent's tool call to a proctor proposal, and from what the tool
returned to a :class:`~proctor.runtime.ToolResult`.

Shell tools become ``run_command``, file writes ``write_file``, edits
``edit_file``, reads ``read_file``, web fetches ``fetch`` and searches
``search``; any other tool keeps its name and arguments (an undeclared tool is
a read identified by both, as in a recorded trajectory). Paths are made
relative to the workspace after resolving symbolic links and ``..``, so a
protected path is judged on the file that would really be written.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from proctor.runtime._hosting.hooks.agents import HookEvent
from proctor.runtime._records import ToolCall, ToolResult, ToolStatus

__all__ = ("Mapped", "map_call", "map_result", "patch_paths")

_SHELL = {"Bash", "run_shell_command", "shell", "exec_command", "local_shell", "container.exec"}
_WRITE = {"Write", "write_file"}
_EDIT = {"Edit", "replace", "edit_file", "edit"}
_MULTI_EDIT = {"MultiEdit"}
_PATCH = {"apply_patch", "ApplyPatch"}
_READ = {"Read", "read_file", "view_image"}
_FETCH = {"WebFetch", "web_fetch"}
_SEARCH = {"WebSearch", "google_web_search", "web_search"}
_PATH_KEYS = ("file_path", "path", "absolute_path", "notebook_path", "filePath")
_PATCH_FILE = re.compile(
    r"^\*\*\* (?:Add|Update|Delete) File: (.+?)\s*$|^\*\*\* Move to: (.+?)\s*$"
)


@attrs.frozen
class Mapped:
    """
    An agent's tool call as proctor sees it.

    Args:
        call: the proposal.
        writes: the workspace-relative paths it writes (resolved), for the
            protected-path check; a shell command's writes cannot be known.
        outside: a path it names that resolves outside the workspace, if any.
    """

    call: ToolCall
    writes: tuple[str, ...] = ()
    outside: str | None = None


def _relative(workspace: Path, cwd: str, value: str) -> tuple[str, bool]:
    """A path as the tool would resolve it, relative to the workspace; and whether inside."""
    base = Path(cwd) if os.path.isabs(cwd) else workspace
    resolved = Path(os.path.realpath(base / value))
    root = Path(os.path.realpath(workspace))
    try:
        return resolved.relative_to(root).as_posix() or ".", True
    except ValueError:
        return str(resolved), False


def patch_paths(patch: str) -> list[str]:
    """The files an ``apply_patch`` envelope adds, updates, deletes or moves to."""
    found = []
    for line in patch.splitlines():
        match = _PATCH_FILE.match(line)
        if match:
            found.append(match[1] or match[2])
    return found


def _command(args: Mapping[str, Any]) -> str | list[str] | None:
    for key in ("command", "cmd"):
        value = args.get(key)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return list(value)
    return None


def map_call(event: HookEvent, workspace: Path) -> Mapped:
    """Map the tool call of a ``pre_tool`` or ``post_tool`` event to a proposal."""
    name, args = event.tool_name, dict(event.tool_input)
    outside: str | None = None

    def path_of(value: str) -> str:
        nonlocal outside
        rel, inside = _relative(workspace, event.cwd, value)
        if not inside and outside is None:
            outside = rel
        return rel

    raw_path = next((args[k] for k in _PATH_KEYS if isinstance(args.get(k), str)), None)
    if name in _SHELL and _command(args) is not None:
        return Mapped(ToolCall("run_command", {"cmd": _command(args)}))
    if name in _PATCH or (name in _SHELL and isinstance(args.get("patch"), str)):
        patch = next((v for k, v in args.items() if isinstance(v, str) and "*** " in v), "")
        paths = tuple(path_of(p) for p in patch_paths(patch))
        first = paths[0] if paths else "."
        call = ToolCall("edit_file", {"path": first, "patch": patch})
        return Mapped(call, paths, outside)
    if raw_path is not None and name in _WRITE:
        path = path_of(raw_path)
        content = args.get("content", "")
        return Mapped(ToolCall("write_file", {"path": path, "content": content}), (path,), outside)
    if raw_path is not None and name in _EDIT:
        path = path_of(raw_path)
        edit = {
            "path": path,
            "old": args.get("old_string", args.get("old", "")),
            "new": args.get("new_string", args.get("new", "")),
        }
        if args.get("replace_all"):
            edit["replace_all"] = True
        return Mapped(ToolCall("edit_file", edit), (path,), outside)
    if raw_path is not None and name in _MULTI_EDIT:
        path = path_of(raw_path)
        return Mapped(
            ToolCall("edit_file", {"path": path, "edits": args.get("edits", [])}), (path,), outside
        )
    if raw_path is not None and name in _READ:
        return Mapped(ToolCall("read_file", {"path": path_of(raw_path)}), (), outside)
    if name in _FETCH and isinstance(args.get("url"), str):
        return Mapped(ToolCall("fetch", {"url": args["url"]}))
    if name in _SEARCH and isinstance(args.get("query"), str):
        return Mapped(ToolCall("search", {"query": args["query"]}))
    # Any other tool: by name and arguments. A path it names that leads out of the
    # workspace is still reported, and one it may write (NotebookEdit) is judged.
    writes: tuple[str, ...] = ()
    if raw_path is not None:
        path = path_of(raw_path)
        if "edit" in name.lower() or "write" in name.lower():
            writes = (path,)
    return Mapped(ToolCall(name, args), writes, outside)


_EXIT = re.compile(r"^(?:Exit code|Exit Code|exit code):?\s*(-?\d+)", re.MULTILINE)
_PGID = re.compile(r"^Process Group PGID: \d+\s*$", re.MULTILINE)
_UNTRUSTED = re.compile(r"</?untrusted_context>")


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def map_result(event: HookEvent) -> ToolResult:
    """Map what a ``post_tool`` event says the tool returned."""
    response = event.tool_response
    if event.error is not None:
        # Claude's PostToolUseFailure: "Exit code 3\n<output>".
        found = _EXIT.search(event.error)
        code = int(found[1]) if found else None
        return ToolResult(ToolStatus.ERROR, event.error, code)
    if isinstance(response, dict):
        if "stdout" in response or "stderr" in response:
            out = _as_text(response.get("stdout")) + _as_text(response.get("stderr"))
            if response.get("interrupted"):
                return ToolResult(ToolStatus.UNCERTAIN, out)
            return ToolResult(ToolStatus.OK, out, 0)
        if "llmContent" in response or "error" in response:
            # gemini-cli: the model's view, without the volatile process group line.
            text = _PGID.sub("", _UNTRUSTED.sub("", _as_text(response.get("llmContent")))).strip()
            found = _EXIT.search(text)
            code = int(found[1]) if found else None
            error = response.get("error")
            if error or (code not in (None, 0)):
                return ToolResult(ToolStatus.ERROR, text or _as_text(error), code)
            return ToolResult(ToolStatus.OK, text, code)
        return ToolResult(ToolStatus.OK, _as_text(response))
    text = _as_text(response)
    found = _EXIT.search(text)
    code = int(found[1]) if found else None
    status = ToolStatus.ERROR if code not in (None, 0) else ToolStatus.OK
    return ToolResult(status, text, code)
