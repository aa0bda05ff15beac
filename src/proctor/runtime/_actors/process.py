"""
An agent in its own process, in any language, that speaks JSON Lines.

The protocol (see ``docs/hosting-agents.md``): for each observation proctor
writes one JSON object on one line of the agent's standard input::

    {"type": "observation", "step": 3, "kind": "result", "text": "...",
     "results": [{"status": "ok", "output": "...", "exit_code": 0}],
     "remaining": {"steps": 57}, "disposition": null}

and reads the agent's answer from its standard output: any number of
``{"type": "usage", "tokens_in": ..., "tokens_out": ..., "model": ...}`` lines,
then one proposal in the vocabulary of an actor script (``{"type": "action" |
"round" | "message" | "complete" | "claim", ...}``). Blank lines are skipped;
any other line is a protocol error. Standard error is the agent's own: proctor
keeps its tail for diagnostics.

The process starts with the first observation, in its own session and process
group, and ends with the run: once an observation carries a disposition it is
sent, standard input is closed, and the group is terminated (SIGTERM, then
SIGKILL) if the agent has not exited within a short grace. A process that exits,
hangs past the response time limit or writes something that is not a proposal
fails the actor with :class:`ActorError`, and its group is ended before the
error is raised: a failed agent never keeps running.
"""

from __future__ import annotations

import contextlib
import json
import math
import shlex
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import attrs
import cattrs
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from proctor._boundary import dumps_utf8
from proctor._errors import ActorError, ConfigError
from proctor._logging import get_logger
from proctor._wire import converter
from proctor.budgets._usage import Usage
from proctor.runtime._records import Observation, Proposal
from proctor.runtime._tools.process import ProcessGroups

__all__ = ("ActorError", "ProcessActor", "observation_message", "parse_agent_line")

log = get_logger()

# Seconds a process group gets between SIGTERM and SIGKILL.
_TERM_GRACE = 2.0
# Seconds an agent gets to exit by itself once the run has ended and its stdin is closed.
_END_GRACE = 2.0
# Seconds to wait for the rest of stderr (or for the exit code) once stdout has ended.
_DRAIN_GRACE = 1.0
# Bound of the shielded cleanup when the caller is cancelled.
_CLEANUP_LIMIT = 10.0
# The longest line read from the agent.
_LINE_LIMIT = 16 * 1024 * 1024
# Bytes of stderr kept (the tail).
_STDERR_LIMIT = 16_000
# Characters of stderr or of an offending line quoted in an error.
_QUOTE_LIMIT = 2_000

_PROPOSAL_HINT = (
    'a proposal is one JSON object on one line with "type": "action" | "round" | '
    '"message" | "complete" | "claim" (or a "usage" line before it)'
)


@attrs.define(eq=False)
class _Tail:
    """The last ``limit`` bytes of a stream, and how many came before them."""

    limit: int
    data: bytearray = attrs.field(factory=bytearray)
    total: int = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.data += chunk
        excess = len(self.data) - self.limit
        if excess > 0:
            del self.data[:excess]

    def text(self, limit: int = _QUOTE_LIMIT) -> str:
        text = self.data.decode("utf-8", errors="replace").strip()
        if len(text) > limit or self.total > len(self.data):
            text = "…" + text[-limit:]
        return text


def _finite(value: float) -> float | None:
    # JSON has no infinity: an unlimited dimension is null.
    return value if math.isfinite(value) else None


def observation_message(observation: Observation) -> dict[str, Any]:
    """
    Return the protocol message for ``observation`` (one line of the agent's stdin).

    Args:
        observation: what the controller tells the actor.
    """
    return {
        "type": "observation",
        "step": observation.step,
        "kind": observation.kind.value,
        "text": observation.text,
        "results": [
            {"status": r.status.value, "output": r.output, "exit_code": r.exit_code}
            for r in observation.results
        ],
        "remaining": {k: _finite(v) for k, v in observation.remaining.items()},
        "disposition": (
            observation.disposition.value if observation.disposition is not None else None
        ),
    }


_USAGE_KEYS = ("type", "tokens_in", "tokens_out", "model", "cost_usd")


def _usage(data: dict[str, Any]) -> Usage:
    unknown = [k for k in data if k not in _USAGE_KEYS]
    if unknown:
        raise ConfigError(
            f"unknown key {unknown[0]!r} in a usage line; accepted: {', '.join(_USAGE_KEYS[1:])}"
        )
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        raise ConfigError(f"model must be a string, got {model!r}")
    return Usage(data.get("tokens_in", 0), data.get("tokens_out", 0), model, data.get("cost_usd"))


