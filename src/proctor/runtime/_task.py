"""
The task: what to do, where, what decides success, and what it may spend.

A task comes from Python (:class:`Task`) or from a TOML file
(:func:`load_task`, documented in ``docs/taskfile.md``).
"""

from __future__ import annotations

import fnmatch
import math
import re
import shutil
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs

from proctor._boundary import Limits, check_plain
from proctor._errors import ConfigError, InputRefused
from proctor.budgets._budget import Budget
from proctor.budgets._prices import Price, PriceTable
from proctor.runtime._effects.declared import DeclaredTool, declared_tools, parse_tools
from proctor.runtime._effects.sources import Allowlist, FetchConfig, SearchConfig, source_tools
from proctor.runtime._progress.judge import TaskFacts
from proctor.runtime._progress.normalize import normalize_path
from proctor.runtime._progress.policy import Policy
from proctor.runtime._tools.registry import ToolRegistry
from proctor.runtime._tools.sandbox import SandboxSettings
from proctor.runtime._tools.spec import ToolSpec, spec_for
from proctor.verifiers._candidate import DEFAULT_IGNORE
from proctor.verifiers._checks import CommandCheck, contract_version
from proctor.verifiers._more_checks import Check, FileCheck, JudgeCheck, ScopeCheck

__all__ = (
    "LIVE_RESCUE_LIMIT",
    "ActorSpec",
    "Approval",
    "Task",
    "TaskFile",
    "live_policy",
    "load_hosted_task",
    "load_task",
    "parse_task",
    "prepare_workspace",
)


@attrs.frozen
class Approval:
    """
    Calls of a tool that wait for a person's approval before they run.

    Args:
        tool: the tool's name.
        patterns: glob patterns matched against the call's target: the command
            of ``run_command`` (``git push*``), the path of a file tool
            (``src/**``), the URL of ``http`` or ``fetch``; ``*`` matches every call.
    """

    tool: str
    patterns: tuple[str, ...] = ("*",)

    def matches(self, tool: str, target: str | None) -> bool:
        """Whether a call of ``tool`` on ``target`` (None: no target) needs approval."""
        if tool != self.tool:
            return False
        if "*" in self.patterns:
            return True
        if target is None:
            return False
        from proctor.verifiers._candidate import matches

        return any(fnmatch.fnmatchcase(target, p) for p in self.patterns) or matches(
            normalize_path(target), self.patterns
        )


