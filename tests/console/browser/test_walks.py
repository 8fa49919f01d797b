"""Issue 15, "Done when": the operator's morning and the reviewer's audit, walked
in chromium against a real reconciler pass over real local sandboxes."""

import csv
import io
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone
from playwright.sync_api import expect

from sandboxes.models import AuditEvent, ReconcilerPass, Retirement
from sandboxes.models.choices import Stage
from sandboxes.providers.base import TransientProviderError
from sandboxes.providers.local import LocalProvider
from tests import factories as f
from tests.console.browser.conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

FILES = {"README.md": b"# task\n", "src/app.py": b"print('saved')\n"}


@pytest.fixture
def local(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    return LocalProvider(root=tmp_path / "sandboxes", budget_seconds=2)


@pytest.fixture
def kept(local):
    """A failed warm lease on a real, stopped local sandbox in an auto environment."""
    info = local.create("morning", {"test": "1"}, files=dict(FILES))
    local.stop(info.id)
    env = f.EnvironmentFactory(name="prod-east", retirement_mode="auto")
    lease = f.EnvironmentLeaseFactory(
        provider_lease_id=info.id,
        environment=env,
        status="failed",
        execution_workspace__saved_manifest=f.manifest_for(FILES),
    )
    f.stop_receipt(lease)
    return lease


def run_pass(local, *, background: bool = False):
    from sandboxes.reconciler.passes import run_pass as _run

    def work():
        try:
            _run(provider_for=lambda env: local)
        finally:
            if background:
                connection.close()

    if not background:
        return work()
    thread = threading.Thread(target=work, name="reconciler-pass")
    thread.start()
    return thread


def test_the_operators_morning(page, live_server, shot, local, kept, monkeypatch):
    """Open the dashboard, see a failing record and the overdue banner, open it,
    read its history, retry it after clearing its cause, watch it retire live."""
    f.UserFactory(username="oscar", groups=["operators"])
    # Overnight: the provider's file listing failed, and then the scheduler stopped.
    outage = {"on": True}
    real_hash = local.hash_files

    def hash_files(*args, **kwargs):
        if outage["on"]:
            raise TransientProviderError("503 Service Unavailable from the provider")
        return real_hash(*args, **kwargs)

    monkeypatch.setattr(local, "hash_files", hash_files)
    run_pass(local)
    r = Retirement.objects.get(provider_lease_id=kept.provider_lease_id)
    assert r.stage == Stage.FAILED and r.attempts == 1
    ReconcilerPass.objects.update(started_at=timezone.now() - timedelta(minutes=7))
    Retirement.objects.filter(pk=r.pk).update(failing_since=timezone.now() - timedelta(hours=6))

    log_in(page, live_server, "oscar")
    expect(page.locator('[data-banner="overdue"]')).to_contain_text("Reconciler overdue")
    expect(page.locator('[data-banner="overdue"]')).to_contain_text("last pass 7")
    failing = page.locator(f'[data-failing="{kept.provider_lease_id}"]')
    expect(failing).to_contain_text("6 h ago")
    expect(failing).to_contain_text("503 Service Unavailable")
    shot(page, "morning-1-dashboard")

    failing.get_by_role("link").click()
    expect(page.locator("#state [data-stage]")).to_have_text("failed")
    history = page.locator("#history")
    expect(history).to_contain_text("a step failed")
    expect(history).to_contain_text("503 Service Unavailable")
    shot(page, "morning-2-sandbox")

    # The cause is cleared (the provider is back): retry now, with a reason.
    outage["on"] = False
    page.evaluate("window.__notReloaded = true")
    panel = page.locator("#panel")
    panel.get_by_label("Reason for retry").fill("the provider is back")
    panel.get_by_role("button", name="Retry now").click()
    expect(panel.locator(".flash.ok")).to_contain_text("Retry scheduled")
    expect(history).to_contain_text("asked for a retry")

    # A pass runs while the operator watches: the page follows it without a reload.
    thread = run_pass(local, background=True)
    expect(page.locator("#state [data-stage]")).to_have_text("retired", timeout=30_000)
    thread.join(timeout=30)
    expect(page.locator("#receipts .receipt-retirement")).to_be_visible()
    expect(history).to_contain_text("retired a sandbox")
    expect(page.locator("#panel")).to_contain_text("Closed")
    assert page.evaluate("window.__notReloaded") is True
    shot(page, "morning-3-retired")
    r.refresh_from_db()
    assert r.stage == Stage.RETIRED
    assert local.get(kept.provider_lease_id).state == "destroyed"


def test_the_reviewers_audit(page, live_server, shot, db):
    """Filter the trail, read it in words, open a sandbox from it, export it."""
    f.UserFactory(username="rita", groups=["reviewers"])
    env = f.EnvironmentFactory(name="prod-east")
    r = f.RetirementFactory(lease__environment=env, provider_lease_id="sbx-audited")
    f.AuditEventFactory(
        action="retirement.failed",
        actor_label="system",
        object_id=str(r.pk),
        sandbox_id="sbx-audited",
        reason="TransientProviderError: 503",
        before={"stage": "comparing", "attempts": 0},
        after={"stage": "failed", "attempts": 1},
    )
    f.AuditEventFactory(
        action="environment.edit_policy",
        actor_label="alice",
        object_type="environment",
        object_id=str(env.pk),
        reason="retire faster",
        before={"warm_retention_hours": 24.0},
        after={"warm_retention_hours": 0.0},
    )
    f.AuditEventFactory(action="retirement.hold", actor_label="oscar", sandbox_id="sbx-other")
    log_in(page, live_server, "rita")
    page.get_by_role("link", name="Audit trail").click()
    expect(page.locator("[data-audit-action]")).to_have_count(3)
    expect(page.locator('[data-audit-action="environment.edit_policy"]')).to_contain_text(
        "warm retention: 1 d → 0 s"
    )
    expect(page.locator('[data-audit-action="environment.edit_policy"]')).to_contain_text(
        "prod-east"
    )
    shot(page, "audit-1-all")

    page.get_by_label("Action").select_option("retirement.failed")
    page.get_by_role("button", name="Apply").click()
    row = page.locator('[data-audit-action="retirement.failed"]')
    expect(page.locator("[data-audit-action]")).to_have_count(1)
    expect(row).to_contain_text("attempts: 0 → 1")
    expect(row).to_contain_text("comparing → failed")
    expect(page.locator("[data-count]")).to_contain_text("1 audit row matches")
    shot(page, "audit-2-filtered")

    with page.expect_download() as download:
        page.get_by_role("link", name="CSV").click()
    rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    assert [x["action"] for x in rows] == ["retirement.failed"]
    assert '"attempts": 0' in rows[0]["before"]  # the export keeps raw values

    row.get_by_role("link", name="open sandbox sbx-audited").click()
    expect(page.get_by_role("heading", name="Status")).to_be_visible()
    expect(page.locator("h1")).to_contain_text("sbx-audited")
    expect(page.locator("#panel button")).to_have_count(0)
    shot(page, "audit-3-sandbox")
    assert AuditEvent.objects.count() == 3  # reading changed nothing
