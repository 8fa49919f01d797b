"""The console's three groups and what each may do (docs/architecture.md, the rooms)."""

from django.contrib.auth.models import Group, Permission
from django.db import router

REVIEWERS, OPERATORS, ADMINS = "reviewers", "operators", "admins"

_REVIEWER = ["sandboxes.view_console", "sandboxes.export_audit", "sandboxes.download_salvage"]
_OPERATOR = _REVIEWER + [
    "sandboxes.approve_retirement",
    "sandboxes.retry_retirement",
    "sandboxes.hold_retirement",
    "sandboxes.run_pass",
]
_ADMIN = _OPERATOR + [
    "sandboxes.attest_retirement",
    "sandboxes.edit_policy",
    "sandboxes.manage_tokens",
    # Admins manage users (docs/architecture.md): assigning console roles.
    "auth.change_user",
]
ROLE_PERMISSIONS = {REVIEWERS: _REVIEWER, OPERATORS: _OPERATOR, ADMINS: _ADMIN}
ASSIGN_ROLES = "auth.change_user"
# The role names people type (manage.py grant_role USER reviewer) → group.
ROLES = {"reviewer": REVIEWERS, "operator": OPERATORS, "admin": ADMINS}
ROLE_WORDS = {
    "reviewer": "reads everything, exports the audit trail and downloads salvage",
    "operator": "also approves, retries, holds and runs a reconciler pass now",
    "admin": "also attests, edits policy, manages tokens and users",
}


def role_of(user) -> str:
    """The user's console role (the highest group), or "" for none."""
    names = {g.name for g in user.groups.all()}
    for role in ("admin", "operator", "reviewer"):
        if ROLES[role] in names:
            return role
    return ""


def grant_role(user, role: str, *, actor=None, reason: str = "") -> tuple[str, str]:
    """Give `user` exactly one console role ("" removes every role) and audit it.
    Returns (old role, new role)."""
    from django.db import transaction

    from sandboxes import audit

    if role and role not in ROLES:
        raise ValueError(f"unknown role {role!r}: choose one of {', '.join(ROLES)}")
    with transaction.atomic():
        old = role_of(user)
        if old == role:
            return old, role
        user.groups.remove(*Group.objects.filter(name__in=list(ROLES.values())))
        if role:
            user.groups.add(Group.objects.get(name=ROLES[role]))
        audit.record(
            actor=actor,
            action="user.grant_role",
            obj=user,
            reason=reason,
            before={"username": user.get_username(), "role": old or None},
            after={"username": user.get_username(), "role": role or None},
        )
    return old, role


def ensure_roles(using: str = "default") -> None:
    """Create the groups and (re)assign their permissions; safe to run again."""
    wanted = {p for perms in ROLE_PERMISSIONS.values() for p in perms}
    by_name = {
        f"{p.content_type.app_label}.{p.codename}": p
        for p in Permission.objects.using(using)
        .filter(content_type__app_label__in=["sandboxes", "auth"])
        .select_related("content_type")
    }
    missing = wanted - set(by_name)
    if missing:
        raise RuntimeError(f"permissions not created yet: {sorted(missing)}")
    for name, perms in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.using(using).get_or_create(name=name)
        group.permissions.set([by_name[p] for p in perms])


def ensure_roles_after_migrate(sender, using="default", **kwargs) -> None:
    if router.allow_migrate_model(using, Group):
        ensure_roles(using)
