"""
A small local web site for the answer example: three pages and a JSON search API.

    python examples/answer/server.py            # serves http://127.0.0.1:8765 until Ctrl-C
    python examples/answer/server.py --port 0   # any free port; the address is printed

Every reply carries volatile parts, as real sites do: a ``Date`` header, an
``X-Request-Id`` header and a request id and a time in the body. proctor's
``fetch`` keeps none of the headers and fingerprints the body without them, so
fetching one page twice is recognised as the same work.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PAGES = {
    "/zoneinfo": (
        "zoneinfo - IANA time zone support",
        "The zoneinfo module was added in Python 3.9. It provides a concrete time zone "
        "implementation to support the IANA time zone database, as specified in PEP 615.",
    ),
    "/pep-615": (
        "PEP 615 - Support for the IANA Time Zone Database in the Standard Library",
        "PEP 615 proposed the zoneinfo module. Status: Final. Python-Version: 3.9.",
    ),
    "/whatsnew": (
        "What's New In Python 3.9",
        "New modules: zoneinfo brings support for the IANA time zone database to the "
        "standard library; graphlib provides a topological sort.",
    ),
}


class Handler(BaseHTTPRequestHandler):
    """Serves :data:`PAGES` and ``/search?q=...``."""

    def log_message(self, format: str, *args: object) -> None:
        pass  # quiet: the example prints proctor's output, not the site's

    def _send(self, status: int, body: str, kind: str) -> None:
        data = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Request-Id", str(uuid.uuid4()))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        stamp = f"request {uuid.uuid4()} served at {time.strftime('%Y-%m-%dT%H:%M:%SZ')}"
        if url.path == "/search":
            query = urllib.parse.parse_qs(url.query).get("q", [""])[0].lower()
            words = [w for w in query.split() if len(w) > 2]
            base = f"http://{self.headers.get('Host', '127.0.0.1')}"
            results = [
                {"title": title, "url": base + path, "snippet": text[:80]}
                for path, (title, text) in PAGES.items()
                if any(w in (title + " " + text).lower() for w in words)
            ]
            self._send(200, json.dumps({"results": results}), "application/json")
        elif url.path in PAGES:
            title, text = PAGES[url.path]
            self._send(200, f"{title}\n\n{text}\n\n({stamp})\n", "text/plain; charset=utf-8")
        else:
            self._send(404, f"no page at {url.path}\n", "text/plain; charset=utf-8")


def serve(port: int = 8765) -> ThreadingHTTPServer:
    """Start the site on 127.0.0.1:``port`` in a thread and return its server."""
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8765)
    port = parser.parse_args().port
    server = serve(port)
    print(f"serving http://127.0.0.1:{server.server_address[1]} (Ctrl-C stops it)", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.shutdown()


if __name__ == "__main__":
    main()
