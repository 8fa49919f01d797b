"""Every action × every role, with a form that would succeed: refused means
refused for lack of permission, and nothing changes; allowed writes one audit row."""

import json

import pytest
from django.urls import reverse
from django.utils import timezone

from devtools.events import EPOCH, Events
from sandboxes.models import ApiToken, AuditEvent, NotificationDelivery, NotificationType
from sandboxes.notifications.events import emit
from tests.factories import AttachmentFactory, hold_until

from .conftest import changes, client_for, snapshot
from .endpoints import (
    ACTIONS,
    ADMIN_DETAIL,
    API_ACTIONS,
    PAGE_ROLES,
    PAGES,
    READERS,
    page_url,
)

pytestmark = pytest.mark.django_db

ROLES = ["anonymous", "outsider", "reviewer", "operator", "admin"]


def assert_one_success(action, world, before, response):
    row = action.row(world)
    diff = changes(before, snapshot(*filter(None, [row])))
    assert response.status_code == action.ok_status, response.content[:300]
    assert diff["counts"] == {"sandboxes.AuditEvent": 1, **action.creates}
    (event,) = AuditEvent.objects.all()
    assert event.action == action.audit
    if row is not None:
        changed = set(diff[f"{row._meta.label}:{row.pk}"])
        assert changed and changed <= action.may_change


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("action", ACTIONS, ids=lambda a: a.name)
def test_each_role_gets_exactly_its_actions(users, world, action, role):
    client = client_for(users.get(role))
    row = action.row(world)
    before = snapshot(*filter(None, [row]))
    response = client.post(action.url(world), action.data(world))
    if role in action.roles:
        assert_one_success(action, world, before, response)
        return
    if role == "anonymous":
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))
    else:
        assert response.status_code == 403, (role, action.name)
    assert snapshot(*filter(None, [row])) == before


def test_operators_cannot_attest_edit_policy_or_manage_tokens(users, world):
    admin_only = {a.name for a in ACTIONS if a.roles == {"admin"}}
    assert admin_only == {
        "sandbox-attest",
        "environment-policy",
        "token-create",
        "token-revoke",
        "channel-create",
        "channel-update",
        "channel-rotate",
        "channel-test",
        "channel-delete",
        "owner-mail-edit",
        "environment-prices",
        "user-create",
        "user-password-link",
        "user-role",
        "user-companies",
    }


# --- pages ------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["outsider", "reviewer", "operator", "admin"])
# An attachment needs its stored file: test_attachments_need_login_and_a_role.
@pytest.mark.parametrize("name", sorted(n for n, t in PAGES.items() if t != "attachment"))
def test_each_role_reads_exactly_its_pages(users, world, name, role):
    response = client_for(users[role]).get(page_url(name, world))
    allowed = role in PAGE_ROLES.get(name, READERS)
    assert response.status_code in ((200, 302) if allowed else (403,)), (role, name)
    if response.status_code == 302:  # a sandbox by its id: to its record's page
        assert not response["Location"].startswith(reverse("login"))


def test_the_page_registry_names_only_pages():
    assert set(PAGE_ROLES) <= set(PAGES) and set(ADMIN_DETAIL) <= set(PAGES)


@pytest.mark.parametrize("role", ["reviewer", "operator", "admin"])
@pytest.mark.parametrize(("name", "marker"), ADMIN_DETAIL.items())
def test_what_a_page_shows_admins_only(users, world, name, marker, role):
    """Regression: every role read a channel's delivery log, with the first 300
    bytes of whatever each receiver answered."""
    channel = world["channel"]
    event = emit(
        NotificationType.TEST,
        key="security-delivery",
        environment=channel.environment,
        channels=[channel],
        queue=False,
    )
    NotificationDelivery.objects.filter(event=event).update(last_error="HTTP 500")
    page = client_for(users[role]).get(page_url(name, world)).content.decode()
    assert (marker in page) is (role == "admin"), (role, name)
    assert ("HTTP 500" in page) is (role == "admin")


# --- attachments ------------------------------------------------------------------------


