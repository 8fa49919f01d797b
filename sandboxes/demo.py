"""A small demo fleet, described as Paperclip events so that it enters the
console through the same ingest path as a real runtime's rows."""

import uuid
from datetime import datetime, timedelta

from django.utils import timezone

DEMO_NAMESPACE = uuid.UUID("6f4740dc-32bc-5cce-8000-000000000000")


def _id(*parts: str) -> str:
    return str(uuid.uuid5(DEMO_NAMESPACE, "/".join(parts)))


def _ts(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


def demo_events(now: datetime | None = None) -> list[dict]:
    """Events for one local environment and a handful of tasks in the seeds' shapes."""
    now = now or timezone.now()
    events: list[dict] = []

    def add(type_: str, data: dict, at: datetime | None = None) -> None:
        events.append(
            {
                "id": _id("event", str(len(events))),
                "type": type_,
                "occurred_at": _ts(at or now),
                "data": data,
            }
        )

    env = _id("env", "local-demo")
    add(
        "environment.upserted",
        {
            "environment_id": env,
            "name": "local-demo",
            "provider": "local",
            "driver": "sandbox",
            "retirement_mode": "auto",
            "warm_retention_hours": 24,
        },
    )
    scenarios = [
        # (key, title, issue status, run status, lease status, policy, bound to lease?, stopped?)
        (
            "PAP-101",
            "Retry moved the task to a new workspace",
            "in_progress",
            "failed",
            "released",
            "reuse_by_environment",
            False,
            True,
        ),
        (
            "PAP-102",
            "Warm lease still resumable",
            "in_review",
            "succeeded",
            "released",
            "reuse_by_environment",
            True,
            True,
        ),
        (
            "PAP-103",
            "Failed warm lease with a confirmed stop",
            "todo",
            "failed",
            "failed",
            "reuse_by_environment",
            True,
            True,
        ),
        (
            "PAP-104",
            "Done task, warm sandbox suspended two days",
            "done",
            "succeeded",
            "released",
            "reuse_by_environment",
            True,
            True,
        ),
        (
            "PAP-105",
            "Superseded but still running",
            "in_progress",
            "succeeded",
            "retained",
            "reuse_by_environment",
            False,
            False,
        ),
    ]
    for key, title, issue_status, run_status, lease_status, policy, bound, stopped in scenarios:
        issue, ws, run, lease = (_id(key, part) for part in ("issue", "ws", "run", "lease"))
        newer_ws = _id(key, "ws-new")
        released = now - timedelta(hours=48 if issue_status == "done" else 2)
        add(
            "issue.upserted",
            {
                "issue_id": issue,
                "key": key,
                "title": title,
                "status": issue_status,
                "bound_workspace_id": ws if bound else newer_ws,
            },
        )
        add(
            "workspace.upserted",
            {
                "workspace_id": ws,
                "issue_id": issue,
                "save_state": "saved",
                "saved_at": _ts(released),
                "saved_manifest": {},
            },
        )
        if not bound:
            add(
                "workspace.upserted",
                {
                    "workspace_id": newer_ws,
                    "issue_id": issue,
                    "save_state": "saved",
                    "saved_at": _ts(now),
                },
            )
        add(
            "run.upserted",
            {
                "run_id": run,
                "issue_id": issue,
                "status": run_status,
                "started_at": _ts(released - timedelta(hours=1)),
                "finished_at": _ts(released),
            },
        )
        add(
            "lease.upserted",
            {
                "lease_id": lease,
                "environment_id": env,
                "provider": "local",
                "provider_lease_id": f"demo-{key.lower()}",
                "status": lease_status,
                "lease_policy": policy,
                "acquired_at": _ts(released - timedelta(hours=1)),
                "released_at": _ts(released) if lease_status != "retained" else None,
                "issue_id": issue,
                "workspace_id": ws,
                "run_id": run,
            },
        )
        if stopped:
            add(
                "receipt.recorded",
                {
                    "lease_id": lease,
                    "kind": "termination",
                    "state": "stopped",
                    "run_id": run,
                    "provider_lease_id": f"demo-{key.lower()}",
                    "confirmed_at": _ts(released),
                },
            )
    return events
