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
import shutil
import stat
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Final

import attrs

from proctor._errors import CandidateTooLarge, ConfigError
from proctor.verifiers._watch import TreeWatcher, open_watcher

__all__ = (
    "DEFAULT_IGNORE",
    "EMPTY_TREE_DIGEST",
    "TreeHasher",
    "TreeStatistics",
    "changed_paths",
    "freeze",
    "matches",
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
    """Patterns split once into component patterns and anchored (slash) patterns."""

    component: tuple[str, ...]
    anchored: tuple[tuple[str, ...], ...]

    def matches_self(self, rel: str, name: str) -> bool:
        """Match the path itself, not its ancestors (they are checked on the way down)."""
        if any(fnmatchcase(name, pattern) for pattern in self.component):
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


@functools.lru_cache(maxsize=256)
def _compile(patterns: tuple[str, ...]) -> _Matcher:
    component: list[str] = []
    anchored: list[tuple[str, ...]] = []
    for raw in patterns:
        pattern = raw.strip("/")
        if not pattern:
            continue
        if "/" in pattern:
            anchored.append(tuple(part for part in pattern.split("/") if part not in ("", ".")))
        else:
            component.append(pattern)
    return _Matcher(tuple(component), tuple(anchored))


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


def _entry_digest(kind: bytes, content_digest: str) -> str:
    return hashlib.blake2b(kind + b"\0" + content_digest.encode(), digest_size=16).hexdigest()


def _content_digest(path: str) -> str:
    with open(path, "rb") as file:
        return hashlib.file_digest(file, _new_hash).hexdigest()


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


_StatKey = tuple[int, int, int, int, int]


def _stat_key(st: os.stat_result) -> _StatKey:
    # ctime is kept too: rewriting a file and restoring its mtime still moves ctime.
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev, st.st_ctime_ns)


