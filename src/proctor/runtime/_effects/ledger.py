"""
Side effects you can trust: the effect ledger, idempotency keys and reconciliation.

A time limit that runs out does not mean that a write failed. An effect whose
outcome is unknown becomes ``uncertain``; it is settled by a permitted read that
looks the original effect up (a *reconciliation*), never by sending the write a
second time to find out. While an effect is uncertain, no other write may go to
its target.

The states of an effect and the moves between them (:data:`TRANSITIONS`)::

    planned ──> dispatched ──┬──> confirmed
                   ^         ├──> failed
                   │         └──> uncertain ──┬──> reconciled_applied
                   │                          ├──> escalated
                   │                          └──> reconciled_not_applied ──┐
                   └────────────── a retry with the same key ───────────────┘

Every call of an effectful tool has an idempotency key (:func:`idempotency_key`)
that stays the same across retries and resumes, so that the far side can tell a
repeat from a new request, and a reconciler can look the effect up.

:class:`EffectLedger` is the in-memory view of a run's effects. It enforces the
transitions and the rule "no replacement write while uncertain"; it knows
nothing of the journal: whoever drives it mirrors each transition there.

The key of the effect being dispatched travels to the tool through a context
variable (:func:`effect_key`, :func:`current_effect_key`), not through the
tool's arguments: the arguments are the agent's, and the agent must not be able
to choose or forge a key.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import math
import os
import random
import types
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import anyio
import attrs

from proctor._boundary import printable
from proctor._digest import canonical_json, digest
from proctor._errors import ConfigError, EffectError, ProctorError
from proctor._logging import get_logger
from proctor.budgets._bucket import backoff
from proctor.runtime._progress.normalize import normalize_command, normalize_path
from proctor.runtime._records import ToolStatus
from proctor.runtime._tools.process import run_command
from proctor.runtime._tools.registry import Tool, ToolContext
from proctor.runtime._tools.spec import ToolSpec
from proctor.runtime._tools.workspace import Workspace

__all__ = (
    "ABSENT",
    "FILE_TOOLS",
    "TRANSITIONS",
    "CommandProbe",
    "EffectLedger",
    "EffectRecord",
    "EffectState",
    "FileReconciler",
    "Reconciler",
    "Target",
    "Verdict",
    "args_hash",
    "current_effect_key",
    "effect_key",
    "file_digest",
    "file_digests",
    "idempotency_key",
    "reconcile",
    "reconciler_for",
    "retry_with_backoff",
    "target_of",
    "transition",
    "verdict_state",
)

log = get_logger()

T = TypeVar("T")


class EffectState(enum.StrEnum):
    """
    Where an effect stands.

    ``planned``: known to the ledger, not sent. ``dispatched``: journaled and
    sent, no outcome yet. ``confirmed`` / ``failed``: the far side said so.
    ``uncertain``: the outcome is unknown (a time limit, a dropped connection, a
    crash). ``reconciled_applied`` / ``reconciled_not_applied``: a read settled
    an uncertain effect. ``escalated``: nothing could settle it; a person must.
    """

    PLANNED = "planned"
    DISPATCHED = "dispatched"
    CONFIRMED = "confirmed"
    FAILED = "failed"
    UNCERTAIN = "uncertain"
    RECONCILED_APPLIED = "reconciled_applied"
    RECONCILED_NOT_APPLIED = "reconciled_not_applied"
    ESCALATED = "escalated"


_S = EffectState

#: The legal moves: from each state, the states it may go to. A state with no
#: move is terminal. ``reconciled_not_applied -> dispatched`` is a retry with
#: the same key, the only way one key is sent twice.
TRANSITIONS: Mapping[EffectState, frozenset[EffectState]] = types.MappingProxyType(
    {
        _S.PLANNED: frozenset({_S.DISPATCHED}),
        _S.DISPATCHED: frozenset({_S.CONFIRMED, _S.FAILED, _S.UNCERTAIN}),
        _S.CONFIRMED: frozenset(),
        _S.FAILED: frozenset(),
        _S.UNCERTAIN: frozenset({_S.RECONCILED_APPLIED, _S.RECONCILED_NOT_APPLIED, _S.ESCALATED}),
        _S.RECONCILED_APPLIED: frozenset(),
        _S.RECONCILED_NOT_APPLIED: frozenset({_S.DISPATCHED}),
        _S.ESCALATED: frozenset(),
    }
)

#: The states in which an effect holds its target: a write to the same target
#: under another key must wait. ``dispatched`` is among them so that two writes
#: to one target are never in flight together (if one became uncertain, the
#: other would be a replacement write sent while it was).
_HOLDING = frozenset({_S.DISPATCHED, _S.UNCERTAIN})

#: The states from which one key may be dispatched (again).
_SENDABLE = frozenset({_S.PLANNED, _S.RECONCILED_NOT_APPLIED})


def _names(states: Iterable[EffectState]) -> str:
    ordered = [s.value for s in EffectState if s in set(states)]
    return ", ".join(ordered) or "none (terminal)"


def _state(value: EffectState | str) -> EffectState:
    try:
        return EffectState(value)
    except ValueError:
        raise EffectError(
            f"unknown effect state {value!r}; the states are: {_names(EffectState)}"
        ) from None


def transition(current: EffectState | str, new: EffectState | str) -> EffectState:
    """
    Check the move from ``current`` to ``new`` and return ``new``.

    Args:
        current: the effect's state.
        new: the state asked for.

    Raises:
        EffectError: ``new`` is not reachable from ``current`` in one move, or
            either is not a state.
    """
    current, new = _state(current), _state(new)
    allowed = TRANSITIONS[current]
    if new not in allowed:
        raise EffectError(
            f"illegal effect transition {current.value} -> {new.value}; "
            f"from {current.value} the allowed states are: {_names(allowed)}"
        )
    return new


# --- keys, hashes, targets ---------------------------------------------------------


def idempotency_key(task_id: str, step: int, sequence: int) -> str:
    """
    Return the idempotency key of one effectful call.

    The key depends only on the task, the step and the call's place in that
    step, so a retry and a resumed run send the same key for the same call.
    ``step`` must therefore count steps of the task, not of one run.

    Args:
        task_id: the task.
        step: the step that proposed the call.
        sequence: the call's index among the calls of that step (0 for a single call).
    """
    return "pk-" + digest(canonical_json([task_id, step, sequence]))


def args_hash(args: Mapping[str, Any]) -> str:
    """
    Return the digest of a call's arguments, in canonical JSON.

    Args:
        args: the call's arguments, plain JSON data.
    """
    return digest(canonical_json(dict(args)))


@attrs.frozen
class Target:
    """
    What an effect changes: two effects with equal targets may not overlap.

    Args:
        kind: ``file``, ``http``, ``command``, ``resource`` or ``tool``.
        identity: the target within its kind: a workspace-relative path, a
            method and URL, a normalized command, a resource's arguments.
    """

    kind: str
    identity: str

    @property
    def text(self) -> str:
        """The target as one string, ``kind:identity`` (the journal's ``target`` column)."""
        return f"{self.kind}:{self.identity}"

    @classmethod
    def parse(cls, text: str) -> Target:
        """
        Rebuild a target from :attr:`text`.

        Args:
            text: ``kind:identity``.

        Raises:
            EffectError: ``text`` has no ``:``.
        """
        kind, sep, identity = text.partition(":")
        if not sep or not kind:
            raise EffectError(f"effect target {text!r} is not of the form kind:identity")
        return cls(kind, identity)


def _url_identity(url: str) -> str:
    parts = urllib.parse.urlsplit(url.strip())
    # Scheme and host are case-insensitive; the fragment never reaches the server.
    return urllib.parse.urlunsplit(
        (parts.scheme.lower(), parts.netloc.lower(), parts.path or "/", parts.query, "")
    )


def _arg(spec: ToolSpec, args: Mapping[str, Any], name: str) -> Any:
    try:
        return args[name]
    except KeyError:
        raise EffectError(
            f"{spec.name}: argument {name!r} names the effect's target and is missing"
        ) from None


def target_of(
    spec: ToolSpec, args: Mapping[str, Any], workspace: Workspace | None = None
) -> Target:
    """
    Return the target of a call of ``spec`` with ``args``.

    - a tool whose targets are all paths targets a ``file``: the path relative
      to the workspace, resolved when ``workspace`` is given (so that two
      spellings of one file are one target), normalized lexically otherwise;
    - a tool with a ``url`` target targets ``http``: ``METHOD url``, with the
      method upper-cased (``GET`` when there is no ``method`` argument) and
      the URL's scheme and host lower-cased, its fragment dropped;
    - a tool with a ``cmd`` target targets a ``command``: the normalized command;
    - another tool with targets targets a ``resource``: the tool and the target
      arguments in canonical JSON;
    - a tool that declares no target targets itself (``tool``): all its effects
      share one target, the conservative choice.

    Args:
        spec: the tool's declaration.
        args: the call's arguments.
        workspace: resolves file paths.

    Raises:
        EffectError: an argument named in ``spec.targets`` is missing.
        WorkspaceError: a path leaves the workspace.
    """
    names = spec.targets
    if not names:
        return Target("tool", spec.name)
    if all(name in spec.paths for name in names):
        paths = []
        for name in names:
            raw = str(_arg(spec, args, name))
            if workspace is not None:
                paths.append(workspace.relative(workspace.resolve(raw)))
            else:
                paths.append(normalize_path(raw))
        return Target("file", printable(" ".join(paths)))
    if "url" in names:
        method = str(args.get("method", "GET")).upper()
        return Target("http", f"{method} {_url_identity(str(_arg(spec, args, 'url')))}")
    if names == ("cmd",):
        return Target("command", normalize_command(_arg(spec, args, "cmd")))
    chosen = {name: _arg(spec, args, name) for name in names}
    return Target("resource", f"{spec.name} {canonical_json(chosen)}")


# --- the key of the effect being dispatched ----------------------------------------

_current_key: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "proctor_effect_key", default=None
)


