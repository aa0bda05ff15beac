"""
The candidate: the workspace's content as it stands, its digest and its frozen snapshot.

A candidate is identified by its *tree digest*: a Merkle tree of blake2b
digests over the workspace's directories. A directory's node digest covers the
sorted names of its entries with each entry's digest; a file's entry digest
covers its kind and the mode bit that matters (regular, executable, or symlink)
and a digest of its content (for a symlink: the text of its target; symlinks are
never followed). A directory without files contributes nothing, so an empty
directory changes nothing. Ignored paths (caches, virtual environments, version
control, proctor's own state) do not count. Because a change re-hashes only its
path to the root, :class:`TreeHasher` keeps the digest of a large workspace
current in time proportional to what changed (see its ``watch`` argument).

The verifier never judges the live workspace: it judges a snapshot made by
:func:`freeze`, and binds its evidence to the digest of that snapshot.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import os
import re
import shutil
import stat
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from fnmatch import fnmatchcase, translate
from pathlib import Path
from typing import Final

import attrs

from proctor._errors import CandidateTooLarge, ConfigError
from proctor.verifiers._index import (
    DIR,
    EMPTY_DIR,
    FILE,
    RECORD,
    ZERO8,
    ZERO32,
    Manifest,
    Node,
    diff,
    node_digest,
    pack,
    unpack,
)
from proctor.verifiers._index import StatSignature as StatSignature
from proctor.verifiers._watch import TreeWatcher, open_watcher

__all__ = (
    "DEFAULT_IGNORE",
    "EMPTY_TREE_DIGEST",
    "StatSignature",
    "TreeHasher",
    "TreeStatistics",
    "changed_paths",
    "fingerprint",
    "freeze",
    "freeze_known",
    "matches",
    "snapshot_directory",
    "snapshot_hasher",
    "tree_digest",
)

DEFAULT_IGNORE: tuple[str, ...] = (
    ".git",
    "__pycache__",
    "*.pyc",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".hypothesis",
    ".venv",
    "node_modules",
    ".proctor",
    "*.egg-info",
)
"""Paths that are never part of a candidate: version control, caches, environments."""

_TREE_HEADER: Final = b"proctor-tree-v2\0"
_DIGEST_SIZE: Final = 32
_CHUNK: Final = 1 << 20

# Linux ioctl that clones a file's extents (copy-on-write) on btrfs, xfs, bcachefs, ...
_FICLONE: Final = 0x40049409


def _new_hash() -> hashlib.blake2b:
    return hashlib.blake2b(digest_size=_DIGEST_SIZE)


# --------------------------------------------------------------------------- matching


@attrs.frozen
class _Matcher:
    """
    Patterns split once into component patterns and anchored (slash) patterns.

    The anchored patterns of the common shapes are kept where one lookup answers
    for all of them (a check's harness is hundreds of ``./module.py`` and
    ``./package/**`` patterns): literal paths in ``exact``, literal directories
    followed by a trailing ``**`` in ``under``, one-component globs in ``top``,
    ``**/name`` among the component patterns (it matches exactly what ``name``
    does), ``**/a/b`` in ``tails``. The rest go through :func:`_match_parts`.
    """

    component: tuple[str, ...]
    anchored: tuple[tuple[str, ...], ...]
    # The component patterns as one regular expression: one match per name, not one per pattern.
    regex: re.Pattern[str] | None = attrs.field(default=None, eq=False)
    exact: frozenset[str] = frozenset()
    under: frozenset[str] = frozenset()
    top: re.Pattern[str] | None = attrs.field(default=None, eq=False)
    # ``**/c1/.../ck``: the last k components match; the last one's regex first.
    tails: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = attrs.field(default=(), eq=False)

    def matches_self(self, rel: str, name: str) -> bool:
        """Match the path itself, not its ancestors (they are checked on the way down)."""
        if self.regex is not None and self.regex.match(name):
            return True
        if rel in self.exact:
            return True
        if self.under:
            at = rel.find("/")
            while at != -1:
                if rel[:at] in self.under:
                    return True
                at = rel.find("/", at + 1)
            if rel in self.under:
                return True
        if self.top is not None and "/" not in rel and self.top.match(rel):
            return True
        for last, tail in self.tails:
            if last.match(name):
                parts = rel.split("/")
                if len(parts) >= len(tail) and all(
                    fnmatchcase(part, segment)
                    for part, segment in zip(parts[-len(tail) :], tail, strict=True)
                ):
                    return True
        if not self.anchored:
            return False
        parts = rel.split("/")
        return any(_match_parts(pattern, parts) for pattern in self.anchored)

    def matches(self, path: str) -> bool:
        parts = _split_path(path)
        for end in range(1, len(parts) + 1):
            if self.matches_self("/".join(parts[:end]), parts[end - 1]):
                return True
        return False


def _split_path(path: str) -> list[str]:
    return [part for part in path.replace(os.sep, "/").split("/") if part not in ("", ".")]


def _match_parts(pattern: tuple[str, ...], parts: Sequence[str]) -> bool:
    """Match path components against pattern components; ``**`` spans zero or more."""
    # Dynamic programming over (pattern index, path index): linear in their product,
    # whatever the number of ``**`` (a naive backtracking matcher is exponential).
    reachable = {0}
    for segment in pattern:
        if not reachable:
            return False
        if segment == "**":
            start = min(reachable)
            reachable = set(range(start, len(parts) + 1))
        else:
            reachable = {
                i + 1 for i in reachable if i < len(parts) and fnmatchcase(parts[i], segment)
            }
    return len(parts) in reachable


def _literal(part: str) -> bool:
    return not any(c in part for c in "*?[")


@functools.lru_cache(maxsize=256)
def _compile(patterns: tuple[str, ...]) -> _Matcher:
    component: list[str] = []
    anchored: list[tuple[str, ...]] = []
    exact: set[str] = set()
    under: set[str] = set()
    top: list[str] = []
    tails: list[tuple[re.Pattern[str], tuple[str, ...]]] = []
    for raw in patterns:
        pattern = raw.strip("/")
        if not pattern:
            continue
        if "/" not in pattern:
            component.append(pattern)
            continue
        parts = tuple(part for part in pattern.split("/") if part not in ("", "."))
        if not parts:
            # Only separators and dots: the DP matches nothing but an empty path.
            anchored.append(parts)
        elif len(parts) == 2 and parts[0] == "**" and parts[1] != "**":
            component.append(parts[1])
        elif all(_literal(p) for p in parts):
            exact.add("/".join(parts))
        elif len(parts) > 1 and parts[-1] == "**" and all(_literal(p) for p in parts[:-1]):
            under.add("/".join(parts[:-1]))
        elif len(parts) == 1 and parts[0] != "**":
            top.append(parts[0])
        elif len(parts) > 1 and parts[0] == "**" and "**" not in parts[1:]:
            tails.append((re.compile(translate(parts[-1])), parts[1:]))
        else:
            anchored.append(parts)
    regex = re.compile("|".join(translate(p) for p in component)) if component else None
    first = re.compile("|".join(translate(p) for p in top)) if top else None
    return _Matcher(
        tuple(component),
        tuple(anchored),
        regex,
        frozenset(exact),
        frozenset(under),
        first,
        tuple(tails),
    )


def matches(path: str, patterns: Sequence[str]) -> bool:
    """
    Tell whether a relative path matches any of the glob patterns.

    The one matcher for ignored, protected and scope paths. ``path`` is relative to
    the workspace, in POSIX form (a leading ``./`` and empty components are dropped).
    A path matches when it, or one of its ancestor directories, matches a pattern,
    so a pattern that names a directory covers everything beneath it. Matching is
    case-sensitive, with :func:`fnmatch.fnmatchcase` syntax (``*``, ``?``, ``[seq]``,
    ``[!seq]``) inside one path component:

    - a pattern without ``/`` is tried against every component of the path:
      ``*.md`` matches ``README.md`` and ``docs/guide.md``; ``__pycache__`` matches
      ``pkg/__pycache__/mod.pyc``;
    - a pattern with ``/`` is anchored at the workspace root and matched component
      by component (a leading or trailing ``/`` is ignored): ``*`` never crosses a
      ``/``, and a ``**`` component matches zero or more whole components.
      ``tests/**`` matches ``tests``, ``tests/test_x.py`` and ``tests/a/b.py``;
      ``src/*.py`` matches ``src/app.py`` but not ``src/pkg/app.py``;
      ``**/conftest.py`` matches ``conftest.py`` and ``tests/unit/conftest.py``;
    - an exact path matches itself (and, being a directory, what is under it):
      ``tests/data`` matches ``tests/data`` and ``tests/data/x.json``.

    Args:
        path: the relative POSIX path.
        patterns: glob patterns; an empty pattern matches nothing.
    """
    return _compile(tuple(patterns)).matches(path)


# --------------------------------------------------------------------------- walking


def _walk(
    root: Path | str,
    matcher: _Matcher,
    start: str = "",
    entering: Callable[[str], None] | None = None,
) -> Iterator[tuple[str, os.DirEntry[str]]]:
    """
    Yield ``(relative path, entry)`` for every entry not ignored, parents first.

    Directories are yielded before their contents, symlinks are never followed and
    an ignored directory is not entered. ``start`` walks only the subtree at that
    relative path; ``entering`` is called with each directory's relative path just
    before it is listed (a watcher watches it there, so nothing made after the
    listing is missed).
    """
    top = os.path.join(os.fspath(root), start) if start else os.fspath(root)
    stack: list[tuple[str, str]] = [(f"{start}/" if start else "", top)]
    while stack:
        prefix, directory = stack.pop()
        if entering is not None:
            entering(prefix[:-1])
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda entry: entry.name)
        except (FileNotFoundError, NotADirectoryError):
            if not prefix:
                raise
            # Removed while walking: it is simply no longer part of the candidate.
            continue
        subdirectories: list[tuple[str, str]] = []
        for entry in entries:
            rel = f"{prefix}{entry.name}"
            if matcher.matches_self(rel, entry.name):
                continue
            yield rel, entry
            if entry.is_dir(follow_symlinks=False):
                subdirectories.append((f"{rel}/", entry.path))
        stack.extend(reversed(subdirectories))


def _entry_digest(kind: bytes, content_digest: str) -> bytes:
    return hashlib.blake2b(kind + b"\0" + content_digest.encode(), digest_size=16).digest()


def _content_digest(path: str, size: int) -> str:
    try:
        # Never a FIFO's wait, never a link followed: the file was replaced since its stat.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise FileNotFoundError(exc.errno, exc.strerror, path) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FileNotFoundError(errno.ENOENT, "replaced by a special file", path)
        digest = _new_hash()
        # One read for a small file (no buffer of a mebibyte allocated for it).
        want = size + 1 if size < _CHUNK else _CHUNK
        while chunk := os.read(fd, want):
            digest.update(chunk)
            want = _CHUNK
        return digest.hexdigest()
    finally:
        os.close(fd)


def _node_digest(children: dict[str, str]) -> str:
    """The digest of a directory from its entries' names and digests (``d:`` marks a directory)."""
    tree = _new_hash()
    tree.update(_TREE_HEADER)
    for name in sorted(children):
        # Names never contain NUL or "/", so NUL-separated records are unambiguous.
        tree.update(os.fsencode(name) + b"\0" + children[name].encode() + b"\0")
    return tree.hexdigest()


def _parent(rel: str) -> tuple[str, str]:
    """Split a relative path into its directory (``""`` for the root) and its name."""
    head, _, name = rel.rpartition("/")
    return head, name


def _depth(rel: str) -> int:
    return rel.count("/") + 1 if rel else 0


EMPTY_TREE_DIGEST: Final[str] = _node_digest({})
"""The digest of a tree without files (an empty workspace, or one with only ignored paths)."""


# --------------------------------------------------------------------------- hashing


@attrs.frozen
class TreeStatistics:
    """
    What the last :meth:`TreeHasher.digest` did.

    Args:
        files: files (and symlinks) in the candidate.
        hashed: regular files whose content was read, rather than taken from the cache.
        bytes_hashed: bytes read to hash them.
    """

    files: int = 0
    hashed: int = 0
    bytes_hashed: int = 0


def _as_patterns(patterns: Iterable[str]) -> tuple[str, ...]:
    # A lone string is one pattern, not a sequence of one-character patterns.
    return (patterns,) if isinstance(patterns, str) else tuple(patterns)


# Keys the stat fingerprints: a file whose fingerprint collides with another stat
# signature's cannot be made on purpose without it. One per process, so the
# manifests a freeze makes are understood by any hasher of the process.
_FP_KEY: Final = os.urandom(16)
_STAT: Final = struct.Struct("<6q")


def fingerprint(st: os.stat_result) -> bytes:
    """The 8-byte stat fingerprint of a file: size, mtime, inode, device, ctime and mode."""
    # ctime is kept too: rewriting a file and restoring its mtime still moves ctime.
    packed = _STAT.pack(
        st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev, st.st_ctime_ns, st.st_mode
    )
    found = hashlib.blake2b(packed, digest_size=8, key=_FP_KEY).digest()
    return found if found != ZERO8 else b"\1" + found[1:]


_COARSE_FILE_SYSTEMS: Final = frozenset(
    {"vfat", "msdos", "exfat", "fat", "ntfs", "ntfs3", "fuseblk", "smb3", "cifs", "nfs", "nfs4"}
)


def _timestamp_window(root: str) -> float:
    """
    The racy window for the file system ``root`` is on: two seconds where its
    timestamps are coarse or come from another clock (FAT, network file systems),
    otherwise a tenth of a second (the kernel stamps files from a clock that ticks
    every few milliseconds).
    """
    try:
        real = os.path.realpath(root)
        best, kind = "", ""
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) < 3:
                    continue
                point = fields[1].replace("\\040", " ")
                inside = real == point or real.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, kind = point, fields[2]
    except OSError:
        return 2.0
    return 2.0 if not kind or kind in _COARSE_FILE_SYSTEMS or kind.startswith("fuse") else 0.1


