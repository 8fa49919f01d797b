"""The delivery log keeps a receiver's status code and a short error, never
what it answered, and only admins read it (README: Notifications).

Regression: a non-2xx answer's first 300 bytes were stored as the delivery's
last error and shown to every role, so a channel pointed at an internal
service (a metadata endpoint) read that service's answer back."""

import importlib
import secrets as random

import pytest
from django.db import connection, transaction
from django.urls import reverse

from sandboxes.models import NotificationChannel, NotificationDelivery
from sandboxes.notifications import channels, delivery, events
from sandboxes.roles import ADMINS, OPERATORS, REVIEWERS
from tests.console.conftest import login
from tests.factories import RetirementFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def record(db):
    return RetirementFactory(lease__issue__key="PAP-300")


@pytest.fixture
def admin(db):
    return UserFactory(username="ines-admin", groups=[ADMINS])


def announce(record, key="k1"):
    with transaction.atomic():
        return events.emit("retirement.retired", key=key, retirement=record)


def windows(data: bytes, width: int = 8) -> set[str]:
    text = data.decode()
    return {text[i : i + width] for i in range(len(text) - width + 1)}


def stored_text(channel) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(string_agg(row_to_json(d)::text, ''), '') "
            "FROM sandboxes_notificationdelivery d WHERE channel_id = %s",
            [channel.pk],
        )
        return cursor.fetchone()[0]


@pytest.mark.parametrize(("kind", "scheme"), [("webhook", "http"), ("apprise", "json")])
def test_a_receivers_answer_is_never_stored_or_shown(admin, record, receiver, kind, scheme):
    secret = b'{"AccessKeyId": "ASIA' + random.token_hex(16).upper().encode() + b'"}'
    receiver.status, receiver.body = 500, secret
    channel, _ = channels.create_channel(
        record.environment_id,
        actor=admin,
        name="hook",
        kind=kind,
        url=f"{scheme}://{receiver.url}/h",
    )
    announce(record)
    assert delivery.send_due() == {"pending": 1}
    d = NotificationDelivery.objects.get(channel=channel)
    assert (d.response_code, d.last_error) == (500, "HTTP 500")

    as_admin = login(admin)
    tested = as_admin.post(reverse("channel-test", args=[channel.pk]), follow=True)
    assert "Test notification not delivered: HTTP 500" in tested.content.decode()
    pages = [
        tested.content.decode(),
        as_admin.get(reverse("channel-detail", args=[channel.pk])).content.decode(),
        as_admin.get(reverse("channels", args=[record.environment_id])).content.decode(),
        as_admin.get(reverse("audit")).content.decode(),
        stored_text(channel),
    ]
    assert len(receiver.requests) == 2
    for text in pages:
        assert not {w for w in windows(secret) if w in text}, text[:300]


def test_bodies_stored_before_are_cleared_to_their_status(record):
    channel = NotificationChannel.objects.create(
        environment=record.environment, name="old", kind="webhook", url_env="OLD_HOOK"
    )
    event = announce(record)
    old = NotificationDelivery.objects.get(event=event, channel=channel)
    NotificationDelivery.objects.filter(pk=old.pk).update(
        last_error='HTTP 403: {"Code": "Success", "Token": "IQoJb3JpZ2luX2VjEJr"}',
        response_code=403,
    )
    other = announce(record, key="k2")
    kept = NotificationDelivery.objects.get(event=other, channel=channel)
    NotificationDelivery.objects.filter(pk=kept.pk).update(last_error="ConnectError: refused")

    migration = importlib.import_module("sandboxes.migrations.0019_delivery_errors_without_bodies")
    from django.apps import apps

    migration.drop_bodies(apps, None)
    old.refresh_from_db()
    kept.refresh_from_db()
    assert (old.last_error, old.response_code) == ("HTTP 403", 403)
    assert kept.last_error == "ConnectError: refused"


@pytest.mark.parametrize(
    ("group", "sees"), [(REVIEWERS, False), (OPERATORS, False), (ADMINS, True)]
)
def test_only_admins_read_the_delivery_log(record, group, sees):
    channel = NotificationChannel.objects.create(
        environment=record.environment, name="ops", kind="apprise", url_env="OPS_URL"
    )
    announce(record)
    NotificationDelivery.objects.update(last_error="HTTP 502", response_code=502, attempts=1)
    client = login(UserFactory(username="someone", groups=[group]))
    response = client.get(reverse("channel-detail", args=[channel.pk]))
    assert response.status_code == 200
    page = response.content.decode()
    assert "ops" in page  # the channel itself: name, kind, target, events
    for detail in ("data-delivery-status", "HTTP 502", ">502<", "retirement.retired"):
        assert (detail in page) is sees, detail
    if not sees:
        assert "The delivery log is shown to admins" in page
        older = client.get(reverse("channel-detail", args=[channel.pk]) + "?after=x")
        assert older.status_code == 200 and "data-delivery-status" not in older.content.decode()
