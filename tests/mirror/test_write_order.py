"""Ingest and the mirror write the same rows; the newer source time wins whichever
arrives last (issue 10 item 10, DOMAIN §4.1).

Fails on main before the fix: the mirror did not record a row's source time and
overwrote it unconditionally, so a late, older mirror reading clobbered a newer
ingested release, and an older ingested event then clobbered the mirrored row.
Paperclip's tables carry `updated_at` (paperclipai/paperclip:
packages/db/src/schema/environment_leases.ts), which is the source time here.
"""

import pytest

from devtools.events import Events
from sandboxes import models as m
from sandboxes.ingest import apply_events, validate_batch
from sandboxes.mirror.sync import mirror_once

from .paperclip import ago

pytestmark = pytest.mark.django_db


def ingest(*events):
    batch, errors = validate_batch({"events": list(events)}, max_events=1000)
    assert not errors, errors
    return apply_events("test", batch)


def set_updated_at(paperclip, table, pk, when):
    paperclip.conn.execute(f"UPDATE {table} SET updated_at = %s WHERE id = %s", [when, pk])


def released(lease_id, when, status, disposition="keep_running"):
    return Events().released(
        str(lease_id), disposition, status=status, id=f"rel-{lease_id}-{when.timestamp()}", at=when
    )


def test_the_mirror_records_the_source_time_of_each_row(paperclip):
    env = paperclip.environment()
    _, _, _, lease = paperclip.task(env, status="retained", released_at=None)
    when = ago(minutes=30)
    set_updated_at(paperclip, "environment_leases", lease["id"], when)
    mirror_once(paperclip.dsn, full=True)
    row = m.EnvironmentLease.objects.get(pk=lease["id"])
    assert row.source_updated_at == when


def test_a_late_older_event_never_overwrites_newer_mirrored_state(paperclip):
    env = paperclip.environment()
    _, _, _, lease = paperclip.task(env, status="retained", released_at=ago(minutes=10))
    set_updated_at(paperclip, "environment_leases", lease["id"], ago(minutes=10))
    mirror_once(paperclip.dsn, full=True)

    # Older than the mirrored row: a late retry of an old release.
    ingest(released(lease["id"], ago(hours=1), "expired", disposition="destroy"))
    row = m.EnvironmentLease.objects.get(pk=lease["id"])
    assert (row.status, row.disposition) == (m.LeaseStatus.RETAINED, None)


def test_a_late_older_mirror_reading_never_overwrites_a_newer_event(paperclip):
    env = paperclip.environment()
    _, _, _, lease = paperclip.task(env, status="retained", released_at=None)
    set_updated_at(paperclip, "environment_leases", lease["id"], ago(minutes=20))
    mirror_once(paperclip.dsn, full=True)
    ingest(released(lease["id"], ago(minutes=1), "released", disposition="stop_and_retain"))
    # The source still says `retained`, dated before the event: a full re-mirror
    # (a cursor reset, say) re-reads it and must not win.
    mirror_once(paperclip.dsn, full=True)
    row = m.EnvironmentLease.objects.get(pk=lease["id"])
    assert row.status == m.LeaseStatus.RELEASED
    # A genuinely newer mirror reading still wins.
    set_updated_at(paperclip, "environment_leases", lease["id"], ago(seconds=0))
    mirror_once(paperclip.dsn, full=True)
    assert m.EnvironmentLease.objects.get(pk=lease["id"]).status == m.LeaseStatus.RETAINED