@attrs.define(eq=False)
class TreeHasher:
    """
    Compute a workspace's tree digest, incrementally.

    The hasher keeps the Merkle tree of the last computation: each file's entry
    digest and each directory's node digest. A change re-hashes the changed
    files and the directories on their paths to the root, nothing else.

    Where changes come from: with ``watch`` (Linux), the kernel reports every
    changed path (inotify, see :mod:`proctor.verifiers._watch`), so a digest after
    a command that changed nothing costs no walk at all, and one after a command
    that changed k files costs O(k) stat calls and hashes. Without ``watch``, or
    whenever the kernel cannot tell (an overflowed queue, a renamed directory),
    or when the caller asks for ``full``, the tree is walked: every file is
    stat'ed and read again only when its stat signature (size, mtime, inode,
    device, ctime) changed. On a walk, a file changed within the last
    ``racy_window`` seconds is read again every time until it is older than
    that: two writes within one timestamp tick can leave every stat field
    unchanged (the "racily clean" problem). A watched file is read again at every
    event that names it, so the window does not apply.

    Symlinks are hashed by their target text and never followed; other special
    files (FIFOs, sockets, devices) are skipped. A regular file that cannot be read
    is hashed by its size and mtime.

    Args:
        root: the workspace directory.
        ignore: glob patterns of paths that are not part of the candidate, with the
            semantics of :func:`matches`.
        racy_window: seconds during which a changed file's cached digest is not
            trusted on a walk. The default covers the coarsest common timestamp
            granularity (two seconds, FAT); 0 trusts the stat signature at once.
        watch: learn changes from the kernel where it can tell them; call
            :meth:`close` when done.
    """

    root: Path = attrs.field(converter=Path)
    ignore: tuple[str, ...] = attrs.field(default=DEFAULT_IGNORE, converter=_as_patterns)
    racy_window: float = 2.0
    watch: bool = False
    _cache: dict[str, tuple[_StatKey, str]] = attrs.field(init=False, factory=dict)
    _files: dict[str, str] = attrs.field(init=False, factory=dict)
    # The tree: per directory with files beneath it, its entries' digests by name;
    # per directory walked (with files or not), the names of its subdirectories.
    _children: dict[str, dict[str, str]] = attrs.field(init=False, factory=dict)
    _subdirs: dict[str, set[str]] = attrs.field(init=False, factory=dict)
    _digest: str | None = attrs.field(init=False, default=None)
    _watcher: TreeWatcher | None = attrs.field(init=False, default=None)
    _pending: set[str] = attrs.field(init=False, factory=set)
    _statistics: TreeStatistics = attrs.field(init=False, factory=TreeStatistics)

    def digest(self, *, full: bool = False) -> str:
        """
        Compute the tree digest of the workspace as it stands.

        Args:
            full: walk the whole tree even where the kernel reports changes (what
                a digest that evidence is bound to uses).

        Raises:
            FileNotFoundError: the root directory does not exist.
            NotADirectoryError: the root is not a directory.
        """
        matcher = _compile(self.ignore)
        if not full and self._digest is not None and self._watcher is not None:
            changed = self._watcher.drain()
            if changed is not None:
                for rel in self._pending:
                    changed.setdefault(rel, False)
                return self._update(changed, matcher)
        return self._walk_all(matcher)

    def _walk_all(self, matcher: _Matcher) -> str:
        watcher = self._watcher
        if self.watch:
            if watcher is None:
                watcher = self._watcher = open_watcher(os.fspath(self.root))
            else:
                watcher.reset()
        files: dict[str, str] = {}
        cache: dict[str, tuple[_StatKey, str]] = {}
        subdirs: dict[str, set[str]] = {"": set()}
        hashed = bytes_hashed = 0
        trusted_before = time.time_ns() - int(self.racy_window * 1e9)
        entering = watcher.watch if watcher is not None else None
        for rel, entry in _walk(self.root, matcher, entering=entering):
            if entry.is_dir(follow_symlinks=False):
                subdirs[rel] = set()
                subdirs[_parent(rel)[0]].add(_parent(rel)[1])
                continue
            try:
                st = entry.stat(follow_symlinks=False)
                cached = self._cache.get(rel)
                digest, read = self._entry(entry.path, st, cached)
            except (FileNotFoundError, NotADirectoryError):
                # Removed or replaced between listing and reading: the next digest sees it.
                continue
            if digest is None:
                continue
            if read:
                hashed += 1
                bytes_hashed += st.st_size
            if stat.S_ISREG(st.st_mode) and max(st.st_mtime_ns, st.st_ctime_ns) < trusted_before:
                cache[rel] = (_stat_key(st), digest[1])
            files[rel] = digest[0]
        self._cache = cache
        self._files = files
        self._subdirs = subdirs
        self._pending.clear()
        self._children = {}
        for rel, entry_digest in files.items():
            head, name = _parent(rel)
            self._children.setdefault(head, {})[name] = entry_digest
        self._digest = self._rehash(set(self._children))
        self._statistics = TreeStatistics(len(files), hashed, bytes_hashed)
        return self._digest

    @staticmethod
    def _entry(
        path: str, st: os.stat_result, cached: tuple[_StatKey, str] | None
    ) -> tuple[tuple[str, str] | None, bool]:
        """
        Return ``((entry digest, content digest), whether the content was read)``.

        The entry is None for what is not part of a candidate (special files).
        """
        if stat.S_ISLNK(st.st_mode):
            target = os.fsencode(os.readlink(path))
            content = hashlib.blake2b(target, digest_size=_DIGEST_SIZE).hexdigest()
            return (_entry_digest(b"l", content), content), False
        if not stat.S_ISREG(st.st_mode):
            return None, False
        read = False
        if cached is not None and cached[0] == _stat_key(st):
            content = cached[1]
        else:
            try:
                content = _content_digest(path)
            except PermissionError:
                content = f"unreadable:{st.st_size}:{st.st_mtime_ns}"
            read = True
        kind = b"x" if st.st_mode & stat.S_IXUSR else b"f"
        return (_entry_digest(kind, content), content), read

    def _update(self, changed: dict[str, bool], matcher: _Matcher) -> str:
        """Apply the changed paths the kernel reported to the tree; return the new digest."""
        self._pending.clear()
        if not changed:
            self._statistics = TreeStatistics(len(self._files), 0, 0)
            assert self._digest is not None
            return self._digest
        dirty: set[str] = set()
        hashed = bytes_hashed = 0
        # Parents first: a new directory is walked whole, so its own reported
        # entries are then already known.
        for rel in sorted(changed, key=_depth):
            head, name = _parent(rel)
            if head not in self._subdirs or matcher.matches_self(rel, name):
                continue
            path = os.path.join(self.root, rel)
            try:
                st = os.lstat(path)
            except (FileNotFoundError, NotADirectoryError):
                self._remove(rel, dirty)
                continue
            if stat.S_ISDIR(st.st_mode):
                if rel in self._subdirs and not changed[rel]:
                    continue
                self._remove(rel, dirty)
                h, b = self._add_directory(rel, matcher, dirty)
                hashed += h
                bytes_hashed += b
                continue
            if rel in self._subdirs:
                self._remove(rel, dirty)
            try:
                # The kernel named it: read it again whatever its stat signature.
                digest, read = self._entry(path, st, None)
            except (FileNotFoundError, NotADirectoryError):
                self._remove(rel, dirty)
                continue
            if digest is None:
                self._remove(rel, dirty)
                continue
            hashed += read
            bytes_hashed += st.st_size if read else 0
            self._cache.pop(rel, None)
            if self._files.get(rel) != digest[0]:
                self._files[rel] = digest[0]
                self._children.setdefault(head, {})[name] = digest[0]
                dirty.add(head)
        self._digest = self._rehash(dirty)
        self._statistics = TreeStatistics(len(self._files), hashed, bytes_hashed)
        return self._digest

    def _add_directory(self, rel: str, matcher: _Matcher, dirty: set[str]) -> tuple[int, int]:
        """Walk a directory that appeared, watching it and its subdirectories."""
        head, name = _parent(rel)
        self._subdirs[head].add(name)
        self._subdirs[rel] = set()
        watcher = self._watcher
        entering = watcher.watch if watcher is not None else None
        hashed = bytes_hashed = 0
        for sub, entry in _walk(self.root, matcher, start=rel, entering=entering):
            sub_head, sub_name = _parent(sub)
            if entry.is_dir(follow_symlinks=False):
                self._subdirs[sub_head].add(sub_name)
                self._subdirs.setdefault(sub, set())
                continue
            try:
                st = entry.stat(follow_symlinks=False)
                digest, read = self._entry(entry.path, st, None)
            except (FileNotFoundError, NotADirectoryError):
                continue
            if digest is None:
                continue
            hashed += read
            bytes_hashed += st.st_size if read else 0
            self._files[sub] = digest[0]
            self._children.setdefault(sub_head, {})[sub_name] = digest[0]
            dirty.add(sub_head)
        return hashed, bytes_hashed

    def _remove(self, rel: str, dirty: set[str]) -> None:
        """Forget a path, and everything beneath it when it was a directory."""
        head, name = _parent(rel)
        if rel in self._files:
            del self._files[rel]
            self._cache.pop(rel, None)
            self._children.get(head, {}).pop(name, None)
            dirty.add(head)
        if rel not in self._subdirs:
            return
        for sub in list(self._subdirs[rel]):
            self._remove(f"{rel}/{sub}", dirty)
        for child in list(self._children.get(rel, {})):
            self._remove(f"{rel}/{child}", dirty)
        del self._subdirs[rel]
        self._subdirs[head].discard(name)
        self._children.pop(rel, None)
        if self._children.get(head, {}).pop(name, None) is not None:
            dirty.add(head)
        dirty.discard(rel)

    def _rehash(self, dirty: set[str]) -> str:
        """Recompute the node digests of dirty directories and their ancestors, deepest first."""
        by_depth: dict[int, set[str]] = {}
        for rel in dirty:
            by_depth.setdefault(_depth(rel), set()).add(rel)
        for depth in range(max(by_depth, default=0), 0, -1):
            for rel in by_depth.get(depth, ()):
                head, name = _parent(rel)
                children = self._children.get(rel)
                parent = self._children.setdefault(head, {})
                if children:
                    node = "d:" + _node_digest(children)
                    if parent.get(name) == node:
                        continue
                    parent[name] = node
                else:
                    self._children.pop(rel, None)
                    if parent.pop(name, None) is None:
                        continue
                by_depth.setdefault(depth - 1, set()).add(head)
        root = self._children.get("")
        if not root:
            self._children.pop("", None)
            return EMPTY_TREE_DIGEST
        return _node_digest(root)

    def files(self) -> dict[str, str]:
        """Return the last computation's files: relative POSIX path to entry digest."""
        return dict(self._files)

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
            self._cache.clear()
            self._digest = None
            return
        rel = "/".join(parts)
        prefix = f"{rel}/"
        for key in [key for key in self._cache if key == rel or key.startswith(prefix)]:
            del self._cache[key]
        self._pending.add(rel)

    def statistics(self) -> TreeStatistics:
        """Return what the last computation did (how many files it read)."""
        return self._statistics

    def close(self) -> None:
        """Stop watching the tree (the hasher still works, by walking)."""
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
        self.watch = False


