"""A Daytona-compatible HTTP server on loopback, with seeded faults and a call log.

Serves the REST subset and toolbox routes the console uses (DOMAIN §3), keeps
sandboxes in memory, and lets tests, demos and chaos runs inject latency, 5xx,
409 windows, 429 with Retry-After, stuck transitions and dropped connections —
at start, or at runtime through `/_sim/*`. Standard library only.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import posixpath
import random
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import httpx

from sandboxes.providers import wire

HOME = "/home/daytona"
CHUNK = 64 * 1024
IN_PROGRESS = "Sandbox state change in progress"
TRANSITIONAL = {"starting", "stopping", "archiving", "restoring", "destroying"}
# state -> action -> (transitional state, final state); "gone" means removed.
TRANSITIONS = {
    "start": {"stopped": ("starting", "started"), "archived": ("restoring", "started")},
    "stop": {"started": ("stopping", "stopped"), "error": ("stopping", "stopped")},
    "archive": {"stopped": ("archiving", "archived")},
}
ALREADY = {"start": "started", "archive": "archived"}


@dataclass
class FaultConfig:
    """Global fault injection. Rates are probabilities per request, drawn from the seed."""

    latency: float = 0.0
    latency_jitter: float = 0.0
    error_rate: float = 0.0
    error_status: int = 503
    rate_limit_rate: float = 0.0
    retry_after: float = 1.0
    drop_rate: float = 0.0
    conflict_rate: float = 0.0
    conflict_seconds: float = 0.5
    transition_seconds: float = 0.05
    stuck: bool = False
    legacy_400: bool = False
    list_shape: str = "paged"  # "paged" ({items, nextCursor}) or "array"
    page_size: int = 100
    no_sha256sum: bool = False
    faults_on_toolbox: bool = True

    def update(self, data: dict) -> None:
        fields = {f.name: f for f in dataclasses.fields(self)}
        for key, value in data.items():
            if key not in fields:
                raise ValueError(f"unknown fault setting {key!r}")
            current = getattr(self, key)
            if isinstance(current, bool):
                value = bool(value)
            elif isinstance(current, int | float) and not isinstance(value, int | float):
                raise ValueError(f"{key} must be a number")
            elif isinstance(current, str) and not isinstance(value, str):
                raise ValueError(f"{key} must be a string")
            setattr(self, key, type(current)(value))
        if self.list_shape not in ("paged", "array"):
            raise ValueError("list_shape must be 'paged' or 'array'")


@dataclass
class SimSandbox:
    id: str
    name: str
    labels: dict
    state: str = "started"
    target: str | None = None
    until: float = 0.0
    files: dict[str, bytes] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=lambda: {HOME})
    # Per-sandbox faults; None falls back to the global setting.
    stuck: bool | None = None
    no_sha256sum: bool | None = None
    transition_seconds: float | None = None
    conflict_until: float = 0.0
    created_at: str = ""
    last_activity_at: str = ""

    def as_json(self, base_url: str) -> dict:
        return {
            "id": self.id,
            "name": self.name,
            "state": self.state,
            "labels": self.labels,
            "toolboxProxyUrl": f"{base_url}/toolbox",
            "createdAt": self.created_at,
            "lastActivityAt": self.last_activity_at,
        }


def _now_iso() -> str:
    return datetime.now(UTC).isoformat()


def _abs(path: str) -> str:
    return posixpath.normpath(posixpath.join(HOME, path))


class Reply(Exception):
    """Raised inside a route to answer with a status and JSON body."""

    def __init__(self, status: int, body: object = None, headers: dict | None = None):
        self.status = status
        self.body = body if body is not None else {}
        self.headers = headers or {}


class Drop(Exception):
    """Close the connection without answering."""


class Simulator:
    """The in-memory world: sandboxes, faults, call log. Thread-safe."""

    def __init__(
        self, seed: int = 0, config: FaultConfig | None = None, api_key: str | None = None
    ):
        self.seed = seed
        self.rng = random.Random(seed)
        self.config = config or FaultConfig()
        self.api_key = api_key
        self.sandboxes: dict[str, SimSandbox] = {}
        self.calls: deque[dict] = deque(maxlen=200_000)
        self.script: list[dict] = []
        self.lock = threading.RLock()
        self.base_url = ""

    # --- state ------------------------------------------------------------

    def _stuck(self, sb: SimSandbox) -> bool:
        return self.config.stuck if sb.stuck is None else sb.stuck

    def _settle(self, sb: SimSandbox, now: float) -> None:
        if sb.target and not self._stuck(sb) and now >= sb.until:
            if sb.target == "gone":
                self.sandboxes.pop(sb.id, None)
            else:
                sb.state = sb.target
            sb.target = None

    def _find(self, key: str) -> SimSandbox | None:
        now = time.monotonic()
        sb = self.sandboxes.get(key)
        if sb is None:
            sb = next((s for s in self.sandboxes.values() if s.name == key), None)
        if sb is not None:
            self._settle(sb, now)
            if sb.id not in self.sandboxes:
                return None
        return sb

    def _require(self, key: str) -> SimSandbox:
        sb = self._find(key)
        if sb is None:
            raise Reply(404, {"statusCode": 404, "message": f"Sandbox {key} not found"})
        return sb

    def _begin(self, sb: SimSandbox, transitional: str, final: str) -> None:
        seconds = (
            self.config.transition_seconds
            if sb.transition_seconds is None
            else sb.transition_seconds
        )
        sb.state, sb.target, sb.until = transitional, final, time.monotonic() + seconds
        self._settle(sb, time.monotonic())

    def _conflict(self) -> Reply:
        status = 400 if self.config.legacy_400 else 409
        return Reply(status, {"statusCode": status, "message": IN_PROGRESS})

    def _check_conflict(self, sb: SimSandbox) -> None:
        now = time.monotonic()
        if now < sb.conflict_until:
            raise self._conflict()
        if self.config.conflict_rate and self.rng.random() < self.config.conflict_rate:
            sb.conflict_until = now + self.config.conflict_seconds
            raise self._conflict()
        if sb.state in TRANSITIONAL:
            raise self._conflict()

    # --- routes -------------------------------------------------------------

    def create(self, body: dict) -> dict:
        name = body.get("name") or ""
        labels = body.get("labels") or {}
        if not isinstance(labels, dict):
            raise Reply(400, {"message": "labels must be an object"})
        sid = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        now = _now_iso()
        sb = SimSandbox(
            id=sid,
            name=str(name or sid),
            labels={str(k): str(v) for k, v in labels.items()},
            created_at=now,
            last_activity_at=now,
        )
        self.sandboxes[sid] = sb
        return sb.as_json(self.base_url)

    def list(self, query: dict) -> object:
        wanted = {}
        if query.get("labels"):
            try:
                wanted = json.loads(query["labels"])
            except ValueError:
                raise Reply(400, {"message": "labels must be a JSON object"}) from None
            if not isinstance(wanted, dict):
                raise Reply(400, {"message": "labels must be a JSON object"})
        matches = []
        for sb in list(self.sandboxes.values()):
            self._settle(sb, time.monotonic())
            if sb.id in self.sandboxes and all(
                sb.labels.get(k) == str(v) for k, v in wanted.items()
            ):
                matches.append(sb.as_json(self.base_url))
        if self.config.list_shape == "array":
            return matches
        try:
            offset = int(query.get("cursor") or 0)
        except ValueError:
            raise Reply(400, {"message": "bad cursor"}) from None
        size = max(1, int(query.get("limit") or self.config.page_size))
        page = matches[offset : offset + size]
        nxt = str(offset + size) if offset + size < len(matches) else None
        return {"items": page, "nextCursor": nxt, "total": len(matches)}

    def action(self, key: str, action: str) -> dict:
        sb = self._require(key)
        if sb.state == ALREADY.get(action):
            return sb.as_json(self.base_url)
        self._check_conflict(sb)
        step = TRANSITIONS[action].get(sb.state)
        if step is None:
            raise Reply(
                400,
                {"statusCode": 400, "message": f"Cannot {action} a sandbox in state {sb.state}"},
            )
        self._begin(sb, *step)
        return sb.as_json(self.base_url)

    def delete(self, key: str) -> dict:
        sb = self._require(key)
        if sb.state == "destroying":
            return {}
        self._check_conflict(sb)
        self._begin(sb, "destroying", "gone")
        return {}

    def _toolbox(self, key: str) -> SimSandbox:
        sb = self._require(key)
        if sb.state != "started":
            raise Reply(400, {"statusCode": 400, "message": "Sandbox is not started"})
        return sb

    def execute(self, key: str, body: dict) -> tuple[dict, list]:
        """Returns the answer, or a work list to hash outside the lock."""
        sb = self._toolbox(key)
        command = body.get("command")
        if not isinstance(command, str):
            raise Reply(400, {"message": "command is required"})
        parsed = wire.parse_command(command)
        if parsed is None:
            argv0 = (shlex.split(command) or ["?"])[0] if command.strip() else "?"
            return {"exitCode": 127, "result": f"sh: 1: {argv0}: not found\n"}, []
        tag, root = parsed
        root_abs = _abs(root)
        if root_abs not in sb.dirs:
            return {"exitCode": 3, "result": f"{tag}: 1: cd: can't cd to {root}\n"}, []
        prefix = root_abs.rstrip("/") + "/"
        files = sorted(
            (p[len(prefix) :], data) for p, data in sb.files.items() if p.startswith(prefix)
        )
        if tag == wire.LIST_TAG:
            return {"exitCode": 0, "result": "".join(f"./{p}\0" for p, _ in files)}, []
        no_sha = self.config.no_sha256sum if sb.no_sha256sum is None else sb.no_sha256sum
        if no_sha:
            return {"exitCode": 127, "result": "sha256sum: not found\n"}, []
        return {}, files

    def upload(self, key: str, path: str, data: bytes) -> None:
        sb = self._toolbox(key)
        target = _abs(path)
        parent = posixpath.dirname(target)
        while parent not in sb.dirs and parent != "/":
            sb.dirs.add(parent)
            parent = posixpath.dirname(parent)
        sb.files[target] = data

    def files_for(self, key: str, paths: list[str]) -> list[tuple[str, bytes | None]]:
        sb = self._toolbox(key)
        return [(p, sb.files.get(_abs(p))) for p in paths]

    # --- control ------------------------------------------------------------

    def sandbox_control(self, key: str, body: dict) -> dict:
        sb = self._require(key)
        for name in ("stuck", "no_sha256sum"):
            if name in body:
                setattr(sb, name, None if body[name] is None else bool(body[name]))
        if "transition_seconds" in body:
            value = body["transition_seconds"]
            sb.transition_seconds = None if value is None else float(value)
        if "conflict_seconds" in body:
            sb.conflict_until = time.monotonic() + float(body["conflict_seconds"])
        if "state" in body:
            sb.state, sb.target = str(body["state"]), None
        if "labels" in body:
            sb.labels = {str(k): str(v) for k, v in body["labels"].items()}
        return sb.as_json(self.base_url)

    def generate(self, body: dict) -> dict:
        """Fill a sandbox with `count` deterministic files of `size` bytes (benchmarks)."""
        sb = self._require(body["sandbox"])
        root = _abs(body.get("root", "workspace"))
        rng = random.Random(body.get("seed", 0))
        count, size = int(body["count"]), int(body["size"])
        sb.dirs.add(root)
        for i in range(count):
            directory = f"{root}/dir {i % 20:02d}"
            sb.dirs.add(directory)
            sb.files[f"{directory}/file {i:05d}.bin"] = rng.randbytes(size)
        return {"count": count, "bytes": count * size}

    def pick_fault(self, operation: str, sandbox_id: str, method: str) -> Reply | None:
        """A scripted rule first, then the seeded rates. Raises Drop for dropped calls."""
        for rule in self.script:
            if rule.get("times", 1) <= 0:
                continue
            if rule.get("operation") not in (None, operation):
                continue
            if rule.get("sandbox_id") not in (None, sandbox_id):
                continue
            if rule.get("method") not in (None, method):
                continue
            rule["times"] = rule.get("times", 1) - 1
            if rule.get("drop"):
                raise Drop()
            status = int(rule.get("status", 503))
            headers = {}
            if rule.get("retry_after") is not None:
                headers["Retry-After"] = f"{rule['retry_after']:g}"
            message = rule.get("message") or (IN_PROGRESS if status == 409 else "Injected fault")
            return Reply(status, {"statusCode": status, "message": message}, headers)
        cfg = self.config
        if cfg.drop_rate and self.rng.random() < cfg.drop_rate:
            raise Drop()
        if cfg.error_rate and self.rng.random() < cfg.error_rate:
            return Reply(cfg.error_status, {"statusCode": cfg.error_status, "message": "Injected"})
        if cfg.rate_limit_rate and self.rng.random() < cfg.rate_limit_rate:
            return Reply(
                429,
                {"statusCode": 429, "message": "Too many requests"},
                {"Retry-After": f"{cfg.retry_after:g}"},
            )
        return None

    def log(self, **entry) -> None:
        self.calls.append(entry)


_SANDBOX = re.compile(r"^/sandbox/([^/]+)(?:/(start|stop|archive))?$")
_TOOLBOX = re.compile(
    r"^/toolbox/([^/]+)/(process/execute|files/download|files/bulk-download|files/upload|files/folder)$"
)
_SIM_SANDBOX = re.compile(r"^/_sim/sandboxes/([^/]+)$")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "DaytonaSimulator/1"

    def log_message(self, format, *args):
        pass

    def setup(self):
        super().setup()
        # Headers and body go out in separate writes; without NODELAY, Nagle
        # and delayed ACKs add ~40 ms to every call.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    @property
    def sim(self) -> Simulator:
        return self.server.sim

    def do_GET(self):
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")

    def do_DELETE(self):
        self._handle("DELETE")

    # --- plumbing -----------------------------------------------------------

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _json_body(self, raw: bytes) -> dict:
        if not raw:
            return {}
        try:
            body = json.loads(raw)
        except ValueError:
            raise Reply(400, {"message": "body is not JSON"}) from None
        if not isinstance(body, dict):
            raise Reply(400, {"message": "body must be an object"})
        return body

    def _send_json(self, status: int, body: object, headers: dict | None = None):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _classify(self, method: str, path: str) -> tuple[str, str]:
        if path == "/sandbox":
            return ("list" if method == "GET" else "create"), ""
        if match := _SANDBOX.match(path):
            sid, action = unquote(match.group(1)), match.group(2)
            if action:
                return action, sid
            return ("destroy" if method == "DELETE" else "get"), sid
        if match := _TOOLBOX.match(path):
            names = {
                "process/execute": "execute",
                "files/download": "download",
                "files/bulk-download": "bulk_download",
                "files/upload": "upload",
                "files/folder": "folder",
            }
            return names[match.group(2)], unquote(match.group(1))
        return "unknown", ""

    def _handle(self, method: str):
        url = urlsplit(self.path)
        path = url.path.rstrip("/") or "/"
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        raw = self._body()
        if path.startswith("/_sim/"):
            try:
                self._control(method, path, query, raw)
            except Reply as reply:
                self._send_json(reply.status, reply.body, reply.headers)
            return
        operation, sandbox_id = self._classify(method, path)
        sim = self.sim
        entry = {
            "at": _now_iso(),
            "method": method,
            "path": path,
            "query": query,
            "sandbox_id": sandbox_id,
            "operation": operation,
            "status": None,
            "request_id": self.headers.get("X-Request-Id", ""),
            "skip_activity": self.headers.get("X-Daytona-Skip-Last-Activity-Update") == "true",
        }
        cfg = sim.config
        try:
            if cfg.latency or cfg.latency_jitter:
                with sim.lock:
                    jitter = sim.rng.uniform(0, cfg.latency_jitter) if cfg.latency_jitter else 0
                time.sleep(cfg.latency + jitter)
            if sim.api_key is not None and self.headers.get("Authorization") != (
                f"Bearer {sim.api_key}"
            ):
                raise Reply(401, {"statusCode": 401, "message": "Unauthorized"})
            with sim.lock:
                toolbox = path.startswith("/toolbox/")
                if not toolbox or cfg.faults_on_toolbox:
                    fault = sim.pick_fault(operation, sandbox_id, method)
                    if fault is not None:
                        raise fault
            self._route(method, operation, sandbox_id, query, raw, entry)
        except Drop:
            entry["status"] = 0
            sim.log(**entry)
            self.close_connection = True
            return
        except Reply as reply:
            entry["status"] = reply.status
            sim.log(**entry)
            self._send_json(reply.status, reply.body, reply.headers)
            return
        except Exception as exc:  # a bug in the simulator must not hang the client
            entry["status"] = 500
            sim.log(**entry)
            self._send_json(500, {"statusCode": 500, "message": f"simulator error: {exc!r}"})
            return

    def _ok(self, entry: dict, status: int = 200):
        entry["status"] = status
        self.sim.log(**entry)

    def _route(self, method, operation, sandbox_id, query, raw, entry):
        sim = self.sim
        if operation in ("list", "create", "get", "start", "stop", "archive", "destroy"):
            with sim.lock:
                if operation == "list" and method == "GET":
                    body = sim.list(query)
                elif operation == "create" and method == "POST":
                    body = sim.create(self._json_body(raw))
                elif operation == "get" and method == "GET":
                    sb = sim._require(sandbox_id)
                    if not entry["skip_activity"]:
                        sb.last_activity_at = entry["at"]
                    body = sb.as_json(sim.base_url)
                elif operation == "destroy":
                    body = sim.delete(sandbox_id)
                elif method == "POST" and operation in ("start", "stop", "archive"):
                    body = sim.action(sandbox_id, operation)
                else:
                    raise Reply(405, {"message": "method not allowed"})
            self._ok(entry)
            self._send_json(200, body)
        elif operation == "execute" and method == "POST":
            with sim.lock:
                answer, files = sim.execute(sandbox_id, self._json_body(raw))
            if not answer:
                records = (
                    (hashlib.sha256(data).hexdigest(), len(data), rel) for rel, data in files
                )
                answer = {"exitCode": 0, "result": wire.format_hash_records(records)}
            self._ok(entry)
            self._send_json(200, answer)
        elif operation == "download" and method == "GET":
            with sim.lock:
                [(_, data)] = sim.files_for(sandbox_id, [query.get("path", "")])
            if data is None:
                raise Reply(404, {"statusCode": 404, "message": "File not found"})
            self._ok(entry)
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self._write(data)
        elif operation == "bulk_download" and method == "POST":
            paths = self._json_body(raw).get("paths")
            if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
                raise Reply(400, {"message": "paths must be a list of strings"})
            with sim.lock:
                files = sim.files_for(sandbox_id, paths)
            self._ok(entry)
            self._send_multipart(files)
        elif operation == "upload" and method == "POST":
            data = self._upload_field(raw)
            with sim.lock:
                sim.upload(sandbox_id, query.get("path", ""), data)
            self._ok(entry)
            self._send_json(200, {})
        elif operation == "folder" and method == "POST":
            with sim.lock:
                sb = sim._toolbox(sandbox_id)
                sb.dirs.add(_abs(query.get("path", "")))
            self._ok(entry)
            self._send_json(200, {})
        else:
            raise Reply(404, {"statusCode": 404, "message": f"no route {method} {entry['path']}"})

    def _upload_field(self, raw: bytes) -> bytes:
        try:
            boundary = wire.boundary_from(self.headers.get("Content-Type", ""))
            for headers, body in wire.MultipartStream([raw], boundary).parts():
                params = wire.disposition_params(headers.get("content-disposition", ""))
                data = b"".join(body)
                if params.get("name") == "file":
                    return data
        except Exception as exc:
            raise Reply(400, {"message": f"bad multipart upload: {exc}"}) from exc
        raise Reply(400, {"message": "multipart field 'file' is required"})

    def _write(self, data: bytes):
        view = memoryview(data)
        for start in range(0, len(view), CHUNK):
            self.wfile.write(view[start : start + CHUNK])

    def _send_multipart(self, files: list[tuple[str, bytes | None]]):
        boundary = uuid.uuid4().hex
        pieces: list[bytes] = []
        for path, data in files:
            name = "file" if data is not None else "error"
            head = (
                f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; '
                f"filename={wire.quote_param(path)}\r\n"
                f"Content-Type: application/octet-stream\r\n\r\n"
            ).encode()
            body = data if data is not None else json.dumps({"message": "File not found"}).encode()
            pieces.extend([head, body, b"\r\n"])
        pieces.append(f"--{boundary}--\r\n".encode())
        self.send_response(200)
        self.send_header("Content-Type", f"multipart/form-data; boundary={boundary}")
        self.send_header("Content-Length", str(sum(len(p) for p in pieces)))
        self.end_headers()
        for piece in pieces:
            self._write(piece)

    def _control(self, method: str, path: str, query: dict, raw: bytes):
        sim = self.sim
        body = self._json_body(raw)
        with sim.lock:
            if path == "/_sim/faults" and method == "GET":
                answer = {"global": dataclasses.asdict(sim.config), "script": sim.script}
            elif path == "/_sim/faults" and method == "POST":
                try:
                    sim.config.update(body.get("global", {}))
                except ValueError as exc:
                    raise Reply(400, {"message": str(exc)}) from exc
                if "script" in body:
                    sim.script = [dict(rule) for rule in body["script"]]
                for key, options in body.get("sandboxes", {}).items():
                    sim.sandbox_control(key, options)
                answer = {"global": dataclasses.asdict(sim.config), "script": sim.script}
            elif path == "/_sim/calls" and method == "GET":
                answer = [
                    c
                    for c in sim.calls
                    if all(str(c.get(k)) == v for k, v in query.items() if k != "query")
                ]
            elif path == "/_sim/reset" and method == "POST":
                sim.calls.clear()
                sim.script = []
                if body.get("faults"):
                    sim.config = FaultConfig()
                if body.get("sandboxes"):
                    sim.sandboxes.clear()
                answer = {}
            elif path == "/_sim/generate" and method == "POST":
                answer = sim.generate(body)
            elif (match := _SIM_SANDBOX.match(path)) and method == "POST":
                answer = sim.sandbox_control(unquote(match.group(1)), body)
            else:
                raise Reply(404, {"message": f"no control route {method} {path}"})
        self._send_json(200, answer)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 256
    allow_reuse_address = True


class SimulatorServer:
    """Run the simulator on loopback; usable as a context manager inside a test."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        seed: int = 0,
        config: FaultConfig | None = None,
        api_key: str | None = None,
    ):
        self.sim = Simulator(seed=seed, config=config, api_key=api_key)
        self._httpd = _Server((host, port), Handler)
        self._httpd.sim = self.sim
        host, port = self._httpd.server_address[:2]
        self.url = f"http://{host}:{port}"
        self.sim.base_url = self.url
        self._thread: threading.Thread | None = None

    @property
    def control(self) -> SimulatorControl:
        return SimulatorControl(self.url)

    def start(self) -> SimulatorServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self):
        self._httpd.serve_forever(poll_interval=0.2)

    def stop_listening(self):
        self._httpd.server_close()

    def stop(self):
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread:
            self._thread.join(timeout=5)

    def __enter__(self) -> SimulatorServer:
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class SimulatorControl:
    """Drive a simulator over HTTP (in-process or in another process)."""

    def __init__(self, url: str):
        self.url = url.rstrip("/")

    def _post(self, path: str, body: dict) -> object:
        response = httpx.post(f"{self.url}{path}", json=body, timeout=60)
        response.raise_for_status()
        return response.json()

    def faults(self, script: list[dict] | None = None, sandboxes: dict | None = None, **glob):
        body: dict = {"global": glob}
        if script is not None:
            body["script"] = script
        if sandboxes:
            body["sandboxes"] = sandboxes
        return self._post("/_sim/faults", body)

    def sandbox(self, key: str, **options) -> dict:
        return self._post(f"/_sim/sandboxes/{key}", options)

    def calls(self, **filters) -> list[dict]:
        response = httpx.get(f"{self.url}/_sim/calls", params=filters, timeout=60)
        response.raise_for_status()
        return response.json()

    def reset(self, *, faults: bool = False, sandboxes: bool = False):
        return self._post("/_sim/reset", {"faults": faults, "sandboxes": sandboxes})

    def generate(self, sandbox: str, count: int, size: int, root: str = "workspace", seed=0):
        body = {"sandbox": sandbox, "count": count, "size": size, "root": root, "seed": seed}
        return self._post("/_sim/generate", body)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = FaultConfig()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--api-key", default=None, help="require this bearer token")
    for f in dataclasses.fields(FaultConfig):
        flag = "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name)
        if isinstance(default, bool):
            parser.add_argument(flag, action="store_true", default=default)
        else:
            parser.add_argument(flag, type=type(default), default=default)


