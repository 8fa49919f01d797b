"""Writes the append-only audit trail: actor, action, object, reason, before, after."""

from django.db.models import Subquery

from sandboxes.models import AuditEvent, EnvironmentLease, Receipt, Retirement
from sandboxes.models.mirror import MirroredModel
from sandboxes.models.notifications import NotificationChannel

# Every action the console writes, grouped as the audit filter offers them.
# A new action is added here, or the filter cannot find it.
ACTION_GROUPS: dict[str, dict[str, str]] = {
    "Operators and admins": {
        "retirement.approve": "approved a retirement",
        "retirement.retry": "asked for a retry",
        "retirement.hold": "held a sandbox",
        "retirement.release_hold": "released a hold",
        "retirement.attest": "discarded unsaved work",
        "environment.edit_policy": "edited an environment's policy",
        "environment.edit_prices": "edited an environment's price table",
        "token.create": "created an API token",
        "token.revoke": "revoked an API token",
        "user.grant_role": "granted a role",
        "user.companies": "limited a user to some companies (or lifted the limit)",
        "user.create": "created a user",
        "user.password_link": "sent a set-password link",
    },
    "Anyone with a console role": {
        "retirement.ask_provider": "asked the provider for a sandbox's state",
        "salvage.download": "downloaded a sandbox's salvage",
        "salvage.download_refused": "was refused a salvage that does not verify",
        "salvage.restore": "restored a salvage into a folder (manage.py restore_salvage)",
    },
    "Notification channels (admins)": {
        "channel.create": "added a notification channel",
        "channel.update": "changed a notification channel",
        "channel.rotate_secret": "rotated a webhook's signing secret",
        "channel.test": "sent a test notification",
        "channel.delete": "deleted a notification channel",
        "owner_mail.update": "changed an environment's owner e-mail",
    },
    "Paperclip's reports (ingest and the mirror)": {
        "lease.sandbox_moved": "a newer report moved a lease to another sandbox",
        "receipt.sandbox_mismatch": "a receipt names another sandbox than its lease",
    },
    "Reconciler": {
        "retirement.retired": "retired a sandbox",
        "retirement.failed": "a step failed",
        "retirement.needs_attention": "failed 5 times: needs attention",
        "retirement.dismissed": "closed: no longer a candidate",
        "retirement.proof_void": "proof void: back to compare",
        "retirement.stopped": "stopped a sandbox (stop-only step)",
        "retirement.corrected": "stopped and retained after an unsuccessful run",
        "lease.stopped_and_retained": "stopped and retained a lease's sandbox",
        "retirement.noticed": "gave notice: retired after the notice period",
        "retirement.hold_ended": "an operator's hold ended on its own",
    },
}
ACTIONS: dict[str, str] = {
    code: text for group in ACTION_GROUPS.values() for code, text in group.items()
}


def record(
    *,
    actor,
    action: str,
    obj,
    reason: str = "",
    before: dict | None = None,
    after: dict | None = None,
    sandbox_id: str = "",
) -> AuditEvent:
    """`actor` is a User, an ApiToken, a keep link's holder, or None for the system."""
    user = actor if getattr(actor, "is_authenticated", False) else None
    if user is not None:
        label = user.get_username()
    elif actor is not None and hasattr(actor, "scope"):
        label = f"token:{actor.name}"
        user = actor.created_by
    elif actor is not None and hasattr(actor, "audit_label"):
        # No console user acted (a keep link's owner, sandboxes.actions.KeepLinkHolder).
        label = actor.audit_label
    else:
        label = "system"
    return AuditEvent.objects.create(
        actor=user,
        actor_label=label[:200],
        action=action,
        object_type=obj._meta.model_name,
        object_id=str(obj.pk),
        sandbox_id=sandbox_id or getattr(obj, "provider_lease_id", ""),
        reason=reason,
        before=before or {},
        after=after or {},
        company_id=company_of(obj),
    )


def company_of(obj):
    """The company of the object acted on, for `AuditEvent.visible_to` (README,
    company scope): a value, or a subquery the INSERT reads (no extra round
    trip for a record whose lease is not loaded). None for console-wide objects."""
    if isinstance(obj, Retirement):
        lease = obj._state.fields_cache.get("lease")
        if lease is not None:
            return lease.company_id
        return _column(EnvironmentLease, obj.lease_id, "company_id")
    if isinstance(obj, Receipt):
        return obj.company_id or _column(Receipt, obj.pk, "lease__company_id")
    if isinstance(obj, NotificationChannel):
        return _column(type(obj.environment), obj.environment_id, "company_id")
    if isinstance(obj, MirroredModel):
        # Ingest and the reconciler pass unsaved stand-ins naming a row by its key.
        return obj.company_id or _column(type(obj), obj.pk, "company_id")
    return None


def _column(model, pk, column: str):
    return Subquery(model.objects.filter(pk=pk).values(column)[:1])