def tree_digest(root: Path, ignore: Sequence[str] = DEFAULT_IGNORE) -> str:
    """
    Compute the tree digest of a directory, once.

    Args:
        root: the directory.
        ignore: glob patterns of paths that do not count (see :func:`matches`).
    """
    return TreeHasher(root, ignore).digest()


def changed_paths(before: dict[str, str], after: dict[str, str]) -> tuple[str, ...]:
    """
    List the paths added, removed or changed between two :meth:`TreeHasher.files` maps.

    Args:
        before: the earlier map.
        after: the later map.

    Returns:
        The paths, sorted.
    """
    changed = {path for path, digest in before.items() if after.get(path) != digest}
    changed.update(path for path in after if path not in before)
    return tuple(sorted(changed))


# --------------------------------------------------------------------------- freezing


def _clone(source: str, target: str) -> None:
    """Copy a file's content: a copy-on-write clone where possible, else a plain copy."""
    with open(source, "rb") as src, open(target, "xb") as dst:
        if sys.platform == "linux":
            import fcntl

            try:
                fcntl.ioctl(dst.fileno(), _FICLONE, src.fileno())
                return
            except OSError:
                # Not supported by this file system (ext4, tmpfs) or across devices.
                pass
            # copy_file_range shares extents where the file system can (xfs, NFS 4.2)
            # and copies in the kernel otherwise.
            try:
                size = os.fstat(src.fileno()).st_size
                while True:
                    copied = os.copy_file_range(src.fileno(), dst.fileno(), max(size, _CHUNK))
                    if copied == 0:
                        return
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                    raise
                src.seek(0)
                dst.seek(0)
                dst.truncate()
        shutil.copyfileobj(src, dst, _CHUNK)


