"""Every page and action: anonymous → login, no role → 403, reviewer reads but
cannot act, GET on an action → 405, a POST without CSRF → 403."""

import pytest
from django.test import Client
from django.urls import reverse

from sandboxes.models import AuditEvent
from tests.console.conftest import login
from tests.factories import ApiTokenFactory, EnvironmentFactory, RetirementFactory

PAGES = [
    ("dashboard", {}),
    ("sandbox-list", {}),
    ("sandbox-detail", {"pk": "retirement"}),
    ("approvals", {}),
    ("audit", {}),
    ("audit-export-csv", {}),
    ("audit-export-json", {}),
    ("passes", {}),
    ("environments", {}),
]
RETIREMENT_ACTIONS = [
    "sandbox-approve",
    "sandbox-retry",
    "sandbox-hold",
    "sandbox-release-hold",
    "sandbox-attest",
]


@pytest.fixture
def objects(db):
    return {
        "retirement": RetirementFactory(),
        "environment": EnvironmentFactory(),
        "token": ApiTokenFactory(),
    }


def _url(name, kwargs, objects):
    return reverse(name, kwargs={k: objects[v].pk for k, v in kwargs.items()})


def _all_actions(objects):
    urls = [reverse(n, kwargs={"pk": objects["retirement"].pk}) for n in RETIREMENT_ACTIONS]
    urls += [
        reverse("approvals-bulk"),
        reverse("sandbox-bulk"),
        reverse("environment-policy", kwargs={"pk": objects["environment"].pk}),
        reverse("token-create"),
        reverse("token-revoke", kwargs={"pk": objects["token"].pk}),
    ]
    return urls


@pytest.mark.parametrize(("name", "kwargs"), PAGES)
def test_it_sends_anonymous_visitors_to_the_login_page(client, objects, name, kwargs):
    url = _url(name, kwargs, objects)
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


@pytest.mark.parametrize(("name", "kwargs"), PAGES)
def test_it_forbids_an_account_without_a_role(as_outsider, objects, name, kwargs):
    assert as_outsider.get(_url(name, kwargs, objects)).status_code == 403


@pytest.mark.parametrize(("name", "kwargs"), PAGES)
def test_it_lets_reviewers_read_every_page(as_reviewer, objects, name, kwargs):
    assert as_reviewer.get(_url(name, kwargs, objects)).status_code == 200


def test_it_keeps_the_tokens_page_to_admins(as_reviewer, as_operator, as_admin, db):
    assert as_reviewer.get(reverse("tokens")).status_code == 403
    assert as_operator.get(reverse("tokens")).status_code == 403
    assert as_admin.get(reverse("tokens")).status_code == 200


def test_it_forbids_every_action_to_reviewers(as_reviewer, objects):
    for url in _all_actions(objects):
        response = as_reviewer.post(url, {"reason": "r", "typed_sandbox_id": "x"})
        assert response.status_code == 403, url
    assert AuditEvent.objects.count() == 0


def test_it_sends_anonymous_actions_to_the_login_page(client, objects):
    for url in _all_actions(objects):
        response = client.post(url, {"reason": "r"})
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login"))


def test_it_rejects_get_on_every_action(as_admin, objects):
    for url in _all_actions(objects):
        assert as_admin.get(url).status_code == 405, url


def test_it_rejects_a_post_without_csrf(admin, objects):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin)
    for url in _all_actions(objects):
        assert client.post(url, {"reason": "r"}).status_code == 403, url
    assert AuditEvent.objects.count() == 0


def test_operators_cannot_attest_edit_policy_or_manage_tokens(operator, objects):
    client = login(operator)
    r = objects["retirement"]
    assert (
        client.post(
            reverse("sandbox-attest", kwargs={"pk": r.pk}),
            {"reason": "r", "typed_sandbox_id": r.provider_lease_id},
        ).status_code
        == 403
    )
    assert (
        client.post(
            reverse("environment-policy", kwargs={"pk": objects["environment"].pk})
        ).status_code
        == 403
    )
    assert client.post(reverse("token-create"), {"name": "x"}).status_code == 403
