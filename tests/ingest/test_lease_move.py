"""A lease row names one sandbox; only a newer report moves it to another, and
the move is audited (issue 22 item 1, DOMAIN §4.1 and §2.3).

Fails on main before the fix: a lease re-sent naming another sandbox with the
same source time answered 200 and moved silently, and a newer move left no
trace in the audit trail, though it redirects every record on the old sandbox.
"""

from datetime import datetime, timedelta

import pytest

from devtools.events import EPOCH, Events, graph
from sandboxes import models as m

pytestmark = pytest.mark.django_db

T0 = datetime.fromisoformat(EPOCH)


def _lease_event(ids, events, sandbox, at, **overrides):
    """The graph's lease event, re-sent naming `sandbox` at `at`."""
    (lease,) = [e for e in events if e["type"] == "lease.upserted"]
    return Events().event(
        "lease.upserted", {**lease["data"], "provider_lease_id": sandbox, **overrides}, at=at
    )


def test_a_move_not_newer_than_the_row_is_refused_naming_the_field(post_events):
    ids, events = graph(sandbox="sbx-a")
    assert post_events(events).status_code == 200

    answer = post_events([_lease_event(ids, events, "sbx-b", EPOCH, status="failed")])

    assert answer.status_code == 400
    (error,) = answer.json()["errors"]
    assert error["path"] == "data.provider_lease_id"
    assert "sbx-a" in error["message"] and "sbx-b" in error["message"]
    lease = m.EnvironmentLease.objects.get(pk=ids["lease"])
    assert (lease.provider_lease_id, lease.status) == ("sbx-a", m.LeaseStatus.ACTIVE)
    assert not m.AuditEvent.objects.filter(action="lease.sandbox_moved").exists()


def test_an_older_report_naming_another_sandbox_changes_nothing(post_events):
    ids, events = graph(sandbox="sbx-a")
    post_events(events)
    answer = post_events([_lease_event(ids, events, "sbx-b", T0 - timedelta(minutes=5))])
    assert answer.status_code == 200
    assert m.EnvironmentLease.objects.get(pk=ids["lease"]).provider_lease_id == "sbx-a"
    assert not m.AuditEvent.objects.filter(action="lease.sandbox_moved").exists()


def test_a_newer_move_is_applied_and_audited(post_events, ingest_token):
    ids, events = graph(sandbox="sbx-a")
    post_events(events)

    answer = post_events([_lease_event(ids, events, "sbx-b", T0 + timedelta(minutes=5))])

    assert answer.status_code == 200, answer.json()
    assert m.EnvironmentLease.objects.get(pk=ids["lease"]).provider_lease_id == "sbx-b"
    (moved,) = m.AuditEvent.objects.filter(action="lease.sandbox_moved")
    assert moved.object_id == ids["lease"]
    assert moved.actor_label == f"token:{ingest_token[0].name}"
    assert moved.before["provider_lease_id"] == "sbx-a"
    assert moved.after["provider_lease_id"] == "sbx-b"
    assert "sbx-a" in moved.reason and "sbx-b" in moved.reason


def test_a_lease_new_in_the_batch_names_its_sandbox_freely(post_events):
    """The refusal is about moving a row the console holds, not about a batch that
    creates and then re-dates its own row."""
    ids, events = graph(sandbox="sbx-a")
    later = _lease_event(ids, events, "sbx-b", T0)
    assert post_events([*events, later]).status_code == 200
    assert m.EnvironmentLease.objects.get(pk=ids["lease"]).provider_lease_id == "sbx-b"
