"""The operator's glance in chromium: the reconciler's heartbeat on every page,
turning into the overdue banner live; Run a pass now; money on a fresh demo's
dashboard; every time a <time> with its datetime."""

from datetime import timedelta

import pytest
from django.utils import timezone
from django_q.models import OrmQ, Schedule
from playwright.sync_api import expect

from sandboxes.models import AuditEvent, ReconcilerPass
from sandboxes.models.choices import Stage
from sandboxes.run_now import TASK
from tests import factories as f
from tests.console.browser.conftest import log_in
from tests.console.conftest import clean_compare

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PAGES = ["/", "/sandboxes/", "/approvals/", "/audit/", "/passes/", "/environments/"]


@pytest.fixture
def schedule(db):
    return Schedule.objects.create(
        name="reconciler pass",
        func=TASK,
        schedule_type=Schedule.MINUTES,
        minutes=1,
        next_run=timezone.now() + timedelta(seconds=40),
    )


def test_the_heartbeat_is_on_every_page_and_turns_into_the_banner_when_late(
    page, live_server, shot, schedule
):
    f.UserFactory(username="rita", groups=["reviewers"])
    last = f.ReconcilerPassFactory(started_at=timezone.now() - timedelta(seconds=20))
    log_in(page, live_server, "rita")
    for path in PAGES:
        page.goto(f"{live_server.url}{path}")
        beat = page.locator("[data-heartbeat]")
        expect(beat).to_be_visible()
        expect(beat).to_contain_text("last pass")
        expect(beat).to_contain_text(" s ago")
        expect(beat).to_contain_text("next in")
        assert beat.locator("time").first.get_attribute("datetime")
        expect(page.locator("[data-banner]")).to_have_count(0)
    shot(page, "glance-heartbeat")
    # The scheduler stops: the last pass ages past twice the schedule, and the
    # heartbeat on the open page turns into the banner on its next poll.
    ReconcilerPass.objects.filter(pk=last.pk).update(
        started_at=timezone.now() - timedelta(minutes=5)
    )
    Schedule.objects.update(next_run=timezone.now() - timedelta(minutes=4))
    banner = page.locator('[data-banner="overdue"]')
    expect(banner).to_contain_text("Reconciler overdue", timeout=12_000)
    expect(banner).to_contain_text("last pass 5 min")
    expect(page.locator("[data-heartbeat]")).to_have_count(0)
    shot(page, "glance-overdue")


def test_an_operator_runs_a_pass_now_and_is_refused_while_one_runs(
    page, live_server, shot, schedule
):
    f.UserFactory(username="oscar", groups=["operators"])
    f.ReconcilerPassFactory(started_at=timezone.now() - timedelta(minutes=1))
    log_in(page, live_server, "oscar")
    page.goto(f"{live_server.url}/passes/")
    page.get_by_role("button", name="Run a pass now").click()
    expect(page.locator(".messages")).to_contain_text("A pass is queued")
    assert [q.func() for q in OrmQ.objects.all()] == [TASK]
    assert AuditEvent.objects.filter(action="reconciler.run_pass", actor_label="oscar").exists()
    # Asked for and not started yet: the button says why it is off.
    expect(page.get_by_role("button", name="Run a pass now")).to_be_disabled()
    expect(page.locator("[data-refusal]")).to_contain_text("oscar asked for a pass")
    # A pass starts and is running: still refused, with that reason.
    f.ReconcilerPassFactory(
        started_at=timezone.now(), finished_at=None, last_seen_at=timezone.now()
    )
    page.reload()
    expect(page.locator("[data-refusal]")).to_contain_text("a pass is running")
    expect(page.locator("[data-heartbeat]")).to_contain_text("pass running")
    shot(page, "glance-run-refused")
    # Posting anyway (a stale page) is refused on the server too.
    page.evaluate("document.querySelector('[data-run-now] button').removeAttribute('disabled')")
    page.get_by_role("button", name="Run a pass now").click()
    expect(page.locator(".messages")).to_contain_text("No pass was asked for: a pass is running")
    assert OrmQ.objects.count() == 1


def test_a_reviewer_has_no_button_and_the_server_refuses_a_post(page, live_server, schedule):
    f.UserFactory(username="rita", groups=["reviewers"])
    f.ReconcilerPassFactory()
    log_in(page, live_server, "rita")
    page.goto(f"{live_server.url}/passes/")
    expect(page.get_by_role("heading", name="Reconciler passes")).to_be_visible()
    expect(page.get_by_role("button", name="Run a pass now")).to_have_count(0)
    status = page.evaluate(
        """async () => {
            const token = document.cookie.match(/csrftoken=([^;]+)/)[1];
            const r = await fetch('/passes/run/', {method: 'POST',
                headers: {'X-CSRFToken': token}, redirect: 'manual'});
            return r.status;
        }"""
    )
    assert status == 403
    assert OrmQ.objects.count() == 0


def test_a_fresh_demo_shows_money_on_the_dashboard(page, live_server, shot, settings, tmp_path):
    from django.core.management import call_command

    from sandboxes.providers.registry import reset_providers

    settings.LOCAL_SANDBOX_ROOT = tmp_path / "sandboxes"
    reset_providers()
    try:
        call_command("demo_fleet", quiet=True)
    finally:
        reset_providers()
    f.UserFactory(username="oscar", groups=["operators"])
    log_in(page, live_server, "oscar")
    cost = page.locator('[data-tile="cost"]')
    expect(cost).to_have_text(__import__("re").compile(r"^\$\d+\.\d\d$"))
    assert cost.inner_text() != "$0.00"
    expect(page.locator('[data-tile="storage"]')).not_to_have_text("unknown")
    expect(page.locator('[data-cost-env="e2b-demo"]')).to_contain_text("unknown")
    expect(page.locator('[data-cost-env="local-demo"]')).to_contain_text("$")
    shot(page, "glance-demo-dashboard")


def test_every_time_is_a_time_element_with_its_datetime(page, live_server, schedule):
    f.UserFactory(username="alice", groups=["admins"])
    now = timezone.now()
    r = f.RetirementFactory(stage=Stage.FAILED, next_attempt_at=now + timedelta(minutes=4))
    clean_compare(r)
    awaiting = f.RetirementFactory(stage=Stage.AWAITING_APPROVAL)
    clean_compare(awaiting)
    f.AuditEventFactory(object_id=str(r.pk), sandbox_id=r.provider_lease_id)
    p = f.ReconcilerPassFactory(records={"advanced": [str(r.pk)]})
    log_in(page, live_server, "alice")
    for path in [*PAGES, f"/sandboxes/{r.pk}/", f"/passes/{p.pk}/"]:
        page.goto(f"{live_server.url}{path}")
        times = page.locator("main time")
        assert times.count() > 0, path
        for i in range(times.count()):
            t = times.nth(i)
            assert t.get_attribute("datetime"), path
            assert (t.get_attribute("title") or "").endswith(" UTC"), path
