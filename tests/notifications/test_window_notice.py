"""An owner's notice is sent only inside its environment's retirement window
(docs/rules.md, the retirement window): a delivery due outside it (a retry of
one that failed at 16:59) waits for the opening, uncounted; other events go
at any hour."""

from datetime import UTC, datetime, time, timedelta

import pytest

from sandboxes import models as m
from sandboxes.notifications.delivery import deliver
from tests import factories as f

pytestmark = pytest.mark.django_db

SATURDAY = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
MONDAY_NINE = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


def office():
    return f.EnvironmentFactory(
        time_zone="UTC",
        window_days="mon,tue,wed,thu,fri",
        window_start=time(9),
        window_end=time(17),
    )


def delivery(env, type_):
    event = f.NotificationEventFactory(environment=env, type=type_, payload={"title": "t"})
    return f.NotificationDeliveryFactory(event=event, next_attempt_at=SATURDAY)


def test_a_notice_due_outside_the_window_waits_for_the_opening_unsent():
    d = delivery(office(), m.NotificationType.NOTICE)
    assert deliver(d.pk, now=SATURDAY) == m.DeliveryStatus.PENDING
    d.refresh_from_db()
    assert (d.status, d.next_attempt_at, d.attempts, d.last_attempt_at) == (
        m.DeliveryStatus.PENDING,
        MONDAY_NINE,
        0,
        None,
    )
    # At the opening it is sent (here: the channel's variable is unset, so the
    # attempt fails and is counted: it was tried).
    deliver(d.pk, now=MONDAY_NINE + timedelta(seconds=1))
    d.refresh_from_db()
    assert d.attempts == 1 and d.last_attempt_at is not None


def test_other_events_go_at_any_hour():
    d = delivery(office(), m.NotificationType.RETIRED)
    deliver(d.pk, now=SATURDAY)
    d.refresh_from_db()
    assert d.attempts == 1
