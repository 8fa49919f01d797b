"""What the console announces, and how an announcement is recorded.

`emit` is called by the reconciler INSIDE its transactions, like an outbox: the
event and one delivery row per interested channel are written with the stage
change they announce (or not at all), and only after the commit
(`transaction.on_commit`) is a django-q2 task queued to send them. Emitting
never raises into the caller and never touches the network, so a broken
channel cannot block or roll back a retirement.

Every message names the task key, the sandbox, the environment, the kind and a
link to the record; the webhook body carries the same fields as JSON
(README: "Notifications").
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from sandboxes.explain import explained_holds
from sandboxes.keep_links import NoKeepLink, keep_url
from sandboxes.models import (
    Attachment,
    Environment,
    NotificationChannel,
    NotificationDelivery,
    NotificationEvent,
    NotificationType,
    Receipt,
    Retirement,
)
from sandboxes.models.choices import ReceiptKind

from .links import absolute

log = logging.getLogger(__name__)

TITLES = {
    NotificationType.AWAITING_APPROVAL: "awaits approval",
    NotificationType.NOTICE: "will be retired",
    NotificationType.RETIRED: "was retired",
    NotificationType.NEEDS_ATTENTION: "needs attention",
    NotificationType.CORRECTION_STOPPED: "was stopped by a correction",
    NotificationType.RECONCILER_OVERDUE: "reconciler overdue",
    NotificationType.TEST: "test notification",
}


def _iso(value) -> str | None:
    return value.isoformat() if value else None


def record_payload(r: Retirement) -> dict:
    """The fields every message about a record carries."""
    lease = r.lease
    issue = lease.issue if lease.issue_id else None
    return {
        "task": {
            "id": str(issue.pk) if issue else None,
            "key": (issue.key or None) if issue else None,
            "title": (issue.title or None) if issue else None,
            "url": absolute(reverse("task", args=[issue.pk])) if issue else None,
        },
        "sandbox": {"provider": r.provider, "id": r.provider_lease_id},
        "environment": {"id": str(r.environment_id), "name": r.environment.name},
        "kind": r.kind,
        "stage": r.stage,
        "record_id": str(r.pk),
        "record_url": absolute(reverse("sandbox-detail", args=[r.pk])),
        "lease_id": str(r.lease_id),
        # The hold codes, as the API gives them, and each in the words every
        # page says it (sandboxes/explain.py).
        "holds": list(r.holds or []),
        "hold_explanations": explained_holds(r),
    }


def exported_payload(r: Retirement) -> dict:
    """What a retirement exported to its task: the verified export, if any."""
    export = (
        Receipt.objects.filter(retirement=r, kind=ReceiptKind.SALVAGE_EXPORT)
        .filter(payload__verified=True)
        .order_by("-confirmed_at", "-created_at")
        .first()
    )
    if export is None:
        return {"exported": [], "deleted": [], "exported_bytes": 0}
    urls = {
        str(a.pk): absolute(reverse("attachment", args=[a.pk]))
        for a in Attachment.objects.filter(retirement=r)
    }
    files = [
        {
            "path": f["path"],
            "size": f["size"],
            "sha256": f["sha256"],
            "attachment_id": f.get("attachment"),
            "attachment_url": urls.get(f.get("attachment") or ""),
        }
        for f in export.payload.get("files", [])
    ]
    return {
        "exported": files,
        "deleted": list(export.payload.get("deleted", [])),
        "exported_bytes": sum(f["size"] for f in files),
    }


def _channels(environment_id, event_type: str) -> list[NotificationChannel]:
    qs = NotificationChannel.objects.filter(enabled=True)
    if environment_id is not None:
        qs = qs.filter(environment_id=environment_id)
    return [c for c in qs if c.wants(event_type)]


def emit(
    event_type: str,
    *,
    key: str,
    environment: Environment | None = None,
    retirement: Retirement | None = None,
    data: dict | None = None,
    channels: list[NotificationChannel] | None = None,
    queue: bool = True,
    event_id: uuid.UUID | None = None,
) -> NotificationEvent | None:
    """Record an event and its deliveries (once per key); send after the commit.
    `event_id`: the event's id when the data must name it (a notice's keep link).

    Never raises: a failure is logged and the caller's transaction goes on
    (the writes are inside a savepoint)."""
    try:
        with transaction.atomic():
            return _emit(
                event_type, key, environment, retirement, data or {}, channels, queue, event_id
            )
    except Exception:
        log.exception("could not record notification %s (%s)", event_type, key)
        return None


def _emit(event_type, key, environment, retirement, data, channels, queue, event_id):
    now = timezone.now()
    if environment is None and retirement is not None:
        environment = retirement.environment
    payload: dict[str, Any] = {
        "type": str(event_type),
        "title": TITLES.get(event_type, str(event_type)),
        "occurred_at": now.isoformat(),
    }
    if retirement is not None:
        payload |= record_payload(retirement)
    elif environment is not None:
        payload["environment"] = {"id": str(environment.pk), "name": environment.name}
    payload |= data
    event = NotificationEvent(
        id=event_id or uuid.uuid4(),
        type=event_type,
        key=key[:300],
        environment=environment,
        retirement=retirement,
        payload=payload,
    )
    NotificationEvent.objects.bulk_create([event], ignore_conflicts=True)
    if not NotificationEvent.objects.filter(pk=event.pk).exists():
        return None  # announced before: at most once per key
    payload["id"] = str(event.pk)
    NotificationEvent.objects.filter(pk=event.pk).update(payload=payload)
    event.payload = payload
    if channels is None:
        channels = _channels(environment.pk if environment is not None else None, event_type)
    deliveries = [
        NotificationDelivery(event=event, channel=c, next_attempt_at=now) for c in channels
    ]
    NotificationDelivery.objects.bulk_create(deliveries, ignore_conflicts=True)
    ids = [d.pk for d in deliveries]
    if ids and queue:
        from .delivery import enqueue

        transaction.on_commit(lambda: enqueue(ids))
    return event


# --- the reconciler's hooks ------------------------------------------------------------


def awaiting_approval(r: Retirement, proof_receipt_id: str) -> None:
    emit(
        NotificationType.AWAITING_APPROVAL,
        key=f"awaiting_approval:{r.pk}:{proof_receipt_id}",
        retirement=r,
        data={"approve_url": absolute(reverse("approvals"))},
    )


def _keep_url(r: Retirement, notice_id: uuid.UUID) -> str | None:
    """The owner's keep link for this notice (sandboxes/keep_links.py), valid
    until the notice ends; None when the task has no owner, or on any failure
    (logged: a link must never block the notice, nor the retirement)."""
    if r.retire_after is None:
        return None
    try:
        with transaction.atomic():
            return keep_url(r, expires_at=r.retire_after, notice_event_id=notice_id)
    except NoKeepLink:
        return None
    except Exception:
        log.exception("could not make the keep link of %s", r.pk)
        return None


def notice(r: Retirement) -> None:
    notice_id = uuid.uuid4()
    emit(
        NotificationType.NOTICE,
        key=f"notice:{r.pk}:{_iso(r.retire_after)}",
        retirement=r,
        event_id=notice_id,
        data={
            "retire_after": _iso(r.retire_after),
            "notice_hours": r.environment.notice_period.total_seconds() / 3600
            if r.environment.notice_period
            else 0,
            "hold_hint": "An operator's hold on the record before retire_after, or the "
            "owner's keep link, keeps the sandbox.",
            # Holds the sandbox 7 days in the owner's name, once; never approves or
            # destroys (docs/rules.md, kept by the owner).
            "keep_url": _keep_url(r, notice_id),
        },
    )


def retired(r: Retirement, proof_reason: str) -> None:
    emit(
        NotificationType.RETIRED,
        key=f"retired:{r.pk}",
        retirement=r,
        data={"proof": proof_reason, **exported_payload(r)},
    )


def needs_attention(r: Retirement) -> None:
    emit(
        NotificationType.NEEDS_ATTENTION,
        key=f"needs_attention:{r.pk}:{r.attempts}:{_iso(r.updated_at) or timezone.now()}",
        retirement=r,
        data={"attempts": r.attempts, "last_error": r.last_error[:1000]},
    )


def correction_stopped(r: Retirement) -> None:
    emit(
        NotificationType.CORRECTION_STOPPED,
        key=f"correction_stopped:{r.pk}",
        retirement=r,
        data={"reason": r.closed_reason or "stopped and retained after an unsuccessful run"},
    )


def reconciler_overdue(now=None) -> NotificationEvent | None:
    """Announce, once per stall, that no reconciler pass has finished for a while.
    Sent to every environment's channels that want it."""
    from sandboxes.models import ReconcilerPass

    now = now or timezone.now()
    minutes = int(getattr(settings, "RECONCILER_OVERDUE_MINUTES", 10))
    last = (
        ReconcilerPass.objects.filter(dry_run=False, finished_at__isnull=False)
        .order_by("-finished_at")
        .first()
    )
    if last is None or last.finished_at > now - timedelta(minutes=minutes):
        return None  # never ran (nothing to be overdue) or on time
    running = ReconcilerPass.objects.filter(
        Q(finished_at__isnull=True), dry_run=False, started_at__gt=last.finished_at
    ).count()
    return emit(
        NotificationType.RECONCILER_OVERDUE,
        key=f"reconciler_overdue:{last.pk}",
        data={
            "last_pass_id": str(last.pk),
            "last_pass_finished_at": _iso(last.finished_at),
            "overdue_minutes": minutes,
            "unfinished_passes_since": running,
            "record_url": absolute(reverse("passes")),
        },
    )
