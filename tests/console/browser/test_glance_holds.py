"""The operator's glance in chromium: how long each sandbox is kept and when it
goes (the countdown's colour and its words), one hold text on every page, a
hold with an end that the next pass releases, and bulk actions on the list
with a mix of allowed and refused records; a reviewer reads, never acts."""

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from sandboxes import actions
from sandboxes.explain import hold_phrase
from sandboxes.models import AuditEvent, Retirement
from sandboxes.models.choices import HoldCode, Stage
from tests import factories as f
from tests.console.browser.conftest import log_in
from tests.console.browser.test_console_flow import FILES

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def kept_lease(local):
    """A failed warm lease on a real, stopped local sandbox in a manual
    environment: one pass compares it (clean) and leaves it awaiting approval."""
    info = local.create("browser", {"test": "1"}, files=dict(FILES))
    local.stop(info.id)
    env = f.EnvironmentFactory(name="manual-east", retirement_mode="manual")
    lease = f.EnvironmentLeaseFactory(
        provider_lease_id=info.id,
        environment=env,
        status="failed",
        execution_workspace__saved_manifest=f.manifest_for(FILES),
    )
    f.stop_receipt(lease)
    return lease


def _row(page, r):
    return page.locator(f'tr[data-sandbox="{r.provider_lease_id}"]')


def test_the_list_shows_age_and_a_countdown_that_turns_red_in_words(page, live_server, shot):
    now = timezone.now()
    f.UserFactory(username="rita", groups=["reviewers"])
    soon = f.RetirementFactory(stage=Stage.NOTICED, retire_after=now + timedelta(minutes=30))
    later = f.RetirementFactory(
        stage=Stage.FAILED,
        next_attempt_at=now + timedelta(hours=5),
        lease__released_at=now - timedelta(days=3),
    )
    log_in(page, live_server, "rita")
    page.goto(f"{live_server.url}/sandboxes/")
    red = _row(page, soon).locator(".countdown")
    expect(red).to_contain_text("retires after the notice, in")
    expect(red).to_contain_text("(under an hour)")
    expect(red).to_have_class("countdown due-now")
    amber = _row(page, later).locator(".countdown")
    expect(amber).to_contain_text("next attempt in 4 h")
    expect(amber).to_contain_text("(under a day)")
    colours = [c.evaluate("e => getComputedStyle(e).backgroundColor") for c in (red, amber)]
    assert colours[0] != colours[1] and "rgba(0, 0, 0, 0)" not in colours
    expect(_row(page, later).locator("[data-kept]")).to_have_text("3 d")
    page.get_by_label("Sort").select_option("kept_since")
    page.get_by_role("button", name="Apply").click()
    expect(page.locator("tr[data-sandbox]").first).to_have_attribute(
        "data-sandbox", later.provider_lease_id
    )
    # A reviewer reads; there is nothing to act with.
    expect(page.locator("#bulk")).to_have_count(0)
    shot(page, "glance-list")


def test_an_operator_hold_reads_the_same_on_the_list_the_page_and_the_queue(page, live_server):
    operator = f.UserFactory(username="alice", groups=["operators"])
    f.UserFactory(username="rita", groups=["reviewers"])
    r = f.RetirementFactory()
    actions.hold(r.pk, actor=operator, reason="waiting for the owner", until=f.hold_until(2))
    waiting = f.RetirementFactory(stage=Stage.AWAITING_APPROVAL, holds=[HoldCode.RUN_ACTIVE])
    r = Retirement.objects.select_related(
        "environment", "lease__issue", "lease__heartbeat_run"
    ).get(pk=r.pk)
    words = hold_phrase(HoldCode.OPERATOR_HOLD, r)
    assert words.startswith("held by alice: waiting for the owner (since ")
    log_in(page, live_server, "rita")
    page.goto(f"{live_server.url}/sandboxes/")
    expect(_row(page, r).locator("td[data-label=Holds]")).to_contain_text(words)
    page.get_by_role("link", name=r.provider_lease_id).click()
    expect(page.locator('[data-hold="operator_hold"]')).to_contain_text(words)
    expect(page.locator("[data-goes]")).to_contain_text("hold ends in 1 d")
    page.goto(f"{live_server.url}/approvals/")
    waiting = Retirement.objects.select_related(
        "environment", "lease__issue", "lease__heartbeat_run"
    ).get(pk=waiting.pk)
    expect(page.locator('[data-hold="run_active"]')).to_contain_text(
        hold_phrase(HoldCode.RUN_ACTIVE, waiting)
    )


