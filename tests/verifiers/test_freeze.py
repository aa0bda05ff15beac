"""
Freezing a candidate: clones where the file system has them, copies elsewhere,
and a snapshot digest that reuses what the workspace's tree knows without ever
binding a digest to content that was not read.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from proctor.verifiers import _candidate
from proctor.verifiers._candidate import (
    TreeHasher,
    freeze_known,
    snapshot_directory,
    snapshot_hasher,
    tree_digest,
)

OLD = 1_600_000_000_000_000_000  # a modification time well outside any racy window


def _workspace(root: Path, files: int = 20) -> Path:
    for i in range(files):
        path = root / f"d{i % 4}" / f"f{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"value = {i}\n")
        os.utime(path, ns=(OLD, OLD))
    return root


def _known(root: Path) -> TreeHasher:
    hasher = TreeHasher(root, racy_window=0)
    hasher.digest(full=True)
    return hasher


def _same_size_rewrite(path: Path, content: bytes) -> None:
    """Rewrite in place, size and mtime put back: only ctime (and content) moves."""
    before = path.stat()
    assert len(content) == before.st_size
    with path.open("r+b") as file:
        file.write(content)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_the_snapshot_digest_reads_nothing_the_tree_knew(tmp_path: Path) -> None:
    root = _workspace(tmp_path / "work")
    hasher = _known(root)
    known = freeze_known(root, tmp_path / "snap", known=hasher.manifest())
    verifier = snapshot_hasher(tmp_path / "snap", known=known)
    assert verifier.digest() == hasher.digest(full=True) == tree_digest(tmp_path / "snap")
    assert verifier.statistics().hashed == 0
    assert verifier.statistics().files == 20


def test_without_what_the_tree_knew_every_file_is_read(tmp_path: Path) -> None:
    root = _workspace(tmp_path / "work")
    known = freeze_known(root, tmp_path / "snap")
    assert known == {}
    verifier = snapshot_hasher(tmp_path / "snap", known=known)
    assert verifier.digest() == tree_digest(root)
    assert verifier.statistics().hashed == 20


def test_a_write_the_tree_did_not_see_is_read_not_trusted(tmp_path: Path) -> None:
    # Written after the tree's walk, size and mtime put back (an attacker's
    # rewrite): the freeze sees another ctime, and the snapshot's digest is of
    # what the snapshot holds.
    root = _workspace(tmp_path / "work")
    hasher = _known(root)
    before = hasher.manifest()
    _same_size_rewrite(root / "d1" / "f5.py", b"VALUE = 5\n")
    known = freeze_known(root, tmp_path / "snap", known=before)
    verifier = snapshot_hasher(tmp_path / "snap", known=known)
    digest = verifier.digest()
    assert digest != before.digest
    assert digest == tree_digest(tmp_path / "snap") == tree_digest(root)
    assert verifier.statistics().hashed == 1
    assert (tmp_path / "snap" / "d1" / "f5.py").read_bytes() == b"VALUE = 5\n"


def test_a_write_racing_the_copy_is_read_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worst moment: after the freeze's first look at the source, before its
    # content is copied. The copy holds the new content; its digest must too.
    root = _workspace(tmp_path / "work")
    hasher = _known(root)
    clone: Callable[[int, int], None] = _candidate._clone
    raced: list[int] = []

    def racing_clone(src: int, dst: int) -> None:
        if not raced:
            raced.append(src)
            _same_size_rewrite(root / "d0" / "f0.py", b"VALUE = 0\n")
        clone(src, dst)

    monkeypatch.setattr(_candidate, "_clone", racing_clone)
    known = freeze_known(root, tmp_path / "snap", known=hasher.manifest())
    verifier = snapshot_hasher(tmp_path / "snap", known=known)
    assert raced
    assert verifier.digest() == tree_digest(tmp_path / "snap")
    assert (tmp_path / "snap" / "d0" / "f0.py").read_bytes() == b"VALUE = 0\n"
    assert verifier.statistics().hashed == 1


def test_a_snapshot_changed_after_its_freeze_is_read(tmp_path: Path) -> None:
    root = _workspace(tmp_path / "work")
    hasher = _known(root)
    known = freeze_known(root, tmp_path / "snap", known=hasher.manifest())
    _same_size_rewrite(tmp_path / "snap" / "d2" / "f6.py", b"VALUE = 6\n")
    verifier = snapshot_hasher(tmp_path / "snap", known=known)
    assert verifier.digest() == tree_digest(tmp_path / "snap") != hasher.digest(full=True)
    assert verifier.statistics().hashed == 1


def test_a_racily_clean_file_is_never_taken_on_trust(tmp_path: Path) -> None:
    root = _workspace(tmp_path / "work")
    (root / "fresh.py").write_text("x = 1\n")
    # Every ctime is of the last minute: within this window no signature is trusted.
    hasher = TreeHasher(root, racy_window=60)
    hasher.digest(full=True)
    known = freeze_known(root, tmp_path / "snap", known=hasher.manifest())
    verifier = snapshot_hasher(tmp_path / "snap", known=known)
    assert verifier.digest() == tree_digest(root)
    assert verifier.statistics().hashed == 21


def test_the_snapshot_directory_is_private_and_on_the_workspace_s_file_system(
    tmp_path: Path,
) -> None:
    root = _workspace(tmp_path / "work", files=1)
    made = snapshot_directory(root)
    try:
        assert made.name.startswith("proctor-candidate-")
        assert made.stat().st_dev == root.stat().st_dev
        assert made.stat().st_mode & 0o777 == 0o700
        assert root.resolve() not in made.resolve().parents
    finally:
        made.rmdir()


# --------------------------------------------------------------------------- reflink


def _mount_reflink_file_system() -> Iterator[Path]:
    if os.geteuid() != 0 or shutil.which("mkfs.xfs") is None or shutil.which("mount") is None:
        pytest.skip("a reflink file system needs root and mkfs.xfs (apt-get install xfsprogs)")
    scratch = Path(tempfile.mkdtemp(prefix="proctor-xfs-"))
    image, point = scratch / "image", scratch / "mnt"
    point.mkdir()
    with image.open("wb") as file:
        file.truncate(400 * 2**20)
    made = subprocess.run(
        ["mkfs.xfs", "-q", "-m", "reflink=1", str(image)], capture_output=True, check=False
    )
    mounted = made.returncode == 0 and (
        subprocess.run(
            ["mount", "-o", "loop", str(image), str(point)], capture_output=True, check=False
        ).returncode
        == 0
    )
    if not mounted:
        shutil.rmtree(scratch, ignore_errors=True)
        pytest.skip("no loop mount here (a container without loop devices)")
    try:
        yield point
    finally:
        subprocess.run(["umount", str(point)], check=False)
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture(scope="module")
def reflink_fs() -> Iterator[Path]:
    yield from _mount_reflink_file_system()


def _used(path: Path) -> int:
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def test_a_freeze_on_a_reflink_file_system_clones_instead_of_copying(reflink_fs: Path) -> None:
    root = reflink_fs / "work"
    (root / "data").mkdir(parents=True)
    (root / "data" / "big.bin").write_bytes(os.urandom(64 * 2**20))
    (root / "small.py").write_text("x = 1\n")
    os.sync()
    parent = snapshot_directory(root)
    try:
        # /tmp is another file system here: the snapshot goes beside the workspace.
        assert parent.stat().st_dev == root.stat().st_dev
        used = _used(reflink_fs)
        hasher = _known(root)
        known = freeze_known(root, parent / "tree", known=hasher.manifest())
        os.sync()
        grown = _used(reflink_fs) - used
        # 64 MiB frozen, a few blocks of metadata written: the extents are shared.
        assert grown < 8 * 2**20
        verifier = snapshot_hasher(parent / "tree", known=known)
        assert verifier.digest() == hasher.digest(full=True)
        assert verifier.statistics().hashed == 0
        # A shared extent is still a copy: writing the original leaves the snapshot.
        with (root / "data" / "big.bin").open("r+b") as file:
            file.write(b"changed")
        assert tree_digest(parent / "tree") == verifier.digest()
    finally:
        shutil.rmtree(parent, ignore_errors=True)
