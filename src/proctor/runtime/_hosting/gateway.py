"""
The MCP gateway: any MCP client becomes the actor of a proctor run.

``serve_gateway`` runs one proctor run and one MCP server (over stdio, or
streamable HTTP on a loopback address) in one task group. The server offers the
task's tools, declared from the tool registry's specs, and two of proctor's
own: ``submit`` (a completion claim) and ``escalate`` (a blocked or
needs-input claim). Every ``tools/call`` becomes a proposal of
:class:`GatewayActor`, the run's actor, so it passes through the controller like
any other actor's: budget, progress policy, protected paths, the effect ledger,
the completion fence. The answer to a call is the observation that answers its
proposal::

    MCP client ── tools/call ──> handler ── (proposal, reply slot) ──> GatewayActor.propose
                                                                        │ returns the proposal
    MCP client <── CallToolResult ── reply slot <── next observation ───┘ (controller)

Calls that arrive together are proposed one at a time, in arrival order. Once
the run has ended, every call is answered at once with an error result that
names the disposition: the fence, never a hang.
"""

from __future__ import annotations

import contextlib
import signal
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import anyio
import attrs
import uvicorn
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import (
    StreamableHTTPASGIApp,
    StreamableHTTPSessionManager,
)
from mcp.server.transport_security import TransportSecuritySettings

from proctor._boundary import printable
from proctor._errors import ConfigError
from proctor._logging import get_logger
from proctor.runtime._actors.openai import tool_result_text
from proctor.runtime._control.controller import StepCallback
from proctor.runtime._control.run import HEARTBEAT_SECONDS, Stopper, run
from proctor.runtime._hosting.resume import resume
from proctor.runtime._outcome import RunResult
from proctor.runtime._records import (
    ActionEvent,
    Claim,
    Completion,
    Disposition,
    Observation,
    ObservationKind,
    Proposal,
    StopReason,
    ToolCall,
    ToolResult,
    ToolStatus,
    TraceRecord,
)
from proctor.runtime._task import Task, load_hosted_task
from proctor.runtime._tools.registry import ToolRegistry
from proctor.runtime._tools.spec import Effect

__all__ = (
    "GATEWAY_TOOLS",
    "START_URI",
    "GatewayActor",
    "gateway_server",
    "load_gateway_task",
    "serve_gateway",
)

log = get_logger()

#: The tools the gateway adds to the task's: a task tool may not take these names.
GATEWAY_TOOLS = ("submit", "escalate")
#: The resource that holds the run's first observation (the goal, the tools; a
#: resumed run's history).
START_URI = "proctor://run/start"
#: Addresses the HTTP transport may listen on: it has no authentication, and a
#: client drives tools that write files and run commands.
_LOOPBACK = ("127.0.0.1", "localhost", "::1")

_STR: dict[str, Any] = {"type": "string"}

_SUBMIT = types.Tool(
    name="submit",
    description=(
        "Claim that the work is done. The controller freezes the workspace and runs the "
        "task's checks on it; only they decide. The result says whether the run completed "
        "or which check failed."
    ),
    input_schema={
        "type": "object",
        "properties": {"summary": {**_STR, "description": "what was done, in a few words"}},
        "additionalProperties": False,
    },
)
_ESCALATE = types.Tool(
    name="escalate",
    description=(
        "Claim that the work cannot go on: blocked (something outside your reach is missing) "
        "or needs_input (a person must decide). It ends the run only when it names the unmet "
        "condition, the evidence already gathered and the reason no permitted action can "
        "resolve it."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "status": {"type": "string", "enum": ["blocked", "needs_input"]},
            "condition": {**_STR, "description": "the unmet condition"},
            "evidence": {
                "type": "array",
                "items": _STR,
                "description": "what was already found out",
            },
            "reason": {**_STR, "description": "why no permitted action can resolve it"},
        },
        "required": ["status", "condition", "evidence", "reason"],
        "additionalProperties": False,
    },
)


def _ending(disposition: Disposition, stop_reason: StopReason | None) -> str:
    # The same words as the controller's last observation.
    text = f"the run has ended: {disposition.value}"
    return f"{text} ({stop_reason.message})" if stop_reason and stop_reason.message else text


@attrs.define(eq=False)
class _Pending:
    """One MCP call waiting for the observation that answers it."""

    proposal: Proposal
    answer: Observation | None = None
    abandoned: bool = False
    done: anyio.Event = attrs.field(factory=anyio.Event)

    def resolve(self, observation: Observation) -> None:
        if self.answer is None:
            self.answer = observation
            self.done.set()


