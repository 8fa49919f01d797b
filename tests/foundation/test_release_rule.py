"""The release rule (DOMAIN §2.5, seed 002) for every (disposition, run status) pair."""

import pytest

from sandboxes.models import EnvironmentLease
from sandboxes.models.choices import Disposition, LeasePolicy, RunStatus
from sandboxes.release import release_outcome

from .events import event, graph

K, S, D = "keep_running", "stop_and_retain", "destroy"

# run status → lease status for a non-warm lease (DOMAIN §2.5)
STATUS = {
    "succeeded": "released",
    "interrupted": "released",
    "failed": "failed",
    "timed_out": "failed",
    "cancelled": "expired",
    "queued": "released",
    "scheduled_retry": "released",
    "running": "released",
}

EXPECTED = {
    # (requested, run): (disposition, status) for a reuse_by_environment lease
    **{(K, run): (S, STATUS[run]) for run in RunStatus.values if run != "succeeded"},
    (K, "succeeded"): (K, "released"),
    **{(S, run): (S, STATUS[run]) for run in RunStatus.values},
    **{(D, run): (D, STATUS[run]) for run in RunStatus.values},
}
# A warm sandbox that was stopped and retained still exists: never `expired`.
EXPECTED[(K, "cancelled")] = (S, "released")
EXPECTED[(S, "cancelled")] = (S, "released")


def test_the_table_covers_every_pair():
    assert len(EXPECTED) == len(Disposition.values) * len(RunStatus.values)


@pytest.mark.parametrize(("requested", "run"), sorted(EXPECTED))
def test_warm_lease(requested, run):
    assert (
        release_outcome(requested, run, LeasePolicy.REUSE_BY_ENVIRONMENT)
        == EXPECTED[(requested, run)]
    )


@pytest.mark.parametrize("run", RunStatus.values)
def test_non_warm_lease_status_follows_the_run(run):
    disposition, status = release_outcome(S, run, LeasePolicy.EPHEMERAL)
    assert (disposition, status) == (S, STATUS[run])


@pytest.mark.parametrize("run", ["failed", "cancelled", "timed_out", "interrupted"])
def test_keep_running_never_survives_an_unsuccessful_run(run):
    disposition, _ = release_outcome(K, run, LeasePolicy.REUSE_BY_ENVIRONMENT)
    assert disposition == S


def test_unknown_run_is_not_a_success():
    assert release_outcome(K, None, LeasePolicy.REUSE_BY_ENVIRONMENT) == (S, "released")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("run", "requested", "expected"),
    [
        ("failed", K, (S, "failed")),
        ("cancelled", K, (S, "released")),
        ("timed_out", S, (S, "failed")),
        ("interrupted", K, (S, "released")),
        ("succeeded", K, (K, "released")),
        ("cancelled", D, (D, "expired")),
    ],
)
def test_ingested_release_applies_the_rule(post_events, run, requested, expected):
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
    assert (lease.disposition, lease.status) == expected
    assert lease.released_at.isoformat() == "2026-11-01T02:00:00+00:00"
