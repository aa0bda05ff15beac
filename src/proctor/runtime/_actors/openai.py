"""
An actor that is a model behind an OpenAI-compatible chat completions API.

Any server that speaks ``POST {base_url}/chat/completions`` with tool calling
will do: a hosted API, vLLM, the llama.cpp server, Ollama. See
``docs/hosting-agents.md``.

The conversation:

- the first observation (the goal) is the first user message, after the
  system message if there is one;
- the model's tool calls become proposals: one call a :class:`ToolCall`,
  several a :class:`Round`; the next observation answers them with one
  ``role: tool`` message per call, in order, carrying the result's status, exit
  code and output;
- five tools of proctor's own are offered beside the task's tools and become
  typed proposals: ``final_answer``, ``checkpoint``, ``complete``, ``escalate``
  and ``report_failure``. When a reply mixes them with ordinary calls, the
  ordinary calls are proposed first and each of proctor's own on a later turn,
  without asking the model again; the observation that answers one becomes its
  ``role: tool`` message;
- a reply with text and no tool call is a checkpoint, and the next observation
  is a user message;
- a tool call whose arguments are not a JSON object is not run: the model is
  told so in that call's ``role: tool`` message, and a reply where no call could
  be read is proposed as a checkpoint saying so, so the controller sees it.

Infrastructure failures are retried here, not by the model: transport errors,
time limits, HTTP 429 and 5xx, with capped exponential backoff and full jitter
(a ``Retry-After`` is honoured, capped); a reply that is not a chat completion
is retried once. Every retry is counted (:meth:`OpenAIActor.take_retries`). When
the retries are spent, or the server refuses the request (another 4xx),
:class:`~proctor.runtime._actors.process.ActorError` is raised and the run fails.

Usage is taken from each reply's ``usage`` (estimated from the text when a
server reports none) and handed over by :meth:`OpenAIActor.take_usage`;
:meth:`OpenAIActor.estimate` gives the reservation for the next request.
"""

from __future__ import annotations

import email.utils
import json
import math
import os
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, cast

import anyio
import attrs
import httpx

from proctor._boundary import dumps_utf8
from proctor._errors import ActorError, ConfigError
from proctor._logging import get_logger
from proctor.budgets._bucket import backoff
from proctor.budgets._usage import Usage
from proctor.runtime._records import (
    Claim,
    Completion,
    Message,
    MessageKind,
    Observation,
    ObservationKind,
    Proposal,
    Round,
    ToolCall,
    ToolResult,
)
from proctor.runtime._tools.registry import ToolRegistry
from proctor.runtime._tools.spec import ToolSpec

__all__ = (
    "DEFAULT_BASE_URL",
    "DEFAULT_SYSTEM",
    "SPECIAL_TOOLS",
    "OpenAIActor",
    "tool_result_text",
)

log = get_logger()

#: The API the actor talks to unless told otherwise.
DEFAULT_BASE_URL = "https://api.openai.com/v1"

#: The system message a model gets unless its task replaces it (``system`` in
#: the ``[actor]`` table; ``system = ""`` sends none). The first user message
#: then carries the goal, the tools, the checks, the protected paths and the budget.
DEFAULT_SYSTEM = (
    "You are a coding agent working under proctor. A controller, not you, decides "
    "when the run is over. Work with the tools you are offered; every call goes "
    "through the controller, which may refuse it (a protected path, a repeated call "
    "that made no progress, the budget). The checks named in the first message run on "
    "a frozen copy of the workspace and alone decide whether the work is done: when "
    "you believe it is, call complete. Never change a protected path. Do not repeat "
    "what already failed: try something new, or call escalate with what blocks you. "
    "Use checkpoint to note progress; it never ends the run."
)

# Characters of a response body quoted in an error.
_EXCERPT = 500
# Characters of one tool result kept in the conversation: its head and its tail.
_RESULT_LIMIT = 40_000
# Characters per token, for estimates.
_CHARS_PER_TOKEN = 4
# Bound of the shielded cleanup.
_CLEANUP_LIMIT = 5.0