@attrs.define(eq=False)
class TreeHasher:
    """
    Compute a workspace's tree digest, incrementally.

    The hasher keeps the Merkle tree of the last computation as a compact index
    (:mod:`proctor.verifiers._index`: packed bytes per directory, no Python object
    per file). A change re-hashes the changed files and the directories on their
    paths to the root, nothing else.

    Where changes come from: with ``watch`` (Linux), the kernel reports every
    changed path (inotify, see :mod:`proctor.verifiers._watch`), so a digest after
    a command that changed nothing costs no walk at all, and one after a command
    that changed k files costs O(k) stat calls and hashes. Without ``watch``, or
    whenever the kernel cannot tell (an overflowed queue, a renamed directory),
    or when the caller asks for ``full``, the tree is walked: every file is
    stat'ed and read again only when its stat signature (size, mtime, inode,
    device, ctime, mode) changed.

    The racily clean file, as git's index handles it: two writes within one
    timestamp tick can leave every stat field unchanged, so a signature is only
    trusted once the file was read at a moment later than its timestamps plus
    ``racy_window``. A file changed just before it was read is read once more at
    the next digest that comes after the window, then trusted.

    Symlinks are hashed by their target text and never followed; other special
    files (FIFOs, sockets, devices) are skipped. A regular file that cannot be read
    is hashed by its size and mtime.

    Args:
        root: the workspace directory.
        ignore: glob patterns of paths that are not part of the candidate, with the
            semantics of :func:`matches`.
        racy_window: seconds within which a file's timestamps make its stat
            signature untrusted. None (the default): from the file system, two
            seconds where timestamps are coarse or come from another clock (FAT,
            network file systems), a tenth of a second elsewhere; 0 trusts a
            signature at once.
        watch: learn changes from the kernel where it can tell them; call
            :meth:`close` when done.
    """

    root: Path = attrs.field(converter=Path)
    ignore: tuple[str, ...] = attrs.field(default=DEFAULT_IGNORE, converter=_as_patterns)
    racy_window: float | None = None
    watch: bool = False
    # The tree: every directory walked, by relative path, as a packed node.
    _nodes: dict[str, Node] = attrs.field(init=False, factory=dict)
    _count: int = attrs.field(init=False, default=0)
    _digest: str | None = attrs.field(init=False, default=None)
    _watcher: TreeWatcher | None = attrs.field(init=False, default=None)
    _pending: set[str] = attrs.field(init=False, factory=set)
    _statistics: TreeStatistics = attrs.field(init=False, factory=TreeStatistics)
    _window: int | None = attrs.field(init=False, default=None)
    # The wall clock, in nanoseconds (tests move it).
    _clock: Callable[[], int] = attrs.field(init=False, default=time.time_ns)

    def digest(self, *, full: bool = False, sign: StatSignature | None = None) -> str:
        """
        Compute the tree digest of the workspace as it stands.

        Args:
            full: walk the whole tree even where the kernel reports changes (what
                a digest that evidence is bound to uses).
            sign: take the walk's stat signature into this (implies ``full``).

        Raises:
            FileNotFoundError: the root directory does not exist.
            NotADirectoryError: the root is not a directory.
        """
        matcher = _compile(self.ignore)
        if sign is not None:
            return self._walk_all(matcher, sign)
        if not full and self._digest is not None and self._watcher is not None:
            changed = self._watcher.drain()
            if changed is not None:
                for rel in self._pending:
                    changed.setdefault(rel, False)
                return self._update(changed, matcher)
        return self._walk_all(matcher)

    def unchanged(self) -> str | None:
        """
        The last digest, when the kernel reports nothing changed since it and no
        path waits to be read again (:meth:`invalidate`); else None:
        :meth:`digest` tells. One ``ioctl``, no walk and no read: cheap enough
        for the event loop, where :meth:`digest` belongs in a worker thread.
        """
        watcher = self._watcher
        if self._digest is None or watcher is None or self._pending or not watcher.quiet():
            return None
        self._statistics = TreeStatistics(self._count, 0, 0)
        return self._digest

    def _window_ns(self) -> int:
        if self._window is None:
            window = self.racy_window
            if window is None:
                window = _timestamp_window(os.fspath(self.root))
            self._window = int(window * 1e9)
        return self._window

    def _walk_all(self, matcher: _Matcher, sign: StatSignature | None = None) -> str:
        watcher = self._watcher
        if self.watch:
            if watcher is None:
                watcher = self._watcher = open_watcher(os.fspath(self.root))
            elif watcher.drain() is None:
                # Lost track: watch afresh. Otherwise the watches stay (dropping thousands
                # of them costs the kernel seconds) and what they reported is walked anyway.
                watcher.reset()
        old = self._nodes
        self._nodes = {}
        try:
            root, hashed, bytes_hashed = self._scan("", old, matcher, sign)
        except BaseException:
            self._digest = None
            raise
        self._pending.clear()
        self._digest = root.hex()
        self._statistics = TreeStatistics(self._count, hashed, bytes_hashed)
        return self._digest

    def _scan(
        self,
        start: str,
        old: Mapping[str, Node],
        matcher: _Matcher,
        sign: StatSignature | None = None,
    ) -> tuple[bytes, int, int]:
        """
        Walk the directory ``start`` and everything beneath it into the index.

        A file whose record in ``old`` has its stat fingerprint is not read again.
        Returns the directory's node digest (zero when nothing beneath it counts,
        unless it is the root), and how many files and bytes were read.
        """
        # Kept whole: the walk, the reuse of known records and the bottom-up node
        # digests share the pending directories; split, each part would pass them all.
        if not start:
            self._count = 0
        top = os.fspath(self.root)
        count = 0
        watcher = self._watcher
        now = self._clock()
        trusted_before = now - self._window_ns()
        hashed = bytes_hashed = 0
        # Parents are listed before their children, so in reverse the children come first.
        listed: list[tuple[str, bytes, bytearray, list[tuple[int, str]]]] = []
        stack = [start]
        while stack:
            rel = stack.pop()
            if watcher is not None:
                watcher.watch(rel)
            here = os.path.join(top, rel) if rel else top
            try:
                if sign is not None:
                    sign.directory(rel, here)
                with os.scandir(here) as it:
                    entries = sorted(it, key=lambda entry: entry.name)
            except (FileNotFoundError, NotADirectoryError):
                if not rel:
                    raise
                # Removed while walking: an empty directory, until the next look.
                listed.append((rel, b"", bytearray(), []))
                if sign is not None:
                    sign.broken = True
                continue
            known = old.get(rel)
            before = unpack(known) if known is not None else {}
            names: list[str] = []
            records = bytearray()
            subdirectories: list[tuple[int, str]] = []
            for entry in entries:
                name = entry.name
                child = f"{rel}/{name}" if rel else name
                if matcher.matches_self(child, name):
                    if sign is not None:
                        sign.hidden.append(child)
                    continue
                if entry.is_dir(follow_symlinks=False):
                    subdirectories.append((len(names), child))
                    names.append(name)
                    records += EMPTY_DIR
                    stack.append(child)
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                    if sign is not None:
                        sign.entry(child, name, st)
                    record, read = self._record(entry.path, st, before.get(name), trusted_before)
                except (FileNotFoundError, NotADirectoryError):
                    # Removed or replaced between listing and reading: the next digest sees it.
                    if sign is not None:
                        sign.broken = True
                    continue
                if record is None:
                    continue
                if read:
                    hashed += 1
                    bytes_hashed += st.st_size
                names.append(name)
                records += record
                count += 1
            encoded = "\0".join(names).encode("utf-8", "surrogateescape")
            listed.append((rel, encoded, records, subdirectories))
        digests: dict[str, bytes] = {}
        for rel, encoded, records, subdirectories in reversed(listed):
            for index, child in subdirectories:
                at = index * RECORD + 1
                records[at : at + 32] = digests.pop(child, ZERO32)
            node = (encoded, bytes(records))
            known = old.get(rel)
            if known == node:
                # The same object: a manifest taken earlier shares it, not a copy of it.
                node = known
            self._nodes[rel] = node
            digest, content = node_digest(node)
            digests[rel] = digest if content or not rel else ZERO32
        self._count += count
        return digests[start], hashed, bytes_hashed

    @staticmethod
    def _record(
        path: str, st: os.stat_result, known: bytes | None, trusted_before: int
    ) -> tuple[bytes | None, bool]:
        """
        Return a file's record, and whether its content was read.

        The record is None for what is not part of a candidate (special files).
        ``known`` is the file's record from an earlier look: reused when its stat
        fingerprint is this one.
        """
        if stat.S_ISLNK(st.st_mode):
            target = os.fsencode(os.readlink(path))
            content = hashlib.blake2b(target, digest_size=_DIGEST_SIZE).hexdigest()
            return b"f" + _entry_digest(b"l", content) + ZERO8 + ZERO8, False
        if not stat.S_ISREG(st.st_mode):
            return None, False
        mark = fingerprint(st)
        if known is not None and known[0] == FILE and known[17:25] == mark:
            return known, False
        try:
            content = _content_digest(path, st.st_size)
        except PermissionError:
            content = f"unreadable:{st.st_size}:{st.st_mtime_ns}"
        kind = b"x" if st.st_mode & stat.S_IXUSR else b"f"
        # Racily clean: a write in the same tick as the read would leave the same signature.
        trusted = max(st.st_mtime_ns, st.st_ctime_ns) < trusted_before
        return b"f" + _entry_digest(kind, content) + (mark if trusted else ZERO8) + ZERO8, True

    def _update(self, changed: dict[str, bool], matcher: _Matcher) -> str:
        """Apply the changed paths the kernel reported to the tree; return the new digest."""
        self._pending.clear()
        if not changed:
            self._statistics = TreeStatistics(self._count, 0, 0)
            assert self._digest is not None
            return self._digest
        edits: dict[str, dict[str, bytes]] = {}
        dirty: set[str] = set()
        hashed = bytes_hashed = 0
        trusted_before = self._clock() - self._window_ns()
        # Parents first: a new directory is walked whole, so its own reported
        # entries are then already known.
        for rel in sorted(changed, key=_depth):
            head, name = _parent(rel)
            parent = self._edit(head, edits)
            if parent is None or matcher.matches_self(rel, name):
                continue
            path = os.path.join(self.root, rel)
            was = parent.get(name)
            try:
                st = os.lstat(path)
            except (FileNotFoundError, NotADirectoryError):
                self._drop(head, name, edits, dirty)
                continue
            if stat.S_ISDIR(st.st_mode):
                if was is not None and was[0] == DIR and rel in self._nodes and not changed[rel]:
                    continue
                self._drop(head, name, edits, dirty)
                node, h, b = self._scan(rel, {}, matcher)
                hashed += h
                bytes_hashed += b
                parent[name] = b"d" + node
                dirty.add(head)
                continue
            if was is not None and was[0] == DIR:
                self._drop(head, name, edits, dirty)
            try:
                # The kernel named it: read it again whatever its stat signature.
                record, read = self._record(path, st, None, trusted_before)
            except (FileNotFoundError, NotADirectoryError):
                record, read = None, False
            if record is None:
                self._drop(head, name, edits, dirty)
                continue
            hashed += read
            bytes_hashed += st.st_size if read else 0
            if parent.get(name) is None:
                self._count += 1
            if parent.get(name, b"")[:17] != record[:17]:
                dirty.add(head)
            # The fingerprint may have changed alone: every edited node is written back.
            parent[name] = record
        self._digest = self._rehash(edits, dirty)
        self._statistics = TreeStatistics(self._count, hashed, bytes_hashed)
        return self._digest

    def _edit(self, rel: str, edits: dict[str, dict[str, bytes]]) -> dict[str, bytes] | None:
        """The editable entries of directory ``rel`` (None: not in the tree)."""
        found = edits.get(rel)
        if found is None:
            node = self._nodes.get(rel)
            if node is None:
                return None
            found = edits[rel] = unpack(node)
        return found

    def _drop(
        self, head: str, name: str, edits: dict[str, dict[str, bytes]], dirty: set[str]
    ) -> None:
        """Forget an entry of ``head``, and everything beneath it when it was a directory."""
        parent = self._edit(head, edits)
        record = parent.pop(name, None) if parent is not None else None
        if record is None:
            return
        dirty.add(head)
        if record[0] == FILE:
            self._count -= 1
            return
        stack = [f"{head}/{name}" if head else name]
        while stack:
            rel = stack.pop()
            edits.pop(rel, None)
            dirty.discard(rel)
            node = self._nodes.pop(rel, None)
            if node is None:
                continue
            for sub, sub_record in unpack(node).items():
                if sub_record[0] == FILE:
                    self._count -= 1
                else:
                    stack.append(f"{rel}/{sub}")

    def _rehash(self, edits: dict[str, dict[str, bytes]], dirty: set[str]) -> str:
        """Write the edited nodes back; recompute dirty ones and their ancestors, deepest first."""
        for rel, entries in edits.items():
            if rel in self._nodes:
                self._nodes[rel] = pack(entries)
        by_depth: dict[int, set[str]] = {}
        for rel in dirty:
            by_depth.setdefault(_depth(rel), set()).add(rel)
        for depth in range(max(by_depth, default=0), 0, -1):
            for rel in by_depth.get(depth, ()):
                node = self._nodes.get(rel)
                if node is None:
                    continue
                digest, content = node_digest(node)
                head, name = _parent(rel)
                parent = self._edit(head, edits)
                if parent is None:
                    continue
                record = b"d" + (digest if content else ZERO32)
                if parent.get(name) == record:
                    continue
                parent[name] = record
                self._nodes[head] = pack(parent)
                by_depth.setdefault(depth - 1, set()).add(head)
        return node_digest(self._nodes[""])[0].hex()

    def files(self) -> dict[str, str]:
        """Return the last computation's files: relative POSIX path to entry digest."""
        return self.manifest().files()

    def paths(self) -> Iterator[str]:
        """The last computation's files' relative paths (nothing is copied)."""
        return self.manifest().paths()

    def manifest(self) -> Manifest:
        """
        Return the last computation's tree, frozen (see :class:`Manifest`).

        It shares every directory's packed node with the hasher: a copy costs one
        dictionary of directories, and memory only for the directories that change
        afterwards.
        """
        return Manifest(dict(self._nodes), self._digest or EMPTY_TREE_DIGEST)

    def adopt(self, nodes: Mapping[str, Node]) -> None:
        """
        Take packed nodes made in this process as what is known of the tree.

        The next :meth:`digest` walks the tree and reads only the files whose stat
        fingerprint is not the one recorded (see :func:`snapshot_hasher`).
        """
        self._nodes = dict(nodes)
        self._digest = None

    def invalidate(self, path: str) -> None:
        """
        Forget the cached content digest of a path, so the next digest reads it again.

        Args:
            path: a path relative to the root (or absolute, inside it); a directory
                forgets everything beneath it; ``""`` or ``"."`` forgets everything.
                A path outside the root changes nothing.
        """
        if os.path.isabs(path):
            inside = _relative_to(Path(os.path.normpath(path)), Path(os.path.abspath(self.root)))
            if inside is None:
                return
            path = inside
        parts = _split_path(path)
        if not parts:
            self._nodes.clear()
            self._digest = None
            return
        rel = "/".join(parts)
        self._pending.add(rel)
        head, name = _parent(rel)
        stack = []
        node = self._nodes.get(head)
        if node is not None:
            entries = unpack(node)
            record = entries.get(name)
            if record is not None and record[0] == FILE:
                entries[name] = _distrusted(record)
                self._nodes[head] = pack(entries)
            elif record is not None:
                stack.append(rel)
        while stack:
            here = stack.pop()
            node = self._nodes.get(here)
            if node is None:
                continue
            entries = unpack(node)
            for sub, record in entries.items():
                if record[0] == FILE:
                    entries[sub] = _distrusted(record)
                else:
                    stack.append(f"{here}/{sub}")
            self._nodes[here] = pack(entries)

    def statistics(self) -> TreeStatistics:
        """Return what the last computation did (how many files it read)."""
        return self._statistics

    def close(self) -> None:
        """Stop watching the tree (the hasher still works, by walking)."""
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
        self.watch = False


