"""
Actors: whatever proposes the next step. The runtime puts each in its own task.

An actor is any object with ``async def propose(self, observation) ->
Proposal | None``. Returning None means it has nothing more to propose. It holds
no handle that can end the run: it only sends proposals.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import anyio
import attrs
import cattrs
from anyio.abc import ObjectReceiveStream, ObjectSendStream

from proctor import _channels as channels
from proctor._errors import ConfigError
from proctor._logging import get_logger
from proctor._wire import converter
from proctor.budgets._usage import Usage
from proctor.runtime._records import Observation, Proposal

__all__ = (
    "Actor",
    "ActorCrashed",
    "ActorFinished",
    "ActorSpend",
    "FunctionActor",
    "ScriptedActor",
    "load_script",
    "run_actor",
)

log = get_logger()


@runtime_checkable
class Actor(Protocol):
    """Anything that turns an observation into a proposal."""

    async def propose(self, observation: Observation) -> Proposal | None:
        """Return the next proposal, or None when there is nothing more to propose."""
        ...


@attrs.frozen
class ActorFinished:
    """The actor has nothing more to propose."""


@attrs.frozen
class ActorSpend:
    """What the actor's last turn used: model usage and infrastructure retries."""

    usage: Usage | None = None
    retries: int = 0


@attrs.frozen
class ActorCrashed:
    """The actor raised an exception; the controller decides what it means."""

    error: str


def _as_list(proposals: Iterable[Proposal]) -> list[Proposal]:
    return list(proposals)


@attrs.define(eq=False)
class ScriptedActor:
    """
    An actor that proposes a fixed list of proposals, in order, whatever it observes.

    Args:
        proposals: the script (any sequence; kept as a list).
        start: how many of its proposals were already made (by the earlier runs
            of a resumed task): it goes on with the next one.
    """

    proposals: list[Proposal] = attrs.field(converter=_as_list)
    observations: list[Observation] = attrs.field(factory=list, init=False)
    _next: int = attrs.field(default=0, alias="start")

    @classmethod
    def from_file(cls, path: str | Path, start: int = 0) -> ScriptedActor:
        """
        Load a script: JSON Lines, one proposal per line (see ``docs/taskfile.md``).

        Args:
            path: the script.
            start: how many of its proposals were already made; it goes on after them.
        """
        return cls(load_script(path), start=start)

    async def propose(self, observation: Observation) -> Proposal | None:
        """Return the next scripted proposal."""
        self.observations.append(observation)
        if self._next >= len(self.proposals):
            return None
        proposal = self.proposals[self._next]
        self._next += 1
        return proposal


@attrs.define(eq=False)
class FunctionActor:
    """An actor from an async function ``(observation) -> proposal | None``."""

    fn: Callable[[Observation], Awaitable[Proposal | None]]

    async def propose(self, observation: Observation) -> Proposal | None:
        """Call the function."""
        return await self.fn(observation)


def load_script(path: str | Path, lines: Iterable[str] | None = None) -> list[Proposal]:
    """
    Read a script of proposals (JSON Lines; blank lines and ``#`` comments skipped).

    Raises:
        ConfigError: a line that is not a proposal; the message names file and line.
    """
    if lines is None:
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read the actor script: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"{path}: the actor script is not UTF-8 text (byte {exc.start}: {exc.reason})"
            ) from None
    proposals: list[Proposal] = []
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        # Plain JSON, as an agent would send it: what the runtime cannot carry
        # (Infinity, lone surrogates) is refused by the controller, as any actor's.
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
        except RecursionError:
            raise ConfigError(f"{path}:{number}: nested too deeply to be a proposal") from None
        if not isinstance(data, dict):
            raise ConfigError(
                f"{path}:{number}: a proposal is a JSON object with "
                f'"type": "action" | "round" | "message" | "complete" | "claim", got {text[:40]}'
            )
        try:
            proposals.append(converter.structure(data, Proposal))  # type: ignore[arg-type]
        except (cattrs.BaseValidationError, KeyError, ValueError, TypeError, RecursionError) as exc:
            detail = (
                "; ".join(cattrs.transform_error(exc))
                if isinstance(exc, cattrs.BaseValidationError)
                else str(exc)
            )
            raise ConfigError(
                f"{path}:{number}: not a proposal ({detail}); a proposal is an object with "
                '"type": "action" | "round" | "message" | "complete" | "claim"'
            ) from None
    return proposals


async def run_actor(
    actor: Actor,
    observations: ObjectReceiveStream[Observation],
    proposals: ObjectSendStream[Proposal | ActorFinished | ActorCrashed | ActorSpend],
) -> None:
    """
    The actor task: answer every observation with one proposal.

    What a turn used (tokens, retries), when the actor reports it, goes to the
    controller before the proposal, so the accountant settles it. Exceptions
    from the actor are reported to the controller, never raised into the run's
    task group: the controller decides what a crash means. When the controller
    has stopped listening (the run is over), the task ends quietly. An actor
    with an ``aclose`` method is closed when its task ends.
    """
    try:
        async with observations, proposals:
            await _answer(actor, observations, proposals)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        log.debug("actor.controller_gone")
    finally:
        close = getattr(actor, "aclose", None)
        if close is not None:
            with anyio.move_on_after(10, shield=True):
                await close()


async def _answer(
    actor: Actor,
    observations: ObjectReceiveStream[Observation],
    proposals: ObjectSendStream[Proposal | ActorFinished | ActorCrashed | ActorSpend],
) -> None:
    """Answer observations until the controller closes them or the actor is done."""
    while True:
        try:
            observation = await channels.receive(observations)
        except anyio.EndOfStream:
            return
        try:
            proposal = await actor.propose(observation)
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            log.warning("actor.crashed", error=repr(exc))
            await _report_spend(actor, proposals)
            await proposals.send(ActorCrashed(f"{type(exc).__name__}: {exc}"))
            return
        await _report_spend(actor, proposals)
        if proposal is None:
            await proposals.send(ActorFinished())
            return
        await channels.send(proposals, proposal)


async def _report_spend(actor: Actor, proposals: ObjectSendStream[Any]) -> None:
    take_usage = getattr(actor, "take_usage", None)
    take_retries = getattr(actor, "take_retries", None)
    usage = take_usage() if take_usage is not None else None
    retries = take_retries() if take_retries is not None else 0
    if usage is not None or retries:
        await channels.send(proposals, ActorSpend(usage, retries))
