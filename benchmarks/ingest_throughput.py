"""Ingest throughput: 50,000 events in batches of 500 through POST /api/v1/events
into PostgreSQL (a scratch database). Prints events per second.

    .venv/bin/python benchmarks/ingest_throughput.py [--events 50000] [--batch 500]

Target (issue 2): at least 3,000 events/s on a 2-core machine.
"""

import argparse
import json
import time
import uuid

from _bench_db import setup, teardown

DB = "paperclip_bench_ingest"


def lease_graph(n: int) -> list[dict]:
    """Seven events per sandbox, in the shapes Paperclip sends."""
    ids = {k: str(uuid.uuid4()) for k in ("issue", "ws", "run", "lease")}
    at = "2026-11-01T00:00:00Z"

    def ev(type_, data):
        return {"id": str(uuid.uuid4()), "type": type_, "occurred_at": at, "data": data}

    manifest = {f"src/f{i}.py": {"sha256": f"{i:064x}", "size": 100 + i} for i in range(5)}
    return [
        ev(
            "issue.upserted",
            {
                "issue_id": ids["issue"],
                "key": f"PAP-{n}",
                "title": "Task",
                "status": "in_progress",
                "bound_workspace_id": ids["ws"],
            },
        ),
        ev(
            "workspace.upserted",
            {
                "workspace_id": ids["ws"],
                "issue_id": ids["issue"],
                "save_state": "saved",
                "saved_at": at,
                "saved_manifest": manifest,
            },
        ),
        ev("run.upserted", {"run_id": ids["run"], "issue_id": ids["issue"], "status": "failed"}),
        ev(
            "lease.upserted",
            {
                "lease_id": ids["lease"],
                "environment_id": ENV,
                "provider": "daytona",
                "provider_lease_id": f"sbx-{n}",
                "status": "active",
                "lease_policy": "reuse_by_environment",
                "acquired_at": at,
                "issue_id": ids["issue"],
                "workspace_id": ids["ws"],
                "run_id": ids["run"],
            },
        ),
        ev("lease.released", {"lease_id": ids["lease"], "disposition": "keep_running"}),
        ev(
            "receipt.recorded",
            {
                "lease_id": ids["lease"],
                "kind": "termination",
                "state": "stopped",
                "run_id": ids["run"],
                "provider_lease_id": f"sbx-{n}",
                "confirmed_at": at,
            },
        ),
        ev(
            "intent.upserted",
            {
                "intent_id": str(uuid.uuid4()),
                "lease_id": ids["lease"],
                "kind": "stop_and_retain",
                "state": "confirmed",
            },
        ),
    ]


ENV = str(uuid.uuid4())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    args = parser.parse_args()

    setup(DB)
    try:
        from django.test import Client

        from sandboxes.models import ApiToken, EnvironmentLease, Receipt

        _, raw = ApiToken.issue("bench", "ingest")
        events = [
            {
                "id": str(uuid.uuid4()),
                "type": "environment.upserted",
                "occurred_at": "2026-11-01T00:00:00Z",
                "data": {"environment_id": ENV, "name": "bench", "provider": "daytona"},
            }
        ]
        n = 0
        while len(events) < args.events:
            events.extend(lease_graph(n))
            n += 1
        events = events[: args.events]
        bodies = [
            json.dumps({"events": events[i : i + args.batch]})
            for i in range(0, len(events), args.batch)
        ]

        client = Client()
        started = time.perf_counter()
        for body in bodies:
            response = client.post(
                "/api/v1/events",
                body,
                content_type="application/json",
                HTTP_AUTHORIZATION=f"Bearer {raw}",
            )
            assert response.status_code == 200, response.content[:500]
        elapsed = time.perf_counter() - started

        print(
            f"ingested {len(events):,} events in {len(bodies)} batches of {args.batch} "
            f"in {elapsed:.2f} s: {len(events) / elapsed:,.0f} events/s "
            f"({EnvironmentLease.objects.count():,} leases, {Receipt.objects.count():,} receipts)"
        )

        started = time.perf_counter()
        for body in bodies[:20]:
            client.post(
                "/api/v1/events",
                body,
                content_type="application/json",
                HTTP_AUTHORIZATION=f"Bearer {raw}",
            )
        replay = time.perf_counter() - started
        print(
            f"replaying {20 * args.batch:,} already-seen events: "
            f"{20 * args.batch / replay:,.0f} events/s (all duplicates)"
        )
    finally:
        if not args.keep:
            teardown(DB)


if __name__ == "__main__":
    main()
