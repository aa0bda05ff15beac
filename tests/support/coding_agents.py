"""
Claude Code, Codex CLI and gemini-cli, run offline against the fake model
servers of :mod:`tests.support.fake_models`, with proctor installed as their
hooks by ``proctor hooks install``.

The binaries come from ``.ci/agents`` (``npm ci --prefix .ci/agents``, which
``.ci/run`` does), or from ``$PROCTOR_AGENTS_BIN``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.fake_models import FakeServer

REPO = Path(__file__).resolve().parents[2]
AGENTS = REPO / ".ci" / "agents"
BIN = Path(os.environ.get("PROCTOR_AGENTS_BIN") or AGENTS / "node_modules" / ".bin")
#: A guard only: a scripted run takes a few seconds.
TIME_LIMIT = 240


def binary(agent: str) -> Path:
    """The agent's command."""
    return BIN / agent


def missing(agent: str) -> str | None:
    """Why ``agent`` cannot run here, or None when it can."""
    path = binary(agent)
    if not path.exists():
        return f"{path} is not installed: npm ci --prefix .ci/agents"
    if shutil.which("node") is None and agent == "gemini":
        return "gemini-cli needs node on PATH"
    return None


@dataclass
class AgentRun:
    """What one agent run left."""

    proc: subprocess.CompletedProcess[str]
    workdir: Path
    home: Path
    extra: dict[str, Any] = field(default_factory=dict)


def _env(home: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
    }


def install(agent: str, task: Path, project: Path, journal: Path, codex_home: Path | None) -> None:
    """Install proctor as the agent's hooks the way a person does: the CLI."""
    args = [sys.executable, "-m", "proctor", "hooks", "install", agent, "--task", str(task)]
    args += ["--project", str(project), "--journal", str(journal)]
    if codex_home is not None:
        args += ["--codex-home", str(codex_home)]
    subprocess.run(args, check=True, capture_output=True, text=True, timeout=60)


def _codex_config(base_url: str) -> str:
    return f"""model = "gpt-5.1-codex"
model_provider = "fake"
approval_policy = "never"
sandbox_mode = "danger-full-access"

[model_providers.fake]
name = "fake"
base_url = "{base_url}/v1"
wire_api = "responses"
env_key = "FAKE_OPENAI_API_KEY"
"""


def codex_home() -> Path:
    """A fresh CODEX_HOME outside /tmp (Codex makes no helper binaries under /tmp)."""
    base = AGENTS / ".run"
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="codex-home-", dir=base))


def run_agent(
    agent: str,
    srv: FakeServer,
    workdir: Path,
    prompt: str,
    *,
    task: Path,
    journal: Path,
    extra_args: Sequence[str] = (),
) -> AgentRun:
    """Install proctor's hooks for ``agent`` and run it once on ``prompt`` in ``workdir``."""
    home = Path(tempfile.mkdtemp(prefix=f"{agent}-home-"))
    env = _env(home)
    if agent == "claude":
        install(agent, task, workdir, journal, None)
        args = [str(binary(agent)), "-p", prompt, "--output-format", "json", *extra_args]
        env |= {
            "ANTHROPIC_BASE_URL": srv.base_url,
            "ANTHROPIC_API_KEY": "dummy",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
        }
    elif agent == "codex":
        home = codex_home()
        (home / "config.toml").write_text(_codex_config(srv.base_url))
        install(agent, task, workdir, journal, home)
        args = [str(binary(agent)), "exec", "--skip-git-repo-check", "--json"]
        args += ["--dangerously-bypass-hook-trust", *extra_args, prompt]
        env = _env(home) | {"CODEX_HOME": str(home), "FAKE_OPENAI_API_KEY": "dummy"}
    elif agent == "gemini":
        (home / ".gemini").mkdir()
        settings = {
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "privacy": {"usageStatisticsEnabled": False},
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        }
        (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
        install(agent, task, workdir, journal, None)
        args = [str(binary(agent)), "-p", prompt, "--output-format", "json", "--yolo"]
        args += list(extra_args)
        env |= {
            "GEMINI_API_KEY": "dummy",
            "GOOGLE_GEMINI_BASE_URL": srv.base_url,
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
        }
    else:
        raise ValueError(agent)
    proc = subprocess.run(
        args,
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIME_LIMIT,
        stdin=subprocess.DEVNULL,
    )
    return AgentRun(proc, workdir, home)
