"""Bulk actions on the kept-sandbox list (sandboxes/views/bulk.py, sandboxes/bulk.py):
the selected rows, or all matching the list's filters (capped), each record
checked by its own action function and audited on its own; the answer says how
many were done and which were refused, and why."""

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from sandboxes import actions, bulk
from sandboxes.models import AuditEvent, Receipt, Retirement
from sandboxes.models.choices import HoldCode, ReceiptKind, RetirementKind, Stage
from tests.console.conftest import clean_compare
from tests.factories import RetirementFactory, hold_until

HX = {"HTTP_HX_REQUEST": "true"}
URL = "/sandboxes/bulk/"


def _until():
    return hold_until().strftime("%Y-%m-%dT%H:%M")


def _post(client, action, ids=(), htmx=True, **data):
    body = {"action": action, "ids": [str(i) for i in ids], "reason": "weekly sweep", **data}
    return client.post(URL, body, **(HX if htmx else {}))


def test_the_url_is_the_bulk_view():
    assert reverse("sandbox-bulk") == URL


def test_a_hold_on_a_mix_does_the_allowed_and_says_why_it_refused_the_rest(
    as_operator, operator, db
):
    ok = RetirementFactory()
    closed = RetirementFactory(stage=Stage.RETIRED)
    already = RetirementFactory()
    actions.hold(already.pk, actor=operator, reason="earlier", until=hold_until())
    before = AuditEvent.objects.count()
    response = _post(as_operator, "hold", [ok.pk, closed.pk, already.pk], until=_until())
    body = response.content.decode()
    assert response.status_code == 200
    assert 'data-bulk-done="1"' in body and "Held 1 of 3 kept sandboxes." in body
    assert body.count("data-refused") == 2
    assert f"<code>{closed.provider_lease_id}</code>: This retirement is closed" in body
    assert f"<code>{already.provider_lease_id}</code>: An operator already holds" in body
    assert "retirement-changed" in response["HX-Trigger"]
    rows = AuditEvent.objects.filter(action="retirement.hold").order_by("at")
    assert AuditEvent.objects.count() == before + 1
    assert rows.last().object_id == str(ok.pk) and rows.last().actor == operator
    ok.refresh_from_db()
    assert ok.stage == Stage.HELD and ok.operator_hold_until is not None


def test_approve_goes_through_the_proof_check_of_each_record(as_operator, awaiting, unproven):
    response = _post(as_operator, "approve", [awaiting.pk, unproven.pk])
    body = response.content.decode()
    assert "Approved 1 of 2" in body and "Cannot approve" in body
    assert Receipt.objects.filter(kind=ReceiptKind.APPROVAL).count() == 1
    assert list(AuditEvent.objects.values_list("object_id", flat=True)) == [str(awaiting.pk)]


def test_retry_refuses_a_held_record_and_release_frees_it(as_operator, operator, db):
    free, held = RetirementFactory(stage=Stage.FAILED), RetirementFactory()
    actions.hold(held.pk, actor=operator, reason="look", until=hold_until())
    body = _post(as_operator, "retry", [free.pk, held.pk]).content.decode()
    assert (
        "Scheduled a retry of 1 of 2" in body
        and "Retry can do nothing until the hold clears" in body
    )
    body = _post(as_operator, "release_hold", [free.pk, held.pk]).content.decode()
    assert "Released the hold on 1 of 2" in body and "No operator hold to release" in body
    held.refresh_from_db()
    assert HoldCode.OPERATOR_HOLD not in held.holds


def test_all_matching_acts_on_what_the_filters_match_only(as_operator, db):
    mine = [RetirementFactory(kind=RetirementKind.DONE_TASK_WARM) for _ in range(3)]
    other = RetirementFactory(kind=RetirementKind.ABANDONED_WARM)
    response = _post(
        as_operator, "hold", all_matching="on", kind=RetirementKind.DONE_TASK_WARM, until=_until()
    )
    assert "Held 3 of 3" in response.content.decode()
    assert set(Retirement.objects.filter(stage=Stage.HELD).values_list("pk", flat=True)) == {
        r.pk for r in mine
    }
    other.refresh_from_db()
    assert other.stage == Stage.LISTED


