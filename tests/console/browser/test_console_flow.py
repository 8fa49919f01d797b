"""The console in a real browser: live dashboard, approve, audit, reviewer view."""

import threading

import pytest
from django.db import connection
from playwright.sync_api import expect

from sandboxes.models import AuditEvent, Retirement
from sandboxes.models.choices import Stage
from tests import factories as f
from tests.console.browser.conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

FILES = {"README.md": b"# task\n", "src/app.py": b"print('saved')\n"}


@pytest.fixture
def kept_lease(local):
    """A failed warm lease on a real, stopped local sandbox in a manual environment:
    one reconciler pass compares it (clean) and stops at awaiting approval."""
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


def run_pass_in_background(local) -> threading.Thread:
    from sandboxes.reconciler.passes import run_pass

    def work():
        try:
            run_pass(provider_for=lambda env: local)
        finally:
            connection.close()

    thread = threading.Thread(target=work, name="reconciler-pass")
    thread.start()
    return thread


def test_an_operator_watches_a_pass_then_approves_and_finds_the_audit_row(
    page, live_server, shot, local, kept_lease
):
    f.UserFactory(username="oscar", groups=["operators"])
    log_in(page, live_server, "oscar")

    awaiting = page.locator('[data-tile="awaiting"]')
    expect(awaiting).to_have_text("0")
    page.evaluate("window.__notReloaded = true")

    thread = run_pass_in_background(local)
    # htmx polls every 3 s while the tab is visible; no reload happens.
    expect(awaiting).to_have_text("1")
    thread.join(timeout=30)
    assert page.evaluate("window.__notReloaded") is True
    expect(page.locator("figure.chart > svg")).to_be_visible()
    shot(page, "dashboard")

    page.get_by_role("link", name="Kept sandboxes").click()
    row_link = page.get_by_role("link", name=kept_lease.provider_lease_id)
    expect(row_link).to_be_visible()
    shot(page, "list")

    row_link.click()
    expect(page.get_by_role("heading", name="Receipts")).to_be_visible()
    expect(page.locator("#panel [data-stage]")).to_have_text("awaiting approval")
    shot(page, "detail")

    panel = page.locator("#panel")
    panel.get_by_label("Reason").first.fill("clean compare, task moved on")
    panel.get_by_role("button", name="Approve retirement").click()
    expect(page.locator("#panel .flash.ok")).to_contain_text("Approved")
    # The receipts section refreshed itself on the client event.
    expect(page.locator("#receipts .receipt-approval")).to_be_visible()
    shot(page, "detail-approved")

    retirement = Retirement.objects.get(provider_lease_id=kept_lease.provider_lease_id)
    assert retirement.stage == Stage.AWAITING_APPROVAL
    assert AuditEvent.objects.filter(action="retirement.approve", actor_label="oscar").count() == 1

    page.get_by_role("link", name="Audit trail").click()
    row = page.locator('tr[data-audit-action="retirement.approve"]')
    expect(row).to_have_count(1)
    expect(row).to_contain_text("oscar")
    expect(row).to_contain_text("clean compare, task moved on")
    shot(page, "audit")


def test_a_reviewer_sees_no_action_buttons(page, live_server, shot, db):
    f.UserFactory(username="rita", groups=["reviewers"])
    r = f.RetirementFactory(stage=Stage.AWAITING_APPROVAL, holds=["retention"])
    f.ReceiptFactory(
        kind="salvage_compare",
        state=None,
        lease=r.lease,
        retirement=r,
        payload={"clean": True, "added": [], "changed": [], "deleted": []},
    )
    log_in(page, live_server, "rita")
    page.goto(f"{live_server.url}/sandboxes/{r.pk}/")
    expect(page.get_by_role("heading", name="Status")).to_be_visible()
    expect(page.locator("[data-actions]")).to_have_count(0)
    expect(page.locator("#panel button")).to_have_count(0)
    for name in ("Approve retirement", "Retry now", "Hold", "Release hold"):
        expect(page.get_by_role("button", name=name)).to_have_count(0)
    shot(page, "detail-reviewer")
    # Reading the provider is every role's, a POST with the page's CSRF token.
    page.get_by_role("button", name="Ask the provider now").click()
    expect(page.locator("[data-provider-state]")).to_have_text("destroyed")
    assert (
        AuditEvent.objects.filter(action="retirement.ask_provider", actor_label="rita").count() == 1
    )


def test_the_pages_fit_a_phone(page, live_server, shot, db):
    f.UserFactory(username="oscar", groups=["operators"])
    for stage in ("awaiting_approval", "held", "failed", "listed"):
        f.RetirementFactory(stage=stage, holds=["retention"], size_bytes=10_000_000)
    f.ReconcilerPassFactory(candidates=4, retired=1)
    page.set_viewport_size({"width": 390, "height": 844})
    log_in(page, live_server, "oscar")
    shot(page, "phone-dashboard")
    page.goto(f"{live_server.url}/sandboxes/")
    shot(page, "phone-list")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390 + 1, f"the list scrolls sideways at phone width ({width}px)"


def test_the_detail_page_fits_a_phone_with_an_export_receipt(page, live_server, shot, db):
    # Issue 15, defect 7: the export table's sha256 column pushed the page sideways.
    f.UserFactory(username="oscar", groups=["operators"])
    r = f.RetirementFactory(stage=Stage.RETIRING, size_bytes=10_000)
    files = [
        {
            "path": f"src/deeply/nested/directory/structure/module_{i}_with_a_long_name.py",
            "size": 1234 * i,
            "sha256": f"{i:x}" * 64,
            "attachment": None,
        }
        for i in range(1, 4)
    ]
    f.ReceiptFactory(
        kind="salvage_export",
        state=None,
        lease=r.lease,
        retirement=r,
        payload={"verified": True, "files": files, "deleted": ["old/file.txt"], "bytes": 7404},
    )
    page.set_viewport_size({"width": 390, "height": 844})
    log_in(page, live_server, "oscar")
    page.goto(f"{live_server.url}/sandboxes/{r.pk}/")
    expect(page.get_by_role("heading", name="Receipts")).to_be_visible()
    shot(page, "phone-detail-export")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the detail page scrolls sideways at phone width ({width}px)"