@contextlib.contextmanager
def effect_key(key: str) -> Iterator[str]:
    """
    Make ``key`` the idempotency key of the effect dispatched in the block.

    Tools read it with :func:`current_effect_key`. Context variables follow the
    task that sets them, so a tool called in the block sees the key and a
    concurrent call in another task sees its own.

    Args:
        key: the effect's idempotency key.
    """
    token = _current_key.set(key)
    try:
        yield key
    finally:
        _current_key.reset(token)


def current_effect_key() -> str | None:
    """Return the idempotency key of the effect being dispatched, or None outside one."""
    return _current_key.get()


# --- records and the ledger --------------------------------------------------------


@attrs.frozen
class EffectRecord:
    """
    One effect as the ledger knows it.

    Args:
        key: its idempotency key.
        tool: the tool called.
        args: the call's arguments.
        target: what it changes.
        args_hash: :func:`args_hash` of ``args``.
        before_digest: the target's digest before dispatch (files: see
            :func:`file_digest`), when it was taken.
        state: where the effect stands.
        intended_digest: the target's digest once the effect is applied, when
            it can be known in advance (a file's new content).
    """

    key: str
    tool: str
    args: dict[str, Any]
    target: Target
    args_hash: str
    before_digest: str | None = None
    state: EffectState = EffectState.PLANNED
    intended_digest: str | None = None


