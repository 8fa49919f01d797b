"""DOMAIN §4.2: read and act with operator-scope tokens, through the same actions."""

import json

import pytest
from django.urls import reverse

from sandboxes.models import AuditEvent, Receipt
from sandboxes.models.choices import ReceiptKind, Stage
from sandboxes.proof import fingerprint_of
from tests.factories import EnvironmentFactory, RetirementFactory, hold_until


def _auth(raw):
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


def _act(client, raw, sandbox_id, action, body):
    return client.post(
        f"/api/v1/kept-sandboxes/{sandbox_id}/{action}",
        data=json.dumps(body),
        content_type="application/json",
        **_auth(raw),
    )


def test_it_needs_a_token(client, db):
    assert client.get("/api/v1/kept-sandboxes").status_code == 401
    assert client.get("/api/v1/kept-sandboxes/sbx-1").status_code == 401
    assert (
        client.post(
            "/api/v1/kept-sandboxes/sbx-1/retry", "{}", content_type="application/json"
        ).status_code
        == 401
    )


def test_it_refuses_an_ingest_token(client, ingest_token, db):
    _, raw = ingest_token
    assert client.get("/api/v1/kept-sandboxes", **_auth(raw)).status_code == 403
    r = RetirementFactory()
    response = _act(client, raw, r.provider_lease_id, "retry", {"reason": "x"})
    assert response.status_code == 403
    assert AuditEvent.objects.count() == 0


def test_it_refuses_a_revoked_token(client, operator_token, db):
    from django.utils import timezone

    token, raw = operator_token
    token.revoked_at = timezone.now()
    token.save()
    assert client.get("/api/v1/kept-sandboxes", **_auth(raw)).status_code == 401


def test_it_lists_with_filters_and_pages(client, operator_token, db):
    _, raw = operator_token
    env = EnvironmentFactory(name="east")
    a = RetirementFactory(kind="resume_failed", holds=["retention"], lease__environment=env)
    b = RetirementFactory(stage=Stage.AWAITING_APPROVAL)
    RetirementFactory(stage=Stage.RETIRED)

    def ids(**params):
        data = client.get(reverse("api-kept-sandboxes"), params, **_auth(raw)).json()
        return [x["sandbox_id"] for x in data["results"]]

    assert set(ids()) == {a.provider_lease_id, b.provider_lease_id}
    assert len(ids(stage="all")) == 3
    assert ids(stage="awaiting_approval") == [b.provider_lease_id]
    assert ids(kind="resume_failed") == [a.provider_lease_id]
    assert ids(hold="retention") == [a.provider_lease_id]
    assert ids(environment="east") == [a.provider_lease_id]
    assert ids(environment=str(env.pk)) == [a.provider_lease_id]
    bad = client.get(reverse("api-kept-sandboxes"), {"stage": "nope"}, **_auth(raw))
    assert bad.status_code == 400

    first = client.get(reverse("api-kept-sandboxes"), {"limit": 1}, **_auth(raw)).json()
    assert len(first["results"]) == 1 and first["next"]
    second = client.get(first["next"], **_auth(raw)).json()
    assert len(second["results"]) == 1 and second["next"] is None
    assert first["results"][0]["sandbox_id"] != second["results"][0]["sandbox_id"]


def test_it_shows_one_sandbox_in_the_documented_shape(client, operator_token, awaiting):
    _, raw = operator_token
    response = client.get(f"/api/v1/kept-sandboxes/{awaiting.provider_lease_id}", **_auth(raw))
    assert response.status_code == 200
    data = response.json()
    assert set(data) == {
        "sandbox_id",
        "provider",
        "provider_state",
        "lease_id",
        "company",
        "kind",
        "stage",
        "holds",
        "hold_explanations",
        "hold_reasons",
        "operator_hold",
        "kept_since",
        "attempts",
        "next_attempt_at",
        "needs_attention",
        "receipts",
        "paperclip_uploads",
    }
    assert data["paperclip_uploads"] == []
    # DOMAIN §4.2: `holds: [codes]`, each a plain string.
    assert all(isinstance(code, str) for code in data["holds"])
    assert data["sandbox_id"] == awaiting.provider_lease_id
    assert data["lease_id"] == str(awaiting.lease_id)
    assert data["stage"] == "awaiting_approval"
    assert data["receipts"] == [
        {
            "kind": "salvage_compare",
            "confirmed_at": data["receipts"][0]["confirmed_at"],
            "payload": {
                "clean": True,
                "added": [],
                "changed": [],
                "deleted": [],
                "fingerprint": fingerprint_of(awaiting),
            },
        }
    ]


def test_it_answers_404_for_an_unknown_sandbox(client, operator_token, db):
    _, raw = operator_token
    assert client.get("/api/v1/kept-sandboxes/sbx-nope", **_auth(raw)).status_code == 404
    assert _act(client, raw, "sbx-nope", "retry", {"reason": "x"}).status_code == 404


def test_it_prefers_the_open_record_of_a_sandbox(client, operator_token, db):
    _, raw = operator_token
    old = RetirementFactory(stage=Stage.DISMISSED)
    RetirementFactory(lease=old.lease, stage=Stage.HELD)
    data = client.get(f"/api/v1/kept-sandboxes/{old.provider_lease_id}", **_auth(raw)).json()
    assert data["stage"] == "held"


