"""Writes the append-only audit trail: actor, action, object, reason, before, after."""

from sandboxes.models import AuditEvent


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
    """`actor` is a User, an ApiToken, or None for the system."""
    user = actor if getattr(actor, "is_authenticated", False) else None
    if user is not None:
        label = user.get_username()
    elif actor is not None and hasattr(actor, "scope"):
        label = f"token:{actor.name}"
        user = actor.created_by
    else:
        label = "system"
    return AuditEvent.objects.create(
        actor=user,
        actor_label=label,
        action=action,
        object_type=obj._meta.model_name,
        object_id=str(obj.pk),
        sandbox_id=sandbox_id or getattr(obj, "provider_lease_id", ""),
        reason=reason,
        before=before or {},
        after=after or {},
    )