@attrs.define(eq=False)
class EffectLedger:
    """
    The effects of a run, in memory, with their transitions enforced.

    Each method either makes its change or raises :class:`~proctor.EffectError`
    and changes nothing.
    """

    _records: dict[str, EffectRecord] = attrs.field(factory=dict, init=False)
    # Indexes kept by _index, so that admission and dispatch look up what holds
    # a target instead of scanning every effect of the task's history: the keys
    # of the effects in a holding state per target, and the keys by state for
    # the states a run asks about (dicts: ordered sets, in planning order).
    _holding: dict[Target, dict[str, None]] = attrs.field(factory=dict, init=False)
    _by_state: dict[EffectState, dict[str, None]] = attrs.field(
        factory=lambda: {_S.DISPATCHED: {}, _S.UNCERTAIN: {}}, init=False
    )
    # Each key's place in planning order, which the lists above are reported in.
    _order: dict[str, int] = attrs.field(factory=dict, init=False)
    #: The task's effects the journal holds that this ledger does not (settled
    #: before a resume loaded the open ones): with ``len``, every effect known.
    earlier: int = attrs.field(default=0, init=False)

    def __len__(self) -> int:
        return len(self._records)

    def known(self) -> int:
        """Return how many effects the task has: those held here and the ``earlier`` ones."""
        return len(self._records) + self.earlier

    def _index(self, record: EffectRecord, old: EffectState | None) -> None:
        """Keep the indexes in step with ``record``, whose state was ``old`` (None: new)."""
        self._records[record.key] = record
        if old is None:
            self._order.setdefault(record.key, len(self._order))
        new = record.state
        if old is new:
            return
        if old is not None:
            if old in self._by_state:
                self._by_state[old].pop(record.key, None)
            if old in _HOLDING and new not in _HOLDING:
                holders = self._holding[record.target]
                holders.pop(record.key, None)
                if not holders:
                    del self._holding[record.target]
        if new in self._by_state:
            self._by_state[new][record.key] = None
        if new in _HOLDING and (old is None or old not in _HOLDING):
            self._holding.setdefault(record.target, {})[record.key] = None

    @classmethod
    def from_records(cls, records: Iterable[EffectRecord]) -> EffectLedger:
        """
        Return a ledger holding ``records`` as they are (a resumed run's effects).

        Args:
            records: effects read back from the journal, in any state.

        Raises:
            EffectError: two records share a key.
        """
        ledger = cls()
        for record in records:
            if record.key in ledger._records:
                raise EffectError(f"effect {record.key} appears twice among the records")
            ledger._index(record, None)
        return ledger

    def get(self, key: str) -> EffectRecord | None:
        """
        Return the effect with idempotency key ``key``, or None.

        Args:
            key: the key.
        """
        return self._records.get(key)

    def records(self) -> tuple[EffectRecord, ...]:
        """Return every effect, in the order they were first planned."""
        return tuple(self._records.values())

    def _need(self, key: str) -> EffectRecord:
        try:
            return self._records[key]
        except KeyError:
            raise EffectError(f"no effect with idempotency key {key!r} in the ledger") from None

    def blocks(self, target: Target, key: str | None = None) -> EffectRecord | None:
        """
        Return the effect that keeps a write to ``target`` waiting, or None.

        An effect under another key holds its target while it is ``uncertain``
        (until a read reconciles it) or ``dispatched`` (in flight).

        Args:
            target: the target of the write to be sent.
            key: the key of that write; its own effect never blocks it.
        """
        for holder in self._holding.get(target, ()):
            if holder != key:
                return self._records[holder]
        return None

    def _in_state(self, state: EffectState) -> list[EffectRecord]:
        """The effects in ``state`` (one the ledger indexes), in planning order."""
        keys = sorted(self._by_state[state], key=self._order.__getitem__)
        return [self._records[key] for key in keys]

    def _check_free(self, target: Target, key: str) -> None:
        holder = self.blocks(target, key)
        if holder is not None:
            raise EffectError(
                f"target {target.text} is held by effect {holder.key} ({holder.state.value}); "
                "no replacement write may be sent to it until that effect is settled"
                + (" by reconciliation" if holder.state is _S.UNCERTAIN else "")
            )

    def plan(
        self,
        key: str,
        tool: str,
        args: Mapping[str, Any],
        target: Target,
        before_digest: str | None = None,
        *,
        intended_digest: str | None = None,
    ) -> EffectRecord:
        """
        Plan an effect, or return the one planned under ``key`` for a retry.

        A known key is accepted with the same arguments while it is ``planned``
        or ``reconciled_not_applied`` (a retry); the record is returned as it is.

        Args:
            key: its idempotency key.
            tool: the tool to call.
            args: the call's arguments.
            target: what it changes.
            before_digest: the target's digest now.
            intended_digest: the target's digest once applied, when known.

        Raises:
            EffectError: ``key`` is known with other arguments, or in a state
                that may not be sent again, or ``target`` is held by another effect.
        """
        plain = dict(args)
        digest_ = args_hash(plain)
        known = self._records.get(key)
        if known is not None:
            if known.args_hash != digest_:
                raise EffectError(
                    f"idempotency key {key} reused with other arguments "
                    f"(recorded {known.args_hash}, now {digest_}): give the new call its own key"
                )
            if known.state not in _SENDABLE:
                raise EffectError(
                    f"effect {key} is {known.state.value}; it may be planned again only while "
                    f"{_names(_SENDABLE)}"
                )
            self._check_free(known.target, key)
            return known
        self._check_free(target, key)
        record = EffectRecord(
            key=key,
            tool=tool,
            args=plain,
            target=target,
            args_hash=digest_,
            before_digest=before_digest,
            state=_S.PLANNED,
            intended_digest=intended_digest,
        )
        self._index(record, None)
        return record

    def _move(self, record: EffectRecord, new: EffectState) -> EffectRecord:
        moved = attrs.evolve(record, state=transition(record.state, new))
        self._index(moved, record.state)
        log.debug("effect.transition", key=record.key, old=record.state.value, new=new.value)
        return moved

    def dispatched(self, key: str) -> EffectRecord:
        """
        Mark effect ``key`` as sent: call it after journaling, just before sending.

        Args:
            key: the effect's key.

        Raises:
            EffectError: no such effect, it may not be sent from its state, or
                its target is held by another effect.
        """
        record = self._need(key)
        transition(record.state, _S.DISPATCHED)
        self._check_free(record.target, key)
        return self._move(record, _S.DISPATCHED)

    def outcome(self, key: str, state: EffectState | str) -> EffectRecord:
        """
        Move effect ``key`` to ``state``: a reply, a lost reply, or a reconciliation.

        Args:
            key: the effect's key.
            state: its new state.

        Raises:
            EffectError: no such effect, or the move is illegal.
        """
        return self._move(self._need(key), _state(state))

    def open_targets(self) -> set[Target]:
        """Return the targets that have an ``uncertain`` effect."""
        return {self._records[key].target for key in self._by_state[_S.UNCERTAIN]}

    def uncertain(self) -> list[EffectRecord]:
        """Return the ``uncertain`` effects, in the order they were planned."""
        return self._in_state(_S.UNCERTAIN)

    def recover_open(self) -> list[EffectRecord]:
        """
        Mark every effect dispatched without an outcome as ``uncertain`` and return them.

        This is the first thing a resumed run does with its predecessor's
        effects, and what ending a run does with the dispatches still open:
        nobody knows whether they happened.
        """
        return [self._move(record, _S.UNCERTAIN) for record in self._in_state(_S.DISPATCHED)]


