"""The operator buttons on a sandbox's detail page, through the HTML views."""

import pytest
from django.urls import reverse

from sandboxes.models import AuditEvent, Receipt, Retirement
from sandboxes.models.choices import HoldCode, ReceiptKind, Stage
from sandboxes.proof import fingerprint_of
from tests.factories import RetirementFactory, hold_until


def _until():
    return hold_until().strftime("%Y-%m-%dT%H:%M")


HX = {"HTTP_HX_REQUEST": "true"}


def _post(client, name, r, **data):
    return client.post(reverse(name, kwargs={"pk": r.pk}), data, **HX)


def _only_audit_row(action):
    rows = list(AuditEvent.objects.all())
    assert len(rows) == 1, rows
    row = rows[0]
    assert row.action == action
    return row


def test_it_approves_with_proof_and_writes_one_audit_row(as_operator, operator, awaiting):
    response = _post(as_operator, "sandbox-approve", awaiting, reason="checked the diff")
    assert response.status_code == 200
    assert b"Approved" in response.content
    assert "retirement-changed" in response["HX-Trigger"]
    receipt = Receipt.objects.get(retirement=awaiting, kind=ReceiptKind.APPROVAL)
    compare = Receipt.objects.get(retirement=awaiting, kind=ReceiptKind.SALVAGE_COMPARE)
    # Bound to the proof it approved, as the sandbox is now (DOMAIN §2.3).
    assert receipt.payload == {
        "user": operator.username,
        "reason": "checked the diff",
        "proof_receipt_id": str(compare.pk),
        "fingerprint": fingerprint_of(awaiting),
    }
    assert receipt.lease_id == awaiting.lease_id
    assert receipt.run_id == awaiting.lease.heartbeat_run_id
    assert receipt.actor == operator.username
    awaiting.refresh_from_db()
    assert awaiting.next_attempt_at is not None
    row = _only_audit_row("retirement.approve")
    assert row.actor == operator
    assert row.actor_label == operator.username
    assert row.reason == "checked the diff"
    assert row.sandbox_id == awaiting.provider_lease_id
    assert row.before["next_attempt_at"] is None
    assert row.after["next_attempt_at"] is not None
    assert row.after["receipt"] == str(receipt.pk)


def test_it_refuses_to_approve_without_proof(as_operator, unproven):
    response = _post(as_operator, "sandbox-approve", unproven, reason="looks fine")
    assert response.status_code == 200
    assert b"Cannot approve: there is no proof" in response.content
    assert b"unsaved files found" in response.content
    assert "HX-Trigger" not in response
    assert not Receipt.objects.filter(kind=ReceiptKind.APPROVAL).exists()
    assert AuditEvent.objects.count() == 0


def test_it_refuses_without_proof_on_a_plain_form_post_too(as_operator, unproven):
    response = as_operator.post(
        reverse("sandbox-approve", kwargs={"pk": unproven.pk}), {"reason": "x"}
    )
    assert response.status_code == 409
    assert b"Cannot approve" in response.content


def test_it_refuses_to_approve_outside_awaiting_approval(as_operator, db):
    r = RetirementFactory(stage=Stage.LISTED)
    response = _post(as_operator, "sandbox-approve", r, reason="x")
    assert b"Only a retirement awaiting approval" in response.content
    assert AuditEvent.objects.count() == 0


def test_it_requires_a_reason(as_operator, awaiting):
    response = _post(as_operator, "sandbox-approve", awaiting, reason="  ")
    assert b"A reason is required." in response.content
    assert AuditEvent.objects.count() == 0


def test_it_refuses_a_second_approval(as_operator, awaiting):
    _post(as_operator, "sandbox-approve", awaiting, reason="one")
    response = _post(as_operator, "sandbox-approve", awaiting, reason="two")
    assert b"Already approved" in response.content
    assert AuditEvent.objects.count() == 1


def test_it_retries_now(as_operator, operator, db):
    r = RetirementFactory(stage=Stage.FAILED, attempts=3, last_error="boom")
    response = _post(as_operator, "sandbox-retry", r, reason="provider is back")
    assert response.status_code == 200
    r.refresh_from_db()
    assert r.next_attempt_at is not None
    row = _only_audit_row("retirement.retry")
    assert (row.actor, row.reason) == (operator, "provider is back")
    assert row.before["stage"] == "failed" and row.before["next_attempt_at"] is None
    assert row.after["next_attempt_at"] is not None