def parse_agent_line(line: str) -> Proposal | Usage:
    """
    Parse one line an agent wrote: a proposal, or a usage report.

    Args:
        line: the line, without its newline.

    Raises:
        ConfigError: the line is neither; the message says what was wrong.
    """
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not JSON ({exc.msg}); {_PROPOSAL_HINT}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"not a JSON object; {_PROPOSAL_HINT}")
    if data.get("type") == "usage":
        try:
            return _usage(data)
        except ConfigError as exc:
            raise ConfigError(f"a bad usage line: {exc}") from None
    try:
        proposal: Proposal = converter.structure(data, Proposal)  # type: ignore[arg-type]
    except (cattrs.BaseValidationError, KeyError, ValueError, TypeError) as exc:
        detail = (
            "; ".join(cattrs.transform_error(exc))
            if isinstance(exc, cattrs.BaseValidationError)
            else str(exc)
        )
        raise ConfigError(f"not a proposal ({detail}); {_PROPOSAL_HINT}") from None
    return proposal


def _sum(usages: Sequence[Usage]) -> Usage:
    costs = [u.cost_usd for u in usages]
    return Usage(
        sum(u.tokens_in for u in usages),
        sum(u.tokens_out for u in usages),
        next((u.model for u in reversed(usages) if u.model is not None), None),
        sum(c for c in costs if c is not None) if all(c is not None for c in costs) else None,
    )


