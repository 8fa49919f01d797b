"""The notifications sweep (sandboxes/notifications/tasks.py), the task the
`notifications sweep` schedule runs every minute."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import transaction
from django.utils import timezone
from django.utils.module_loading import import_string
from django_q.models import Schedule

from sandboxes.models import NotificationDelivery, NotificationEvent, NotificationType
from sandboxes.notifications import channels, events, tasks
from sandboxes.roles import ADMINS
from tests.factories import ReconcilerPassFactory, RetirementFactory, UserFactory

pytestmark = pytest.mark.django_db


def test_the_schedule_names_the_sweep_and_an_older_schedule_is_moved_to_it():
    # A schedule a deploy wrote before the sweep had its own module: the next
    # setup_schedules (every deploy runs it) points it at tasks.sweep.
    Schedule.objects.create(
        name="notifications sweep",
        func="sandboxes.notifications.delivery.sweep",
        schedule_type=Schedule.MINUTES,
        minutes=1,
    )
    call_command("setup_schedules", stdout=StringIO())
    sweep = Schedule.objects.get(name="notifications sweep")
    assert import_string(sweep.func) is tasks.sweep
    assert import_string(Schedule.objects.get(name="reconciler pass").func)


def test_the_sweep_announces_an_overdue_reconciler_and_queues_what_is_due(settings, receiver):
    from django_q.models import OrmQ

    if "orm" not in settings.Q_CLUSTER:
        pytest.skip("the broker is Redis here (REDIS_URL); the ORM queue is not used")
    settings.RECONCILER_OVERDUE_MINUTES = 10
    record = RetirementFactory()
    channels.create_channel(
        record.environment_id,
        actor=UserFactory(groups=[ADMINS]),
        name="ops",
        kind="apprise",
        url=f"json://{receiver.url}/ops",
        events=["retirement.retired", "reconciler.overdue"],
    )
    with transaction.atomic():  # this test's transaction never commits: nothing is queued
        events.emit(NotificationType.RETIRED, key="retired", retirement=record)
    stale = timezone.now() - timedelta(minutes=30)
    ReconcilerPassFactory(started_at=stale, finished_at=stale)
    before = OrmQ.objects.count()

    assert tasks.sweep() == {"queued": 2, "owner_digests": 0}

    assert NotificationEvent.objects.filter(type=NotificationType.RECONCILER_OVERDUE).count() == 1
    assert NotificationDelivery.objects.count() == 2
    assert OrmQ.objects.count() == before + 2  # one task per delivery, sent by the cluster
    assert receiver.requests == []
    # Still due until sent; the stall is announced once.
    assert tasks.sweep() == {"queued": 2, "owner_digests": 0}
    assert NotificationEvent.objects.filter(type=NotificationType.RECONCILER_OVERDUE).count() == 1
