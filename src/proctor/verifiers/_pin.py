"""
Verifying a candidate in place: the workspace held still instead of copied.

A copy of a 27,000-file tree costs seconds to make and seconds to remove. Where
the checks' sandbox can mount an overlay (``SandboxSpec.lower``), a command
check sees the workspace itself as a read-only lower layer, its own writes going
to a private upper directory that holds only what it changed; nothing is copied.

What makes that sound is the pin: before the candidate's digest is taken, every
directory and entry of the workspace is stat'ed (a directory before it is
listed) and the stat fingerprints, ctime among them, are hashed together. After
the checks the same walk is made again. ctime cannot be set back by any call, so
a write, a rename, an entry added and removed again, or a file rewritten and its
mtime restored, anywhere in the tree and at any moment in between, gives another
signature: then nothing the checks saw is trusted (:class:`CandidateMoved`) and
the candidate is verified again from a copy. A pin is taken only when no entry
changed within the racy window before it (two changes within one timestamp tick
could leave one signature).

What an overlay shows a check is made to be exactly what a copy would hold: the
ignored paths and special files of the workspace are hidden (whiteouts in the
upper directory: a planted ``__pycache__/*.pyc`` is not there), and the protected
and harness files are the baseline's (the candidate's removed, the baseline's
written into the upper directory), as :func:`~proctor.verifiers._harness.restore`
makes them in a copy.
"""

from __future__ import annotations

import base64
import os
import stat
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from proctor._fs import remove_tree
from proctor.runtime._tools.sandbox import OVERLAY_UNSAFE, SandboxSpec, overlay_available
from proctor.verifiers._candidate import (
    StatSignature,
    TreeHasher,
    _compile,
    _Matcher,
    _timestamp_window,
)
from proctor.verifiers._checks import CommandCheck
from proctor.verifiers._index import FILE, RECORD, Manifest, names_of
from proctor.verifiers._more_checks import Check

__all__ = ("CandidateMoved", "Pin", "in_place", "pin_tree", "pinned_digest", "prepare_upper")

# The mode of an overlay whiteout: a character device 0/0.
_WHITEOUT = stat.S_IFCHR | 0o600


class CandidateMoved(Exception):
    """The workspace changed while a candidate pinned in it was verified."""


@attrs.frozen(eq=False)
class Pin:
    """
    A workspace held in place for one verification.

    Args:
        root: the workspace.
        ignore: the patterns its tree is hashed with.
        signature: the stat signature of the walk that took the candidate's digest
            (:class:`~proctor.verifiers._candidate.StatSignature`).
        hidden: relative paths of the ignored entries and special files (a check's
            view hides them).
        links: relative paths of the symlinks (the verifier checks where they lead).
        size: the regular files' apparent sizes, summed.
        manifest: the candidate's tree from that walk; its digest is what
            evidence is bound to.
    """

    root: Path
    ignore: tuple[str, ...]
    signature: bytes
    hidden: tuple[str, ...]
    links: tuple[str, ...]
    size: int
    manifest: Manifest

    def moved(self) -> bool:
        """
        Whether anything in the workspace changed since the pin: the same walk
        again (it reads no file whose stat fingerprint is the one the tree holds).
        """
        sign = StatSignature()
        hasher = TreeHasher(self.root, self.ignore, racy_window=0)
        hasher.adopt(self.manifest.nodes)
        try:
            hasher.digest(sign=sign)
        except OSError:
            return True
        return sign.broken or sign.digest != self.signature


def pinned_digest(
    hasher: TreeHasher, *, clock: Any = time.time_ns, sleep: Any = time.sleep
) -> tuple[str, Pin | None]:
    """
    The tree's digest, walked in full, and the pin taken in the same walk; the
    pin is None when the tree does not hold still.

    It does not when an entry vanished during the walk, or when something
    changed within the file system's racy window before it (two changes within
    one timestamp tick can leave one signature) and again after waiting that
    window out once and walking again; a timestamp in the future (an mtime set
    ahead) is never out of the window, and is not waited for.

    Args:
        hasher: the workspace's hasher.
        clock: the wall clock in nanoseconds; ``sleep`` waits seconds (tests move them).
    """
    window = int(_timestamp_window(os.fspath(hasher.root)) * 1e9)
    digest = ""
    for attempt in range(2):
        started = clock()
        sign = StatSignature()
        digest = hasher.digest(sign=sign)
        if sign.broken:
            return digest, None
        if sign.newest < started - window:
            pin = Pin(
                hasher.root,
                hasher.ignore,
                sign.digest,
                tuple(sorted(sign.hidden)),
                tuple(sorted(sign.links)),
                sign.size,
                hasher.manifest(),
            )
            return digest, pin
        if attempt == 0:
            # Never longer than the window: a timestamp set into the future (any
            # process may set an mtime) would otherwise be waited for until then.
            sleep(min(max(0, sign.newest + window - started), window) / 1e9 + 0.01)
    return digest, None


