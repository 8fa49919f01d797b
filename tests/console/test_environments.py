from datetime import time, timedelta

import pytest
from django.urls import reverse

from sandboxes.models import AuditEvent
from tests.factories import EnvironmentFactory


def _form(env, **overrides):
    data = {
        "retirement_mode": "manual",
        "warm_retention_hours": "48",
        "max_retirements_per_pass": "10",
        "workspace_root": "work",
        "reason": "slow down retirements in prod",
        **overrides,
    }
    return {f"{env.pk}-{k}": v for k, v in data.items()}


def test_everyone_reads_the_policies_but_only_admins_get_a_form(as_reviewer, as_admin, db):
    EnvironmentFactory(name="prod-east")
    body = as_reviewer.get(reverse("environments")).content.decode()
    assert "prod-east" in body and "Save policy" not in body
    assert "Save policy" in as_admin.get(reverse("environments")).content.decode()


def test_admins_edit_the_policy_with_one_audit_row(as_admin, admin, db):
    env = EnvironmentFactory(retirement_mode="auto")
    url = reverse("environment-policy", kwargs={"pk": env.pk})
    # First the preview of what the next pass would do; nothing is saved yet.
    shown = as_admin.post(url, _form(env))
    assert shown.status_code == 200 and b"data-policy-preview" in shown.content
    assert AuditEvent.objects.count() == 0
    token = shown.content.decode().split('name="confirm" value="')[1].split('"')[0]
    response = as_admin.post(url, {**_form(env), "confirm": token})
    assert response.status_code == 302
    env.refresh_from_db()
    assert env.retirement_mode == "manual"
    assert env.warm_retention == timedelta(hours=48)
    assert env.max_retirements_per_pass == 10
    assert env.workspace_root == "work"
    (event,) = AuditEvent.objects.all()
    assert event.action == "environment.edit_policy"
    assert event.actor == admin and event.reason == "slow down retirements in prod"
    assert event.before == {
        "retirement_mode": "auto",
        "warm_retention_hours": 24.0,
        "max_retirements_per_pass": 50,
        "workspace_root": "workspace",
        "notice_hours": 0.0,
        "retirement_window": "any time",
    }
    assert event.after["retirement_mode"] == "manual"
    assert event.after["preview"]["proposed"]["counts"] == {}  # no kept sandbox here
    assert event.after["warm_retention_hours"] == 48.0


def test_it_rejects_a_bad_policy(as_admin, db):
    env = EnvironmentFactory()
    url = reverse("environment-policy", kwargs={"pk": env.pk})
    for bad in (
        {"retirement_mode": "yolo"},
        {"max_retirements_per_pass": "-1"},
        {"workspace_root": "../etc"},
        {"reason": ""},
    ):
        assert as_admin.post(url, _form(env, **bad)).status_code == 400, bad
    assert AuditEvent.objects.count() == 0


def test_an_unchanged_policy_writes_nothing(as_admin, db):
    env = EnvironmentFactory(retirement_mode="auto")
    data = _form(
        env,
        retirement_mode="auto",
        warm_retention_hours="24",
        max_retirements_per_pass="50",
        workspace_root="workspace",
    )
    response = as_admin.post(reverse("environment-policy", kwargs={"pk": env.pk}), data)
    assert response.status_code == 400
    assert b"Nothing changed." in response.content
    assert AuditEvent.objects.count() == 0


def test_the_modes_are_explained_and_retention_reads_the_same_to_every_role(
    as_reviewer, as_admin, db
):
    # Issue 15 item 15: a reviewer saw "1 day, 0:00:00", an admin "24.0".
    EnvironmentFactory(name="prod-east", warm_retention=timedelta(hours=24))
    for client in (as_reviewer, as_admin):
        body = client.get(reverse("environments")).content.decode()
        assert "<dd data-retention>1 d</dd>" in body
        assert "1 day, 0:00:00" not in body
        for mode in ("observe", "manual", "auto"):
            assert f'<span class="mode mode-{mode}">{mode}</span></dt>' in body
        assert "an operator approves every destroy" in body


def test_admins_set_the_price_table_with_an_audit_row(as_admin, as_operator, admin, db):
    from decimal import Decimal

    env = EnvironmentFactory(name="prod-east")
    url = reverse("environment-prices", kwargs={"pk": env.pk})
    data = {
        "price_currency": "eur",
        "price_vcpu_hour_running": "0.05",
        "price_memory_gib_hour_running": "0.01",
        "price_disk_gib_month_running": "0.1",
        "price_vcpu_hour_stopped": "0",
        "price_memory_gib_hour_stopped": "0",
        "price_disk_gib_month_stopped": "0.1",
        "price_reason": "",
        "reason": "list prices 2026",
    }
    form = {f"price-{env.pk}-{k}": v for k, v in data.items()}
    assert as_operator.post(url, form).status_code == 403
    assert as_admin.post(url, form).status_code == 302
    env.refresh_from_db()
    assert env.price_currency == "EUR"
    assert env.price_vcpu_hour_running == Decimal("0.05")
    assert env.price_memory_gib_hour_stopped == Decimal("0")
    (event,) = AuditEvent.objects.filter(action="environment.edit_prices")
    assert event.actor == admin and event.after["price_vcpu_hour_running"] == "0.05"
    assert event.before["price_vcpu_hour_running"] is None
    body = as_admin.get(reverse("environments")).content.decode()
    assert "Price table (EUR)" in body
    bad = {**form, f"price-{env.pk}-price_vcpu_hour_running": "-1"}
    assert as_admin.post(url, bad).status_code == 400


