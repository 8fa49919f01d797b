"""End to end: Paperclip's events go in through `manage.py load_events`,
`manage.py reconcile --once` runs a pass, and the provider is the Daytona
simulator over loopback HTTP (the console's own Daytona client) or the local
provider. The one world builder for the reconciler's end-to-end tests.

- `world` / `world_factory`: a World over a fresh simulator. `world.story()`
  builds one task's events in the wire format (DOMAIN §4.1) with increasing
  `occurred_at`; `world.sandbox()` seeds a sandbox the way one seeds Daytona
  (a name, then files under the workspace root).
- `provider`: the same test against the simulator, then the local provider
  (`Sim`, `Local`), fed one seed's events by `abandoned_warm` and `load`.

conftest.py exposes the three fixtures to every test in this folder.

The events come from the one builder (devtools/events.py); the lease metadata
key `remoteCwd` is Paperclip's (its sandbox environment driver records the
sandbox's working directory there).
"""

from __future__ import annotations

import itertools
import json
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from devtools.events import Events, manifest, uid
from devtools.simulator import HOME, FaultConfig, SimulatorServer
from sandboxes import models as m
from sandboxes.providers.daytona import DaytonaProvider
from sandboxes.providers.local import LocalProvider

SAVED = {"README.md": b"# task\n", "src/app.py": b"print('saved')\n"}
_clock = itertools.count()


def daytona_client(url: str, *, api_key: str, budget_seconds: float) -> DaytonaProvider:
    """The console's Daytona client on the simulator, with fast polls and backoff
    so that faults stay short."""
    return DaytonaProvider(
        url,
        api_key=api_key,
        budget_seconds=budget_seconds,
        poll_interval=0.01,
        backoff_base=0.01,
        backoff_cap=0.05,
    )


def load_events(tmp_path, events) -> None:
    """`manage.py load_events` on a JSON-lines file of `events`."""
    path = tmp_path / f"events-{uuid.uuid4().hex[:8]}.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    call_command("load_events", str(path), stdout=StringIO())


def reconcile_once() -> str:
    """`manage.py reconcile --once`; what it printed."""
    out = StringIO()
    call_command("reconcile", "--once", stdout=out)
    return out.getvalue()


# --- one task's story, on a World over the simulator -----------------------------------