def pin_tree(root: Path, ignore: Sequence[str]) -> Pin | None:
    """Pin a tree with a hasher of its own (:func:`pinned_digest`)."""
    return pinned_digest(TreeHasher(Path(os.path.realpath(root)), tuple(ignore)))[1]


def in_place(root: Path, checks: Iterable[Check], sandbox: SandboxSpec | None) -> bool:
    """
    Whether a candidate of the workspace ``root`` can be verified in place
    (else it is frozen into a copy, as before).

    In place needs, for any command check, the checks' sandbox with overlays
    (:func:`~proctor.runtime._tools.sandbox.overlay_available`), and a
    workspace path the overlay's options can hold. The tree must also hold
    still (:func:`pinned_digest`), and a candidate over the copy's size limit
    takes the copy's path, which refuses it.
    """
    if any(isinstance(check, CommandCheck) for check in checks) and (
        sandbox is None or sandbox.mode != "auto" or overlay_available() is not None
    ):
        return False
    return not OVERLAY_UNSAFE.intersection(os.fspath(os.path.realpath(root)))


def _mirror_dirs(
    upper: Path, lower: Path, rel: str, made: list[tuple[Path, os.stat_result]]
) -> Path:
    """
    Make ``rel``'s parent directories in ``upper`` with the lower layer's modes
    and owners (the merged view shows the upper directory's); return the parent.
    """
    parent = upper
    parts = rel.split("/")[:-1]
    here = lower
    for part in parts:
        parent = parent / part
        here = here / part
        if parent.is_dir() and not parent.is_symlink():
            continue
        if os.path.lexists(parent):
            # A whiteout made for an entry that a baseline file now needs as a directory.
            parent.unlink()
        parent.mkdir()
        try:
            st = os.lstat(here)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            made.append((parent, st))
    return parent


def _matching(candidate: Manifest, matcher: _Matcher) -> Iterator[str]:
    """
    The candidate's files that match, themselves or through a directory above
    them: one match per entry of the tree, directories that match not entered.
    """
    stack = [""]
    while stack:
        rel = stack.pop()
        node = candidate.nodes.get(rel)
        if node is None:
            continue
        for i, name in enumerate(names_of(node)):
            child = f"{rel}/{name}" if rel else name
            kind = node[1][i * RECORD]
            if matcher.matches_self(child, name):
                if kind == FILE:
                    yield child
                else:
                    yield from (path for path, _ in candidate.records(child))
            elif kind != FILE:
                stack.append(child)


def _whiteout(path: Path) -> None:
    if os.path.lexists(path):
        return
    os.mknod(path, _WHITEOUT, os.makedev(0, 0))


def prepare_upper(
    upper: Path,
    pin: Pin,
    patterns: Sequence[str],
    candidate: Manifest,
    files: Mapping[str, Mapping[str, Any]],
    also_hidden: Iterable[str] = (),
) -> None:
    """
    Fill a check's upper directory so the overlay shows what a restored copy would.

    Args:
        upper: the empty upper directory.
        pin: the pinned workspace (the lower layer).
        patterns: the protected and harness patterns.
        candidate: the candidate's tree.
        files: the baseline's files for those patterns (``collect_files``'s map).
        also_hidden: more relative paths to hide (a stale report, say).
    """
    # The merged root shows the upper root's mode and owner: the workspace's.
    made: list[tuple[Path, os.stat_result]] = [(upper, os.lstat(pin.root))]
    restored = list(_matching(candidate, _compile(tuple(patterns))))
    for rel in (*pin.hidden, *restored, *also_hidden):
        _whiteout(_mirror_dirs(upper, pin.root, rel, made) / rel.rsplit("/", 1)[-1])
    for rel, item in files.items():
        target = _mirror_dirs(upper, pin.root, rel, made) / rel.rsplit("/", 1)[-1]
        if target.is_dir() and not target.is_symlink():
            # Made to hold whiteouts for a directory the candidate put in the
            # file's place: the file hides that directory whole.
            remove_tree(target)
        elif os.path.lexists(target):
            target.unlink()
        target.write_bytes(base64.b64decode(item["data"]))
        target.chmod(0o755 if item.get("exec") else 0o644)
    # Attributes last, deepest first: adding entries moves a directory's mtime.
    for path, st in reversed(made):
        if not path.is_dir() or path.is_symlink():
            continue  # replaced by a baseline file
        os.chmod(path, stat.S_IMODE(st.st_mode))
        os.chown(path, st.st_uid, st.st_gid)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
