"""
The built-in workspace tools and the registry that dispatches tool calls.

A tool is its declaration (:class:`~proctor.runtime._tools.spec.ToolSpec`) and an
async function. :func:`call_tool` is the one way to call a tool: it checks the
arguments against the declaration and turns every bad input of the agent (an
unknown tool, a missing argument, a path outside the workspace, a missing file)
into an ``error`` result that says what was wrong and what is accepted. It never
raises for the agent's mistakes.

Writes are atomic: a file is written to a temporary file in the same directory
and renamed over its target, so a snapshot or a reader sees either the old
content or the new one, never half of it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import anyio
import attrs

from proctor._boundary import DEFAULT_LIMITS, Limits, clip_text
from proctor._errors import ConfigError, ProctorError, WorkspaceError
from proctor._logging import get_logger
from proctor.runtime._records import ToolResult, ToolStatus
from proctor.runtime._tools.process import ProcessGroups, run_command
from proctor.runtime._tools.sandbox import SandboxSpec
from proctor.runtime._tools.spec import BUILTIN_SPECS, ToolSpec, spec_for
from proctor.runtime._tools.workspace import Workspace
from proctor.verifiers._candidate import matches

__all__ = (
    "Tool",
    "ToolContext",
    "ToolFn",
    "ToolRegistry",
    "call_tool",
    "check_call",
    "run_workspace_command",
)

log = get_logger()

# Directories list_files never descends into.
_SKIPPED_DIRS = frozenset({".git", "__pycache__", ".pytest_cache", ".proctor"})
# Most paths list_files returns.
_LIST_LIMIT = 2_000
# Most characters read_file returns.
_READ_LIMIT = 1_000_000


@attrs.frozen
class ToolContext:
    """
    What a tool needs from the run.

    Args:
        workspace: the directory that confines the tool's paths.
        command_time_limit: seconds a command may run.
        groups: where commands track their process groups.
        env: the environment of commands; None inherits this process's. With a
            sandbox, only the launcher carries it (see ``run_command``).
        sandbox: the sandbox commands run in; None runs them on the host (a run
            always sets one, from the task's ``[sandbox]``).
        protected: glob patterns of paths the file tools refuse to change,
            judged on the path as resolved, never on the raw argument.
        limits: the sizes a tool's work is bounded by (the output kept, the
            size of a file written).
    """

    workspace: Workspace
    command_time_limit: float = 120.0
    groups: ProcessGroups = attrs.field(factory=ProcessGroups)
    env: Mapping[str, str] | None = None
    sandbox: SandboxSpec | None = None
    protected: tuple[str, ...] = ()
    limits: Limits = DEFAULT_LIMITS


ToolFn = Callable[[ToolContext, dict[str, Any]], Awaitable[ToolResult]]
"""A tool's implementation: called with the context and the checked arguments."""


@attrs.frozen
class Tool:
    """
    A tool: its declaration and its implementation.

    Args:
        spec: what the tool declares about itself.
        fn: the implementation.
    """

    spec: ToolSpec
    fn: ToolFn


@attrs.define(eq=False)
class ToolRegistry:
    """The tools a run offers, by name."""

    _tools: dict[str, Tool] = attrs.field(factory=dict, init=False)

    @classmethod
    def builtin(cls) -> ToolRegistry:
        """Return a registry with the built-in workspace tools."""
        registry = cls()
        for name, fn in _BUILTIN_FNS.items():
            registry.register(Tool(BUILTIN_SPECS[name], fn))
        return registry

    def register(self, tool: Tool) -> None:
        """
        Add ``tool``.

        Args:
            tool: the tool; its name must be new to this registry.

        Raises:
            ConfigError: a tool with that name is already registered.
        """
        name = tool.spec.name
        if name in self._tools:
            raise ConfigError(
                f"a tool named {name!r} is already registered; give each tool its own name"
            )
        self._tools[name] = tool

    def get(self, name: str) -> Tool | None:
        """
        Return the tool called ``name``, or None.

        Args:
            name: the tool's name.
        """
        return self._tools.get(name)

    def spec(self, name: str) -> ToolSpec:
        """
        Return the declaration of ``name``, registered or not (see ``spec_for``).

        Args:
            name: the tool's name.
        """
        tool = self._tools.get(name)
        return tool.spec if tool is not None else spec_for(name)

    def specs(self) -> tuple[ToolSpec, ...]:
        """Return the declarations of the registered tools, in registration order."""
        return tuple(tool.spec for tool in self._tools.values())

    def names(self) -> tuple[str, ...]:
        """Return the names of the registered tools, in registration order."""
        return tuple(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools


# --- argument checks -------------------------------------------------------------

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list, tuple),
    "object": (dict,),
    "null": (type(None),),
}


