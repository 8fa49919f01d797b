"""An operator asks for a reconciler pass now: one pass enqueued through
django-q2, audited, refused while a pass runs or one asked for has not started.

Overlapping passes would be harmless (claims are fenced, docs/architecture.md,
a lease's travel, step 5); the refusal keeps the queue from filling with
passes nobody needs, and says why in words."""

from __future__ import annotations

from django.utils import timezone

from sandboxes import audit
from sandboxes.actions import ActionRefused, _reason, _require
from sandboxes.models import AuditEvent, ReconcilerPass
from sandboxes.models.console import PASS_SILENT_AFTER
from sandboxes.rules.words import relative

ACTION = "reconciler.run_pass"
TASK = "sandboxes.reconciler.tasks.reconcile_pass"


def refusal(now=None) -> str:
    """Why a pass cannot be asked for now, or "" when it can."""
    now = now or timezone.now()
    running = ReconcilerPass.objects.alive(now).filter(dry_run=False).order_by("started_at")
    first = running.values_list("started_at", flat=True).first()
    if first is not None:
        return f"a pass is running (started {relative(first, now)}): wait for it to finish"
    asked = (
        AuditEvent.objects.filter(action=ACTION, at__gte=now - PASS_SILENT_AFTER)
        .order_by("-at")
        .values_list("at", "actor_label")
        .first()
    )
    if asked is not None:
        started = ReconcilerPass.objects.filter(dry_run=False, started_at__gte=asked[0]).exists()
        if not started:
            return (
                f"{asked[1]} asked for a pass {relative(asked[0], now)} and it has not "
                "started yet: is the q cluster running?"
            )
    return ""


def run_pass_now(*, actor, reason: str = "") -> str:
    """Enqueue one fleet-wide pass; returns the django-q2 task id.

    Not inside a transaction: where django-q2 keeps its queue in another
    database (the embedded SQLite setup), its ORM broker closes old
    connections before it enqueues, and would close this one mid-transaction.
    Two operators clicking at once may queue two passes: harmless (claims are
    fenced)."""
    from django_q.tasks import async_task

    _require(actor, "run_pass")
    reason = _reason(reason) if (reason or "").strip() else "asked for a pass now"
    why = refusal()
    if why:
        raise ActionRefused(why)
    task_id = async_task(TASK, task_name=f"pass asked for by {actor.get_username()}")
    audit.record(actor=actor, action=ACTION, obj=actor, reason=reason, after={"task_id": task_id})
    return task_id