# --- the retirement window (docs/rules.md, the retirement window) -----------------------

OFFICE = {
    "time_zone": "Europe/Berlin",
    "window_days": ["mon", "tue", "wed", "thu", "fri"],
    "window_start": "09:00",
    "window_end": "17:00",
}


def _unchanged(env, **overrides):
    """The environment's own policy, changed only by `overrides`."""
    return _form(
        env,
        retirement_mode=env.retirement_mode,
        warm_retention_hours="24",
        max_retirements_per_pass="50",
        workspace_root="workspace",
        **overrides,
    )


def test_admins_set_the_retirement_window_after_its_preview_and_it_is_audited(as_admin, admin, db):
    env = EnvironmentFactory(retirement_mode="auto")
    url = reverse("environment-policy", kwargs={"pk": env.pk})
    shown = as_admin.post(url, _unchanged(env, **OFFICE))
    body = shown.content.decode()
    assert shown.status_code == 200 and "data-policy-preview" in body
    assert 'data-field="window"' in body and "Mon–Fri 09:00–17:00 Europe/Berlin" in body
    env.refresh_from_db()
    assert env.window is None  # nothing saved before the confirmation
    token = body.split('name="confirm" value="')[1].split('"')[0]
    assert as_admin.post(url, {**_unchanged(env, **OFFICE), "confirm": token}).status_code == 302
    env.refresh_from_db()
    assert env.time_zone == "Europe/Berlin" and env.window_days == "mon,tue,wed,thu,fri"
    assert (env.window_start, env.window_end) == (time(9), time(17))
    (event,) = AuditEvent.objects.all()
    assert event.actor == admin and event.action == "environment.edit_policy"
    assert event.before["retirement_window"] == "any time"
    assert event.after["retirement_window"] == "Mon–Fri 09:00–17:00 Europe/Berlin"
    page = as_admin.get(reverse("environments")).content.decode()
    assert "Mon–Fri 09:00–17:00 Europe/Berlin" in page

    # Clearing all four is any time again.
    cleared = {"time_zone": "", "window_days": [], "window_start": "", "window_end": ""}
    shown = as_admin.post(url, _unchanged(env, **cleared))
    token = shown.content.decode().split('name="confirm" value="')[1].split('"')[0]
    assert as_admin.post(url, {**_unchanged(env, **cleared), "confirm": token}).status_code == 302
    env.refresh_from_db()
    assert env.window is None and env.time_zone == "" and env.window_start is None


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"time_zone": "Europe/Berln"}, "time_zone: unknown time zone &#x27;Europe/Berln&#x27;"),
        ({"time_zone": ""}, "time_zone: a retirement window needs a time zone"),
        ({"window_days": []}, "window_days: a retirement window needs"),
        ({"window_days": ["mon", "funday"]}, "window_days: funday is not a day"),
        ({"window_start": "9 o'clock"}, "window_start: give a time, like 09:00."),
        ({"window_end": ""}, "window_end: a retirement window needs"),
    ],
)
def test_a_bad_retirement_window_is_refused_naming_the_field_and_nothing_changes(
    as_admin, db, bad, message
):
    env = EnvironmentFactory(retirement_mode="auto")
    url = reverse("environment-policy", kwargs={"pk": env.pk})
    response = as_admin.post(url, _unchanged(env, **(OFFICE | bad)))
    assert response.status_code == 400
    assert message in response.content.decode()
    env.refresh_from_db()
    assert env.window is None and env.time_zone == ""
    assert AuditEvent.objects.count() == 0


def test_the_action_refuses_a_bad_window_itself(admin, db):
    """Server-side, whatever the caller: the action judges the window again."""
    from sandboxes import actions, policy

    env = EnvironmentFactory()
    with pytest.raises(actions.ActionRefused, match="^time_zone: unknown time zone 'Mars/Olympus'"):
        policy.edit_policy(
            env.pk,
            actor=admin,
            reason="r",
            retirement_mode="auto",
            warm_retention_hours=24,
            max_retirements_per_pass=50,
            workspace_root="workspace",
            time_zone="Mars/Olympus",
            window_days=["mon"],
            window_start=time(9),
            window_end=time(17),
        )
    env.refresh_from_db()
    assert env.window is None and AuditEvent.objects.count() == 0
