"""
HTTP tools: writes that carry an idempotency key, and the lookup that reconciles them.

``http_request`` sends a write (POST, PUT, PATCH, DELETE). It sends the
effect's idempotency key in an ``Idempotency-Key`` header; the key comes from
the effect being dispatched (:func:`~proctor.runtime._effects.ledger.effect_key`),
never from the agent's arguments, and a write with no key is not sent. The
outcome maps to a tool status:

- a 2xx reply is ``ok``;
- a 4xx or 5xx reply is ``error``, with the status and the start of the body,
  except 502 and 504: a gateway that gave up says nothing about whether the
  service behind it applied the write, so those are ``uncertain``;
- a 3xx reply is ``uncertain``: redirects are not followed for writes (a 307
  or 308 would send the write again), and whether the write happened depends
  on the service;
- no connection (refused, connect time limit) is ``error``: nothing was sent;
- anything after the request may have left (a read time limit, a connection
  dropped before the reply, the tool's time limit) is ``uncertain``, never
  ``error``.

``http_get`` is the read: redirects followed, no key, and no failure of it is
uncertain, since it has no effect.

:class:`HttpReconciler` settles an uncertain write by reading
``GET {lookup}/{key}``: 200 means applied, 404 not applied, anything else
unknown. By default ``lookup`` is ``{scheme}://{host}/effects`` of the write's
URL. The lookup is sound when the service records a key in the same
transaction as the write it applies, and answers a repeated key with the first
reply without applying it again.

Nothing here retries: retries belong to the controller, at one layer
(:func:`~proctor.runtime._effects.ledger.retry_with_backoff`).
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import anyio
import attrs
import httpx

from proctor._errors import ConfigError
from proctor._logging import get_logger
from proctor.runtime._effects.ledger import EffectRecord, Reconciler, Verdict, current_effect_key
from proctor.runtime._records import ToolResult, ToolStatus
from proctor.runtime._tools.registry import Tool, ToolContext
from proctor.runtime._tools.spec import Effect, ToolSpec

__all__ = (
    "HTTP_GET_SPEC",
    "HTTP_REQUEST_SPEC",
    "IDEMPOTENCY_HEADER",
    "WRITE_METHODS",
    "HttpGet",
    "HttpReconciler",
    "HttpRequest",
    "http_reconcilers",
    "http_tools",
    "lookup_url",
)

log = get_logger()

#: The header that carries an effect's idempotency key.
IDEMPOTENCY_HEADER = "Idempotency-Key"

#: The methods ``http_request`` sends.
WRITE_METHODS: tuple[str, ...] = ("POST", "PUT", "PATCH", "DELETE")

# Statuses that tell nothing about whether the service behind a gateway applied the write.
_AMBIGUOUS_STATUS = frozenset({502, 504})

# Failures that happen before a single byte of the request is sent.
_NOT_SENT: tuple[type[Exception], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.UnsupportedProtocol,
)

_HEADERS: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}

HTTP_REQUEST_SPEC = ToolSpec(
    "http_request",
    Effect.WRITE,
    "Send an HTTP write (POST, PUT, PATCH or DELETE) to a URL. The runtime adds an "
    "Idempotency-Key header. `body` is a string sent as is, or an object sent as JSON.",
    {
        "type": "object",
        "properties": {
            "method": {"type": "string", "enum": list(WRITE_METHODS)},
            "url": {"type": "string"},
            "body": {"type": ["string", "object"]},
            "headers": _HEADERS,
        },
        "required": ["method", "url"],
        "additionalProperties": False,
    },
    targets=("method", "url"),
)

HTTP_GET_SPEC = ToolSpec(
    "http_get",
    Effect.READ,
    "Send an HTTP GET to a URL and return the status and the body.",
    {
        "type": "object",
        "properties": {"url": {"type": "string"}, "headers": _HEADERS},
        "required": ["url"],
        "additionalProperties": False,
    },
    source="url",
)


def _error(text: str) -> ToolResult:
    return ToolResult(ToolStatus.ERROR, text)


def _check_url(url: str) -> str | None:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return f"url {url!r} is not an absolute http or https URL; give one like https://host/path"
    return None


def _check_headers(headers: Any) -> tuple[dict[str, str] | None, str | None]:
    if headers is None:
        return {}, None
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        return None, '\'headers\' must be an object of strings, such as {"Accept": "text/plain"}'
    return dict(headers), None


def _positive(_instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value > 0:
        raise ConfigError(f"{attribute.name} must be a positive number of seconds, not {value!r}")


def lookup_url(effect: EffectRecord, lookup: str | None = None) -> str:
    """
    Return the URL that tells whether ``effect`` was applied: ``{lookup}/{key}``.

    Args:
        effect: an effect of ``http_request``.
        lookup: the lookup base; None means ``{scheme}://{host}/effects`` of the
            effect's URL.
    """
    base = lookup
    if base is None:
        parts = urllib.parse.urlsplit(str(effect.args.get("url", "")))
        base = f"{parts.scheme}://{parts.netloc}/effects"
    return f"{base.rstrip('/')}/{urllib.parse.quote(effect.key, safe='')}"


async def _read_excerpt(response: httpx.Response, limit: int) -> tuple[str, str | None]:
    """Read up to ``limit`` bytes of the body; return the text and a note if it was cut."""
    data = bytearray()
    note: str | None = None
    try:
        async for chunk in response.aiter_bytes():
            data += chunk
            if len(data) > limit:
                note = f"body cut at {limit} bytes"
                break
    except httpx.HTTPError as exc:
        note = f"the body could not be read whole: {type(exc).__name__}"
    return bytes(data[:limit]).decode("utf-8", errors="replace"), note


def _with_note(text: str, note: str | None) -> str:
    return text if note is None else f"{text}\n[{note}]"


@attrs.frozen
class HttpReconciler:
    """
    Reconciles an uncertain ``http_request`` by looking its key up: ``GET {lookup}/{key}``.

    200 is ``applied``, 404 ``not_applied``; any other status, and a lookup
    that fails, ``unknown``.

    Args:
        lookup: the lookup base URL; None derives ``{scheme}://{host}/effects``
            from the effect's URL.
        time_limit: seconds the lookup may take.
        trust_env: whether proxies and certificates come from the environment.
    """

    lookup: str | None = None
    time_limit: float = attrs.field(default=10.0, validator=_positive)
    trust_env: bool = True

    async def reconcile(self, effect: EffectRecord, ctx: ToolContext) -> Verdict:
        """
        Look ``effect`` up by its key.

        Args:
            effect: an uncertain effect of ``http_request``.
            ctx: unused; part of the reconciler protocol.
        """
        url = lookup_url(effect, self.lookup)
        if _check_url(url) is not None:
            return "unknown"
        status: int | None = None
        with anyio.move_on_after(self.time_limit):
            try:
                async with httpx.AsyncClient(
                    timeout=self.time_limit, trust_env=self.trust_env
                ) as client:
                    response = await client.get(url)
                    status = response.status_code
            except httpx.HTTPError as exc:
                log.info("http.lookup_failed", key=effect.key, url=url, error=repr(exc))
        log.info("http.lookup", key=effect.key, url=url, status=status)
        if status == 200:
            return "applied"
        if status == 404:
            return "not_applied"
        return "unknown"


@attrs.frozen
class HttpRequest:
    """
    The implementation of ``http_request``; its ``reconciler`` settles its uncertain writes.

    Args:
        time_limit: seconds a request may take, reply included.
        excerpt: bytes of the reply's body kept in the result.
        reconciler: how its uncertain writes are looked up.
        trust_env: whether proxies and certificates come from the environment.
    """

    time_limit: float = attrs.field(default=30.0, validator=_positive)
    excerpt: int = 4_000
    reconciler: Reconciler = attrs.field(factory=HttpReconciler)
    trust_env: bool = True

    async def __call__(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        """
        Send the write and map its outcome to a tool status (see the module).

        Args:
            ctx: unused; part of the tool protocol.
            args: ``method``, ``url``, and optionally ``body`` and ``headers``.
        """
        method = str(args["method"]).upper()
        url = str(args["url"])
        if method not in WRITE_METHODS:
            return _error(
                f"method {method!r} is not a write; http_request sends "
                f"{', '.join(WRITE_METHODS)} (use http_get to read)"
            )
        problem = _check_url(url)
        headers, bad = _check_headers(args.get("headers"))
        if problem is not None or headers is None:
            return _error(problem or bad or "bad arguments")
        key = current_effect_key()
        if key is None:
            return _error(
                "refused: http_request has no idempotency key; it is sent only as an effect "
                "the controller dispatches (inside effect_key), so that it can be reconciled"
            )
        # The agent cannot choose the key: any header of that name is replaced.
        headers = {k: v for k, v in headers.items() if k.lower() != IDEMPOTENCY_HEADER.lower()}
        headers[IDEMPOTENCY_HEADER] = key
        body = args.get("body")
        content = body.encode("utf-8") if isinstance(body, str) else None
        payload = body if isinstance(body, dict) else None
        started = time.monotonic()
        log.info("http.send", method=method, url=url, key=key)
        result: ToolResult | None = None
        with anyio.move_on_after(self.time_limit):
            result = await self._send(method, url, headers, content, payload, key)
        if result is None:
            result = self._uncertain(method, url, key, f"time limit of {self.time_limit:g} s")
        return attrs.evolve(result, duration=time.monotonic() - started)

    async def _send(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        content: bytes | None,
        payload: dict[str, Any] | None,
        key: str,
    ) -> ToolResult:
        try:
            async with httpx.AsyncClient(
                timeout=self.time_limit, follow_redirects=False, trust_env=self.trust_env
            ) as client:
                request = client.build_request(
                    method, url, headers=headers, content=content, json=payload
                )
                response = await client.send(request, stream=True)
                try:
                    text, note = await _read_excerpt(response, self.excerpt)
                finally:
                    await response.aclose()
        except _NOT_SENT as exc:
            log.info("http.not_sent", method=method, url=url, key=key, error=repr(exc))
            return _error(f"{method} {url} was not sent: {type(exc).__name__}: {exc}")
        except httpx.HTTPError as exc:
            return self._uncertain(method, url, key, f"{type(exc).__name__}: {exc}")
        status = response.status_code
        line = f"{method} {url} -> {status} {response.reason_phrase}"
        log.info("http.reply", method=method, url=url, key=key, status=status)
        if 200 <= status < 300:
            return ToolResult(ToolStatus.OK, _with_note(f"{line}\n{text}", note))
        if 300 <= status < 400 or status in _AMBIGUOUS_STATUS:
            where = response.headers.get("location")
            why = f"reply {status}" + (f" to {where}" if where else "")
            return self._uncertain(method, url, key, why, f"{line}\n{text}")
        return ToolResult(ToolStatus.ERROR, _with_note(f"{line}\n{text}", note))

    def _uncertain(self, method: str, url: str, key: str, why: str, seen: str = "") -> ToolResult:
        log.info("http.uncertain", method=method, url=url, key=key, why=why)
        text = (
            f"{method} {url}: the outcome is unknown ({why}); the write may have been applied. "
            f"It will be reconciled by its idempotency key {key}, not sent again blindly."
        )
        return ToolResult(ToolStatus.UNCERTAIN, f"{seen}\n{text}" if seen else text)


@attrs.frozen
class HttpGet:
    """
    The implementation of ``http_get``: a read, so redirects are followed.

    No failure of a read is uncertain: it has no effect to be unsure of.

    Args:
        time_limit: seconds a request may take, reply included.
        excerpt: bytes of the reply's body kept in the result.
        trust_env: whether proxies and certificates come from the environment.
        allow: checks every request's URL, redirects included: the reason to
            refuse it, or None to send it.
        keep_headers: reply headers (lower-case names) the result shows.
    """

    time_limit: float = attrs.field(default=30.0, validator=_positive)
    excerpt: int = 64_000
    trust_env: bool = True
    allow: Callable[[str], str | None] | None = None
    keep_headers: tuple[str, ...] = ()

    async def __call__(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        """
        Send the GET and return the status line and the body.

        Args:
            ctx: unused; part of the tool protocol.
            args: ``url``, and optionally ``headers``.
        """
        headers, bad = _check_headers(args.get("headers"))
        if headers is None:
            return _error(bad or "bad arguments")
        return await self.get(str(args["url"]), headers)

    async def get(self, url: str, headers: dict[str, str] | None = None) -> ToolResult:
        """
        Send the GET and return the status line, the kept headers and the body.

        Every request is checked with ``allow`` first, redirects included: one it
        refuses is not sent, and the result is an ``error`` that says why.

        Args:
            url: an absolute http or https URL.
            headers: request headers.
        """
        problem = _check_url(url)
        if problem is not None:
            return _error(problem)
        started = time.monotonic()
        result = _error(f"GET {url}: no reply within the time limit of {self.time_limit:g} s")
        allow = self.allow

        async def check(request: httpx.Request) -> None:
            refusal = allow(str(request.url)) if allow is not None else None
            if refusal is not None:
                raise _NotAllowed(f"refused: GET {request.url} was not sent: {refusal}")

        with anyio.move_on_after(self.time_limit):
            try:
                async with (
                    httpx.AsyncClient(
                        timeout=self.time_limit,
                        follow_redirects=True,
                        trust_env=self.trust_env,
                        event_hooks={"request": [check]},
                    ) as client,
                    client.stream("GET", url, headers=headers or {}) as response,
                ):
                    text, note = await _read_excerpt(response, self.excerpt)
                line = f"GET {url} -> {response.status_code} {response.reason_phrase}"
                if str(response.url) != url:
                    line += f" (from {response.url})"
                kept = [
                    f"{name}: {response.headers[name]}"
                    for name in self.keep_headers
                    if name in response.headers
                ]
                ok = 200 <= response.status_code < 300
                status = ToolStatus.OK if ok else ToolStatus.ERROR
                head = "\n".join([line, *kept])
                result = ToolResult(status, _with_note(f"{head}\n{text}", note))
            except _NotAllowed as exc:
                result = _error(str(exc))
            except httpx.HTTPError as exc:
                result = _error(f"GET {url} failed: {type(exc).__name__}: {exc}")
        return attrs.evolve(result, duration=time.monotonic() - started)


class _NotAllowed(Exception):
    """A request ``HttpGet.allow`` refused; it was not sent."""


def http_tools(
    lookup_base: str | None = None,
    *,
    time_limit: float = 30.0,
    lookup_time_limit: float = 10.0,
    trust_env: bool = True,
) -> list[Tool]:
    """
    Return the HTTP tools, ``http_request`` and ``http_get``, to register.

    ``http_request``'s implementation carries its :class:`HttpReconciler`, which
    :func:`~proctor.runtime._effects.ledger.reconciler_for` finds.

    Args:
        lookup_base: where its writes are looked up (see :func:`lookup_url`).
        time_limit: seconds a request may take, reply included.
        lookup_time_limit: seconds a reconciliation lookup may take.
        trust_env: whether proxies and certificates come from the environment.

    Raises:
        ConfigError: a time limit is not positive.
    """
    reconciler = HttpReconciler(lookup_base, lookup_time_limit, trust_env)
    return [
        Tool(
            HTTP_REQUEST_SPEC, HttpRequest(time_limit, reconciler=reconciler, trust_env=trust_env)
        ),
        Tool(HTTP_GET_SPEC, HttpGet(time_limit, trust_env=trust_env)),
    ]


def http_reconcilers(lookup_base: str | None = None) -> dict[str, Reconciler]:
    """
    Return the reconcilers of the HTTP tools by tool name, for a run's configuration.

    Args:
        lookup_base: where writes are looked up (see :func:`lookup_url`).
    """
    return {HTTP_REQUEST_SPEC.name: HttpReconciler(lookup_base)}