def _paths(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(normalize_path(p) for p in value)


def _resolved(value: str | Path) -> Path:
    return Path(value).resolve()


def _approval_rules(value: Iterable[Approval]) -> tuple[Approval, ...]:
    return tuple(value)


def _checks(value: Iterable[Check]) -> tuple[Check, ...]:
    return tuple(value)


def _describe_check(check: Check) -> dict[str, Any]:
    """A check as contract data: what it runs and how it decides."""
    data: dict[str, Any] = {"name": check.name, "required": check.required}
    if isinstance(check, CommandCheck):
        data |= {
            "kind": "command",
            "run": list(check.run) if not isinstance(check.run, str) else check.run,
            "expect_exit": check.expect_exit,
            "time_limit": check.time_limit,
            "junit": check.junit,
            "harness": list(check.harness),
            "not_harness": list(check.not_harness),
            "must_pass": list(check.must_pass),
        }
    elif isinstance(check, FileCheck):
        data |= {"kind": "files", "files": list(check.paths), "pattern": check.pattern}
    elif isinstance(check, ScopeCheck):
        data |= {"kind": "scope"}
    elif isinstance(check, JudgeCheck):
        data |= {"kind": "judge", "judge": getattr(check.judge, "__qualname__", "judge")}
    else:
        fn = getattr(check, "fn", check)
        data |= {"kind": "python", "fn": f"{fn.__module__}.{getattr(fn, '__qualname__', fn)}"}
    return data


def _strings(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _declared(value: Iterable[DeclaredTool]) -> tuple[DeclaredTool, ...]:
    return tuple(value)


_FETCH = ("allow", "time_limit", "max_bytes")


def _fetch(table: Mapping[str, Any], where: str = "fetch") -> FetchConfig:
    """A ``[fetch]`` table: ``allow`` (hosts or URL patterns), ``time_limit``, ``max_bytes``."""
    for key in table:
        if key not in _FETCH:
            raise ConfigError(f"{where}.{key}: unknown key; accepted: {', '.join(_FETCH)}")
    allow = table.get("allow", [])
    if not isinstance(allow, list) or not all(isinstance(a, str) for a in allow):
        raise ConfigError(
            f'{where}.allow: a list of hosts or URL patterns, such as ["docs.python.org"]'
        )
    extra = {k: table[k] for k in ("time_limit", "max_bytes") if k in table}
    return FetchConfig(Allowlist(tuple(allow)), **extra)


#: How many rescues a live run allows by default when the task names required files.
LIVE_RESCUE_LIMIT = 1


def live_policy(required_files: Iterable[str] = (), **settings: Any) -> Policy:
    """
    Return the policy of a live run that sets ``settings`` and no ``rescue_limit``.

    A live controller sees the workspace, so when the task names required files
    a stalled run is given :data:`LIVE_RESCUE_LIMIT` rescue before its
    ``no_progress`` stop (the rescue names the files still missing). A replay
    cannot know which files a recorded agent made, so a trajectory's policy keeps
    the contract's default, no rescue.

    Args:
        required_files: the task's required file patterns.
        settings: other policy settings (``rescue_limit`` among them is taken as it is).
    """
    if tuple(required_files) and "rescue_limit" not in settings:
        settings["rescue_limit"] = LIVE_RESCUE_LIMIT
    return Policy(**settings)


@attrs.frozen
class Task:
    """
    A task for an actor, and the contract that decides when it is done.

    Args:
        goal: what the actor should achieve, in words.
        workspace: the directory the actor works in; every tool is confined to it.
        kind: ``build`` (an artifact judged by checks) or ``answer`` (an answer
            judged by its grounding in fetched sources).
        checks: the acceptance checks, run by the verifier on a frozen candidate
            (:class:`CommandCheck`, :class:`FileCheck`, :class:`PythonCheck`,
            :class:`JudgeCheck`). A scope check is added when ``protected`` or
            ``scope`` is set. A build needs a required check that is not a judge.
        protected: glob patterns of paths the actor may not change (the checks, the tests).
        scope: glob patterns the change must stay within (empty: anywhere).
        required_files: glob patterns of files the result must contain.
        ignore: glob patterns left out of the candidate digest and snapshots.
        budget: the limits, kept by the accountant.
        policy: the no-progress policy. By default :func:`live_policy`: with
            ``required_files`` declared, a live run may rescue a stalled build once
            (``rescue_limit = 1``). A policy given is taken as it is.
        command_time_limit: seconds a ``run_command`` call may take before its
            process group is killed and its outcome recorded as uncertain.
        task_id: the task's identity; spend and history belong to it. A new run
            of the same task id inherits them.
        template: a directory the workspace is laid afresh from when a run starts
            (see :func:`prepare_workspace`); None uses the workspace as it is.
        prices: model prices for the cost of model calls (the built-in table,
            extended by a task file's ``[prices]``).
        answer_wait: seconds a run waits for a person's answer to a
            ``needs_input`` claim (working time paused); 0 ends the run
            ``needs_input`` at once, as past the wait.
        approvals: tool calls that wait for ``proctor approve`` / ``proctor deny``.
        approval_wait: seconds a call waits for approval; past it the call is refused.
        sandbox: how commands and checks are isolated (a task file's ``[sandbox]``).
        source: the task file it was loaded from, if any: kept out of the actor's
            reach like the journal.
        fetch: what the built-in ``fetch`` may read (an allowlist and limits);
            None: no ``fetch`` tool.
        search: the provider of the built-in ``search``; None: no ``search`` tool.
        tools: tools the task declares (command templates, HTTP endpoints).
        limits: the sizes that bound the work on what the actor sends (argument
            size, command length, file size written, output kept, snapshot size,
            nesting depth); see ``docs/robustness.md``.

    Raises:
        ConfigError: check names collide, a build has no required check, or the
            workspace is the filesystem's root.
    """

    goal: str
    workspace: Path = attrs.field(converter=_resolved)
    kind: Literal["build", "answer"] = "build"
    checks: tuple[Check, ...] = attrs.field(default=(), converter=_checks)
    protected: tuple[str, ...] = attrs.field(default=(), converter=_paths)
    scope: tuple[str, ...] = attrs.field(default=(), converter=_paths)
    required_files: tuple[str, ...] = attrs.field(default=(), converter=_paths)
    ignore: tuple[str, ...] = attrs.field(default=DEFAULT_IGNORE, converter=_strings)
    budget: Budget = attrs.field(factory=Budget)
    policy: Policy = attrs.field(
        default=attrs.Factory(lambda self: live_policy(self.required_files), takes_self=True)
    )
    command_time_limit: float = 120.0
    task_id: str | None = None
    template: Path | None = None
    prices: PriceTable = attrs.field(factory=PriceTable)
    limits: Limits = attrs.field(factory=Limits)
    answer_wait: float = 0.0
    approvals: tuple[Approval, ...] = attrs.field(default=(), converter=_approval_rules)
    approval_wait: float = 600.0
    sandbox: SandboxSettings = attrs.field(factory=SandboxSettings)
    source: Path | None = None
    fetch: FetchConfig | None = None
    search: SearchConfig | None = None
    tools: tuple[DeclaredTool, ...] = attrs.field(default=(), converter=_declared)

    def __attrs_post_init__(self) -> None:
        if self.workspace == Path(self.workspace.anchor):
            raise ConfigError(
                f"the workspace is {self.workspace}, the filesystem's root: freezing it would "
                "copy the whole filesystem; give the project's own directory"
            )
        for name in ("answer_wait", "approval_wait"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not (math.isfinite(value) and value >= 0)
            ):
                raise ConfigError(f"{name} must be a number of seconds >= 0, got {value!r}")
        names = [c.name for c in self.checks]
        if len(set(names)) != len(names):
            raise ConfigError(f"check names must be unique, got {names}")
        if len(self.all_checks()) > len(self.checks) and "scope" in names:
            raise ConfigError(
                "a check is named 'scope', the name of the scope check that protected paths "
                "imply: rename it"
            )
        if self.kind == "build" and not any(
            c.required and not isinstance(c, JudgeCheck | ScopeCheck) for c in self.checks
        ):
            raise ConfigError(
                "a build task needs at least one required check that is not a judge: "
                "only checks can complete a build"
            )

    def all_checks(self) -> tuple[Check, ...]:
        """
        The checks the verifier runs: the task's, and the scope check it implies
        (protected paths, a scope, or a command check, whose harness is fenced).
        """
        implied = (
            self.protected or self.scope or any(isinstance(c, CommandCheck) for c in self.checks)
        )
        if implied and not any(isinstance(c, ScopeCheck) for c in self.checks):
            return (*self.checks, ScopeCheck())
        return self.checks

    def harness(self) -> tuple[str, ...]:
        """The glob patterns of every command check's harness, for the scope check."""
        found: list[str] = []
        for check in self.checks:
            if isinstance(check, CommandCheck):
                found += check.harness_patterns(self.workspace)
        return tuple(dict.fromkeys(found))

    def contract(self) -> dict[str, Any]:
        """The acceptance contract as plain data: what decides success."""
        return {
            "kind": self.kind,
            "checks": [_describe_check(c) for c in self.all_checks()],
            "protected": list(self.protected),
            "scope": list(self.scope),
            "required_files": list(self.required_files),
        }

    @property
    def contract_version(self) -> str:
        """A digest of the contract's content."""
        return contract_version(self.contract())

    def facts(self, tools: Iterable[ToolSpec] = ()) -> TaskFacts:
        """
        What the decision core needs to know of this task.

        Args:
            tools: the declarations of the tools on offer (``ToolRegistry.specs()``):
                the controller and the decision core read the same ones, so a
                registered tool that writes a path is fenced like ``write_file``.
                Declarations equal to the built-in ones add nothing; the tools
                the task declares (``tools``) are always among them.
        """
        return TaskFacts(
            kind=self.kind,
            checks=tuple(c.name for c in self.all_checks() if c.required),
            protected=self.protected,
            required_files=self.required_files,
            tools={
                spec.name: spec
                for spec in (*(t.spec for t in self.tools), *tools)
                if spec != spec_for(spec.name)
            },
        )

    def registry(self) -> ToolRegistry:
        """The tools a run of this task offers: the built-in ones, and those it opted into."""
        registry = ToolRegistry.builtin()
        for tool in [*source_tools(self.fetch, self.search), *declared_tools(self.tools)]:
            registry.register(tool)
        return registry

    def describe(self) -> dict[str, Any]:
        """The task as plain data, for the journal."""
        return {
            "goal": self.goal,
            "workspace": str(self.workspace),
            "contract": self.contract(),
            "budget": {"limits": self.budget.limits, "reserve": self.budget.reserve},
            "policy": self.policy.settings(),
            "ignore": list(self.ignore),
            "command_time_limit": self.command_time_limit,
            "template": None if self.template is None else str(self.template),
            "limits": self.limits.settings(),
            "answer_wait": self.answer_wait,
            "approvals": [{"tool": a.tool, "patterns": list(a.patterns)} for a in self.approvals],
            "approval_wait": self.approval_wait,
            "sandbox": self.sandbox.describe(),
            "source": None if self.source is None else str(self.source),
            "fetch": None if self.fetch is None else self.fetch.describe(),
            "search": None if self.search is None else self.search.describe(),
            "tools": [t.describe() for t in self.tools],
            # The whole table, built-in prices included: a resumed run charges its
            # model calls as the first did, whatever this proctor's table says.
            "prices": {
                model: {"input": price.input_per_mtok, "output": price.output_per_mtok}
                for model, price in sorted(self.prices.prices.items())
            },
        }

    @classmethod
    def from_description(cls, data: Mapping[str, Any], task_id: str | None = None) -> Task:
        """
        Rebuild a task from what :meth:`describe` journaled.

        Command, file and scope checks are rebuilt; Python and judge checks live
        only in the code that made them and must be passed again (``resume(task=...)``).

        Raises:
            ConfigError: the description holds a check that cannot be rebuilt.
        """
        contract = data.get("contract") or {}
        checks: list[Check] = []
        for c in contract.get("checks", []):
            kind = c.get("kind", "command")
            if kind == "command":
                checks.append(
                    CommandCheck(
                        c["name"],
                        c["run"],
                        expect_exit=c.get("expect_exit", 0),
                        time_limit=c.get("time_limit", 600.0),
                        required=c.get("required", True),
                        junit=c.get("junit"),
                        harness=tuple(c.get("harness", ())),
                        not_harness=tuple(c.get("not_harness", ())),
                        must_pass=tuple(c.get("must_pass", ())),
                    )
                )
            elif kind == "files":
                checks.append(
                    FileCheck(
                        c["name"], tuple(c["files"]), c.get("pattern"), c.get("required", True)
                    )
                )
            elif kind == "scope":
                checks.append(ScopeCheck(c["name"], c.get("required", True)))
            else:
                raise ConfigError(
                    f"check {c.get('name')!r} is a {kind} check, which lives in code: "
                    "pass the task again to resume it"
                )
        budget = data.get("budget") or {}
        return cls(
            goal=data["goal"],
            workspace=data["workspace"],
            kind=contract.get("kind", "build"),
            checks=tuple(checks),
            protected=tuple(contract.get("protected", [])),
            scope=tuple(contract.get("scope", [])),
            required_files=tuple(contract.get("required_files", [])),
            ignore=tuple(data.get("ignore", DEFAULT_IGNORE)),
            budget=Budget(budget.get("limits", {}), budget.get("reserve", {})),
            policy=Policy.from_mapping(data.get("policy") or {}),
            command_time_limit=float(data.get("command_time_limit", 120.0)),
            task_id=task_id,
            limits=Limits.from_mapping(data.get("limits") or {}),
            template=None if data.get("template") is None else Path(data["template"]),
            answer_wait=float(data.get("answer_wait", 0.0)),
            approvals=tuple(
                Approval(a["tool"], tuple(a["patterns"])) for a in data.get("approvals", [])
            ),
            approval_wait=float(data.get("approval_wait", 600.0)),
            sandbox=SandboxSettings.from_mapping(data.get("sandbox") or {}),
            source=None if data.get("source") is None else Path(data["source"]),
            fetch=None if data.get("fetch") is None else _fetch(data["fetch"]),
            search=None
            if data.get("search") is None
            else SearchConfig.from_mapping(data["search"]),
            tools=parse_tools(data.get("tools") or []),
            prices=PriceTable()
            if data.get("prices") is None
            else PriceTable(
                {
                    model: Price(rates["input"], rates["output"])
                    for model, rates in data["prices"].items()
                }
            ),
        )


@attrs.frozen
class ActorSpec:
    """
    Which actor a task file asks for.

    Args:
        kind: ``scripted`` (proposals from a JSON Lines file), ``openai`` (an
            OpenAI-compatible chat model with tools) or ``process`` (an agent
            process speaking JSON lines). See ``docs/hosting-agents.md``.
        script: for ``scripted``, the script's path.
        options: the rest of the ``[actor]`` table.
    """

    def describe(self) -> dict[str, Any]:
        """The spec as plain data, journaled so that a resume can make the actor again."""
        data = {"kind": self.kind, **self.options}
        if self.script is not None:
            data["script"] = str(self.script)
        return data

    @classmethod
    def from_description(cls, data: Mapping[str, Any]) -> ActorSpec:
        """Rebuild a spec from :meth:`describe`'s data."""
        options = {k: v for k, v in data.items() if k not in ("kind", "script")}
        script = data.get("script")
        return cls(str(data["kind"]), None if script is None else Path(script), options)

    def make(self, tools: Sequence[ToolSpec] | None = None, already: int = 0) -> Any:
        """
        Make the actor.

        Args:
            tools: the declarations of the tools the run offers, for an actor that
                tells a model about them (default: the built-in ones); a task's are
                ``task.registry().specs()``.
            already: how many proposals the actor made in the task's earlier runs:
                a scripted actor goes on after them, not from its first line.

        Raises:
            ConfigError: the options do not make an actor.
        """
        if self.kind == "scripted":
            from proctor.runtime._actors.base import ScriptedActor

            if self.script is None:
                raise ConfigError("a scripted actor needs a script")
            return ScriptedActor.from_file(self.script, start=already)
        if self.kind == "openai":
            from proctor.runtime._actors.openai import OpenAIActor
            from proctor.runtime._tools.registry import ToolRegistry

            specs = ToolRegistry.builtin().specs() if tools is None else tuple(tools)
            return OpenAIActor.from_options(self.options, specs, "actor")
        if self.kind == "process":
            from proctor.runtime._actors.process import ProcessActor

            return ProcessActor.from_options(self.options, "actor")
        raise ConfigError(f"unknown actor kind {self.kind!r}; accepted: {', '.join(ACTOR_KINDS)}")

    kind: str
    script: Path | None = None
    options: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class TaskFile:
    """A loaded task file: the task and its actor."""

    path: Path
    task: Task
    actor: ActorSpec

    def make_actor(self) -> Any:
        """
        Make the file's actor, told of every tool the task offers.

        Raises:
            ConfigError: the options do not make an actor.
        """
        return self.actor.make(self.task.registry().specs())


_TOP = (
    "task",
    "checks",
    "contract",
    "budget",
    "policy",
    "actor",
    "prices",
    "limits",
    "approve",
    "sandbox",
    "fetch",
    "search",
    "tools",
)
_TASK = (
    "goal",
    "workspace",
    "kind",
    "id",
    "command_time_limit",
    "ignore",
    "template",
    "answer_wait",
)
_CHECK = (
    "name",
    "run",
    "expect_exit",
    "time_limit",
    "required",
    "junit",
    "files",
    "pattern",
    "harness",
    "not_harness",
    "must_pass",
)
_CONTRACT = ("protected", "scope", "required_files")


_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?")
_FIELD = re.compile(r"^(?P<table>[\w-]+)(?:\[(?P<n>\d+)\])?(?P<rest>(?:\.[\w:-]+)*)")
_PART = r'(?:"[^"]*"|[\w:-]+)'
_KEY = re.compile(rf"^\s*({_PART}(?:\s*\.\s*{_PART})*)\s*=")


def _parts(dotted: str) -> list[str]:
    return [p.strip().strip('"') for p in re.findall(_PART, dotted)]


class _Where:
    """Finds the line of a field (``task.kind``, ``checks[2].run``) in a TOML text."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.text = text
        self.lines = text.splitlines()

    def line_of(self, field: str) -> int | None:
        """
        The line that sets ``field``: its key in its own table, else the nearest
        enclosing key (an inline table), else the table's header.
        """
        m = _FIELD.match(field)
        if m is None:
            return None
        table, keys = m["table"], [k for k in m["rest"].split(".") if k]
        occurrence = int(m["n"] or 1)
        path: list[str] = []
        seen: dict[str, int] = {}
        header_line = enclosing = None
        for number, line in enumerate(self.lines, start=1):
            header = _HEADER.match(line)
            if header is not None:
                path = _parts(header[2])
                if len(path) == 1 or header[1] == "[[":
                    # [x] and [[x]] open a table; [x.y] continues table x.
                    seen[path[0]] = seen.get(path[0], 0) + 1
                if path[0] == table and seen.get(table) == occurrence:
                    header_line = header_line or number
                    if path[1:] == keys:
                        return number
                continue
            key = _KEY.match(line)
            if key is None:
                continue
            full = path + _parts(key[1])
            if full[0] != table or (path and seen.get(table) != occurrence):
                continue
            if full[1:] == keys:
                return number
            if len(full) > 1 and full[1:] == keys[: len(full) - 1]:
                enclosing = enclosing or number
        return enclosing or header_line

    def error(self, field: str, message: str) -> ConfigError:
        line = self.line_of(field)
        where = f"{self.path}:{line}" if line else str(self.path)
        return ConfigError(f"{where}: {field}: {message}")


def _named(message: str, table: str) -> str:
    """The field an error message from a nested parser names (``budget.reserve.steps``)."""
    dotted = re.search(rf"\b{table}((?:\.[\w:-]+)+)", message)
    if dotted:
        return table + dotted[1].rstrip(":")
    quoted = re.search(r"'([\w:-]+)'", message)
    return f"{table}.{quoted[1]}" if quoted else table


def _field_and_message(message: str) -> tuple[str, str]:
    """Split ``"tools[2].run: must be ..."`` into the field and what is wrong with it."""
    field, sep, rest = message.partition(": ")
    return (field, rest) if sep else ("", message)


def _message(message: str) -> str:
    return re.sub(
        r"^(budget|policy|prices|actor|sandbox|limits)(\.[\w:.\"-]*[\w\"-])?:?\s*", "", message
    )


def _table(where: _Where, data: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise where.error(key, "must be a table")
    return value


def _known(where: _Where, table: Mapping[str, Any], allowed: tuple[str, ...], name: str) -> None:
    for key in table:
        if key not in allowed:
            raise where.error(
                f"{name}.{key}" if name else key,
                f"unknown key; accepted: {', '.join(allowed)}",
            )


def _str_list(where: _Where, value: Any, field: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise where.error(field, f"must be a list of strings, got {value!r}")
    return value


ACTOR_KINDS = ("scripted", "openai", "process")

#: The limits a task file without a ``[budget]`` table gets (docs/taskfile.md):
#: no run loops forever because its author forgot to bound it.
DEFAULT_BUDGET_LIMITS: dict[str, float] = {"steps": 1000.0, "wall_seconds": 3600.0}

# A task file's data: plain, and nested no deeper than any task needs.
_FILE_LIMITS = Limits(depth=16)
# The longest path string a task file may give (PATH_MAX on Linux).
_PATH_CHARS = 4096


def _plain(where: _Where, data: Mapping[str, Any]) -> None:
    """Refuse what no field can hold: TOML dates and times, infinities, NaN, deep nesting."""
    for key, value in data.items():
        items = (
            list(enumerate(value, start=1)) if key == "checks" and isinstance(value, list) else []
        )
        parts = [(f"checks[{n}]", item) for n, item in items] or [(key, value)]
        for field, item in parts:
            try:
                check_plain(item, _FILE_LIMITS, field, max_chars=len(where.text) + 1)
            except InputRefused as exc:
                reason = exc.reason
                if "not plain data" in reason:
                    reason = reason.split(" is not plain data")[0] + (
                        " is not accepted here (a TOML date or time?): write it as a string"
                    )
                raise where.error(exc.where or field, reason) from None


def _path_text(where: _Where, value: Any, field: str) -> str:
    """A path string a task file gives: text, no NUL, no longer than a path can be."""
    if not isinstance(value, str) or not value:
        raise where.error(field, f"must be a path string (non-empty), got {value!r:.80}")
    if "\0" in value:
        raise where.error(field, "holds a NUL character, which no path can")
    if len(value) > _PATH_CHARS or any(len(part.encode()) > 255 for part in value.split("/")):
        raise where.error(
            field,
            f"is not a path this system can hold (at most {_PATH_CHARS} characters, "
            "255 bytes a name)",
        )
    return value


def _is_dir(where: _Where, path: Path, field: str) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError) as exc:
        raise where.error(field, f"{path} cannot be looked up: {exc}") from None


def _actor_spec(where: _Where, table: Mapping[str, Any], base: Path) -> ActorSpec:
    """Check an ``[actor]`` table now, so a bad one fails before anything runs."""
    kind = table.get("kind", "scripted")
    options = {k: v for k, v in table.items() if k != "kind"}
    if kind == "scripted":
        script = options.pop("script", None)
        if not isinstance(script, str):
            raise where.error("actor.script", 'a scripted actor needs script = "FILE.jsonl"')
        script_path = (base / _path_text(where, script, "actor.script")).resolve()
        try:
            found = script_path.is_file()
        except (OSError, ValueError) as exc:
            raise where.error("actor.script", f"{script_path} cannot be looked up: {exc}") from None
        if not found:
            raise where.error("actor.script", f"{script_path} does not exist")
        return ActorSpec(kind, script_path, options)
    try:
        if kind == "openai":
            from proctor.runtime._actors.openai import OpenAIActor
            from proctor.runtime._tools.registry import ToolRegistry

            OpenAIActor.from_options(options, ToolRegistry.builtin().specs(), where="actor")
        elif kind == "process":
            from proctor.runtime._actors.process import ProcessActor

            process = ProcessActor.from_options(options, where="actor", base=base)
            options["cwd"] = str(process.cwd) if process.cwd is not None else str(base)
        else:
            raise where.error(
                "actor.kind", f"unknown actor kind {kind!r}; accepted: {', '.join(ACTOR_KINDS)}"
            )
    except ConfigError as exc:
        if str(exc).startswith(str(where.path)):
            raise
        raise where.error(_named(str(exc), "actor"), _message(str(exc))) from None
    return ActorSpec(kind, None, options)


def _approvals(where: _Where, table: Mapping[str, Any]) -> tuple[tuple[Approval, ...], float]:
    """An ``[approve]`` table: ``TOOL = ["PATTERN", ...]`` and ``wait_seconds``."""
    wait = table.get("wait_seconds", 600.0)
    if (
        isinstance(wait, bool)
        or not isinstance(wait, int | float)
        or not (math.isfinite(wait) and wait >= 0)
    ):
        raise where.error("approve.wait_seconds", f"must be a number of seconds >= 0, got {wait!r}")
    rules = []
    for tool, patterns in table.items():
        if tool == "wait_seconds":
            continue
        field = f"approve.{tool}"
        if not _str_list(where, patterns, field) or not all(p.strip() for p in patterns):
            raise where.error(
                field,
                'must list non-empty glob patterns, e.g. ["git push*"] or ["*"] for every call',
            )
        rules.append(Approval(tool, tuple(patterns)))
    return tuple(rules), float(wait)


def parse_task(text: str, path: str | Path = "<task>") -> TaskFile:
    """
    Parse a task file's text. Relative paths are relative to the file's directory.

    Raises:
        ConfigError: the file is not valid TOML or a field is wrong; the message
            names the file, the line or field, and what would be accepted.
    """
    # Kept whole: one pass over a task file's tables, each error naming its line; it reads as the
    # file's layout.
    path = Path(path)
    where = _Where(path, text)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(
            f"{path}: not a task file: arrays or tables nested thousands deep "
            f"(at most {_FILE_LIMITS.depth} levels are accepted)"
        ) from None
    _known(where, data, _TOP, "")
    _plain(where, data)
    base = path.parent
    task = _table(where, data, "task")
    _known(where, task, _TASK, "task")
    goal = task.get("goal")
    if not isinstance(goal, str) or not goal.strip():
        raise where.error("task.goal", "required: a non-empty string saying what to achieve")
    workspace = _path_text(where, task.get("workspace", "."), "task.workspace")
    workspace_path = (base / workspace).resolve()
    home = base.resolve()
    if workspace_path == Path(workspace_path.anchor) or (
        workspace_path != home and home.is_relative_to(workspace_path)
    ):
        raise where.error(
            "task.workspace",
            f"{workspace!r} is {workspace_path}, which holds the task file's own directory "
            "(or is the filesystem's root): freezing it would copy all of that; give the "
            'project\'s directory, such as "project" or "."',
        )
    template = task.get("template")
    template_path: Path | None = None
    if template is not None:
        template_path = (base / _path_text(where, template, "task.template")).resolve()
        if not _is_dir(where, template_path, "task.template"):
            raise where.error("task.template", f"{template_path} is not a directory")
    elif not _is_dir(where, workspace_path, "task.workspace"):
        raise where.error("task.workspace", f"{workspace_path} is not a directory")
    kind = task.get("kind", "build")
    if kind not in ("build", "answer"):
        raise where.error("task.kind", f"must be 'build' or 'answer', got {kind!r}")
    time_limit = task.get("command_time_limit", 120.0)
    if isinstance(time_limit, bool) or not isinstance(time_limit, int | float) or time_limit <= 0:
        raise where.error(
            "task.command_time_limit",
            f"must be a number of seconds > 0, got {time_limit!r}",
        )
    ignore = DEFAULT_IGNORE + tuple(_str_list(where, task.get("ignore", []), "task.ignore"))
    task_id = task.get("id")
    if task_id is not None and (not isinstance(task_id, str) or not task_id):
        raise where.error("task.id", "must be a non-empty string")

    answer_wait = task.get("answer_wait", 0.0)
    if (
        isinstance(answer_wait, bool)
        or not isinstance(answer_wait, int | float)
        or not (math.isfinite(answer_wait) and answer_wait >= 0)
    ):
        raise where.error(
            "task.answer_wait", f"must be a number of seconds >= 0, got {answer_wait!r}"
        )
    approvals, approval_wait = _approvals(where, _table(where, data, "approve"))

    raw_checks = data.get("checks", [])
    if not isinstance(raw_checks, list):
        raise where.error("checks", "must be an array of tables: [[checks]]")
    checks: list[Check] = []
    for number, raw in enumerate(raw_checks, start=1):
        field = f"checks[{number}]"
        if not isinstance(raw, dict):
            raise where.error(field, "must be a table")
        _known(where, raw, _CHECK, field)
        if "name" not in raw or ("run" not in raw) == ("files" not in raw):
            raise where.error(
                field,
                "needs name and either run (a command: string or list) or files "
                "(path patterns that must exist)",
            )
        try:
            if "files" in raw:
                extra = sorted(
                    set(raw)
                    & {"run", "expect_exit", "time_limit", "junit", "harness", "not_harness"}
                    | set(raw) & {"must_pass"}
                )
                if extra:
                    raise where.error(f"{field}.{extra[0]}", "a files check takes no command keys")
                checks.append(
                    FileCheck(
                        name=raw["name"],
                        paths=tuple(_str_list(where, raw["files"], f"{field}.files")),
                        pattern=raw.get("pattern"),
                        required=raw.get("required", True),
                    )
                )
                continue
            if "pattern" in raw:
                raise where.error(f"{field}.pattern", "only a files check takes a pattern")
            checks.append(
                CommandCheck(
                    name=raw["name"],
                    run=raw["run"],
                    expect_exit=raw.get("expect_exit", 0),
                    time_limit=raw.get("time_limit", 600.0),
                    required=raw.get("required", True),
                    junit=raw.get("junit"),
                    harness=tuple(_str_list(where, raw.get("harness", []), f"{field}.harness")),
                    not_harness=tuple(
                        _str_list(where, raw.get("not_harness", []), f"{field}.not_harness")
                    ),
                    must_pass=tuple(
                        _str_list(where, raw.get("must_pass", []), f"{field}.must_pass")
                    ),
                )
            )
        except (ConfigError, TypeError, ValueError) as exc:
            named = re.match(r"check .*?: '(\w+)'", str(exc))
            bad = named[1] if named and named[1] in _CHECK else None
            raise where.error(f"{field}.{bad}" if bad else field, str(exc)) from None

    contract = _table(where, data, "contract")
    _known(where, contract, _CONTRACT, "contract")
    protected = _str_list(where, contract.get("protected", []), "contract.protected")
    required_files = _str_list(where, contract.get("required_files", []), "contract.required_files")
    scope = _str_list(where, contract.get("scope", []), "contract.scope")

    if "budget" not in data:
        data["budget"] = dict(DEFAULT_BUDGET_LIMITS)
    budget_table = _table(where, data, "budget")
    reserve = budget_table.get("reserve", {})
    if not isinstance(reserve, dict):
        raise where.error("budget.reserve", "must be a table, e.g. { steps = 3 }")
    limits = {k: v for k, v in budget_table.items() if k != "reserve"}
    try:
        budget = Budget(limits, reserve)
    except ConfigError as exc:
        raise where.error(_named(str(exc), "budget"), _message(str(exc))) from None

    try:
        policy_table = _table(where, data, "policy")
        policy = Policy.from_mapping(policy_table)
        settings = policy.settings()
        if "rescue_limit" not in policy_table:
            del settings["rescue_limit"]
        policy = live_policy(required_files, **settings)
    except ConfigError as exc:
        raise where.error(_named(str(exc), "policy"), _message(str(exc))) from None

    try:
        prices = PriceTable.from_mapping(_table(where, data, "prices"), "prices")
    except ConfigError as exc:
        raise where.error(_named(str(exc), "prices"), _message(str(exc))) from None

    fetch: FetchConfig | None = None
    search: SearchConfig | None = None
    try:
        if "fetch" in data:
            fetch = _fetch(_table(where, data, "fetch"))
        if "search" in data:
            search = SearchConfig.from_mapping(_table(where, data, "search"))
        tools = parse_tools(data.get("tools", []))
    except ConfigError as exc:
        raise where.error(*_field_and_message(str(exc))) from None
    try:
        size_limits = Limits.from_mapping(_table(where, data, "limits"))
    except ConfigError as exc:
        raise where.error(_named(str(exc), "limits"), _message(str(exc))) from None

    actor = _actor_spec(where, _table(where, data, "actor"), base)
    try:
        sandbox = SandboxSettings.from_mapping(_table(where, data, "sandbox"), base.resolve())
    except ConfigError as exc:
        raise where.error(_named(str(exc), "sandbox"), _message(str(exc))) from None
    try:
        built = Task(
            goal=goal,
            workspace=workspace_path,
            kind=kind,
            checks=tuple(checks),
            protected=tuple(protected),
            scope=tuple(scope),
            required_files=tuple(required_files),
            ignore=ignore,
            budget=budget,
            policy=policy,
            command_time_limit=float(time_limit),
            task_id=task_id,
            template=template_path,
            prices=prices,
            limits=size_limits,
            answer_wait=float(answer_wait),
            approvals=approvals,
            approval_wait=approval_wait,
            sandbox=sandbox,
            source=path.resolve(),
            fetch=fetch,
            search=search,
            tools=tools,
        )
    except ConfigError as exc:
        raise where.error("checks", str(exc)) from None
    return TaskFile(path, built, actor)


_MARKER = Path(".proctor") / "template"


def prepare_workspace(task: Task) -> None:
    """
    Lay the workspace afresh from the task's template, if it has one.

    The old workspace is removed only if proctor laid it (it carries a marker),
    so a template never deletes a directory a person made.

    Raises:
        ConfigError: the workspace exists and was not laid from a template.
    """
    if task.template is None:
        return
    workspace = task.workspace
    if workspace.exists():
        if not (workspace / _MARKER).is_file():
            raise ConfigError(
                f"{workspace} exists and was not laid from a template; proctor will not "
                "replace it: remove it, or drop task.template to work in it as it is"
            )
        shutil.rmtree(workspace)
    shutil.copytree(task.template, workspace, symlinks=True)
    (workspace / _MARKER).parent.mkdir(parents=True, exist_ok=True)
    (workspace / _MARKER).write_text(str(task.template) + "\n", encoding="utf-8")


def load_task(path: str | Path) -> TaskFile:
    """
    Load a task file (TOML).

    Raises:
        ConfigError: it cannot be read or a field is wrong.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the task file: {exc.strerror}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}:{line}: byte 0x{raw[exc.start]:02x} is not UTF-8: a task file is UTF-8 text"
        ) from None
    return parse_task(text, path)


def load_hosted_task(path: str | Path, workspace: str | Path | None = None) -> Task:
    """
    Load a task file for an actor proctor does not start (an MCP client of the
    gateway, an agent whose hooks call proctor): its ``[actor]`` table, if any,
    is not used, and none is needed.

    Args:
        path: the task file.
        workspace: the workspace to use when the file names none (an agent's
            working directory); None: the file's directory, as for any task file.

    Raises:
        ConfigError: it cannot be read or a field is wrong; the message names the
            file, the line or field, and what would be accepted.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the task file: {exc.strerror}") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        data = {"actor": {}}  # parse_task says what is wrong with it
    if "actor" not in data:
        # A stand-in the task file's parser accepts, appended after every line of
        # the file so error messages keep their line numbers. It is never started.
        text += '\n[actor]\nkind = "process"\ncommand = ["hosted-agent"]\n'
    task = parse_task(text, path).task
    named = isinstance(data.get("task"), dict) and "workspace" in data["task"]
    if workspace is None or named:
        return task
    chosen = Path(workspace)
    if not chosen.is_dir():
        raise ConfigError(f"{path}: the workspace {chosen} is not a directory")
    return attrs.evolve(task, workspace=chosen)
