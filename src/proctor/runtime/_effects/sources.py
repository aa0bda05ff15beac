"""
The information sources of answer tasks: ``fetch {url}`` and ``search {query}``.

Both are reads that proctor runs itself (in its own process, not in the
command sandbox), offered only when the task opts in:

- ``fetch`` GETs a URL on the task's allowlist (:class:`Allowlist`): host
  patterns (``docs.python.org``, ``*.example.org``, ``127.0.0.1:8765``) or URL
  patterns (``https://docs.python.org/3/library/*``). Every request is checked,
  redirects included: a redirect off the list is refused, not followed. The
  reply is cut at ``max_bytes`` and the request at ``time_limit`` seconds. The
  result keeps the status line, the content type and the body; no other header
  (dates, etags, cookies, request ids) reaches the result, so a page fetched
  twice fingerprints alike. A URL fetched ``ok`` is a source a final answer may
  cite (the decision core records it).
- ``search`` asks the task's :class:`SearchProvider` (the plug-in point) and
  lists its hits, one ``title - url`` line and a snippet each. The built-in
  provider, :class:`HttpSearch`, reads a JSON search API.

Both go through :class:`~proctor.runtime._effects.http.HttpGet`, the HTTP
client of the HTTP tools, and each call also spends its own budget dimension
(``fetches``, ``searches``).
"""

from __future__ import annotations

import fnmatch
import importlib
import json
import urllib.parse
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from proctor._errors import ConfigError
from proctor.runtime._effects.http import HttpGet
from proctor.runtime._records import ToolResult, ToolStatus
from proctor.runtime._tools.registry import Tool, ToolContext
from proctor.runtime._tools.spec import BUILTIN_SPECS

__all__ = (
    "Allowlist",
    "Fetch",
    "FetchConfig",
    "HttpSearch",
    "Search",
    "SearchConfig",
    "SearchHit",
    "SearchProvider",
    "source_tools",
)

# The reply headers a fetch result keeps: what says what the body is, nothing volatile.
_KEPT_HEADERS = ("content-type", "content-language")


def _error(text: str) -> ToolResult:
    return ToolResult(ToolStatus.ERROR, text)


def _port(parts: urllib.parse.SplitResult) -> int | None:
    try:
        return parts.port
    except ValueError:
        return -1


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


@attrs.frozen
class _Pattern:
    scheme: str | None
    host: str
    port: int | None
    path: str | None

    def allows(self, parts: urllib.parse.SplitResult) -> bool:
        scheme = parts.scheme.lower()
        if self.scheme is not None and scheme != self.scheme:
            return False
        host = (parts.hostname or "").lower()
        if not fnmatch.fnmatchcase(host, self.host):
            return False
        port = _port(parts) or _default_port(scheme)
        if self.port is not None and port != self.port:
            return False
        if self.port is None and self.scheme is not None and port != _default_port(scheme):
            return False
        return self.path is None or fnmatch.fnmatchcase(parts.path or "/", self.path)


def _pattern(entry: str, where: str) -> _Pattern:
    if not isinstance(entry, str) or not entry.strip():
        raise ConfigError(f"{where}: an allowlist entry is a host or a URL pattern, got {entry!r}")
    entry = entry.strip()
    if "://" in entry:
        parts = urllib.parse.urlsplit(entry)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(
                f"{where}: {entry!r} is not an http or https URL pattern; "
                "give one like https://docs.python.org/3/*"
            )
        if parts.username or parts.password or parts.query or parts.fragment:
            raise ConfigError(f"{where}: {entry!r}: a URL pattern names a host and a path only")
        port = _port(parts)
        if port == -1:
            raise ConfigError(f"{where}: {entry!r}: the port is not a number")
        return _Pattern(parts.scheme, parts.hostname.lower(), port, parts.path or "/*")
    host, sep, port_text = entry.rpartition(":")
    if not sep:
        host, port_text = entry, ""
    if "/" in entry or "@" in entry or not host or (port_text and not port_text.isdigit()):
        raise ConfigError(
            f"{where}: {entry!r} is neither a host (docs.python.org, *.example.org, "
            "127.0.0.1:8765) nor a URL pattern (https://host/path/*)"
        )
    return _Pattern(None, host.lower(), int(port_text) if port_text else None, None)


def _entries(value: Sequence[str]) -> tuple[str, ...]:
    return tuple(value)


