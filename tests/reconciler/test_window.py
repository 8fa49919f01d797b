"""The retirement window (docs/rules.md, the retirement window): outside an
environment's window a pass neither destroys nor gives a notice; the record
waits, held `outside_window` until the opening (not worked again meanwhile), and
the first pass once it opens retires it. The clock is moved as the other
reconciler tests move it (`timezone.now`, tests/reconciler/test_unchanged_pass.py):
the window is pure and judges whatever moment the pass reads."""

from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from sandboxes import models as m
from sandboxes.explain import hold_phrase
from sandboxes.reconciler.candidates import judge_lease_locked
from sandboxes.reconciler.gate import DestroyRefused, authorize_destroy
from tests import factories as f

from .conftest import retirement_of
from .test_machine import attest

pytestmark = pytest.mark.django_db

BERLIN = ZoneInfo("Europe/Berlin")


def office(**kwargs):
    """Mon–Fri 09:00–17:00 Europe/Berlin, auto mode."""
    kwargs.setdefault("retirement_mode", "auto")
    return f.EnvironmentFactory(
        time_zone="Europe/Berlin",
        window_days="mon,tue,wed,thu,fri",
        window_start=time(9),
        window_end=time(17),
        **kwargs,
    )


def coming_weekend() -> tuple[datetime, datetime]:
    """A Saturday noon in Berlin at least a day ahead of the real clock (every row
    a test makes is older), and the Monday 09:00 after it."""
    day = (timezone.now() + timedelta(days=1)).astimezone(BERLIN).date()
    while day.weekday() != 5:
        day += timedelta(days=1)
    saturday = datetime(day.year, day.month, day.day, 12, 0, tzinfo=BERLIN)
    monday = saturday.replace(hour=9) + timedelta(days=2)
    return saturday, monday


@pytest.fixture
def clock(monkeypatch):
    def set_to(moment):
        monkeypatch.setattr(timezone, "now", lambda: moment)

    return set_to


def test_a_destroy_waits_for_the_window_and_happens_once_it_opens(warm, reconcile, local, clock):
    lease = warm(env=office())
    f.rebind_to_new_workspace(lease)  # abandoned_warm: proof is a compare away
    saturday, monday = coming_weekend()

    clock(saturday)
    reconcile()
    r = retirement_of(lease)
    assert local.count("destroy") == 0
    assert local.count("start") == 0  # not even salvage: it waits whole for the window
    assert r.stage == m.Stage.HELD
    assert r.holds == [m.HoldCode.OUTSIDE_WINDOW]
    assert r.next_attempt_at == monday
    assert hold_phrase(m.HoldCode.OUTSIDE_WINDOW, r) == (
        "outside the retirement window (opens Mon 09:00)"
    )
    assert "Mon–Fri 09:00–17:00 Europe/Berlin" in r.hold_reasons[m.HoldCode.OUTSIDE_WINDOW]

    # The pass does not hammer it: later passes before the opening touch nothing.
    for hours in (1, 20, 44):
        clock(saturday + timedelta(hours=hours))
        done = reconcile()
        assert done.retired == 0
    assert local.calls == []
    r.refresh_from_db()
    assert r.attempts == 0 and r.stage == m.Stage.HELD

    # The window opens: the first pass salvages and destroys it.
    clock(monday + timedelta(seconds=30))
    reconcile()
    r.refresh_from_db()
    assert local.count("destroy", lease.provider_lease_id) == 1
    assert r.stage == m.Stage.RETIRED
    assert r.receipts.filter(kind=m.ReceiptKind.RETIREMENT).exists()


def test_the_window_closing_mid_notice_keeps_the_notice_and_sends_none_outside(
    warm, reconcile, local, clock
):
    env = office(notice_period=timedelta(hours=2))
    lease = warm(env=env)
    f.rebind_to_new_workspace(lease)
    saturday, monday = coming_weekend()
    friday_late = saturday - timedelta(hours=20)  # Friday 16:00: open

    clock(friday_late)
    reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.NOTICED
    notice_ends, proof = r.retire_after, r.notice_proof
    assert notice_ends == friday_late + timedelta(hours=2)  # Friday 18:00: after the close
    assert m.NotificationEvent.objects.filter(type="retirement.notice").count() == 1

    clock(notice_ends + timedelta(minutes=1))  # Friday 18:01: the window is closed
    reconcile()
    r.refresh_from_db()
    assert local.count("destroy") == 0
    assert r.stage == m.Stage.HELD and r.holds == [m.HoldCode.OUTSIDE_WINDOW]
    assert r.next_attempt_at == monday
    # The notice stands: the window is no reason to tell the owner again.
    assert (r.retire_after, r.notice_proof) == (notice_ends, proof)

    clock(monday + timedelta(seconds=30))
    reconcile()
    r.refresh_from_db()
    assert r.stage == m.Stage.RETIRED
    assert m.NotificationEvent.objects.filter(type="retirement.notice").count() == 1


def test_no_notice_is_given_outside_the_window(warm, reconcile, clock):
    lease = warm(env=office(notice_period=timedelta(hours=2)))
    f.rebind_to_new_workspace(lease)
    saturday, monday = coming_weekend()
    clock(saturday)
    reconcile()
    assert not m.NotificationEvent.objects.filter(type="retirement.notice").exists()
    assert retirement_of(lease).stage == m.Stage.HELD
    clock(monday + timedelta(seconds=30))
    reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.NOTICED and r.retire_after == monday + timedelta(hours=2, seconds=30)
    assert m.NotificationEvent.objects.filter(type="retirement.notice").count() == 1


