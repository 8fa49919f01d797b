"""People without a shell: admins add users with a role and hand them a
set-password link from the Users page (sandboxes/people.py); `create_user` and
`grant_role` from a shell. The role matrix of these actions is
tests/security/endpoints.py (admins only)."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from sandboxes.models import AuditEvent
from sandboxes.roles import role_of
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

User = get_user_model()
NO_MAIL = {
    "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
    "EMAIL_HOST": "",
}


def _link_in(html: str) -> str:
    match = re.search(r"data-set-password-url>([^<]+)<", html)
    assert match, html
    return match.group(1)


def test_an_admin_adds_a_user_with_a_role_and_is_shown_the_link_without_mail(
    as_admin, admin, settings, client
):
    for key, value in NO_MAIL.items():
        setattr(settings, key, value)
    settings.CONSOLE_BASE_URL = "http://console.example:8123"
    response = as_admin.post(
        reverse("user-create"),
        {"username": "nina", "email": "nina@example.com", "role": "operator", "reason": "on call"},
    )
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    html = response.content.decode()
    assert "no mail is configured" in html
    link = _link_in(html)
    assert link.startswith("http://console.example:8123/accounts/set-password/")
    nina = User.objects.get(username="nina")
    assert role_of(nina) == "operator" and not nina.has_usable_password()
    assert mail.outbox == []
    row = AuditEvent.objects.get(action="user.create")
    assert (row.actor, row.reason, row.after["role"]) == (admin, "on call", "operator")
    assert row.after["link"] == "shown to the admin"
    assert link not in str(row.after)  # the audit never holds the link itself

    # The link lets nina choose a password once, then log in.
    path = link.removeprefix("http://console.example:8123")
    form = client.get(path, follow=True)
    assert form.status_code == 200 and b"Choose a password" in form.content
    done = client.post(
        form.redirect_chain[-1][0] if form.redirect_chain else path,
        {"new_password1": "a long new passphrase 9", "new_password2": "a long new passphrase 9"},
    )
    assert done.status_code == 302 and done["Location"] == reverse("password-set-done")
    nina.refresh_from_db()
    assert nina.check_password("a long new passphrase 9")
    again = client.get(path, follow=True)
    assert b"used or expired" in again.content


def test_with_mail_configured_the_link_is_mailed_not_shown(as_admin, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    response = as_admin.post(
        reverse("user-create"),
        {"username": "omar", "email": "omar@example.com", "role": "reviewer", "reason": "audit"},
    )
    assert response.status_code == 200
    assert b"was mailed to omar@example.com" in response.content
    assert b"data-set-password-url" not in response.content
    (message,) = mail.outbox
    assert message.to == ["omar@example.com"] and "/accounts/set-password/" in message.body
    assert AuditEvent.objects.get(action="user.create").after["link"] == (
        "sent to omar@example.com"
    )


def test_a_mail_that_cannot_be_sent_shows_the_link_instead(as_admin, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = 9  # discard: nothing listens, the connection is refused
    settings.EMAIL_TIMEOUT = 2
    response = as_admin.post(
        reverse("user-create"),
        {"username": "pia", "email": "pia@example.com", "role": "reviewer", "reason": "x"},
    )
    assert response.status_code == 200
    assert b"mailing it failed" in response.content
    assert _link_in(response.content.decode())
    assert "mail_error" in AuditEvent.objects.get(action="user.create").after


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({"username": "", "role": "reviewer", "reason": "x"}, "username", "required"),
        ({"username": "bad name!", "role": "reviewer", "reason": "x"}, "username", "valid"),
        ({"username": "nina", "role": "god", "reason": "x"}, "role", "valid choice"),
        ({"username": "nina", "role": "reviewer", "reason": ""}, "reason", "required"),
        ({"username": "n", "email": "nope", "role": "reviewer", "reason": "x"}, "email", "valid"),
        ({"username": "Taken", "role": "reviewer", "reason": "x"}, "username", "taken"),
        ({"username": "nina\x00", "role": "reviewer", "reason": "x"}, "username", "NUL"),
    ],
)
def test_bad_input_names_the_field_and_changes_nothing(as_admin, data, field, words):
    UserFactory(username="taken")
    before = User.objects.count()
    response = as_admin.post(reverse("user-create"), data)
    assert response.status_code == 400
    form = response.context["form"]
    assert words.lower() in " ".join(form.errors.get(field, [])).lower(), form.errors
    assert User.objects.count() == before
    assert not AuditEvent.objects.exists()


def test_an_admin_sends_a_new_set_password_link(as_admin, settings):
    for key, value in NO_MAIL.items():
        setattr(settings, key, value)
    nina = UserFactory(username="nina")
    url = reverse("user-password-link", kwargs={"pk": nina.pk})
    assert as_admin.post(url, {"reason": ""}).status_code == 400
    response = as_admin.post(url, {"reason": "forgot it"})
    assert response.status_code == 200
    assert "/accounts/set-password/" in _link_in(response.content.decode())
    row = AuditEvent.objects.get(action="user.password_link")
    assert row.object_id == str(nina.pk) and row.reason == "forgot it"
    nina.is_active = False
    nina.save()
    refused = as_admin.post(url, {"reason": "again"})
    assert refused.status_code == 400 and b"inactive" in refused.content


def test_the_users_page_costs_the_same_queries_for_more_users(as_admin):
    as_admin.get(reverse("users"))  # warm the session and permission caches
    with CaptureQueriesContext(connection) as few:
        assert as_admin.get(reverse("users")).status_code == 200
    for i in range(5):
        UserFactory(username=f"more{i}", groups=["operators"])
    with CaptureQueriesContext(connection) as many:
        assert as_admin.get(reverse("users")).status_code == 200
    # 11: with the admin's own company limit, the users' limits and the companies.
    assert len(many) == len(few) <= 11


def test_grant_role_on_a_missing_user_says_how_to_create_one():
    with pytest.raises(CommandError) as caught:
        call_command("grant_role", "ghost", "operator")
    words = str(caught.value)
    assert "Users page" in words and "manage.py create_user ghost operator" in words
    assert "superuser" not in words


def test_create_user_prints_a_link_and_grants_the_role(capsys, settings):
    for key, value in NO_MAIL.items():
        setattr(settings, key, value)
    call_command("create_user", "rita", "operator", "--email", "rita@example.com")
    out = capsys.readouterr().out
    assert "rita (operator) created" in out and "/accounts/set-password/" in out
    rita = User.objects.get(username="rita")
    assert role_of(rita) == "operator" and not rita.has_usable_password()
    assert {e.action for e in AuditEvent.objects.all()} == {"user.create", "user.grant_role"}
    with pytest.raises(CommandError, match="exists"):
        call_command("create_user", "rita", "admin")
