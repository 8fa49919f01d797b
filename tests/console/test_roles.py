"""Roles without a shell (issue 15 item 14): grant_role, the Users page, the
no-role page and the styled error pages."""

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from sandboxes.models import AuditEvent
from sandboxes.roles import role_of
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_grant_role_gives_exactly_one_role_and_audits_it(capsys):
    user = UserFactory(username="nina")
    call_command("grant_role", "nina", "operator")
    assert role_of(user) == "operator"
    call_command("grant_role", "nina", "reviewer")
    assert [g.name for g in user.groups.all()] == ["reviewers"]
    out = capsys.readouterr().out
    assert "nina: operator → reviewer" in out
    rows = AuditEvent.objects.filter(action="user.grant_role").order_by("at")
    assert [(r.before["role"], r.after["role"]) for r in rows] == [
        (None, "operator"),
        ("operator", "reviewer"),
    ]
    call_command("grant_role", "nina", "--none")
    assert role_of(user) == ""


def test_grant_role_names_what_is_wrong():
    with pytest.raises(CommandError, match="no user named 'ghost'"):
        call_command("grant_role", "ghost", "admin")
    UserFactory(username="nina")
    with pytest.raises(CommandError, match="give a role"):
        call_command("grant_role", "nina")


def test_admins_assign_roles_on_the_users_page(as_admin, admin):
    nina = UserFactory(username="nina")
    page = as_admin.get(reverse("users"))
    assert page.status_code == 200 and b"Role for nina" in page.content
    response = as_admin.post(
        reverse("user-role", kwargs={"pk": nina.pk}), {"role": "operator", "reason": "on call"}
    )
    assert response.status_code == 302
    assert role_of(nina) == "operator"
    row = AuditEvent.objects.get(action="user.grant_role")
    assert (row.actor, row.reason, row.after["role"]) == (admin, "on call", "operator")
    # No reason, an unknown role, or one's own role: refused, nothing changes.
    url = reverse("user-role", kwargs={"pk": nina.pk})
    assert as_admin.post(url, {"role": "admin", "reason": ""}).status_code == 400
    assert as_admin.post(url, {"role": "god", "reason": "x"}).status_code == 400
    own = reverse("user-role", kwargs={"pk": admin.pk})
    assert as_admin.post(own, {"role": "", "reason": "x"}).status_code == 400
    assert role_of(nina) == "operator" and role_of(admin) == "admin"


def test_only_admins_see_or_use_the_users_page(as_operator, as_reviewer, operator):
    nina = UserFactory(username="nina")
    for client in (as_operator, as_reviewer):
        assert client.get(reverse("users")).status_code == 403
        url = reverse("user-role", kwargs={"pk": nina.pk})
        assert client.post(url, {"role": "admin", "reason": "x"}).status_code == 403
    assert role_of(nina) == ""
    assert b'href="/users/"' not in as_operator.get(reverse("dashboard")).content


def test_a_user_without_a_role_sees_a_page_saying_so_with_a_logout(as_outsider):
    response = as_outsider.get(reverse("dashboard"))
    assert response.status_code == 403
    body = response.content.decode()
    assert "Your account has no console role yet" in body
    assert 'action="/accounts/logout/"' in body and "Log out" in body
    assert "console.css" in body


def test_the_error_pages_are_the_consoles_own(as_operator, as_reviewer):
    missing = as_reviewer.get("/sandboxes/00000000-0000-0000-0000-000000000000/")
    assert missing.status_code == 404
    assert b"Nothing here" in missing.content and b"console.css" in missing.content
    refused = as_reviewer.get(reverse("tokens"))
    assert refused.status_code == 403
    assert b"Your role does not allow this" in refused.content
    from django.template.loader import render_to_string

    html = render_to_string("500.html")
    assert "Something went wrong on our side" in html and "console.css" in html
