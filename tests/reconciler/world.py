"""End to end, the way issue 10 reproduced its items: Paperclip's events go in
through `manage.py load_events`, `manage.py reconcile --once` runs a pass, and
the provider is the Daytona simulator over loopback HTTP.

`world.story()` builds one task's events in the wire format (DOMAIN §4.1) with
increasing `occurred_at`; `world.sandbox()` seeds a sandbox the way one seeds
Daytona (a name, then files under the workspace root).
"""

from __future__ import annotations

import itertools
import json
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

SAVED = {"README.md": b"# task\n", "src/app.py": b"print('saved')\n"}
_clock = itertools.count()


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
        self._files = itertools.count()
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
        path = self.tmp_path / f"events-{next(self._files)}.jsonl"
        path.write_text("\n".join(json.dumps(e) for e in events) + "\n")
        call_command("load_events", str(path), stdout=StringIO())

    def reconcile(self, times: int = 1) -> str:
        for _ in range(times):
            out = StringIO()
            call_command("reconcile", "--once", stdout=out)
            self.out = out.getvalue()
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
            client = DaytonaProvider(
                server.url,
                api_key="unused",
                budget_seconds=2,
                poll_interval=0.01,
                backoff_base=0.01,
                backoff_cap=0.05,
            )
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
