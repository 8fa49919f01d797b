from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django_q.models import Schedule

from sandboxes.models.passes import RECONCILE_SCHEDULE

RECONCILE = RECONCILE_SCHEDULE
TASK = "sandboxes.reconciler.tasks.reconcile_pass"
NOTIFY = "notifications sweep"
NOTIFY_TASK = "sandboxes.notifications.tasks.sweep"


class Command(BaseCommand):
    help = "Create or update the django-q2 schedules by name (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--minutes", type=int, default=1, help="minutes between reconciler passes"
        )

    def handle(self, *args, minutes, **options):
        q = settings.Q_CLUSTER
        # A pass that outlives `retry` would be delivered again (STYLE: django-q2).
        if q.get("retry", 0) <= q.get("timeout", 0):
            raise CommandError(
                f"Q_CLUSTER retry ({q.get('retry')}) must exceed timeout ({q.get('timeout')})"
            )
        if q.get("catch_up", True):
            raise CommandError("Q_CLUSTER catch_up must be False: downtime must not replay passes")
        schedule, created = Schedule.objects.update_or_create(
            name=RECONCILE,
            defaults={
                "func": TASK,
                "schedule_type": Schedule.MINUTES,
                "minutes": minutes,
                "repeats": -1,
            },
        )
        verb = "created" if created else "updated"
        self.stdout.write(f"{verb} schedule {schedule.name!r}: {TASK} every {minutes} min")
        # Retries of notification deliveries and the overdue-reconciler check.
        schedule, created = Schedule.objects.update_or_create(
            name=NOTIFY,
            defaults={
                "func": NOTIFY_TASK,
                "schedule_type": Schedule.MINUTES,
                "minutes": 1,
                "repeats": -1,
            },
        )
        verb = "created" if created else "updated"
        self.stdout.write(f"{verb} schedule {schedule.name!r}: {NOTIFY_TASK} every 1 min")
