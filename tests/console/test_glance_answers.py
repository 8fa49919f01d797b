"""Actions answer at once and pages fit (the operator's glance): an approved
record leaves the queue and the dashboard's tile, a retry says when the next
pass runs, a policy save shows old → new on its preview, a webhook secret's
rotation asks for a reason and a confirmation, one-time secrets have a copy
button."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from django_q.models import Schedule

from sandboxes.models import AuditEvent, Retirement
from sandboxes.models.choices import ReceiptKind, Stage
from sandboxes.views.admin_pages import confirmation_for
from tests.console.conftest import clean_compare
from tests.factories import (
    EnvironmentFactory,
    NotificationChannelFactory,
    ReceiptFactory,
    RetirementFactory,
)

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}


def _proven(n: int) -> list[Retirement]:
    rows = [RetirementFactory(stage=Stage.AWAITING_APPROVAL) for _ in range(n)]
    for r in rows:
        clean_compare(r)
    return rows


def _approve(client, rows) -> None:
    response = client.post(
        reverse("approvals-bulk"), {"ids": [str(r.pk) for r in rows], "reason": "clean"}, **HX
    )
    assert response.status_code == 200


def test_an_approved_record_leaves_the_queue_at_once(as_operator):
    first, second = _proven(2)
    _approve(as_operator, [first])
    body = as_operator.get(reverse("approvals")).content.decode()
    assert 'data-count="1"' in body and "1 sandbox awaits approval" in body
    assert f'value="{first.pk}"' not in body and f'value="{second.pk}"' in body
    approved = body[body.index("data-approved") :]
    assert first.provider_lease_id in approved
    assert "approved — retires on the next pass" in approved
    assert Retirement.objects.get(pk=first.pk).stage == Stage.AWAITING_APPROVAL


def test_the_bulk_answer_itself_moves_the_row(as_operator):
    (first,) = _proven(1)
    response = as_operator.post(
        reverse("approvals-bulk"), {"ids": [str(first.pk)], "reason": "clean"}, **HX
    )
    body = response.content.decode()
    assert 'data-count="0"' in body and "Nothing awaits approval." in body
    assert "data-approved" in body and first.provider_lease_id in body


def test_the_dashboard_tile_counts_only_what_awaits_a_person(as_operator):
    rows = _proven(3)
    _approve(as_operator, rows[:2])
    body = as_operator.get(reverse("dashboard")).content.decode()
    assert '<span class="n" data-tile="awaiting">1</span>' in body


def test_a_newer_compare_puts_an_approved_record_back_in_the_queue():
    (r,) = _proven(1)
    from sandboxes import actions
    from tests.factories import UserFactory

    operator = UserFactory(username="olga", groups=["operators"])
    actions.approve(r.pk, actor=operator, reason="clean")
    assert list(Retirement.objects.awaiting_decision()) == []
    assert list(Retirement.objects.approved_for_next_pass()) == [r]
    # A newer proof: the approval does not count for it.
    ReceiptFactory(
        kind=ReceiptKind.SALVAGE_COMPARE,
        state=None,
        lease=r.lease,
        retirement=r,
        provider_lease_id=r.provider_lease_id,
        confirmed_at=timezone.now() + timedelta(seconds=5),
        payload={"clean": True, "added": [], "changed": [], "deleted": []},
    )
    assert list(Retirement.objects.awaiting_decision()) == [r]
    assert list(Retirement.objects.approved_for_next_pass()) == []


def test_the_queue_and_the_dashboard_cost_the_same_queries_for_more_records(as_operator):
    _approve(as_operator, _proven(2)[:1])
    counts = {}
    for size in ("few", "many"):
        if size == "many":
            _approve(as_operator, _proven(6)[:3])
        for name in ("approvals", "dashboard"):
            with CaptureQueriesContext(connection) as queries:
                assert as_operator.get(reverse(name)).status_code == 200
            counts[size, name] = len(queries)
    assert counts["few", "approvals"] == counts["many", "approvals"]
    assert counts["few", "dashboard"] == counts["many", "dashboard"]


def test_retry_says_when_the_next_pass_runs(as_operator):
    r = RetirementFactory(stage=Stage.FAILED, attempts=1)
    url = reverse("sandbox-retry", kwargs={"pk": r.pk})
    body = as_operator.post(url, {"reason": "again"}, **HX).content.decode()
    assert "none is: run manage.py setup_schedules" in body
    Schedule.objects.create(
        name="reconciler pass",
        func="sandboxes.reconciler.tasks.reconcile_pass",
        schedule_type=Schedule.MINUTES,
        minutes=1,
        next_run=timezone.now() + timedelta(seconds=42),
    )
    body = as_operator.post(url, {"reason": "again"}, **HX).content.decode()
    assert "Retry scheduled" in body
    assert "The next pass runs in 4" in body and " s (" in body and "UTC)." in body


def _policy_post(env, **changes) -> dict:
    data = {
        "retirement_mode": "manual",
        "warm_retention_hours": "24",
        "max_retirements_per_pass": "10",
        "notice_hours": "0",
        "workspace_root": env.workspace_root,
        "reason": "faster",
    } | changes
    return {f"{env.pk}-{k}": v for k, v in data.items()}


def test_the_policy_preview_shows_each_changed_value_old_to_new(as_admin):
    env = EnvironmentFactory(
        retirement_mode="manual", warm_retention=timedelta(hours=24), max_retirements_per_pass=10
    )
    url = reverse("environment-policy", kwargs={"pk": env.pk})
    post = _policy_post(env, retirement_mode="auto", warm_retention_hours="2", notice_hours="3")
    body = as_admin.post(url, post).content.decode()
    changes = body[body.index("data-policy-changes") : body.index("Policy preview")]
    assert "<span data-old>manual</span> → <strong data-new>auto</strong>" in changes
    assert "<span data-old>24 h</span> → <strong data-new>2 h</strong>" in changes
    assert "<span data-old>off</span> → <strong data-new>3 h</strong>" in changes
    assert 'data-field="max_retirements_per_pass"' not in changes
    assert 'data-field="workspace_root"' not in changes
    # The form posts to the preview's anchor, so the page lands on it.
    assert f'action="{url}#preview-{env.pk}"' in body
    confirmed = post | {"confirm": confirmation_for(env, post)}
    assert as_admin.post(url, confirmed).status_code == 302


def test_rotating_a_secret_asks_for_a_reason_and_a_confirmation(as_admin):
    channel = NotificationChannelFactory(kind="webhook")
    url = reverse("channel-rotate", kwargs={"pk": channel.pk})
    before = channel.secret_set_at
    no_reason = as_admin.post(url, {"confirm": "yes"})
    assert no_reason.status_code == 400 and b"Reason: a reason is required" in no_reason.content
    unconfirmed = as_admin.post(url, {"reason": "leaked"})
    assert unconfirmed.status_code == 400 and b"Confirm: tick" in unconfirmed.content
    channel.refresh_from_db()
    assert channel.secret_set_at == before and not AuditEvent.objects.exists()
    done = as_admin.post(url, {"reason": "leaked", "confirm": "yes"})
    assert done.status_code == 200 and done["Cache-Control"] == "no-store"
    body = done.content.decode()
    assert 'aria-label="Copy the signing secret"' in body
    assert AuditEvent.objects.get(action="channel.rotate_secret").reason == "leaked"


def test_a_new_token_is_shown_with_a_copy_button(as_admin):
    response = as_admin.post(reverse("token-create"), {"name": "ci", "scope": "operator"})
    body = response.content.decode()
    raw = body.split("data-raw-token>", 1)[1].split("<", 1)[0]
    assert f'data-copy="{raw}" aria-label="Copy the token"' in body
    assert "<script>" not in body  # the copy button is static/js/console.js, CSP-allowed


def test_channel_forms_put_each_checkbox_beside_its_label(as_admin):
    channel = NotificationChannelFactory(kind="webhook")
    body = as_admin.get(reverse("channel-detail", kwargs={"pk": channel.pk})).content.decode()
    assert "Edit the channel</h3>" in body and "Rotate the signing secret</h3>" in body
    assert '<label class="check" for="id_enabled"><input type="checkbox" name="enabled"' in body
    assert '<fieldset class="checks"><legend>Events</legend>' in body
    assert "<label>Events" not in body  # no label wrapping a list of labels
    env_page = reverse("channels", kwargs={"pk": channel.environment_id})
    assert (
        '<fieldset class="checks"><legend>Events</legend>'
        in as_admin.get(env_page).content.decode()
    )
