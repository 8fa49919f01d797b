import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from sandboxes.models.choices import Stage
from tests.console.fleet import build_fleet
from tests.factories import ReconcilerPassFactory, RetirementFactory

HX = {"HTTP_HX_REQUEST": "true"}


def _fp(content: bytes) -> str:
    return re.search(rb'data-fp="([0-9a-f]+)"', content).group(1).decode()


def test_it_counts_by_stage_and_kind(as_reviewer, db):
    RetirementFactory(stage=Stage.AWAITING_APPROVAL, size_bytes=2048)
    RetirementFactory(stage=Stage.AWAITING_APPROVAL, needs_attention=True)
    RetirementFactory(stage=Stage.RETIRED, closed_at=timezone.now() - timedelta(hours=2))
    RetirementFactory(stage=Stage.RETIRED, closed_at=timezone.now() - timedelta(days=3))
    response = as_reviewer.get(reverse("dashboard"))
    assert response.status_code == 200
    body = response.content.decode()
    assert 'data-tile="awaiting">2<' in body
    assert 'data-tile="attention">1<' in body
    assert 'data-tile="retired24h">1<' in body
    assert 'data-tile="open">2<' in body
    assert "2 KiB" in body and "1 without a size" in body
    assert 'data-stage="retired">2<' in body
    assert 'data-kind="abandoned_warm">2<' in body


def test_it_draws_the_trend_from_reconciler_passes(as_reviewer, db):
    now = timezone.now()
    for i, (kept, retired) in enumerate([(10, 0), (8, 2), (5, 3)]):
        ReconcilerPassFactory(
            started_at=now - timedelta(minutes=10 - i), candidates=kept, retired=retired
        )
    body = as_reviewer.get(reverse("dashboard")).content.decode()
    assert "<svg" in body and "<polyline" in body
    assert body.count('class="bar"') == 2
    # The line ends on the open records now (none here), like the tile.
    assert "kept sandboxes (now 0)" in body
    assert "5 over 3 passes" in body


def test_it_says_when_no_pass_has_run(as_reviewer, db):
    assert b"No reconciler pass has run yet" in as_reviewer.get(reverse("dashboard")).content


def test_the_poll_returns_the_live_fragment(as_reviewer, db):
    response = as_reviewer.get(reverse("dashboard"), **HX)
    assert response.status_code == 200
    assert response.content.lstrip().startswith(b'<div id="live"')
    assert b"<html" not in response.content
    assert response["ETag"]


def test_the_poll_answers_204_when_nothing_changed(as_reviewer, db):
    RetirementFactory()
    fp = _fp(as_reviewer.get(reverse("dashboard")).content)
    response = as_reviewer.get(reverse("dashboard"), {"fp": fp}, **HX)
    assert response.status_code == 204
    assert response.content == b""


def test_the_poll_answers_304_to_a_matching_etag(as_reviewer, db):
    etag = as_reviewer.get(reverse("dashboard"), **HX)["ETag"]
    response = as_reviewer.get(reverse("dashboard"), HTTP_IF_NONE_MATCH=etag, **HX)
    assert response.status_code == 304


def test_the_poll_sends_the_fragment_when_something_changed(as_reviewer, db):
    r = RetirementFactory()
    fp = _fp(as_reviewer.get(reverse("dashboard")).content)
    r.stage = Stage.AWAITING_APPROVAL
    r.save()
    response = as_reviewer.get(reverse("dashboard"), {"fp": fp}, **HX)
    assert response.status_code == 200
    assert b'data-tile="awaiting">1<' in response.content
    ReconcilerPassFactory()
    fp2 = _fp(response.content)
    assert as_reviewer.get(reverse("dashboard"), {"fp": fp2}, **HX).status_code == 200


def test_the_poll_slows_down_when_the_tab_is_hidden(as_reviewer, db):
    """Polls every 3 s; static/js/console.js lets a hidden tab's [data-live]
    polls through every 30 s (a trigger filter would need eval, which the
    Content-Security-Policy forbids)."""
    from pathlib import Path

    body = as_reviewer.get(reverse("dashboard")).content.decode()
    assert 'hx-trigger="every 3s, retirement-changed from:body" data-live' in body
    assert "[document" not in body
    script = (Path(__file__).parents[2] / "static/js/console.js").read_text()
    assert "HIDDEN_INTERVAL_MS = 30000" in script and "htmx:confirm" in script


@pytest.mark.parametrize("size", [5, 50])
def test_it_runs_a_bounded_number_of_queries(as_operator, django_assert_max_num_queries, size):
    build_fleet(size)
    with django_assert_max_num_queries(12):
        assert as_operator.get(reverse("dashboard")).status_code == 200
    with django_assert_max_num_queries(12):
        assert as_operator.get(reverse("dashboard"), **HX).status_code == 200


def test_the_unchanged_poll_is_cheap(as_operator, django_assert_max_num_queries, db):
    build_fleet(20)
    fp = _fp(as_operator.get(reverse("dashboard")).content)
    with django_assert_max_num_queries(6):
        assert as_operator.get(reverse("dashboard"), {"fp": fp}, **HX).status_code == 204