# --- reconciliation ----------------------------------------------------------------

Verdict = Literal["applied", "not_applied", "unknown"]
"""What a reconciliation found out about an uncertain effect."""

#: The digest :func:`file_digest` gives a file that does not exist.
ABSENT = "absent"

#: The built-in tools :class:`FileReconciler` knows how to look up.
FILE_TOOLS: frozenset[str] = frozenset({"write_file", "edit_file", "delete_file"})


class Reconciler(Protocol):
    """
    Finds out, by reading only, whether an uncertain effect happened.

    A reconciler never repeats the effect; when reading cannot tell, it says
    ``unknown`` and the effect is escalated to a person.
    """

    async def reconcile(self, effect: EffectRecord, ctx: ToolContext) -> Verdict:
        """
        Tell whether ``effect`` was applied.

        Args:
            effect: the uncertain effect.
            ctx: what tools need from the run.
        """
        ...


def file_digest(path: Path) -> str | None:
    """
    Return the digest of a file's bytes, :data:`ABSENT` when there is no file.

    Args:
        path: the file.

    Returns:
        None when ``path`` is something else (a directory) or cannot be read.
    """
    try:
        with path.open("rb") as f:
            return digest(f.read())
    except FileNotFoundError:
        return None if path.is_symlink() else ABSENT
    except OSError:
        return None


