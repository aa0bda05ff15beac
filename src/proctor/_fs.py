"""
What a command wrote, handled on the host after it: removing its tree (a
check's copy or upper directory, a pytest report directory, a snapshot) and
reading a report from it.

``shutil.rmtree`` recurses once per level and passes whole paths (Python 3.11):
a command that makes a directory a few thousand levels deep raises
``RecursionError`` in it (not an ``OSError``, so ``ignore_errors`` lets it
through) and leaves the tree behind. This walk keeps one directory open at a
time, goes by names relative to it, and never follows a symlink.

A report is read the same way: a command that wrote it as a symlink (to a host
file the sandbox cannot see, to ``/proc/kmsg``, whose read blocks) or as a FIFO
finds it read as missing, never followed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import PurePosixPath

__all__ = ("read_inside", "remove_tree")

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


def read_inside(root: str | os.PathLike[str], rel: str, limit: int) -> bytes:
    """
    Read at most ``limit + 1`` bytes of the regular file ``rel`` beneath ``root``
    without following a symlink on the way.

    Raises:
        FileNotFoundError: ``rel`` is not there, or is not a regular file below
            ``root`` (a symlink at any step, a FIFO, a device, ``..``).
        OSError: it could not be read.
    """
    parts = [part for part in PurePosixPath(rel).parts if part != "."]
    if not parts or rel.startswith("/") or ".." in parts:
        raise FileNotFoundError(rel)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            step = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = step
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        file = os.open(parts[-1], flags, dir_fd=fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENXIO):
            raise FileNotFoundError(rel) from exc
        raise
    finally:
        os.close(fd)
    with os.fdopen(file, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise FileNotFoundError(rel)
        return handle.read(limit + 1)
