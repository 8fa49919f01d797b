"""Late, concurrent and inconsistent events (DOMAIN §4.1): ingest never lets an
older or a foreign fact overwrite a newer one."""

import json

import pytest

from devtools.events import event, graph
from sandboxes import models as m
from sandboxes.ingest.batch import UnitOfWork

pytestmark = pytest.mark.django_db


def lease_upsert(ids, status, at, **extra):
    data = {
        "lease_id": ids["lease"],
        "environment_id": ids["env"],
        "provider": "daytona",
        "provider_lease_id": "sbx-1",
        "status": status,
        "lease_policy": "reuse_by_environment",
        "acquired_at": "2026-11-01T00:00:00Z",
        "issue_id": ids["issue"],
        "workspace_id": ids["ws"],
        "run_id": ids["run"],
        **extra,
    }
    return event("lease.upserted", data, at=at)


def test_an_older_upsert_arriving_late_is_ignored(post_events):
    ids, events = graph()
    post_events(events)
    assert post_events([lease_upsert(ids, "active", "2026-11-01T05:00:00Z")]).status_code == 200
    late = lease_upsert(ids, "released", "2026-11-01T04:00:00Z", released_at="2026-11-01T04:00:00Z")
    assert post_events([late]).json() == {"accepted": 1, "duplicates": 0, "warnings": []}
    lease = m.EnvironmentLease.objects.get(pk=ids["lease"])
    assert (lease.status, lease.released_at) == ("active", None)


def test_order_inside_one_batch_does_not_matter(post_events):
    ids, events = graph()
    newer = event(
        "run.upserted",
        {"run_id": ids["run"], "issue_id": ids["issue"], "status": "running"},
        at="2026-11-01T06:00:00Z",
    )
    older = event(
        "run.upserted",
        {"run_id": ids["run"], "issue_id": ids["issue"], "status": "failed"},
        at="2026-11-01T05:00:00Z",
    )
    post_events([*events, newer, older])
    assert m.HeartbeatRun.objects.get(pk=ids["run"]).status == "running"


def test_a_late_release_does_not_release_a_lease_acquired_again(post_events):
    ids, events = graph(run_status="failed")
    post_events(events)
    post_events([lease_upsert(ids, "active", "2026-11-01T05:00:00Z")])
    release = event(
        "lease.released",
        {"lease_id": ids["lease"], "disposition": "destroy"},
        at="2026-11-01T03:00:00Z",
    )
    post_events([release])
    assert m.EnvironmentLease.objects.get(pk=ids["lease"]).status == "active"


def test_a_receipt_for_another_sandbox_is_refused(post_events):
    ids, events = graph()
    post_events(events)
    receipt = event(
        "receipt.recorded",
        {
            "lease_id": ids["lease"],
            "kind": "termination",
            "state": "stopped",
            "run_id": ids["run"],
            "provider_lease_id": "some-other-sandbox",
            "confirmed_at": "2026-11-01T03:00:00Z",
        },
    )
    intent = event(
        "intent.upserted",
        {
            "intent_id": "7d7f1c4e-4b7a-4a57-8e39-4b8a0a3e9d11",
            "lease_id": ids["lease"],
            "kind": "restore",
            "state": "pending",
        },
    )
    response = post_events([intent, receipt])
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {
            "index": 1,
            "path": "data.provider_lease_id",
            "message": "the lease's sandbox is 'sbx-1', not 'some-other-sandbox'",
        }
    ]
    assert not m.Receipt.objects.exists() and not m.LeaseIntent.objects.exists()


def test_naming_a_row_never_overwrites_it(post_events, monkeypatch):
    """A batch that only names a lease (here: a receipt) must not write placeholder
    values over it, even when it could not see the row (a concurrent batch had
    inserted it but not yet committed)."""
    ids, events = graph()
    post_events(events)
    real_load = UnitOfWork.load

    def load_without_leases(self, wanted):
        real_load(self, {k: v for k, v in wanted.items() if k is not m.EnvironmentLease})

    monkeypatch.setattr(UnitOfWork, "load", load_without_leases)
    receipt = event(
        "receipt.recorded",
        {
            "lease_id": ids["lease"],
            "kind": "stop_and_retain",
            "run_id": ids["run"],
            "provider_lease_id": "sbx-1",
            "confirmed_at": "2026-11-01T03:00:00Z",
        },
    )
    assert post_events([receipt]).status_code == 200
    lease = m.EnvironmentLease.objects.get(pk=ids["lease"])
    assert (lease.placeholder, lease.provider_lease_id, lease.provider) == (
        False,
        "sbx-1",
        "daytona",
    )
    assert m.Receipt.objects.count() == 1


def test_an_upsert_writes_only_the_columns_it_changes(post_events, monkeypatch):
    ids, events = graph()
    post_events(events)
    m.Issue.objects.filter(pk=ids["issue"]).update(title="renamed elsewhere")
    real_load = UnitOfWork.load

    def stale_load(self, wanted):  # the batch read the issue before the rename
        real_load(self, wanted)
        issue = self.rows[m.Issue][str(m.Issue.objects.get(pk=ids["issue"]).pk)]  # ids as text
        issue.title = "A task"
        self.baseline[(m.Issue, issue.pk)]["title"] = "A task"

    monkeypatch.setattr(UnitOfWork, "load", stale_load)
    post_events(
        [
            event(
                "issue.upserted",
                {"issue_id": ids["issue"], "status": "done"},
                at="2026-11-01T01:00:00Z",
            )
        ]
    )
    issue = m.Issue.objects.get(pk=ids["issue"])
    assert (issue.status, issue.title) == ("done", "renamed elsewhere")


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_finite_numbers_are_refused(post_events, constant):
    ids, events = graph()
    body = json.dumps({"events": events}).replace('"sbx-1"', '"sbx-1", "x": 1', 1)
    body = body.replace('"x": 1', f'"x": {constant}')
    response = post_events([], body=body)
    assert response.status_code == 400
    assert "JSON" in response.json()["errors"][0]["message"]
    assert m.Environment.objects.count() == 0
