"""The reconciler's passes: what each did, and whether its worker is still there."""

import uuid
from datetime import datetime

from django.db import models
from django.db.models import Q
from django.utils import timezone

from .console import PASS_SILENT_AFTER


class ReconcilerPassQuerySet(models.QuerySet):
    def running(self):
        """Passes neither finished nor found interrupted (dry runs are never saved)."""
        return self.filter(finished_at__isnull=True, interrupted_at__isnull=True)

    def silent_since(self, cutoff: datetime):
        """Not seen since `cutoff` (a row without a beat was last seen at its start)."""
        return self.filter(
            Q(last_seen_at__lt=cutoff) | Q(last_seen_at__isnull=True, started_at__lt=cutoff)
        )


class ReconcilerPass(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    started_at = models.DateTimeField(db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The pass's heartbeat, written as it works (docs/rules.md, claims and
    # failures); kept as "last seen" once the pass is found interrupted.
    last_seen_at = models.DateTimeField(null=True, blank=True)
    # When a later pass found this one's worker gone (silent for a claim's
    # length, or its process no longer on its host). It never finished.
    interrupted_at = models.DateTimeField(null=True, blank=True)
    dry_run = models.BooleanField(default=False)
    environment_name = models.CharField(max_length=200, blank=True)
    worker = models.CharField(max_length=200, blank=True)
    candidates = models.PositiveIntegerField(default=0)
    advanced = models.PositiveIntegerField(default=0)
    retired = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    kept_bytes = models.BigIntegerField(null=True, blank=True)
    counts_by_kind = models.JSONField(default=dict, blank=True)
    counts_by_stage = models.JSONField(default=dict, blank=True)
    # Open records per environment name after the pass, and the daily cost they
    # hold (null when no record could be priced; `cost_unknown` counts the rest).
    counts_by_environment = models.JSONField(default=dict, blank=True)
    cost_per_day = models.DecimalField(max_digits=14, decimal_places=4, null=True, blank=True)
    cost_unknown = models.PositiveIntegerField(default=0)
    errors = models.JSONField(default=list, blank=True)
    listing = models.JSONField(
        default=dict,
        blank=True,
        help_text="The listing this pass's candidates come from: its snapshot, "
        "when a time-based rule comes due, and whether it was reused unchanged.",
    )
    # A dry run's lines ("sandbox kind: stage (holds)"), on the unsaved record only.
    would: list[str]

    objects = ReconcilerPassQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at"]
        indexes = [
            # The sweep at each pass's start reads only the few running rows.
            models.Index(
                fields=["started_at"],
                name="pass_running",
                condition=Q(finished_at__isnull=True, interrupted_at__isnull=True),
            )
        ]

    def __str__(self):
        return f"pass {self.started_at:%Y-%m-%d %H:%M:%S}"

    @property
    def last_seen(self) -> datetime:
        return self.last_seen_at or self.started_at

    @property
    def status(self) -> str:
        """finished, interrupted or running. A pass silent for a claim's length
        reads as interrupted before any later pass marks it: when every worker
        is gone, none will."""
        if self.finished_at is not None:
            return "finished"
        if self.interrupted_at is not None or self.last_seen < timezone.now() - PASS_SILENT_AFTER:
            return "interrupted"
        return "running"

    @property
    def duration_seconds(self) -> float | None:
        if self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()
