import pytest
from django.urls import reverse

from sandboxes.models import AuditEvent, Receipt
from sandboxes.models.choices import ReceiptKind, Stage
from tests.console.conftest import clean_compare
from tests.console.fleet import build_fleet
from tests.factories import RetirementFactory

HX = {"HTTP_HX_REQUEST": "true"}


def _awaiting(n, proof=True):
    rows = [RetirementFactory(stage=Stage.AWAITING_APPROVAL) for _ in range(n)]
    if proof:
        for r in rows:
            clean_compare(r)
    return rows


def test_it_lists_what_awaits_approval_with_its_proof(as_reviewer, awaiting, unproven, db):
    RetirementFactory(provider_lease_id="sbx-listed", stage=Stage.LISTED)
    body = as_reviewer.get(reverse("approvals")).content.decode()
    assert awaiting.provider_lease_id in body and unproven.provider_lease_id in body
    assert "sbx-listed" not in body
    assert "the latest compare found nothing unsaved" in body
    assert "unsaved files found" in body
    assert 'name="ids"' not in body  # reviewers cannot select


def test_only_proven_rows_can_be_selected(as_operator, awaiting, unproven):
    body = as_operator.get(reverse("approvals")).content.decode()
    assert f'value="{awaiting.pk}"' in body
    assert f'value="{unproven.pk}"' not in body


def test_it_bulk_approves_with_one_audit_row_each(as_operator, operator, db):
    rows = _awaiting(3)
    response = as_operator.post(
        reverse("approvals-bulk"),
        {"ids": [str(r.pk) for r in rows], "reason": "weekly cleanup"},
        **HX,
    )
    assert response.status_code == 200
    assert b"Approved 3." in response.content
    assert "retirement-changed" in response["HX-Trigger"]
    assert Receipt.objects.filter(kind=ReceiptKind.APPROVAL).count() == 3
    events = AuditEvent.objects.filter(action="retirement.approve")
    assert events.count() == 3
    assert {e.object_id for e in events} == {str(r.pk) for r in rows}
    assert all(e.actor == operator and e.reason == "weekly cleanup" for e in events)


def test_bulk_approve_reports_the_rows_it_refused(as_operator, awaiting, unproven):
    response = as_operator.post(
        reverse("approvals-bulk"),
        {"ids": [str(awaiting.pk), str(unproven.pk)], "reason": "go"},
        **HX,
    )
    body = response.content.decode()
    assert "Approved 1." in body
    assert str(unproven.pk) in body and "Cannot approve" in body
    assert AuditEvent.objects.count() == 1


def test_bulk_approve_requires_a_reason(as_operator, awaiting):
    response = as_operator.post(reverse("approvals-bulk"), {"ids": [str(awaiting.pk)]}, **HX)
    assert b"A reason is required." in response.content
    assert AuditEvent.objects.count() == 0


def test_bulk_approve_takes_at_most_fifty(as_operator, db):
    rows = _awaiting(51)
    response = as_operator.post(
        reverse("approvals-bulk"), {"ids": [str(r.pk) for r in rows], "reason": "all"}, **HX
    )
    assert b"Approve at most 50" in response.content
    assert AuditEvent.objects.count() == 0


@pytest.mark.parametrize("size", [5, 50])
def test_it_runs_a_bounded_number_of_queries(as_operator, django_assert_max_num_queries, size):
    _awaiting(size)
    build_fleet(5)
    with django_assert_max_num_queries(12):
        assert as_operator.get(reverse("approvals")).status_code == 200


def test_the_queue_shows_how_many_await_approval(as_operator, awaiting):
    RetirementFactory(stage="awaiting_approval")
    body = as_operator.get(reverse("approvals")).content.decode()
    assert 'data-count="2"' in body and "2 sandboxes await approval" in body
