"""
The task's workspace: a directory that every path an agent names must stay inside.

Confinement is physical, not lexical: a path is resolved the way the operating
system would follow it (symlinks included, at every existing component), and the
result must lie under the workspace root. A path whose last components do not exist
yet is fine, so that writes can create files and directories.

The file tools then use the resolved path without a check/use race: they open
its directories one component at a time from the workspace's own directory
descriptor, never following a link (:meth:`Workspace.open_parent`), so a
directory swapped for a symlink between the check and the use is refused, not
followed out of the workspace.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

import attrs

from proctor._errors import ConfigError, WorkspaceError

__all__ = ("Workspace",)


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _resolved(root: str | os.PathLike[str]) -> Path:
    return Path(root).resolve()


@attrs.frozen
class Workspace:
    """
    A directory that confines the paths of tool calls.

    Args:
        root: the workspace directory; stored resolved and absolute.
    """

    root: Path = attrs.field(converter=_resolved)

    @classmethod
    def at(cls, path: str | os.PathLike[str]) -> Workspace:
        """
        Return the workspace rooted at ``path``.

        Args:
            path: an existing directory.

        Raises:
            ConfigError: ``path`` does not exist or is not a directory.
        """
        root = Path(path).expanduser().resolve()
        if not root.exists():
            raise ConfigError(f"workspace {str(path)!r} does not exist; give an existing directory")
        if not root.is_dir():
            raise ConfigError(f"workspace {str(path)!r} is not a directory; give a directory")
        return cls(root)

    def resolve(self, path: str) -> Path:
        """
        Return the absolute, resolved location of ``path`` inside the workspace.

        Relative paths are taken from the root; absolute paths are accepted when
        they lie inside it. Every existing component is followed (symlinks
        included); components that do not exist yet are kept as written.

        Args:
            path: the path an agent gave.

        Raises:
            WorkspaceError: the path, followed physically, leaves the workspace
                (``..`` traversal, an absolute path elsewhere, a symlink that
                points outside).
            ConfigError: the path contains a NUL byte.
        """
        if "\0" in path:
            raise ConfigError(f"path {path!r} contains a NUL byte; give a plain relative path")
        given = Path(path)
        full = given if given.is_absolute() else self.root / given
        # resolve(strict=False) walks the components in order, following each
        # existing symlink before applying the next "..", like the kernel does.
        resolved = full.resolve()
        if not resolved.is_relative_to(self.root):
            raise WorkspaceError(
                f"path {path!r} leaves the workspace (it resolves to {str(resolved)!r}); "
                f"paths must stay inside the workspace {str(self.root)!r}"
            )
        return resolved

    def relative(self, path: Path) -> str:
        """
        Return ``path`` relative to the root, in POSIX form (``.`` for the root).

        Args:
            path: an absolute path inside the workspace, or one relative to its root.

        Raises:
            WorkspaceError: ``path`` is not inside the workspace.
        """
        full = path if path.is_absolute() else self.root / path
        try:
            rel = full.relative_to(self.root)
        except ValueError:
            raise WorkspaceError(
                f"path {str(path)!r} is not inside the workspace {str(self.root)!r}; "
                "paths must stay inside the workspace"
            ) from None
        return rel.as_posix()

    def open_parent(self, path: str, *, create: bool = False) -> tuple[int, str, str]:
        """
        Open the directory that holds ``path``, race-free, and return it with the name inside.

        The path is resolved and confined first (:meth:`resolve`); then its
        directories are opened one component at a time from the workspace root
        with ``O_NOFOLLOW``: the resolved path has no links, so a link met now
        was swapped in since, and is refused rather than followed.

        Args:
            path: the path an agent gave.
            create: make missing directories on the way.

        Returns:
            ``(directory fd, name, resolved relative path)``; the caller closes the fd.
            The name is ``""`` for the workspace root itself.

        Raises:
            WorkspaceError: the path leaves the workspace, or one of its
                directories was replaced by a link or a file while in use.
            FileNotFoundError: a directory on the way does not exist (``create`` off).
        """
        given = Path(path)
        resolved = self.resolve(path)
        if given.name in ("", ".", "..") or resolved == self.root:
            rel = self.relative(resolved)
        else:
            # The last component is kept as named: a link there is the entry itself.
            rel = self.relative(self.resolve(str(given.parent)) / given.name)
        parts = [] if rel == "." else rel.split("/")
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(self.root, flags)
        try:
            for part in parts[:-1]:
                try:
                    nxt = os.open(part, flags, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, dir_fd=fd)
                    nxt = os.open(part, flags, dir_fd=fd)
                except OSError as exc:
                    swapped = exc.errno == errno.ELOOP or (
                        exc.errno == errno.ENOTDIR and _is_link(fd, part)
                    )
                    if swapped:
                        raise WorkspaceError(
                            f"path {path!r} changed while in use: {part!r} is no longer a"
                            " directory of the workspace (a link or a file took its place)"
                        ) from None
                    raise
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
        return fd, parts[-1] if parts else "", rel