def _file_digests(path: Path, tool: str, args: Mapping[str, Any]) -> tuple[str | None, str | None]:
    before = file_digest(path)
    if tool == "write_file":
        return before, digest(str(args.get("content", "")).encode("utf-8", "surrogateescape"))
    if tool == "delete_file":
        return before, ABSENT
    if tool == "edit_file" and before not in (None, ABSENT):
        try:
            text = path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            return before, None
        old, new = str(args.get("old", "")), str(args.get("new", ""))
        if old and old in text:
            return before, digest(text.replace(old, new, 1).encode("utf-8", "surrogateescape"))
    return before, None


async def file_digests(
    tool: str, args: Mapping[str, Any], workspace: Workspace
) -> tuple[str | None, str | None]:
    """
    Return a file write's target digest now and once applied, for :meth:`EffectLedger.plan`.

    Call it just before dispatch. The first digest is :func:`file_digest` of
    the target; the second is what the file's digest will be if the write
    succeeds (``write_file``: its content; ``delete_file``: :data:`ABSENT`;
    ``edit_file``: the edited text), None when it cannot be known.

    Args:
        tool: a name in :data:`FILE_TOOLS` (others give ``(None, None)``).
        args: the call's arguments, with ``path``.
        workspace: resolves the path.

    Raises:
        WorkspaceError: the path leaves the workspace.
    """
    if tool not in FILE_TOOLS or not isinstance(args.get("path"), str):
        return None, None
    path = workspace.resolve(args["path"])
    return await anyio.to_thread.run_sync(_file_digests, path, tool, args)


