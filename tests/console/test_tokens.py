import re

from django.urls import reverse

from sandboxes.models import ApiToken, AuditEvent


def test_admins_create_a_token_and_see_it_once(as_admin, admin, db):
    response = as_admin.post(
        reverse("token-create"), {"name": "ops-bot", "scope": "operator", "reason": "cron"}
    )
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    raw = re.search(r"data-raw-token>([^<]+)<", response.content.decode()).group(1)
    token = ApiToken.objects.get(name="ops-bot")
    assert ApiToken.authenticate(raw) == token
    assert token.scope == "operator" and token.created_by == admin
    assert raw not in as_admin.get(reverse("tokens")).content.decode()
    (event,) = AuditEvent.objects.all()
    assert event.action == "token.create" and event.actor == admin
    assert raw not in str(event.after)


def test_admins_revoke_a_token(as_admin, db):
    token, raw = ApiToken.issue("old", "ingest")
    response = as_admin.post(reverse("token-revoke", kwargs={"pk": token.pk}), {"reason": "leak"})
    assert response.status_code == 302
    assert ApiToken.authenticate(raw) is None
    (event,) = AuditEvent.objects.all()
    assert event.action == "token.revoke" and event.reason == "leak"
    assert event.before["revoked_at"] is None and event.after["revoked_at"]
    as_admin.post(reverse("token-revoke", kwargs={"pk": token.pk}))
    assert AuditEvent.objects.count() == 1


def test_a_token_needs_a_name(as_admin, db):
    response = as_admin.post(reverse("token-create"), {"name": "", "scope": "operator"})
    assert response.status_code == 400
    assert ApiToken.objects.count() == 0