def _type_ok(value: Any, expected: str | list[str]) -> bool:
    names = [expected] if isinstance(expected, str) else expected
    for name in names:
        kinds = _JSON_TYPES.get(name)
        if kinds is None:
            return True  # a type this minimal check does not know: let the tool judge
        # JSON has no bool among its numbers, Python does.
        if isinstance(value, bool) and name in ("integer", "number"):
            continue
        if isinstance(value, kinds):
            return True
    return False


def _accepted(schema: dict[str, Any]) -> str:
    props: dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", ()))
    if not props:
        return "a JSON object"
    parts = []
    for key, sub in props.items():
        kind = sub.get("type", "any") if isinstance(sub, dict) else "any"
        kind = " or ".join(kind) if isinstance(kind, list) else kind
        parts.append(f"{key} ({kind}, {'required' if key in required else 'optional'})")
    return ", ".join(parts)


def _check_args(schema: dict[str, Any], args: Any) -> str | None:
    """Return what is wrong with ``args`` under ``schema``, or None."""
    if not isinstance(args, dict):
        return f"arguments must be a JSON object, not {type(args).__name__}"
    props: dict[str, Any] = schema.get("properties", {})
    problems = [f"missing {key!r}" for key in schema.get("required", ()) if key not in args]
    if schema.get("additionalProperties", True) is False:
        problems += [f"unknown argument {key!r}" for key in args if key not in props]
    for key, value in args.items():
        sub = props.get(key)
        if isinstance(sub, dict) and "type" in sub and not _type_ok(value, sub["type"]):
            expected = sub["type"]
            expected = " or ".join(expected) if isinstance(expected, list) else expected
            problems.append(f"{key!r} must be of type {expected}, not {type(value).__name__}")
    return "; ".join(problems) or None


def _error(text: str) -> ToolResult:
    return ToolResult(ToolStatus.ERROR, text)


async def call_tool(
    registry: ToolRegistry, ctx: ToolContext, name: str, args: dict[str, Any]
) -> ToolResult:
    """
    Call tool ``name`` with ``args`` and return its result.

    Bad input from the agent never raises: an unknown tool, arguments that do not
    fit the tool's declaration, a path that leaves the workspace and a failing
    file operation each give an ``error`` result that says what was wrong. A
    tool that raises (a custom tool's bug) or returns something other than a
    :class:`ToolResult` gives an ``error`` result too, naming the exception. The
    output kept is at most ``ctx.limits.output_chars`` characters (its head and
    its tail).

    Args:
        registry: the tools on offer.
        ctx: what the tools need from the run.
        name: the tool to call.
        args: its arguments, a JSON object.
    """
    tool = registry.get(name)
    if tool is None:
        known = ", ".join(registry.names()) or "none"
        return _error(f"unknown tool {name!r}; known tools: {known}")
    problem = _check_args(tool.spec.parameters, args)
    if problem is not None:
        return _error(
            f"bad arguments for {name}: {problem}; accepted: {_accepted(tool.spec.parameters)}"
        )
    started = time.monotonic()
    try:
        result = await tool.fn(ctx, args)
    except WorkspaceError as exc:
        log.info("tool.refused", tool=name, reason=str(exc))
        result = _error(f"refused: {exc}")
    except ProctorError as exc:
        result = _error(f"{name} failed: {exc}")
    except OSError as exc:
        where = f" ({args['path']})" if isinstance(args.get("path"), str) else ""
        result = _error(f"{name} failed: {exc.strerror or exc}{where}")
    except (ValueError, UnicodeError) as exc:
        # A path holding a NUL, text a codec cannot write: the agent's input.
        result = _error(f"{name} failed: {exc}")
    except Exception as exc:
        # A tool's own bug is its result, not the run's end (cancellation is a
        # BaseException and passes).
        log.warning("tool.raised", tool=name, error=repr(exc))
        result = _error(f"{name} raised {type(exc).__name__}: {exc}")
    if not isinstance(result, ToolResult):
        result = _error(f"{name} returned a {type(result).__name__}, not a ToolResult")
    elif not isinstance(result.output, str):
        result = _error(f"{name} returned output of type {type(result.output).__name__}, not text")
    output = clip_text(result.output, ctx.limits.output_chars)
    return attrs.evolve(result, output=output, duration=time.monotonic() - started)


