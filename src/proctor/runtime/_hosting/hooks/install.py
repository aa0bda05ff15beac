"""
Writing an agent's hook settings so that it runs ``proctor hook`` (and taking
them out again), merged with whatever the settings file already holds.

- claude: ``PROJECT/.claude/settings.json``; project hooks run without a trust
  prompt in ``-p`` mode.
- codex: ``$CODEX_HOME/hooks.json`` (default ``~/.codex``) and ``[features]
  hooks = true`` in its ``config.toml``; hooks of the user layer run only once
  trusted (``/hooks`` in the TUI) or with ``--dangerously-bypass-hook-trust``.
- gemini: ``PROJECT/.gemini/settings.json``; project settings count only in a
  trusted folder; run it with ``--yolo``, or ``-p`` offers no shell or write tool.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import tomllib
from pathlib import Path
from typing import Any

from proctor._errors import ConfigError
from proctor.runtime._hosting.hooks.agents import Agent

__all__ = ("EVENTS", "hook_command", "install", "settings_path", "uninstall")

#: The events each agent is told to send to proctor.
EVENTS: dict[str, tuple[str, ...]] = {
    "claude": (
        "SessionStart",
        "UserPromptSubmit",
        "PreToolUse",
        "PostToolUse",
        "PostToolUseFailure",
        "Stop",
        "SubagentStop",
        "SessionEnd",
    ),
    "codex": ("SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop"),
    "gemini": (
        "SessionStart",
        "BeforeAgent",
        "BeforeTool",
        "AfterTool",
        "AfterAgent",
        "SessionEnd",
    ),
}
_TOOL_EVENTS = {"PreToolUse", "PostToolUse", "PostToolUseFailure", "BeforeTool", "AfterTool"}
#: Seconds an agent waits for one hook call: a stop runs the task's checks.
HOOK_TIMEOUT = 900
_MARK = "proctor hook "


def hook_command(agent: Agent, task: Path, journal: str) -> str:
    """The command line the agent runs for each hook call (absolute paths throughout)."""
    if "://" not in journal:
        journal = os.path.abspath(journal)
    # The interpreter's absolute path: no PATH lookup, no version-manager shim, per call.
    parts = [sys.executable, "-m", "proctor", "hook", agent, "--task", str(task.resolve())]
    return shlex.join([*parts, "--journal", journal])


def _codex_home(codex_home: Path | None) -> Path:
    if codex_home is not None:
        return codex_home
    env = os.environ.get("CODEX_HOME")
    return Path(env) if env else Path.home() / ".codex"


def settings_path(agent: Agent, project: Path, codex_home: Path | None = None) -> Path:
    """The settings file ``install`` writes for ``agent``."""
    if agent == "claude":
        return project / ".claude" / "settings.json"
    if agent == "codex":
        return _codex_home(codex_home) / "hooks.json"
    return project / ".gemini" / "settings.json"


def _read(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not a JSON settings file ({exc}); fix or move it") from None
    if not isinstance(data, dict) or not isinstance(data.get("hooks", {}), dict):
        raise ConfigError(f"{path}: expected a JSON object whose 'hooks' is an object")
    return data


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".proctor-tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _ours(group: Any) -> bool:
    hooks = group.get("hooks", []) if isinstance(group, dict) else []
    return any(_MARK in str(h.get("command", "")) for h in hooks if isinstance(h, dict))


def _strip(hooks: dict[str, Any]) -> None:
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept = [g for g in groups if not _ours(g)]
        if kept:
            hooks[event] = kept
        else:
            del hooks[event]


def _codex_feature(home: Path) -> Path:
    """Turn on ``[features] hooks`` in Codex's config.toml, keeping the rest of the file."""
    path = home / "config.toml"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc}); fix it first") from None
    features = data.get("features", {})
    if isinstance(features, dict) and features.get("hooks") is True:
        return path
    if isinstance(features, dict) and "hooks" in features:
        raise ConfigError(
            f"{path}: [features] hooks is set to {features['hooks']!r}: set it to true"
        )
    lines = text.splitlines()
    if "[features]" in (line.strip() for line in lines):
        at = [line.strip() for line in lines].index("[features]")
        lines.insert(at + 1, "hooks = true")
        text = "\n".join(lines) + "\n"
    else:
        text = (
            text
            + ("\n" if text and not text.endswith("\n") else "")
            + "\n[features]\nhooks = true\n"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def install(
    agent: Agent,
    task: Path,
    *,
    project: Path,
    journal: str,
    codex_home: Path | None = None,
) -> list[Path]:
    """
    Configure ``agent`` to call ``proctor hook`` for every event proctor answers,
    replacing an earlier proctor configuration and keeping everything else.

    Returns:
        The files written.

    Raises:
        ConfigError: a settings file exists and is not what its agent reads.
    """
    if agent not in EVENTS:
        raise ConfigError(f"unknown agent {agent!r}; known: claude, codex, gemini")
    if not task.is_file():
        raise ConfigError(f"{task}: no such task file")
    path = settings_path(agent, project, codex_home)
    data = _read(path)
    hooks = data.setdefault("hooks", {})
    _strip(hooks)
    command = hook_command(agent, task, journal)
    for event in EVENTS[agent]:
        handler: dict[str, Any] = {"type": "command", "command": command}
        if agent == "gemini":
            handler |= {"name": "proctor", "timeout": HOOK_TIMEOUT * 1000}
        else:
            handler["timeout"] = HOOK_TIMEOUT
        group: dict[str, Any] = {"hooks": [handler]}
        if event in _TOOL_EVENTS:
            group = {"matcher": "*" if agent == "claude" else ".*", **group}
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise ConfigError(f"{path}: hooks.{event} must be a list")
        groups.append(group)
    _write(path, data)
    written = [path]
    if agent == "codex":
        written.append(_codex_feature(_codex_home(codex_home)))
    return written


def uninstall(agent: Agent, *, project: Path, codex_home: Path | None = None) -> Path | None:
    """
    Take proctor's hooks out of ``agent``'s settings, keeping everything else.

    Returns:
        The file changed, or None when it held no proctor hook.
    """
    if agent not in EVENTS:
        raise ConfigError(f"unknown agent {agent!r}; known: claude, codex, gemini")
    path = settings_path(agent, project, codex_home)
    data = _read(path)
    hooks = data.get("hooks", {})
    before = json.dumps(hooks, sort_keys=True)
    _strip(hooks)
    if json.dumps(hooks, sort_keys=True) == before:
        return None
    if not hooks:
        data.pop("hooks", None)
    _write(path, data)
    return path
