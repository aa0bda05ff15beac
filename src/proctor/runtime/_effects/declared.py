"""
Tools a task file declares (``[[tools]]``): a command template or an HTTP endpoint.

A **command template** is a program and its arguments with ``{name}``
placeholders (``run = ["grep", "-rn", "{pattern}", "{path}"]``). It never goes
through a shell: each placeholder is replaced inside its own argument. It runs
the way ``run_command`` runs (:func:`~proctor.runtime._tools.registry.run_workspace_command`),
so whatever confines ``run_command`` confines it too. An argument declared in
``paths`` must lie inside the workspace and is passed workspace-relative; a
value that would stand alone as an argument may not begin with ``-`` (it would
be read as an option); no value may hold a NUL character.

An **HTTP endpoint** is a URL template (``url = "http://127.0.0.1:9000/tickets/{id}"``)
and a method. Placeholders may stand only in the path and the query, and their
values are percent-encoded, so the agent cannot change the host. ``GET`` is a
read (through :class:`~proctor.runtime._effects.http.HttpGet`); a write method
sends the arguments the URL does not use as a JSON body, with the effect's
idempotency key (through :class:`~proctor.runtime._effects.http.HttpRequest`,
whose reconciler settles an uncertain outcome).

Each declaration names its effect class, the arguments that identify its
target (``targets``), those that identify a call for progress (``identity``)
and those that are workspace paths (``paths``).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from proctor._errors import ConfigError
from proctor.runtime._effects.http import WRITE_METHODS, HttpGet, HttpReconciler, HttpRequest
from proctor.runtime._records import ToolResult, ToolStatus
from proctor.runtime._tools.registry import Tool, ToolContext, run_workspace_command
from proctor.runtime._tools.spec import BUILTIN_SPECS, Effect, ToolSpec

__all__ = ("DeclaredTool", "declared_tools", "parse_tools")

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
_TYPES = ("string", "integer", "number", "boolean")
_KEYS = (
    "name",
    "description",
    "effect",
    "run",
    "url",
    "method",
    "args",
    "targets",
    "identity",
    "paths",
    "time_limit",
)


def _error(text: str) -> ToolResult:
    return ToolResult(ToolStatus.ERROR, text)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@attrs.frozen
class DeclaredTool:
    """
    A tool declared in a task file.

    Args:
        spec: its declaration (name, effect class, arguments, targets, identity, paths).
        run: the command template (a program and its arguments), or None.
        url: the URL template, or None.
        method: the HTTP method of an endpoint.
        time_limit: seconds a call may take; None: the task's ``command_time_limit``
            for a command, 30 for an endpoint.
    """

    spec: ToolSpec
    run: tuple[str, ...] | None = None
    url: str | None = None
    method: str = "GET"
    time_limit: float | None = None

    def describe(self) -> dict[str, Any]:
        """The declaration as the task file has it, for the journal."""
        props = self.spec.parameters.get("properties", {})
        data: dict[str, Any] = {
            "name": self.spec.name,
            "description": self.spec.description,
            "effect": self.spec.effect.value,
            "args": {k: v["type"] for k, v in props.items()},
            "targets": list(self.spec.targets),
            "paths": list(self.spec.paths),
        }
        if self.spec.identity is not None:
            data["identity"] = list(self.spec.identity)
        if self.run is not None:
            data["run"] = list(self.run)
        else:
            data["url"], data["method"] = self.url, self.method
        if self.time_limit is not None:
            data["time_limit"] = self.time_limit
        return data

    def tool(self) -> Tool:
        """Return the tool to register: the declaration and its implementation."""
        if self.run is not None:
            return Tool(self.spec, _Command(self))
        return Tool(self.spec, _Endpoint(self))


@attrs.frozen
class _Command:
    declared: DeclaredTool

    async def __call__(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        assert self.declared.run is not None
        values: dict[str, str] = {}
        for key, value in args.items():
            text = _text(value)
            if "\0" in text:
                return _error(f"refused: argument {key!r} holds a NUL character")
            if key in self.declared.spec.paths:
                text = ctx.workspace.relative(ctx.workspace.resolve(text))
            values[key] = text
        argv: list[str] = []
        for part in self.declared.run:
            whole = _PLACEHOLDER.fullmatch(part)
            if whole is not None and values[whole[1]].startswith("-"):
                return _error(
                    f"refused: argument {whole[1]!r} may not begin with '-' "
                    "(it would be read as an option)"
                )
            argv.append(_PLACEHOLDER.sub(lambda m: values[m[1]], part))
        return await run_workspace_command(ctx, argv, self.declared.time_limit)


@attrs.frozen
class _Endpoint:
    declared: DeclaredTool
    reconciler: HttpReconciler = attrs.field(factory=HttpReconciler)

    async def __call__(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        declared = self.declared
        assert declared.url is not None
        used = set(_PLACEHOLDER.findall(declared.url))
        url = _PLACEHOLDER.sub(
            lambda m: urllib.parse.quote(_text(args[m[1]]), safe=""), declared.url
        )
        limit = declared.time_limit or 30.0
        if declared.method == "GET":
            return await HttpGet(limit).get(url)
        body = {k: v for k, v in args.items() if k not in used}
        request = HttpRequest(limit, reconciler=self.reconciler)
        return await request(ctx, {"method": declared.method, "url": url, "body": body})


def _strs(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: must be a list of strings, got {value!r}")
    return tuple(value)


def _names(value: Any, where: str, args: Mapping[str, str]) -> tuple[str, ...]:
    names = _strs(value, where)
    unknown = [n for n in names if n not in args]
    if unknown:
        raise ConfigError(
            f"{where}: {unknown[0]!r} is not one of the tool's args ({', '.join(args)})"
        )
    return names


def _one(raw: Any, where: str) -> DeclaredTool:
    # Kept whole: one declared tool's table is checked key by key, each error naming its key, in the
    # order a person reads the table.
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must be a table")
    for key in raw:
        if key not in _KEYS:
            raise ConfigError(f"{where}.{key}: unknown key; accepted: {', '.join(_KEYS)}")
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"{where}.name: a tool needs a name of letters, digits, _ and -")
    if name in BUILTIN_SPECS:
        raise ConfigError(f"{where}.name: {name!r} is a built-in tool; give the tool its own name")
    if ("run" in raw) == ("url" in raw):
        raise ConfigError(
            f"{where}: give run (a command template: a list of strings) or url "
            "(an HTTP endpoint), one of them"
        )
    args = raw.get("args", {})
    if not isinstance(args, dict) or not all(
        isinstance(k, str) and v in _TYPES for k, v in args.items()
    ):
        raise ConfigError(
            f"{where}.args: a table of argument names and types ({', '.join(_TYPES)}), "
            f'such as {{ pattern = "string" }}'
        )
    effect_text = raw.get("effect", "read")
    try:
        effect = Effect(effect_text)
    except ValueError:
        raise ConfigError(
            f"{where}.effect: must be one of {', '.join(e.value for e in Effect)}, "
            f"got {effect_text!r}"
        ) from None
    targets = _names(raw.get("targets", []), f"{where}.targets", args)
    paths = _names(raw.get("paths", []), f"{where}.paths", args)
    identity = _names(raw["identity"], f"{where}.identity", args) if "identity" in raw else None
    for bad in paths:
        if args[bad] != "string":
            raise ConfigError(f"{where}.paths: {bad!r} is a path, so its type must be string")
    time_limit = raw.get("time_limit")
    if time_limit is not None and (
        isinstance(time_limit, bool) or not isinstance(time_limit, int | float) or time_limit <= 0
    ):
        raise ConfigError(
            f"{where}.time_limit: must be a number of seconds > 0, got {time_limit!r}"
        )
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise ConfigError(f"{where}.description: must be a string")
    run: tuple[str, ...] | None = None
    url: str | None = None
    method = "GET"
    if "run" in raw:
        run = _strs(raw["run"], f"{where}.run")
        if not run:
            raise ConfigError(f"{where}.run: the program is missing")
        if _PLACEHOLDER.search(run[0]):
            raise ConfigError(f"{where}.run: the program itself may not be a placeholder")
        used = [m for part in run for m in _PLACEHOLDER.findall(part)]
        if "method" in raw:
            raise ConfigError(f"{where}.method: only an HTTP endpoint has a method")
    else:
        url = raw["url"]
        if not isinstance(url, str):
            raise ConfigError(f"{where}.url: must be a URL string")
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"{where}.url: must be an http or https URL, got {url!r}")
        if _PLACEHOLDER.search(f"{parts.scheme}://{parts.netloc}"):
            raise ConfigError(
                f"{where}.url: placeholders may stand in the path and query only, not the host"
            )
        method = str(raw.get("method", "GET")).upper()
        if method not in ("GET", *WRITE_METHODS):
            raise ConfigError(
                f"{where}.method: must be GET or one of {', '.join(WRITE_METHODS)}, got {method!r}"
            )
        if (method == "GET") != (effect is Effect.READ):
            raise ConfigError(
                f"{where}.effect: a GET endpoint is a read and a {', '.join(WRITE_METHODS)} "
                f"endpoint a write; {method} with effect {effect.value!r} does not fit"
            )
        if paths:
            raise ConfigError(f"{where}.paths: an HTTP endpoint has no workspace paths")
        used = _PLACEHOLDER.findall(url)
    unknown = [u for u in used if u not in args]
    if unknown:
        raise ConfigError(
            f"{where}: placeholder {{{unknown[0]}}} names no argument; declare it in args"
        )
    parameters = {
        "type": "object",
        "properties": {k: {"type": v} for k, v in args.items()},
        "required": list(args),
        "additionalProperties": False,
    }
    spec = ToolSpec(
        name,
        effect,
        description or f"The task's {name} tool.",
        parameters,
        targets=targets,
        paths=paths,
        identity=identity,
        changes_candidate=run is not None and effect is not Effect.READ,
    )
    return DeclaredTool(spec, run, url, method, None if time_limit is None else float(time_limit))


def parse_tools(raw: Any, where: str = "tools") -> tuple[DeclaredTool, ...]:
    """
    Check a task file's ``[[tools]]`` array and return its declarations.

    Raises:
        ConfigError: a declaration that is not valid; the message names the entry
            (``tools[2].run``) and what would be accepted.
    """
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: must be an array of tables: [[tools]]")
    tools = tuple(_one(entry, f"{where}[{n}]") for n, entry in enumerate(raw, start=1))
    names = [t.spec.name for t in tools]
    for n, name in enumerate(names, start=1):
        if name in names[: n - 1]:
            raise ConfigError(f"{where}[{n}].name: {name!r} is declared twice")
    return tools


def declared_tools(tools: Sequence[DeclaredTool]) -> list[Tool]:
    """Return the tools to register for the declarations."""
    return [t.tool() for t in tools]
