"""The owner e-mail page of an environment (README: Owner e-mail): admins set the
SMTP URL and turn it on; a bad URL is refused naming the field, and nothing
changes; the URL is never shown back; the digest log is for admins, without
any digest's body, in a fixed number of queries."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from sandboxes import models as m
from sandboxes.notifications import secrets
from tests import factories as f

pytestmark = pytest.mark.django_db

GOOD = "mailtos://console:s3cret-pass@smtp.example.com:587?from=console@example.com"


@pytest.fixture
def env(db):
    return f.EnvironmentFactory(name="prod-daytona")


def save(client, env, **data):
    data.setdefault("reason", "owners should hear")
    return client.post(reverse("owner-mail-edit", kwargs={"pk": env.pk}), data)


def test_an_admin_sets_the_url_and_it_is_stored_encrypted_and_never_shown(as_admin, env):
    response = save(as_admin, env, url=GOOD, enabled="on")
    assert response.status_code == 302

    setting = m.OwnerMail.objects.get(environment=env)
    assert setting.enabled and setting.enabled_at is not None
    assert secrets.decrypt(setting.url_encrypted) == GOOD
    assert setting.url_hint == "mailtos://smtp.example.com:587/…"
    (event,) = m.AuditEvent.objects.filter(action="owner_mail.update")
    assert event.after == {
        "url": "mailtos://smtp.example.com:587/…",
        "enabled": True,
        "url_changed": True,
    }
    page = as_admin.get(reverse("owner-mail", kwargs={"pk": env.pk})).content.decode()
    assert "mailtos://smtp.example.com:587/…" in page and 'data-owner-mail="on"' in page
    assert "s3cret-pass" not in page and "console:" not in page
    assert "s3cret-pass" not in str(event.before) + str(event.after) + event.reason

    # A blank URL keeps the stored one; the admin turns it off.
    assert save(as_admin, env, url="", enabled="").status_code == 302
    setting.refresh_from_db()
    assert not setting.enabled and secrets.decrypt(setting.url_encrypted) == GOOD


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({"url": "https://smtp.example.com/"}, "url", "starts with mailto:// or mailtos://"),
        ({"url": "json://hooks.example.com/x"}, "url", "starts with mailto:// or mailtos://"),
        (
            {"url": "mailto://smtp.example.com?from=a@example.com&to=boss@example.com"},
            "url",
            "leave the recipients out",
        ),
        (
            {"url": "mailto://smtp.example.com/someone@example.com?from=a@example.com"},
            "url",
            "leave the recipients out",
        ),
        (
            {"url": "mailto://127.0.0.1:2525?from=a@example.com"},
            "url",
            "127.0.0.1 is a loopback address",
        ),
        ({"url": "mailto://10.1.2.3?from=a@example.com"}, "url", "a private address"),
        ({}, "url", "give the SMTP URL"),
        ({"url": GOOD, "url_env": "OWNER_SMTP_URL"}, "url", "not both"),
        ({"url_env": "lower-case"}, "url_env", "an environment variable name"),
    ],
)
def test_a_bad_url_is_refused_naming_its_field_and_nothing_changes(
    as_admin, env, data, field, words
):
    response = save(as_admin, env, enabled="on", **data)
    assert response.status_code == 400
    form = response.context["form"]
    assert any(words in e for e in form.errors.get(field, [])), form.errors
    assert not m.OwnerMail.objects.exists() and not m.AuditEvent.objects.exists()


def test_a_listed_loopback_server_is_accepted(as_admin, env, settings):
    settings.NOTIFY_ALLOWED_HOSTS = ["127.0.0.1:2525"]
    assert save(as_admin, env, url="mailto://127.0.0.1:2525?from=a@example.com").status_code == 302
    # Another port of the same host stays refused.
    response = save(as_admin, env, url="mailto://127.0.0.1:2526?from=a@example.com")
    assert response.status_code == 400 and "loopback" in response.context["form"].errors["url"][0]


def test_the_url_may_come_from_an_environment_variable(as_admin, env, monkeypatch):
    monkeypatch.setenv("OWNER_SMTP_URL", "mailto://10.0.0.9?from=a@example.com")
    response = save(as_admin, env, url_env="OWNER_SMTP_URL", enabled="on")
    assert response.status_code == 400  # judged where it is read: a private address
    monkeypatch.setenv("OWNER_SMTP_URL", GOOD)
    assert save(as_admin, env, url_env="OWNER_SMTP_URL", enabled="on").status_code == 302
    setting = m.OwnerMail.objects.get()
    assert (setting.url_env, setting.url_encrypted) == ("OWNER_SMTP_URL", "")
    page = as_admin.get(reverse("owner-mail", kwargs={"pk": env.pk})).content.decode()
    assert "$OWNER_SMTP_URL" in page and "smtp.example.com" not in page


def _digests(env, n, first=0):
    hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    for i in range(first, first + n):
        d = m.OwnerDigest.objects.create(
            environment=env,
            owner_user_id=f"user-{i}",
            owner_email=f"owner{i}@example.com" if i else "",
            hour=hour - timedelta(hours=i),
            status="delivered" if i else "no_email",
            last_error="" if i else "owner has no e-mail",
        )
        r = f.RetirementFactory(lease__environment=env)
        event = f.NotificationEventFactory(
            type=m.NotificationType.NOTICE, environment=env, retirement=r
        )
        m.OwnerDigestItem.objects.create(digest=d, event=event, retirement=r)


def test_the_digest_log_is_for_admins_and_says_who_heard_nothing(
    as_admin, as_reviewer, as_operator, env
):
    _digests(env, 2)
    url = reverse("owner-mail", kwargs={"pk": env.pk})
    page = as_admin.get(url).content.decode()
    assert page.count("data-digest-status=") == 2
    assert "owner has no e-mail" in page and "owner1@example.com" in page
    for client in (as_reviewer, as_operator):
        page = client.get(url).content.decode()
        assert "data-digest-status" not in page and "owner1@example.com" not in page
        assert 'data-owner-mail="off"' in page


def test_the_log_reads_a_fixed_number_of_queries(as_admin, env):
    url = reverse("owner-mail", kwargs={"pk": env.pk})
    _digests(env, 2)
    with CaptureQueriesContext(connection) as few:
        assert as_admin.get(url).status_code == 200
    _digests(env, 6, first=2)
    with CaptureQueriesContext(connection) as many:
        assert as_admin.get(url).status_code == 200
    assert len(many) == len(few)


def test_the_channels_page_links_to_the_owner_e_mail(as_reviewer, env):
    page = as_reviewer.get(reverse("channels", kwargs={"pk": env.pk})).content.decode()
    assert reverse("owner-mail", kwargs={"pk": env.pk}) in page
