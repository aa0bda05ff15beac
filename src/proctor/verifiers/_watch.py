"""
What changed in a directory tree since the last look, from the kernel (Linux inotify).

A :class:`TreeWatcher` holds one inotify instance with a watch on every directory
of the tree that is not ignored. The kernel queues an event in the same system
call that changes a directory entry or writes a file, so once the processes that
made changes have ended, :meth:`TreeWatcher.drain` reads every change they made
without waiting.

What it cannot see, and answers ``None`` for (the caller rescans the tree): an
overflowed event queue, a directory renamed or moved (its watches would report
under the old path), a watch the kernel refused (the per-user limit), the
watched root itself removed or moved. What it cannot see at all: writes through
a shared memory mapping and writes to a file through a hard link outside the
tree. Callers that bind evidence to a digest rescan in full (see
:meth:`~proctor.verifiers._candidate.TreeHasher.digest`).

Uses ``ctypes`` over the C library; where inotify is missing (not Linux, or no
libc), :func:`open_watcher` returns None and callers rescan every time.
"""

from __future__ import annotations

import array
import ctypes
import ctypes.util
import errno
import fcntl
import os
import struct
import sys
import termios
from typing import Final

import attrs

__all__ = ("TreeWatcher", "open_watcher")

_IN_MODIFY: Final = 0x00000002
_IN_ATTRIB: Final = 0x00000004
_IN_CLOSE_WRITE: Final = 0x00000008
_IN_MOVED_FROM: Final = 0x00000040
_IN_MOVED_TO: Final = 0x00000080
_IN_CREATE: Final = 0x00000100
_IN_DELETE: Final = 0x00000200
_IN_DELETE_SELF: Final = 0x00000400
_IN_MOVE_SELF: Final = 0x00000800
_IN_Q_OVERFLOW: Final = 0x00004000
_IN_IGNORED: Final = 0x00008000
_IN_ONLYDIR: Final = 0x01000000
_IN_DONT_FOLLOW: Final = 0x02000000
_IN_EXCL_UNLINK: Final = 0x04000000
_IN_ISDIR: Final = 0x40000000
_IN_NONBLOCK: Final = os.O_NONBLOCK
_IN_CLOEXEC: Final = os.O_CLOEXEC

_MASK: Final = (
    _IN_MODIFY
    | _IN_ATTRIB
    | _IN_CLOSE_WRITE
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
    | _IN_ONLYDIR
    | _IN_DONT_FOLLOW
    | _IN_EXCL_UNLINK
)
_EVENT: Final = struct.Struct("iIII")
_BUFFER: Final = 1 << 16


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        return libc
    except (OSError, AttributeError):
        return None


_LIBC: Final = _libc()


@attrs.define(eq=False)
class TreeWatcher:
    """
    One inotify instance watching the directories of a tree.

    Paths are POSIX paths relative to the root (``""`` is the root itself).
    Create one with :func:`open_watcher`; :meth:`close` it when done.
    """

    _fd: int
    _libc: ctypes.CDLL
    root: str
    _paths: dict[int, str] = attrs.field(factory=dict, init=False)
    _lost: bool = attrs.field(default=False, init=False)

    def watch(self, rel: str) -> None:
        """
        Watch the directory ``rel`` (not its subdirectories: watch each one).

        A directory the kernel will not watch (gone already, or over the
        per-user limit) makes the next :meth:`drain` answer None.
        """
        path = os.path.join(self.root, rel) if rel else self.root
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(path), _MASK)
        if wd < 0:
            self._lost = True
            return
        self._paths[wd] = rel

    def reset(self) -> None:
        """Drop every watch and every pending event, to watch the tree afresh."""
        os.close(self._fd)
        self._fd = _init(self._libc)
        self._paths.clear()
        self._lost = False

    def quiet(self) -> bool:
        """
        Whether the kernel has reported nothing since the last :meth:`drain` and
        nothing was lost: what the queue holds, asked for without reading it.
        """
        if self._lost:
            return False
        pending = array.array("i", [0])
        fcntl.ioctl(self._fd, termios.FIONREAD, pending, True)
        return pending[0] == 0

    def drain(self) -> dict[str, bool] | None:
        """
        Return the paths changed since the last drain, or None when that cannot be known.

        A path is a file or directory that was created, removed, renamed to or
        from, written or had its metadata changed; it maps to True when it was
        created (a directory created anew is not the one watched before, even at
        the same path). None means: rescan the tree, then :meth:`reset` and watch
        it again.
        """
        changed: dict[str, bool] = {}
        while True:
            try:
                data = os.read(self._fd, _BUFFER)
            except BlockingIOError:
                break
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
                offset += _EVENT.size
                name = data[offset : offset + length].rstrip(b"\0")
                offset += length
                if mask & _IN_Q_OVERFLOW:
                    self._lost = True
                    continue
                if mask & _IN_IGNORED:
                    self._paths.pop(wd, None)
                    continue
                base = self._paths.get(wd)
                if base is None:
                    continue
                if mask & (_IN_DELETE_SELF | _IN_MOVE_SELF):
                    if not base:
                        self._lost = True
                    continue
                if mask & _IN_ISDIR and mask & (_IN_MOVED_FROM | _IN_MOVED_TO):
                    self._lost = True
                    continue
                rel_name = os.fsdecode(name)
                rel = f"{base}/{rel_name}" if base else rel_name
                changed[rel] = changed.get(rel, False) or bool(mask & _IN_CREATE)
        if self._lost:
            return None
        return changed

    def close(self) -> None:
        """Release the inotify instance."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _init(libc: ctypes.CDLL) -> int:
    fd = int(libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC))
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code or errno.EINVAL))
    return fd


def open_watcher(root: str) -> TreeWatcher | None:
    """
    Return a watcher for the tree at ``root`` (no directory watched yet), or None.

    None: this system has no inotify, or no instance could be made (the
    per-user limit on instances); the caller rescans instead.
    """
    if _LIBC is None:
        return None
    try:
        fd = _init(_LIBC)
    except OSError:
        return None
    return TreeWatcher(fd, _LIBC, root)
