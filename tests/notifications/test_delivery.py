"""Channels and delivery against a real receiving server on loopback: Apprise's
json:// plugin, and a Standard Webhooks endpoint whose receiver verifies the
signature with the `standardwebhooks` reference library."""

import json
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from sandboxes.actions import ActionRefused
from sandboxes.models import (
    AuditEvent,
    NotificationChannel,
    NotificationDelivery,
    NotificationEvent,
    NotificationType,
)
from sandboxes.notifications import channels, delivery, events, secrets
from sandboxes.roles import ADMINS
from tests.factories import RetirementFactory, UserFactory

from .conftest import allow

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(db):
    return UserFactory(username="nora-admin", groups=[ADMINS])


@pytest.fixture
def record(db):
    return RetirementFactory(lease__issue__key="PAP-142")


def announce(record, key="k1", event_type=NotificationType.RETIRED, **data):
    with transaction.atomic():
        return events.emit(event_type, key=key, retirement=record, data=data)


def test_an_apprise_channel_posts_the_message_to_a_loopback_receiver(admin, record, receiver):
    channel, shown = channels.create_channel(
        record.environment_id,
        actor=admin,
        name="ops-json",
        kind="apprise",
        url=f"json://{receiver.url}/apprise",
    )
    assert shown == ""  # only webhooks have a secret
    announce(record)
    assert delivery.send_due() == {"delivered": 1}

    (req,) = receiver.requests
    assert req.path == "/apprise"
    body = json.loads(req.body)  # Apprise's JSON plugin: {version, title, message, type, …}
    text = body["title"] + "\n" + body["message"]
    for expected in (
        "PAP-142",
        record.provider_lease_id,
        record.environment.name,
        record.kind,
        f"/sandboxes/{record.pk}/",
    ):
        assert expected in text
    d = NotificationDelivery.objects.get(channel=channel)
    assert (d.status, d.attempts, d.last_error) == ("delivered", 1, "")
    assert d.delivered_at is not None