def server_from_options(options: dict) -> SimulatorServer:
    config = FaultConfig(**{f.name: options[f.name] for f in dataclasses.fields(FaultConfig)})
    return SimulatorServer(
        host=options["host"],
        port=options["port"],
        seed=options["seed"],
        config=config,
        api_key=options.get("api_key"),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Daytona-compatible provider simulator")
    add_arguments(parser)
    server = server_from_options(vars(parser.parse_args(argv)))
    print(f"provider simulator listening on {server.url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop_listening()


if __name__ == "__main__":
    main()


class SimulatorProcess:
    """Run the simulator in a child process (benchmarks, chaos runs): its memory stays
    out of the measuring process."""

    def __init__(self, *args: str, seed: int = 0):
        self.args = ["--port", "0", "--seed", str(seed), *args]
        self.process: subprocess.Popen | None = None
        self.url = ""

    def __enter__(self) -> SimulatorProcess:
        root = Path(__file__).resolve().parents[2]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sandboxes.providers.simulator", *self.args],
            cwd=root,
            env={**os.environ, "PYTHONPATH": str(root)},
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.process.stdout.readline()
        if "listening on" not in line:
            self.process.kill()
            raise RuntimeError(f"simulator did not start: {line!r}")
        self.url = line.rsplit(" ", 1)[-1].strip()
        return self

    @property
    def control(self) -> SimulatorControl:
        return SimulatorControl(self.url)

    def __exit__(self, *exc):
        self.process.terminate()
        self.process.wait(timeout=10)
