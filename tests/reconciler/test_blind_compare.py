"""A compare that saw nothing is not clean (issue 10 item 1, DOMAIN §2.3).

A lease without `metadata.remoteCwd` falls back to the environment's root; when
that root is missing, or empty while the task's files live elsewhere, the
compare must fail with "workspace root not found": no clean receipt, no export,
nothing destroyed, a retry, and needs_attention after 5 attempts. An empty root
with an empty saved manifest stays clean.

Reproduced end to end: events through `load_events`, then `reconcile --once`,
against the Daytona simulator over loopback and against the local provider.
Paperclip's lease metadata carries the sandbox's working directory as
`remoteCwd` (paperclipai/paperclip, the sandbox environment driver's lease
metadata); the toolbox answers a `cd` into a missing directory with a non-zero
exit, which our hash script maps to exit 3 (sandboxes/providers/wire.py).
"""

import hashlib
import io
import json
import uuid
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from sandboxes import models as m
from sandboxes.providers.daytona import DaytonaProvider
from sandboxes.providers.simulator import HOME, FaultConfig, SimulatorServer
from sandboxes.reconciler import machine

pytestmark = pytest.mark.django_db

SAVED = {"README.md": b"# task\n", "src/app.py": b"print('saved')\n"}
ON_SANDBOX = {**SAVED, "notes/unsaved.txt": b"work nobody saved\n"}


def manifest(files):
    return {p: {"sha256": hashlib.sha256(d).hexdigest(), "size": len(d)} for p, d in files.items()}


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
        info = self.client.create("blind", {"t": "1"}, files=files, root=files_root)
        with self.server.sim.lock:
            sb = self.server.sim.sandboxes[info.id]
            for d in empty_dirs:
                sb.dirs.add(f"{HOME}/{d}")
            for path, data in (other_files or {}).items():
                sb.dirs.update({f"{HOME}/workspace", f"{HOME}/workspace/cache"})
                sb.files[f"{HOME}/{path}"] = data
        self.client.stop(info.id)
        return info.id

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
        from sandboxes.providers.local import LocalProvider

        self.client = LocalProvider(root=root, budget_seconds=5)
        self.destroyed = []
        real = self.client.destroy

        def destroy(sid, **kw):
            self.destroyed.append(sid)
            return real(sid, **kw)

        self.client.destroy = destroy

    def make(self, files, *, files_root, empty_dirs=(), other_files=None):
        info = self.client.create("blind", {"t": "1"}, files=files, root=files_root)
        fs = self.client.root / info.id / "fs"
        for d in empty_dirs:
            (fs / d).mkdir(parents=True, exist_ok=True)
        for path, data in (other_files or {}).items():
            (fs / path).parent.mkdir(parents=True, exist_ok=True)
            (fs / path).write_bytes(data)
        self.client.stop(info.id)
        return info.id

    def deletes(self, sid):
        return [s for s in self.destroyed if s == sid]

    def state(self, sid):
        return str(self.client.get(sid).state)