@dataclass
class Story:
    """One task's rows as Paperclip reports them, in order."""

    env: str
    sandbox: str
    policy: str = "reuse_by_environment"
    ids: dict = field(default_factory=dict)
    events: list = field(default_factory=list)
    start: object = None

    def __post_init__(self):
        self.ids = {k: uid() for k in ("issue", "ws", "run", "lease")}
        self.start = timezone.now() - timedelta(hours=6)
        # Each event a second after the last, from six hours ago.
        self.ev = Events(ids=lambda _n, _type: f"e-{uid()}", at=self.tick)

    def tick(self):
        return self.start + timedelta(seconds=next(_clock))

    def emit(self, type_: str, data: dict, *, at=None) -> dict:
        """Any event, data as given."""
        event = self.ev.event(type_, data, at=at)
        self.events.append(event)
        return event

    def _add(self, event: dict) -> Story:
        self.events.append(event)
        return self

    def task(
        self,
        *,
        run_status="running",
        lease_status="active",
        issue_status="in_progress",
        files=SAVED,
        writer=False,
        **lease,
    ) -> Story:
        i, ev = self.ids, self.ev
        saved = self.start - timedelta(minutes=5)
        self._add(ev.issue(i["issue"], issue_status, key="PAP-1"))
        self._add(
            ev.workspace(
                i["ws"],
                i["issue"],
                saved_at=saved,
                final_checkpoint_at=saved,
                saved_manifest=manifest(files),
                **({"writer_run_id": i["run"]} if writer else {}),
            )
        )
        self._add(ev.issue(i["issue"], issue_status, key="PAP-1", bound_workspace_id=i["ws"]))
        self.run(run_status)
        if lease_status in ("released", "failed", "expired"):
            # As Paperclip settles a lease it terminated (remote-execution-termination.ts
            # @ 555fcfc, hasRemoteTerminationReceipt lines 29-30): released, cleanup done.
            lease.setdefault("released_at", self.start + timedelta(hours=1))
            lease.setdefault("cleanup_status", "success")
        return self._add(
            ev.lease(
                **{
                    "lease_id": i["lease"],
                    "environment_id": self.env,
                    "provider": "daytona",
                    "provider_lease_id": self.sandbox,
                    "status": lease_status,
                    "lease_policy": self.policy,
                    "acquired_at": self.start - timedelta(hours=1),
                    "issue_id": i["issue"],
                    "workspace_id": i["ws"],
                    "run_id": i["run"],
                    **lease,
                }
            )
        )

    def run(self, status: str) -> Story:
        return self._add(self.ev.run(self.ids["run"], self.ids["issue"], status))

    def release(self, disposition: str, **extra) -> Story:
        return self._add(self.ev.released(self.ids["lease"], disposition, **extra))

    def stop_and_retain(self, **extra) -> Story:
        """Paperclip's settled stop-only cleanup: the termination receipt (state
        stopped) and the stop-and-retain receipt, confirmed at the same moment
        (sandbox-stop-and-retain.ts @ c5df623, settleStopOnlyCleanup lines 98-128;
        hasConfirmedSandboxStopAndRetain line 33 requires the two to match)."""
        at = self.tick()
        self.stop_receipt(confirmed_at=at, request_id=f"term-{uid()}", **extra)
        return self.stop_receipt(
            kind="stop_and_retain", confirmed_at=at, request_id=f"sar-{uid()}", **extra
        )

    def stop_receipt(self, kind="termination", **extra) -> Story:
        fields = {
            "run_id": self.ids["run"],
            "provider_lease_id": self.sandbox,
            "confirmed_at": self.tick(),
            **extra,
        }
        return self._add(self.ev.receipt(self.ids["lease"], kind=kind, **fields))

    def rebind(self) -> Story:
        """A Retry binds the task to a fresh workspace (seed 001)."""
        ws = uid()
        self._add(self.ev.workspace(ws, self.ids["issue"]))
        return self._add(
            self.ev.issue(self.ids["issue"], "in_progress", key="PAP-1", bound_workspace_id=ws)
        )

    def issue(self, status: str) -> Story:
        return self._add(self.ev.issue(self.ids["issue"], status, key="PAP-1"))

    def writer(self, run_id) -> Story:
        return self._add(self.ev.workspace(self.ids["ws"], self.ids["issue"], writer_run_id=run_id))

    def lease(self) -> m.EnvironmentLease:
        return m.EnvironmentLease.objects.get(pk=self.ids["lease"])

    def record(self) -> m.Retirement | None:
        return (
            m.Retirement.objects.filter(provider_lease_id=self.sandbox).order_by("listed_at").last()
        )