def _distrusted(record: bytes) -> bytes:
    return record[:17] + ZERO8 + record[25:]


def tree_digest(root: Path, ignore: Sequence[str] = DEFAULT_IGNORE) -> str:
    """
    Compute the tree digest of a directory, once.

    Args:
        root: the directory.
        ignore: glob patterns of paths that do not count (see :func:`matches`).
    """
    return TreeHasher(root, ignore).digest()


def changed_paths(
    before: Mapping[str, str] | Manifest, after: Mapping[str, str] | Manifest
) -> tuple[str, ...]:
    """
    List the paths added, removed or changed between two trees' files.

    Args:
        before: the earlier tree: a :class:`Manifest` or a :meth:`TreeHasher.files` map.
        after: the later one. Two manifests are compared directory by directory,
            skipping the directories whose digests are equal.

    Returns:
        The paths, sorted.
    """
    if isinstance(before, Manifest) and isinstance(after, Manifest):
        return diff(before, after)
    old = before.files() if isinstance(before, Manifest) else before
    new = after.files() if isinstance(after, Manifest) else after
    changed = {path for path, digest in old.items() if new.get(path) != digest}
    changed.update(path for path in new if path not in old)
    return tuple(sorted(changed))


# --------------------------------------------------------------------------- freezing


def _clone(src: int, dst: int) -> None:
    """Copy a file's content between descriptors: a copy-on-write clone where possible."""
    if sys.platform == "linux":
        import fcntl

        try:
            fcntl.ioctl(dst, _FICLONE, src)
            return
        except OSError:
            # Not supported by this file system (ext4, tmpfs) or across devices.
            pass
        # copy_file_range shares extents where the file system can (xfs, NFS 4.2)
        # and copies in the kernel otherwise.
        try:
            size = os.fstat(src).st_size
            while os.copy_file_range(src, dst, max(size, _CHUNK)):
                pass
            return
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise
            os.lseek(src, 0, os.SEEK_SET)
            os.lseek(dst, 0, os.SEEK_SET)
            os.ftruncate(dst, 0)
    while chunk := os.read(src, _CHUNK):
        view = memoryview(chunk)
        while view:
            view = view[os.write(dst, view) :]