def test_a_webhook_is_signed_per_standard_webhooks_and_verifies(admin, record, receiver):
    channel, secret = channels.create_channel(
        record.environment_id,
        actor=admin,
        name="ops-hook",
        kind="webhook",
        url=f"http://{receiver.url}/hook",
    )
    assert secret.startswith("whsec_")
    announce(record, proof="the latest compare found nothing unsaved")
    assert delivery.send_due() == {"delivered": 1}

    (req,) = receiver.requests
    headers = {k.lower(): v for k, v in req.headers.items()}
    assert {"webhook-id", "webhook-timestamp", "webhook-signature"} <= set(headers)
    body = Webhook(secret).verify(req.body, headers)  # raises unless the signature matches
    assert body["type"] == "retirement.retired"
    data = body["data"]
    assert data["task"]["key"] == "PAP-142"
    assert data["task"]["url"].endswith(f"/tasks/{record.lease.issue_id}/")
    assert data["sandbox"] == {"provider": record.provider, "id": record.provider_lease_id}
    assert data["environment"]["name"] == record.environment.name
    assert data["kind"] == record.kind
    assert data["record_url"].endswith(f"/sandboxes/{record.pk}/")
    assert data["proof"] == "the latest compare found nothing unsaved"
    d = NotificationDelivery.objects.get(channel=channel)
    assert headers["webhook-id"] == f"msg_{d.pk.hex}"
    assert d.response_code == 200

    # Another secret (or a tampered body) does not verify.
    with pytest.raises(WebhookVerificationError):
        Webhook(secrets.new_webhook_secret()).verify(req.body, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(req.body.replace(b"PAP-142", b"PAP-143"), headers)


def test_a_failing_channel_is_retried_with_backoff_and_logged(admin, record, receiver):
    receiver.status = 503
    channel, _ = channels.create_channel(
        record.environment_id,
        actor=admin,
        name="flaky",
        kind="webhook",
        url=f"http://{receiver.url}/hook",
    )
    announce(record)
    assert delivery.send_due() == {"pending": 1}
    d = NotificationDelivery.objects.get(channel=channel)
    assert (d.status, d.attempts, d.response_code) == ("pending", 1, 503)
    assert "503" in d.last_error
    assert d.next_attempt_at - d.last_attempt_at == timedelta(seconds=30)
    # Not due yet: nothing is sent again before the backoff.
    assert delivery.send_due() == {}
    later = timezone.now() + timedelta(seconds=31)
    assert delivery.send_due(later) == {"pending": 1}
    d.refresh_from_db()
    assert d.attempts == 2 and d.next_attempt_at - d.last_attempt_at == timedelta(seconds=60)
    # The receiver recovers: the same message (same webhook-id) is delivered.
    receiver.status = 204
    NotificationDelivery.objects.filter(pk=d.pk).update(next_attempt_at=timezone.now())
    assert delivery.send_due() == {"delivered": 1}
    d.refresh_from_db()
    assert (d.status, d.attempts, d.response_code, d.last_error) == ("delivered", 3, 204, "")
    ids = {r.headers["webhook-id"] for r in receiver.requests}
    assert ids == {f"msg_{d.pk.hex}"} and len(receiver.requests) == 3


def test_a_channel_gives_up_after_its_last_attempt(admin, record, settings):
    allow(settings, "127.0.0.1:9")  # a listed host where nobody listens
    channel, _ = channels.create_channel(
        record.environment_id,
        actor=admin,
        name="dead",
        kind="webhook",
        url="http://127.0.0.1:9/nobody-listens",
    )
    announce(record)
    d = NotificationDelivery.objects.get(channel=channel)
    for _ in range(delivery.MAX_ATTEMPTS):
        NotificationDelivery.objects.filter(pk=d.pk).update(next_attempt_at=timezone.now())
        delivery.deliver(d.pk)
    d.refresh_from_db()
    assert (d.status, d.attempts, d.next_attempt_at) == ("failed", delivery.MAX_ATTEMPTS, None)
    assert "Connect" in d.last_error
    assert delivery.deliver(d.pk) == "failed"  # nothing more is sent


def test_an_event_is_announced_at_most_once_per_channel(admin, record, receiver):
    channels.create_channel(
        record.environment_id,
        actor=admin,
        name="a",
        kind="apprise",
        url=f"json://{receiver.url}/a",
    )
    channels.create_channel(
        record.environment_id,
        actor=admin,
        name="b",
        kind="apprise",
        url=f"json://{receiver.url}/b",
    )
    assert announce(record, key="retired:x") is not None
    assert announce(record, key="retired:x") is None  # the same key: a no-op
    assert NotificationEvent.objects.count() == 1
    assert NotificationDelivery.objects.count() == 2
    assert delivery.send_due() == {"delivered": 2}
    (d, _) = NotificationDelivery.objects.all()
    assert delivery.deliver(d.pk) == "delivered"  # a second task for it sends nothing
    assert sorted(r.path for r in receiver.requests) == ["/a", "/b"]


def test_a_channel_of_another_environment_or_filtered_out_hears_nothing(admin, record, receiver):
    other = RetirementFactory()
    channels.create_channel(
        other.environment_id,
        actor=admin,
        name="elsewhere",
        kind="apprise",
        url=f"json://{receiver.url}/x",
    )
    channels.create_channel(
        record.environment_id,
        actor=admin,
        name="approvals-only",
        kind="apprise",
        url=f"json://{receiver.url}/y",
        events=["retirement.awaiting_approval"],
    )
    announce(record)
    assert NotificationDelivery.objects.count() == 0


def test_emitting_sends_nothing_inside_the_transaction_and_queues_after_commit(
    admin, record, receiver, monkeypatch, django_capture_on_commit_callbacks
):
    queued = []
    monkeypatch.setattr(delivery, "enqueue", lambda ids: queued.extend(ids))
    channels.create_channel(
        record.environment_id,
        actor=admin,
        name="q",
        kind="apprise",
        url=f"json://{receiver.url}/q",
    )
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        events.emit(NotificationType.RETIRED, key="k", retirement=record)
        assert queued == [] and receiver.requests == []
    assert len(callbacks) == 1
    assert len(queued) == 1 and receiver.requests == []


def test_the_queued_task_is_a_django_q_task(
    admin, record, receiver, django_capture_on_commit_callbacks
):
    from django.conf import settings
    from django_q.models import OrmQ

    if "orm" not in settings.Q_CLUSTER:
        pytest.skip("the broker is Redis here (REDIS_URL); the ORM queue is not used")
    channels.create_channel(
        record.environment_id,
        actor=admin,
        name="q",
        kind="apprise",
        url=f"json://{receiver.url}/q",
    )
    before = OrmQ.objects.count()
    with django_capture_on_commit_callbacks(execute=True):
        announce(record)
    assert OrmQ.objects.count() == before + 1
    assert receiver.requests == []  # queued for the cluster, not sent here


def test_an_emit_that_cannot_be_recorded_does_not_break_the_callers_transaction(record):
    with transaction.atomic():
        assert events.emit("no.such.type", key="bad", retirement=record) is None
        # The caller's transaction is still usable.
        assert NotificationEvent.objects.count() == 0


def test_urls_and_secrets_are_stored_encrypted_and_never_shown_or_audited(admin, record):
    url = "https://hooks.example.com/services/T000/B000/verysecrettoken"
    channel, secret = channels.create_channel(
        record.environment_id, actor=admin, name="hook", kind="webhook", url=url
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT row_to_json(c)::text FROM sandboxes_notificationchannel c WHERE id = %s",
            [channel.pk],
        )
        raw_row = cursor.fetchone()[0]
    assert "verysecrettoken" not in raw_row and secret not in raw_row
    assert secrets.decrypt(channel.url_encrypted) == url
    assert secrets.decrypt(channel.secret_encrypted) == secret
    assert channel.url_hint == "https://hooks.example.com/…"
    audit_text = json.dumps(list(AuditEvent.objects.values("before", "after", "reason")))
    assert "verysecrettoken" not in audit_text and secret not in audit_text
    assert AuditEvent.objects.get().action == "channel.create"


def test_a_url_may_come_from_an_environment_variable(admin, record, receiver, monkeypatch):
    monkeypatch.setenv("OPS_NTFY_URL", f"json://{receiver.url}/from-env")
    channel, _ = channels.create_channel(
        record.environment_id, actor=admin, name="env", kind="apprise", url_env="OPS_NTFY_URL"
    )
    assert channel.url_encrypted == ""
    announce(record)
    assert delivery.send_due() == {"delivered": 1}
    assert receiver.requests[0].path == "/from-env"
    monkeypatch.delenv("OPS_NTFY_URL")
    announce(record, key="k2")
    assert delivery.send_due() == {"pending": 1}
    assert "OPS_NTFY_URL" in NotificationDelivery.objects.get(status="pending").last_error


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"kind": "apprise", "url": "nonsense://x"}, "url"),
        ({"kind": "webhook", "url": "ftp://example.com/"}, "url"),
        ({"kind": "webhook", "url": "https://hooks.example.com:99999/"}, "url"),
        ({"kind": "webhook", "url": "https://hooks.example.com:port/"}, "url"),
        ({"kind": "webhook", "url": "http://[fd00::1/"}, "url"),
        ({"kind": "webhook", "url": "http://:8080/"}, "url"),
        ({"kind": "webhook", "url": "", "url_env": ""}, "url"),
        ({"kind": "apprise", "url_env": "lower-case"}, "url_env"),
        ({"kind": "pager", "url": "https://x"}, "kind"),
        ({"kind": "apprise", "url": "json://hooks.example.com/", "events": ["nope"]}, "events"),
    ],
)
def test_bad_channel_input_is_refused_naming_the_field(admin, record, kwargs, field):
    with pytest.raises(ActionRefused, match=field):
        channels.create_channel(record.environment_id, actor=admin, name="x", **kwargs)
    assert NotificationChannel.objects.count() == 0 and AuditEvent.objects.count() == 0