_STR: dict[str, Any] = {"type": "string"}
_STRS: dict[str, Any] = {"type": "array", "items": {"type": "string"}}


def _function(
    name: str, description: str, properties: dict[str, Any], required: list[str]
) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


#: proctor's own tools, offered beside the task's: they become typed proposals.
SPECIAL_TOOLS: tuple[dict[str, Any], ...] = (
    _function(
        "final_answer",
        "Give your final answer and the URLs it rests on. In a build task it asks for "
        "the checks to be run, like `complete`.",
        {"text": _STR, "sources": _STRS},
        ["text"],
    ),
    _function(
        "checkpoint",
        "Note your progress or your plan. It never ends the run.",
        {"text": _STR},
        ["text"],
    ),
    _function(
        "complete",
        "Say the work is done. The acceptance checks then run on the work as it stands; "
        "only passing checks end the run.",
        {"summary": _STR},
        ["summary"],
    ),
    _function(
        "escalate",
        "Say you are blocked or need input. Name the unmet condition, the evidence you "
        "already have, and why no action available to you can resolve it.",
        {
            "status": {"type": "string", "enum": ["blocked", "needs_input"]},
            "condition": _STR,
            "evidence": _STRS,
            "reason": _STR,
        },
        ["status", "condition", "reason"],
    ),
    _function(
        "report_failure",
        "Report that you cannot do the task, and what stands in the way.",
        {"text": _STR, "blockers": _STRS},
        ["text"],
    ),
)
_SPECIAL_NAMES = frozenset(tool["function"]["name"] for tool in SPECIAL_TOOLS)


def _clip(text: str, limit: int = _RESULT_LIMIT) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters left out ...]\n{text[-half:]}"


def tool_result_text(result: ToolResult) -> str:
    """
    Return what the model reads of one tool result: status, exit code, output.

    Args:
        result: the result.
    """
    head = f"status: {result.status.value}"
    if result.exit_code is not None:
        head += f", exit code {result.exit_code}"
    return f"{head}\n{_clip(result.output)}" if result.output else head


# --- what the model said ------------------------------------------------------------


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _strings(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list | tuple):
        return tuple(_text(v) for v in value)
    return (_text(value),)


def _content(value: Any) -> str:
    """The text of a message's content: a string, or a list of parts (some servers)."""
    if isinstance(value, list):
        return "".join(
            str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in value
        )
    return _text(value)


def _special(name: str, args: dict[str, Any]) -> tuple[Proposal, str]:
    """Turn a call of one of proctor's tools into a proposal, and a note for the model."""
    if name == "final_answer":
        text = _text(args.get("text"))
        return Message(MessageKind.FINAL_ANSWER, text, _strings(args.get("sources"))), ""
    if name == "checkpoint":
        return Message(MessageKind.CHECKPOINT, _text(args.get("text"))), ""
    if name == "complete":
        return Completion(_text(args.get("summary"))), ""
    if name == "report_failure":
        text = _text(args.get("text"))
        return Message(
            MessageKind.FAILURE_REPORT, text, blockers=_strings(args.get("blockers"))
        ), ""
    status = args.get("status")
    if status not in ("blocked", "needs_input"):
        note = (
            f"escalate needs status 'blocked' or 'needs_input', not {status!r}: "
            "it was recorded as a checkpoint"
        )
        return Message(MessageKind.CHECKPOINT, _text(args.get("reason")) or note), note
    claim = Claim(
        status,
        _text(args.get("condition")),
        _strings(args.get("evidence")),
        _text(args.get("reason")),
    )
    return claim, ""


def _arguments(raw: Any) -> tuple[dict[str, Any] | None, str, str]:
    """Return (arguments or None, their text, what is wrong with them)."""
    if raw is None:
        return {}, "{}", ""
    if isinstance(raw, dict):  # some servers send an object, not its JSON text
        return raw, json.dumps(raw, ensure_ascii=False), ""
    if not isinstance(raw, str):
        return None, json.dumps(raw), f"a {type(raw).__name__}, not a JSON object"
    if not raw.strip():
        return {}, raw, ""
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return None, raw, f"not valid JSON ({exc.msg} at character {exc.pos})"
    if not isinstance(value, dict):
        return None, raw, f"a JSON {type(value).__name__}, not a JSON object"
    return value, raw, ""