def test_the_trend_line_ends_on_the_same_number_as_the_open_tile(as_reviewer, db):
    # Issue 15, defect 3: the tile counted open records (14), the trend's "now"
    # showed the last pass's candidate count (13).
    for _ in range(14):
        RetirementFactory(stage=Stage.LISTED)
    ReconcilerPassFactory(started_at=timezone.now() - timedelta(minutes=1), candidates=13)
    body = as_reviewer.get(reverse("dashboard")).content.decode()
    assert 'data-tile="open">14<' in body
    assert "kept sandboxes (now 14)" in body


def test_failing_records_are_up_front_with_failing_since_and_the_last_error(as_reviewer, db):
    # Issue 15 item 8: failing now, not only after 5 attempts.
    since = timezone.now() - timedelta(hours=2)
    RetirementFactory(
        stage=Stage.FAILED,
        attempts=1,
        failing_since=since,
        last_error="TransientProviderError: 503 from provider",
        provider_lease_id="sbx-failing",
    )
    RetirementFactory(stage=Stage.LISTED, provider_lease_id="sbx-fine")
    body = as_reviewer.get(reverse("dashboard")).content.decode()
    assert 'data-tile="failing">1<' in body
    row = body.split('data-failing="sbx-failing"', 1)[1].split("</tr>", 1)[0]
    assert "2 h ago</time>" in row
    assert "503 from provider" in row
    assert 'data-failing="sbx-fine"' not in body
    # Failing comes before the tables of counts.
    assert body.index("Failing now") < body.index("By stage")


def test_an_overdue_reconciler_gets_a_banner_like_a_missed_ping(as_reviewer, db):
    from django_q.models import Schedule

    Schedule.objects.create(
        name="reconciler pass", func="x", schedule_type=Schedule.MINUTES, minutes=3
    )
    ReconcilerPassFactory(started_at=timezone.now() - timedelta(minutes=7))
    body = as_reviewer.get(reverse("dashboard")).content.decode()
    assert 'data-banner="overdue"' in body
    assert "Reconciler overdue:" in body
    assert re.search(r">7 min( \d+ s)? ago</time>", body)  # a slow run adds seconds
    assert "every 3 min" in body
    # The banner polls on its own (it ages with the clock, not the data).
    part = as_reviewer.get(reverse("heartbeat"), **HX)
    assert part.content.lstrip().startswith(b'<div id="heartbeat"')
    assert b"Reconciler overdue" in part.content
    # Within twice the schedule (6 min) is on time.
    ReconcilerPassFactory(started_at=timezone.now() - timedelta(minutes=5))
    assert b"data-banner" not in as_reviewer.get(reverse("dashboard")).content


def test_it_shows_cost_held_by_environment_and_kind_and_reclaimed(as_reviewer, db):
    from decimal import Decimal

    from tests.factories import EnvironmentFactory

    prices = {
        "price_vcpu_hour_stopped": Decimal(0),
        "price_memory_gib_hour_stopped": Decimal(0),
        "price_disk_gib_month_stopped": Decimal("36.5"),  # 1.20 per GiB-day
        "price_vcpu_hour_running": Decimal(1),
        "price_memory_gib_hour_running": Decimal(1),
        "price_disk_gib_month_running": Decimal(1),
    }
    east = EnvironmentFactory(name="east", **prices)
    RetirementFactory(lease__environment=east, provider_state="stopped", reported_disk_gib=10)
    RetirementFactory(lease__environment=east, provider_state="stopped")  # size unknown
    RetirementFactory(
        lease__environment=east,
        stage=Stage.RETIRED,
        provider_state="destroyed",
        reported_disk_gib=5,
        closed_at=timezone.now() - timedelta(days=3),
    )
    body = as_reviewer.get(reverse("dashboard")).content.decode()
    assert 'data-tile="cost">$12.00<' in body and "1 not priced" in body
    assert 'data-cost-env="east">$12.00' in body and "+ 1 unknown" in body
    assert 'data-cost-kind="abandoned_warm">$12.00' in body
    assert "<strong data-reclaimed>$6.00</strong>" in body


def test_unknown_cost_reads_unknown_not_zero(as_reviewer, db):
    RetirementFactory(provider_state="stopped", reported_disk_gib=10)  # no price table
    body = as_reviewer.get(reverse("dashboard")).content.decode()
    assert 'data-tile="cost">unknown<' in body
    assert "$0.00" not in body


def test_the_trend_labels_its_axes_and_splits_by_environment(as_reviewer, db):
    from tests.factories import EnvironmentFactory

    for name in ("east", "west"):
        RetirementFactory(lease__environment=EnvironmentFactory(name=name))
    ReconcilerPassFactory(
        started_at=timezone.now() - timedelta(minutes=2),
        candidates=3,
        counts_by_environment={"east": 2, "west": 1},
    )
    body = as_reviewer.get(reverse("dashboard")).content.decode()
    assert ">sandboxes</text>" in body and "reconciler passes, oldest to now" in body
    assert body.count("<polyline") == 1
    split = as_reviewer.get(reverse("dashboard"), {"split": "environment"}).content.decode()
    assert split.count('class="line"') == 2
    assert "east" in split and "west" in split
    assert "2 kept (east)" in split and "now: 1 kept (west)" in split