def test_it_holds_and_releases(as_operator, operator, db):
    r = RetirementFactory(stage=Stage.LISTED, holds=["retention"], hold_reasons={"retention": "x"})
    _post(as_operator, "sandbox-hold", r, reason="customer asked to keep it", until=_until())
    r.refresh_from_db()
    assert r.stage == Stage.HELD
    assert r.operator_hold_reason == "customer asked to keep it"
    assert r.holds == ["retention", HoldCode.OPERATOR_HOLD]
    assert "customer asked to keep it" in r.hold_reasons[HoldCode.OPERATOR_HOLD]
    row = _only_audit_row("retirement.hold")
    assert row.before["stage"] == "listed" and row.after["stage"] == "held"
    assert row.after["holds"] == ["retention", "operator_hold"]

    response = _post(as_operator, "sandbox-release-hold", r, reason="customer is done")
    assert b"Hold released" in response.content
    r.refresh_from_db()
    assert r.operator_hold_reason == ""
    assert r.holds == ["retention"]
    assert HoldCode.OPERATOR_HOLD not in r.hold_reasons
    assert r.next_attempt_at is not None
    release = AuditEvent.objects.get(action="retirement.release_hold")
    assert release.reason == "customer is done"
    assert release.before["operator_hold_reason"] == "customer asked to keep it"
    assert release.after["operator_hold_reason"] == ""


def test_it_refuses_to_release_what_is_not_held(as_operator, db):
    r = RetirementFactory()
    response = _post(as_operator, "sandbox-release-hold", r, reason="x")
    assert b"No operator hold" in response.content
    assert AuditEvent.objects.count() == 0


def test_it_refuses_to_act_on_a_closed_retirement(as_operator, db):
    r = RetirementFactory(stage=Stage.RETIRED)
    for name in ("sandbox-retry", "sandbox-hold"):
        response = _post(as_operator, name, r, reason="x", until=_until())
        assert b"closed" in response.content
    assert AuditEvent.objects.count() == 0


def test_admins_attest_by_typing_the_sandbox_id(as_admin, admin, unproven):
    response = _post(
        as_admin,
        "sandbox-attest",
        unproven,
        typed_sandbox_id=unproven.provider_lease_id,
        reason="the notes are scratch files",
    )
    assert b"Attested" in response.content
    receipt = Receipt.objects.get(kind=ReceiptKind.OPERATOR_ATTESTED)
    assert receipt.payload == {
        "typed_sandbox_id": unproven.provider_lease_id,
        "reason": "the notes are scratch files",
        "user": admin.username,
        "fingerprint": fingerprint_of(unproven),
    }
    row = _only_audit_row("retirement.attest")
    assert row.actor == admin and row.reason == "the notes are scratch files"
    assert row.before and row.after["receipt"] == str(receipt.pk)
    # Attestation is proof, so approval is now possible.
    response = _post(as_admin, "sandbox-approve", unproven, reason="attested")
    assert b"Approved" in response.content


@pytest.mark.parametrize("typed", ["", "sbx-wrong", "SBX"])
def test_it_refuses_an_attestation_with_the_wrong_id(as_admin, unproven, typed):
    response = _post(as_admin, "sandbox-attest", unproven, typed_sandbox_id=typed, reason="x")
    assert b"Type the sandbox id exactly" in response.content
    assert not Receipt.objects.filter(kind=ReceiptKind.OPERATOR_ATTESTED).exists()
    assert AuditEvent.objects.count() == 0


def test_a_plain_form_post_redirects_back_with_a_message(as_operator, awaiting):
    response = as_operator.post(
        reverse("sandbox-approve", kwargs={"pk": awaiting.pk}), {"reason": "ok"}, follow=True
    )
    assert response.redirect_chain[-1][0] == reverse("sandbox-detail", kwargs={"pk": awaiting.pk})
    assert "Approved — retires on the next pass." in response.content.decode()


def test_it_answers_404_for_an_unknown_retirement(as_operator, db):
    url = reverse("sandbox-retry", kwargs={"pk": "00000000-0000-0000-0000-000000000000"})
    assert as_operator.post(url, {"reason": "x"}).status_code == 404
    assert Retirement.objects.count() == 0


def test_retry_on_a_held_record_says_why_and_changes_nothing(as_operator, db):
    # Issue 15, defect 5: it said "Retry scheduled" and wrote an audit row although
    # nothing can happen until the hold clears.
    r = RetirementFactory(
        stage=Stage.HELD,
        holds=["retention"],
        hold_reasons={"retention": "Still inside the environment's warm retention window."},
    )
    response = _post(as_operator, "sandbox-retry", r, reason="try again")
    body = response.content.decode()
    assert "Retry scheduled" not in body
    assert "retention" in body and "until the hold clears" in body
    assert "HX-Trigger" not in response
    assert AuditEvent.objects.count() == 0
    before = r.next_attempt_at
    r.refresh_from_db()
    assert r.next_attempt_at == before


def test_the_detail_page_offers_no_retry_while_held(as_operator, db):
    r = RetirementFactory(stage=Stage.HELD, holds=["run_active"])
    body = as_operator.get(reverse("sandbox-detail", kwargs={"pk": r.pk})).content.decode()
    assert "Retry now" not in body
    assert "Retry is unavailable while held" in body