def test_it_approves_through_the_same_action_and_audit(client, operator_token, awaiting):
    token, raw = operator_token
    response = _act(client, raw, awaiting.provider_lease_id, "approve", {"reason": "api ok"})
    assert response.status_code == 200
    assert response.json()["next_attempt_at"]
    receipt = Receipt.objects.get(kind=ReceiptKind.APPROVAL)
    assert receipt.payload["user"] == "token:ops-bot" and receipt.payload["reason"] == "api ok"
    assert receipt.payload["fingerprint"] == fingerprint_of(awaiting)
    (event,) = AuditEvent.objects.all()
    assert event.action == "retirement.approve"
    assert event.actor_label == "token:ops-bot"
    assert event.reason == "api ok"
    assert event.before and event.after


def test_it_refuses_to_approve_without_proof(client, operator_token, unproven):
    _, raw = operator_token
    response = _act(client, raw, unproven.provider_lease_id, "approve", {"reason": "x"})
    assert response.status_code == 409
    assert "no proof" in response.json()["error"]
    assert AuditEvent.objects.count() == 0


@pytest.mark.parametrize("action", ["retry", "hold"])
def test_it_acts_with_one_audit_row(client, operator_token, db, action):
    _, raw = operator_token
    r = RetirementFactory()
    body = {"reason": "because", "until": hold_until().isoformat()}
    response = _act(client, raw, r.provider_lease_id, action, body)
    assert response.status_code == 200
    (event,) = AuditEvent.objects.all()
    assert event.action == f"retirement.{action}"
    assert event.reason == "because"


def test_it_holds_and_releases(client, operator_token, db):
    _, raw = operator_token
    r = RetirementFactory()
    body = {"reason": "a", "until": hold_until().isoformat()}
    data = _act(client, raw, r.provider_lease_id, "hold", body).json()
    assert data["holds"] == ["operator_hold"]
    assert data["hold_explanations"][0]["explanation"].startswith("held by token:")
    data = _act(client, raw, r.provider_lease_id, "release-hold", {"reason": "b"}).json()
    assert data["holds"] == []
    assert [e.action for e in AuditEvent.objects.order_by("at")] == [
        "retirement.hold",
        "retirement.release_hold",
    ]


def test_it_requires_a_reason_and_a_known_action(client, operator_token, db):
    _, raw = operator_token
    r = RetirementFactory()
    assert _act(client, raw, r.provider_lease_id, "retry", {}).status_code == 400
    assert _act(client, raw, r.provider_lease_id, "retry", {"reason": " "}).status_code == 400
    assert _act(client, raw, r.provider_lease_id, "attest", {"reason": "x"}).status_code == 404
    bad = client.post(
        f"/api/v1/kept-sandboxes/{r.provider_lease_id}/retry",
        data="{",
        content_type="application/json",
        **_auth(raw),
    )
    assert bad.status_code == 400
    assert AuditEvent.objects.count() == 0


def test_get_on_an_action_is_405(client, operator_token, db):
    _, raw = operator_token
    r = RetirementFactory()
    response = client.get(f"/api/v1/kept-sandboxes/{r.provider_lease_id}/retry", **_auth(raw))
    assert response.status_code == 405


# Paperclip's SSH environments name a sandbox by its host and path (its lease's
# provider_lease_id is like "ssh://host/path"; paperclipai/paperclip
# packages/db/src/schema/environment_leases.ts declares it free text), so an id
# is not one path segment. Clients percent-encode it; the server decodes it.
SSH_ID = "ssh://build-7.internal/srv/paperclip/PAP-142"


@pytest.mark.parametrize("encode", [True, False], ids=["percent-encoded", "raw-slashes"])
def test_it_reads_and_acts_on_an_id_with_slashes(client, operator_token, db, encode):
    from urllib.parse import quote

    _, raw = operator_token
    r = RetirementFactory(lease__provider="ssh", lease__provider_lease_id=SSH_ID)
    path = quote(SSH_ID, safe="") if encode else SSH_ID
    response = client.get(f"/api/v1/kept-sandboxes/{path}", **_auth(raw))
    assert response.status_code == 200, response.content
    assert response.json()["sandbox_id"] == SSH_ID
    assert response.json()["provider"] == "ssh"

    body = {"reason": "looking", "until": hold_until().isoformat()}
    data = _act(client, raw, path, "hold", body).json()
    assert data["sandbox_id"] == SSH_ID and data["holds"] == ["operator_hold"]
    (event,) = AuditEvent.objects.all()
    assert event.object_id == str(r.pk)
    # The verb after an id is still only a verb on POST.
    assert client.get(f"/api/v1/kept-sandboxes/{path}/hold", **_auth(raw)).status_code == 405
    assert _act(client, raw, path, "frobnicate", {"reason": "x"}).status_code == 404


def test_reverse_gives_a_url_that_resolves_to_the_same_id(client, operator_token, db):
    _, raw = operator_token
    RetirementFactory(lease__provider="ssh", lease__provider_lease_id=SSH_ID)
    url = reverse("api-kept-sandbox", kwargs={"sandbox_id": SSH_ID})
    assert client.get(url, **_auth(raw)).json()["sandbox_id"] == SSH_ID
    act_url = reverse("api-kept-sandbox-action", kwargs={"sandbox_id": SSH_ID, "action": "retry"})
    response = client.post(
        act_url, json.dumps({"reason": "again"}), content_type="application/json", **_auth(raw)
    )
    assert response.status_code == 200


def test_a_slash_id_that_is_unknown_is_404_not_another_sandbox(client, operator_token, db):
    _, raw = operator_token
    RetirementFactory(lease__provider="ssh", lease__provider_lease_id=SSH_ID)
    for other in ("ssh://build-7.internal/srv", SSH_ID + "/x", "ssh:"):
        response = client.get(f"/api/v1/kept-sandboxes/{other}", **_auth(raw))
        assert response.status_code == 404, other
