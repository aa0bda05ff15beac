"""
The candidate: the workspace's content as it stands, its digest and its frozen snapshot.

A candidate is identified by its *tree digest*: a blake2b digest over the sorted
files of the workspace (directories themselves are not hashed, so an empty
directory changes nothing). Each file contributes its relative POSIX path, its
kind and the mode bit that matters (regular, executable, or symlink) and a
digest of its content (for a symlink: the text of its target; symlinks are never
followed). Ignored paths (caches, virtual environments, version control, proctor's
own state) do not count.

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
from collections.abc import Iterable, Iterator, Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Final

import attrs

from proctor._errors import CandidateTooLarge, ConfigError

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

_TREE_HEADER: Final = b"proctor-tree-v1\0"
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


def _walk(root: Path, matcher: _Matcher) -> Iterator[tuple[str, os.DirEntry[str]]]:
    """
    Yield ``(relative path, entry)`` for every entry not ignored, parents first.

    Directories are yielded before their contents, symlinks are never followed and
    an ignored directory is not entered.
    """
    stack: list[tuple[str, str]] = [("", os.fspath(root))]
    while stack:
        prefix, directory = stack.pop()
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


def _combine(files: dict[str, str]) -> str:
    tree = _new_hash()
    tree.update(_TREE_HEADER)
    for rel in sorted(files):
        # Paths never contain NUL, so NUL-separated records are unambiguous.
        tree.update(os.fsencode(rel) + b"\0" + files[rel].encode() + b"\0")
    return tree.hexdigest()


EMPTY_TREE_DIGEST: Final[str] = _combine({})
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

    The hasher remembers, per file, its stat signature (size, mtime, inode, device,
    ctime) and its content digest, and reads again only files whose signature
    changed. A file changed within the last ``racy_window`` seconds is read again on
    every computation until it is older than that: two writes within one timestamp
    tick can leave every stat field unchanged (the "racily clean" problem).
    Symlinks are hashed by their target text and never followed; other special
    files (FIFOs, sockets, devices) are skipped. A regular file that cannot be read
    is hashed by its size and mtime.

    Args:
        root: the workspace directory.
        ignore: glob patterns of paths that are not part of the candidate, with the
            semantics of :func:`matches`.
        racy_window: seconds during which a changed file's cached digest is not
            trusted. The default covers the coarsest common timestamp granularity
            (two seconds, FAT); 0 trusts the stat signature at once.
    """

    root: Path = attrs.field(converter=Path)
    ignore: tuple[str, ...] = attrs.field(default=DEFAULT_IGNORE, converter=_as_patterns)
    racy_window: float = 2.0
    _cache: dict[str, tuple[_StatKey, str]] = attrs.field(init=False, factory=dict)
    _files: dict[str, str] = attrs.field(init=False, factory=dict)
    _statistics: TreeStatistics = attrs.field(init=False, factory=TreeStatistics)

    def digest(self) -> str:
        """
        Compute the tree digest of the workspace as it stands.

        Raises:
            FileNotFoundError: the root directory does not exist.
            NotADirectoryError: the root is not a directory.
        """
        matcher = _compile(self.ignore)
        files: dict[str, str] = {}
        cache: dict[str, tuple[_StatKey, str]] = {}
        hashed = 0
        bytes_hashed = 0
        trusted_before = time.time_ns() - int(self.racy_window * 1e9)
        for rel, entry in _walk(self.root, matcher):
            try:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    target = os.fsencode(os.readlink(entry.path))
                    content = hashlib.blake2b(target, digest_size=_DIGEST_SIZE).hexdigest()
                    files[rel] = _entry_digest(b"l", content)
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
                key = _stat_key(st)
                cached = self._cache.get(rel)
                if cached is not None and cached[0] == key:
                    content = cached[1]
                else:
                    try:
                        content = _content_digest(entry.path)
                    except PermissionError:
                        content = f"unreadable:{st.st_size}:{st.st_mtime_ns}"
                    hashed += 1
                    bytes_hashed += st.st_size
            except (FileNotFoundError, NotADirectoryError):
                # Removed or replaced between listing and reading: the next digest sees it.
                continue
            if max(st.st_mtime_ns, st.st_ctime_ns) < trusted_before:
                cache[rel] = (key, content)
            kind = b"x" if st.st_mode & stat.S_IXUSR else b"f"
            files[rel] = _entry_digest(kind, content)
        self._cache = cache
        self._files = files
        self._statistics = TreeStatistics(len(files), hashed, bytes_hashed)
        return _combine(files)

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
            return
        rel = "/".join(parts)
        prefix = f"{rel}/"
        for key in [key for key in self._cache if key == rel or key.startswith(prefix)]:
            del self._cache[key]

    def statistics(self) -> TreeStatistics:
        """Return what the last computation did (how many files it read)."""
        return self._statistics


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
