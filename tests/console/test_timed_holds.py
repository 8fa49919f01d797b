"""An operator's hold takes an end, "keep until" (at most 90 days; only an
admin may hold with no end): validated on the server, naming the field, with
nothing changed; the console's form, the API and the list show and take it."""

import json
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from sandboxes import actions
from sandboxes.models import AuditEvent, Retirement
from sandboxes.models.choices import HoldCode, Stage
from tests.factories import RetirementFactory, hold_until

HX = {"HTTP_HX_REQUEST": "true"}


def _form(days):
    return (timezone.now() + timedelta(days=days)).strftime("%Y-%m-%dT%H:%M")


def _hold(client, r, **data):
    return client.post(reverse("sandbox-hold", kwargs={"pk": r.pk}), data, **HX)


@pytest.mark.parametrize(
    ("until", "words"),
    [
        ("", "until: give the hold an end, at most 90 days"),
        (_form(-1), "until: the end of a hold must be in the future"),
        (_form(91), "until: a hold ends within 90 days"),
        ("next tuesday", "until: give a date and time"),
    ],
)
def test_an_operators_bad_end_is_refused_naming_the_field_and_nothing_changes(
    as_operator, db, until, words
):
    r = RetirementFactory()
    response = _hold(as_operator, r, reason="keep it", until=until)
    assert words in response.content.decode()
    r.refresh_from_db()
    assert r.operator_hold_reason == "" and r.stage == Stage.LISTED
    assert AuditEvent.objects.count() == 0


def test_an_operator_holds_until_a_time_and_the_list_shows_it(as_operator, operator, db):
    r = RetirementFactory()
    response = _hold(as_operator, r, reason="owner on leave", until=_form(5))
    assert b"Held:" in response.content
    r.refresh_from_db()
    assert r.stage == Stage.HELD and r.operator_hold_by == operator.username
    assert r.operator_hold_at is not None
    assert timedelta(days=4, hours=23) < r.operator_hold_until - timezone.now() <= timedelta(days=5)
    (row,) = AuditEvent.objects.filter(action="retirement.hold")
    assert row.after["operator_hold_until"] == r.operator_hold_until.isoformat()
    listing = as_operator.get(reverse("sandbox-list")).content.decode()
    local = timezone.localtime(r.operator_hold_until)
    assert f"until {local:%b} {local.day} {local:%H:%M})" in listing
    # The form keeps minutes only: 4 d 23 h 59 min and some seconds are left,
    # which round to "5 d" in the first second of a minute.
    assert "hold ends in 4 d 23 h" in listing or "hold ends in 5 d" in listing


def test_an_admin_may_hold_with_no_end(as_admin, db):
    r = RetirementFactory()
    _hold(as_admin, r, reason="legal hold", until="")
    r.refresh_from_db()
    assert r.stage == Stage.HELD and r.operator_hold_until is None
    listing = as_admin.get(reverse("sandbox-list")).content.decode()
    assert "until released)" in listing


def test_the_hold_form_asks_for_the_end(as_operator, as_admin, db):
    r = RetirementFactory()
    page = as_operator.get(reverse("sandbox-detail", args=[r.pk])).content.decode()
    assert 'type="datetime-local" name="until" required' in page
    page = as_admin.get(reverse("sandbox-detail", args=[r.pk])).content.decode()
    assert 'type="datetime-local" name="until">' in page and "empty: until released" in page


def test_releasing_forgets_who_and_until(operator, db):
    r = RetirementFactory()
    actions.hold(r.pk, actor=operator, reason="a", until=hold_until())
    actions.release_hold(r.pk, actor=operator, reason="b")
    r.refresh_from_db()
    assert (r.operator_hold_by, r.operator_hold_at, r.operator_hold_until) == ("", None, None)
    assert HoldCode.OPERATOR_HOLD not in r.holds


def _api(client, raw, r, body):
    return client.post(
        f"/api/v1/kept-sandboxes/{r.provider_lease_id}/hold",
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {raw}",
    )


@pytest.mark.parametrize(
    ("until", "words"),
    [
        (None, "until: give the hold an end"),
        ("tomorrow", '"until" is an ISO 8601 time'),
        (12, '"until" is an ISO 8601 time'),
        ("2026-12-24T18:00:00", '"until" needs its time zone'),
        ("2020-01-01T00:00:00Z", "until: the end of a hold must be in the future"),
    ],
)
def test_the_api_refuses_a_bad_end_with_a_400_naming_it(client, operator_token, db, until, words):
    _, raw = operator_token
    r = RetirementFactory()
    body = {"reason": "keep"} | ({} if until is None else {"until": until})
    response = _api(client, raw, r, body)
    assert response.status_code == 400 and words in response.json()["error"]
    assert Retirement.objects.get(pk=r.pk).operator_hold_reason == ""
    assert AuditEvent.objects.count() == 0


def test_the_api_holds_until_the_end_it_is_given(client, operator_token, db):
    _, raw = operator_token
    r = RetirementFactory()
    until = (timezone.now() + timedelta(days=2)).replace(microsecond=0)
    data = _api(client, raw, r, {"reason": "keep", "until": until.isoformat()}).json()
    assert data["operator_hold"]["until"] == until.isoformat()
    assert data["operator_hold"]["by"] == "token:ops-bot"
