"""The mirror moves a lease to another sandbox only on a newer reading, and
audits the move (issue 22 item 1, DOMAIN §2.3). Paperclip's
`environment_leases.updated_at` (paperclipai/paperclip
packages/db/src/schema/environment_leases.ts) is the reading's source time.

Fails on main before the fix: a reading at the same source time that named
another sandbox moved the lease silently (the upsert's newer-wins check lets an
equal time through), and no move left a trace in the audit trail.
"""

from datetime import timedelta

import pytest

from sandboxes import models as m
from sandboxes.mirror.sync import mirror_once

from .paperclip import ago

pytestmark = pytest.mark.django_db


def _set(paperclip, lease, **columns):
    sets = ", ".join(f'"{k}" = %s' for k in columns)
    paperclip.conn.execute(
        f"UPDATE environment_leases SET {sets} WHERE id = %s", [*columns.values(), lease["id"]]
    )


def test_a_reading_as_old_as_the_row_does_not_move_the_lease(paperclip):
    env = paperclip.environment()
    _, _, _, lease = paperclip.task(env, status="failed")
    when = ago(minutes=10)
    _set(paperclip, lease, updated_at=when)
    mirror_once(paperclip.dsn, full=True)

    _set(paperclip, lease, provider_lease_id="sbx-elsewhere", updated_at=when)
    report = mirror_once(paperclip.dsn, full=True)

    row = m.EnvironmentLease.objects.get(pk=lease["id"])
    assert row.provider_lease_id == lease["provider_lease_id"]
    (problem,) = [p for p in report.problems if p.table == "environment_leases"]
    assert problem.action == "skipped"
    assert "sbx-elsewhere" in problem.reason
    assert report.tables["environment_leases"].skipped == 1
    assert not m.AuditEvent.objects.filter(action="lease.sandbox_moved").exists()


def test_a_newer_reading_moves_the_lease_and_the_move_is_audited(paperclip):
    env = paperclip.environment()
    _, _, _, lease = paperclip.task(env, status="failed")
    when = ago(minutes=10)
    _set(paperclip, lease, updated_at=when)
    mirror_once(paperclip.dsn, full=True)

    _set(
        paperclip, lease, provider_lease_id="sbx-elsewhere", updated_at=when + timedelta(minutes=1)
    )
    report = mirror_once(paperclip.dsn, full=True)

    assert m.EnvironmentLease.objects.get(pk=lease["id"]).provider_lease_id == "sbx-elsewhere"
    assert not [p for p in report.problems if p.table == "environment_leases"]
    (moved,) = m.AuditEvent.objects.filter(action="lease.sandbox_moved")
    assert moved.object_id == str(lease["id"])
    assert moved.actor_label == "mirror"
    assert moved.before["provider_lease_id"] == lease["provider_lease_id"]
    assert moved.after["provider_lease_id"] == "sbx-elsewhere"
    # Mirroring the same reading again moves nothing and audits nothing more.
    mirror_once(paperclip.dsn, full=True)
    assert m.AuditEvent.objects.filter(action="lease.sandbox_moved").count() == 1