def test_an_operator_holds_until_a_time_and_the_next_pass_ends_it(
    page,
    live_server,
    local,
    kept_lease,
):
    from sandboxes.reconciler.passes import run_pass

    f.UserFactory(username="oscar", groups=["operators"])
    run_pass(provider_for=lambda env: local)
    r = Retirement.objects.get(lease=kept_lease)
    assert r.stage == Stage.AWAITING_APPROVAL
    log_in(page, live_server, "oscar")
    page.goto(f"{live_server.url}/sandboxes/{r.pk}/")
    until = (timezone.now() + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    form = page.locator("form.action", has=page.get_by_role("button", name="Hold", exact=True))
    form.get_by_label("Reason for hold").fill("owner on leave")
    # The browser asks for the end first (required), then the server judges it.
    form.get_by_role("button", name="Hold", exact=True).click()
    expect(page.locator('[data-hold="operator_hold"]')).to_have_count(0)
    form.get_by_label("Keep until", exact=False).fill(until)
    form.get_by_role("button", name="Hold", exact=True).click()
    expect(page.locator('[data-hold="operator_hold"]')).to_contain_text(
        "held by oscar: owner on leave (since "
    )
    Retirement.objects.filter(pk=r.pk).update(
        operator_hold_until=timezone.now() - timedelta(seconds=1)
    )
    run_pass(provider_for=lambda env: local)
    page.reload()
    expect(page.locator("[data-stage]")).to_have_text("awaiting approval")
    expect(page.locator("#history")).to_contain_text("hold by oscar ended")
    assert AuditEvent.objects.filter(action="retirement.hold_ended").count() == 1


def test_bulk_hold_on_a_mix_says_how_many_and_which_were_refused(page, live_server, shot):
    operator = f.UserFactory(username="oscar", groups=["operators"])
    fresh = f.RetirementFactory()
    taken = f.RetirementFactory()
    actions.hold(taken.pk, actor=operator, reason="earlier", until=f.hold_until())
    log_in(page, live_server, "oscar")
    page.goto(f"{live_server.url}/sandboxes/")
    page.get_by_label(f"Select {fresh.provider_lease_id}").check()
    page.get_by_label(f"Select {taken.provider_lease_id}").check()
    bar = page.locator("#bulk")
    bar.get_by_label("Action on the selected").select_option("hold")
    bar.get_by_label("Reason").fill("freeze before the audit")
    bar.get_by_label("Keep until", exact=False).fill(
        (timezone.now() + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    )
    bar.get_by_role("button", name="Apply to selected").click()
    result = page.locator("#bulk-result")
    expect(result).to_contain_text("Held 1 of 2 kept sandboxes.")
    expect(result.locator("[data-refused]")).to_have_count(1)
    expect(result.locator("[data-refused]")).to_contain_text(taken.provider_lease_id)
    expect(result.locator("[data-refused]")).to_contain_text("An operator already holds")
    # The rows refresh by themselves (the retirement-changed event).
    expect(_row(page, fresh).locator("td[data-label=Holds]")).to_contain_text(
        "held by oscar: freeze before the audit"
    )
    shot(page, "glance-bulk")
    assert AuditEvent.objects.filter(action="retirement.hold").count() == 2


def test_bulk_all_matching_refuses_beyond_the_cap_with_a_clear_message(
    page, live_server, settings, monkeypatch
):
    from sandboxes import bulk

    monkeypatch.setattr(bulk, "MAX_BULK", 2)
    f.UserFactory(username="oscar", groups=["operators"])
    for _ in range(3):
        f.RetirementFactory(stage=Stage.FAILED)
    log_in(page, live_server, "oscar")
    page.goto(f"{live_server.url}/sandboxes/?stage=failed")
    bar = page.locator("#bulk")
    bar.get_by_label("Action on the selected").select_option("retry")
    bar.get_by_label("Reason").fill("provider is back")
    bar.get_by_label("All matching these filters", exact=False).check()
    bar.get_by_role("button", name="Apply to selected").click()
    expect(page.locator("#bulk-result [role=alert]")).to_contain_text(
        "more than 2 kept sandboxes match these filters"
    )
    assert AuditEvent.objects.count() == 0
