"""Preservation source (seed 003, docs/rules.md, candidate kinds): a cancelled
run's stopped, reusable sandbox still holds its unsaved files behind the workspace's writer hold.
Record one file-recovery action naming that lease, once; the lease and
receipts stay as they are. The action holds only that lease's sandbox (it names
the lease), and it is resolved when Paperclip clears the writer hold (its
recovery saved the files) or the lease stops being a preservation source.
While the writer hold is on, the holds (`writer_active`, `recovery_open`) keep
the console from starting, exporting or destroying the sandbox."""

from __future__ import annotations

import uuid

from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from sandboxes import audit
from sandboxes.models import EnvironmentLease, Receipt, RecoveryAction
from sandboxes.models.choices import (
    RECOVERY_OPEN,
    WARM_POLICIES,
    LeaseStatus,
    ReceiptKind,
    RecoveryStatus,
    RunStatus,
)

from .candidates import GRAPH_COMPLETE
from .predicates import stop_and_retain_refusals
from .proof_facts import FILE_RECOVERY

RECORDED_BY = "console"
_NAMESPACE = uuid.UUID("d8e4d245-2a43-4654-8000-000000000003")


def recovery_action_id(lease_id) -> uuid.UUID:
    """Deterministic, so two reconcilers racing record the same single row."""
    return uuid.uuid5(_NAMESPACE, f"file-recovery/{lease_id}")


def _sources():
    """Leases that may be preservation sources now: released, reusable, the run
    cancelled and still the workspace's writer, and a stop-and-retain receipt
    for the same run, lease AND sandbox (seed 003: "the same run, lease and
    allocation"; a receipt naming another sandbox proves nothing). Whether that
    stop is confirmed is Paperclip's predicate (`_confirmed`)."""
    confirmed_stop_and_retain = Receipt.objects.filter(
        lease=OuterRef("pk"),
        run=OuterRef("heartbeat_run_id"),
        provider_lease_id=OuterRef("provider_lease_id"),
        kind=ReceiptKind.STOP_AND_RETAIN,
    )
    return EnvironmentLease.objects.filter(
        GRAPH_COMPLETE,
        Q(status=LeaseStatus.RELEASED, lease_policy__in=WARM_POLICIES),
        heartbeat_run__status=RunStatus.CANCELLED,
        execution_workspace__writer_run_id=F("heartbeat_run_id"),
        issue_id__isnull=False,
    ).filter(Exists(confirmed_stop_and_retain))


def _confirmed(leases) -> list[EnvironmentLease]:
    """The leases whose stop-and-retain Paperclip's `hasConfirmedSandboxStopAndRetain`
    confirms (sandboxes/rules/paperclip.py). 3 queries."""
    leases = list(leases)
    refused = stop_and_retain_refusals(leases, timezone.now())
    return [lease for lease in leases if not refused[lease.pk]]


def preservation_sources(environment_id=None) -> list[EnvironmentLease]:
    recorded = RecoveryAction.objects.filter(lease=OuterRef("pk"), kind=FILE_RECOVERY)
    qs = _sources().filter(~Exists(recorded))
    if environment_id is not None:
        qs = qs.filter(environment_id=environment_id)
    return _confirmed(qs)


def record_preservation_sources(environment_id=None) -> int:
    """Record missing file-recovery actions: a fixed number of queries whatever
    the fleet size."""
    actions = [
        RecoveryAction(
            id=recovery_action_id(lease.pk),
            source_issue_id=lease.issue_id,
            kind=FILE_RECOVERY,
            status=RecoveryStatus.ACTIVE,
            outcome="",
            lease_id=lease.pk,
            evidence={
                "leaseId": str(lease.pk),
                "runId": str(lease.heartbeat_run_id),
                "workspaceId": str(lease.execution_workspace_id),
                "sandboxId": lease.provider_lease_id,
                "reason": "cancelled run's unsaved files held on a stopped reusable sandbox",
                "recordedBy": RECORDED_BY,
            },
        )
        for lease in preservation_sources(environment_id)
        if lease.issue_id is not None  # always: a source names its task (_sources)
    ]
    if not actions:
        return 0
    created = RecoveryAction.objects.bulk_create(actions, ignore_conflicts=True)
    return len(created)


def resolve_preservation_actions(environment_id=None) -> int:
    """Resolve the console's open file-recovery actions whose lease is no longer a
    preservation source: Paperclip cleared the writer hold (its recovery saved
    the files), or the lease moved on. One audit row each; a fixed number of
    queries whatever the fleet size."""
    qs = RecoveryAction.objects.filter(
        kind=FILE_RECOVERY, status__in=RECOVERY_OPEN, evidence__recordedBy=RECORDED_BY
    )
    if environment_id is not None:
        qs = qs.filter(lease__environment_id=environment_id)
    named = set(qs.values_list("lease_id", flat=True))
    if not named:
        return 0
    still = {lease.pk for lease in _confirmed(_sources().filter(pk__in=named))}
    qs = qs.exclude(lease_id__in=still)
    now = timezone.now()
    with transaction.atomic():
        rows = list(
            qs.select_for_update(skip_locked=True, of=("self",)).values(
                "id",
                "status",
                "lease_id",
                "lease__provider_lease_id",
                "lease__heartbeat_run_id",
                "lease__execution_workspace__writer_run_id",
            )
        )
        if not rows:
            return 0
        outcomes = {}
        for row in rows:
            writer = row["lease__execution_workspace__writer_run_id"]
            if writer is None or writer != row["lease__heartbeat_run_id"]:
                outcomes[row["id"]] = "writer hold cleared: Paperclip's recovery saved the files"
            else:
                outcomes[row["id"]] = "the lease is no longer a preservation source"
        for outcome in set(outcomes.values()):
            RecoveryAction.objects.filter(
                pk__in=[pk for pk, o in outcomes.items() if o == outcome]
            ).update(status=RecoveryStatus.RESOLVED, outcome=outcome[:200], updated_at=now)
        for row in rows:
            audit.record(
                actor=None,
                action="recovery_action.resolved",
                obj=RecoveryAction(pk=row["id"]),
                reason=outcomes[row["id"]],
                before={"status": row["status"]},
                after={"status": RecoveryStatus.RESOLVED, "lease": str(row["lease_id"])},
                sandbox_id=row["lease__provider_lease_id"] or "",
            )
    return len(rows)
