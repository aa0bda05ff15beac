from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import anyio
import pytest

from proctor._errors import ConfigError
from proctor.runtime._records import ToolResult, ToolStatus
from proctor.runtime._tools import registry as tools_module
from proctor.runtime._tools.process import ProcessGroups, group_alive
from proctor.runtime._tools.registry import Tool, ToolContext, ToolRegistry, call_tool
from proctor.runtime._tools.spec import BUILTIN_SPECS, Effect, ToolSpec
from proctor.runtime._tools.workspace import Workspace

BUILTIN = ("read_file", "write_file", "edit_file", "delete_file", "list_files", "run_command")


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text("secret")
    return out


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("x = 1\nx = 1\n")
    return ToolContext(Workspace.at(root), command_time_limit=30)


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry.builtin()


async def call(registry: ToolRegistry, ctx: ToolContext, name: str, **args: Any) -> ToolResult:
    with anyio.fail_after(20):
        return await call_tool(registry, ctx, name, args)


# --- registry -----------------------------------------------------------------------


def test_builtin_registry(registry: ToolRegistry) -> None:
    assert registry.names() == BUILTIN
    assert registry.specs() == tuple(BUILTIN_SPECS[name] for name in BUILTIN)
    assert "read_file" in registry
    assert "fetch" not in registry
    tool = registry.get("write_file")
    assert tool is not None
    assert tool.spec is BUILTIN_SPECS["write_file"]
    assert registry.get("fetch") is None


def test_spec_falls_back_to_declarations(registry: ToolRegistry) -> None:
    assert registry.spec("fetch") == BUILTIN_SPECS["fetch"]
    assert registry.spec("mystery") == ToolSpec("mystery")


def test_duplicate_names_are_refused(registry: ToolRegistry) -> None:
    async def fn(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        return ToolResult(ToolStatus.OK)  # pragma: no cover

    with pytest.raises(ConfigError, match="read_file"):
        registry.register(Tool(ToolSpec("read_file"), fn))


async def test_a_registered_tool_is_called(ctx: ToolContext) -> None:
    seen: list[dict[str, Any]] = []

    async def echo(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        seen.append(args)
        return ToolResult(ToolStatus.OK, str(args["n"]))

    spec = ToolSpec(
        "echo",
        Effect.READ,
        parameters={"type": "object", "properties": {"n": {"type": "integer"}}},
    )
    registry = ToolRegistry()
    registry.register(Tool(spec, echo))
    assert (await call(registry, ctx, "echo", n=3)).output == "3"
    assert seen == [{"n": 3}]
    bad = await call(registry, ctx, "echo", n=True)
    assert bad.status is ToolStatus.ERROR
    assert "'n' must be of type integer, not bool" in bad.output
    # additionalProperties is not false: extra arguments pass.
    assert (await call(registry, ctx, "echo", n=1, extra="x")).status is ToolStatus.OK


# --- call_tool's checks ---------------------------------------------------------------


async def test_unknown_tool_names_the_known_ones(registry: ToolRegistry, ctx: ToolContext) -> None:
    result = await call(registry, ctx, "fetch", url="http://example.com")
    assert result.status is ToolStatus.ERROR
    assert result.output == "unknown tool 'fetch'; known tools: " + ", ".join(BUILTIN)


async def test_missing_argument(registry: ToolRegistry, ctx: ToolContext) -> None:
    result = await call(registry, ctx, "write_file", path="f.txt")
    assert result.status is ToolStatus.ERROR
    assert "missing 'content'" in result.output
    assert "accepted: path (string, required), content (string, required)" in result.output


async def test_unknown_argument(registry: ToolRegistry, ctx: ToolContext) -> None:
    result = await call(registry, ctx, "read_file", path="src/a.py", lines=3)
    assert result.status is ToolStatus.ERROR
    assert "unknown argument 'lines'" in result.output


async def test_wrong_type(registry: ToolRegistry, ctx: ToolContext) -> None:
    result = await call(registry, ctx, "read_file", path=["src/a.py"])
    assert result.status is ToolStatus.ERROR
    assert "'path' must be of type string, not list" in result.output


async def test_arguments_that_are_not_an_object(registry: ToolRegistry, ctx: ToolContext) -> None:
    bad: Any = ["src/a.py"]
    result = await call_tool(registry, ctx, "read_file", bad)
    assert result.status is ToolStatus.ERROR
    assert "must be a JSON object" in result.output


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("read_file", {"path": "../outside/secret.txt"}),
        ("write_file", {"path": "../outside/new.txt", "content": "x"}),
        ("edit_file", {"path": "/etc/hostname", "old": "a", "new": "b"}),
        ("delete_file", {"path": "../outside/secret.txt"}),
        ("list_files", {"path": ".."}),
    ],
)
async def test_paths_outside_are_refused(
    registry: ToolRegistry, ctx: ToolContext, outside: Path, name: str, args: dict[str, Any]
) -> None:
    result = await call(registry, ctx, name, **args)
    assert result.status is ToolStatus.ERROR
    assert result.output.startswith("refused: ")
    assert "inside the workspace" in result.output
    assert (outside / "secret.txt").read_text() == "secret"
    assert not (outside / "new.txt").exists()


