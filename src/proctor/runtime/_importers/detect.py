"""
Telling a transcript's format from its content, and dispatching to its importer.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from proctor.runtime._importers.base import (
    FORMATS,
    Converted,
    TranscriptError,
)
from proctor.runtime._importers.evallog import import_inspect
from proctor.runtime._importers.openhands import import_openhands
from proctor.runtime._importers.sessions import import_claude, import_codex, import_gemini
from proctor.runtime._importers.swe import import_mini, import_sweagent

__all__ = ("IMPORTERS", "detect_format", "import_file")

# --------------------------------------------------------------------------
# detection and dispatch
# --------------------------------------------------------------------------


def detect_format(path: str | Path) -> str:
    """
    Tell a transcript's format from its content (and, where the content is
    ambiguous, its name).

    Raises:
        TranscriptError: the file cannot be read or is none of :data:`FORMATS`.
    """
    # Kept whole: each format's signature is tried in order on one parsed file; the order is the
    # rule.
    p = str(path)
    if os.path.isdir(p):
        return "openhands"
    if zipfile.is_zipfile(p):
        try:
            with zipfile.ZipFile(p) as archive:
                names = archive.namelist()
        except (zipfile.BadZipFile, OSError):
            names = []
        if (
            "header.json" in names
            or any(n.startswith("samples/") for n in names)
            or "_journal/start.json" in names
        ):
            return "inspect"
        raise TranscriptError(p, "zip", "an Inspect .eval archive (header.json / samples/)")
    try:
        with open(p, "rb") as f:
            head = f.read(65536).decode("utf-8", "replace")
    except OSError as e:
        raise TranscriptError(p, "file", f"a readable file ({e.strerror})") from None
    s = head.lstrip()
    if not s:
        raise TranscriptError(p, "file", "a non-empty transcript")
    with open(p, "rb") as f:
        first = f.readline().decode("utf-8", "replace")
        while first and not first.strip():
            first = f.readline().decode("utf-8", "replace")
    # JSON Lines formats first: the first line is a complete JSON object
    try:
        row = json.loads(first)
    except json.JSONDecodeError:
        row = None
    if isinstance(row, dict) and (len(s.split("\n", 1)) > 1 or p.endswith(".jsonl")):
        if (
            row.get("type") in ("session_meta", "response_item", "turn_context", "event_msg")
            and "payload" in row
        ):
            return "codex"
        if ("sessionId" in row or "parentUuid" in row or "leafUuid" in row) and row.get("type") in (
            "user",
            "assistant",
            "summary",
            "system",
            "progress",
            "file-history-snapshot",
            "queue-operation",
        ):
            return "claude"
        if row.get("type") in ("summary", "file-history-snapshot", "queue-operation"):
            return "claude"
        if "history" in row and ("instance_id" in row or "instruction" in row or "issue" in row):
            return "openhands"
        if isinstance(row.get("kind"), str) and row["kind"].endswith("Event") and "source" in row:
            return "openhands"
        if "format" in row and row.get("format") == "proctor.trajectory":
            raise TranscriptError(
                p, "line 1", "a foreign transcript (this is already proctor trajectory v1)"
            )
    if p.endswith(".traj") or ('"trajectory"' in head and '"history"' in head):
        return "sweagent"
    if ('"trajectory_format"' in head and "mini-swe-agent" in head) or p.endswith(".traj.json"):
        return "mini"
    if '"projectHash"' in head or ('"sessionId"' in head and '"messages"' in head):
        return "gemini"
    if '"eval"' in head and ('"samples"' in head or '"results"' in head) and '"version"' in head:
        return "inspect"
    if s.startswith("["):
        if re.search(r'"(observation|action)"\s*:', head) and '"source"' in head:
            return "openhands"
        if '"kind"' in head and re.search(
            r'"(ActionEvent|MessageEvent|ObservationEvent|SystemPromptEvent)"', head
        ):
            return "openhands"
        if '"role"' in head and '"parts"' in head:
            return "gemini"
        if '"role"' in head and '"content"' in head:
            return "mini"
    raise TranscriptError(
        p, "file", "one of the formats " + ", ".join(FORMATS) + " (could not recognise it)"
    )


#: Each format's importer: a path (and options such as ``index``) to a trajectory.
IMPORTERS: dict[str, Callable[..., Converted]] = {
    "sweagent": import_sweagent,
    "mini": import_mini,
    "openhands": import_openhands,
    "claude": import_claude,
    "codex": import_codex,
    "gemini": import_gemini,
    "inspect": import_inspect,
}


# The options each importer takes besides the path.
_OPTIONS = {
    "sweagent": ("report",),
    "mini": ("report",),
    "openhands": ("index",),
    "inspect": ("index",),
}


def import_file(path: str | Path, fmt: str = "auto", **opts: Any) -> Converted:
    """
    Convert a transcript into a trajectory: its header and events.

    Args:
        path: the transcript (a file; for OpenHands V1 also a conversation directory).
        fmt: one of :data:`FORMATS`, or ``auto`` to tell it from the content.
        opts: ``index`` (which run of an OpenHands output or Inspect log, from 0) or
            ``report`` (a SWE-bench ``report.json`` for SWE-agent and mini-swe-agent
            runs, found beside the trajectory when not given).

    Raises:
        TranscriptError: the file is not what the format says, the format is not
            known, or an option does not apply to it.
    """
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt not in IMPORTERS:
        raise TranscriptError(path, "format", "one of " + ", ".join(FORMATS) + f" (got {fmt!r})")
    for key in opts:
        if key not in _OPTIONS.get(fmt, ()):
            takes = [name for name, keys in _OPTIONS.items() if key in keys]
            raise TranscriptError(
                path, key, f"no {key!r} option for the {fmt} format (only {', '.join(takes)})"
            )
    converted: Converted = IMPORTERS[fmt](path, **opts)
    return converted
