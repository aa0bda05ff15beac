from __future__ import annotations

import fnmatch
import os
import stat
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from proctor._errors import ConfigError
from proctor.verifiers._candidate import (
    DEFAULT_IGNORE,
    EMPTY_TREE_DIGEST,
    TreeHasher,
    changed_paths,
    freeze,
    matches,
    tree_digest,
)

# A file of a tree: its content and whether it is executable.
Entry = tuple[bytes, bool]

OLD = 1_600_000_000_000_000_000  # a modification time well outside any racy window


def write(
    root: Path, files: Mapping[str, Entry | bytes], order: Iterable[str] | None = None
) -> None:
    for rel in order if order is not None else files:
        value = files[rel]
        content, executable = value if isinstance(value, tuple) else (value, False)
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        path.chmod(0o755 if executable else 0o644)


def rewrite(path: Path, content: bytes, mtime_ns: int) -> None:
    """Write in place (same inode) and set the modification time."""
    with path.open("r+b") as file:
        file.truncate()
        file.write(content)
    os.utime(path, ns=(mtime_ns, mtime_ns))


# --------------------------------------------------------------------------- matches


@pytest.mark.parametrize(
    ("path", "patterns"),
    [
        ("tests/test_x.py", ["tests/**"]),
        ("tests/a/b.py", ["tests/**"]),
        ("tests", ["tests/**"]),
        ("README.md", ["*.md"]),
        ("docs/guide.md", ["*.md"]),
        ("pkg/__pycache__/mod.cpython-311.pyc", ["__pycache__"]),
        ("pkg/mod.pyc", ["*.pyc"]),
        ("src/app.py", ["src/app.py"]),
        ("tests/data/x.json", ["tests/data"]),
        ("src/app.py", ["src/*.py"]),
        ("conftest.py", ["**/conftest.py"]),
        ("tests/unit/conftest.py", ["**/conftest.py"]),
        ("a/x/y/b", ["a/**/b"]),
        ("a/b", ["a/**/b"]),
        ("./tests/x.py", ["tests/**"]),
        ("build/out/lib.so", ["/build/"]),
        ("proj.egg-info/PKG-INFO", DEFAULT_IGNORE),
        ("x.py", ["nothing", "x.py"]),
        ("file1.txt", ["file[0-9].txt"]),
    ],
)
def test_matches(path: str, patterns: list[str]) -> None:
    assert matches(path, patterns)


@pytest.mark.parametrize(
    ("path", "patterns"),
    [
        ("src/pkg/app.py", ["src/*.py"]),
        ("testsuite/x.py", ["tests/**"]),
        ("src/tests/x.py", ["tests/**"]),
        ("README.mdx", ["*.md"]),
        ("Readme.MD", ["*.md"]),
        ("a/x/c", ["a/**/b"]),
        ("src/app.py", []),
        ("src/app.py", [""]),
        ("src/app.py", ["app"]),
        ("src/gitignore", DEFAULT_IGNORE),
        ("filea.txt", ["file[0-9].txt"]),
    ],
)
def test_does_not_match(path: str, patterns: list[str]) -> None:
    assert not matches(path, patterns)


# --------------------------------------------------------------------------- digest