def check_call(spec: ToolSpec, args: Mapping[str, Any], limits: Limits) -> str | None:
    """
    Return why a call's arguments exceed the limits of its kind of tool, or None.

    A command (``run_command``'s ``cmd``) is bounded by ``limits.command_chars``,
    a file's content (``write_file``'s ``content``, ``edit_file``'s ``new``) by
    ``limits.file_bytes``.

    Args:
        spec: the tool's declaration.
        args: the call's arguments.
        limits: the limits.
    """
    cmd = args.get("cmd") if spec.name == "run_command" else None
    if isinstance(cmd, str) and len(cmd) > limits.command_chars:
        return (
            f"the command holds {len(cmd):,} characters, more than limits.command_chars "
            f"({limits.command_chars:,}): write a script with write_file and run that"
        )
    for key in ("content", "new"):
        text = args.get(key) if spec.name in ("write_file", "edit_file") else None
        if isinstance(text, str) and len(text) > limits.file_bytes // 4:
            size = len(_encode(text))
            if size > limits.file_bytes:
                return (
                    f"{key} is {size:,} bytes, more than limits.file_bytes "
                    f"({limits.file_bytes:,}): write the file in smaller parts"
                )
    return None


def _encode(text: str) -> bytes:
    # U+DC80..U+DCFF stand for bytes that are not UTF-8 (surrogateescape): a
    # file read or listed with them is written back byte for byte.
    return text.encode("utf-8", "surrogateescape")


# --- the built-in tools ----------------------------------------------------------


_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


def _fenced(ctx: ToolContext, rel: str, given: str) -> None:
    """Refuse a change to a protected path, judged on the resolved path."""
    if ctx.protected and matches(rel, ctx.protected):
        shown = f"{given} (that is {rel})" if given.strip("/") != rel else rel
        raise WorkspaceError(f"{shown} is protected by the task's contract; it may not be changed")


def _open_entry(ctx: ToolContext, rel: str, flags: int, mode: int = 0o666) -> int:
    """Open a file of the workspace race-free (see ``Workspace.open_parent``)."""
    parent, name, _ = ctx.workspace.open_parent(rel)
    try:
        if not name:
            raise IsADirectoryError(errno.EISDIR, "is a directory", rel)
        try:
            return os.open(name, flags | _NOFOLLOW, mode, dir_fd=parent)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise WorkspaceError(
                    f"path {rel!r} changed while in use: a link took the file's place"
                ) from None
            raise
    finally:
        os.close(parent)


