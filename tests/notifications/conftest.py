"""A receiving HTTP server on loopback: records every request, answers a status
the test chooses (a failing channel) and can be switched to succeed."""

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


@dataclass
class Received:
    path: str
    headers: dict
    body: bytes


@dataclass
class Receiver:
    url: str
    requests: list = field(default_factory=list)
    status: int = 200
    event: threading.Event = field(default_factory=threading.Event)


@contextmanager
def serve_receiver():
    state = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length)
            state.requests.append(Received(self.path, dict(self.headers.items()), body))
            self.send_response(state.status)
            self.send_header("content-type", "text/plain")
            self.end_headers()
            self.wfile.write(b"ok" if state.status < 400 else b"receiver says no")
            state.event.set()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def receiver():
    with serve_receiver() as state:
        yield state
