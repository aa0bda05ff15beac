"""
Exceptions raised by proctor.

Every error proctor raises derives from :class:`ProctorError`::

    ProctorError
    ├── ConfigError (ValueError)         bad task file, policy or argument
    │   ├── TrajectoryError              a malformed recorded trajectory
    │   └── TranscriptError              another agent's transcript that is not what its format says
    ├── WorkspaceError (PermissionError)  a path outside the task's workspace
    ├── JournalError                     the journal could not be read or written
    │   ├── SchemaError                  the journal's schema is newer than this proctor
    │   └── FencedError                  a write refused by the run's status or epoch
    ├── EffectError                      an effect-ledger rule was broken
    ├── BudgetError                      a budget rule was broken (unknown model price, ...)
    ├── ActorError                       an actor could not produce a proposal
    ├── InputRefused (ValueError)        data refused at a boundary (not finite, a lone
    │                                    surrogate, too deep, too large)
    ├── RunHeld                          the task's runs are held by another live host
    ├── CandidateTooLarge                a candidate over the snapshot size limit
    ├── SnapshotRefused (ValueError)     a decision-core snapshot that cannot be restored
    ├── SandboxUnavailableError          mode "auto" and bubblewrap cannot be used here
    ├── RunNotFoundError (LookupError)   no run with that id in the journal
    ├── RunEndedError                    an operator's request to a run that has ended
    └── WorkspaceBusyError               a workspace a live run holds
"""

from __future__ import annotations

__all__ = (
    "ActorError",
    "BudgetError",
    "CandidateTooLarge",
    "ConfigError",
    "EffectError",
    "FencedError",
    "InputRefused",
    "JournalError",
    "ProctorError",
    "RunHeld",
    "RunEndedError",
    "RunNotFoundError",
    "SandboxUnavailableError",
    "SchemaError",
    "SnapshotRefused",
    "TrajectoryError",
    "TranscriptError",
    "WorkspaceBusyError",
    "WorkspaceError",
)


class ProctorError(Exception):
    """Base class of every error proctor raises."""


class ConfigError(ProctorError, ValueError):
    """
    Bad input from a person: a task file, a policy, an argument.

    The message says what was wrong, where (file, line or field) and what would
    be accepted.
    """


class TrajectoryError(ConfigError):
    """
    A recorded trajectory that does not follow format v1.

    Args:
        message: what is wrong and what would be accepted.
        line: the 1-based line of the file, when the error belongs to one.
    """

    def __init__(self, message: str, line: int | None = None) -> None:
        self.line = line
        super().__init__(f"line {line}: {message}" if line is not None else message)


class TranscriptError(ConfigError):
    """
    Another agent's transcript that is not what its format says.

    Args:
        path: the file.
        where: the line, event or field (``line 12``, ``messages[3].content``).
        expected: what would have been accepted there.
    """

    def __init__(self, path: object, where: str, expected: str) -> None:
        self.path, self.where, self.expected = str(path), where, expected
        super().__init__(f"{self.path}: {where}: expected {expected}")


class WorkspaceError(ProctorError, PermissionError):
    """A path that leaves the task's workspace (traversal or a symlink escape)."""


class JournalError(ProctorError):
    """The journal could not be opened, read or written."""


class SchemaError(JournalError):
    """The journal was written by a newer proctor whose schema this one does not know."""


class FencedError(JournalError):
    """A write refused because the run is no longer running or no longer owned by this epoch."""


class EffectError(ProctorError):
    """An effect-ledger rule was broken, such as one idempotency key with other arguments."""


class BudgetError(ProctorError):
    """A budget rule was broken, such as a model with no known or declared price."""


class ActorError(ProctorError):
    """
    An actor could not produce a proposal: its process failed or its model server did.

    The runtime turns it into a journaled ``failed`` disposition (``actor_crashed``).
    """


class InputRefused(ProctorError, ValueError):
    """
    Data that cannot cross a boundary of the runtime: a number that is not finite,
    an integer out of range, a lone surrogate, nesting too deep, a value too large.

    Args:
        message: what was wrong and what would be accepted.
        where: the place in the data (``args.content``, ``events[3].text``).
    """

    def __init__(self, message: str, where: str = "") -> None:
        self.where = where
        self.reason = message
        super().__init__(f"{where}: {message}" if where else message)


class RunHeld(ProctorError):
    """
    The task's runs are held by another live host: a second host may not resume
    or run it while the first one does.

    Args:
        holder: who holds it (``host NAME pid N``).
        run_id: the run it holds.
    """

    def __init__(self, message: str, holder: str, run_id: str) -> None:
        self.holder = holder
        self.run_id = run_id
        super().__init__(message)


class CandidateTooLarge(ProctorError):
    """
    A candidate larger than the snapshot limit (files counted by apparent size,
    a sparse file by the size it claims): it is not frozen, and not verified.
    """


class SnapshotRefused(ProctorError, ValueError):
    """
    A snapshot of the decision core that cannot be restored: taken under another
    policy version, another snapshot format or other task facts, or not a snapshot.
    Whoever restores it feeds the whole history instead.
    """


class RunNotFoundError(ProctorError, LookupError):
    """No run with the given id is in the journal."""


class RunEndedError(ProctorError):
    """
    An operator's request (stop, answer, approve, amend, retune) to a run that has
    ended: nothing was journaled. The message names the run and how it ended.
    """


class WorkspaceBusyError(ProctorError):
    """A run was refused: a live run holds its workspace (the message names that run)."""


class SandboxUnavailableError(ProctorError, RuntimeError):
    """
    The sandbox is asked for (mode ``auto``) but bubblewrap cannot be used here.

    The message says why and what would fix it (install bubblewrap, allow user
    namespaces, or set ``[sandbox] mode = "off"``).
    """