@attrs.frozen
class _Open:
    """A tool call of the last reply that the conversation has not answered yet."""

    id: str
    answer: Literal["result", "observation", "fixed"]
    content: str = ""


@attrs.frozen
class _Retry:
    """A failed attempt that may be repeated."""

    reason: str
    retry_after: float | None = None
    malformed: bool = False


def _retry_after(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks for: a number, or an HTTP date."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - time.time()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _excerpt(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _EXCERPT else text[:_EXCERPT] + "…"


def _completion_problem(data: Any) -> str | None:
    """What keeps ``data`` from being a chat completion with a message, or None."""
    if not isinstance(data, dict):
        return "the body is not a JSON object"
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return "the body has no choices"
    message = choices[0].get("message")
    if not isinstance(message, dict):
        return "the first choice has no message"
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        return "tool_calls is not a list"
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            return "a tool call has no function name"
    return None


# --- validation -----------------------------------------------------------------------


def _bad(name: str, message: str) -> ConfigError:
    return ConfigError(f"{name}: {message}")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_name(_: Any, attribute: attrs.Attribute[str], value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise _bad(attribute.name, f"must be a non-empty string, got {value!r}")


def _check_url(_: Any, attribute: attrs.Attribute[str], value: Any) -> None:
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise _bad(attribute.name, f"must be an http:// or https:// URL, got {value!r}")


def _check_optional_text(_: Any, attribute: attrs.Attribute[str | None], value: Any) -> None:
    if value is not None and not isinstance(value, str):
        raise _bad(attribute.name, f"must be a string, got {value!r}")


def _check_max_tokens(_: Any, attribute: attrs.Attribute[int], value: Any) -> None:
    if not _is_int(value) or value < 1:
        raise _bad(attribute.name, f"must be a whole number >= 1, got {value!r}")


def _check_field(_: Any, attribute: attrs.Attribute[str], value: Any) -> None:
    if value not in ("max_tokens", "max_completion_tokens"):
        raise _bad(
            attribute.name, f"must be 'max_tokens' or 'max_completion_tokens', got {value!r}"
        )


def _check_temperature(_: Any, attribute: attrs.Attribute[float | None], value: Any) -> None:
    if value is not None and (not _is_number(value) or not 0 <= value <= 2):
        raise _bad(attribute.name, f"must be a number from 0 to 2, got {value!r}")


def _check_seconds(_: Any, attribute: attrs.Attribute[float], value: Any) -> None:
    if not _is_number(value) or not 0 < value < math.inf:
        raise _bad(attribute.name, f"must be a positive number of seconds, got {value!r}")


def _check_backoff(_: Any, attribute: attrs.Attribute[float], value: Any) -> None:
    if not _is_number(value) or not 0 <= value < math.inf:
        raise _bad(attribute.name, f"must be a number of seconds >= 0, got {value!r}")


def _check_retries(_: Any, attribute: attrs.Attribute[int], value: Any) -> None:
    if not _is_int(value) or value < 0:
        raise _bad(attribute.name, f"must be a whole number >= 0, got {value!r}")


def _check_tools(_: Any, attribute: attrs.Attribute[tuple[ToolSpec, ...]], value: Any) -> None:
    names = [spec.name for spec in value]
    clash = sorted(set(names) & _SPECIAL_NAMES)
    if clash:
        raise _bad(attribute.name, f"{clash[0]!r} is the name of one of proctor's own tools")
    if len(set(names)) != len(names):
        raise _bad(attribute.name, f"tool names must be unique, got {names}")


def _default_tools() -> tuple[ToolSpec, ...]:
    return ToolRegistry.builtin().specs()


def _as_specs(value: Iterable[ToolSpec]) -> tuple[ToolSpec, ...]:
    return tuple(value)


_OPTIONS = (
    "kind",
    "model",
    "base_url",
    "api_key_env",
    "max_tokens",
    "max_tokens_field",
    "temperature",
    "system",
    "request_time_limit",
    "max_retries",
)


@attrs.define(eq=False)
class OpenAIActor:
    """
    A model behind an OpenAI-compatible chat completions API, proposing through tool calls.

    Use it as an async context manager, or call :meth:`aclose`, to close its
    connections; it also closes them itself when the run ends.

    Args:
        model: the model's name, as the server knows it.
        base_url: the API's base URL (``.../v1``); the actor posts to
            ``{base_url}/chat/completions``.
        api_key_env: the environment variable holding the API key, read at the
            first request. When it is unset, no ``Authorization`` header is sent
            (local servers need none); a server that then answers 401 or 403 fails
            the actor with an error naming the variable.
        tools: the task's tools (default: the built-in workspace tools). proctor's
            own five tools are added to them.
        system: the system message (default :data:`DEFAULT_SYSTEM`); None or ""
            sends none.
        max_tokens: the most tokens one reply may take.
        max_tokens_field: the request field that carries ``max_tokens``: the
            widely served ``max_tokens``, or ``max_completion_tokens`` for servers
            that require it.
        temperature: the sampling temperature (default: the server's).
        request_time_limit: seconds one request may take before it is abandoned
            and retried.
        max_retries: retries of one request at most (transport errors, time limits,
            HTTP 429 and 5xx; a malformed reply once).
        backoff_base: the first backoff bound, in seconds.
        backoff_cap: the largest backoff, in seconds; it also caps ``Retry-After``.
        transport: an httpx transport to send requests through (default: the network).
    """

    model: str = attrs.field(validator=_check_name)
    base_url: str = attrs.field(default=DEFAULT_BASE_URL, validator=_check_url)
    api_key_env: str = attrs.field(default="OPENAI_API_KEY", validator=_check_name)
    tools: tuple[ToolSpec, ...] = attrs.field(
        factory=_default_tools, converter=_as_specs, validator=_check_tools
    )
    # cast: with a plain str default, mypy would check the validator against str alone.
    system: str | None = attrs.field(
        default=cast("str | None", DEFAULT_SYSTEM), validator=_check_optional_text
    )
    max_tokens: int = attrs.field(default=4096, validator=_check_max_tokens)
    max_tokens_field: str = attrs.field(default="max_tokens", validator=_check_field)
    temperature: float | None = attrs.field(default=None, validator=_check_temperature)
    request_time_limit: float = attrs.field(default=120.0, validator=_check_seconds)
    max_retries: int = attrs.field(default=5, validator=_check_retries)
    backoff_base: float = attrs.field(default=0.5, validator=_check_backoff)
    backoff_cap: float = attrs.field(default=30.0, validator=_check_backoff)
    transport: httpx.AsyncBaseTransport | None = None
    #: Retries made since the actor was created.
    retries: int = attrs.field(default=0, init=False)
    #: Requests answered since the actor was created.
    requests: int = attrs.field(default=0, init=False)
    _messages: list[dict[str, Any]] = attrs.field(factory=list, init=False)
    _open: list[_Open] = attrs.field(factory=list, init=False)
    _queue: deque[tuple[str, Proposal, str]] = attrs.field(factory=deque, init=False)
    _user: list[str] = attrs.field(factory=list, init=False)
    _client: httpx.AsyncClient | None = attrs.field(default=None, init=False)
    _key: str | None = attrs.field(default=None, init=False)
    _key_read: bool = attrs.field(default=False, init=False)
    _tokens_in: int = attrs.field(default=0, init=False)
    _tokens_out: int = attrs.field(default=0, init=False)
    _costs: list[float | None] = attrs.field(factory=list, init=False)
    _untaken_retries: int = attrs.field(default=0, init=False)
    _ended: bool = attrs.field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        if self.backoff_base > self.backoff_cap:
            raise _bad(
                "backoff_cap",
                f"must be >= backoff_base ({self.backoff_base!r}), got {self.backoff_cap!r}",
            )

    @classmethod
    def from_options(
        cls, options: Mapping[str, Any], tools: Sequence[ToolSpec], where: str = ""
    ) -> OpenAIActor:
        """
        Build the actor of a task file's ``[actor]`` table with ``kind = "openai"``.

        Args:
            options: the table: ``model`` (required), ``base_url``, ``api_key_env``,
                ``max_tokens``, ``max_tokens_field``, ``temperature``, ``system``,
                ``request_time_limit``, ``max_retries``; ``kind`` may be present.
            tools: the task's tools.
            where: where the table came from (a file name), for error messages.

        Raises:
            ConfigError: an unknown key or a bad value; the message names the field
                (``actor.max_tokens``).
        """
        prefix = f"{where}: " if where else ""
        for key in options:
            if key not in _OPTIONS:
                raise ConfigError(
                    f"{prefix}actor.{key}: unknown key; an openai actor accepts "
                    f"{', '.join(_OPTIONS[1:])}"
                )
        if options.get("kind", "openai") != "openai":
            raise ConfigError(f"{prefix}actor.kind: expected 'openai', got {options['kind']!r}")
        if "model" not in options:
            raise ConfigError(
                f'{prefix}actor.model: an openai actor needs model = "NAME" '
                "(the model's name on the server)"
            )
        settings = {k: v for k, v in options.items() if k != "kind"}
        if _is_int(settings.get("request_time_limit")):
            settings["request_time_limit"] = float(settings["request_time_limit"])
        try:
            return cls(tools=tools, **settings)
        except ConfigError as exc:
            raise ConfigError(f"{prefix}actor.{exc}") from None

    # -- what the controller reads --------------------------------------------------

    def take_usage(self) -> Usage | None:
        """Return the tokens spent since the last call (and reset them), or None if none."""
        if not self._costs:
            return None
        costs = self._costs
        cost = sum(c for c in costs if c is not None) if None not in costs else None
        usage = Usage(self._tokens_in, self._tokens_out, self.model, cost)
        self._tokens_in = self._tokens_out = 0
        self._costs = []
        return usage

    def take_retries(self) -> int:
        """Return the retries made since the last call, and reset the count."""
        count, self._untaken_retries = self._untaken_retries, 0
        return count

    def estimate(self, observation: Observation) -> Usage:
        """
        Return the most the next request can spend, to reserve before sending ``observation``.

        The prompt is estimated at one token per four characters of the whole
        conversation (tools included) with the observation added; the reply may
        take ``max_tokens``. An observation that will be answered without a
        request (the run has ended, or a proposal is queued) needs nothing.

        Args:
            observation: the observation about to be sent.
        """
        if observation.disposition is not None or self._ended or self._queue:
            return Usage(0, 0, self.model)
        chars = len(json.dumps(self._messages, ensure_ascii=False))
        chars += len(json.dumps(self._tool_list(), ensure_ascii=False))
        if not self._messages:
            chars += len(self.system or "")
        chars += len(observation.text) + sum(map(len, self._user))
        chars += sum(len(tool_result_text(r)) for r in observation.results)
        return Usage(math.ceil(chars / _CHARS_PER_TOKEN), self.max_tokens, self.model)

    @property
    def messages(self) -> tuple[dict[str, Any], ...]:
        """The conversation so far, as sent to the server."""
        return tuple(self._messages)

    # -- the actor ------------------------------------------------------------------

    async def __aenter__(self) -> OpenAIActor:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP connections. A later request opens new ones."""
        client, self._client = self._client, None
        if client is not None:
            with anyio.move_on_after(_CLEANUP_LIMIT, shield=True):
                await client.aclose()

    async def propose(self, observation: Observation) -> Proposal | None:
        """
        Take in ``observation`` and return the model's next proposal.

        Returns None once the run has ended (the observation has a disposition).

        Raises:
            ActorError: the server failed after every retry, or refused the request.
        """
        if observation.disposition is not None or self._ended:
            self._ended = True
            await self.aclose()
            return None
        self._absorb(observation)
        if self._queue:
            call_id, proposal, note = self._queue.popleft()
            self._open = [_Open(call_id, "observation", note)]
            return proposal
        try:
            data = await self._request()
        except BaseException:
            await self.aclose()
            raise
        return self._reply(data)

    # -- the conversation -------------------------------------------------------------

    def _absorb(self, observation: Observation) -> None:
        """Add ``observation`` to the conversation: tool messages, then user text."""
        if not self._messages:
            if self.system:
                self._messages.append({"role": "system", "content": self.system})
            self._user.append(observation.text)
            return
        results = list(observation.results)
        answered = bool(self._open)
        for item in self._open:
            if item.answer == "fixed":
                content = item.content
            elif item.answer == "result" and results:
                content = tool_result_text(results.pop(0))
            else:
                content = "\n".join(p for p in (item.content, observation.text) if p)
            self._messages.append({"role": "tool", "tool_call_id": item.id, "content": content})
        self._open = []
        # Steering (a nudge) is said in words, beside the results it follows.
        if not answered or observation.kind is ObservationKind.NUDGE:
            self._user.append(observation.text)

    def _flush_user(self) -> None:
        # User text waits until every call of the last reply is answered: tool
        # messages must follow the reply that asked for them.
        texts = [t for t in self._user if t]
        self._user = []
        if texts:
            self._messages.append({"role": "user", "content": "\n\n".join(texts)})

    def _tool_list(self) -> list[dict[str, Any]]:
        offered = [
            {
                "type": "function",
                "function": {
                    "name": spec.name,
                    "description": spec.description,
                    "parameters": spec.parameters,
                },
            }
            for spec in self.tools
        ]
        return offered + list(SPECIAL_TOOLS)

    def _reply(self, data: dict[str, Any]) -> Proposal:
        """Add the model's reply to the conversation and turn it into a proposal."""
        message: dict[str, Any] = data["choices"][0]["message"]
        text = _content(message.get("content"))
        ordinary: list[tuple[str, ToolCall]] = []
        special: list[tuple[str, Proposal, str]] = []
        unreadable: list[tuple[str, str]] = []
        echoed: list[dict[str, Any]] = []
        for index, call in enumerate(message.get("tool_calls") or []):
            function = call["function"]
            name: str = function["name"]
            call_id = call.get("id")
            if not isinstance(call_id, str) or not call_id:
                call_id = f"call_{self.requests}_{index}"
            args, raw, problem = _arguments(function.get("arguments"))
            echoed.append(
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}}
            )
            if args is None:
                unreadable.append((call_id, f"{name}: the arguments were {problem}"))
            elif name in _SPECIAL_NAMES:
                special.append((call_id, *_special(name, args)))
            else:
                ordinary.append((call_id, ToolCall(name, args)))
        assistant: dict[str, Any] = {"role": "assistant", "content": text or None}
        if echoed:
            assistant["tool_calls"] = echoed
        else:
            assistant["content"] = text
        self._messages.append(assistant)

        fixed = [
            _Open(call_id, "fixed", f"not run: {problem}; send the arguments as a JSON object")
            for call_id, problem in unreadable
        ]
        if ordinary:
            self._open = [_Open(call_id, "result") for call_id, _ in ordinary] + fixed
            self._queue.extend(special)
            calls = tuple(call for _, call in ordinary)
            return calls[0] if len(calls) == 1 else Round(calls)
        if special:
            call_id, proposal, note = special[0]
            self._open = [*fixed, _Open(call_id, "observation", note)]
            self._queue.extend(special[1:])
            return proposal
        self._open = fixed
        if unreadable:
            problems = "; ".join(problem for _, problem in unreadable)
            return Message(MessageKind.CHECKPOINT, f"tool calls not run: {problems}")
        return Message(MessageKind.CHECKPOINT, text)

    # -- HTTP -------------------------------------------------------------------------

    def _api_key(self) -> str | None:
        if not self._key_read:
            self._key = os.environ.get(self.api_key_env) or None
            self._key_read = True
        return self._key

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                base_url=self.base_url.rstrip("/") + "/",
                transport=self.transport,
                timeout=httpx.Timeout(self.request_time_limit),
            )
        return self._client

    def _body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": self._messages,
            "tools": self._tool_list(),
            self.max_tokens_field: self.max_tokens,
        }
        if self.temperature is not None:
            body["temperature"] = self.temperature
        return body

    def _delay(self, retry: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.backoff_cap)
        return backoff(retry, self.backoff_base, self.backoff_cap)

    async def _request(self) -> dict[str, Any]:
        """Send the conversation; retry what is worth retrying; return the reply's body."""
        self._flush_user()
        body = self._body()
        retries = 0
        malformed = 0
        while True:
            outcome = await self._attempt(body)
            if isinstance(outcome, dict):
                self.requests += 1
                self._count_usage(outcome, body)
                return outcome
            if outcome.malformed:
                malformed += 1
            if retries >= self.max_retries or malformed > 1:
                tries = "once" if retries == 0 else f"{retries + 1} times"
                raise ActorError(
                    f"the model server at {self.base_url} failed {tries}: {outcome.reason}"
                )
            delay = self._delay(retries, outcome.retry_after)
            retries += 1
            self.retries += 1
            self._untaken_retries += 1
            log.info("openai.retry", retry=retries, delay=round(delay, 3), reason=outcome.reason)
            await anyio.sleep(delay)

    async def _attempt(self, body: dict[str, Any]) -> dict[str, Any] | _Retry:
        """Send one request; return the completion, or why it may be tried again."""
        key = self._api_key()
        headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
        headers["Content-Type"] = "application/json"
        response: httpx.Response | None = None
        try:
            with anyio.move_on_after(self.request_time_limit):
                response = await self._http().post(
                    "chat/completions", content=dumps_utf8(body), headers=headers
                )
        except httpx.TransportError as exc:
            return _Retry(f"{type(exc).__name__}: {exc or 'no detail'}")
        if response is None:
            return _Retry(f"no reply within the time limit of {self.request_time_limit:g} s")
        status = response.status_code
        excerpt = _excerpt(response.text)
        if status == 429 or status >= 500:
            wait = _retry_after(response.headers.get("retry-after"))
            return _Retry(f"HTTP {status}: {excerpt}", wait)
        if status in (401, 403) and key is None:
            raise ActorError(
                f"the model server at {self.base_url} answered HTTP {status}: it needs an API "
                f"key, and {self.api_key_env} is not set: set it to your key ({excerpt})"
            )
        if not 200 <= status < 300:
            raise ActorError(
                f"the model server at {self.base_url} refused the request: HTTP {status}: {excerpt}"
            )
        try:
            data = json.loads(response.content)
        except ValueError:
            return _Retry(f"the reply is not JSON: {excerpt}", malformed=True)
        problem = _completion_problem(data)
        if problem is not None:
            return _Retry(f"the reply is not a chat completion ({problem}): {excerpt}", None, True)
        result: dict[str, Any] = data
        return result

    def _count_usage(self, data: dict[str, Any], body: dict[str, Any]) -> None:
        usage = data.get("usage")
        if not isinstance(usage, dict):
            usage = {}
        tokens_in = _tokens(usage.get("prompt_tokens"))
        tokens_out = _tokens(usage.get("completion_tokens"))
        if tokens_in is None or tokens_out is None:
            # Spend must be charged even when a server does not report it.
            message = data["choices"][0]["message"]
            tokens_in = math.ceil(len(json.dumps(body, ensure_ascii=False)) / _CHARS_PER_TOKEN)
            tokens_out = math.ceil(len(json.dumps(message, ensure_ascii=False)) / _CHARS_PER_TOKEN)
            log.info("openai.usage_estimated", tokens_in=tokens_in, tokens_out=tokens_out)
        self._tokens_in += tokens_in
        self._tokens_out += tokens_out
        self._costs.append(_cost(usage.get("cost")))


def _cost(value: Any) -> float | None:
    """A reported cost in USD (some servers add ``usage.cost``), or None."""
    if _is_number(value) and 0 <= value < math.inf:
        return float(value)
    return None


def _tokens(value: Any) -> int | None:
    """A reported token count, or None when it is missing or not a count."""
    return value if _is_int(value) and value >= 0 else None
