"""The reconciler's heartbeat on every page (like healthchecks' "last ping"):
"last pass 20 s ago · next in 40 s", turning into the overdue banner when late
(one definition, ReconcilerPass.objects.pulse, in one query)."""

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from django_q.models import Schedule

from sandboxes.models import ReconcilerPass
from tests.factories import ReconcilerPassFactory

HX = {"HTTP_HX_REQUEST": "true"}
PAGES = ["dashboard", "sandbox-list", "approvals", "audit", "passes", "environments"]


def _schedule(minutes=1, next_in=timedelta(seconds=40)):
    return Schedule.objects.create(
        name="reconciler pass",
        func="sandboxes.reconciler.tasks.reconcile_pass",
        schedule_type=Schedule.MINUTES,
        minutes=minutes,
        next_run=timezone.now() + next_in,
    )


def _heartbeat(body: str) -> str:
    return body.split('<div id="heartbeat"', 1)[1].split("</div>", 1)[0]


@pytest.mark.parametrize("name", PAGES)
def test_every_page_shows_the_last_pass_and_the_next(as_reviewer, db, name):
    before = timezone.now()
    _schedule()
    ReconcilerPassFactory(started_at=before - timedelta(seconds=20))
    beat = _heartbeat(as_reviewer.get(reverse(name)).content.decode())
    slow = (timezone.now() - before).total_seconds()  # a loaded machine is slow
    ago = re.search(r"last pass</a> <time [^>]+>(\d+) s ago</time>", beat)
    assert ago and 20 <= int(ago.group(1)) <= 20 + slow + 1
    ahead = re.search(r"next <time [^>]+>in (\d+) s</time>", beat)
    assert ahead and 40 - slow - 1 <= int(ahead.group(1)) <= 40
    assert "data-banner" not in beat


def test_the_heartbeat_is_one_query(db, django_assert_num_queries):
    _schedule()
    ReconcilerPassFactory()
    ReconcilerPassFactory(finished_at=None, last_seen_at=timezone.now())
    with django_assert_num_queries(1):
        pulse = ReconcilerPass.objects.pulse()
    assert pulse.running_since is not None and pulse.schedule_minutes == 1
    assert not pulse.overdue


def test_it_polls_itself(as_reviewer, db):
    ReconcilerPassFactory()
    body = as_reviewer.get(reverse("heartbeat"), **HX).content.decode()
    assert body.lstrip().startswith('<div id="heartbeat"')
    assert 'hx-get="/heartbeat/"' in body and 'hx-trigger="every 5s"' in body


def test_a_late_reconciler_turns_the_heartbeat_into_the_overdue_banner(as_reviewer, db):
    _schedule(minutes=3, next_in=-timedelta(minutes=4))
    ReconcilerPassFactory(started_at=timezone.now() - timedelta(minutes=7))
    for name in PAGES:
        beat = _heartbeat(as_reviewer.get(reverse(name)).content.decode())
        assert 'data-banner="overdue"' in beat, name
        assert "Reconciler overdue:" in beat
        assert re.search(r">7 min( \d+ s)? ago</time>", beat)  # a slow run adds seconds
        assert "every 3 min" in beat


def test_within_two_intervals_it_is_on_time_and_says_the_next_is_due(as_reviewer, db):
    _schedule(minutes=3, next_in=-timedelta(seconds=5))
    ReconcilerPassFactory(started_at=timezone.now() - timedelta(minutes=5))
    beat = _heartbeat(as_reviewer.get(reverse("passes")).content.decode())
    assert "data-banner" not in beat
    assert "next pass due now" in beat


def test_a_pass_that_still_beats_is_running_not_overdue(as_reviewer, db):
    _schedule()
    ReconcilerPassFactory(
        started_at=timezone.now() - timedelta(minutes=9),
        finished_at=None,
        last_seen_at=timezone.now() - timedelta(seconds=3),
    )
    beat = _heartbeat(as_reviewer.get(reverse("dashboard")).content.decode())
    assert "data-banner" not in beat
    assert "pass running</a>, started <time" in beat and "9 min ago" in beat


def test_a_silent_pass_is_not_running_and_the_reconciler_is_overdue(as_reviewer, db):
    _schedule()
    seen = timezone.now() - timedelta(minutes=16)
    ReconcilerPassFactory(started_at=seen, finished_at=None, last_seen_at=seen)
    beat = _heartbeat(as_reviewer.get(reverse("dashboard")).content.decode())
    assert 'data-banner="overdue"' in beat
    assert "running" not in beat


def test_no_pass_yet_says_so_on_every_page(as_reviewer, db):
    for name in PAGES:
        beat = _heartbeat(as_reviewer.get(reverse(name)).content.decode())
        assert 'data-banner="never"' in beat and "No reconciler pass has run yet" in beat


def test_without_a_schedule_it_assumes_every_minute(db):
    ReconcilerPassFactory(started_at=timezone.now() - timedelta(seconds=150))
    pulse = ReconcilerPass.objects.pulse()
    assert pulse.schedule_minutes == 1 and pulse.overdue
    assert pulse.next_at == pulse.last_started + timedelta(minutes=1)


def test_dry_runs_and_interrupted_passes_do_not_count_as_running(db):
    now = timezone.now()
    ReconcilerPassFactory(started_at=now - timedelta(seconds=30))
    ReconcilerPassFactory(
        started_at=now - timedelta(seconds=10), finished_at=None, interrupted_at=now
    )
    pulse = ReconcilerPass.objects.pulse(now)
    assert pulse.running_since is None
    assert pulse.last_started == now - timedelta(seconds=10)


def test_the_schedule_is_read_before_the_first_pass(db):
    # Regression: the schedule rode on the newest pass row, so before the
    # first pass the heartbeat (and "Retry now"'s answer) knew no next run.
    schedule = _schedule(minutes=5, next_in=timedelta(seconds=42))
    pulse = ReconcilerPass.objects.pulse()
    assert pulse.never
    assert pulse.next_run == schedule.next_run
    assert pulse.schedule_minutes == 5
