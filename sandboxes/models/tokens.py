"""API tokens (stored hashed) and the event ids ingest has seen."""

import hashlib
import secrets
import uuid

from django.conf import settings
from django.db import models
from django.db.models.signals import pre_delete
from django.dispatch import receiver
from django.utils import timezone

from .choices import TokenScope, enum_check


def hash_token(raw: str) -> str:
    # Tokens are 256-bit random strings, so a plain sha256 cannot be brute-forced.
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiTokenQuerySet(models.QuerySet):
    def manageable_by(self, user):
        """The tokens `user` lists and revokes: every one for an unlimited admin;
        a company-limited admin only their own (README, company scope)."""
        from .scope import companies_of

        if companies_of(user) is None:
            return self
        return self.filter(created_by=user)


class ApiToken(models.Model):
    # The audit trail labels a token's actions "token:<name>" in a 200-character
    # column, so a name may use 190 of them.
    NAME_MAX = 190

    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    name = models.CharField(max_length=200)
    scope = models.CharField(max_length=16, choices=TokenScope.choices)
    token_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12, help_text="First characters, to recognise a token.")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Company ids the token is limited to (`create_token --company`), within its
    # creator's own limit; empty: its creator's (README, company scope).
    companies = models.JSONField(default=list, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        constraints = [enum_check("scope", TokenScope, model="token")]

    def __str__(self):
        return f"{self.name} ({self.scope}, {self.prefix}…)"

    @classmethod
    def issue(cls, name: str, scope: str, created_by=None, companies=()) -> tuple["ApiToken", str]:
        """Create a token; the raw value is returned once and never stored."""
        raw = f"pcc_{secrets.token_urlsafe(32)}"
        token = cls.objects.create(
            name=name,
            scope=scope,
            companies=[str(c) for c in companies],
            token_hash=hash_token(raw),
            prefix=raw[:10],
            created_by=created_by,
        )
        return token, raw

    @classmethod
    def authenticate(cls, raw: str) -> "ApiToken | None":
        """The live token with this value; None when unknown, revoked or suspended."""
        token = (
            cls.objects.select_related("created_by")
            .filter(token_hash=hash_token(raw), revoked_at__isnull=True)
            .first()
        )
        if token is None or token.suspended_reason:
            return None
        return token

    @property
    def suspended_reason(self) -> str:
        """Why the token no longer works although nobody revoked it: whoever
        minted it in the console has since lost the role that could. (A token
        made with `manage.py create_token` has no creator and answers to
        whoever runs the server.)"""
        creator = self.created_by
        if creator is None:
            return ""
        if not creator.is_active:
            return f"its creator {creator.get_username()} is deactivated"
        if not creator.has_perm("sandboxes.manage_tokens"):
            return f"its creator {creator.get_username()} may no longer manage tokens"
        return ""


class IngestedEvent(models.Model):
    """Remembers event ids per source so a repeated id is a no-op."""

    source = models.CharField(max_length=64, help_text="token:<uuid> or cli")
    event_id = models.CharField(max_length=200)
    type = models.CharField(max_length=64)
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["source", "event_id"], name="event_unique_per_source")
        ]

    def __str__(self):
        return f"{self.source} {self.event_id}"


@receiver(pre_delete, sender=settings.AUTH_USER_MODEL)
def _revoke_tokens_of_deleted_user(sender, instance, **kwargs):
    """Deleting a user would null `created_by` and make their tokens look like
    server-made ones; revoke them first instead."""
    ApiToken.objects.filter(created_by=instance, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