@attrs.frozen
class FileReconciler:
    """
    Reconciles ``write_file``, ``edit_file`` and ``delete_file`` by the file's digest.

    The file as it stands is compared with the effect's intended digest (for
    ``write_file``, the content's; for ``delete_file``, no file) and with the
    digest recorded before dispatch: equal to the intended one is
    ``applied``; unchanged since before is ``not_applied``; anything else
    (someone else changed it, or a digest is missing) is ``unknown``.
    """

    async def reconcile(self, effect: EffectRecord, ctx: ToolContext) -> Verdict:
        """
        Tell whether the file write ``effect`` was applied.

        Args:
            effect: the uncertain effect, of a tool in :data:`FILE_TOOLS`.
            ctx: gives the workspace.
        """
        path_arg = effect.args.get("path")
        if effect.tool not in FILE_TOOLS or not isinstance(path_arg, str):
            return "unknown"
        try:
            path = ctx.workspace.resolve(path_arg)
        except (ProctorError, OSError):
            return "unknown"
        now = await anyio.to_thread.run_sync(file_digest, path)
        intended = effect.intended_digest
        if intended is None and effect.tool == "write_file":
            intended = digest(
                str(effect.args.get("content", "")).encode("utf-8", "surrogateescape")
            )
        elif intended is None and effect.tool == "delete_file":
            intended = ABSENT
        if now is None:
            return "unknown"
        if intended is not None and now == intended:
            return "applied"
        if effect.before_digest is not None and now == effect.before_digest:
            return "not_applied"
        return "unknown"


def _argv_tuple(argv: Sequence[str]) -> tuple[str, ...]:
    if isinstance(argv, str) or not argv:
        raise ConfigError(
            f"a probe is a program and its arguments, such as ['test', '-f', 'x'], not {argv!r}"
        )
    return tuple(argv)


@attrs.frozen
class CommandProbe:
    """
    Reconciles a command's effect with a probe command the tool defines.

    The probe runs in the workspace, with ``PROCTOR_EFFECT_KEY`` and
    ``PROCTOR_EFFECT_TARGET`` in its environment. It must only read. Its exit
    code is the verdict: 0 ``applied``, 1 ``not_applied``, anything else (a
    time limit, a failure to start) ``unknown``.

    Args:
        argv: the probe: a program and its arguments.
        time_limit: seconds it may run.
    """

    argv: tuple[str, ...] = attrs.field(converter=_argv_tuple)
    time_limit: float = 30.0

    async def reconcile(self, effect: EffectRecord, ctx: ToolContext) -> Verdict:
        """
        Run the probe and read its verdict from its exit code.

        Args:
            effect: the uncertain effect.
            ctx: gives the workspace, the environment and the process groups.
        """
        env = dict(os.environ if ctx.env is None else ctx.env)
        env["PROCTOR_EFFECT_KEY"] = effect.key
        env["PROCTOR_EFFECT_TARGET"] = effect.target.text
        result = await run_command(
            list(self.argv),
            cwd=ctx.workspace.root,
            time_limit=self.time_limit,
            env=env,
            groups=ctx.groups,
        )
        log.info("effect.probe", key=effect.key, status=result.status.value, code=result.exit_code)
        if result.status is ToolStatus.UNCERTAIN or result.exit_code not in (0, 1):
            return "unknown"
        return "applied" if result.exit_code == 0 else "not_applied"


def reconciler_for(
    name: str,
    tool: Tool | None = None,
    extra: Mapping[str, Reconciler] | None = None,
) -> Reconciler | None:
    """
    Return the reconciler of tool ``name``, or None when nothing can reconcile it.

    In order: ``extra[name]``; the ``reconciler`` attribute of the tool's
    implementation (how a tool family such as the HTTP tools brings its own);
    :class:`FileReconciler` for the tools in :data:`FILE_TOOLS`.

    Args:
        name: the tool's name.
        tool: the registered tool, if any.
        extra: reconcilers configured for the run (a :class:`CommandProbe` per
            command tool, for instance).
    """
    if extra is not None and name in extra:
        return extra[name]
    own = getattr(tool.fn, "reconciler", None) if tool is not None else None
    if own is not None and callable(getattr(own, "reconcile", None)):
        return own  # type: ignore[no-any-return]
    if name in FILE_TOOLS:
        return FileReconciler()
    return None


