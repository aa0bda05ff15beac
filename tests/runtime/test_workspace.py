from __future__ import annotations

from pathlib import Path

import pytest

from proctor._errors import ConfigError, WorkspaceError
from proctor.runtime._tools.workspace import Workspace


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text("secret")
    return out


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("a = 1\n")
    return Workspace.at(root)


def test_at_resolves_the_root(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    ws = Workspace.at(tmp_path / "ws" / ".." / "ws")
    assert ws.root == (tmp_path / "ws").resolve()
    assert ws.root.is_absolute()


def test_at_refuses_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        Workspace.at(tmp_path / "nope")


def test_at_refuses_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(ConfigError, match="not a directory"):
        Workspace.at(tmp_path / "f")


def test_constructor_resolves_the_root(tmp_path: Path) -> None:
    assert Workspace(tmp_path / "x" / "..").root == tmp_path.resolve()


def test_resolve_relative_paths(ws: Workspace) -> None:
    assert ws.resolve("src/a.py") == ws.root / "src" / "a.py"
    assert ws.resolve("./src//a.py") == ws.root / "src" / "a.py"
    assert ws.resolve(".") == ws.root
    assert ws.resolve("src/../src/a.py") == ws.root / "src" / "a.py"


def test_resolve_accepts_missing_components_for_writes(ws: Workspace) -> None:
    assert ws.resolve("new/dir/f.txt") == ws.root / "new" / "dir" / "f.txt"


def test_resolve_accepts_absolute_paths_inside(ws: Workspace) -> None:
    assert ws.resolve(str(ws.root / "src" / "a.py")) == ws.root / "src" / "a.py"


@pytest.mark.parametrize("path", ["../x", "src/../../x", "new/../../x", ".."])
def test_resolve_refuses_traversal(ws: Workspace, path: str) -> None:
    with pytest.raises(WorkspaceError, match="inside the workspace") as info:
        ws.resolve(path)
    assert repr(path) in str(info.value)


def test_resolve_refuses_absolute_paths_outside(ws: Workspace, outside: Path) -> None:
    with pytest.raises(WorkspaceError, match="inside the workspace"):
        ws.resolve(str(outside / "secret.txt"))
    with pytest.raises(WorkspaceError):
        ws.resolve("/etc/passwd")


def test_resolve_refuses_a_symlinked_file_outside(ws: Workspace, outside: Path) -> None:
    (ws.root / "link.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(WorkspaceError, match=r"link\.txt"):
        ws.resolve("link.txt")


def test_resolve_refuses_a_dangling_symlink_outside(ws: Workspace, outside: Path) -> None:
    (ws.root / "dangling").symlink_to(outside / "not-yet")
    with pytest.raises(WorkspaceError):
        ws.resolve("dangling")


def test_resolve_refuses_a_symlinked_directory_outside(ws: Workspace, outside: Path) -> None:
    (ws.root / "out").symlink_to(outside, target_is_directory=True)
    for path in ("out", "out/secret.txt", "out/new.txt", "out/sub/new.txt"):
        with pytest.raises(WorkspaceError):
            ws.resolve(path)


def test_resolve_follows_a_symlink_before_dotdot(ws: Workspace, outside: Path) -> None:
    # Lexically "out/../src" stays inside; physically it is outside/../src.
    (ws.root / "out").symlink_to(outside, target_is_directory=True)
    with pytest.raises(WorkspaceError):
        ws.resolve("out/../src")


def test_resolve_accepts_symlinks_that_stay_inside(ws: Workspace) -> None:
    (ws.root / "alias.py").symlink_to(ws.root / "src" / "a.py")
    (ws.root / "lib").symlink_to("src", target_is_directory=True)
    assert ws.resolve("alias.py") == ws.root / "src" / "a.py"
    assert ws.resolve("lib/a.py") == ws.root / "src" / "a.py"
    assert ws.resolve("lib/new.py") == ws.root / "src" / "new.py"


def test_resolve_refuses_nul_bytes(ws: Workspace) -> None:
    with pytest.raises(ConfigError, match="NUL"):
        ws.resolve("a\0b")


def test_relative(ws: Workspace) -> None:
    assert ws.relative(ws.root / "src" / "a.py") == "src/a.py"
    assert ws.relative(Path("src/a.py")) == "src/a.py"
    assert ws.relative(ws.root) == "."


def test_relative_refuses_paths_outside(ws: Workspace, outside: Path) -> None:
    with pytest.raises(WorkspaceError, match="inside the workspace"):
        ws.relative(outside / "secret.txt")