@attrs.define(eq=False)
class GatewayActor:
    """
    The actor of a gateway run: its proposals are the MCP client's tool calls.

    MCP handlers hand their calls to :meth:`call`, which queues them on a bounded
    channel and waits for the answer. :meth:`propose` delivers each observation
    to the call it answers, then waits for the next call and returns it as the
    proposal. The first observation (``start`` or ``resume``) answers no call: it
    is kept (:attr:`first`) and opens the result of the first call answered.

    After the run has ended, or after :meth:`close`, every call is answered at
    once with a refusal that names the disposition.

    Args:
        buffer: how many calls may wait in the channel; more callers wait to
            enter it, still in arrival order.
    """

    buffer: int = 16
    first: Observation | None = attrs.field(default=None, init=False)
    _send: MemoryObjectSendStream[_Pending | None] = attrs.field(init=False)
    _receive: MemoryObjectReceiveStream[_Pending | None] = attrs.field(init=False)
    _outstanding: dict[int, _Pending] = attrs.field(factory=dict, init=False)
    _in_flight: _Pending | None = attrs.field(default=None, init=False)
    _records: list[TraceRecord] = attrs.field(factory=list, init=False)
    _greeting: str | None = attrs.field(default=None, init=False)
    _started: anyio.Event = attrs.field(factory=anyio.Event, init=False)
    _terminal: TraceRecord | None = attrs.field(default=None, init=False)
    _leaving: bool = attrs.field(default=False, init=False)
    _fence: Observation | None = attrs.field(default=None, init=False)
    _step: int = attrs.field(default=0, init=False)

    def __attrs_post_init__(self) -> None:
        self._send, self._receive = anyio.create_memory_object_stream[_Pending | None](self.buffer)

    # -- the MCP side -------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether calls are answered by the fence, without reaching the controller."""
        return self._fence is not None

    async def call(self, proposal: Proposal) -> Observation:
        """
        Propose ``proposal`` on behalf of the MCP client and return what answered it.

        Args:
            proposal: a tool call, a completion claim or an escalation claim.
        """
        if self._fence is not None:
            return self._fenced(proposal)
        pending = _Pending(proposal)
        self._outstanding[id(pending)] = pending
        try:
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                # Closed meanwhile: close() has answered it.
                await self._send.send(pending)
            await pending.done.wait()
        finally:
            # A caller that gave up before its call was proposed is skipped.
            pending.abandoned = pending.answer is None
            self._outstanding.pop(id(pending), None)
        assert pending.answer is not None
        return pending.answer

    def take_greeting(self) -> str | None:
        """Return the first observation's text the first time it is asked for, then None."""
        greeting, self._greeting = self._greeting, None
        return greeting

    async def wait_started(self) -> Observation | None:
        """Wait for the first observation; None if the gateway closed before it came."""
        await self._started.wait()
        return self.first

    # -- the controller side ----------------------------------------------------------

    async def propose(self, observation: Observation) -> Proposal | None:
        """Answer the call in flight with ``observation``; return the next call's proposal."""
        self._step = observation.step
        if self.first is None:
            self.first = observation
            self._greeting = observation.text
            self._started.set()
        elif self._in_flight is not None:
            self._in_flight.resolve(self._completed(self._in_flight.proposal, observation))
            self._in_flight = None
        if observation.disposition is not None:
            if observation.kind is ObservationKind.ENDED:
                text = observation.text
            else:
                reason = self._terminal.stop_reason if self._terminal is not None else None
                text = _ending(observation.disposition, reason)
            self.close(text, observation.disposition)
            return None
        while self._terminal is None and not self._leaving:
            pending = await self._receive.receive()
            if pending is None or pending.abandoned:
                continue  # a wake-up, or a caller that is gone
            if self._terminal is not None or self._leaving:
                break  # too late: close() answers it
            self._in_flight = pending
            self._records = []
            log.info("gateway.propose", proposal=type(pending.proposal).__name__)
            return pending.proposal
        if self._terminal is not None and self._terminal.disposition is not None:
            # The run ended between calls (a deadline): nobody waits for its last words.
            self.close(
                _ending(self._terminal.disposition, self._terminal.stop_reason),
                self._terminal.disposition,
            )
        return None

    def on_step(self, record: TraceRecord) -> None:
        """
        Watch the run's trace: pass it as (or call it from) the run's ``on_step``.

        The step that ends the run wakes :meth:`propose`, so a run that ends
        between calls (a deadline) does not wait for another call to say so.
        """
        self._records.append(record)
        if record.disposition is not None and self._terminal is None:
            self._terminal = record
            self._wake()
            if self._fence is not None:
                # Closed when the actor left; now the fence can name the disposition.
                self.close(_ending(record.disposition, record.stop_reason), record.disposition)

    def disconnect(self) -> None:
        """
        The client is gone: propose nothing more.

        The controller then verifies the candidate as it stands and ends the run
        (``failed``, ``actor_finished``, unless the candidate passes).
        """
        self._leaving = True
        self._wake()

    def close(self, text: str, disposition: Disposition | None = None) -> None:
        """
        Answer every waiting call, and every later one, with the fence.

        Closing again with a disposition names it in the fence from then on; a
        fence that names one is final.

        Args:
            text: why: the run's ending (``the run has ended: completed (...)``).
            disposition: the run's disposition, when it has one.
        """
        terminal = self._terminal
        if disposition is None and terminal is not None and terminal.disposition is not None:
            text, disposition = (
                _ending(terminal.disposition, terminal.stop_reason),
                terminal.disposition,
            )
        if self._fence is not None and (self._fence.disposition is not None or not disposition):
            return
        reason = f"fence: {text}; the call was not run"
        self._fence = Observation(
            step=self._step,
            kind=ObservationKind.REFUSAL,
            text=reason,
            disposition=disposition,
        )
        self._started.set()
        log.info("gateway.closed", reason=text, waiting=len(self._outstanding))
        for pending in list(self._outstanding.values()):
            pending.resolve(self._fenced(pending.proposal))
        self._in_flight = None
        # Callers still waiting to enter the channel get BrokenResourceError.
        self._receive.close()
        self._send.close()

    async def aclose(self) -> None:
        """Close when the actor's task ends (the run calls it): nothing more is proposed."""
        self.close("the actor's part in the run is over")

    # -- helpers ------------------------------------------------------------------------

    def _wake(self) -> None:
        with contextlib.suppress(
            anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError
        ):
            # A full channel wakes propose by itself.
            self._send.send_nowait(None)

    def _fenced(self, proposal: Proposal) -> Observation:
        fence = self._fence
        assert fence is not None
        if isinstance(proposal, ToolCall):
            return attrs.evolve(fence, results=(ToolResult(ToolStatus.REFUSED, fence.text),))
        return fence

    def _completed(self, proposal: Proposal, observation: Observation) -> Observation:
        """
        Return the answer to a tool call, with its result even when the observation has none.

        The observation that tells of the end carries no results; the journaled
        step of the call does (a repeated call the policy refused as it stopped
        the run, say), and the client is told what became of its call.
        """
        if not isinstance(proposal, ToolCall) or observation.results:
            return observation
        results = tuple(
            ToolResult(
                record.tool_status, record.event.result.output, record.event.result.exit_code
            )
            for record in self._records
            if record.tool_status is not None and isinstance(record.event, ActionEvent)
        )
        return attrs.evolve(observation, results=results[-1:])