def test_empty_workspace_has_a_fixed_digest(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two" / "empty" / "dirs").mkdir(parents=True)
    (tmp_path / "two" / ".git").mkdir()
    (tmp_path / "two" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")

    assert tree_digest(tmp_path / "one") == EMPTY_TREE_DIGEST
    assert tree_digest(tmp_path / "two") == EMPTY_TREE_DIGEST


def test_missing_root_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        tree_digest(tmp_path / "absent")


def test_digest_does_not_depend_on_creation_order(tmp_path: Path) -> None:
    files: dict[str, Entry] = {
        "a.py": (b"print(1)\n", False),
        "pkg/__init__.py": (b"", False),
        "pkg/mod.py": (b"x = 1\n", False),
        "run.sh": (b"#!/bin/sh\n", True),
        "z/deep/data.bin": (bytes(range(256)), False),
    }
    write(tmp_path / "forward", files)
    write(tmp_path / "backward", files, order=reversed(list(files)))

    assert tree_digest(tmp_path / "forward") == tree_digest(tmp_path / "backward")
    assert tree_digest(tmp_path / "forward") != EMPTY_TREE_DIGEST


def test_every_change_changes_the_digest(tmp_path: Path) -> None:
    write(tmp_path, {"a.py": b"one\n", "pkg/b.py": b"two\n"})
    digests = {tree_digest(tmp_path)}

    (tmp_path / "a.py").write_bytes(b"One\n")  # content, same size
    digests.add(tree_digest(tmp_path))
    (tmp_path / "a.py").chmod(0o755)  # executable bit
    digests.add(tree_digest(tmp_path))
    (tmp_path / "pkg" / "b.py").rename(tmp_path / "pkg" / "c.py")  # path
    digests.add(tree_digest(tmp_path))
    (tmp_path / "pkg" / "c.py").rename(tmp_path / "c.py")  # directory
    digests.add(tree_digest(tmp_path))
    (tmp_path / "empty.txt").touch()  # an empty file still counts
    digests.add(tree_digest(tmp_path))

    assert len(digests) == 6


def test_mode_bits_other_than_executable_do_not_count(tmp_path: Path) -> None:
    write(tmp_path, {"a.py": b"x\n"})
    before = tree_digest(tmp_path)
    (tmp_path / "a.py").chmod(0o600)
    assert tree_digest(tmp_path) == before


def test_ignored_paths_do_not_count(tmp_path: Path) -> None:
    write(tmp_path, {"pkg/mod.py": b"x = 1\n"})
    before = tree_digest(tmp_path)

    write(
        tmp_path,
        {
            "__pycache__/x.pyc": b"\x00",
            "pkg/__pycache__/mod.cpython-311.pyc": b"\x00",
            "pkg/stray.pyc": b"\x00",
            ".git/HEAD": b"ref: refs/heads/main\n",
            ".git/objects/ab/cdef": b"blob",
            ".venv/bin/python": b"",
            "web/node_modules/left-pad/index.js": b"",
            ".proctor/state.db": b"",
            "proj.egg-info/PKG-INFO": b"",
            ".pytest_cache/v/cache/lastfailed": b"{}",
        },
    )
    assert tree_digest(tmp_path) == before


def test_custom_ignore_patterns(tmp_path: Path) -> None:
    write(tmp_path, {"src/app.py": b"x\n"})
    before = tree_digest(tmp_path, ignore=["build/**", "*.log"])

    write(tmp_path, {"build/lib/app.so": b"\x7fELF", "logs/run.log": b"..."})
    assert tree_digest(tmp_path, ignore=["build/**", "*.log"]) == before
    # Without them, the same files count, and so does .git.
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("x")
    hasher = TreeHasher(tmp_path, ignore=())
    hasher.digest()
    assert sorted(hasher.files()) == [".git/HEAD", "build/lib/app.so", "logs/run.log", "src/app.py"]


def test_symlinks_are_hashed_by_target_text_and_never_followed(tmp_path: Path) -> None:
    write(tmp_path, {"data/x.txt": b"one\n", "other.txt": b"data/x.txt"})
    (tmp_path / "link").symlink_to("data/x.txt")
    (tmp_path / "dirlink").symlink_to("data")
    (tmp_path / "dangling").symlink_to("nowhere")
    hasher = TreeHasher(tmp_path)
    first = hasher.digest()
    files = hasher.files()

    assert sorted(files) == ["dangling", "data/x.txt", "dirlink", "link", "other.txt"]
    # A symlink is not the same as a file holding its target text.
    assert files["link"] != files["other.txt"]

    # Changing the target file changes the file's entry, not the link's.
    (tmp_path / "data" / "x.txt").write_bytes(b"two\n")
    hasher.digest()
    assert hasher.files()["link"] == files["link"]
    assert changed_paths(files, hasher.files()) == ("data/x.txt",)

    # Changing the link's target text changes the link's entry.
    (tmp_path / "link").unlink()
    (tmp_path / "link").symlink_to("data/../data/x.txt")
    second = hasher.digest()
    assert hasher.files()["link"] != files["link"]
    assert len({first, second}) == 2
    assert second == tree_digest(tmp_path)


def test_special_files_are_skipped(tmp_path: Path) -> None:
    write(tmp_path, {"a.py": b"x\n"})
    before = tree_digest(tmp_path)
    os.mkfifo(tmp_path / "pipe")  # reading it would block
    assert tree_digest(tmp_path) == before


# --------------------------------------------------------------------------- incremental


def test_incremental_digest_matches_one_shot_after_edits(tmp_path: Path) -> None:
    write(tmp_path, {"a.py": b"alpha\n", "pkg/b.py": b"beta\n", "pkg/c.py": b"gamma\n"})
    for path in tmp_path.rglob("*.py"):
        os.utime(path, ns=(OLD, OLD))
    hasher = TreeHasher(tmp_path, racy_window=0)

    assert hasher.digest() == tree_digest(tmp_path)
    assert hasher.statistics().hashed == 3
    assert hasher.digest() == tree_digest(tmp_path)
    assert hasher.statistics().hashed == 0  # nothing changed, nothing read
    before = hasher.files()

    # Same size, new content, new mtime: the cache must not hide it.
    rewrite(tmp_path / "pkg" / "b.py", b"BETA!\n", OLD + 1_000_000_000)
    assert hasher.digest() == tree_digest(tmp_path)
    assert hasher.statistics().hashed == 1
    assert changed_paths(before, hasher.files()) == ("pkg/b.py",)

    # Deleting and adding.
    (tmp_path / "pkg" / "c.py").unlink()
    write(tmp_path, {"d.py": b"delta\n"})
    assert hasher.digest() == tree_digest(tmp_path)
    assert changed_paths(before, hasher.files()) == ("d.py", "pkg/b.py", "pkg/c.py")
    assert hasher.statistics().files == 3


def test_recently_modified_files_are_read_again(tmp_path: Path) -> None:
    write(tmp_path, {"fresh.py": b"x\n", "old.py": b"y\n"})
    os.utime(tmp_path / "old.py", ns=(OLD, OLD))
    hasher = TreeHasher(tmp_path)  # the default racy window
    hasher.digest()
    hasher.digest()
    # old.py's ctime is recent too, so neither is trusted from the cache yet.
    assert hasher.statistics().hashed == 2


def test_a_racily_clean_file_is_read_once_more_then_trusted(tmp_path: Path) -> None:
    # As git's index: a file changed just before it was read is read again at the
    # first digest after the window, and from then on its stat signature is trusted.
    write(tmp_path, {"fresh.py": b"x\n"})
    hasher = TreeHasher(tmp_path, racy_window=2.0)
    now = time.time_ns()
    hasher._clock = lambda: now
    hasher.digest()
    hasher.digest()
    assert hasher.statistics().hashed == 1  # still within the window: not trusted
    now += 3_000_000_000
    hasher.digest()
    assert hasher.statistics().hashed == 1  # the one more read, after the window
    hasher.digest()
    hasher.digest()
    assert hasher.statistics().hashed == 0  # trusted from then on


def test_a_rewrite_within_the_window_is_seen(tmp_path: Path) -> None:
    # Same size, same mtime, same tick: only the re-read after the window can tell.
    write(tmp_path, {"a.py": b"one\n"})
    hasher = TreeHasher(tmp_path, racy_window=2.0)
    now = time.time_ns()
    hasher._clock = lambda: now
    first = hasher.digest()
    st_before = (tmp_path / "a.py").stat()
    rewrite(tmp_path / "a.py", b"two\n", st_before.st_mtime_ns)
    now += 3_000_000_000
    assert hasher.digest() != first
    assert hasher.digest() == tree_digest(tmp_path)


def test_the_default_window_follows_the_file_system(tmp_path: Path) -> None:
    hasher = TreeHasher(tmp_path)
    hasher.digest()
    assert hasher._window in (100_000_000, 2_000_000_000)
    assert TreeHasher(tmp_path, racy_window=0)._window_ns() == 0


def test_invalidate_forces_a_new_read(tmp_path: Path) -> None:
    write(tmp_path, {"a.py": b"a\n", "pkg/b.py": b"b\n", "pkg/sub/c.py": b"c\n", "pkgx.py": b"x\n"})
    for path in tmp_path.rglob("*.py"):
        os.utime(path, ns=(OLD, OLD))
    hasher = TreeHasher(tmp_path, racy_window=0)
    digest = hasher.digest()

    hasher.invalidate("a.py")
    assert hasher.digest() == digest
    assert hasher.statistics().hashed == 1

    hasher.invalidate("pkg")  # a directory: everything beneath it, not pkgx.py
    assert hasher.digest() == digest
    assert hasher.statistics().hashed == 2

    hasher.invalidate(str(tmp_path / "pkg" / "sub" / "c.py"))  # absolute, inside the root
    hasher.invalidate("/elsewhere/a.py")  # outside: nothing
    assert hasher.digest() == digest
    assert hasher.statistics().hashed == 1

    hasher.invalidate("")
    assert hasher.digest() == digest
    assert hasher.statistics().hashed == 4


def test_changed_paths() -> None:
    before = {"a": "1", "b": "2", "c": "3"}
    after = {"a": "1", "b": "9", "d": "4"}
    assert changed_paths(before, after) == ("b", "c", "d")
    assert changed_paths(before, before) == ()
    assert changed_paths({}, after) == ("a", "b", "d")


# --------------------------------------------------------------------------- freeze


def test_freeze_copies_the_candidate(tmp_path: Path) -> None:
    root = tmp_path / "work"
    write(root, {"a.py": (b"print(1)\n", False), "bin/run": (b"#!/bin/sh\n", True)})
    write(root, {"__pycache__/a.pyc": b"\x00", ".git/HEAD": b"x"})
    (root / "link").symlink_to("a.py")
    (root / "empty").mkdir()

    snapshot = freeze(root, tmp_path / "snapshots" / "one")

    assert snapshot == tmp_path / "snapshots" / "one"
    assert tree_digest(snapshot) == tree_digest(root)
    assert os.readlink(snapshot / "link") == "a.py"
    assert (snapshot / "bin" / "run").stat().st_mode & stat.S_IXUSR
    assert (snapshot / "empty").is_dir()
    assert not (snapshot / "__pycache__").exists()
    assert not (snapshot / ".git").exists()


def test_freeze_is_not_changed_by_later_writes(tmp_path: Path) -> None:
    root = tmp_path / "work"
    write(root, {"a.py": b"one\n", "pkg/b.py": b"two\n"})
    snapshot = freeze(root, tmp_path / "snap")
    digest = tree_digest(snapshot)

    rewrite(root / "a.py", b"ONE\n", OLD)  # in place: a hard link would see it
    (root / "pkg" / "b.py").unlink()
    write(root, {"pkg/c.py": b"three\n"})

    assert tree_digest(snapshot) == digest
    assert tree_digest(root) != digest
    assert (snapshot / "a.py").read_bytes() == b"one\n"
    assert (snapshot / "a.py").stat().st_nlink == 1


def test_freeze_keeps_modes_of_read_only_directories(tmp_path: Path) -> None:
    root = tmp_path / "work"
    write(root, {"ro/x.txt": b"x\n"})
    (root / "ro" / "x.txt").chmod(0o444)
    (root / "ro").chmod(0o555)
    try:
        snapshot = freeze(root, tmp_path / "snap")
        assert stat.S_IMODE((snapshot / "ro").stat().st_mode) == 0o555
        assert stat.S_IMODE((snapshot / "ro" / "x.txt").stat().st_mode) == 0o444
        assert (snapshot / "ro" / "x.txt").read_bytes() == b"x\n"
    finally:
        (root / "ro").chmod(0o755)
        if (tmp_path / "snap" / "ro").exists():
            (tmp_path / "snap" / "ro").chmod(0o755)


def test_freeze_refuses_an_existing_destination(tmp_path: Path) -> None:
    write(tmp_path / "work", {"a.py": b"x\n"})
    (tmp_path / "snap").mkdir()
    with pytest.raises(FileExistsError):
        freeze(tmp_path / "work", tmp_path / "snap")


def test_freeze_inside_the_workspace_needs_an_ignored_path(tmp_path: Path) -> None:
    write(tmp_path, {"a.py": b"x\n"})
    with pytest.raises(ConfigError, match="inside the workspace"):
        freeze(tmp_path, tmp_path / "snapshots" / "one")
    assert not (tmp_path / "snapshots").exists()

    snapshot = freeze(tmp_path, tmp_path / ".proctor" / "snapshots" / "one")
    assert tree_digest(snapshot) == tree_digest(tmp_path)


# --------------------------------------------------------------------------- properties

_names = st.sampled_from(["a", "b", "c.txt", "d.py", "e"])
_paths = st.lists(_names, min_size=1, max_size=3).map("/".join)


def _prune(tree: dict[str, Entry]) -> dict[str, Entry]:
    """Drop files whose path is also a directory of another file (it cannot be both)."""
    return {
        path: entry
        for path, entry in tree.items()
        if not any(other.startswith(f"{path}/") for other in tree)
    }


_trees = st.dictionaries(
    _paths, st.tuples(st.binary(max_size=12), st.booleans()), min_size=1, max_size=6
).map(_prune)


def _digest_of(tree: Mapping[str, Entry], order: Iterable[str] | None = None) -> str:
    with tempfile.TemporaryDirectory() as directory:
        write(Path(directory), tree, order)
        return tree_digest(Path(directory))


@settings(max_examples=30, deadline=None)
@given(tree=_trees, data=st.data())
def test_digest_is_order_independent(tree: dict[str, Entry], data: st.DataObject) -> None:
    order = data.draw(st.permutations(list(tree)))
    assert _digest_of(tree) == _digest_of(tree, order)


@settings(max_examples=30, deadline=None)
@given(tree=_trees, data=st.data())
def test_any_single_change_changes_the_digest(tree: dict[str, Entry], data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(sorted(tree)))
    content, executable = tree[path]
    head, _, name = path.rpartition("/")
    moved = f"{head}/zz_{name}" if head else f"zz_{name}"
    variants = [
        {**tree, path: (content + b"!", executable)},
        {**tree, path: (bytes(b ^ 1 for b in content) or b"\x00", executable)},
        {**tree, path: (content, not executable)},
        {**{p: e for p, e in tree.items() if p != path}, moved: (content, executable)},
    ]
    original = _digest_of(tree)
    for variant in variants:
        assert _digest_of(variant) != original


@settings(max_examples=30, deadline=None)
@given(tree=_trees, data=st.data())
def test_ignored_files_do_not_change_the_digest(
    tree: dict[str, Entry], data: st.DataObject
) -> None:
    path = data.draw(st.sampled_from(sorted(tree)))
    head = path.rpartition("/")[0]
    prefix = f"{head}/" if head else ""
    ignored = data.draw(
        st.sampled_from(["__pycache__/m.cpython-311.pyc", "stray.pyc", ".git/HEAD", ".venv/x"])
    )
    content = data.draw(st.binary(max_size=8))
    assert _digest_of({**tree, f"{prefix}{ignored}": (content, False)}) == _digest_of(tree)


_PARTS = st.sampled_from(["a", "b", "x.py", "*", "*.py", "a*", "?", "[ab]", "**", ".", ""])
_NO_LEAD = ["", "", "", "", "", ""]


@settings(max_examples=1000, deadline=None)
@example(patterns=["a/**"], lead=_NO_LEAD, path=["a"])
@example(patterns=["a/**"], lead=_NO_LEAD, path=["a", "b"])
@example(patterns=["a/b/**"], lead=_NO_LEAD, path=["a", "b", "x.py"])
@example(patterns=["a/b"], lead=_NO_LEAD, path=["a", "b"])
@example(patterns=["**/x.py"], lead=_NO_LEAD, path=["a", "x.py"])
@example(patterns=["**/a/*.py"], lead=_NO_LEAD, path=["b", "a", "x.py"])
@example(patterns=["**/a/*.py"], lead=_NO_LEAD, path=["a", "b", "x.py"])
@example(patterns=["*.py"], lead=["./", "", "", "", "", ""], path=["x.py"])
@example(patterns=["*.py"], lead=["./", "", "", "", "", ""], path=["a", "x.py"])
@given(
    patterns=st.lists(st.lists(_PARTS, min_size=1, max_size=4).map("/".join), max_size=6),
    lead=st.lists(st.sampled_from(["", "./", "/"]), min_size=6, max_size=6),
    path=st.lists(st.sampled_from(["a", "b", "x.py", "y.py", "c"]), min_size=1, max_size=4),
)
def test_the_matcher_s_shortcuts_match_what_the_general_matcher_does(
    patterns: list[str], lead: list[str], path: list[str]
) -> None:
    from proctor.verifiers._candidate import _compile, _match_parts

    written = tuple(lead[i] + p for i, p in enumerate(patterns))
    matcher = _compile(written)
    rel = "/".join(path)

    def reference(rel: str, name: str) -> bool:
        # Every pattern through the general component-by-component matcher.
        for raw in written:
            pattern = raw.strip("/")
            if not pattern:
                continue
            if "/" not in pattern:
                if fnmatch.fnmatchcase(name, pattern):
                    return True
                continue
            parts = tuple(part for part in pattern.split("/") if part not in ("", "."))
            if _match_parts(parts, rel.split("/")):
                return True
        return False

    assert matcher.matches_self(rel, path[-1]) == reference(rel, path[-1])