async def test_symlink_escapes_are_refused(
    registry: ToolRegistry, ctx: ToolContext, outside: Path
) -> None:
    root = ctx.workspace.root
    (root / "out").symlink_to(outside, target_is_directory=True)
    (root / "secret").symlink_to(outside / "secret.txt")
    for name, args in [
        ("read_file", {"path": "secret"}),
        ("write_file", {"path": "secret", "content": "pwned"}),
        ("write_file", {"path": "out/new.txt", "content": "x"}),
        ("delete_file", {"path": "secret"}),
        ("list_files", {"path": "out"}),
    ]:
        result = await call(registry, ctx, name, **args)
        assert result.output.startswith("refused: "), (name, args)
    assert (outside / "secret.txt").read_text() == "secret"
    assert not (outside / "new.txt").exists()


async def test_nul_bytes_are_an_error(registry: ToolRegistry, ctx: ToolContext) -> None:
    result = await call(registry, ctx, "read_file", path="a\0b")
    assert result.status is ToolStatus.ERROR
    assert "NUL" in result.output


# --- read_file ------------------------------------------------------------------------


async def test_read_file(registry: ToolRegistry, ctx: ToolContext) -> None:
    result = await call(registry, ctx, "read_file", path="src/a.py")
    assert result.status is ToolStatus.OK
    assert result.output == "x = 1\nx = 1\n"
    assert result.duration > 0


async def test_read_file_keeps_line_endings_and_replaces_bad_bytes(
    registry: ToolRegistry, ctx: ToolContext
) -> None:
    (ctx.workspace.root / "crlf.txt").write_bytes(b"a\r\nb\xff\n")
    result = await call(registry, ctx, "read_file", path="crlf.txt")
    assert result.output == "a\r\nb\ufffd\n"


async def test_read_file_missing(registry: ToolRegistry, ctx: ToolContext) -> None:
    result = await call(registry, ctx, "read_file", path="src/nope.py")
    assert result.status is ToolStatus.ERROR
    assert result.output == "no such file: src/nope.py"


async def test_read_file_directory(registry: ToolRegistry, ctx: ToolContext) -> None:
    result = await call(registry, ctx, "read_file", path="src")
    assert result.status is ToolStatus.ERROR
    assert "not a file: src" in result.output


async def test_read_file_through_an_inside_symlink(
    registry: ToolRegistry, ctx: ToolContext
) -> None:
    (ctx.workspace.root / "lib").symlink_to("src", target_is_directory=True)
    result = await call(registry, ctx, "read_file", path="lib/a.py")
    assert result.output == "x = 1\nx = 1\n"


# --- write_file -----------------------------------------------------------------------


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


async def test_write_file_creates_parents(registry: ToolRegistry, ctx: ToolContext) -> None:
    result = await call(registry, ctx, "write_file", path="new/dir/f.txt", content="héllo\n")
    assert result.status is ToolStatus.OK
    assert result.output == "wrote 7 bytes to new/dir/f.txt"
    target = ctx.workspace.root / "new" / "dir" / "f.txt"
    assert target.read_bytes() == "héllo\n".encode()
    assert leftovers(target.parent) == []


async def test_write_file_replaces_and_keeps_the_mode(
    registry: ToolRegistry, ctx: ToolContext
) -> None:
    script = ctx.workspace.root / "run.sh"
    script.write_text("old\n")
    script.chmod(0o750)
    inode = script.stat().st_ino
    result = await call(registry, ctx, "write_file", path="run.sh", content="new\n")
    assert result.status is ToolStatus.OK
    assert script.read_text() == "new\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o750
    # A new file was renamed over the old one: a reader of the old one never saw half.
    assert script.stat().st_ino != inode
    assert leftovers(script.parent) == []


async def test_write_file_new_files_follow_the_umask(
    registry: ToolRegistry, ctx: ToolContext
) -> None:
    await call(registry, ctx, "write_file", path="f.txt", content="")
    probe = ctx.workspace.root / "probe"
    probe.touch()
    mode = stat.S_IMODE((ctx.workspace.root / "f.txt").stat().st_mode)
    assert mode == stat.S_IMODE(probe.stat().st_mode)


