"""Builders for ingest events in the wire format."""

import itertools
import uuid

_counter = itertools.count()


def uid() -> str:
    return str(uuid.uuid4())


def event(type_: str, data: dict, *, id: str | None = None, at: str = "2026-11-01T00:00:00Z"):
    return {
        "id": id or f"evt-{next(_counter)}-{uid()[:8]}",
        "type": type_,
        "occurred_at": at,
        "data": data,
    }


def graph(
    *,
    lease_status="active",
    policy="reuse_by_environment",
    run_status="running",
    provider="daytona",
    sandbox="sbx-1",
):
    """A consistent set of ids and the events that create them."""
    ids = {k: uid() for k in ("env", "issue", "ws", "run", "lease")}
    events = [
        event(
            "environment.upserted",
            {"environment_id": ids["env"], "name": f"env-{ids['env'][:6]}", "provider": provider},
        ),
        event(
            "issue.upserted",
            {
                "issue_id": ids["issue"],
                "key": "PAP-142",
                "title": "A task",
                "status": "in_progress",
                "bound_workspace_id": ids["ws"],
            },
        ),
        event(
            "workspace.upserted",
            {"workspace_id": ids["ws"], "issue_id": ids["issue"], "save_state": "saved"},
        ),
        event(
            "run.upserted", {"run_id": ids["run"], "issue_id": ids["issue"], "status": run_status}
        ),
        event(
            "lease.upserted",
            {
                "lease_id": ids["lease"],
                "environment_id": ids["env"],
                "provider": provider,
                "provider_lease_id": sandbox,
                "status": lease_status,
                "lease_policy": policy,
                "acquired_at": "2026-11-01T00:00:00Z",
                "issue_id": ids["issue"],
                "workspace_id": ids["ws"],
                "run_id": ids["run"],
            },
        ),
    ]
    return ids, events