def test_the_gate_refuses_outside_the_window_whatever_the_caller(warm, reconcile, clock):
    lease = warm(env=office())
    f.rebind_to_new_workspace(lease)
    saturday, monday = coming_weekend()
    clock(saturday)
    reconcile()
    r = retirement_of(lease)
    attest(r)  # proof in hand: only the window stands in the way
    cand = judge_lease_locked(lease.pk)
    with pytest.raises(DestroyRefused, match=r"held: outside_window \(the retirement window opens"):
        authorize_destroy(r, cand, saturday)
    assert authorize_destroy(r, cand, monday)  # open: the proof's reason


def test_a_correction_stop_is_not_limited_by_the_window(sandbox, reconcile, local, clock):
    """A stop is not a destroy: an unsuccessful run's sandbox kept running is
    stopped and retained at any hour (docs/rules.md, the retirement window)."""
    sid = sandbox(stopped=False)
    lease = f.EnvironmentLeaseFactory(
        environment=office(),
        provider_lease_id=sid,
        status=m.LeaseStatus.RETAINED,
        heartbeat_run__status=m.RunStatus.FAILED,
        disposition=m.Disposition.KEEP_RUNNING,
    )
    saturday, _ = coming_weekend()
    clock(saturday)
    reconcile()
    r = retirement_of(lease)
    assert r.kind == m.RetirementKind.STOP_AFTER_UNSUCCESSFUL_RUN
    assert m.HoldCode.OUTSIDE_WINDOW not in r.holds
    assert local.count("stop", sid) == 1 and local.count("destroy") == 0
    assert r.stage == m.Stage.CORRECTED


def test_the_preview_counts_what_would_wait_for_the_window_with_its_opening(warm, clock):
    from sandboxes.reconciler.listing import sync_retirements
    from sandboxes.reconciler.preview import Policy, preview

    env = office()
    lease = warm(env=env)
    f.rebind_to_new_workspace(lease)
    saturday, _ = coming_weekend()
    clock(saturday)

    # Proposing the window on an environment without one: the pass would wait.
    any_time = f.EnvironmentFactory(retirement_mode="auto")
    other = warm(env=any_time)
    f.rebind_to_new_workspace(other)
    pv = preview(any_time, replace_window(Policy.of(any_time), env))
    assert pv.current.counts == {"salvage": 1}
    assert pv.proposed.counts == {"window": 1}
    assert pv.proposed.window_opens == "Mon 09:00"
    assert pv.proposed.held_by_code == {"outside_window": 1}
    assert pv.proposed.summary()["window_opens"] == "Mon 09:00"

    # And the records already waiting: counted under the window, as the pass leaves them.
    sync_retirements()
    pv = preview(env, Policy.of(env))
    assert pv.current.counts == pv.proposed.counts == {"window": 1}
    (row,) = pv.current.rows["window"]
    assert row["sandbox_id"] == lease.provider_lease_id and row["holds"] == ["outside_window"]
    # Dropping the window: the next pass would salvage it.
    assert preview(env, replace_window(Policy.of(env), None)).proposed.counts == {"salvage": 1}


def replace_window(policy, env_or_none):
    from dataclasses import replace

    return replace(policy, window=env_or_none.window if env_or_none is not None else None)


def test_the_policy_page_says_when_the_window_opens(warm, clock, client):
    from django.urls import reverse

    from sandboxes.roles import ADMINS

    env = f.EnvironmentFactory(retirement_mode="auto")
    lease = warm(env=env)
    f.rebind_to_new_workspace(lease)
    saturday, _ = coming_weekend()
    clock(saturday)
    client.force_login(f.UserFactory(username="adam", groups=[ADMINS]))
    data = {
        "retirement_mode": "auto",
        "warm_retention_hours": "24",
        "max_retirements_per_pass": "50",
        "workspace_root": "workspace",
        "time_zone": "Europe/Berlin",
        "window_days": ["mon", "tue", "wed", "thu", "fri"],
        "window_start": "09:00",
        "window_end": "17:00",
        "reason": "working hours only",
    }
    url = reverse("environment-policy", kwargs={"pk": env.pk})
    body = client.post(url, {f"{env.pk}-{k}": v for k, v in data.items()}).content.decode()
    assert 'data-category="window"' in body
    assert "wait for the retirement window (opens Mon 09:00)" in body
    assert not m.AuditEvent.objects.exists()


def test_manual_mode_waits_for_the_window_and_asks_for_approval_once(warm, reconcile, local, clock):
    lease = warm(env=office(retirement_mode="manual"))
    f.rebind_to_new_workspace(lease)
    saturday, monday = coming_weekend()
    clock(saturday - timedelta(hours=22))  # Friday 14:00: open
    reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.AWAITING_APPROVAL
    asked = m.NotificationEvent.objects.filter(type="retirement.awaiting_approval")
    assert asked.count() == 1

    clock(saturday)  # closed: it leaves the approvals queue until the opening
    reconcile()
    r.refresh_from_db()
    assert r.stage == m.Stage.HELD and r.next_attempt_at == monday

    clock(monday + timedelta(seconds=30))
    reconcile()
    r.refresh_from_db()
    assert r.stage == m.Stage.AWAITING_APPROVAL
    assert asked.count() == 1  # asked once per proof, whatever the window did
    assert local.count("destroy") == 0