class World:
    def __init__(self, server: SimulatorServer, tmp_path, mode: str):
        self.server = server
        self.sim = server.sim
        self.tmp_path = tmp_path
        self.env = uid()
        self.mode = mode
        self.out = ""
        self.load(
            [
                Events(at=timezone.now() - timedelta(days=1)).environment(
                    self.env, f"sim-{self.env[:6]}", "daytona", retirement_mode=mode
                )
            ]
        )

    def sandbox(self, files=SAVED, *, state="stopped") -> str:
        with self.sim.lock:
            sid = self.sim.create({"name": f"sbx-{uid()[:8]}", "labels": {"test": "1"}})["id"]
            sb = self.sim.sandboxes[sid]
            sb.dirs.add(f"{HOME}/workspace")
            for path, data in files.items():
                sb.files[f"{HOME}/workspace/{path}"] = data
                parent = f"{HOME}/workspace/{path}".rsplit("/", 1)[0]
                sb.dirs.add(parent)
            sb.state = state
        return sid

    def story(self, files=SAVED, *, state="stopped", policy="reuse_by_environment") -> Story:
        return Story(env=self.env, sandbox=self.sandbox(files, state=state), policy=policy)

    def state(self, sid: str) -> str:
        with self.sim.lock:
            sb = self.sim._find(sid)
            return "destroyed" if sb is None else sb.state

    def calls(self, sid: str, method: str | None = None, op: str | None = None) -> list[dict]:
        return [
            c
            for c in list(self.sim.calls)
            if c.get("sandbox_id") == sid
            and (method is None or c.get("method") == method)
            and (op is None or c.get("operation") == op)
        ]

    def mutations(self, sid: str) -> list[str]:
        """Provider calls that change the sandbox: start, stop, archive, delete."""
        return [
            c["operation"]
            for c in self.calls(sid)
            if c.get("operation") in ("start", "stop", "archive", "destroy")
        ]

    def load(self, events) -> None:
        load_events(self.tmp_path, events)

    def reconcile(self, times: int = 1) -> str:
        for _ in range(times):
            self.out = reconcile_once()
        return self.out


@pytest.fixture
def world_factory(tmp_path, monkeypatch, settings):
    """World(mode) over a fresh simulator; fast budgets so faults stay short."""
    settings.MEDIA_ROOT = tmp_path / "media"
    servers = []
    clients = []

    def make(mode="auto", **faults) -> World:
        server = SimulatorServer(seed=11, config=FaultConfig(transition_seconds=0.01, **faults))
        server.start()
        servers.append(server)

        def provider_for(environment, provider_name=""):
            client = daytona_client(server.url, api_key="unused", budget_seconds=2)
            clients.append(client)
            return client

        # `reconcile --once` builds its clients here: point them at the simulator.
        monkeypatch.setattr("sandboxes.reconciler.worker.default_provider_for", provider_for)
        return World(server, tmp_path, mode)

    yield make
    for client in clients:
        client.close()
    for server in servers:
        server.stop()


@pytest.fixture
def world(world_factory):
    return world_factory("auto")


# --- one seed against either provider (the `provider` fixture) ---------------------------


class Sim:
    """The simulator over loopback, driven by the console's Daytona client."""

    name = "daytona"

    def __init__(self, server):
        self.server = server
        self.client = daytona_client(server.url, api_key="k", budget_seconds=5)

    def make(self, files, *, files_root, empty_dirs=(), other_files=None):
        info = self.client.create(
            f"e2e-{uuid.uuid4().hex[:8]}", {"t": "1"}, files=files, root=files_root
        )
        with self.server.sim.lock:
            sb = self.server.sim.sandboxes[info.id]
            for d in empty_dirs:
                sb.dirs.add(f"{HOME}/{d}")
            for path, data in (other_files or {}).items():
                sb.dirs.update({f"{HOME}/workspace", f"{HOME}/workspace/cache"})
                sb.files[f"{HOME}/{path}"] = data
        self.client.stop(info.id)
        return info.id

    def write(self, sid, path, data):
        """A run writes a file in the sandbox (through the toolbox upload)."""
        self.client.start(sid)
        with self.server.sim.lock:
            self.server.sim.sandboxes[sid].files[f"{HOME}/{path}"] = data

    def deletes(self, sid):
        return [
            c
            for c in self.server.sim.calls
            if c["method"] == "DELETE" and c.get("sandbox_id") == sid
        ]

    def state(self, sid):
        return str(self.client.get(sid).state)