# --- the MCP server ---------------------------------------------------------------------


def _instructions(task: Task, registry: ToolRegistry) -> str:
    checks = ", ".join(c.name for c in task.all_checks()) or "none"
    lines = [
        "You work under proctor: a controller decides when this run is over.",
        f"Goal: {task.goal}",
        f"Tools: {', '.join(registry.names())}; and submit, escalate.",
        "Every call goes through the controller: it may refuse one (a protected path, a "
        "repeated call that made no progress, the budget) and it stops the run when the "
        "work is done, stuck or out of budget.",
        f"When the work is done, call submit: the checks ({checks}) run on a frozen copy "
        "of the workspace and decide. If you cannot go on, call escalate.",
        f"The run's first observation opens the result of your first call (and is the "
        f"resource {START_URI}).",
    ]
    if task.protected:
        lines.insert(3, f"Protected paths (never changed): {', '.join(task.protected)}.")
    return "\n".join(lines)


def _strings(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, list | tuple):
        return tuple(str(v) for v in value)
    return (str(value),)


def _proposal(name: str, args: dict[str, Any]) -> Proposal | str:
    """Return the proposal of one call, or what is wrong with a call of proctor's own tools."""
    if name == "submit":
        return Completion(str(args.get("summary", "")))
    if name == "escalate":
        status = args.get("status")
        if status not in ("blocked", "needs_input"):
            return f"escalate: status must be 'blocked' or 'needs_input', got {status!r}"
        return Claim(
            status,
            str(args.get("condition", "")),
            _strings(args.get("evidence")),
            str(args.get("reason", "")),
        )
    return ToolCall(name, args)


