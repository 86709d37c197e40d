"""Serve one viewer page on this machine only (``nexus viz FILE --serve``).

The server binds 127.0.0.1 (never another interface), answers ``GET /`` with the page
held in memory and everything else with 404 (no file is ever read from disk), and stops
after ``seconds`` (an hour by default) or on Ctrl-C, so a forgotten one does not linger.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer

HOST = "127.0.0.1"
DEFAULT_SECONDS = 3600.0


def make_server(page: str, port: int = 0) -> HTTPServer:
    """An HTTP server on 127.0.0.1:``port`` (0: a free port) that serves ``page`` at /."""
    body = page.encode("utf-8")

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, send_body: bool) -> None:
            if self.path.split("?", 1)[0] not in ("/", "/index.html"):
                self.send_error(404, "only the graph page is served here")
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if send_body:
                self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802  (http.server's naming)
            self._answer(True)

        def do_HEAD(self) -> None:  # noqa: N802
            self._answer(False)

        def log_message(self, format: str, *args: object) -> None:  # quiet: the URL was printed once
            pass

    return HTTPServer((HOST, port), Handler)


def serve(page: str, port: int = 0, seconds: float = DEFAULT_SECONDS,
          ready: Callable[[str], None] = print) -> None:
    """Serve ``page`` until ``seconds`` have passed or Ctrl-C; ``ready`` gets the URL."""
    server = make_server(page, port)
    url = f"http://{HOST}:{server.server_address[1]}/"
    stopper = threading.Timer(seconds, server.shutdown)
    stopper.daemon = True
    stopper.start()
    ready(url)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        stopper.cancel()
        server.server_close()