def _relative_to(path: Path, root: Path) -> str | None:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return None


def freeze(
    root: Path,
    dest: Path,
    ignore: Sequence[str] = DEFAULT_IGNORE,
    max_bytes: int | None = None,
) -> Path:
    """
    Snapshot a workspace into a new directory, so later writes to it do not change the copy.

    Files are cloned copy-on-write where the file system allows it and copied
    otherwise; they are never hard-linked (an in-place write to the original would
    change the snapshot). Modes and modification times are preserved, symlinks are
    recreated as symlinks with the same target text (an absolute target still
    points where it pointed), ignored paths and special files are skipped.

    The workspace may change while it is copied: bind evidence to the digest of
    the snapshot (``tree_digest(dest)``), not to an earlier digest of the workspace.

    Args:
        root: the workspace.
        dest: the snapshot directory; it must not exist (its parent may not either).
        ignore: glob patterns of paths to leave out (see :func:`matches`).
        max_bytes: the most the snapshot may hold, every file counted by its
            apparent size (a sparse file by the size it claims, not the blocks it
            holds); None: no limit.

    Returns:
        ``dest``.

    Raises:
        CandidateTooLarge: the files come to more than ``max_bytes`` (nothing is
            left of ``dest``).
        ConfigError: ``dest`` lies inside ``root`` on a path that is not ignored (the
            snapshot would copy itself).
        FileExistsError: ``dest`` already exists.
        OSError: a file could not be read or written.
    """
    # Kept whole: its docstring, the contract, is a third of it; the copy walk, its byte count and
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
    dest.mkdir(parents=True, exist_ok=False)
    # Directory modes are applied last, deepest first: a read-only directory must
    # receive its contents before it becomes read-only.
    directories: list[tuple[str, str]] = [(os.fspath(root), os.fspath(dest))]
    for rel, entry in _walk(root, matcher):
        target = os.path.join(dest, rel)
        try:
            if entry.is_symlink():
                os.symlink(os.readlink(entry.path), target)
            elif entry.is_dir(follow_symlinks=False):
                os.mkdir(target)
                directories.append((entry.path, target))
            elif entry.is_file(follow_symlinks=False):
                _clone(entry.path, target)
                shutil.copystat(entry.path, target, follow_symlinks=False)
        except FileNotFoundError:
            # Removed while freezing: the snapshot is simply without it.
            continue
    for source, target in reversed(directories):
        try:
            shutil.copystat(source, target, follow_symlinks=False)
        except FileNotFoundError:
            continue
    return dest
