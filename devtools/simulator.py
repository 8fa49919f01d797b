"""A Daytona-compatible HTTP server on loopback, with seeded faults and a call log.

Serves the REST and toolbox routes the console uses (docs/architecture.md,
the rooms) the way Daytona does -- every answer valid for the official `daytona-api-client` and
`daytona-toolbox-api-client` models, so Daytona's own SDK can drive it -- keeps
sandboxes in memory, and lets tests, demos and chaos runs inject latency, 5xx,
409 windows, 429 with Retry-After, stuck transitions, dropped connections, a
lying toolbox (downloads whose bytes disagree with the hash listing, a file
that changes on every start) and any of Daytona's 22 sandbox states, at start
or at runtime through `/_sim/*`.

The sources followed (daytonaio/daytona):
- apps/api/src/sandbox/services/sandbox.service.ts: start/stop/archive/destroy
  refusals and their messages, `desiredState` and `pending`, soft delete (the
  sandbox is renamed `DESTROYED_<name>_<ms>`), list filters;
- apps/api/src/sandbox/controllers/sandbox.controller.ts: routes, the start's
  wait of up to 30 s for `started`, the deprecated `/sandbox/paginated`;
- apps/api/src/filters/all-exceptions.filter.ts: the error body;
- apps/daemon/pkg/toolbox/fs/download_files.go, upload_file.go, upload_files.go
  and process/execute.go: the toolbox wire formats;
- apps/proxy/pkg/proxy/get_sandbox_target.go: toolbox calls refresh the
  sandbox's last activity unless `X-Daytona-Skip-Last-Activity-Update: true`.
Standard library only.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import mimetypes
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
import traceback
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qs, unquote, urlsplit

import httpx

from sandboxes.providers import wire

HOME = "/home/daytona"
CHUNK = 64 * 1024
ORGANIZATION_ID = "00000000-0000-4000-8000-00000000c0de"
DAEMON_VERSION = "0.190.0-sim"
BULK_BOUNDARY = "DAYTONA-FILE-BOUNDARY"  # download_files.go

# Daytona's messages (sandbox.service.ts and the exceptions it throws).
IN_PROGRESS = "Sandbox state change in progress"
ERRORED = "Sandbox is in an errored state"
NOT_STOPPABLE = "Sandbox is not in a stoppable state"
NOT_STOPPED = "Sandbox is not stopped"
NOT_STARTABLE = "Sandbox is not in valid state"
NO_RESUME = "Resuming is not supported for this sandbox"

STATES = (
    "creating",
    "restoring",
    "destroyed",
    "destroying",
    "started",
    "stopped",
    "starting",
    "stopping",
    "error",
    "build_failed",
    "pending_build",
    "building_snapshot",
    "unknown",
    "pulling_snapshot",
    "archived",
    "archiving",
    "resizing",
    "snapshotting",
    "forking",
    "pausing",
    "paused",
    "resuming",
)
FAILED = ("error", "build_failed")
SETTLED = ("started", "stopped", "archived", "paused", "error", "build_failed", "destroyed")
TRANSITIONAL = tuple(s for s in STATES if s not in SETTLED)
# Where a sandbox put in a transitional state (by a fault rule) is heading:
# (its desiredState, the state it settles in).
HEADING = {
    "creating": ("started", "started"),
    "restoring": ("started", "started"),
    "destroying": ("destroyed", "gone"),
    "starting": ("started", "started"),
    "stopping": ("stopped", "stopped"),
    "pending_build": ("started", "started"),
    "building_snapshot": ("started", "started"),
    "unknown": ("started", "started"),
    "pulling_snapshot": ("started", "started"),
    "archiving": ("archived", "archived"),
    "resizing": ("resized", "started"),
    "snapshotting": ("started", "started"),
    "forking": ("started", "started"),
    "pausing": ("paused", "paused"),
    "resuming": ("started", "started"),
}
DESIRED_STATES = ("destroyed", "started", "stopped", "resized", "archived", "paused")


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
    # Daytona's start answers once the sandbox is started, or after 30 s.
    start_wait_seconds: float = 30.0
    stuck: bool = False
    legacy_400: bool = False
    list_shape: str = "paged"  # "paged" ({items, nextCursor}) or "array"
    page_size: int = 100
    no_sha256sum: bool = False
    faults_on_toolbox: bool = True
    # An old toolbox: no /files/upload-v2, /files/bulk-upload, /files/bulk-download.
    legacy_toolbox: bool = False
    # A download answers other bytes than the hash listing names (per request).
    lie_rate: float = 0.0

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
    desired_state: str = "started"
    # A change under way: the old state holds until `shows_at`, then the sandbox
    # reads `showing` (stopping, destroying, ...) until `until`, then `target`
    # ("gone" once destroyed).
    target: str | None = None
    showing: str | None = None
    shows_at: float = 0.0
    until: float = 0.0
    files: dict[str, bytes] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=lambda: {HOME})
    # Per-sandbox faults; None falls back to the global setting.
    stuck: bool | None = None
    no_sha256sum: bool | None = None
    transition_seconds: float | None = None
    # A lying toolbox: downloads serve other bytes than the hash listing names.
    lie_downloads: bool = False
    # A file (path under HOME) that changes on every start, like a log a boot
    # script appends to; `starts` counts the starts, `lies` the lying downloads.
    flap: str | None = None
    starts: int = 0
    lies: int = 0
    conflict_until: float = 0.0
    created_at: str = ""
    updated_at: str = ""
    last_activity_at: str = ""
    cpu: int = 1
    gpu: int = 0
    memory: int = 1
    disk: int = 3
    sandbox_class: str = "container"
    snapshot: str = "daytonaio/sandbox:0.5.0"
    error_reason: str | None = None
    recoverable: bool | None = None
    auto_stop_interval: int = 15
    auto_archive_interval: int = 10080
    auto_delete_interval: int = -1
    runner_id: str = ""

    @property
    def pending(self) -> bool:
        return self.target is not None and self.state not in FAILED

    @property
    def gone(self) -> bool:
        """What Daytona answers 404 for: destroyed, or errored with deletion asked."""
        return self.state == "destroyed" or (
            self.state in FAILED and self.desired_state == "destroyed"
        )

    def _common(self, base_url: str) -> dict:
        body = {
            "id": self.id,
            "organizationId": ORGANIZATION_ID,
            "name": self.name,
            "target": "us",
            "runnerId": self.runner_id,
            "sandboxClass": self.sandbox_class,
            "state": self.state,
            "desiredState": self.desired_state,
            "snapshot": self.snapshot,
            "user": "daytona",
            "public": False,
            "networkBlockAll": False,
            "cpu": self.cpu,
            "gpu": self.gpu,
            "memory": self.memory,
            "disk": self.disk,
            "labels": dict(self.labels),
            "backupState": "None",
            "autoStopInterval": self.auto_stop_interval,
            "autoArchiveInterval": self.auto_archive_interval,
            "autoDeleteInterval": self.auto_delete_interval,
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
            "lastActivityAt": self.last_activity_at,
            "daemonVersion": DAEMON_VERSION,
            "toolboxProxyUrl": f"{base_url}/toolbox",
        }
        if self.error_reason is not None:
            body["errorReason"] = self.error_reason
        if self.recoverable is not None:
            body["recoverable"] = self.recoverable
        return body

    def as_json(self, base_url: str) -> dict:
        """The `Sandbox` model (sandbox.dto.ts): what get, create and actions answer."""
        return {**self._common(base_url), "env": {}, "kvm": False, "volumes": []}

    def as_list_item(self, base_url: str) -> dict:
        """The `SandboxListItem` model (sandbox-list-item.dto.ts): what GET /sandbox lists."""
        return self._common(base_url)


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _abs(path: str) -> str:
    return posixpath.normpath(posixpath.join(HOME, path))


def _lie(data: bytes) -> bytes:
    """Other bytes of the same size (the last byte flipped), so only a hash tells."""
    if not data:
        return b"\0"
    return data[:-1] + bytes([data[-1] ^ 0xFF])


def _truthy(value: object) -> bool:
    return str(value).lower() in ("1", "true", "yes")


class Reply(Exception):
    """Raised inside a route to answer with a status and JSON body."""

    def __init__(self, status: int, body: object = None, headers: dict | None = None):
        self.status = status
        self.body = body if body is not None else {}
        self.headers = headers or {}


def refusal(status: int, message: str) -> Reply:
    """Daytona's error body: {path, timestamp, statusCode, error, message}; the
    handler fills in the path and time (all-exceptions.filter.ts)."""
    return Reply(
        status, {"statusCode": status, "error": HTTPStatus(status).phrase, "message": message}
    )


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
        if sb.target is None:
            if sb.state in ("started", "stopped", "archived", "paused"):
                # Nothing under way: a settled state is also the desired one (a
                # test that set `sb.state` directly meant exactly that).
                sb.desired_state = sb.state
            return
        if sb.showing and now >= sb.shows_at and sb.state != sb.showing:
            sb.state = sb.showing
            sb.updated_at = _now_iso()
        if not self._stuck(sb) and now >= sb.until:
            sb.state = "destroyed" if sb.target == "gone" else sb.target
            sb.target = sb.showing = None
            sb.updated_at = _now_iso()

    def _find(self, key: str, *, by_name: bool = True) -> SimSandbox | None:
        """By id, then by name (findOneByIdOrName); destroyed ones are not found."""
        now = time.monotonic()
        sb = self.sandboxes.get(key)
        if sb is not None:
            self._settle(sb, now)
            if sb.gone:
                sb = None
        if sb is None and by_name:
            for candidate in self.sandboxes.values():
                if candidate.name == key:
                    self._settle(candidate, now)
                    if not candidate.gone:
                        sb = candidate
                        break
        return sb

    def _require(self, key: str, *, by_name: bool = True) -> SimSandbox:
        sb = self._find(key, by_name=by_name)
        if sb is None:
            what = "ID or name" if by_name else "ID"
            raise refusal(404, f"Sandbox with {what} {key} not found")
        return sb

    def _seconds(self, sb: SimSandbox) -> float:
        if sb.transition_seconds is not None:
            return sb.transition_seconds
        return self.config.transition_seconds

    def _begin(
        self, sb: SimSandbox, desired: str, showing: str | None, final: str, *, at_once=False
    ) -> None:
        """Start a change the way Daytona does: `desiredState` moves now, the state
        stays (pending) for the first half, reads `showing` for the second, then
        settles in `final`. `at_once` skips the pending half (archive)."""
        seconds = self._seconds(sb)
        now = time.monotonic()
        sb.desired_state = desired
        sb.target, sb.showing = final, showing
        sb.shows_at = now if at_once else now + seconds / 2
        sb.until = now + seconds
        sb.updated_at = _now_iso()
        self._settle(sb, now)

    def _conflict(self) -> Reply:
        status = 400 if self.config.legacy_400 else 409
        return refusal(status, IN_PROGRESS)

    def _injected_conflict(self, sb: SimSandbox) -> None:
        now = time.monotonic()
        if now < sb.conflict_until:
            raise self._conflict()
        if self.config.conflict_rate and self.rng.random() < self.config.conflict_rate:
            sb.conflict_until = now + self.config.conflict_seconds
            raise self._conflict()

    def set_state(self, sb: SimSandbox, state: str, desired: str | None = None) -> None:
        """Put a sandbox in any of Daytona's states (fault rules, /_sim). A
        transitional state heads where Daytona would take it, unless stuck."""
        if state not in STATES:
            raise refusal(400, f"unknown sandbox state {state!r}; one of {', '.join(STATES)}")
        if desired is not None and desired not in DESIRED_STATES:
            raise refusal(400, f"unknown desired state {desired!r}")
        sb.state = state
        sb.target = sb.showing = None
        sb.updated_at = _now_iso()
        if state in HEADING:
            heading, final = HEADING[state]
            sb.desired_state = desired or heading
            now = time.monotonic()
            sb.target, sb.showing, sb.shows_at = final, state, now
            sb.until = now + self._seconds(sb)
        elif state in FAILED:
            sb.desired_state = desired or sb.desired_state
            if sb.error_reason is None:
                sb.error_reason = "simulated failure"
        else:
            sb.desired_state = desired or state
        if state not in FAILED:
            sb.error_reason = None

    # --- routes -------------------------------------------------------------

    def create(self, body: dict) -> dict:
        name = body.get("name") or ""
        labels = body.get("labels") or {}
        if not isinstance(labels, dict):
            raise refusal(400, "labels must be an object")
        sid = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        if name and self._find(str(name)) is not None:
            raise refusal(409, f"Sandbox with name {name} already exists")
        now = _now_iso()
        sb = SimSandbox(
            id=sid,
            name=str(name or sid),
            labels={str(k): str(v) for k, v in labels.items()},
            created_at=now,
            updated_at=now,
            last_activity_at=now,
            runner_id=str(uuid.UUID(int=self.seed + 1, version=4)),
        )
        for key in ("autoStopInterval", "autoArchiveInterval", "autoDeleteInterval"):
            if isinstance(body.get(key), int):
                attr = re.sub(r"[A-Z]", lambda m: "_" + m.group(0).lower(), key)
                setattr(sb, attr, body[key])
        self.sandboxes[sid] = sb
        return sb.as_json(self.base_url)

    def _visible(self, query: dict[str, list[str]]) -> list[SimSandbox]:
        def one(key):
            values = query.get(key)
            return values[-1] if values else None

        wanted = {}
        if one("labels"):
            try:
                wanted = json.loads(one("labels"))
            except ValueError:
                raise refusal(400, "Invalid labels JSON format") from None
            if not isinstance(wanted, dict):
                raise refusal(400, "Invalid labels JSON format")
        states = set(query.get("states") or [])
        include_errored_deleted = _truthy(one("includeErroredDeleted"))
        now = time.monotonic()
        out = []
        for sb in list(self.sandboxes.values()):
            self._settle(sb, now)
            if sb.state == "destroyed":
                continue
            if sb.gone and not include_errored_deleted:
                continue
            if states and sb.state not in states:
                continue
            if one("id") and not sb.id.lower().startswith(one("id").lower()):
                continue
            if one("name") and not sb.name.lower().startswith(one("name").lower()):
                continue
            if all(sb.labels.get(k) == str(v) for k, v in wanted.items()):
                out.append(sb)
        return out

    def list_sandboxes(self, query: dict[str, list[str]]) -> object:
        """GET /sandbox: `ListSandboxesResponse` {items: SandboxListItem[], nextCursor}."""
        matches = self._visible(query)
        if self.config.list_shape == "array":
            return [sb.as_list_item(self.base_url) for sb in matches]
        try:
            offset = int((query.get("cursor") or ["0"])[-1] or 0)
            size = int((query.get("limit") or [str(self.config.page_size)])[-1])
        except ValueError:
            raise refusal(400, "Invalid cursor or limit") from None
        size = max(1, size)
        page = matches[offset : offset + size]
        nxt = str(offset + size) if offset + size < len(matches) else None
        return {"items": [sb.as_list_item(self.base_url) for sb in page], "nextCursor": nxt}

    def list_paginated(self, query: dict[str, list[str]]) -> dict:
        """The deprecated GET /sandbox/paginated: {items: Sandbox[], total, page, totalPages}."""
        try:
            page = max(1, int((query.get("page") or ["1"])[-1]))
            limit = max(1, int((query.get("limit") or ["10"])[-1]))
        except ValueError:
            raise refusal(400, "Invalid page or limit") from None
        matches = self._visible(query)
        items = matches[(page - 1) * limit : page * limit]
        return {
            "items": [sb.as_json(self.base_url) for sb in items],
            "total": len(matches),
            "page": page,
            "totalPages": -(-len(matches) // limit),
        }

    def action(self, key: str, action: str) -> dict:
        sb = self._require(key)
        getattr(self, f"_{action}")(sb)
        return sb.as_json(self.base_url)

    def _start(self, sb: SimSandbox) -> None:
        if sb.state == "started" and sb.desired_state == "started":
            return
        if sb.state in FAILED:
            raise refusal(400, ERRORED)
        self._injected_conflict(sb)
        if sb.state != sb.desired_state and not (
            sb.desired_state == "archived" and sb.state in ("stopped", "archiving")
        ):
            raise self._conflict()
        if sb.state not in ("stopped", "archived", "archiving", "paused"):
            raise refusal(400, NOT_STARTABLE)
        if sb.pending and sb.desired_state != "archived":
            raise self._conflict()
        if sb.state == "paused" and sb.sandbox_class not in ("linux-vm", "windows"):
            raise refusal(422, NO_RESUME)
        self._started_once(sb)
        if sb.state == "paused":
            self._begin(sb, "started", "resuming", "started")
        elif sb.state == "archived":
            self._begin(sb, "started", "restoring", "started")
        else:
            self._begin(sb, "started", "starting", "started")

    def _started_once(self, sb: SimSandbox) -> None:
        """A start that will happen: counted, and the flapping file changes."""
        sb.starts += 1
        if sb.flap:
            target = _abs(sb.flap)
            parent = posixpath.dirname(target)
            while parent not in sb.dirs and parent != "/":
                sb.dirs.add(parent)
                parent = posixpath.dirname(parent)
            line = f"boot {sb.starts} of {sb.id}\n".encode()
            sb.files[target] = sb.files.get(target, b"") + line

    def _stop(self, sb: SimSandbox) -> None:
        if sb.state in FAILED:
            raise refusal(400, ERRORED)
        self._injected_conflict(sb)
        if sb.state != sb.desired_state:
            raise self._conflict()
        if sb.state not in ("started", "paused"):
            raise refusal(400, NOT_STOPPABLE)
        if sb.pending:
            raise self._conflict()
        self._begin(sb, "stopped", "stopping", "stopped")

    def _archive(self, sb: SimSandbox) -> None:
        if sb.state in FAILED:
            raise refusal(400, ERRORED)
        self._injected_conflict(sb)
        if sb.state != sb.desired_state:
            raise self._conflict()
        if sb.state != "stopped":
            raise refusal(400, NOT_STOPPED)
        if sb.pending:
            raise self._conflict()
        # archive() sets ARCHIVING and desiredState ARCHIVED in one update.
        self._begin(sb, "archived", "archiving", "archived", at_once=True)

    def delete(self, key: str) -> dict:
        """DELETE is a soft delete: desiredState `destroyed`, the sandbox renamed
        `DESTROYED_<name>_<ms>` (Sandbox.getSoftDeleteUpdate), answered with the
        updated sandbox; then `destroying`, then 404."""
        sb = self._require(key)
        self._injected_conflict(sb)
        if sb.pending and sb.state != "pending_build":
            raise self._conflict()
        sb.name = f"DESTROYED_{sb.name}_{int(time.time() * 1000)}"
        if sb.state in FAILED:
            sb.desired_state = "destroyed"  # reads 404 from now on
            sb.updated_at = _now_iso()
        else:
            self._begin(sb, "destroyed", "destroying", "gone")
        return sb.as_json(self.base_url)

    def toolbox_proxy_url(self, key: str) -> dict:
        self._require(key, by_name=False)
        return {"url": f"{self.base_url}/toolbox"}

    def _toolbox(self, key: str, skip_activity: bool = True) -> SimSandbox:
        sb = self._find(key, by_name=False)
        if sb is None:
            raise refusal(404, f"Sandbox with ID {key} not found")
        if sb.state != "started":
            raise refusal(400, f"Sandbox is not started (state: {sb.state})")
        if not skip_activity:
            sb.last_activity_at = _now_iso()
        return sb

    def execute(self, key: str, body: dict, skip: bool = True) -> tuple[dict, list]:
        """Returns the answer, or a work list to hash outside the lock."""
        sb = self._toolbox(key, skip)
        command = body.get("command")
        if not isinstance(command, str) or not command.strip():
            raise refusal(400, "command cannot be empty or whitespace-only")
        parsed = wire.parse_command(command)
        if parsed is None:
            return self._shell(sb, command), []
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

    def _shell(self, sb: SimSandbox, command: str) -> dict:
        """A few commands an SDK's first steps run (`echo`, `cat`, `pwd`, `true`)."""
        try:
            argv = shlex.split(command)
        except ValueError:
            return {"exitCode": 2, "result": "sh: 1: Syntax error: Unterminated quoted string\n"}
        if argv and argv[0] == "echo":
            return {"exitCode": 0, "result": " ".join(argv[1:]) + "\n"}
        if argv and argv[0] == "pwd":
            return {"exitCode": 0, "result": HOME + "\n"}
        if argv and argv[0] == "true":
            return {"exitCode": 0, "result": ""}
        if argv and argv[0] == "cat" and len(argv) == 2:
            data = sb.files.get(_abs(argv[1]))
            if data is None:
                return {"exitCode": 1, "result": f"cat: {argv[1]}: No such file or directory\n"}
            return {"exitCode": 0, "result": data.decode("utf-8", "replace")}
        argv0 = argv[0] if argv else "?"
        return {"exitCode": 127, "result": f"sh: 1: {argv0}: not found\n"}

    def upload(self, key: str, path: str, data: bytes, skip: bool = True) -> dict:
        sb = self._toolbox(key, skip)
        if not path:
            raise refusal(400, "path is required")
        target = _abs(path)
        parent = posixpath.dirname(target)
        while parent not in sb.dirs and parent != "/":
            sb.dirs.add(parent)
            parent = posixpath.dirname(parent)
        sb.files[target] = data
        return {"name": posixpath.basename(path), "path": path, "type": "file"}

    def files_for(
        self, key: str, paths: list[str], skip: bool = True
    ) -> list[tuple[str, bytes | None]]:
        sb = self._toolbox(key, skip)
        files = [(p, sb.files.get(_abs(p))) for p in paths]
        rate = self.config.lie_rate
        if sb.lie_downloads or (rate and self.rng.random() < rate):
            sb.lies += 1
            return [(p, None if data is None else _lie(data)) for p, data in files]
        return files

    def describe(self, key: str) -> dict:
        """What a sandbox holds, destroyed or not (a wave's verdict reads what a
        destroyed sandbox held when it went): state, starts, lies, file digests."""
        sb = self.sandboxes.get(key)
        if sb is None:
            raise refusal(404, f"Sandbox with ID {key} not found")
        self._settle(sb, time.monotonic())
        return {
            "id": sb.id,
            "state": "destroyed" if sb.gone else sb.state,
            "starts": sb.starts,
            "lies": sb.lies,
            "lie_downloads": sb.lie_downloads,
            "flap": sb.flap,
            "files": {
                path: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
                for path, data in sorted(sb.files.items())
            },
        }

    # --- control ------------------------------------------------------------

    def sandbox_control(self, key: str, body: dict) -> dict:
        sb = self.sandboxes.get(key) or self._require(key)
        for name in ("stuck", "no_sha256sum"):
            if name in body:
                setattr(sb, name, None if body[name] is None else bool(body[name]))
        if "lie_downloads" in body:
            sb.lie_downloads = bool(body["lie_downloads"])
        if "flap" in body:
            if body["flap"] is not None and not isinstance(body["flap"], str):
                raise refusal(400, "flap must be a path under the home directory, or null")
            sb.flap = body["flap"] or None
        if "transition_seconds" in body:
            value = body["transition_seconds"]
            sb.transition_seconds = None if value is None else float(value)
        if "conflict_seconds" in body:
            sb.conflict_until = time.monotonic() + float(body["conflict_seconds"])
        for name in ("cpu", "gpu", "memory", "disk"):
            if name in body:
                setattr(sb, name, int(body[name]))
        if "sandbox_class" in body:
            sb.sandbox_class = str(body["sandbox_class"])
        if "error_reason" in body:
            sb.error_reason = body["error_reason"]
        if "recoverable" in body:
            sb.recoverable = body["recoverable"]
        if "state" in body:
            self.set_state(sb, str(body["state"]), body.get("desired_state"))
        elif "desired_state" in body:
            if body["desired_state"] not in DESIRED_STATES:
                raise refusal(400, f"unknown desired state {body['desired_state']!r}")
            sb.desired_state = body["desired_state"]
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
        """A scripted rule first, then the seeded rates. Raises Drop for dropped calls.

        A rule may also move the sandbox to any of Daytona's states (`state`, with
        `desired_state` and `error_reason`); without a `status` the call then
        proceeds against the new state."""
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
            if rule.get("state") is not None:
                sb = self.sandboxes.get(sandbox_id) or self._find(sandbox_id)
                if sb is not None:
                    if "error_reason" in rule:
                        sb.error_reason = rule["error_reason"]
                    self.set_state(sb, rule["state"], rule.get("desired_state"))
                if rule.get("status") is None and not rule.get("drop"):
                    return None
            if rule.get("drop"):
                raise Drop()
            status = int(rule.get("status", 503))
            headers = {}
            if rule.get("retry_after") is not None:
                headers["Retry-After"] = f"{rule['retry_after']:g}"
            message = rule.get("message") or (IN_PROGRESS if status == 409 else "Injected fault")
            reply = refusal(status, message)
            reply.headers = headers
            return reply
        cfg = self.config
        if cfg.drop_rate and self.rng.random() < cfg.drop_rate:
            raise Drop()
        if cfg.error_rate and self.rng.random() < cfg.error_rate:
            return refusal(cfg.error_status, "Injected")
        if cfg.rate_limit_rate and self.rng.random() < cfg.rate_limit_rate:
            return Reply(
                429,
                {"statusCode": 429, "error": "Too Many Requests", "message": "Too many requests"},
                {"Retry-After": f"{cfg.retry_after:g}"},
            )
        return None

    def log(self, **entry) -> None:
        self.calls.append(entry)


