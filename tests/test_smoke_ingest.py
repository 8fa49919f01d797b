import json
import uuid

import pytest

from sandboxes.models import EnvironmentLease, Receipt

pytestmark = pytest.mark.django_db


def test_smoke(client, ingest_token):
    _, raw = ingest_token
    env, lease, run, issue = (str(uuid.uuid4()) for _ in range(4))
    events = [
        {
            "id": "e1",
            "type": "environment.upserted",
            "occurred_at": "2026-11-01T00:00:00Z",
            "data": {"environment_id": env, "name": "daytona-prod", "provider": "daytona"},
        },
        {
            "id": "e2",
            "type": "run.upserted",
            "occurred_at": "2026-11-01T00:00:00Z",
            "data": {"run_id": run, "issue_id": issue, "status": "failed"},
        },
        {
            "id": "e3",
            "type": "lease.upserted",
            "occurred_at": "2026-11-01T00:00:00Z",
            "data": {
                "lease_id": lease,
                "environment_id": env,
                "provider": "daytona",
                "provider_lease_id": "sbx-1",
                "status": "active",
                "lease_policy": "reuse_by_environment",
                "acquired_at": "2026-11-01T00:00:00Z",
                "run_id": run,
                "issue_id": issue,
            },
        },
        {
            "id": "e4",
            "type": "lease.released",
            "occurred_at": "2026-11-01T01:00:00Z",
            "data": {"lease_id": lease, "disposition": "keep_running"},
        },
        {
            "id": "e5",
            "type": "receipt.recorded",
            "occurred_at": "2026-11-01T01:00:00Z",
            "data": {
                "lease_id": lease,
                "kind": "termination",
                "state": "stopped",
                "run_id": run,
                "provider_lease_id": "sbx-1",
                "confirmed_at": "2026-11-01T01:00:01Z",
            },
        },
    ]
    r = client.post(
        "/api/v1/events",
        json.dumps({"events": events}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {raw}",
    )
    assert r.status_code == 200, r.content
    assert r.json() == {"accepted": 5, "duplicates": 0}
    lease_row = EnvironmentLease.objects.get(pk=lease)
    assert (lease_row.status, lease_row.disposition) == ("failed", "stop_and_retain")
    assert Receipt.objects.count() == 1
    r = client.post(
        "/api/v1/events",
        json.dumps({"events": events}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {raw}",
    )
    assert r.json() == {"accepted": 0, "duplicates": 5}
