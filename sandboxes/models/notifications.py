"""Notification channels, the events the console announces, and their deliveries.

A channel belongs to one environment and is either an Apprise URL (Slack, Teams,
Discord, email, ntfy… by URL) or a Standard Webhooks endpoint. Its URL and
signing secret are stored encrypted (Fernet, key derived from SECRET_KEY) or as
the NAME of an environment variable; neither is ever shown back in clear.

Each announced event is one row, unique by its idempotency key, and each
(event, channel) pair is one delivery row: at most one delivery per event per
channel, retried with backoff until it is delivered or gives up.
"""

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q

from .choices import enum_check
from .mirror import Environment
from .scope import ScopedQuerySet


class ChannelKind(models.TextChoices):
    APPRISE = "apprise"
    WEBHOOK = "webhook"


class NotificationType(models.TextChoices):
    AWAITING_APPROVAL = "retirement.awaiting_approval"
    NOTICE = "retirement.notice"
    RETIRED = "retirement.retired"
    NEEDS_ATTENTION = "retirement.needs_attention"
    CORRECTION_STOPPED = "correction.stopped"
    RECONCILER_OVERDUE = "reconciler.overdue"
    TEST = "channel.test"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"  # waiting for its first send or its next retry
    SENDING = "sending"  # a worker holds it until sending_until
    DELIVERED = "delivered"
    FAILED = "failed"  # gave up after the last attempt


class NotificationChannel(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    environment = models.ForeignKey(
        Environment, on_delete=models.PROTECT, related_name="notification_channels"
    )
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=ChannelKind.choices)
    # The target URL: encrypted here, or read from the named environment variable.
    url_encrypted = models.TextField(blank=True)
    url_env = models.CharField(max_length=100, blank=True)
    url_hint = models.CharField(
        max_length=100, blank=True, help_text="Scheme and host only, to recognise the channel."
    )
    # Webhooks only: the Standard Webhooks signing secret (whsec_…), encrypted, or
    # the name of the environment variable holding it.
    secret_encrypted = models.TextField(blank=True)
    secret_env = models.CharField(max_length=100, blank=True)
    secret_set_at = models.DateTimeField(null=True, blank=True)
    events = models.JSONField(default=list, blank=True, help_text="Event types; empty = all.")
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["environment__name", "name"]
        constraints = [
            enum_check("kind", ChannelKind, model="notificationchannel"),
            models.CheckConstraint(
                condition=~Q(url_encrypted="") | ~Q(url_env=""),
                name="notificationchannel_has_url",
            ),
            models.UniqueConstraint(
                fields=["environment", "name"], name="notificationchannel_unique_name"
            ),
        ]

    def __str__(self):
        return f"{self.name} ({self.kind})"

    def wants(self, event_type: str) -> bool:
        return event_type == NotificationType.TEST or not self.events or event_type in self.events


class NotificationEventQuerySet(ScopedQuerySet):
    def visible_to(self, actor):
        """A record's event by the record's company; any other by its environment's."""
        return self.filter_visible(
            actor,
            lambda ids: (
                Q(retirement__lease__company_id__in=ids)
                | Q(retirement__isnull=True, environment__company_id__in=ids)
            ),
        )


class NotificationEvent(models.Model):
    """One thing the console announced. The key makes emitting it twice a no-op."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    type = models.CharField(max_length=64, choices=NotificationType.choices)
    key = models.CharField(max_length=300, unique=True, help_text="Idempotency key.")
    environment = models.ForeignKey(
        Environment,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="notification_events",
    )
    retirement = models.ForeignKey(
        "Retirement",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="notification_events",
    )
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    objects = NotificationEventQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        constraints = [enum_check("type", NotificationType, model="notificationevent")]

    def __str__(self):
        return f"{self.type} {self.key}"


class NotificationDelivery(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    event = models.ForeignKey(
        NotificationEvent, on_delete=models.PROTECT, related_name="deliveries"
    )
    channel = models.ForeignKey(
        NotificationChannel, on_delete=models.CASCADE, related_name="deliveries"
    )
    status = models.CharField(
        max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    sending_until = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    response_code = models.PositiveIntegerField(null=True, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            enum_check("status", DeliveryStatus, model="notificationdelivery"),
            # At most once per event per channel.
            models.UniqueConstraint(
                fields=["event", "channel"], name="notificationdelivery_once_per_channel"
            ),
        ]
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="notificationdelivery_due"),
            models.Index(fields=["channel", "-created_at"], name="notificationdelivery_log"),
        ]

    def __str__(self):
        return f"{self.event.type} → {self.channel.name} ({self.status})"