_SANDBOX = re.compile(r"^/sandbox/([^/]+)(?:/(start|stop|archive|toolbox-proxy-url))?$")
_TOOLBOX_ROUTES = {
    "process/execute": "execute",
    "files/download": "download",
    "files/bulk-download": "bulk_download",
    "files/upload": "upload",
    "files/upload-v2": "upload",
    "files/bulk-upload": "bulk_upload",
    "files/folder": "folder",
}
_LEGACY_MISSING = ("files/upload-v2", "files/bulk-upload", "files/bulk-download")
_TOOLBOX = re.compile(r"^/toolbox/([^/]+)/(" + "|".join(map(re.escape, _TOOLBOX_ROUTES)) + ")$")
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
        return cast(_Server, self.server).sim

    def do_GET(self):
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")

    def do_DELETE(self):
        self._handle("DELETE")

    # --- plumbing -----------------------------------------------------------

    def _body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            # The SDK's streaming upload sends chunked bodies.
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _json_body(self, raw: bytes) -> dict:
        if not raw:
            return {}
        try:
            body = json.loads(raw)
        except ValueError:
            raise refusal(400, "body is not JSON") from None
        if not isinstance(body, dict):
            raise refusal(400, "body must be an object")
        return body

    def _send_json(self, status: int, body: object, headers: dict | None = None):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _classify(self, method: str, path: str) -> tuple[str, str]:
        if path == "/sandbox":
            return ("list" if method == "GET" else "create"), ""
        if path == "/sandbox/paginated" and method == "GET":
            return "list_paginated", ""
        if match := _SANDBOX.match(path):
            sid, action = unquote(match.group(1)), match.group(2)
            if action == "toolbox-proxy-url":
                return "toolbox_proxy_url", sid
            if action:
                return action, sid
            return ("destroy" if method == "DELETE" else "get"), sid
        if match := _TOOLBOX.match(path):
            if self.sim.config.legacy_toolbox and match.group(2) in _LEGACY_MISSING:
                return "unknown", unquote(match.group(1))
            return _TOOLBOX_ROUTES[match.group(2)], unquote(match.group(1))
        return "unknown", ""

    def _handle(self, method: str):
        url = urlsplit(self.path)
        path = url.path.rstrip("/") or "/"
        multi = parse_qs(url.query)
        query = {k: v[-1] for k, v in multi.items()}
        raw = self._body()
        if path.startswith("/_sim/"):
            try:
                self._control(method, path, query, raw)
            except Reply as reply:
                self._send_json(reply.status, reply.body, reply.headers)
            return
        operation, sandbox_id = self._classify(method, path)
        sim = self.sim
        entry: dict[str, Any] = {
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
                raise refusal(401, "Unauthorized")
            with sim.lock:
                toolbox = path.startswith("/toolbox/")
                if not toolbox or cfg.faults_on_toolbox:
                    fault = sim.pick_fault(operation, sandbox_id, method)
                    if fault is not None:
                        raise fault
            self._route(method, operation, sandbox_id, multi, query, raw, entry)
        except Drop:
            entry["status"] = 0
            sim.log(**entry)
            self.close_connection = True
            return
        except Reply as reply:
            entry["status"] = reply.status
            sim.log(**entry)
            body = reply.body
            if isinstance(body, dict) and reply.status >= 400:
                body = {"path": self.path, "timestamp": _now_iso(), **body}
            self._send_json(reply.status, body, reply.headers)
            return
        except Exception as exc:  # a bug in the simulator must not hang the client
            entry["status"] = 500
            entry["error"] = repr(exc)[:500]
            sim.log(**entry)
            traceback.print_exc()
            self._send_json(500, {"statusCode": 500, "message": f"simulator error: {exc!r}"})
            return

    def _ok(self, entry: dict, status: int = 200):
        entry["status"] = status
        self.sim.log(**entry)

    def _route(self, method, operation, sandbox_id, multi, query, raw, entry):
        sim = self.sim
        skip = entry["skip_activity"]
        body: Any  # JSON: a list for the array shape of `list`, an object otherwise
        if operation in (
            "list",
            "list_paginated",
            "create",
            "get",
            "start",
            "stop",
            "archive",
            "destroy",
            "toolbox_proxy_url",
        ):
            with sim.lock:
                if operation == "list" and method == "GET":
                    body = sim.list_sandboxes(multi)
                elif operation == "list_paginated":
                    body = sim.list_paginated(multi)
                elif operation == "create" and method == "POST":
                    body = sim.create(self._json_body(raw))
                elif operation == "get" and method == "GET":
                    body = sim._require(sandbox_id).as_json(sim.base_url)
                elif operation == "toolbox_proxy_url" and method == "GET":
                    body = sim.toolbox_proxy_url(sandbox_id)
                elif operation == "destroy":
                    body = sim.delete(sandbox_id)
                elif method == "POST" and operation in ("start", "stop", "archive"):
                    body = sim.action(sandbox_id, operation)
                else:
                    raise refusal(404, f"Cannot {method} {entry['path']}")
            if operation == "start" and body["state"] not in ("archived", "restoring", "started"):
                body = self._await_started(body["id"])
            self._ok(entry)
            self._send_json(200, body)
        elif operation == "execute" and method == "POST":
            with sim.lock:
                answer, files = sim.execute(sandbox_id, self._json_body(raw), skip)
            if not answer:
                records = (
                    (hashlib.sha256(data).hexdigest(), len(data), rel) for rel, data in files
                )
                answer = {"exitCode": 0, "result": wire.format_hash_records(records)}
            self._ok(entry)
            self._send_json(200, answer)
        elif operation == "download" and method == "GET":
            with sim.lock:
                [(_, data)] = sim.files_for(sandbox_id, [query.get("path", "")], skip)
            if data is None:
                raise refusal(404, "File not found")
            self._ok(entry)
            # download_file.go: an attachment named both ways, like bulk download.
            disposition = wire.content_disposition("file", posixpath.basename(query["path"]))
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header(
                "Content-Disposition", disposition.replace('form-data; name="file"', "attachment")
            )
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self._write(data)
        elif operation == "bulk_download" and method == "POST":
            paths = self._json_body(raw).get("paths")
            if (
                not paths
                or not isinstance(paths, list)
                or not all(isinstance(p, str) for p in paths)
            ):
                raise Reply(400, {"error": 'request body must be {"paths": [ ... ]} and non-empty'})
            with sim.lock:
                files = sim.files_for(sandbox_id, paths, skip)
            self._ok(entry)
            self._send_multipart(files)
        elif operation == "upload" and method == "POST":
            data = self._upload_field(raw)
            with sim.lock:
                info = sim.upload(sandbox_id, query.get("path", ""), data, skip)
            self._ok(entry)
            if entry["path"].endswith("/upload-v2"):
                self._send_json(200, info)  # UploadedFile {name, path, type}
            else:
                self._send_empty(200)  # the legacy route answers no body
        elif operation == "bulk_upload" and method == "POST":
            uploads = self._bulk_upload_fields(raw)
            with sim.lock:
                for path, data in uploads:
                    sim.upload(sandbox_id, path, data, skip)
            self._ok(entry)
            self._send_json(200, {"files": [{"path": p, "bytes": len(d)} for p, d in uploads]})
        elif operation == "folder" and method == "POST":
            with sim.lock:
                sb = sim._toolbox(sandbox_id, skip)
                sb.dirs.add(_abs(query.get("path", "")))
            self._ok(entry)
            self._send_empty(201)
        else:
            raise refusal(404, f"Cannot {method} {entry['path']}")

    def _await_started(self, sandbox_id: str) -> dict:
        """sandbox.controller.ts waitForSandboxStarted: hold the answer until the
        sandbox is started (or failed, 400) or the wait runs out (the sandbox as it is)."""
        sim = self.sim
        deadline = time.monotonic() + sim.config.start_wait_seconds
        while True:
            with sim.lock:
                sb = sim.sandboxes.get(sandbox_id)
                if sb is None:
                    raise refusal(404, f"Sandbox with ID {sandbox_id} not found")
                sim._settle(sb, time.monotonic())
                if sb.state in FAILED:
                    raise refusal(400, f"Sandbox failed to start: {sb.error_reason}")
                if sb.state == "started" or time.monotonic() >= deadline:
                    return sb.as_json(sim.base_url)
                wait = max(0.0, min(sb.until - time.monotonic(), 0.05)) or 0.01
            time.sleep(min(wait, max(0.0, deadline - time.monotonic())) or 0.01)

    def _send_empty(self, status: int):
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _form_parts(self, raw: bytes):
        try:
            boundary = wire.boundary_from(self.headers.get("Content-Type", ""))
            for headers, body in wire.MultipartStream([raw], boundary).parts():
                params = wire.disposition_params(headers.get("content-disposition", ""))
                yield params.get("name", ""), b"".join(body)
        except Exception as exc:
            raise refusal(400, f"invalid multipart form: {exc}") from exc

    def _upload_field(self, raw: bytes) -> bytes:
        """upload_file.go: multipart field `file`, or (upload-v2) the raw body."""
        content_type = self.headers.get("Content-Type", "")
        if not content_type.startswith("multipart/form-data"):
            return raw
        for name, data in self._form_parts(raw):
            if name == "file":
                return data
        raise refusal(400, "http: no such file")

    def _bulk_upload_fields(self, raw: bytes) -> list[tuple[str, bytes]]:
        """upload_files.go: `files[i].path` then `files[i].file` per file."""
        dests: dict[str, str] = {}
        out: list[tuple[str, bytes]] = []
        errors = []
        for name, data in self._form_parts(raw):
            match = re.fullmatch(r"files\[(.*)\]\.(path|file)", name)
            if not match:
                continue
            index, kind = match.groups()
            if kind == "path":
                dest = data.decode("utf-8", "replace").strip()
                if not dest:
                    errors.append(f"path[{index}]: empty path")
                else:
                    dests[index] = dest
            elif index not in dests:
                errors.append(f"file[{index}]: missing .path metadata")
            else:
                out.append((dests[index], data))
        if errors:
            raise Reply(400, {"errors": errors, "files": []})
        return out

    def _write(self, data: bytes):
        view = memoryview(data)
        for start in range(0, len(view), CHUNK):
            self.wfile.write(view[start : start + CHUNK])

    def _send_multipart(self, files: list[tuple[str, bytes | None]]):
        """download_files.go, byte for byte: boundary DAYTONA-FILE-BOUNDARY; each part
        named `file` (Content-Type by extension, Content-Length) or `error` (a JSON
        ErrorResponse), with `filename` in Latin-1 and `filename*` in UTF-8; the
        answer is streamed (no Content-Length)."""
        pieces: list[bytes] = []
        for path, data in files:
            if data is None:
                name = "error"
                headers = {"Content-Type": "application/json; charset=utf-8"}
                body = json.dumps(
                    {
                        "statusCode": 404,
                        "message": f"file not found: {path}",
                        "code": "FILE_NOT_FOUND",
                        "timestamp": _now_iso(),
                        "path": path,
                        "method": "POST",
                    },
                    separators=(",", ":"),
                ).encode()
            else:
                name = "file"
                ctype = mimetypes.guess_type(path)[0] or "application/octet-stream"
                headers = {"Content-Type": ctype, "Content-Length": str(len(data))}
                body = data
            headers["Content-Disposition"] = wire.content_disposition(name, path)
            # Go's textproto writes the part headers sorted by key.
            head = "".join(f"{k}: {headers[k]}\r\n" for k in sorted(headers))
            opener = f"--{BULK_BOUNDARY}\r\n" if not pieces else f"\r\n--{BULK_BOUNDARY}\r\n"
            pieces.extend([opener.encode(), head.encode("latin-1"), b"\r\n", body])
        pieces.append(f"\r\n--{BULK_BOUNDARY}--\r\n".encode())
        self.send_response(200)
        self.send_header("Content-Type", f"multipart/form-data; boundary={BULK_BOUNDARY}")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for piece in pieces:
            view = memoryview(piece)
            for start in range(0, len(view), CHUNK):
                chunk = view[start : start + CHUNK]
                self.wfile.write(b"%X\r\n" % len(chunk) + bytes(chunk) + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")

    def _control(self, method: str, path: str, query: dict, raw: bytes):
        sim = self.sim
        body = self._json_body(raw)
        answer: object
        with sim.lock:
            if path == "/_sim/faults" and method == "GET":
                answer = {"global": dataclasses.asdict(sim.config), "script": sim.script}
            elif path == "/_sim/faults" and method == "POST":
                try:
                    sim.config.update(body.get("global", {}))
                except ValueError as exc:
                    raise Reply(400, {"message": str(exc)}) from exc
                if "script" in body:
                    for rule in body["script"]:
                        if rule.get("state") is not None and rule["state"] not in STATES:
                            raise Reply(400, {"message": f"unknown state {rule['state']!r}"})
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
            elif (match := _SIM_SANDBOX.match(path)) and method == "GET":
                answer = sim.describe(unquote(match.group(1)))
            else:
                raise Reply(404, {"message": f"no control route {method} {path}"})
        self._send_json(200, answer)


class _Server(ThreadingHTTPServer):
    sim: Simulator
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
        host, port = cast(tuple[str, int], self._httpd.server_address[:2])  # AF_INET
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

    def _post(self, path: str, body: dict) -> Any:
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

    def describe(self, key: str) -> dict:
        """State, starts, lies and file digests of a sandbox, destroyed or not."""
        response = httpx.get(f"{self.url}/_sim/sandboxes/{key}", timeout=60)
        response.raise_for_status()
        return response.json()

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
        root = Path(__file__).resolve().parents[1]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "devtools.simulator", *self.args],
            cwd=root,
            env={**os.environ, "PYTHONPATH": str(root)},
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None  # stdout=PIPE
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
        assert self.process is not None  # set by __enter__
        self.process.terminate()
        self.process.wait(timeout=10)