@pytest.fixture
def attachment(db, settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path
    att = AttachmentFactory(path="notes/todo.md")
    path = tmp_path / att.file.name
    path.parent.mkdir(parents=True)
    path.write_bytes(b"unsaved work")
    return att


@pytest.mark.parametrize(
    ("role", "status"),
    [("anonymous", 302), ("outsider", 403), ("reviewer", 200), ("operator", 200), ("admin", 200)],
)
def test_attachments_need_login_and_a_role(users, attachment, role, status):
    response = client_for(users.get(role)).get(reverse("attachment", kwargs={"pk": attachment.pk}))
    assert response.status_code == status
    if status == 302:
        assert response["Location"].startswith(reverse("login"))
    if status == 200:
        assert b"".join(response.streaming_content) == b"unsaved work"
        assert response["Content-Disposition"].startswith("attachment;")


def test_an_api_token_cannot_download_attachments(attachment, operator_token):
    _, raw = operator_token
    response = client_for().get(
        reverse("attachment", kwargs={"pk": attachment.pk}), HTTP_AUTHORIZATION=f"Bearer {raw}"
    )
    assert response.status_code == 302


# --- bearer tokens ----------------------------------------------------------------------


def _act(raw, sandbox_id, action, client=None, **headers):
    if raw is not None:
        headers["HTTP_AUTHORIZATION"] = f"Bearer {raw}"
    return (client or client_for()).post(
        f"/api/v1/kept-sandboxes/{sandbox_id}/{action}",
        json.dumps({"reason": "security test", "until": hold_until().isoformat()}),
        content_type="application/json",
        **headers,
    )


def _target(world, action):
    return world["held"] if action == "release-hold" else world["awaiting"]


@pytest.mark.parametrize("action", API_ACTIONS)
def test_an_ingest_token_cannot_act(world, ingest_token, action):
    _, raw = ingest_token
    r = _target(world, action)
    before = snapshot(r)
    assert _act(raw, r.provider_lease_id, action).status_code == 403
    assert snapshot(r) == before


@pytest.mark.parametrize("action", API_ACTIONS)
def test_a_revoked_or_unknown_token_cannot_act(world, operator_token, action):
    token, raw = operator_token
    r = _target(world, action)
    before = snapshot(r)
    assert _act("pcc_" + "x" * 43, r.provider_lease_id, action).status_code == 401
    assert _act(None, r.provider_lease_id, action).status_code == 401
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    after_revoke = snapshot(r)
    assert _act(raw, r.provider_lease_id, action).status_code == 401
    assert snapshot(r) == after_revoke
    assert before["counts"]["sandboxes.AuditEvent"] == 0
    assert after_revoke["counts"]["sandboxes.AuditEvent"] == 0


@pytest.mark.parametrize("action", API_ACTIONS)
def test_a_console_session_cannot_use_the_csrf_exempt_api(users, world, action):
    """The API skips CSRF because it authenticates by bearer token only; a
    session cookie must not be enough, or any site could act for a signed-in admin."""
    r = _target(world, action)
    before = snapshot(r)
    response = _act(None, r.provider_lease_id, action, client=client_for(users["admin"]))
    assert response.status_code == 401
    assert snapshot(r) == before


@pytest.mark.parametrize("action", API_ACTIONS)
def test_an_operator_token_acts_with_one_audit_row(world, operator_token, action):
    _, raw = operator_token
    r = _target(world, action)
    before = snapshot(r)
    response = _act(raw, r.provider_lease_id, action)
    assert response.status_code == 200, response.content
    diff = changes(before, snapshot(r))
    assert diff["counts"].pop("sandboxes.AuditEvent") == 1
    assert set(diff["counts"]) <= {"sandboxes.Receipt"}
    assert AuditEvent.objects.get().actor_label == "token:ops-bot"


@pytest.mark.parametrize(
    "header",
    [
        "Basic {raw}",
        "Token {raw}",
        "Bearer",
        "Bearer ",
        "{raw}",
        "Bearer {raw}x",
        "Bearer {upper}",
    ],
)
def test_malformed_authorization_is_401(world, operator_token, header):
    _, raw = operator_token
    value = header.format(raw=raw, upper=raw.upper())
    response = client_for().post(
        f"/api/v1/kept-sandboxes/{world['awaiting'].provider_lease_id}/retry",
        json.dumps({"reason": "x"}),
        content_type="application/json",
        HTTP_AUTHORIZATION=value,
    )
    assert response.status_code == 401
    assert AuditEvent.objects.count() == 0


def test_an_operator_token_cannot_ingest(operator_token, world):
    _, raw = operator_token
    before = snapshot()
    body = {
        "events": [
            Events().environment(
                "6f1c1f4e-0000-4000-8000-000000000001", "evil", "local", id="e1", at=EPOCH
            )
        ]
    }
    response = client_for().post(
        "/api/v1/events",
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {raw}",
    )
    assert response.status_code == 403
    assert snapshot() == before


def test_an_ingest_token_cannot_read_or_scrape(ingest_token, world):
    _, raw = ingest_token
    auth = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    client = client_for()
    assert client.get("/api/v1/kept-sandboxes", **auth).status_code == 403
    detail = f"/api/v1/kept-sandboxes/{world['awaiting'].provider_lease_id}"
    assert client.get(detail, **auth).status_code == 403
    assert client.get("/metrics", **auth).status_code == 403


def test_the_api_offers_no_admin_only_action(world, operator_token):
    """attest is for admins in the console; tokens have no admin scope."""
    _, raw = operator_token
    for action in ("attest", "edit-policy", "revoke"):
        response = _act(raw, world["awaiting"].provider_lease_id, action)
        assert response.status_code == 404, action
    # Sandbox ids may hold slashes (ssh://host/path), so "<id>/approve/" reads as
    # the detail of a sandbox named "<id>/approve", which answers no POST.
    response = _act(raw, world["awaiting"].provider_lease_id, "approve/")
    assert response.status_code in (404, 405)
    assert AuditEvent.objects.count() == 0
