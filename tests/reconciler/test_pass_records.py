"""A pass notes which records it listed, advanced, retired and failed, and the
pass's page shows them with their errors (the Passes page, docs/architecture.md)."""

import pytest
from django.test import Client
from django.urls import reverse

from sandboxes import models as m
from sandboxes.providers.base import TransientProviderError
from sandboxes.roles import REVIEWERS
from tests import factories as f

from .conftest import retirement_of

pytestmark = pytest.mark.django_db


def _failed_warm(warm):
    return warm(status=m.LeaseStatus.FAILED)


def _page(p) -> str:
    client = Client()
    client.force_login(f.UserFactory(groups=[REVIEWERS]))
    return client.get(reverse("pass-detail", kwargs={"pk": p.pk})).content.decode()


def test_a_pass_records_what_it_listed_advanced_and_retired(warm, reconcile):
    lease = _failed_warm(warm)
    p = reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.RETIRED
    assert p.records_of("listed") == [str(r.pk)]
    assert p.records_of("advanced") == [str(r.pk)]
    assert p.records_of("retired") == [str(r.pk)]
    assert p.records_of("failed") == []
    p.refresh_from_db()  # saved with the pass
    assert p.records_of("retired") == [str(r.pk)]
    body = _page(p)
    retired = body.split('data-records="retired"', 1)[1].split("</section>", 1)[0]
    assert reverse("sandbox-detail", kwargs={"pk": r.pk}) in retired
    assert "now retired" in retired
    assert 'data-records="failed"' not in body  # no empty list


def test_a_failed_step_is_recorded_with_its_error(warm, local, reconcile, monkeypatch):
    lease = _failed_warm(warm)

    def flaky(*args, **kwargs):
        raise TransientProviderError("503 from provider")

    monkeypatch.setattr(local.inner, "hash_files", flaky)
    p = reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.FAILED
    assert p.records_of("failed") == [str(r.pk)]
    assert str(r.pk) not in p.records_of("retired")
    failed = _page(p).split('data-records="failed"', 1)[1].split("</section>", 1)[0]
    assert reverse("sandbox-detail", kwargs={"pk": r.pk}) in failed


def test_the_next_pass_over_the_same_fleet_lists_nothing_new(warm, local, reconcile, monkeypatch):
    lease = _failed_warm(warm)
    monkeypatch.setattr(
        local.inner,
        "hash_files",
        lambda *a, **k: (_ for _ in ()).throw(TransientProviderError("x")),
    )
    reconcile()
    m.Retirement.objects.update(next_attempt_at=None)
    second = reconcile()
    assert second.records_of("listed") == []
    assert str(retirement_of(lease).pk) not in second.records_of("advanced")


def test_a_pass_that_touched_nothing_says_so(db):
    p = f.ReconcilerPassFactory(errors=[{"step": "listing", "error": "OperationalError: gone"}])
    body = _page(p)
    assert "This pass touched no record." in body
    assert "listing: OperationalError: gone" in body


def test_a_record_that_is_gone_is_named_not_a_500(db):
    p = f.ReconcilerPassFactory(records={"listed": ["0b4e6c1e-5ad5-4bd4-9c4b-6a2b34f1f0aa", "x"]})
    body = _page(p)
    assert "(record gone)" in body


def test_the_page_reads_a_bounded_number_of_queries(warm, reconcile, django_assert_max_num_queries):
    for _ in range(5):
        _failed_warm(warm)
    p = reconcile()
    assert len(p.records_of("retired")) == 5
    client = Client()
    client.force_login(f.UserFactory(groups=[REVIEWERS]))
    with django_assert_max_num_queries(8):
        assert client.get(reverse("pass-detail", kwargs={"pk": p.pk})).status_code == 200