def _freeze_file(source: str, target: str, known: bytes | None) -> bytes | None:
    """
    Copy one regular file; return the copy's record when its content is known.

    Known means: the source's stat fingerprint, taken on the open descriptor
    before and after the copy, is the one under which ``known``'s entry digest
    was computed and trusted. A write to the source at any moment in between
    moves its ctime (no call sets ctime back), so the copy holds that content.
    The record carries the copy's own fingerprint, taken last, so a verifier
    that finds the copy with another signature reads it.
    """
    src = os.open(source, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        before = os.fstat(src)
        if not stat.S_ISREG(before.st_mode):
            raise FileNotFoundError(errno.ENOENT, "replaced by a special file", source)
        dst = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            _clone(src, dst)
            after = os.fstat(src)
            # The metadata of the content copied, not of whatever the path names now.
            os.fchmod(dst, stat.S_IMODE(before.st_mode))
            os.utime(dst, ns=(before.st_atime_ns, before.st_mtime_ns))
            copy = os.fstat(dst)
        finally:
            os.close(dst)
    finally:
        os.close(src)
    if known is None or known[0] != FILE:
        return None
    mark = known[17:25]
    if mark == ZERO8 or fingerprint(before) != mark or fingerprint(after) != mark:
        return None
    return b"f" + known[1:17] + fingerprint(copy) + ZERO8


def _relative_to(path: Path, root: Path) -> str | None:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return None


def snapshot_directory(workspace: Path | str) -> Path:
    """
    Make a private directory for a candidate's snapshot, on the workspace's file system.

    On the same file system a freeze can clone files (reflink) instead of copying
    them: the system's temporary directory when it is there, else the directory
    that holds the workspace (never the workspace itself: the actor's commands
    see only that), else the temporary directory anyway. The directory is named
    ``proctor-candidate-*`` and made mode 0700; the snapshot goes in it as
    ``tree``, the checks' copies beside it. Remove the whole directory when done.
    """
    where: str | None = None
    try:
        device = os.stat(workspace).st_dev
        temporary = tempfile.gettempdir()
        parent = os.path.dirname(os.path.abspath(workspace))
        elsewhere = os.stat(temporary).st_dev != device
        if elsewhere and os.access(parent, os.W_OK | os.X_OK) and os.stat(parent).st_dev == device:
            where = parent
    except OSError:
        where = None
    return Path(tempfile.mkdtemp(prefix="proctor-candidate-", dir=where))


def freeze(
    root: Path,
    dest: Path,
    ignore: Sequence[str] = DEFAULT_IGNORE,
    max_bytes: int | None = None,
) -> Path:
    """
    Snapshot a workspace into a new directory (see :func:`freeze_known`).

    Returns:
        ``dest``.
    """
    freeze_known(root, dest, ignore, max_bytes)
    return dest


def freeze_known(
    root: Path,
    dest: Path,
    ignore: Sequence[str] = DEFAULT_IGNORE,
    max_bytes: int | None = None,
    known: Manifest | None = None,
) -> dict[str, Node]:
    """
    Snapshot a workspace into a new directory, so later writes to it do not change the copy.

    Files are cloned copy-on-write where the file system allows it (reflink:
    btrfs, xfs, bcachefs; :func:`snapshot_directory` puts the snapshot where that
    can work) and copied otherwise; they are never hard-linked (an in-place write
    to the original would change the snapshot). Modes and modification times are
    preserved, symlinks are recreated as symlinks with the same target text (an
    absolute target still points where it pointed), ignored paths and special
    files are skipped.

    The workspace may change while it is copied: bind evidence to the digest of
    the snapshot (:func:`snapshot_hasher`), not to an earlier digest of the workspace.

    Args:
        root: the workspace.
        dest: the snapshot directory; it must not exist (its parent may not either).
        ignore: glob patterns of paths to leave out (see :func:`matches`).
        max_bytes: the most the snapshot may hold, every file counted by its
            apparent size (a sparse file by the size it claims, not the blocks it
            holds); None: no limit.
        known: the workspace's tree as its hasher last computed it. Each file
            copied while its stat signature stayed the one the tree trusts keeps
            its digest, so the snapshot's hasher reads only the others.

    Returns:
        What is known of the snapshot's files, for :func:`snapshot_hasher`: the
        packed nodes of its directories, each file's record with the copy's own
        stat fingerprint (empty without ``known``).

    Raises:
        CandidateTooLarge: the files come to more than ``max_bytes`` (nothing is
            left of ``dest``).
        ConfigError: ``dest`` lies inside ``root`` on a path that is not ignored (the
            snapshot would copy itself).
        FileExistsError: ``dest`` already exists.
        OSError: a file could not be read or written.
    """
    # Kept whole: its docstring, the contract, is most of it; the copy walk, its byte count and
    # the clean-up after a refusal share one destination.
    root = Path(root)
    dest = Path(dest)
    matcher = _compile(tuple(ignore))
    inside = _relative_to(dest.resolve(), root.resolve())
    if inside is not None and not matcher.matches(inside):
        raise ConfigError(
            f"snapshot directory {dest} lies inside the workspace {root} on a path that is"
            " not ignored; put it outside the workspace or under an ignored directory"
            " such as .proctor/"
        )
    if max_bytes is not None:
        _refuse_over(root, matcher, max_bytes)
    dest.mkdir(parents=True, exist_ok=False)
    # Directory modes are applied last, deepest first: a read-only directory must
    # receive its contents before it becomes read-only.
    directories: list[tuple[str, str]] = [(os.fspath(root), os.fspath(dest))]
    nodes = known.nodes if known is not None else {}
    seen: dict[str, dict[str, bytes]] = {}
    index: dict[str, dict[str, bytes]] = {"": {}}
    for rel, entry in _walk(root, matcher):
        target = os.path.join(dest, rel)
        head, name = _parent(rel)
        try:
            if entry.is_symlink():
                os.symlink(os.readlink(entry.path), target)
            elif entry.is_dir(follow_symlinks=False):
                os.mkdir(target)
                directories.append((entry.path, target))
                index[rel] = {}
            elif entry.is_file(follow_symlinks=False):
                if head not in seen:
                    node = nodes.get(head)
                    seen[head] = unpack(node) if node is not None else {}
                record = _freeze_file(entry.path, target, seen[head].get(name))
                if record is not None and head in index:
                    index[head][name] = record
        except FileNotFoundError:
            # Removed while freezing: the snapshot is simply without it.
            continue
    for source, target in reversed(directories):
        try:
            shutil.copystat(source, target, follow_symlinks=False)
        except FileNotFoundError:
            continue
    if known is None:
        return {}
    return {rel: pack(entries) for rel, entries in index.items()}


def snapshot_hasher(
    snapshot: Path, ignore: Sequence[str] = DEFAULT_IGNORE, known: Mapping[str, Node] | None = None
) -> TreeHasher:
    """
    Return a hasher for a frozen snapshot that knows what its freeze knew.

    Its first :meth:`~TreeHasher.digest` walks the snapshot, stats every file and
    reads only those whose stat fingerprint is not the one the freeze recorded
    (a file that changed in the workspace while it was copied, a racily clean
    one, or one changed in the snapshot since): the digest is the snapshot's as
    it stands, at the cost of a walk rather than a read of every byte.

    Args:
        snapshot: the snapshot.
        ignore: the patterns it was frozen with.
        known: what :func:`freeze_known` returned for it (None: every file is read).
    """
    hasher = TreeHasher(snapshot, ignore, racy_window=0)
    if known:
        hasher.adopt(known)
    return hasher


def _refuse_over(root: Path, matcher: _Matcher, max_bytes: int) -> None:
    # Measured before anything is copied: a 2 GB sparse file costs no copy.
    total = 0
    for _, entry in _walk(root, matcher):
        with contextlib.suppress(FileNotFoundError):
            if entry.is_file(follow_symlinks=False) and not entry.is_symlink():
                total += entry.stat(follow_symlinks=False).st_size
        if total > max_bytes:
            raise CandidateTooLarge(
                f"the candidate holds more than {max_bytes:,} bytes (files by apparent "
                "size): it is not frozen; remove large or sparse files, or ignore them"
            )
