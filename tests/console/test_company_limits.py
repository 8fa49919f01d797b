"""Company limits on the Users page and from a shell (README, company scope):
admins who see every company set them, validated, audited, behind CSRF; the
matrix of who sees what is tests/security/test_company_scope.py."""

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.urls import reverse

from sandboxes.models import ApiToken, AuditEvent, CompanyScope
from tests.factories import CompanyFactory, UserFactory, limit_to

from .conftest import login

pytestmark = pytest.mark.django_db


@pytest.fixture
def acme(db):
    return CompanyFactory(name="Acme")


@pytest.fixture
def globex(db):
    return CompanyFactory(name="Globex")


@pytest.fixture
def member(db):
    return UserFactory(username="mia", groups=["operators"])


def _limit(client, user, *companies, reason="contractor for these companies"):
    return client.post(
        reverse("user-companies", kwargs={"pk": user.pk}),
        {"companies": [str(c.pk) for c in companies], "reason": reason},
    )


def _limit_of(user) -> set:
    return set(CompanyScope.objects.filter(user=user).values_list("company_id", flat=True))


def test_an_admin_limits_a_user_and_lifts_it_again(as_admin, member, acme, globex):
    response = _limit(as_admin, member, acme, globex)
    assert response.status_code == 302
    assert _limit_of(member) == {acme.pk, globex.pk}
    event = AuditEvent.objects.get(action="user.companies")
    assert event.before["companies"] == []
    assert event.after["companies"] == sorted([str(acme.pk), str(globex.pk)])
    assert event.reason == "contractor for these companies"
    page = as_admin.get(reverse("users")).content.decode()
    assert "Acme, Globex" in page or "Globex, Acme" in page

    assert _limit(as_admin, member, reason="back to everything").status_code == 302
    assert _limit_of(member) == set()
    assert AuditEvent.objects.filter(action="user.companies").count() == 2


@pytest.mark.parametrize(
    ("companies", "words"),
    [
        (["not-a-uuid"], "is not a company id"),
        (["5d3b0b3e-0000-4000-8000-00000000dead"], "knows no company"),
    ],
)
def test_a_bad_company_is_refused_naming_the_field(as_admin, member, companies, words):
    response = as_admin.post(
        reverse("user-companies", kwargs={"pk": member.pk}),
        {"companies": companies, "reason": "typo"},
    )
    assert response.status_code == 400
    body = response.content.decode()
    assert "Companies:" in body and words in body
    assert _limit_of(member) == set()
    assert not AuditEvent.objects.exists()


def test_a_reason_is_required_and_no_change_is_refused(as_admin, member, acme):
    assert _limit(as_admin, member, acme, reason=" ").status_code == 400
    assert _limit_of(member) == set()
    assert _limit(as_admin, member, acme).status_code == 302
    again = _limit(as_admin, member, acme)
    assert again.status_code == 400 and "nothing changed" in again.content.decode()


def test_an_admin_cannot_change_their_own_limit(as_admin, admin, acme):
    response = _limit(as_admin, admin, acme)
    assert response.status_code == 400
    assert "your own limit" in response.content.decode()
    assert _limit_of(admin) == set()


def test_setting_limits_needs_csrf(admin, member, acme):
    client = login(admin)
    client.handler.enforce_csrf_checks = True
    assert _limit(client, member, acme).status_code == 403
    assert _limit_of(member) == set()


def test_an_operator_or_a_limited_admin_gets_403(as_operator, admin, member, acme, globex):
    assert _limit(as_operator, member, acme).status_code == 403
    limit_to(admin, acme)
    assert _limit(login(admin), member, globex).status_code == 403
    assert _limit_of(member) == set()


def test_a_limited_admin_manages_only_users_within_their_companies(admin, member, acme, globex):
    limit_to(admin, acme)
    colleague = limit_to(UserFactory(username="cole", groups=["reviewers"]), acme)
    stranger = limit_to(UserFactory(username="stan", groups=["reviewers"]), acme, globex)
    client = login(admin)
    page = client.get(reverse("users")).content.decode()
    assert 'data-user="cole"' in page
    assert 'data-user="mia"' not in page and 'data-user="stan"' not in page
    assert "data-company-limit" not in page and "data-limited-admin" in page
    for user in (member, stranger):
        role = client.post(
            reverse("user-role", kwargs={"pk": user.pk}), {"role": "admin", "reason": "x"}
        )
        assert role.status_code == 404
    ok = client.post(
        reverse("user-role", kwargs={"pk": colleague.pk}), {"role": "operator", "reason": "x"}
    )
    assert ok.status_code == 302


def test_a_limited_admin_lists_and_revokes_only_their_own_tokens(admin, acme):
    other, _ = ApiToken.issue("someone-elses", "operator")
    limit_to(admin, acme)
    client = login(admin)
    assert "someone-elses" not in client.get(reverse("tokens")).content.decode()
    revoke = client.post(reverse("token-revoke", kwargs={"pk": other.pk}), {"reason": "x"})
    assert revoke.status_code == 404
    other.refresh_from_db()
    assert other.revoked_at is None


# --- from a shell -----------------------------------------------------------------------


def test_create_user_and_grant_role_take_companies(acme, globex, capsys):
    call_command("create_user", "carl", "reviewer", "--company", str(acme.pk))
    user = get_user_model().objects.get(username="carl")
    assert _limit_of(user) == {acme.pk}
    call_command("grant_role", "carl", "--company", str(acme.pk), "--company", str(globex.pk))
    assert _limit_of(user) == {acme.pk, globex.pk}
    call_command("grant_role", "carl", "operator", "--every-company")
    assert _limit_of(user) == set()
    assert "every company" in capsys.readouterr().out
    actions = list(AuditEvent.objects.order_by("at").values_list("action", flat=True))
    assert actions.count("user.companies") == 3


def test_commands_refuse_a_bad_company(acme):
    with pytest.raises(CommandError, match="--company"):
        call_command("create_user", "dora", "reviewer", "--company", "acme")
    assert not get_user_model().objects.filter(username="dora").exists()
    with pytest.raises(CommandError, match="no limit"):
        call_command("create_token", "feeder", "--scope", "ingest", "--company", str(acme.pk))


def test_create_token_limits_a_token(acme, capsys):
    call_command("create_token", "acme-bot", "--scope", "reviewer", "--company", str(acme.pk))
    token = ApiToken.objects.get(name="acme-bot")
    assert token.companies == [str(acme.pk)]
