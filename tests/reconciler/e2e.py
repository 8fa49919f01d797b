"""End-to-end helpers: Paperclip's events through `load_events`, then
`reconcile --once`, against the Daytona simulator over loopback (the console's
own Daytona client) or the local provider.

The events come from the one builder (devtools/events.py); the lease metadata
key `remoteCwd` is Paperclip's (its sandbox environment driver records the
sandbox's working directory there)."""

import io
import json
import uuid

from django.core.management import call_command

from devtools.events import Events, manifest, uid
from devtools.simulator import HOME, FaultConfig, SimulatorServer
from sandboxes import models as m
from sandboxes.providers.daytona import DaytonaProvider
from sandboxes.providers.local import LocalProvider


class Sim:
    """The simulator over loopback, driven by the console's Daytona client."""

    name = "daytona"

    def __init__(self, server):
        self.server = server
        self.client = DaytonaProvider(
            server.url,
            api_key="k",
            budget_seconds=5,
            poll_interval=0.01,
            backoff_base=0.01,
            backoff_cap=0.05,
        )

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


def load_events(tmp_path, events):
    path = tmp_path / f"events-{uuid.uuid4().hex[:8]}.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    call_command("load_events", str(path), stdout=io.StringIO())


def load(tmp_path, provider, sid, *, saved, remote_cwd=None, mode="auto"):
    ids, events = abandoned_warm(provider.name, sid, saved=saved, remote_cwd=remote_cwd, mode=mode)
    load_events(tmp_path, events)
    return m.EnvironmentLease.objects.get(pk=ids["lease"])


def reconcile_once():
    call_command("reconcile", "--once", stdout=io.StringIO())


def record(lease):
    return m.Retirement.objects.get(lease=lease)
