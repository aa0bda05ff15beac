"""Removing a tree a command wrote, whatever it made of it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from proctor._fs import remove_tree


def test_a_tree_of_any_depth_is_removed(tmp_path: Path) -> None:
    # Deeper than shutil.rmtree's recursion and than PATH_MAX as one path.
    top = tmp_path / "top"
    top.mkdir()
    fd = os.open(top, os.O_RDONLY)
    for _ in range(3000):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(os.open("f", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
    os.chmod(fd, 0)
    os.close(fd)
    remove_tree(top)
    assert not top.exists()


def test_links_are_removed_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "to-dir").symlink_to(outside)
    (tree / "to-file").symlink_to(outside / "keep")
    os.link(outside / "keep", tree / "hard")
    os.mkfifo(tree / "pipe")
    (tree / "locked").mkdir()
    (tree / "locked" / "f").write_text("x")
    os.chmod(tree / "locked", 0)
    remove_tree(tree)
    assert not tree.exists()
    assert (outside / "keep").read_text() == "x"


def test_a_file_or_nothing_is_removed_quietly(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    remove_tree(tmp_path / "file")
    remove_tree(tmp_path / "missing")
    assert not (tmp_path / "file").exists()


def test_a_report_is_read_only_as_a_regular_file_below_its_root(tmp_path: Path) -> None:
    from proctor._fs import read_inside

    outside = tmp_path / "outside.xml"
    outside.write_text("host")
    root = tmp_path / "root"
    (root / "out").mkdir(parents=True)
    (root / "out" / "report.xml").write_text("<ok/>")
    (root / "link.xml").symlink_to(outside)
    (root / "dir").symlink_to(root / "out")
    os.mkfifo(root / "pipe.xml")
    assert read_inside(root, "out/report.xml", 100) == b"<ok/>"
    assert read_inside(root, "./out/report.xml", 2) == b"<ok"  # limit + 1 bytes
    for rel in ("link.xml", "dir/report.xml", "pipe.xml", "missing.xml", "../outside.xml", "/x"):
        with pytest.raises(FileNotFoundError):
            read_inside(root, rel, 100)
