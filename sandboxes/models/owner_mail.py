"""Owner e-mail (README: Owner e-mail): an environment's SMTP URL for mailing
task owners, and the hourly digests sent to them.

`OwnerMail` is the admin's setting: an Apprise mailto:// or mailtos:// URL,
stored like a channel's (encrypted, or the NAME of an environment variable;
only scheme and host shown back), and whether it is on. The recipient is never
in the URL: each digest goes to the owner of the tasks it lists.

`OwnerDigest` is one mail to one owner for one hour of one environment: the
unique (environment, owner, hour) makes "at most one digest per owner per
hour" a constraint, whichever worker forms it. Its `items` are the notices and
retirements it lists, each event in one digest at most. A digest is claimed
and retried like a channel's delivery; one whose owner has no address is kept
as `no_email` (or `no_owner`), so the log shows who heard nothing and why.
"""

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q

from .choices import enum_check
from .console import Retirement
from .mirror import Environment
from .notifications import NotificationEvent


class OwnerMail(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    environment = models.OneToOneField(
        Environment, on_delete=models.CASCADE, related_name="owner_mail"
    )
    url_encrypted = models.TextField(blank=True)
    url_env = models.CharField(max_length=100, blank=True)
    url_hint = models.CharField(max_length=100, blank=True)
    enabled = models.BooleanField(default=False)
    # Notices from this moment on are mailed: turning it on does not mail an
    # owner every notice of the environment's past.
    enabled_at = models.DateTimeField(null=True, blank=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "owner e-mail setting"
        constraints = [
            models.CheckConstraint(
                condition=~Q(url_encrypted="") | ~Q(url_env=""), name="ownermail_has_url"
            ),
        ]

    def __str__(self):
        return f"owner e-mail of {self.environment_id}"


class DigestStatus(models.TextChoices):
    PENDING = "pending"  # waiting for its first send or its next retry
    SENDING = "sending"  # a worker holds it until sending_until
    DELIVERED = "delivered"
    FAILED = "failed"  # gave up after the last attempt
    NO_EMAIL = "no_email"  # the owner has no e-mail address: nothing is sent
    NO_OWNER = "no_owner"  # the task has no user to own it: nothing is sent


class OwnerDigestQuerySet(models.QuerySet):
    def due(self, now):
        """Digests to send now: pending and due, or left sending by a worker that died."""
        return self.filter(
            Q(status=DigestStatus.PENDING, next_attempt_at__lte=now)
            | Q(status=DigestStatus.SENDING, sending_until__lte=now)
        )


class OwnerDigest(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    environment = models.ForeignKey(
        Environment, on_delete=models.PROTECT, related_name="owner_digests"
    )
    # Paperclip's user id of the owner ("" for tasks no user owns), and the
    # address the digest goes to, as the owner's row read when it was formed.
    owner_user_id = models.CharField(max_length=255, blank=True)
    owner_name = models.CharField(max_length=200, blank=True)
    owner_email = models.CharField(max_length=320, blank=True)
    hour = models.DateTimeField(help_text="The hour (UTC) this digest is the owner's mail of.")
    status = models.CharField(
        max_length=16, choices=DigestStatus.choices, default=DigestStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    sending_until = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = OwnerDigestQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            enum_check("status", DigestStatus, model="ownerdigest"),
            models.UniqueConstraint(
                fields=["environment", "owner_user_id", "hour"], name="ownerdigest_once_an_hour"
            ),
        ]
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="ownerdigest_due"),
            models.Index(fields=["environment", "-created_at"], name="ownerdigest_log"),
        ]

    def __str__(self):
        return f"digest to {self.owner_email or self.owner_user_id or 'nobody'} ({self.status})"


class OwnerDigestItem(models.Model):
    """One notice or retirement a digest lists; an event is in one digest at most."""

    digest = models.ForeignKey(OwnerDigest, on_delete=models.CASCADE, related_name="items")
    event = models.OneToOneField(
        NotificationEvent, on_delete=models.PROTECT, related_name="owner_digest_item"
    )
    retirement = models.ForeignKey(
        Retirement, on_delete=models.PROTECT, related_name="owner_digest_items"
    )

    def __str__(self):
        return f"{self.event_id} in {self.digest_id}"
