"""The console's three groups and what each may do (DOMAIN §5)."""

from django.contrib.auth.models import Group, Permission
from django.db import router

REVIEWERS, OPERATORS, ADMINS = "reviewers", "operators", "admins"

_REVIEWER = ["sandboxes.export_audit"]
_OPERATOR = _REVIEWER + [
    "sandboxes.approve_retirement",
    "sandboxes.retry_retirement",
    "sandboxes.hold_retirement",
]
_ADMIN = _OPERATOR + [
    "sandboxes.attest_retirement",
    "sandboxes.edit_policy",
    "sandboxes.manage_tokens",
]
ROLE_PERMISSIONS = {REVIEWERS: _REVIEWER, OPERATORS: _OPERATOR, ADMINS: _ADMIN}


def ensure_roles(using: str = "default") -> None:
    """Create the groups and (re)assign their permissions; safe to run again."""
    wanted = {p for perms in ROLE_PERMISSIONS.values() for p in perms}
    by_name = {
        f"{p.content_type.app_label}.{p.codename}": p
        for p in Permission.objects.using(using)
        .filter(content_type__app_label="sandboxes")
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