class Local:
    name = "local"

    def __init__(self, root):
        self.client = LocalProvider(root=root, budget_seconds=5)
        self.destroyed = []
        real = self.client.destroy

        def destroy(sid, **kw):
            self.destroyed.append(sid)
            return real(sid, **kw)

        self.client.destroy = destroy

    def make(self, files, *, files_root, empty_dirs=(), other_files=None):
        info = self.client.create(
            f"e2e-{uuid.uuid4().hex[:8]}", {"t": "1"}, files=files, root=files_root
        )
        fs = self.client.root / info.id / "fs"
        for d in empty_dirs:
            (fs / d).mkdir(parents=True, exist_ok=True)
        for path, data in (other_files or {}).items():
            (fs / path).parent.mkdir(parents=True, exist_ok=True)
            (fs / path).write_bytes(data)
        self.client.stop(info.id)
        return info.id

    def write(self, sid, path, data):
        self.client.start(sid)
        target = self.client.root / sid / "fs" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)

    def deletes(self, sid):
        return [s for s in self.destroyed if s == sid]

    def state(self, sid):
        return str(self.client.get(sid).state)


def start_provider(kind, tmp_path):
    """(provider, stop) for "daytona" (the simulator on loopback) or "local"."""
    if kind == "daytona":
        server = SimulatorServer(seed=11, config=FaultConfig(transition_seconds=0.0), api_key="k")
        server.start()
        p = Sim(server)

        def stop():
            p.client.close()
            server.stop()

        return p, stop
    return Local(tmp_path / "sandboxes"), lambda: None


@pytest.fixture(params=["daytona", "local"])
def provider(request, tmp_path, monkeypatch, settings):
    """End to end: the Daytona simulator over loopback, then the local provider, as
    the provider every `reconcile --once` in the test uses."""
    p, stop = start_provider(request.param, tmp_path)
    monkeypatch.setattr(
        "sandboxes.reconciler.worker.default_provider_for", lambda env, name="": p.client
    )
    yield p
    stop()


_events = Events(ids=lambda _n, _type: uid(), at="2026-11-30T10:00:00Z")
event = _events.event


def abandoned_warm(provider_name, sid, *, saved, remote_cwd=None, mode="auto"):
    """Paperclip's events for a failed warm lease whose task moved on (seed 001
    abandoned_warm): (ids, events)."""
    ev = _events
    ids = {k: uid() for k in ("env", "issue", "ws", "ws2", "run", "lease")}
    lease = {
        "lease_id": ids["lease"],
        "environment_id": ids["env"],
        "provider": provider_name,
        "provider_lease_id": sid,
        "status": "failed",
        "lease_policy": "reuse_by_environment",
        "acquired_at": "2026-11-30T08:00:00Z",
        # As Paperclip settles a terminated lease (remote-execution-termination.ts
        # @ 555fcfc, hasRemoteTerminationReceipt lines 29-30): its stop counts.
        "released_at": "2026-11-30T09:30:00Z",
        "cleanup_status": "success",
        "issue_id": ids["issue"],
        "workspace_id": ids["ws"],
        "run_id": ids["run"],
        "metadata": {"remoteCwd": remote_cwd} if remote_cwd else {},
    }
    ids["lease_data"] = lease
    events = [
        ev.environment(ids["env"], f"e2e-{ids['env'][:6]}", provider_name, retirement_mode=mode),
        ev.issue(ids["issue"], "in_progress", bound_workspace_id=ids["ws2"]),
        ev.workspace(
            ids["ws"],
            ids["issue"],
            saved_at="2026-11-30T09:00:00Z",
            saved_manifest=manifest(saved),
        ),
        ev.workspace(ids["ws2"], ids["issue"]),
        ev.run(ids["run"], ids["issue"], "failed"),
        ev.lease(**lease),
        ev.receipt(
            ids["lease"],
            run_id=ids["run"],
            provider_lease_id=sid,
            confirmed_at="2026-11-30T09:30:00Z",
        ),
    ]
    return ids, events


def load(tmp_path, provider, sid, *, saved, remote_cwd=None, mode="auto"):
    ids, events = abandoned_warm(provider.name, sid, saved=saved, remote_cwd=remote_cwd, mode=mode)
    load_events(tmp_path, events)
    return m.EnvironmentLease.objects.get(pk=ids["lease"])


def record(lease):
    return m.Retirement.objects.get(lease=lease)
