"""A record whose stop Paperclip's predicate refuses says which condition failed,
on the list, the detail page and the API (issue 23; docs/rules.md, holds).

Fails on main before the fix: the listing took the receipt as a confirmed stop
whatever the lease's cleanup_status, and nothing said why a stop did not count.
"""

import pytest
from django.urls import reverse

from sandboxes import models as m
from sandboxes.reconciler.listing import sync_retirements
from sandboxes.roles import REVIEWERS
from tests import factories as f

pytestmark = pytest.mark.django_db

WORDS = "the lease's cleanup_status is pending, not success"


@pytest.fixture
def refused():
    lease = f.EnvironmentLeaseFactory(status=m.LeaseStatus.FAILED)
    f.stop_receipt(lease)
    m.EnvironmentLease.objects.filter(pk=lease.pk).update(cleanup_status=m.CleanupStatus.PENDING)
    sync_retirements()
    r = m.Retirement.objects.get(lease=lease)
    assert r.holds == [m.HoldCode.NO_STOP_RECEIPT]
    return r


def test_the_record_stores_the_refused_condition(refused):
    assert refused.hold_reasons[m.HoldCode.NO_STOP_RECEIPT] == f"Stop not confirmed: {WORDS}."


def test_the_list_and_the_detail_page_say_it(client, refused):
    client.force_login(f.UserFactory(groups=[REVIEWERS]))
    listing = client.get(reverse("sandbox-list")).content.decode()
    assert f"stop not confirmed: {WORDS}".replace("'", "&#x27;") in listing
    detail = client.get(reverse("sandbox-detail", kwargs={"pk": refused.pk})).content.decode()
    # The same words on both (sandboxes/explain.py: one text per hold).
    assert f"stop not confirmed: {WORDS}".replace("'", "&#x27;") in detail


def test_the_api_says_it(client, operator_token, refused):
    _, raw = operator_token
    data = client.get(
        f"/api/v1/kept-sandboxes/{refused.provider_lease_id}",
        HTTP_AUTHORIZATION=f"Bearer {raw}",
    ).json()
    assert data["holds"] == ["no_stop_receipt"]
    assert data["hold_explanations"] == [
        {"code": "no_stop_receipt", "explanation": f"stop not confirmed: {WORDS}"}
    ]
    assert data["hold_reasons"] == {"no_stop_receipt": f"Stop not confirmed: {WORDS}."}
