"""Serve one viewer page on this machine only (``nexus viz FILE --serve``).

The server binds 127.0.0.1 (never another interface), answers ``GET /`` with the page
held in memory and everything else with 404 (no file is ever read from disk), and stops
after ``seconds`` (an hour by default) or on Ctrl-C, so a forgotten one does not linger.

No client can hang it or make it read without end: each connection has its own (daemon)
thread, and its request must arrive whole, within :data:`MAX_REQUEST_BYTES`, in
``request_seconds``; otherwise the connection is dropped.  Binding 127.0.0.1 is not
enough on its own: a page from anywhere can point its own host name at 127.0.0.1 (DNS
rebinding) and read what answers there, so only requests whose ``Host`` names this
machine and port (``127.0.0.1:PORT``, ``localhost:PORT``, ``[::1]:PORT``) get the page.
"""

from __future__ import annotations

import errno
import io
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOST = "127.0.0.1"
DEFAULT_SECONDS = 3600.0
REQUEST_SECONDS = 10.0  # for the whole request, however slowly its bytes come
MAX_REQUEST_BYTES = 16 * 1024  # a browser's GET is well under 2 KiB; no body is ever read
SEND_SECONDS = 60.0  # for sending the page (a few MB at most) to a client that reads slowly
LOCAL_NAMES = ("127.0.0.1", "localhost", "[::1]")


class ServeError(RuntimeError):
    """The server cannot start (its port is taken, or not ours to bind): one line."""


class _Request(io.RawIOBase):
    """The bytes of one connection's request: at most ``limit`` of them, all before
    ``deadline`` (a time.monotonic() value).  A socket timeout alone would let a client
    that sends a byte now and then keep the connection for ever."""

    def __init__(self, sock: socket.socket, limit: int, deadline: float):
        self._sock, self._left, self._deadline = sock, limit, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        wait = self._deadline - time.monotonic()
        if wait <= 0:
            raise TimeoutError("the request took too long")
        if self._left <= 0:
            raise ConnectionAbortedError("the request is too large")
        self._sock.settimeout(wait)
        n = self._sock.recv_into(buffer, min(len(buffer), self._left))
        self._left -= n
        return n


class _Handler(BaseHTTPRequestHandler):
    server: PageServer

    def setup(self) -> None:
        super().setup()
        request = _Request(self.connection, MAX_REQUEST_BYTES, time.monotonic() + self.server.request_seconds)
        self.rfile = io.BufferedReader(request)

    def _answer(self, send_body: bool) -> None:
        self.connection.settimeout(SEND_SECONDS)
        hosts = self.headers.get_all("Host") or []
        if len(hosts) != 1 or hosts[0].strip().lower() not in self.server.local_hosts:
            # 421 Misdirected Request: addressed to another name, e.g. a rebound one.
            self.send_error(421, f"this server answers only {self.server.url}")
            return
        if self.path.split("?", 1)[0] not in ("/", "/index.html"):
            self.send_error(404, "only the graph page is served here")
            return
        body = self.server.page
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802  (http.server's naming)
        self._answer(True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(False)

    def log_message(self, format: str, *args: object) -> None:  # quiet: the URL was printed once
        pass


class PageServer(ThreadingHTTPServer):
    """The viewer's server: one page, one thread per connection (daemon threads, so that a
    client still connected never keeps the process alive)."""

    daemon_threads = True
    block_on_close = False  # server_close does not wait for clients that are still connected

    def __init__(self, page: str, port: int, request_seconds: float):
        self.page = page.encode("utf-8")
        self.request_seconds = request_seconds
        try:
            super().__init__((HOST, port), _Handler)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise ServeError(f"port {port} is in use (another program listens on it): "
                                 "give another --port, or --port 0 for a free one") from None
            raise ServeError(f"cannot serve on {HOST}:{port}: {e.strerror or e}") from None
        bound = self.server_address[1]
        self.url = f"http://{HOST}:{bound}/"
        self.local_hosts = frozenset(f"{name}:{bound}" for name in LOCAL_NAMES) | (
            frozenset(LOCAL_NAMES) if bound == 80 else frozenset())  # a browser leaves out port 80

    def set_page(self, page: str) -> None:
        """Serve ``page`` from now on (the server may be bound before the page is drawn)."""
        self.page = page.encode("utf-8")

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that went away, sent too much or too slowly: its connection is closed,
        # and there is nobody to tell (socketserver would print a traceback per client).
        pass


def make_server(page: str, port: int = 0, *, request_seconds: float = REQUEST_SECONDS) -> PageServer:
    """A server on 127.0.0.1:``port`` (0: a free port) that serves ``page`` at /; not yet
    serving (call ``serve_forever``, or :func:`serve`).  Raises :class:`ServeError` when
    the port is in use or cannot be bound."""
    return PageServer(page, port, request_seconds)


def serve(server: PageServer, seconds: float = DEFAULT_SECONDS, ready: Callable[[str], None] = print) -> None:
    """Serve until ``seconds`` have passed or Ctrl-C, then close ``server``; ``ready``
    gets the URL."""
    stopper = threading.Timer(seconds, server.shutdown)
    stopper.daemon = True
    stopper.start()
    ready(server.url)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        stopper.cancel()
        server.server_close()