def _argv(value: Sequence[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        raise ConfigError(f"argv must be a list of strings, not a string: {value!r}")
    argv = tuple(value)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise ConfigError(f"argv must be a non-empty list of strings, got {list(argv)!r}")
    return argv


def _positive(_: Any, attribute: attrs.Attribute[float], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(f"{attribute.name} must be a positive number of seconds, not {value!r}")


@attrs.frozen
class _Failed:
    """Why the agent gave no proposal."""

    message: str


@attrs.frozen
class _Exited:
    """The agent's stdout ended: it exited, or is about to."""


@attrs.define(eq=False)
class ProcessActor:
    """
    An actor that is an external process speaking the JSON Lines protocol.

    Use it as an async context manager, or call :meth:`aclose`, so that the
    process is gone even if the run never ends normally.

    Args:
        argv: the program and its arguments (no shell).
        cwd: its working directory (default: this process's).
        env: its whole environment (default: this process's).
        response_time_limit: seconds the agent may take to answer one observation.
    """

    argv: tuple[str, ...] = attrs.field(converter=_argv)
    cwd: Path | None = attrs.field(default=None, converter=attrs.converters.optional(Path))
    env: Mapping[str, str] | None = None
    response_time_limit: float = attrs.field(default=300.0, validator=_positive)
    _process: Process | None = attrs.field(default=None, init=False)
    _stdout: BufferedByteReceiveStream | None = attrs.field(default=None, init=False)
    _stderr: _Tail = attrs.field(factory=lambda: _Tail(_STDERR_LIMIT), init=False)
    _stderr_done: anyio.Event | None = attrs.field(default=None, init=False)
    _groups: ProcessGroups = attrs.field(factory=ProcessGroups, init=False)
    _usage: list[Usage] = attrs.field(factory=list, init=False)
    _failure: str | None = attrs.field(default=None, init=False)
    _ended: bool = attrs.field(default=False, init=False)
    _pid: int | None = attrs.field(default=None, init=False)
    _returncode: int | None = attrs.field(default=None, init=False)

    @classmethod
    def from_options(
        cls, options: Mapping[str, Any], where: str = "", base: Path | None = None
    ) -> ProcessActor:
        """
        Build the actor of a task file's ``[actor]`` table with ``kind = "process"``.

        Args:
            options: the table: ``command`` (required: a list of strings, or a string
                split like a shell would, without running one), ``cwd``,
                ``response_time_limit``; ``kind`` may be present.
            where: where the table came from (a file name), for error messages.
            base: the directory relative paths are resolved against (the task
                file's); it is also the default working directory.

        Raises:
            ConfigError: an unknown key or a bad value; the message names the field.
        """
        prefix = f"{where}: " if where else ""
        accepted = ("kind", "command", "cwd", "response_time_limit")

        def bad(key: str, message: str) -> ConfigError:
            return ConfigError(f"{prefix}actor.{key}: {message}")

        for key in options:
            if key not in accepted:
                raise bad(key, f"unknown key; a process actor accepts {', '.join(accepted[1:])}")
        if options.get("kind", "process") != "process":
            raise bad("kind", f"expected 'process', got {options['kind']!r}")
        command = options.get("command")
        if isinstance(command, str):
            try:
                command = shlex.split(command)
            except ValueError as exc:
                raise bad("command", f"cannot split {command!r}: {exc}") from None
        if (
            not isinstance(command, list)
            or not command
            or not all(isinstance(a, str) and a for a in command)
        ):
            raise bad(
                "command",
                'a process actor needs command = ["program", "arg", ...] '
                f"(a non-empty list of strings), got {command!r}",
            )
        cwd_value = options.get("cwd")
        if cwd_value is not None and not isinstance(cwd_value, str):
            raise bad("cwd", f"must be a directory path (a string), got {cwd_value!r}")
        cwd = Path(cwd_value) if cwd_value is not None else None
        if base is not None:
            cwd = base / cwd if cwd is not None else base
        if cwd is not None and not cwd.is_dir():
            raise bad("cwd", f"{cwd} is not a directory")
        limit = options.get("response_time_limit", 300.0)
        if isinstance(limit, bool) or not isinstance(limit, int | float) or not limit > 0:
            raise bad("response_time_limit", f"must be a positive number of seconds, got {limit!r}")
        return cls(command, cwd=cwd, response_time_limit=float(limit))

    @property
    def pid(self) -> int | None:
        """The agent's process id (and process group id) once started, else None."""
        return self._pid

    @property
    def returncode(self) -> int | None:
        """The agent's exit code once it has ended and been reaped, else None."""
        return self._returncode

    def stderr_tail(self) -> str:
        """Return the last part of what the agent wrote on its standard error."""
        return self._stderr.text()

    def take_usage(self) -> Usage | None:
        """Return the usage the agent reported since the last call, or None if it reported none."""
        if not self._usage:
            return None
        total = _sum(self._usage)
        self._usage.clear()
        return total

    async def __aenter__(self) -> ProcessActor:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """End the agent: close its stdin, terminate its process group, reap it."""
        with anyio.move_on_after(_CLEANUP_LIMIT, shield=True):
            await self._stop()

    async def propose(self, observation: Observation) -> Proposal | None:
        """
        Send ``observation`` to the agent and return its proposal.

        Returns None once the run has ended (the observation has a disposition),
        or when the agent exits with code 0 without proposing.

        Raises:
            ActorError: the agent could not be started, exited with an error,
                sent no proposal within the response time limit, or wrote a line
                that is not a proposal. Its process group is gone by then.
        """
        if self._failure is not None:
            raise ActorError(self._failure)
        if self._ended:
            return None
        try:
            if observation.disposition is not None:
                await self._finish(observation)
                return None
            return await self._exchange(observation)
        except BaseException:
            # Cancelled, or anything unexpected: the agent does not outlive its actor.
            with anyio.move_on_after(_CLEANUP_LIMIT, shield=True):
                await self._stop()
            raise

    # -- internals ----------------------------------------------------------------

    def _label(self) -> str:
        return shlex.join(self.argv)

    async def _start(self) -> Process:
        if self._process is not None:
            return self._process
        try:
            # Shielded: a start cancelled halfway would leave a child nobody can end.
            with anyio.CancelScope(shield=True):
                process = await anyio.open_process(
                    list(self.argv),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=self.cwd,
                    env=self.env,
                    start_new_session=True,
                )
        except OSError as exc:
            self._failure = f"could not start the agent {self._label()!r}: {exc.strerror or exc}"
            raise ActorError(self._failure) from exc
        assert process.stdout is not None
        self._process = process
        self._pid = process.pid
        self._stdout = BufferedByteReceiveStream(process.stdout)
        self._groups.add(process.pid, self._label())
        log.info("actor.process_started", pid=process.pid, command=self._label())
        return process

    async def _drain_stderr(self) -> None:
        process = self._process
        assert process is not None
        assert process.stderr is not None
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            async for chunk in process.stderr:
                self._stderr.feed(chunk)
        if self._stderr_done is not None:
            self._stderr_done.set()

    async def _send(self, data: bytes, close: bool = False) -> None:
        process = self._process
        assert process is not None
        assert process.stdin is not None
        # A process that went away cannot read: its end shows on stdout.
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await process.stdin.send(data)
            if close:
                await process.stdin.aclose()

    async def _read(self) -> Proposal | _Exited | _Failed:
        """Read lines until a proposal: usage lines are kept, blank lines skipped."""
        assert self._stdout is not None
        while True:
            try:
                raw = await self._stdout.receive_until(b"\n", _LINE_LIMIT)
            except (anyio.IncompleteRead, anyio.ClosedResourceError):
                return _Exited()
            except anyio.DelimiterNotFound:
                return _Failed(f"the agent wrote a line longer than {_LINE_LIMIT} bytes")
            line = raw.decode("utf-8", errors="replace").strip()
            if not line:
                continue
            try:
                item = parse_agent_line(line)
            except ConfigError as exc:
                return _Failed(
                    f"the agent wrote a line that is not a proposal: {_quote(line)}: {exc}"
                )
            if isinstance(item, Usage):
                self._usage.append(item)
                continue
            return item

    async def _exchange(self, observation: Observation) -> Proposal | None:
        await self._start()
        self._stderr_done = anyio.Event()
        line = dumps_utf8(observation_message(observation)) + b"\n"
        outcome: Proposal | _Exited | _Failed | None = None
        with anyio.move_on_after(self.response_time_limit):
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._drain_stderr)
                tg.start_soon(self._send, line)
                outcome = await self._read()
                if isinstance(outcome, _Exited):
                    # Whatever the agent said last on stderr explains its exit.
                    with anyio.move_on_after(_DRAIN_GRACE):
                        await self._stderr_done.wait()
                tg.cancel_scope.cancel()
        if outcome is None:
            partial = self._stdout.buffer if self._stdout is not None else b""
            message = (
                f"the agent {self._label()!r} sent no proposal within the response time "
                f"limit of {self.response_time_limit:g} s; its process group was terminated"
            )
            if partial.strip():
                message += (
                    f"; it wrote an unfinished line (no newline: flush after each line): "
                    f"{_quote(partial.decode('utf-8', errors='replace'))}"
                )
            raise await self._fail(message)
        if isinstance(outcome, _Failed):
            raise await self._fail(f"{outcome.message}; its process group was terminated")
        if isinstance(outcome, _Exited):
            code = await self._exit_code()
            if code == 0:
                log.info("actor.process_finished", pid=self._pid)
                await self._stop()
                self._ended = True
                return None
            raise await self._fail(f"the agent {self._label()!r} {_how(code)} before proposing")
        return outcome

    async def _exit_code(self) -> int | None:
        process = self._process
        assert process is not None
        with anyio.move_on_after(_DRAIN_GRACE):
            await process.wait()
        return process.returncode

    async def _fail(self, message: str) -> ActorError:
        """End the agent's group; return the error to raise, which carries its stderr tail."""
        with anyio.move_on_after(_CLEANUP_LIMIT, shield=True):
            await self._stop()
        stderr = self._stderr.text()
        self._failure = message + (f"\nstderr (tail):\n{stderr}" if stderr else "\n(stderr empty)")
        log.warning("actor.process_failed", pid=self._pid, error=message)
        return ActorError(self._failure)

    async def _finish(self, observation: Observation) -> None:
        """Tell the agent the run has ended, close its stdin, let it exit, end its group."""
        self._ended = True
        if self._process is None:
            return  # never started: nothing to tell
        self._stderr_done = anyio.Event()
        line = dumps_utf8(observation_message(observation)) + b"\n"
        process = self._process
        with anyio.move_on_after(_END_GRACE):
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._drain_stderr)
                await self._send(line, close=True)
                # What the agent still writes is read and dropped, so it never blocks.
                while not isinstance(await self._read(), _Exited | _Failed):
                    pass
                await process.wait()
                tg.cancel_scope.cancel()
        await self._stop()

    async def _stop(self) -> None:
        """Close stdin, terminate the group (SIGTERM, SIGKILL after a grace), reap."""
        process = self._process
        if process is None:
            return
        self._process = None
        if process.stdin is not None:
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                await process.stdin.aclose()
        await self._groups.terminate_all(grace=_TERM_GRACE)
        await process.aclose()
        self._returncode = process.returncode
        log.info("actor.process_ended", pid=process.pid, returncode=process.returncode)


def _quote(text: str) -> str:
    return repr(text if len(text) <= _QUOTE_LIMIT else text[:_QUOTE_LIMIT] + "…")


def _how(code: int | None) -> str:
    if code is None:
        return "closed its standard output"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"