def test_all_matching_is_capped_with_a_clear_message(as_operator, db, monkeypatch):
    monkeypatch.setattr(bulk, "MAX_BULK", 3)
    for _ in range(4):
        RetirementFactory()
    body = _post(as_operator, "hold", all_matching="on", until=_until()).content.decode()
    assert "all_matching: more than 3 kept sandboxes match these filters" in body
    assert "Narrow the filters" in body
    assert (
        AuditEvent.objects.count() == 0 and not Retirement.objects.filter(stage=Stage.HELD).exists()
    )


def test_a_bad_filter_in_all_matching_names_it(as_operator, db):
    RetirementFactory()
    body = _post(
        as_operator, "hold", all_matching="on", kind="nope", until=_until()
    ).content.decode()
    assert "kind:" in body and AuditEvent.objects.count() == 0


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"reason": ""}, "reason:"),
        ({"action": "destroy"}, "action:"),
        ({}, "ids: select at least one kept sandbox"),
        ({"until": ""}, "until: give the hold an end"),
    ],
)
def test_bad_input_is_refused_whole_naming_the_field(as_operator, db, data, words):
    r = RetirementFactory()
    body = {"action": "hold", "ids": [str(r.pk)], "reason": "x", "until": _until(), **data}
    if words.startswith("ids"):
        body.pop("ids")
    response = as_operator.post(URL, body, **HX)
    assert response.status_code == 200 and words in response.content.decode()
    assert AuditEvent.objects.count() == 0


def test_a_reviewer_cannot_act_and_sees_no_bulk_bar(as_reviewer, db):
    r = RetirementFactory()
    for action in ("hold", "release_hold", "retry", "approve"):
        response = _post(as_reviewer, action, [r.pk], until=_until())
        assert response.status_code == 403, action
    assert AuditEvent.objects.count() == 0
    listing = as_reviewer.get(reverse("sandbox-list")).content.decode()
    assert 'id="bulk"' not in listing and 'name="ids"' not in listing


def test_an_operator_sees_the_bar_and_a_checkbox_per_open_row(as_operator, db):
    open_, closed = RetirementFactory(), RetirementFactory(stage=Stage.RETIRED)
    listing = as_operator.get(reverse("sandbox-list"), {"stage": "all"}).content.decode()
    assert 'id="bulk"' in listing and 'name="csrfmiddlewaretoken"' in listing
    assert f'value="{open_.pk}" form="bulk"' in listing
    assert f'value="{closed.pk}" form="bulk"' not in listing
    # The filters travel with the bar, for "all matching these filters".
    assert '<input type="hidden" name="stage" value="all">' in listing


def test_get_is_refused_and_csrf_is_required(operator, db):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    r = RetirementFactory()
    assert client.get(URL).status_code == 405
    response = client.post(URL, {"action": "retry", "ids": [str(r.pk)], "reason": "x"})
    assert response.status_code == 403 and AuditEvent.objects.count() == 0


def test_without_htmx_it_redirects_to_the_filtered_list_with_the_answer(as_operator, db):
    r = RetirementFactory(stage=Stage.FAILED)
    response = _post(as_operator, "retry", [r.pk], htmx=False, kind="abandoned_warm")
    assert response.status_code == 302 and response["Location"] == "/sandboxes/?kind=abandoned_warm"
    page = as_operator.get(response["Location"]).content.decode()
    assert "Scheduled a retry of 1 of 1 kept sandboxes." in page


def _queries(client, ids) -> int:
    with CaptureQueriesContext(connection) as ctx:
        _post(client, "approve", ids)
    return len(ctx.captured_queries)


def test_each_record_costs_a_bounded_number_of_queries(as_operator, db):
    def make(n):
        rows = [RetirementFactory(stage=Stage.AWAITING_APPROVAL) for _ in range(n)]
        for r in rows:
            clean_compare(r)
        return [r.pk for r in rows]

    five, fifteen = _queries(as_operator, make(5)), _queries(as_operator, make(15))
    assert AuditEvent.objects.filter(action="retirement.approve").count() == 20
    per_record = (fifteen - five) / 10
    assert per_record <= 12, per_record
