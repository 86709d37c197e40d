"""``nexus viz --serve`` (issue 32): one client cannot hang the server (an idle connection,
an endless request), the server answers only requests addressed to this machine by name
(``Host``: a DNS-rebinding page gets no graph), and a busy port is one line.

The timeouts below are hang guards, never measurements."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from nexus.viz.serve import PageServer, make_server

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
PAGE = "<html>the graph</html>"
GUARD = 30.0  # seconds: only so that a hung server fails the test instead of hanging it


@pytest.fixture
def server() -> Iterator[PageServer]:
    s = make_server(PAGE, 0, request_seconds=1.0)
    t = threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield s
    finally:
        s.shutdown()
        s.server_close()


def _port(s: PageServer) -> int:
    return int(s.server_address[1])


def _get(port: int, host: str | None, path: str = "/") -> bytes:
    """The whole answer to one GET sent by hand (``host`` None: no Host header)."""
    with socket.create_connection(("127.0.0.1", port), timeout=GUARD) as c:
        c.sendall(f"GET {path} HTTP/1.1\r\n".encode() + (f"Host: {host}\r\n".encode() if host else b"")
                  + b"Connection: close\r\n\r\n")
        return _read_all(c)


def _read_all(c: socket.socket) -> bytes:
    chunks = []
    while chunk := c.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def test_an_idle_connection_does_not_block_other_clients(server: PageServer) -> None:
    port = _port(server)
    idle = [socket.create_connection(("127.0.0.1", port), timeout=GUARD) for _ in range(3)]
    idle[1].sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1")  # half a request, never finished
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=GUARD) as r:
            assert r.status == 200 and r.read() == PAGE.encode()
    finally:
        for c in idle:
            c.close()


def test_a_client_that_never_finishes_is_dropped(server: PageServer) -> None:
    with socket.create_connection(("127.0.0.1", _port(server)), timeout=GUARD) as c:
        c.sendall(b"GET / HTTP/1.1\r\n")
        assert PAGE.encode() not in _read_all(c)  # the server closes it after request_seconds


def test_a_request_larger_than_the_bound_gets_no_page(server: PageServer) -> None:
    with socket.create_connection(("127.0.0.1", _port(server)), timeout=GUARD) as c:
        c.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{_port(server)}\r\n".encode())
        try:
            for _ in range(64):
                c.sendall(b"X-Pad: " + b"a" * 1000 + b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server hung up once past the bound: what we want
        try:
            answer = _read_all(c)
        except ConnectionResetError:
            answer = b""
    assert PAGE.encode() not in answer


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.1.evil.example:{port}",
                                  "127.0.0.1:1", "localhost", None])
def test_a_foreign_host_gets_no_graph(server: PageServer, host: str | None) -> None:
    port = _port(server)
    answer = _get(port, host.format(port=port) if host else None)
    status = answer.split(b"\r\n", 1)[0]
    assert status.split()[1] in (b"403", b"421"), status
    assert PAGE.encode() not in answer


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST:{port}", "[::1]:{port}"])
def test_this_machine_by_name_gets_the_page(server: PageServer, host: str) -> None:
    port = _port(server)
    answer = _get(port, host.format(port=port))
    assert answer.startswith(b"HTTP/1.0 200 ") and answer.endswith(PAGE.encode())
    assert b"404" in _get(port, host.format(port=port), "/etc/passwd").split(b"\r\n", 1)[0]


def test_only_the_page_is_served(server: PageServer) -> None:
    port = _port(server)
    for path in ("/etc/passwd", "/../pyproject.toml", "/index.html/x"):
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=GUARD)
        assert info.value.code == 404


# --- the command ------------------------------------------------------------------------------
# The child draws no picture (that needs Graphviz): its page is a stub naming the graph.
CHILD = """\
import sys
import nexus.viz.html as html
html.page = lambda g, path=None, types=True, engines=None: f"<html>graph @{g.name}</html>"
from nexus.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_busy_port_is_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-c", CHILD, "viz", "seed:ifelse", "--serve", "--port", str(port)],
                              capture_output=True, text=True, timeout=GUARD * 4, env=ENV, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"nexus: error: port {port} is in use"), proc.stderr


def test_serve_prints_the_url_serves_and_stops_on_ctrl_c() -> None:
    proc = subprocess.Popen([sys.executable, "-c", CHILD, "viz", "seed:skip5_loop", "--serve"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV, stdin=subprocess.DEVNULL)
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("serving graph @skip5 at http://127.0.0.1:"), line
        url = line.split(" at ", 1)[1].split()[0]
        with urllib.request.urlopen(url, timeout=GUARD) as r:
            assert r.read() == b"<html>graph @skip5</html>"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=GUARD)
        assert proc.returncode == 0 and "Traceback" not in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
