"""A toolbox whose listing and download disagree is a failed attempt (issue 22 item 4).

When the hash listing and the download disagree — a Daytona toolbox that lies,
or a file a process keeps writing — every pass used to write 8 compare and
export receipts, leave the sandbox started and count nothing: no attempt, no
error, no backoff, never needs attention. A stale export is a failed attempt
(DOMAIN §2.3, §2.4): the sandbox the console started is stopped again, the
error is recorded in words, the record backs off and needs attention after 5;
a pass writes at most one compare and one failed export.

End to end: events through `load_events`, `reconcile --once`, against the
Daytona simulator over loopback (its toolbox lies, or a file changes on every
start) and against the local provider (a process appends to a file after
every listing).
"""

import hashlib

import pytest
from django.core.files.storage import default_storage
from django.utils import timezone

from devtools.simulator import HOME
from sandboxes import content_store
from sandboxes import models as m
from sandboxes.reconciler import machine
from sandboxes.reconciler.failures import backoff
from sandboxes.reconciler.plan import Action
from sandboxes.reconciler.steps import do_compare

from .conftest import SAVED, retirement_of
from .world import load, reconcile_once, record

pytestmark = pytest.mark.django_db

UNSAVED = b"work nobody saved\n"
ON_SANDBOX = {**SAVED, "notes/unsaved.txt": UNSAVED}
CHANGED = "the files changed while they were read"


def _lie(provider, sid):
    """Make the listing and the download disagree from now on; returns a function
    that stops it and answers the bytes the sandbox then holds."""
    if provider.name == "daytona":
        control = provider.server.control
        control.sandbox(sid, lie_downloads=True)

        def stop_lying():
            control.sandbox(sid, lie_downloads=False)
            return UNSAVED

        return stop_lying
    client = provider.client
    honest = client.hash_files
    target = client.root / sid / "fs" / "workspace" / "notes" / "unsaved.txt"

    def listed_then_written(sandbox_id, root, **kw):
        digests = honest(sandbox_id, root, **kw)
        target.write_bytes(target.read_bytes() + b"one more line\n")  # the agent's log
        return digests

    client.hash_files = listed_then_written

    def stop_writing():
        del client.hash_files
        return target.read_bytes()

    return stop_writing


def _kinds(r) -> list[str]:
    return list(r.receipts.order_by("created_at").values_list("kind", flat=True))


def test_a_download_that_contradicts_the_listing_fails_stops_and_backs_off(provider, tmp_path):
    sid = provider.make(ON_SANDBOX, files_root="workspace")
    lease = load(tmp_path, provider, sid, saved=SAVED)
    stop_lying = _lie(provider, sid)

    for attempt in range(1, 7):
        before = timezone.now()
        reconcile_once()
        after = timezone.now()
        r = record(lease)
        assert r.stage == m.Stage.FAILED, (attempt, r.stage, r.last_error)
        assert r.attempts == attempt
        assert r.needs_attention is (attempt >= 5)
        assert before + backoff(attempt) <= r.next_attempt_at <= after + backoff(attempt)
        # The error in words: which file, what was listed and what came down.
        assert r.last_error.startswith(f"StaleCompare: {CHANGED}"), r.last_error
        assert "workspace/notes/unsaved.txt listed sha256 " in r.last_error
        assert ", downloaded " in r.last_error
        # Inspection never leaves a sandbox running.
        assert provider.state(sid) == "stopped"
        assert not r.started_for_salvage
        # One compare and one failed export a pass, never a loop of them.
        compares = r.receipts.filter(kind=m.ReceiptKind.SALVAGE_COMPARE)
        exports = r.receipts.filter(kind=m.ReceiptKind.SALVAGE_EXPORT)
        assert compares.count() == attempt and exports.count() == attempt
        assert all(x.payload["stale"] and not x.payload["verified"] for x in exports)
        assert _kinds(r)[-1] == m.ReceiptKind.TERMINATION  # the console's own stop
        m.Retirement.objects.filter(pk=r.pk).update(next_attempt_at=timezone.now())

    failures = m.AuditEvent.objects.filter(
        object_id=str(r.pk), action__in=["retirement.failed", "retirement.needs_attention"]
    )
    assert failures.count() == 6
    assert failures.filter(action="retirement.needs_attention").count() == 1
    assert provider.deletes(sid) == []
    assert not m.Attachment.objects.exists()

    # Once the listing and the download agree again, the file is exported as the
    # sandbox holds it and the sandbox retired.
    held = stop_lying()
    reconcile_once()
    r.refresh_from_db()
    assert r.stage == m.Stage.RETIRED, r.last_error
    assert not r.needs_attention and r.attempts == 0
    (attachment,) = m.Attachment.objects.filter(retirement=r)
    with default_storage.open(attachment.file.name) as fh:
        assert fh.read() == held
    assert len(provider.deletes(sid)) == 1


