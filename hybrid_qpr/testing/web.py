"""A plain web site on a free local port: a page of HTML, for tests that need some other server
(a site the user visits, a URL that is not a search engine)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def html_site(html: str, status: Callable[[str], int] = lambda path: 200) -> Iterator[str]:
    """Serve ``html`` for every GET (with ``status(path)``) on 127.0.0.1; yields ``host:port``."""
    body = html.encode("utf-8")

    class Page(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(status(self.path))
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
