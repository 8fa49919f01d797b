"""A receiving HTTP server on loopback: records every request, answers a status
(and body, and Location) the test chooses and can be switched to succeed.

Notifications may not reach loopback unless NOTIFY_ALLOWED_HOSTS lists it
(README: Notifications): `receiver` is listed by its exact host:port, so any
other loopback port stays refused; `unlisted_receiver` is not listed at all."""

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
    method: str = "POST"


@dataclass
class Receiver:
    url: str
    requests: list = field(default_factory=list)
    status: int = 200
    body: bytes | None = None  # None: "ok", or "receiver says no" from 400 on
    location: str = ""  # sent with a 3xx status
    event: threading.Event = field(default_factory=threading.Event)


@contextmanager
def serve_receiver():
    state = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def _answer(self):
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length)
            state.requests.append(
                Received(self.path, dict(self.headers.items()), body, self.command)
            )
            self.send_response(state.status)
            self.send_header("content-type", "text/plain")
            if state.location:
                self.send_header("location", state.location)
            answer = state.body
            if answer is None:
                answer = b"ok" if state.status < 400 else b"receiver says no"
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)
            state.event.set()

        do_POST = do_GET = _answer

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    server.server_close()


def allow(settings, *hosts):
    """List hosts (host or host:port) in NOTIFY_ALLOWED_HOSTS for this test."""
    settings.NOTIFY_ALLOWED_HOSTS = [*getattr(settings, "NOTIFY_ALLOWED_HOSTS", []), *hosts]


@pytest.fixture
def receiver(settings):
    with serve_receiver() as state:
        allow(settings, state.url)
        yield state


@pytest.fixture
def unlisted_receiver():
    with serve_receiver() as state:
        yield state