_VERDICT_STATES: Mapping[str, EffectState] = types.MappingProxyType(
    {
        "applied": _S.RECONCILED_APPLIED,
        "not_applied": _S.RECONCILED_NOT_APPLIED,
        "unknown": _S.ESCALATED,
    }
)


def verdict_state(verdict: Verdict) -> EffectState:
    """
    Return the state an uncertain effect moves to on ``verdict``.

    Args:
        verdict: ``applied``, ``not_applied`` or ``unknown`` (escalated).

    Raises:
        ConfigError: ``verdict`` is none of those.
    """
    try:
        return _VERDICT_STATES[verdict]
    except KeyError:
        raise ConfigError(
            f"a verdict must be applied, not_applied or unknown, got {verdict!r}"
        ) from None


async def reconcile(
    effect: EffectRecord, reconciler: Reconciler | None, ctx: ToolContext
) -> Verdict:
    """
    Ask ``reconciler`` about ``effect``; ``unknown`` when there is none or it fails.

    A reconciler that raises a proctor error or an ``OSError`` (a lookup that
    could not connect) gives ``unknown``: the effect stays unsettled rather than
    guessed. Cancellation propagates.

    Args:
        effect: the uncertain effect.
        reconciler: the tool's reconciler, or None.
        ctx: what tools need from the run.
    """
    if reconciler is None:
        log.info("effect.no_reconciler", key=effect.key, tool=effect.tool)
        return "unknown"
    try:
        verdict = await reconciler.reconcile(effect, ctx)
    except (ProctorError, OSError) as exc:
        log.info("effect.reconcile_failed", key=effect.key, error=str(exc))
        return "unknown"
    if verdict not in _VERDICT_STATES:
        log.warning("effect.bad_verdict", key=effect.key, verdict=repr(verdict))
        return "unknown"
    log.info("effect.reconciled", key=effect.key, verdict=verdict)
    return verdict


# --- retries -----------------------------------------------------------------------


async def retry_with_backoff(
    fn: Callable[[], Awaitable[T]],
    *,
    attempts: int,
    bucket_take: Callable[[], bool] | None = None,
    retry_on: Sequence[type[Exception]] = (Exception,),
    base: float = 0.5,
    cap: float = 30.0,
    sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    rng: Callable[[], float] = random.random,
) -> T:
    """
    Await ``fn()``, retrying on failure with capped exponential backoff and full jitter.

    Before retry ``n`` (1-based) it sleeps ``rng() * min(cap, base * 2 ** (n - 1))``
    and takes a token from the retry bucket; when the bucket says no, or after
    ``attempts`` calls, the last failure is raised. Retry at one layer only:
    ``fn`` itself must not retry (the HTTP tools do not), or the attempts multiply.

    ``fn`` must be safe to repeat: a read, a reconciliation lookup, or a write
    whose previous attempt was reconciled as not applied, sent under the same key.
    Never wrap a write whose outcome is unknown.

    Args:
        fn: the operation; it signals a retryable failure by raising one of ``retry_on``.
        attempts: calls at most, the first included (at least 1).
        bucket_take: takes one retry token; False means no retry is left.
        retry_on: the exceptions that call for a retry; others propagate at once.
        base: the first backoff bound, in seconds.
        cap: the largest backoff bound, in seconds.
        sleep: awaited with each delay.
        rng: returns a float in [0, 1).

    Raises:
        ConfigError: ``attempts`` < 1, ``base`` < 0 or ``cap`` < ``base``.
    """
    if attempts < 1:
        raise ConfigError(f"attempts must be at least 1, got {attempts!r}")
    if not 0 <= base <= cap < math.inf:
        raise ConfigError(
            f"backoff needs 0 <= base <= cap, both finite, got base={base!r}, cap={cap!r}"
        )
    kinds = tuple(retry_on)
    attempt = 1
    while True:
        try:
            return await fn()
        except kinds as exc:
            if attempt >= attempts:
                raise
            if bucket_take is not None and not bucket_take():
                log.info("effect.retry_refused", attempt=attempt, error=str(exc))
                raise
            delay = backoff(attempt - 1, base, cap, rng)
            log.info("effect.retry", attempt=attempt, delay=delay, error=str(exc))
            await sleep(delay)
            attempt += 1
