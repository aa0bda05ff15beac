"""
``fetch`` and ``search``: the allowlist boundary, redirects, limits, normalization,
the search provider, and what a live answer run makes of them. A real HTTP server
on 127.0.0.1 answers every request.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proctor import (
    Budget,
    Disposition,
    Message,
    MessageKind,
    Proposal,
    ScriptedActor,
    Task,
    ToolCall,
    run,
)
from proctor._errors import ConfigError
from proctor.runtime import open_journal
from proctor.runtime._effects.sources import (
    Allowlist,
    Fetch,
    FetchConfig,
    HttpSearch,
    Search,
    SearchConfig,
    SearchHit,
)
from proctor.runtime._progress.normalize import fingerprint
from proctor.runtime._records import ToolStatus
from proctor.runtime._tools.registry import ToolContext
from proctor.runtime._tools.workspace import Workspace


class _Site(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        path = urllib.parse.urlsplit(self.path).path
        site: Any = self.server
        site.seen.append(path)
        if path.startswith("/redirect/"):
            self.send_response(302)
            self.send_header("Location", urllib.parse.unquote(path.removeprefix("/redirect/")))
            self.end_headers()
            return
        if path == "/hang":
            site.release.wait(10)
            return
        if path == "/big":
            body = "x" * 50_000
        elif path == "/search":
            q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)["q"][0]
            body = json.dumps(
                {"results": [{"title": f"About {q}", "url": "http://a.test/1", "snippet": "s"}]}
            )
        else:
            body = f"page {path}\nrequest {uuid.uuid4()}\n"
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("X-Request-Id", str(uuid.uuid4()))
        self.send_header("Set-Cookie", f"s={uuid.uuid4()}")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def site() -> Iterator[tuple[str, list[str]]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    server.seen = []  # type: ignore[attr-defined]
    server.release = threading.Event()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server.seen  # type: ignore[attr-defined]
    finally:
        server.release.set()  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()
        thread.join(5)


def _ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(workspace=Workspace.at(tmp_path))


# -- the allowlist ------------------------------------------------------------


@pytest.mark.parametrize(
    ("entries", "url", "allowed"),
    [
        (("docs.python.org",), "https://docs.python.org/3/x", True),
        (("docs.python.org",), "http://DOCS.python.org/", True),
        (("docs.python.org",), "https://docs.python.org.evil.test/", False),
        (("docs.python.org",), "https://evil.test/?docs.python.org", False),
        (("docs.python.org",), "https://docs.python.org@evil.test/", False),
        (("docs.python.org",), "https://evil.test#@docs.python.org", False),
        (("docs.python.org",), "ftp://docs.python.org/", False),
        (("docs.python.org",), "file:///etc/passwd", False),
        (("*.example.org",), "https://a.example.org/", True),
        (("*.example.org",), "https://example.org.test/", False),
        (("127.0.0.1:8765",), "http://127.0.0.1:8765/x", True),
        (("127.0.0.1:8765",), "http://127.0.0.1:8766/x", False),
        (("https://a.test/docs/*",), "https://a.test/docs/x", True),
        (("https://a.test/docs/*",), "https://a.test/admin", False),
        (("https://a.test/docs/*",), "https://a.test/docs/../admin", False),
        (("https://a.test/docs/*",), "https://a.test/docs/%2e%2e/admin", False),
        (("https://a.test/docs/*",), "http://a.test/docs/x", False),
        (("https://a.test/docs/*",), "https://a.test:444/docs/x", False),
        (("https://a.test/docs/*",), "https://a.test.evil/docs/x", False),
        ((), "https://docs.python.org/", False),
    ],
)
def test_the_allowlist_allows_only_what_it_names(
    entries: tuple[str, ...], url: str, allowed: bool
) -> None:
    assert (Allowlist(entries).refusal(url) is None) is allowed


@pytest.mark.parametrize(
    "entry", ["", "a/b", "user@host", "ftp://a.test/", "host:port", "https://"]
)
def test_a_bad_allowlist_entry_is_a_clear_error(entry: str) -> None:
    with pytest.raises(ConfigError, match=r"^fetch\.allow: "):
        Allowlist((entry,))


@given(st.text(max_size=60))
def test_the_allowlist_never_raises_on_any_url(url: str) -> None:
    refusal = Allowlist(("a.test", "https://b.test/x/*")).refusal(url)
    assert refusal is None or isinstance(refusal, str)


@given(st.from_regex(r"[a-z]{1,8}\.(test|example)", fullmatch=True), st.text(max_size=20))
def test_only_the_named_host_is_allowed(host: str, path: str) -> None:
    url = f"https://{host}/{urllib.parse.quote(path)}"
    refusal = Allowlist(("only.test",)).refusal(url)
    assert (refusal is None) is (host == "only.test")


# -- fetch ------------------------------------------------------------------------


async def test_fetch_reads_an_allowed_page_without_volatile_headers(
    tmp_path: Path, site: tuple[str, list[str]]
) -> None:
    base, _ = site
    fetch = Fetch(FetchConfig(Allowlist((base + "/*",))), trust_env=False)
    first = await fetch(_ctx(tmp_path), {"url": base + "/a"})
    second = await fetch(_ctx(tmp_path), {"url": base + "/a"})
    assert first.status is ToolStatus.OK
    assert "content-type: text/plain" in first.output
    assert "page /a" in first.output
    for volatile in ("x-request-id", "set-cookie", "date:"):
        assert volatile not in first.output.lower()
    # The body's request id differs; the fingerprints do not.
    assert first.output != second.output
    assert fingerprint(first.output) == fingerprint(second.output)


async def test_fetch_refuses_a_url_off_the_list_without_sending_it(
    tmp_path: Path, site: tuple[str, list[str]]
) -> None:
    base, seen = site
    fetch = Fetch(FetchConfig(Allowlist(("a.test",))), trust_env=False)
    result = await fetch(_ctx(tmp_path), {"url": base + "/secret"})
    assert result.status is ToolStatus.ERROR
    assert result.output.startswith("refused: ")
    assert "allowlist" in result.output
    assert seen == []


async def test_a_redirect_off_the_list_is_not_followed(
    tmp_path: Path, site: tuple[str, list[str]]
) -> None:
    base, seen = site
    allowed = base + "/redirect/*"
    fetch = Fetch(FetchConfig(Allowlist((allowed,))), trust_env=False)
    target = urllib.parse.quote(base + "/secret", safe="")
    result = await fetch(_ctx(tmp_path), {"url": f"{base}/redirect/{target}"})
    assert result.status is ToolStatus.ERROR
    assert "was not sent" in result.output
    assert "/secret" not in seen


async def test_a_redirect_on_the_list_is_followed(
    tmp_path: Path, site: tuple[str, list[str]]
) -> None:
    base, seen = site
    fetch = Fetch(FetchConfig(Allowlist((base + "/*",))), trust_env=False)
    target = urllib.parse.quote(base + "/b", safe="")
    result = await fetch(_ctx(tmp_path), {"url": f"{base}/redirect/{target}"})
    assert result.status is ToolStatus.OK
    assert "page /b" in result.output
    assert seen[-1] == "/b"


async def test_a_reply_is_cut_at_max_bytes(tmp_path: Path, site: tuple[str, list[str]]) -> None:
    base, _ = site
    fetch = Fetch(FetchConfig(Allowlist((base + "/*",)), max_bytes=1000), trust_env=False)
    result = await fetch(_ctx(tmp_path), {"url": base + "/big"})
    assert "\n" + "x" * 1000 + "\n[body cut at 1000 bytes]" in result.output
    assert "x" * 1001 not in result.output


async def test_a_fetch_that_gets_no_reply_ends_at_its_time_limit(
    tmp_path: Path, site: tuple[str, list[str]]
) -> None:
    base, _ = site
    fetch = Fetch(FetchConfig(Allowlist((base + "/*",)), time_limit=0.2), trust_env=False)
    result = await fetch(_ctx(tmp_path), {"url": base + "/hang"})
    # A read has no effect to be unsure of: an error, never uncertain.
    assert result.status is ToolStatus.ERROR
    assert "time limit" in result.output or "Timeout" in result.output


@pytest.mark.parametrize(("key", "value"), [("time_limit", 0), ("max_bytes", -1)])
def test_fetch_limits_must_be_positive(key: str, value: int) -> None:
    with pytest.raises(ConfigError, match=f"fetch.{key}"):
        FetchConfig(**{key: value})  # type: ignore[arg-type]


# -- search -----------------------------------------------------------------------


async def test_search_asks_a_json_api(tmp_path: Path, site: tuple[str, list[str]]) -> None:
    base, _ = site
    search = Search(SearchConfig(HttpSearch(base + "/search", trust_env=False), 3))
    result = await search(_ctx(tmp_path), {"query": "  zoneinfo   python "})
    assert result.status is ToolStatus.OK
    assert "About zoneinfo python - http://a.test/1" in result.output


async def test_a_search_api_that_answers_nonsense_is_an_error(
    tmp_path: Path, site: tuple[str, list[str]]
) -> None:
    base, _ = site
    search = Search(SearchConfig(HttpSearch(base + "/page", trust_env=False)))
    result = await search(_ctx(tmp_path), {"query": "x"})
    assert result.status is ToolStatus.ERROR
    assert "search failed" in result.output


class FakeProvider:
    """A provider in Python: the plug-in point."""

    async def search(self, query: str, limit: int) -> list[SearchHit]:
        return [SearchHit(f"hit {n} for {query}", f"http://a.test/{n}") for n in range(limit)]


def test_a_provider_is_named_module_attribute() -> None:
    config = SearchConfig.from_mapping({"provider": f"{__name__}:FakeProvider", "limit": 2})
    assert isinstance(config.provider, FakeProvider)
    assert config.describe() == {"provider": f"{__name__}:FakeProvider", "limit": 2}


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({}, "give endpoint"),
        ({"endpoint": "x", "provider": "a:b"}, "give endpoint"),
        ({"endpoint": "ftp://a"}, "endpoint: must be an http"),
        ({"provider": "nope"}, "module:attribute"),
        ({"provider": "json:nothing_here"}, "cannot make"),
        ({"endpoint": "http://a.test", "limit": 0}, "limit"),
        ({"endpoint": "http://a.test", "color": 1}, "unknown key"),
        ({"endpoint": "http://a.test", "time_limit": 0}, r"search\.time_limit"),
    ],
)
def test_a_bad_search_table_is_a_clear_error(table: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SearchConfig.from_mapping(table)


# -- live answer runs ---------------------------------------------------------------


async def test_a_live_answer_grounded_in_a_fetch_completes_and_spends_fetches(
    tmp_path: Path, site: tuple[str, list[str]]
) -> None:
    base, _ = site
    (tmp_path / "w").mkdir()
    task = Task(
        goal="answer",
        workspace=tmp_path / "w",
        kind="answer",
        fetch=FetchConfig(Allowlist((base + "/*",))),
        budget=Budget({"fetches": 5}),
    )
    script: list[Proposal] = [
        ToolCall("fetch", {"url": base + "/a"}),
        Message(MessageKind.FINAL_ANSWER, "it is a", sources=(base + "/a",)),
    ]
    result = await run(task, ScriptedActor(script), tmp_path / "j")
    assert result.disposition is Disposition.COMPLETED
    assert result.handoff.sources == (base + "/a",)
    assert result.handoff.answer == "it is a"
    async with open_journal(tmp_path / "j") as j:
        spent = await j.spend_totals(result.task_id)
    assert spent["fetches"] == 1.0


async def test_a_fetch_budget_refuses_the_fetch_past_it(
    tmp_path: Path, site: tuple[str, list[str]]
) -> None:
    base, seen = site
    (tmp_path / "w").mkdir()
    task = Task(
        goal="answer",
        workspace=tmp_path / "w",
        kind="answer",
        fetch=FetchConfig(Allowlist((base + "/*",))),
        budget=Budget({"fetches": 1}),
    )
    script = [ToolCall("fetch", {"url": base + "/a"}), ToolCall("fetch", {"url": base + "/b"})]
    result = await run(task, ScriptedActor(script), tmp_path / "j")
    assert "/b" not in seen
    async with open_journal(tmp_path / "j") as j:
        steps = [s for s in await j.steps(result.run_id) if s["kind"] == "action"]
    assert steps[1]["tool_status"] == "refused"
    assert "fetches" in str(steps[1]["reason"])


async def test_a_task_that_did_not_opt_in_has_no_fetch(tmp_path: Path) -> None:
    (tmp_path / "w").mkdir()
    task = Task(goal="answer", workspace=tmp_path / "w", kind="answer")
    assert "fetch" not in task.registry()
    assert "search" not in task.registry()
    empty = Task(goal="a", workspace=tmp_path / "w", kind="answer", fetch=FetchConfig())
    assert "fetch" not in empty.registry()
