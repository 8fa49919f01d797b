"""Identity and navigation (issue 15 items 11 and 12): provider ids in URLs, the
task view, short ids with copy, result counts, the widen hint, holds in words."""

import uuid
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from sandboxes.models.choices import RunStatus, Stage
from tests.console.fleet import build_fleet
from tests.factories import (
    EnvironmentFactory,
    EnvironmentLeaseFactory,
    HeartbeatRunFactory,
    RetirementFactory,
)

pytestmark = pytest.mark.django_db


def test_the_provider_sandbox_id_resolves_to_its_page(as_reviewer):
    r = RetirementFactory(provider_lease_id="sbx-pasted")
    response = as_reviewer.get("/sandboxes/sbx-pasted/")
    assert response.status_code == 200
    assert str(r.pk) in response.content.decode()
    assert as_reviewer.get("/sandboxes/sbx-unknown/").status_code == 404


def test_a_daytona_uuid_sandbox_id_resolves_too(as_reviewer):
    # Daytona's sandbox ids are uuids, the same shape as the record's own pk.
    daytona_id = str(uuid.uuid4())
    r = RetirementFactory(provider_lease_id=daytona_id)
    response = as_reviewer.get(f"/sandboxes/{daytona_id}/")
    assert response.status_code == 200 and f"sandboxes/{r.pk}/" in response.content.decode()


def test_an_id_with_slashes_resolves_percent_encoded(as_reviewer):
    # An SSH environment names a sandbox like "ssh://host/srv/work" (i11's converter).
    r = RetirementFactory(provider_lease_id="ssh://host/srv/work")
    response = as_reviewer.get("/sandboxes/ssh%3A%2F%2Fhost%2Fsrv%2Fwork/")
    assert response.status_code == 200 and str(r.pk) in response.content.decode()


def test_the_open_record_wins_over_closed_ones(as_reviewer):
    old = RetirementFactory(
        provider_lease_id="sbx-again", stage=Stage.RETIRED, closed_at=timezone.now()
    )
    new = RetirementFactory(lease=EnvironmentLeaseFactory(provider_lease_id="sbx-again"))
    body = as_reviewer.get("/sandboxes/sbx-again/").content.decode()
    assert f"/sandboxes/{new.pk}/approve/" in body or str(new.pk) in body
    assert str(old.pk) not in body


def test_task_keys_link_to_a_task_view_with_its_sandboxes_and_leases(as_reviewer):
    r = RetirementFactory(provider_lease_id="sbx-task")
    other = EnvironmentLeaseFactory(issue=r.lease.issue, provider_lease_id="sbx-other-lease")
    list_body = as_reviewer.get(reverse("sandbox-list")).content.decode()
    assert f'href="/tasks/{r.lease.issue_id}/"' in list_body
    body = as_reviewer.get(reverse("task", kwargs={"pk": r.lease.issue_id})).content.decode()
    assert r.lease.issue.key in body
    assert "sbx-task" in body and "sbx-other-lease" in body
    assert f'href="/sandboxes/{other.provider_lease_id}/"' in body


def test_long_ids_are_shortened_with_a_copy_button(as_reviewer):
    long_id = "9f1c2d3e-4b5a-6789-abcd-ef0123456789"
    RetirementFactory(provider_lease_id=long_id)
    body = as_reviewer.get(reverse("sandbox-list")).content.decode()
    assert f'<code title="{long_id}">9f1c2d3e-4b5a-…</code>' in body
    assert f'data-copy="{long_id}"' in body
    assert 'src="/static/js/console.js"' in body


def test_the_list_shows_its_result_count(as_reviewer):
    for _ in range(3):
        RetirementFactory()
    RetirementFactory(stage=Stage.RETIRED, closed_at=timezone.now())
    body = as_reviewer.get(reverse("sandbox-list")).content.decode()
    assert 'data-count="3"' in body and "3 kept sandboxes match" in body
    body = as_reviewer.get(reverse("sandbox-list"), {"stage": "all"}).content.decode()
    assert 'data-count="4"' in body


def test_an_empty_search_suggests_widening_the_stage_filter(as_reviewer):
    RetirementFactory(provider_lease_id="sbx-gone", stage=Stage.RETIRED, closed_at=timezone.now())
    body = as_reviewer.get(reverse("sandbox-list"), {"q": "sbx-gone"}).content.decode()
    assert "data-widen" in body and "search all stages" in body
    assert "q=sbx-gone&amp;stage=all" in body
    widened = as_reviewer.get(reverse("sandbox-list"), {"q": "sbx-gone", "stage": "all"})
    assert 'data-sandbox="sbx-gone"' in widened.content.decode()
    assert "data-widen" not in widened.content.decode()


def test_holds_read_in_plain_words_with_their_end(as_reviewer):
    env = EnvironmentFactory(warm_retention=timedelta(hours=24))
    released = timezone.now().replace(month=11, day=30, hour=14, minute=3, second=0)
    lease = EnvironmentLeaseFactory(environment=env, released_at=released)
    RetirementFactory(lease=lease, holds=["retention"], stage=Stage.HELD)
    run = HeartbeatRunFactory(status=RunStatus.RUNNING)
    RetirementFactory(
        lease=EnvironmentLeaseFactory(heartbeat_run=run, issue=run.issue),
        holds=["run_active"],
        stage=Stage.HELD,
    )
    body = as_reviewer.get(reverse("sandbox-list")).content.decode()
    assert "retention until Dec 1 14:03" in body
    assert f"waiting for run {str(run.pk)[:4]}… (running)" in body


@pytest.mark.parametrize("size", [10, 100])
def test_the_task_view_runs_a_bounded_number_of_queries(
    as_reviewer, django_assert_max_num_queries, size
):
    rows = build_fleet(size)
    with django_assert_max_num_queries(12):
        as_reviewer.get(reverse("task", kwargs={"pk": rows[0].lease.issue_id}))
