"""
What an agent's session has spent so far, read from its own transcript file.

None of the three agents puts token counts in a tool hook's input; each writes
them to the transcript file the input names (``transcript_path``):

- Claude Code: JSON Lines; each ``assistant`` entry's ``message.usage``
  (``input_tokens``, ``cache_creation_input_tokens``, ``cache_read_input_tokens``,
  ``output_tokens``), the same ``message.id`` repeated for each content block
  (counted once), and ``cost-state`` entries whose ``totalCostUSD`` is the
  session's cost as Claude Code prices it.
- Codex CLI: the rollout file; the last ``event_msg`` of type ``token_count``
  carries the session's ``info.total_token_usage``. No cost: the tokens are
  priced with the task's price table (the model is the hook input's ``model``).
- gemini-cli: JSON Lines; each ``gemini`` record's ``tokens`` (``input``,
  ``output``, ``thoughts``, ``tool``), one record rewritten as a turn grows
  (the last of each ``id`` counts). No cost: priced as for Codex.

Each file lags: the usage of the model call that asked for the tool being
judged is usually not written yet. It is charged at the next hook call.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from proctor.runtime._hosting.hooks.agents import Agent

__all__ = ("SessionSpend", "read_spend")

#: The most of a transcript that is read (its tail): bounded work per hook call.
READ_LIMIT = 64 * 1024 * 1024


@attrs.frozen
class SessionSpend:
    """
    A session's spend to date, as its agent recorded it.

    Args:
        tokens_in: input tokens (cached and cache-written ones included).
        tokens_out: output tokens (reasoning included).
        model: the model, to price the tokens when no cost is given.
        cost_usd: the cost the agent reported, if it reports one.
    """

    tokens_in: int = 0
    tokens_out: int = 0
    model: str | None = None
    cost_usd: float | None = None


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    try:
        with path.open("rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - READ_LIMIT))
            data = f.read()
    except OSError:
        return
    for raw in data.splitlines():
        try:
            item = json.loads(raw)
        except ValueError:
            continue  # a line being written, or the cut at the tail's start
        if isinstance(item, dict):
            yield item


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _claude(path: Path) -> SessionSpend:
    usage: dict[str, tuple[int, int]] = {}
    cost: float | None = None
    model: str | None = None
    for item in _lines(path):
        if item.get("type") == "cost-state":
            total = item.get("totalCostUSD")
            if isinstance(total, int | float) and not isinstance(total, bool):
                cost = float(total)
            continue
        message = item.get("message")
        if item.get("type") != "assistant" or not isinstance(message, dict):
            continue
        u = message.get("usage")
        if not isinstance(u, dict):
            continue
        key = str(message.get("id") or len(usage))
        tokens_in = (
            _int(u.get("input_tokens"))
            + _int(u.get("cache_creation_input_tokens"))
            + _int(u.get("cache_read_input_tokens"))
        )
        usage[key] = (tokens_in, _int(u.get("output_tokens")))
        if isinstance(message.get("model"), str):
            model = message["model"]
    return SessionSpend(
        sum(i for i, _ in usage.values()), sum(o for _, o in usage.values()), model, cost
    )


def _codex(path: Path, model: str | None) -> SessionSpend:
    last: dict[str, Any] | None = None
    for item in _lines(path):
        payload = item.get("payload")
        if item.get("type") == "event_msg" and isinstance(payload, dict):
            info = payload.get("info")
            if payload.get("type") == "token_count" and isinstance(info, dict):
                total = info.get("total_token_usage")
                if isinstance(total, dict):
                    last = total
    if last is None:
        return SessionSpend(model=model)
    return SessionSpend(_int(last.get("input_tokens")), _int(last.get("output_tokens")), model)


def _gemini(path: Path) -> SessionSpend:
    records: dict[str, tuple[int, int]] = {}
    model: str | None = None
    for item in _lines(path):
        tokens = item.get("tokens")
        if item.get("type") != "gemini" or not isinstance(tokens, dict):
            continue
        key = str(item.get("id") or len(records))
        records[key] = (
            _int(tokens.get("input")) + _int(tokens.get("tool")),
            _int(tokens.get("output")) + _int(tokens.get("thoughts")),
        )
        if isinstance(item.get("model"), str):
            model = item["model"]
    return SessionSpend(
        sum(i for i, _ in records.values()), sum(o for _, o in records.values()), model
    )


def read_spend(agent: Agent, transcript: str | None, model: str | None = None) -> SessionSpend:
    """
    Read a session's spend from its transcript (nothing spent when there is none yet).

    Args:
        agent: whose transcript it is.
        transcript: its path, from the hook input.
        model: the model the hook input names (Codex names it; the others'
            transcripts do).
    """
    if not transcript:
        return SessionSpend(model=model)
    path = Path(transcript)
    if agent == "claude":
        return _claude(path)
    if agent == "codex":
        return _codex(path, model)
    return _gemini(path)