@attrs.frozen
class Allowlist:
    """
    Which URLs ``fetch`` may read: host patterns or URL patterns; empty allows none.

    A host pattern (``docs.python.org``, ``*.example.org``, ``127.0.0.1:8765``)
    allows every http and https URL of a matching host (and port, when it names
    one). A URL pattern (``https://docs.python.org/3/*``) allows URLs of exactly
    that scheme, host and port whose path matches the pattern's. ``*`` matches
    within a host label sequence or a path as :func:`fnmatch.fnmatchcase` does.
    URLs with user info or with ``.`` or ``..`` path segments are never allowed.

    Args:
        entries: the patterns, as the task file has them.

    Raises:
        ConfigError: an entry that is neither a host nor a URL pattern.
    """

    entries: tuple[str, ...] = attrs.field(default=(), converter=_entries)
    _patterns: tuple[_Pattern, ...] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        patterns = tuple(_pattern(e, "fetch.allow") for e in self.entries)
        object.__setattr__(self, "_patterns", patterns)

    def refusal(self, url: str) -> str | None:
        """
        Return why ``url`` may not be fetched, or None when it may.

        Args:
            url: an absolute URL.
        """
        parts = urllib.parse.urlsplit(url)
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            return f"{url!r} is not an absolute http or https URL"
        if parts.username is not None or parts.password is not None:
            return f"{url!r} carries user info; give the URL without it"
        if _port(parts) == -1:
            return f"{url!r} has a port that is not a number"
        segments = urllib.parse.unquote(parts.path).split("/")
        if "." in segments or ".." in segments:
            return f"{url!r} has '.' or '..' path segments; give the URL in its plain form"
        if not self._patterns:
            return "this task allows no fetches (its [fetch] allow list is empty)"
        if any(p.allows(parts) for p in self._patterns):
            return None
        return (
            f"{parts.hostname}{parts.path} is not on this task's fetch allowlist "
            f"(allowed: {', '.join(self.entries)})"
        )


def _positive(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(f"fetch.{attribute.name}: must be a positive number, got {value!r}")


@attrs.frozen
class FetchConfig:
    """
    A task's ``[fetch]`` table: what ``fetch`` may read and how much.

    Args:
        allow: the allowlist (see :class:`Allowlist`); empty: no ``fetch`` tool.
        time_limit: seconds a fetch may take, redirects and body included.
        max_bytes: bytes of a reply's body kept; the rest is cut, and said so.
    """

    allow: Allowlist = attrs.field(factory=Allowlist)
    time_limit: float = attrs.field(default=20.0, validator=_positive)
    max_bytes: int = attrs.field(default=200_000, validator=_positive)

    def describe(self) -> dict[str, Any]:
        """The table as plain data, for the journal."""
        return {
            "allow": list(self.allow.entries),
            "time_limit": self.time_limit,
            "max_bytes": self.max_bytes,
        }


@attrs.frozen
class Fetch:
    """
    The implementation of ``fetch``.

    Args:
        config: the allowlist and the limits.
        trust_env: whether proxies and certificates come from the environment.
    """

    config: FetchConfig
    trust_env: bool = True

    async def __call__(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        """
        Fetch ``args["url"]`` if the allowlist allows it and every redirect too.

        Args:
            ctx: unused; part of the tool protocol.
            args: ``url``.
        """
        url = str(args["url"])
        refusal = self.config.allow.refusal(url)
        if refusal is not None:
            return _error(f"refused: {refusal}")
        get = HttpGet(
            self.config.time_limit,
            excerpt=int(self.config.max_bytes),
            trust_env=self.trust_env,
            allow=self.config.allow.refusal,
            keep_headers=_KEPT_HEADERS,
        )
        return await get.get(url)


@attrs.frozen
class SearchHit:
    """One search result: its title, its URL and a snippet."""

    title: str
    url: str
    snippet: str = ""


@runtime_checkable
class SearchProvider(Protocol):
    """
    Where ``search`` gets its results: the plug-in point.

    ``search`` returns up to ``limit`` hits for ``query``; it raises
    :class:`~proctor.ProctorError` (or ``OSError``) when the search could not be
    made, which becomes an ``error`` result.
    """

    async def search(self, query: str, limit: int) -> Sequence[SearchHit]: ...


@attrs.frozen
class HttpSearch:
    """
    A search provider that reads a JSON search API: ``GET {endpoint}?q=QUERY&limit=N``.

    The reply is ``{"results": [{"title": ..., "url": ..., "snippet": ...}, ...]}``.

    Args:
        endpoint: the API's URL.
        time_limit: seconds a search may take.
        trust_env: whether proxies and certificates come from the environment.
    """

    endpoint: str
    time_limit: float = 20.0
    trust_env: bool = True

    async def search(self, query: str, limit: int) -> Sequence[SearchHit]:
        """
        Ask the API.

        Raises:
            ConfigError: the API did not answer 200 with the JSON described.
        """
        sep = "&" if "?" in self.endpoint else "?"
        url = f"{self.endpoint}{sep}{urllib.parse.urlencode({'q': query, 'limit': limit})}"
        result = await HttpGet(self.time_limit, excerpt=1_000_000, trust_env=self.trust_env).get(
            url
        )
        if result.status is not ToolStatus.OK:
            raise ConfigError(f"the search API answered: {result.output[:300]}")
        body = result.output.split("\n", 1)[1] if "\n" in result.output else ""
        try:
            data = json.loads(body)
            hits = [
                SearchHit(str(h["title"]), str(h["url"]), str(h.get("snippet", "")))
                for h in data["results"]
            ]
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                f'the search API\'s reply is not {{"results": [{{"title", "url", "snippet"}}]}}: '
                f"{exc}"
            ) from None
        return hits[:limit]


def _provider(value: Any, where: str) -> SearchProvider:
    """A provider named ``module:attribute`` (a class or factory called with no arguments)."""
    if not isinstance(value, str) or ":" not in value:
        raise ConfigError(f"{where}: a provider is named module:attribute, got {value!r}")
    module_name, _, attr = value.partition(":")
    try:
        made = getattr(importlib.import_module(module_name), attr)()
    except (ImportError, AttributeError, TypeError) as exc:
        raise ConfigError(f"{where}: cannot make the provider {value!r}: {exc}") from None
    if not isinstance(made, SearchProvider):
        raise ConfigError(f"{where}: {value!r} has no async search(query, limit)")
    return made


@attrs.frozen
class SearchConfig:
    """
    A task's ``[search]`` table: which provider ``search`` asks.

    Args:
        provider: the provider.
        limit: hits per search.
        name: how the provider was named (``endpoint`` or ``module:attribute``), for the journal.
    """

    provider: SearchProvider
    limit: int = 5
    name: str = ""

    @classmethod
    def from_mapping(cls, data: dict[str, Any], where: str = "search") -> SearchConfig:
        """
        Build the config from a ``[search]`` table: ``endpoint`` or ``provider``, ``limit``.

        Raises:
            ConfigError: neither or both of endpoint and provider, or a bad value.
        """
        for key in data:
            if key not in ("endpoint", "provider", "limit", "time_limit"):
                raise ConfigError(
                    f"{where}.{key}: unknown key; accepted: endpoint, provider, limit, time_limit"
                )
        limit = data.get("limit", 5)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"{where}.limit: must be a whole number >= 1, got {limit!r}")
        if ("endpoint" in data) == ("provider" in data):
            raise ConfigError(
                f"{where}: give endpoint (a JSON search API's URL) or provider "
                "(module:attribute), one of them"
            )
        if "endpoint" in data:
            endpoint = data["endpoint"]
            parts = urllib.parse.urlsplit(endpoint if isinstance(endpoint, str) else "")
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ConfigError(
                    f"{where}.endpoint: must be an http or https URL, got {endpoint!r}"
                )
            time_limit = data.get("time_limit", 20.0)
            if (
                isinstance(time_limit, bool)
                or not isinstance(time_limit, int | float)
                or not time_limit > 0
            ):
                raise ConfigError(
                    f"{where}.time_limit: must be a positive number of seconds, got {time_limit!r}"
                )
            return cls(HttpSearch(endpoint, float(time_limit)), limit, endpoint)
        return cls(_provider(data["provider"], f"{where}.provider"), limit, data["provider"])

    def describe(self) -> dict[str, Any]:
        """The table as plain data, for the journal."""
        key = "endpoint" if isinstance(self.provider, HttpSearch) else "provider"
        out: dict[str, Any] = {key: self.name, "limit": self.limit}
        if isinstance(self.provider, HttpSearch):
            out["time_limit"] = self.provider.time_limit
        return out


