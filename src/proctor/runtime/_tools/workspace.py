"""
The task's workspace: a directory that every path an agent names must stay inside.

Confinement is physical, not lexical: a path is resolved the way the operating
system would follow it (symlinks included, at every existing component), and the
result must lie under the workspace root. A path whose last components do not exist
yet is fine, so that writes can create files and directories.

The check is made when a tool resolves its path. A process that swaps a directory
for a symlink between that check and the tool's use of the path is not defended
against here; commands run by the agent are confined by other means (the
candidate is frozen and verified outside the agent's reach).
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs

from proctor._errors import ConfigError, WorkspaceError

__all__ = ("Workspace",)


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