async def test_write_file_through_an_inside_symlink_keeps_the_link(
    registry: ToolRegistry, ctx: ToolContext
) -> None:
    link = ctx.workspace.root / "alias.py"
    link.symlink_to("src/a.py")
    await call(registry, ctx, "write_file", path="alias.py", content="y = 2\n")
    assert link.is_symlink()
    assert (ctx.workspace.root / "src" / "a.py").read_text() == "y = 2\n"


async def test_write_file_onto_a_directory(registry: ToolRegistry, ctx: ToolContext) -> None:
    result = await call(registry, ctx, "write_file", path="src", content="x")
    assert result.status is ToolStatus.ERROR
    assert "is a directory" in result.output


async def test_write_file_under_a_file(registry: ToolRegistry, ctx: ToolContext) -> None:
    result = await call(registry, ctx, "write_file", path="src/a.py/b.py", content="x")
    assert result.status is ToolStatus.ERROR
    assert result.output.startswith("write_file failed: ")
    assert "src/a.py/b.py" in result.output


# --- edit_file ------------------------------------------------------------------------


async def test_edit_file_replaces_the_first_occurrence(
    registry: ToolRegistry, ctx: ToolContext
) -> None:
    result = await call(registry, ctx, "edit_file", path="src/a.py", old="x = 1", new="x = 2")
    assert result.status is ToolStatus.OK
    assert "1 more occurrence(s) left unchanged" in result.output
    assert (ctx.workspace.root / "src" / "a.py").read_text() == "x = 2\nx = 1\n"
    assert leftovers(ctx.workspace.root / "src") == []


async def test_edit_file_keeps_line_endings(registry: ToolRegistry, ctx: ToolContext) -> None:
    path = ctx.workspace.root / "crlf.txt"
    path.write_bytes(b"a\r\nb\r\n")
    result = await call(registry, ctx, "edit_file", path="crlf.txt", old="b", new="c")
    assert result.output == "edited crlf.txt: replaced 1"
    assert path.read_bytes() == b"a\r\nc\r\n"


async def test_edit_file_old_not_found(registry: ToolRegistry, ctx: ToolContext) -> None:
    result = await call(registry, ctx, "edit_file", path="src/a.py", old="y = 1", new="z")
    assert result.status is ToolStatus.ERROR
    assert "not found in src/a.py" in result.output
    assert (ctx.workspace.root / "src" / "a.py").read_text() == "x = 1\nx = 1\n"


async def test_edit_file_empty_old(registry: ToolRegistry, ctx: ToolContext) -> None:
    result = await call(registry, ctx, "edit_file", path="src/a.py", old="", new="z")
    assert result.status is ToolStatus.ERROR
    assert "'old' is empty" in result.output


async def test_edit_file_missing(registry: ToolRegistry, ctx: ToolContext) -> None:
    result = await call(registry, ctx, "edit_file", path="nope.py", old="a", new="b")
    assert result.output == "no such file: nope.py"


async def test_edit_file_binary(registry: ToolRegistry, ctx: ToolContext) -> None:
    (ctx.workspace.root / "blob").write_bytes(b"a\xffb")
    result = await call(registry, ctx, "edit_file", path="blob", old="a", new="c")
    assert result.status is ToolStatus.ERROR
    assert "not UTF-8" in result.output
    assert (ctx.workspace.root / "blob").read_bytes() == b"a\xffb"


# --- delete_file ----------------------------------------------------------------------


async def test_delete_file(registry: ToolRegistry, ctx: ToolContext) -> None:
    result = await call(registry, ctx, "delete_file", path="src/a.py")
    assert result.status is ToolStatus.OK
    assert result.output == "deleted src/a.py"
    assert not (ctx.workspace.root / "src" / "a.py").exists()


async def test_delete_file_missing(registry: ToolRegistry, ctx: ToolContext) -> None:
    result = await call(registry, ctx, "delete_file", path="src/nope.py")
    assert result.status is ToolStatus.ERROR
    assert result.output == "no such file: src/nope.py"


async def test_delete_file_directory(registry: ToolRegistry, ctx: ToolContext) -> None:
    for path in ("src", ".", "src/.."):
        result = await call(registry, ctx, "delete_file", path=path)
        assert result.status is ToolStatus.ERROR
        assert "not a file" in result.output
    assert (ctx.workspace.root / "src" / "a.py").exists()