@attrs.frozen
class Search:
    """
    The implementation of ``search``.

    Args:
        config: the provider and the number of hits.
    """

    config: SearchConfig

    async def __call__(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        """
        Ask the provider for ``args["query"]``.

        Args:
            ctx: unused; part of the tool protocol.
            args: ``query``.
        """
        query = " ".join(str(args["query"]).split())
        if not query:
            return _error("the query is empty; give the words to search for")
        try:
            hits = await self.config.provider.search(query, self.config.limit)
        except (ConfigError, OSError) as exc:
            return _error(f"search failed: {exc}")
        if not hits:
            return ToolResult(ToolStatus.OK, f"no results for {query!r}")
        lines = []
        for hit in hits:
            lines.append(f"{hit.title} - {hit.url}")
            if hit.snippet:
                lines.append(f"  {' '.join(hit.snippet.split())}")
        return ToolResult(ToolStatus.OK, "\n".join(lines))


def source_tools(fetch: FetchConfig | None, search: SearchConfig | None) -> list[Tool]:
    """
    Return the ``fetch`` and ``search`` tools a task opted into.

    Args:
        fetch: the ``[fetch]`` table; None or an empty allowlist: no ``fetch``.
        search: the ``[search]`` table; None: no ``search``.
    """
    tools = []
    if fetch is not None and fetch.allow.entries:
        tools.append(Tool(BUILTIN_SPECS["fetch"], Fetch(fetch)))
    if search is not None:
        tools.append(Tool(BUILTIN_SPECS["search"], Search(search)))
    return tools
