"""Issue 17 in a real browser: an admin edits an environment's policy, sees what
the next pass would do under it beside the current policy, confirms, and the
next pass does exactly that."""

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from sandboxes import models as m
from sandboxes.reconciler.passes import run_pass
from tests import factories as f
from tests.console.browser.conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

FILES = {"README.md": b"# task\n", "src/app.py": b"print('saved')\n"}


def kept(local, env, **lease):
    info = local.create("browser", {"test": "1"}, files=dict(FILES))
    local.stop(info.id)
    row = f.EnvironmentLeaseFactory(
        provider_lease_id=info.id,
        environment=env,
        execution_workspace__saved_manifest=f.manifest_for(FILES),
        **lease,
    )
    f.stop_receipt(row)
    return row


def test_an_admin_previews_a_policy_confirms_it_and_the_next_pass_does_it(
    page, live_server, shot, local
):
    f.UserFactory(username="ada", groups=["admins"])
    env = f.EnvironmentFactory(name="prod-west", retirement_mode="manual")
    waiting = [kept(local, env, status="failed") for _ in range(2)]
    done = kept(local, env, released_at=timezone.now() - timedelta(hours=5))
    done.issue.status = m.IssueStatus.DONE
    done.issue.save(update_fields=["status"])
    run_pass(provider_for=lambda e: local)  # manual: both compared, awaiting approval
    assert m.Retirement.objects.filter(stage=m.Stage.AWAITING_APPROVAL).count() == 2
    assert m.Retirement.objects.get(lease=done).holds == ["retention"]

    log_in(page, live_server, "ada")
    page.goto(f"{live_server.url}/environments/")
    page.get_by_text("Edit the policy and prices of prod-west").click()
    prefix = str(env.pk)
    page.locator(f'select[name="{prefix}-retirement_mode"]').select_option("auto")
    page.locator(f'input[name="{prefix}-warm_retention_hours"]').fill("2")
    page.locator(f'input[name="{prefix}-reason"]').fill("retire faster in prod-west")
    page.get_by_role("button", name="Save policy").click()

    preview = page.locator("[data-policy-preview]")
    expect(preview).to_be_visible()
    shot(page, "policy-preview")
    table = page.get_by_role("table", name="Policy preview")
    expect(table.locator('tr[data-category="awaiting_approval"] [data-current]')).to_have_text("2")
    expect(table.locator('tr[data-category="awaiting_approval"] [data-proposed]')).to_have_text("0")
    expect(table.locator('tr[data-category="retire"] [data-proposed]')).to_have_text("2")
    expect(table.locator('tr[data-category="held"] [data-current]')).to_have_text("1")
    expect(table.locator('tr[data-category="salvage"] [data-proposed]')).to_have_text("1")
    held = page.get_by_role("table", name="Held by hold code")
    expect(held.locator('tr[data-hold="retention"] [data-current]')).to_have_text("1")
    expect(held.locator('tr[data-hold="retention"] [data-proposed]')).to_have_text("0")
    # Nothing is saved before the admin confirms.
    env.refresh_from_db()
    assert env.retirement_mode == "manual"
    assert not m.AuditEvent.objects.filter(action="environment.edit_policy").exists()

    page.get_by_role("button", name="Confirm and save").click()
    expect(page.get_by_text("Policy of prod-west saved.")).to_be_visible()
    env.refresh_from_db()
    assert env.retirement_mode == "auto" and env.warm_retention == timedelta(hours=2)
    event = m.AuditEvent.objects.get(action="environment.edit_policy")
    assert event.after["preview"]["proposed"]["counts"] == {"retire": 2, "salvage": 1}
    assert event.after["preview"]["current"]["counts"] == {"awaiting_approval": 2, "held": 1}

    # The next pass does what the preview said: the two approved-in-waiting are
    # retired, the third is salvaged (clean) and, in auto mode, retired too.
    started = timezone.now()
    record = run_pass(provider_for=lambda e: local)
    assert record.retired == 3
    retired = m.Retirement.objects.filter(stage=m.Stage.RETIRED)
    assert {r.lease_id for r in retired} == {w.pk for w in waiting} | {done.pk}
    compared = m.Receipt.objects.filter(
        kind=m.ReceiptKind.SALVAGE_COMPARE, created_at__gte=started
    ).values_list("lease_id", flat=True)
    assert list(compared) == [done.pk]
