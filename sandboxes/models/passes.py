"""The reconciler's passes: what each did, and whether its worker is still there."""

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import models, router
from django.db.models import Q, Subquery
from django.utils import timezone

from .console import PASS_SILENT_AFTER

# The django-q2 schedule `setup_schedules` creates, by name, and the interval
# assumed before it exists.
RECONCILE_SCHEDULE = "reconciler pass"
DEFAULT_SCHEDULE_MINUTES = 1
# Like a missed ping: overdue when the last pass started longer ago than this
# many schedule intervals.
OVERDUE_INTERVALS = 2


@dataclass(frozen=True)
class Pulse:
    """The reconciler's heartbeat as every page shows it: the last pass, a pass
    running now, the schedule, and whether it is overdue (the one definition)."""

    now: datetime
    last_id: uuid.UUID | None = None
    last_started: datetime | None = None
    last_finished: datetime | None = None
    running_since: datetime | None = None  # a pass running now whose worker beats
    schedule_minutes: int = DEFAULT_SCHEDULE_MINUTES
    next_run: datetime | None = None  # the schedule's next run, as django-q2 keeps it

    @property
    def never(self) -> bool:
        return self.last_started is None

    @property
    def interval(self) -> timedelta:
        return timedelta(minutes=self.schedule_minutes)

    @property
    def overdue(self) -> bool:
        """No pass yet, or the last one started more than two intervals ago and
        no pass is running now (a pass that still beats is alive, only slow)."""
        if self.last_started is None:
            return True
        if self.running_since is not None:
            return False
        return self.now - self.last_started > OVERDUE_INTERVALS * self.interval

    @property
    def next_at(self) -> datetime | None:
        """When the next pass is due: the schedule's next run, else an interval
        after the last pass started."""
        if self.next_run is not None:
            return self.next_run
        return self.last_started + self.interval if self.last_started else None

    @property
    def next_due(self) -> bool:
        """The next pass is due now (the scheduler has not sent it yet)."""
        return self.next_at is not None and self.next_at <= self.now


# At most this many record ids are kept per list on a pass row.
RECORDS_KEPT = 500


class ReconcilerPassQuerySet(models.QuerySet):
    def running(self):
        """Passes neither finished nor found interrupted (dry runs are never saved)."""
        return self.filter(finished_at__isnull=True, interrupted_at__isnull=True)

    def alive(self, now: datetime):
        """Running passes whose worker beat within a claim's length."""
        cutoff = now - PASS_SILENT_AFTER
        return self.running().filter(
            Q(last_seen_at__gte=cutoff) | Q(last_seen_at__isnull=True, started_at__gte=cutoff)
        )

    def pulse(self, now: datetime | None = None) -> Pulse:
        """The heartbeat in one query: the newest pass (of any scope, dry runs
        are never saved), with the earliest live running pass and the
        schedule as subqueries. Where django-q2 keeps its tables in another
        database (the embedded SQLite setup) the schedule is a second read."""
        from django_q.models import Schedule

        now = now or timezone.now()
        schedule = Schedule.objects.filter(name=RECONCILE_SCHEDULE)
        together = router.db_for_read(Schedule) == router.db_for_read(ReconcilerPass)
        extra = {}
        if together:
            extra = {
                "minutes": Subquery(schedule.values("minutes")[:1]),
                "next_run": Subquery(schedule.values("next_run")[:1]),
            }
        live = self.model.objects.alive(now).filter(dry_run=False).order_by("started_at")
        row = (
            self.filter(dry_run=False)
            .order_by("-started_at")
            .annotate(running_since=Subquery(live.values("started_at")[:1]), **extra)
            .values("pk", "started_at", "finished_at", "running_since", *extra)
            .first()
        )
        if not together or row is None:
            # Before the first pass there is no row to carry the schedule.
            row = (row or {}) | (schedule.values("minutes", "next_run").first() or {})
        row = row or {}
        return Pulse(
            now=now,
            last_id=row.get("pk"),
            last_started=row.get("started_at"),
            last_finished=row.get("finished_at"),
            running_since=row.get("running_since"),
            schedule_minutes=row.get("minutes") or DEFAULT_SCHEDULE_MINUTES,
            next_run=row.get("next_run"),
        )

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
    # The records this pass touched, by what it did to them: {"listed": [ids],
    # "advanced": [...], "retired": [...], "failed": [...]} (RECORDS_KEPT each).
    records = models.JSONField(default=dict, blank=True)
    # A dry run's lines ("sandbox kind: stage (holds)"), on the unsaved record only.
    would: list[str]

    objects = ReconcilerPassQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at"]
        permissions = [("run_pass", "Can ask for a reconciler pass now")]
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

    def records_of(self, what: str) -> list[str]:
        return list((self.records or {}).get(what) or [])

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
