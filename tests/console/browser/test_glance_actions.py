"""The operator's glance, in chromium: actions answer at once (an approval leaves
the queue and the tile, a retry says when the next pass runs, an action in
flight shows it, a policy save lands on its preview with old → new), pages fit
(the Holds column at 1440 px, channel forms, copy buttons) and people are added
without a shell."""

import re
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone
from playwright.sync_api import expect

from sandboxes import models as m
from sandboxes.reconciler.passes import run_pass
from tests import factories as f
from tests.console.browser.conftest import PASSWORD, log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

FILES = {"README.md": b"# task\n", "src/app.py": b"print('saved')\n"}


def awaiting(local, n: int) -> list[m.Retirement]:
    """`n` failed warm leases on real stopped sandboxes, compared by a real pass
    in a manual environment: awaiting approval, with proof."""
    env = f.EnvironmentFactory(name="prod-west", retirement_mode="manual")
    for _ in range(n):
        info = local.create("glance", {"test": "1"}, files=dict(FILES))
        local.stop(info.id)
        lease = f.EnvironmentLeaseFactory(
            provider_lease_id=info.id,
            environment=env,
            status="failed",
            execution_workspace__saved_manifest=f.manifest_for(FILES),
        )
        f.stop_receipt(lease)
    run_pass(provider_for=lambda e: local)
    records = list(m.Retirement.objects.filter(stage=m.Stage.AWAITING_APPROVAL))
    assert len(records) == n
    return records


def test_an_approval_leaves_the_queue_and_the_tile_at_once(page, live_server, local):
    f.UserFactory(username="olga", groups=["operators"])
    first, second = awaiting(local, 2)
    log_in(page, live_server, "olga")
    expect(page.locator('[data-tile="awaiting"]')).to_have_text("2")
    page.goto(f"{live_server.url}/approvals/")
    page.get_by_label(f"Select {first.provider_lease_id}").check()
    page.get_by_label("Reason for approving the selected").fill("proof is clean")
    page.get_by_role("button", name="Approve selected").click()
    queue = page.locator("#queue")
    expect(queue.locator(".count")).to_contain_text("1 sandbox awaits approval")
    expect(queue.get_by_label(f"Select {first.provider_lease_id}")).to_have_count(0)
    approved = queue.locator("[data-approved]")
    expect(approved).to_contain_text(first.provider_lease_id)
    expect(approved).to_contain_text("approved — retires on the next pass")
    # The record still waits for the pass (stage unchanged), but not for a person.
    first.refresh_from_db()
    assert first.stage == m.Stage.AWAITING_APPROVAL
    page.goto(f"{live_server.url}/")
    expect(page.locator('[data-tile="awaiting"]')).to_have_text("1")
    page.goto(f"{live_server.url}/sandboxes/{first.pk}/")
    expect(page.locator("[data-approved]")).to_have_text("approved — retires on the next pass")


def test_retry_now_says_when_the_next_pass_runs_and_buttons_wait_in_flight(page, live_server):
    call_command("setup_schedules", verbosity=0)
    f.UserFactory(username="olga", groups=["operators"])
    r = f.RetirementFactory(
        stage=m.Stage.FAILED, attempts=1, next_attempt_at=timezone.now() + timedelta(hours=1)
    )
    log_in(page, live_server, "olga")
    page.goto(f"{live_server.url}/sandboxes/{r.pk}/")
    form = page.locator("form.action", has=page.get_by_role("button", name="Retry now"))
    form.get_by_label("Reason for retry").fill("provider is back")

    # Hold the answer back, to see the action in flight: busy, its button disabled.
    held = []
    page.route(re.compile(r".*/retry/$"), lambda route: held.append(route))
    form.get_by_role("button", name="Retry now").click()
    page.wait_for_function("document.querySelector('form[aria-busy=true]') !== null")
    busy = page.locator("form[aria-busy=true]")
    expect(busy.get_by_role("button", name="Retry now")).to_be_disabled()
    assert len(held) == 1
    held[0].continue_()

    flash = page.locator("#panel .flash.ok")
    expect(flash).to_contain_text("Retry scheduled")
    expect(flash).to_contain_text(re.compile(r"The next pass runs (in \d+ (s|min)|as soon as)"))
    expect(page.locator("form[aria-busy=true]")).to_have_count(0)


def test_save_policy_lands_on_the_preview_with_old_and_new_values(page, live_server):
    f.UserFactory(username="ada", groups=["admins"])
    env = f.EnvironmentFactory(name="prod-west", retirement_mode="manual")
    for _ in range(30):  # a long page: the preview is below the fold
        f.EnvironmentFactory()
    log_in(page, live_server, "ada")
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{live_server.url}/environments/")
    page.get_by_text("Edit the policy and prices of prod-west").click()
    prefix = str(env.pk)
    page.locator(f'select[name="{prefix}-retirement_mode"]').select_option("auto")
    page.locator(f'input[name="{prefix}-warm_retention_hours"]').fill("2")
    page.locator(f'input[name="{prefix}-reason"]').fill("faster")
    page.get_by_role("button", name="Save policy").click()
    page.wait_for_url(re.compile(f"#preview-{prefix}$"))
    changes = page.get_by_role("table", name="Policy changes")
    expect(changes).to_be_in_viewport()
    mode = changes.locator('tr[data-field="retirement_mode"]')
    expect(mode).to_contain_text("manual → auto")
    expect(changes.locator('tr[data-field="warm_retention_hours"]')).to_contain_text(
        re.compile(r"\d+ h → 2 h")
    )
    expect(changes.locator('tr[data-field="workspace_root"]')).to_have_count(0)