def _is_error(proposal: Proposal, observation: Observation) -> bool:
    """Tell whether an answer is an error: a refusal, a failed tool, a claim not accepted."""
    if observation.kind is ObservationKind.ENDED:
        # Only a claim the end agrees with succeeded.
        if isinstance(proposal, Completion):
            return observation.disposition is not Disposition.COMPLETED
        if isinstance(proposal, Claim):
            return observation.disposition is None or observation.disposition != proposal.status
        return True
    if observation.kind is ObservationKind.REFUSAL or observation.disposition is not None:
        return True
    if isinstance(proposal, ToolCall):
        return not observation.results or any(
            r.status is not ToolStatus.OK for r in observation.results
        )
    # A claim that did not end the run was not accepted (a failing check, a vague claim).
    return True


def _call_result(
    proposal: Proposal, observation: Observation, greeting: str | None = None
) -> types.CallToolResult:
    """
    Turn the observation that answered ``proposal`` into an MCP tool result.

    Args:
        proposal: what the call proposed.
        observation: what answered it.
        greeting: the run's first observation, to open the first result with.
    """
    blocks: list[str] = [greeting] if greeting else []
    if isinstance(proposal, ToolCall) and observation.results:
        result = observation.results[0]
        blocks.append(tool_result_text(result))
        # A plain result's text only repeats the output; anything else (a nudge, a
        # note, the end, an amendment) is the controller speaking.
        plain = observation.kind is ObservationKind.RESULT and observation.text.startswith(
            f"{proposal.tool} "
        )
        if not plain and observation.text != result.output:
            blocks.append(f"[proctor] {observation.text}")
    else:
        blocks.append(observation.text)
    status = observation.results[0].status.value if observation.results else None
    return types.CallToolResult(
        # An MCP message cannot carry a surrogate (a listed name that is not UTF-8).
        content=[types.TextContent(text=printable(block)) for block in blocks],
        structured_content={
            "kind": observation.kind.value,
            "status": status,
            "exit_code": observation.results[0].exit_code if observation.results else None,
            "disposition": observation.disposition.value if observation.disposition else None,
            "remaining": observation.remaining,
        },
        is_error=_is_error(proposal, observation),
    )


def gateway_server(
    actor: GatewayActor, task: Task, registry: ToolRegistry, *, name: str = "proctor"
) -> Server[Any]:
    """
    Build the MCP server that puts a client's calls through ``actor``.

    Args:
        actor: the run's actor.
        task: the task (its goal and contract make the server's instructions).
        registry: the task's tools, offered with their JSON schemas.
        name: the server's name.

    Raises:
        ConfigError: a task tool is named like one of the gateway's own.
    """
    # Kept whole: the MCP server's handlers close over one actor, task and registry; they read best
    # next to each other.
    clash = [n for n in registry.names() if n in GATEWAY_TOOLS]
    if clash:
        raise ConfigError(
            f"a task tool is named {clash[0]!r}, a name the gateway's own tools take "
            f"({', '.join(GATEWAY_TOOLS)}): rename it"
        )
    tools = [
        types.Tool(
            name=spec.name,
            description=spec.description or None,
            input_schema=spec.parameters,
            annotations=types.ToolAnnotations(
                read_only_hint=spec.effect is Effect.READ,
                idempotent_hint=spec.effect is not Effect.WRITE,
            ),
        )
        for spec in registry.specs()
    ]
    tools += [_SUBMIT, _ESCALATE]

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        args = dict(params.arguments or {})
        proposal = _proposal(params.name, args)
        if isinstance(proposal, str):
            # Not a proposal at all: nothing reaches the controller.
            return types.CallToolResult(content=[types.TextContent(text=proposal)], is_error=True)
        observation = await actor.call(proposal)
        result = _call_result(proposal, observation, actor.take_greeting())
        log.info("gateway.answered", tool=params.name, error=result.is_error)
        return result

    async def list_resources(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri=START_URI,
                    name="start",
                    description="The run's first observation: the goal and the tools "
                    "(and, for a resumed run, its history).",
                    mime_type="text/plain",
                )
            ]
        )

    async def read_resource(
        ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        if str(params.uri) != START_URI:
            raise ValueError(f"unknown resource {params.uri!r}; known: {START_URI}")
        first = await actor.wait_started()
        text = first.text if first is not None else "the run ended before it started"
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=START_URI, mime_type="text/plain", text=text)]
        )

    return Server(
        name,
        instructions=_instructions(task, registry),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
    )