# A file that changes on every start is the simulator's fault.
@pytest.mark.parametrize("provider", ["daytona"], indirect=True)
def test_a_file_that_changes_on_every_start_is_exported_as_the_sandbox_held_it(
    provider, tmp_path, monkeypatch
):
    sid = provider.make(ON_SANDBOX, files_root="workspace")
    control = provider.server.control
    control.sandbox(sid, flap="workspace/logs/boot.log")
    lease = load(tmp_path, provider, sid, saved=SAVED)

    # Pass 1: compared (the start wrote boot 1), then the store fails: a failed
    # attempt, and the sandbox is stopped again.
    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(content_store, "put_verified", full_disk)
        reconcile_once()
    r = record(lease)
    assert r.stage == m.Stage.FAILED and r.attempts == 1
    assert "No space left on device" in r.last_error
    assert provider.state(sid) == "stopped"

    # Pass 2: the export of that compare starts the sandbox, the file changed:
    # a failed attempt in words, stopped again, nothing exported.
    m.Retirement.objects.filter(pk=r.pk).update(next_attempt_at=timezone.now())
    reconcile_once()
    r.refresh_from_db()
    assert r.stage == m.Stage.FAILED and r.attempts == 2, (r.stage, r.last_error)
    assert CHANGED in r.last_error and "workspace/logs/boot.log" in r.last_error
    assert provider.state(sid) == "stopped"
    assert r.receipts.filter(kind=m.ReceiptKind.SALVAGE_COMPARE).count() == 1

    # Pass 3: compared and exported within one start, then retired.
    m.Retirement.objects.filter(pk=r.pk).update(next_attempt_at=timezone.now())
    reconcile_once()
    r.refresh_from_db()
    assert r.stage == m.Stage.RETIRED, r.last_error
    assert r.receipts.filter(kind=m.ReceiptKind.SALVAGE_COMPARE).count() == 2
    held = control.describe(sid)
    assert held["state"] == "destroyed" and held["starts"] == 3
    boot = held["files"][f"{HOME}/workspace/logs/boot.log"]["sha256"]
    exported = {a.path: a.sha256 for a in m.Attachment.objects.filter(retirement=r) if a.path}
    assert exported == {
        "logs/boot.log": boot,
        "notes/unsaved.txt": hashlib.sha256(UNSAVED).hexdigest(),
    }


# --- the machine's loop -------------------------------------------------------------------------


def test_a_pass_compares_a_record_once_and_leaves_its_sandbox_stopped(
    warm, local, reconcile, monkeypatch
):
    # Every compare is voided before the destroy (the workspace is saved again
    # right after it): the record compares again on the next pass, not in a loop.
    lease = warm(status=m.LeaseStatus.FAILED)

    def compare_then_save(plan, attempt_id, worker):
        do_compare(plan, attempt_id, worker)
        ws = lease.execution_workspace
        ws.saved_at = timezone.now()
        ws.save(update_fields=["saved_at"])

    monkeypatch.setitem(machine.STEPS, Action.COMPARE, compare_then_save)
    for n in (1, 2):
        reconcile()
        r = retirement_of(lease)
        assert r.receipts.filter(kind=m.ReceiptKind.SALVAGE_COMPARE).count() == n
        assert r.stage == m.Stage.COMPARING and r.next_attempt_at <= timezone.now()
        assert local.inner.get(lease.provider_lease_id).state == "stopped"
        assert not r.started_for_salvage
    assert local.count("destroy") == 0
    monkeypatch.undo()
    reconcile()
    r.refresh_from_db()
    assert r.stage == m.Stage.RETIRED and local.count("destroy") == 1