def _read_text(ctx: ToolContext, rel: str) -> str:
    fd = _open_entry(ctx, rel, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise IsADirectoryError(errno.EISDIR, "not a regular file", rel)
        data = f.read(_READ_LIMIT * 4 + 1)
    text = data.decode("utf-8", errors="replace")
    if len(text) > _READ_LIMIT:
        text = text[:_READ_LIMIT] + f"\n[file truncated at {_READ_LIMIT} characters]"
    return text


async def _read_file(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    rel: str = args["path"]
    path = ctx.workspace.resolve(rel)
    if not path.exists():
        return _error(f"no such file: {rel}")
    if not path.is_file():
        return _error(f"not a file: {rel}; read_file reads files (use list_files for directories)")
    inside = ctx.workspace.relative(path)
    return ToolResult(ToolStatus.OK, await anyio.to_thread.run_sync(_read_text, ctx, inside))


def _write_atomic(ctx: ToolContext, rel: str, data: bytes) -> None:
    """Write ``data`` to ``rel`` through a temporary file renamed over it, race-free."""
    parent, name, _ = ctx.workspace.open_parent(rel, create=True)
    try:
        try:
            mode: int | None = stat.S_IMODE(
                os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
            )
        except FileNotFoundError:
            mode = None
        tmp = f".{name}.{secrets.token_hex(6)}.tmp"
        # 0o666 lets the umask decide a new file's mode, as for any other new file.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o666, dir_fd=parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
                if mode is not None:
                    os.fchmod(f.fileno(), mode)
            os.replace(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=parent)
            raise
    finally:
        os.close(parent)


async def _write_file(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    rel: str = args["path"]
    content: str = args["content"]
    path = ctx.workspace.resolve(rel)
    inside = ctx.workspace.relative(path)
    _fenced(ctx, inside, rel)
    if path.is_dir():
        return _error(f"not a file: {rel} is a directory; write_file writes files")
    data = _encode(content)
    await anyio.to_thread.run_sync(_write_atomic, ctx, inside, data)
    return ToolResult(ToolStatus.OK, f"wrote {len(data)} bytes to {inside}")


async def _edit_file(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    rel: str = args["path"]
    old: str = args["old"]
    new: str = args["new"]
    if not old:
        return _error("'old' is empty; give the exact text to replace, as it occurs in the file")
    path = ctx.workspace.resolve(rel)
    inside = ctx.workspace.relative(path)
    _fenced(ctx, inside, rel)
    if not path.exists():
        return _error(f"no such file: {rel}")
    if not path.is_file():
        return _error(f"not a file: {rel}; edit_file edits files")

    def read() -> bytes:
        fd = _open_entry(ctx, inside, os.O_RDONLY)
        with os.fdopen(fd, "rb") as f:
            return f.read()

    raw = await anyio.to_thread.run_sync(read)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return _error(f"{rel} is not UTF-8 text; use write_file to replace it whole")
    count = text.count(old)
    if count == 0:
        return _error(
            f"'old' text not found in {rel}; give text that occurs in the file exactly "
            "(read_file shows it), including whitespace and line breaks"
        )
    edited = _encode(text.replace(old, new, 1))
    if len(edited) > ctx.limits.file_bytes:
        return _error(
            f"the edit would leave {rel} at {len(edited):,} bytes, more than limits.file_bytes "
            f"({ctx.limits.file_bytes:,})"
        )
    await anyio.to_thread.run_sync(_write_atomic, ctx, inside, edited)
    more = f"; {count - 1} more occurrence(s) left unchanged" if count > 1 else ""
    return ToolResult(ToolStatus.OK, f"edited {inside}: replaced 1{more}")


async def _delete_file(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    rel: str = args["path"]
    target = ctx.workspace.resolve(rel)  # refuses links that point outside, too
    name = PurePosixPath(rel).name
    if name in ("", ".", ".."):
        return _error(f"not a file: {rel}; delete_file deletes files")
    # The entry itself, with its parent resolved: a symlink is deleted, not its target.
    entry = ctx.workspace.resolve(str(PurePosixPath(rel).parent)) / name
    inside = ctx.workspace.relative(entry)
    _fenced(ctx, inside, rel)
    if entry.is_symlink():
        pass
    elif not target.exists():
        return _error(f"no such file: {rel}")
    elif not target.is_file():
        return _error(f"not a file: {rel} is a directory; delete_file deletes files")
    parent, last, _ = ctx.workspace.open_parent(inside)
    try:
        st = os.stat(last, dir_fd=parent, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            return _error(f"not a file: {rel} is a directory; delete_file deletes files")
        os.unlink(last, dir_fd=parent)
    finally:
        os.close(parent)
    return ToolResult(ToolStatus.OK, f"deleted {inside}")


def _walk(top: Path, found: list[Path], limit: int) -> None:
    """Append the files under ``top`` to ``found`` in path order, stopping past ``limit``."""
    try:
        with os.scandir(top) as it:
            entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
    except OSError:
        return  # an unreadable directory lists as empty rather than failing the listing
    # Sorting a directory "d" as "d/" puts every path in plain string order.
    entries.sort(key=lambda e: e[0] + "/" if e[1] else e[0])
    for name, is_dir in entries:
        if len(found) > limit:
            return
        if is_dir:
            if name not in _SKIPPED_DIRS:
                _walk(top / name, found, limit)
        else:
            found.append(top / name)


async def _list_files(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    rel: str = args.get("path", ".")
    top = ctx.workspace.resolve(rel)
    if not top.exists():
        return _error(f"no such directory: {rel}")
    if not top.is_dir():
        return _error(f"not a directory: {rel}; list_files lists directories")
    found: list[Path] = []
    await anyio.to_thread.run_sync(_walk, top, found, _LIST_LIMIT)
    lines = [ctx.workspace.relative(p) for p in found[:_LIST_LIMIT]]
    if len(found) > _LIST_LIMIT:
        lines.append(
            f"[listing stopped at {_LIST_LIMIT:,} files; list a subdirectory to see the rest]"
        )
    elif not lines:
        lines.append(f"[no files under {rel}]")
    return ToolResult(ToolStatus.OK, "\n".join(lines))


async def run_workspace_command(
    ctx: ToolContext, cmd: str | Sequence[str], time_limit: float | None = None
) -> ToolResult:
    """
    Run a command in the workspace the way ``run_command`` does: the one path for
    every command an agent's call runs (``run_command`` and the command tools a task
    file declares), so that what confines one confines all.

    Args:
        ctx: the run's tool context (workspace, environment, process groups).
        cmd: a shell command line, or a program and its arguments.
        time_limit: seconds it may run; None: the context's ``command_time_limit``.
    """
    return await run_command(
        cmd,
        cwd=ctx.workspace.root,
        time_limit=ctx.command_time_limit if time_limit is None else time_limit,
        env=ctx.env,
        groups=ctx.groups,
        sandbox=ctx.sandbox,
    )


async def _run_command(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    return await run_workspace_command(ctx, args["cmd"])


_BUILTIN_FNS: dict[str, ToolFn] = {
    "read_file": _read_file,
    "write_file": _write_file,
    "edit_file": _edit_file,
    "delete_file": _delete_file,
    "list_files": _list_files,
    "run_command": _run_command,
}
