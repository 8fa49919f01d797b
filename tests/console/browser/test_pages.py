"""Every console page in chromium at 1440 and 390 px: none scrolls sideways, and
axe-core (axe-playwright-python) finds no serious or critical violation
(issue 15, item 16 and "Done when")."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from devtools import screenshots
from sandboxes.models.choices import RunStatus, Stage
from tests import factories as f
from tests.console.browser.conftest import PASSWORD, SCREENSHOTS, log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def fleet(db):
    """Something on every page: each stage, holds with an end, a failure, receipts
    with a wide export table, costs, audit rows, passes, a task with leases."""
    now = timezone.now()
    env = f.EnvironmentFactory(
        name="prod-east",
        retirement_mode="manual",
        price_disk_gib_month_stopped=Decimal("0.10"),
        price_vcpu_hour_stopped=Decimal(0),
        price_memory_gib_hour_stopped=Decimal(0),
        price_vcpu_hour_running=Decimal("0.05"),
        price_memory_gib_hour_running=Decimal("0.01"),
        price_disk_gib_month_running=Decimal("0.10"),
    )
    other = f.EnvironmentFactory(name="staging-west-with-a-long-name")
    long_id = "4f1c2d3e-4b5a-4789-abcd-ef0123456789"
    failing = f.RetirementFactory(
        lease__environment=env,
        provider_lease_id=long_id,
        stage=Stage.FAILED,
        attempts=3,
        failing_since=now - timedelta(hours=3),
        next_attempt_at=now + timedelta(minutes=2),
        last_error="TransientProviderError: 503 Service Unavailable from the provider "
        "(GET /sandbox/4f1c2d3e-4b5a-4789-abcd-ef0123456789/toolbox/files/download)",
        reported_disk_gib=12,
        reported_at=now,
        provider_state="stopped",
    )
    files = [
        {
            "path": f"src/deeply/nested/package/module_{i}_with_a_rather_long_name.py",
            "size": 1000 * i,
            "sha256": f"{i:x}" * 64,
            "attachment": None,
        }
        for i in range(1, 4)
    ]
    f.ReceiptFactory(
        kind="salvage_export",
        state=None,
        lease=failing.lease,
        retirement=failing,
        payload={"verified": True, "files": files, "deleted": ["old.txt"], "bytes": 6000},
    )
    f.AuditEventFactory(
        sandbox_id=long_id,
        object_id=str(failing.pk),
        action="retirement.failed",
        reason=failing.last_error,
        before={"stage": "exporting", "attempts": 2},
        after={"stage": "failed", "attempts": 3},
    )
    run = f.HeartbeatRunFactory(status=RunStatus.RUNNING)
    f.RetirementFactory(
        lease=f.EnvironmentLeaseFactory(environment=other, heartbeat_run=run, issue=run.issue),
        stage=Stage.HELD,
        holds=["run_active", "retention", "operator_hold"],
        operator_hold_reason="the task owner asked to keep it until the review is done",
        operator_hold_by="bob",
        operator_hold_at=now - timedelta(hours=5),
        operator_hold_until=now + timedelta(days=2),
    )
    # A notice running out within the hour: the red countdown, in words too.
    f.RetirementFactory(
        lease__environment=env, stage=Stage.NOTICED, retire_after=now + timedelta(minutes=40)
    )
    awaiting = f.RetirementFactory(lease__environment=env, stage=Stage.AWAITING_APPROVAL)
    f.ReceiptFactory(
        kind="salvage_compare",
        state=None,
        lease=awaiting.lease,
        retirement=awaiting,
        payload={"clean": True, "added": [], "changed": [], "deleted": []},
    )
    f.RetirementFactory(stage=Stage.RETIRED, closed_at=now, closed_reason="clean compare")
    f.RetirementFactory(stage=Stage.DISMISSED, closed_at=now, closed_reason="no longer a candidate")
    f.AuditEventFactory(
        action="environment.edit_policy",
        object_type="environment",
        object_id=str(env.pk),
        actor_label="alice",
        before={"warm_retention_hours": 24.0},
        after={"warm_retention_hours": 0.0},
    )
    for i in range(6):
        f.ReconcilerPassFactory(
            started_at=now - timedelta(minutes=5 * (6 - i)),
            finished_at=now - timedelta(minutes=5 * (6 - i)) + timedelta(seconds=3),
            candidates=5 - i % 2,
            retired=i % 3,
            counts_by_environment={"prod-east": 3, "staging-west-with-a-long-name": 1 + i % 2},
            cost_per_day=Decimal("0.04") + Decimal(i) / 100,
        )
    # The newest pass touched records, one of them failing with a long error.
    f.ReconcilerPassFactory(
        started_at=now - timedelta(seconds=40),
        finished_at=now - timedelta(seconds=31),
        worker="console-worker-1.example.internal:12345",
        candidates=5,
        advanced=2,
        failed=1,
        records={
            "advanced": [str(failing.pk), str(awaiting.pk)],
            "failed": [str(failing.pk)],
            "listed": [str(awaiting.pk)],
        },
        errors=[{"retirement": str(failing.pk), "error": failing.last_error}],
    )
    f.ApiTokenFactory(name="paperclip-runtime-eu-west-1")
    f.UserFactory(username="alice", groups=["admins"])
    f.UserFactory(username="nobody")
    return {"failing": failing, "awaiting": awaiting}


def _pages(fleet):
    return screenshots.console_pages()


def test_every_page_fits_at_desktop_and_phone_width(browser, live_server, fleet):
    pages = _pages(fleet)
    shots = screenshots.capture(
        browser,
        live_server.url,
        SCREENSHOTS / "pages",
        pages,
        username="alice",
        password=PASSWORD,
        no_role=("nobody", PASSWORD),
    )
    names = {s.name for s in shots}
    assert {"dashboard", "kept-sandboxes", "sandbox", "task", "audit", "users", "no-role"} <= names
    assert {s.width for s in shots} == {1440, 390}
    overflowing = [(s.name, s.width, s.scroll_width) for s in shots if s.overflows]
    assert overflowing == []
    unexpected = [
        (s.name, s.status)
        for s in shots
        if s.status != {"not-found": 404, "audit-bad-filter": 400}.get(s.name, 200)
    ]
    assert unexpected == []


@pytest.mark.parametrize("width", [1440, 390])
def test_axe_finds_no_serious_or_critical_violation_on_any_page(browser, live_server, fleet, width):
    from axe_playwright_python.sync_playwright import Axe

    axe = Axe()
    pages = [("login", None), *_pages(fleet)]
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    found = []

    def check(name):
        page.wait_for_load_state("networkidle")
        results = axe.run(page)
        for v in results.response["violations"]:
            if v["impact"] in ("serious", "critical"):
                targets = [n["target"] for n in v["nodes"]][:3]
                found.append(f"{name}@{width}: {v['id']} ({v['impact']}) {v['help']} {targets}")

    page.goto(f"{live_server.url}/accounts/login/")
    check("login")
    # The check can fail: an image without a text alternative is a critical violation.
    page.evaluate("document.body.insertAdjacentHTML('beforeend', '<img src=\\'/x.png\\'>')")
    bad = axe.run(page).response["violations"]
    assert any(v["id"] == "image-alt" and v["impact"] == "critical" for v in bad)
    log_in(page, live_server, "alice")
    for name, path in pages[1:]:
        page.goto(f"{live_server.url}{path}")
        check(name)
    context.close()
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    log_in(page, live_server, "nobody")
    check("no-role")
    context.close()
    assert found == [], "\n".join(found)
