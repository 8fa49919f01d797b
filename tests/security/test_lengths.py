"""Crafted input the act API and token names must answer with a 400 naming
the field, not a 500 (issue 13, item 7): deeply nested JSON (the parser's
RecursionError), a reason longer than the console's, and token names whose
audit label ("token:<name>") no longer fits its 200-character column."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from sandboxes.models import ApiToken, AuditEvent
from tests.factories import hold_until

from .conftest import changes, client_for, snapshot

pytestmark = pytest.mark.django_db


def _act(world, raw, body, action="hold"):
    return client_for().post(
        f"/api/v1/kept-sandboxes/{world['awaiting'].provider_lease_id}/{action}",
        body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {raw}",
    )


@pytest.mark.parametrize("depth", [65, 3_000, 100_000])
def test_deeply_nested_json_on_the_act_api_is_a_400(world, operator_token, depth):
    _, raw = operator_token
    before = snapshot(world["awaiting"])
    body = '{"reason": "x", "extra": ' + "[" * depth + "]" * depth + "}"
    response = _act(world, raw, body)
    assert response.status_code == 400
    assert "nested deeper than" in response.json()["error"]
    assert snapshot(world["awaiting"]) == before


def test_a_reason_longer_than_the_consoles_is_a_400_naming_it(world, operator_token):
    _, raw = operator_token
    before = snapshot(world["awaiting"])
    response = _act(world, raw, json.dumps({"reason": "r" * 2001}))
    assert response.status_code == 400 and '"reason"' in response.json()["error"]
    assert snapshot(world["awaiting"]) == before
    assert (
        _act(
            world, raw, json.dumps({"reason": "r" * 2000, "until": hold_until().isoformat()})
        ).status_code
        == 200
    )


def test_a_long_named_token_acts_without_a_500(world):
    """Regression: a 200-character token name (allowed by the form) made every
    audited action of that token a 500 — "token:" + name exceeds the column."""
    token, raw = ApiToken.issue("n" * 200, "operator")
    response = _act(
        world, raw, json.dumps({"reason": "long name", "until": hold_until().isoformat()})
    )
    assert response.status_code == 200
    label = AuditEvent.objects.get(action="retirement.hold").actor_label
    assert label.startswith("token:nnn") and len(label) == 200


def test_the_console_refuses_a_token_name_over_190(users, world):
    before = snapshot()
    response = client_for(users["admin"]).post(
        reverse("token-create"), {"name": "n" * 191, "scope": "operator", "reason": "x"}
    )
    assert response.status_code == 400
    assert "name" in response.context["form"].errors
    assert changes(before, snapshot())["counts"] == {}
    ok = client_for(users["admin"]).post(
        reverse("token-create"), {"name": "n" * 190, "scope": "operator", "reason": "x"}
    )
    assert ok.status_code == 200 and ApiToken.objects.filter(name="n" * 190).exists()


def test_the_command_refuses_a_token_name_over_190(db):
    with pytest.raises(CommandError, match="name"):
        call_command("create_token", "n" * 191, "--scope", "ingest", stdout=StringIO())
    assert not ApiToken.objects.filter(name__startswith="nnn").exists()