# --- transports --------------------------------------------------------------------------


class _Uvicorn(uvicorn.Server):
    """A uvicorn server that leaves the process's signals alone: the gateway owns them."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _listen(host: str, port: int) -> tuple[socket.socket, str]:
    """Bind and listen now, so the URL works as soon as it is announced."""
    if host not in _LOOPBACK:
        raise ConfigError(
            f"the gateway listens on a loopback address only ({', '.join(_LOOPBACK)}), "
            f"got {host!r}: its clients drive tools that write files and run commands, "
            "and it has no authentication"
        )
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    return sock, f"http://{shown}:{bound_port}/mcp"


async def _serve_http(
    server: Server[Any],
    sock: socket.socket,
    url: str,
    stop: anyio.Event,
    ready: Callable[[str], None] | None,
) -> None:
    """Serve streamable HTTP on ``sock`` until ``stop`` is set."""
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{h}:*" for h in ("127.0.0.1", "localhost", "[::1]")],
        allowed_origins=[f"http://{h}:*" for h in ("127.0.0.1", "localhost", "[::1]")],
    )
    manager = StreamableHTTPSessionManager(app=server, security_settings=security)
    config = uvicorn.Config(
        StreamableHTTPASGIApp(manager),
        lifespan="off",
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=2,
    )
    http = _Uvicorn(config)

    async def stopper() -> None:
        try:
            await stop.wait()
        finally:
            http.should_exit = True

    with sock:
        async with manager.run(), anyio.create_task_group() as tg:
            tg.start_soon(stopper)
            log.info("gateway.listening", url=url)
            if ready is not None:
                ready(url)
            # uvicorn is stopped by its flag, never cancelled halfway: a cancelled
            # gateway sets the flag (stopper) and the server shuts down in order.
            with anyio.CancelScope(shield=True):
                await http.serve(sockets=[sock])
            tg.cancel_scope.cancel()


async def _serve_stdio(server: Server[Any], stop: anyio.Event) -> None:
    """Serve on standard input and output until end-of-file or ``stop``."""
    async with anyio.create_task_group() as tg:

        async def stopper() -> None:
            await stop.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(stopper)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        tg.cancel_scope.cancel()


async def serve_gateway(
    task: Task,
    journal: str | Path,
    *,
    transport: Literal["stdio", "http"],
    host: str = "127.0.0.1",
    port: int = 0,
    ready: Callable[[str], None] | None = None,
    tools: ToolRegistry | None = None,
    grace: float = 30.0,
    stop: anyio.Event | None = None,
    handle_signals: bool = False,
    on_step: StepCallback | None = None,
    stopper: Stopper | None = None,
    heartbeat_seconds: float = HEARTBEAT_SECONDS,
    resume_run: str | None = None,
    answer: str | None = None,
) -> RunResult:
    """
    Run ``task`` with an MCP client as its actor, served over ``transport``.

    With ``resume_run``, the run is a resume of that run (see :func:`resume`):
    it inherits the task's history and spend, and the client's first result
    opens with the summary of that history (and ``answer``, the person's answer
    to the question a ``needs_input`` run ended on).

    The run and the server share one task group. When the run ends the server
    keeps answering, every call with the fence's error, until the client
    disconnects (stdio: end-of-file) or, over HTTP, until ``grace`` seconds
    have passed. Setting ``stop`` (or, with ``handle_signals``, SIGINT or
    SIGTERM) stops serving at once; a run still going is then told the client is
    gone, verifies the candidate as it stands and ends. A second signal cancels
    everything.

    Args:
        task: the task and its contract.
        journal: the journal's path (a SQLite file, created if needed).
        transport: ``stdio`` (standard input and output) or ``http`` (streamable
            HTTP at ``http://HOST:PORT/mcp``).
        host: for HTTP, a loopback address to listen on.
        port: for HTTP, the port; 0 picks a free one.
        ready: for HTTP, called with the server's URL once it accepts connections.
        tools: the tools on offer (default: the task's, ``task.registry()``).
        grace: for HTTP, seconds the server keeps answering after the run ended.
        stop: set it to stop serving.
        handle_signals: on SIGINT (SIGTERM) end the run ``stopped`` as
            ``user_stop`` (``stop_signal``) and stop serving (the ``proctor
            gateway`` command); a second SIGINT cancels everything.
        on_step: called with each trace record after it is journaled.
        stopper: stops the run from this process (see :class:`Stopper`).
        heartbeat_seconds: how often the host says it is alive.
        resume_run: the run to resume (a unique prefix of 6+ characters); ``task``
            is then that run's task, as :func:`task_of_run` returns it unless the
            caller has it (checks that live in code).
        answer: with ``resume_run``, a person's answer to the question it ended on.

    Returns:
        The run's outcome.

    Raises:
        ConfigError: a bad transport, host or tool name, or a port in use.
    """
    # Kept whole: the transport, the signal handling and the run share one task group and its cancel
    # scope.
    if transport not in ("stdio", "http"):
        raise ConfigError(f"transport must be 'stdio' or 'http', got {transport!r}")
    if answer is not None and resume_run is None:
        raise ConfigError("an answer goes to a run being resumed: give the run to resume too")
    registry = tools if tools is not None else task.registry()
    listening = _listen(host, port) if transport == "http" else None
    actor = GatewayActor()
    try:
        server = gateway_server(actor, task, registry)
    except ConfigError:
        actor.close("the gateway did not start")
        if listening is not None:
            listening[0].close()
        raise
    stop = stop if stop is not None else anyio.Event()
    if stopper is None and handle_signals:
        stopper = Stopper()
    run_done = anyio.Event()
    outcome: list[RunResult] = []
    failure: list[Exception] = []

    def steps(record: TraceRecord) -> None:
        actor.on_step(record)
        if on_step is not None:
            on_step(record)

    async with anyio.create_task_group() as tg:

        async def run_task() -> None:
            try:
                if resume_run is not None:
                    result = await resume(
                        resume_run,
                        actor,
                        journal,
                        task=task,
                        tools=registry,
                        on_step=steps,
                        answer=answer,
                        stopper=stopper,
                        heartbeat_seconds=heartbeat_seconds,
                    )
                else:
                    result = await run(
                        task,
                        actor,
                        journal,
                        tools=registry,
                        on_step=steps,
                        stopper=stopper,
                        heartbeat_seconds=heartbeat_seconds,
                    )
                outcome.append(result)
            except Exception as exc:
                failure.append(exc)
                tg.cancel_scope.cancel()
            finally:
                if outcome:
                    result = outcome[0]
                    actor.close(_ending(result.disposition, result.stop_reason), result.disposition)
                else:
                    actor.close("the run stopped before it ended")
                run_done.set()

        async def linger() -> None:
            await run_done.wait()
            await anyio.sleep(grace)
            stop.set()

        async def signals() -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
                async for signum in received:
                    if stop.is_set() and signum == signal.SIGINT:
                        tg.cancel_scope.cancel()
                        return
                    log.warning("gateway.signal", signal=signum)
                    if stopper is not None:
                        why = f"the gateway received {signal.Signals(signum).name}"
                        if signum == signal.SIGTERM:
                            stopper.stop("stop_signal", why)
                        else:
                            stopper.stop("user_stop", why)
                    stop.set()

        tg.start_soon(run_task)
        if handle_signals:
            tg.start_soon(signals)
        if listening is not None:
            tg.start_soon(linger)
            await _serve_http(server, *listening, stop, ready)
        else:
            await _serve_stdio(server, stop)
        # Nobody can reach the run any more.
        actor.disconnect()
        await run_done.wait()
        tg.cancel_scope.cancel()
    if failure:
        raise failure[0]
    return outcome[0]


def load_gateway_task(path: str | Path) -> Task:
    """
    Load a task file for the gateway; its ``[actor]`` table, if any, is not used.

    The MCP client is the actor: a task file written for the gateway needs no
    ``[actor]`` table.

    Raises:
        ConfigError: it cannot be read or a field is wrong; the message names the
            file, the line or field, and what would be accepted.
    """
    return load_hosted_task(path)
