"""The channels pages: admins add and test channels; the secret is shown once;
no page ever renders a stored URL or secret; the delivery log shows admins
status, attempts, a short error and the response code."""

import pytest
from django.db import transaction
from django.urls import reverse

from sandboxes.models import NotificationChannel, NotificationDelivery
from sandboxes.notifications import delivery, events, secrets
from sandboxes.roles import ADMINS, REVIEWERS
from tests.console.conftest import login
from tests.factories import RetirementFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def record(db):
    return RetirementFactory(lease__issue__key="PAP-7")


@pytest.fixture
def as_admin(db):
    return login(UserFactory(username="ada", groups=[ADMINS]))


@pytest.fixture
def as_reviewer(db):
    return login(UserFactory(username="rex", groups=[REVIEWERS]))


def test_an_admin_adds_a_webhook_and_sees_its_secret_once(as_admin, record, receiver):
    url = f"http://{receiver.url}/hook/with-a-secret-path"
    response = as_admin.post(
        reverse("channel-create", args=[record.environment_id]),
        {"name": "ops", "kind": "webhook", "url": url, "reason": "on-call"},
    )
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    html = response.content.decode()
    (channel,) = NotificationChannel.objects.all()
    secret = html.split("data-webhook-secret>")[1].split("<")[0]
    assert secret.startswith("whsec_")
    assert "with-a-secret-path" not in html

    for page in (
        as_admin.get(reverse("channels", args=[record.environment_id])),
        as_admin.get(reverse("channel-detail", args=[channel.pk])),
    ):
        text = page.content.decode()
        assert page.status_code == 200
        assert secret not in text and "with-a-secret-path" not in text
        assert f"http://{receiver.url.split(':')[0]}" in text  # scheme and host only


def test_send_test_from_the_page_and_the_log_shows_the_outcome(as_admin, record, receiver):
    receiver.status = 500
    channel = NotificationChannel.objects.create(
        environment=record.environment,
        name="ntfy",
        kind="apprise",
        url_encrypted=secrets.encrypt(f"json://{receiver.url}/t"),
    )
    response = as_admin.post(reverse("channel-test", args=[channel.pk]), follow=True)
    assert "not delivered" in response.content.decode()
    d = NotificationDelivery.objects.get()
    assert (d.status, d.attempts, d.response_code) == ("pending", 1, 500)
    log = as_admin.get(reverse("channel-detail", args=[channel.pk])).content.decode()
    assert 'data-delivery-status="pending"' in log and ">500<" in log
    receiver.status = 200
    response = as_admin.post(reverse("channel-test", args=[channel.pk]), follow=True)
    assert "Test notification delivered." in response.content.decode()


def test_a_reviewer_reads_the_channel_not_its_log_and_cannot_post(as_reviewer, record):
    channel = NotificationChannel.objects.create(
        environment=record.environment, name="x", kind="apprise", url_env="OPS_URL"
    )
    with transaction.atomic():
        events.emit("retirement.retired", key="r", retirement=record)
    page = as_reviewer.get(reverse("channel-detail", args=[channel.pk])).content.decode()
    assert "$OPS_URL" in page and "Send test" not in page
    assert "retirement.retired" not in page  # the delivery log is for admins
    assert as_reviewer.post(reverse("channel-test", args=[channel.pk])).status_code == 403
    assert delivery.send_due()  # the env var is unset: logged as a failure, never a crash
    assert "OPS_URL" in NotificationDelivery.objects.get().last_error


def test_bad_input_on_the_page_names_the_field_and_changes_nothing(as_admin, record):
    response = as_admin.post(
        reverse("channel-create", args=[record.environment_id]),
        {"name": "bad", "kind": "apprise", "url": "nonsense://nowhere"},
    )
    assert response.status_code == 400
    assert "url: Apprise does not recognise this URL" in response.content.decode()
    assert NotificationChannel.objects.count() == 0
