"""
Removing a tree that a command wrote: a check's copy or upper directory, a
pytest report directory, a snapshot.

``shutil.rmtree`` recurses once per level and passes whole paths (Python 3.11):
a command that makes a directory a few thousand levels deep raises
``RecursionError`` in it (not an ``OSError``, so ``ignore_errors`` lets it
through) and leaves the tree behind. This walk keeps one directory open at a
time, goes by names relative to it, and never follows a symlink.
"""

from __future__ import annotations

import contextlib
import os
import stat

__all__ = ("remove_tree",)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_child(name: str, parent: int) -> int | None:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except PermissionError:
        # A directory the command left without permissions (its owner may chmod it).
        try:
            os.chmod(name, 0o700, dir_fd=parent)
            return os.open(name, _DIR_FLAGS, dir_fd=parent)
        except OSError:
            return None
    except OSError:
        return None


def _clear(fd: int) -> list[str]:
    """Unlink every non-directory in the open directory ``fd``; return its subdirectories."""
    subdirectories: list[str] = []
    try:
        with os.scandir(fd) as it:
            entries = list(it)
    except OSError:
        return subdirectories
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                subdirectories.append(entry.name)
            else:
                os.unlink(entry.name, dir_fd=fd)
        except OSError:
            continue
    return subdirectories


def remove_tree(path: str | os.PathLike[str]) -> None:
    """
    Remove ``path`` and everything beneath it, whatever its depth; errors are
    ignored, as ``shutil.rmtree(path, ignore_errors=True)`` ignores them.
    """
    try:
        st = os.lstat(path)
    except OSError:
        return
    if not stat.S_ISDIR(st.st_mode):
        with contextlib.suppress(OSError):
            os.unlink(path)
        return
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError:
        return
    # One frame per level below ``path``: the directory's name in its parent and
    # its subdirectories still to remove. Only the deepest directory is open.
    stack: list[tuple[str, list[str]]] = [("", _clear(fd))]
    try:
        while stack:
            name, pending = stack[-1]
            if pending:
                child = pending.pop()
                opened = _open_child(child, fd)
                if opened is None:
                    continue
                os.close(fd)
                fd = opened
                stack.append((child, _clear(fd)))
                continue
            stack.pop()
            if not stack:
                break
            # Nothing runs in the tree any more: ".." is the directory we came from.
            parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = parent
            with contextlib.suppress(OSError):
                os.rmdir(name, dir_fd=fd)
    except OSError:
        pass
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(path)
