"""The watched tree hasher agrees with a fresh walk after any sequence of changes."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from proctor.verifiers._candidate import EMPTY_TREE_DIGEST, TreeHasher, tree_digest
from proctor.verifiers._watch import open_watcher

pytestmark = pytest.mark.skipif(open_watcher("/") is None, reason="no inotify on this system")

DIRS = ("", "a", "a/b", "c", "__pycache__", "a/.git")
NAMES = ("x.py", "y.txt", "z", "m.pyc")
PATHS = tuple(f"{d}/{n}" if d else n for d in DIRS for n in NAMES)


class WatchedTree(RuleBasedStateMachine):
    """Change a real tree at random; the watched hasher must match a full walk each time."""

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="watch-"))
        self.hasher = TreeHasher(self.root, watch=True)
        self.hasher.digest()

    def teardown(self) -> None:
        self.hasher.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def _path(self, rel: str) -> Path:
        return self.root / rel

    def _through_link(self, rel: str) -> bool:
        # A link on the way (or at the end) would send the write elsewhere, or loop.
        parts = rel.split("/")
        return any((self.root.joinpath(*parts[: i + 1])).is_symlink() for i in range(len(parts)))

    @rule(rel=st.sampled_from(PATHS), content=st.binary(max_size=8))
    def write(self, rel: str, content: bytes) -> None:
        path = self._path(rel)
        if self._through_link(rel) or path.parent.is_file() or path.is_dir():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)

    @rule(rel=st.sampled_from(PATHS))
    def delete(self, rel: str) -> None:
        path = self._path(rel)
        if path.is_symlink() or (not self._through_link(rel) and path.is_file()):
            path.unlink()

    @rule(rel=st.sampled_from(DIRS[1:]))
    def remove_directory(self, rel: str) -> None:
        path = self._path(rel)
        if not self._through_link(rel) and path.is_dir():
            shutil.rmtree(path)

    @rule(rel=st.sampled_from(DIRS[1:]), name=st.sampled_from(NAMES))
    def recreate_directory(self, rel: str, name: str) -> None:
        # Gone and back at the same path: a new directory the old watch never saw.
        path = self._path(rel)
        if self._through_link(rel):
            return
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            return
        if any(p.is_file() for p in path.parents if self.root in p.parents):
            return
        path.mkdir(parents=True)
        (path / name).write_text("anew")

    @rule(src=st.sampled_from(PATHS + DIRS[1:]), dst=st.sampled_from(PATHS + DIRS[1:]))
    def rename(self, src: str, dst: str) -> None:
        source, target = self._path(src), self._path(dst)
        if src == dst or not (source.exists() or source.is_symlink()):
            return
        if target.exists() or target.is_symlink() or not target.parent.is_dir():
            return
        if dst.startswith(f"{src}/"):
            return
        heads = [r.rpartition("/")[0] for r in (src, dst)]
        if any(head and self._through_link(head) for head in heads):
            return
        os.rename(source, target)

    @rule(rel=st.sampled_from(PATHS), to=st.sampled_from(("x.py", "../outside", "a")))
    def symlink(self, rel: str, to: str) -> None:
        path = self._path(rel)
        if path.exists() or path.is_symlink() or not path.parent.is_dir():
            return
        path.symlink_to(to)

    @rule(rel=st.sampled_from(PATHS))
    def toggle_executable(self, rel: str) -> None:
        path = self._path(rel)
        if not self._through_link(rel) and path.is_file():
            path.chmod(path.stat().st_mode ^ 0o100)

    @rule(rel=st.sampled_from(PATHS), content=st.binary(max_size=8))
    def rewrite_in_place(self, rel: str, content: bytes) -> None:
        # Same size, same second: only the kernel's report says it changed.
        path = self._path(rel)
        if not self._through_link(rel) and path.is_file():
            stat = path.stat()
            with path.open("r+b") as file:
                file.write(content[: stat.st_size].ljust(stat.st_size, b"#"))
            os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    @invariant()
    def agrees_with_a_fresh_walk(self) -> None:
        fresh = TreeHasher(self.root, racy_window=0)
        expected = fresh.digest()
        # Asked first: digest() drains what the kernel reported.
        known = self.hasher.unchanged()
        assert known is None or known == expected
        assert self.hasher.digest() == expected
        assert self.hasher.files() == fresh.files()


TestWatchedTree = WatchedTree.TestCase
TestWatchedTree.settings = settings(
    max_examples=60,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_a_digest_after_nothing_changed_reads_nothing(tmp_path: Path) -> None:
    for i in range(50):
        (tmp_path / f"d{i % 5}").mkdir(exist_ok=True)
        (tmp_path / f"d{i % 5}" / f"f{i}.txt").write_text(str(i))
    hasher = TreeHasher(tmp_path, watch=True)
    try:
        first = hasher.digest()
        assert hasher.digest() == first
        assert hasher.statistics().hashed == 0
        (tmp_path / "d3" / "f3.txt").write_text("changed")
        changed = hasher.digest()
        assert changed != first
        assert changed == tree_digest(tmp_path)
        assert hasher.statistics().hashed == 1
    finally:
        hasher.close()


def test_the_last_digest_stands_only_while_the_kernel_reports_nothing(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("one")
    assert TreeHasher(tmp_path, racy_window=0).unchanged() is None  # not watched
    hasher = TreeHasher(tmp_path, watch=True, racy_window=0)
    try:
        assert hasher.unchanged() is None  # nothing computed yet
        first = hasher.digest()
        assert hasher.unchanged() == first
        (tmp_path / "d" / "f").write_text("two")
        assert hasher.unchanged() is None  # reported, not yet read
        second = hasher.digest()
        assert second != first
        assert hasher.unchanged() == second == tree_digest(tmp_path)
        hasher.invalidate("d/f")
        assert hasher.unchanged() is None  # to be read again
        assert hasher.digest() == second
        assert hasher.unchanged() == second
        # Rewritten in place, its stat as it was: the kernel's report tells it.
        stat = (tmp_path / "d" / "f").stat()
        (tmp_path / "d" / "f").write_text("owt")
        os.utime(tmp_path / "d" / "f", ns=(stat.st_atime_ns, stat.st_mtime_ns))
        assert hasher.unchanged() is None
        assert hasher.digest() == tree_digest(tmp_path) != second
    finally:
        hasher.close()


def test_a_full_digest_walks_even_when_watched(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("one")
    hasher = TreeHasher(tmp_path, watch=True, racy_window=0)
    try:
        hasher.digest()
        assert hasher.digest(full=True) == tree_digest(tmp_path)
        assert hasher.statistics().files == 1
    finally:
        hasher.close()


def test_an_emptied_tree_has_the_empty_digest(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").write_text("x")
    hasher = TreeHasher(tmp_path, watch=True)
    try:
        assert hasher.digest() != EMPTY_TREE_DIGEST
        shutil.rmtree(tmp_path / "a")
        assert hasher.digest() == EMPTY_TREE_DIGEST
    finally:
        hasher.close()


def test_a_closed_hasher_still_walks(tmp_path: Path) -> None:
    hasher = TreeHasher(tmp_path, watch=True)
    hasher.digest()
    hasher.close()
    (tmp_path / "late").write_text("x")
    assert hasher.digest() == tree_digest(tmp_path)
