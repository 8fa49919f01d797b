from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from tests.console.fleet import build_fleet
from tests.factories import ReconcilerPassFactory


def test_it_lists_each_pass_with_counts_duration_and_errors(as_reviewer, db):
    start = timezone.now() - timedelta(minutes=1)
    ReconcilerPassFactory(
        started_at=start,
        finished_at=start + timedelta(seconds=2.5),
        candidates=7,
        advanced=3,
        retired=2,
        failed=1,
        errors=["sbx-1: provider timed out"],
        environment_name="prod-east",
    )
    body = as_reviewer.get(reverse("passes")).content.decode()
    assert "2.5 s" in body
    assert "prod-east" in body
    assert "sbx-1: provider timed out" in body
    for n in (">7<", ">3<", ">2<", ">1<"):
        assert n in body


def test_a_running_pass_says_so(as_reviewer, db):
    ReconcilerPassFactory(finished_at=None)
    assert b"running" in as_reviewer.get(reverse("passes")).content


@pytest.mark.parametrize("size", [10, 100])
def test_it_runs_a_bounded_number_of_queries(as_reviewer, django_assert_max_num_queries, size):
    build_fleet(size)
    with django_assert_max_num_queries(12):
        assert as_reviewer.get(reverse("passes")).status_code == 200


def test_an_interrupted_pass_says_when_it_was_last_seen(as_reviewer, db):
    seen = timezone.now() - timedelta(hours=1, minutes=3)
    ReconcilerPassFactory(
        started_at=seen - timedelta(minutes=2),
        last_seen_at=seen,
        finished_at=None,
        interrupted_at=seen + timedelta(minutes=20),
    )
    body = as_reviewer.get(reverse("passes")).content.decode()
    assert "interrupted, last seen" in body
    assert f'datetime="{seen.isoformat()}"' in body
    assert "running" not in body


def test_a_pass_silent_past_a_claims_length_shows_interrupted_before_any_pass_marks_it(
    as_reviewer, db
):
    """Every worker is gone, so no next pass marks it: the page still says so."""
    seen = timezone.now() - timedelta(minutes=16)
    ReconcilerPassFactory(started_at=seen, last_seen_at=seen, finished_at=None)
    body = as_reviewer.get(reverse("passes")).content.decode()
    assert "interrupted, last seen" in body
    assert "running" not in body


def test_each_pass_shows_relative_and_absolute_times_its_environment_and_duration(as_reviewer, db):
    start = timezone.now() - timedelta(minutes=2)
    p = ReconcilerPassFactory(
        started_at=start, finished_at=start + timedelta(seconds=40), environment_name="prod-east"
    )
    body = as_reviewer.get(reverse("passes")).content.decode()
    row = body.split(reverse("pass-detail", kwargs={"pk": p.pk}), 1)[1].split("</tr>", 1)[0]
    assert f'<time datetime="{start.isoformat()}" title="{start:%Y-%m-%d %H:%M:%S} UTC">' in row
    assert f"2 min ago · {start:%Y-%m-%d %H:%M:%S} UTC</time>" in row
    assert ">40 s<" in row and "prod-east" in row


def test_no_column_is_empty_on_every_row(as_reviewer, db):
    """Kept was never written; worker, failed and errors show when some pass has one."""
    ReconcilerPassFactory(worker="", failed=0, errors=[])
    body = as_reviewer.get(reverse("passes")).content.decode()
    head = body.split("<thead>", 1)[1].split("</thead>", 1)[0]
    for absent in (">Kept<", ">Worker<", ">Failed<", ">Errors<"):
        assert absent not in head
    assert ">Environment<" in head and ">Duration<" in head
    ReconcilerPassFactory(worker="host:123", failed=2, errors=[{"error": "boom"}])
    head = as_reviewer.get(reverse("passes")).content.decode().split("</thead>", 1)[0]
    for present in (">Worker<", ">Failed<", ">Errors<"):
        assert present in head


def test_the_cost_held_after_each_pass_reads_per_day(as_reviewer, db):
    from decimal import Decimal

    ReconcilerPassFactory(cost_per_day=Decimal("1.3249"), cost_unknown=2)
    body = as_reviewer.get(reverse("passes")).content.decode()
    assert "$1.32/day" in body and "+ 2 unknown" in body