async def test_delete_file_removes_a_link_not_its_target(
    registry: ToolRegistry, ctx: ToolContext
) -> None:
    link = ctx.workspace.root / "alias.py"
    link.symlink_to("src/a.py")
    result = await call(registry, ctx, "delete_file", path="alias.py")
    assert result.output == "deleted alias.py"
    assert not link.is_symlink()
    assert (ctx.workspace.root / "src" / "a.py").exists()


# --- list_files -----------------------------------------------------------------------


async def test_list_files_sorted_and_skipping_caches(
    registry: ToolRegistry, ctx: ToolContext
) -> None:
    root = ctx.workspace.root
    for rel in (
        "b.txt",
        "a/b.txt",
        "a/b/c.txt",
        "a/b-c.txt",
        "src/__pycache__/a.pyc",
        ".git/HEAD",
        ".pytest_cache/x",
        ".proctor/run.db",
        "deep/.git/config",
        ".env",
    ):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    result = await call(registry, ctx, "list_files", path=".")
    assert result.status is ToolStatus.OK
    expected = [".env", "a/b-c.txt", "a/b.txt", "a/b/c.txt", "b.txt", "src/a.py"]
    assert result.output.splitlines() == expected
    assert expected == sorted(expected)
    default = await call(registry, ctx, "list_files")
    assert default.output == result.output
    sub = await call(registry, ctx, "list_files", path="a/b")
    assert sub.output == "a/b/c.txt"


async def test_list_files_does_not_descend_into_linked_directories(
    registry: ToolRegistry, ctx: ToolContext
) -> None:
    (ctx.workspace.root / "loop").symlink_to(".", target_is_directory=True)
    result = await call(registry, ctx, "list_files")
    assert result.output.splitlines() == ["loop", "src/a.py"]


def test_list_files_default_bound() -> None:
    assert tools_module._LIST_LIMIT == 2_000


async def test_list_files_is_bounded(
    registry: ToolRegistry, ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Creating 2,000 files is slow on some file systems; the bound is what matters.
    monkeypatch.setattr(tools_module, "_LIST_LIMIT", 3)
    for name in ("d", "c", "b", "a"):
        (ctx.workspace.root / name).touch()
    result = await call(registry, ctx, "list_files")
    assert result.output.splitlines() == [
        "a",
        "b",
        "c",
        "[listing stopped at 3 files; list a subdirectory to see the rest]",
    ]


async def test_list_files_empty(registry: ToolRegistry, ctx: ToolContext) -> None:
    (ctx.workspace.root / "empty").mkdir()
    result = await call(registry, ctx, "list_files", path="empty")
    assert result.status is ToolStatus.OK
    assert result.output == "[no files under empty]"


async def test_list_files_errors(registry: ToolRegistry, ctx: ToolContext) -> None:
    missing = await call(registry, ctx, "list_files", path="nope")
    assert missing.status is ToolStatus.ERROR
    assert missing.output == "no such directory: nope"
    a_file = await call(registry, ctx, "list_files", path="src/a.py")
    assert a_file.status is ToolStatus.ERROR
    assert "not a directory: src/a.py" in a_file.output


# --- run_command ----------------------------------------------------------------------


async def test_run_command_in_the_workspace(registry: ToolRegistry, ctx: ToolContext) -> None:
    result = await call(registry, ctx, "run_command", cmd="pwd; cat src/a.py")
    assert result.status is ToolStatus.OK
    assert result.exit_code == 0
    assert result.output == f"{ctx.workspace.root}\nx = 1\nx = 1\n"


async def test_run_command_failure(registry: ToolRegistry, ctx: ToolContext) -> None:
    result = await call(registry, ctx, "run_command", cmd="echo no >&2; exit 2")
    assert result.status is ToolStatus.ERROR
    assert result.exit_code == 2
    assert result.output == "no\n"


async def test_run_command_uses_the_context(tmp_path: Path, registry: ToolRegistry) -> None:
    starts: list[int] = []

    async def on_start(pgid: int, command: str) -> None:
        starts.append(pgid)

    ctx = ToolContext(
        Workspace.at(tmp_path),
        command_time_limit=0.2,
        groups=ProcessGroups(on_start=on_start),
        env={"PATH": os.environ["PATH"], "WHO": "ctx"},
    )
    result = await call(registry, ctx, "run_command", cmd='echo "$WHO"; sleep 100')
    assert result.status is ToolStatus.UNCERTAIN
    assert result.output.startswith("ctx\n")
    assert "time limit of 0.2 s reached" in result.output
    [pgid] = starts
    assert not group_alive(pgid)
    assert ctx.groups.live() == ()