@pytest.fixture(params=["daytona", "local"])
def provider(request, tmp_path, monkeypatch, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    if request.param == "daytona":
        server = SimulatorServer(seed=11, config=FaultConfig(transition_seconds=0.0), api_key="k")
        server.start()
        p = Sim(server)
    else:
        server = None
        p = Local(tmp_path / "sandboxes")
    monkeypatch.setattr(machine, "default_provider_for", lambda env, name="": p.client)
    yield p
    if server is not None:
        p.client.close()
        server.stop()


def load(tmp_path, provider, sid, *, saved, remote_cwd=None):
    """Paperclip's events for a failed warm lease whose task moved on (seed 001
    abandoned_warm), written as JSON lines and loaded with `load_events`."""
    ids = {k: str(uuid.uuid4()) for k in ("env", "issue", "ws", "ws2", "run", "lease")}

    def ev(type_, data):
        return {
            "id": str(uuid.uuid4()),
            "type": type_,
            "occurred_at": "2026-11-30T10:00:00Z",
            "data": data,
        }

    env = {
        "environment_id": ids["env"],
        "name": f"blind-{ids['env'][:6]}",
        "provider": provider.name,
        "retirement_mode": "auto",
    }
    events = [
        ev("environment.upserted", env),
        ev(
            "issue.upserted",
            {"issue_id": ids["issue"], "status": "in_progress", "bound_workspace_id": ids["ws2"]},
        ),
        ev(
            "workspace.upserted",
            {
                "workspace_id": ids["ws"],
                "issue_id": ids["issue"],
                "save_state": "saved",
                "saved_at": "2026-11-30T09:00:00Z",
                "saved_manifest": manifest(saved),
            },
        ),
        ev(
            "workspace.upserted",
            {"workspace_id": ids["ws2"], "issue_id": ids["issue"], "save_state": "saved"},
        ),
        ev("run.upserted", {"run_id": ids["run"], "issue_id": ids["issue"], "status": "failed"}),
        ev(
            "lease.upserted",
            {
                "lease_id": ids["lease"],
                "environment_id": ids["env"],
                "provider": provider.name,
                "provider_lease_id": sid,
                "status": "failed",
                "lease_policy": "reuse_by_environment",
                "acquired_at": "2026-11-30T08:00:00Z",
                "issue_id": ids["issue"],
                "workspace_id": ids["ws"],
                "run_id": ids["run"],
                "metadata": {"remoteCwd": remote_cwd} if remote_cwd else {},
            },
        ),
        ev(
            "receipt.recorded",
            {
                "lease_id": ids["lease"],
                "kind": "termination",
                "state": "stopped",
                "run_id": ids["run"],
                "provider_lease_id": sid,
                "confirmed_at": "2026-11-30T09:30:00Z",
            },
        ),
    ]
    path = tmp_path / f"events-{sid}.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    call_command("load_events", str(path), stdout=io.StringIO())
    return m.EnvironmentLease.objects.get(pk=ids["lease"])


def reconcile_once():
    call_command("reconcile", "--once", stdout=io.StringIO())


def record(lease):
    return m.Retirement.objects.get(lease=lease)


BLIND = {
    # The environment root exists but is empty; the task's files are in project/.
    "empty root, files elsewhere": dict(files_root="project", empty_dirs=("workspace",)),
    # The environment root does not exist at all.
    "missing root": dict(files_root="project"),
    # The root holds something else: files are found, but none the save names.
    "root holds other files": dict(
        files_root="project", other_files={"workspace/cache/blob.bin": b"cache"}
    ),
}


@pytest.mark.parametrize("case", sorted(BLIND))
def test_a_compare_that_saw_nothing_fails_retries_and_never_destroys(case, provider, tmp_path):
    sid = provider.make(ON_SANDBOX, **BLIND[case])
    lease = load(tmp_path, provider, sid, saved=SAVED)

    reconcile_once()

    r = record(lease)
    assert r.kind == m.RetirementKind.ABANDONED_WARM
    assert r.stage == m.Stage.FAILED, (r.stage, r.last_error)
    assert r.last_error.startswith("WorkspaceRootNotFound: workspace root not found")
    assert r.attempts == 1 and not r.needs_attention
    (compare,) = r.receipts.filter(kind=m.ReceiptKind.SALVAGE_COMPARE)
    assert compare.payload["clean"] is False
    assert compare.payload["root_not_found"] is True
    assert compare.payload["error"] == "workspace root not found"
    assert not r.receipts.filter(kind=m.ReceiptKind.SALVAGE_EXPORT).exists()
    assert not m.Attachment.objects.exists()
    assert provider.deletes(sid) == []
    # Inspection never leaves a sandbox running.
    assert provider.state(sid) == "stopped"
    assert not r.started_for_salvage

    # It retries on the normal backoff and never proves anything; after 5 attempts
    # it needs attention, and still nothing is destroyed.
    assert r.next_attempt_at - timezone.now() > timedelta(seconds=20)
    for _ in range(4):
        m.Retirement.objects.filter(pk=r.pk).update(next_attempt_at=timezone.now())
        reconcile_once()
    r.refresh_from_db()
    assert r.attempts == 5 and r.needs_attention
    assert r.stage == m.Stage.FAILED
    assert r.receipts.filter(kind=m.ReceiptKind.SALVAGE_COMPARE).count() == 5
    assert not r.receipts.filter(kind=m.ReceiptKind.SALVAGE_EXPORT).exists()
    assert provider.deletes(sid) == []
    assert provider.state(sid) == "stopped"
    lease.refresh_from_db()
    assert lease.status == m.LeaseStatus.FAILED


def test_an_attestation_still_retires_a_sandbox_whose_root_is_not_found(provider, tmp_path):
    """The operator's way out of a compare that can never see the files."""
    from django.contrib.auth.models import Permission, User

    from sandboxes import actions

    sid = provider.make(ON_SANDBOX, files_root="project")
    lease = load(tmp_path, provider, sid, saved=SAVED)
    reconcile_once()
    r = record(lease)
    assert r.stage == m.Stage.FAILED
    admin = User.objects.create_user("admin")
    admin.user_permissions.add(Permission.objects.get(codename="attest_retirement"))
    admin = User.objects.get(pk=admin.pk)
    actions.attest(r.pk, actor=admin, typed_sandbox_id=sid, reason="files are in project/")
    reconcile_once()
    r.refresh_from_db()
    assert r.stage == m.Stage.RETIRED
    assert len(provider.deletes(sid)) == 1


def test_the_files_under_remote_cwd_are_compared_not_the_environment_root(provider, tmp_path):
    sid = provider.make(ON_SANDBOX, files_root="project", empty_dirs=("workspace",))
    lease = load(tmp_path, provider, sid, saved=SAVED, remote_cwd="project")
    reconcile_once()
    r = record(lease)
    assert r.stage == m.Stage.RETIRED, (r.stage, r.last_error)
    export = r.receipts.get(kind=m.ReceiptKind.SALVAGE_EXPORT)
    assert [f["path"] for f in export.payload["files"]] == ["notes/unsaved.txt"]


def test_an_empty_root_with_an_empty_saved_manifest_is_clean(provider, tmp_path):
    sid = provider.make({}, files_root="workspace", empty_dirs=("workspace",))
    lease = load(tmp_path, provider, sid, saved={})
    reconcile_once()
    r = record(lease)
    assert r.stage == m.Stage.RETIRED, (r.stage, r.last_error)
    compare = r.receipts.get(kind=m.ReceiptKind.SALVAGE_COMPARE)
    assert compare.payload["clean"] is True and not compare.payload.get("root_not_found")
    assert len(provider.deletes(sid)) == 1


def test_some_saved_files_missing_is_a_diff_not_a_blind_compare(provider, tmp_path):
    """Only when NONE of the saved files is found is the compare blind."""
    sid = provider.make({"README.md": SAVED["README.md"]}, files_root="workspace")
    lease = load(tmp_path, provider, sid, saved=SAVED)
    reconcile_once()
    r = record(lease)
    compare = r.receipts.get(kind=m.ReceiptKind.SALVAGE_COMPARE)
    assert compare.payload["deleted"] == ["src/app.py"]
    assert not compare.payload.get("root_not_found")
    assert r.stage == m.Stage.RETIRED, (r.stage, r.last_error)


def test_the_operator_sees_workspace_root_not_found_with_its_receipt(provider, tmp_path, client):
    from django.urls import reverse

    from sandboxes.roles import REVIEWERS
    from tests.factories import UserFactory

    sid = provider.make(ON_SANDBOX, files_root="project", empty_dirs=("workspace",))
    lease = load(tmp_path, provider, sid, saved=SAVED)
    reconcile_once()
    r = record(lease)
    client.force_login(UserFactory(groups=[REVIEWERS]))
    body = client.get(reverse("sandbox-detail", kwargs={"pk": r.pk})).content.decode()
    receipts = body[body.index('id="receipts"') :]
    assert "workspace root not found" in receipts
    assert "none of the 2 saved file(s) is under &#x27;workspace&#x27;" in receipts
    assert "unsaved files" not in receipts
    status = body[body.index('id="panel"') : body.index('id="receipts"')]
    assert "workspace root not found" in status  # the proof line and the last error
