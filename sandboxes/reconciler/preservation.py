"""Preservation source (seed 003, DOMAIN §2.5): a cancelled run's stopped, reusable
sandbox still holds its unsaved files behind the workspace's writer hold.
Record one file-recovery action for it, once; the lease and receipts stay as
they are."""

from __future__ import annotations

import uuid

from django.db.models import Exists, F, OuterRef, Q

from sandboxes.models import EnvironmentLease, Receipt, RecoveryAction
from sandboxes.models.choices import (
    WARM_POLICIES,
    LeaseStatus,
    ReceiptKind,
    RecoveryStatus,
    RunStatus,
)

from .candidates import GRAPH_COMPLETE

FILE_RECOVERY = "file_recovery"
_NAMESPACE = uuid.UUID("d8e4d245-2a43-4654-8000-000000000003")


def recovery_action_id(lease_id) -> uuid.UUID:
    """Deterministic, so two reconcilers racing record the same single row."""
    return uuid.uuid5(_NAMESPACE, f"file-recovery/{lease_id}")


def preservation_sources(environment_id=None):
    confirmed_stop_and_retain = Receipt.objects.filter(
        lease=OuterRef("pk"), run=OuterRef("heartbeat_run_id"), kind=ReceiptKind.STOP_AND_RETAIN
    )
    recorded = RecoveryAction.objects.filter(lease=OuterRef("pk"), kind=FILE_RECOVERY)
    qs = EnvironmentLease.objects.filter(
        GRAPH_COMPLETE,
        Q(status=LeaseStatus.RELEASED, lease_policy__in=WARM_POLICIES),
        heartbeat_run__status=RunStatus.CANCELLED,
        execution_workspace__writer_run_id=F("heartbeat_run_id"),
        issue_id__isnull=False,
    ).filter(Exists(confirmed_stop_and_retain), ~Exists(recorded))
    if environment_id is not None:
        qs = qs.filter(environment_id=environment_id)
    return qs


def record_preservation_sources(environment_id=None) -> int:
    """Record missing file-recovery actions: 2 queries whatever the fleet size."""
    rows = list(
        preservation_sources(environment_id).values(
            "id", "issue_id", "heartbeat_run_id", "execution_workspace_id", "provider_lease_id"
        )
    )
    if not rows:
        return 0
    actions = [
        RecoveryAction(
            id=recovery_action_id(row["id"]),
            source_issue_id=row["issue_id"],
            kind=FILE_RECOVERY,
            status=RecoveryStatus.ACTIVE,
            outcome="",
            lease_id=row["id"],
            evidence={
                "leaseId": str(row["id"]),
                "runId": str(row["heartbeat_run_id"]),
                "workspaceId": str(row["execution_workspace_id"]),
                "sandboxId": row["provider_lease_id"],
                "reason": "cancelled run's unsaved files held on a stopped reusable sandbox",
                "recordedBy": "console",
            },
        )
        for row in rows
    ]
    created = RecoveryAction.objects.bulk_create(actions, ignore_conflicts=True)
    return len(created)