def test_rotating_a_secret_returns_it_once_and_the_old_one_stops_verifying(admin, record, receiver):
    channel, old = channels.create_channel(
        record.environment_id,
        actor=admin,
        name="hook",
        kind="webhook",
        url=f"http://{receiver.url}/hook",
    )
    channel, new = channels.rotate_secret(channel.pk, actor=admin, reason="leaked")
    assert new != old
    announce(record)
    delivery.send_due()
    (req,) = receiver.requests
    Webhook(new).verify(req.body, req.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(old).verify(req.body, req.headers)
    assert AuditEvent.objects.filter(action="channel.rotate_secret").count() == 1


def test_send_test_delivers_now_and_logs_it(admin, record, receiver):
    channel, _ = channels.create_channel(
        record.environment_id,
        actor=admin,
        name="t",
        kind="apprise",
        url=f"json://{receiver.url}/t",
    )
    d = channels.send_test(channel.pk, actor=admin)
    assert d.status == "delivered" and len(receiver.requests) == 1
    assert d.event.type == "channel.test"
    assert AuditEvent.objects.filter(action="channel.test").count() == 1


def test_overdue_reconciler_is_announced_once_per_stall(admin, record, receiver, settings):
    from tests.factories import ReconcilerPassFactory

    settings.RECONCILER_OVERDUE_MINUTES = 10
    channels.create_channel(
        record.environment_id,
        actor=admin,
        name="o",
        kind="apprise",
        url=f"json://{receiver.url}/o",
        events=["reconciler.overdue"],
    )
    recent = ReconcilerPassFactory()
    assert events.reconciler_overdue() is None
    stale = timezone.now() - timedelta(minutes=30)
    type(recent).objects.filter(pk=recent.pk).update(started_at=stale, finished_at=stale)
    assert events.reconciler_overdue() is not None
    assert events.reconciler_overdue() is None  # the same stall: once
    delivery.send_due()
    body = json.loads(receiver.requests[0].body)
    assert "overdue" in body["title"]
