"""Releases are recorded as sent (DOMAIN §2.5, seed 002; issue 10 item 3).

Fails on main: ingest rewrote the disposition and derived the status from the
run's outcome (keep_running → stop_and_retain after an unsuccessful run, and
cancelled → expired), and it ignored an event's `status` and `released_at`.
"""

import pytest

from devtools.events import event, graph
from sandboxes.models import EnvironmentLease
from sandboxes.models.choices import RunStatus

K, S, D = "keep_running", "stop_and_retain", "destroy"
DERIVED = {K: "retained", S: "released", D: "expired"}


@pytest.mark.django_db
@pytest.mark.parametrize("run", RunStatus.values)
@pytest.mark.parametrize("requested", [K, S, D])
def test_ingested_release_is_recorded_as_sent_whatever_the_run(post_events, run, requested):
    ids, events = graph(run_status=run)
    events.append(
        event(
            "lease.released",
            {"lease_id": ids["lease"], "disposition": requested},
            at="2026-11-01T02:00:00Z",
        )
    )
    response = post_events(events)
    assert response.status_code == 200, response.json()
    lease = EnvironmentLease.objects.get(pk=ids["lease"])
    assert (lease.disposition, lease.status) == (requested, DERIVED[requested])
    assert lease.released_at.isoformat() == "2026-11-01T02:00:00+00:00"


@pytest.mark.django_db
def test_status_and_released_at_are_recorded_as_sent(post_events):
    ids, events = graph(run_status="failed", policy="retain_on_failure")
    events.append(
        event(
            "lease.released",
            {
                "lease_id": ids["lease"],
                "disposition": S,
                "status": "failed",
                "released_at": "2026-11-01T01:30:00Z",
            },
            at="2026-11-01T02:00:00Z",
        )
    )
    response = post_events(events)
    assert response.status_code == 200, response.json()
    lease = EnvironmentLease.objects.get(pk=ids["lease"])
    assert (lease.disposition, lease.status) == (S, "failed")
    assert lease.released_at.isoformat() == "2026-11-01T01:30:00+00:00"


@pytest.mark.django_db
def test_a_bad_release_status_is_named(post_events):
    ids, events = graph()
    events.append(
        event("lease.released", {"lease_id": ids["lease"], "disposition": K, "status": "asleep"})
    )
    response = post_events(events)
    assert response.status_code == 400
    assert any(e["path"] == "data.status" for e in response.json()["errors"])