def test_the_holds_column_reads_at_1440_and_ids_never_break(page, live_server):
    f.UserFactory(username="rita", groups=["reviewers"])
    long_id = "4f1c2d3e-4b5a-4789-abcd-ef0123456789"
    run = f.HeartbeatRunFactory(status=m.RunStatus.RUNNING)
    f.RetirementFactory(
        provider_lease_id=long_id,
        lease=f.EnvironmentLeaseFactory(
            heartbeat_run=run, issue=run.issue, environment__name="staging-west-long-name"
        ),
        stage=m.Stage.HELD,
        holds=["run_active", "retention", "operator_hold"],
        operator_hold_reason="the task owner asked to keep it until the review is done",
    )
    page.set_viewport_size({"width": 1440, "height": 900})
    log_in(page, live_server, "rita")
    page.goto(f"{live_server.url}/sandboxes/")
    cell = page.locator('td[data-label="Holds"]').first
    page.screenshot(path="/tmp/g3run/holds.png")
    assert cell.bounding_box()["width"] >= 270  # was 80 px: a word a line
    line = 20  # px: one line of a hold's 12 px text, with its padding and border
    heights = {h.inner_text(): h.bounding_box()["height"] for h in cell.locator(".hold").all()}
    assert len(heights) == 3
    for text, height in heights.items():
        # About 45 characters a line: the 88-character operator hold in two.
        assert height <= line * (1 + len(text) // 45), (text, height)
    code = page.locator('td[data-label="Sandbox"] code').first
    expect(code).to_have_text("4f1c2d3e-4b5a-…")
    assert code.bounding_box()["height"] <= line  # one line: the id is never cut mid-way
    assert page.evaluate("document.documentElement.scrollWidth") <= 1440
    wrap = page.locator(".table-wrap").first  # every column in view, none scrolled away
    assert wrap.evaluate("e => e.scrollWidth <= e.clientWidth")


def test_channel_forms_put_labels_beside_checkboxes_and_rotation_asks(page, live_server):
    f.UserFactory(username="ada", groups=["admins"])
    channel = f.NotificationChannelFactory(kind="webhook", name="hooks")
    log_in(page, live_server, "ada")
    page.goto(f"{live_server.url}/channels/{channel.pk}/")
    expect(page.get_by_role("heading", name="Edit the channel")).to_be_visible()
    enabled = page.get_by_label("Enabled")
    label = page.locator("label.check", has=enabled)
    box, text = enabled.bounding_box(), label.bounding_box()
    assert abs((box["y"] + box["height"] / 2) - (text["y"] + text["height"] / 2)) < 6
    assert text["width"] < 400  # beside, not a column of its own
    expect(page.locator("fieldset.checks legend")).to_have_text("Events")

    rotate = page.locator("form[data-rotate]")
    expect(page.get_by_role("heading", name="Rotate the signing secret")).to_be_visible()
    rotate.get_by_role("button", name="Rotate secret").click()  # the browser asks first
    assert not m.AuditEvent.objects.filter(action="channel.rotate_secret").exists()
    rotate.get_by_label("Reason for rotating").fill("leaked in a log")
    rotate.get_by_label("I understand the old secret stops working now").check()
    rotate.get_by_role("button", name="Rotate secret").click()
    secret = page.locator("[data-webhook-secret]")
    expect(secret).to_be_visible()
    row = m.AuditEvent.objects.get(action="channel.rotate_secret")
    assert row.reason == "leaked in a log"
    _copies(page, "Copy the signing secret", secret.inner_text())


def _copies(page, button_name: str, expected: str) -> None:
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    button = page.get_by_role("button", name=button_name)
    button.click()
    expect(button).to_have_text("copied")
    assert page.evaluate("navigator.clipboard.readText()") == expected


def test_a_new_token_has_a_copy_button_that_works_under_the_csp(page, live_server):
    f.UserFactory(username="ada", groups=["admins"])
    errors = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    log_in(page, live_server, "ada")
    page.goto(f"{live_server.url}/tokens/")
    page.get_by_label("Name").fill("ci")
    page.get_by_role("button", name="Create token").click()
    raw = page.locator("[data-raw-token]").inner_text()
    _copies(page, "Copy the token", raw)
    assert not [e for e in errors if "Content Security Policy" in e], errors


def test_an_admin_adds_a_person_who_sets_a_password_and_logs_in(page, live_server, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = ""
    settings.CONSOLE_BASE_URL = live_server.url
    f.UserFactory(username="ada", groups=["admins"])
    log_in(page, live_server, "ada")
    page.goto(f"{live_server.url}/users/")
    page.get_by_label("Username").fill("nina")
    page.get_by_label("Role").first.select_option("operator")
    page.get_by_label("Reason for adding this user").fill("joins the on-call rota")
    page.get_by_role("button", name="Add user").click()
    link = page.locator("[data-set-password-url]").inner_text()
    _copies(page, "Copy the set-password link", link)
    expect(page.locator('tr[data-user="nina"] [data-role]')).to_have_text("operator")

    other = page.context.browser.new_context()
    visitor = other.new_page()
    visitor.goto(link)
    visitor.get_by_label("New password", exact=True).fill(PASSWORD)
    visitor.get_by_label("New password again").fill(PASSWORD)
    visitor.get_by_role("button", name="Set password").click()
    expect(visitor.get_by_role("heading", name="Password set")).to_be_visible()
    log_in(visitor, live_server, "nina")
    expect(visitor.get_by_role("link", name="Approvals")).to_be_visible()
    other.close()
